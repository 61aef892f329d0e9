"""What must land before each core's first compute: a bound on a plan's cycles that the computes alone miss.

A core runs its computes one after another, so no run of a plan ends before the cycle its first compute begins
plus all its computes' cycles.  That first cycle is bounded from the plan's structure and the target's numbers,
as the engine runs a plan:

* nothing runs before the launch (``launch_overhead_cycles``);
* a transfer streams no byte before its DMA engine is programmed (``setup_cycles``) and lands the slower end's
  latency after its last byte streamed; alone, it streams for :func:`sim.timing.stream_cycles`;
* whoever streams, a shared region moves at most its bandwidth and opens DRAM rows at most at its activation rate,
  and a core's DMA engines move at most their total rate;
* a compute tile's loads start only once every buffer generation it uses is filled (every tile that fills it, on
  any core, has landed its loads), and so do a staging tile's that copies from another buffer.

So a core's first compute begins no sooner than the launch, then the fills of the buffers its first compute tile
uses (together, through the shared regions they cross), then that tile's own loads.  And since every core's first
fills must all land before the last of those cores can begin, the one that waits longest adds them all up: that
bound holds for whichever core it is, so with the least of the cores' remaining work.  Contention, rows left open,
an engine queue: anything else only delays a run, which is why this stays a lower bound (the tiling search prunes
with it: a candidate that cannot come within the tolerance of the cheapest is not simulated).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction

from sim.model.memory import MemoryMap
from sim.model.plan import AnyBufferRef, Phase, Plan, Tile, Transfer, parse_buffer_ref
from sim.model.target import Region, Target
from sim.timing import (
    activation_rate,
    exact_rate,
    side_rows,
    stream_cycles,
    stream_demands,
    transfer_bytes,
    transfer_latency_cycles,
)


@dataclass(frozen=True)
class Startup:
    """When each core's first compute can begin at the earliest, in any run of a plan (cycles from the start)."""

    #: Per core with a compute: no run begins its first compute sooner.
    first_compute_cycles: Mapping[int, int]
    #: Per such core: the cycles from its first compute tile's buffers filled to its own loads landed.
    own_load_cycles: Mapping[int, int]
    #: No run has every core's first compute's buffers filled sooner (the launch if none uses a buffer).
    all_filled_cycles: int

    def bound_cycles(self, serial_cycles: Mapping[int, int]) -> int:
        """Cycles no run can beat, given each core's computes one after another (``serial_cycles``:
        :func:`sim.timing.serial_compute_cycles`): each core's first compute's start plus its computes, and the
        last fills to land plus the least that can follow them on the core that waited for them."""
        cores = [c for c in self.first_compute_cycles if c in serial_cycles]
        if not cores:
            return 0
        each = max(self.first_compute_cycles[c] + serial_cycles[c] for c in cores)
        last = self.all_filled_cycles + min(self.own_load_cycles[c] + serial_cycles[c] for c in cores)
        return max(each, last)


class _Regions:
    """Each side of a transfer's region (None where a side is not one region's bytes: the plan check's to refuse,
    nothing to bound)."""

    def __init__(self, target: Target):
        self.mmap = MemoryMap(target)

    def of(self, t: Transfer) -> tuple[Region, Region] | None:
        (slo, shi), (dlo, dhi) = t.span("src"), t.span("dst")
        src, dst = self.mmap.region_of(slo, shi - slo), self.mmap.region_of(dlo, dhi - dlo)
        return None if src is None or dst is None else (src, dst)


def _landed_cycles(transfers: Iterable[tuple[int, Transfer]], target: Target, regions: _Regions) -> int:
    """The fewest cycles after they are issued (all at once) by which every one of ``transfers`` ``(core,
    transfer)`` has landed: each alone, and all together through each shared region's bandwidth and activation
    rate and each core's DMA engines (a synchronised transfer, which streams with its group, counts for nothing)."""
    dma = target.dma
    latest = Fraction(0)
    region_bytes: dict[str, int] = {}
    region_rows: dict[str, int] = {}
    region_latency: dict[str, int] = {}
    engine_bytes: dict[int, int] = {}
    engine_latency: dict[int, int] = {}
    by_name: dict[str, Region] = {}
    for core, t in transfers:
        ends = regions.of(t) if t.sync is None else None
        if ends is None:
            continue
        src, dst = ends
        latency = transfer_latency_cycles(src, dst)
        latest = max(latest, Fraction(stream_cycles(t, src, dst, dma) + latency))
        sb, db = transfer_bytes(t, src, dst)
        engine_bytes[core] = engine_bytes.get(core, 0) + max(sb, db)
        engine_latency[core] = min(engine_latency.get(core, latency), latency)
        for region, nbytes in stream_demands(src, dst, sb, db):
            if region.shared:
                by_name[region.name] = region
                region_bytes[region.name] = region_bytes.get(region.name, 0) + nbytes
                region_latency[region.name] = min(region_latency.get(region.name, latency), latency)
        for side, region in (("src", src), ("dst", dst)):
            if region.shared and region.rows is not None:
                region_rows[region.name] = region_rows.get(region.name, 0) + side_rows(t, side, region).activations
    engines_rate = exact_rate(dma.engine_bytes_per_cycle) * dma.engines_per_core
    for core, nbytes in engine_bytes.items():
        latest = max(latest, nbytes / engines_rate + engine_latency[core])
    for name, nbytes in region_bytes.items():
        region = by_name[name]
        latest = max(latest, nbytes / exact_rate(region.bandwidth_bytes_per_cycle) + region_latency[name])
        if name in region_rows:
            latest = max(latest, region_rows[name] / activation_rate(region) + region_latency[name])
    return dma.setup_cycles + int(latest) if latest else 0


class _PhaseFills:
    """One phase's staging tiles by the buffer generations they fill, and when each generation is filled at the
    earliest (cycles after the launch)."""

    def __init__(self, phase: Phase, target: Target, regions: _Regions):
        self.target, self.regions = target, regions
        self.fillers: dict[tuple[str, int], list[tuple[int, Tile]]] = {}
        for core, tiles in phase.tiles.items():
            for tile in tiles:
                for ref in tile.fills:
                    self.fillers.setdefault(parse_buffer_ref(ref), []).append((core, tile))
        self._filled: dict[tuple[str, int], int] = {}

    def fillers_of(self, uses: Iterable[AnyBufferRef]) -> list[tuple[int, Tile]]:
        """The staging tiles (with their cores) that fill what ``uses`` names, each once."""
        out: dict[int, tuple[int, Tile]] = {}
        for ref in uses:
            for core, tile in self.fillers.get(parse_buffer_ref(ref), ()):
                out[id(tile)] = (core, tile)
        return list(out.values())

    def ready(self, uses: Iterable[AnyBufferRef]) -> int:
        """Cycles after the launch before which not every generation ``uses`` names is filled."""
        return max((self._filled_after(parse_buffer_ref(ref), ()) for ref in uses), default=0)

    def _filled_after(self, key: tuple[str, int], chain: tuple[tuple[str, int], ...]) -> int:
        kept = self._filled.get(key)
        if kept is not None:
            return kept
        fillers = self.fillers.get(key, [])
        # Together, from the launch; and each filler after the buffers it copies from (a chain of copies; a cycle,
        # which the plan check refuses, is cut where it closes).
        cycles = _landed_cycles(((c, t) for c, tile in fillers for t in tile.loads), self.target, self.regions)
        for core, tile in fillers:
            before = max((self._filled_after(k, chain + (key,)) for k in map(parse_buffer_ref, tile.uses)
                          if k not in chain and k != key), default=0)
            if before:
                cycles = max(cycles, before + _landed_cycles(((core, t) for t in tile.loads), self.target,
                                                             self.regions))
        self._filled[key] = cycles
        return cycles


def startup(plan: Plan, target: Target) -> Startup:
    """The :class:`Startup` of ``plan`` on ``target``: from each core's first tile with a compute (in the first
    phase it computes in), the buffers that tile uses and its own loads; the other tiles are not looked at beyond
    the staging tiles of that phase."""
    regions = _Regions(target)
    launch = target.launch_overhead_cycles
    first: dict[int, int] = {}
    own: dict[int, int] = {}
    union: dict[int, tuple[int, Tile]] = {}
    fills: dict[int, _PhaseFills] = {}
    latest_ready = 0
    for core in plan.cores:
        for i, phase in enumerate(plan.phases):
            tile = next((t for t in phase.tiles.get(core, ()) if t.compute is not None), None)
            if tile is None:
                continue
            ready = 0  # (after the launch)
            if tile.uses:
                phase_fills = fills.get(i)
                if phase_fills is None:
                    phase_fills = fills[i] = _PhaseFills(phase, target, regions)
                ready = phase_fills.ready(tile.uses)
                if i == 0:  # (a later phase begins after a barrier: its fills are not all issued at the launch)
                    for c, filler in phase_fills.fillers_of(tile.uses):
                        union[id(filler)] = (c, filler)
            own[core] = _landed_cycles(((core, t) for t in tile.loads), target, regions)
            first[core] = launch + ready + own[core]
            latest_ready = max(latest_ready, ready)
            break
    together = _landed_cycles(((c, t) for c, tile in union.values() for t in tile.loads), target, regions)
    return Startup(first, own, launch + max(together, latest_ready))
