"""ReluGrad, a kernel written outside dspsim: ``dx = dy * (x > 0)``, as TensorFlow's ``ReluGrad(gradients, features)``.

docs/writing-a-kernel.md walks through this file.  It uses only dspsim's public pieces: the plan IR
(``sim.model.plan``), the call types (``sim.model.call``), the Kernel protocol's ``PlanContext`` and precision
table (``kernels.base``), the argument validators (``kernels.common.args``) and the loop builders
(``kernels.common.loops``).  Register it with
``sim.register_kernel(KERNEL)``, name this file in a run-config's ``kernels:`` list, or install
``examples/relu_grad_pkg`` (its ``dspsim.kernels`` entry point); then ``fp_relu_grad_s``, ``fp_relu_grad_p``,
``hp_relu_grad_s`` and ``hp_relu_grad_p`` work like any shipped symbol.

The plan: the flattened elements are split over the call's cores in whole vectors; each core streams its
share through two slots of its vector staging level (double buffering: tile i loads into slot i % 2 while
tile i - 1 computes in the other), one tile = DMA dy and x in, compute dx, DMA dx out.  The compute states
the loop the core runs (``kernels.common.loops``): per vector two loads, a compare, a select and a store.
The tiling key ``tile_elements`` sets the elements per tile; :meth:`ReluGrad.tiling_space` declares it with
the values worth trying, and without a tiling the simulator prices those and keeps the cheapest.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from kernels.base import PRECISION_DTYPES, PlanContext
from kernels.common.args import check_args, require_address, require_ints
from kernels.common.loops import elementwise
from kernels.common.tiling_space import IntKey, TilingSpace, complete
from sim.errors import KernelArgError
from sim.model.call import ArgSpec, BoundCall, Buffer, MemoryReader
from sim.model.plan import Compute, DoesNotFit, Operand, Phase, Plan, Tile, Transfer

#: Vector element operations of the math per element: a compare (x > 0) and a multiply.
FLOPS_PER_ELEMENT = 2
#: Largest buffer a call may name (bytes): more than any chip's memory is a typo.
MAX_BUFFER_BYTES = 1 << 40
#: The heuristic tile cuts a core's share into this many tiles (enough for the pipeline to overlap).
TILES_PER_CORE = 4


# -- numerics ----------------------------------------------------------------------------------------

def relu_grad(dy: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``dy * (x > 0)`` in the gradients' dtype (a NaN or inf gradient times 0 is NaN, as in TensorFlow)."""
    with np.errstate(invalid="ignore"):  # inf * 0 = NaN is the answer, not a mistake to warn about
        return dy * (x > 0).astype(dy.dtype)


def relu_grad_tile(dy: np.ndarray, x: np.ndarray) -> tuple[np.ndarray]:
    """A tile's compute: the engine passes the staged input operands and writes back one array per output."""
    return (relu_grad(dy, x),)


# -- the kernel ---------------------------------------------------------------------------------------

def _align_up(value: int, alignment: int) -> int:
    return -(-value // alignment) * alignment


class ReluGrad:
    """The ReluGrad kernel: the Kernel protocol of ``kernels.base`` (name, args, bind, plan, tiling_space)."""

    name = "relu_grad"
    precisions = ("fp32", "fp16")  # the symbols fp_relu_grad_* and hp_relu_grad_*
    variants = ("s", "p")  # shared-memory (core_mask) and private-memory (core) symbols
    fp16_arithmetic = "computed in fp16: a compare and a multiply per element, exact in fp16"
    args = (
        ArgSpec("dy", "in_ptr", "address of the incoming gradients (shape)"),
        ArgSpec("x", "in_ptr", "address of the features, the forward ReLU's input (shape)"),
        ArgSpec("dx", "out_ptr", "address of the gradient wrt the features (shape, output)"),
        ArgSpec("shape", "ints", "sizes of dy, x and dx"),
    )

    def bind(self, symbol: str, precision: str, variant: str, cores: tuple[int, ...],
             args: Mapping[str, Any], read: MemoryReader) -> BoundCall:
        """Check the arguments and describe the call's three buffers."""
        a = check_args(symbol, self.args, args)
        shape = require_ints("shape", a["shape"], minimum=1)
        dtype = PRECISION_DTYPES[precision]
        elements = math.prod(shape)
        if elements * dtype.itemsize > MAX_BUFFER_BYTES:
            raise KernelArgError(f"argument 'shape': {list(shape)} is {elements} elements, more than any chip's "
                                 f"memory")
        buffers = (Buffer("dy", require_address("dy", a["dy"]), shape, dtype, "input"),
                   Buffer("x", require_address("x", a["x"]), shape, dtype, "input"),
                   Buffer("dx", require_address("dx", a["dx"]), shape, dtype, "output"))
        return BoundCall(symbol, precision, variant, cores, buffers, {"elements": elements})

    # -- planning ---------------------------------------------------------------------------------

    def plan(self, call: BoundCall, ctx: PlanContext) -> Plan:
        """Each core's share of the elements in tiles through two slots of the vector staging level."""
        lay = _Layout(call, ctx)
        per_tile = complete(self.tiling_space(call, ctx), ctx)["tile_elements"]
        lay.check(per_tile)
        tiles: dict[int, tuple[Tile, ...]] = {}
        for core, (first, end) in zip(call.cores, lay.shares()):
            if end > first:
                tiles[core] = tuple(lay.tile(i, e0, min(e0 + per_tile, end))
                                    for i, e0 in enumerate(range(first, end, per_tile)))
        return Plan(cores=call.cores, phases=(Phase("relu_grad", tiles, barrier_after=False),),
                    precision=call.precision)

    def tiling_space(self, call: BoundCall, ctx: PlanContext) -> TilingSpace:
        """One key, ``tile_elements``: worth trying, four tiles per core (the heuristic), two, eight, and one as
        large as a slot holds; a tile fits when its three arrays fit a slot."""
        lay = _Layout(call, ctx)  # DoesNotFit when not even one vector fits
        first, end = lay.shares()[0]
        tries = [lay.heuristic_tile(end - first, n) for n in (TILES_PER_CORE, TILES_PER_CORE // 2,
                                                              TILES_PER_CORE * 2, 1)]
        return TilingSpace(IntKey("tile_elements", 1, lay.elements, "elements per tile", values=tries),
                           fit=lambda t: lay.check(t["tile_elements"]),
                           tiles=lambda t: sum(-(-(e - f) // t["tile_elements"]) for f, e in lay.shares()))


class _Layout:
    """Where a core's tiles live: two slots of the vector staging level, each holding dy, x and dx of a tile."""

    def __init__(self, call: BoundCall, ctx: PlanContext):
        self.dy, self.x, self.dx = (call.buffer(n) for n in ("dy", "x", "dx"))
        self.itemsize = self.dy.dtype.itemsize
        self.elements = call.attrs["elements"]
        self.cores = len(call.cores)
        self.precision = call.precision
        self.core = ctx.target.core  # its functional units price the tile's loop
        level = ctx.vector_level  # per-core: the same local addresses on every core
        align = max(level.alignment_bytes, 1)
        #: Elements of one vector: a share and a tile are whole vectors (but the last).
        self.lanes = max(1, ctx.target.core.vector_width_bytes // self.itemsize)
        slot_bytes = level.size_bytes // 2 // align * align
        self.slots = (level.base, level.base + slot_bytes)
        # Three arrays per slot, each starting aligned: the most elements a tile can take, in whole vectors.
        self.stride_bytes = (slot_bytes // 3) // align * align
        self.budget = self.stride_bytes // self.itemsize // self.lanes * self.lanes
        if self.budget < 1:
            raise DoesNotFit(None, 3 * align, slot_bytes, "a tile of one element per array does not fit a slot")

    def shares(self) -> list[tuple[int, int]]:
        """``(first, end)`` element of each core's share: whole vectors, as even as they can be."""
        vectors = -(-self.elements // self.lanes)
        base, extra = divmod(vectors, self.cores)
        out, start = [], 0
        for i in range(self.cores):
            n = (base + (i < extra)) * self.lanes
            out.append((min(start, self.elements), min(start + n, self.elements)))
            start += n
        return out

    def heuristic_tile(self, span: int, tiles: int = TILES_PER_CORE) -> int:
        """Elements per tile that cut a share of ``span`` into ``tiles`` tiles of whole vectors, as a slot allows."""
        return max(1, min(self.budget, _align_up(-(-max(span, 1) // tiles), self.lanes), self.elements))

    def tile(self, tile_id: int, e0: int, e1: int) -> Tile:
        """Tile ``tile_id``: elements ``[e0, e1)`` of dy and x in, dx out, through slot ``tile_id % 2``."""
        n, size = e1 - e0, self.itemsize
        base = self.slots[tile_id % 2]
        dy_op, x_op, dx_op = (Operand(base + k * self.stride_bytes, (n,), self.dy.dtype) for k in range(3))
        offset = e0 * size
        loads = (Transfer.contiguous(self.dy.addr + offset, dy_op.addr, n * size),
                 Transfer.contiguous(self.x.addr + offset, x_op.addr, n * size))
        stores = (Transfer.contiguous(dx_op.addr, self.dx.addr + offset, n * size),)
        # The core's loop: per vector, dy and x loaded, a compare and a select on the vector ALU, dx stored.
        loop = elementwise(self.core, self.precision, n, loads=2, stores=1, valu=2, label="relu_grad")
        compute = Compute(relu_grad_tile, (dy_op, x_op), (dx_op,), flops=FLOPS_PER_ELEMENT * n,
                          precision=self.precision, loops=(loop,))
        return Tile(tile_id, loads, compute, stores, slot=tile_id % 2)

    def check(self, per_tile: int) -> None:
        """DoesNotFit when tiles of ``per_tile`` elements do not fit a slot."""
        if per_tile > self.budget:
            raise DoesNotFit(None, 3 * per_tile * self.itemsize, 3 * self.budget * self.itemsize,
                             f"tiling tile_elements={per_tile} does not fit: a slot of the vector staging level "
                             f"holds {self.budget} elements of dy, x and dx")


KERNEL = ReluGrad()
