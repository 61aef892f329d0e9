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
overlap, and comparing every access with every other core's would be quadratic): each access's runs are listed
(with numpy, every access of one layout at once; an access repeated, as a streamed block reloaded each k block, is
listed once), each core's writes and reads merged into disjoint intervals, and then

- the cores' merged writes, sorted together, overlap only where two cores write the same byte;
- a core's merged read meets another core's write when the writes it overlaps are not all its own (counted with a
  prefix sum per core).

Only the lowest byte found is traced back to the two accesses that touch it, for the message.  An access of more
than :data:`sim.model.block_overlap.MAX_RUNS_LISTED` runs is not listed, nor are the largest while all have more
than :data:`MAX_RUNS_TOTAL`: each is judged pair by pair against the other cores' accesses whose spans it overlaps
(:func:`~sim.model.block_overlap.sides_meet`, exact against a block of fewer runs; two such blocks of different
layouts are taken not to meet: the rules refuse only the races they can prove).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from sim.model.block_overlap import MAX_RUNS_LISTED, Layout, layout_of, run_starts, sides_meet
from sim.model.plan import Tile, Transfer

#: One side of a transfer: ``(lo, hi, core, writes, transfer, tile, kind, index, phase)``: bytes ``[lo, hi)`` that
#: ``core`` reads (``writes`` False: a source) or writes (a destination), transfer ``index`` of its tile's loads or
#: stores (``kind``), in the phase named ``phase``.  (A plain tuple: a plan has one per transfer side.)
Access = tuple[int, int, int, bool, Transfer, Tile, str, int, str]

#: The most runs of all accesses between two barriers listed at once (their arrays take about 40 bytes a run); past
#: that, the accesses of most runs are judged pair by pair.
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
        # (shape, strides, itemsize) of a transfer side -> its layout, less the side's address
        self._layouts: dict[tuple, Layout] = {}

    def first(self, reads: Sequence[Access], writes: Sequence[Access]) -> Race | None:
        """The race at the lowest byte two cores touch, one writing, between two barriers; or None."""
        writes = [a for a in writes if self.shared(a[0])]
        if not writes or len({a[2] for a in writes} | {a[2] for a in reads}) < 2:
            return None
        reads = [a for a in reads if self.shared(a[0])]
        # One access per core, direction and layout (a streamed block reloaded each k block is one), the largest
        # judged pair by pair (below) while they have more runs than are listed, or all have.
        unique: dict[tuple[bool, int, Layout], Access] = {}
        for a in (*writes, *reads):
            unique.setdefault((a[3], a[2], self._layout(a)), a)
        runs = {id(a): _runs(key[2]) for key, a in unique.items()}
        total = sum(runs.values())
        huge: list[Access] = []
        for a in sorted(unique.values(), key=lambda a: -runs[id(a)]):
            if runs[id(a)] <= MAX_RUNS_LISTED and total <= MAX_RUNS_TOTAL:
                break
            huge.append(a)
            total -= runs[id(a)]
        apart = {id(a) for a in huge}
        writes = [a for a in unique.values() if a[3] and id(a) not in apart]
        reads = [a for a in unique.values() if not a[3] and id(a) not in apart]
        race = self._listed(reads, writes) if writes else None
        for h in huge:
            for a in (*writes, *reads, *huge):
                if (a[2] != h[2] and (a[3] or h[3]) and a[0] < h[1] and h[0] < a[1]
                        and (race is None or max(a[0], h[0]) < race.shared[0])
                        and sides_meet(self._layout(h), self._layout(a))):
                    earlier, later = (a, h) if (a[0], not a[3]) <= (h[0], not h[3]) else (h, a)
                    race = Race(earlier, later, (later[0], min(a[1], h[1])))
        return race

    def across(self, withheld: Sequence[Access], accesses: Sequence[Access]) -> Race | None:
        """The first race between one of ``withheld`` (accesses to the bytes a phase's staged buffers fill) and one
        of ``accesses`` of another core in another phase of the window, one writing (pair by pair: such bytes lie
        in a shared staging level, few accesses reach them)."""
        if not withheld:
            return None
        ordered = sorted(accesses, key=lambda a: a[0])
        firsts = [a[0] for a in ordered]
        for w in sorted(withheld, key=lambda a: a[0]):
            for a in ordered[:bisect.bisect_left(firsts, w[1])]:
                if (a[1] > w[0] and a[2] != w[2] and a[8] != w[8] and (a[3] or w[3])
                        and sides_meet(self._layout(w), self._layout(a))):
                    earlier, later = (a, w) if (a[0], not a[3]) <= (w[0], not w[3]) else (w, a)
                    return Race(earlier, later, (later[0], min(a[1], w[1])))
        return None

    def _listed(self, reads: Sequence[Access], writes: Sequence[Access]) -> Race | None:
        """:meth:`first` over accesses whose runs are listed: the byte sets of the module's docstring."""
        origin = min(a[0] for a in (*writes, *reads))
        w = self._merged(writes, origin)
        # Merged per core, the writes of all cores overlap only where two cores write one byte.
        starts, ends, _ = w
        reach = np.maximum.accumulate(ends)
        clash = np.flatnonzero(starts[1:] < reach[:-1])
        byte = int(starts[clash[0] + 1]) if clash.size else None
        if reads:  # (against the writes below that byte: disjoint, so sorted by their ends too)
            below = slice(0, clash[0] + 1 if clash.size else starts.size)
            byte = _lowest(byte, _read_clash(self._merged(reads, origin), (starts[below], ends[below], w[2][below])))
        if byte is None:
            return None
        return self._race(byte + origin, writes, reads)

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

    def _merged(self, accesses: Sequence[Access], origin: int) -> _Intervals:
        """The bytes each core's ``accesses`` touch, as disjoint intervals per core (offsets from ``origin``)
        sorted by start."""
        groups: dict[tuple, dict[tuple[int, int], None]] = {}  # (run, dims) -> {(first byte, core)}
        for a in accesses:
            base, run, dims = self._layout(a)
            groups.setdefault((run, dims), {})[(base - origin, a[2])] = None
        starts, ends, cores = [], [], []
        for (run, dims), firsts in groups.items():
            offsets = run_starts(0, dims)
            base_core = np.array(list(firsts), dtype=np.int64)
            at = (base_core[:, :1] + offsets[None, :]).ravel()
            starts.append(at)
            ends.append(at + run)
            cores.append(np.repeat(base_core[:, 1], offsets.size))
        if not starts:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty, empty
        start, end, core = np.concatenate(starts), np.concatenate(ends), np.concatenate(cores)
        # Sorted by core, then start: a run opens a new interval where it starts past every earlier run's end
        # in its core (the cores kept apart by shifting each by more than every offset).
        shift = int(end.max()) + 1
        key_start, key_end = start + core * shift, end + core * shift
        order = np.argsort(key_start, kind="stable")
        key_start, key_end = key_start[order], key_end[order]
        reach = np.maximum.accumulate(key_end)
        opens = np.ones(key_start.size, dtype=bool)
        opens[1:] = key_start[1:] > reach[:-1]
        first = np.flatnonzero(opens)
        last = np.append(first[1:], key_start.size) - 1
        m_core = key_start[first] // shift
        m_start, m_end = key_start[first] - m_core * shift, reach[last] - m_core * shift
        order = np.argsort(m_start, kind="stable")
        return m_start[order], m_end[order], m_core[order]

    def _layout(self, a: Access) -> Layout:
        """The layout of access ``a``'s bytes, worked out once per shape of block."""
        t = a[4]
        base, strides = (t.dst, t.dst_strides) if a[3] else (t.src, t.src_strides)
        key = (t.shape, strides, t.itemsize)
        got = self._layouts.get(key)
        if got is None:
            first, run, dims = layout_of(t, "dst" if a[3] else "src")
            got = self._layouts[key] = (first - base, run, dims)
        return base + got[0], got[1], got[2]


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


def _runs(layout: Layout) -> int:
    """How many runs a block of ``layout`` has."""
    count = 1
    for n, _ in layout[2]:
        count *= n
    return count


def _lowest(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else min(a, b)
