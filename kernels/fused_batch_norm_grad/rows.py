"""The rows plan: rows split over the cores, partial per-channel sums exchanged and reduced, x_backprop after."""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from kernels.common.exchange import Exchange
from kernels.common.scratch import Arena, Scratch, align_up, aligned_bytes
from kernels.common.streams import FIXED_SLOT, CoreStream, plan_of
from kernels.common.tiling_space import pipeline_tile, split_even, split_units
from kernels.common.transfers import sub_operand
from kernels.fused_batch_norm_grad.base import CoreLoops, _PlanBase
from kernels.fused_batch_norm_grad.numerics import (
    COMPUTE_PRECISION,
    F32,
    FIXED_AREA_FRACTION,
    FLOPS_CHANNEL_COEF,
    FLOPS_DX_INFER,
    FLOPS_DX_TRAIN,
    FLOPS_SUMS,
    FLOPS_XHAT,
    dx_train_tile,
    rs_and_zero_sums_tile,
    sums_and_dx_infer_tile,
    sums_tile,
)
from sim.model.memo import cached_hash, memoized, state_without_hash
from sim.model.plan import Compute, DoesNotFit, Operand, Phase, Plan, Tile, TileFn, Transfer


@dataclass(frozen=True)
class _Fixed:
    """The rows plan's per-channel vectors of one channel group, at fixed addresses of the vector level."""

    mean: Operand
    rs: Operand      # loaded as the variance, turned into rsqrt(var + eps) in place (or loaded as rs)
    scale: Operand
    sums: Operand    # [2, Cg]: Σdy, Σdy·x̂
    partials: Operand | None  # [P, 2, Cg]: every participating core's sums, gathered from the shared level

    __hash__ = cached_hash  # worked out once: every block's compute is keyed by its group's vectors
    __getstate__ = state_without_hash

    def channels(self, c0: int, n: int) -> tuple[Operand, Operand, Operand, Operand, Operand]:
        """(mean, rs, scale, Σdy, Σdy·x̂) of channels [c0, c0 + n) of the group."""
        return (sub_operand(self.mean, c0, n), sub_operand(self.rs, c0, n), sub_operand(self.scale, c0, n),
                self.s1(c0, n), self.s2(c0, n))

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

    #: True in the probes of :meth:`largest_tile` (their refusals skip working out the largest tile again).
    probing = False

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

    def refusal(self) -> DoesNotFit | None:
        """Why the caller's tile size cannot plan (the DoesNotFit :meth:`build` raises), or None: every group laid
        out as :meth:`build` lays it out, without making the tiles."""
        try:
            for _ in self._layouts():
                pass
        except DoesNotFit as e:
            return e
        return None

    def largest_tile(self) -> int:
        """The most ``tile_elements`` a tiling of the call may name (0: none fits): at most the smallest streamed
        budget of a group, or (training) the smallest budget of blocks kept resident where the whole share's
        blocks stay resident with it.  A size above both is streamed in the group of the smaller and refused."""
        base = _RowsPlan(self.call, self.ctx, None)
        base.probing = True
        for _ in base._layouts():
            pass
        streamed = min(b for _, b in base.budgets)
        resident = min(r for r, _ in base.budgets) if self.train else 0
        total = self.v.a * self.v.c * self.v.b

        def accepted(n: int) -> bool:
            probe = _RowsPlan(self.call, self.ctx, n)
            probe.probing = True
            return probe.refusal() is None

        def largest(lo: int, hi: int) -> int:  # accepted(lo) (or lo 0), not accepted(hi)
            while hi - lo > 1:
                mid = (lo + hi) // 2
                lo, hi = (mid, hi) if accepted(mid) else (lo, mid)
            return lo

        best = min(streamed, total)
        if not accepted(best):
            best = largest(0, best)
        top = min(resident, total)
        if top > best:
            best = top if accepted(top) else largest(best, top)
        return best

    def _layouts(self) -> Iterator[_GroupLayout]:
        """The channel groups laid out one after the other (a group's layout is made when the one before is done)."""
        self.first_want: int | None = None
        self.largest_want: int | None = None
        #: (resident, streamed) elements per tensor of a tile, per group and share laid out.
        self.budgets: list[tuple[int, int]] = []
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
        half = (free // 6 if self.train else free // 2) // align * align
        slots = Scratch(self.level, scratch.fixed_bytes, slots=2, slot_bytes=half)
        budget = slots.elements_per_slot(3, item)
        self.budgets.append((resident_budget, budget))
        if self.train and (self.size is None or self.size <= resident_budget):
            blocks = self._cut(ar, cg, br, resident_budget)
            if sum(2 * self._bytes(d) for _, d in blocks) <= free:
                self._remember_cut()
                spare = scratch.spare()
                return [_Block(start, dims, spare.alloc(2 * self._bytes(dims)), 3 + j, True)
                        for j, (start, dims) in enumerate(blocks)]
        if self.size is not None and self.size > budget:
            # The most the call takes, not this group's streamed budget: in training a larger tile may stay
            # resident (the probes of largest_tile only need to know that it is refused).
            most = budget if self.probing else self.largest_tile()
            raise slots.refuse(3 * align_up(self.size * item, align), half,
                               f"tiling tile_elements={self.size} does not fit the "
                               f"{self.level.size_bytes}-byte {self.level.name} scratchpad (at most {most} "
                               f"elements per tensor in a tile of this call)")
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

    def _stream_tile(self, stream: CoreStream, blk: _Block, g0: int, fixed: _Fixed, kind: str) -> None:
        """One block of rows: 'sums' (training phase 1), 'both' (inference phase 1) or 'dx' (training phase 2)."""
        (a, c, b), nc = blk.start, blk.dims[1]
        ox, ody, odx = block_operands(blk.addr, blk.dims, blk.resident, self.dt, self.align)
        start = (a, g0 + c, b)
        loads: tuple[Transfer, ...] = (self.tensor_in(ox, "x", start), self.tensor_in(ody, "dy", start))
        if kind == "dx" and blk.resident:
            loads = ()  # x and dy are still in the vector level from phase 1
        # The per-channel coefficients count as the math's once per channel: in the block holding the channel's
        # first element (every other block recomputes them).
        coef = nc * FLOPS_CHANNEL_COEF if a == 0 and b == 0 else 0
        comp = block_compute(self.loops, fixed, self.v.m, self.tf_form, self.align, kind, blk.addr, blk.dims,
                             blk.resident, c, coef)
        stores = () if kind == "sums" else (self.tensor_out(odx, start),)
        stream.add(loads, comp, stores, slot=blk.slot)

    def _sums_tiles(self, idx: int, g0: int, fixed: _Fixed, blocks: list[_Block],
                    exchange: Exchange | None) -> tuple[Tile, ...]:
        """Phase 1 of a core: load the group's vectors, stream its rows, publish its partial sums."""
        cg = fixed.mean.shape[0]
        stream = CoreStream()

        # The fixed area has its own slot, so the first row tile's loads overlap this one.
        stream.add((self.vec_in(fixed.mean, "mean", g0), self.vec_in(fixed.rs, "variance", g0),
                    self.vec_in(fixed.scale, "scale", g0)),
                   self.compute(TileFn(rs_and_zero_sums_tile, (self.eps, cg)), (fixed.rs,), (fixed.rs, fixed.sums),
                                (self.loops.channel(cg, rsqrt=self.eps is not None, stores=2, label="rs, zero sums"),),
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


# -- a block's operands and compute: pure functions of plan values, remembered by value (sim.model.memo) ------


@memoized
def block_operands(addr: int, dims: tuple[int, int, int], resident: bool, dtype: np.dtype,
                   alignment: int) -> tuple[Operand, Operand, Operand]:
    """x, dy and x_backprop of a block of ``dims`` at ``addr``, one after the other (each aligned); a resident
    block writes x_backprop over its dy.  Remembered by value: the streamed blocks of a slot are of a few sizes."""
    arena = Arena(addr, 3 * align_up(math.prod(dims) * dtype.itemsize, alignment), alignment)
    x, dy = arena.operand(dims, dtype), arena.operand(dims, dtype)
    return x, dy, dy if resident else arena.operand(dims, dtype)


@memoized
def block_compute(loops: CoreLoops, fixed: _Fixed, m: int, tf_form: bool, alignment: int, kind: str, addr: int,
                  dims: tuple[int, int, int], resident: bool, c: int, coef: int) -> Compute:
    """The compute of a block of ``dims`` at ``addr`` whose channels start at ``c`` of its group (``fixed``): its
    ``kind`` ('sums', 'both' or 'dx', see :meth:`_RowsPlan._stream_tile`) with ``coef`` flops of per-channel
    coefficients; ``m`` elements per channel; ``tf_form``: the training x_backprop's form
    (:func:`~kernels.fused_batch_norm_grad.numerics.x_backprop_train`).

    It reads nothing but the block's operands, its channels in the group's fixed area, its size and ``coef``:
    remembered by value, blocks that agree on them (a stream's full blocks in the same slot) share one Compute,
    which the plan check judges and the engine prices once."""
    (na, nc, nb), dt = dims, loops.dtype
    ox, ody, odx = block_operands(addr, dims, resident, dt, alignment)
    mean, rs, scale, s1, s2 = fixed.channels(c, nc)
    count = na * nc * nb
    if kind == "sums":
        return _PlanBase.compute(TileFn(sums_tile), (ox, ody, mean, rs, s1, s2), (s1, s2), (loops.data(dims, "sums"),),
                                 flops=count * (FLOPS_XHAT + FLOPS_SUMS))
    if kind == "both":
        both = (loops.channel(nc, loads=2, fmac=1, stores=1, label="coefficients"), loops.data(dims, "both"))
        return _PlanBase.compute(TileFn(sums_and_dx_infer_tile, (dt,)), (ox, ody, mean, rs, scale, s1, s2),
                                 (odx, s1, s2), both, flops=count * (FLOPS_XHAT + FLOPS_SUMS + FLOPS_DX_INFER) + coef)
    dx = (loops.channel(nc, loads=4, fmac=3, stores=3, label="coefficients"), loops.data(dims, "dx"))
    return _PlanBase.compute(TileFn(dx_train_tile, (m, dt, tf_form)), (ox, ody, mean, rs, scale, s1, s2), (odx,), dx,
                             flops=count * FLOPS_DX_TRAIN + coef)  # x̂ was the sums pass's math
