"""The steady state's longer equivalence run: many drawn calls of every kernel, with and without it.

    python3 bench/steady_equivalence.py [--examples N] [--scale S] [--seed K]

Per kernel, ``--examples`` calls drawn by tests/tiling_property.py (shapes up to ``--scale`` times the suite's),
one candidate of each call's tiling space planned, and its plan run twice with numerics on, on memory filled
with the same random bytes wherever the plan loads from: with and without the steady state.  The cycles, the
trace events, the SimPy event count, the memory effects in order and every byte of memory after must agree
(``tests/test_steady_state.py`` runs a few of these in the suite).  Prints, per kernel, the calls run, how many
skipped periods and the tiles they skipped, and exits 1 at the first disagreement.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import sim  # noqa: E402
from sim.engine.engine import Engine  # noqa: E402
from sim.engine.events import Recorder  # noqa: E402
from sim.model.plan import DoesNotFit, Plan, Tile, Transfer  # noqa: E402
from tests import tiling_property  # noqa: E402


def _filled(chip: str, plan: Plan, seed: int) -> sim.Simulator:
    """A simulator whose memory holds the same random bytes, seeded, under every shared load source of ``plan``."""
    m = sim.Simulator(chip, tuning_cache=False)
    rng = np.random.default_rng(seed)
    spans = sorted({t.span("src") for ph in plan.phases for tiles in ph.tiles.values() for tile in tiles
                    for t in tile.loads})
    for lo, hi in spans:
        region = m.memory.map.region_of(lo, hi - lo)
        if region is not None and region.shared:
            m.write(lo, rng.integers(0, 256, hi - lo, dtype=np.uint8))
    return m


def _run(chip: str, plan: Plan, steady: bool, seed: int) -> dict:
    m = _filled(chip, plan, seed)
    effects: list = []
    eng = Engine(m.target, m.memory, Recorder(), numerics=True, effects=effects, steady=steady)
    try:
        cycles: object = eng.run(plan)
    except sim.SimError as e:  # a plan the engine refuses (a kernel's compute on bytes it cannot take)
        cycles = f"{type(e).__name__}: {e}"
    return {"cycles": cycles, "events": list(eng.recorder.events), "sim_events": eng.sim_events,
            "effects": [tuple(id(x) if isinstance(x, (Tile, Transfer)) else x for x in e) for e in effects],
            "memory": m.memory.snapshot(), "skips": eng.skips}


def check_kernel(kernel: str, examples: int, scale: int, seed: int) -> dict:
    """Run the drawn calls of ``kernel``; their counts, and ``failure`` naming the first call that disagrees."""
    counts: dict = {"calls": 0, "with skips": 0, "tiles skipped": 0, "failure": None}

    @settings(max_examples=examples, deadline=None, database=None, derandomize=False,
              suppress_health_check=list(HealthCheck))
    @given(data=st.data())
    def check(data: st.DataObject) -> None:
        chip, symbol, args = data.draw(tiling_property.calls(kernel, scale=scale))
        m = sim.Simulator(chip, tuning_cache=False)
        try:
            call = m.bind(symbol, **args)
            space = m.kernel_of(call).tiling_space(call, m.context(call))
            pool, _ = space.completions({}, 64)
            if not pool:
                return
            plan = m.plan_bound(call, data.draw(st.sampled_from(pool)))
        except (DoesNotFit, sim.SimError):
            return
        plain, steady = _run(chip, plan, False, seed), _run(chip, plan, True, seed)
        counts["calls"] += 1
        counts["with skips"] += bool(steady["skips"])
        counts["tiles skipped"] += sum(s.periods * sum(n for _, n in s.tiles) for s in steady["skips"])
        for key in ("cycles", "events", "sim_events", "effects", "memory"):
            if plain[key] != steady[key]:
                counts["failure"] = f"{kernel}: {key} differ for {chip} {symbol} {args}"
                raise AssertionError(counts["failure"])

    try:
        check()
    except AssertionError:
        pass
    return counts


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--examples", type=int, default=40)
    p.add_argument("--scale", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    for kernel in tiling_property.KERNELS:
        counts = check_kernel(kernel, a.examples, a.scale, a.seed)
        if counts["failure"]:
            print(counts["failure"])
            return 1
        print(f"{kernel}: {counts['calls']} calls, {counts['with skips']} with skips, "
              f"{counts['tiles skipped']} tiles skipped; all the same", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
