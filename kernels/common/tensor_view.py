"""A tensor view: a buffer and the logical C-ordered tensor a kernel sees in it, yielding the DMA transfers of its
blocks.

A kernel names a block by its start and shape in the view's own index space (a batch-norm gradient sees its 4-D
tensor as ``[A, C, B]``, a GEMM sees A as ``[rows, pitch]``); the view works out the addresses and byte strides
(:mod:`kernels.common.transfers`).  ``load`` fills a staged operand from its block, ``store`` writes one back;
``load_flat`` / ``store_flat`` move a run of elements of a flattened view as one plain copy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kernels.common.transfers import block_in, block_out, operand_in, operand_out
from sim.model.call import Buffer
from sim.model.plan import Operand, Transfer


@dataclass(frozen=True)
class TensorView:
    """The bytes at ``addr`` seen as a dense C-ordered tensor of ``shape``, ``itemsize`` bytes per element."""

    addr: int
    shape: tuple[int, ...]
    itemsize: int
    name: str = ""

    @classmethod
    def of(cls, buffer: Buffer, shape: Sequence[int] | None = None) -> TensorView:
        """``buffer`` seen as ``shape`` (default: its own shape); a view of as many elements or fewer."""
        return cls(buffer.addr, tuple(int(s) for s in (buffer.shape if shape is None else shape)),
                   buffer.dtype.itemsize, buffer.name)

    def load(self, op: Operand, start: Sequence[int]) -> Transfer:
        """DMA the block at ``start`` (of ``op``'s shape) into staged operand ``op``."""
        return operand_in(op, self.addr, self.shape, start)

    def store(self, op: Operand, start: Sequence[int]) -> Transfer:
        """DMA staged operand ``op`` out to its block at ``start``."""
        return operand_out(op, self.addr, self.shape, start)

    def load_block(self, start: Sequence[int], block_shape: Sequence[int], dst: int) -> Transfer:
        """DMA the block at ``start`` of ``block_shape`` into dense staging memory at ``dst``."""
        return block_in(self.addr, self.shape, self.itemsize, start, block_shape, dst)

    def store_block(self, src: int, start: Sequence[int], block_shape: Sequence[int]) -> Transfer:
        """DMA dense staging memory at ``src`` out to the block at ``start`` of ``block_shape``."""
        return block_out(src, self.addr, self.shape, self.itemsize, start, block_shape)

    def load_flat(self, op: Operand, first: int) -> Transfer:
        """One plain copy: elements ``[first, first + op's elements)`` of the flattened view into ``op``."""
        return Transfer.contiguous(self.addr + first * self.itemsize, op.addr, op.size_bytes)

    def store_flat(self, op: Operand, first: int) -> Transfer:
        """One plain copy: ``op`` out to elements ``[first, first + op's elements)`` of the flattened view."""
        return Transfer.contiguous(op.addr, self.addr + first * self.itemsize, op.size_bytes)
