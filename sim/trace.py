"""Trace events, the recorder the engine writes into, and the trace writers.

Times are integer cycles from the launch of the call; writers convert to
microseconds with the target's clock.  Nothing here reads the wall clock, so the
same run always writes the same bytes.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Iterable, Sequence

from sim.atomic import atomic_write_text

#: Event kinds the engine records.
KINDS = ("launch", "dma_in", "compute", "dma_out", "barrier_wait")


@dataclass(frozen=True)
class TraceEvent:
    """One interval of activity of one unit of one core.

    ``unit`` is ``compute``, ``dma<k>`` (engine k of the core) or ``sync``
    (launch and barriers).  ``wait_cycles`` is the part of a DMA spent queued for
    a memory port (contention, from ``wait_start``) or of a barrier spent waiting
    for other cores.
    """

    core: int
    unit: str
    kind: str
    start: int
    end: int
    bytes: int = 0
    src: int | None = None
    dst: int | None = None
    src_region: str | None = None
    dst_region: str | None = None
    tile: int | None = None
    phase: str | None = None
    flops: int = 0
    wait_cycles: int = 0
    wait_start: int | None = None

    @property
    def cycles(self) -> int:
        """Duration of the event."""
        return self.end - self.start


class Recorder:
    """Collects the events of one run in the order the engine emits them."""

    def __init__(self) -> None:
        self.events: list[TraceEvent] = []

    def record(self, event: TraceEvent) -> None:
        """Append one event."""
        self.events.append(event)


def sorted_events(events: Iterable[TraceEvent]) -> list[TraceEvent]:
    """Events in a stable order: start cycle, core, unit, kind, tile."""
    return sorted(events, key=lambda e: (e.start, e.core, e.unit, e.kind, e.tile if e.tile is not None else -1,
                                         e.end))


def _unit_order(unit: str) -> int:
    if unit == "compute":
        return 0
    if unit.startswith("dma"):
        return 1 + int(unit[3:])
    return 1000


def chrome_trace(events: Sequence[TraceEvent], clock_hz: int, metadata: dict) -> dict:
    """A Chrome trace-event document: one process per run, one named thread per core unit."""
    us_per_cycle = 1e6 / clock_hz
    pid = 1
    units = sorted({(e.core, e.unit) for e in events}, key=lambda cu: (cu[0], _unit_order(cu[1])))
    tids = {cu: i + 1 for i, cu in enumerate(units)}
    out: list[dict] = [{"ph": "M", "pid": pid, "name": "process_name",
                        "args": {"name": f"{metadata.get('target', '')} {metadata.get('symbol', '')}".strip()}}]
    for (core, unit), tid in tids.items():
        label = "DMA " + unit[3:] if unit.startswith("dma") else unit
        out.append({"ph": "M", "pid": pid, "tid": tid, "name": "thread_name",
                    "args": {"name": f"core {core} · {label}"}})
        out.append({"ph": "M", "pid": pid, "tid": tid, "name": "thread_sort_index", "args": {"sort_index": tid}})
    for e in sorted_events(events):
        args = {k: v for k, v in asdict(e).items() if v is not None and k not in ("core", "unit", "kind")}
        if e.src is not None:
            args["src"] = f"{e.src:#x}"
        if e.dst is not None:
            args["dst"] = f"{e.dst:#x}"
        args["start_cycle"], args["end_cycle"] = e.start, e.end
        name = e.kind if e.tile is None else f"{e.kind} t{e.tile}"
        out.append({"ph": "X", "pid": pid, "tid": tids[(e.core, e.unit)], "name": name, "cat": e.kind,
                    "ts": round(e.start * us_per_cycle, 6), "dur": round(e.cycles * us_per_cycle, 6),
                    "args": args})
    return {"traceEvents": out, "displayTimeUnit": "ns", "metadata": metadata}


def events_csv(events: Sequence[TraceEvent]) -> str:
    """The events as CSV, one row each, columns named after the event fields."""
    buf = io.StringIO()
    names = [f.name for f in fields(TraceEvent)]
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(names)
    for e in sorted_events(events):
        row = []
        for n in names:
            v = getattr(e, n)
            row.append(f"{v:#x}" if n in ("src", "dst") and v is not None else ("" if v is None else v))
        w.writerow(row)
    return buf.getvalue()


def write_trace(path: str | Path, events: Sequence[TraceEvent], clock_hz: int, metadata: dict) -> Path:
    """Write a trace atomically: ``.csv`` gives CSV, anything else Chrome trace JSON."""
    p = Path(path)
    if p.suffix.lower() == ".csv":
        text = events_csv(events)
    else:
        text = json.dumps(chrome_trace(events, clock_hz, metadata), indent=None, separators=(",", ":"))
    atomic_write_text(p, text)
    return p
