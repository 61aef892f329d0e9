"""TensorFlow's FakeQuantWithMinMaxVarsGradient: ``{fp,hp}_fake_quant_with_min_max_vars_gradient_{s,p}``.

``gradients`` and ``inputs`` have shape ``shape``; ``min`` and ``max`` are fp32
scalars read from memory when the kernel runs.  With the quantisation range
[qmin, qmax] = [narrow_range ? 1 : 0, 2^num_bits − 1], the bounds are nudged in
float32, step by step, as TensorFlow's ``Nudge`` does::

    scale = (max − min) / (qmax − qmin)
    zero_point_from_min = qmin − min / scale
    zero_point = clamp(round_half_away(zero_point_from_min), qmin, qmax)
    nudged_min = (qmin − zero_point) · scale,  nudged_max = (qmax − zero_point) · scale

then ``backprops_wrt_input = gradients · (nudged_min ≤ x ≤ nudged_max)``,
``backprop_wrt_min = Σ gradients where x < nudged_min`` and ``backprop_wrt_max =
Σ gradients where x > nudged_max`` (sums in fp32).  min = max = 0 passes every
gradient and gives zero min/max gradients; min > max, min = max ≠ 0 or a
non-finite bound raise KernelArgError when the values are read.

Precision: ``fp_`` symbols store and compute in fp32; ``hp_`` symbols store
gradients, inputs and backprops_wrt_input in fp16 and the four scalars in
fp32, compare and sum in fp32 (fp16 loads and stores, three conversions per
vector on the vector ALU, fp32 arithmetic; not counted as flops).

Loops: the nudge is straight-line code on one lane (:data:`NUDGE_OPS`); a data
tile is one streaming loop, per vector of fp32 lanes: gradients and inputs
loaded, two compares and a select on the vector ALU, two masked adds into the
min and max sums on the FMACs (running sums: a carried chain, unrolled into
enough accumulators), the input gradient stored; each tile ends with a
cross-lane reduction per sum.  The partials' reduction is
kernels.common.exchange's loop.

Plan: the flattened elements are split over the cores in whole vectors.  Each
core first loads min and max into its scratchpad and nudges them (that tile's
compute is where bad bounds are refused), then streams tiles of gradients and
inputs through two scratchpad slots, accumulating its two partial sums.  With
several cores the partials go to the shared staging level, a barrier follows,
and the first core loads, reduces and stores the two scalars.

Tiling (``tiling=`` of a call or run-config): ``cores`` -- how many of the
call's cores share the elements (the first ones; one core needs no exchange
and no barrier), ``tile_elements`` -- elements per tile (tried: a quarter of
a core's share in whole vectors, as much as a slot holds, an eighth of the
first).  The keys a caller leaves out the simulator's search chooses in
:meth:`FakeQuantWithMinMaxVarsGradient.tiling_space`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from kernels.base import PRECISION_DTYPES, PlanContext
from kernels.common.args import require_bool, require_int, require_ints
from kernels.common.binding import attrs_of, bind_arguments, bound_call
from kernels.common.exchange import Exchange
from kernels.common.loops import sequence, streaming
from kernels.common.scratch import Scratch, align_up, aligned_bytes
from kernels.common.streams import FIXED_SLOT, CoreStream, plan_of
from kernels.common.tiling_space import IntKey, TilingSpace, complete, pipeline_tile, split_units
from sim.errors import KernelArgError
from sim.model.call import ArgSpec, BoundCall, MemoryReader
from sim.model.plan import Compute, DoesNotFit, Operand, Phase, Plan, Tile, TileFn, Transfer

F32 = np.dtype(np.float32)
#: Masks compare the fp32 value of each element with fp32 bounds, for both symbol precisions.
COMPUTE_PRECISION = "fp32"
#: Vector element operations per element: x < nmin, x > nmax, select the input gradient (2),
#: masked accumulation of the min and max sums (2 each).
FLOPS_PER_ELEMENT = 8
#: The scalar nudge, counted as vector ops on one lane each: sub, div, sub-div, round, clamp (2), 2 × (sub, mul).
FLOPS_NUDGE = 11
#: The nudge as the core runs it on one lane, each op waiting for the one before: load min and max; max - min and
#: the multiply by 1/(qmax - qmin) (scale); 1/scale (the estimate and a Newton step of two FMAs) and qmin - min/scale
#: (zero_point_from_min); round half away and the clamp (2); (qmin - zp)·scale and (qmax - zp)·scale side by side
#: (a sub and a mul deep); store the nudged bounds and the zeroed sums.
NUDGE_OPS = ("vls", "fmac", "fmac", "valu", "fmac", "fmac", "fmac", "valu", "valu", "valu", "fmac", "fmac", "vls",
             "vls")
#: The short-tile candidate takes this fraction of the heuristic's tile.
SHORT_TILE_FRACTION = 8


# -- numerics ---------------------------------------------------------------------------------------

def _round_half_away(v: np.float32) -> float:
    """std::round of a float32 value that lies in [qmin, qmax] (non-negative): exact in float64."""
    return math.floor(float(v) + 0.5)


def nudge(min_value: float, max_value: float, num_bits: int, narrow_range: bool) -> tuple[np.float32, np.float32]:
    """(nudged_min, nudged_max) in float32, step by step as TensorFlow's Nudge; KernelArgError for bad bounds.

    min = max = 0 returns (-inf, +inf): every input passes and no gradient flows to min or max.
    """
    lo, hi = F32.type(min_value), F32.type(max_value)
    if not (np.isfinite(lo) and np.isfinite(hi)):
        raise KernelArgError(f"arguments 'min' and 'max': expected finite bounds, got min={float(lo)!r}, "
                             f"max={float(hi)!r}")
    if lo > hi or (lo == hi and lo != 0):
        raise KernelArgError(f"arguments 'min' and 'max': expected min < max (or min = max = 0), got "
                             f"min={float(lo)!r}, max={float(hi)!r}")
    if lo == hi:
        return F32.type(-np.inf), F32.type(np.inf)
    qmin = F32.type(1 if narrow_range else 0)
    qmax = F32.type((1 << num_bits) - 1)
    scale = F32.type((hi - lo) / (qmax - qmin))
    zp_from_min = F32.type(qmin - F32.type(lo / scale))
    if zp_from_min < qmin:
        zp = qmin
    elif zp_from_min > qmax:
        zp = qmax
    else:
        zp = F32.type(_round_half_away(zp_from_min))
    return F32.type(F32.type(qmin - zp) * scale), F32.type(F32.type(qmax - zp) * scale)


def masked_gradients(gradients: np.ndarray, inputs: np.ndarray, nudged_min: np.float32,
                     nudged_max: np.float32) -> tuple[np.ndarray, np.float32, np.float32]:
    """(input gradient in fp32, Σ gradients below nudged_min, Σ gradients above nudged_max) of one block."""
    g = gradients.astype(F32, copy=False)
    x = inputs.astype(F32, copy=False)
    below, above = x < nudged_min, x > nudged_max
    if np.isneginf(nudged_min) and np.isposinf(nudged_max):
        inside = np.ones(x.shape, bool)  # min = max = 0: every gradient passes, NaN inputs included
    else:  # neither below nor above nor NaN (a NaN compares false both ways): two passes, not four
        inside = (x >= nudged_min) & (x <= nudged_max)
    zero = F32.type(0)
    return (np.where(inside, g, zero), np.where(below, g, zero).sum(dtype=F32),
            np.where(above, g, zero).sum(dtype=F32))


def nudge_tile(num_bits: int, narrow_range: bool, bounds_value: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A core's first compute: the nudged bounds of ``[min, max]``, and its two sums zeroed."""
    nmin, nmax = nudge(bounds_value[0], bounds_value[1], num_bits, narrow_range)
    return np.array([nmin, nmax], F32), np.zeros(2, F32)


def masked_tile(dtype: np.dtype, g: np.ndarray, x: np.ndarray, nudged_value: np.ndarray,
                acc_value: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One data tile: the input gradient (in ``dtype``), and the core's two sums with this tile's added."""
    bp, below, above = masked_gradients(g, x, nudged_value[0], nudged_value[1])
    return bp.astype(dtype, copy=False), acc_value + np.array([below, above], F32)


def fake_quant_gradient_reference(gradients: np.ndarray, inputs: np.ndarray, min_value: float, max_value: float,
                                  num_bits: int = 8, narrow_range: bool = False
                                  ) -> tuple[np.ndarray, np.float32, np.float32]:
    """The whole op on whole arrays, as the chip computes it (input gradient in the gradients' dtype)."""
    nmin, nmax = nudge(min_value, max_value, num_bits, narrow_range)
    bp, wmin, wmax = masked_gradients(gradients, inputs, nmin, nmax)
    return bp.astype(gradients.dtype), wmin, wmax


# -- the kernel -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class FakeQuantAttrs:
    """The call's checked attributes."""

    shape: tuple[int, ...]
    num_bits: int
    narrow_range: bool

    @property
    def elements(self) -> int:
        """Elements of gradients (and of inputs)."""
        return math.prod(self.shape)


class FakeQuantWithMinMaxVarsGradient:
    """The registry entry of fake_quant_with_min_max_vars_gradient."""

    name = "fake_quant_with_min_max_vars_gradient"
    #: What an hp_ call stores in fp16 (the rest in fp32) and how it computes.
    tensors_in_precision = ("gradients", "inputs", "backprops_wrt_input")
    fp32_tensors = ("min", "max", "backprop_wrt_min", "backprop_wrt_max")
    fp16_arithmetic = ("computed in fp32 (as TensorFlow computes fake quant): gradients and inputs are loaded as "
                       "fp16 and widened on the vector ALU (the masks compare fp32 values with the fp32 nudged "
                       "bounds), the min/max sums accumulate in fp32 at the chip's fp32 lanes and "
                       "backprops_wrt_input is narrowed to fp16 before it is stored; the three conversions per vector "
                       "are vector ALU issues of the loop, not flops")
    args = (
        ArgSpec("gradients", "in_ptr", "address of the gradients (shape)"),
        ArgSpec("inputs", "in_ptr", "address of the inputs of the forward op (shape)"),
        ArgSpec("min", "in_ptr", "address of the fp32 scalar min"),
        ArgSpec("max", "in_ptr", "address of the fp32 scalar max"),
        ArgSpec("backprops_wrt_input", "out_ptr", "address of the input gradient (shape, output)"),
        ArgSpec("backprop_wrt_min", "out_ptr", "address of the fp32 scalar min gradient (output)"),
        ArgSpec("backprop_wrt_max", "out_ptr", "address of the fp32 scalar max gradient (output)"),
        ArgSpec("shape", "ints", "sizes of gradients and inputs"),
        ArgSpec("num_bits", "int", "bits of the quantisation, 2..8", 8, required=False),
        ArgSpec("narrow_range", "bool", "quantise to [1, 2^num_bits - 1] instead of [0, 2^num_bits - 1]", False,
                required=False),
    )

    def bind(self, symbol: str, precision: str, variant: str, cores: tuple[int, ...],
             args: Mapping[str, Any], read: MemoryReader) -> BoundCall:
        """Check the arguments and describe the call's buffers (min/max values are checked when the kernel runs)."""
        a = bind_arguments(symbol, precision, self.args, args)
        shape = require_ints("shape", a["shape"], minimum=1)
        attrs = FakeQuantAttrs(shape, require_int("num_bits", a["num_bits"], minimum=2, maximum=8),
                               require_bool("narrow_range", a["narrow_range"]))
        big = [a.buffer(n, shape, size_arg="shape") for n in ("gradients", "inputs", "backprops_wrt_input")]
        scalars = {n: a.buffer(n, (), F32) for n in ("min", "max", "backprop_wrt_min", "backprop_wrt_max")}
        return bound_call(a, variant, cores, (big[0], big[1], scalars["min"], scalars["max"], big[2],
                                              scalars["backprop_wrt_min"], scalars["backprop_wrt_max"]), attrs)

    def plan(self, call: BoundCall, ctx: PlanContext) -> Plan:
        """Element ranges per core (``ctx.tiling`` may set them); partial sums through the shared level."""
        return _Planner(call, ctx).build()

    def tiling_space(self, call: BoundCall, ctx: PlanContext) -> TilingSpace:
        """The keys ``cores`` and ``tile_elements``: every core, half of them, one; per number of cores, the
        heuristic's tiles (four per core), the largest a slot holds, short ones (an eighth of those).

        The largest tiles spend fewer DMA setups and compute loops; the heuristic's and the short ones leave
        less of the first load and the last store unhidden.  Half the cores exchange fewer partial sums and
        split the memory bandwidth, which bounds this op long before the vector units do, among fewer
        streams; one core (for a call that fits one tile) needs no exchange and no barrier.
        """
        return _Planner(call, ctx).space


class _Planner:
    """The vector level of a call: a fixed area (bounds, nudged bounds, sums, partials), then two slots."""

    def __init__(self, call: BoundCall, ctx: PlanContext):
        self.call, self.ctx = call, ctx
        self.attrs = attrs_of(call, FakeQuantAttrs)
        self.total = self.attrs.elements
        self.core = ctx.target.core
        self.lanes = self.core.precisions[COMPUTE_PRECISION].lanes
        self.dt = PRECISION_DTYPES[call.precision]
        self.buf = {b.name: b for b in call.buffers}
        level = ctx.vector_level
        # Room for every core's partials whatever number of cores the tiling uses: the layout stays put.
        sizes = (8, 8, 8, 8 * len(call.cores))  # bounds, nudged bounds, the two sums, the partials
        self.scratch = Scratch(level, aligned_bytes(sizes, level.alignment_bytes))
        fixed = self.scratch.fixed()
        self.bounds, self.nudged, self.acc = (fixed.operand((2,), F32) for _ in range(3))
        self.partials = fixed.operand((len(call.cores), 2), F32)
        #: Most elements of a tile (whole vectors): three tensors of it fill one slot.
        self.budget = self.scratch.elements_per_slot(3, self.dt.itemsize, self.lanes)
        if self.budget < self.lanes:
            one = self.scratch.fixed_bytes + 2 * 3 * align_up(self.lanes * self.dt.itemsize, level.alignment_bytes)
            raise DoesNotFit(level.name, one, level.size_bytes,
                             f"a tile of one vector ({self.lanes} elements) does not fit the "
                             f"{level.size_bytes}-byte {level.name} scratchpad")
        n = len(call.cores)
        # One core only when the call is one tile: no exchange and no barrier then.
        self.space = TilingSpace(
            IntKey("cores", 1, n, "how many of the call's cores share the work",
                   values=(n, n // 2) + ((1,) if n > 2 and self.total <= self.budget else ())),
            IntKey("tile_elements", 1, self.total, "elements per tile", values=self._tile_options),
            fit=self._fit, tiles=self._tiles)

    def _tile_options(self, tiling: Mapping[str, Any]) -> list[int]:
        """The tile sizes worth trying with ``tiling['cores']`` cores: the heuristic's, the largest, short ones."""
        cores = tiling["cores"]
        span = self.shares(cores)[0][2] - self.shares(cores)[0][1]
        tile = self.heuristic_tile(span)
        if cores < len(self.call.cores):  # fewer cores: the heuristic's tiles (one core: the whole call)
            return [tile if cores > 1 else self.total]
        return [tile, self.heuristic_tile(span, 1),
                min(tile, max(self.lanes, tile // SHORT_TILE_FRACTION // self.lanes * self.lanes))]

    def _fit(self, tiling: Mapping[str, Any]) -> None:
        """The space's ``fit``: a tile's three tensors fit one slot."""
        self._check_tile(tiling["tile_elements"])

    def _tiles(self, tiling: Mapping[str, Any]) -> int:
        """The space's ``tiles``: per core with work its data tiles, the nudge and the publish; the reduce."""
        per = tiling["tile_elements"]
        shares = self.shares(tiling["cores"])
        return sum(-(-(e1 - e0) // per) + 2 for _, e0, e1 in shares) + (len(shares) > 1)

    def _check_tile(self, per_tile: int) -> None:
        """DoesNotFit when tiles of ``per_tile`` elements do not fit a slot."""
        if per_tile > self.budget:
            sc = self.scratch
            raise sc.refuse(3 * align_up(per_tile * self.dt.itemsize, sc.alignment), sc.slot_bytes,
                            f"tiling tile_elements={per_tile} does not fit the "
                            f"{sc.area.size_bytes}-byte {sc.area.name} scratchpad (a tile takes at most "
                            f"{self.budget} elements: gradients, inputs and their gradient in one of two slots)")

    def shares(self, cores: int) -> list[tuple[int, int, int]]:
        """(core, first element, end element) of each of the first ``cores`` with work: whole vectors, even."""
        return [(core, e0, e1) for core, (e0, e1) in zip(self.call.cores,
                                                         split_units(self.total, self.lanes, cores))]

    def heuristic_tile(self, span: int, tiles: int | None = None) -> int:
        """Elements per tile that cut a share of ``span`` into ``tiles`` tiles (whole vectors) when it fits."""
        return min(self.total, self.budget,
                   pipeline_tile(span, self.lanes) if tiles is None else pipeline_tile(span, self.lanes, tiles))

    def build(self) -> Plan:
        """Phase 1: every core nudges, streams its share and publishes its sums; phase 2: the first core reduces."""
        tiling, call = complete(self.space, self.ctx), self.call
        per_tile = tiling["tile_elements"]
        self._check_tile(per_tile)
        shares = self.shares(tiling["cores"])
        parts = len(shares)
        exchange = Exchange.through(self.ctx, parts, 2, what="min/max partial sums") if parts > 1 else None
        first = {core: self._core_tiles(per_tile, idx, exchange, e0, e1)
                 for idx, (core, e0, e1) in enumerate(shares)}
        phases = [Phase("masked gradients", first)]
        if exchange is not None:
            phases.append(Phase("reduce", {shares[0][0]: (self._reduce_tile(exchange),)}))
        return plan_of(call, phases)

    def _scalar_stores(self) -> tuple[Transfer, ...]:
        return (Transfer.contiguous(self.acc.addr, self.buf["backprop_wrt_min"].addr, 4),
                Transfer.contiguous(self.acc.addr + 4, self.buf["backprop_wrt_max"].addr, 4))

    def _core_tiles(self, per_tile: int, idx: int, exchange: Exchange | None, e0: int, e1: int) -> tuple[Tile, ...]:
        """Nudge, stream [e0, e1) through two slots in tiles of ``per_tile`` elements, publish the partial sums."""
        dt, b, attrs = self.dt, self.buf, self.attrs

        stream = CoreStream()
        # The fixed area has its own slot, so the first data tile's loads overlap the nudge.
        # Every core nudges the bounds; the math counts one nudge (and zeroing the sums is no math).
        stream.add((Transfer.contiguous(b["min"].addr, self.bounds.addr, 4),
                    Transfer.contiguous(b["max"].addr, self.bounds.addr + 4, 4)),
                   Compute(TileFn(nudge_tile, (attrs.num_bits, attrs.narrow_range)), (self.bounds,),
                           (self.nudged, self.acc), flops=FLOPS_NUDGE if idx == 0 else 0,
                           precision=COMPUTE_PRECISION, loops=(sequence(NUDGE_OPS, label="nudge"),)),
                   (), slot=FIXED_SLOT)
        # Per vector: two compares with the nudged bounds and the select of the input gradient (the ALU), the
        # gradients added into the min and max sums under the compares' masks (FMAC adds: the two running sums,
        # carried); each tile ends with a cross-lane reduction per sum, added to the core's two sums.
        data_loop = functools.partial(streaming, self.core, COMPUTE_PRECISION, loads=2, stores=1, valu=3, fmac=2,
                                      sums=2, load_itemsize=dt.itemsize, store_itemsize=dt.itemsize,
                                      chain=("vls",) + ("valu",) * (2 + 2 * (dt != F32)) + ("vls",), reductions=2,
                                      epilogue={"vls": 2}, label="masked gradients")
        for s in range(e0, e1, per_tile):
            n = min(per_tile, e1 - s)
            slot = self.scratch.slot(stream.slot)
            og, ox, obp = (slot.operand((n,), dt) for _ in range(3))
            off = s * dt.itemsize

            stream.add((Transfer.contiguous(b["gradients"].addr + off, og.addr, og.size_bytes),
                        Transfer.contiguous(b["inputs"].addr + off, ox.addr, ox.size_bytes)),
                       Compute(TileFn(masked_tile, (dt,)), (og, ox, self.nudged, self.acc), (obp, self.acc),
                               flops=n * FLOPS_PER_ELEMENT, precision=COMPUTE_PRECISION, loops=(data_loop(n),)),
                       (Transfer.contiguous(obp.addr, b["backprops_wrt_input"].addr + off, obp.size_bytes),))
        publish = (exchange.store(idx, self.acc.addr),) if exchange is not None else self._scalar_stores()
        stream.add((), None, publish, slot=FIXED_SLOT)
        return tuple(stream.tiles)

    def _reduce_tile(self, exchange: Exchange) -> Tile:
        """The first core sums the cores' partials and stores the two scalars."""
        part = Operand(self.partials.addr, (exchange.parts, 2), F32)
        return Tile(0, (exchange.gather(part.addr),),
                    exchange.reduce(part, self.acc, COMPUTE_PRECISION), self._scalar_stores(),
                    slot=FIXED_SLOT)


KERNEL = FakeQuantWithMinMaxVarsGradient()
