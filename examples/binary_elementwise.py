"""Binary elementwise ops, a kernel written outside dspsim: ``out = a + b`` (TensorFlow's AddV2) or
``out = a * (0 < b < 6)`` (Relu6Grad(gradients=a, features=b)), chosen by the ``op`` argument.

The elementwise pieces of a layer's backward pass that dspsim does not ship: a residual block's gradient adds
the shortcut's to the main path's, and MobileNetV2 clips its activations with ReLU6.  Registered the way
docs/writing-a-kernel.md shows (a program's or run-config's ``kernels:`` list names this file); its symbols are
``{fp,hp}_binary_elementwise_{s,p}``.  It uses only dspsim's public pieces, as examples/relu_grad.py does.

The plan: the flattened elements split over the call's cores in whole vectors; each core streams its share
through two slots of the vector staging level (tile i loads into slot i % 2 while tile i - 1 computes), one tile
= DMA a and b in, compute, DMA out.  The loop per vector: two loads, the op on the vector ALU (an add; or two
compares, an and and a select), a store.  No tiling keys: tiles are as large as a slot holds, at least four per
core when the share is large enough.  ``hp_`` symbols compute in fp16 (an add rounds once, as TensorFlow's fp16
add does; the mask is exact).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from kernels.base import PRECISION_DTYPES, PlanContext
from kernels.common.args import check_args, require_address, require_choice, require_ints
from kernels.common.loops import elementwise
from kernels.common.scratch import align_down, align_up
from kernels.common.tiling_space import split_units
from sim.errors import KernelArgError
from sim.model.call import ArgSpec, BoundCall, Buffer, MemoryReader
from sim.model.plan import Compute, DoesNotFit, Operand, Phase, Plan, Tile, Transfer

#: The ops, and the vector ALU issues each takes per vector.
OPS: dict[str, int] = {"add": 1, "relu6_grad": 4}
#: Largest buffer a call may name (bytes): more than any chip's memory is a typo.
MAX_BUFFER_BYTES = 1 << 40
#: A core's share is cut into at least this many tiles when a slot allows (enough for the pipeline to overlap).
TILES_PER_CORE = 4


def binary(op: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The op on two arrays of one dtype, in that dtype."""
    if op == "add":
        return a + b
    with np.errstate(invalid="ignore"):  # inf * 0 = NaN is the answer (as in TensorFlow)
        return a * ((b > 0) & (b < 6)).astype(a.dtype)


class BinaryElementwise:
    """The kernel: the Kernel protocol of ``kernels.base`` (name, args, bind, plan; no tiling space)."""

    name = "binary_elementwise"
    precisions = ("fp32", "fp16")
    variants = ("s", "p")
    fp16_arithmetic = "computed in fp16: an add rounds once per element; relu6_grad's mask is exact"
    args = (
        ArgSpec("a", "in_ptr", "address of the first operand (shape): the gradients for relu6_grad"),
        ArgSpec("b", "in_ptr", "address of the second operand (shape): the features for relu6_grad"),
        ArgSpec("out", "out_ptr", "address of the result (shape, output)"),
        ArgSpec("shape", "ints", "sizes of a, b and out"),
        ArgSpec("op", "str", "add (a + b) or relu6_grad (a where 0 < b < 6, else 0)"),
    )

    def bind(self, symbol: str, precision: str, variant: str, cores: tuple[int, ...],
             args: Mapping[str, Any], read: MemoryReader) -> BoundCall:
        """Check the arguments and describe the call's three buffers."""
        a = check_args(symbol, self.args, args)
        shape = require_ints("shape", a["shape"], minimum=1)
        op = require_choice("op", a["op"], tuple(OPS))
        dtype = PRECISION_DTYPES[precision]
        if math.prod(shape) * dtype.itemsize > MAX_BUFFER_BYTES:
            raise KernelArgError(f"argument 'shape': {list(shape)} is more than any chip's memory")
        buffers = tuple(Buffer(n, require_address(n, a[n]), shape, dtype, "output" if n == "out" else "input")
                        for n in ("a", "b", "out"))
        return BoundCall(symbol, precision, variant, cores, buffers, {"elements": math.prod(shape), "op": op})

    def plan(self, call: BoundCall, ctx: PlanContext) -> Plan:
        """Each core's share of the elements in tiles through two slots of the vector staging level."""
        a, b, out = (call.buffer(n) for n in ("a", "b", "out"))
        op, elements = call.attrs["op"], call.attrs["elements"]
        size = a.dtype.itemsize
        core = ctx.target.core
        lanes = max(1, core.vector_width_bytes // size)
        level = ctx.vector_level
        align = max(level.alignment_bytes, 1)
        slot_bytes = align_down(level.size_bytes // 2, align)
        stride = align_down(slot_bytes // 3, align)  # a, b and out of a tile, each starting aligned
        budget = stride // size // lanes * lanes
        if budget < 1:
            raise DoesNotFit(None, 3 * align, slot_bytes, "a tile of one vector per array does not fit a slot")

        def tile(tile_id: int, e0: int, e1: int) -> Tile:
            base = level.base + (tile_id % 2) * slot_bytes
            ops = [Operand(base + k * stride, (e1 - e0,), a.dtype) for k in range(3)]
            nbytes = (e1 - e0) * size
            loads = tuple(Transfer.contiguous(buf.addr + e0 * size, o.addr, nbytes) for buf, o in zip((a, b), ops))
            loop = elementwise(core, call.precision, e1 - e0, loads=2, stores=1, valu=OPS[op], label=op)
            compute = Compute(lambda x, y: (binary(op, x, y),), (ops[0], ops[1]), (ops[2],), flops=e1 - e0,
                              precision=call.precision, loops=(loop,))
            return Tile(tile_id, loads, compute, (Transfer.contiguous(ops[2].addr, out.addr + e0 * size, nbytes),),
                        slot=tile_id % 2)

        tiles: dict[int, tuple[Tile, ...]] = {}
        for c, (first, end) in zip(call.cores, split_units(elements, lanes, len(call.cores))):
            if end > first:
                per = max(1, min(budget, align_up(-(-(end - first) // TILES_PER_CORE), lanes)))
                tiles[c] = tuple(tile(i, e0, min(e0 + per, end)) for i, e0 in enumerate(range(first, end, per)))
        return Plan(cores=call.cores, phases=(Phase(op, tiles, barrier_after=False),), precision=call.precision)


KERNEL = BinaryElementwise()
