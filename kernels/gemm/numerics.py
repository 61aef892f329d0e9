"""GEMM's numerics: the reference product and the computes of a tile and of a split-k reduction."""

from __future__ import annotations

import numpy as np

from kernels.common.halves import widened, widened_again
from kernels.gemm.constants import F32


def gemm_reference(a: np.ndarray, b: np.ndarray, c: np.ndarray | None, trans_a: bool, trans_b: bool) -> np.ndarray:
    """op(A)·op(B) (+ C) of dense matrices, accumulated in fp32 and returned in A's dtype."""
    oa = (a.T if trans_a else a).astype(F32)
    ob = (b.T if trans_b else b).astype(F32)
    acc = oa @ ob
    if c is not None:
        acc += c.astype(F32)
    return acc.astype(a.dtype)


def tile_product(trans_a: bool, trans_b: bool, ncols: int, first: bool, beta: bool, out_dtype: np.dtype | None,
                 c_transposed: bool, panel: np.ndarray, bblock: np.ndarray, *rest: np.ndarray) -> tuple[np.ndarray]:
    """The compute of one tile (a :class:`~sim.model.plan.TileFn` of the parameters before ``panel``): the
    panel's product with the B block, added to the accumulator (or to the old C when ``beta`` is 1 on the first
    k block), returned as fp32 accumulator rows or, once finished (``out_dtype``), as C's rows in C's dtype.
    ``c_transposed`` (a TT call, planned as Cᵀ = B·A): the old C comes in as C's rows, the finished tile goes out
    as C's rows, each the transpose of the tile's."""
    # fp32 operands as they lie (no copy), fp16 ones widened by table look-up: the same values as astype gives, in
    # the same memory order (a transposed operand widened first, then transposed), so the same product.
    oa = widened(panel).T if trans_a else widened(panel)
    # (the B block stays in place for a row of panels: its fp32 values are looked up while its bytes are unchanged)
    ob = widened_again(bblock).T if trans_b else widened_again(bblock)
    acc = oa @ ob
    if not first or beta:
        old = widened(rest[0])  # the accumulator, or the old C on the first k block
        acc += old.T if c_transposed and first else old
    if out_dtype is None:
        return (acc,)
    out = acc.astype(out_dtype)
    return (np.ascontiguousarray(out.T) if c_transposed else out,)


def sum_partial_rows(n: int, dtype: np.dtype, stack: np.ndarray, *old: np.ndarray) -> tuple[np.ndarray]:
    """The compute of a split-k reduction tile: the cores' fp32 partial rows summed (+ the old C), in C's dtype."""
    acc = stack.sum(axis=0, dtype=F32).reshape(-1, n)
    if old:
        acc += old[0].astype(F32)
    return (acc.astype(dtype),)

