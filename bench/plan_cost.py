"""What one timing-only call of a big plan costs in a fresh process, phase by phase (issue 22's planning cost).

    python3 bench/plan_cost.py [--tree PATH] [--rounds N] [--case NAME ...]

The calls (``--case``, default all): FT78NE's 8 cores, a GEMM of 2048 a side with its tiling given (no search), so
one plan is built, checked and simulated, with C resident in AM (``am``) or streamed per k block (``ddr``); and a
small GEMM whose six cores' blocks of C interleave over the whole matrix, C streamed one k step at a time
(``interleaved``: 27,776 tiles, every core's accesses overlapping every other's in span, which a plan check that
compares accesses pairwise pays quadratically).  Per tree, case and round, a fresh process makes the call once
and reports the wall seconds of the call, of the kernel's plan(), of the plan check and of the simulation, and
the seconds the cyclic garbage collector spent in passes during the call and in the 20,000 small allocations
right after it (what the caller's next lines pay for the call's objects); the best of the rounds is kept.
``--tree`` is another checkout measured the same way (the "before").
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: The 8-core tiling of bench/first_call_search.md's large GEMM measurements, at 2048 a side.
TILING = {"split": "n", "nt_kernel": "transpose", "c_home": "am", "a_loader": "core0", "a_buffers": 2,
          "b_staging": "am", "m_micro": 6, "k_block": 256, "m_panel": 12, "m_block": 576, "n_block": 128,
          "n_micro": 128}
BIG = {"a": 0x80000000, "b": 0x90000000, "c": 0xA0000000, "m": 2048, "n": 2048, "k": 2048, "core_mask": 255}

#: name -> (the call's arguments, its tiling).
CASES = {
    "am": (BIG, TILING),
    "ddr": (BIG, {**TILING, "c_home": "ddr"}),
    "interleaved": ({"a": 0x80000000, "b": 0x84000000, "c": 0x88000000, "m": 128, "n": 117, "k": 248, "trans_a": 1,
                     "trans_b": 1, "beta": 1, "core_mask": 63},
                    {"formulation": "transposed", "split": "m", "nt_kernel": "transpose", "c_home": "ddr",
                     "a_staging": "gsm", "a_loader": "cores", "a_buffers": 2, "b_staging": "am", "m_micro": 6,
                     "k_block": 1, "m_panel": 12, "m_block": 48, "n_block": 32, "n_micro": 32}),
}

#: What each child runs (public names and the modules every checkout since issue 21 has).
CHILD = r"""
import gc, json, sys, time
import sim, sim.planning, sim.simulator
from kernels.registry import lookup
args, tiling = json.loads(sys.argv[1])
spent = {"plan": 0.0, "check": 0.0, "simulate": 0.0}
def timed(owner, name, label):
    inner = getattr(owner, name)
    def wrapped(*a, **k):
        t0 = time.perf_counter()
        try:
            return inner(*a, **k)
        finally:
            spent[label] += time.perf_counter() - t0
    setattr(owner, name, wrapped)
timed(sim.planning, "check_plan", "check")
timed(sim.simulator, "simulate", "simulate")
kernel = type(lookup("fp_gemm_s").kernel)
timed(kernel, "plan", "plan")
passes = []
gc.callbacks.append(lambda phase, info: passes.append(time.perf_counter()))
m = sim.Simulator("FT78NE", tuning_cache=False)
t0 = time.perf_counter()
run = m.call("fp_gemm_s", numerics=False, tiling=tiling, **args)
t1 = time.perf_counter()
after = [(i, [i]) for i in range(20000)]  # the caller's next allocations
t2 = time.perf_counter()
collector = sum(b - a for a, b in zip(passes[::2], passes[1::2]))
print(json.dumps({"call": t1 - t0, "after": t2 - t1, "collector": collector, "cycles": run.cycles, **spent}))
"""


def measure(tree: Path, case: str) -> dict:
    """One fresh process in ``tree``: call ``case``'s seconds by phase."""
    # (each tree's bytecode cached, as an installed dspsim's is: see bench/first_call_search.py)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    out = subprocess.run([sys.executable, "-c", CHILD, json.dumps(CASES[case])], cwd=tree, capture_output=True,
                         text=True, check=True, env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    """Measure, and print the table."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tree", type=Path, help="another checkout measured beside this one (the 'before')")
    p.add_argument("--rounds", type=int, default=3, help="fresh processes per tree (default 3)")
    p.add_argument("--case", nargs="+", choices=sorted(CASES), default=list(CASES), help="the calls (default all)")
    args = p.parse_args()
    trees = [("before", args.tree)] if args.tree else []
    trees.append(("now", ROOT))
    best: dict[tuple[str, str], dict] = {}
    for _ in range(args.rounds):
        for case in args.case:
            for label, tree in trees:
                got = measure(tree, case)
                old = best.get((case, label))
                if old is None or got["call"] + got["after"] < old["call"] + old["after"]:
                    best[case, label] = got
    print("| case | tree | cycles | call s | plan() s | plan check s | simulation s | collector s (in and after the "
          "call) | next 20,000 allocations s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for (case, label), got in best.items():
        print(f"| {case} | {label} | {got['cycles']:,} | {got['call']:.2f} | {got['plan']:.2f} | "
              f"{got['check']:.2f} | {got['simulate']:.2f} | {got['collector']:.2f} | {got['after']:.2f} |")


if __name__ == "__main__":
    main()
