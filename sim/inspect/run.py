"""The outcome of one kernel call (:class:`Run`): what ``Simulator.call`` returns, and what the summaries, traces
and reports of :mod:`sim.inspect` read.  Below the facade, so that those modules take it typed."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from sim.engine.collector import collector_paused
from sim.engine.events import TraceEvent
from sim.inspect.summary import CoreSummary, core_summaries, load_imbalance, run_summary_text
from sim.inspect.trace import region_facts, run_metadata, write_trace
from sim.model.call import BoundCall
from sim.model.plan import Plan
from sim.model.target import Target
from sim.timing import Roofline, peak_flops_per_cycle
from sim.tuning import TilingChoice


@dataclass
class Run:
    """The outcome of one kernel call: cycles, trace events, bounds and summaries."""

    symbol: str
    target: Target
    call: BoundCall
    plan: Plan
    cycles: int
    events: list[TraceEvent]
    roofline: Roofline
    wall_seconds: float
    args: dict = field(default_factory=dict)
    tiling: TilingChoice | None = None
    sim_events: int = 0  # SimPy events the simulation of the plan processed (the event engine's work)
    numerics: bool = True  # False: a timing-only run (no values computed)
    arg_kinds: Mapping[str, str] = field(default_factory=dict)  # argument name -> its ArgSpec kind
    precision_note: str = ""  # what the symbol stores in fp16 and fp32 and computes in (the registry's note)
    kernel_origin: str = ""  # where the symbol's kernel came from (shipped, a file, a module, an entry point)
    user_kernel: bool = False  # whether that kernel is a user's (registered, or from an installed package)
    # The summaries of the events as they were when last summarised (the text, metadata and trace all need them).
    _summaries: tuple[tuple[int, int, int], list[CoreSummary]] | None = field(default=None, init=False, repr=False,
                                                                              compare=False)

    @property
    def cores(self) -> tuple[int, ...]:
        """The cores the call ran on (Python ints, whatever ints the plan named them by)."""
        return tuple(map(int, self.plan.cores))

    @property
    def idle_cores(self) -> tuple[int, ...]:
        """The cores of the call that got no work in any phase of the plan: no tile, or only tiles with nothing to
        load, compute or store (a core's empty share of a staged block; empty when every core worked)."""
        working = {core for phase in self.plan.phases for core, tiles in phase.tiles.items()
                   if any(t.loads or t.stores or t.compute is not None for t in tiles)}
        return tuple(core for core in self.cores if core not in working)

    @property
    def load_imbalance(self) -> float:
        """The busiest core's busy cycles over the mean of every core of the call (1.0: perfectly even; idle
        cores count as 0)."""
        return load_imbalance(self.summaries())

    @property
    def microseconds(self) -> float:
        """Simulated time of the run at the target's clock."""
        return self.cycles * 1e6 / self.target.clock_hz

    @property
    def roofline_fraction(self) -> float:
        """Roofline bound over achieved cycles (1.0 would be a perfect run)."""
        return self.roofline.cycles / self.cycles if self.cycles else 0.0

    @property
    def achieved_flops_per_second(self) -> float:
        """Vector element operations per second of simulated time."""
        return self.roofline.total_flops / (self.cycles / self.target.clock_hz) if self.cycles else 0.0

    @property
    def peak_flops_per_second(self) -> float:
        """Peak of the cores used at the precision(s) the plan's tiles compute in."""
        return peak_flops_per_cycle(self.roofline, self.target, len(self.cores)) * self.target.clock_hz

    def summaries(self) -> list[CoreSummary]:
        """Per-core busy / compute / DMA / wait cycles and bytes per region."""
        key = (id(self.events), len(self.events), self.cycles)
        if self._summaries is None or self._summaries[0] != key:
            self._summaries = (key, core_summaries(self.events, self.cores, self.cycles, region_facts(self.target)))
        return list(self._summaries[1])

    def summary_text(self) -> str:
        """A human-readable summary: per-core table, bound and limit, FLOP/s, precisions, tiling."""
        return run_summary_text(self)

    def metadata(self) -> dict:
        """Run metadata written into traces (:func:`sim.inspect.trace.run_metadata`)."""
        return run_metadata(self)

    def write_trace(self, path: str | Path) -> Path:
        """Write the trace: Chrome trace JSON (Perfetto, chrome://tracing), or CSV for a ``.csv`` path."""
        with collector_paused():  # a trace is many small dicts made at once and kept until written
            return write_trace(path, self.events, self.target.clock_hz, self.metadata())
