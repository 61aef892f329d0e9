"""TensorFlow's FusedBatchNormGrad: ``{fp,hp}_fused_batch_norm_grad_{s,p}``.

Inputs ``y_backprop`` (dy) and ``x`` are 4-D in ``data_format`` order (``shape``
gives the four sizes), ``scale``, ``reserve_space_1`` (mean) and
``reserve_space_2`` (variance) are [C] fp32.  With m = N·H·W, rs =
rsqrt(variance + epsilon) and x̂ = (x − mean)·rs, per channel:

* offset_backprop = Σ dy, scale_backprop = Σ dy·x̂
* training:  x_backprop = scale·rs/m · (m·dy − Σdy − x̂·Σdy·x̂)
* inference: x_backprop = dy·scale·rs

as TensorFlow's CPU kernels (FusedBatchNormGrad / FusedBatchNormFreezeGrad)
compute them, in fp32 (fp16 tensors are widened on load and x_backprop is
narrowed on store).

Precision: ``fp_`` symbols store and compute everything in fp32.  ``hp_``
symbols store y_backprop, x and x_backprop in fp16 and the per-channel vectors
in fp32, and compute in fp32 at the chip's fp32 vector rate; widening each
loaded element and narrowing each stored one is a vector op priced in cycles
as an extra op, not counted as a flop (both precisions report the same flops).

Both layouts are handled as a 3-D view [A, C, B] with the channels in the
middle: NHWC is [N·H·W, C, 1] (channels on the vector lanes, the sums are
vertical vector adds), NCHW is [N, C, H·W] (spatial positions on the lanes, so
every per-channel sum of a tile ends in a cross-lane reduction).

Two plans:

* **channels** -- when every core can get at least one vector of channels
  (NHWC) or one channel (NCHW) and a tile of that many channels over the whole
  batch fits half the scratchpad: channels are split over the cores, each tile
  is a channel block over the whole batch, x and dy are read once.
* **rows** -- otherwise the rows (A, or B when that balances the cores better)
  are split over the cores.  Phase 1: every core sums its rows into partial
  per-channel sums kept in a fixed scratchpad area (inference also writes
  x_backprop here) and stores them to the shared workspace; barrier; phase 2:
  every core loads all partials, reduces them and (training) writes x_backprop
  for its rows; the first core stores scale/offset backprop.  Channels too many
  for the fixed area or the workspace are done in groups, two phases each.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from kernels.base import PRECISION_DTYPES, PlanContext
from kernels.common.args import (
    check_args,
    require_address,
    require_bool,
    require_choice,
    require_float,
    require_ints,
)
from kernels.tiling import (
    Arena,
    align_up,
    fits,
    operand_in,
    operand_out,
    padded_lanes,
    split_even,
)
from kernels.tiling_keys import choice_key, int_key, tiling_keys, unique
from sim.errors import KernelArgError, LayoutError
from sim.model.call import ArgSpec, BoundCall, Buffer, MemoryReader
from sim.model.plan import Compute, Operand, Phase, Plan, Tile, Transfer

F32 = np.dtype(np.float32)
FORMATS = ("NHWC", "NCHW")
#: The chip widens fp16 and accumulates in fp32 for both symbol precisions.
COMPUTE_PRECISION = "fp32"
#: Vector element operations per element of a tile (FMA = 2).
FLOPS_XHAT = 2          # (x - mean) * rs
FLOPS_SUMS = 3          # Σdy += dy; Σdy·x̂ += dy·x̂ (FMA)
FLOPS_DX_TRAIN = 4      # x̂·b + a (FMA), dy − that, · k
FLOPS_DX_INFER = 1      # dy · k
FLOPS_WIDEN = 1         # fp16 -> fp32 per loaded element, fp32 -> fp16 per stored element
#: Per-channel vector work: rs = rsqrt(var + eps) (2), k = scale·rs (1), a = Σdy/m, b = Σdy·x̂/m (2).
FLOPS_CHANNEL_RS = 2
FLOPS_CHANNEL_COEF = 3
#: A core's share is cut into at least this many tiles when it is large enough (pipeline depth).
MIN_TILES_PER_CORE = 4
#: Fraction of the scratchpad the rows plan may spend on its per-channel vectors and partials.
FIXED_AREA_FRACTION = 4
#: The two plans a caller's ``tiling`` may name, and its keys.
SPLITS = ("channels", "rows")
TILING_KEYS = ("split", "channel_block", "tile_elements")


# -- numerics (fp32, as the chip computes them) ----------------------------------------------------

def rsqrt_var(variance: np.ndarray, epsilon: float) -> np.ndarray:
    """rsqrt(variance + epsilon) in fp32."""
    v = np.asarray(variance, F32) + F32.type(epsilon)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (F32.type(1.0) / np.sqrt(v)).astype(F32)


def _per_channel(v: np.ndarray) -> np.ndarray:
    return np.asarray(v, F32).reshape(1, -1, 1)


def partial_sums(x: np.ndarray, dy: np.ndarray, mean: np.ndarray, rs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(Σdy, Σdy·x̂) per channel of a [a, c, b] block, in fp32."""
    dyf = dy.astype(F32, copy=False)
    xh = (x.astype(F32, copy=False) - _per_channel(mean)) * _per_channel(rs)
    return dyf.sum(axis=(0, 2), dtype=F32), (dyf * xh).sum(axis=(0, 2), dtype=F32)


def x_backprop_train(x: np.ndarray, dy: np.ndarray, mean: np.ndarray, rs: np.ndarray, scale: np.ndarray,
                     sum_dy: np.ndarray, sum_dy_xhat: np.ndarray, m: int) -> np.ndarray:
    """Training x_backprop of a [a, c, b] block from the whole-batch sums, in fp32."""
    mf = F32.type(m)
    xh = (x.astype(F32, copy=False) - _per_channel(mean)) * _per_channel(rs)
    k = _per_channel(np.asarray(scale, F32) * rs / mf)
    return k * (mf * dy.astype(F32, copy=False) - _per_channel(sum_dy) - xh * _per_channel(sum_dy_xhat))


def x_backprop_infer(dy: np.ndarray, rs: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """Inference x_backprop of a [a, c, b] block, in fp32."""
    return dy.astype(F32, copy=False) * _per_channel(np.asarray(scale, F32) * rs)


def fused_batch_norm_grad_reference(dy: np.ndarray, x: np.ndarray, scale: np.ndarray, mean: np.ndarray,
                                    variance: np.ndarray, epsilon: float, data_format: str,
                                    is_training: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(x_backprop, scale_backprop, offset_backprop) of whole 4-D tensors, computed like the chip does."""
    v = View.of(x.shape, data_format)
    x3, dy3 = x.reshape(v.shape), dy.reshape(v.shape)
    rs = rsqrt_var(variance, epsilon)
    s1, s2 = partial_sums(x3, dy3, mean, rs)
    if is_training:
        dx = x_backprop_train(x3, dy3, mean, rs, scale, s1, s2, v.m)
    else:
        dx = x_backprop_infer(dy3, rs, scale)
    return dx.astype(x.dtype, copy=False).reshape(x.shape), s2, s1


# -- geometry ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class View:
    """The 4-D tensor seen as [A, C, B]: channels in the middle, the summed-over positions on both sides."""

    a: int
    c: int
    b: int
    channels_on_lanes: bool  # NHWC: the channels fill the vector lanes; NCHW: the spatial positions do

    @staticmethod
    def of(shape: Sequence[int], data_format: str) -> View:
        """The view of a 4-D ``shape`` in ``data_format`` order."""
        n, d1, d2, d3 = (int(s) for s in shape)
        if data_format == "NHWC":
            return View(n * d1 * d2, d3, 1, True)
        return View(n, d1, d2 * d3, False)

    @property
    def shape(self) -> tuple[int, int, int]:
        """(A, C, B)."""
        return self.a, self.c, self.b

    @property
    def m(self) -> int:
        """Elements per channel (N·H·W)."""
        return self.a * self.b

    def lane_elems(self, na: int, nc: int, nb: int, lanes: int) -> int:
        """Vector lanes a loop over a [na, nc, nb] block spends (its lane axis padded to whole vectors)."""
        if self.channels_on_lanes:
            return na * padded_lanes(nc, lanes) * nb
        return na * nc * padded_lanes(nb, lanes)

    def reductions(self, nc: int) -> int:
        """Cross-lane reductions to finish the two per-channel sums of a block of ``nc`` channels."""
        return 0 if self.channels_on_lanes else 2 * nc


def _channels_vectors_bytes(v: View, ctx: PlanContext) -> int:
    """Scratch the channels plan keeps for a core's per-channel vectors (mean, variance, scale and the two
    sums, every channel at most), loaded once and stored once per core rather than once per tile."""
    return 5 * align_up(v.c * 4, ctx.alignment_bytes)


def _channels_slot_bytes(v: View, ctx: PlanContext) -> int:
    """Each of the channels plan's two tile slots: half of the scratchpad left beside the vectors."""
    a = ctx.alignment_bytes
    return max(0, (ctx.scratch_size_bytes - _channels_vectors_bytes(v, ctx)) // 2 // a * a)


def _slice(op: Operand, start: int, n: int) -> Operand:
    """Elements [start, start + n) of a 1-D fp32 operand, as an operand."""
    return Operand(op.addr + start * op.dtype.itemsize, (n,), op.dtype)


def heuristic_tile_elements(na: int, nc: int, nb: int, budget: int, lanes: int) -> int:
    """Elements per tile that cut a [na, nc, nb] share into MIN_TILES_PER_CORE tiles, at most ``budget``."""
    return min(budget, max(lanes, -(-na * nc * nb // MIN_TILES_PER_CORE)))


def _tile_dims(v: View, na: int, nc: int, nb: int, budget: int, lanes: int,
               want: int | None = None) -> tuple[int, int, int]:
    """A [ta, tc, tb] tile of at most ``want`` (<= ``budget``) elements of a [na, nc, nb] share, filled from the inside.

    The lane axis is cut in whole vectors; by default the share is cut into at
    least MIN_TILES_PER_CORE tiles when it allows, so loads overlap compute.
    """
    if want is None:
        want = heuristic_tile_elements(na, nc, nb, budget, lanes)
    if nb <= want:
        tb = nb
    else:
        tb = min(nb, max(lanes, want // lanes * lanes) if not v.channels_on_lanes else want)
    tc = min(nc, max(1, want // tb))
    if v.channels_on_lanes and tc < nc:
        tc = min(nc, max(lanes, tc // lanes * lanes))
    ta = min(na, max(1, want // (tc * tb)))
    if ta * tc * tb > budget:
        raise LayoutError(f"a tile of {tc} channels x {tb} positions does not fit the scratchpad "
                          f"({budget} elements per tensor available)")
    return ta, tc, tb


# -- the kernel -------------------------------------------------------------------------------------

class FusedBatchNormGrad:
    """The registry entry of fused_batch_norm_grad."""

    name = "fused_batch_norm_grad"
    #: What an hp_ call stores in fp16 (the rest in fp32) and how it computes.
    tensors_in_precision = ("y_backprop", "x", "x_backprop")
    fp32_tensors = ("scale", "reserve_space_1", "reserve_space_2", "scale_backprop", "offset_backprop")
    fp16_arithmetic = ("computed in fp32 at the chip's fp32 vector rate: y_backprop and x are widened as they are "
                       "loaded and x_backprop is rounded to fp16 as it is stored, one vector op per element each, "
                       "priced as extra vector ops (not flops)")
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
        a = check_args(symbol, self.args, args)
        ptr = {s.name: require_address(s.name, a[s.name]) for s in self.args if s.kind in ("in_ptr", "out_ptr")}
        shape = require_ints("shape", a["shape"], 4, minimum=1)
        data_format = require_choice("data_format", a["data_format"], FORMATS)
        epsilon = require_float("epsilon", a["epsilon"])
        # Compared before any cast: casting a value beyond fp32 to fp32 overflows (with numpy's warning).
        if not 0 < epsilon <= float(np.finfo(F32).max) or F32.type(epsilon) <= 0:
            raise KernelArgError(f"argument 'epsilon': expected a positive number representable in fp32, "
                                 f"got {epsilon!r}")
        is_training = require_bool("is_training", a["is_training"])
        dt = PRECISION_DTYPES[precision]
        elems = int(np.prod(shape, dtype=object))
        if elems * dt.itemsize > 1 << 40:
            raise KernelArgError(f"argument 'shape': {list(shape)} is {elems} elements, more than any chip's "
                                 f"memory")
        v = View.of(shape, data_format)
        buffers = (
            Buffer("y_backprop", ptr["y_backprop"], shape, dt, "input"),
            Buffer("x", ptr["x"], shape, dt, "input"),
            Buffer("scale", ptr["scale"], (v.c,), F32, "input"),
            Buffer("reserve_space_1", ptr["reserve_space_1"], (v.c,), F32, "input"),
            Buffer("reserve_space_2", ptr["reserve_space_2"], (v.c,), F32, "input"),
            Buffer("x_backprop", ptr["x_backprop"], shape, dt, "output"),
            Buffer("scale_backprop", ptr["scale_backprop"], (v.c,), F32, "output"),
            Buffer("offset_backprop", ptr["offset_backprop"], (v.c,), F32, "output"),
        )
        return BoundCall(symbol, precision, variant, cores, buffers,
                         {"shape": shape, "epsilon": epsilon, "data_format": data_format,
                          "is_training": is_training, "view": v})

    # -- planning -----------------------------------------------------------------------------------

    def plan(self, call: BoundCall, ctx: PlanContext) -> Plan:
        """The plan ``ctx.tiling`` names, else the channels plan when every core gets whole-batch channel
        tiles of whole units, else the rows plan."""
        v: View = call.attrs["view"]
        dt = PRECISION_DTYPES[call.precision]
        lanes = ctx.target.core.precisions[COMPUTE_PRECISION].lanes
        split, ct, te = self._requested(call, ctx)
        if split is None:
            split = "channels" if self._channels_by_default(call, ctx) else "rows"
        if split == "channels":
            return _ChannelsPlan(call, ctx, v, dt, lanes, ct).build()
        return _RowsPlan(call, ctx, v, dt, lanes, te).build()

    def tilings(self, call: BoundCall, ctx: PlanContext) -> list[dict[str, Any]]:
        """Candidates: the default plan, the channels plan with its widest one-pass blocks, the other plans.

        The widest one-pass channel blocks (part-filled vectors if need be) read
        x and dy once where the rows plan reads what does not stay resident twice;
        the rows plan keeps every core busy when channels are few; its largest
        tiles spend fewer DMA setups than the default four tiles per core.
        """
        v: View = call.attrs["view"]
        dt = PRECISION_DTYPES[call.precision]
        lanes = ctx.target.core.precisions[COMPUTE_PRECISION].lanes
        chans = _ChannelsPlan(call, ctx, v, dt, lanes, None)
        out: list[dict[str, Any]] = []
        rows_default: dict[str, Any] | None = None
        rows_largest: dict[str, Any] | None = None
        rows_short: dict[str, Any] | None = None
        try:
            rows = _RowsPlan(call, ctx, v, dt, lanes, None)
            rows.build()
            assert rows.first_want is not None  # build() sets it
            rows_default = {"split": "rows", "tile_elements": rows.first_want}
            rows_largest = {"split": "rows", "tile_elements": rows.largest_want}
            # Shorter tiles fill the pipeline sooner (the first load is never hidden).  Never longer than the
            # default tile: a call of fewer elements than a vector has lanes has no shorter tile to offer.
            rows_short = {"split": "rows", "tile_elements": min(rows.first_want, max(lanes, rows.first_want // 4))}
        except LayoutError:
            rows_default = rows_largest = rows_short = None
        if self._channels_by_default(call, ctx):
            out.append({"split": "channels", "channel_block": chans.default_block()})
        elif rows_default is not None:
            out.append(rows_default)
        widest = chans.widest_block()
        if widest:
            out.append({"split": "channels", "channel_block": widest})
        out += [t for t in (rows_default, rows_largest, rows_short) if t is not None]
        return unique(out)

    @staticmethod
    def _requested(call: BoundCall, ctx: PlanContext) -> tuple[str | None, int | None, int | None]:
        """(split, channel_block, tile_elements) of the call's tiling, None where the kernel chooses."""
        v: View = call.attrs["view"]
        tiling = tiling_keys(ctx, TILING_KEYS)
        split = choice_key(tiling, "split", SPLITS)
        ct = int_key(tiling, "channel_block", 1, v.c)
        te = int_key(tiling, "tile_elements", 1, v.a * v.c * v.b)
        if ct is not None and (split == "rows" or (split is None and te is not None)):
            raise KernelArgError("argument 'tiling.channel_block': applies to the channels split only "
                                 "(the rows split takes tile_elements)")
        if te is not None and split == "channels":
            raise KernelArgError("argument 'tiling.tile_elements': applies to the rows split only "
                                 "(the channels split takes channel_block)")
        if split is None and (ct is not None or te is not None):
            split = "channels" if ct is not None else "rows"
        return split, ct, te

    def _channels_by_default(self, call: BoundCall, ctx: PlanContext) -> bool:
        """Every core gets a whole unit (a vector of channels in NHWC) whose whole-batch tile fits."""
        v: View = call.attrs["view"]
        dt = PRECISION_DTYPES[call.precision]
        lanes = ctx.target.core.precisions[COMPUTE_PRECISION].lanes
        unit = lanes if v.channels_on_lanes else 1
        return -(-v.c // unit) >= len(call.cores) and self._whole_batch_fits(v, min(unit, v.c), dt, ctx)

    @staticmethod
    def _whole_batch_fits(v: View, ct: int, dt: np.dtype, ctx: PlanContext) -> bool:
        return fits([v.a * ct * v.b * dt.itemsize] * 3, _channels_slot_bytes(v, ctx), ctx.alignment_bytes)


class _PlanBase:
    """What both plans share: the call's buffers, sizes and the tile flop counts."""

    def __init__(self, call: BoundCall, ctx: PlanContext, v: View, dt: np.dtype, lanes: int,
                 size: int | None = None):
        self.call, self.ctx, self.v, self.dt, self.lanes = call, ctx, v, dt, lanes
        #: The tile size a caller's tiling names (channels per tile or elements per tile), None: the plan's own.
        self.size = size
        self.buf = {b.name: b for b in call.buffers}
        self.train: bool = call.attrs["is_training"]
        self.eps: float = call.attrs["epsilon"]
        self.widen = FLOPS_WIDEN if dt != F32 else 0

    def addr(self, name: str) -> int:
        """Address of buffer ``name``."""
        return self.buf[name].addr

    def tensor_in(self, op: Operand, name: str, start: tuple[int, int, int]) -> Transfer:
        """DMA the block of the 3-D view of tensor ``name`` at ``start`` into ``op``."""
        return operand_in(op, self.addr(name), self.v.shape, start)

    def tensor_out(self, op: Operand, start: tuple[int, int, int]) -> Transfer:
        """DMA ``op`` out to its block of x_backprop."""
        return operand_out(op, self.addr("x_backprop"), self.v.shape, start)

    def vec_in(self, op: Operand, name: str, c0: int) -> Transfer:
        """DMA channels [c0, c0 + n) of per-channel vector ``name`` into ``op``."""
        return operand_in(op, self.addr(name), (self.v.c,), (c0,))

    def vec_out(self, op: Operand, name: str, c0: int) -> Transfer:
        """DMA ``op`` out to channels [c0, c0 + n) of per-channel output ``name``."""
        return operand_out(op, self.addr(name), (self.v.c,), (c0,))

    def compute(self, fn: Callable, inputs: Sequence[Operand], outputs: Sequence[Operand], ops: int,
                reductions: int = 0, *, flops: int = 0) -> Compute:
        """A Compute priced in fp32: ``ops`` vector operations in all, ``flops`` of them the math's own (the rest:
        conversions, empty lanes, work the rows plan repeats, see ``Compute``)."""
        return Compute(fn, tuple(inputs), tuple(outputs), flops=int(flops), reductions=int(reductions),
                       precision=COMPUTE_PRECISION, extra_ops=int(ops) - int(flops))


class _ChannelsPlan(_PlanBase):
    """Channels split over the cores; each tile a channel block over the whole batch, one phase."""

    def build(self) -> Plan:
        """One phase, no barrier: the cores' channel ranges are independent.

        By default the cores split whole units (vectors of channels in NHWC) and
        cut their share into a few blocks; with a caller's ``channel_block`` the
        cores split whole blocks of that many channels.
        """
        tiles: dict[int, tuple[Tile, ...]] = {}
        if self.size is None:
            unit = self.lanes if self.v.channels_on_lanes else 1
            for core, (c0, c1) in zip(self.call.cores, self._ranges(unit)):
                tiles[core] = tuple(self._core_tiles(c0, c1, self._block(c1 - c0, unit)))
        else:
            ct = self.size
            if not FusedBatchNormGrad._whole_batch_fits(self.v, ct, self.dt, self.ctx):
                raise LayoutError(f"{self.call.symbol}: tiling channel_block={ct} does not fit the "
                                  f"{self.ctx.scratch_size_bytes}-byte scratchpad (a whole-batch tile of x, "
                                  f"y_backprop and x_backprop takes half of what the per-channel vectors "
                                  f"leave)")
            for core, (c0, c1) in zip(self.call.cores, self._ranges(ct)):
                tiles[core] = tuple(self._core_tiles(c0, c1, ct))
        return Plan(cores=self.call.cores, phases=(Phase("channels", tiles, barrier_after=False),),
                    precision=self.call.precision)

    def _ranges(self, unit: int) -> list[tuple[int, int]]:
        """Channel ranges of the cores with work: whole ``unit``s split evenly."""
        return [(u0 * unit, min(self.v.c, u1 * unit))
                for u0, u1 in split_even(-(-self.v.c // unit), len(self.call.cores))]

    def default_block(self) -> int:
        """Channels per tile of the first core's share by default."""
        unit = self.lanes if self.v.channels_on_lanes else 1
        c0, c1 = self._ranges(unit)[0]
        return self._block(c1 - c0, unit)

    def widest_block(self) -> int:
        """The most channels (<= a core's even share; whole vectors when at least one) whose whole batch fits."""
        lo, hi = 0, -(-self.v.c // len(self.call.cores))
        while lo < hi:
            mid = (lo + hi + 1) // 2
            fit = FusedBatchNormGrad._whole_batch_fits(self.v, mid, self.dt, self.ctx)
            lo, hi = (mid, hi) if fit else (lo, mid - 1)
        return lo // self.lanes * self.lanes if self.v.channels_on_lanes and lo >= self.lanes else lo

    def _block(self, span: int, unit: int) -> int:
        """Channels per tile: whole units, fits half the scratchpad, a few tiles per core when possible."""
        want = min(span, max(unit, align_up(-(-span // MIN_TILES_PER_CORE), unit)))
        while want > unit and not FusedBatchNormGrad._whole_batch_fits(self.v, want, self.dt, self.ctx):
            want = max(unit, (want // 2) // unit * unit)
        return min(want, span)

    def _core_tiles(self, c0: int, c1: int, ct: int) -> list[Tile]:
        """The core's channel blocks; its per-channel vectors are loaded with the first, stored with the last."""
        v, dt, ctx = self.v, self.dt, self.ctx
        half = _channels_slot_bytes(v, ctx)
        fixed = Arena(ctx.scratch_base + 2 * half, ctx.scratch_size_bytes - 2 * half, ctx.alignment_bytes)
        vm, vvar, vsc, vsb, vob = (fixed.operand((c1 - c0,), F32) for _ in range(5))
        vec_loads = (self.vec_in(vm, "reserve_space_1", c0), self.vec_in(vvar, "reserve_space_2", c0),
                     self.vec_in(vsc, "scale", c0))
        vec_stores = (self.vec_out(vsb, "scale_backprop", c0), self.vec_out(vob, "offset_backprop", c0))
        starts = range(c0, c1, ct)
        out = []
        for i, start in enumerate(starts):
            n = min(ct, c1 - start)
            arena = Arena(ctx.scratch_base + (i % 2) * half, half, ctx.alignment_bytes)
            ox, ody, odx = (arena.operand((v.a, n, v.b), dt) for _ in range(3))
            om, ovar, osc, osb, oob = (_slice(op, start - c0, n) for op in (vm, vvar, vsc, vsb, vob))
            loads: tuple[Transfer, ...] = (self.tensor_in(ox, "x", (0, start, 0)),
                                           self.tensor_in(ody, "y_backprop", (0, start, 0)))
            stores: tuple[Transfer, ...] = (self.tensor_out(odx, (0, start, 0)),)
            if i == 0:
                loads += vec_loads
            if i == len(starts) - 1:
                stores += vec_stores  # every block's sums are in place once the last block has computed

            def fn(x, dy, mean, var, scale, _eps=self.eps, _train=self.train, _m=v.m, _dt=dt):
                rs = rsqrt_var(var, _eps)
                s1, s2 = partial_sums(x, dy, mean, rs)
                dx = (x_backprop_train(x, dy, mean, rs, scale, s1, s2, _m) if _train
                      else x_backprop_infer(dy, rs, scale))
                return dx.astype(_dt, copy=False), s2, s1

            elems = v.lane_elems(v.a, n, v.b, self.lanes)
            per_elem = (FLOPS_XHAT + FLOPS_SUMS + (FLOPS_DX_TRAIN if self.train else FLOPS_DX_INFER)
                        + 3 * self.widen)
            chan = padded_lanes(n, self.lanes) * (FLOPS_CHANNEL_RS + FLOPS_CHANNEL_COEF)
            math = (v.a * n * v.b * (FLOPS_XHAT + FLOPS_SUMS + (FLOPS_DX_TRAIN if self.train else FLOPS_DX_INFER))
                    + n * (FLOPS_CHANNEL_RS + FLOPS_CHANNEL_COEF))
            out.append(Tile(i, loads, self.compute(fn, (ox, ody, om, ovar, osc), (odx, osb, oob),
                                                   elems * per_elem + chan, v.reductions(n), flops=math),
                            stores, slot=i % 2))
        return out


@dataclass
class _Fixed:
    """The rows plan's per-channel vectors of one channel group, at fixed scratchpad addresses."""

    mean: Operand
    rs: Operand      # loaded as the variance, turned into rsqrt(var + eps) in place
    scale: Operand
    sums: Operand    # [2, Cg]: Σdy, Σdy·x̂
    partials: Operand | None  # [P, 2, Cg]: every participating core's sums, loaded from the workspace

    def s1(self, c0: int, n: int) -> Operand:
        """Σdy of channels [c0, c0 + n) of the group."""
        return Operand(self.sums.addr + c0 * 4, (n,), F32)

    def s2(self, c0: int, n: int) -> Operand:
        """Σdy·x̂ of channels [c0, c0 + n) of the group."""
        return Operand(self.sums.addr + (self.sums.shape[1] + c0) * 4, (n,), F32)


@dataclass(frozen=True)
class _Block:
    """One tile's block of a core's rows, ``start`` + ``dims`` in the [A, Cg, B] view of a channel group.

    ``addr`` is where its x and dy sit in the scratchpad and ``slot`` the engine's buffer-set key:
    streamed blocks share the two slots (0, 1); resident blocks (training) have their own area, so
    phase 2 finds x and dy still in the scratchpad and writes x_backprop over dy.
    """

    start: tuple[int, int, int]
    dims: tuple[int, int, int]
    addr: int
    slot: int
    resident: bool


class _RowsPlan(_PlanBase):
    """Rows split over the cores; per channel group a partial-sums phase and a finishing phase."""

    def build(self) -> Plan:
        """Phases per channel group: sums (+ inference x_backprop), barrier, reduce (+ training x_backprop)."""
        self.first_want: int | None = None
        self.largest_want: int | None = None
        self.shares = self._shares()
        self.parts = len(self.shares)
        group = self._group_size()
        phases: list[Phase] = []
        for g0 in range(0, self.v.c, group):
            phases += self._group_phases(g0, min(self.v.c, g0 + group))
        last = phases[-1]
        phases[-1] = Phase(last.name, last.tiles, barrier_after=False)
        return Plan(cores=self.call.cores, phases=tuple(phases), precision=self.call.precision)

    def _shares(self) -> list[tuple[int, tuple[int, int], tuple[int, int]]]:
        """(core, (a0, a1), (b0, b1)) per participating core: A split, or B in whole vectors if that balances better."""
        v, n, lanes = self.v, len(self.call.cores), self.lanes
        by_a = [((a0, a1), (0, v.b)) for a0, a1 in split_even(v.a, n)]
        b_unit = 1 if v.channels_on_lanes else lanes
        by_b = [((0, v.a), (u0 * b_unit, min(v.b, u1 * b_unit)))
                for u0, u1 in split_even(-(-v.b // b_unit), n)]

        def worst(shares: list) -> int:
            return max((a1 - a0) * (b1 - b0) for (a0, a1), (b0, b1) in shares)

        chosen = by_a if worst(by_a) <= worst(by_b) else by_b
        return [(core, ab[0], ab[1]) for core, ab in zip(self.call.cores, chosen)]

    def _group_size(self) -> int:
        """Channels per group: the fixed area (≤ 1/FIXED_AREA_FRACTION of the scratchpad) and the workspace allow."""
        ctx, parts = self.ctx, self.parts
        per_channel = 4 * (5 + (2 * parts if parts > 1 else 0))
        group = (ctx.scratch_size_bytes // FIXED_AREA_FRACTION - 8 * ctx.alignment_bytes) // per_channel
        if parts > 1:
            group = min(group, ctx.workspace_size_bytes // (8 * parts))
        if group >= self.v.c:
            return self.v.c
        if group < self.lanes:
            raise LayoutError(f"{self.call.symbol}: the scratchpad or the workspace cannot hold the per-channel "
                              f"sums of {self.lanes} channels for {parts} cores")
        return group // self.lanes * self.lanes

    def _group_phases(self, g0: int, g1: int) -> list[Phase]:
        ctx, cg, parts = self.ctx, g1 - g0, self.parts
        area = Arena(ctx.scratch_base, ctx.scratch_size_bytes, ctx.alignment_bytes)
        fixed = _Fixed(area.operand((cg,), F32), area.operand((cg,), F32), area.operand((cg,), F32),
                       area.operand((2, cg), F32), area.operand((parts, 2, cg), F32) if parts > 1 else None)
        free = Arena(ctx.scratch_base + align_up(area.used, ctx.alignment_bytes),
                     ctx.scratch_size_bytes - align_up(area.used, ctx.alignment_bytes), ctx.alignment_bytes)
        first: dict[int, list[Tile]] = {}
        second: dict[int, list[Tile]] = {}
        for idx, (core, (a0, a1), (b0, b1)) in enumerate(self.shares):
            blocks = self._blocks(free, (a0, a1), cg, (b0, b1))
            first[core] = self._sums_tiles(idx, g0, fixed, blocks)
            second[core] = self._finish_tiles(idx, g0, fixed, blocks)
        name = f"c{g0}-{g1}"
        return [Phase(f"partial sums {name}", {k: tuple(t) for k, t in first.items()}),
                Phase(f"reduce {name}", {k: tuple(t) for k, t in second.items() if t})]

    # -- where the blocks live -------------------------------------------------------------------

    def _cut(self, ar: tuple[int, int], cg: int, br: tuple[int, int], budget: int) -> list[tuple]:
        """The share [a0, a1) x [0, cg) x [b0, b1) cut into (start, dims) blocks of at most ``budget`` elements.

        The tile size is the caller's ``tile_elements`` or the heuristic's.
        """
        (a0, a1), (b0, b1) = ar, br
        want = heuristic_tile_elements(a1 - a0, cg, b1 - b0, budget, self.lanes) if self.size is None \
            else self.size
        elems = (a1 - a0) * cg * (b1 - b0)
        self._last_cut = (min(want, elems), min(budget, elems))
        ta, tc, tb = _tile_dims(self.v, a1 - a0, cg, b1 - b0, budget, self.lanes, want)
        return [((a, c, b), (min(ta, a1 - a), min(tc, cg - c), min(tb, b1 - b)))
                for a in range(a0, a1, ta) for c in range(0, cg, tc) for b in range(b0, b1, tb)]

    def _remember_cut(self) -> None:
        """Keep the first share's tile size and the largest it could take, for :meth:`FusedBatchNormGrad.tilings`."""
        if self.first_want is None:
            self.first_want, self.largest_want = self._last_cut

    def _bytes(self, dims: tuple[int, int, int]) -> int:
        return align_up(dims[0] * dims[1] * dims[2] * self.dt.itemsize, self.ctx.alignment_bytes)

    def _blocks(self, free: Arena, ar: tuple[int, int], cg: int, br: tuple[int, int]) -> list[_Block]:
        """The core's blocks in phase-1 order, each streamed through the two slots or resident.

        Training reads x and dy twice (sums, then x_backprop); blocks that stay in
        the scratchpad between the phases are read once.  When the whole share
        fits (x and dy), every block is resident; otherwise two slots take a third
        of the free scratchpad and as many trailing blocks as fit stay resident.
        Inference reads everything once and streams through two halves.
        """
        align, size, item = self.ctx.alignment_bytes, free.size_bytes, self.dt.itemsize
        resident_budget = max(0, size // 2 - 2 * align) // (2 * item)
        if self.train and (self.size is None or self.size <= resident_budget):
            blocks = self._cut(ar, cg, br, resident_budget)
            if sum(2 * self._bytes(d) for _, d in blocks) <= size:
                self._remember_cut()
                out, addr = [], free.base
                for j, (start, dims) in enumerate(blocks):
                    out.append(_Block(start, dims, addr, 3 + j, True))
                    addr += 2 * self._bytes(dims)
                return out
        if self.train:
            half = size // 6 // align * align
        else:
            half = size // 2 // align * align
        budget = max(0, half - 3 * align) // (3 * item)
        if self.size is not None and self.size > budget:
            raise LayoutError(f"{self.call.symbol}: tiling tile_elements={self.size} does not fit the "
                              f"{self.ctx.scratch_size_bytes}-byte scratchpad (at most {budget} elements per "
                              f"tensor in a streamed tile)")
        blocks = self._cut(ar, cg, br, budget)
        self._remember_cut()
        stay = 0
        if self.train:
            room = size - 2 * half
            for _, dims in reversed(blocks):
                if room < 2 * self._bytes(dims):
                    break
                room -= 2 * self._bytes(dims)
                stay += 1
        out, addr = [], free.base + 2 * half
        for j, (start, dims) in enumerate(blocks):
            if j < len(blocks) - stay:
                out.append(_Block(start, dims, free.base + (j % 2) * half, j % 2, False))
            else:
                out.append(_Block(start, dims, addr, 3 + j, True))
                addr += 2 * self._bytes(dims)
        return out

    # -- tiles ----------------------------------------------------------------------------------

    def _operands(self, blk: _Block) -> tuple[Operand, Operand, Operand]:
        """x, dy and x_backprop of a block; a resident block writes x_backprop over its dy."""
        arena = Arena(blk.addr, 3 * self._bytes(blk.dims), self.ctx.alignment_bytes)
        ox, ody = arena.operand(blk.dims, self.dt), arena.operand(blk.dims, self.dt)
        return ox, ody, (ody if blk.resident else arena.operand(blk.dims, self.dt))

    def _stream_tile(self, tid: int, blk: _Block, g0: int, fixed: _Fixed, kind: str) -> Tile:
        """One block of rows: 'sums' (training phase 1), 'both' (inference phase 1) or 'dx' (training phase 2)."""
        (a, c, b), (na, nc, nb) = blk.start, blk.dims
        v, dt = self.v, self.dt
        ox, ody, odx = self._operands(blk)
        start = (a, g0 + c, b)
        loads: tuple[Transfer, ...] = (self.tensor_in(ox, "x", start), self.tensor_in(ody, "y_backprop", start))
        if kind == "dx" and blk.resident:
            loads = ()  # x and dy are still in the scratchpad from phase 1
        mean, rs, scale = _slice(fixed.mean, c, nc), _slice(fixed.rs, c, nc), _slice(fixed.scale, c, nc)
        s1, s2 = fixed.s1(c, nc), fixed.s2(c, nc)
        elems = v.lane_elems(na, nc, nb, self.lanes)
        chan = padded_lanes(nc, self.lanes) * FLOPS_CHANNEL_COEF
        count = na * nc * nb
        # The per-channel coefficients count as the math's once per channel: in the block holding the channel's
        # first element (every other block recomputes them).
        coef = nc * FLOPS_CHANNEL_COEF if a == 0 and b == 0 else 0
        if kind == "sums":
            def fn(x, dy, mean, rs, s1, s2):
                d1, d2 = partial_sums(x, dy, mean, rs)
                return s1 + d1, s2 + d2
            comp = self.compute(fn, (ox, ody, mean, rs, s1, s2), (s1, s2),
                                elems * (FLOPS_XHAT + FLOPS_SUMS + 2 * self.widen), v.reductions(nc),
                                flops=count * (FLOPS_XHAT + FLOPS_SUMS))
            return Tile(tid, loads, comp, (), slot=blk.slot)
        stores = (self.tensor_out(odx, start),)
        if kind == "both":
            def fn_both(x, dy, mean, rs, scale, s1, s2, _dt=dt):
                d1, d2 = partial_sums(x, dy, mean, rs)
                return x_backprop_infer(dy, rs, scale).astype(_dt, copy=False), s1 + d1, s2 + d2
            comp = self.compute(fn_both, (ox, ody, mean, rs, scale, s1, s2), (odx, s1, s2),
                                elems * (FLOPS_XHAT + FLOPS_SUMS + FLOPS_DX_INFER + 3 * self.widen) + chan,
                                v.reductions(nc), flops=count * (FLOPS_XHAT + FLOPS_SUMS + FLOPS_DX_INFER) + coef)
        else:
            def fn_dx(x, dy, mean, rs, scale, s1, s2, _m=v.m, _dt=dt):
                return (x_backprop_train(x, dy, mean, rs, scale, s1, s2, _m).astype(_dt, copy=False),)
            comp = self.compute(fn_dx, (ox, ody, mean, rs, scale, s1, s2), (odx,),
                                elems * (FLOPS_XHAT + FLOPS_DX_TRAIN + 3 * self.widen) + chan,
                                flops=count * FLOPS_DX_TRAIN + coef)  # x̂ was the sums pass's math
        return Tile(tid, loads, comp, stores, slot=blk.slot)

    def _sums_tiles(self, idx: int, g0: int, fixed: _Fixed, blocks: list[_Block]) -> list[Tile]:
        """Phase 1 of a core: load the group's vectors, stream its rows, publish its partial sums."""
        cg = fixed.mean.shape[0]
        prep_loads = (self.vec_in(fixed.mean, "reserve_space_1", g0), self.vec_in(fixed.rs, "reserve_space_2", g0),
                      self.vec_in(fixed.scale, "scale", g0))

        def prep(var, _eps=self.eps, _n=cg):
            return rsqrt_var(var, _eps), np.zeros((2, _n), F32)
        # The fixed area has its own slot (2), so the first row tile's loads overlap this one.
        tiles = [Tile(0, prep_loads, self.compute(prep, (fixed.rs,), (fixed.rs, fixed.sums),
                                                  padded_lanes(cg, self.lanes) * (FLOPS_CHANNEL_RS + 2),
                                                  flops=cg * FLOPS_CHANNEL_RS if idx == 0 else 0), (),
                      slot=2)]
        kind = "sums" if self.train else "both"
        for blk in blocks:
            tiles.append(self._stream_tile(len(tiles), blk, g0, fixed, kind))
        tiles.append(Tile(len(tiles), (), None, self._publish(idx, g0, fixed), slot=2))
        return tiles

    def _publish(self, idx: int, g0: int, fixed: _Fixed) -> tuple[Transfer, ...]:
        """Stores ending phase 1: the partial sums to the workspace, or (one core) the results themselves."""
        if self.parts == 1:
            return self._result_stores(g0, fixed)
        size = fixed.sums.size_bytes
        return (Transfer.contiguous(fixed.sums.addr, self.ctx.workspace_base + idx * size, size),)

    def _result_stores(self, g0: int, fixed: _Fixed) -> tuple[Transfer, ...]:
        cg = fixed.mean.shape[0]
        return (self.vec_out(fixed.s1(0, cg), "offset_backprop", g0),
                self.vec_out(fixed.s2(0, cg), "scale_backprop", g0))

    def _finish_tiles(self, idx: int, g0: int, fixed: _Fixed, blocks: list[_Block]) -> list[Tile]:
        """Phase 2 of a core: reduce the partials (every core in training, the first in inference), then x_backprop.

        Resident blocks go first: they need no loads, so the streamed blocks'
        loads overlap their compute and stores.
        """
        tiles: list[Tile] = []
        if self.parts > 1 and (self.train or idx == 0):
            part = fixed.partials
            assert part is not None  # set whenever partial sums are exchanged (parts > 1)
            load = Transfer.contiguous(self.ctx.workspace_base, part.addr, part.size_bytes)

            def reduce(p):
                return (p.sum(axis=0, dtype=F32),)
            comp = self.compute(reduce, (part,), (fixed.sums,),
                                self.parts * 2 * padded_lanes(part.shape[2], self.lanes))
            tiles.append(Tile(0, (load,), comp, self._result_stores(g0, fixed) if idx == 0 else (), slot=2))
        if self.train:
            for blk in sorted(blocks, key=lambda b: not b.resident):
                tiles.append(self._stream_tile(len(tiles), blk, g0, fixed, "dx"))
        return tiles


KERNEL = FusedBatchNormGrad()
