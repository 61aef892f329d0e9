"""GEMM's numerics: the reference product and the computes of a tile and of a split-k reduction."""

from __future__ import annotations

import numpy as np

from kernels.gemm.constants import F32


def gemm_reference(a: np.ndarray, b: np.ndarray, c: np.ndarray | None, trans_a: bool, trans_b: bool) -> np.ndarray:
    """op(A)·op(B) (+ C) of dense matrices, accumulated in fp32 and returned in A's dtype."""
    oa = (a.T if trans_a else a).astype(F32)
    ob = (b.T if trans_b else b).astype(F32)
    acc = oa @ ob
    if c is not None:
        acc += c.astype(F32)
    return acc.astype(a.dtype)


class _TileFn:
    """Compute.fn of one tile: the panel's product with the B block, added to the accumulator (or to the old C
    when ``beta`` is 1 on the first k block), returned as fp32 accumulator rows or, on the last k block of an
    fp16 call, as fp16 C rows."""

    def __init__(self, trans_a: bool, trans_b: bool, ncols: int, first: bool, beta: bool, out_dtype: np.dtype | None):
        self.trans_a, self.trans_b, self.ncols = trans_a, trans_b, ncols
        self.first, self.beta, self.out_dtype = first, beta, out_dtype

    def __call__(self, panel: np.ndarray, bblock: np.ndarray, *rest: np.ndarray) -> tuple[np.ndarray]:
        oa = (panel.T if self.trans_a else panel).astype(F32)
        ob = (bblock.T if self.trans_b else bblock).astype(F32)
        acc = oa @ ob
        if not self.first or self.beta:
            acc += rest[0].astype(F32)  # the accumulator, or the old C on the first k block
        return (acc if self.out_dtype is None else acc.astype(self.out_dtype),)


class _SumPartials:
    """Compute.fn of a split-k reduction tile: the cores' fp32 partial rows summed (+ the old C), in C's dtype."""

    def __init__(self, n: int, dtype: np.dtype):
        self.n, self.dtype = n, dtype

    def __call__(self, stack: np.ndarray, *old: np.ndarray) -> tuple[np.ndarray]:
        acc = stack.sum(axis=0, dtype=F32).reshape(-1, self.n)
        if old:
            acc += old[0].astype(F32)
        return (acc.astype(self.dtype),)

