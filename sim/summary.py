"""Roofline bound of a plan and the per-core summary of a run's events."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Mapping, Sequence

from kernels.base import Plan
from sim.memory import MemoryMap
from sim.target import Target
from sim.trace import TraceEvent


@dataclass(frozen=True)
class Roofline:
    """The least cycles any schedule of a plan could take on the cores it uses.

    ``resource_cycles`` maps ``compute`` and each region name to the cycles that
    resource alone needs: vector operations (the math's flops and the extra ops,
    see ``Compute``) at the cores' peak; bytes over the bandwidth the
    plan's cores can draw from the region (its ports' bandwidth, as many ports as
    the cores' DMA engines can hold at once; times the cores for private
    regions, which every core has its own copy of).  The bound is their maximum; ``bound_by`` names it.
    """

    resource_cycles: Mapping[str, float]
    total_flops: int  # the math's flops only: the same for every tiling and storage precision of a call
    region_bytes: Mapping[str, int]
    extra_ops: int = 0  # vector operations beyond the math (conversions, empty lanes, repeated work)

    @property
    def cycles(self) -> float:
        """The bound in cycles."""
        return max(self.resource_cycles.values(), default=0.0)

    @property
    def bound_by(self) -> str:
        """The resource that sets the bound."""
        return max(self.resource_cycles.items(), key=lambda kv: (kv[1], kv[0]))[0] if self.resource_cycles else "-"


def roofline(plan: Plan, target: Target) -> Roofline:
    """The roofline bound of ``plan`` on ``target`` (peak compute and bandwidth of the cores it uses)."""
    mmap = MemoryMap(target)
    ops_by_prec: dict[str, int] = defaultdict(int)  # every vector operation, which the compute time counts
    flops = 0
    region_bytes: dict[str, int] = defaultdict(int)
    for phase in plan.phases:
        for tiles in phase.tiles.values():
            for tile in tiles:
                if tile.compute is not None:
                    ops_by_prec[tile.compute.precision] += tile.compute.vector_ops
                    flops += tile.compute.flops
                for t in tile.loads + tile.stores:
                    for side in ("src", "dst"):
                        lo, hi = t.span(side)
                        r = mmap.region_at(lo)
                        if r is not None:
                            region_bytes[r.name] += t.size_bytes
    n = len(plan.cores)
    cycles: dict[str, float] = {}
    compute = sum(f / (target.core.precisions[p].peak_flops_per_cycle * n)
                  for p, f in ops_by_prec.items() if p in target.core.precisions)
    cycles["compute"] = compute
    engines = target.dma.engines_per_core
    for name, b in region_bytes.items():
        r = target.region(name)
        # A transfer holds one port, and a core has only so many DMA engines: the cores of the plan can
        # keep at most min(ports, cores x engines) ports of a shared region busy (per core for a private one).
        if r.shared:
            bw = min(r.ports, n * engines) * r.port_bandwidth_bytes_per_cycle
        else:
            bw = min(r.ports, engines) * r.port_bandwidth_bytes_per_cycle * n
        cycles[name] = b / bw
    return Roofline(resource_cycles=dict(cycles), total_flops=flops, region_bytes=dict(region_bytes),
                    extra_ops=sum(ops_by_prec.values()) - flops)


def _union(intervals: Sequence[tuple[int, int]]) -> int:
    total, cur_s, cur_e = 0, None, None
    for s, e in sorted(intervals):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        total += cur_e - cur_s
    return total


@dataclass(frozen=True)
class CoreSummary:
    """Where one core's cycles went."""

    core: int
    end_cycle: int
    busy_cycles: int
    compute_cycles: int
    dma_cycles: int
    wait_cycles: int
    utilisation: float
    compute_utilisation: float
    flops: int
    bytes_by_region: Mapping[str, int]


def core_summaries(events: Sequence[TraceEvent], cores: Sequence[int], total_cycles: int) -> list[CoreSummary]:
    """Per-core busy / compute / DMA / wait cycles, utilisation (compute over the run) and bytes per region.

    Busy is the union of compute and DMA activity; DMA the union of the DMA
    engines' intervals; wait the union of barrier waits and the cycles DMAs spent
    queued for a memory port.  Utilisation is busy over the run's cycles,
    compute utilisation the vector unit's share of them.
    """
    out = []
    for core in cores:
        ev = [e for e in events if e.core == core]
        comp = [(e.start, e.end) for e in ev if e.kind == "compute"]
        dma = [(e.start, e.end) for e in ev if e.kind in ("dma_in", "dma_out")]
        wait = _union([(e.wait_start, e.wait_start + e.wait_cycles) for e in ev
                       if e.wait_cycles and e.wait_start is not None])
        by_region: dict[str, int] = defaultdict(int)
        for e in ev:
            if e.kind in ("dma_in", "dma_out"):
                by_region[e.src_region] += e.bytes
                if e.dst_region != e.src_region:
                    by_region[e.dst_region] += e.bytes
        compute_cycles = _union(comp)
        end = max((e.end for e in ev), default=0)
        out.append(CoreSummary(
            core=core, end_cycle=end, busy_cycles=_union(comp + dma), compute_cycles=compute_cycles,
            dma_cycles=_union(dma), wait_cycles=wait,
            utilisation=_union(comp + dma) / total_cycles if total_cycles else 0.0,
            compute_utilisation=compute_cycles / total_cycles if total_cycles else 0.0,
            flops=sum(e.flops for e in ev), bytes_by_region=dict(sorted(by_region.items()))))
    return out


def summary_table(summaries: Sequence[CoreSummary]) -> str:
    """The per-core summary as an aligned text table."""
    regions = sorted({r for s in summaries for r in s.bytes_by_region})
    head = ["core", "end", "busy", "compute", "dma", "wait", "busy%", "compute%"] + [f"{r} bytes" for r in regions]
    rows = [head]
    for s in summaries:
        rows.append([str(s.core), str(s.end_cycle), str(s.busy_cycles), str(s.compute_cycles),
                     str(s.dma_cycles), str(s.wait_cycles), f"{100 * s.utilisation:.1f}",
                     f"{100 * s.compute_utilisation:.1f}"]
                    + [str(s.bytes_by_region.get(r, 0)) for r in regions])
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    return "\n".join("  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in rows)
