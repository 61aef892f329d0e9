"""BiasAddGrad, a kernel written outside dspsim with a cross-core reduction: ``bias_grad[c] = sum of dy[..., c]``.

docs/writing-a-kernel.md walks through this file after ReluGrad.  TensorFlow's ``BiasAddGrad`` (NHWC): the
gradient seen as ``[rows, channels]``.  The plan: the rows are split over the cores; each core streams its rows
through two slots of its vector staging level and adds them into running sums that stay in the level's fixed
area from tile to tile; it then publishes its partial sums to the shared level; a barrier; the first core
gathers every partial, sums them and stores ``bias_grad``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from kernels.base import PlanContext
from kernels.common.args import require_int
from kernels.common.binding import bind_arguments, bound_call
from kernels.common.exchange import Exchange
from kernels.common.loops import streaming
from kernels.common.pipeline import Pipeline
from kernels.common.shares import core_shares
from kernels.common.split_reduce import SplitReduce
from kernels.common.streams import FIXED_SLOT, CoreStream, plan_of
from kernels.common.tensor_view import TensorView
from sim.model.call import ArgSpec, BoundCall, MemoryReader
from sim.model.plan import Compute, Plan, TileFn

F32 = np.dtype(np.float32)
#: Rows per tile: a few tiles per core keep the pipeline busy; fewer when a slot holds fewer.
ROWS_PER_TILE = 64


def add_rows(dy: np.ndarray, sums: np.ndarray) -> tuple[np.ndarray]:
    """A tile's compute: the running sums plus the tile's rows summed (fp32).  ``sums`` is an input and an output
    of the same operand: the compute updates it in place."""
    return (sums + dy.sum(axis=0, dtype=F32),)


def zeros(channels: int) -> tuple[np.ndarray]:
    """The first tile's compute: the running sums start at zero.  It reads nothing (AM holds whatever the last call
    left, and a compute may read only bytes the call wrote: the plan rule ``unwritten-read``)."""
    return (np.zeros(channels, F32),)


class BiasAddGrad:
    """The BiasAddGrad kernel (fp32, shared-memory symbol ``fp_bias_add_grad_s``)."""

    name = "bias_add_grad"
    precisions = ("fp32",)
    variants = ("s",)  # the partial sums go through the shared staging level
    args = (
        ArgSpec("dy", "in_ptr", "address of the incoming gradients [rows, channels]"),
        ArgSpec("bias_grad", "out_ptr", "address of the gradient wrt the bias [channels] (output)"),
        ArgSpec("rows", "int", "rows of dy (N·H·W)"),
        ArgSpec("channels", "int", "channels of dy and bias_grad"),
    )

    def bind(self, symbol: str, precision: str, variant: str, cores: tuple[int, ...],
             args: Mapping[str, Any], read: MemoryReader) -> BoundCall:
        """Check the sizes and describe dy and bias_grad."""
        a = bind_arguments(symbol, precision, self.args, args)
        rows, channels = require_int("rows", a["rows"], minimum=1), require_int("channels", a["channels"], minimum=1)
        return bound_call(a, variant, cores, [a.buffer("dy", (rows, channels), size_arg="rows"),
                                              a.buffer("bias_grad", (channels,), size_arg="channels")], None)

    def plan(self, call: BoundCall, ctx: PlanContext) -> Plan:
        """Phase 1: each core sums its rows into partial sums and publishes them; phase 2: the first core reduces."""
        dy, out = TensorView.of(call.buffer("dy")), TensorView.of(call.buffer("bias_grad"))
        rows, channels = dy.shape
        shares = core_shares(call.cores, rows)
        # The running sums, then the gathered partials, in the fixed area; dy's tiles in two slots after it.
        level = Pipeline(ctx.vector_level, ("dy",), fixed_bytes=(1 + len(shares)) * channels * 4 + 2 * 64)
        fixed = level.fixed()
        sums, parts = fixed.operand((channels,), F32), fixed.operand((len(shares), channels), F32)
        per_tile = max(1, min(ROWS_PER_TILE, level.require(4, channels) // channels))
        reduce = SplitReduce(Exchange.through(ctx, len(shares), channels, what="partial bias gradients"), "bias")
        partials: dict[int, CoreStream] = {}
        for part, (core, r0, r1) in enumerate(shares):
            stream = partials[core] = CoreStream()
            stream.add((), Compute(TileFn(zeros, (channels,)), (), (sums,), flops=0, precision="fp32",
                                   loops=(streaming(ctx.target.core, "fp32", channels, stores=1, label="zero"),)),
                       (), slot=FIXED_SLOT)
            for a in range(r0, r1, per_tile):
                (tile,) = level.tile_operands(stream.slot, (min(per_tile, r1 - a), channels), F32)
                # Per vector of the tile's rows: one load and one add into the running sums (a carried chain);
                # the epilogue loads the sums and stores them (named a store: its latency ends the loop).
                loop = streaming(ctx.target.core, "fp32", tile.shape[0] * channels, loads=1, fmac=1, sums=1,
                                 epilogue={"vls": 1, "vls.store": 1}, label="rows summed")
                stream.add((dy.load(tile, (a, 0)),), Compute(add_rows, (tile, sums), (sums,), flops=tile.shape[0]
                                                             * channels, precision="fp32", loops=(loop,)), ())
            stream.add((), None, (reduce.publish(part, sums.addr),), slot=FIXED_SLOT)
        first = CoreStream()
        reduce.reduce_into(first, parts, sums, 0, (out.store(sums, (0,)),), slot=FIXED_SLOT)
        return plan_of(call, reduce.phases(partials, {shares[0][0]: first}))


KERNEL = BiasAddGrad()
