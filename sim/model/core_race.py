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

The work: the writes (the plan check gives the sides another core may touch: in the outputs or a shared staging
level) sorted by their first byte and swept once, each compared with the other cores' writes still open at it; then
each read looked up among them by bisection.  Two whose spans overlap are judged by their bytes
(:mod:`sim.model.block_overlap`: the column blocks of a matrix that cores split by columns overlap in span, not in
bytes), each pair of layouts at each distance judged once.
"""

from __future__ import annotations

import bisect
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

    def first(self, reads: Sequence[Access], writes: Sequence[Access]) -> Race | None:
        """The first race between two barriers: among the ``writes`` in address order, then of the ``reads``
        against them; None if there is none."""
        if not writes:
            return None
        ordered = sorted(writes, key=lambda a: (a[0], a[2], a[1]))
        open_: list[Access] = []
        for a in ordered:  # writes against writes: a sweep, each against those still open at its first byte
            open_ = [o for o in open_ if o[1] > a[0]]
            for o in open_:
                if o[2] != a[2] and self._meet(o, a):
                    return Race(o, a, (a[0], min(a[1], o[1])))
            open_.append(a)
        # Reads against writes: the writes whose first byte is below the read's end and whose end is above its
        # first byte (the most an end reaches, running over the writes in order, stops the look back).
        starts = [w[0] for w in ordered]
        reach: list[int] = []
        for w in ordered:
            reach.append(max(reach[-1], w[1]) if reach else w[1])
        for r in reads:
            lo, hi, core = r[0], r[1], r[2]
            j = bisect.bisect_left(starts, hi) - 1
            while j >= 0 and reach[j] > lo:
                w = ordered[j]
                if w[1] > lo and w[2] != core and self._meet(w, r):
                    return Race(w, r, (max(lo, w[0]), min(hi, w[1])))
                j -= 1
        return None

    def _meet(self, a: Access, b: Access) -> bool:
        """Whether the bytes of ``a`` and ``b`` (spans overlapping) meet, in shared memory; judged once per pair
        of layouts at one distance."""
        (a_base, a_run, a_dims), (b_base, b_run, b_dims) = _layout(a), _layout(b)
        key = (a_run, a_dims, b_run, b_dims, b_base - a_base)
        got = self._meets.get(key)
        if got is None:
            got = self._meets[key] = sides_meet((0, a_run, a_dims), (b_base - a_base, b_run, b_dims))
        return got and self.shared(max(a[0], b[0]))


def _layout(a: Access) -> Layout:
    return layout_of(a[4], "dst" if a[3] else "src")
