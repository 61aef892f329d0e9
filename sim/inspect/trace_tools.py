"""Reading traces back, and what users ask of them: a per-core summary with the critical path and the
top stalls (``dspsim trace summary``) and a side-by-side comparison of two runs (``dspsim trace diff``).

Works on the Chrome trace JSON that :func:`sim.inspect.trace.write_trace` writes (the
raw cycles, bytes and addresses are in each event's args, so nothing is lost to
the microsecond timestamps) and on its CSV form (which carries no metadata).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sim.engine.events import DMA_KINDS, KINDS, TraceEvent
from sim.errors import brief
from sim.files.csvsafe import read_csv_rows
from sim.files.fields import bounded_int
from sim.files.jsonsafe import read_json_file
from sim.inspect.summary import (
    TABLE_LEGEND,
    CoreSummary,
    _union,
    core_summaries,
    summary_table,
)
from sim.inspect.trace import SPAN_CATEGORY, run_title, track_name, tracks, unit_label, unit_order
from sim.inspect.trace_metadata import MAX_TRACE_CYCLE, TraceFileError, checked_metadata
from sim.model.target_loader import MAX_CORES

if TYPE_CHECKING:
    from sim.inspect.run import Run

_WORK_KINDS = ("dma_in", "compute", "dma_out")


@dataclass(frozen=True)
class Trace:
    """The events of one run with its metadata (chip, symbol, args, cycles, clock, regions)."""

    events: tuple[TraceEvent, ...]
    metadata: Mapping[str, Any] = field(default_factory=dict)
    source: str = ""

    @property
    def clock_hz(self) -> int | None:
        """The chip's clock, when the trace says."""
        return self.metadata.get("clock_hz")

    @property
    def cycles(self) -> int:
        """Cycles from launch to the last core's end."""
        c = self.metadata.get("cycles")
        return int(c) if c is not None else max((e.end for e in self.events), default=0)

    @property
    def cores(self) -> tuple[int, ...]:
        """The cores the run used."""
        c = self.metadata.get("cores")
        return tuple(int(x) for x in c) if c else tuple(sorted({e.core for e in self.events}))

    @property
    def calls(self) -> list[dict]:
        """A program's calls (name, symbol, start_cycle, cycles ...) as its metadata lists them; empty for the trace
        of one call."""
        return list(self.metadata.get("calls") or [])

    @property
    def title(self) -> str:
        """``chip · symbol`` (or the file name when the trace has no metadata)."""
        return run_title(self.metadata) if self.metadata.get("symbol") else (self.source or "trace")

    def us(self, cycles: float) -> float | None:
        """Cycles in microseconds at the trace's clock (None without a clock)."""
        return cycles * 1e6 / self.clock_hz if self.clock_hz else None


def trace_of_run(run: Run) -> Trace:
    """The :class:`Trace` of a :class:`~sim.inspect.run.Run` (no file round trip)."""
    return Trace(events=tuple(run.events), metadata=run.metadata(), source=f"{run.target.name} {run.symbol}")


# -- loading ---------------------------------------------------------------------------------------

#: Largest trace file read back (bytes, JSON or CSV): a dspsim trace takes about 550 bytes of JSON per event
#: (150 of CSV), so this holds a run of some 240,000 events (the CSV of one of 850,000).
MAX_TRACE_BYTES = 128 << 20
#: Deepest nesting of a trace's JSON: a dspsim trace needs five levels (metadata, its regions, a region).
MAX_TRACE_DEPTH = 16
#: Most bytes or flops one event may count (the same bound: their sums stay exact).
MAX_TRACE_COUNT = 1 << 53
#: Largest address an event may name (64 bits).
MAX_TRACE_ADDRESS = (1 << 64) - 1

#: The range of every integer field of an event.
_INT_RANGES: dict[str, tuple[int, int]] = {
    "core": (0, MAX_CORES - 1), "start": (0, MAX_TRACE_CYCLE), "end": (0, MAX_TRACE_CYCLE),
    "bytes": (0, MAX_TRACE_COUNT), "src": (0, MAX_TRACE_ADDRESS), "dst": (0, MAX_TRACE_ADDRESS),
    "tile": (0, MAX_TRACE_COUNT), "flops": (0, MAX_TRACE_COUNT), "wait_cycles": (0, MAX_TRACE_CYCLE),
    "wait_start": (0, MAX_TRACE_CYCLE), "row_activations": (0, MAX_TRACE_COUNT), "channel": (0, MAX_TRACE_COUNT)}
#: A unit's name: ``compute``, ``dma<k>``, ``sync`` (ASCII, so that its digits are digits ``int`` reads).
_UNIT_RE = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,63}", re.ASCII)
#: A track's name in traces written before the args carried core and unit: ``core 3 · DMA 0``.
_TRACK_RE = re.compile(r"core ([0-9]{1,4}) · (.{1,64})", re.ASCII | re.DOTALL)
_REQUIRED = ("core", "unit", "kind", "start", "end")


def _text(value: Any, where: str, path: Path) -> str | None:
    """A text field: a string, or None when absent or empty."""
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise TraceFileError(f"{path}: {where}: expected text, got {brief(value, 60)}")
    return value


def _event_from_fields(values: Mapping[str, Any], path: Path, where: str) -> TraceEvent:
    kw: dict[str, Any] = {}
    for name in TraceEvent._fields:
        v = values.get(name)
        if v is None or v == "":
            if name in _REQUIRED:
                raise TraceFileError(f"{path}: {where}: missing '{name}'")
            continue  # the field's default
        if name in _INT_RANGES:
            lo, hi = _INT_RANGES[name]
            # The common case inline (a trace holds millions of these); anything else through bounded_int.
            kw[name] = v if type(v) is int and lo <= v <= hi else \
                bounded_int(v, f"{path}: {where} field '{name}'", TraceFileError, lo, hi)
        else:
            kw[name] = _text(v, f"{where} field '{name}'", path)
    if not _UNIT_RE.fullmatch(kw["unit"]):
        raise TraceFileError(f"{path}: {where} field 'unit': expected compute, sync or dma<k>, got "
                             f"{brief(kw['unit'], 60)}")
    if kw["kind"] not in KINDS:
        raise TraceFileError(f"{path}: {where} field 'kind': expected one of {', '.join(KINDS)}, got "
                             f"{brief(kw['kind'], 60)}")
    if kw["end"] < kw["start"]:
        raise TraceFileError(f"{path}: {where}: ends at cycle {kw['end']}, before it starts ({kw['start']}): "
                             f"a negative duration")
    if kw.get("wait_cycles", 0) > kw["end"] - kw["start"]:
        raise TraceFileError(f"{path}: {where} field 'wait_cycles': {kw['wait_cycles']}, more than the event's "
                             f"{kw['end'] - kw['start']} cycles")
    return TraceEvent(**kw)


def _parse_track(name: Any) -> tuple[int, str] | None:
    # "core 3 · DMA 0" -> (3, "dma0"): traces written before the args carried core and unit.
    m = _TRACK_RE.fullmatch(name) if isinstance(name, str) else None
    if m is None:
        return None
    label = m.group(2)
    return int(m.group(1)), "dma" + label[4:] if label.startswith("DMA ") else label


def _track_key(ev: Mapping[str, Any]) -> tuple[Any, Any] | None:
    """An event's ``(pid, tid)``, when both are plain values (a list cannot key a track)."""
    key = (ev.get("pid"), ev.get("tid"))
    return key if all(k is None or isinstance(k, (int, str)) for k in key) else None


def _args(ev: Mapping[str, Any], where: str, path: Path) -> dict:
    args = ev.get("args")
    if args is None:
        return {}
    if not isinstance(args, dict):
        raise TraceFileError(f"{path}: {where}: 'args' is not an object: {brief(args, 60)}")
    return dict(args)


def _track_names(events: list, path: Path) -> dict[tuple, tuple[int, str]]:
    names: dict[tuple, tuple[int, str]] = {}
    for i, ev in enumerate(events):
        if isinstance(ev, dict) and ev.get("ph") == "M" and ev.get("name") == "thread_name":
            parsed = _parse_track(_args(ev, f"traceEvents[{i}]", path).get("name"))
            key = _track_key(ev)
            if parsed and key is not None:
                names[key] = parsed
    return names


def _load_json(path: Path, doc: Any) -> Trace:
    if isinstance(doc, list):
        doc = {"traceEvents": doc}
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise TraceFileError(f"{path}: not a Chrome trace (expected an object with a 'traceEvents' list)")
    names = _track_names(doc["traceEvents"], path)
    events = []
    for i, ev in enumerate(doc["traceEvents"]):
        if not isinstance(ev, dict) or ev.get("ph") != "X" or ev.get("cat") == SPAN_CATEGORY:
            continue  # a program's calls are spans over the events, told by the metadata's calls
        where = f"traceEvents[{i}] ({brief(ev.get('name', '?'), 40)[1:-1]})"
        args = _args(ev, where, path)
        key = _track_key(ev)
        core_unit = names.get(key) if key is not None else None
        if "core" not in args and core_unit:
            args["core"] = core_unit[0]
        if "unit" not in args and core_unit:
            args["unit"] = core_unit[1]
        args.setdefault("kind", ev.get("cat"))
        args["start"] = args.get("start_cycle", args.get("start"))
        args["end"] = args.get("end_cycle", args.get("end"))
        events.append(_event_from_fields(args, path, where))
    if not events:
        raise TraceFileError(f"{path}: the trace has no events of a dspsim run (no complete 'X' events)")
    meta = doc.get("metadata")
    if meta is not None and not isinstance(meta, dict):
        raise TraceFileError(f"{path}: 'metadata' is not an object: {brief(meta, 60)}")
    return Trace(events=tuple(events), metadata=checked_metadata(meta or {}, path), source=str(path))


def _load_csv(path: Path) -> Trace:
    header, rows = read_csv_rows(path, str(path), TraceFileError, MAX_TRACE_BYTES, what="trace file")
    if not rows or not set(_REQUIRED) <= set(header):
        raise TraceFileError(f"{path}: not a dspsim CSV trace (expected columns core, unit, kind, start, end)")
    events = tuple(_event_from_fields(r, path, f"row {line}") for line, r in rows)
    return Trace(events=events, metadata={}, source=str(path))


def load_trace(path: str | Path) -> Trace:
    """Read a trace written by ``dspsim run`` / ``Run.write_trace`` (Chrome JSON, or ``.csv``) back into events.

    Read through the guarded readers: a regular file (never a named pipe or a device) of at most
    :data:`MAX_TRACE_BYTES` bytes, JSON nested at most :data:`MAX_TRACE_DEPTH` levels; every number bounded
    (cycles in ``[0, MAX_TRACE_CYCLE]``, no event ending before it starts, cores, addresses and counts in
    range) and the metadata checked (:func:`checked_metadata`).  Anything else raises :class:`TraceFileError`
    on one line naming the file and the event or key.
    """
    p = Path(path)
    if p.suffix.lower() == ".csv":
        return _load_csv(p)
    # A trace is dspsim's own output, read back: equal keys are left to json (the last wins), which saves a
    # call per event; every value the tools use is checked below.
    doc = read_json_file(p, str(p), TraceFileError, MAX_TRACE_BYTES, MAX_TRACE_DEPTH, what="trace file",
                         unique_keys=False)
    return _load_json(p, doc)


# -- critical path ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class CriticalPath:
    """The chain of events that set the run's length, walked back from the core that finished last.

    ``steps`` go from the first launch to the end; each step's predecessor ended at or before it started (on
    its own core, on the core that arrived last at a barrier, or, for the launch of a program's call, on the
    core whose event ended last before that launch: the previous call's end); ``idle`` is the total of the
    gaps between them.  The step durations plus ``idle`` add up to ``end_cycle``, for one call's run and for a
    program's (whose path runs through every call back to the first).
    """

    core: int
    end_cycle: int
    steps: tuple[TraceEvent, ...]
    idle: int

    def cycles_by_kind(self) -> dict[str, int]:
        """Cycles of the path per event kind (what sharing bandwidth cost its DMAs split out as ``sharing``),
        plus ``idle``."""
        out: dict[str, int] = defaultdict(int)
        for s in self.steps:
            wait = s.wait_cycles if s.kind in DMA_KINDS else 0
            out[s.kind] += s.cycles - wait
            if wait:
                out["sharing"] += wait
        if self.idle:
            out["idle"] += self.idle
        return dict(out)


def _pred_priority(cur: TraceEvent, p: TraceEvent) -> int:
    """Which of several events ending when ``cur`` starts is its cause (lower = likelier)."""
    same_tile = p.core == cur.core and p.tile is not None and p.tile == cur.tile and p.phase == cur.phase
    if cur.kind == "compute":
        order = {"dma_in": 0 if same_tile else 3, "compute": 1, "barrier_wait": 2, "launch": 2, "dma_out": 4}
    elif cur.kind == "dma_out":
        order = {"compute": 0 if same_tile else 3, "dma_in": 2, "dma_out": 1, "barrier_wait": 4, "launch": 4}
    elif cur.kind == "dma_in":
        # An engine freed by the previous transfer on it, or a scratchpad slot freed by a store.
        order = {"dma_in": 1, "dma_out": 1, "barrier_wait": 2, "launch": 2, "compute": 3}
        if p.unit == cur.unit:
            return 0
    else:
        order = {"dma_out": 0, "compute": 1, "dma_in": 2, "barrier_wait": 3, "launch": 3}
    return order.get(p.kind, 9)


def _last_arrival(events: Sequence[TraceEvent], barrier: TraceEvent) -> TraceEvent:
    same = [e for e in events if e.kind == "barrier_wait" and e.end == barrier.end and e.phase == barrier.phase]
    return max(same, key=lambda e: (e.start, -e.core))


def _end_key(e: TraceEvent) -> tuple:
    """Ties between events ending together: the lowest core, a DMA-out, the first unit."""
    return (-e.core, e.kind == "dma_out", -unit_order(e.unit))


def _previous_call_end(events: Sequence[TraceEvent], launch: TraceEvent) -> TraceEvent | None:
    """The event that ended last before ``launch`` (a program's later call): the previous call's end, on any
    core (a work event before a barrier ending with it; a barrier's last arrival)."""
    before = [p for p in events if p.end <= launch.start and p is not launch]
    if not before:
        return None
    pred = max(before, key=lambda e: (e.end, e.kind in _WORK_KINDS, *_end_key(e)))
    return _last_arrival(events, pred) if pred.kind == "barrier_wait" else pred


def critical_path(events: Sequence[TraceEvent]) -> CriticalPath:
    """Walk back from the last event of the core whose work finished last to the launch.  In a program's trace
    a call's launch starts when the previous call ends, so the walk goes on from there, from the event that
    ended last before the launch (on any core), back to the first call's launch."""
    work = [e for e in events if e.kind in _WORK_KINDS] or list(events)
    if not work:
        return CriticalPath(core=0, end_cycle=0, steps=(), idle=0)
    last = max(work, key=lambda e: (e.end, *_end_key(e)))
    by_core: dict[int, list[TraceEvent]] = defaultdict(list)
    for e in events:
        by_core[e.core].append(e)
    steps = [last]
    idle = 0
    cur = last
    while True:
        if cur.kind == "launch":
            # A later call's launch: the previous call's last event (on whichever core) held it back.
            before = _previous_call_end(events, cur) if cur.start else None
            if before is None:
                idle += cur.start
                break
            idle += cur.start - before.end
            steps.append(before)
            cur = before
            continue
        preds = [p for p in by_core[cur.core] if p.end <= cur.start and p is not cur]
        if not preds:
            idle += cur.start
            break
        best_end = max(p.end for p in preds)
        pred = min((p for p in preds if p.end == best_end),
                   key=lambda p: (_pred_priority(cur, p), unit_order(p.unit), p.start))
        idle += cur.start - pred.end
        if pred.kind == "barrier_wait":
            pred = _last_arrival(events, pred)  # the barrier was held open by the core that arrived last
        steps.append(pred)
        cur = pred
    steps.reverse()
    core_end = max((e.end for e in by_core[last.core]), default=last.end)
    return CriticalPath(core=last.core, end_cycle=last.end if core_end >= last.end else core_end,
                        steps=tuple(steps), idle=idle)


# -- stalls ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Stall:
    """A span of cycles a unit spent waiting rather than working.

    ``kind`` is ``sharing`` (the cycles a DMA lost to sharing ``region``'s bandwidth with other streams),
    ``barrier`` (a core waiting for the others) or ``data wait`` (the compute
    unit idle until its tile's DMA-in landed).
    """

    kind: str
    core: int
    unit: str
    start: int
    cycles: int
    tile: int | None = None
    phase: str | None = None
    region: str | None = None

    def describe(self) -> str:
        """One line for people."""
        tile = f" tile {self.tile}" if self.tile is not None else ""
        if self.kind == "sharing":
            what = f"slowed by sharing {self.region or 'memory'} bandwidth"
        elif self.kind == "barrier":
            what = f"waited at the barrier after phase {self.phase}" if self.phase else "waited at a barrier"
        else:
            what = "idle until its DMA-in landed"
        return f"{track_name(self.core, self.unit)}{tile}: {what}"


def _far_region(e: TraceEvent, shared: set[str]) -> str | None:
    for r in (e.src_region, e.dst_region):
        if r in shared:
            return r
    return e.src_region if e.kind == "dma_in" else e.dst_region


def stalls(events: Sequence[TraceEvent], regions: Mapping[str, Mapping] | None = None) -> list[Stall]:
    """Every stall of the run, longest first (ties by start cycle, core)."""
    shared = {n for n, f in (regions or {}).items() if f.get("kind") == "shared"}
    out: list[Stall] = []
    for e in events:
        if e.kind in DMA_KINDS and e.wait_cycles:
            out.append(Stall("sharing", e.core, e.unit, e.wait_start if e.wait_start is not None else e.start,
                             e.wait_cycles, e.tile, e.phase, _far_region(e, shared)))
        elif e.kind == "barrier_wait" and e.wait_cycles:
            out.append(Stall("barrier", e.core, e.unit, e.start, e.wait_cycles, None, e.phase))
    by_core: dict[int, list[TraceEvent]] = defaultdict(list)
    for e in events:
        by_core[e.core].append(e)
    for core, evs in by_core.items():
        # The compute unit is free from the end of its previous compute (or of the launch / last barrier).
        marks = sorted(e.end for e in evs if e.kind in ("compute", "launch", "barrier_wait"))
        for c in sorted((e for e in evs if e.kind == "compute"), key=lambda e: e.start):
            free = max((m for m in marks if m <= c.start), default=0)
            if c.start > free:
                out.append(Stall("data wait", core, c.unit, free, c.start - free, c.tile, c.phase))
    out.sort(key=lambda s: (-s.cycles, s.start, s.core, unit_order(s.unit)))
    return out


# -- summary ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TraceSummary:
    """What ``dspsim trace summary`` prints: the per-core table, the critical path and the top stalls."""

    trace: Trace
    cores: tuple[CoreSummary, ...]
    critical: CriticalPath
    top_stalls: tuple[Stall, ...]
    stall_totals: Mapping[str, int]


def summarize(trace: Trace, top: int = 10) -> TraceSummary:
    """Summarise a trace: per-core cycles and bytes, the critical path, the ``top`` longest stalls."""
    events = list(trace.events)
    all_stalls = stalls(events, trace.metadata.get("regions"))
    totals: dict[str, int] = defaultdict(int)
    for s in all_stalls:
        totals[s.kind] += s.cycles
    return TraceSummary(trace=trace, cores=tuple(core_summaries(events, trace.cores, trace.cycles,
                                                                trace.metadata.get("regions"))),
                        critical=critical_path(events), top_stalls=tuple(all_stalls[:top]),
                        stall_totals=dict(totals))


def _cyc(trace: Trace, cycles: float) -> str:
    us = trace.us(cycles)
    return f"{cycles:.0f} cycles" + (f" ({us:.3f} us)" if us is not None else "")


def _pct(part: float, whole: float) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "-"


def critical_text(trace: Trace, cp: CriticalPath) -> list[str]:
    """The critical path in a few lines: who finished last and what its chain of work waited on."""
    if not cp.steps:
        return ["critical path: (no events)"]
    tied = sorted({e.core for e in trace.events if e.kind in _WORK_KINDS and e.end == cp.end_cycle} - {cp.core})
    tie = f" (tied with core{'s' if len(tied) > 1 else ''} {', '.join(map(str, tied))})" if tied else ""
    launches = sum(1 for s in cp.steps if s.kind == "launch")  # a program's path passes every call's launch
    through = f", through its {launches} calls back to the first," if launches > 1 else ""
    lines = [f"critical path: core {cp.core}{tie} finished last, at cycle {cp.end_cycle}"
             f"{'' if trace.us(cp.end_cycle) is None else f' ({trace.us(cp.end_cycle):.3f} us)'}; "
             f"its chain of {len(cp.steps)} events{through} took:"]
    parts = sorted(cp.cycles_by_kind().items(), key=lambda kv: -kv[1])
    for kind, cyc in parts:
        lines.append(f"  {kind:<13} {cyc:>12} cycles  {_pct(cyc, cp.end_cycle):>6}")
    hops = sorted({s.core for s in cp.steps} - {cp.core})
    if hops:
        how = ("(through barriers and from each call to the next it passes through core(s) "
               if launches > 1 else "(through barriers it passes through core(s) ")
        lines.append(f"  {how}{', '.join(map(str, hops))}, which arrived last"
                     f"{' or finished the previous call' if launches > 1 else ''})")
    waits = [(k, v) for k, v in parts if k != "compute"]
    what = {"dma_in": "its DMA-in transfers", "dma_out": "its DMA-out transfers",
            "sharing": "sharing memory bandwidth with other streams",
            "launch": "the calls' launches" if launches > 1 else "the group launch",
            "barrier_wait": "barriers", "idle": "nothing recorded (idle gaps)"}
    if waits:
        said = [f"{what.get(k, k)} ({v} cycles, {_pct(v, cp.end_cycle)})" for k, v in waits[:3]]
        lines.append("  apart from computing, its time went to " + ", then ".join(said))
    return lines


def calls_text(t: Trace) -> list[str]:
    """A program's calls, one line each (start, cycles, share, bound by, limited by); nothing for one call's."""
    if not t.calls:
        return []
    lines = [f"{len(t.calls)} calls, back to back:"]
    width = max(len(c["name"]) for c in t.calls)
    for c in t.calls:
        lines.append(f"  {c['name']:<{width}}  {c.get('symbol') or '?':<40} from {c['start_cycle']:>10}  "
                     f"{c['cycles']:>10} cycles  {_pct(c['cycles'], t.cycles):>6}  bound by {c.get('bound_by') or '?'}"
                     f", limited by {c.get('limited_by') or '?'}")
    return lines


def summary_text(s: TraceSummary) -> str:
    """The summary as text: header, per-core table, critical path, top stalls."""
    t = s.trace
    lines = [f"{t.title}: {_cyc(t, t.cycles)}, cores {list(t.cores)}"]
    if t.metadata.get("roofline_cycles") is not None:
        rc = float(t.metadata["roofline_cycles"])
        limit = f"; limited by {t.metadata['limited_by']}" if t.metadata.get("limited_by") else ""
        lines.append(f"roofline bound {rc:.0f} cycles (set by {t.metadata.get('bound_by', '?')}); "
                     f"{_pct(rc, t.cycles)} of the bound achieved{limit}")
    if t.metadata.get("numerics") is False:
        lines.append("timing only (numerics: false): no values were computed")
    if t.metadata.get("precision_note"):
        lines.append(f"precision: {t.metadata['precision_note']}")
    lines += calls_text(t)
    lines += ["", summary_table(s.cores), ""]
    lines += critical_text(t, s.critical)
    lines.append("")
    if s.top_stalls:
        lines.append(f"top {len(s.top_stalls)} stalls "
                     f"(totals: {', '.join(f'{k} {v} cycles' for k, v in sorted(s.stall_totals.items()))}):")
        for st in s.top_stalls:
            lines.append(f"  {st.cycles:>10} cycles at {st.start:>10}  {st.describe()}")
    else:
        lines.append("no stalls: no DMA slowed by sharing, no barrier wait, no compute unit waited for data")
    return "\n".join(lines)


# -- diff ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DiffRow:
    """One quantity in runs A and B (None where a run lacks it)."""

    label: str
    a: int | None
    b: int | None

    @property
    def delta(self) -> int | None:
        """B minus A."""
        return None if self.a is None or self.b is None else self.b - self.a

    @property
    def ratio(self) -> float | None:
        """B over A (None when A is 0 or missing)."""
        return None if not self.a or self.b is None else self.b / self.a


@dataclass(frozen=True)
class TraceDiff:
    """Two runs side by side: what differs in their setup (chip, symbol, arguments, tiling), total cycles,
    per core (end and the columns of :func:`sim.inspect.summary.summary_table`), per unit busy cycles."""

    a: Trace
    b: Trace
    total: DiffRow
    cores: tuple[tuple[int, tuple[DiffRow, ...]], ...]
    units: tuple[DiffRow, ...]
    metadata: tuple[tuple[str, Any, Any], ...]
    calls: tuple[DiffRow, ...] = ()  # programs: each call's cycles (by name, A's order first)


def unit_busy(events: Iterable[TraceEvent]) -> dict[tuple[int, str], int]:
    """Busy cycles of each ``(core, unit)`` (union of its events' intervals)."""
    spans: dict[tuple[int, str], list[tuple[int, int]]] = defaultdict(list)
    for e in events:
        spans[(e.core, e.unit)].append((e.start, e.end))
    return {k: _union(v) for k, v in spans.items()}


_CORE_FIELDS = (("end", "end_cycle"), ("compute", "compute_only_cycles"), ("overlap", "overlap_cycles"),
                ("dma", "dma_only_cycles"), ("wait", "wait_cycles"), ("idle", "idle_cycles"))


def diff_traces(a: Trace, b: Trace) -> TraceDiff:
    """Compare two runs (another tiling, chip or core mask)."""
    sa = {s.core: s for s in core_summaries(list(a.events), a.cores, a.cycles, a.metadata.get("regions"))}
    sb = {s.core: s for s in core_summaries(list(b.events), b.cores, b.cycles, b.metadata.get("regions"))}
    cores = []
    for core in sorted(set(sa) | set(sb)):
        rows = tuple(DiffRow(label, getattr(sa[core], attr) if core in sa else None,
                             getattr(sb[core], attr) if core in sb else None) for label, attr in _CORE_FIELDS)
        cores.append((core, rows))
    ua, ub = unit_busy(a.events), unit_busy(b.events)
    order = tracks([TraceEvent(core=c, unit=u, kind="", start=0, end=0) for c, u in set(ua) | set(ub)])
    units = tuple(DiffRow(track_name(c, u), ua.get((c, u)), ub.get((c, u))) for c, u in order)
    meta = []
    for key in ("target", "symbol", "cores", "clock_hz", "numerics"):
        va, vb = a.metadata.get(key), b.metadata.get(key)
        if va != vb:
            meta.append((key, va, vb))
    args_a, args_b = a.metadata.get("args") or {}, b.metadata.get("args") or {}
    for key in sorted(set(args_a) | set(args_b), key=lambda k: (k not in args_a, k)):
        if args_a.get(key) != args_b.get(key):
            meta.append((f"args.{key}", args_a.get(key), args_b.get(key)))
    til_a, til_b = _tiling_of(a), _tiling_of(b)
    for key in sorted(set(til_a) | set(til_b), key=lambda k: (k not in til_a, k)):
        if til_a.get(key) != til_b.get(key):
            meta.append((f"tiling.{key}", til_a.get(key), til_b.get(key)))
    ca, cb = ({c["name"]: c["cycles"] for c in t.calls} for t in (a, b))
    calls = tuple(DiffRow(name, ca.get(name), cb.get(name)) for name in [*ca, *(n for n in cb if n not in ca)])
    return TraceDiff(a=a, b=b, total=DiffRow("run cycles", a.cycles, b.cycles), cores=tuple(cores),
                     units=units, metadata=tuple(meta), calls=calls)


def _tiling_of(t: Trace) -> dict[str, Any]:
    """The run's tiling keys and how they were chosen (``source``), from its metadata."""
    tiling = t.metadata.get("tiling")
    if not isinstance(tiling, dict):
        return {}
    keys = tiling.get("tiling")
    return {**(keys if isinstance(keys, dict) else {}), "source": tiling.get("source")}


def _show(v: Any) -> str:
    if v is None:
        return "(none)"
    if isinstance(v, list):
        return "[" + ", ".join(f"{x:#x}" if isinstance(x, int) and x >= 0x10000 else str(x) for x in v) + "]"
    return str(v)


def _fmt(v: int | None) -> str:
    return "-" if v is None else str(v)


def _change(r: DiffRow) -> tuple[str, str]:
    if r.delta is None:
        return "-", "-"
    pct = "-" if not r.a else f"{100 * r.delta / r.a:+.1f}%"
    return f"{r.delta:+d}", pct


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths)))
                     for r in rows)


def _speed(a: float, b: float) -> str:
    """``, B is 1.43x as fast`` / ``, B takes 1.26x as long`` from A's and B's cycles or seconds ("" when equal)."""
    if not a or not b or a == b:
        return ""
    return f", B is {a / b:.2f}x as fast" if b < a else f", B takes {b / a:.2f}x as long"


def diff_text(d: TraceDiff) -> str:
    """The comparison as text: what differs in the two runs' setup first (chip, symbol, arguments, tiling),
    then both runs, the change of cycles, per-core and per-unit tables.  Which run is faster is said from the
    cycles when both runs have the same clock, from the time (cycles / clock_hz) when their clocks differ, and
    not at all when only one clock is known."""
    if d.metadata:
        lines = ["setup differs: " + "; ".join(f"{k} {_show(va)} -> {_show(vb)}" for k, va, vb in d.metadata)]
    elif d.a.metadata and d.b.metadata:
        lines = ["setup: the same chip, symbol, arguments and tiling"]
    else:
        lines = ["setup: unknown (a trace without metadata, such as a CSV trace)"]
    lines += [f"A: {d.a.source}: {d.a.title}, {_cyc(d.a, d.a.cycles)}, cores {list(d.a.cores)}",
              f"B: {d.b.source}: {d.b.title}, {_cyc(d.b, d.b.cycles)}, cores {list(d.b.cores)}"]
    delta, pct = _change(d.total)
    run = f"run cycles: A {d.total.a}, B {d.total.b}, change {delta} ({pct})"
    clock_a, clock_b = d.a.clock_hz, d.b.clock_hz
    if clock_a == clock_b:  # the same clock (or neither known): cycles compare the speed
        lines.append(run + _speed(d.a.cycles, d.b.cycles))
    elif clock_a and clock_b:  # different clocks: only time compares the speed
        ta, tb = d.a.cycles / clock_a, d.b.cycles / clock_b
        lines += [run,
                  f"run time (the clocks differ, {clock_a / 1e9:g} GHz -> {clock_b / 1e9:g} GHz, so time, not cycles, "
                  f"compares the speed): A {ta * 1e6:.3f} us, B {tb * 1e6:.3f} us{_speed(ta, tb)}"]
    else:
        lines.append(f"{run}, no speed comparison ({'A' if not clock_a else 'B'}'s clock is unknown)")
    lines.append("")
    if d.calls:
        crows = [["call", "A", "B", "change", "%"]] + [[r.label, _fmt(r.a), _fmt(r.b), *_change(r)] for r in d.calls]
        lines += ["per call (cycles):", _table(crows), ""]
    lines.append("per core (cycles):")
    head = ["core"]
    for label, _ in _CORE_FIELDS:
        head += [f"{label} A", f"{label} B", "change"]
    rows = [head]
    for core, drs in d.cores:
        row = [str(core)]
        for r in drs:
            row += [_fmt(r.a), _fmt(r.b), _change(r)[0]]
        rows.append(row)
    lines += [_table(rows), "(" + TABLE_LEGEND.replace("\n", " ") + ")", "", "per unit (busy cycles):"]
    urows = [["unit", "A", "B", "change", "%"]]
    for r in d.units:
        urows.append([r.label, _fmt(r.a), _fmt(r.b), *_change(r)])
    lines.append(_table(urows))
    return "\n".join(lines)


__all__ = ["MAX_TRACE_BYTES", "MAX_TRACE_DEPTH", "MAX_TRACE_CYCLE",
           "Trace", "TraceFileError", "load_trace", "trace_of_run", "CriticalPath", "critical_path", "Stall",
           "stalls", "TraceSummary", "summarize", "summary_text", "critical_text", "calls_text", "DiffRow", "TraceDiff",
           "diff_traces", "diff_text", "unit_busy", "unit_label"]
