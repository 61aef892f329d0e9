"""Races between cores: the plan check's rule ``core-race``.

The cores run a phase's tiles at the same time, each walking its own, and walk on into the next phase unless a
barrier follows it; what orders one core's transfers against another's is a barrier, and otherwise only chains of
waits through the staged buffers (``Tile.fills`` / ``uses``, whose own rules judge the accesses to their bytes).
The rule does not follow such chains: between two barriers, in shared memory outside the bytes of staged buffers,
two cores touching the same bytes, one of them writing, is refused as a race (which write lands last, or whether a
read sees the write, would depend on the cores' speeds); a plan that means to order them puts a barrier between.
(A core's own accesses are ordered by its walk: the rule ``store-race`` judges those.)  Private memory and the
per-core staging levels are each core's own, the same address naming other bytes on another core, and are left
out.

The work: the accesses (the plan check gives the sides another core may touch: in the outputs or a shared staging
level) sorted by their first byte and swept once, each compared with the other cores' accesses still open at it
(writes with all, reads with writes).  Two whose spans overlap are judged by their bytes
(:mod:`sim.model.block_overlap`: the column blocks of a matrix that cores split by columns overlap in span, not in
bytes), each pair of layouts at each distance judged once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sim.model.block_overlap import Layout, layout_of, sides_meet
from sim.model.plan import Tile, Transfer

#: One side of a transfer: ``(lo, hi, core, writes, transfer, tile, kind, index, phase)``: bytes ``[lo, hi)`` that
#: ``core`` reads (``writes`` False: a source) or writes (a destination), transfer ``index`` of its tile's loads or
#: stores (``kind``), in the phase named ``phase``.  (A plain tuple: a plan has one per transfer side.)
Access = tuple[int, int, int, bool, Transfer, Tile, str, int, str]


@dataclass(frozen=True)
class Race:
    """Two accesses of different cores that share bytes ``shared`` (a span of them), one writing (``later`` is
    the one the sweep met second)."""

    earlier: Access
    later: Access
    shared: tuple[int, int]


class CoreRaces:
    """The rule over the phases of one plan; ``shared(addr)`` says whether the byte at ``addr`` is in shared
    memory (the same bytes for every core)."""

    def __init__(self, shared: Callable[[int], bool]):
        self.shared = shared
        self._meets: dict[tuple[Any, ...], bool] = {}  # (both layouts but their first bytes, distance) -> verdict
        self._layouts: dict[tuple[int, bool], tuple[Transfer, Layout]] = {}  # (id of a transfer, its side) -> the
        # transfer (kept, so that its id is not reused) and its layout

    def first(self, reads: Sequence[Access], writes: Sequence[Access]) -> Race | None:
        """The first race between two barriers (in address order), or None: one sweep over every access sorted by
        its first byte, each compared with the other cores' accesses still open at it, one of the two writing."""
        if not writes:
            return None
        ordered = sorted([*writes, *reads], key=lambda a: (a[0], not a[3], a[2], a[1]))
        open_writes: list[Access] = []
        open_reads: list[Access] = []
        for a in ordered:
            lo = a[0]
            open_writes = [o for o in open_writes if o[1] > lo]
            if a[3]:
                open_reads = [o for o in open_reads if o[1] > lo]
                against = open_writes + open_reads
            else:
                against = open_writes
            for o in against:
                if o[2] != a[2] and self._meet(o, a):
                    return Race(o, a, (lo, min(a[1], o[1])))
            if a[3]:
                open_writes.append(a)
            else:
                open_reads.append(a)
        return None

    def _meet(self, a: Access, b: Access) -> bool:
        """Whether the bytes of ``a`` and ``b`` (spans overlapping) meet, in shared memory; judged once per pair
        of layouts at one distance."""
        (a_base, a_run, a_dims), (b_base, b_run, b_dims) = self._layout(a), self._layout(b)
        key = (a_run, a_dims, b_run, b_dims, b_base - a_base)
        got = self._meets.get(key)
        if got is None:
            got = self._meets[key] = sides_meet((0, a_run, a_dims), (b_base - a_base, b_run, b_dims))
        return got and self.shared(max(a[0], b[0]))

    def _layout(self, a: Access) -> Layout:
        """The layout of access ``a``'s bytes, worked out once per transfer side."""
        key = (id(a[4]), a[3])
        got = self._layouts.get(key)
        if got is None:
            got = self._layouts[key] = (a[4], layout_of(a[4], "dst" if a[3] else "src"))  # (its id stays its own)
        return got[1]


