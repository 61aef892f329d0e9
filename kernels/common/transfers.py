"""DMA descriptors of tensor blocks: a block of a C-ordered tensor in memory to or from dense staging memory.

A kernel names the block by its start and shape in the tensor's own index space; these helpers work out
the byte strides.  :func:`channel_grain` says which block widths move whole vectors and whole memory bursts.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from kernels.base import PlanContext
from sim.model.plan import Operand, Transfer, c_strides


def block_in(tensor_addr: int, tensor_shape: Sequence[int], itemsize: int, starts: Sequence[int],
             block_shape: Sequence[int], dst: int) -> Transfer:
    """DMA a block of a C-ordered tensor (``starts`` + ``block_shape`` per dim) into dense scratch at ``dst``."""
    strides = c_strides(tensor_shape, itemsize)
    src = tensor_addr + sum(s * st for s, st in zip(starts, strides))
    return Transfer.block(src, dst, block_shape, itemsize, strides)


def block_out(src: int, tensor_addr: int, tensor_shape: Sequence[int], itemsize: int, starts: Sequence[int],
              block_shape: Sequence[int]) -> Transfer:
    """DMA dense scratch at ``src`` out to a block of a C-ordered tensor."""
    strides = c_strides(tensor_shape, itemsize)
    dst = tensor_addr + sum(s * st for s, st in zip(starts, strides))
    return Transfer.block(src, dst, block_shape, itemsize, c_strides(block_shape, itemsize), strides)


def operand_in(op: Operand, tensor_addr: int, tensor_shape: Sequence[int], starts: Sequence[int]) -> Transfer:
    """DMA the block of a tensor that fills scratch operand ``op``."""
    return block_in(tensor_addr, tensor_shape, op.dtype.itemsize, starts, op.shape, op.addr)


def operand_out(op: Operand, tensor_addr: int, tensor_shape: Sequence[int], starts: Sequence[int]) -> Transfer:
    """DMA scratch operand ``op`` out to its block of a tensor."""
    return block_out(op.addr, tensor_addr, tensor_shape, op.dtype.itemsize, starts, op.shape)


def sub_operand(op: Operand, start: int, n: int) -> Operand:
    """Elements [start, start + n) of a 1-D operand, as an operand."""
    return Operand(op.addr + start * op.dtype.itemsize, (n,), op.dtype)


def channel_grain(ctx: PlanContext, addr: int, itemsize: int, lanes: int) -> int:
    """Channels a block should come in multiples of: whole vectors of ``lanes``, and whole memory bursts of the
    region holding ``addr`` (a block of a row narrower than a burst still moves the whole burst)."""
    region = next((r for r in ctx.target.regions if r.contains(addr, 1)), None)
    burst_elems = max(1, (region.burst_bytes if region is not None else 1) // itemsize)
    return math.lcm(lanes, burst_elems)
