"""DepthwiseConv2dNativeBackpropFilter, a kernel written outside dspsim: the filter gradient of a depthwise
convolution (dspsim ships the input gradient, ``depthwise_conv2d_backprop_input``)::

    dW[kh, kw, c, m] = sum over n, oh, ow of x[n, oh·sh + kh - pad_top, ow·sw + kw - pad_left, c]
                                             · dy[n, oh, ow, c·M + m]

as TensorFlow's op computes it (NHWC, SAME or VALID padding, no dilation).  Registered the way
docs/writing-a-kernel.md shows; its symbols are ``{fp,hp}_depthwise_conv2d_backprop_filter_{s,p}``; ``hp_``
multiplies fp16 values, accumulates in fp32 and rounds dW to fp16 once.

The plan: the channels split over the call's cores (a depthwise filter's channels are independent, so no core
needs another's partial sums); each tile takes a block of channels: a strided DMA gathers their slice of x and of
dy into a slot of the vector staging level, the core computes their filter gradient, a strided DMA scatters it
into dW.  No tiling keys: as many channels per tile as a slot holds, at least two tiles per core when a core has
the channels for them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from kernels.base import PRECISION_DTYPES, PlanContext
from kernels.common.args import check_args, require_address, require_ints
from kernels.common.geometry import ConvGeometry, conv_geometry
from kernels.common.loops import elementwise, tap_groups
from kernels.common.scratch import align_down, align_up
from kernels.common.tiling_space import split_even
from sim.errors import KernelArgError
from sim.model.call import ArgSpec, BoundCall, Buffer, MemoryReader
from sim.model.plan import Compute, DoesNotFit, Operand, Phase, Plan, Tile, Transfer

#: A core's channels are cut into at least this many tiles when it has them.
TILES_PER_CORE = 2


def filter_grad(g: ConvGeometry, mult: int, x: np.ndarray, dy: np.ndarray) -> np.ndarray:
    """dW [fh, fw, cb, mult] in fp32 of a block of cb channels: ``x`` [N·H·W, cb], ``dy`` [N·OH·OW, cb·mult]."""
    cb = x.shape[-1]
    xs = np.zeros((g.batch, g.in_h + g.pad_top + g.pad_bottom, g.in_w + g.pad_left + g.pad_right, cb), np.float32)
    xs[:, g.pad_top:g.pad_top + g.in_h, g.pad_left:g.pad_left + g.in_w] = x.reshape(g.batch, g.in_h, g.in_w, cb)
    d = dy.astype(np.float32).reshape(g.batch, g.out_h, g.out_w, cb, mult)
    dw = np.zeros((g.filter_h, g.filter_w, cb, mult), np.float32)
    for kh in range(g.filter_h):
        for kw in range(g.filter_w):
            patch = xs[:, kh:kh + g.stride_h * (g.out_h - 1) + 1:g.stride_h,
                       kw:kw + g.stride_w * (g.out_w - 1) + 1:g.stride_w]
            dw[kh, kw] = np.einsum("nhwc,nhwcm->cm", patch, d)
    return dw


class DepthwiseConv2dBackpropFilter:
    """The kernel: the Kernel protocol of ``kernels.base`` (name, args, bind, plan; no tiling space)."""

    name = "depthwise_conv2d_backprop_filter"
    precisions = ("fp32", "fp16")
    variants = ("s", "p")
    fp16_arithmetic = "fp16 products accumulated in fp32, dW rounded to fp16 once"
    args = (
        ArgSpec("input", "in_ptr", "address of the forward input [batch, in_h, in_w, in_c] (NHWC)"),
        ArgSpec("out_backprop", "in_ptr", "address of the output gradient [batch, out_h, out_w, in_c·multiplier]"),
        ArgSpec("output", "out_ptr", "address of the filter gradient [fh, fw, in_c, multiplier] (output)"),
        ArgSpec("input_sizes", "ints", "the input's shape, NHWC"),
        ArgSpec("filter_sizes", "ints", "[fh, fw, in_c, multiplier]"),
        ArgSpec("strides", "ints", "4 ints, NHWC; 1 in batch and depth"),
        ArgSpec("padding", "str", "SAME or VALID"),
    )

    def bind(self, symbol: str, precision: str, variant: str, cores: tuple[int, ...],
             args: Mapping[str, Any], read: MemoryReader) -> BoundCall:
        """Check the geometry and describe the three buffers."""
        a = check_args(symbol, self.args, args)
        fh, fw, fc, mult = require_ints("filter_sizes", a["filter_sizes"], 4, minimum=1)
        g = conv_geometry(a["input_sizes"], (fh, fw), strides=a["strides"], padding=a["padding"],
                          explicit_paddings=None, data_format="NHWC", dilations=None, input_name="input_sizes",
                          filter_name="filter_sizes")
        if fc != g.in_c:
            raise KernelArgError(f"argument 'filter_sizes': in_c {fc} is not the input's {g.in_c} channels")
        dtype = PRECISION_DTYPES[precision]
        buffers = (Buffer("input", require_address("input", a["input"]), g.nhwc_shape(g.in_c), dtype, "input"),
                   Buffer("out_backprop", require_address("out_backprop", a["out_backprop"]),
                          g.nhwc_shape(g.in_c * mult, "out"), dtype, "input"),
                   Buffer("output", require_address("output", a["output"]), (fh, fw, g.in_c, mult), dtype, "output"))
        return BoundCall(symbol, precision, variant, cores, buffers, (g, mult))

    def plan(self, call: BoundCall, ctx: PlanContext) -> Plan:
        """Channel blocks per core, gathered, computed and scattered through two slots of the vector level."""
        g, mult = call.attrs
        x, dy, dw = (call.buffer(n) for n in ("input", "out_backprop", "output"))
        size = x.dtype.itemsize
        pixels, outs, taps = g.batch * g.in_h * g.in_w, g.batch * g.out_h * g.out_w, g.filter_h * g.filter_w
        level = ctx.vector_level
        align = max(level.alignment_bytes, 1)
        slot_bytes = align_down(level.size_bytes // 2, align)

        def need(cb: int) -> list[int]:  # x, dy and dW of a block of cb channels, each starting aligned
            return [align_up(n * size, align) for n in (pixels * cb, outs * cb * mult, taps * cb * mult)]
        most = max((cb for cb in range(1, g.in_c + 1) if sum(need(cb)) <= slot_bytes), default=0)
        if not most:
            raise DoesNotFit(None, sum(need(1)), slot_bytes, "one channel's slices of x and dy and its filter "
                                                             "gradient do not fit a slot of the vector staging level")

        def tile(tile_id: int, c0: int, c1: int) -> Tile:
            cb = c1 - c0
            base = level.base + (tile_id % 2) * slot_bytes
            sizes = need(cb)
            x_op = Operand(base, (pixels, cb), x.dtype)
            dy_op = Operand(base + sizes[0], (outs, cb * mult), dy.dtype)
            dw_op = Operand(base + sizes[0] + sizes[1], (taps, cb * mult), dw.dtype)
            loads = (Transfer.block(x.addr + c0 * size, x_op.addr, (pixels, cb), size, (g.in_c * size, size)),
                     Transfer.block(dy.addr + c0 * mult * size, dy_op.addr, (outs, cb * mult), size,
                                    (g.in_c * mult * size, size)))
            store = Transfer.block(dw_op.addr, dw.addr + c0 * mult * size, (taps, cb * mult), size,
                                   (cb * mult * size, size), (g.in_c * mult * size, size))
            # Per element of dy: a multiply-add per tap with the x it meets (and, in fp16, their widening); a large
            # filter's taps in passes whose accumulators fit the vector registers.
            core = ctx.target.core
            loops = tap_groups(taps, lambda k, _: elementwise(
                core, "fp32", outs * cb * mult, loads=1 + k, stores=0, fmac=k,
                valu=0 if call.precision == "fp32" else k + 1, label="depthwise filter grad"), core.vector_registers)
            compute = Compute(lambda a, b: (filter_grad(g, mult, a, b).reshape(taps, cb * mult).astype(dw.dtype),),
                              (x_op, dy_op), (dw_op,), flops=2 * taps * outs * cb * mult, precision=call.precision,
                              loops=tuple(loops))
            return Tile(tile_id, loads, compute, (store,), slot=tile_id % 2)

        tiles: dict[int, tuple[Tile, ...]] = {}
        for core, (c0, c1) in zip(call.cores, split_even(g.in_c, len(call.cores))):
            per = max(1, min(most, -(-(c1 - c0) // TILES_PER_CORE)))
            tiles[core] = tuple(tile(i, c, min(c + per, c1)) for i, c in enumerate(range(c0, c1, per)))
        return Plan(cores=call.cores, phases=(Phase("dw_filter_grad", tiles, barrier_after=False),),
                    precision=call.precision)


KERNEL = DepthwiseConv2dBackpropFilter()
