"""What the engine makes of a transfer's two ends: their regions and stores, its bytes at each end, the DRAM rows
it opens.

:func:`resolve_transfer_ends` works them out for one transfer.  A plan moves a few shapes of block at thousands of
addresses, and what the engine makes of a block depends on its addresses only through the region and store each
side lies in and, in a DRAM, where it starts within a row (a shift by whole rows opens as many rows, its banks
only renamed, and a side's bursts are whole bursts of its runs wherever they lie; a copy within one DRAM walks
both sides' rows as one stream, so there how far apart its sides lie counts too, modulo the banks' period).  So
:class:`EndsMemo` keeps the answer per shape and placement: one answer per (shape, region and store of each side,
each DRAM side's offset within its row, a copy's distance between its sides), looked up for every other transfer
of the run that lies alike.
"""

from __future__ import annotations

import math

from sim.model.memo import memoized
from sim.model.memory import MAX_ACCESS_BYTES, SHARED, MemoryMap
from sim.model.plan import Transfer, TransferGeometry
from sim.model.target import Region
from sim.timing import row_demands, transfer_bytes

#: ``(source (region, store key), destination (region, store key), bytes, route, source bytes, destination bytes,
#: DRAM rows)``: what :func:`resolve_transfer_ends` gives (``route``: both ends' region names and store keys).
Ends = tuple


def resolve_transfer_ends(t: Transfer, core: int, mmap: MemoryMap) -> Ends:
    """What the engine needs of transfer ``t`` issued by ``core`` over the memory map ``mmap``: its source and
    destination ``(region, store key)``, its bytes, its route ``(source region, key, destination region, key)``,
    the bytes each end moves (whole bursts) and the DRAM rows it opens (:func:`sim.timing.row_demands`).
    MemoryFault (without the tile: the engine adds it) when a side is not one region's bytes."""
    src, dst = _resolved_side(mmap, core, t, "src"), _resolved_side(mmap, core, t, "dst")
    route = (src[0].name, src[1], dst[0].name, dst[1])
    rows = row_demands(t, src[0], dst[0])
    return (src, dst, t.size_bytes, route, *transfer_bytes(t, src[0], dst[0]), rows)


#: :func:`resolve_transfer_ends` worked out once per distinct transfer (:mod:`sim.model.memo`).
transfer_ends = memoized(resolve_transfer_ends)


def _resolved_side(mmap: MemoryMap, core: int, t: Transfer, side: str) -> tuple[Region, int]:
    lo, hi = t.span(side)
    region = mmap.region_of(lo, hi - lo)
    if region is not None and hi - lo <= MAX_ACCESS_BYTES:
        return region, (SHARED if region.shared else core)
    return mmap.resolve(lo, hi - lo, core, what=f"DMA {side}")  # the full check, for its message


class EndsMemo:
    """:func:`resolve_transfer_ends` over one memory map, kept per shape and placement (the module's docstring)."""

    __slots__ = ("_answers", "_last", "_map", "_shift")

    def __init__(self, mmap: MemoryMap) -> None:
        self._map = mmap
        self._answers: dict[tuple, Ends] = {}
        self._shift: dict[str, int] = {}  # region name -> the shift that keeps a side's rows (1: any)
        self._last: list[Region] = []  # the regions met so far (a plan's transfers keep to a few)

    def __call__(self, t: Transfer, core: int) -> Ends:
        """The ends of ``t`` issued by ``core`` (MemoryFault as :func:`resolve_transfer_ends`)."""
        geometry = t._geometry
        src, dst = t.src, t.dst
        src_r = self._holding(src + geometry.src_span[0], src + geometry.src_span[1])
        dst_r = self._holding(dst + geometry.dst_span[0], dst + geometry.dst_span[1])
        if src_r is None or dst_r is None:  # a side outside any one region: worked out (and refused) in full
            return resolve_transfer_ends(t, core, self._map)
        apart = self._apart(src_r, src, dst, geometry) if src_r is dst_r else None
        key = (geometry, src_r.name, (src - src_r.base) % self._shift_of(src_r), dst_r.name,
               (dst - dst_r.base) % self._shift_of(dst_r), apart,
               core if not (src_r.shared and dst_r.shared) else SHARED)
        got = self._answers.get(key)
        if got is None:
            got = self._answers[key] = resolve_transfer_ends(t, core, self._map)
        return got

    @staticmethod
    def _apart(region: Region, src: int, dst: int, geometry: TransferGeometry) -> tuple[bool, int] | None:
        """How far apart a copy within one region lies, as far as its rows tell (None where it has no rows): a
        copy within one DRAM walks its two sides' rows as one stream, so their banks' relation counts (the
        distance modulo the banks' period), and where the sides' rows may be the same rows, the distance itself
        (the same copy a period further on opens two rows of a bank where it opened one)."""
        rows = region.rows
        if rows is None:
            return None
        size, src, dst = rows.row_bytes, src - region.base, dst - region.base
        share = (src + geometry.src_span[0]) // size <= (dst + geometry.dst_span[1] - 1) // size and \
            (dst + geometry.dst_span[0]) // size <= (src + geometry.src_span[1] - 1) // size
        return (True, dst - src) if share else (False, (dst - src) % rows.period_bytes)

    def _holding(self, lo: int, hi: int) -> Region | None:
        """The region wholly holding ``[lo, hi)`` when the access is not too long for one (None otherwise)."""
        if not 0 < hi - lo <= MAX_ACCESS_BYTES:
            return None
        for region in self._last:
            if region.base <= lo and hi <= region.base + region.size_bytes:
                return region
        found = self._map.region_of(lo, hi - lo)
        if found is not None:
            self._last.append(found)
        return found

    def _shift_of(self, region: Region) -> int:
        shift = self._shift.get(region.name)
        if shift is None:
            # A DRAM side shifted by whole rows opens as many rows (renamed banks); elsewhere only the runs count.
            shift = self._shift[region.name] = 1 if region.rows is None else math.lcm(region.burst_bytes,
                                                                                       region.rows.row_bytes)
        return shift
