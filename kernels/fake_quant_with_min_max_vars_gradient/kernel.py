"""Fake quant gradient's registry entry: binding, the tiling space and the plan (the package's docstring says how
it is planned)."""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kernels.base import PRECISION_DTYPES, PlanContext
from kernels.common.args import require_bool, require_int, require_ints
from kernels.common.binding import attrs_of, bind_arguments, bound_call
from kernels.common.exchange import Exchange
from kernels.common.loops import VSTORE, sequence, streaming
from kernels.common.scratch import Scratch, align_up, aligned_bytes
from kernels.common.shares import core_shares
from kernels.common.streams import FIXED_SLOT, CoreStream, plan_of
from kernels.common.tensor_view import TensorView
from kernels.common.tiling_space import IntKey, TilingSpace, complete, pipeline_tile
from kernels.fake_quant_with_min_max_vars_gradient.numerics import (
    COMPUTE_PRECISION,
    F32,
    FLOPS_NUDGE,
    FLOPS_PER_ELEMENT,
    NUDGE_OPS,
    SHORT_TILE_FRACTION,
    masked_tile,
    nudge_tile,
)
from sim.model.call import ArgSpec, BoundCall, MemoryReader
from sim.model.plan import Compute, DoesNotFit, Operand, Phase, Plan, Tile, TileFn, Transfer


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
        if cores < len(self.call.cores):  # fewer cores: the heuristic's tiles (one core: the whole call, or as
            # much of it as a slot holds when a caller asks for one core on a call the search would not give it),
            # and half as many elements, whole vectors (two tiles overlap one's transfers with the other's
            # computes: MT7004's fp32 4 x 1000 on one of its four cores, 5,502 cycles in one tile, 4,875 in two)
            first = tile if cores > 1 else min(self.total, self.budget)
            half = -(-first // 2 // self.lanes) * self.lanes
            return [first] + ([half] if self.lanes <= half < first else [])
        # ... and twice the heuristic's tile where a slot holds it (fewer, longer tiles: MT7004's fp16 4 x 1000 on
        # one core, 4,723 cycles in tiles of 1,008, 4,127 in 2,016)
        double = min(2 * tile, span)
        return [tile, self.heuristic_tile(span, 1),
                min(tile, max(self.lanes, tile // SHORT_TILE_FRACTION // self.lanes * self.lanes))] \
            + ([double] if tile < double <= self.budget else [])

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
        return core_shares(self.call.cores[:cores], self.total, self.lanes)

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
                                      chain=("vls",) + ("valu",) * (2 + 2 * (dt != F32)) + (VSTORE,), reductions=2,
                                      epilogue={"vls": 1, VSTORE: 1}, label="masked gradients")
        grads, inputs, out = (TensorView.of(b[name], (self.total,))
                              for name in ("gradients", "inputs", "backprops_wrt_input"))
        for s in range(e0, e1, per_tile):
            n = min(per_tile, e1 - s)
            slot = self.scratch.slot(stream.slot)
            og, ox, obp = (slot.operand((n,), dt) for _ in range(3))
            stream.add((grads.load_flat(og, s), inputs.load_flat(ox, s)),
                       Compute(TileFn(masked_tile, (dt,)), (og, ox, self.nudged, self.acc), (obp, self.acc),
                               flops=n * FLOPS_PER_ELEMENT, precision=COMPUTE_PRECISION, loops=(data_loop(n),)),
                       (out.store_flat(obp, s),))
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
