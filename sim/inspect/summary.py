"""The per-core summary of a run's events, and the run summary text (the roofline itself is :mod:`sim.timing`'s)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from sim.engine.events import DMA_KINDS, TraceEvent
from sim.inspect.broadcast_reads import repeated_reads
from sim.inspect.dram_turns import turns_text
from sim.model.plan import Plan
from sim.model.target import Target
from sim.timing import DMA_ENGINES, ROWS_SUFFIX, Roofline, compute_cycles, loop_cost, region_of_resource

if TYPE_CHECKING:
    from sim.inspect.run import Run


def _union(intervals: Sequence[tuple[int, int]]) -> int:
    """Cycles covered by at least one of the half-open ``intervals``."""
    total = 0
    cur: tuple[int, int] | None = None  # the run of overlapping intervals being merged
    for s, e in sorted(intervals):
        if cur is None or s > cur[1]:
            if cur is not None:
                total += cur[1] - cur[0]
            cur = (s, e)
        else:
            cur = (cur[0], max(cur[1], e))
    if cur is not None:
        total += cur[1] - cur[0]
    return total


@dataclass(frozen=True)
class CoreSummary:
    """Where one core's cycles went: every cycle of the run counted in exactly one column.

    ``compute_only_cycles`` (the vector unit working, no DMA moving data),
    ``overlap_cycles`` (the vector unit working while a DMA moves data),
    ``dma_only_cycles`` (a DMA moving data, the vector unit idle),
    ``wait_cycles`` (neither: only the cycles a DMA lost to sharing bandwidth
    with other streams, a barrier wait or the group launch) and
    ``idle_cycles`` (nothing at all, e.g. after the core's last event) add up
    to ``run_cycles``.  A DMA "moves data" from its issue to its landing except
    for the cycles sharing cost it: its stream beyond what it would take with
    its regions and engine to itself (``wait_cycles`` of its trace event),
    counted from its stream's start (``wait_start``).
    """

    core: int
    end_cycle: int
    run_cycles: int
    compute_only_cycles: int
    overlap_cycles: int
    dma_only_cycles: int
    wait_cycles: int
    idle_cycles: int
    flops: int
    bytes_by_region: Mapping[str, int]

    @property
    def busy_cycles(self) -> int:
        """Cycles the vector unit or a DMA was working (compute + overlap + DMA)."""
        return self.compute_only_cycles + self.overlap_cycles + self.dma_only_cycles

    @property
    def compute_cycles(self) -> int:
        """Cycles the vector unit was working (compute + overlap)."""
        return self.compute_only_cycles + self.overlap_cycles

    @property
    def dma_cycles(self) -> int:
        """Cycles a DMA was moving data (overlap + DMA only)."""
        return self.overlap_cycles + self.dma_only_cycles

    @property
    def utilisation(self) -> float:
        """Busy cycles over the run's."""
        return self.busy_cycles / self.run_cycles if self.run_cycles else 0.0

    @property
    def compute_utilisation(self) -> float:
        """The vector unit's share of the run."""
        return self.compute_cycles / self.run_cycles if self.run_cycles else 0.0


def _dma_moving(e: TraceEvent) -> list[tuple[int, int]]:
    """A DMA's interval less the cycles sharing bandwidth cost it (counted from its stream's start)."""
    if not e.wait_cycles or e.wait_start is None:
        return [(e.start, e.end)]
    w0, w1 = e.wait_start, e.wait_start + e.wait_cycles
    return [(lo, hi) for lo, hi in ((e.start, min(w0, e.end)), (max(w1, e.start), e.end)) if hi > lo]


def _partition(compute: Sequence[tuple[int, int]], dma: Sequence[tuple[int, int]], wait: Sequence[tuple[int, int]],
               total: int) -> tuple[int, int, int, int, int]:
    """Cycles of ``[0, total)`` that are (compute only, overlap, DMA only, wait only, idle).

    A sweep over the spans' ends, in numpy: a layer-sized run has hundreds of thousands of spans.
    """
    cuts = [np.array([0, total], np.int64)]
    clipped = []
    for spans in (compute, dma, wait):
        a = np.array(spans, np.int64).reshape(-1, 2)
        a = np.clip(a, 0, total)
        a = a[a[:, 1] > a[:, 0]]
        clipped.append(a)
        cuts.append(a.reshape(-1))
    times = np.unique(np.concatenate(cuts))
    lengths = np.diff(times)
    starts = times[:-1]
    # How many spans of each kind cover [times[i], times[i+1]): begun at or before it, not yet ended.
    c, d, w = ((np.searchsorted(np.sort(a[:, 0]), starts, "right") - np.searchsorted(np.sort(a[:, 1]), starts, "right"))
               > 0 for a in clipped)
    compute_only = int(lengths[c & ~d].sum())
    overlap = int(lengths[c & d].sum())
    dma_only = int(lengths[~c & d].sum())
    wait_only = int(lengths[~c & ~d & w].sum())
    return compute_only, overlap, dma_only, wait_only, int(total - compute_only - overlap - dma_only - wait_only)


class _CoreSpans:
    """One core's events sorted into the spans and totals its summary needs (collected in one pass)."""

    def __init__(self) -> None:
        self.compute: list[tuple[int, int]] = []
        self.dma: list[tuple[int, int]] = []
        self.wait: list[tuple[int, int]] = []
        self.by_region: dict[str, int] = defaultdict(int)
        self.end = 0
        self.flops = 0

    def add(self, e: TraceEvent, reads_source: bool = True) -> None:
        kind = e.kind
        if kind == "compute":
            self.compute.append((e.start, e.end))
        elif kind in ("dma_in", "dma_out"):
            start, end, w0 = e.start, e.end, e.wait_start
            if e.wait_cycles and w0 is not None:
                # _dma_moving's spans, without its lists: a layer's run has tens of thousands of these.
                w1 = w0 + e.wait_cycles
                if min(w0, end) > start:
                    self.dma.append((start, min(w0, end)))
                if end > max(w1, start):
                    self.dma.append((max(w1, start), end))
                self.wait.append((w0, w1))
            else:
                self.dma.append((start, end))
            if reads_source:  # (a broadcast's later members read nothing: the first one's read serves them)
                self.by_region[e.src_region or ""] += e.bytes
            if e.dst_region != e.src_region or not reads_source:
                self.by_region[e.dst_region or ""] += e.bytes
        elif kind in ("barrier_wait", "launch"):
            self.wait.append((e.start, e.end))
        self.end = max(self.end, e.end)
        self.flops += e.flops


def core_summaries(events: Sequence[TraceEvent], cores: Sequence[int], total_cycles: int,
                   regions: Mapping[str, Mapping] | None = None) -> list[CoreSummary]:
    """Per core, the run's cycles split into compute / overlap / DMA / wait / idle, plus flops and bytes per region
    (a broadcast's source bytes counted once, on its first member's core: ``regions``, the trace's region facts, say
    which regions are shared; :mod:`sim.inspect.broadcast_reads`)."""
    by_core: dict[int, _CoreSpans] = defaultdict(_CoreSpans)
    repeats = repeated_reads(events, regions)
    for i, e in enumerate(events):
        by_core[e.core].add(e, i not in repeats)
    out = []
    for core in cores:
        spans = by_core.get(core) or _CoreSpans()
        total = max(total_cycles, spans.end)
        c, o, d, w, i = _partition(spans.compute, spans.dma, spans.wait, total)
        out.append(CoreSummary(core=core, end_cycle=spans.end, run_cycles=total, compute_only_cycles=c,
                               overlap_cycles=o, dma_only_cycles=d, wait_cycles=w, idle_cycles=i, flops=spans.flops,
                               bytes_by_region=dict(sorted(spans.by_region.items()))))
    return out


#: What the columns of :func:`summary_table` count (printed above it).
TABLE_LEGEND = ("per core, every cycle of the run counted once: compute (vector unit alone) + overlap (vector "
                "unit while a DMA moves data)\n+ dma (a DMA moving data alone) + wait (only cycles a DMA lost to "
                "sharing bandwidth, a barrier or the launch) + idle = the run;\nbusy% = compute + overlap + dma, "
                "compute% = "
                "compute + overlap, as shares of the run")


def summary_table(summaries: Sequence[CoreSummary], legend: bool = True) -> str:
    """The per-core summary as an aligned text table (with the columns' legend above it)."""
    regions = sorted({r for s in summaries for r in s.bytes_by_region if r})
    head = ["core", "end", "compute", "overlap", "dma", "wait", "idle", "busy%", "compute%"] + \
        [f"{r} bytes" for r in regions]
    rows = [head]
    for s in summaries:
        rows.append([str(s.core), str(s.end_cycle), str(s.compute_only_cycles), str(s.overlap_cycles),
                     str(s.dma_only_cycles), str(s.wait_cycles), str(s.idle_cycles), f"{100 * s.utilisation:.1f}",
                     f"{100 * s.compute_utilisation:.1f}"]
                    + [str(s.bytes_by_region.get(r, 0)) for r in regions])
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    table = "\n".join("  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in rows)
    return (TABLE_LEGEND + "\n" + table) if legend else table


def resource_shares(rf: Roofline, summaries: Sequence[CoreSummary], cycles: int) -> dict[str, float]:
    """How much of the run each resource was needed for, as a fraction of the run's cycles.

    ``compute``: the busiest core's functional units, as the trace shows it
    (its tiles' loops with their overheads, fill, recurrences and epilogues);
    each region: the bytes the plan moves through it at the full bandwidth the
    cores can draw; each DRAM's rows opened at its activation rate (``ddr rows``);
    and the DMA engines: the busiest core's bytes at its engines' total rate (the
    roofline's figures over the run).  A share near 1 is a resource the run could
    not have used more of.
    """
    if not cycles:
        return {}
    shares = {name: c / cycles for name, c in rf.resource_cycles.items() if name != "compute"}
    shares["compute"] = max((s.compute_cycles for s in summaries), default=0) / cycles
    return shares


def load_imbalance(summaries: Sequence[CoreSummary]) -> float:
    """The busiest core's busy cycles over the mean of every core's (idle cores count as 0): 1.0 when the work is
    spread evenly, the number of cores when one core did it all."""
    busy = [s.busy_cycles for s in summaries]
    mean = sum(busy) / len(busy) if busy else 0
    return max(busy) / mean if mean else 1.0


def balance_text(run: Run) -> str:
    """One line: which cores of the call idled (the plan gave them no work) and the load imbalance."""
    idle = run.idle_cores
    imbalance = load_imbalance(run.summaries())
    words = f"load imbalance {imbalance:.2f} (the busiest core's busy cycles over the mean of {len(run.cores)} cores)"
    computing = {core for phase in run.plan.phases for core, tiles in phase.tiles.items()
                 if any(t.compute is not None for t in tiles)}
    movers = [c for c in run.cores if c not in computing and c not in idle]
    tiling = run.tiling
    which = f"the tiling {tiling.tiling}" if tiling is not None and tiling.tiling else "the plan"
    parts = []
    if idle:
        parts.append(f"cores {list(idle)} idle: {which} gives them no work ({len(idle)} of {len(run.cores)} cores)")
    if movers:
        parts.append(f"cores {movers} compute nothing: {which} gives them only transfers")
    if not parts:
        parts.append("every core of the call computed")
    return "; ".join(parts + [words])


def limiting_resource(rf: Roofline, summaries: Sequence[CoreSummary], cycles: int) -> str:
    """The resource the run was limited by: the one with the largest :func:`resource_shares` share.

    The roofline's ``bound_by`` names the resource with the largest lower
    bound; this one looks at the run itself, so the vector unit's overheads
    (which the bound leaves out) count, and a run whose cores computed almost
    all the time is called compute-limited even when another resource's bound
    comes close.
    """
    shares = resource_shares(rf, summaries, cycles)
    return max(shares.items(), key=lambda kv: (kv[1], kv[0] == "compute", kv[0]))[0] if shares else rf.bound_by


@dataclass(frozen=True)
class LoopSummary:
    """One kind of inner loop across a plan's tiles (the same label, initiation interval and bound): how many
    tiles ran it, its trips and entries in all, and the cycles it was charged (fill, overheads and epilogues
    included)."""

    label: str
    ii: int
    bound_by: str
    tiles: int
    trips: int
    cycles: int


def loop_summaries(plan: Plan, target: Target) -> tuple[list[LoopSummary], int]:
    """The plan's inner loops grouped by (label, II, bound), most cycles first; with the cycles of every tile's
    compute (all cores: the loops and the tile overheads)."""
    groups: dict[tuple[str, int, str], list[int]] = {}
    total = 0
    # Tiles share computes (and computes loops): each is priced once, then counted per tile.
    priced: dict[int, tuple[int, list[tuple[tuple[str, int, str], int, int]]]] = {}
    for phase in plan.phases:
        for tiles in phase.tiles.values():
            for tile in tiles:
                c = tile.compute
                if c is None:
                    continue
                got = priced.get(id(c))
                if got is None:
                    costs = [loop_cost(loop, target.core) for loop in c.loops]
                    got = priced[id(c)] = (compute_cycles(c, target),
                                           [((k.label or "loop", k.ii, k.bound_by), k.trips * k.entries, k.cycles)
                                            for k in costs])
                total += got[0]
                for key, trips, cycles in got[1]:
                    g = groups.setdefault(key, [0, 0, 0])
                    g[0] += 1
                    g[1] += trips
                    g[2] += cycles
    rows = [LoopSummary(label, ii, by, n, trips, cycles) for (label, ii, by), (n, trips, cycles) in groups.items()]
    rows.sort(key=lambda r: (-r.cycles, r.label, r.ii, r.bound_by))
    return rows, total


def row_activations(events: Iterable[TraceEvent], target: Target) -> dict[str, tuple[int, int, int]]:
    """Per DRAM region with rows: (rows its transfers opened, the transfers that opened any, their bytes), from the
    trace's DMA events (a transfer's activations go to the side in a region with rows)."""
    out: dict[str, list[int]] = {}
    for e in events:
        if e.kind in DMA_KINDS and e.row_activations:
            name = e.src_region if _has_rows(target, e.src_region) else e.dst_region
            counts = out.setdefault(name or "", [0, 0, 0])
            counts[0] += e.row_activations
            counts[1] += 1
            counts[2] += e.bytes
    return {name: (a, n, b) for name, (a, n, b) in sorted(out.items())}


def _has_rows(target: Target, name: str | None) -> bool:
    if name is None:
        return False
    try:
        return target.region(name).rows is not None
    except KeyError:
        return False


def rows_text(events: Iterable[TraceEvent], target: Target, cycles: int) -> str | None:
    """The summary's line on DRAM rows: per region, the rows opened, bytes per activation, and how busy the
    device's activation rate (tFAW) alone would be over the run (None when no transfer opened a row)."""
    counts = row_activations(events, target)
    if not counts:
        return None
    parts = []
    for name, (activations, transfers, nbytes) in counts.items():
        rows = target.region(name).rows
        assert rows is not None
        busy = activations * rows.window_cycles / rows.activations_per_window / cycles if cycles else 0.0
        parts.append(f"{name}: {activations:,} row activations in {transfers:,} transfers (one per "
                     f"{nbytes / activations:,.0f} bytes), its activation rate busy {100 * busy:.1f}% of the run")
    return "DRAM rows: " + "; ".join(parts)


def sync_text(events: Sequence[TraceEvent], setup_cycles: int) -> str | None:
    """The summary's line on synchronised transfers: the groups, their members, and what the members waited for
    one another (from programmed to the group's stream start; None when the run had none)."""
    waits = [e.wait_start - e.start - setup_cycles for e in events
             if e.kind in DMA_KINDS and e.sync is not None and e.wait_start is not None]
    if not waits:
        return None
    groups = len({e.sync for e in events if e.kind in DMA_KINDS and e.sync is not None})
    return (f"synchronised transfers: {groups:,} group{'s' if groups != 1 else ''} of {len(waits):,} member "
            f"transfers; the members waited {sum(waits):,} cycles in all for one another (at most {max(waits):,})")


def loops_text(plan: Plan, target: Target, limit: int = 4) -> str | None:
    """The summary's line on the inner loops: the ``limit`` costliest kinds with their II, what sets it and their
    share of all compute cycles (None when no tile states loops)."""
    rows, total = loop_summaries(plan, target)
    if not rows or not total:
        return None
    shown = "; ".join(f"{r.label}: II {r.ii} set by {r.bound_by}, {r.trips:,} iterations in {r.tiles:,} tiles, "
                      f"{100 * r.cycles / total:.1f}% of compute" for r in rows[:limit])
    more = f"; {len(rows) - limit} more" if len(rows) > limit else ""
    return f"inner loops: {shown}{more}"


def run_summary_text(run: Run) -> str:
    """The printed summary of a :class:`~sim.inspect.run.Run`: per-core table, bound, limit, FLOP/s, precisions."""
    rf = run.roofline
    summaries = run.summaries()
    shares = resource_shares(rf, summaries, run.cycles)
    limit = limiting_resource(rf, summaries, run.cycles)
    head = (f"{run.symbol} on {run.target.name}: {run.cycles} cycles "
            f"({run.microseconds:.2f} us at {run.target.clock_hz / 1e9:g} GHz), cores {list(run.cores)}")
    if not run.numerics:
        head += "; timing only (numerics: false): no values computed, no outputs"
    others = ", ".join(f"{k} {100 * v:.1f}%" for k, v in sorted(shares.items()) if k != limit)
    lines = [
        head,
        summary_table(summaries),
        balance_text(run),
        f"roofline bound {rf.cycles:.0f} cycles, set by {rf.bound_by} "
        f"({100 * run.roofline_fraction:.1f}% of the bound achieved); cycles each resource needs alone: "
        + ", ".join(f"{k} {v:.0f}" for k, v in sorted(rf.resource_cycles.items())),
        f"limited by {limit}: {_share_words(limit, shares.get(limit, 0.0))}"
        + (f" (others: {others})" if others else ""),
        f"achieved {run.achieved_flops_per_second / 1e9:.2f} GFLOP/s of "
        f"{run.peak_flops_per_second / 1e9:.1f} GFLOP/s peak on {len(run.cores)} cores",
        f"precision: {run.precision_note}",
    ]
    rows = rows_text(run.events, run.target, run.cycles)
    if rows is not None:
        lines.append(rows)
    turns = turns_text(run.events, run.target)
    if turns is not None:
        lines.append(turns)
    synced = sync_text(run.events, run.target.dma.setup_cycles)
    if synced is not None:
        lines.append(synced)
    loops = loops_text(run.plan, run.target)
    if loops is not None:
        lines.append(loops)
    if run.user_kernel:  # a user's kernel: say where it came from
        lines.append(f"kernel: {run.kernel_origin}")
    if run.tiling is not None:
        lines.append(run.tiling.describe())
    return "\n".join(lines)


def _share_words(resource: str, share: float) -> str:
    if resource == "compute":
        return f"the busiest core's vector unit worked {100 * share:.1f}% of the run"
    if resource == DMA_ENGINES:
        return f"the busiest core's DMA engines at their full rate would be busy {100 * share:.1f}% of the run"
    if resource.endswith(ROWS_SUFFIX):
        return (f"the rows the transfers open in {region_of_resource(resource)}, at its activation rate, would "
                f"take {100 * share:.1f}% of the run")
    return f"{resource} at full bandwidth would be busy {100 * share:.1f}% of the run"
