"""The stretches of bytes blocks cover within a window of addresses, found without listing the others.

``core-race`` lists the bytes of every access between two barriers to compare the cores' byte sets
(:mod:`sim.model.core_race`); when they are too many to list at once it takes the address range a window at a
time.  Accesses of one layout (:data:`sim.model.block_overlap.Layout`, as the set of bytes it covers) at several
first bytes make one :class:`BlockGroup`.  The stretches of bytes a block covers (its runs, those that overlap
merged: an im2col-like read of a million overlapping runs is one stretch) are listed once, and each block's
stretches in a window found by search, all blocks at once.  A layout of more runs than are listed at once is
nested (each stride at least the extent of the block inside it: :meth:`BlockGroup.listable`), so its runs lie in
address order of their number, outermost dimension first, and the runs meeting a window are a range of numbers
found by bisection on the address of run k, block by block (such blocks are few: each has over a million runs).
"""

from __future__ import annotations

import numpy as np

from sim.model.block_overlap import MAX_RUNS_LISTED, covered_offsets, nested, run_count, starts_at


class BlockGroup:
    """Blocks of one layout (``run`` bytes a run, dimensions ``dims``) at first bytes ``bases``, of ``cores``;
    ``count``: the stretches each covers (its runs, overlapping ones merged)."""

    def __init__(self, run: int, dims: tuple[tuple[int, int], ...], bases: np.ndarray, cores: np.ndarray):
        self.run, self.dims, self.bases, self.cores = run, dims, bases, cores
        pieces = covered_offsets(run, dims)  # (few enough runs: the bytes a block covers, listed once)
        if pieces is None:  # a nested block of many runs: its runs are its stretches, in address order
            self._starts = self._ends = None
            self.count = run_count(dims)
        else:
            self._starts, self._ends = pieces
            self.count = pieces[0].size

    @staticmethod
    def listable(run: int, dims: tuple[tuple[int, int], ...]) -> bool:
        """Whether blocks of the layout can be taken a window at a time (few runs, or nested)."""
        return run_count(dims) <= MAX_RUNS_LISTED or nested(run, dims)

    def within(self, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
        """Per block, the numbers ``[first, past)`` of its stretches (in address order) meeting ``[lo, hi)``."""
        if self._starts is not None and self._ends is not None:
            return (np.searchsorted(self._ends, lo - self.bases, side="right"),
                    np.searchsorted(self._starts, hi - self.bases))
        first = [self._first_at(lo - int(b) - self.run + 1) for b in self.bases]
        past = [self._first_at(hi - int(b)) for b in self.bases]
        return np.array(first, dtype=np.int64), np.array(past, dtype=np.int64)

    def stretches(self, first: np.ndarray, past: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Each block's stretches ``[first, past)``: their first bytes, ends and cores."""
        counts = past - first
        total = int(counts.sum())
        which = np.repeat(np.arange(self.bases.size), counts)
        number = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts) + first[which]
        base = self.bases[which]
        if self._starts is not None and self._ends is not None:
            return base + self._starts[number], base + self._ends[number], self.cores[which]
        starts = base + starts_at(0, self.dims, number)
        return starts, starts + self.run, self.cores[which]

    def _first_at(self, offset: int) -> int:
        """The number of the first run starting at or past ``offset`` from a block's first byte."""
        lo, hi = 0, self.count
        while lo < hi:
            mid = (lo + hi) // 2
            if self._start(mid) < offset:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def _start(self, k: int) -> int:
        start = 0
        for n, s in reversed(self.dims):
            k, i = divmod(k, n)
            start += i * s
        return start
