"""Conv2DBackpropFilter: ``{fp,hp}_conv2d_backprop_filter_{s,p}``, the gradient of a 2-D convolution wrt its filter.

With ``input`` x (``input_shape``, data_format order) and ``out_backprop`` dy (shape
from the geometry: [batch, out_h, out_w, out_c] in data_format order), the output
``output`` dW [fh, fw, in_c, out_c] is, as TensorFlow defines it::

    dW[kh, kw, c, o] = Σ_{n, i, j} x[n, i·sh + kh·dh − pad_top, j·sw + kw·dw − pad_left, c] · dy[n, i, j, o]

with x read as zero outside the input (SAME / VALID / EXPLICIT padding, see
:mod:`kernels.common.geometry`).  Dilations > 1 are computed (TensorFlow's CPU kernel
refuses them).  Grouped convolution is out of scope: ``filter_sizes[2]`` must equal
the input's channels.  ``out_backprop_shape`` (optional) states the shape the caller
believes dy has; it must equal the computed one, as TensorFlow checks its tensor.

Plan.  The work is the sum over (image, output row); the accumulator dW block
[fh, fw, icg, ocg] (fp32) stays in the core's scratchpad while tiles of output
rows stream through the two slots (input rows with their halo for the dilated,
strided window; padding handled inside the compute).  Two ways to use the cores
(the ``split`` key; the simulator's search chooses between them):

* **spatial**: the (image, row) space is split over the cores; each core
  accumulates a partial dW, writes it to the shared staging level, barrier, then
  each core reduces a slice of rows of dW from all partials and stores it (in
  rounds when the partials exceed the level's window);
* **filter**: filter slices (out_c, and in_c when needed) are split over the
  cores; each core sweeps the whole input for its slices, no exchange.

Precision: ``fp_`` symbols store and compute in fp32.  ``hp_`` symbols store input, out_backprop and output
in fp16, multiply in fp16 and accumulate dW in fp32 (``fp16_fp32acc``, the rate the target gives fp16 products
accumulated in fp32, where it lists it: MT7004 does, at its fp16 lanes; a chip without it converts the fp16
blocks to fp32 first, in a loop of its own), and round dW to fp16 once, as it is stored.

The inner loops (what the timing model prices, :mod:`kernels.common.loops`).  The work of a row tile is a GEMM
over the reduction: dW[(tap, ic), oc] += Σ_k A[k, (tap, ic)] · dy[k, oc] over the tile's positions k, with
dW's columns (out_c) along the vector lanes, dy's rows loaded as vectors and A's elements broadcast.  A lives
in AM (the staged input window), not in SM where scalar loads read, so each k-step loads its A elements as a
vector and moves them to the scalar side (:func:`~kernels.common.loops.gemm_micro_kernel_from_am`).  Two
ways to lay A out (the ``a_operand`` key): ``window`` reads the window itself tap by tap (no gather; the
micro-kernel's rows stay within one tap's channels, over every position, the window's zero border stored
per tile), ``im2col`` first gathers each position's fh·fw·icg patch into an im2col row (vector loads, permutes
for runs that do not start on a vector, stores: :func:`~kernels.common.loops.gather_rows`) and then blocks
any rows.  Few input channels (3 in an RGB stem) leave the window's micro-kernel without enough accumulators
to cover the FMAC latency, so the gather pays; 64 channels need none.  The micro-kernel's m_micro x n_micro
block (register blocking: m_micro·ceil(n_micro/lanes) fp32 accumulators beside the B row, A vector and
broadcasts, within the core's vector registers) and the layout are keys of scope ``compute``: per tile shape,
the plan context's ``cheapest_loops`` (the cost model) picks among them unless the caller fixes them.
NCHW blocks are transposed to channels-last first (a butterfly of log2(lanes) permutes per vector); the drain's
cast and the partial sums' reduction are loops of their own.

Tiling (``tiling=`` of a call or run-config, all keys optional): ``split``
(spatial or filter), ``in_c_slice`` and ``out_c_slice`` (the filter slice each
accumulator holds), ``a_operand`` (window or im2col), ``m_micro`` and ``n_micro``
(the micro-kernel's block of dW).  :meth:`Conv2DBackpropFilter.tiling_space`
declares them; the simulator's search completes the keys a caller leaves out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from kernels.base import PlanContext
from kernels.common import loops as lp
from kernels.common.args import require_ints
from kernels.common.binding import attrs_of, bind_arguments, bound_call
from kernels.common.exchange import Exchange
from kernels.common.geometry import ConvGeometry, axis_taps, conv_geometry, window_bound
from kernels.common.scratch import Scratch, align_up, aligned_bytes, fits
from kernels.common.streams import CoreStream, phase_of, plan_of
from kernels.common.tiling_space import (
    ChoiceKey,
    IntKey,
    TilingSpace,
    complete,
    largest,
    padded_lanes,
    pipeline_tile,
    split_even,
)
from kernels.common.transfers import block_in, block_out
from sim.errors import KernelArgError
from sim.model.call import ArgSpec, BoundCall, MemoryReader
from sim.model.plan import Compute, DoesNotFit, Loop, Operand, Phase, Plan, TileFn, Transfer

F32 = np.dtype(np.float32)
#: The precision of the fp32 accumulator's own loops (the drain's cast, the reduction of partials).
COMPUTE_PRECISION = "fp32"
#: The two ways to use the cores (the ``split`` key of a tiling).
SPLITS = ("spatial", "filter")
#: Where the micro-kernel reads A (the ``a_operand`` key): ``window``, the staged input window tap by tap (A's
#: rows are the window's positions: no gather, m_micro within a tap's channels); ``im2col``, im2col rows
#: gathered per tile (loads and stores), then any m_micro up to fh·fw·in_c.
A_OPERANDS = ("window", "im2col")
#: Most n_micro vectors and m_micro rows the kernel's own choice tries.
MICRO_N_VECTORS = 4
MICRO_M_ROWS = 32
#: Row tiles shorter than this (positions) make the kernel also price halved out_c slices, at most this often.
LONG_TILE_POSITIONS = 256
MORE_OUT_C_CUTS = 2


# --- numerics ----------------------------------------------------------------------------------

def filter_grad_block(x: np.ndarray, dy: np.ndarray, geo: ConvGeometry, fh: int, fw: int,
                      rows: tuple[int, int], nchw: bool) -> np.ndarray:
    """dW contribution [fh, fw, icg, ocg] (fp32) of output rows ``rows`` of a block of images.

    ``x`` holds the input rows the window of those output rows touches, clipped to the
    input ([nb, h, w, icg], or [nb, icg, h, w] when ``nchw``; h may be 0), ``dy`` the
    output rows ([nb, rows, out_w, ocg] or [nb, ocg, rows, out_w]).  Rows and columns
    outside the input read as zero (the padding).  The im2col matrix is filled tap by tap
    from the input itself: the padded window is never built, so its size (a large
    dilation or padding) costs no memory.
    """
    r0, r1 = rows
    nrows = r1 - r0
    xf = x.transpose(0, 2, 3, 1) if nchw else x
    dyf = dy.transpose(0, 2, 3, 1) if nchw else dy
    nb, hl, wl, icg = xf.shape
    ocg = dyf.shape[3]
    # Window positions (relative to the first output row's window) of the loaded input: x starts at input
    # row max(top, 0) and input column 0, which sits pad_left into the window.
    top = r0 * geo.stride_h - geo.pad_top
    rows_in = axis_taps(0, hl, nrows, fh, geo.stride_h, geo.dilation_h, max(top, 0) - top)
    cols_in = axis_taps(0, wl, geo.out_w, fw, geo.stride_w, geo.dilation_w, geo.pad_left)
    cols = np.zeros((nb, nrows, geo.out_w, fh, fw, icg), F32)
    sh, sw = geo.stride_h, geo.stride_w
    for kh, oh, nh, ih in rows_in.taps:
        oh += rows_in.o_lo
        for kw, ow, nw, iw in cols_in.taps:
            ow += cols_in.o_lo
            taps = xf[:, ih:ih + (nh - 1) * sh + 1:sh, iw:iw + (nw - 1) * sw + 1:sw]
            cols[:, oh:oh + nh, ow:ow + nw, kh, kw, :] = taps
    positions = nb * nrows * geo.out_w
    dmat = np.ascontiguousarray(dyf, dtype=F32).reshape(positions, ocg)
    return (cols.reshape(positions, fh * fw * icg).T @ dmat).reshape(fh, fw, icg, ocg)


def conv2d_backprop_filter_reference(x: np.ndarray, dy: np.ndarray, geo: ConvGeometry, fh: int,
                                     fw: int) -> np.ndarray:
    """dW [fh, fw, in_c, out_c] of whole tensors in the call's data_format, fp32 accumulation (dtype of x)."""
    nchw = geo.data_format == "NCHW"
    return filter_grad_block(x, dy, geo, fh, fw, (0, geo.out_h), nchw).astype(x.dtype)


def row_tile(geo: ConvGeometry, fh: int, fw: int, rows: tuple[int, int], nchw: bool, has_x: bool, first: bool,
             x_shape: tuple[int, ...], *operands: np.ndarray) -> tuple[np.ndarray]:
    """The compute of one row tile (a :class:`TileFn` of its block): the block's contribution, added to the
    accumulator unless first."""
    ops = list(operands)
    # A tile whose window lies wholly in the padding loads no input: its x is an empty block.
    x = ops.pop(0) if has_x else np.zeros(x_shape, F32)
    dy = ops.pop(0)
    part = filter_grad_block(x, dy, geo, fh, fw, rows, nchw)
    return (part if first else np.add(ops[0], part, out=part),)


def cast_to(dtype: np.dtype, acc: np.ndarray) -> tuple[np.ndarray]:
    """The compute of a drain tile: the fp32 accumulator rows, cast to the output dtype."""
    return (acc.astype(dtype),)


# --- binding -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class FilterGradAttrs:
    """What binding found out about a call: its geometry and the filter's sizes [fh, fw, in_c, out_c]."""

    geometry: ConvGeometry
    filter_sizes: tuple[int, ...]


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
        if p._fitting_slices(p.in_c, p.out_c) is None:
            raise DoesNotFit(p.level.name, p._needed_bytes(1, 1), p.level.size_bytes,
                             f"{call.symbol}: no tile of the convolution fits the {p.level.size_bytes}-byte "
                             f"{p.level.name} scratchpad (one output row of one channel with its input window is "
                             f"too big)")
        return p.space


# --- the tiling space --------------------------------------------------------------------------

@dataclass(frozen=True)
class _Group:
    """A filter slice: input channels [ic0, ic1) x output channels [oc0, oc1)."""

    ic0: int
    ic1: int
    oc0: int
    oc1: int

    @property
    def icg(self) -> int:
        """Input channels of the slice."""
        return self.ic1 - self.ic0

    @property
    def ocg(self) -> int:
        """Output channels of the slice."""
        return self.oc1 - self.oc0


@dataclass(frozen=True)
class _Block:
    """A row tile: images [n0, n1), output rows [r0, r1) of each."""

    n0: int
    n1: int
    r0: int
    r1: int


@dataclass(frozen=True)
class _Choice:
    """A way to plan the call: ``spatial`` or ``filter`` split, with filter slices of icg x ocg channels."""

    kind: str
    icg: int
    ocg: int

    def as_tiling(self) -> dict[str, Any]:
        """The choice as a ``tiling`` mapping."""
        return {"split": self.kind, "in_c_slice": self.icg, "out_c_slice": self.ocg}


class _Planner:
    """The candidate plans of one call: which fit, and how each is built."""

    def __init__(self, call: BoundCall, ctx: PlanContext):
        self.call, self.ctx = call, ctx
        attrs = attrs_of(call, FilterGradAttrs)
        self.geo = attrs.geometry
        self.fh, self.fw, self.in_c, self.out_c = attrs.filter_sizes
        self.taps = self.fh * self.fw
        self.x, self.dy, self.out = (call.buffer(n) for n in ("input", "out_backprop", "output"))
        self.dt = self.out.dtype
        self.isz = self.dt.itemsize
        self.core = ctx.target.core
        # hp_: fp16 products accumulated in fp32 where the chip has that rate, else converted to fp32 first.
        self.precision = lp.accumulate_precision(self.core, ctx.precision)
        self.convert = self.isz != F32.itemsize and self.precision == "fp32"
        self.op_isz = F32.itemsize if self.convert else self.isz  # bytes of an operand element as computed
        self.lanes = lp.lanes(self.core, self.precision)
        self.level = ctx.vector_level
        self.align = self.level.alignment_bytes
        # Cores with (image, row) work in the spatial split.
        self.active = ctx.cores[:min(len(ctx.cores), self.geo.batch * self.geo.out_h)]
        self.space = TilingSpace(
            ChoiceKey("split", SPLITS, "spatial: the (image, row) space over the cores, partials exchanged; "
                                       "filter: filter slices over the cores"),
            IntKey("in_c_slice", 1, self.in_c, "input channels of a filter slice", values=self._in_c_options),
            IntKey("out_c_slice", 1, self.out_c, "output channels of a filter slice", values=self._out_c_options),
            ChoiceKey("a_operand", A_OPERANDS, "where the micro-kernel reads A: window (the input window, tap by "
                                               "tap) or im2col (rows gathered per tile)", scope="compute"),
            IntKey("m_micro", 1, self.taps * self.in_c, "micro-kernel rows of dW (clipped to a tap's channels "
                                                        "with a_operand window)", scope="compute",
                   values=range(1, MICRO_M_ROWS + 1)),
            IntKey("n_micro", 1, self.out_c, "micro-kernel columns of dW (output channels)", scope="compute",
                   values=[j * self.lanes for j in range(1, MICRO_N_VECTORS + 1)]),
            fit=self._fit, tiles=self._tiles)
        self.asked = self.space.parse(ctx)
        self._micro_cache: dict[tuple[int, ...], tuple[str, int, int]] = {}

    # -- the tiling space -----------------------------------------------------------------------

    def plan(self) -> Plan:
        """The plan of the tiling (the first that fits in the space's order when the kernel is planned directly
        with a partial one)."""
        t = complete(self.space, self.ctx)
        return self.build(_Choice(t["split"], t["in_c_slice"], t["out_c_slice"]))

    def _in_c_options(self, tiling: Mapping[str, Any]) -> list[int]:
        """Input channels of a slice worth trying: the largest slices that fit (both sides shrunk together)."""
        fit = self._fitting_slices(self.in_c, self.out_c)
        return [fit[0]] if fit is not None else []

    def _out_c_options(self, tiling: Mapping[str, Any]) -> list[int]:
        """Output channels of a slice worth trying with ``tiling``'s split and in_c_slice: the largest that fit;
        with the filter split, finer cuts so that every core gets a slice (evenly, or on whole vectors) and, when
        many output channels leave short row tiles, halved slices (longer tiles, the input re-read once per
        slice: the micro-kernels load and store the accumulator once per tile)."""
        icg = tiling["in_c_slice"]
        joint = self._fitting_slices(self.in_c, self.out_c)
        ocg = joint[1] if joint is not None and joint[0] == icg else self._fitting_out_c(icg)
        if ocg is None:
            return [1]  # not one output channel fits with these input channels: the space's fit says by how much
        out = [ocg]
        if tiling["split"] != "filter":
            return out
        n = len(self.ctx.cores)
        n_ic = -(-self.in_c // icg)
        if n > 1 and n_ic * -(-self.out_c // ocg) < n:
            even = -(-self.out_c // -(-n // n_ic))
            out += [o for o in sorted({even, padded_lanes(even, self.lanes)}) if o < ocg]
        o = ocg
        for _ in range(MORE_OUT_C_CUTS):
            if o <= self.lanes or self._tile_positions(icg, o) >= LONG_TILE_POSITIONS:
                break
            o = padded_lanes(-(-o // 2), self.lanes)
            out.append(o)
        return out

    def _fitting_out_c(self, icg: int) -> int | None:
        """The largest out_c slice (halvings on whole vectors) that fits with ``icg`` input channels, or None."""
        ocg = self.out_c
        while not self._slices_fit(icg, ocg)[1]:
            if ocg == 1:
                return None
            ocg = self._shrink(ocg)
        return ocg

    def _fit(self, tiling: Mapping[str, Any]) -> None:
        """The space's ``fit``: the accumulator and a one-row tile fit the scratchpad, and with the spatial split
        each core's partial dW rows fit its share of the shared level."""
        icg, ocg = tiling["in_c_slice"], tiling["out_c_slice"]
        if not self._slices_fit(icg, ocg)[1]:
            raise DoesNotFit(self.level.name, self._needed_bytes(icg, ocg), self.level.size_bytes,
                             f"{self.call.symbol}: tiling in_c_slice={icg}, out_c_slice={ocg} does not fit the "
                             f"{self.level.size_bytes}-byte {self.level.name} scratchpad (the fp32 accumulator may "
                             f"take half of it; a one-row tile must fit one of the two slots left)")
        if not self.feasible(_Choice(tiling["split"], icg, ocg)):
            # Each core's share of the shared level (aligned) holds less than a row of its partial dW.
            level = self.ctx.shared_level
            parts = len(self.active)
            needed = parts * align_up(ocg * F32.itemsize, self.align)
            if level is None:
                raise DoesNotFit(None, needed, 0, f"{self.ctx.target.name} has no shared staging level to exchange "
                                                  f"the partial dW of {parts} cores through (the spatial split)")
            raise DoesNotFit(level.name if level is not None else None, needed,
                             level.size_bytes if level is not None else 0,
                             f"{self.call.symbol}: with the spatial split, the shared staging level cannot give "
                             f"each of {parts} cores room for one aligned row of its partial dW ({ocg} fp32 "
                             f"values): {needed} bytes needed")

    def _tiles(self, tiling: Mapping[str, Any]) -> int:
        """The space's ``tiles``: row tiles of every slice over the whole input (each at least one output row)
        plus the drain and, spatially, the exchange and the reduction (upper bounds)."""
        g = self.geo
        icg, ocg = tiling["in_c_slice"], tiling["out_c_slice"]
        slices = -(-self.in_c // icg) * -(-self.out_c // ocg)
        rows = g.batch * g.out_h
        cores = len(self.ctx.cores)
        if tiling["split"] == "spatial":
            return slices * (rows + cores * 2 * (self.taps * icg + 2))
        return slices * (rows + self.taps * icg + 2)

    def candidates(self) -> list[_Choice]:
        """The slices the space offers by default, each split (for tests and tools that list them)."""
        out = []
        for t in self.space.completions({}, 64)[0]:
            c = _Choice(t["split"], t["in_c_slice"], t["out_c_slice"])
            out.append(c)
        return out

    def _tile_positions(self, icg: int, ocg: int) -> int:
        """Positions of the longest row tile with slices of icg x ocg channels."""
        g = self.geo
        blocks = self._blocks(0, g.batch * g.out_h, icg, ocg, self._scratch(icg, ocg))
        return max((b.n1 - b.n0) * (b.r1 - b.r0) for b in blocks) * g.out_w

    def feasible(self, choice: _Choice) -> bool:
        """True unless ``choice`` is a spatial split whose cores cannot each put one row of their partial dW in
        their share of the shared staging level."""
        if choice.kind == "filter" or len(self.active) == 1:
            return True
        return Exchange.share_bytes(self.ctx, len(self.active), self.align) >= choice.ocg * F32.itemsize

    def build(self, choice: _Choice) -> Plan:
        """The plan of ``choice``."""
        if choice.kind == "spatial":
            return self._spatial_plan(choice.icg, choice.ocg)
        return self._filter_plan(choice.icg, choice.ocg)

    # -- what fits the scratchpad: the fp32 accumulator of a slice, then two slots of row tiles -------

    def _acc_bytes(self, icg: int, ocg: int) -> int:
        return align_up(self.taps * icg * ocg * F32.itemsize, self.align)

    def _scratch(self, icg: int, ocg: int) -> Scratch:
        return Scratch(self.level, self._acc_bytes(icg, ocg))

    def _x_cols(self) -> int:
        """Input columns any window touches (all but those right of the last window)."""
        return max(0, self.geo.input_cols(0, self.geo.out_w)[1])

    def _tile_bytes(self, icg: int, ocg: int, nb: int, rows: int) -> list[int]:
        """Bytes of a row tile's input window and dy rows (upper bound: the window unclipped at the top)."""
        g = self.geo
        in_rows = min(window_bound(rows, g.eff_h, g.stride_h), g.in_h)
        return [nb * in_rows * self._x_cols() * icg * self.isz, nb * rows * g.out_w * ocg * self.isz]

    def _reduce_row_bytes(self, ocg: int) -> list[int]:
        """One row of a reduce tile: every core's partial row and the result row."""
        return [ocg * F32.itemsize * len(self.ctx.cores), ocg * self.isz]

    def _slices_fit(self, icg: int, ocg: int) -> tuple[bool, bool]:
        """(accumulator fits half the scratchpad, that and a one-row tile and a reduce row fit a slot)."""
        if self._acc_bytes(icg, ocg) > self.level.size_bytes // 2:
            return False, False
        slot = Scratch.slot_bytes_for(self.level, self._acc_bytes(icg, ocg))
        return True, (fits(self._tile_bytes(icg, ocg, 1, 1), slot, self.align)
                      and fits(self._reduce_row_bytes(ocg), slot, self.align))

    def _needed_bytes(self, icg: int, ocg: int) -> int:
        """Bytes of the scratchpad slices of icg x ocg channels need: the accumulator (at most half of it) and two
        slots of a one-row tile or reduce row, whichever is larger."""
        row = max(aligned_bytes(self._tile_bytes(icg, ocg, 1, 1), self.align),
                  aligned_bytes(self._reduce_row_bytes(ocg), self.align))
        acc = self._acc_bytes(icg, ocg)
        return max(2 * acc, acc + 2 * row)

    def _fitting_slices(self, icg: int, ocg: int) -> tuple[int, int] | None:
        """The largest (icg, ocg) whose accumulator takes at most half the scratchpad and a one-row tile fits."""
        while True:
            acc_ok, all_ok = self._slices_fit(icg, ocg)
            if all_ok:
                return icg, ocg
            if icg == 1 and ocg == 1:
                return None
            x_b, dy_b = self._tile_bytes(icg, ocg, 1, 1)
            if acc_ok:
                # The tile is too big: shrink the side whose block is the larger.
                shrink_ic = icg > 1 and (x_b >= dy_b or ocg == 1)
            else:
                # The accumulator is too big: cut out_c first (input blocks stay whole rows in NHWC).
                shrink_ic = ocg == 1
            if shrink_ic:
                icg = self._shrink(icg)
            else:
                ocg = self._shrink(ocg)

    def _shrink(self, n: int) -> int:
        """About half of ``n``, on whole vectors while it is more than one vector."""
        half = -(-n // 2)
        return max(1, half // self.lanes * self.lanes if half > self.lanes else half)

    def _groups(self, icg: int, ocg: int) -> list[_Group]:
        return [_Group(i, min(i + icg, self.in_c), o, min(o + ocg, self.out_c))
                for i in range(0, self.in_c, icg) for o in range(0, self.out_c, ocg)]

    # -- row tiles ------------------------------------------------------------------------------

    def _blocks(self, start: int, stop: int, icg: int, ocg: int, sc: Scratch) -> list[_Block]:
        """Row tiles covering flattened (image, output row) indices [start, stop), each fitting a slot.

        Tiles take at most 1/MIN_TILES_PER_CORE of the range when they can, so the DMA of
        the next tile has a tile's compute to hide behind (pipeline depth).
        """
        g = self.geo
        cap = pipeline_tile(stop - start)
        rows_max = min(largest(g.out_h, lambda r: fits(self._tile_bytes(icg, ocg, 1, r), sc.slot_bytes, self.align),
                               lo=1), cap)
        images_max = 1
        if rows_max >= g.out_h:
            images_max = largest(g.batch, lambda k: k * g.out_h <= cap and fits(
                self._tile_bytes(icg, ocg, k, g.out_h), sc.slot_bytes, self.align), lo=1)
        out: list[_Block] = []
        pos = start
        while pos < stop:
            n, r = divmod(pos, g.out_h)
            if r == 0 and stop - pos >= g.out_h and rows_max >= g.out_h:
                k = min(images_max, (stop - pos) // g.out_h)
                out.append(_Block(n, n + k, 0, g.out_h))
                pos += k * g.out_h
                continue
            seg = min(g.out_h - r, stop - pos)
            # Even tiles over the segment: the pipeline's steps stay alike.
            for a, b in split_even(seg, -(-seg // rows_max)):
                out.append(_Block(n, n + 1, r + a, r + b))
            pos += seg
        return out

    # -- the tile's inner loops ------------------------------------------------------------------

    def _layout_loops(self, blk: _Block, grp: _Group) -> list[Loop]:
        """NCHW blocks transposed to channels-last (a butterfly: log2(lanes) permutes per vector) and fp16 blocks
        widened to fp32 when the chip computes them in fp32: a load, the permutes or conversion and the stores
        per vector of each staged block."""
        g = self.geo
        if not (g.nchw or self.convert):
            return []
        nb, rows = blk.n1 - blk.n0, blk.r1 - blk.r0
        h0, h1 = g.input_rows(blk.r0, blk.r1)
        staged = (("input", nb * max(h1 - h0, 0) * self._x_cols() * grp.icg), ("out_backprop",
                                                                                 nb * rows * g.out_w * grp.ocg))
        storage = self.ctx.precision
        shuffles = (lp.lanes(self.core, storage).bit_length() - 1 if g.nchw else 0) + int(self.convert)
        what = " and ".join(w for w, on in (("to channels-last", g.nchw), ("to fp32", self.convert)) if on)
        return [lp.elementwise(self.core, storage, n, loads=1, stores=2 if self.convert else 1, valu=shuffles,
                               label=f"{name} {what}") for name, n in staged if n]

    def _padding_loop(self, blk: _Block, grp: _Group) -> list[Loop]:
        """The zero border of the input window (the micro-kernel reads its taps over every position): vector
        stores of zeros where the window lies outside the input."""
        g = self.geo
        nb, rows = blk.n1 - blk.n0, blk.r1 - blk.r0
        h0, h1 = g.input_rows(blk.r0, blk.r1)
        window = window_bound(rows, g.eff_h, g.stride_h) * window_bound(g.out_w, g.eff_w, g.stride_w)
        border = nb * max(window - max(h1 - h0, 0) * self._x_cols(), 0) * grp.icg
        if not border:
            return []
        stored = "fp32" if self.op_isz == F32.itemsize else self.ctx.precision
        return [lp.elementwise(self.core, stored, border, loads=0, stores=1, label="zero border of the input window")]

    def _gather_loop(self, positions: int, grp: _Group) -> Loop:
        """The im2col gather: per position and filter row, the window's fw·icg elements (one run, or fw runs of
        icg when dilated) loaded and stored into the position's im2col row; runs that do not start on a vector
        boundary straddle one vector more on each side and need a two-source permute per vector stored."""
        g = self.geo
        per_vector = self.core.vector_width_bytes // self.op_isz
        run = g.filter_w * grp.icg
        loads = -(-run // per_vector) if g.dilation_w == 1 else g.filter_w * -(-grp.icg // per_vector)
        stores = -(-run // per_vector)
        shuffles = 0
        if grp.icg % per_vector:
            loads, stores = loads + 1, stores + 1
            shuffles = stores
        return lp.gather_rows(self.core, positions * g.filter_h, load_vectors=loads, store_vectors=stores,
                              shuffles=shuffles, label=f"im2col gather {g.filter_h}x{g.filter_w}x{grp.icg}")

    def _micro_loops(self, positions: int, grp: _Group, first: bool, micro: tuple[str, int, int]) -> list[Loop]:
        """The GEMM micro-kernels of a tile: dW's rows (tap, channel) in blocks of m_micro, its columns in blocks
        of n_micro, each over the tile's positions (k).  With the window, a block stays within one tap's
        channels; with im2col rows it may span taps."""
        mode, m_r, n_r = micro
        rows, per = (self.taps * grp.icg, 1) if mode == "im2col" else (grp.icg, self.taps)
        out = []
        for m, m_count in _blocks_of(rows, m_r):
            for n, n_count in _blocks_of(grp.ocg, n_r):
                out.append(lp.gemm_micro_kernel_from_am(self.core, self.precision, m, n, positions,
                                                         itemsize=self.op_isz, entries=per * m_count * n_count,
                                                         load_c=not first))
        return out

    def _tile_loops(self, blk: _Block, grp: _Group, first: bool, micro: tuple[str, int, int]) -> tuple[Loop, ...]:
        """Every loop of a row tile: layout changes, then the window's zero border or the im2col gather, then
        the micro-kernels."""
        positions = (blk.n1 - blk.n0) * (blk.r1 - blk.r0) * self.geo.out_w
        loops = self._layout_loops(blk, grp)
        loops += [self._gather_loop(positions, grp)] if micro[0] == "im2col" else self._padding_loop(blk, grp)
        return tuple(loops + self._micro_loops(positions, grp, first, micro))

    def _micro_fits(self, m_r: int, n_r: int) -> bool:
        """True when an m_r x n_r micro-kernel's live vectors fit the core's register file."""
        loop = lp.gemm_micro_kernel_from_am(self.core, self.precision, m_r, n_r, 1, itemsize=self.op_isz)
        return loop.vector_registers <= self.core.vector_registers

    def _micro(self, blk: _Block, grp: _Group, first: bool) -> tuple[str, int, int]:
        """(a_operand, m_micro, n_micro) of a row tile: the caller's where given (clipped to the tile); the rest
        the cost model's pick (``PlanContext.cheapest_loops``: the option whose loops cost the tile the fewest
        cycles) among the micro-kernels that fit the vector registers: every m_micro up to MICRO_M_ROWS rows
        (within a tap's channels with the window), n_micro of 1 to MICRO_N_VECTORS vectors."""
        a = self.asked
        positions = (blk.n1 - blk.n0) * (blk.r1 - blk.r0) * self.geo.out_w
        # Tiles alike in these price their options alike (the border only adds a loop to the window's).
        key = (positions, grp.icg, grp.ocg, int(first), int(bool(self._padding_loop(blk, grp))))
        if key in self._micro_cache:
            return self._micro_cache[key]
        modes = [a["a_operand"]] if a["a_operand"] else list(A_OPERANDS)
        n_opts = [min(a["n_micro"], grp.ocg)] if a["n_micro"] else sorted(
            {min(grp.ocg, j * self.lanes) for j in range(1, MICRO_N_VECTORS + 1)})
        options: list[tuple[tuple[str, int, int], tuple[Loop, ...]]] = []
        for mode in modes:
            limit = grp.icg if mode == "window" else self.taps * grp.icg
            m_opts = [min(a["m_micro"], limit)] if a["m_micro"] else range(1, min(limit, MICRO_M_ROWS) + 1)
            for n_r in n_opts:
                for m_r in m_opts:
                    if not self._micro_fits(m_r, n_r):
                        if a["m_micro"] or a["n_micro"]:
                            raise KernelArgError(
                                f"argument 'tiling.m_micro': a {m_r} x {n_r} micro-kernel needs more than the "
                                f"core's {self.core.vector_registers} vector registers (accumulators, B row, A "
                                f"vector and broadcasts)")
                        continue
                    micro = (mode, m_r, n_r)
                    options.append((micro, self._tile_loops(blk, grp, first, micro)))
        assert options  # a 1 x lanes micro-kernel always fits
        self._micro_cache[key] = self.ctx.cheapest_loops(options)
        return self._micro_cache[key]

    def _row_tile(self, stream: CoreStream, blk: _Block, grp: _Group, sc: Scratch, first: bool) -> None:
        """DMA the block's input window and dy rows, accumulate its contribution into the accumulator."""
        g = self.geo
        arena = sc.slot(stream.slot)
        acc = Operand(sc.fixed_base, (self.fh, self.fw, grp.icg, grp.ocg), F32)
        nb, rows = blk.n1 - blk.n0, blk.r1 - blk.r0
        h0, h1 = g.input_rows(blk.r0, blk.r1)
        cols = self._x_cols()
        hl = max(h1 - h0, 0) if cols else 0
        x_shape = g.order(nb, hl, cols, grp.icg)
        loads, inputs = [], []
        if hl:
            ox = arena.operand(x_shape, self.dt)
            loads.append(block_in(self.x.addr, self.x.shape, self.isz, g.order(blk.n0, h0, 0, grp.ic0), x_shape,
                                  ox.addr))
            inputs.append(ox)
        dy_shape = g.order(nb, rows, g.out_w, grp.ocg)
        ody = arena.operand(dy_shape, self.dt)
        loads.append(block_in(self.dy.addr, self.dy.shape, self.isz, g.order(blk.n0, blk.r0, 0, grp.oc0), dy_shape,
                              ody.addr))
        inputs.append(ody)
        if not first:
            inputs.append(acc)
        fn = TileFn(row_tile, (g, self.fh, self.fw, (blk.r0, blk.r1), g.nchw, bool(hl), first, x_shape))
        # The math: a multiply-add per tap, position and (in, out) channel pair; the loops say what it costs.
        math = 2 * self.taps * nb * rows * g.out_w * grp.icg * grp.ocg
        loops = self._tile_loops(blk, grp, first, self._micro(blk, grp, first))
        stream.add(loads, Compute(fn, tuple(inputs), (acc,), flops=math, precision=self.precision,
                                  loops=loops), ())

    def _accumulate(self, stream: CoreStream, blocks: Sequence[_Block], grp: _Group, sc: Scratch) -> None:
        for i, blk in enumerate(blocks):
            self._row_tile(stream, blk, grp, sc, first=(i == 0))

    # -- output stores --------------------------------------------------------------------------

    def _rows_out(self, src: int, m0: int, m1: int, grp: _Group) -> list[Transfer]:
        """DMA dense rows [m0, m1) of a dW slice (row m = tap·icg + channel) to their place in ``output``."""
        out = self.out
        if grp.icg == self.in_c:
            shape2 = (self.taps * self.in_c, self.out_c)
            return [block_out(src, out.addr, shape2, self.isz, (m0, grp.oc0), (m1 - m0, grp.ocg))]
        shape3 = (self.taps, self.in_c, self.out_c)
        transfers = []
        for t in range(m0 // grp.icg, (m1 - 1) // grp.icg + 1):
            a, b = max(m0, t * grp.icg), min(m1, (t + 1) * grp.icg)
            transfers.append(block_out(src + (a - m0) * grp.ocg * self.isz, out.addr, shape3, self.isz,
                                       (t, grp.ic0 + a - t * grp.icg, grp.oc0), (1, b - a, grp.ocg)))
        return transfers

    def _rows_per_tile(self, row_bytes: Sequence[int], total: int, slot: int) -> int:
        """Most rows (<= total) whose operands of ``row_bytes`` per row each fit one slot."""
        per = max(1, min(total, slot // max(sum(row_bytes), 1)))
        return largest(per, lambda k: fits([k * b for b in row_bytes], slot, self.align), lo=1)

    def _drain(self, stream: CoreStream, grp: _Group, sc: Scratch) -> None:
        """Cast the finished accumulator into the slots (freeing it for the next slice) and store it."""
        m_rows = self.taps * grp.icg
        per = self._rows_per_tile([grp.ocg * self.isz], m_rows, sc.slot_bytes)
        for m0 in range(0, m_rows, per):
            m1 = min(m_rows, m0 + per)
            acc_rows = Operand(sc.fixed_base + m0 * grp.ocg * F32.itemsize, (m1 - m0, grp.ocg), F32)
            dst = sc.slot(stream.slot).operand((m1 - m0, grp.ocg), self.dt)
            # A cast, not math: per vector of the fp32 rows, a load, a conversion to fp16 (hp_) and a store.
            cast = lp.elementwise(self.core, COMPUTE_PRECISION, (m1 - m0) * grp.ocg, loads=1, stores=1,
                                  valu=int(self.isz != F32.itemsize), label="dW drain")
            compute = Compute(TileFn(cast_to, (self.dt,)), (acc_rows,), (dst,), flops=0,
                              precision=COMPUTE_PRECISION, loops=(cast,))
            stream.add((), compute, self._rows_out(dst.addr, m0, m1, grp))

    # -- the filter split -----------------------------------------------------------------------

    def _filter_plan(self, icg: int, ocg: int) -> Plan:
        """Filter slices over the cores; each core sweeps every image for its slices and stores them."""
        g = self.geo
        sc = self._scratch(icg, ocg)
        groups = self._groups(icg, ocg)
        blocks = self._blocks(0, g.batch * g.out_h, icg, ocg, sc)
        streams: dict[int, CoreStream] = {}
        for core, (a, b) in zip(self.ctx.cores, split_even(len(groups), len(self.ctx.cores))):
            stream = streams[core] = CoreStream()
            for grp in groups[a:b]:
                self._accumulate(stream, blocks, grp, sc)
                self._drain(stream, grp, sc)
        return plan_of(self.call, [phase_of("filter_slices", streams, barrier_after=False)])

    # -- the spatial split ----------------------------------------------------------------------

    def _spatial_plan(self, icg: int, ocg: int) -> Plan:
        """(image, row) space over the cores; partial dW exchanged through the shared level, reduced by slices."""
        g = self.geo
        sc = self._scratch(icg, ocg)
        active = self.active
        shares = split_even(g.batch * g.out_h, len(active))
        blocks = {core: self._blocks(a, b, icg, ocg, sc) for core, (a, b) in zip(active, shares)}
        phases: list[Phase] = []
        next_id = dict.fromkeys(self.ctx.cores, 0)

        def streams() -> dict[int, CoreStream]:
            return {c: CoreStream(next_id[c]) for c in active}

        def phase(name: str, of: dict[int, CoreStream], barrier: bool = True) -> None:
            next_id.update({c: s.next_id for c, s in of.items()})
            phases.append(phase_of(name, of, barrier))

        for gi, grp in enumerate(self._groups(icg, ocg)):
            accumulating = streams()
            for core in active:
                self._accumulate(accumulating[core], blocks[core], grp, sc)
            if len(active) == 1:
                self._drain(accumulating[active[0]], grp, sc)
                phase(f"slice{gi}:accumulate", accumulating, barrier=False)
                continue
            ex, rounds = self._exchange(grp)
            row_bytes = grp.ocg * F32.itemsize
            for ri, (ma, mb) in enumerate(rounds):
                # Each core stores rows [ma, mb) of its partial (contiguous in the accumulator) to its share.
                storing = accumulating if ri == 0 else streams()
                for j, core in enumerate(active):
                    storing[core].add((), None, (ex.store(j, sc.fixed_base + ma * row_bytes, 0, (mb - ma) * grp.ocg),))
                phase(f"slice{gi}:partials{ri}", storing)
                reducing = streams()
                self._reduce(reducing, ex, grp, sc, ma, mb)
                phase(f"slice{gi}:reduce{ri}", reducing)
        return plan_of(self.call, phases)

    def _exchange(self, grp: _Group) -> tuple[Exchange, list[tuple[int, int]]]:
        """The exchange of a slice's partials (each core's aligned share of the shared level) and the row ranges
        of dW it moves per round (every core's rows of a round must fit its share); DoesNotFit naming the shared
        level when not one row does."""
        n, row_bytes = len(self.active), grp.ocg * F32.itemsize
        stride = Exchange.share_bytes(self.ctx, n, self.align)
        rounds = Exchange.rounds(self.taps * grp.icg, stride // row_bytes)
        level = self.ctx.shared_level
        if not rounds and level is not None:
            needed = n * align_up(row_bytes, self.align)
            raise DoesNotFit(level.name, needed, level.size_bytes,
                             f"{self.call.symbol}: the {level.name} staging window ({level.size_bytes} bytes) cannot "
                             f"hold one row of each of {n} cores' partial filter gradient ({n} shares of {row_bytes} "
                             f"bytes, each aligned to {self.align}: {needed} bytes)")
        rows = max((b - a for a, b in rounds), default=1)
        return Exchange.through(self.ctx, n, rows * grp.ocg, F32, stride_bytes=stride,
                                what="partial filter gradients"), rounds

    def _reduce(self, streams: Mapping[int, CoreStream], ex: Exchange, grp: _Group, sc: Scratch, ma: int,
                mb: int) -> None:
        """Each core sums its share of rows [ma, mb) over every core's partial and stores it to ``output``."""
        n = ex.parts
        per = self._rows_per_tile([grp.ocg * F32.itemsize] * n + [grp.ocg * self.isz], mb - ma, sc.slot_bytes)
        for core, (s0, s1) in zip(self.active, split_even(mb - ma, n)):
            stream = streams[core]
            for a in range(s0, s1, per):
                b = min(s1, a + per)
                arena = sc.slot(stream.slot)
                parts = arena.operand((n, b - a, grp.ocg), F32)
                dst = arena.operand((b - a, grp.ocg), self.dt)
                stream.add((ex.gather(parts.addr, a * grp.ocg, (b - a) * grp.ocg),),
                           ex.reduce(parts, dst, COMPUTE_PRECISION), self._rows_out(dst.addr, ma + a, ma + b, grp))


def _blocks_of(total: int, size: int) -> list[tuple[int, int]]:
    """(block size, how many) covering ``total`` in blocks of ``size``: the full blocks and the remainder."""
    full, rest = divmod(total, size)
    return [(b, n) for b, n in ((size, full), (rest, 1)) if b and n]


KERNEL = Conv2DBackpropFilter()
