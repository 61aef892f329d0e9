"""Conv2DBackpropFilter's registry entry: its arguments, their binding (TensorFlow's rules), its plan and space."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kernels.base import PlanContext
from kernels.common.args import require_ints
from kernels.common.binding import bind_arguments, bound_call
from kernels.common.geometry import conv_geometry
from kernels.common.tiling_space import TilingSpace
from kernels.conv2d_backprop_filter.layout import FilterGradAttrs
from kernels.conv2d_backprop_filter.space import _Planner
from sim.errors import KernelArgError
from sim.model.call import ArgSpec, BoundCall, MemoryReader
from sim.model.plan import DoesNotFit, Plan


class Conv2DBackpropFilter:
    """The registry entry of conv2d_backprop_filter."""

    name = "conv2d_backprop_filter"
    #: What an hp_ call stores in fp16 and how it computes.
    tensors_in_precision = ("input", "out_backprop", "output")
    fp32_tensors = ()
    fp16_arithmetic = ("fp16 products accumulated in fp32 (fp16_fp32acc, at the rate the target gives it; a chip "
                       "without it converts the fp16 blocks to fp32 first, in a loop of its own), dW accumulates in "
                       "fp32 and is rounded to fp16 once, as it is stored")
    args = (
        ArgSpec("input", "in_ptr", "address of the input [input_shape, data_format order]"),
        ArgSpec("out_backprop", "in_ptr", "address of the output gradient [batch, out_h, out_w, out_c] "
                                          "(data_format order; shape computed from the geometry)"),
        ArgSpec("output", "out_ptr", "address of the filter gradient [fh, fw, in_c, out_c] (output)"),
        ArgSpec("input_shape", "ints", "4 ints, data_format order"),
        ArgSpec("filter_sizes", "ints", "[fh, fw, in_c, out_c]; in_c must equal the input's channels"),
        ArgSpec("strides", "ints", "4 ints, data_format order; 1 in batch and depth"),
        ArgSpec("padding", "str", "SAME, VALID or EXPLICIT"),
        ArgSpec("explicit_paddings", "ints", "8 non-negative ints (data_format order) when padding is EXPLICIT, "
                                             "else absent or empty", default=None, required=False),
        ArgSpec("data_format", "str", "NHWC or NCHW", default="NHWC", required=False),
        ArgSpec("dilations", "ints", "4 ints, data_format order; 1 in batch and depth", default=(1, 1, 1, 1),
                required=False),
        ArgSpec("out_backprop_shape", "ints", "optional: the shape out_backprop has (data_format order); must "
                                              "equal the one computed from the geometry", default=None,
                required=False),
    )

    def bind(self, symbol: str, precision: str, variant: str, cores: tuple[int, ...],
             args: Mapping[str, Any], read: MemoryReader) -> BoundCall:
        """Check the arguments (TensorFlow's rules) and describe the call's buffers."""
        a = bind_arguments(symbol, precision, self.args, args)
        fsz = require_ints("filter_sizes", a["filter_sizes"], 4, minimum=1)
        geo = conv_geometry(a["input_shape"], (fsz[0], fsz[1]), strides=a["strides"], padding=a["padding"],
                            explicit_paddings=a["explicit_paddings"], data_format=a["data_format"],
                            dilations=a["dilations"], filter_name="filter_sizes")
        if fsz[2] != geo.in_c:
            raise KernelArgError(f"argument 'filter_sizes': in_c (filter_sizes[2] = {fsz[2]}) must equal the "
                                 f"input's channels ({geo.in_c}); grouped convolution is not supported")
        dy_shape = geo.tensor_shape(fsz[3], "out")
        buffers = (a.buffer("input", geo.tensor_shape(geo.in_c), size_arg="input_shape"),
                   a.buffer("out_backprop", dy_shape),
                   a.buffer("output", fsz, size_arg="filter_sizes"))
        if a["out_backprop_shape"] is not None:
            given = require_ints("out_backprop_shape", a["out_backprop_shape"], 4, minimum=1)
            if given != dy_shape:
                raise KernelArgError(f"argument 'out_backprop_shape': {list(given)} does not match the shape "
                                     f"computed from input_shape, filter_sizes, strides, padding and dilations "
                                     f"({geo.data_format}): {list(dy_shape)}")
        return bound_call(a, variant, cores, buffers, FilterGradAttrs(geo, fsz))

    def plan(self, call: BoundCall, ctx: PlanContext) -> Plan:
        """The plan of the tiling ``ctx.tiling`` (a full tiling of :meth:`tiling_space`)."""
        return _Planner(call, ctx).plan()

    def tiling_space(self, call: BoundCall, ctx: PlanContext) -> TilingSpace:
        """The keys ``split`` (spatial|filter), ``in_c_slice``, ``out_c_slice`` and, per tile, ``a_operand``,
        ``m_micro``, ``n_micro`` (the micro-kernel: scope ``compute``); DoesNotFit when not one slice fits."""
        p = _Planner(call, ctx)
        lay = p.lay
        if lay.fitting_slices(lay.in_c, lay.out_c) is None:
            raise DoesNotFit(lay.level.name, lay.needed_bytes(1, 1), lay.level.size_bytes,
                             f"{call.symbol}: no tile of the convolution fits the {lay.level.size_bytes}-byte "
                             f"{lay.level.name} scratchpad (one output row of one channel with its input window is "
                             f"too big)")
        return p.space

KERNEL = Conv2DBackpropFilter()
