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

The work is on byte sets, not on pairs of accesses (cores whose blocks of a matrix interleave have spans that all
overlap, and comparing every access with every other core's would be quadratic): the stretches of bytes each
access covers are listed (with numpy, every access of one layout at once, :mod:`sim.model.block_runs`; an access
repeated, as a streamed block reloaded each k block, is listed once), each core's writes and reads merged into
disjoint intervals, and then

- the cores' merged writes, sorted together, overlap only where two cores write the same byte;
- a core's merged read meets another core's write when the writes it overlaps are not all its own (counted with a
  prefix sum per core).

Only the lowest byte found is traced back to the two accesses that touch it, for the message.  When the accesses
cover more than :data:`MAX_RUNS_TOTAL` stretches in all, the address range is taken a window at a time, halved
until a window holds no more, lowest first.  In a window of several phases without a barrier, the accesses to a
phase's staged buffers' bytes are compared the same way with the other phases' accesses (:meth:`CoreRaces.across`).
A block that is not nested and has more than :data:`sim.model.block_overlap.MAX_RUNS_LISTED` runs is judged pair by
pair against the other cores' accesses whose spans it overlaps (:func:`~sim.model.block_overlap.sides_meet`, exact
for any two blocks whose transfers passed the ``bounds`` rule).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from sim.model.block_overlap import Layout, coalesced_sorted, layout_of, sides_meet
from sim.model.block_runs import BlockGroup
from sim.model.plan import Tile, Transfer

#: One side of a transfer: ``(lo, hi, core, writes, transfer, tile, kind, index, phase)``: bytes ``[lo, hi)`` that
#: ``core`` reads (``writes`` False: a source) or writes (a destination), transfer ``index`` of its tile's loads or
#: stores (``kind``), in the phase named ``phase``.  (A plain tuple: a plan has one per transfer side.)
Access = tuple[int, int, int, bool, Transfer, Tile, str, int, str]

#: The most stretches of the accesses listed at once (their arrays take about 80 bytes each); past that, a window of
#: the address range at a time.
MAX_RUNS_TOTAL = 1 << 22

#: Merged intervals of bytes: ``(starts, ends, cores)``, int64 arrays sorted by start.
_Intervals = tuple[np.ndarray, np.ndarray, np.ndarray]


@dataclass(frozen=True)
class Race:
    """Two accesses of different cores that share bytes, one writing: ``shared`` spans from the lowest byte they
    share to the nearer of their ends (``later`` is the one whose span starts later)."""

    earlier: Access
    later: Access
    shared: tuple[int, int]


class CoreRaces:
    """The rule over the phases of one plan; ``shared(addr)`` says whether the byte at ``addr`` is in shared
    memory (the same bytes for every core)."""

    def __init__(self, shared: Callable[[int], bool]):
        self.shared = shared

    def first(self, reads: Sequence[Access], writes: Sequence[Access]) -> Race | None:
        """The race at the lowest byte two cores touch, one writing, between two barriers; or None."""
        writes = [a for a in writes if self.shared(a[0])]
        if not writes or len({a[2] for a in writes} | {a[2] for a in reads}) < 2:
            return None
        reads = [a for a in reads if self.shared(a[0])]
        # One access per core, direction and layout (a streamed block reloaded each k block is one).
        unique: dict[tuple[bool, int, Layout], Access] = {}
        for a in (*writes, *reads):
            unique.setdefault((a[3], a[2], self._layout(a)), a)
        # Blocks that can be taken a window at a time are listed; the rest (not nested, too many runs to list)
        # are judged pair by pair.
        huge = [a for key, a in unique.items() if not BlockGroup.listable(key[2][1], key[2][2])]
        apart = {id(a) for a in huge}
        writes = [a for a in unique.values() if a[3] and id(a) not in apart]
        reads = [a for a in unique.values() if not a[3] and id(a) not in apart]
        race = None
        if writes:
            listed = [*writes, *reads]
            byte = self._scan(listed, [], min(a[0] for a in listed), max(a[1] for a in listed),
                              lambda mine, _: _clash(_merge(mine[1]), _merge(mine[0])))
            race = None if byte is None else self._race(byte, writes, reads)
        return self._pairwise(huge, [*writes, *reads, *huge], race, lambda h, a: True)

    def across(self, withheld: Sequence[Access], accesses: Sequence[Access]) -> Race | None:
        """The first race between one of ``withheld`` (accesses to the bytes a phase's staged buffers fill) and one
        of ``accesses`` of another core in another phase of the window, one writing: per phase, its withheld
        accesses' byte sets against the other phases' accesses', over the span of its own."""
        for phase in dict.fromkeys(w[8] for w in withheld):
            mine = [w for w in withheld if w[8] == phase]
            others = [a for a in accesses if a[8] != phase]
            huge = [a for a in (*mine, *others) if not BlockGroup.listable(*self._layout(a)[1:])]
            apart = {id(a) for a in huge}
            mine_listed = [a for a in mine if id(a) not in apart]
            others_listed = [a for a in others if id(a) not in apart]
            byte = None
            if mine_listed and others_listed:
                def judge(m: tuple[list[_Runs], list[_Runs]], o: tuple[list[_Runs], list[_Runs]]) -> int | None:
                    o_writes = _merge(o[1])
                    return _lowest(_other_core(_merge(m[1]), _cat(o_writes, _merge(o[0]))),
                                   _other_core(_merge(m[0]), o_writes))
                byte = self._scan(mine_listed, others_listed, min(a[0] for a in mine_listed),
                                  max(a[1] for a in mine_listed), judge)
            race = None
            if byte is not None:
                race = self._pair_at(byte, mine_listed, others_listed)
            race = self._pairwise([a for a in huge if a[8] == phase], others, race, lambda h, a: a[8] != h[8])
            race = self._pairwise([a for a in huge if a[8] != phase], mine, race, lambda h, a: a[8] != h[8])
            if race is not None:
                return race
        return None

    def _scan(self, mine: Sequence[Access], others: Sequence[Access], lo: int, hi: int,
              judge: Callable[[tuple[list[_Runs], list[_Runs]], tuple[list[_Runs], list[_Runs]]], int | None]
              ) -> int | None:
        """The lowest byte ``judge`` finds in ``[lo, hi)``, a window at a time: each holds at most
        :data:`MAX_RUNS_TOTAL` stretches of the accesses (halved until it does, down to one byte), lowest first.
        ``judge`` is given the stretches of ``mine`` and of ``others`` in the window (reads', writes'), clipped
        to it."""
        sides = [self._groups(mine), self._groups(others)]

        def scan(lo: int, hi: int) -> int | None:
            inside = [[(writing, group, group.within(lo, hi)) for writing, group in groups] for groups in sides]
            count = sum(int((past - first).sum()) for part in inside for _, _, (first, past) in part)
            if count > MAX_RUNS_TOTAL and hi - lo > 1:
                mid = (lo + hi) // 2
                left = scan(lo, mid)
                return left if left is not None else scan(mid, hi)
            listed: list[tuple[list[_Runs], list[_Runs]]] = []
            for part in inside:
                runs: tuple[list[_Runs], list[_Runs]] = ([], [])
                for writing, group, (first, past) in part:
                    starts, ends, cores = group.stretches(first, past)
                    runs[writing].append((np.maximum(starts, lo), np.minimum(ends, hi), cores))
                listed.append(runs)
            return judge(listed[0], listed[1])

        return scan(lo, hi)

    def _groups(self, accesses: Sequence[Access]) -> list[tuple[bool, BlockGroup]]:
        """``accesses`` as groups of one direction and layout (whether they write, the group)."""
        found: dict[tuple, list[tuple[int, int]]] = {}  # (writes, run, dims) -> [(first byte, core)]
        for a in accesses:
            base, run, dims = self._layout(a)
            found.setdefault((a[3], run, dims), []).append((base, a[2]))
        return [(key[0], BlockGroup(key[1], key[2], np.array([b for b, _ in got], dtype=np.int64),
                                    np.array([c for _, c in got], dtype=np.int64))) for key, got in found.items()]

    def _pairwise(self, huge: Sequence[Access], accesses: Sequence[Access], race: Race | None,
                  pairs: Callable[[Access, Access], bool]) -> Race | None:
        """``race``, or a race at a lower byte between one of ``huge`` and one of ``accesses`` (of another core,
        one writing, ``pairs`` allowing), judged pair by pair (:func:`~sim.model.block_overlap.sides_meet`)."""
        for h in huge:
            for a in accesses:
                if (a[2] != h[2] and (a[3] or h[3]) and a[0] < h[1] and h[0] < a[1] and pairs(h, a)
                        and (race is None or max(a[0], h[0]) < race.shared[0])
                        and sides_meet(self._layout(h), self._layout(a))):
                    earlier, later = (a, h) if (a[0], not a[3]) <= (h[0], not h[3]) else (h, a)
                    race = Race(earlier, later, (later[0], min(a[1], h[1])))
        return race

    def _pair_at(self, byte: int, mine: Sequence[Access], others: Sequence[Access]) -> Race:
        """The race at ``byte`` between one of ``mine`` and one of ``others`` of another core, one writing."""
        def touching(accesses: Sequence[Access]) -> list[Access]:
            return [a for a in accesses if a[0] <= byte < a[1] and sides_meet(self._layout(a), (byte, 1, ()))]
        for w in touching(mine):
            for a in touching(others):
                if a[2] != w[2] and (a[3] or w[3]):
                    earlier, later = (a, w) if (a[0], not a[3]) <= (w[0], not w[3]) else (w, a)
                    return Race(earlier, later, (byte, min(a[1], w[1])))
        raise AssertionError(f"no two accesses touch byte {byte:#x}")  # (the byte sets said they do)

    def _race(self, byte: int, writes: Sequence[Access], reads: Sequence[Access]) -> Race:
        """The two accesses of different cores that touch ``byte``, one writing (the lowest such byte)."""
        touching = [a for a in (*writes, *reads) if a[0] <= byte < a[1]
                    and sides_meet(self._layout(a), (byte, 1, ()))]
        for a in touching:
            if not a[3]:
                continue
            for b in touching:
                if b[2] != a[2]:
                    earlier, later = (a, b) if (a[0], not a[3]) <= (b[0], not b[3]) else (b, a)
                    return Race(earlier, later, (byte, min(a[1], b[1])))
        raise AssertionError(f"no two cores' accesses touch byte {byte:#x}")  # (the byte sets said they do)

    def _layout(self, a: Access) -> Layout:
        """The layout of access ``a``'s bytes."""
        return layout_of(a[4], "dst" if a[3] else "src")


#: Runs of accesses: ``(starts, ends, cores)``, int64 arrays.
_Runs = tuple[np.ndarray, np.ndarray, np.ndarray]


def _merge(runs: Sequence[_Runs]) -> _Intervals:
    """The bytes of ``runs`` as disjoint intervals per core, sorted by start."""
    if not runs:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty
    start = np.concatenate([r[0] for r in runs])
    end = np.concatenate([r[1] for r in runs])
    core = np.concatenate([r[2] for r in runs])
    if not start.size:
        return start, end, core
    # Sorted by core, then start: a run opens a new interval where it starts past every earlier run's end in its
    # core (the cores kept apart by shifting each by more than every address).
    shift = int(end.max()) + 1
    key_start, key_end = start + core * shift, end + core * shift
    order = np.argsort(key_start, kind="stable")
    key_start, key_end = coalesced_sorted(key_start[order], key_end[order])
    m_core = key_start // shift
    m_start, m_end = key_start - m_core * shift, key_end - m_core * shift
    order = np.argsort(m_start, kind="stable")
    return m_start[order], m_end[order], m_core[order]


def _clash(writes: _Intervals, reads: _Intervals) -> int | None:
    """The lowest byte one core writes and another touches (merged per core), or None."""
    starts, ends, cores = writes
    if not starts.size:
        return None
    # The cores' merged writes, sorted together, overlap only where two cores write one byte.
    reach = np.maximum.accumulate(ends)
    overlap = np.flatnonzero(starts[1:] < reach[:-1])
    byte = int(starts[overlap[0] + 1]) if overlap.size else None
    # Reads against the writes below that byte: disjoint, so sorted by their ends too.
    below = slice(0, overlap[0] + 1 if overlap.size else starts.size)
    return _lowest(byte, _read_clash(reads, (starts[below], ends[below], cores[below])))


def _cat(a: _Intervals, b: _Intervals) -> _Intervals:
    return np.concatenate([a[0], b[0]]), np.concatenate([a[1], b[1]]), np.concatenate([a[2], b[2]])


def _other_core(mine: _Intervals, others: _Intervals) -> int | None:
    """The lowest byte of ``mine`` that an interval of ``others`` of another core covers, or None."""
    best: int | None = None
    for core in np.unique(mine[2]):
        starts, ends = mine[0][mine[2] == core], mine[1][mine[2] == core]
        keep = others[2] != core
        o_starts, o_ends = others[0][keep], others[1][keep]
        if not o_starts.size:
            continue
        order = np.argsort(o_starts, kind="stable")  # (the other cores' bytes, joined)
        o_starts, reach = o_starts[order], np.maximum.accumulate(o_ends[order])
        first = np.searchsorted(reach, starts, side="right")  # the first whose reach passes the start
        hit = first < o_starts.size
        hit[hit] &= o_starts[first[hit]] < ends[hit]
        if hit.any():
            i = int(np.flatnonzero(hit)[0])
            best = _lowest(best, max(int(starts[i]), int(o_starts[first[i]])))
    return best


def _read_clash(reads: _Intervals, writes: _Intervals) -> int | None:
    """The lowest byte of ``reads`` that another core's ``writes`` (disjoint) cover, or None."""
    r_start, r_end, r_core = reads
    w_start, w_end, w_core = writes
    if not r_start.size or not w_start.size:
        return None
    first = np.searchsorted(w_end, r_start, side="right")  # the first write ending past the read's start
    past = np.searchsorted(w_start, r_end, side="left")  # writes from here on start at or past its end
    cores, w_index = np.unique(w_core, return_inverse=True)
    own = np.zeros((cores.size, w_start.size + 1), dtype=np.int64)
    own[w_index, np.arange(w_start.size) + 1] = 1
    own = np.cumsum(own, axis=1)
    r_index = np.searchsorted(cores, r_core).clip(0, cores.size - 1)
    mine = np.where(cores[r_index] == r_core, own[r_index, past] - own[r_index, first], 0)
    flagged = np.flatnonzero(past - first > mine)
    best: int | None = None
    for i in flagged:  # (sorted by start: past the best byte found, no read can beat it)
        lo = int(r_start[i])
        if best is not None and lo >= best:
            break
        for j in range(int(first[i]), int(past[i])):
            if w_core[j] != r_core[i]:
                best = _lowest(best, max(lo, int(w_start[j])))
                break
    return best


def _lowest(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else min(a, b)
