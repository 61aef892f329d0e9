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
in fp32, and compute in fp32 as TensorFlow does for fp16 batch norm: the loops
load fp16 (half the bytes per load), widen each vector on the ALU, run the
arithmetic at the chip's fp32 lanes and narrow x_backprop before storing it.
Both precisions report the same flops (the math's).

Loops (what a tile's compute issues, per vector of fp32 lanes; kernels.common.loops
turns them into issues on the target's units):

* partial sums: x and dy loaded, x̂ = (x − mean)·rs (two FMAC ops), Σdy += dy
  and Σdy·x̂ += dy·x̂ (two FMAC ops into running sums: a carried chain, unrolled
  into enough independent accumulators to hide the FMAC latency, added together
  at the end);
* x_backprop (training): x and dy loaded, x̂ (2), k·(m·dy − (x̂·b + a)) (two FMAs
  and a multiply), stored; inference does the sums and dy·k in one loop;
* per-channel loops before and between them: rs = rsqrt(var + eps) (an add, the
  ALU's estimate, a Newton step), the coefficients k = scale·rs/m, a, b;
* NHWC (channels on the lanes): one loop over the block's vectors, the
  coefficients of its channel vectors held in registers (or loaded again with
  every vector when there are too many); NCHW (positions on the lanes): a loop
  per channel, each sum reduced across the lanes once per channel;
* the rows plan adds the zero-fill of the sums (stores) and the reduction of
  the cores' partials (kernels.common.exchange).

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
  x_backprop here) and stores them to the shared staging level; barrier; phase
  2: every core loads all partials, reduces them and (training) writes
  x_backprop for its rows; the first core stores scale/offset backprop.
  Channels too many for the fixed area or the shared level are done in groups,
  two phases each.

Tiling (``tiling=`` of a call or run-config, all keys optional): ``split``
(``channels`` or ``rows``), ``channel_block`` (channels per tile, channels
split), ``tile_elements`` (elements per tile, rows split).  The keys a caller
leaves out the simulator's search chooses in :meth:`BatchNormPlanning.tiling_space`.

BatchNormGrad (:mod:`kernels.batch_norm_grad`) is this kernel's NHWC case with
H = W = 1 whose caller gives rs instead of the variance: its calls bind to the
same :class:`BatchNormAttrs` and are planned here, with the same numerics and
flop table.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kernels.base import PRECISION_DTYPES, PlanContext
from kernels.common.args import require_bool, require_choice, require_float, require_ints
from kernels.common.binding import attrs_of, bind_arguments, bound_call
from kernels.common.exchange import Exchange
from kernels.common.loops import streaming, vls_issues
from kernels.common.scratch import Arena, Scratch, align_up, aligned_bytes, fits
from kernels.common.streams import FIXED_SLOT, CoreStream, plan_of
from kernels.common.tiling_space import (
    ChoiceKey,
    IntKey,
    TilingSpace,
    complete,
    largest,
    padded_lanes,
    pipeline_tile,
    split_even,
    split_units,
)
from kernels.common.transfers import operand_in, operand_out, sub_operand
from sim.errors import KernelArgError
from sim.model.call import ArgSpec, BoundCall, MemoryReader
from sim.model.plan import Compute, DoesNotFit, Loop, Operand, Phase, Plan, Tile, Transfer

F32 = np.dtype(np.float32)
FORMATS = ("NHWC", "NCHW")
#: The chip widens fp16 and accumulates in fp32 for both symbol precisions.
COMPUTE_PRECISION = "fp32"
#: The flop table (BatchNormGrad's too). Vector element operations per element of a tile (FMA = 2):
FLOPS_XHAT = 2          # (x - mean) * rs
FLOPS_SUMS = 3          # Σdy += dy; Σdy·x̂ += dy·x̂ (FMA)
FLOPS_DX_TRAIN = 4      # x̂·b + a (FMA), dy − that, · k
FLOPS_DX_INFER = 1      # dy · k
#: Per-channel vector work: rs = rsqrt(var + eps) (2; none when rs is given), k = scale·rs (1), a = Σdy/m,
#: b = Σdy·x̂/m (2).
FLOPS_CHANNEL_RS = 2
FLOPS_CHANNEL_COEF = 3
#: Fraction of the vector level the rows plan may spend on its per-channel vectors and partials.
FIXED_AREA_FRACTION = 4
#: The two plans a caller's ``tiling`` may name.
SPLITS = ("channels", "rows")


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


def rs_of(variance_or_rs: np.ndarray, epsilon: float | None) -> np.ndarray:
    """rsqrt(variance + epsilon), or the given rs itself when ``epsilon`` is None (BatchNormGrad's invar)."""
    return rsqrt_var(variance_or_rs, epsilon) if epsilon is not None else np.asarray(variance_or_rs, F32)


def batch_norm_backprop(x: np.ndarray, dy: np.ndarray, mean: np.ndarray, rs: np.ndarray, scale: np.ndarray,
                        is_training: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(x_backprop in x's dtype, Σdy·x̂, Σdy) of a whole [A, C, B] view, computed like the chip does."""
    s1, s2 = partial_sums(x, dy, mean, rs)
    if is_training:
        dx = x_backprop_train(x, dy, mean, rs, scale, s1, s2, x.shape[0] * x.shape[2])
    else:
        dx = x_backprop_infer(dy, rs, scale)
    return dx.astype(x.dtype, copy=False), s2, s1


def fused_batch_norm_grad_reference(dy: np.ndarray, x: np.ndarray, scale: np.ndarray, mean: np.ndarray,
                                    variance: np.ndarray, epsilon: float, data_format: str,
                                    is_training: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(x_backprop, scale_backprop, offset_backprop) of whole 4-D tensors, computed like the chip does."""
    v = View.of(x.shape, data_format)
    dx, s2, s1 = batch_norm_backprop(x.reshape(v.shape), dy.reshape(v.shape), mean, rsqrt_var(variance, epsilon),
                                     scale, is_training)
    return dx.reshape(x.shape), s2, s1


# -- geometry and attributes ------------------------------------------------------------------------

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


@dataclass(frozen=True)
class Tensors:
    """The buffer names of a batch-norm gradient call, by role (the two kernels name them differently)."""

    dy: str
    x: str
    scale: str
    mean: str
    variance: str  # the variance, or rs itself when the call gives it (BatchNormGrad's invar)
    dx: str
    scale_grad: str
    offset_grad: str


@dataclass(frozen=True)
class BatchNormAttrs:
    """A batch-norm gradient call as the planner sees it (FusedBatchNormGrad's, and BatchNormGrad's with
    H = W = 1 and rs given: ``epsilon`` None)."""

    view: View
    is_training: bool
    epsilon: float | None
    tensors: Tensors


FUSED_TENSORS = Tensors("y_backprop", "x", "scale", "reserve_space_1", "reserve_space_2", "x_backprop",
                        "scale_backprop", "offset_backprop")


# -- the kernel -------------------------------------------------------------------------------------

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
        if not 0 < epsilon <= float(np.finfo(F32).max) or F32.type(epsilon) <= 0:
            raise KernelArgError(f"argument 'epsilon': expected a positive number representable in fp32, "
                                 f"got {epsilon!r}")
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
    blocks = ([chans.default_block()] if by_channels else []) + [chans.widest_block()]
    total = v.a * v.c * v.b
    rows_misfit: DoesNotFit | None = None
    try:
        first_want, largest_want = _RowsPlan(call, ctx, None).tile_sizes()
        # Never longer than the default tile: a call of fewer elements than a vector has lanes has no shorter
        # tile to offer.
        sizes = [first_want, largest_want, min(first_want, max(chans.lanes, first_want // 4))]
    except DoesNotFit as e:
        rows_misfit, sizes = e, [total]  # the rows split cannot fit at all: its fit says why

    def fit(t: Mapping[str, Any]) -> None:
        if t["split"] == "channels":
            chans.check_block(t["channel_block"])
        elif rows_misfit is not None:
            raise rows_misfit

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


def _channels_by_default(call: BoundCall, ctx: PlanContext) -> bool:
    """Every core gets a whole unit (a vector of channels in NHWC) whose whole-batch tile fits."""
    p = _ChannelsPlan(call, ctx, None)
    return -(-p.v.c // p.unit) >= len(call.cores) and p.whole_batch_fits(min(p.unit, p.v.c))


# -- the plans --------------------------------------------------------------------------------------

class _PlanBase:
    """What both plans share: the call's buffers, sizes and the tile flop counts."""

    def __init__(self, call: BoundCall, ctx: PlanContext, size: int | None = None):
        attrs = attrs_of(call, BatchNormAttrs)
        self.call, self.ctx, self.v, self.names = call, ctx, attrs.view, attrs.tensors
        self.dt = PRECISION_DTYPES[call.precision]
        self.lanes = ctx.target.core.precisions[COMPUTE_PRECISION].lanes
        self.level = ctx.vector_level
        self.core = ctx.target.core
        self.align = self.level.alignment_bytes
        #: The tile size a caller's tiling names (channels per tile or elements per tile), None: the plan's own.
        self.size = size
        self.buf = {b.name: b for b in call.buffers}
        self.train = attrs.is_training
        self.eps = attrs.epsilon
        #: Per-channel rsqrt work: none when the call gives rs.
        self.rs_flops = FLOPS_CHANNEL_RS if attrs.epsilon is not None else 0
        #: What every block transfer reads: the 3-D view's shape and the big tensors' addresses.
        self.view_shape = self.v.shape
        self.tensor_addr = {role: self.addr(role) for role in ("x", "dy", "dx")}
        #: The loops stated so far, by what decides them: most tiles are full blocks and state the same ones.
        self._loop_memo: dict[tuple, Loop] = {}

    def addr(self, role: str) -> int:
        """Address of the buffer of ``role`` (a field of :class:`Tensors`)."""
        return self.buf[getattr(self.names, role)].addr

    def tensor_in(self, op: Operand, role: str, start: tuple[int, int, int]) -> Transfer:
        """DMA the block of the 3-D view of tensor ``role`` at ``start`` into ``op``."""
        return operand_in(op, self.tensor_addr[role], self.view_shape, start)

    def tensor_out(self, op: Operand, start: tuple[int, int, int]) -> Transfer:
        """DMA ``op`` out to its block of x_backprop."""
        return operand_out(op, self.tensor_addr["dx"], self.view_shape, start)

    def vec_in(self, op: Operand, role: str, c0: int) -> Transfer:
        """DMA channels [c0, c0 + n) of per-channel vector ``role`` into ``op``."""
        return operand_in(op, self.addr(role), (self.v.c,), (c0,))

    def vec_out(self, op: Operand, role: str, c0: int) -> Transfer:
        """DMA ``op`` out to channels [c0, c0 + n) of per-channel output ``role``."""
        return operand_out(op, self.addr(role), (self.v.c,), (c0,))

    def compute(self, fn: Callable, inputs: Sequence[Operand], outputs: Sequence[Operand], loops: Sequence[Loop],
                *, flops: int = 0) -> Compute:
        """A Compute in fp32 running ``loops`` (what the core issues); ``flops`` the math's own, for reports."""
        return Compute(fn, tuple(inputs), tuple(outputs), flops=int(flops),
                       precision=COMPUTE_PRECISION, loops=tuple(loops))

    # -- the loops the core runs (see the module's "Loops") -----------------------------------------

    def data_loop(self, dims: tuple[int, int, int], kind: str) -> Loop:
        """The loop over a [na, nc, nb] block's elements: ``sums`` (Σdy, Σdy·x̂), ``both`` (the sums and
        inference's x_backprop) or ``dx`` (training's x_backprop from the sums)."""
        key = ("data", dims, kind)
        loop = self._loop_memo.get(key)
        if loop is None:
            loop = self._loop_memo[key] = self._data_loop(dims, kind)
        return loop

    def _data_loop(self, dims: tuple[int, int, int], kind: str) -> Loop:
        """:meth:`data_loop`, built."""
        (na, nc, nb), core, v = dims, self.core, self.v
        sums = 0 if kind == "dx" else 2
        stores = 0 if kind == "sums" else 1
        # x̂ = (x - mean)·rs (2); the sums: Σdy += dy, Σdy·x̂ += dy·x̂ (2); inference's dx = dy·k (1);
        # training's dx = k·(m·dy - (x̂·b + a)) with a = Σdy, b = Σdy·x̂ (3: two FMAs and a multiply).
        fmac = {"sums": 4, "both": 5, "dx": 5}[kind]
        depth = {"sums": 3, "both": 3, "dx": 5}[kind]
        consts = {"sums": 2, "both": 3, "dx": 5}[kind]  # per channel: mean, rs (k; k, a, b)
        label = {"sums": "partial sums", "both": "sums and x_backprop", "dx": "x_backprop"}[kind]
        loop = functools.partial(streaming, core, COMPUTE_PRECISION, loads=2, stores=stores, fmac=fmac, sums=sums,
                                 load_itemsize=self.dt.itemsize, store_itemsize=self.dt.itemsize, fmac_depth=depth,
                                 label=label)
        if v.channels_on_lanes:
            # Channels on the lanes: one loop over the block's vectors, the per-channel coefficients held in
            # registers when they fit beside the body's, else loaded again with each vector.  The epilogue loads
            # the coefficients held, and loads, adds to and stores the sums of every channel vector.
            ncv = -(-nc // self.lanes)
            held = loop(na * ncv * self.lanes * nb, const_registers=consts * ncv,
                        epilogue={"vls": vls_issues(core, consts * ncv + 2 * sums * ncv)})
            if held.vector_registers <= core.vector_registers:
                return held
            return loop(na * ncv * self.lanes * nb, const_loads=consts,
                        epilogue={"vls": vls_issues(core, 2 * sums * ncv)} if sums else None)
        # Spatial positions on the lanes: a loop per channel over its na x nb elements (each row padded to whole
        # vectors), its coefficients broadcast from a lane once per entry, each sum reduced across the lanes and
        # added to the channel's partial at the end.
        epilogue = {"vls": 1 + bool(sums), "valu": consts}
        return loop(na * padded_lanes(nb, self.lanes), const_registers=consts, entries=nc, reductions=sums,
                    epilogue=epilogue)

    def channel_loop(self, nc: int, *, rsqrt: bool = False, loads: int = 0, fmac: int = 0, stores: int = 0,
                     label: str = "per-channel") -> Loop:
        """A loop over ``nc`` channels' fp32 vectors: ``loads`` vectors in, ``fmac`` multiply-adds and ``stores`` out
        per vector, and with ``rsqrt`` rs = rsqrt(var + eps) too (an add, the estimate on the ALU, a Newton step of
        three FMAs; one more vector in and out)."""
        key = ("channel", nc, rsqrt, loads, fmac, stores, label)
        loop = self._loop_memo.get(key)
        if loop is None:
            loop = self._loop_memo[key] = self._channel_loop(nc, rsqrt, loads, fmac, stores, label)
        return loop

    def _channel_loop(self, nc: int, rsqrt: bool, loads: int, fmac: int, stores: int, label: str) -> Loop:
        """:meth:`channel_loop`, built."""
        if rsqrt:
            loads, fmac, stores = loads + 1, fmac + 4, stores + 1
        return streaming(self.core, COMPUTE_PRECISION, padded_lanes(nc, self.lanes), loads=loads, stores=stores,
                         fmac=fmac, valu=int(rsqrt), fmac_depth=fmac and (4 if rsqrt else 1), label=label)


class _ChannelsPlan(_PlanBase):
    """Channels split over the cores; each tile a channel block over the whole batch, one phase.

    The per-channel vectors (mean, variance, scale and the two sums of the core's channels) sit after two
    tile slots that share the rest of the vector level.
    """

    def __init__(self, call: BoundCall, ctx: PlanContext, size: int | None):
        super().__init__(call, ctx, size)
        self.unit = self.lanes if self.v.channels_on_lanes else 1
        self.vectors_bytes = 5 * align_up(self.v.c * 4, self.align)
        self.slot_bytes = Scratch.slot_bytes_for(self.level, self.vectors_bytes)

    def whole_batch_fits(self, ct: int) -> bool:
        """A whole-batch tile of ``ct`` channels (x, dy and dx) fits a slot."""
        return fits([self.v.a * ct * self.v.b * self.dt.itemsize] * 3, self.slot_bytes, self.align)

    def build(self) -> Plan:
        """One phase, no barrier: the cores' channel ranges are independent.

        By default the cores split whole units (vectors of channels in NHWC) and
        cut their share into a few blocks; with a caller's ``channel_block`` the
        cores split whole blocks of that many channels.
        """
        tiles: dict[int, tuple[Tile, ...]] = {}
        if self.size is None:
            for core, (c0, c1) in zip(self.call.cores, split_units(self.v.c, self.unit, len(self.call.cores))):
                tiles[core] = self._core_tiles(c0, c1, self._block(c1 - c0))
        else:
            ct = self.size
            self.check_block(ct)
            for core, (c0, c1) in zip(self.call.cores, split_units(self.v.c, ct, len(self.call.cores))):
                tiles[core] = self._core_tiles(c0, c1, ct)
        return plan_of(self.call, [Phase("channels", tiles)])

    def check_block(self, ct: int) -> None:
        """DoesNotFit when a whole-batch tile of ``ct`` channels does not fit a slot."""
        if not self.whole_batch_fits(ct):
            raise DoesNotFit(self.level.name, 2 * 3 * align_up(self.v.a * ct * self.v.b * self.dt.itemsize,
                                                               self.align) + self.vectors_bytes,
                             self.level.size_bytes,
                             f"tiling channel_block={ct} does not fit the "
                             f"{self.level.size_bytes}-byte {self.level.name} scratchpad (a whole-batch tile of "
                             f"{self.names.x}, {self.names.dy} and {self.names.dx} takes half of what the "
                             f"per-channel vectors leave)")

    def default_block(self) -> int:
        """Channels per tile of the first core's share by default."""
        c0, c1 = split_units(self.v.c, self.unit, len(self.call.cores))[0]
        return self._block(c1 - c0)

    def widest_block(self) -> int:
        """The most channels (<= a core's even share; whole vectors when at least one) whose whole batch fits."""
        lo = largest(-(-self.v.c // len(self.call.cores)), self.whole_batch_fits)
        return lo // self.lanes * self.lanes if self.v.channels_on_lanes and lo >= self.lanes else lo

    def _block(self, span: int) -> int:
        """Channels per tile: whole units, fits a slot, a few tiles per core when possible."""
        unit = self.unit
        want = min(span, pipeline_tile(span, unit))
        while want > unit and not self.whole_batch_fits(want):
            want = max(unit, (want // 2) // unit * unit)
        return min(want, span)

    def _core_tiles(self, c0: int, c1: int, ct: int) -> tuple[Tile, ...]:
        """The core's channel blocks; its per-channel vectors are loaded with the first, stored with the last."""
        v, dt = self.v, self.dt
        scratch = Scratch(self.level, self.vectors_bytes, slot_bytes=self.slot_bytes, fixed_last=True)
        fixed = scratch.fixed()
        vm, vvar, vsc, vsb, vob = (fixed.operand((c1 - c0,), F32) for _ in range(5))
        vec_loads = (self.vec_in(vm, "mean", c0), self.vec_in(vvar, "variance", c0), self.vec_in(vsc, "scale", c0))
        vec_stores = (self.vec_out(vsb, "scale_grad", c0), self.vec_out(vob, "offset_grad", c0))
        dx_flops = FLOPS_DX_TRAIN if self.train else FLOPS_DX_INFER
        chan_flops = self.rs_flops + FLOPS_CHANNEL_COEF
        stream = CoreStream()
        starts = range(c0, c1, ct)
        for i, start in enumerate(starts):
            n = min(ct, c1 - start)
            slot = scratch.slot(stream.slot)
            ox, ody, odx = (slot.operand((v.a, n, v.b), dt) for _ in range(3))
            om, ovar, osc, osb, oob = (sub_operand(op, start - c0, n) for op in (vm, vvar, vsc, vsb, vob))
            loads: tuple[Transfer, ...] = (self.tensor_in(ox, "x", (0, start, 0)),
                                           self.tensor_in(ody, "dy", (0, start, 0)))
            stores: tuple[Transfer, ...] = (self.tensor_out(odx, (0, start, 0)),)
            if i == 0:
                loads += vec_loads
            if i == len(starts) - 1:
                stores += vec_stores  # every block's sums are in place once the last block has computed

            def fn(x, dy, mean, var, scale, _eps=self.eps, _train=self.train):
                return batch_norm_backprop(x, dy, mean, rs_of(var, _eps), scale, _train)

            # rs (from the variance) and the coefficients per channel, the sums, then (training) a, b, k from
            # the sums and x_backprop: inference computes k with rs and x_backprop with the sums.
            dims = (v.a, n, v.b)
            if self.train:
                loops = ((self.channel_loop(n, rsqrt=True, label="rs"),) if self.eps is not None else ()) + (
                    self.data_loop(dims, "sums"), self.channel_loop(n, loads=4, fmac=3, stores=3, label="coefficients"),
                    self.data_loop(dims, "dx"))
            else:
                loops = (self.channel_loop(n, rsqrt=self.eps is not None, loads=2, fmac=1, stores=1,
                                           label="rs, coefficients"), self.data_loop(dims, "both"))
            per_elem = FLOPS_XHAT + FLOPS_SUMS + dx_flops
            stream.add(loads, self.compute(fn, (ox, ody, om, ovar, osc), (odx, osb, oob), loops,
                                           flops=v.a * n * v.b * per_elem + n * chan_flops), stores)
        return tuple(stream.tiles)


@dataclass
class _Fixed:
    """The rows plan's per-channel vectors of one channel group, at fixed addresses of the vector level."""

    mean: Operand
    rs: Operand      # loaded as the variance, turned into rsqrt(var + eps) in place (or loaded as rs)
    scale: Operand
    sums: Operand    # [2, Cg]: Σdy, Σdy·x̂
    partials: Operand | None  # [P, 2, Cg]: every participating core's sums, gathered from the shared level
    _slices: dict[tuple[int, int], tuple[Operand, Operand, Operand, Operand, Operand]] = field(
        default_factory=dict, repr=False, compare=False)
    #: The computes of the group's blocks, by what decides them (:meth:`_RowsPlan._block_compute`).
    computes: dict[tuple, Compute] = field(default_factory=dict, repr=False, compare=False)

    def channels(self, c0: int, n: int) -> tuple[Operand, Operand, Operand, Operand, Operand]:
        """(mean, rs, scale, Σdy, Σdy·x̂) of channels [c0, c0 + n) of the group: the same operands for every
        block of the same channels, so made once."""
        got = self._slices.get((c0, n))
        if got is None:
            got = self._slices[(c0, n)] = (sub_operand(self.mean, c0, n), sub_operand(self.rs, c0, n),
                                           sub_operand(self.scale, c0, n), self.s1(c0, n), self.s2(c0, n))
        return got

    def s1(self, c0: int, n: int) -> Operand:
        """Σdy of channels [c0, c0 + n) of the group."""
        return Operand(self.sums.addr + c0 * 4, (n,), F32)

    def s2(self, c0: int, n: int) -> Operand:
        """Σdy·x̂ of channels [c0, c0 + n) of the group."""
        return Operand(self.sums.addr + (self.sums.shape[1] + c0) * 4, (n,), F32)


@dataclass(frozen=True)
class _Block:
    """One tile's block of a core's rows, ``start`` + ``dims`` in the [A, Cg, B] view of a channel group.

    ``addr`` is where its x and dy sit in the vector level and ``slot`` the engine's buffer-set key:
    streamed blocks share the two slots (0, 1); resident blocks (training) have their own area, so
    phase 2 finds x and dy still there and writes x_backprop over dy.
    """

    start: tuple[int, int, int]
    dims: tuple[int, int, int]
    addr: int
    slot: int
    resident: bool


@dataclass(frozen=True)
class _GroupLayout:
    """Where a channel group [g0, g1) of the rows plan lives: its fixed area, the exchange of its partial sums
    (None on one core) and each participating core's blocks (in the order of the plan's shares)."""

    g0: int
    g1: int
    fixed: _Fixed
    exchange: Exchange | None
    blocks: list[list[_Block]]


class _RowsPlan(_PlanBase):
    """Rows split over the cores; per channel group a partial-sums phase and a finishing phase."""

    def build(self) -> Plan:
        """Phases per channel group: sums (+ inference x_backprop), barrier, reduce (+ training x_backprop)."""
        phases: list[Phase] = []
        for layout in self._layouts():
            phases += self._group_phases(layout)
        return plan_of(self.call, phases)

    def tile_sizes(self) -> tuple[int, int]:
        """(the first core's tile elements, the most its tiles could take) of the default plan, for
        :meth:`BatchNormPlanning.tiling_space`: every group laid out as :meth:`build` lays it out (refusing with the
        same DoesNotFit), without making the tiles, which only read the layout."""
        for _ in self._layouts():
            pass
        assert self.first_want is not None and self.largest_want is not None  # the first group's blocks set them
        return self.first_want, self.largest_want

    def _layouts(self) -> Iterator[_GroupLayout]:
        """The channel groups laid out one after the other (a group's layout is made when the one before is done)."""
        self.first_want: int | None = None
        self.largest_want: int | None = None
        self._operand_memo: dict[tuple, tuple[Operand, Operand, Operand]] = {}
        self.shares = self._shares()
        self.parts = len(self.shares)
        group = self._group_size()
        for g0 in range(0, self.v.c, group):
            yield self._group_layout(g0, min(self.v.c, g0 + group))

    def _shares(self) -> list[tuple[int, tuple[int, int], tuple[int, int]]]:
        """(core, (a0, a1), (b0, b1)) per participating core: A split, or B in whole vectors if that balances better."""
        v, n = self.v, len(self.call.cores)
        by_a = [((a0, a1), (0, v.b)) for a0, a1 in split_even(v.a, n)]
        by_b = [((0, v.a), br) for br in split_units(v.b, 1 if v.channels_on_lanes else self.lanes, n)]

        def worst(shares: list) -> int:
            return max((a1 - a0) * (b1 - b0) for (a0, a1), (b0, b1) in shares)

        chosen = by_a if worst(by_a) <= worst(by_b) else by_b
        return [(core, ab[0], ab[1]) for core, ab in zip(self.call.cores, chosen)]

    def _group_size(self) -> int:
        """Channels per group: what the fixed area (<= 1/FIXED_AREA_FRACTION of the vector level) and the shared
        level allow."""
        parts, lanes, level = self.parts, self.lanes, self.level
        per_channel = 4 * (5 + (2 * parts if parts > 1 else 0))
        least = min(lanes, self.v.c)  # a group of fewer channels would leave vector lanes empty
        group = (level.size_bytes // FIXED_AREA_FRACTION - 8 * self.align) // per_channel
        if group < least:
            needed, room = per_channel * least + 8 * self.align, level.size_bytes // FIXED_AREA_FRACTION
            raise DoesNotFit(level.name, needed, room,
                             f"the per-channel vectors and sums of {least} channels for {parts} "
                             f"cores do not fit a quarter of the {level.size_bytes}-byte {level.name} scratchpad: "
                             f"need {needed} bytes of {room}")
        if parts > 1:
            shared = Exchange.share_bytes(self.ctx, parts, 1) // 8  # channels whose two sums fit each core's share
            if shared < least:  # the DoesNotFit naming the shared level
                Exchange.through(self.ctx, parts, 2 * least, what="per-channel partial sums")
            group = min(group, shared)
        if group >= self.v.c:
            return self.v.c
        return group // lanes * lanes

    def _group_layout(self, g0: int, g1: int) -> _GroupLayout:
        """Channels [g0, g1): the fixed area, the exchange of the partial sums and each core's blocks."""
        cg, parts = g1 - g0, self.parts
        vectors = [cg * 4] * 3 + [2 * cg * 4] + ([parts * 2 * cg * 4] if parts > 1 else [])
        scratch = Scratch(self.level, aligned_bytes(vectors, self.align), slots=0)
        area = scratch.fixed()
        fixed = _Fixed(area.operand((cg,), F32), area.operand((cg,), F32), area.operand((cg,), F32),
                       area.operand((2, cg), F32), area.operand((parts, 2, cg), F32) if parts > 1 else None)
        exchange = Exchange.through(self.ctx, parts, 2 * cg, what="per-channel partial sums") if parts > 1 else None
        blocks = [self._blocks(scratch, ar, cg, br) for _, ar, br in self.shares]
        return _GroupLayout(g0, g1, fixed, exchange, blocks)

    def _group_phases(self, layout: _GroupLayout) -> list[Phase]:
        g0, g1, fixed, exchange = layout.g0, layout.g1, layout.fixed, layout.exchange
        first: dict[int, tuple[Tile, ...]] = {}
        second: dict[int, tuple[Tile, ...]] = {}
        for idx, ((core, _, _), blocks) in enumerate(zip(self.shares, layout.blocks)):
            first[core] = self._sums_tiles(idx, g0, fixed, blocks, exchange)
            second[core] = self._finish_tiles(idx, g0, fixed, blocks, exchange)
        name = f"c{g0}-{g1}"
        return [Phase(f"partial sums {name}", first),
                Phase(f"reduce {name}", {k: t for k, t in second.items() if t})]

    # -- where the blocks live -------------------------------------------------------------------

    def _cut(self, ar: tuple[int, int], cg: int, br: tuple[int, int], budget: int) -> list[tuple]:
        """The share [a0, a1) x [0, cg) x [b0, b1) cut into (start, dims) blocks of at most ``budget`` elements.

        The tile size is the caller's ``tile_elements`` or the heuristic's.
        """
        (a0, a1), (b0, b1) = ar, br
        na, nb = a1 - a0, b1 - b0
        # By default a few tiles per core (pipeline_tile), at least a vector's worth, at most what fits.
        want = min(budget, max(self.lanes, pipeline_tile(na * cg * nb))) if self.size is None else self.size
        elems = na * cg * nb
        self._last_cut = (min(want, elems), min(budget, elems))
        ta, tc, tb = self._tile_dims(na, cg, nb, budget, want)
        return [((a, c, b), (min(ta, a1 - a), min(tc, cg - c), min(tb, b1 - b)))
                for a in range(a0, a1, ta) for c in range(0, cg, tc) for b in range(b0, b1, tb)]

    def _tile_dims(self, na: int, nc: int, nb: int, budget: int, want: int) -> tuple[int, int, int]:
        """A [ta, tc, tb] tile of at most ``want`` (<= ``budget``) elements of a [na, nc, nb] share, filled from
        the inside; the lane axis is cut in whole vectors."""
        v, lanes = self.v, self.lanes
        if nb <= want:
            tb = nb
        else:
            tb = min(nb, max(lanes, want // lanes * lanes) if not v.channels_on_lanes else want)
        tc = min(nc, max(1, want // tb))
        if v.channels_on_lanes and tc < nc:
            tc = min(nc, max(lanes, tc // lanes * lanes))
        ta = min(na, max(1, want // (tc * tb)))
        if ta * tc * tb > budget:
            raise DoesNotFit(self.level.name, ta * tc * tb * self.dt.itemsize, budget * self.dt.itemsize,
                             f"a tile of {tc} channels x {tb} positions does not fit the "
                             f"{self.level.name} scratchpad ({budget} elements per tensor available)")
        return ta, tc, tb

    def _remember_cut(self) -> None:
        """Keep the first share's tile size and the largest it could take, for
        :meth:`BatchNormPlanning.tiling_space`."""
        if self.first_want is None:
            self.first_want, self.largest_want = self._last_cut

    def _bytes(self, dims: tuple[int, int, int]) -> int:
        return align_up(dims[0] * dims[1] * dims[2] * self.dt.itemsize, self.align)

    def _blocks(self, scratch: Scratch, ar: tuple[int, int], cg: int, br: tuple[int, int]) -> list[_Block]:
        """The core's blocks in phase-1 order, each streamed through the two slots or resident.

        Training reads x and dy twice (sums, then x_backprop); blocks that stay in
        the vector level between the phases are read once.  When the whole share
        fits (x and dy), every block is resident; otherwise two slots take a third
        of the free space and as many trailing blocks as fit stay resident.
        Inference reads everything once and streams through two halves.
        """
        align, free, item = self.align, scratch.spare_bytes, self.dt.itemsize
        resident_budget = max(0, free // 2 - 2 * align) // (2 * item)
        if self.train and (self.size is None or self.size <= resident_budget):
            blocks = self._cut(ar, cg, br, resident_budget)
            if sum(2 * self._bytes(d) for _, d in blocks) <= free:
                self._remember_cut()
                spare = scratch.spare()
                return [_Block(start, dims, spare.alloc(2 * self._bytes(dims)), 3 + j, True)
                        for j, (start, dims) in enumerate(blocks)]
        half = (free // 6 if self.train else free // 2) // align * align
        slots = Scratch(self.level, scratch.fixed_bytes, slots=2, slot_bytes=half)
        budget = slots.elements_per_slot(3, item)
        if self.size is not None and self.size > budget:
            raise slots.refuse(3 * align_up(self.size * item, align), half,
                               f"tiling tile_elements={self.size} does not fit the "
                               f"{self.level.size_bytes}-byte {self.level.name} scratchpad (at most {budget} "
                               f"elements per tensor in a streamed tile)")
        blocks = self._cut(ar, cg, br, budget)
        self._remember_cut()
        stay = 0
        if self.train:
            room = slots.spare_bytes
            for _, dims in reversed(blocks):
                if room < 2 * self._bytes(dims):
                    break
                room -= 2 * self._bytes(dims)
                stay += 1
        spare = slots.spare()
        return [_Block(start, dims, slots.slot_addr(j), j % 2, False) if j < len(blocks) - stay
                else _Block(start, dims, spare.alloc(2 * self._bytes(dims)), 3 + j, True)
                for j, (start, dims) in enumerate(blocks)]

    # -- tiles ----------------------------------------------------------------------------------

    def _operands(self, blk: _Block) -> tuple[Operand, Operand, Operand]:
        """x, dy and x_backprop of a block; a resident block writes x_backprop over its dy.  Streamed blocks of
        the same size in the same slot get the same operands: made once."""
        key = (blk.addr, blk.dims, blk.resident)
        ops = self._operand_memo.get(key)
        if ops is None:
            arena = Arena(blk.addr, 3 * self._bytes(blk.dims), self.align, resource=self.level.name)
            ox, ody = arena.operand(blk.dims, self.dt), arena.operand(blk.dims, self.dt)
            ops = self._operand_memo[key] = (ox, ody, (ody if blk.resident else arena.operand(blk.dims, self.dt)))
        return ops

    def _stream_tile(self, stream: CoreStream, blk: _Block, g0: int, fixed: _Fixed, kind: str) -> None:
        """One block of rows: 'sums' (training phase 1), 'both' (inference phase 1) or 'dx' (training phase 2)."""
        (a, c, b), nc = blk.start, blk.dims[1]
        ox, ody, odx = self._operands(blk)
        start = (a, g0 + c, b)
        loads: tuple[Transfer, ...] = (self.tensor_in(ox, "x", start), self.tensor_in(ody, "dy", start))
        if kind == "dx" and blk.resident:
            loads = ()  # x and dy are still in the vector level from phase 1
        # The per-channel coefficients count as the math's once per channel: in the block holding the channel's
        # first element (every other block recomputes them).
        coef = nc * FLOPS_CHANNEL_COEF if a == 0 and b == 0 else 0
        comp = self._block_compute(blk, fixed, kind, coef)
        stores = () if kind == "sums" else (self.tensor_out(odx, start),)
        stream.add(loads, comp, stores, slot=blk.slot)

    def _block_compute(self, blk: _Block, fixed: _Fixed, kind: str, coef: int) -> Compute:
        """The compute of a block (see :meth:`_stream_tile`) with ``coef`` flops of per-channel coefficients.

        It reads nothing but the block's operands, its channels in the group's fixed area, its size and
        ``coef``: blocks that agree on them (a stream's full blocks in the same slot) share one Compute, which
        the plan check judges and the engine prices once.
        """
        key = (kind, blk.addr, blk.dims, blk.resident, blk.start[1], coef)
        comp = fixed.computes.get(key)
        if comp is None:
            comp = fixed.computes[key] = self._new_block_compute(blk, fixed, kind, coef)
        return comp

    def _new_block_compute(self, blk: _Block, fixed: _Fixed, kind: str, coef: int) -> Compute:
        """:meth:`_block_compute`, made."""
        c, (na, nc, nb) = blk.start[1], blk.dims
        v, dt = self.v, self.dt
        ox, ody, odx = self._operands(blk)
        mean, rs, scale, s1, s2 = fixed.channels(c, nc)
        count = na * nc * nb
        dims = (na, nc, nb)
        if kind == "sums":
            def fn(x, dy, mean, rs, s1, s2):
                d1, d2 = partial_sums(x, dy, mean, rs)
                return s1 + d1, s2 + d2
            return self.compute(fn, (ox, ody, mean, rs, s1, s2), (s1, s2), (self.data_loop(dims, "sums"),),
                                flops=count * (FLOPS_XHAT + FLOPS_SUMS))
        if kind == "both":
            def fn_both(x, dy, mean, rs, scale, s1, s2, _dt=dt):
                d1, d2 = partial_sums(x, dy, mean, rs)
                return x_backprop_infer(dy, rs, scale).astype(_dt, copy=False), s1 + d1, s2 + d2
            loops = (self.channel_loop(nc, loads=2, fmac=1, stores=1, label="coefficients"),
                     self.data_loop(dims, "both"))
            return self.compute(fn_both, (ox, ody, mean, rs, scale, s1, s2), (odx, s1, s2), loops,
                                flops=count * (FLOPS_XHAT + FLOPS_SUMS + FLOPS_DX_INFER) + coef)

        def fn_dx(x, dy, mean, rs, scale, s1, s2, _m=v.m, _dt=dt):
            return (x_backprop_train(x, dy, mean, rs, scale, s1, s2, _m).astype(_dt, copy=False),)
        loops = (self.channel_loop(nc, loads=4, fmac=3, stores=3, label="coefficients"), self.data_loop(dims, "dx"))
        return self.compute(fn_dx, (ox, ody, mean, rs, scale, s1, s2), (odx,), loops,
                            flops=count * FLOPS_DX_TRAIN + coef)  # x̂ was the sums pass's math

    def _sums_tiles(self, idx: int, g0: int, fixed: _Fixed, blocks: list[_Block],
                    exchange: Exchange | None) -> tuple[Tile, ...]:
        """Phase 1 of a core: load the group's vectors, stream its rows, publish its partial sums."""
        cg = fixed.mean.shape[0]
        stream = CoreStream()

        def prep(var, _eps=self.eps, _n=cg):
            return rs_of(var, _eps), np.zeros((2, _n), F32)
        # The fixed area has its own slot, so the first row tile's loads overlap this one.
        stream.add((self.vec_in(fixed.mean, "mean", g0), self.vec_in(fixed.rs, "variance", g0),
                    self.vec_in(fixed.scale, "scale", g0)),
                   self.compute(prep, (fixed.rs,), (fixed.rs, fixed.sums),
                                (self.channel_loop(cg, rsqrt=self.eps is not None, stores=2, label="rs, zero sums"),),
                                flops=cg * self.rs_flops if idx == 0 else 0), (), slot=FIXED_SLOT)
        for blk in blocks:
            self._stream_tile(stream, blk, g0, fixed, "sums" if self.train else "both")
        # Phase 1 ends with the partial sums in the shared level, or (one core) the results themselves.
        publish = (exchange.store(idx, fixed.sums.addr),) if exchange is not None else self._result_stores(g0, fixed)
        stream.add((), None, publish, slot=FIXED_SLOT)
        return tuple(stream.tiles)

    def _result_stores(self, g0: int, fixed: _Fixed) -> tuple[Transfer, ...]:
        cg = fixed.mean.shape[0]
        return (self.vec_out(fixed.s1(0, cg), "offset_grad", g0), self.vec_out(fixed.s2(0, cg), "scale_grad", g0))

    def _finish_tiles(self, idx: int, g0: int, fixed: _Fixed, blocks: list[_Block],
                      exchange: Exchange | None) -> tuple[Tile, ...]:
        """Phase 2 of a core: reduce the partials (every core in training, the first in inference), then x_backprop.

        Resident blocks go first: they need no loads, so the streamed blocks'
        loads overlap their compute and stores.
        """
        stream = CoreStream()
        if exchange is not None and (self.train or idx == 0):
            part = fixed.partials
            assert part is not None  # set whenever partial sums are exchanged (parts > 1)
            stream.add((exchange.gather_into(part),),
                       exchange.reduce(part, fixed.sums, COMPUTE_PRECISION),
                       self._result_stores(g0, fixed) if idx == 0 else (), slot=FIXED_SLOT)
        if self.train:
            for blk in sorted(blocks, key=lambda b: not b.resident):
                self._stream_tile(stream, blk, g0, fixed, "dx")
        return tuple(stream.tiles)


KERNEL = FusedBatchNormGrad()
