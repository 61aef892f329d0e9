"""What the tiling search costs a first call: each large bench case in a fresh process, no tuning cache.

    python3 bench/first_call_search.py [--repeat N] [--tree PATH] [--case ID ...] [-o OUT.md]

Per case: the wall seconds of the first (timing-only) ``call`` after the simulator is made and the inputs are
placed (the search and the picked plan's simulation: the import and the data generation are not counted), the
candidates the search planned and how many it simulated, and the cycles of the run.  ``--tree`` runs another
checkout of dspsim instead (its ``sim`` and ``bench/cases.py``), so that two versions can be measured in one
session, their runs interleaved; the best of ``--repeat`` runs is kept.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: What each child process runs (the public API only, so that an older checkout runs it too).
CHILD = r"""
import json, sys, time
sys.path.insert(0, "bench")
import sim, cases
case = cases.build(sys.argv[1])
m = sim.Simulator(case.chip, tuning_cache=False)
for addr, arr in case.inputs.items():
    m.write(addr, arr)
t0 = time.perf_counter()
run = m.call(case.symbol, numerics=False, **case.args)
seconds = time.perf_counter() - t0
notes = list(getattr(run.tiling, "notes", ())) + [""] * len(run.tiling.candidates)  # (unplanned: its bound)
planned = sum(1 for _, note in zip(run.tiling.candidates, notes) if not note.startswith("not planned"))
print(json.dumps({"seconds": seconds, "cycles": run.cycles, "planned": planned,
                  "simulated": run.tiling.simulated, "tiling": run.tiling.tiling}))
"""


def large_cases(tree: Path) -> list[str]:
    """The large bench cases of ``tree``."""
    code = "import sys; sys.path.insert(0, 'bench'); import cases; print('\\n'.join(cases.case_ids(sizes=['large'])))"
    out = subprocess.run([sys.executable, "-c", code], cwd=tree, env=_env(tree), capture_output=True, text=True,
                         check=True)
    return out.stdout.split()


def _env(tree: Path) -> dict[str, str]:
    # Each tree's bytecode cached as an installed dspsim's is (PYTHONDONTWRITEBYTECODE dropped): without it, every
    # fresh process of a tree that has none compiles the modules it imports again, a tenth of a second.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return {**env, "PYTHONPATH": str(tree), "DSPSIM_NO_CACHE": "1"}


def measure(tree: Path, case_id: str) -> dict:
    """One fresh process's first call of ``case_id`` in ``tree``."""
    out = subprocess.run([sys.executable, "-c", CHILD, case_id], cwd=tree, env=_env(tree), capture_output=True,
                         text=True)
    if out.returncode:
        raise SystemExit(f"{case_id} in {tree}: {out.stderr.strip().splitlines()[-1]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def table(rows: list[tuple[str, dict, dict | None]], labels: tuple[str, str]) -> str:
    """A markdown table of the measurements (two trees side by side when given)."""
    head = ["case", f"{labels[0]} s", "planned / simulated", "cycles"]
    if any(b is not None for _, _, b in rows):
        head += [f"{labels[1]} s", "planned / simulated", "cycles", "cycles change"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for case, a, b in rows:
        cells = [case, f"{a['seconds']:.3f}", f"{a['planned']} / {a['simulated']}", f"{a['cycles']:,}"]
        if b is not None:
            change = (b["cycles"] - a["cycles"]) / a["cycles"]
            cells += [f"{b['seconds']:.3f}", f"{b['planned']} / {b['simulated']}", f"{b['cycles']:,}",
                      f"{100 * change:+.1f} %"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=3, help="fresh processes per case; the fastest kept (default 3)")
    p.add_argument("--tree", type=Path, help="another checkout to measure beside this one (the 'before')")
    p.add_argument("--case", action="append", help="only this case id (repeatable)")
    p.add_argument("-o", "--output", type=Path, help="also write the table to this markdown file")
    args = p.parse_args(argv)
    trees = [args.tree.resolve(), ROOT] if args.tree else [ROOT]
    ids = args.case or large_cases(ROOT)
    rows = []
    for case_id in ids:
        best: list[dict | None] = [None] * len(trees)
        for _ in range(args.repeat):
            for i, tree in enumerate(trees):  # interleaved: the machine's load falls on both alike
                got = measure(tree, case_id)
                if best[i] is None or got["seconds"] < best[i]["seconds"]:  # type: ignore[index]
                    best[i] = got
        first = best[0]
        assert first is not None
        rows.append((case_id, first, best[1] if len(best) > 1 else None))
        print(rows[-1][0], json.dumps(rows[-1][1:]), flush=True)
    labels = ("before", "after") if args.tree else ("this tree", "")
    text = table(rows, labels)
    total = [sum(r[k]["seconds"] for r in rows if r[k] is not None) for k in (1, 2) if rows and rows[0][k]]
    text += "\n\nTotal first-call seconds: " + " -> ".join(f"{t:.2f}" for t in total) + "\n"
    print(text)
    if args.output:
        args.output.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
