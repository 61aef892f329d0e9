"""What must land before each core's first compute: a bound on a plan's cycles that the computes alone miss.

A core runs its computes one after another, so no run of a plan ends before the cycle its first compute begins
plus all its computes' cycles.  That first cycle is bounded from the plan's structure, as the engine runs a plan:
nothing runs before the launch (``launch_overhead_cycles``); a compute tile's loads start only once every buffer
generation it uses is filled (every tile that fills it, on any core, has landed its loads), and so do the loads of
a staging tile that copies from another buffer; and a set of transfers issued together lands no sooner than
:func:`sim.timing.landed_cycles` says (the DMA setup, each alone, all through the shared regions and engines).

So a core's first compute begins no sooner than the launch, then the fills of the buffers its first compute tile
uses, then that tile's own loads.  And since the cores' first fills must all land before the last of those cores
can begin, the one that waits longest waits for all of them: that bound holds for whichever of those cores it
is, so with the least of their own loads and computes after it.  Contention, rows left open, an engine queue: all
else only delays a run, which is why this stays a lower bound (the tiling search prunes with it: a candidate that
cannot come within the tolerance of the cheapest is not simulated).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from sim.model.buffer_reads import buffer_spans, read_uses
from sim.model.memory import MemoryMap
from sim.model.plan import AnyBufferRef, Phase, Plan, Tile, Transfer, parse_buffer_ref
from sim.model.target import Region, Target
from sim.timing import landed_cycles


@dataclass(frozen=True)
class Startup:
    """When each core's first compute can begin at the earliest, in any run of a plan (cycles from the start)."""

    #: Per core with a compute: no run begins its first compute sooner.
    first_compute_cycles: Mapping[int, int]
    #: Per such core: the cycles from its first compute tile's buffers filled to its own loads landed (0 unless its
    #: loads read every one of those buffers: else they may stream before the last fill,
    #: :mod:`sim.model.buffer_reads`).
    own_load_cycles: Mapping[int, int]
    #: No run has the buffers of every first compute of the first phase filled sooner (None: none uses one).
    all_filled_cycles: int | None
    #: The cores whose first compute (in the first phase) uses a buffer: one of them waits for all those fills.
    waiting_cores: tuple[int, ...] = ()

    def bound_cycles(self, serial_cycles: Mapping[int, int]) -> int:
        """Cycles no run can beat, given each core's computes one after another (``serial_cycles``:
        :func:`sim.timing.serial_compute_cycles`): each core's first compute's start plus its computes, and the
        last fills to land plus the least that can follow them on a core that waited for them."""
        cores = [c for c in self.first_compute_cycles if c in serial_cycles]
        each = max((self.first_compute_cycles[c] + serial_cycles[c] for c in cores), default=0)
        waiting = [c for c in self.waiting_cores if c in serial_cycles]
        if self.all_filled_cycles is None or not waiting:
            return each
        return max(each, self.all_filled_cycles + min(self.own_load_cycles[c] + serial_cycles[c] for c in waiting))


class _Ends:
    """Each transfer with the regions holding its two sides (one left out where a side is not one region's
    bytes: the plan check's to refuse, nothing to bound)."""

    def __init__(self, target: Target):
        self.mmap, self.target = MemoryMap(target), target

    def of(self, pairs: Iterable[tuple[int, Transfer]]) -> Iterator[tuple[int, Transfer, Region, Region]]:
        for core, t in pairs:
            (slo, shi), (dlo, dhi) = t.span("src"), t.span("dst")
            src, dst = self.mmap.region_of(slo, shi - slo), self.mmap.region_of(dlo, dhi - dlo)
            if src is not None and dst is not None:
                yield core, t, src, dst

    def landed(self, pairs: Iterable[tuple[int, Transfer]]) -> int:
        """:func:`sim.timing.landed_cycles` of ``(core, transfer)`` pairs."""
        return landed_cycles(self.of(pairs), self.target)


class _PhaseFills:
    """One phase's staging tiles by the buffer generations they fill, and when each generation is filled at the
    earliest (cycles after the launch)."""

    def __init__(self, phase: Phase, ends: _Ends):
        self.ends = ends
        self.fillers: dict[tuple[str, int], list[tuple[int, Tile]]] = {}
        for core, tiles in phase.tiles.items():
            for tile in tiles:
                for ref in tile.fills:
                    self.fillers.setdefault(parse_buffer_ref(ref), []).append((core, tile))
        self._filled: dict[tuple[str, int], int] = {}
        self.spans = buffer_spans(phase)  # what a tile's loads must wait for (sim.model.buffer_reads)

    def fillers_of(self, uses: Iterable[AnyBufferRef]) -> list[tuple[int, Tile]]:
        """The staging tiles (with their cores) that fill what ``uses`` names."""
        return [f for ref in uses for f in self.fillers.get(parse_buffer_ref(ref), ())]

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
        cycles = self.ends.landed((c, t) for c, tile in fillers for t in tile.loads)
        for core, tile in fillers:
            before = max((self._filled_after(k, chain + (key,)) for k in map(parse_buffer_ref, tile.uses)
                          if k not in chain and k != key), default=0)
            if before:
                cycles = max(cycles, before + self.ends.landed((core, t) for t in tile.loads))
        self._filled[key] = cycles
        return cycles


def startup(plan: Plan, target: Target) -> Startup:
    """The :class:`Startup` of ``plan`` on ``target``: from each core's first tile with a compute (in the first
    phase it computes in), the buffers that tile uses and its own loads; the other tiles are not looked at beyond
    the staging tiles of that phase."""
    ends = _Ends(target)
    launch = target.launch_overhead_cycles
    first: dict[int, int] = {}
    own: dict[int, int] = {}
    union: dict[int, tuple[int, Tile]] = {}
    waiting: list[int] = []
    fills: dict[int, _PhaseFills] = {}
    latest_ready = 0
    for core in plan.cores:
        for i, phase in enumerate(plan.phases):
            tile = next((t for t in phase.tiles.get(core, ()) if t.compute is not None), None)
            if tile is None:
                continue
            ready = ready_read = 0  # (after the launch) all its buffers filled; those its loads read filled
            reads_all = True  # whether its loads read every buffer it uses (else they start before some fill)
            if tile.uses:
                phase_fills = fills.get(i)
                if phase_fills is None:
                    phase_fills = fills[i] = _PhaseFills(phase, ends)
                ready = phase_fills.ready(tile.uses)
                read = read_uses(tile, phase_fills.spans)
                ready_read, reads_all = phase_fills.ready(read), len(read) == len(tile.uses)
                if i == 0:  # (a later phase begins after a barrier: its fills are not all issued at the launch)
                    waiting.append(core)
                    latest_ready = max(latest_ready, ready)
                    for c, filler in phase_fills.fillers_of(tile.uses):
                        union[id(filler)] = (c, filler)
            loaded = ends.landed((core, t) for t in tile.loads)
            # Its loads start once the buffers they read are filled; the compute waits for them and for all its
            # buffers.  Loads that do not read every buffer may have landed before the last fill: nothing of them
            # need follow it.
            own[core] = loaded if reads_all else 0
            first[core] = launch + max(ready_read + loaded, ready)
            break
    together = ends.landed((c, t) for c, tile in union.values() for t in tile.loads)
    return Startup(first, own, launch + max(together, latest_ready) if waiting else None, tuple(waiting))
