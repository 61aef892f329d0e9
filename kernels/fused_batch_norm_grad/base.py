"""What both batch-norm gradient plans share: the call's buffers and views, the computes and the loops the core runs."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from kernels.base import PRECISION_DTYPES, PlanContext
from kernels.common.binding import attrs_of
from kernels.common.loops import streaming, sums_epilogue
from kernels.common.tensor_view import TensorView
from kernels.common.tiling_space import padded_lanes
from kernels.fused_batch_norm_grad.attrs import BatchNormAttrs
from kernels.fused_batch_norm_grad.numerics import COMPUTE_PRECISION, FLOPS_CHANNEL_RS
from sim.model.call import BoundCall
from sim.model.memo import cached_hash, state_without_hash
from sim.model.plan import Compute, Loop, Operand, Transfer
from sim.model.target import CoreModel

#: The roles of the big tensors (seen as [A, C, B]) and of the per-channel vectors (fields of :class:`Tensors`).
BIG = ("x", "dy", "dx")
VECTORS = ("mean", "variance", "scale", "scale_grad", "offset_grad")


class _PlanBase:
    """What both plans share: the call's buffers, sizes and the tile flop counts."""

    def __init__(self, call: BoundCall, ctx: PlanContext, size: int | None = None):
        attrs = attrs_of(call, BatchNormAttrs)
        self.call, self.ctx, self.v, self.names = call, ctx, attrs.view, attrs.tensors
        self.dt = PRECISION_DTYPES[call.precision]
        self.lanes = ctx.target.core.precisions[COMPUTE_PRECISION].lanes
        self.level = ctx.vector_level
        self.core = ctx.target.core
        self.align = self.level.alignment_bytes
        #: The tile size a caller's tiling names (channels per tile or elements per tile), None: the plan's own.
        self.size = size
        self.train = attrs.is_training
        self.eps = attrs.epsilon
        self.tf_form = attrs.tf_form
        #: Per-channel rsqrt work: none when the call gives rs.
        self.rs_flops = FLOPS_CHANNEL_RS if attrs.epsilon is not None else 0
        #: Each tensor by role (a field of :class:`Tensors`) as its transfers see it: x, dy and dx as the 3-D view
        #: every block transfer reads, the per-channel vectors as they are.
        self.views = {role: TensorView.of(call.buffer(getattr(self.names, role)), self.v.shape if role in BIG else None)
                      for role in BIG + VECTORS}
        self.loops = CoreLoops(self.core, self.lanes, self.dt, self.v.channels_on_lanes)

    def tensor_in(self, op: Operand, role: str, start: tuple[int, int, int]) -> Transfer:
        """DMA the block of the 3-D view of tensor ``role`` at ``start`` into ``op``."""
        return self.views[role].load(op, start)

    def tensor_out(self, op: Operand, start: tuple[int, int, int]) -> Transfer:
        """DMA ``op`` out to its block of x_backprop."""
        return self.views["dx"].store(op, start)

    def vec_in(self, op: Operand, role: str, c0: int) -> Transfer:
        """DMA channels [c0, c0 + n) of per-channel vector ``role`` into ``op``."""
        return self.views[role].load(op, (c0,))

    def vec_out(self, op: Operand, role: str, c0: int) -> Transfer:
        """DMA ``op`` out to channels [c0, c0 + n) of per-channel output ``role``."""
        return self.views[role].store(op, (c0,))

    @staticmethod
    def compute(fn: Callable, inputs: Sequence[Operand], outputs: Sequence[Operand], loops: Sequence[Loop], *,
                flops: int = 0) -> Compute:
        """A Compute in fp32 running ``loops`` (what the core issues); ``flops`` the math's own, for reports."""
        return Compute(fn, tuple(inputs), tuple(outputs), flops=int(flops),
                       precision=COMPUTE_PRECISION, loops=tuple(loops))


@dataclass(frozen=True)
class CoreLoops:
    """The loops the core runs for a batch-norm gradient call (see the package's "Loops"), from what decides them:
    the core, its lanes of fp32, the big tensors' dtype and whether the channels fill the lanes.  A hashable value,
    so that what is made from it (a block's compute in the rows plan) is remembered by value."""

    core: CoreModel
    lanes: int
    dtype: np.dtype
    channels_on_lanes: bool

    __hash__ = cached_hash  # worked out once: the rows plan keys each block's compute by it
    __getstate__ = state_without_hash

    def data(self, dims: tuple[int, int, int], kind: str) -> Loop:
        """The loop over a [na, nc, nb] block's elements: ``sums`` (Σdy, Σdy·x̂), ``both`` (the sums and
        inference's x_backprop) or ``dx`` (training's x_backprop from the sums).  The loop builders remember their
        loops by value (sim.model.memo): the tiles of full blocks share one."""
        (na, nc, nb), core = dims, self.core
        sums = 0 if kind == "dx" else 2
        stores = 0 if kind == "sums" else 1
        # x̂ = (x - mean)·rs (2); the sums: Σdy += dy, Σdy·x̂ += dy·x̂ (2); inference's dx = dy·k (1);
        # training's dx (3): FusedBatchNormGrad's k·((dy - a) - x̂·b) with a = Σdy/m, b = Σdy·x̂/m, k = scale·rs (a
        # subtract beside x̂, then an FMA and a multiply: 4 deep), BatchNormGrad's k·((m·dy - Σdy) - x̂·Σdy·x̂) with
        # k = scale·rs/m (an FMA beside x̂, then an FMA and a multiply: 4 deep too).
        fmac = {"sums": 4, "both": 5, "dx": 5}[kind]
        depth = {"sums": 3, "both": 3, "dx": 4}[kind]
        consts = {"sums": 2, "both": 3, "dx": 5}[kind]  # per channel: mean, rs (k; k, a, b)
        label = {"sums": "partial sums", "both": "sums and x_backprop", "dx": "x_backprop"}[kind]
        loop = functools.partial(streaming, core, COMPUTE_PRECISION, loads=2, stores=stores, fmac=fmac, sums=sums,
                                 load_itemsize=self.dtype.itemsize, store_itemsize=self.dtype.itemsize,
                                 fmac_depth=depth, label=label)
        if self.channels_on_lanes:
            # Channels on the lanes: one loop over the block's vectors, the per-channel coefficients held in
            # registers when they fit beside the body's, else loaded again with each vector.  The epilogue loads
            # the coefficients held, and loads, adds to and stores the sums of every channel vector.
            ncv = -(-nc // self.lanes)
            held = loop(na * ncv * self.lanes * nb, const_registers=consts * ncv,
                        epilogue=sums_epilogue(core, consts * ncv, sums * ncv))
            if held.vector_registers <= core.vector_registers:
                return held
            return loop(na * ncv * self.lanes * nb, const_loads=consts,
                        epilogue=sums_epilogue(core, 0, sums * ncv) if sums else None)
        # Spatial positions on the lanes: a loop per channel over its na x nb elements (each row padded to whole
        # vectors), its coefficients broadcast from a lane once per entry, each sum reduced across the lanes and
        # added to the channel's partial at the end.
        epilogue = {"vls": 1 + bool(sums), "valu": consts}
        return loop(na * padded_lanes(nb, self.lanes), const_registers=consts, entries=nc, reductions=sums,
                    epilogue=epilogue)

    def channel(self, nc: int, *, rsqrt: bool = False, loads: int = 0, fmac: int = 0, stores: int = 0,
                label: str = "per-channel") -> Loop:
        """A loop over ``nc`` channels' fp32 vectors: ``loads`` vectors in, ``fmac`` multiply-adds and ``stores`` out
        per vector, and with ``rsqrt`` rs = rsqrt(var + eps) too (an add, the estimate on the ALU, a Newton step of
        three FMAs; one more vector in and out)."""
        if rsqrt:
            loads, fmac, stores = loads + 1, fmac + 4, stores + 1
        return streaming(self.core, COMPUTE_PRECISION, padded_lanes(nc, self.lanes), loads=loads, stores=stores,
                         fmac=fmac, valu=int(rsqrt), fmac_depth=fmac and (4 if rsqrt else 1), label=label)
