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
filter, out_backprop and output in fp16, widen them on load, accumulate each
output block in an fp32 scratch buffer and round it to fp16 once, on store
(the conversions cost no cycles in this model).

Plan: the work is cut into tiles of (image, block of input rows, block of
input columns, block of channels).  The cores split the rows of all images,
or the channels, or both — whichever an estimate from the target's numbers
finds cheapest (row cuts re-read halo rows; NHWC channel cuts come in whole
vectors of lanes).  Each tile loads its halo — the out_backprop rows and
columns whose receptive field reaches the tile — accumulates every tap
(kh, kw) into its block of ``output`` with strided slices, and stores the
block.  A channel block's filter slice is loaded once, with the block's
first tile, into one of two filter areas that alternate between blocks; the
tiles alternate between two slots of the rest of the scratchpad, so the next
tile's DMA overlaps this tile's compute.  The tile shape is the one with the
least estimated time among those that fit (halo re-reads against the
unhidden first load and last store).  NCHW tensors are moved and computed in
their own layout.

Tiling (``tiling=`` of a call or run-config, all keys optional):
``channel_parts`` -- the cores form that many channel groups (channels, or
whole vectors of them in NHWC, split evenly), each group's cores splitting the
rows of all images (1: rows only); ``tile_rows``, ``tile_cols``,
``tile_channels`` -- the tile shape (input rows, input columns, channels),
clipped to a core's share.  Without a tiling the simulator compares the
candidates :meth:`DepthwiseConv2dBackpropInput.tilings` lists.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from kernels.base import PRECISION_DTYPES, PlanContext
from kernels.common.args import check_args, require_address, require_ints
from kernels.conv_geometry import ConvGeometry, conv_geometry
from kernels.tiling import (
    Arena,
    align_up,
    block_in,
    block_out,
    channel_grain,
    fits,
    operand_in,
    padded_lanes,
    split_even,
)
from kernels.tiling_keys import int_key, tiling_keys, unique
from sim.errors import KernelArgError, LayoutError
from sim.model.call import ArgSpec, BoundCall, Buffer, MemoryReader
from sim.model.plan import Compute, Operand, Phase, Plan, Tile, Transfer, c_strides
from sim.timing import lone_stream_bytes_per_cycle

F32 = np.dtype(np.float32)
#: Bytes no buffer of a call may exceed (no chip addresses more).
MAX_BUFFER_BYTES = 1 << 40
#: The keys of a caller's ``tiling``: channel groups of the cores, and the tile shape.
TILING_KEYS = ("channel_parts", "tile_rows", "tile_cols", "tile_channels")


# --- geometry of one tile along one spatial axis ---------------------------------------------

@dataclass(frozen=True)
class AxisTaps:
    """One spatial axis of a tile: input range [lo, hi) and the output range [o_lo, o_lo + o_n) it reads.

    ``taps`` lists, per filter tap k that reaches the tile, ``(k, o_start, count,
    i_start)``: the output positions ``o_lo + o_start ..`` (``count`` of them)
    land on input positions ``lo + i_start``, ``+ stride`` each.
    """

    lo: int
    hi: int
    o_lo: int
    o_n: int
    taps: tuple[tuple[int, int, int, int], ...]

    @property
    def pairs(self) -> int:
        """(tap, output position) pairs of this axis: the multiply-adds per element of the other axes."""
        return sum(t[2] for t in self.taps)


def axis_taps(lo: int, hi: int, out_n: int, ksize: int, stride: int, dilation: int, pad: int) -> AxisTaps:
    """Which outputs of an axis of ``out_n`` reach inputs [lo, hi): input = out·stride − pad + k·dilation."""
    found = []
    for k in range(ksize):
        off = k * dilation - pad
        a = max(0, -(-(lo - off) // stride))
        b = min(out_n - 1, (hi - 1 - off) // stride)
        if a <= b:
            found.append((k, a, b - a + 1, a * stride + off - lo))
    if not found:
        return AxisTaps(lo, hi, 0, 0, ())
    o_lo = min(t[1] for t in found)
    o_hi = max(t[1] + t[2] for t in found)
    taps = tuple((k, a - o_lo, n, i) for k, a, n, i in found)
    return AxisTaps(lo, hi, o_lo, o_hi - o_lo, taps)


def halo_bound(n_in: int, eff: int, stride: int) -> int:
    """The most output positions whose receptive field reaches ``n_in`` consecutive inputs."""
    return (n_in - 1 + eff - 1) // stride + 1


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


def depthwise_conv2d_backprop_input(filt: np.ndarray, out_backprop: np.ndarray, geom: ConvGeometry) -> np.ndarray:
    """The whole input gradient in one vectorised pass (fp32 accumulation, result in the inputs' dtype).

    Tensors are in ``geom.data_format`` order; this is the math each tile runs, on the whole tensor.
    """
    nchw = geom.data_format == "NCHW"
    f = filt.astype(F32, copy=False)
    dy = out_backprop.astype(F32, copy=False)
    acc = np.zeros(geom.tensor_shape(geom.in_c), F32)
    rows = axis_taps(0, geom.in_h, geom.out_h, geom.filter_h, geom.stride_h, geom.dilation_h, geom.pad_top)
    cols = axis_taps(0, geom.in_w, geom.out_w, geom.filter_w, geom.stride_w, geom.dilation_w, geom.pad_left)
    for n in range(geom.batch):
        halo = dy[n, :, rows.o_lo:, cols.o_lo:] if nchw else dy[n, rows.o_lo:, cols.o_lo:]
        accumulate_taps(acc[n], halo, f, rows, cols, geom.stride_h, geom.stride_w, nchw)
    return acc.astype(out_backprop.dtype, copy=False)


def _tile_fn(rows: AxisTaps, cols: AxisTaps, geom: ConvGeometry, ct: int,
             out_dtype: np.dtype) -> Callable[..., tuple[np.ndarray]]:
    """The compute of one tile: (filter slice, out_backprop halo) -> output block, in the tensors' layout."""
    nchw = geom.data_format == "NCHW"
    shape = (ct, rows.hi - rows.lo, cols.hi - cols.lo) if nchw else (rows.hi - rows.lo, cols.hi - cols.lo, ct)
    sh, sw = geom.stride_h, geom.stride_w

    def fn(filt: np.ndarray, dy: np.ndarray) -> tuple[np.ndarray]:
        acc = np.zeros(shape, F32)
        accumulate_taps(acc, dy[0].astype(F32, copy=False), filt.astype(F32, copy=False), rows, cols, sh, sw,
                        nchw)
        return (acc[None].astype(out_dtype, copy=False),)

    return fn


def _zero_fn(shape: tuple[int, ...], out_dtype: np.dtype) -> Callable[..., tuple[np.ndarray]]:
    """The compute of a tile no out_backprop position reaches (strides skipping it, padding): zeros."""
    def fn() -> tuple[np.ndarray]:
        return (np.zeros(shape, out_dtype),)
    return fn


# --- tiling choice -------------------------------------------------------------------------------

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
        out = []
        g = self.g0
        while g < self.g1:
            n, r = divmod(g, in_h)
            stop = min(self.g1, (n + 1) * in_h)
            out.append((n, r, r + stop - g))
            g = stop
        return out


@dataclass(frozen=True)
class Machine:
    """What the plan weighs when it picks a split and a tile shape; every number is the target's."""

    flops_per_cycle: int
    lanes: int
    grain: int  # NHWC channel cuts: whole vectors and whole bursts of the tensors' region
    region_bytes_per_cycle: float
    core_bytes_per_cycle: float  # one core's DMA engines together, each at most the engine's rate
    transfer_cycles: int  # fixed cost of one descriptor: setup plus the region's latency
    engines: int
    compute_cycles: int  # fixed cost of one tile's compute: loop control plus the pipeline latency
    streams_to_fill: int  # descriptors streaming at once that it takes to use all of the tensors' region

    def bandwidth(self, cores: int) -> float:
        """Bytes per cycle ``cores`` cores can move from the tensors' region together."""
        return min(self.region_bytes_per_cycle, cores * self.core_bytes_per_cycle)

    def parts(self, cores: int) -> int:
        """Descriptors to cut each big transfer into: enough for ``cores`` cores to use all of the region.

        One descriptor streams at most its DMA engine's rate, so where a region
        is faster than an engine a lone core cuts its blocks to stream on several
        engines at once; with many cores, one each suffices.
        """
        return max(1, min(self.engines, -(-self.streams_to_fill // cores)))


def machine_of(ctx: PlanContext, addr: int, precision: str, itemsize: int) -> Machine:
    """The :class:`Machine` of a call whose big tensors live at ``addr``."""
    t = ctx.target
    prec = t.core.precisions[precision]
    region = next((r for r in t.regions if r.contains(addr, 1)), None)
    if region is None:  # unmapped buffers are refused by the layout check before planning
        raise LayoutError(f"address {addr:#x} is in no region of {t.name}")
    return Machine(flops_per_cycle=prec.peak_flops_per_cycle, lanes=prec.lanes,
                   grain=channel_grain(ctx, addr, itemsize, prec.lanes),
                   region_bytes_per_cycle=region.bandwidth_bytes_per_cycle,
                   core_bytes_per_cycle=t.dma.engines_per_core * lone_stream_bytes_per_cycle(t.dma, region),
                   transfer_cycles=t.dma.setup_cycles + region.latency_cycles, engines=t.dma.engines_per_core,
                   compute_cycles=t.core.loop_overhead_cycles + t.core.vector_op_latency_cycles,
                   streams_to_fill=math.ceil(region.bandwidth_bytes_per_cycle / t.dma.engine_bytes_per_cycle))


def _split_cost(geom: ConvGeometry, mult: int, itemsize: int, p_rows: int, p_chans: int,
                m: Machine) -> tuple[float, int]:
    """(cycles a split of rows in ``p_rows`` and channels in ``p_chans`` needs at best, bytes it moves).

    The cycles are the longer of its lane-padded flops on the cores used and
    its bytes (halo rows re-read at every row cut included) over the
    bandwidth those cores can draw.
    """
    # NHWC channel cuts come in whole vectors, so the padded lanes do not depend on them.
    chans = padded_lanes(geom.in_c, m.lanes) if geom.data_format == "NHWC" else geom.in_c
    flops = 2 * geom.filter_h * geom.filter_w * mult * chans * geom.out_h * geom.out_w * geom.batch
    halo_rows = 0
    for g0, g1 in split_even(geom.batch * geom.in_h, p_rows):
        for _, r0, r1 in Share(g0, g1, 0, 0).segments(geom.in_h):
            halo_rows += min(geom.out_h, halo_bound(r1 - r0, geom.eff_h, geom.stride_h))
    moved = itemsize * (halo_rows * geom.out_w * geom.in_c * mult
                        + geom.batch * geom.in_h * geom.in_w * geom.in_c)
    used = p_rows * p_chans
    return max(flops / (m.flops_per_cycle * used), moved / m.bandwidth(used)), moved


def channel_units(geom: ConvGeometry, m: Machine) -> int:
    """Pieces the channels may be split into over the cores: channels (NCHW) or whole vectors of them (NHWC)."""
    return geom.in_c if geom.data_format == "NCHW" else -(-geom.in_c // m.grain)


def best_channel_parts(geom: ConvGeometry, mult: int, itemsize: int, cores: int, m: Machine) -> int:
    """Channel groups the cores form (rows split within each) that the estimate finds cheapest.

    Row splits re-read halo rows at every cut; channel splits cost nothing in
    NCHW, and in NHWC, where channels sit on the vector lanes, are made of whole
    vectors only.  Ties go to more cores, fewer bytes, fewer channel cuts.
    """
    total_rows = geom.batch * geom.in_h
    best: tuple[tuple[float, int, int, int], int] | None = None
    for p_chans in range(1, min(cores, channel_units(geom, m)) + 1):
        p_rows = min(total_rows, cores // p_chans)
        cycles, moved = _split_cost(geom, mult, itemsize, p_rows, p_chans, m)
        key = (cycles, -p_rows * p_chans, moved, p_chans)
        if best is None or key < best[0]:
            best = (key, p_chans)
    assert best is not None  # the loop runs at least once (one channel part)
    return best[1]


def core_shares(geom: ConvGeometry, mult: int, itemsize: int, cores: int, m: Machine,
                p_chans: int | None = None) -> list[Share]:
    """Split rows of all images and/or channels over the cores: ``p_chans`` channel groups, by default the
    cheapest number (:func:`best_channel_parts`), each group's cores splitting the rows of every image."""
    total_rows = geom.batch * geom.in_h
    c_units = channel_units(geom, m)
    if p_chans is None:
        p_chans = best_channel_parts(geom, mult, itemsize, cores, m)
    p_rows = min(total_rows, cores // p_chans)
    unit = 1 if geom.data_format == "NCHW" else m.grain
    chans = [(a * unit, min(b * unit, geom.in_c)) for a, b in split_even(c_units, p_chans)]
    return [Share(g0, g1, c0, c1) for g0, g1 in split_even(total_rows, p_rows) for c0, c1 in chans]


class Footprint:
    """Scratchpad layout and estimated cost of candidate tile shapes.

    The scratchpad holds two filter slices (one per channel block, alternating,
    so the next block's filter loads while this block computes) and two slots
    of tile buffers: output block, out_backprop halo, and for fp16 tensors the
    fp32 accumulator.
    """

    def __init__(self, geom: ConvGeometry, mult: int, itemsize: int, wide_acc: bool, scratch_bytes: int,
                 align: int):
        self.g, self.mult, self.isz, self.wide_acc = geom, mult, itemsize, wide_acc
        self.scratch_bytes, self.align = scratch_bytes, align

    def filter_bytes(self, chans: int) -> int:
        """Bytes of one (aligned) filter slice of ``chans`` channels."""
        g = self.g
        return align_up(g.filter_h * g.filter_w * chans * self.mult * self.isz, self.align)

    def slot_bytes(self, chans: int) -> int:
        """Bytes of each of the two tile slots left once two filter slices are placed."""
        return max(0, (self.scratch_bytes - 2 * self.filter_bytes(chans)) // 2 // self.align * self.align)

    def tile_bytes(self, t: TileShape) -> list[int]:
        """Bytes of a tile's slot buffers: output block, halo (+ fp32 accumulator for fp16)."""
        g = self.g
        o_rows = min(g.out_h, halo_bound(t.rows, g.eff_h, g.stride_h))
        o_cols = min(g.out_w, halo_bound(t.cols, g.eff_w, g.stride_w))
        out = t.rows * t.cols * t.chans
        sizes = [out * self.isz, o_rows * o_cols * t.chans * self.mult * self.isz]
        if self.wide_acc:
            sizes.append(out * F32.itemsize)
        return sizes

    def fits(self, t: TileShape) -> bool:
        """True when tiles of shape ``t`` fit their slot."""
        return fits(self.tile_bytes(t), self.slot_bytes(t.chans), self.align)

    def cycles(self, t: TileShape, seg_rows: list[int], chans: int, m: Machine, cores: int) -> tuple[float, int]:
        """(estimated cycles, tiles) of a core's share cut into tiles of shape ``t``.

        DMA (halos, output blocks, one filter slice per channel block) and
        compute overlap in the double-buffered pipeline, so the longer of the
        two totals counts, plus the first tile's loads and the last tile's
        store, which nothing hides.  Bytes move at this core's share of the
        bandwidth when every busy core streams.
        """
        g = self.g
        blocks = -(-chans // t.chans)
        tiles = sum(-(-r // t.rows) for r in seg_rows) * blocks * -(-g.in_w // t.cols)
        out_b, halo_b = self.tile_bytes(t)[:2]
        f_b = self.filter_bytes(t.chans)
        bw = m.bandwidth(cores) / cores
        dma = (tiles * (out_b + halo_b) + blocks * f_b) / bw + (2 * tiles + blocks) * m.transfer_cycles / m.engines
        flops = 2 * g.filter_h * g.filter_w * self.mult * padded_lanes(t.chans, m.lanes) * t.rows * t.cols
        compute = tiles * (flops / m.flops_per_cycle + m.compute_cycles)
        exposed = (halo_b + out_b + f_b) / bw + 2 * m.transfer_cycles
        return max(dma, compute) + exposed, tiles


def _row_options(max_rows: int, seg_rows: list[int]) -> list[int]:
    """Row counts worth scoring: halvings of the most that fit, and even cuts of the segments."""
    opts = {max(1, max_rows >> i) for i in range(max_rows.bit_length())}
    opts |= {-(-r // k) for r in seg_rows[:2] for k in range(1, 9)}
    return sorted(o for o in opts if o <= max_rows)


def choose_tile(fp: Footprint, share: Share, m: Machine, cores: int, fewest: bool = False) -> TileShape:
    """The tile shape that fits the scratchpad with the least estimated time (fewest tiles on ties).

    ``fewest``: the one with the fewest tiles instead (least estimated time on ties).
    """
    geom = fp.g
    seg_rows = [r1 - r0 for _, r0, r1 in share.segments(geom.in_h)]
    chans = share.c1 - share.c0
    if geom.data_format == "NHWC":
        chan_options = sorted({min(chans, k * m.grain) for k in range(1, -(-chans // m.grain) + 1)})
        if not fp.fits(TileShape(1, geom.in_w, chan_options[0])):
            # Part-filled vectors only when a whole vector of channels cannot fit (very wide rows).
            chan_options = sorted({max(1, chans // 2 ** i) for i in range(12)})
    else:
        chan_options = sorted({max(1, -(-chans // 2 ** i)) for i in range(12)})
    best: tuple[tuple[float, float], TileShape] | None = None
    cols = geom.in_w
    while best is None:
        for ct in chan_options:
            if not fp.fits(TileShape(1, cols, ct)):
                continue
            lo, hi = 1, max(seg_rows)  # the most rows that fit
            while lo < hi:
                mid = (lo + hi + 1) // 2
                lo, hi = (mid, hi) if fp.fits(TileShape(mid, cols, ct)) else (lo, mid - 1)
            for rows in _row_options(lo, seg_rows):
                shape = TileShape(rows, cols, ct)
                cycles, tiles = fp.cycles(shape, seg_rows, chans, m, cores)
                score: tuple[float, float] = (tiles, cycles) if fewest else (cycles, tiles)
                if best is None or score < best[0]:
                    best = (score, shape)
        if best is None:
            if cols == 1:
                raise LayoutError(f"a tile of one input element per channel does not fit the "
                                  f"{fp.scratch_bytes}-byte scratchpad (filter {geom.filter_h}x{geom.filter_w}, "
                                  f"multiplier {fp.mult}, two slots and two filter slices)")
            cols = -(-cols // 2)
    return best[1]


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


# --- the kernel ------------------------------------------------------------------------------------

class DepthwiseConv2dBackpropInput:
    """The registry entry of depthwise_conv2d_backprop_input."""

    name = "depthwise_conv2d_backprop_input"
    #: What an hp_ call stores in fp16 and how it computes.
    tensors_in_precision = ("filter", "out_backprop", "output")
    fp32_tensors = ()
    fp16_arithmetic = ("computed in fp32 at the chip's fp32 vector rate: filter and out_backprop are widened as they "
                       "are loaded, each output block accumulates in an fp32 buffer and is rounded to fp16 once, as "
                       "it is stored (no cycles are charged for the conversions)")
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
        a = check_args(symbol, self.args, args)
        ptrs = {n: require_address(n, a[n]) for n in ("filter", "out_backprop", "output")}
        input_sizes = require_ints("input_sizes", a["input_sizes"], 4, minimum=1)
        filter_shape = require_ints("filter_shape", a["filter_shape"], 4, minimum=1)
        geom = conv_geometry(input_sizes, (filter_shape[0], filter_shape[1]), strides=a["strides"],
                             padding=a["padding"], explicit_paddings=a["explicit_paddings"],
                             data_format=a["data_format"], dilations=a["dilations"], filter_name="filter_shape",
                             input_name="input_sizes")
        if filter_shape[2] != geom.in_c:
            raise KernelArgError(f"argument 'filter_shape': filter_shape[2] (in_c) is {filter_shape[2]} but "
                                 f"input_sizes has {geom.in_c} channels ({geom.data_format}); they must be equal")
        mult = filter_shape[3]
        dt = PRECISION_DTYPES[precision]
        shapes = {"filter": filter_shape, "out_backprop": geom.tensor_shape(geom.in_c * mult, "out"),
                  "output": geom.tensor_shape(geom.in_c)}
        for name, shape in shapes.items():
            if int(np.prod(shape, dtype=object)) * dt.itemsize > MAX_BUFFER_BYTES:
                what = {"filter": "filter_shape", "out_backprop": "input_sizes", "output": "input_sizes"}[name]
                raise KernelArgError(f"argument '{what}': {name} of shape {list(shape)} exceeds any chip's "
                                     f"memory ({MAX_BUFFER_BYTES} bytes)")
        buffers = (Buffer("filter", ptrs["filter"], tuple(shapes["filter"]), dt, "input"),
                   Buffer("out_backprop", ptrs["out_backprop"], tuple(shapes["out_backprop"]), dt, "input"),
                   Buffer("output", ptrs["output"], tuple(shapes["output"]), dt, "output"))
        return BoundCall(symbol, precision, variant, cores, buffers, {"geom": geom, "multiplier": mult})

    # -- planning ---------------------------------------------------------------------------------

    @staticmethod
    def _compute_precision() -> str:
        # Both symbol precisions accumulate in fp32 lanes.
        return "fp32"

    def plan(self, call: BoundCall, ctx: PlanContext) -> Plan:
        """Per core: its rows (and channels) cut into halo-loading tiles, alternating two scratch slots.

        The split and the tile shape are the caller's ``ctx.tiling`` where it names them, else the estimate's.
        """
        geom: ConvGeometry = call.attrs["geom"]
        machine = machine_of(ctx, call.buffer("out_backprop").addr, self._compute_precision(),
                             call.buffer("out_backprop").dtype.itemsize)
        dt = call.buffer("output").dtype
        tiling = tiling_keys(ctx, TILING_KEYS)
        parts = int_key(tiling, "channel_parts", 1, min(len(call.cores), channel_units(geom, machine)))
        sizes = {k: int_key(tiling, k, 1, hi) for k, hi in (("tile_rows", geom.in_h), ("tile_cols", geom.in_w),
                                                             ("tile_channels", geom.in_c))}
        shares = core_shares(geom, call.attrs["multiplier"], dt.itemsize, len(call.cores), machine, parts)
        tiles: dict[int, tuple[Tile, ...]] = {}
        for core, share in zip(call.cores, shares):
            tiles[core] = tuple(self._core_tiles(call, ctx, share, machine, len(shares), sizes))
        return Plan(cores=call.cores, phases=(Phase(self.name, tiles, barrier_after=False),),
                    precision=call.precision)

    def tilings(self, call: BoundCall, ctx: PlanContext) -> list[dict[str, Any]]:
        """Candidates: the estimate's split with its tile and with the fewest tiles; rows only; channels only.

        Row cuts re-read halo rows, channel cuts (whole vectors in NHWC) may leave
        cores idle or lanes empty; few large tiles spend fewer DMA setups, the
        estimate's may keep the unhidden first load and last store short.
        """
        geom: ConvGeometry = call.attrs["geom"]
        machine = machine_of(ctx, call.buffer("out_backprop").addr, self._compute_precision(),
                             call.buffer("out_backprop").dtype.itemsize)
        dt = call.buffer("output").dtype
        mult, n = call.attrs["multiplier"], len(call.cores)
        fp = Footprint(geom, mult, dt.itemsize, dt != F32, ctx.scratch_size_bytes, ctx.alignment_bytes)
        best = best_channel_parts(geom, mult, dt.itemsize, n, machine)
        out = []
        for parts, fewest in ((best, False), (best, True), (1, False), (min(n, channel_units(geom, machine)), False)):
            shares = core_shares(geom, mult, dt.itemsize, n, machine, parts)
            try:
                shape = choose_tile(fp, shares[0], machine, len(shares), fewest)
            except LayoutError:
                return []  # nothing fits: planning says why
            out.append({"channel_parts": parts, "tile_rows": shape.rows, "tile_cols": shape.cols,
                        "tile_channels": shape.chans})
        return unique(out)

    def _core_tiles(self, call: BoundCall, ctx: PlanContext, share: Share, machine: Machine,
                    busy_cores: int, sizes: Mapping[str, int | None]) -> list[Tile]:
        """Per channel block, its tiles row by row; the block's first tile also loads its filter slice."""
        geom: ConvGeometry = call.attrs["geom"]
        mult = call.attrs["multiplier"]
        dt = call.buffer("output").dtype
        fp = Footprint(geom, mult, dt.itemsize, dt != F32, ctx.scratch_size_bytes, ctx.alignment_bytes)
        shape = self._tile_shape(call, fp, share, machine, busy_cores, sizes)
        f_bytes, slot_bytes = fp.filter_bytes(shape.chans), fp.slot_bytes(shape.chans)
        slot_base = ctx.scratch_base + 2 * f_bytes
        filt = call.buffer("filter")
        col_blocks = [axis_taps(w0, min(w0 + shape.cols, geom.in_w), geom.out_w, geom.filter_w, geom.stride_w,
                                geom.dilation_w, geom.pad_left) for w0 in range(0, geom.in_w, shape.cols)]
        out: list[Tile] = []
        for k, c0 in enumerate(range(share.c0, share.c1, shape.chans)):
            c1 = min(c0 + shape.chans, share.c1)
            # Two filter areas, alternating by block: block k+1's slice loads (with its first tile, while
            # block k's last tile computes) into the area block k-1 used.
            o_f = Operand(ctx.scratch_base + (k % 2) * f_bytes, (geom.filter_h, geom.filter_w, c1 - c0, mult), dt)
            filter_load: tuple[Transfer, ...] = (operand_in(o_f, filt.addr, filt.shape, (0, 0, c0, 0)),)
            for n, r0, r1 in share.segments(geom.in_h):
                for h0 in range(r0, r1, shape.rows):
                    rows = axis_taps(h0, min(h0 + shape.rows, r1), geom.out_h, geom.filter_h, geom.stride_h,
                                     geom.dilation_h, geom.pad_top)
                    for cols in col_blocks:
                        slot = len(out) % 2
                        arena = Arena(slot_base + slot * slot_bytes, slot_bytes, ctx.alignment_bytes)
                        out.append(self._tile(call, arena, len(out), slot, n, rows, cols, c0, o_f, filter_load,
                                              machine.lanes, machine.parts(busy_cores)))
                        filter_load = ()
        return out

    @staticmethod
    def _tile_shape(call: BoundCall, fp: Footprint, share: Share, machine: Machine, busy_cores: int,
                    sizes: Mapping[str, int | None]) -> TileShape:
        """The estimate's tile shape, with the sizes a caller's tiling names put in (clipped to the share)."""
        if all(v is None for v in sizes.values()):
            return choose_tile(fp, share, machine, busy_cores)
        seg = max(r1 - r0 for _, r0, r1 in share.segments(fp.g.in_h))
        asked = [sizes["tile_rows"], sizes["tile_cols"], sizes["tile_channels"]]
        own = choose_tile(fp, share, machine, busy_cores) if None in asked else None
        rows, cols, chans = (v if v is not None else getattr(own, k) for v, k in zip(asked, ("rows", "cols", "chans")))
        shape = TileShape(min(rows, seg), cols, min(chans, share.c1 - share.c0))
        if not fp.fits(shape):
            raise LayoutError(f"{call.symbol}: tiling tile_rows={shape.rows}, tile_cols={shape.cols}, "
                              f"tile_channels={shape.chans} does not fit the {fp.scratch_bytes}-byte scratchpad "
                              f"(two slots of output block and out_backprop halo beside two filter slices)")
        return shape

    def _tile(self, call: BoundCall, arena: Arena, tile_id: int, slot: int, n: int, rows: AxisTaps,
              cols: AxisTaps, c0: int, o_f: Operand, filter_load: tuple[Transfer, ...], lanes: int,
              parts: int) -> Tile:
        """One tile: load the out_backprop halo (and ``filter_load``), accumulate every tap, store the block."""
        geom: ConvGeometry = call.attrs["geom"]
        mult = call.attrs["multiplier"]
        b = {buf.name: buf for buf in call.buffers}
        dt = b["output"].dtype
        ct = o_f.shape[2]
        nchw = geom.data_format == "NCHW"

        def order(nn: int, h: int, w: int, c: int) -> tuple[int, int, int, int]:
            return (nn, c, h, w) if nchw else (nn, h, w, c)

        o_out = arena.operand(order(1, rows.hi - rows.lo, cols.hi - cols.lo, ct), dt)
        stores = split_transfers(o_out, b["output"], order(n, rows.lo, cols.lo, c0), parts, inbound=False)
        if not rows.taps or not cols.taps:
            compute = Compute(_zero_fn(o_out.shape, dt), (), (o_out,), flops=0, reductions=0,
                              precision=self._compute_precision())
            return Tile(tile_id, filter_load, compute, stores, slot=slot)
        o_dy = arena.operand(order(1, rows.o_n, cols.o_n, ct * mult), dt)
        if dt != F32:
            arena.alloc(o_out.size_bytes * F32.itemsize // dt.itemsize)  # where the fp32 accumulator lives
        loads = filter_load + split_transfers(o_dy, b["out_backprop"], order(n, rows.o_lo, cols.o_lo, c0 * mult),
                                              parts, inbound=True)
        ops = self._flops(rows, cols, ct, mult, lanes, nchw)
        math = 2 * mult * ct * rows.pairs * cols.pairs  # a multiply-add per (tap, output position) pair
        compute = Compute(_tile_fn(rows, cols, geom, ct, dt), (o_f, o_dy), (o_out,), flops=math, reductions=0,
                          precision=self._compute_precision(), extra_ops=ops - math)
        return Tile(tile_id, loads, compute, stores, slot=slot)

    @staticmethod
    def _flops(rows: AxisTaps, cols: AxisTaps, ct: int, mult: int, lanes: int, nchw: bool) -> int:
        """Multiply-adds (2 flops each) the tile's vector loops issue, lanes padded to whole vectors.

        NHWC vectors run along channels; NCHW vectors along an output row of one tap.
        """
        if nchw:
            return 2 * mult * ct * rows.pairs * sum(padded_lanes(t[2], lanes) for t in cols.taps)
        return 2 * mult * padded_lanes(ct, lanes) * rows.pairs * cols.pairs


KERNEL = DepthwiseConv2dBackpropInput()
