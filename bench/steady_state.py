"""What the exact steady state (sim/engine/steady.py) saves: the simulation of a plan, and how a call grows.

    python3 bench/steady_state.py [--repeat N] [-o OUT.md]

*Simulation*: each large bench case's plan (the search's pick, planned and checked once, not timed) simulated
timing-only by a fresh engine with and without the steady state; the best CPU seconds of ``--repeat`` runs
each, the tiles the skips left unsimulated, and the cycles (which must agree).  *Scaling*: every kernel's
``scaled_args`` call (kernels/examples) at n and 8 n on FT78NE: the timing-only call of a new plan (its
tiling found first, not timed: planning, plan check and simulation), with and without the steady state.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import cases  # noqa: E402

import sim  # noqa: E402
from kernels.examples import KERNELS, scaled_args  # noqa: E402
from sim.engine import steady  # noqa: E402
from sim.engine.engine import Engine  # noqa: E402
from sim.engine.events import Recorder  # noqa: E402

#: The n of each kernel's smaller scaled call (the larger is 8 n).
SCALE = {"batch_norm_grad": 8, "fused_batch_norm_grad": 4, "fake_quant_with_min_max_vars_gradient": 4,
         "conv2d_backprop_filter": 2, "depthwise_conv2d_backprop_input": 2, "gemm": 4}


def simulation(case_id: str, repeat: int) -> dict:
    """Best CPU seconds of a timing-only engine run of the case's plan, with and without the steady state."""
    case = cases.build(case_id)
    m = sim.Simulator(case.chip, tuning_cache=False)
    for addr, arr in case.inputs.items():
        m.write(addr, arr)
    tiling = m.call(case.symbol, numerics=False, **case.args).tiling.tiling
    out: dict = {"case": case_id}
    for on in (False, True):
        best = None
        for _ in range(repeat):
            fresh = sim.Simulator(case.chip, tuning_cache=False)
            _, plan = fresh.plan(case.symbol, tiling=tiling, **case.args)
            eng = Engine(fresh.target, fresh.memory, Recorder(), numerics=False, steady=on)
            gc.disable()
            t0 = time.process_time()
            cycles = eng.run(plan)
            seconds = time.process_time() - t0
            gc.enable()
            best = seconds if best is None else min(best, seconds)
        out[on] = (best, cycles)
        out["tiles"] = plan.tile_count
        out["skipped"] = sum(s.periods * sum(p for _, p in s.tiles) for s in eng.skips)
    return out


def call_seconds(kernel: str, n: int, on: bool, repeat: int) -> tuple[float, int]:
    """Best CPU seconds of a timing-only call of a new plan of ``kernel``'s scaled call ``n`` on FT78NE."""
    symbol = f"fp_{kernel}_s"
    args = scaled_args(kernel, n)
    steady.STEADY_STATE = on
    tiling = sim.Simulator("FT78NE", tuning_cache=False).call(symbol, numerics=False, **args).tiling.tiling
    best, cycles = None, 0
    for _ in range(repeat):
        m = sim.Simulator("FT78NE", tuning_cache=False)
        t0 = time.process_time()
        run = m.call(symbol, numerics=False, tiling=tiling, **args)
        seconds = time.process_time() - t0
        best, cycles = (seconds if best is None else min(best, seconds)), run.cycles
    steady.STEADY_STATE = True
    assert best is not None
    return best, cycles


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("-o", "--output", type=Path)
    a = p.parse_args()
    lines = ["| case | tiles | tiles skipped | plain s | steady s | speed-up | cycles (both) |",
             "|---|---|---|---|---|---|---|"]
    for case_id in cases.case_ids(sizes=["large"]):
        r = simulation(case_id, a.repeat)
        assert r[False][1] == r[True][1], case_id
        lines.append(f"| {case_id} | {r['tiles']} | {r['skipped']} | {r[False][0]:.4f} | {r[True][0]:.4f} | "
                     f"{r[False][0] / r[True][0]:.2f}x | {r[True][1]:,} |")
        print(lines[-1], flush=True)
    lines += ["", "| kernel | n, 8n | plain s at n | plain s at 8n | plain ratio | steady s at n | steady s at 8n | "
              "steady ratio |", "|---|---|---|---|---|---|---|---|"]
    for kernel in KERNELS:
        n = SCALE[kernel]
        (p1, c1), (p8, c8) = call_seconds(kernel, n, False, a.repeat), call_seconds(kernel, 8 * n, False, a.repeat)
        (s1, d1), (s8, d8) = call_seconds(kernel, n, True, a.repeat), call_seconds(kernel, 8 * n, True, a.repeat)
        assert (c1, c8) == (d1, d8), kernel
        lines.append(f"| {kernel} | {n}, {8 * n} | {p1:.3f} | {p8:.3f} | {p8 / p1:.1f}x | {s1:.3f} | {s8:.3f} | "
                     f"{s8 / s1:.1f}x |")
        print(lines[-1], flush=True)
    if a.output:
        a.output.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
