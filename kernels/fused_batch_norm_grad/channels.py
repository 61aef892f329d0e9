"""The channels plan: channels split over the cores, each tile a channel block over the whole batch, one phase."""

from __future__ import annotations

from kernels.base import PlanContext
from kernels.common.scratch import Scratch, align_up, fits
from kernels.common.streams import CoreStream, plan_of
from kernels.common.tiling_space import largest, pipeline_tile, split_units
from kernels.common.transfers import sub_operand
from kernels.fused_batch_norm_grad.base import _PlanBase
from kernels.fused_batch_norm_grad.numerics import (
    F32,
    FLOPS_CHANNEL_COEF,
    FLOPS_DX_INFER,
    FLOPS_DX_TRAIN,
    FLOPS_SUMS,
    FLOPS_XHAT,
    channel_block_tile,
)
from sim.model.call import BoundCall
from sim.model.plan import DoesNotFit, Phase, Plan, Tile, TileFn, Transfer


class _ChannelsPlan(_PlanBase):
    """Channels split over the cores; each tile a channel block over the whole batch, one phase.

    The per-channel vectors (mean, variance, scale and the two sums of the core's channels) sit after two
    tile slots that share the rest of the vector level.
    """

    def __init__(self, call: BoundCall, ctx: PlanContext, size: int | None):
        super().__init__(call, ctx, size)
        self.unit = self.lanes if self.v.channels_on_lanes else 1
        self.vectors_bytes = 5 * align_up(self.v.c * 4, self.align)
        self.slot_bytes = Scratch.slot_bytes_for(self.level, self.vectors_bytes)

    def whole_batch_fits(self, ct: int) -> bool:
        """A whole-batch tile of ``ct`` channels (x, dy and dx) fits a slot."""
        return fits([self.v.a * ct * self.v.b * self.dt.itemsize] * 3, self.slot_bytes, self.align)

    def build(self) -> Plan:
        """One phase, no barrier: the cores' channel ranges are independent.

        By default the cores split whole units (vectors of channels in NHWC) and
        cut their share into a few blocks; with a caller's ``channel_block`` the
        cores split whole blocks of that many channels.
        """
        tiles: dict[int, tuple[Tile, ...]] = {}
        if self.size is None:
            for core, (c0, c1) in zip(self.call.cores, split_units(self.v.c, self.unit, len(self.call.cores))):
                tiles[core] = self._core_tiles(c0, c1, self._block(c1 - c0))
        else:
            ct = self.size
            self.check_block(ct)
            for core, (c0, c1) in zip(self.call.cores, split_units(self.v.c, ct, len(self.call.cores))):
                tiles[core] = self._core_tiles(c0, c1, ct)
        return plan_of(self.call, [Phase("channels", tiles)])

    def check_block(self, ct: int) -> None:
        """DoesNotFit when a whole-batch tile of ``ct`` channels does not fit a slot."""
        if not self.whole_batch_fits(ct):
            raise DoesNotFit(self.level.name, 2 * 3 * align_up(self.v.a * ct * self.v.b * self.dt.itemsize,
                                                               self.align) + self.vectors_bytes,
                             self.level.size_bytes,
                             f"tiling channel_block={ct} does not fit the "
                             f"{self.level.size_bytes}-byte {self.level.name} scratchpad (a whole-batch tile of "
                             f"{self.names.x}, {self.names.dy} and {self.names.dx} takes half of what the "
                             f"per-channel vectors leave)")

    def default_block(self) -> int:
        """Channels per tile of the first core's share by default."""
        c0, c1 = split_units(self.v.c, self.unit, len(self.call.cores))[0]
        return self._block(c1 - c0)

    def widest_block(self) -> int:
        """The most channels (<= a core's even share; whole vectors when at least one) whose whole batch fits."""
        lo = largest(-(-self.v.c // len(self.call.cores)), self.whole_batch_fits)
        return lo // self.lanes * self.lanes if self.v.channels_on_lanes and lo >= self.lanes else lo

    def _block(self, span: int) -> int:
        """Channels per tile: whole units, fits a slot, a few tiles per core when possible."""
        unit = self.unit
        want = min(span, pipeline_tile(span, unit))
        while want > unit and not self.whole_batch_fits(want):
            want = max(unit, (want // 2) // unit * unit)
        return min(want, span)

    def _core_tiles(self, c0: int, c1: int, ct: int) -> tuple[Tile, ...]:
        """The core's channel blocks; its per-channel vectors are loaded with the first, stored with the last."""
        v, dt = self.v, self.dt
        scratch = Scratch(self.level, self.vectors_bytes, slot_bytes=self.slot_bytes, fixed_last=True)
        fixed = scratch.fixed()
        vm, vvar, vsc, vsb, vob = (fixed.operand((c1 - c0,), F32) for _ in range(5))
        vec_loads = (self.vec_in(vm, "mean", c0), self.vec_in(vvar, "variance", c0), self.vec_in(vsc, "scale", c0))
        vec_stores = (self.vec_out(vsb, "scale_grad", c0), self.vec_out(vob, "offset_grad", c0))
        dx_flops = FLOPS_DX_TRAIN if self.train else FLOPS_DX_INFER
        chan_flops = self.rs_flops + FLOPS_CHANNEL_COEF
        stream = CoreStream()
        starts = range(c0, c1, ct)
        for i, start in enumerate(starts):
            n = min(ct, c1 - start)
            slot = scratch.slot(stream.slot)
            ox, ody, odx = (slot.operand((v.a, n, v.b), dt) for _ in range(3))
            om, ovar, osc, osb, oob = (sub_operand(op, start - c0, n) for op in (vm, vvar, vsc, vsb, vob))
            loads: tuple[Transfer, ...] = (self.tensor_in(ox, "x", (0, start, 0)),
                                           self.tensor_in(ody, "dy", (0, start, 0)))
            stores: tuple[Transfer, ...] = (self.tensor_out(odx, (0, start, 0)),)
            if i == 0:
                loads += vec_loads
            if i == len(starts) - 1:
                stores += vec_stores  # every block's sums are in place once the last block has computed

            # rs (from the variance) and the coefficients per channel, the sums, then (training) a, b, k from
            # the sums and x_backprop: inference computes k with rs and x_backprop with the sums.
            dims = (v.a, n, v.b)
            if self.train:
                loops = ((self.loops.channel(n, rsqrt=True, label="rs"),) if self.eps is not None else ()) + (
                    self.loops.data(dims, "sums"),
                    self.loops.channel(n, loads=4, fmac=3, stores=3, label="coefficients"),
                    self.loops.data(dims, "dx"))
            else:
                loops = (self.loops.channel(n, rsqrt=self.eps is not None, loads=2, fmac=1, stores=1,
                                            label="rs, coefficients"), self.loops.data(dims, "both"))
            per_elem = FLOPS_XHAT + FLOPS_SUMS + dx_flops
            fn = TileFn(channel_block_tile, (self.eps, self.train, self.tf_form))
            stream.add(loads, self.compute(fn, (ox, ody, om, ovar, osc), (odx, osb, oob), loops,
                                           flops=v.a * n * v.b * per_elem + n * chan_flops), stores)
        return tuple(stream.tiles)
