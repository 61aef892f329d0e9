"""The trace writers: a run's events (:mod:`sim.engine.events`) as Chrome trace JSON or CSV, with its metadata.

Times are integer cycles from the launch of the call; writers convert to
microseconds with the target's clock and keep the raw cycles in each event's
args.  Nothing here reads the wall clock, so the same run always writes the
same bytes.

The Chrome trace-event JSON (Perfetto UI, chrome://tracing) holds one named
process per run ("FT78NE · fp_batch_norm_grad_s"), one named track per core
unit ("core 3 · compute", "core 3 · DMA 0", "core 3 · sync"), flow arrows from
a tile's DMA-in to its compute and on to its DMA-out, counter tracks of the
bytes in flight on each shared region and of each core's busy units, and the
run's metadata.  :mod:`sim.inspect.trace_tools` reads it back.
"""

from __future__ import annotations

import csv
import io
import json
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from sim.engine.events import DMA_KINDS, TraceEvent
from sim.files.atomic import atomic_write_text, output_path
from sim.files.jsonsafe import plain_scalar
from sim.inspect.broadcast_reads import repeated_reads

if TYPE_CHECKING:
    from sim.inspect.run import Run

#: The process id of the (single) run in a trace document.
PID = 1
#: The track and the category of a trace's spans (a program's calls, :class:`Span`).
SPAN_TRACK = "calls"
SPAN_CATEGORY = "call"


class Span(NamedTuple):
    """A named span of a whole run, drawn on a track of its own above the cores (a program's calls): from cycle
    ``start`` to ``end``, with ``args`` shown beside it."""

    name: str
    start: int
    end: int
    args: Mapping[str, Any]


def sorted_events(events: Iterable[TraceEvent]) -> list[TraceEvent]:
    """Events in a stable order: start cycle, core, unit, kind, tile."""
    return sorted(events, key=lambda e: (e.start, e.core, e.unit, e.kind, e.tile if e.tile is not None else -1,
                                         e.end))


# -- tracks --------------------------------------------------------------------------------------


def unit_order(unit: str) -> int:
    """Sort key of a unit within its core: compute, DMA 0, DMA 1, ..., then sync and anything else."""
    if unit == "compute":
        return 0
    if unit.startswith("dma") and unit[3:].isdigit():
        return 1 + int(unit[3:])
    return 1000


def unit_label(unit: str) -> str:
    """How a unit is named on screen: ``dma0`` -> ``DMA 0``; others as they are."""
    return "DMA " + unit[3:] if unit.startswith("dma") and unit[3:].isdigit() else unit


def track_name(core: int, unit: str) -> str:
    """The name of a core unit's track, e.g. ``core 3 · DMA 0``."""
    return f"core {core} · {unit_label(unit)}"


def tracks(events: Iterable[TraceEvent]) -> list[tuple[int, str]]:
    """Every ``(core, unit)`` that has an event, by core then unit order."""
    return sorted({(e.core, e.unit) for e in events}, key=lambda cu: (cu[0], unit_order(cu[1]), cu[1]))


def run_title(metadata: Mapping[str, Any]) -> str:
    """``chip · symbol`` of a run's metadata."""
    parts = [str(metadata[k]) for k in ("target", "symbol") if metadata.get(k)]
    return " · ".join(parts) or "dspsim run"


def region_facts(target: Any) -> dict[str, dict]:
    """The regions of a target as trace metadata: kind, role, bandwidth, latency (for tools that read a trace
    without the target file)."""
    return {r.name: {"kind": r.kind, "role": r.role, "bandwidth_bytes_per_cycle": r.bandwidth_bytes_per_cycle,
                     "latency_cycles": r.latency_cycles}
            for r in target.regions}


def shared_regions(events: Iterable[TraceEvent], regions: Mapping[str, Mapping] | None) -> list[str]:
    """Regions the DMAs touch that are shared between cores (all touched regions when the facts are unknown)."""
    touched = sorted({r for e in events if e.kind in DMA_KINDS for r in (e.src_region, e.dst_region) if r})
    if not regions:
        return touched
    return [r for r in touched if regions.get(r, {}).get("kind", "shared") == "shared"]


def _plain(value: Any) -> Any:
    """A JSON-ready copy of an argument value (numpy scalars and arrays, tuples become plain values)."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    if isinstance(value, (list, tuple, np.ndarray)):
        return [_plain(v) for v in value]
    return value


def metadata_args(kinds: Mapping[str, str], args: Mapping[str, Any], buffer_addrs: Iterable[int] = ()) -> dict:
    """A call's arguments as trace metadata: pointers and the core mask in hex, booleans as booleans,
    every other number as the number it is.

    ``kinds`` maps each kernel argument to its kind (``in_ptr``, ``params`` ..., see ``ArgSpec``).
    Pointer arguments are the kernel's ``in_ptr`` / ``out_ptr`` arguments, a
    ``params`` argument given as the address of an array, and the entries of a
    ``params`` list that are the address of one of the call's buffers.
    """
    addrs = set(buffer_addrs)
    out: dict[str, Any] = {}
    for name, raw in args.items():
        v = _plain(raw)
        kind = kinds.get(name)
        is_int = isinstance(v, int) and not isinstance(v, bool)
        if is_int and (name == "core_mask" or kind in ("in_ptr", "out_ptr", "params")):
            out[name] = f"{v:#x}"
        elif kind == "params" and isinstance(v, list):
            out[name] = [f"{x:#x}" if isinstance(x, int) and not isinstance(x, bool) and x in addrs else x for x in v]
        elif kind == "bool" and is_int and v in (0, 1):
            out[name] = bool(v)  # C callers pass 0/1 for a bool
        else:
            out[name] = v
    return out


def run_metadata(run: Run) -> dict:
    """The metadata a :class:`~sim.inspect.run.Run` writes into its trace: chip, call (and where its kernel came
    from), cycles, bounds, tiling."""
    from sim.inspect.summary import limiting_resource, load_imbalance, resource_shares

    summaries = run.summaries()
    tiling = run.tiling
    return {"target": run.target.name, "symbol": run.symbol, "cycles": run.cycles,
            "clock_hz": run.target.clock_hz, "cores": list(run.cores), "precision": run.call.precision,
            "numerics": bool(run.numerics),
            "roofline_cycles": round(run.roofline.cycles, 3), "bound_by": run.roofline.bound_by,
            "idle_cores": list(run.idle_cores),
            "load_imbalance": round(load_imbalance(summaries), 4),
            "limited_by": limiting_resource(run.roofline, summaries, run.cycles),
            "resource_shares": {k: round(v, 4) for k, v in
                                sorted(resource_shares(run.roofline, summaries, run.cycles).items())},
            "precision_note": run.precision_note,
            "kernel_origin": run.kernel_origin,
            "args": metadata_args(run.arg_kinds, run.args, (b.addr for b in run.call.buffers)),
            "regions": region_facts(run.target),
            "tiling": None if tiling is None else {"tiling": tiling.tiling, "source": tiling.source}}


# -- derived series -------------------------------------------------------------------------------


def flows(events: Sequence[TraceEvent]) -> list[tuple[TraceEvent, TraceEvent]]:
    """Causal arrows of each tile: its last DMA-in -> its compute, and its compute -> each of its DMA-outs.

    Events are grouped by (core, phase, tile).  Only the DMA-in that finished
    last is linked, because that one released the compute; a tile without
    compute gets no arrows.
    """
    groups: dict[tuple, list[TraceEvent]] = defaultdict(list)
    for e in events:
        if e.tile is not None and e.kind in ("dma_in", "compute", "dma_out"):
            groups[(e.core, e.phase or "", e.tile)].append(e)
    out: list[tuple[TraceEvent, TraceEvent]] = []
    for key in sorted(groups, key=lambda k: (k[0], k[1], k[2])):
        group = groups[key]
        computes = sorted((e for e in group if e.kind == "compute"), key=lambda e: e.start)
        for i, c in enumerate(computes):
            lo = computes[i - 1].end if i else None
            ins = [e for e in group if e.kind == "dma_in" and e.end <= c.start and (lo is None or e.start >= lo)]
            if ins:
                out.append((max(ins, key=lambda e: (e.end, unit_order(e.unit))), c))
            hi = computes[i + 1].start if i + 1 < len(computes) else None
            outs = [e for e in group if e.kind == "dma_out" and e.start >= c.end and (hi is None or e.start < hi)]
            out.extend((c, o) for o in sorted(outs, key=lambda e: (e.start, unit_order(e.unit))))
    return out


def step_series(intervals: Iterable[tuple[int, int, int]]) -> list[tuple[int, int]]:
    """A step function from ``(start, end, value)`` intervals: ``(cycle, total from then on)`` at each change."""
    delta: dict[int, int] = defaultdict(int)
    for s, e, v in intervals:
        if e > s and v:
            delta[s] += v
            delta[e] -= v
    out: list[tuple[int, int]] = []
    level = 0
    for t in sorted(delta):
        if not delta[t]:
            continue
        level += delta[t]
        out.append((t, level))
    return out


def bytes_in_flight(events: Sequence[TraceEvent], region: str,
                    regions: Mapping[str, Mapping] | None = None) -> list[tuple[int, int]]:
    """Bytes of DMA transfers issued and not yet landed that touch ``region``, as a step series (a broadcast's
    source block once: :mod:`sim.inspect.broadcast_reads`, ``regions`` the trace's region facts)."""
    repeats = repeated_reads(events, regions)
    return step_series((e.start, e.end, e.bytes) for i, e in enumerate(events)
                       if e.kind in DMA_KINDS and (e.dst_region == region
                                                   or (e.src_region == region and i not in repeats)))


def busy_units(events: Iterable[TraceEvent], core: int) -> list[tuple[int, int]]:
    """How many of a core's units (compute, DMA engines) are active, as a step series (0 = idle)."""
    return step_series((e.start, e.end, 1) for e in events
                       if e.core == core and (e.kind == "compute" or e.kind in DMA_KINDS))


# -- writers --------------------------------------------------------------------------------------


class _Clock:
    """Cycles -> microseconds, rounded to the picosecond so that a slice's end is the next one's start."""

    def __init__(self, clock_hz: int):
        self.clock_hz = clock_hz
        self._us: dict[int, float] = {}  # a trace names the same cycles again and again (one event's end, the
        # next one's start, the counters' steps)

    def us(self, cycle: int) -> float:
        got = self._us.get(cycle)
        if got is None:
            got = self._us[cycle] = round(cycle * 1e6 / self.clock_hz, 6)
        return got

    def dur(self, start: int, end: int) -> float:
        return round(self.us(end) - self.us(start), 6)

    def mid(self, e: TraceEvent) -> float:
        # A flow endpoint binds to the slice enclosing its timestamp: the middle is never on a boundary.
        return round((self.us(e.start) + self.us(e.end)) / 2, 7)


def _event_args(e: TraceEvent) -> dict:
    args = {k: v for k, v in zip(TraceEvent._fields, e) if v is not None and k != "kind"}
    if e.src is not None:
        args["src"] = f"{e.src:#x}"
    if e.dst is not None:
        args["dst"] = f"{e.dst:#x}"
    args["start_cycle"], args["end_cycle"], args["cycles"] = e.start, e.end, e.cycles
    return args


def _event_name(e: TraceEvent) -> str:
    return e.kind if e.tile is None else f"{e.kind} t{e.tile}"


def _metadata_events(units: list[tuple[int, str]], tids: dict, metadata: Mapping[str, Any]) -> list[dict]:
    title = run_title(metadata)
    labels = []
    if metadata.get("cycles") is not None:
        labels.append(f"{metadata['cycles']} cycles")
    if metadata.get("clock_hz"):
        labels.append(f"clock {metadata['clock_hz'] / 1e9:g} GHz")
    out: list[dict] = [
        {"ph": "M", "pid": PID, "name": "process_name", "args": {"name": title}},
        {"ph": "M", "pid": PID, "name": "process_sort_index", "args": {"sort_index": 0}},
    ]
    if labels:
        out.append({"ph": "M", "pid": PID, "name": "process_labels", "args": {"labels": ", ".join(labels)}})
    for cu in units:
        tid = tids[cu]
        out.append({"ph": "M", "pid": PID, "tid": tid, "name": "thread_name", "args": {"name": track_name(*cu)}})
        out.append({"ph": "M", "pid": PID, "tid": tid, "name": "thread_sort_index", "args": {"sort_index": tid}})
    return out


def _from_zero(series: list[tuple[int, int]]) -> list[tuple[int, int]]:
    return series if series and series[0][0] == 0 else [(0, 0)] + series


def _counter_events(events: Sequence[TraceEvent], clock: _Clock, metadata: Mapping[str, Any]) -> list[dict]:
    out: list[dict] = []
    for region in shared_regions(events, metadata.get("regions")):
        for t, v in _from_zero(bytes_in_flight(events, region, metadata.get("regions"))):
            out.append({"ph": "C", "pid": PID, "name": region, "ts": clock.us(t),
                        "args": {"bytes in flight": v}})
    for core in sorted({e.core for e in events}):
        for t, v in _from_zero(busy_units(events, core)):
            out.append({"ph": "C", "pid": PID, "name": f"core {core}", "ts": clock.us(t), "args": {"busy units": v}})
    return out


def _flow_events(events: Sequence[TraceEvent], tids: dict, clock: _Clock) -> list[dict]:
    out: list[dict] = []
    for i, (a, b) in enumerate(flows(events), start=1):
        name = "data" if a.kind == "dma_in" else "result"
        out.append({"ph": "s", "pid": PID, "tid": tids[(a.core, a.unit)], "id": i, "name": name, "cat": "flow",
                    "ts": clock.mid(a)})
        out.append({"ph": "f", "bp": "e", "pid": PID, "tid": tids[(b.core, b.unit)], "id": i, "name": name,
                    "cat": "flow", "ts": clock.mid(b)})
    return out


def _span_events(spans: Sequence[Span], tid: int, clock: _Clock) -> list[dict]:
    if not spans:
        return []
    out: list[dict] = [
        {"ph": "M", "pid": PID, "tid": tid, "name": "thread_name", "args": {"name": SPAN_TRACK}},
        {"ph": "M", "pid": PID, "tid": tid, "name": "thread_sort_index", "args": {"sort_index": -1}}]
    for s in spans:
        out.append({"ph": "X", "pid": PID, "tid": tid, "name": s.name, "cat": SPAN_CATEGORY, "ts": clock.us(s.start),
                    "dur": clock.dur(s.start, s.end),
                    "args": {**s.args, "start_cycle": s.start, "end_cycle": s.end, "cycles": s.end - s.start}})
    return out


def chrome_trace(events: Sequence[TraceEvent], clock_hz: int, metadata: dict, spans: Sequence[Span] = ()) -> dict:
    """A Chrome trace-event document of one run (Perfetto UI, chrome://tracing).

    One process named after the chip and symbol; one named thread per core
    unit; a complete ("X") event per trace event with timestamps from the clock
    and the raw cycles, bytes and addresses in its args; flow arrows DMA-in ->
    compute -> DMA-out per tile; counters of bytes in flight per shared region
    and busy units per core; the run's metadata as the document's ``metadata``
    and as the args of a ``run`` instant event at cycle 0; ``spans`` (a program's calls) as slices of a track
    of their own, named :data:`SPAN_TRACK`, above the cores'.
    """
    clock = _Clock(clock_hz)
    units = tracks(events)
    tids = {cu: i + 1 for i, cu in enumerate(units)}
    meta = dict(metadata)
    meta.setdefault("clock_hz", clock_hz)
    out = _metadata_events(units, tids, meta)
    out.append({"ph": "i", "s": "p", "pid": PID, "tid": 0, "name": "run", "cat": "run", "ts": 0.0, "args": meta})
    for e in sorted_events(events):
        out.append({"ph": "X", "pid": PID, "tid": tids[(e.core, e.unit)], "name": _event_name(e), "cat": e.kind,
                    "ts": clock.us(e.start), "dur": clock.dur(e.start, e.end), "args": _event_args(e)})
    out.extend(_flow_events(events, tids, clock))
    out.extend(_counter_events(events, clock, meta))
    out.extend(_span_events(spans, len(units) + 1, clock))
    return {"traceEvents": out, "displayTimeUnit": "ns", "metadata": meta}


def events_csv(events: Sequence[TraceEvent]) -> str:
    """The events as CSV, one row each, columns named after the event fields."""
    buf = io.StringIO()
    names = list(TraceEvent._fields)
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(names)
    for e in sorted_events(events):
        row = []
        for n in names:
            v = getattr(e, n)
            row.append(f"{v:#x}" if n in ("src", "dst") and v is not None else ("" if v is None else v))
        w.writerow(row)
    return buf.getvalue()


def write_trace(path: str | Path, events: Sequence[TraceEvent], clock_hz: int, metadata: dict,
                spans: Sequence[Span] = ()) -> Path:
    """Write a trace atomically: ``.csv`` gives CSV (the events only), anything else Chrome trace JSON (with the
    ``spans``, see :func:`chrome_trace`)."""
    p = output_path(path)
    if p.suffix.lower() == ".csv":
        text = events_csv(events)
    else:
        text = json.dumps(chrome_trace(events, clock_hz, metadata, spans), indent=None, separators=(",", ":"),
                          default=plain_scalar)
    atomic_write_text(p, text)
    return p
