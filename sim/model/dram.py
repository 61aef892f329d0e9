"""Which DRAM rows a transfer opens: its row activations, counted from its addresses (no timing here).

A DRAM region with ``rows`` (:class:`~sim.model.target.DramRows`) cuts its bytes into rows of ``row_bytes`` from
its base, row ``r`` in bank ``r % banks``; each bank keeps its last row open (an open-page controller).  A
transfer's side in such a region walks its contiguous runs in descriptor order (outermost dimension first) and
opens a row each time it touches a row that is not the one open in that row's bank.  The count assumes every bank
closed when the transfer starts: a transfer does not inherit the rows an earlier one left open, nor lose its own to
another core's transfer streaming at the same time (docs/timing-model.md says what that leaves out); the members of
a synchronised transfer stream as one, and :func:`interleaved_row_use` walks their merged stream; a copy within
one DRAM reads and writes it, and :func:`copy_row_use` walks its two sides as its controller serves them.

:mod:`sim.engine` charges the activations on the region's activation link (the device's tFAW rate, shared by every
transfer streaming through the region) and the busiest bank's repeats at tRC as the transfer's own pace
(:func:`sim.timing.stream_cycles` gives the alone time).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from sim.model.memo import memoized
from sim.model.plan import run_layout
from sim.model.target import DramRows

#: Run counts up to this are walked in Python; more with numpy (a call costs tens of microseconds).
_SMALL = 16
#: Runs of an open-page walk listed with numpy at a time (:class:`_Walk`).
WINDOW = 1 << 20


class RowUse(NamedTuple):
    """What one side of a transfer asks of a DRAM's rows: the rows it activates, and the most of them in one bank."""

    activations: int
    busiest_bank: int

    def bank_cycles(self, rows: DramRows) -> int:
        """The least cycles the side streams for its busiest bank: after that bank's first activation, each repeat
        waits tRC (``bank_busy_cycles``); the first activation of every bank can start at once."""
        return max(0, self.busiest_bank - 1) * rows.bank_busy_cycles


NO_ROWS = RowUse(0, 0)


def row_use(rows: DramRows, offset: int, shape: tuple[int, ...], itemsize: int,
            strides: tuple[int, ...]) -> RowUse:
    """The :class:`RowUse` of a block of ``shape`` elements of ``itemsize`` bytes at byte ``strides``, its first
    element ``offset`` bytes past the region's base."""
    # The banks repeat every row_bytes * banks bytes: a block that far further on opens the same rows' banks.
    return _row_use(rows, offset % rows.period_bytes, tuple(shape), itemsize, tuple(strides))


def run_row_use(rows: DramRows, offset: int, nbytes: int) -> RowUse:
    """The :class:`RowUse` of one contiguous run of ``nbytes`` (> 0) bytes, ``offset`` bytes past the region's base:
    every row from its first to its last, each opened once, spread over the banks in turn (what :func:`row_use`
    answers for such a block, without remembering it: working it out costs less than looking it up)."""
    size = rows.row_bytes
    opened = (offset + nbytes - 1) // size - offset // size + 1
    return RowUse(opened, -(-opened // rows.banks))


@memoized
def _row_use(rows: DramRows, offset: int, shape: tuple[int, ...], itemsize: int,
             strides: tuple[int, ...]) -> RowUse:
    run, outer = _runs(shape, itemsize, strides)
    if run == 0:
        return NO_ROWS
    span = _gapless_span(outer, run, rows.row_bytes)
    if span is not None:
        first, last = offset // rows.row_bytes, (offset + span - 1) // rows.row_bytes
        q, rem = divmod(last - first + 1, rows.banks)
        return RowUse(last - first + 1, q + (1 if rem else 0))
    count = 1
    for n, _ in outer:
        count *= n
    if count <= _SMALL:
        return _walked(rows, _starts_py(offset, outer), run)
    return _counted(rows, _starts_np(offset, outer), run)


def interleaved_row_use(rows: DramRows, sides: list[tuple[int, tuple[int, ...], int, tuple[int, ...]]]) -> RowUse:
    """The :class:`RowUse` of several blocks streamed in lock step (a synchronised transfer's members, in core
    order): each block's runs, in descriptor order, interleaved run by run (run ``i`` of every block before run
    ``i + 1`` of any), as one open-page walk.  ``sides``: each block's ``(offset past the region's base, shape,
    itemsize, byte strides)``.  One block is :func:`row_use` of it."""
    if len(sides) == 1:
        return row_use(rows, *sides[0])
    runs = [_runs(shape, itemsize, strides) for _, shape, itemsize, strides in sides]
    starts = [_starts_np(offset, outer) for (offset, *_), (run, outer) in zip(sides, runs) if run]
    lengths = [run for run, _ in runs if run]
    if not starts:
        return NO_ROWS
    # Run i of block j at position (i, j): a stable sort by run index keeps core order within each i.
    index = np.concatenate([np.arange(len(s), dtype=np.int64) for s in starts])
    order = np.argsort(index, kind="stable")
    first_byte = np.concatenate(starts)[order]
    last_byte = np.concatenate([s + (n - 1) for s, n in zip(starts, lengths)])[order]
    return _counted_rows(rows, first_byte // rows.row_bytes, last_byte // rows.row_bytes)


def copy_row_use(rows: DramRows, src_offset: int, dst_offset: int, shape: tuple[int, ...], itemsize: int,
                 src_strides: tuple[int, ...], dst_strides: tuple[int, ...]) -> RowUse:
    """The :class:`RowUse` of a copy within one DRAM whose controller drains writes in batches
    (``write_batch_bytes``, :mod:`sim.engine.turnaround`): the reads of a batch's bytes, then their writes, batch
    after batch, as one open-page walk over the banks both sides share (a read row and a write row in one bank
    reopen each other at every batch).  ``src_offset`` and ``dst_offset``: each side's first element past the
    region's base."""
    # (the banks repeat every period_bytes: both sides shifted alike by whole periods open the same rows' banks)
    base = min(src_offset, dst_offset) // rows.period_bytes * rows.period_bytes
    return _copy_row_use(rows, src_offset - base, dst_offset - base, tuple(shape), itemsize, tuple(src_strides),
                         tuple(dst_strides))


@memoized
def _copy_row_use(rows: DramRows, src_offset: int, dst_offset: int, shape: tuple[int, ...], itemsize: int,
                  src_strides: tuple[int, ...], dst_strides: tuple[int, ...]) -> RowUse:
    run, outer = _runs(shape, itemsize, src_strides)
    if run == 0:
        return NO_ROWS
    reads = _cut(rows, _starts_np(src_offset, outer), run)
    run, outer = _runs(shape, itemsize, dst_strides)
    return _batch_walk(rows, reads, _cut(rows, _starts_np(dst_offset, outer), run))


def interleaved_copy_row_use(rows: DramRows, reads: list[tuple[int, tuple[int, ...], int, tuple[int, ...]]],
                             writes: list[tuple[int, tuple[int, ...], int, tuple[int, ...]]]) -> RowUse:
    """The :class:`RowUse` of a synchronised transfer whose members read and write one DRAM whose controller drains
    writes in batches: the members' reads as one stream (interleaved run by run in core order, as
    :func:`interleaved_row_use` streams them) and their writes as another, served as :func:`copy_row_use` serves one
    copy's two sides: the reads of a batch's bytes, then their writes, batch after batch.  ``reads`` and ``writes``:
    each member's block ``(offset past the region's base, shape, itemsize, byte strides)``."""
    read_stream, write_stream = _merged(reads), _merged(writes)
    if read_stream is None:
        return NO_ROWS if write_stream is None else _counted_rows(rows, *_cut(rows, *write_stream)[1:])
    if write_stream is None:
        return _counted_rows(rows, *_cut(rows, *read_stream)[1:])
    return _batch_walk(rows, _cut(rows, *read_stream), _cut(rows, *write_stream))


def _merged(blocks: list[tuple[int, tuple[int, ...], int, tuple[int, ...]]]) -> tuple[np.ndarray, np.ndarray] | None:
    """Several blocks' runs streamed in lock step (run ``i`` of every block, in the blocks' order, before run
    ``i + 1`` of any): each run's first byte and length, in stream order; None when every block is empty."""
    starts, lengths, index = [], [], []
    for offset, shape, itemsize, strides in blocks:
        run, outer = _runs(shape, itemsize, strides)
        if run:
            first = _starts_np(offset, outer)
            starts.append(first)
            lengths.append(np.full(first.size, run, dtype=np.int64))
            index.append(np.arange(first.size, dtype=np.int64))
    if not starts:
        return None
    order = np.argsort(np.concatenate(index), kind="stable")
    return np.concatenate(starts)[order], np.concatenate(lengths)[order]


def _cut(rows: DramRows, starts: np.ndarray, run: int | np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A stream of runs (their first bytes in the order they stream, and their length: one for all, or each its
    own) cut where its runs end and where its bytes cross a write batch: each piece's batch and the first and last
    rows it touches."""
    batch = rows.write_batch_bytes
    if isinstance(run, np.ndarray):
        offsets = np.cumsum(run) - run  # where each run starts in the stream
        total = int(offsets[-1] + run[-1])
    else:
        offsets = np.arange(0, starts.size * run, run, dtype=np.int64)
        total = starts.size * run
    lo = _union(offsets, np.arange(0, total, batch, dtype=np.int64))  # where each piece starts
    hi = np.append(lo[1:], total)
    which = lo // run if not isinstance(run, np.ndarray) else np.searchsorted(offsets, lo, side="right") - 1
    first = starts[which] + (lo - offsets[which])
    return lo // batch, first // rows.row_bytes, (first + (hi - lo) - 1) // rows.row_bytes


def _union(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The distinct values of two sorted arrays, sorted: merged by a stable sort (two sorted runs merge in linear
    time; ``np.union1d`` hashes, several times slower on millions)."""
    both = np.concatenate((a, b))
    both.sort(kind="stable")
    keep = np.empty(both.size, dtype=bool)
    keep[:1] = True
    np.not_equal(both[1:], both[:-1], out=keep[1:])
    return both[keep]


def _batch_walk(rows: DramRows, reads: tuple[np.ndarray, np.ndarray, np.ndarray],
                writes: tuple[np.ndarray, np.ndarray, np.ndarray]) -> RowUse:
    """One open-page walk of a copy's read and write pieces (:func:`_cut`): batch ``k``'s reads, then its writes;
    a window of about :data:`WINDOW` pieces of each side at a time."""
    walk = _Walk(rows)
    r_batch, w_batch = reads[0], writes[0]
    batches = int(max(r_batch[-1] if len(r_batch) else 0, w_batch[-1] if len(w_batch) else 0)) + 1
    step = max(1, batches * WINDOW // max(1, len(r_batch) + len(w_batch)))
    for k in range(0, batches, step):
        ra, rb = np.searchsorted(r_batch, (k, k + step))
        wa, wb = np.searchsorted(w_batch, (k, k + step))
        # A stable sort on 2k (reads) and 2k + 1 (writes) keeps each side's order.
        order = np.argsort(np.concatenate([2 * r_batch[ra:rb], 2 * w_batch[wa:wb] + 1]), kind="stable")
        walk.feed(np.concatenate([reads[1][ra:rb], writes[1][wa:wb]])[order],
                  np.concatenate([reads[2][ra:rb], writes[2][wa:wb]])[order])
    return walk.use()


def _runs(shape: tuple[int, ...], itemsize: int, strides: tuple[int, ...]) -> tuple[int, list[tuple[int, int]]]:
    """:func:`~sim.model.plan.run_layout`, with a run of 0 bytes for an empty block."""
    if any(n == 0 for n in shape):
        return 0, []
    return run_layout(shape, itemsize, strides)


def _gapless_span(outer: list[tuple[int, int]], run: int, row_bytes: int) -> int | None:
    """The bytes from the block's first to its last when its runs come in address order with gaps shorter than a
    row (so its rows are every row from its first to its last, each opened once); None otherwise."""
    extent = run
    for n, st in reversed(outer):
        if st < extent or st - extent >= row_bytes:
            return None
        extent += (n - 1) * st
    return extent


def _starts_py(offset: int, outer: list[tuple[int, int]]) -> list[int]:
    starts = [offset]
    for n, st in outer:
        starts = [s + i * st for s in starts for i in range(n)]
    return starts


def _starts_np(offset: int, outer: list[tuple[int, int]]) -> np.ndarray:
    starts = np.array([offset], dtype=np.int64)
    for n, st in outer:
        starts = (starts[:, None] + np.arange(n, dtype=np.int64) * st).ravel()
    return starts


def _walked(rows: DramRows, starts: list[int], run: int) -> RowUse:
    """Open-page walk of a few runs: a row opens when its bank holds another."""
    size, banks = rows.row_bytes, rows.banks
    open_row: dict[int, int] = {}
    per_bank: dict[int, int] = {}
    for s in starts:
        for r in range(s // size, (s + run - 1) // size + 1):
            b = r % banks
            if open_row.get(b) != r:
                open_row[b] = r
                per_bank[b] = per_bank.get(b, 0) + 1
    return RowUse(sum(per_bank.values()), max(per_bank.values()))


def _counted(rows: DramRows, starts: np.ndarray, run: int) -> RowUse:
    """The same count as :func:`_walked`, vectorised: the rows each run touches, in order, grouped by bank (a
    stable sort keeps each bank's order); a row opens where its bank's previous row differs.  Rows met in
    order need no sort: each distinct one opens once."""
    size = rows.row_bytes
    return _counted_rows(rows, starts // size, (starts + (run - 1)) // size)


def _counted_rows(rows: DramRows, first: np.ndarray, last: np.ndarray) -> RowUse:
    """:func:`_counted` of runs given by the first and last row each touches, in walk order."""
    walk = _Walk(rows)
    walk.feed(first, last)
    return walk.use()


class _Walk:
    """An open-page walk of runs given by the first and last row each touches, fed in order a window of
    :data:`WINDOW` runs at a time (each bank's open row carried from one window to the next), so that a copy of
    millions of runs is counted in arrays of a few tens of MB: a row opens where its bank holds another."""

    def __init__(self, rows: DramRows):
        self.banks = rows.banks
        self.open = np.full(rows.banks, -1, dtype=np.int64)  # each bank's open row (-1: none yet)
        self.per_bank = np.zeros(rows.banks, dtype=np.int64)  # activations so far

    def feed(self, first: np.ndarray, last: np.ndarray) -> None:
        """The runs touching rows ``first[i]`` to ``last[i]``, in walk order, walked after those fed before."""
        for a in range(0, len(first), WINDOW):
            self._window(first[a:a + WINDOW], last[a:a + WINDOW])

    def use(self) -> RowUse:
        """The walk's activations so far, and the most of them in one bank."""
        return RowUse(int(self.per_bank.sum()), int(self.per_bank.max()))

    def _window(self, first: np.ndarray, last: np.ndarray) -> None:
        if not len(first):
            return
        if np.array_equal(first, last):
            seq = first
        else:
            spans = last - first + 1
            ends = np.cumsum(spans)
            seq = np.repeat(first - (ends - spans), spans) + np.arange(int(ends[-1]), dtype=np.int64)
        if len(seq) == 1 or bool((seq[1:] >= seq[:-1]).all()):
            # Rows in order (positive strides, runs one after another): a row left is never met again in the
            # window, so each distinct row opens once, but the first of each bank if the bank holds it already.
            keep = np.empty(len(seq), dtype=bool)
            keep[0] = True
            np.not_equal(seq[1:], seq[:-1], out=keep[1:])
            r = seq[keep]
            b = r % self.banks
            bs, firsts = np.unique(b, return_index=True)
            held = self.open[bs] == r[firsts]
            np.add.at(self.per_bank, b, 1)
            self.per_bank[bs[held]] -= 1
            last_banks, from_end = np.unique(b[::-1], return_index=True)
            self.open[last_banks] = r[len(r) - 1 - from_end]  # each bank's last row of the window
            return
        bank = seq % self.banks
        # (a stable sort of 16-bit keys is a radix sort: linear, where int64 keys would take a merge sort)
        order = np.argsort(bank.astype(np.int16) if self.banks <= 1 << 15 else bank, kind="stable")
        b, r = bank[order], seq[order]
        opens = np.empty(len(b), dtype=bool)
        opens[1:] = (b[1:] != b[:-1]) | (r[1:] != r[:-1])
        opens[0] = True
        starts = np.flatnonzero(np.concatenate(([True], b[1:] != b[:-1])))  # each bank's first run here
        opens[starts] = self.open[b[starts]] != r[starts]
        self.per_bank += np.bincount(b[opens], minlength=self.banks)
        ends = np.append(starts[1:], len(b)) - 1
        self.open[b[ends]] = r[ends]
