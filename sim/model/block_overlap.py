"""Whether two sides of DMA transfers share a byte: exactly, not by their spans.

Two strided blocks whose spans overlap often share no byte: the channel slices of one NHWC tensor interleave row
by row.  The plan check's race rules (``transfer-overlap``, ``store-race``, ``core-race``) ask :func:`sides_meet`,
which says whether the bytes themselves meet.  A block is its first byte, its contiguous run and the dimensions
that place its runs (``sim.model.plan.run_layout``), taken as the set of bytes it covers: a dimension stepping
backwards is turned round, one stepping by 0 (a broadcast) repeats bytes and is dropped, the dimensions are sorted
by stride, largest outermost, and those continuing the run join it (a transposed block is then the dense block it
covers), and those that step on evenly from the one inside are joined (the channel slice of an NHWC tensor is one
dimension of N x H x W rows).  It is *nested* (:func:`nested`) when each dimension's stride is at least the
extent of the block inside it: then the runs that can meet an interval are found by division, dimension by
dimension, trying at most two positions of a dimension whose runs the interval falls between.  Two nested
blocks of the same one-dimensional layout meet when their offset is within a run of a point of the difference
lattice, found the same way; otherwise the runs of the block with fewer are tried one by one, up to
:data:`MAX_RUNS_TRIED`.  Past that, or for blocks that are not nested, the runs of the block with fewer are
listed and sorted (up to :data:`MAX_RUNS_CHUNKED`, more than the plan check lets a transfer's side place: its
``bounds`` rule caps them at 2**24) and the other's, :data:`MAX_RUNS_LISTED` at a time, looked up in them with
numpy.  Only blocks of more runs than that are taken not to meet: no transfer that passed ``bounds`` has them.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Sequence

import numpy as np

from sim.model.plan import Transfer, run_layout

#: The most runs of a block tried one by one against a nested block (beyond them: listed).
MAX_RUNS_TRIED = 4096
#: The most runs of a block listed at once (with numpy) to compare blocks of different layouts: the block of more
#: runs is looked up so many at a time in the other's, listed whole.
MAX_RUNS_LISTED = 1 << 20
#: The most runs of either block compared so; blocks of more are taken not to meet (above the 2**24 runs the plan
#: check's ``bounds`` rule lets a transfer's side place).
MAX_RUNS_CHUNKED = 1 << 26

#: ``(first byte, bytes per run, dimensions (count, stride) outermost first)``.
Layout = tuple[int, int, tuple[tuple[int, int], ...]]


def layout_of(t: Transfer, side: str) -> Layout:
    """The layout of side ``side`` ('src' or 'dst') of ``t``, as the set of bytes it covers (the module's
    docstring): its first byte, its run and its dimensions, outermost first."""
    if side == "src":
        offset, run, dims = _shape_layout(t.shape, t.itemsize, t.src_strides)
        return t.src + offset, run, dims
    offset, run, dims = _shape_layout(t.shape, t.itemsize, t.dst_strides)
    return t.dst + offset, run, dims


@functools.lru_cache(maxsize=4096)
def _shape_layout(shape: tuple[int, ...], itemsize: int, strides: tuple[int, ...]) -> Layout:
    """:func:`layout_of` of a block at address 0 (the plans' blocks come in few shapes: worked out once each)."""
    base = 0
    run, dims = run_layout(shape, itemsize, strides)
    if any(s <= 0 for _, s in dims) or any(a[1] < b[1] for a, b in zip(dims, dims[1:])):
        # Turn backward dimensions round (from their lowest byte), drop broadcasts, largest stride outermost,
        # and let the innermost that continue the run join it.
        turned: list[tuple[int, int]] = []
        for n, s in dims:
            if s < 0:
                base += (n - 1) * s
                s = -s
            if s:
                turned.append((n, s))
        turned.sort(key=lambda d: d[1], reverse=True)
        while turned and turned[-1][1] == run:
            run *= turned.pop()[0]
        dims = turned
    merged: list[tuple[int, int]] = []
    for n, s in reversed(dims):  # innermost first: a dimension that steps on evenly from the one inside joins it
        if merged and s == merged[-1][0] * merged[-1][1]:
            merged[-1] = (n * merged[-1][0], merged[-1][1])
        else:
            merged.append((n, s))
    return base, run, tuple(reversed(merged))


def _extent(run: int, dims: Sequence[tuple[int, int]]) -> int:
    """Bytes from a nested block's first byte to one past its last."""
    for n, s in reversed(dims):
        run += (n - 1) * s
    return run


def nested(run: int, dims: Sequence[tuple[int, int]]) -> bool:
    """Whether each dimension's stride is at least the extent of the block inside it (runs in address order)."""
    extent = run
    for n, s in reversed(dims):
        if s < extent:
            return False
        extent += (n - 1) * s
    return True


def _hits(base: int, run: int, dims: Sequence[tuple[int, int]], lo: int, hi: int) -> bool:
    """Whether the nested block at ``base`` has a byte in ``[lo, hi)``."""
    if not dims:
        return base < hi and lo < base + run
    (n, s), inner = dims[0], dims[1:]
    width = _extent(run, inner)
    # The positions k whose inner block [base + k s, base + k s + width) meets [lo, hi).
    first = max(0, (lo - base - width) // s + 1)
    last = min(n - 1, -((base - hi) // s) - 1)
    return any(_hits(base + k * s, run, inner, lo, hi) for k in range(first, last + 1))


def sides_meet(a: Layout, b: Layout) -> bool:
    """Whether the blocks ``a`` and ``b`` share a byte (the module's docstring says when the answer is a guess)."""
    a_base, a_run, a_dims = a
    b_base, b_run, b_dims = b
    if not (a_base < b_base + _extent(b_run, b_dims) and b_base < a_base + _extent(a_run, a_dims)):
        return False  # (their spans: a dimension's stride is never negative here)
    if not (nested(a_run, a_dims) and nested(b_run, b_dims)):
        return _listed_meet(a, b)
    if not a_dims or not b_dims:  # one run against a block
        base, run, dims, lo = (b_base, b_run, b_dims, a_base) if not a_dims else (a_base, a_run, a_dims, b_base)
        width = a_run if not a_dims else b_run
        return _hits(base, run, dims, lo, lo + width)
    if a_run == b_run and a_dims == b_dims and len(a_dims) == 1:
        # The same rows, shifted: row i of one meets row j of the other when |offset + (i - j) s| < run.
        (n, s), = a_dims
        offset = b_base - a_base
        return _hits(-(n - 1) * s, 1, ((2 * n - 1, s),), -offset - a_run + 1, -offset + a_run)
    (few_base, few_run, few_dims), (other_base, other_run, other_dims) = \
        (a, b) if run_count(a_dims) <= run_count(b_dims) else (b, a)
    if run_count(few_dims) > MAX_RUNS_TRIED:
        return _listed_meet(a, b)
    for ks in itertools.product(*(range(n) for n, _ in few_dims)):
        start = few_base + sum(k * s for k, (_, s) in zip(ks, few_dims))
        if _hits(other_base, other_run, other_dims, start, start + few_run):
            return True
    return False


def run_count(dims: Sequence[tuple[int, int]]) -> int:
    """How many runs the dimensions place."""
    count = 1
    for n, _ in dims:
        count *= n
    return count


def run_starts(base: int, dims: Sequence[tuple[int, int]]) -> np.ndarray:
    """The first bytes of a block's runs (int64), in no particular order."""
    starts = np.array([base], dtype=np.int64)
    for n, s in dims:
        starts = (starts[:, None] + np.arange(n, dtype=np.int64) * s).ravel()
    return starts


def covered(layout: Layout) -> list[tuple[int, int]] | None:
    """The bytes of a block of ``layout`` as disjoint intervals in address order (its runs merged); None for a
    block of more than :data:`MAX_RUNS_LISTED` runs."""
    got = _covered_pairs(layout[1], layout[2])
    if got is None:
        return None
    base = layout[0]
    return [(base + lo, base + hi) for lo, hi in got]


@functools.lru_cache(maxsize=1024)
def _covered_pairs(run: int, dims: tuple[tuple[int, int], ...]) -> tuple[tuple[int, int], ...] | None:
    """:func:`covered_offsets` as Python ints, pairs of (start, end) (the plan rules shift them by a block's first
    byte at every transfer: a plan's blocks come in a few layouts)."""
    got = covered_offsets(run, dims)
    return None if got is None else tuple(zip(got[0].tolist(), got[1].tolist()))


@functools.lru_cache(maxsize=256)
def covered_offsets(run: int, dims: tuple[tuple[int, int], ...]) -> tuple[np.ndarray, np.ndarray] | None:
    """:func:`covered` of a block at address 0, as arrays of starts and ends (worked out once per layout: tiles
    reuse their slot's layouts)."""
    if not dims:
        return np.zeros(1, dtype=np.int64), np.full(1, run, dtype=np.int64)
    if run_count(dims) > MAX_RUNS_LISTED:
        return None
    starts = np.sort(run_starts(0, dims))
    return coalesced_sorted(starts, starts + run)


def coalesced_sorted(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Intervals ``[starts[i], ends[i])``, sorted by start, merged where they meet or touch: the merged ones'
    starts and ends."""
    reach = np.maximum.accumulate(ends)
    opens = np.ones(starts.size, dtype=bool)
    opens[1:] = starts[1:] > reach[:-1]
    first = np.flatnonzero(opens)
    last = np.append(first[1:], starts.size) - 1
    return starts[first], reach[last]


def starts_at(base: int, dims: Sequence[tuple[int, int]], index: np.ndarray) -> np.ndarray:
    """The first bytes of a block's runs number ``index`` (counted outermost dimension first)."""
    starts = np.full(index.shape, base, dtype=np.int64)
    for n, s in reversed(dims):
        starts += (index % n) * s
        index = index // n
    return starts


def _listed_meet(a: Layout, b: Layout) -> bool:
    """Whether ``a`` and ``b`` share a byte, by listing both blocks' runs: a run of one meets the other when the
    last of the other's runs starting below its end ends above its start (the other's runs are all as long).  The
    block of fewer runs is listed whole and sorted, the other :data:`MAX_RUNS_LISTED` runs at a time (up to
    :data:`MAX_RUNS_CHUNKED` runs each); blocks of more are taken not to meet."""
    if run_count(a[2]) < run_count(b[2]):
        a, b = b, a
    (a_base, a_run, a_dims), (b_base, b_run, b_dims) = a, b
    if run_count(a_dims) > MAX_RUNS_CHUNKED:
        return False
    origin = min(a_base, b_base)  # (offsets from it: the addresses' own values may not fit an int64 product)
    b_starts = _sorted_starts(b_dims) + (b_base - origin)
    count = run_count(a_dims)
    for first in range(0, count, MAX_RUNS_LISTED):
        lo = starts_at(a_base - origin, a_dims, np.arange(first, min(count, first + MAX_RUNS_LISTED),
                                                           dtype=np.int64))
        last = np.searchsorted(b_starts, lo + a_run, side="left") - 1
        ok = last >= 0
        if np.any(b_starts[last[ok]] + b_run > lo[ok]):
            return True
    return False


@functools.lru_cache(maxsize=2)
def _sorted_starts(dims: tuple[tuple[int, int], ...]) -> np.ndarray:
    """The first bytes of the runs of a block at address 0, sorted (kept for the last few layouts: a huge block
    listed against several others is listed once; read-only, since it is shared)."""
    starts = np.sort(run_starts(0, dims))
    starts.flags.writeable = False
    return starts
