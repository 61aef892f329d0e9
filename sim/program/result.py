"""What running a program gives: its calls on one timeline (:class:`ProgramRun`), their table, trace and summary.

The calls run back to back: call ``i`` starts when call ``i - 1`` ends, at its own launch (each call's first
cycles are the group launch the target gives it), so the program's cycles are the sum of its calls'.  Each
call's events are moved to its start and their phase named after the call (``bn3: reduce``), so that one trace
holds every call's events; the calls themselves are spans on a track of their own.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from sim.engine.events import TraceEvent
from sim.inspect.run import Run
from sim.inspect.summary import core_summaries, limiting_resource, summary_table
from sim.inspect.trace import Span, region_facts, write_trace
from sim.model.target import Target
from sim.program.planner import MemoryPlan


@dataclass(frozen=True)
class CallRun:
    """One call of a program run: its name, the cycle it started at on the program's timeline, and its Run."""

    name: str
    start_cycle: int
    run: Run

    @property
    def cycles(self) -> int:
        """The call's cycles, its launch included."""
        return self.run.cycles

    @property
    def end_cycle(self) -> int:
        """The cycle the call ended at (the next one's start)."""
        return self.start_cycle + self.run.cycles

    @property
    def limited_by(self) -> str:
        """The resource the call was limited by (:func:`sim.inspect.summary.limiting_resource`)."""
        r = self.run
        return limiting_resource(r.roofline, r.summaries(), r.cycles)

    def events(self) -> list[TraceEvent]:
        """The call's events on the program's timeline (moved to its start, their phase named after it)."""
        off = self.start_cycle
        return [e._replace(start=e.start + off, end=e.end + off,
                           wait_start=None if e.wait_start is None else e.wait_start + off,
                           phase=f"{self.name}: {e.phase}" if e.phase else self.name)
                for e in self.run.events]


@dataclass(frozen=True)
class CallRow:
    """A line of the per-call table: cycles, the share of the program, the roofline bound and what set it, and
    the resource the call was limited by."""

    name: str
    symbol: str
    start_cycle: int
    cycles: int
    share: float
    bound_cycles: float
    bound_by: str
    limited_by: str


@dataclass
class ProgramRun:
    """A program's calls run back to back on one simulator: the per-call table, one trace, the total."""

    name: str
    target: Target
    calls: tuple[CallRun, ...]
    plan: MemoryPlan
    numerics: bool = True
    wall_seconds: float = 0.0
    _events: list[TraceEvent] | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def cycles(self) -> int:
        """Cycles from the first call's launch to the last call's end."""
        return self.calls[-1].end_cycle if self.calls else 0

    @property
    def microseconds(self) -> float:
        """Simulated time of the program at the target's clock."""
        return self.cycles * 1e6 / self.target.clock_hz

    @property
    def cores(self) -> tuple[int, ...]:
        """Every core some call ran on."""
        return tuple(sorted({c for cr in self.calls for c in cr.run.cores}))

    @property
    def events(self) -> list[TraceEvent]:
        """Every call's events on the program's timeline (:meth:`CallRun.events`)."""
        if self._events is None:
            self._events = [e for cr in self.calls for e in cr.events()]
        return self._events

    @property
    def roofline_cycles(self) -> float:
        """The sum of the calls' roofline bounds: no schedule of these plans, one call after another, is shorter."""
        return sum(cr.run.roofline.cycles for cr in self.calls)

    def call(self, name: str) -> CallRun:
        """The call called ``name``."""
        for cr in self.calls:
            if cr.name == name:
                return cr
        raise KeyError(name)

    def rows(self) -> list[CallRow]:
        """The per-call table, in the program's order."""
        total = self.cycles or 1
        return [CallRow(cr.name, cr.run.symbol, cr.start_cycle, cr.cycles, cr.cycles / total,
                        cr.run.roofline.cycles, cr.run.roofline.bound_by, cr.limited_by) for cr in self.calls]

    def limited_by(self) -> str:
        """The resource the calls that took the most cycles together were limited by."""
        by: dict[str, int] = defaultdict(int)
        for row in self.rows():
            by[row.limited_by] += row.cycles
        return max(by.items(), key=lambda kv: (kv[1], kv[0]))[0] if by else ""

    def table_text(self) -> str:
        """The per-call table with its total line, aligned."""
        head = ["call", "symbol", "start", "cycles", "share", "bound", "bound by", "limited by"]
        rows = [head] + [[r.name, r.symbol, str(r.start_cycle), str(r.cycles), f"{100 * r.share:.1f}%",
                          f"{r.bound_cycles:.0f}", r.bound_by, r.limited_by] for r in self.rows()]
        rows.append(["total", f"{len(self.calls)} calls", "0", str(self.cycles), "100.0%",
                     f"{self.roofline_cycles:.0f}", "", self.limited_by()])
        widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
        return "\n".join("  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
                         for r in rows)

    def summary_text(self) -> str:
        """The printed summary: the total, the per-call table, the per-core table of the whole timeline."""
        head = (f"program {self.name} on {self.target.name}: {len(self.calls)} calls, {self.cycles} cycles "
                f"({self.microseconds:.2f} us at {self.target.clock_hz / 1e9:g} GHz), cores {list(self.cores)}")
        if not self.numerics:
            head += "; timing only (numerics: false): no values computed, no outputs"
        share = self.roofline_cycles / self.cycles if self.cycles else 0.0
        return "\n".join([head, self.table_text(),
                          f"roofline bound {self.roofline_cycles:.0f} cycles (the calls' bounds summed; "
                          f"{100 * share:.1f}% of it achieved)",
                          summary_table(core_summaries(self.events, self.cores, self.cycles,
                                                       region_facts(self.target)))])

    def metadata(self) -> dict:
        """The trace's metadata: the chip, the program, its cycles and bound, and each call's line."""
        return {"target": self.target.name, "symbol": f"program {self.name}", "program": self.name,
                "cycles": self.cycles, "clock_hz": self.target.clock_hz, "cores": list(self.cores),
                "precision": ", ".join(sorted({cr.run.call.precision for cr in self.calls})),
                "numerics": bool(self.numerics), "roofline_cycles": round(self.roofline_cycles, 3),
                "bound_by": "calls", "limited_by": self.limited_by(), "regions": region_facts(self.target),
                "calls": [{"name": r.name, "symbol": r.symbol, "start_cycle": r.start_cycle, "cycles": r.cycles,
                           "roofline_cycles": round(r.bound_cycles, 3), "bound_by": r.bound_by,
                           "limited_by": r.limited_by} for r in self.rows()]}

    def spans(self) -> list[Span]:
        """The calls as spans of the trace's ``calls`` track."""
        return [Span(r.name, r.start_cycle, r.start_cycle + r.cycles,
                     {"symbol": r.symbol, "share": round(r.share, 4), "bound_by": r.bound_by,
                      "limited_by": r.limited_by}) for r in self.rows()]

    def write_trace(self, path: str | Path) -> Path:
        """One trace of every call: Chrome trace JSON (the calls as named slices), or CSV for a ``.csv`` path."""
        return write_trace(path, self.events, self.target.clock_hz, self.metadata(), self.spans())


__all__ = ["CallRun", "CallRow", "ProgramRun"]
