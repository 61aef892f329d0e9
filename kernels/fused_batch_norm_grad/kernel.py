"""FusedBatchNormGrad's registry entry, and the tiling space both batch-norm gradient kernels plan in."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from kernels.base import PlanContext
from kernels.common.args import require_bool, require_choice, require_float, require_ints
from kernels.common.binding import bind_arguments, bound_call
from kernels.common.tiling_space import ChoiceKey, IntKey, TilingSpace, complete
from kernels.fused_batch_norm_grad.attrs import FUSED_TENSORS, BatchNormAttrs, View
from kernels.fused_batch_norm_grad.channels import _ChannelsPlan
from kernels.fused_batch_norm_grad.numerics import F32, FORMATS, SPLITS
from kernels.fused_batch_norm_grad.rows import _RowsPlan
from sim.errors import KernelArgError
from sim.model.call import ArgSpec, BoundCall, MemoryReader
from sim.model.plan import DoesNotFit, Plan


class BatchNormPlanning:
    """The planning of a batch-norm gradient call bound to :class:`BatchNormAttrs` (both kernels' ``plan`` and
    ``tiling_space``)."""

    def plan(self, call: BoundCall, ctx: PlanContext) -> Plan:
        """The plan of the tiling ``ctx.tiling`` (a full tiling of :meth:`tiling_space`)."""
        t = complete(self.tiling_space(call, ctx), ctx)
        if t["split"] == "channels":
            return _ChannelsPlan(call, ctx, t["channel_block"]).build()
        return _RowsPlan(call, ctx, t["tile_elements"]).build()

    def tiling_space(self, call: BoundCall, ctx: PlanContext) -> TilingSpace:
        """The keys ``split``, ``channel_block`` and ``tile_elements``: the channels split first when every core
        gets whole-batch channel tiles of whole units (with its default blocks), else the rows split; the
        channels split's widest one-pass blocks; the rows split's default tiles, its largest and short ones.

        The widest one-pass channel blocks (part-filled vectors if need be) read
        x and dy once where the rows plan reads what does not stay resident twice;
        the rows plan keeps every core busy when channels are few; its largest
        tiles spend fewer DMA setups than the default four tiles per core, and
        shorter ones fill the pipeline sooner (the first load is never hidden).
        """
        return tiling_space(call, ctx)


class FusedBatchNormGrad(BatchNormPlanning):
    """The registry entry of fused_batch_norm_grad."""

    name = "fused_batch_norm_grad"
    #: What an hp_ call stores in fp16 (the rest in fp32) and how it computes.
    tensors_in_precision = ("y_backprop", "x", "x_backprop")
    fp32_tensors = ("scale", "reserve_space_1", "reserve_space_2", "scale_backprop", "offset_backprop")
    fp16_arithmetic = ("computed in fp32 (as TensorFlow computes fp16 batch norm gradients): y_backprop and x are "
                       "loaded as fp16 and widened on the vector ALU, the arithmetic runs at the chip's fp32 lanes, "
                       "and x_backprop is narrowed to fp16 before it is stored; each conversion is a vector ALU "
                       "issue of the loops, not a flop")
    args = (
        ArgSpec("y_backprop", "in_ptr", "address of y_backprop (4-D, data_format order)"),
        ArgSpec("x", "in_ptr", "address of x (4-D, data_format order)"),
        ArgSpec("scale", "in_ptr", "address of scale [C] fp32"),
        ArgSpec("reserve_space_1", "in_ptr", "address of the batch (or population) mean [C] fp32"),
        ArgSpec("reserve_space_2", "in_ptr", "address of the batch (or population) variance [C] fp32"),
        ArgSpec("x_backprop", "out_ptr", "address of x_backprop (like x, output)"),
        ArgSpec("scale_backprop", "out_ptr", "address of scale_backprop [C] fp32 (output)"),
        ArgSpec("offset_backprop", "out_ptr", "address of offset_backprop [C] fp32 (output)"),
        ArgSpec("shape", "ints", "the 4 sizes of x in data_format order"),
        ArgSpec("epsilon", "float", "added to the variance (> 0)", 1e-4, required=False),
        ArgSpec("data_format", "str", "NHWC or NCHW", "NHWC", required=False),
        ArgSpec("is_training", "bool", "true: batch statistics; false: population statistics", True,
                required=False),
    )

    def bind(self, symbol: str, precision: str, variant: str, cores: tuple[int, ...],
             args: Mapping[str, Any], read: MemoryReader) -> BoundCall:
        """Check the arguments and describe the call's buffers."""
        a = bind_arguments(symbol, precision, self.args, args)
        shape = require_ints("shape", a["shape"], 4, minimum=1)
        data_format = require_choice("data_format", a["data_format"], FORMATS)
        epsilon = require_float("epsilon", a["epsilon"])
        # Compared before any cast: casting a value beyond fp32 to fp32 overflows (with numpy's warning).
        # 0 is TensorFlow's too (its CPU kernel takes any epsilon): rsqrt(variance) then.  A negative one would
        # take the root of a negative variance wherever the variance is smaller.
        if not 0 <= epsilon <= float(np.finfo(F32).max):
            raise KernelArgError(f"argument 'epsilon': expected a number >= 0 representable in fp32, got {epsilon!r}")
        attrs = BatchNormAttrs(View.of(shape, data_format), require_bool("is_training", a["is_training"]), epsilon,
                               FUSED_TENSORS)
        c = attrs.view.c
        big = {n: a.buffer(n, shape, size_arg="shape") for n in ("y_backprop", "x", "x_backprop")}
        vec = {n: a.buffer(n, (c,), F32) for n in ("scale", "reserve_space_1", "reserve_space_2", "scale_backprop",
                                                   "offset_backprop")}
        return bound_call(a, variant, cores, (big["y_backprop"], big["x"], vec["scale"], vec["reserve_space_1"],
                                              vec["reserve_space_2"], big["x_backprop"], vec["scale_backprop"],
                                              vec["offset_backprop"]), attrs)


# -- the tiling space and the choice of plan ---------------------------------------------------------

def tiling_space(call: BoundCall, ctx: PlanContext) -> TilingSpace:
    """The tiling space of a batch-norm gradient call (see :meth:`BatchNormPlanning.tiling_space`)."""
    chans = _ChannelsPlan(call, ctx, None)
    v = chans.v
    by_channels = _channels_by_default(call, ctx)
    widest = chans.widest_block()
    # ... and, where a core's even share is less than a vector, the largest power of two within it: every core a
    # block (256 x 64 on three FT78NE cores: 32-channel blocks leave a core idle, 16-channel ones are 8.6 % faster)
    share = v.c // len(call.cores)
    within = [1 << (share.bit_length() - 1)] if 0 < share < chans.unit else []
    blocks = ([chans.default_block()] if by_channels else []) + [widest] + _between(chans.unit, v.c) + within
    total = v.a * v.c * v.b
    rows_misfit: DoesNotFit | None = None
    try:
        first_want, largest_want = _RowsPlan(call, ctx, None).tile_sizes()
        # Never longer than the default tile: a call of fewer elements than a vector has lanes has no shorter
        # tile to offer.
        sizes = [first_want, largest_want, min(first_want, max(chans.lanes, first_want // 4))]
    except DoesNotFit as e:
        rows_misfit, sizes = e, [total]  # the rows split cannot fit at all: its fit says why

    refusals: dict[int, DoesNotFit | None] = {}

    def fit(t: Mapping[str, Any]) -> None:
        if t["split"] == "channels":
            chans.check_block(t["channel_block"])
        elif rows_misfit is not None:
            raise rows_misfit
        else:
            # The rows plan's own refusal of the tile size (a streamed tile's slot, or in training the blocks kept
            # resident), so that a misfit is dropped unplanned and a "nearest that fit" names a size that plans.
            size = t["tile_elements"]
            if size not in refusals:
                refusals[size] = _RowsPlan(call, ctx, size).refusal()
            why = refusals[size]
            if why is not None:
                raise why

    def tiles(t: Mapping[str, Any]) -> int:
        cores = len(call.cores)
        if t["split"] == "channels":
            return -(-v.c // t["channel_block"]) + cores
        return 2 * -(-total // t["tile_elements"]) + 4 * cores * -(-v.c // max(1, chans.lanes))

    return TilingSpace(
        ChoiceKey("split", SPLITS, "channels: channel blocks of the whole batch per core; rows: rows per core, "
                                   "partial sums exchanged",
                  values=("channels", "rows") if by_channels else ("rows", "channels")),
        IntKey("channel_block", 1, v.c, "channels per tile", only=("split", "channels"), values=blocks),
        IntKey("tile_elements", 1, total, "elements per tile", only=("split", "rows"), values=sizes),
        fit=fit, tiles=tiles)


def _between(unit: int, most: int) -> list[int]:
    """Whole ``unit``s from one to ``most`` by doubling, and ``most``: the sizes a climb steps through beside the
    plans' own (a 64 x 256 BatchNormGrad on four MT7004 cores in fp16 took channel blocks of 64, its default, where
    32 is 16 % faster, which the space did not offer; blocks wider than a core's even share leave cores idle, which
    a small call may gain by)."""
    out, size = [], unit
    while size < most:
        out.append(size)
        size *= 2
    return out + [most]


def _channels_by_default(call: BoundCall, ctx: PlanContext) -> bool:
    """Every core gets a whole unit (a vector of channels in NHWC) whose whole-batch tile fits."""
    p = _ChannelsPlan(call, ctx, None)
    return -(-p.v.c // p.unit) >= len(call.cores) and p.whole_batch_fits(min(p.unit, p.v.c))



KERNEL = FusedBatchNormGrad()
