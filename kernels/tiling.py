"""Planning helpers shared by the kernels: scratchpad arenas and tensor-block DMA descriptors."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from kernels.base import PlanContext
from sim.model.plan import DoesNotFit, Operand, Transfer, c_strides


def align_up(value: int, alignment: int) -> int:
    """``value`` rounded up to a multiple of ``alignment``."""
    return -(-value // alignment) * alignment


class Arena:
    """A bump allocator over one core's staging scratchpad (the same local addresses on every core).

    ``resource`` names the staging level it allocates in (None: the vector level), for the
    :class:`~sim.model.plan.DoesNotFit` it raises when full.
    """

    def __init__(self, base: int, size_bytes: int, alignment: int, what: str = "scratchpad",
                 resource: str | None = None):
        self.base = base
        self.size_bytes = size_bytes
        self.alignment = alignment
        self.what = what
        self.resource = resource
        self.used = 0

    def alloc(self, size_bytes: int) -> int:
        """Reserve ``size_bytes`` (aligned); DoesNotFit when the scratchpad is full."""
        start = align_up(self.used, self.alignment)
        if start + size_bytes > self.size_bytes:
            raise DoesNotFit(self.resource, start + size_bytes, self.size_bytes,
                             f"tile does not fit the {self.what}: needs {start + size_bytes} bytes of "
                             f"{self.size_bytes} at [{self.base:#x}, {self.base + self.size_bytes:#x})")
        self.used = start + size_bytes
        return self.base + start

    def operand(self, shape: Sequence[int], dtype: np.dtype) -> Operand:
        """Reserve room for a dense array and describe it as a compute operand."""
        shape = tuple(int(s) for s in shape)
        n = math.prod(shape) * np.dtype(dtype).itemsize  # Python ints: exact, and cheap per tile
        return Operand(self.alloc(n), shape, np.dtype(dtype))


def fits(sizes_bytes: Sequence[int], capacity_bytes: int, alignment: int) -> bool:
    """True when buffers of ``sizes_bytes``, each aligned, fit in ``capacity_bytes``."""
    return sum(align_up(s, alignment) for s in sizes_bytes) <= capacity_bytes


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


def channel_grain(ctx: PlanContext, addr: int, itemsize: int, lanes: int) -> int:
    """Channels a block should come in multiples of: whole vectors of ``lanes``, and whole memory bursts of the
    region holding ``addr`` (a block of a row narrower than a burst still moves the whole burst)."""
    region = next((r for r in ctx.target.regions if r.contains(addr, 1)), None)
    burst_elems = max(1, (region.burst_bytes if region is not None else 1) // itemsize)
    return math.lcm(lanes, burst_elems)


def padded_lanes(n: int, lanes: int) -> int:
    """``n`` rounded up to whole vectors of ``lanes``: the lanes a vector loop actually spends."""
    return align_up(max(n, 1), lanes)


def split_even(total: int, parts: int) -> list[tuple[int, int]]:
    """Split ``range(total)`` into ``parts`` contiguous ``(start, stop)`` ranges, sizes differing by one at most.

    Empty ranges are dropped, so fewer than ``parts`` ranges come back when
    ``total < parts``.
    """
    base, extra = divmod(total, parts)
    out, start = [], 0
    for i in range(parts):
        n = base + (1 if i < extra else 0)
        if n:
            out.append((start, start + n))
        start += n
    return out
