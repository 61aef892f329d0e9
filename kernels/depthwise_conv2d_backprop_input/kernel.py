"""The registry entry of DepthwiseConv2dNativeBackpropInput: its arguments, their binding (the geometry through
:func:`~kernels.common.geometry.conv_geometry`), its tiling space and its plan."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kernels.base import PlanContext
from kernels.common.args import require_ints
from kernels.common.binding import attrs_of, bind_arguments, bound_call
from kernels.common.geometry import ConvGeometry, conv_geometry
from kernels.common.tiling_space import TilingSpace, complete
from kernels.depthwise_conv2d_backprop_input.build import NAME, Planner
from kernels.depthwise_conv2d_backprop_input.space import tile_shape
from sim.errors import KernelArgError
from sim.model.call import ArgSpec, BoundCall, MemoryReader
from sim.model.plan import Plan


@dataclass(frozen=True)
class InputGradAttrs:
    """What binding found out about a call: its geometry and the depth multiplier."""

    geometry: ConvGeometry
    multiplier: int


class DepthwiseConv2dBackpropInput:
    """The registry entry of depthwise_conv2d_backprop_input."""

    name = NAME
    #: What an hp_ call stores in fp16 and how it computes.
    tensors_in_precision = ("filter", "out_backprop", "output")
    fp32_tensors = ()
    fp16_arithmetic = ("fp16 products accumulated in fp32, as TensorFlow's fp16 path accumulates (fp16_fp32acc, at "
                       "the rate the target gives it; a chip without it widens filter and out_backprop to fp32 as "
                       "they are loaded, a permute per vector); each output block is rounded to fp16 once, as it is "
                       "stored (a conversion per vector)")
    args = (
        ArgSpec("filter", "in_ptr", "address of filter [fh, fw, in_c, depth_multiplier]"),
        ArgSpec("out_backprop", "in_ptr", "address of out_backprop [batch, out_h, out_w, in_c*multiplier] "
                                          "(data_format order)"),
        ArgSpec("output", "out_ptr", "address of the input gradient, shape input_sizes (output)"),
        ArgSpec("input_sizes", "ints", "shape of the convolution's input, 4 ints in data_format order"),
        ArgSpec("filter_shape", "ints", "[fh, fw, in_c, depth_multiplier]"),
        ArgSpec("strides", "ints", "4 ints in data_format order; 1 in batch and depth"),
        ArgSpec("padding", "str", "SAME, VALID or EXPLICIT"),
        ArgSpec("explicit_paddings", "ints", "8 ints in data_format order (EXPLICIT padding only)",
                default=None, required=False),
        ArgSpec("data_format", "str", "NHWC or NCHW", default="NHWC", required=False),
        ArgSpec("dilations", "ints", "4 ints in data_format order; 1 in batch and depth",
                default=(1, 1, 1, 1), required=False),
    )

    def bind(self, symbol: str, precision: str, variant: str, cores: tuple[int, ...],
             args: Mapping[str, Any], read: MemoryReader) -> BoundCall:
        """Check the arguments (geometry through conv_geometry) and describe the call's buffers."""
        a = bind_arguments(symbol, precision, self.args, args)
        input_sizes = require_ints("input_sizes", a["input_sizes"], 4, minimum=1)
        filter_shape = require_ints("filter_shape", a["filter_shape"], 4, minimum=1)
        geo = conv_geometry(input_sizes, (filter_shape[0], filter_shape[1]), strides=a["strides"],
                            padding=a["padding"], explicit_paddings=a["explicit_paddings"],
                            data_format=a["data_format"], dilations=a["dilations"], filter_name="filter_shape",
                            input_name="input_sizes")
        if filter_shape[2] != geo.in_c:
            raise KernelArgError(f"argument 'filter_shape': filter_shape[2] (in_c) is {filter_shape[2]} but "
                                 f"input_sizes has {geo.in_c} channels ({geo.data_format}); they must be equal")
        mult = filter_shape[3]
        buffers = (a.buffer("filter", filter_shape, size_arg="filter_shape"),
                   a.buffer("out_backprop", geo.tensor_shape(geo.in_c * mult, "out"), size_arg="input_sizes"),
                   a.buffer("output", geo.tensor_shape(geo.in_c), size_arg="input_sizes"))
        return bound_call(a, variant, cores, buffers, InputGradAttrs(geo, mult))

    def plan(self, call: BoundCall, ctx: PlanContext) -> Plan:
        """Per core: its rows (and channels) cut into halo-loading tiles of the tiling ``ctx.tiling`` (a full
        tiling of :meth:`tiling_space`), alternating two scratch slots."""
        p = _planner(call, ctx)
        t = complete(p.space, ctx)
        return p.build(t["channel_parts"], tile_shape(t))

    def tiling_space(self, call: BoundCall, ctx: PlanContext) -> TilingSpace:
        """The keys ``channel_parts`` (every number of channel groups, the most first), ``tile_channels``,
        ``tile_cols`` and ``tile_rows`` (for the first core's share: whole vectors of channels, whole rows
        unless not one fits, the tallest tiles that fit first, then shorter ones), and, per tile,
        ``register_block`` (scope ``compute``).

        Row cuts re-read halo rows, channel cuts (whole vectors in NHWC) may leave cores idle or lanes empty;
        few large tiles spend fewer DMA setups, smaller ones keep the unhidden first load and last store short.
        """
        return _planner(call, ctx).space


def _planner(call: BoundCall, ctx: PlanContext) -> Planner:
    """The planner of a bound call (its geometry and multiplier as binding found them)."""
    attrs = attrs_of(call, InputGradAttrs)
    return Planner(call, ctx, attrs.geometry, attrs.multiplier)


KERNEL = DepthwiseConv2dBackpropInput()
