"""The partial-sum exchange through the shared staging level: how cores reduce a result they each hold part of.

Every core that summed part of the work stores its partial (``elements`` values) to its own slot of the
shared level (``ctx.shared_level``: a window of shared memory the kernels own during a call); a barrier
follows; then each reducing core loads its slice of every core's partial in one 2-D descriptor (a dense
``[parts, n]`` block), sums over the parts and stores the result.  The kernel decides who reduces which
slice (the first core everything, every core everything, or each core its own share) and what happens
around it; this module lays out the slots and writes the descriptors and the reduction.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from kernels.base import PlanContext
from kernels.common.loops import streaming
from kernels.common.tiling_space import split_even
from sim.model.plan import Compute, DoesNotFit, Loop, Operand, TileFn, Transfer
from sim.model.target import CoreModel, StagingArea

F32 = np.dtype(np.float32)


def summed_parts(out_dtype: np.dtype, parts: np.ndarray) -> tuple[np.ndarray]:
    """The parts (axis 0) summed in fp32, returned in ``out_dtype`` (what :func:`sum_partials` calls)."""
    return (parts.sum(axis=0, dtype=F32).astype(out_dtype, copy=False),)


def sum_partials(out_dtype: np.dtype = F32) -> TileFn:
    """The compute function of a reduction: the parts (axis 0) summed in fp32, returned in ``out_dtype`` (a
    :class:`~sim.model.plan.TileFn`: a hashable value)."""
    return TileFn(summed_parts, (np.dtype(out_dtype),))


@dataclass(frozen=True)
class Exchange:
    """Partials of ``parts`` cores in the shared level: part ``j`` at ``level.base + j * stride_bytes``.

    Build it with :meth:`through`, which checks that the partials fit the level.
    """

    level: StagingArea
    parts: int
    elements: int
    dtype: np.dtype
    stride_bytes: int
    core: CoreModel | None = None  # the core that reduces (its units state the reduction's loop)

    @classmethod
    def through(cls, ctx: PlanContext, parts: int, elements: int, dtype: np.dtype = F32,
                stride_bytes: int | None = None, what: str = "partial sums") -> Exchange:
        """The exchange of ``parts`` partials of ``elements`` values each through ``ctx.shared_level``.

        ``stride_bytes`` spaces the parts' slots (default: packed, one partial after the other).
        DoesNotFit naming the shared level when the partials do not fit its window.
        """
        dtype = np.dtype(dtype)
        partial = elements * dtype.itemsize
        stride = partial if stride_bytes is None else stride_bytes
        needed = (parts - 1) * stride + partial if parts else 0
        level = ctx.shared_level
        if level is None:
            raise DoesNotFit(None, needed, 0, f"{ctx.target.name} has no shared staging level to exchange the "
                                              f"{what} of {parts} cores through")
        if needed > level.size_bytes or stride < partial:
            raise DoesNotFit(level.name, max(needed, parts * partial), level.size_bytes,
                             f"the {level.name} staging window [{level.base:#x}, {level.end:#x}) "
                             f"({level.size_bytes} bytes) cannot hold the {what} of {parts} cores "
                             f"({parts} x {partial} bytes)")
        return cls(level, parts, elements, dtype, stride, ctx.target.core)

    @staticmethod
    def share_bytes(ctx: PlanContext, parts: int, alignment: int) -> int:
        """Bytes of the shared level each of ``parts`` cores may use (aligned down; 0 without a shared level):
        the stride of an exchange whose partials go in rounds (:meth:`rounds`)."""
        level = ctx.shared_level
        if level is None or parts <= 0:
            return 0
        return level.size_bytes // parts // alignment * alignment

    def addr(self, part: int, start: int = 0) -> int:
        """Address of element ``start`` of part ``part``'s partial."""
        return self.level.base + part * self.stride_bytes + start * self.dtype.itemsize

    def store(self, part: int, src: int, start: int = 0, count: int | None = None) -> Transfer:
        """Part ``part`` stores elements [start, start + count) of its partial (contiguous at ``src``)."""
        n = self.elements - start if count is None else count
        return Transfer.contiguous(src, self.addr(part, start), n * self.dtype.itemsize)

    def gather(self, dst: int, start: int = 0, count: int | None = None) -> Transfer:
        """Elements [start, start + count) of every part's partial into a dense ``[parts, count]`` block at
        ``dst``: one 2-D descriptor (the parts lie ``stride_bytes`` apart)."""
        n = self.elements - start if count is None else count
        item = self.dtype.itemsize
        return Transfer.block(self.addr(0, start), dst, (self.parts, n), item, (self.stride_bytes, item))

    def gather_into(self, op: Operand, start: int = 0) -> Transfer:
        """:meth:`gather` filling operand ``op`` (its elements are ``parts`` times the slice's)."""
        return self.gather(op.addr, start, int(np.prod(op.shape, dtype=np.int64)) // self.parts)

    def reduce(self, parts_op: Operand, out: Operand, precision: str = "fp32") -> Compute:
        """The reduction of a gathered block into ``out`` (in ``out``'s dtype), in ``precision``.  Adding the cores'
        partials is work the split adds, not the math's: no flops, and its loop (:meth:`reduce_loop`) is what the
        core spends."""
        return Compute(sum_partials(out.dtype), (parts_op,), (out,), flops=0, precision=precision,
                       loops=(self.reduce_loop(out, precision),))

    def reduce_loop(self, out: Operand, precision: str = "fp32") -> Loop:
        """The loop of :meth:`reduce`: per vector of ``out``, the ``parts`` partials' vectors loaded from the
        gathered block (stored in the exchange's dtype), ``parts - 1`` adds (a tree: log2(parts) deep) and the
        result stored in ``out``'s dtype (converted when it differs from ``precision``'s)."""
        if self.core is None:
            raise ValueError("an Exchange built without its core (use Exchange.through) cannot state its loop")
        elements = int(np.prod(out.shape, dtype=np.int64))
        return streaming(self.core, precision, elements, loads=self.parts, stores=1, fmac=self.parts - 1,
                         load_itemsize=self.dtype.itemsize, store_itemsize=np.dtype(out.dtype).itemsize,
                         fmac_depth=math.ceil(math.log2(self.parts)) if self.parts > 1 else 0,
                         label=f"sum of {self.parts} partials")

    @staticmethod
    def rounds(elements: int, per_round: int) -> list[tuple[int, int]]:
        """Element ranges exchanged one round at a time when a core's whole partial is larger than its share of
        the level (``per_round`` elements at most each, split evenly)."""
        if per_round < 1:
            return []
        return split_even(elements, -(-elements // per_round))


def reducers(cores: Sequence[int], slices: int) -> list[int]:
    """The core reducing each of ``slices`` slices when they are dealt over ``cores`` in turn."""
    return [cores[k % len(cores)] for k in range(slices)]
