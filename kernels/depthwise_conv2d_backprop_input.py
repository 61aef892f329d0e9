"""DepthwiseConv2dNativeBackpropInput: ``{fp,hp}_depthwise_conv2d_backprop_input_{s,p}``.

The gradient of a depthwise convolution with respect to its input, as
TensorFlow's ``DepthwiseConv2dNativeBackpropInput``: ``filter`` is
[fh, fw, in_c, mult], ``out_backprop`` is [batch, out_h, out_w, in_c·mult] in
data_format order, and output channel k = c·mult + m reads input channel c
through ``filter[:, :, c, m]``.  The input gradient is the transposed
convolution

    dx[n, ih, iw, c] = Σ_{kh, kw, m} out_backprop[n, oh, ow, c·mult + m] · filter[kh, kw, c, m]
                       over oh·stride_h − pad_top + kh·dil_h = ih and ow·stride_w − pad_left + kw·dil_w = iw.

Dilations > 1 are computed (TensorFlow's CPU kernel refuses them).

Precision: ``fp_`` symbols store and compute in fp32; ``hp_`` symbols store
filter, out_backprop and output in fp16, multiply in fp16 and accumulate in
fp32, as TensorFlow's fp16 path accumulates (``fp16_fp32acc`` where the target
lists that rate: MT7004 does, at its fp16 lanes; elsewhere the operands are
widened to fp32 as they are loaded, a permute per vector), and round each output
block to fp16 once, on store (a conversion per vector in the loop's epilogue).

The inner loop (what the timing model prices, :mod:`kernels.common.loops`): per
tile, blocks of output vectors accumulate in registers over the taps that reach
them (:func:`~kernels.common.loops.tap_accumulate`): per tap, an FMAC per output
vector on its own out_backprop vector, loaded at that tap's strided, dilated
position (NHWC: along the channels, the multipliers interleaved as out_backprop
stores them and folded once per block; a wide load moves the adjacent vectors of
consecutive positions when a position's channels fill whole vectors.  NCHW:
along an input row, each out_backprop vector shifted or spread onto the row's
lanes by a permute).  The block is as large as the FMAC latency needs and the
register file allows (with the filter's vectors resident when they fit): the
``register_block`` key, of scope ``compute``, which the plan context's
``cheapest_loops`` (the cost model) picks per tile unless the caller fixes it.

Plan: the work is cut into tiles of (image, block of input rows, block of
input columns, block of channels).  The cores split the rows of all images,
or the channels, or both (row cuts re-read halo rows; NHWC channel cuts come
in whole vectors of lanes).  Each tile loads its halo — the out_backprop rows and
columns whose receptive field reaches the tile — accumulates every tap
(kh, kw) into its block of ``output`` with strided slices, and stores the
block.  A channel block's filter slice is loaded once, with the block's
first tile, into one of two filter areas that alternate between blocks; the
tiles alternate between two slots of the rest of the scratchpad, so the next
tile's DMA overlaps this tile's compute.  NCHW tensors are moved and computed
in their own layout.  The split and the tile shape are keys of the kernel's
tiling space, chosen by the simulator's search: short tiles expose less of the
first load and the last store, tall ones pay fewer transfers and halo rows.

Tiling (``tiling=`` of a call or run-config, all keys optional):
``channel_parts`` -- the cores form that many channel groups (channels, or
whole vectors of them in NHWC, split evenly), each group's cores splitting the
rows of all images (1: rows only); ``tile_rows``, ``tile_cols``,
``tile_channels`` -- the tile shape (input rows, input columns, channels),
clipped to a core's share; ``register_block`` (per tile, see above).
:meth:`DepthwiseConv2dBackpropInput.tiling_space` declares them; the
simulator's search completes the keys a caller leaves out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from kernels.base import PlanContext
from kernels.common import loops as lp
from kernels.common.args import require_ints
from kernels.common.binding import attrs_of, bind_arguments, bound_call
from kernels.common.geometry import AxisTaps, ConvGeometry, conv_geometry, halo_bound, image_segments
from kernels.common.scratch import Scratch, align_up, aligned_bytes, fits
from kernels.common.streams import CoreStream, phase_of, plan_of
from kernels.common.tiling_space import IntKey, TilingSpace, complete, largest, split_even, split_units
from kernels.common.transfers import block_in, block_out, channel_grain, operand_in
from sim.errors import KernelArgError
from sim.model.call import ArgSpec, BoundCall, Buffer, MemoryReader
from sim.model.plan import Compute, DoesNotFit, Loop, Operand, Plan, TileFn, Transfer, c_strides
from sim.timing import streams_to_fill

F32 = np.dtype(np.float32)
#: Most output vectors a tap loop accumulates at once (the register block) that the kernel's choice tries.
MAX_BLOCK = 32


# --- numerics ----------------------------------------------------------------------------------

def _taps_channels_first(acc: np.ndarray, dy: np.ndarray, filt: np.ndarray, rows: AxisTaps, cols: AxisTaps,
                         stride_h: int, stride_w: int) -> None:
    """acc (ct, rows, cols) += taps of dy (ct·mult, o_rows, o_cols): inner loops along a row."""
    ct, mult = filt.shape[2], filt.shape[3]
    by_mult = dy.reshape((ct, mult) + dy.shape[1:])
    for kh, oh, nh, ih in rows.taps:
        h_sl = slice(ih, ih + (nh - 1) * stride_h + 1, stride_h)
        for kw, ow, nw, iw in cols.taps:
            w_sl = slice(iw, iw + (nw - 1) * stride_w + 1, stride_w)
            for m in range(mult):
                acc[:, h_sl, w_sl] += by_mult[:, m, oh:oh + nh, ow:ow + nw] * filt[kh, kw, :, m, None, None]


def _taps_channels_last(acc: np.ndarray, dy: np.ndarray, filt: np.ndarray, rows: AxisTaps, cols: AxisTaps,
                        stride_h: int, stride_w: int) -> None:
    """acc (rows, cols, ct) += taps of dy (o_rows, o_cols, ct·mult), both C-contiguous.

    Each row is taken as one flat run of cols·ct elements against the filter
    tiled along it (long inner loops rather than one of ct elements per pixel);
    output channel c·mult + m of a run is every mult-th element from m.
    """
    fh, fw, ct, mult = filt.shape
    width, o_width = acc.shape[1], dy.shape[1]
    k = ct * mult
    acc2 = acc.reshape(acc.shape[0], width * ct)
    dy2 = dy.reshape(dy.shape[0], o_width * k)
    n_run = max((t[2] for t in cols.taps), default=0)
    # tiled[kh, kw, m] = filter[kh, kw, :, m] repeated n_run times
    tiled = np.broadcast_to(filt.transpose(0, 1, 3, 2)[:, :, :, None, :], (fh, fw, mult, n_run, ct))
    tiled = tiled.reshape(fh, fw, mult, n_run * ct)
    for kh, oh, nh, ih in rows.taps:
        h_sl = slice(ih, ih + (nh - 1) * stride_h + 1, stride_h)
        for kw, ow, nw, iw in cols.taps:
            if stride_w == 1:
                dst = acc2[h_sl, iw * ct:(iw + nw) * ct]
            else:
                dst = acc[h_sl, iw:iw + (nw - 1) * stride_w + 1:stride_w]
            for m in range(mult):
                start = ow * k + m
                src = dy2[oh:oh + nh, start:start + (nw * ct - 1) * mult + 1:mult]
                if stride_w == 1:
                    dst += src * tiled[kh, kw, m, :nw * ct]
                else:
                    dst += src.reshape(nh, nw, ct) * filt[kh, kw, :, m]


def accumulate_taps(acc: np.ndarray, dy: np.ndarray, filt: np.ndarray, rows: AxisTaps, cols: AxisTaps,
                    stride_h: int, stride_w: int, channels_first: bool) -> None:
    """Add every tap's contribution into ``acc`` in place (fp32), in the tensors' own layout.

    ``acc`` is the tile's output block, (ct, rows, cols) channels-first or
    (rows, cols, ct) channels-last; ``dy`` its out_backprop halo, (ct·mult,
    o_rows, o_cols) or (o_rows, o_cols, ct·mult); ``filt`` (fh, fw, ct, mult).
    Output channel c·mult + m feeds input channel c through filter[..., c, m].
    """
    dy = np.ascontiguousarray(dy)
    if channels_first:
        _taps_channels_first(acc, dy, filt, rows, cols, stride_h, stride_w)
    else:
        _taps_channels_last(acc, dy, filt, rows, cols, stride_h, stride_w)


def depthwise_conv2d_backprop_input(filt: np.ndarray, out_backprop: np.ndarray, geo: ConvGeometry) -> np.ndarray:
    """The whole input gradient in one vectorised pass (fp32 accumulation, result in the inputs' dtype).

    Tensors are in ``geo.data_format`` order; this is the math each tile runs, on the whole tensor.
    """
    f = filt.astype(F32, copy=False)
    dy = out_backprop.astype(F32, copy=False)
    acc = np.zeros(geo.tensor_shape(geo.in_c), F32)
    rows, cols = geo.row_taps(0, geo.in_h), geo.col_taps(0, geo.in_w)
    for n in range(geo.batch):
        halo = dy[n, :, rows.o_lo:, cols.o_lo:] if geo.nchw else dy[n, rows.o_lo:, cols.o_lo:]
        accumulate_taps(acc[n], halo, f, rows, cols, geo.stride_h, geo.stride_w, geo.nchw)
    return acc.astype(out_backprop.dtype, copy=False)


def tile_block(rows: AxisTaps, cols: AxisTaps, geo: ConvGeometry, ct: int, out_dtype: np.dtype,
               filt: np.ndarray, dy: np.ndarray) -> tuple[np.ndarray]:
    """The compute of one tile (a :class:`TileFn` of its taps, geometry, channels and dtype): (filter slice,
    out_backprop halo) -> output block, in the tensors' layout."""
    acc = np.zeros(geo.order(1, rows.hi - rows.lo, cols.hi - cols.lo, ct)[1:], F32)
    accumulate_taps(acc, dy[0].astype(F32, copy=False), filt.astype(F32, copy=False), rows, cols, geo.stride_h,
                    geo.stride_w, geo.nchw)
    return (acc[None].astype(out_dtype, copy=False),)


def zero_block(shape: tuple[int, ...], out_dtype: np.dtype) -> tuple[np.ndarray]:
    """The compute of a tile no out_backprop position reaches (strides skipping it, padding): zeros."""
    return (np.zeros(shape, out_dtype),)


# --- binding -----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class InputGradAttrs:
    """What binding found out about a call: its geometry and the depth multiplier."""

    geometry: ConvGeometry
    multiplier: int


class DepthwiseConv2dBackpropInput:
    """The registry entry of depthwise_conv2d_backprop_input."""

    name = "depthwise_conv2d_backprop_input"
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
        p = _Planner(call, ctx)
        t = complete(p.space, ctx)
        return p.build(t["channel_parts"], TileShape(t["tile_rows"], t["tile_cols"], t["tile_channels"]))

    def tiling_space(self, call: BoundCall, ctx: PlanContext) -> TilingSpace:
        """The keys ``channel_parts`` (every number of channel groups, the most first), ``tile_channels``,
        ``tile_cols`` and ``tile_rows`` (for the first core's share: whole vectors of channels, whole rows
        unless not one fits, the tallest tiles that fit first, then shorter ones), and, per tile,
        ``register_block`` (scope ``compute``).

        Row cuts re-read halo rows, channel cuts (whole vectors in NHWC) may leave cores idle or lanes empty;
        few large tiles spend fewer DMA setups, smaller ones keep the unhidden first load and last store short.
        """
        return _Planner(call, ctx).space


# --- the tiling space ----------------------------------------------------------------------------

@dataclass(frozen=True)
class TileShape:
    """Input rows, input columns and channels of one tile."""

    rows: int
    cols: int
    chans: int


@dataclass(frozen=True)
class Share:
    """One core's part of the work: flattened (image·in_h + row) range and channel range."""

    g0: int
    g1: int
    c0: int
    c1: int

    def segments(self, in_h: int) -> list[tuple[int, int, int]]:
        """(image, first row, end row) pieces of the share, one per image it touches."""
        return image_segments(self.g0, self.g1, in_h)


def _row_options(max_rows: int, seg_rows: list[int]) -> list[int]:
    """Row counts worth pricing: halvings of the most that fit, and even cuts of the segments (ascending)."""
    opts = {max(1, max_rows >> i) for i in range(max_rows.bit_length())}
    opts |= {-(-r // k) for r in seg_rows[:2] for k in range(1, 9)}
    return sorted(o for o in opts if o <= max_rows)


def split_transfers(op: Operand, tensor: Buffer, starts: tuple[int, ...], parts: int,
                    inbound: bool) -> tuple[Transfer, ...]:
    """The DMA of operand ``op`` to or from its block of ``tensor``, cut into up to ``parts`` descriptors.

    The cut runs along the operand's first axis longer than one, so every piece
    is a contiguous part of the dense scratch operand.
    """
    axis = next((i for i, n in enumerate(op.shape) if n > 1), None)
    pieces = split_even(op.shape[axis], parts) if axis is not None else [(0, 1)]
    isz = op.dtype.itemsize
    step = c_strides(op.shape, isz)[axis] if axis is not None else 0
    out = []
    for a, b in pieces:
        shape, at = list(op.shape), list(starts)
        if axis is not None:
            shape[axis], at[axis] = b - a, at[axis] + a
        local = op.addr + a * step
        out.append(block_in(tensor.addr, tensor.shape, isz, at, shape, local) if inbound
                   else block_out(local, tensor.addr, tensor.shape, isz, at, shape))
    return tuple(out)


class _Planner:
    """Plans one call: the cores' shares, the tile shapes that fit (the tiling space), and the plan of a
    tiling."""

    def __init__(self, call: BoundCall, ctx: PlanContext):
        self.call, self.ctx = call, ctx
        attrs = attrs_of(call, InputGradAttrs)
        self.geo, self.mult = attrs.geometry, attrs.multiplier
        self.filt, self.dy, self.out = (call.buffer(n) for n in ("filter", "out_backprop", "output"))
        self.dt = self.out.dtype
        self.isz = self.dt.itemsize
        self.core = ctx.target.core
        # hp_: fp16 products accumulated in fp32 where the chip has that rate, else widened to fp32 first.
        self.precision = lp.accumulate_precision(self.core, ctx.precision)
        self.convert = self.isz != F32.itemsize and self.precision == "fp32"
        self.lanes = lp.lanes(self.core, self.precision)
        self._blocks: dict[tuple[int, ...], int] = {}
        self._shape_memo: dict[int, dict[int, list[TileShape]]] = {}
        # NHWC channel cuts: whole vectors, and whole bursts of the tensors' region.
        self.grain = channel_grain(ctx, self.dy.addr, self.isz, self.lanes)
        self.level = ctx.vector_level
        self.align = self.level.alignment_bytes
        g = self.geo
        self.channel_units = g.in_c if g.nchw else -(-g.in_c // self.grain)
        self.max_parts = min(len(call.cores), self.channel_units)
        self.space = TilingSpace(
            IntKey("channel_parts", 1, self.max_parts, "channel groups the cores form (1: rows only)",
                   values=range(self.max_parts, 0, -1)),
            IntKey("tile_channels", 1, g.in_c, "channels of a tile", values=self._chan_values),
            IntKey("tile_cols", 1, g.in_w, "input columns of a tile", values=self._col_values),
            IntKey("tile_rows", 1, g.in_h, "input rows of a tile", values=self._row_values),
            IntKey("register_block", 1, MAX_BLOCK, "output vectors a tap loop accumulates in registers",
                   scope="compute", values=range(1, MAX_BLOCK + 1)),
            fit=self._fit, tiles=self._tiles)
        self.asked = self.space.parse(ctx)

    # -- the tiling space: the first core's share of each split -------------------------------------------

    def _options(self, parts: int) -> dict[int, list[TileShape]]:
        """:meth:`shape_options` of the first core's share with ``parts`` channel groups (memoised)."""
        got = self._shape_memo.get(parts)
        if got is None:
            got = self._shape_memo[parts] = self.shape_options(self.shares(parts)[0])
        return got

    def _chan_values(self, tiling: Mapping[str, Any]) -> list[int]:
        """Channels of a tile worth trying with ``tiling['channel_parts']`` groups: those whose tallest tile holds
        the most elements first, then the widest (nothing fits: one channel, which the space's ``fit`` refuses
        naming the bytes)."""
        try:
            opts = self._options(tiling["channel_parts"])
        except DoesNotFit:
            return [1]
        return sorted(opts, key=lambda ct: (-max(s.rows * s.cols * s.chans for s in opts[ct]), -ct))

    def _col_values(self, tiling: Mapping[str, Any]) -> list[int]:
        """Columns of a tile: whole rows, unless not one fits (then the halvings that do; nothing fits: one)."""
        try:
            opts = self._options(tiling["channel_parts"])
        except DoesNotFit:
            return [1]
        shapes = opts.get(tiling["tile_channels"]) or next(iter(opts.values()))
        return [shapes[0].cols]

    def _row_values(self, tiling: Mapping[str, Any]) -> list[int]:
        """Rows of a tile worth trying: halvings of the most that fit and even cuts of the segments, tallest
        first."""
        g = self.geo
        share = self.shares(tiling["channel_parts"])[0]
        seg_rows = [r1 - r0 for _, r0, r1 in share.segments(g.in_h)]
        chans = min(tiling["tile_channels"], share.c1 - share.c0)
        most = self._most_rows(max(seg_rows), tiling["tile_cols"], chans)
        return sorted(_row_options(most, seg_rows), reverse=True)

    def _fit(self, tiling: Mapping[str, Any]) -> None:
        """The space's ``fit``: a tile of the shape (clipped to the first core's share) fits the scratchpad."""
        share = self.shares(tiling["channel_parts"])[0]
        seg = max(r1 - r0 for _, r0, r1 in share.segments(self.geo.in_h))
        self.scratch(TileShape(min(tiling["tile_rows"], seg), tiling["tile_cols"],
                               min(tiling["tile_channels"], share.c1 - share.c0)))

    def _tiles(self, tiling: Mapping[str, Any]) -> int:
        """The space's ``tiles``: every core's tiles."""
        shape = TileShape(tiling["tile_rows"], tiling["tile_cols"], tiling["tile_channels"])
        return sum(self.tile_count(share, shape) for share in self.shares(tiling["channel_parts"]))

    def shares(self, p_chans: int) -> list[Share]:
        """``p_chans`` channel groups of cores (channels, or whole vectors of them in NHWC, split evenly), each
        group's cores splitting the rows of every image."""
        g = self.geo
        p_rows = min(g.batch * g.in_h, len(self.call.cores) // p_chans)
        chans = split_units(g.in_c, 1 if g.nchw else self.grain, p_chans)
        return [Share(g0, g1, c0, c1) for g0, g1 in split_even(g.batch * g.in_h, p_rows) for c0, c1 in chans]

    def descriptors(self, busy_cores: int) -> int:
        """Descriptors to cut each big transfer into: enough for ``busy_cores`` cores to use all of the tensors'
        region (one descriptor streams at most its DMA engine's rate, a core has so many engines)."""
        t = self.ctx.target
        region = next(r for r in t.regions if r.contains(self.dy.addr, 1))
        return max(1, min(t.dma.engines_per_core, -(-streams_to_fill(t.dma, region) // busy_cores)))

    # -- the scratchpad: two filter slices (alternating by channel block), then two slots of tiles -------

    def filter_bytes(self, chans: int) -> int:
        """Bytes of one (aligned) filter slice of ``chans`` channels."""
        g = self.geo
        return align_up(g.filter_h * g.filter_w * chans * self.mult * self.isz, self.align)

    def tile_bytes(self, t: TileShape) -> list[int]:
        """Bytes of a tile's slot buffers: output block, halo (+ fp32 accumulator for fp16)."""
        g = self.geo
        o_rows = min(g.out_h, halo_bound(t.rows, g.eff_h, g.stride_h))
        o_cols = min(g.out_w, halo_bound(t.cols, g.eff_w, g.stride_w))
        out = t.rows * t.cols * t.chans
        sizes = [out * self.isz, o_rows * o_cols * t.chans * self.mult * self.isz]
        if self.dt != F32:
            sizes.append(out * F32.itemsize)
        return sizes

    def fits(self, t: TileShape) -> bool:
        """True when two filter slices and two slots of tiles of shape ``t`` fit the vector level."""
        slot = Scratch.slot_bytes_for(self.level, 2 * self.filter_bytes(t.chans))
        return slot > 0 and fits(self.tile_bytes(t), slot, self.align)

    def scratch(self, t: TileShape) -> Scratch:
        """The layout of tiles of shape ``t``; DoesNotFit naming the vector level when they do not fit."""
        if not self.fits(t):
            needed = 2 * self.filter_bytes(t.chans) + 2 * aligned_bytes(self.tile_bytes(t), self.align)
            g = self.geo
            raise DoesNotFit(self.level.name, needed, self.level.size_bytes,
                             f"{self.call.symbol}: a tile of {t.rows} rows x {t.cols} columns x {t.chans} channels "
                             f"does not fit the {self.level.size_bytes}-byte {self.level.name} scratchpad (two slots "
                             f"of output block and out_backprop halo beside two {g.filter_h}x{g.filter_w} filter "
                             f"slices of multiplier {self.mult}: {needed} bytes)")
        return Scratch(self.level, 2 * self.filter_bytes(t.chans))

    # -- choosing: candidate plans, priced ----------------------------------------------------------

    def shape_options(self, share: Share) -> dict[int, list[TileShape]]:
        """The tile shapes worth pricing for ``share``, by channels (whole vectors in NHWC, halvings in NCHW),
        each with rows from halvings of the most that fit and even cuts of the segments (ascending); whole rows
        unless not one fits."""
        g = self.geo
        seg_rows = [r1 - r0 for _, r0, r1 in share.segments(g.in_h)]
        chans = share.c1 - share.c0
        if not g.nchw:
            chan_options = sorted({min(chans, k * self.grain) for k in range(1, -(-chans // self.grain) + 1)})
            if not self.fits(TileShape(1, g.in_w, chan_options[0])):
                # Part-filled vectors only when a whole vector of channels cannot fit (very wide rows).
                chan_options = sorted({max(1, chans // 2 ** i) for i in range(12)})
        else:
            chan_options = sorted({max(1, -(-chans // 2 ** i)) for i in range(12)})
        cols = g.in_w
        while True:
            out = {}
            for ct in chan_options:
                if self.fits(TileShape(1, cols, ct)):
                    out[ct] = [TileShape(rows, cols, ct)
                               for rows in _row_options(self._most_rows(max(seg_rows), cols, ct), seg_rows)]
            if out or cols == 1:
                break
            cols = -(-cols // 2)
        if not out:
            self.scratch(TileShape(1, 1, chan_options[0]))  # raises: not one element per channel fits
        return out

    def _most_rows(self, rows: int, cols: int, chans: int) -> int:
        """The most rows (at most ``rows``, at least 1) whose tiles of ``cols`` x ``chans`` fit."""
        return largest(rows, lambda r: self.fits(TileShape(r, cols, chans)), lo=1)

    def tile_count(self, share: Share, shape: TileShape) -> int:
        """Tiles of a core's ``share`` cut into tiles of ``shape``."""
        rows = sum(-(-(r1 - r0) // shape.rows) for _, r0, r1 in share.segments(self.geo.in_h))
        return rows * -(-(share.c1 - share.c0) // shape.chans) * -(-self.geo.in_w // shape.cols)

    # -- building ---------------------------------------------------------------------------------------

    def build(self, parts: int, shape: TileShape) -> Plan:
        """The plan: ``parts`` channel groups of cores, tiles of ``shape`` clipped to each core's share."""
        shares = self.shares(parts)
        return self._plan_of({core: self._core_stream(share, shape, len(shares))
                              for core, share in zip(self.call.cores, shares)})

    def _plan_of(self, streams: Mapping[int, CoreStream]) -> Plan:
        """The plan of one phase of the cores' ``streams``."""
        return plan_of(self.call, [phase_of(DepthwiseConv2dBackpropInput.name, streams, barrier_after=False)])

    def _core_stream(self, share: Share, shape: TileShape, busy_cores: int) -> CoreStream:
        """Per channel block, its tiles row by row; the block's first tile also loads its filter slice."""
        g = self.geo
        seg = max(r1 - r0 for _, r0, r1 in share.segments(g.in_h))
        shape = TileShape(min(shape.rows, seg), shape.cols, min(shape.chans, share.c1 - share.c0))
        sc = self.scratch(shape)
        f_bytes = self.filter_bytes(shape.chans)
        parts = self.descriptors(busy_cores)
        col_blocks = [g.col_taps(w0, min(w0 + shape.cols, g.in_w)) for w0 in range(0, g.in_w, shape.cols)]
        stream = CoreStream()
        for k, c0 in enumerate(range(share.c0, share.c1, shape.chans)):
            c1 = min(c0 + shape.chans, share.c1)
            # Two filter areas, alternating by block: block k+1's slice loads (with its first tile, while
            # block k's last tile computes) into the area block k-1 used.
            o_f = Operand(sc.fixed_base + (k % 2) * f_bytes, (g.filter_h, g.filter_w, c1 - c0, self.mult), self.dt)
            filter_load: tuple[Transfer, ...] = (operand_in(o_f, self.filt.addr, self.filt.shape, (0, 0, c0, 0)),)
            for n, r0, r1 in share.segments(g.in_h):
                for h0 in range(r0, r1, shape.rows):
                    rows = g.row_taps(h0, min(h0 + shape.rows, r1))
                    for cols in col_blocks:
                        self._tile(stream, sc, n, rows, cols, c0, o_f, filter_load, parts)
                        filter_load = ()
        return stream

    def _tile(self, stream: CoreStream, sc: Scratch, n: int, rows: AxisTaps, cols: AxisTaps, c0: int, o_f: Operand,
              filter_load: tuple[Transfer, ...], parts: int) -> None:
        """One tile: load the out_backprop halo (and ``filter_load``), accumulate every tap, store the block."""
        g, dt, arena = self.geo, self.dt, sc.slot(stream.slot)
        ct = o_f.shape[2]
        o_out = arena.operand(g.order(1, rows.hi - rows.lo, cols.hi - cols.lo, ct), dt)
        stores = split_transfers(o_out, self.out, g.order(n, rows.lo, cols.lo, c0), parts, inbound=False)
        if not rows.taps or not cols.taps:
            zeros = lp.elementwise(self.core, self.ctx.precision, int(np.prod(o_out.shape)), loads=0, stores=1,
                                   label="zero block")
            stream.add(filter_load, Compute(TileFn(zero_block, (o_out.shape, dt)), (), (o_out,), flops=0,
                                            precision=self.precision, loops=(zeros,)), stores)
            return
        o_dy = arena.operand(g.order(1, rows.o_n, cols.o_n, ct * self.mult), dt)
        if dt != F32:
            arena.alloc(o_out.size_bytes * F32.itemsize // dt.itemsize)  # where the fp32 accumulator lives
        loads = filter_load + split_transfers(o_dy, self.dy, g.order(n, rows.o_lo, cols.o_lo, c0 * self.mult),
                                              parts, inbound=True)
        # The math: a multiply-add per (tap, output position) pair; the loop says what it costs.
        math = 2 * self.mult * ct * rows.pairs * cols.pairs
        stream.add(loads, Compute(TileFn(tile_block, (rows, cols, g, ct, dt)), (o_f, o_dy), (o_out,), flops=math,
                                  precision=self.precision, loops=(self.tap_loop(rows, cols, ct),)),
                   stores)

    # -- the tile's inner loop ----------------------------------------------------------------------------

    def tap_loop(self, rows: AxisTaps, cols: AxisTaps, ct: int, block: int | None = None) -> Loop:
        """The taps of a tile accumulated into blocks of ``block`` output vectors held in registers (the
        cheapest block the timing model prices when None).

        NHWC: vectors run along the channels (the multipliers interleaved as out_backprop stores them, folded
        once per output vector in the epilogue); every FMAC takes its own out_backprop vector, loaded for its tap
        at that tap's strided, dilated position: a load per FMAC, a wide load moving the adjacent vectors of
        consecutive positions when a position's channels fill whole vectors.  NCHW: vectors run along an input
        row; each out_backprop vector needs a permute (shifted onto the row's lanes at stride 1, spread onto every
        stride-th lane otherwise) and one load of its own.  The filter's vectors for the block's channels stay in
        registers when they fit beside the block.  fp16 results are narrowed in the epilogue (and fp16 operands
        widened per load where the chip computes fp16 in fp32)."""
        g, core, mult = self.geo, self.core, self.mult
        width = cols.hi - cols.lo
        positions = (rows.hi - rows.lo) * width
        pairs = rows.pairs * cols.pairs
        if g.nchw:
            per_vector = sum(-(-t[2] // self.lanes) for t in cols.taps)
            vectors = ct * (rows.hi - rows.lo) * -(-width // self.lanes)  # output vectors
            fmacs = mult * ct * rows.pairs * per_vector
            adjacent, folds, filter_vectors = False, 0, g.filter_h * g.filter_w * mult
        else:
            per_position = -(-ct * mult // self.lanes)  # interleaved vectors of a position
            vectors = positions * per_position
            fmacs = pairs * per_position
            adjacent = (ct * mult) % self.lanes == 0
            folds = mult > 1
            filter_vectors = g.filter_h * g.filter_w * per_position
        key = (vectors, fmacs, int(adjacent), filter_vectors, int(g.nchw))
        if block is None and self.asked["register_block"] is not None:
            block = min(self.asked["register_block"], max(1, vectors))
        if block is None:
            block = self._blocks.get(key)
        if block is None:
            fitting = [b for b in range(1, min(MAX_BLOCK, vectors) + 1)
                       if self._block_registers(b, 1) <= core.vector_registers]
            block = self._blocks[key] = self.ctx.cheapest_loops(
                [(b, (self.tap_loop(rows, cols, ct, b),)) for b in fitting])
        entries = -(-vectors // block)
        trips = -(-fmacs // (entries * block))
        resident = self._block_registers(block, filter_vectors) <= core.vector_registers
        shuffles = block * (int(g.nchw) + int(self.convert))
        narrow = int(self.isz != F32.itemsize)
        return lp.tap_accumulate(core, block=block, taps=trips, entries=entries, operand_pairs=adjacent,
                                 shuffles=shuffles, filter_loads=0 if resident else 1,
                                 epilogue_stores=-(-block // mult) if folds else block,
                                 epilogue_valu=block * (int(folds) + narrow),
                                 registers=self._block_registers(block, filter_vectors if resident else 1),
                                 label=f"taps into {block} output vectors")

    def _block_registers(self, block: int, filter_vectors: int) -> int:
        """Vector registers a tap loop of ``block`` output vectors keeps live: the fp32 accumulators, the loaded
        out_backprop vectors and ``filter_vectors`` filter vectors."""
        core = self.core
        acc = block * lp.registers_for(core, self.lanes, F32.itemsize)
        return acc + block * lp.registers_for(core, self.lanes, self.isz) + filter_vectors


KERNEL = DepthwiseConv2dBackpropInput()
