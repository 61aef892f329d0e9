"""The plan rule ``unwritten-read``: a plan reads only bytes the call gave it or wrote before.

Memory keeps its bytes from call to call, on the chip as here: a staging level (a core's AM or SM, the shared
window in GSM) or an output buffer holds, when a call starts, whatever an earlier call left there.  A kernel that
computes on such bytes, or moves them on, gives a result that depends on what ran before it.  So, walking a plan
in order, a transfer's source and a compute's input operands must lie in

* the call's input buffers (and the outputs it updates in place, GEMM's C with beta 1): the caller's bytes;
* bytes a transfer or a compute of the call wrote earlier: on the reading core's own staging levels, its
  earlier tiles, and in the same tile the loads before the compute and the compute before the stores; in shared
  memory (the shared staging levels, the outputs), anything written in an earlier phase, or in the same phase by
  any core (the cores run a phase together: ordering them is the race rules' business, not this one's).

A strided transfer writes its destination's runs and reads its source's, not the gaps between them: a gather
into every other float of AM leaves the floats between as the last call left them, and a compute on the whole
block reads them.  A staged buffer's fill into a core's own levels counts from the first of its tiles that uses
that generation or a later one (a later generation's fill waits for the earlier one's release); in shared memory,
where reads are judged against the whole phase's writes, a buffer's user never counts the bytes only a later
generation of that buffer fills (:class:`LaterFills`).  What the rule
cannot tell is whether a compute uses the stale lanes of an operand it reads whole (a padded row): it refuses
them all, and a kernel zeroes such padding first.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from sim.model.block_overlap import coalesced_sorted, covered, covered_offsets, layout_of
from sim.model.plan import Transfer

#: Intervals merged with numpy past this many (a Python merge is faster for the few of a typical block's runs).
_MERGED_IN_NUMPY = 256


def _coalesced(starts: list[int] | np.ndarray, ends: list[int] | np.ndarray) -> tuple[list[int], list[int]]:
    """Intervals ``[starts[i], ends[i])`` (none empty, in any order) merged where they meet or touch, sorted."""
    lo = np.asarray(starts, dtype=np.int64)
    hi = np.asarray(ends, dtype=np.int64)
    order = np.argsort(lo, kind="stable")
    merged_lo, merged_hi = coalesced_sorted(lo[order], hi[order])
    return merged_lo.tolist(), merged_hi.tolist()


class ByteSet:
    """Bytes as disjoint, non-touching, sorted intervals ``[start, end)``; found and joined by bisection."""

    __slots__ = ("starts", "ends")

    def __init__(self, spans: Sequence[tuple[int, int]] = ()) -> None:
        self.starts: list[int] = []
        self.ends: list[int] = []
        for lo, hi in spans:
            self.add(lo, hi)

    def add(self, lo: int, hi: int) -> None:
        """Join ``[lo, hi)``, merging the intervals it meets or touches."""
        if hi <= lo:
            return
        starts, ends = self.starts, self.ends
        i = bisect.bisect_left(ends, lo)  # the first interval ending at or past lo (touching it)
        j = bisect.bisect_right(starts, hi)  # past the last interval starting at or before hi
        if i < j:
            lo, hi = min(lo, starts[i]), max(hi, ends[j - 1])
        starts[i:j] = [lo]
        ends[i:j] = [hi]

    def add_sorted(self, spans: Sequence[tuple[int, int]]) -> None:
        """Join ``spans`` (in address order, disjoint, none empty: a strided block's runs) at once: one look-up and
        one splice for them all, where adding them one by one would splice each."""
        if len(spans) == 1:
            self.add(*spans[0])
            return
        starts, ends = self.starts, self.ends
        i = bisect.bisect_left(ends, spans[0][0])
        j = bisect.bisect_right(starts, spans[-1][1])
        if j - i == len(spans) and all(s_lo <= lo and hi <= s_hi for (lo, hi), s_lo, s_hi
                                       in zip(spans, starts[i:j], ends[i:j])):
            return  # each run inside one interval already (a block written again, as C at every k block)
        if j - i + len(spans) > _MERGED_IN_NUMPY:
            new_starts, new_ends = _coalesced(starts[i:j] + [lo for lo, _ in spans],
                                              ends[i:j] + [hi for _, hi in spans])
        else:
            new_starts, new_ends = [], []
            for lo, hi in heapq.merge(zip(starts[i:j], ends[i:j]), spans):
                if new_ends and lo <= new_ends[-1]:
                    if hi > new_ends[-1]:
                        new_ends[-1] = hi
                else:
                    new_starts.append(lo)
                    new_ends.append(hi)
        starts[i:j] = new_starts
        ends[i:j] = new_ends

    def add_block(self, base: int, starts: np.ndarray, ends: np.ndarray) -> None:
        """Join a block's runs ``[base + starts[i], base + ends[i])`` (in address order, disjoint; many: merged
        in numpy, without a Python pair per run)."""
        if starts.size <= _MERGED_IN_NUMPY:
            self.add_sorted([(base + lo, base + hi) for lo, hi in zip(starts.tolist(), ends.tolist())])
            return
        first, last = base + int(starts[0]), base + int(ends[-1])
        i = bisect.bisect_left(self.ends, first)
        j = bisect.bisect_right(self.starts, last)
        new_starts, new_ends = _coalesced(np.concatenate([np.array(self.starts[i:j], dtype=np.int64), starts + base]),
                                          np.concatenate([np.array(self.ends[i:j], dtype=np.int64), ends + base]))
        self.starts[i:j] = new_starts
        self.ends[i:j] = new_ends

    def join(self, others: Sequence[ByteSet]) -> None:
        """Join every set of ``others`` (a phase's per-core writes) at once."""
        pieces = [b for b in others if b.starts]
        if not pieces:
            return
        all_starts = self.starts + [lo for b in pieces for lo in b.starts]
        all_ends = self.ends + [hi for b in pieces for hi in b.ends]
        self.starts, self.ends = _coalesced(all_starts, all_ends)

    def covers(self, lo: int, hi: int) -> bool:
        """Whether ``[lo, hi)`` lies inside the set (inside one interval: they never touch)."""
        i = bisect.bisect_right(self.starts, lo) - 1
        return i >= 0 and hi <= self.ends[i]

    def first_gap(self, lo: int, hi: int) -> tuple[int, int]:
        """The first stretch of ``[lo, hi)`` outside the set (``[lo, hi)`` is not covered)."""
        return self.gaps(lo, hi)[0]

    def gaps(self, lo: int, hi: int) -> list[tuple[int, int]]:
        """The stretches of ``[lo, hi)`` outside the set, in order (none when it is covered)."""
        starts, ends = self.starts, self.ends
        out: list[tuple[int, int]] = []
        i = max(0, bisect.bisect_right(starts, lo) - 1)
        while lo < hi:
            while i < len(starts) and ends[i] <= lo:
                i += 1
            if i == len(starts) or starts[i] >= hi:
                out.append((lo, hi))
                break
            if starts[i] > lo:
                out.append((lo, starts[i]))
            lo = ends[i]
        return out


class Read(NamedTuple):
    """A read: bytes ``[lo, hi)``, what read them (for the message), and the transfer whose source they span (None:
    a compute's operand), whose runs are looked at only when its span meets bytes nothing wrote."""

    lo: int
    hi: int
    core: int
    tile: int
    what: str  # "load 0", "store 1", "compute"
    transfer: Transfer | None = None


def _add_written(into: ByteSet, lo: int, hi: int, transfer: Transfer | None) -> None:
    """Join to ``into`` what a write of span ``[lo, hi)`` writes: ``transfer``'s destination runs when it is strided
    (the gaps between them keep what they held), else the span."""
    if transfer is None or transfer.runs("dst")[0] == 1:
        into.add(lo, hi)
        return
    base, run, dims = layout_of(transfer, "dst")
    got = covered_offsets(run, dims)
    if got is None:  # (more runs than are listed: its span, gaps and all)
        into.add(lo, hi)
    else:
        into.add_block(base, *got)


def _runs(t: Transfer | None, lo: int, hi: int) -> list[tuple[int, int]]:
    """The stretches of bytes a read of span ``[lo, hi)`` reads: transfer ``t``'s source runs, merged, or the
    span (a compute's operand, a transfer of one run, or one of too many runs to list)."""
    if t is None or t.runs("src")[0] == 1:
        return [(lo, hi)]
    return covered(layout_of(t, "src")) or [(lo, hi)]


class WrittenBytes:
    """What the call has written so far: per core its staging levels' bytes, and the shared bytes (shared staging
    levels and output buffers) of every core; the shared reads of the phase being walked, judged at its end."""

    def __init__(self, local: Sequence[tuple[int, int]], shared: Sequence[tuple[int, int]],
                 given: Sequence[tuple[int, int]] = ()):
        self.local = tuple(local)  # the per-core staging levels (the same addresses on every core)
        self.shared = tuple(shared)  # the shared staging levels and the output buffers
        # (their hulls: most sides lie outside both, in an input: two comparisons decide)
        self._local_hull = (min((lo for lo, _ in self.local), default=0), max((hi for _, hi in self.local), default=0))
        self._shared_hull = (min((lo for lo, _ in self.shared), default=0),
                             max((hi for _, hi in self.shared), default=0))
        self.by_core: dict[int, ByteSet] = {}
        # Shared bytes written before the phase being walked; the outputs updated in place hold the caller's bytes
        # from the start (inputs lie elsewhere: never written, their reads are not this rule's).
        self.shared_before = ByteSet(given)
        # Shared bytes each core wrote in the phase, so far (kept per core only: a strided block's runs leave gaps
        # that other cores fill, and one set of them all would be spliced at every run).
        self.phase_by_core: dict[int, ByteSet] = {}
        self.reads: list[tuple[Read, list[tuple[int, int]]]] = []  # reads left for the phase's end

    def is_local(self, lo: int, hi: int) -> bool:
        """Whether ``[lo, hi)`` lies in a per-core staging level."""
        low, high = self._local_hull
        if lo < low or hi > high:
            return False
        for base, end in self.local:
            if base <= lo and hi <= end:
                return True
        return False

    def is_shared(self, lo: int, hi: int) -> bool:
        """Whether ``[lo, hi)`` meets a shared staging level or an output buffer (the bytes this rule follows)."""
        low, high = self._shared_hull
        if hi <= low or lo >= high:
            return False
        for base, end in self.shared:
            if lo < end and base < hi:
                return True
        return False

    def core(self, core: int) -> ByteSet:
        """What ``core``'s own staging levels hold of the call's bytes."""
        got = self.by_core.get(core)
        if got is None:
            got = self.by_core[core] = ByteSet()
        return got

    def write(self, core: int, lo: int, hi: int, transfer: Transfer | None = None) -> None:
        """``core`` writes ``[lo, hi)``: in its own staging levels, or in shared memory; the runs of ``transfer``'s
        destination only, when it is strided (the gaps between them keep what they held)."""
        if self.is_local(lo, hi):
            into = self.core(core)
        elif self.is_shared(lo, hi):
            mine = self.phase_by_core.get(core)
            if mine is None:
                mine = self.phase_by_core[core] = ByteSet()
            into = mine
        else:
            return
        _add_written(into, lo, hi, transfer)

    def read(self, lo: int, hi: int, core: int, tile: int, what: str | tuple[str, int],
             transfer: Transfer | None = None) -> tuple[int, int] | None:
        """The first stretch of ``[lo, hi)`` (read by ``what`` of ``tile`` on ``core``: a transfer's source, as
        its kind and index, or a compute's operand) that nothing wrote, judged now on the core's staging levels (or
        None); in shared memory, what neither an earlier phase nor any core so far in this one wrote is left for
        the phase's end (another core may write it later in the phase), and None returned."""
        if hi <= lo:
            return None
        if self.is_local(lo, hi):
            mine = self.core(core)
            if mine.covers(lo, hi):
                return None
            for run in _runs(transfer, lo, hi):  # (a strided source's span may cover bytes it does not read)
                if not mine.covers(*run):
                    return mine.first_gap(*run)
            return None
        if self.is_shared(lo, hi):
            if self.shared_before.covers(lo, hi):
                return None
            # What an earlier phase or any core so far in this phase wrote (another core's later writes in the
            # phase are looked at at its end: the cores run a phase together); a strided source by the runs it
            # reads (its span takes in gaps that other cores' blocks fill).
            left = [g for run in _runs(transfer, lo, hi) for g in self._left(*run, core)]
            if left:
                read = Read(lo, hi, core, tile, what if isinstance(what, str) else f"{what[0]} {what[1]}", transfer)
                self.reads.append((read, left))
        return None

    def _left(self, lo: int, hi: int, core: int) -> list[tuple[int, int]]:
        """The stretches of shared bytes of ``[lo, hi)`` that neither an earlier phase nor any core so far in this
        one wrote (``core`` reads them: its own set first)."""
        sets = self.phase_by_core
        mine = sets.get(core)
        if mine is not None and mine.covers(lo, hi):
            return []
        for theirs in sets.values():
            if theirs is not mine and theirs.covers(lo, hi):
                return []  # (most reads: what a core of the phase staged, such as GEMM's blocks of A)
        left = self.shared_before.gaps(lo, hi)
        for theirs in sets.values():
            if not left:
                break
            left = [g for piece in left for g in theirs.gaps(*piece)]
        return [g for g in left if self.is_shared(*g)]  # (not an input's bytes)

    def end_phase(self) -> tuple[Read, tuple[int, int]] | None:
        """The first shared read of the phase with bytes that no other core wrote in it either, and them (None if
        none); the phase's writes then count as written before the next."""
        reads, self.reads = self.reads, []
        phase = self.phase_by_core
        for read, left in reads:
            for c, theirs in phase.items():
                if c != read.core:
                    left = [g for piece in left for g in theirs.gaps(*piece)]
            if left:
                return read, left[0]
        self.shared_before.join(list(phase.values()))
        self.phase_by_core = {}
        return None


class LaterFills:
    """The ``unwritten-read`` rule on staged buffers in shared memory (the GSM window): a buffer's fill of
    generation g' waits for the release of every earlier generation, so a tile using generation g cannot read bytes
    that only a later generation's fill writes.  (The phase's other shared writes count for every reader, from the
    phase's start, as :class:`WrittenBytes` counts them: the cores run a phase together.)"""

    def __init__(self) -> None:
        self._fills: dict[str, list[tuple[int, int, int, Transfer]]] = {}  # buffer -> (generation, lo, hi, fill)
        # buffer -> the bytes its generations after the first write first, as (lo, hi, that generation) in address
        # order, less what other buffers' fills and earlier phases wrote; and the latest such generation
        self._firsts: dict[str, tuple[list[int], list[tuple[int, int, int]], int]] | None = None

    def __bool__(self) -> bool:
        return bool(self._fills)

    def add(self, name: str, generation: int, lo: int, hi: int, transfer: Transfer) -> None:
        """Generation ``generation`` of buffer ``name`` is filled by ``transfer``, whose destination spans
        ``[lo, hi)`` in shared memory (every fill of the phase is added before the first read is judged)."""
        self._fills.setdefault(name, []).append((generation, lo, hi, transfer))
        self._firsts = None

    def _first_writes(self, before: ByteSet) -> dict[str, tuple[list[int], list[tuple[int, int, int]], int]]:
        """Per buffer, the bytes each generation writes first (once per phase: a byte's first generation)."""
        out: dict[str, tuple[list[int], list[tuple[int, int, int]], int]] = {}
        for name, fills in self._fills.items():
            other = ByteSet()
            for buffer, theirs in self._fills.items():
                if buffer != name:
                    for _, lo, hi, t in theirs:
                        _add_written(other, lo, hi, t)
            seen, pieces = ByteSet(), []
            for g, lo, hi, t in sorted(fills, key=lambda fill: fill[0]):
                mine = ByteSet()
                _add_written(mine, lo, hi, t)
                for m_lo, m_hi in zip(mine.starts, mine.ends):
                    for new in seen.gaps(m_lo, m_hi):
                        pieces += [(a, b, g) for piece in other.gaps(*new) for a, b in before.gaps(*piece)]
                seen.add_sorted(list(zip(mine.starts, mine.ends)))
            first_gen = min((g for g, _, _, _ in fills), default=0)
            pieces = sorted(p for p in pieces if p[2] > first_gen)
            out[name] = ([p[0] for p in pieces], pieces, max((p[2] for p in pieces), default=-1))
        return out

    def latest(self, name: str, before: ByteSet) -> int:
        """The latest generation of ``name`` that writes bytes first (-1 if none but its first: the users of
        generations from that one on read no bytes a later one writes first); ``before``: what earlier phases
        wrote."""
        if self._firsts is None:
            self._firsts = self._first_writes(before)
        got = self._firsts.get(name)
        return -1 if got is None else got[2]

    def first_read(self, name: str, generation: int, lo: int, hi: int,
                   transfer: Transfer | None) -> tuple[int, int] | None:
        """The first stretch that a read of span ``[lo, hi)`` (``transfer``'s source runs, or the span) by a user of
        generation ``generation`` of ``name`` reads and only a later generation writes first, or None (after
        :meth:`latest` of ``name``)."""
        assert self._firsts is not None
        got = self._firsts.get(name)
        if got is None or generation >= got[2]:
            return None
        starts, pieces, _ = got
        for r_lo, r_hi in _runs(transfer, lo, hi):
            i = max(0, bisect.bisect_right(starts, r_lo) - 1)
            while i < len(pieces) and pieces[i][0] < r_hi:
                p_lo, p_hi, g = pieces[i]
                if g > generation and p_hi > r_lo:
                    return max(r_lo, p_lo), min(r_hi, p_hi)
                i += 1
        return None
