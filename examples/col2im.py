"""Col2Im, a kernel written outside dspsim: the scatter-add that finishes a convolution's input gradient.

A convolution's input gradient is a matrix product and a col2im, as Caffe and the early cuDNN paths compute it:
``col = dy · Wᵀ`` (dspsim's ``gemm``: dy as [N·OH·OW, out_c], the filter [fh, fw, in_c, out_c] as a
[fh·fw·in_c, out_c] matrix, ``trans_b`` 1) gives, for every output position and tap, what that tap sends back to
the input; col2im adds each into the input position the tap read::

    dx[n, oh·sh + kh - pad_top, ow·sw + kw - pad_left, c] += col[n, oh, ow, kh, kw, c]

over every (oh, ow, kh, kw) that lands inside the input (TensorFlow's SAME or VALID padding, NHWC).  Registered
the way docs/writing-a-kernel.md shows; its symbols are ``{fp,hp}_col2im_{s,p}``; ``hp_`` sums in fp32 and
rounds dx to fp16 once, as TensorFlow's fp16 Conv2DBackpropInput accumulates.

The plan: the input rows (image, row) split over the call's cores; each tile takes a few rows of dx in one image,
DMAs in the rows of col whose taps reach them (contiguous: col is row-major), scatter-adds, and DMAs the dx rows
out, through two slots of the vector staging level.  No tiling keys: as many rows per tile as a slot holds, at
least four tiles per core when the share is large enough.
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
from sim.model.call import ArgSpec, BoundCall, Buffer, MemoryReader
from sim.model.plan import Compute, DoesNotFit, Operand, Phase, Plan, Tile, Transfer

#: A core's share is cut into at least this many tiles when a slot allows.
TILES_PER_CORE = 4


def _col_rows(g: ConvGeometry, h0: int, h1: int) -> tuple[int, int]:
    """The output rows ``[o0, o1)`` some tap of which lands on input rows ``[h0, h1)``."""
    o0 = max(0, -(-(h0 + g.pad_top - g.filter_h + 1) // g.stride_h))
    o1 = min(g.out_h, (h1 - 1 + g.pad_top) // g.stride_h + 1)
    return o0, max(o0, o1)


def col2im_rows(g: ConvGeometry, col: np.ndarray, o0: int, h0: int, h1: int) -> np.ndarray:
    """Input rows ``[h0, h1)`` of one image from its col rows ``o0, o0 + 1 ...`` (``col``: [rows, OW, fh, fw, C]),
    summed in fp32."""
    dx = np.zeros((h1 - h0, g.in_w, g.in_c), np.float32)
    oh = np.arange(o0, o0 + col.shape[0])
    ow = np.arange(g.out_w)
    for kh in range(g.filter_h):
        ih = oh * g.stride_h + kh - g.pad_top
        mh = (ih >= h0) & (ih < h1)
        for kw in range(g.filter_w):
            iw = ow * g.stride_w + kw - g.pad_left
            mw = (iw >= 0) & (iw < g.in_w)
            if mh.any() and mw.any():  # a tap's positions are distinct (stride >= 1): += adds each once
                dx[np.ix_(ih[mh] - h0, iw[mw])] += col[np.ix_(mh, mw)][:, :, kh, kw, :].astype(np.float32)
    return dx


class Col2Im:
    """The kernel: the Kernel protocol of ``kernels.base`` (name, args, bind, plan; no tiling space)."""

    name = "col2im"
    precisions = ("fp32", "fp16")
    variants = ("s", "p")
    fp16_arithmetic = "col in fp16, summed in fp32, dx rounded to fp16 once"
    args = (
        ArgSpec("col", "in_ptr", "address of col [batch, out_h, out_w, fh, fw, in_c] (a gemm's dy·Wᵀ)"),
        ArgSpec("output", "out_ptr", "address of the input gradient [batch, in_h, in_w, in_c] (NHWC, output)"),
        ArgSpec("input_sizes", "ints", "the convolution's input shape, NHWC"),
        ArgSpec("filter_sizes", "ints", "[fh, fw] of the convolution's filter"),
        ArgSpec("strides", "ints", "4 ints, NHWC; 1 in batch and depth"),
        ArgSpec("padding", "str", "SAME or VALID"),
    )

    def bind(self, symbol: str, precision: str, variant: str, cores: tuple[int, ...],
             args: Mapping[str, Any], read: MemoryReader) -> BoundCall:
        """Check the geometry and describe col and the input gradient."""
        a = check_args(symbol, self.args, args)
        fh, fw = require_ints("filter_sizes", a["filter_sizes"], 2, minimum=1)
        g = conv_geometry(a["input_sizes"], (fh, fw), strides=a["strides"], padding=a["padding"],
                          explicit_paddings=None, data_format="NHWC", dilations=None, input_name="input_sizes",
                          filter_name="filter_sizes")
        dtype = PRECISION_DTYPES[precision]
        col = Buffer("col", require_address("col", a["col"]), (g.batch, g.out_h, g.out_w, fh, fw, g.in_c), dtype,
                     "input")
        out = Buffer("output", require_address("output", a["output"]), g.nhwc_shape(g.in_c), dtype, "output")
        return BoundCall(symbol, precision, variant, cores, (col, out), g)

    def plan(self, call: BoundCall, ctx: PlanContext) -> Plan:
        """Rows of the input gradient per core, a few per tile, through two slots of the vector staging level."""
        g: ConvGeometry = call.attrs
        col, out = call.buffer("col"), call.buffer("output")
        size = col.dtype.itemsize
        col_row = g.out_w * g.filter_h * g.filter_w * g.in_c * size  # bytes of one output row of col
        dx_row = g.in_w * g.in_c * size
        level = ctx.vector_level
        align = max(level.alignment_bytes, 1)
        slot_bytes = align_down(level.size_bytes // 2, align)

        def need(rows: int) -> int:  # col rows a tile of ``rows`` input rows may read, then its dx rows
            return align_up(((rows - 1) // g.stride_h + g.filter_h // g.stride_h + 1) * col_row, align) \
                + rows * dx_row
        most = max((r for r in range(1, g.in_h + 1) if need(r) <= slot_bytes), default=0)
        if not most:
            raise DoesNotFit(None, need(1), slot_bytes, "the col rows of one input row and the row do not fit a "
                                                        "slot of the vector staging level")

        def tile(tile_id: int, n: int, h0: int, h1: int) -> Tile:
            o0, o1 = _col_rows(g, h0, h1)
            base = level.base + (tile_id % 2) * slot_bytes
            col_op = Operand(base, (max(o1 - o0, 0), g.out_w, g.filter_h, g.filter_w, g.in_c), col.dtype)
            dx_op = Operand(base + align_up(col_op.size_bytes, align), (h1 - h0, g.in_w, g.in_c), out.dtype)
            loads = (Transfer.contiguous(col.addr + (n * g.out_h + o0) * col_row, base, col_op.size_bytes),) \
                if o1 > o0 else ()
            taps = g.filter_h * g.filter_w
            elements = (h1 - h0) * g.in_w * g.in_c
            # Per output element, its taps' contributions summed; a large filter's taps in passes that fit the
            # vector registers, each after the first adding to the partial sums the one before stored.
            core = ctx.target.core
            loops = tap_groups(taps, lambda k, j: elementwise(
                core, "fp32", elements, loads=k + (1 if j else 0), stores=1, fmac=k,
                valu=0 if call.precision == "fp32" else k + 1, label="col2im"), core.vector_registers)
            compute = Compute(lambda c: (col2im_rows(g, c, o0, h0, h1).astype(out.dtype),), (col_op,), (dx_op,),
                              flops=taps * elements, precision=call.precision, loops=tuple(loops))
            store = Transfer.contiguous(dx_op.addr, out.addr + (n * g.in_h + h0) * dx_row, dx_op.size_bytes)
            return Tile(tile_id, loads, compute, (store,), slot=tile_id % 2)

        tiles: dict[int, tuple[Tile, ...]] = {}
        for core, (r0, r1) in zip(call.cores, split_even(g.batch * g.in_h, len(call.cores))):
            per = max(1, min(most, -(-(r1 - r0) // TILES_PER_CORE)))
            mine: list[Tile] = []
            r = r0
            while r < r1:
                n, h0 = divmod(r, g.in_h)
                h1 = min(h0 + per, g.in_h, h0 + r1 - r)
                mine.append(tile(len(mine), n, h0, h1))
                r += h1 - h0
            tiles[core] = tuple(mine)
        return Plan(cores=call.cores, phases=(Phase("col2im", tiles, barrier_after=False),), precision=call.precision)


KERNEL = Col2Im()
