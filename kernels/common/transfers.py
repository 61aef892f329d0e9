"""DMA descriptors of tensor blocks: a block of a C-ordered tensor in memory to or from dense staging memory.

A kernel names the block by its start and shape in the tensor's own index space; these helpers work out
the byte strides.  :func:`channel_grain` says which block widths move whole vectors and whole memory bursts.
"""

from __future__ import annotations

import functools
import math
import operator
from collections.abc import Sequence

from kernels.base import PlanContext
from sim.model.plan import Operand, Transfer, c_strides


@functools.lru_cache(maxsize=1024)
def _layout(tensor_shape: tuple, itemsize: int, block_shape: tuple
            ) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """(the tensor's strides, the block's shape, the dense block's strides), as :meth:`Transfer.block` normalises
    them (Python ints): the same for every block of a tensor with the same shape, so worked out once."""
    return (c_strides(tensor_shape, itemsize), tuple(int(n) for n in block_shape),
            tuple(int(n) for n in c_strides(block_shape, itemsize)))


def _block_layout(tensor_shape: Sequence[int], itemsize: int, block_shape: Sequence[int]
                  ) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]] | None:
    """:func:`_layout` when it is exact for these arguments, else None (worked out afresh by the caller).

    Only a plain int ``itemsize`` keeps every stride a Python int (the start address sums them, and its type
    is the plan's); the shapes may be anything :func:`c_strides` and ``int()`` read alike, whose key then
    equals theirs (a numpy int and an equal int give the same strides).
    """
    if type(itemsize) is not int:
        return None
    try:
        return _layout(tensor_shape if type(tensor_shape) is tuple else tuple(tensor_shape), itemsize,
                       block_shape if type(block_shape) is tuple else tuple(block_shape))
    except TypeError:  # an unhashable size
        return None


def block_in(tensor_addr: int, tensor_shape: Sequence[int], itemsize: int, starts: Sequence[int],
             block_shape: Sequence[int], dst: int) -> Transfer:
    """DMA a block of a C-ordered tensor (``starts`` + ``block_shape`` per dim) into dense scratch at ``dst``."""
    layout = _block_layout(tensor_shape, itemsize, block_shape)
    if layout is None:
        strides = c_strides(tensor_shape, itemsize)
        src = tensor_addr + sum(s * st for s, st in zip(starts, strides))
        return Transfer.block(src, dst, block_shape, itemsize, strides)
    strides, shape, dense = layout
    src = tensor_addr + sum(map(operator.mul, starts, strides))  # the sum above, at C speed
    return Transfer(src, dst, shape, itemsize, strides, dense)  # what Transfer.block makes of the same


def block_out(src: int, tensor_addr: int, tensor_shape: Sequence[int], itemsize: int, starts: Sequence[int],
              block_shape: Sequence[int]) -> Transfer:
    """DMA dense scratch at ``src`` out to a block of a C-ordered tensor."""
    layout = _block_layout(tensor_shape, itemsize, block_shape)
    if layout is None:
        strides = c_strides(tensor_shape, itemsize)
        dst = tensor_addr + sum(s * st for s, st in zip(starts, strides))
        return Transfer.block(src, dst, block_shape, itemsize, c_strides(block_shape, itemsize), strides)
    strides, shape, dense = layout
    dst = tensor_addr + sum(map(operator.mul, starts, strides))
    return Transfer(src, dst, shape, itemsize, dense, strides)


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
