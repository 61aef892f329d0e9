"""Which DRAM rows a stream returns to after leaving them: what cross-stream row conflicts could cost (issue 23).

    python3 bench/row_revisits.py [-o FILE]

An open-page controller that serves a row's queued hits first (FR-FCFS) keeps a stream's row open while the
stream stays in it; another core's stream touching the same bank can close it only between two of the stream's
*visits* (maximal stretches of consecutive touches to one row, in descriptor order).  So the activations that
cross-stream conflicts can add to a transfer are its *revisits*: visits to a row it opened before and left, which
the model counts as hits (``sim.model.dram``: a bank keeps its row).  For every shipped config and bench case this
counts, over the DRAM sides of the plan's transfers (timing only; each transfer's sides as the engine counts them):
the runs' row pieces (one per row a run touches), the visits, the activations, and the revisits.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from sim.model.memory import MemoryMap  # noqa: E402
from sim.model.plan import run_layout  # noqa: E402
from sim.timing import side_rows  # noqa: E402


def _side(region, addr: int, shape, itemsize: int, strides) -> tuple[int, int]:
    """(row pieces, visits) of one DRAM side: each run's rows in descriptor order."""
    run, outer = run_layout(tuple(shape), itemsize, tuple(strides))
    if run == 0:
        return 0, 0
    starts = np.array([addr - region.base], dtype=np.int64)
    for n, st in outer:
        starts = (starts[:, None] + np.arange(n, dtype=np.int64) * st).ravel()
    size = region.rows.row_bytes
    first, last = starts // size, (starts + run - 1) // size
    pieces = int((last - first + 1).sum())
    if (last > first).any():
        seq = np.concatenate([np.arange(a, b + 1) for a, b in zip(first.tolist(), last.tolist())])
    else:
        seq = first
    return pieces, int(1 + np.count_nonzero(np.diff(seq)))


def count(run) -> dict[str, int]:
    """Row pieces, visits, activations and revisits over the DRAM sides of ``run``'s plan."""
    mmap = MemoryMap(run.target)
    out = {"sides": 0, "pieces": 0, "visits": 0, "activations": 0, "bytes": 0}
    for phase in run.plan.phases:
        for tiles in phase.tiles.values():
            for tile in tiles:
                for t in (*tile.loads, *tile.stores):
                    for side, addr, strides in (("src", t.src, t.src_strides), ("dst", t.dst, t.dst_strides)):
                        region = mmap.region_at(addr)
                        if region is None or region.rows is None:
                            continue
                        pieces, visits = _side(region, addr, t.shape, t.itemsize, strides)
                        out["sides"] += 1
                        out["pieces"] += pieces
                        out["visits"] += visits
                        out["activations"] += side_rows(t, side, region).activations
                        out["bytes"] += t.size_bytes
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-o", "--output", type=Path, help="write the markdown table here (default: stdout)")
    args = ap.parse_args()
    import test_frozen_cycles as frozen
    lines = ["| case | DRAM sides | row pieces | visits | activations | revisits | bytes per visit |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for name in frozen.case_names():
        c = count(frozen.run_of(name))
        if not c["sides"]:
            continue
        lines.append(f"| `{name}` | {c['sides']:,} | {c['pieces']:,} | {c['visits']:,} | {c['activations']:,} | "
                     f"{c['visits'] - c['activations']:,} | {c['bytes'] / c['visits']:,.0f} |")
        print(lines[-1], file=sys.stderr, flush=True)
    text = "\n".join(lines) + "\n"
    if args.output:
        args.output.write_text(text)
    else:
        print(text)


if __name__ == "__main__":
    main()
