"""Repeat calls of fake quant and the batch norms: two trees timed alternately, in fresh processes.

Run from the repository root::

    python3 bench/repeat_calls.py --before ../main-at-base        # results in bench/repeat_calls.md
    python3 bench/repeat_calls.py --before ../main-at-base --out -

A repeated call of a cached plan replays the plan's effects (DMA copies and each tile's compute function)
without simulating, so its time is mostly the tiles' numpy work.  For every medium and large bench case of
fake quant, FusedBatchNormGrad and BatchNormGrad a child process (one per tree and round) builds the case,
places its inputs, calls once (search, plan, simulation) and times ``--repeat`` further calls with
``time.perf_counter``, keeping the best.  The two trees (``--before``, this tree) take turns, ``--rounds``
times per case, since the machine is noisy; each tree's best over its rounds goes in the table.  The child
also hashes the outputs it read back and the run's cycles and events, so the table says whether the two trees
gave bit-identical results and the same timing.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KERNELS = ["fake_quant_with_min_max_vars_gradient", "fused_batch_norm_grad", "batch_norm_grad"]

#: The child: run in the tree it measures (cwd and sys.path[0] are that tree's root).
CHILD = r"""
import hashlib, json, sys, time
sys.path.insert(0, ".")
from bench import cases
import sim
case_id, repeat = sys.argv[1], int(sys.argv[2])
case = cases.build(case_id)
m = sim.Simulator(case.chip)
for addr, arr in case.inputs.items():
    m.write(addr, arr)
m.call(case.symbol, **case.args)
best = float("inf")
for _ in range(repeat):
    t0 = time.perf_counter()
    run = m.call(case.symbol, **case.args)
    best = min(best, time.perf_counter() - t0)
h = hashlib.sha256()
for out in case.outputs:
    h.update(m.read(out.addr, out.shape, out.dtype).tobytes())
print(json.dumps({"best": best, "digest": h.hexdigest(), "cycles": run.cycles, "events": run.events,
                  "tiles": run.plan.tile_count}))
"""


def child(tree: Path, case_id: str, repeat: int) -> dict:
    """One fresh process's best repeat call of ``case_id`` in ``tree``."""
    out = subprocess.run([sys.executable, "-c", CHILD, case_id, str(repeat)], cwd=tree, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    """Time every case in both trees, alternately, and write the table."""
    from bench.cases import case_ids

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", required=True, help="the tree to compare with (a checkout of the base commit)")
    ap.add_argument("--repeat", type=int, default=7, help="repeat calls per process (the best is kept)")
    ap.add_argument("--rounds", type=int, default=2, help="processes per tree and case, taking turns")
    ap.add_argument("--case", action="append", help="only these case ids")
    ap.add_argument("--all-large", action="store_true", help="every kernel's large cases (both chips, each precision)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "repeat_calls.md"), help="the table's file, - prints")
    a = ap.parse_args()
    before = Path(a.before).resolve()
    ids = a.case or (case_ids(sizes=["large"]) if a.all_large else case_ids(KERNELS))
    rows = []
    for case_id in ids:
        got: dict[str, list[dict]] = {"before": [], "after": []}
        for _ in range(a.rounds):
            got["before"].append(child(before, case_id, a.repeat))
            got["after"].append(child(ROOT, case_id, a.repeat))
        b, f = (min(r["best"] for r in got[k]) for k in ("before", "after"))
        ref = got["before"][0]
        same = all(r["digest"] == ref["digest"] for r in got["before"] + got["after"])
        timing = all((r["cycles"], r["events"]) == (ref["cycles"], ref["events"]) for r in got["after"])
        rows.append((case_id, ref["tiles"], b, f, same, timing))
        print(f"{case_id:55s} {b:8.4f} {f:8.4f} {b / f:5.2f}x  bit-identical={same} same-cycles={timing}",
              file=sys.stderr)
    cmd = "python3 bench/repeat_calls.py " + " ".join(shlex.quote(x) for x in sys.argv[1:])
    title = "every kernel's large cases" if a.all_large else "fake quant and batch norms"
    lines = [f"# Repeat calls: {title}", "",
             "A repeated call (`m.call(...)` again on the same simulator, numerics on): best of "
             f"{a.repeat} calls per process, {a.rounds} processes per tree and case, the trees taking turns.",
             f"Made with `{cmd}`.", "",
             "| case | tiles | before s | after s | speed-up | outputs bit-identical | same cycles |",
             "|---|---:|---:|---:|---:|---|---|"]
    for case_id, tiles, b, f, same, timing in rows:
        lines.append(f"| {case_id} | {tiles} | {b:.4f} | {f:.4f} | {b / f:.2f}x | {'yes' if same else 'no'} | "
                     f"{'yes' if timing else 'no'} |")
    text = "\n".join(lines) + "\n"
    if a.out == "-":
        print(text, end="")
    else:
        Path(a.out).write_text(text)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
