"""Whether two sides of DMA transfers share a byte: exactly, not by their spans.

Two strided blocks whose spans overlap often share no byte: the channel slices of one NHWC tensor interleave row
by row.  The plan check's race rules (``transfer-overlap``, ``store-race``) ask :func:`sides_meet`, which says
whether the bytes themselves meet.  A block is its first byte, its contiguous run and the dimensions that place
its runs (``sim.model.plan.run_layout``), those that step on evenly from the one inside joined (the channel slice
of an NHWC tensor is one dimension of N x H x W rows).  It is *nested* when each dimension's stride is positive
and at least the extent of the block inside it (every C-ordered block of a tensor is): then the runs that can meet
an interval are found by division, dimension by dimension, trying at most two positions of a dimension whose runs
the interval falls between.  Two nested blocks of the same one-dimensional layout meet when their offset is within
a run of a point of the difference lattice, found the same way; otherwise the runs of the block with fewer are
tried one by one, up to :data:`MAX_RUNS_TRIED`.  Past that, or for blocks that are not nested, the answer is that
they do not meet: the rules refuse only the races they can prove.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from sim.model.plan import Transfer, run_layout

#: The most runs of a block tried one by one against another (a block of more, not of the other's layout, is
#: taken not to meet it).
MAX_RUNS_TRIED = 4096

#: ``(first byte, bytes per run, dimensions (count, stride) outermost first)``.
Layout = tuple[int, int, tuple[tuple[int, int], ...]]


def layout_of(t: Transfer, side: str) -> Layout:
    """The layout of side ``side`` ('src' or 'dst') of ``t`` (its first byte the address the side names)."""
    strides = t.src_strides if side == "src" else t.dst_strides
    run, dims = run_layout(t.shape, t.itemsize, strides)
    merged: list[tuple[int, int]] = []
    for n, s in reversed(dims):  # innermost first: a dimension that steps on evenly from the one inside joins it
        if merged and s == merged[-1][0] * merged[-1][1]:
            merged[-1] = (n * merged[-1][0], merged[-1][1])
        else:
            merged.append((n, s))
    return (t.src if side == "src" else t.dst), run, tuple(reversed(merged))


def _extent(run: int, dims: Sequence[tuple[int, int]]) -> int:
    """Bytes from a nested block's first byte to one past its last."""
    for n, s in reversed(dims):
        run += (n - 1) * s
    return run


def _nested(run: int, dims: Sequence[tuple[int, int]]) -> bool:
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
        return False  # (their spans, for nested blocks; a block not nested is not judged below either)
    if not (_nested(a_run, a_dims) and _nested(b_run, b_dims)):
        return False
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
        (a, b) if _runs(a_dims) <= _runs(b_dims) else (b, a)
    if _runs(few_dims) > MAX_RUNS_TRIED:
        return False
    for ks in itertools.product(*(range(n) for n, _ in few_dims)):
        start = few_base + sum(k * s for k, (_, s) in zip(ks, few_dims))
        if _hits(other_base, other_run, other_dims, start, start + few_run):
            return True
    return False


def _runs(dims: Sequence[tuple[int, int]]) -> int:
    count = 1
    for n, _ in dims:
        count *= n
    return count
