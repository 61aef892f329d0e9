"""SimPy events and seconds of a timing-only call of a new plan: the large FT78NE bench cases, two checkouts.

    python3 bench/engine_events.py [--tree PATH] [--rounds N] [-o OUT.md]

Per case, in a fresh process per tree and round (the trees taking turns): the cost model's tiling is found once,
then five timing-only calls of that tiling each on a fresh simulator (a plan not simulated before: planning, plan
check, simulation); the best CPU seconds (``time.process_time``) and the call's SimPy events are kept, with its
cycles (which must agree between trees whose timing model is the same).  ``--tree`` is the checkout to compare
with (the "before"); without it only this checkout is measured.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: What each child runs (the public API only, so that an older checkout runs it too).
CHILD = r"""
import json, sys, time
sys.path.insert(0, "bench")
import sim, cases
case = cases.build(sys.argv[1])
def fresh():
    m = sim.Simulator(case.chip, tuning_cache=False)
    for addr, arr in case.inputs.items():
        m.write(addr, arr)
    return m
tiling = fresh().call(case.symbol, numerics=False, **case.args).tiling.tiling
best = None
for _ in range(5):
    m = fresh()
    t0 = time.process_time()
    run = m.call(case.symbol, numerics=False, tiling=tiling, **case.args)
    s = time.process_time() - t0
    best = s if best is None else min(best, s)
print(json.dumps({"seconds": best, "events": run.sim_events, "cycles": run.cycles, "tiles": run.plan.tile_count}))
"""


def measure(tree: Path, case_id: str) -> dict:
    """One fresh process's measurement of ``case_id`` in ``tree``."""
    env = {**os.environ, "PYTHONPATH": str(tree), "DSPSIM_NO_CACHE": "1"}
    out = subprocess.run([sys.executable, "-c", CHILD, case_id], cwd=tree, env=env, capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"{case_id} in {tree}: {out.stderr.strip().splitlines()[-1]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tree", type=Path, help="another checkout to measure beside this one (the 'before')")
    p.add_argument("--rounds", type=int, default=2, help="fresh processes per tree and case (default 2)")
    p.add_argument("-o", "--output", type=Path, help="also write the table to this markdown file")
    a = p.parse_args()
    sys.path.insert(0, str(ROOT / "bench"))
    import cases
    ids = [c for c in cases.case_ids(sizes=["large"]) if "/FT78NE/" in c]
    trees = [t for t in (a.tree, ROOT) if t is not None]
    best: dict[tuple[int, str], dict] = {}
    for _ in range(a.rounds):
        for case_id in ids:
            for k, tree in enumerate(trees):
                got = measure(tree, case_id)
                old = best.get((k, case_id))
                if old is None or got["seconds"] < old["seconds"]:
                    best[(k, case_id)] = got
    now = len(trees) - 1
    head = ["case", "tiles"] + (["before events", "before s"] if a.tree else []) + ["events", "s"] + \
        (["events ratio", "speed-up"] if a.tree else [])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for case_id in ids:
        after = best[(now, case_id)]
        row = [case_id, str(after["tiles"])]
        if a.tree:
            before = best[(0, case_id)]
            row += [f"{before['events']:,}", f"{before['seconds']:.3f}"]
        row += [f"{after['events']:,}", f"{after['seconds']:.3f}"]
        if a.tree:
            row += [f"{after['events'] / before['events']:.2f}", f"{before['seconds'] / after['seconds']:.2f}x"]
        lines.append("| " + " | ".join(row) + " |")
    if a.tree:
        g = math.exp(sum(math.log(best[(0, c)]["seconds"] / best[(now, c)]["seconds"]) for c in ids) / len(ids))
        lines.append("")
        lines.append(f"Geometric mean speed-up: {g:.2f}x")
    text = "\n".join(lines)
    print(text)
    if a.output:
        a.output.write_text(text + "\n")


if __name__ == "__main__":
    main()
