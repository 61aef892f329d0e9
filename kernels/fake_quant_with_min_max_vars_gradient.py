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
fp32, compare and sum in fp32 (three conversions per element, priced in
cycles as extra vector ops, not counted as flops).

Plan: the flattened elements are split over the cores in whole vectors.  Each
core first loads min and max into its scratchpad and nudges them (that tile's
compute is where bad bounds are refused), then streams tiles of gradients and
inputs through two scratchpad slots, accumulating its two partial sums.  With
several cores the partials go to the shared workspace, a barrier follows, and
the first core loads, reduces and stores the two scalars.

Tiling (``tiling=`` of a call or run-config): ``cores`` -- how many of the
call's cores share the elements (the first ones; one core needs no exchange
and no barrier), ``tile_elements`` -- elements per tile (default: a quarter of
a core's share in whole vectors, as much as a slot holds at most).  Without
one, the simulator compares the candidates :meth:`tilings` lists.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from kernels.base import PRECISION_DTYPES, PlanContext
from kernels.common.args import (
    check_args,
    require_address,
    require_bool,
    require_int,
    require_ints,
)
from kernels.tiling import Arena, align_up, padded_lanes, split_even
from kernels.tiling_keys import int_key, tiling_keys, unique
from sim.errors import KernelArgError, LayoutError
from sim.model.call import ArgSpec, BoundCall, Buffer, MemoryReader
from sim.model.plan import Compute, Operand, Phase, Plan, Tile, Transfer

F32 = np.dtype(np.float32)
#: Masks compare the fp32 value of each element with fp32 bounds, for both symbol precisions.
COMPUTE_PRECISION = "fp32"
NUM_BITS_RANGE = (2, 8)
#: Vector element operations per element: x < nmin, x > nmax, select the input gradient (2),
#: masked accumulation of the min and max sums (2 each).
FLOPS_PER_ELEMENT = 8
#: fp16 <-> fp32 conversions per element of an hp_ call: two tensors in, one out.
FLOPS_WIDEN = 3
#: The scalar nudge, counted as vector ops on one lane each: sub, div, sub-div, round, clamp (2), 2 × (sub, mul).
FLOPS_NUDGE = 11
#: A core's share is cut into at least this many tiles when it is large enough (pipeline depth).
MIN_TILES_PER_CORE = 4
#: The short-tile candidate takes this fraction of the heuristic's tile.
SHORT_TILE_FRACTION = 8
#: The keys of a caller's ``tiling``: cores sharing the elements, elements per tile.
TILING_KEYS = ("cores", "tile_elements")


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
    else:
        inside = ~(below | above) & ~np.isnan(x)
    zero = F32.type(0)
    return (np.where(inside, g, zero), np.where(below, g, zero).sum(dtype=F32),
            np.where(above, g, zero).sum(dtype=F32))


def fake_quant_gradient_reference(gradients: np.ndarray, inputs: np.ndarray, min_value: float, max_value: float,
                                  num_bits: int = 8, narrow_range: bool = False
                                  ) -> tuple[np.ndarray, np.float32, np.float32]:
    """The whole op on whole arrays, as the chip computes it (input gradient in the gradients' dtype)."""
    nmin, nmax = nudge(min_value, max_value, num_bits, narrow_range)
    bp, wmin, wmax = masked_gradients(gradients, inputs, nmin, nmax)
    return bp.astype(gradients.dtype), wmin, wmax


# -- the kernel -------------------------------------------------------------------------------------

class FakeQuantWithMinMaxVarsGradient:
    """The registry entry of fake_quant_with_min_max_vars_gradient."""

    name = "fake_quant_with_min_max_vars_gradient"
    #: What an hp_ call stores in fp16 (the rest in fp32) and how it computes.
    tensors_in_precision = ("gradients", "inputs", "backprops_wrt_input")
    fp32_tensors = ("min", "max", "backprop_wrt_min", "backprop_wrt_max")
    fp16_arithmetic = ("computed in fp32 at the chip's fp32 vector rate: gradients and inputs are widened (the masks "
                       "compare fp32 values with the fp32 nudged bounds), the min/max sums accumulate in fp32 and "
                       "backprops_wrt_input is rounded to fp16 as it is stored; the three conversions per element are "
                       "priced as extra vector ops, not flops")
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
        a = check_args(symbol, self.args, args)
        ptr = {s.name: require_address(s.name, a[s.name]) for s in self.args if s.kind in ("in_ptr", "out_ptr")}
        shape = require_ints("shape", a["shape"], minimum=1)
        num_bits = require_int("num_bits", a["num_bits"])
        if not NUM_BITS_RANGE[0] <= num_bits <= NUM_BITS_RANGE[1]:
            raise KernelArgError(f"argument 'num_bits': expected an integer in {NUM_BITS_RANGE[0]}.."
                                 f"{NUM_BITS_RANGE[1]}, got {num_bits}")
        narrow_range = require_bool("narrow_range", a["narrow_range"])
        dt = PRECISION_DTYPES[precision]
        elems = math.prod(shape)
        if elems * dt.itemsize > 1 << 40:
            raise KernelArgError(f"argument 'shape': {list(shape)} is {elems} elements, more than any chip's "
                                 f"memory")
        buffers = (
            Buffer("gradients", ptr["gradients"], shape, dt, "input"),
            Buffer("inputs", ptr["inputs"], shape, dt, "input"),
            Buffer("min", ptr["min"], (), F32, "input"),
            Buffer("max", ptr["max"], (), F32, "input"),
            Buffer("backprops_wrt_input", ptr["backprops_wrt_input"], shape, dt, "output"),
            Buffer("backprop_wrt_min", ptr["backprop_wrt_min"], (), F32, "output"),
            Buffer("backprop_wrt_max", ptr["backprop_wrt_max"], (), F32, "output"),
        )
        return BoundCall(symbol, precision, variant, cores, buffers,
                         {"shape": shape, "num_bits": num_bits, "narrow_range": narrow_range, "elements": elems})

    # -- planning -----------------------------------------------------------------------------------

    def plan(self, call: BoundCall, ctx: PlanContext) -> Plan:
        """Element ranges per core (``ctx.tiling`` may set them); partial sums through the workspace."""
        lay = _Layout(call, ctx)
        tiling = tiling_keys(ctx, TILING_KEYS)
        n_cores = int_key(tiling, "cores", 1, len(call.cores)) or len(call.cores)
        per_tile = int_key(tiling, "tile_elements", 1, call.attrs["elements"])
        if per_tile is not None and per_tile > lay.budget:
            raise LayoutError(f"{call.symbol}: tiling tile_elements={per_tile} does not fit the "
                              f"{ctx.scratch_size_bytes}-byte scratchpad (a tile takes at most {lay.budget} "
                              f"elements: gradients, inputs and their gradient in one of two slots)")
        shares = lay.shares(call.cores[:n_cores])
        parts = len(shares)
        if parts > 1 and parts * 8 > ctx.workspace_size_bytes:
            raise LayoutError(f"{call.symbol}: the workspace cannot hold the partial sums of {parts} cores")
        first: dict[int, tuple[Tile, ...]] = {}
        for idx, (core, e0, e1) in enumerate(shares):
            tile = per_tile if per_tile is not None else lay.heuristic_tile(e1 - e0)
            first[core] = tuple(self._core_tiles(call, ctx, lay, tile, idx, parts, e0, e1))
        phases = [Phase("masked gradients", first, barrier_after=parts > 1)]
        if parts > 1:
            phases.append(Phase("reduce", {shares[0][0]: (self._reduce_tile(ctx, lay, parts),)},
                                barrier_after=False))
        return Plan(cores=call.cores, phases=tuple(phases), precision=call.precision)

    def tilings(self, call: BoundCall, ctx: PlanContext) -> list[dict[str, Any]]:
        """Candidates: every core with the heuristic's tiles, the largest, short ones; half the cores; one core.

        The largest tiles spend fewer DMA setups and compute loops; the
        heuristic's (four per core) and the short ones (an eighth of those)
        leave less of the first load and the last store unhidden.
        Half the cores exchange fewer partial sums and split the memory
        bandwidth, which bounds this op long before the vector units do, among
        fewer streams; one core (for a call that fits one tile) needs no
        exchange and no barrier.
        """
        try:
            lay = _Layout(call, ctx)
        except LayoutError:
            return []  # nothing fits: planning says why
        n = len(call.cores)
        span = lay.shares(call.cores)[0][2]
        tile = lay.heuristic_tile(span)
        short = min(tile, max(lay.lanes, tile // SHORT_TILE_FRACTION // lay.lanes * lay.lanes))
        out = [{"cores": n, "tile_elements": tile}, {"cores": n, "tile_elements": lay.heuristic_tile(span, 1)},
               {"cores": n, "tile_elements": short}]
        if n > 1:
            half = lay.shares(call.cores[:n // 2])[0][2]
            out.append({"cores": n // 2, "tile_elements": lay.heuristic_tile(half)})
        if n > 2 and lay.total <= lay.budget:
            out.append({"cores": 1, "tile_elements": lay.total})
        return unique(out)

    @staticmethod
    def _scalar_stores(b: Mapping[str, Buffer], acc: Operand) -> tuple[Transfer, ...]:
        return (Transfer.contiguous(acc.addr, b["backprop_wrt_min"].addr, 4),
                Transfer.contiguous(acc.addr + 4, b["backprop_wrt_max"].addr, 4))

    def _core_tiles(self, call: BoundCall, ctx: PlanContext, lay: _Layout, per_tile: int, idx: int, parts: int,
                    e0: int, e1: int) -> list[Tile]:
        """Nudge, stream [e0, e1) through two slots in tiles of ``per_tile`` elements, publish the partial sums."""
        dt, lanes, b = lay.dt, lay.lanes, lay.buf
        bounds, nudged, acc = lay.fixed["bounds"], lay.fixed["nudged"], lay.fixed["acc"]
        num_bits, narrow = call.attrs["num_bits"], call.attrs["narrow_range"]

        def prep(bounds_value, _bits=num_bits, _narrow=narrow):
            nmin, nmax = nudge(bounds_value[0], bounds_value[1], _bits, _narrow)
            return np.array([nmin, nmax], F32), np.zeros(2, F32)

        loads = (Transfer.contiguous(b["min"].addr, bounds.addr, 4),
                 Transfer.contiguous(b["max"].addr, bounds.addr + 4, 4))
        # The fixed area has its own slot (2), so the first data tile's loads overlap the nudge.
        # Every core nudges the bounds; the math counts one nudge (and zeroing the sums is no math).
        tiles = [Tile(0, loads, Compute(prep, (bounds,), (nudged, acc), flops=FLOPS_NUDGE if idx == 0 else 0,
                                        reductions=0, precision=COMPUTE_PRECISION,
                                        extra_ops=2 + (0 if idx == 0 else FLOPS_NUDGE)), (), slot=2)]
        widen = FLOPS_WIDEN if dt != F32 else 0
        for s in range(e0, e1, per_tile):
            n = min(per_tile, e1 - s)
            tid = len(tiles)
            arena = Arena(lay.slots[tid % 2], lay.half, ctx.alignment_bytes)
            og, ox, obp = (arena.operand((n,), dt) for _ in range(3))
            off = s * dt.itemsize
            loads = (Transfer.contiguous(b["gradients"].addr + off, og.addr, og.size_bytes),
                     Transfer.contiguous(b["inputs"].addr + off, ox.addr, ox.size_bytes))
            stores = (Transfer.contiguous(obp.addr, b["backprops_wrt_input"].addr + off, obp.size_bytes),)

            def fn(g, x, nudged_value, acc_value, _dt=dt):
                bp, below, above = masked_gradients(g, x, nudged_value[0], nudged_value[1])
                return bp.astype(_dt, copy=False), acc_value + np.array([below, above], F32)

            # Each tile finishes its two sums with a cross-lane reduction each.
            comp = Compute(fn, (og, ox, nudged, acc), (obp, acc), flops=n * FLOPS_PER_ELEMENT, reductions=2,
                           precision=COMPUTE_PRECISION,
                           extra_ops=padded_lanes(n, lanes) * (FLOPS_PER_ELEMENT + widen) - n * FLOPS_PER_ELEMENT)
            tiles.append(Tile(tid, loads, comp, stores, slot=tid % 2))
        publish: tuple[Transfer, ...]
        if parts > 1:
            publish = (Transfer.contiguous(acc.addr, ctx.workspace_base + idx * acc.size_bytes, acc.size_bytes),)
        else:
            publish = self._scalar_stores(b, acc)
        tiles.append(Tile(len(tiles), (), None, publish, slot=2))
        return tiles

    def _reduce_tile(self, ctx: PlanContext, lay: _Layout, parts: int) -> Tile:
        """The first core sums the cores' partials and stores the two scalars."""
        acc = lay.fixed["acc"]
        part = Operand(lay.fixed["partials"].addr, (parts, 2), F32)
        load = Transfer.contiguous(ctx.workspace_base, part.addr, part.size_bytes)

        def fn(p):
            return (p.sum(axis=0, dtype=F32),)
        # Adding the cores' partials is work the split adds, not the math's.
        comp = Compute(fn, (part,), (acc,), flops=0, reductions=0, precision=COMPUTE_PRECISION, extra_ops=parts * 2)
        return Tile(0, (load,), comp, self._scalar_stores(lay.buf, acc), slot=2)


class _Layout:
    """The scratchpad of a call: a fixed area (bounds, nudged bounds, sums, partials), then two slots."""

    def __init__(self, call: BoundCall, ctx: PlanContext):
        self.call = call
        self.total: int = call.attrs["elements"]
        self.lanes = ctx.target.core.precisions[COMPUTE_PRECISION].lanes
        self.dt = PRECISION_DTYPES[call.precision]
        self.buf = {b.name: b for b in call.buffers}
        area = Arena(ctx.scratch_base, ctx.scratch_size_bytes, ctx.alignment_bytes)
        # Room for every core's partials whatever number of cores the tiling uses: the layout stays put.
        self.fixed = {"bounds": area.operand((2,), F32), "nudged": area.operand((2,), F32),
                      "acc": area.operand((2,), F32), "partials": area.operand((len(call.cores), 2), F32)}
        base = align_up(area.used, ctx.alignment_bytes)
        self.half = (ctx.scratch_size_bytes - base) // 2 // ctx.alignment_bytes * ctx.alignment_bytes
        self.slots = [ctx.scratch_base + base + s * self.half for s in range(2)]
        #: Most elements of a tile (whole vectors): three tensors of it fill one slot.
        self.budget = max(0, (self.half - 3 * ctx.alignment_bytes) // (3 * self.dt.itemsize) // self.lanes
                          * self.lanes)
        if self.budget < self.lanes:
            raise LayoutError(f"{call.symbol}: a tile of one vector ({self.lanes} elements) does not fit the "
                              f"{ctx.scratch_size_bytes}-byte scratchpad")

    def shares(self, cores: tuple[int, ...]) -> list[tuple[int, int, int]]:
        """(core, first element, end element) of each core with work: whole vectors, split evenly."""
        units = split_even(-(-self.total // self.lanes), len(cores))
        return [(core, u0 * self.lanes, min(self.total, u1 * self.lanes)) for core, (u0, u1) in zip(cores, units)]

    def heuristic_tile(self, span: int, tiles: int = MIN_TILES_PER_CORE) -> int:
        """Elements per tile that cut a share of ``span`` into ``tiles`` tiles (whole vectors) when it fits."""
        return min(self.total, self.budget, max(self.lanes, align_up(-(-span // tiles), self.lanes)))


KERNEL = FakeQuantWithMinMaxVarsGradient()
