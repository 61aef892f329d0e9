"""ReluGrad, a kernel written outside dspsim: ``dx = dy * (x > 0)``, as TensorFlow's ``ReluGrad(gradients, features)``.

docs/writing-a-kernel.md walks through this file.  Register it with ``sim.register_kernel(KERNEL)``, name this
file in a run-config's ``kernels:`` list, or install ``examples/relu_grad_pkg`` (its ``dspsim.kernels`` entry
point); then ``fp_relu_grad_s``, ``fp_relu_grad_p``, ``hp_relu_grad_s`` and ``hp_relu_grad_p`` work like any
shipped symbol.  The plan: the elements are split over the cores in whole vectors; each core streams its share
through two slots of its vector staging level, one tile = DMA dy and x in, compute dx, DMA dx out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from kernels.base import PlanContext
from kernels.common.args import require_ints
from kernels.common.binding import bind_arguments, bound_call
from kernels.common.loops import elementwise
from kernels.common.pipeline import Pipeline
from kernels.common.shares import core_shares
from kernels.common.streams import CoreStream, phase_of, plan_of
from kernels.common.tensor_view import TensorView
from kernels.common.tiling_space import IntKey, TilingSpace, complete, pipeline_tile
from sim.model.call import ArgSpec, BoundCall, MemoryReader
from sim.model.plan import Compute, Plan

#: Vector element operations of the math per element: a compare (x > 0) and a multiply.
FLOPS_PER_ELEMENT = 2
#: The heuristic tile cuts a core's share into this many tiles (enough for the pipeline to overlap).
TILES_PER_CORE = 4


def relu_grad(dy: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``dy * (x > 0)`` in the gradients' dtype (a NaN or inf gradient times 0 is NaN, as in TensorFlow)."""
    with np.errstate(invalid="ignore"):  # inf * 0 = NaN is the answer, not a mistake to warn about
        return dy * (x > 0).astype(dy.dtype)


def relu_grad_tile(dy: np.ndarray, x: np.ndarray) -> tuple[np.ndarray]:
    """A tile's compute: the engine passes the staged input operands and writes back one array per output."""
    return (relu_grad(dy, x),)


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
        """Check the arguments and describe the call's three buffers (all of ``shape``)."""
        a = bind_arguments(symbol, precision, self.args, args)
        shape = require_ints("shape", a["shape"], minimum=1)
        return bound_call(a, variant, cores, [a.buffer(n, shape, size_arg="shape") for n in ("dy", "x", "dx")],
                          attrs=None)

    def plan(self, call: BoundCall, ctx: PlanContext) -> Plan:
        """Each core's share of the elements in tiles through two slots of the vector staging level."""
        lay = _Layout(call, ctx)
        per_tile = complete(self.tiling_space(call, ctx), ctx)["tile_elements"]
        lay.check(per_tile)
        streams = {core: CoreStream() for core, _, _ in lay.shares}
        for core, first, end in lay.shares:
            for e0 in range(first, end, per_tile):
                lay.tile(streams[core], e0, min(e0 + per_tile, end))
        return plan_of(call, [phase_of("relu_grad", streams, barrier_after=False)])

    def tiling_space(self, call: BoundCall, ctx: PlanContext) -> TilingSpace:
        """One key, ``tile_elements``: worth trying, four tiles per core (the heuristic), two, eight, and one as
        large as a slot holds; a tile fits when its three arrays fit a slot."""
        lay = _Layout(call, ctx)  # DoesNotFit when not even one vector fits
        _, first, end = lay.shares[0]
        tries = [max(1, min(lay.budget, pipeline_tile(end - first, lay.lanes, n), lay.elements))
                 for n in (TILES_PER_CORE, TILES_PER_CORE // 2, TILES_PER_CORE * 2, 1)]
        return TilingSpace(IntKey("tile_elements", 1, lay.elements, "elements per tile", values=tries),
                           fit=lambda t: lay.check(t["tile_elements"]),
                           tiles=lambda t: sum(-(-(e - f) // t["tile_elements"]) for _, f, e in lay.shares))


class _Layout:
    """Where a core's tiles live: two slots of the vector staging level, each holding dy, x and dx of a tile."""

    def __init__(self, call: BoundCall, ctx: PlanContext):
        self.dy, self.x, self.dx = (TensorView.of(call.buffer(n)) for n in ("dy", "x", "dx"))
        self.dtype, self.precision, self.core = call.buffer("dy").dtype, call.precision, ctx.target.core
        self.elements = call.buffer("dy").size_bytes // self.dtype.itemsize
        #: Elements of one vector: a share and a tile are whole vectors (but the last).
        self.lanes = max(1, ctx.target.core.vector_width_bytes // self.dtype.itemsize)
        self.shares = core_shares(call.cores, self.elements, self.lanes)
        self.slots = Pipeline(ctx.vector_level, ("dy", "x", "dx"), slots=2, what="vector staging level")
        self.budget = self.slots.require(self.dtype.itemsize, self.lanes)  # DoesNotFit: not one vector fits

    def tile(self, stream: CoreStream, e0: int, e1: int) -> None:
        """The next tile of ``stream``: elements ``[e0, e1)`` of dy and x in, dx out, in the stream's next slot."""
        dy_op, x_op, dx_op = self.slots.tile_operands(stream.slot, (e1 - e0,), self.dtype)
        # The core's loop: per vector, dy and x loaded, a compare and a select on the vector ALU, dx stored.
        loop = elementwise(self.core, self.precision, e1 - e0, loads=2, stores=1, valu=2, label="relu_grad")
        compute = Compute(relu_grad_tile, (dy_op, x_op), (dx_op,), flops=FLOPS_PER_ELEMENT * (e1 - e0),
                          precision=self.precision, loops=(loop,))
        loads = (self.dy.load_flat(dy_op, e0), self.x.load_flat(x_op, e0))
        stream.add(loads, compute, (self.dx.store_flat(dx_op, e0),))

    def check(self, per_tile: int) -> None:
        """DoesNotFit when tiles of ``per_tile`` elements do not fit a slot."""
        if per_tile > self.budget:
            raise self.slots.too_big("tile_elements", per_tile, self.budget, self.dtype.itemsize)


KERNEL = ReluGrad()
