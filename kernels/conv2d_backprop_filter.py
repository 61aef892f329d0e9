"""Conv2DBackpropFilter: ``{fp,hp}_conv2d_backprop_filter_{s,p}``, the gradient of a 2-D convolution wrt its filter.

With ``input`` x (``input_shape``, data_format order) and ``out_backprop`` dy (shape
from the geometry: [batch, out_h, out_w, out_c] in data_format order), the output
``output`` dW [fh, fw, in_c, out_c] is, as TensorFlow defines it::

    dW[kh, kw, c, o] = Σ_{n, i, j} x[n, i·sh + kh·dh − pad_top, j·sw + kw·dw − pad_left, c] · dy[n, i, j, o]

with x read as zero outside the input (SAME / VALID / EXPLICIT padding, see
:mod:`kernels.conv_geometry`).  Dilations > 1 are computed (TensorFlow's CPU kernel
refuses them).  Grouped convolution is out of scope: ``filter_sizes[2]`` must equal
the input's channels.  ``out_backprop_shape`` (optional) states the shape the caller
believes dy has; it must equal the computed one, as TensorFlow checks its tensor.

Plan.  The work is the sum over (image, output row); the accumulator dW block
[fh, fw, icg, ocg] (fp32) stays in the core's scratchpad while tiles of output
rows stream through the two slots (input rows with their halo for the dilated,
strided window; padding handled inside the compute).  Two ways to use the cores,
whichever the target's numbers favour for the shape:

* **spatial**: the (image, row) space is split over the cores; each core
  accumulates a partial dW, writes it to the shared workspace, barrier, then each
  core reduces a slice of rows of dW from all partials and stores it (in rounds
  when the partials exceed the workspace);
* **filter**: filter slices (out_c, and in_c when needed) are split over the
  cores; each core sweeps the whole input for its slices, no exchange.

Precision: ``fp_`` symbols store and compute in fp32; ``hp_`` symbols store
input, out_backprop and output in fp16, convert each loaded block to fp32 (one
vector op per element, an extra op in the cycle count, not a flop), accumulate
dW in fp32 and round it to fp16 once, as it is stored.

When dW does not fit the scratchpad it is cut into filter slices swept one after
the other.  Compute is an im2col per tile and one matrix product, accumulated in
fp32; NCHW blocks are moved in their own layout and transposed by the compute
(priced as one vector op per element), fp16 blocks are converted likewise.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
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
    fits,
    padded_lanes,
    split_even,
)
from sim.errors import KernelArgError, LayoutError, brief
from sim.model.call import ArgSpec, BoundCall, Buffer, MemoryReader
from sim.model.memory import MemoryMap
from sim.model.plan import Compute, Operand, Phase, Plan, Tile, Transfer
from sim.model.target import Region
from sim.timing import lone_stream_bytes_per_cycle

F32 = np.dtype(np.float32)
#: Largest buffer a call may describe (bytes); beyond it no chip has the memory.
MAX_BUFFER_BYTES = 1 << 40
#: The chip accumulates in fp32 whatever the tensors' precision.
COMPUTE_PRECISION = "fp32"
#: Row tiles per core's sweep when the work allows: the double-buffered pipeline needs a few to hide DMA.
PIPELINE_TILES = 4


# --- numerics ----------------------------------------------------------------------------------

def _tap_slices(offset: int, n_out: int, stride: int, lo: int, length: int) -> tuple[slice, slice] | None:
    """(output positions, input positions) of one tap along one axis, or None when none lands on the input.

    Output position i reads window position ``offset + i·stride``; the loaded input covers window
    positions [lo, lo + length).
    """
    first = max(0, -(-(lo - offset) // stride))
    last = min(n_out - 1, (lo + length - 1 - offset) // stride)
    if length <= 0 or first > last:
        return None
    start = offset + first * stride - lo
    return slice(first, last + 1), slice(start, start + (last - first) * stride + 1, stride)


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
    h0 = max(top, 0) - top
    cols = np.zeros((nb, nrows, geo.out_w, fh, fw, icg), F32)
    for kh in range(fh):
        hs = _tap_slices(kh * geo.dilation_h, nrows, geo.stride_h, h0, hl)
        if hs is None:
            continue
        for kw in range(fw):
            ws = _tap_slices(kw * geo.dilation_w, geo.out_w, geo.stride_w, geo.pad_left, wl)
            if ws is not None:
                cols[:, hs[0], ws[0], kh, kw, :] = xf[:, hs[1], ws[1], :]
    positions = nb * nrows * geo.out_w
    dmat = np.ascontiguousarray(dyf, dtype=F32).reshape(positions, ocg)
    return (cols.reshape(positions, fh * fw * icg).T @ dmat).reshape(fh, fw, icg, ocg)


def conv2d_backprop_filter_reference(x: np.ndarray, dy: np.ndarray, geo: ConvGeometry, fh: int,
                                     fw: int) -> np.ndarray:
    """dW [fh, fw, in_c, out_c] of whole tensors in the call's data_format, fp32 accumulation (dtype of x)."""
    nchw = geo.data_format == "NCHW"
    return filter_grad_block(x, dy, geo, fh, fw, (0, geo.out_h), nchw).astype(x.dtype)


class _TileFn:
    """Compute.fn of one row tile: the block's contribution, added to the accumulator unless first."""

    def __init__(self, geo: ConvGeometry, fh: int, fw: int, rows: tuple[int, int], nchw: bool, has_x: bool,
                 first: bool, x_shape: tuple[int, ...]):
        self.geo, self.fh, self.fw, self.rows, self.nchw = geo, fh, fw, rows, nchw
        self.has_x, self.first, self.x_shape = has_x, first, x_shape

    def __call__(self, *operands: np.ndarray) -> tuple[np.ndarray]:
        ops = list(operands)
        # A tile whose window lies wholly in the padding loads no input: its x is an empty block.
        x = ops.pop(0) if self.has_x else np.zeros(self.x_shape, F32)
        dy = ops.pop(0)
        part = filter_grad_block(x, dy, self.geo, self.fh, self.fw, self.rows, self.nchw)
        return (part if self.first else np.add(ops[0], part, out=part),)


def _sum_partials(dtype: np.dtype):
    """Compute.fn of a reduce tile: Σ over the cores' partial blocks [cores, rows, ocg] in fp32, cast."""
    return lambda parts: (parts.sum(axis=0, dtype=F32).astype(dtype),)


def _cast_to(dtype: np.dtype):
    """Compute.fn of a drain tile: the fp32 accumulator rows, cast to the output dtype."""
    return lambda acc: (acc.astype(dtype),)


# --- binding -----------------------------------------------------------------------------------

def _refuse_absurd(name: str, shape: Sequence[int], itemsize: int) -> None:
    size = itemsize
    for d in shape:
        size *= d
    if size > MAX_BUFFER_BYTES:
        raise KernelArgError(f"argument '{name}': shape {list(shape)} needs {size} bytes, more than any "
                             f"chip's memory (2**40 bytes)")


class Conv2DBackpropFilter:
    """The registry entry of conv2d_backprop_filter."""

    name = "conv2d_backprop_filter"
    #: What an hp_ call stores in fp16 and how it computes.
    tensors_in_precision = ("input", "out_backprop", "output")
    fp32_tensors = ()
    fp16_arithmetic = ("computed in fp32 at the chip's fp32 vector rate: input and out_backprop blocks are converted "
                       "to fp32 in the scratchpad (one vector op per element, priced as extra vector ops, not flops), "
                       "dW accumulates in fp32 and is rounded to fp16 once, as it is stored")
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
        a = check_args(symbol, self.args, args)
        x_addr, dy_addr, out_addr = (require_address(n, a[n]) for n in ("input", "out_backprop", "output"))
        fsz = require_ints("filter_sizes", a["filter_sizes"], 4, minimum=1)
        geo = conv_geometry(a["input_shape"], (fsz[0], fsz[1]), strides=a["strides"], padding=a["padding"],
                            explicit_paddings=a["explicit_paddings"], data_format=a["data_format"],
                            dilations=a["dilations"], filter_name="filter_sizes")
        if fsz[2] != geo.in_c:
            raise KernelArgError(f"argument 'filter_sizes': in_c (filter_sizes[2] = {fsz[2]}) must equal the "
                                 f"input's channels ({geo.in_c}); grouped convolution is not supported")
        dt = PRECISION_DTYPES[precision]
        x_shape = geo.tensor_shape(geo.in_c, "in")
        dy_shape = geo.tensor_shape(fsz[3], "out")
        _refuse_absurd("input_shape", x_shape, dt.itemsize)
        _refuse_absurd("filter_sizes", fsz, dt.itemsize)
        _refuse_absurd("out_backprop", dy_shape, dt.itemsize)
        if a["out_backprop_shape"] is not None:
            given = require_ints("out_backprop_shape", a["out_backprop_shape"], 4, minimum=1)
            if given != dy_shape:
                raise KernelArgError(f"argument 'out_backprop_shape': {list(given)} does not match the shape "
                                     f"computed from input_shape, filter_sizes, strides, padding and dilations "
                                     f"({geo.data_format}): {list(dy_shape)}")
        buffers = (Buffer("input", x_addr, x_shape, dt, "input"),
                   Buffer("out_backprop", dy_addr, dy_shape, dt, "input"),
                   Buffer("output", out_addr, fsz, dt, "output"))
        return BoundCall(symbol, precision, variant, cores, buffers,
                         {"geometry": geo, "filter_sizes": fsz})

    def plan(self, call: BoundCall, ctx: PlanContext) -> Plan:
        """The tiling ``ctx.tiling`` asks for, else the cheapest by the target's numbers of those that fit."""
        p = _Planner(call, ctx)
        requested = getattr(ctx, "tiling", None)
        if requested:
            return p.build(p.requested(requested))
        costs = [(cost, i, choice) for i, choice in enumerate(p.candidates())
                 if (cost := p.estimate(choice)) is not None]
        if not costs:
            raise LayoutError(f"{call.symbol}: no tile of the convolution fits the {ctx.scratch_size_bytes}-byte "
                              f"scratchpad (one output row of one channel with its input window is too big)")
        return p.build(min(costs)[2])

    def tilings(self, call: BoundCall, ctx: PlanContext) -> list[dict[str, Any]]:
        """The candidate tilings :meth:`plan` compares: ``split`` (spatial|filter), ``in_c_slice``, ``out_c_slice``."""
        p = _Planner(call, ctx)
        return [c.as_tiling() for c in p.candidates() if p.estimate(c) is not None]


# --- planning ----------------------------------------------------------------------------------

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


@dataclass(frozen=True)
class _Scratch:
    """The scratchpad of a plan: the fp32 accumulator of a full slice at its base, then two slots."""

    acc_base: int
    slot_base: int
    slot_bytes: int
    align: int

    def arena(self, slot: int) -> Arena:
        """A fresh allocator over slot ``slot`` (0 or 1)."""
        return Arena(self.slot_base + slot * self.slot_bytes, self.slot_bytes, self.align)


class _CoreStream:
    """The tiles of one core in one phase, with running tile ids and alternating slots."""

    def __init__(self, first_id: int):
        self.tiles: list[Tile] = []
        self.next_id = first_id

    @property
    def slot(self) -> int:
        """The slot the next tile takes (0/1 alternating: the engine double-buffers them)."""
        return len(self.tiles) % 2

    def add(self, loads: Sequence[Transfer], compute: Compute | None, stores: Sequence[Transfer]) -> None:
        """Append a tile in the next slot."""
        self.tiles.append(Tile(self.next_id, tuple(loads), compute, tuple(stores), slot=self.slot))
        self.next_id += 1


class _Planner:
    """Builds the candidate plans of one call and estimates their cycles from the target."""

    def __init__(self, call: BoundCall, ctx: PlanContext):
        self.call, self.ctx = call, ctx
        self.geo: ConvGeometry = call.attrs["geometry"]
        self.fh, self.fw, self.in_c, self.out_c = call.attrs["filter_sizes"]
        self.dt = PRECISION_DTYPES[call.precision]
        self.isz = self.dt.itemsize
        self.nchw = self.geo.data_format == "NCHW"
        self.lanes = ctx.target.core.precisions[COMPUTE_PRECISION].lanes
        self.align = ctx.alignment_bytes
        self.x = call.buffer("input")
        self.dy = call.buffer("out_backprop")
        self.out = call.buffer("output")
        self.taps = self.fh * self.fw
        self.mmap = MemoryMap(ctx.target)

    # -- candidates -----------------------------------------------------------------------------

    def candidates(self) -> list[_Choice]:
        """Spatial split with the largest slices that fit; filter split with those and with finer slices."""
        fit = self._fitting_slices(self.in_c, self.out_c)
        if fit is None:
            return []
        icg, ocg = fit
        out = [_Choice("spatial", icg, ocg), _Choice("filter", icg, ocg)]
        n = len(self.ctx.cores)
        n_ic = -(-self.in_c // icg)
        if n > 1 and n_ic * -(-self.out_c // ocg) < n:
            # Fewer slices than cores: cut out_c finer so every core gets one, evenly or on whole vectors.
            even = -(-self.out_c // -(-n // n_ic))
            for o in sorted({even, padded_lanes(even, self.lanes)}):
                if o < ocg:
                    out.append(_Choice("filter", icg, o))
        return out

    def build(self, choice: _Choice) -> Plan:
        """The plan of ``choice`` (one :meth:`estimate` did not refuse)."""
        if choice.kind == "spatial":
            plan = self._spatial_plan(choice.icg, choice.ocg)
            assert plan is not None
            return plan
        return self._filter_plan(choice.icg, choice.ocg)

    def _scratch(self, icg: int, ocg: int) -> _Scratch:
        acc = align_up(self.taps * icg * ocg * F32.itemsize, self.align)
        slot = max((self.ctx.scratch_size_bytes - acc) // 2 // self.align * self.align, 0)
        return _Scratch(self.ctx.scratch_base, self.ctx.scratch_base + acc, slot, self.align)

    def _x_cols(self) -> int:
        """Input columns any window touches (all but those right of the last window)."""
        g = self.geo
        return max(0, min(g.in_w, (g.out_w - 1) * g.stride_w + g.eff_w - g.pad_left))

    def _tile_bytes(self, icg: int, ocg: int, nb: int, rows: int) -> list[int]:
        """Bytes of a row tile's input window and dy rows (upper bound: the window unclipped at the top)."""
        g = self.geo
        in_rows = min((rows - 1) * g.stride_h + g.eff_h, g.in_h)
        return [nb * in_rows * self._x_cols() * icg * self.isz, nb * rows * g.out_w * ocg * self.isz]

    def _slices_fit(self, icg: int, ocg: int) -> tuple[bool, bool]:
        """(accumulator fits half the scratchpad, that and a one-row tile and a reduce row fit a slot)."""
        sc = self._scratch(icg, ocg)
        acc_ok = sc.slot_base - sc.acc_base <= self.ctx.scratch_size_bytes // 2
        # One row of a reduce tile holds every core's partial row.
        reduce_row = [ocg * F32.itemsize * len(self.ctx.cores), ocg * self.isz]
        return acc_ok, (acc_ok and fits(self._tile_bytes(icg, ocg, 1, 1), sc.slot_bytes, self.align)
                        and fits(reduce_row, sc.slot_bytes, self.align))

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

    def requested(self, tiling: Mapping[str, Any]) -> _Choice:
        """The choice a caller's ``tiling`` names (missing keys: the planner's own); refusals name the key."""
        limits = {"in_c_slice": self.in_c, "out_c_slice": self.out_c}
        for key, value in tiling.items():
            if key == "split":
                if value not in ("spatial", "filter"):
                    raise KernelArgError(f"argument 'tiling.split': expected spatial or filter, got {brief(value)}")
            elif key in limits:
                if isinstance(value, bool) or not isinstance(value, (int, np.integer)) \
                        or not 1 <= value <= limits[key]:
                    raise KernelArgError(f"argument 'tiling.{key}': expected an integer in 1..{limits[key]}, "
                                         f"got {brief(value)}")
            else:
                raise KernelArgError(f"argument 'tiling': unknown key '{key}' (this kernel takes: in_c_slice, "
                                     f"out_c_slice, split)")
        fit = self._fitting_slices(self.in_c, self.out_c) or (1, 1)
        icg = int(tiling.get("in_c_slice", fit[0]))
        ocg = int(tiling.get("out_c_slice", fit[1]))
        if not self._slices_fit(icg, ocg)[1]:
            raise LayoutError(f"{self.call.symbol}: tiling in_c_slice={icg}, out_c_slice={ocg} does not fit the "
                              f"{self.ctx.scratch_size_bytes}-byte scratchpad (the fp32 accumulator may take half "
                              f"of it; a one-row tile must fit one of the two slots left)")
        kinds = [tiling["split"]] if "split" in tiling else ["spatial", "filter"]
        costs = [(cost, i, _Choice(k, icg, ocg)) for i, k in enumerate(kinds)
                 if (cost := self.estimate(_Choice(k, icg, ocg))) is not None]
        if not costs:
            raise LayoutError(f"{self.call.symbol}: tiling {dict(tiling)}: one row of every core's partial filter "
                              f"gradient does not fit the {self.ctx.workspace_size_bytes}-byte shared workspace")
        return min(costs)[2]

    def _shrink(self, n: int) -> int:
        """About half of ``n``, on whole vectors while it is more than one vector."""
        half = -(-n // 2)
        return max(1, half // self.lanes * self.lanes if half > self.lanes else half)

    def _groups(self, icg: int, ocg: int) -> list[_Group]:
        return [_Group(i, min(i + icg, self.in_c), o, min(o + ocg, self.out_c))
                for i in range(0, self.in_c, icg) for o in range(0, self.out_c, ocg)]

    # -- row tiles ------------------------------------------------------------------------------

    def _blocks(self, start: int, stop: int, icg: int, ocg: int, sc: _Scratch) -> list[_Block]:
        """Row tiles covering flattened (image, output row) indices [start, stop), each fitting a slot.

        Tiles take at most a quarter of the range when they can, so the DMA of the
        next tile has a tile's compute to hide behind (pipeline depth).
        """
        g = self.geo
        cap = max(1, -(-(stop - start) // PIPELINE_TILES))
        rows_max = min(self._max_rows(icg, ocg, sc.slot_bytes), cap)
        images_max = 1
        if g.out_h <= cap and rows_max >= g.out_h:
            while (images_max < g.batch and (images_max + 1) * g.out_h <= cap
                   and fits(self._tile_bytes(icg, ocg, images_max + 1, g.out_h), sc.slot_bytes, self.align)):
                images_max += 1
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

    def _max_rows(self, icg: int, ocg: int, slot: int) -> int:
        lo, hi = 1, self.geo.out_h
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if fits(self._tile_bytes(icg, ocg, 1, mid), slot, self.align):
                lo = mid
            else:
                hi = mid - 1
        return lo

    def _vector_elems(self, icg: int, ocg: int) -> int:
        """Lane-padded icg x ocg products per tap and position: the vector loop runs along the cheaper axis."""
        return min(padded_lanes(icg, self.lanes) * ocg, icg * padded_lanes(ocg, self.lanes))

    def _window_rows(self, blk: _Block) -> tuple[int, int]:
        """Input rows [h0, h1) the windows of the block's output rows touch, clipped to the input."""
        g = self.geo
        top = blk.r0 * g.stride_h - g.pad_top
        bottom = (blk.r1 - 1) * g.stride_h - g.pad_top + g.eff_h
        return max(top, 0), min(bottom, g.in_h)

    def _tile_cost(self, blk: _Block, grp: _Group) -> tuple[int, int, int]:
        """(vector ops, input bytes, dy bytes) of the row tile ``blk`` of filter slice ``grp``."""
        g = self.geo
        nb, rows = blk.n1 - blk.n0, blk.r1 - blk.r0
        h0, h1 = self._window_rows(blk)
        x_elems = nb * max(h1 - h0, 0) * self._x_cols() * grp.icg
        dy_elems = nb * rows * g.out_w * grp.ocg
        flops = 2 * self.taps * nb * rows * g.out_w * self._vector_elems(grp.icg, grp.ocg)
        # Staging: fp16 -> fp32 conversion and the NCHW -> NHWC transposition, one vector op per element each.
        staging = int(self.isz != F32.itemsize) + int(self.nchw)
        flops += staging * padded_lanes(x_elems + dy_elems, self.lanes) if staging else 0
        return flops, x_elems * self.isz, dy_elems * self.isz

    def _row_tile(self, stream: _CoreStream, blk: _Block, grp: _Group, sc: _Scratch, first: bool) -> None:
        """DMA the block's input window and dy rows, accumulate its contribution into the accumulator."""
        g = self.geo
        arena = sc.arena(stream.slot)
        acc = Operand(sc.acc_base, (self.fh, self.fw, grp.icg, grp.ocg), F32)
        nb, rows = blk.n1 - blk.n0, blk.r1 - blk.r0
        h0, h1 = self._window_rows(blk)
        cols = self._x_cols()
        hl = max(h1 - h0, 0) if cols else 0
        x_shape = (nb, grp.icg, hl, cols) if self.nchw else (nb, hl, cols, grp.icg)
        loads, inputs = [], []
        if hl:
            ox = arena.operand(x_shape, self.dt)
            starts = (blk.n0, grp.ic0, h0, 0) if self.nchw else (blk.n0, h0, 0, grp.ic0)
            loads.append(block_in(self.x.addr, self.x.shape, self.isz, starts, x_shape, ox.addr))
            inputs.append(ox)
        dy_shape = (nb, grp.ocg, rows, g.out_w) if self.nchw else (nb, rows, g.out_w, grp.ocg)
        ody = arena.operand(dy_shape, self.dt)
        starts = (blk.n0, grp.oc0, blk.r0, 0) if self.nchw else (blk.n0, blk.r0, 0, grp.oc0)
        loads.append(block_in(self.dy.addr, self.dy.shape, self.isz, starts, dy_shape, ody.addr))
        inputs.append(ody)
        if not first:
            inputs.append(acc)
        fn = _TileFn(g, self.fh, self.fw, (blk.r0, blk.r1), self.nchw, bool(hl), first, x_shape)
        ops = self._tile_cost(blk, grp)[0]
        # The math: a multiply-add per tap, position and (in, out) channel pair; the rest of the ops are empty
        # lanes, fp16 conversion and NCHW transposition.
        math = 2 * self.taps * nb * rows * g.out_w * grp.icg * grp.ocg
        stream.add(loads, Compute(fn, tuple(inputs), (acc,), flops=math, reductions=0, precision=COMPUTE_PRECISION,
                                  extra_ops=ops - math), ())

    def _accumulate(self, stream: _CoreStream, blocks: Sequence[_Block], grp: _Group, sc: _Scratch) -> None:
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
        while per > 1 and not fits([per * b for b in row_bytes], slot, self.align):
            per -= 1
        return per

    def _drain(self, stream: _CoreStream, grp: _Group, sc: _Scratch) -> None:
        """Cast the finished accumulator into the slots (freeing it for the next slice) and store it."""
        m_rows = self.taps * grp.icg
        per = self._rows_per_tile([grp.ocg * self.isz], m_rows, sc.slot_bytes)
        for m0 in range(0, m_rows, per):
            m1 = min(m_rows, m0 + per)
            acc_rows = Operand(sc.acc_base + m0 * grp.ocg * F32.itemsize, (m1 - m0, grp.ocg), F32)
            dst = sc.arena(stream.slot).operand((m1 - m0, grp.ocg), self.dt)
            compute = Compute(_cast_to(self.dt), (acc_rows,), (dst,), flops=0, reductions=0,
                              precision=COMPUTE_PRECISION,
                              extra_ops=(m1 - m0) * padded_lanes(grp.ocg, self.lanes))  # a cast, not math
            stream.add((), compute, self._rows_out(dst.addr, m0, m1, grp))

    # -- the filter split -----------------------------------------------------------------------

    def _filter_plan(self, icg: int, ocg: int) -> Plan:
        """Filter slices over the cores; each core sweeps every image for its slices and stores them."""
        g = self.geo
        sc = self._scratch(icg, ocg)
        groups = self._groups(icg, ocg)
        blocks = self._blocks(0, g.batch * g.out_h, icg, ocg, sc)
        tiles: dict[int, tuple[Tile, ...]] = {}
        for core, (a, b) in zip(self.ctx.cores, split_even(len(groups), len(self.ctx.cores))):
            stream = _CoreStream(0)
            for grp in groups[a:b]:
                self._accumulate(stream, blocks, grp, sc)
                self._drain(stream, grp, sc)
            tiles[core] = tuple(stream.tiles)
        return Plan(cores=self.ctx.cores, phases=(Phase("filter_slices", tiles, barrier_after=False),),
                    precision=self.call.precision)

    # -- the spatial split ----------------------------------------------------------------------

    def _spatial_plan(self, icg: int, ocg: int) -> Plan | None:
        """(image, row) space over the cores; partial dW exchanged through the workspace, reduced by slices."""
        g = self.geo
        cores = self.ctx.cores
        sc = self._scratch(icg, ocg)
        active = cores[:min(len(cores), g.batch * g.out_h)]
        shares = split_even(g.batch * g.out_h, len(active))
        blocks = {core: self._blocks(a, b, icg, ocg, sc) for core, (a, b) in zip(active, shares)}
        phases: list[Phase] = []
        next_id = {c: 0 for c in cores}
        for gi, grp in enumerate(self._groups(icg, ocg)):
            streams = {c: _CoreStream(next_id[c]) for c in active}
            for core in active:
                self._accumulate(streams[core], blocks[core], grp, sc)
            if len(active) == 1:
                self._drain(streams[active[0]], grp, sc)
                phases.append(self._phase(f"slice{gi}:accumulate", streams, next_id, barrier=False))
                continue
            rounds = self._exchange_rounds(grp, len(active))
            if rounds is None:
                return None
            for ri, (ma, mb) in enumerate(rounds):
                if ri:
                    streams = {c: _CoreStream(next_id[c]) for c in active}
                self._store_partials(streams, active, grp, sc, ma, mb)
                phases.append(self._phase(f"slice{gi}:partials{ri}", streams, next_id, barrier=True))
                red = {c: _CoreStream(next_id[c]) for c in active}
                self._reduce(red, active, grp, sc, ma, mb)
                phases.append(self._phase(f"slice{gi}:reduce{ri}", red, next_id, barrier=True))
        last = phases[-1]
        phases[-1] = Phase(last.name, last.tiles, barrier_after=False)
        return Plan(cores=cores, phases=tuple(phases), precision=self.call.precision)

    @staticmethod
    def _phase(name: str, streams: Mapping[int, _CoreStream], next_id: dict[int, int], barrier: bool) -> Phase:
        for c, s in streams.items():
            next_id[c] = s.next_id
        return Phase(name, {c: tuple(s.tiles) for c, s in streams.items()}, barrier_after=barrier)

    def _partial_stride(self, n_active: int) -> int:
        return self.ctx.workspace_size_bytes // n_active // self.align * self.align

    def _exchange_rounds(self, grp: _Group, n_active: int) -> list[tuple[int, int]] | None:
        """Row ranges of dW exchanged per round: every core's partial rows must fit its workspace share."""
        per = self._partial_stride(n_active) // (grp.ocg * F32.itemsize)
        if per < 1:
            return None
        m_rows = self.taps * grp.icg
        return split_even(m_rows, -(-m_rows // per))

    def _store_partials(self, streams: Mapping[int, _CoreStream], active: Sequence[int], grp: _Group,
                        sc: _Scratch, ma: int, mb: int) -> None:
        """Each core DMAs rows [ma, mb) of its partial (contiguous in the accumulator) to its workspace share."""
        row_bytes = grp.ocg * F32.itemsize
        stride = self._partial_stride(len(active))
        for j, core in enumerate(active):
            src = sc.acc_base + ma * row_bytes
            dst = self.ctx.workspace_base + j * stride
            streams[core].add((), None, (Transfer.contiguous(src, dst, (mb - ma) * row_bytes),))

    def _reduce(self, streams: Mapping[int, _CoreStream], active: Sequence[int], grp: _Group, sc: _Scratch,
                ma: int, mb: int) -> None:
        """Each core sums its share of rows [ma, mb) over every core's partial and stores it to ``output``."""
        n = len(active)
        row_bytes = grp.ocg * F32.itemsize
        stride = self._partial_stride(n)
        per = self._rows_per_tile([row_bytes] * n + [grp.ocg * self.isz], mb - ma, sc.slot_bytes)
        for core, (s0, s1) in zip(active, split_even(mb - ma, n)):
            stream = streams[core]
            for a in range(s0, s1, per):
                b = min(s1, a + per)
                arena = sc.arena(stream.slot)
                parts = arena.operand((n, b - a, grp.ocg), F32)
                dst = arena.operand((b - a, grp.ocg), self.dt)
                # One 2-D descriptor gathers the rows from every core's partial (they lie ``stride`` apart).
                load = Transfer.block(self.ctx.workspace_base + a * row_bytes, parts.addr,
                                      (n, (b - a) * grp.ocg), F32.itemsize, (stride, F32.itemsize))
                ops = ((n - 1) + int(self.isz != F32.itemsize)) * (b - a) * padded_lanes(grp.ocg, self.lanes)
                # Adding the cores' partials is work the spatial split adds, not the math's.
                compute = Compute(_sum_partials(self.dt), (parts,), (dst,), flops=0, reductions=0,
                                  precision=COMPUTE_PRECISION, extra_ops=ops)
                stream.add((load,), compute, self._rows_out(dst.addr, ma + a, ma + b, grp))

    # -- cost estimate --------------------------------------------------------------------------

    def estimate(self, choice: _Choice) -> float | None:
        """Cycles ``choice`` would take by the target's numbers (None when it cannot be planned).

        Per phase, the slowest of the busiest core's compute and each memory's bytes
        over its bandwidth; the spatial split adds its exchange through the workspace.
        """
        g = self.geo
        sc = self._scratch(choice.icg, choice.ocg)
        groups = self._groups(choice.icg, choice.ocg)
        cores = self.ctx.cores
        if choice.kind == "filter":
            blocks = self._blocks(0, g.batch * g.out_h, choice.icg, choice.ocg, sc)
            per_core = [groups[a:b] for a, b in split_even(len(groups), len(cores))]
            return self._sweep_cycles([(blocks, gs) for gs in per_core], drain=True)
        active = cores[:min(len(cores), g.batch * g.out_h)]
        shares = [self._blocks(a, b, choice.icg, choice.ocg, sc)
                  for a, b in split_even(g.batch * g.out_h, len(active))]
        t = self.ctx.target
        ws = t.region(self._region_at(self.ctx.workspace_base).name)
        total = 0.0
        for grp in groups:
            total += self._sweep_cycles([(blocks, [grp]) for blocks in shares], drain=len(active) == 1)
            if len(active) > 1:
                rounds = self._exchange_rounds(grp, len(active))
                if rounds is None:
                    return None
                acc = self.taps * grp.icg * grp.ocg * F32.itemsize
                # Partials out and back through the workspace, the reduced slice to the output.
                total += (2 * len(active) * acc / ws.bandwidth_bytes_per_cycle
                          + acc * self.isz / F32.itemsize / self._bandwidth(self.out)
                          + 2 * len(rounds) * t.barrier_latency_cycles)
        return total

    def _region_at(self, addr: int) -> Region:
        """The region holding ``addr`` (every address planned here was layout-checked: it lies in one)."""
        region = self.mmap.region_at(addr)
        assert region is not None
        return region

    def _bandwidth(self, buf: Buffer) -> float:
        return self.ctx.target.region(self._region_at(buf.addr).name).bandwidth_bytes_per_cycle

    def _sweep_cycles(self, work: Sequence[tuple[Sequence[_Block], Sequence[_Group]]], drain: bool) -> float:
        """Cycles of one phase where core k accumulates ``work[k]`` = (row tiles, filter slices).

        The slowest of: the busiest core's compute; its loads through its own DMA
        engines (each at most the engine's rate and each side's bandwidth); every
        core's loads through the memories' total bandwidth.
        """
        t = self.ctx.target
        peak = t.core.precisions[COMPUTE_PRECISION].peak_flops_per_cycle
        per_tile = t.core.loop_overhead_cycles + t.core.vector_op_latency_cycles
        stage = self._region_at(self.ctx.scratch_base)
        x_region = self._region_at(self.x.addr)
        dy_region = self._region_at(self.dy.addr)
        engine_rate = min(t.dma.engines_per_core * t.dma.engine_bytes_per_cycle,
                          *(r.bandwidth_bytes_per_cycle for r in (stage, x_region, dy_region)))
        stream = lone_stream_bytes_per_cycle(t.dma, stage, x_region)
        latency = t.dma.setup_cycles + x_region.latency_cycles
        busiest = 0.0
        x_bytes = dy_bytes = out_bytes = 0
        sweeps: dict[tuple[int, int, int], tuple[float, int, int]] = {}
        for blocks, grps in work:
            cycles, loaded = 0.0, 0
            for grp in grps:
                # Slices of one size cost the same over the same tiles: price each size once.
                key = (id(blocks), grp.icg, grp.ocg)
                if key not in sweeps:
                    costs = [self._tile_cost(blk, grp) for blk in blocks]
                    sweeps[key] = (sum(per_tile + math.ceil(f / peak) for f, _, _ in costs),
                                   sum(c[1] for c in costs), sum(c[2] for c in costs))
                c, xb, db = sweeps[key]
                cycles += c
                loaded += xb + db
                x_bytes += xb
                dy_bytes += db
                if drain:
                    out_bytes += self.taps * grp.icg * grp.ocg * self.isz
            # The first tile's input window streams (one descriptor) before any compute starts.
            fill = latency + self._tile_cost(blocks[0], grps[0])[1] / stream if blocks and grps else 0.0
            busiest = max(busiest, fill + max(cycles, loaded / engine_rate))
        if self.mmap.region_at(self.x.addr) is self.mmap.region_at(self.dy.addr):
            memory = (x_bytes + dy_bytes) / self._bandwidth(self.x)
        else:
            memory = max(x_bytes / self._bandwidth(self.x), dy_bytes / self._bandwidth(self.dy))
        return max(busiest, memory) + out_bytes / self._bandwidth(self.out)


KERNEL = Conv2DBackpropFilter()
