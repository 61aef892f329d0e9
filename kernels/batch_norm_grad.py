"""BatchNormGrad of the chips' own kernel library: ``{fp,hp}_batch_norm_grad_{s,p}``.

On x, dy of shape [batch, channel] with per-channel mean, invar (1/sqrt(var+eps))
and scale, with m = batch and x̂ = (x - mean)·invar:

* dbias = Σ_batch dy, dscale = Σ_batch dy·x̂
* training:  dx = scale·invar/m · (m·dy − Σdy − x̂·Σdy·x̂)
* inference: dx = dy·scale·invar

``params`` is the C ``long long params[12]``: [0] mean*, [1] invar*, [2] scale*,
[3] dbias* (out), [4] dscale* (out), [5] batch, [6] channel, [7] is_train; given
as a sequence of 8 to 12 ints or as the address of an int64[12] array.  Slots
[8]..[11] are reserved: when present they must be 0.

Precision: ``fp_`` symbols store and compute everything in fp32.  ``hp_``
symbols store x, dy and dx in fp16 and the per-channel vectors (mean, invar,
scale, dbias, dscale) in fp32; they compute in fp32 at the chip's fp32 vector
rate (x and dy widened on load, dx rounded to fp16 once on store; the
conversions cost no cycles in this model), so they report the same flops.

Plan: channels are split over the cores (channels sit on the vector lanes, so
the batch sums are vertical vector adds, no cross-lane reduction).  Each tile is
a block of channels over the whole batch when that fits the scratchpad; when the
batch is too long, a channel block is done in two passes over row tiles (sums
first, then dx), with the sums held in the scratchpad between passes.  A tile
writes its dx over its dy in the scratchpad (it has read dy by then), so a tile
holds two row blocks, not three.

Tiling (``tiling=`` of a call or run-config, all keys optional):

* ``split``: ``channels`` (the plan above) or ``rows`` -- the batch is split
  over the cores; each core sums its rows of every channel block into partial
  sums it stores to the shared workspace, a barrier, then every core reduces
  the partials and (training) writes dx of its rows, the first core storing
  dbias and dscale (inference: block k is reduced by the k-th core, mod the
  cores).  It keeps every core busy when channels are few.
* ``channel_block``: channels per tile; ``row_block``: rows per tile (the
  whole batch, channel split: one-pass whole-batch tiles; fewer: row tiles).

Without a tiling the simulator compares the candidates :meth:`tilings` lists.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from kernels.base import PRECISION_DTYPES, PlanContext
from kernels.common.args import check_args, require_address, require_int
from kernels.tiling import (
    Arena,
    align_up,
    channel_grain,
    fits,
    operand_in,
    operand_out,
    padded_lanes,
    split_even,
)
from kernels.tiling_keys import choice_key, int_key, tiling_keys, unique
from sim.errors import KernelArgError, LayoutError, brief
from sim.model.call import ArgSpec, BoundCall, Buffer, MemoryReader
from sim.model.plan import Compute, Operand, Phase, Plan, Tile, Transfer

F32 = np.dtype(np.float32)
I64 = np.dtype(np.int64)
PARAM_NAMES = ("mean", "invar", "scale", "dbias", "dscale", "batch", "channel", "is_train")
#: Vector element operations per (row, channel) element: x̂ (2), Σdy (1), Σdy·x̂ (2), dx (5 / 2).
FLOPS_SUMS = 5
FLOPS_DX_TRAIN = 5
FLOPS_DX_INFER = 2
#: The chip accumulates in fp32 for both symbol precisions.
COMPUTE_PRECISION = "fp32"
#: How a caller's ``tiling`` may partition the work over the cores, and its keys.
SPLITS = ("channels", "rows")
TILING_KEYS = ("split", "channel_block", "row_block")
#: The row split cuts a core's rows into at least this many tiles per pass (pipeline depth).
MIN_TILES_PER_PASS = 4


def batch_norm_grad_reference(x: np.ndarray, dy: np.ndarray, mean: np.ndarray, invar: np.ndarray,
                              scale: np.ndarray, is_train: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(dx, dbias, dscale) of whole tensors, computed in fp32 like the chip (dx in x's dtype)."""
    sdy, sdyxh = _sums(x, dy, mean, invar)
    return _dx(x, dy, mean, invar, scale, sdy, sdyxh, is_train, x.shape[0]).astype(x.dtype, copy=False), sdy, sdyxh


def _sums(x: np.ndarray, dy: np.ndarray, mean: np.ndarray, invar: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    dyf = dy.astype(F32, copy=False)
    xh = (x.astype(F32, copy=False) - mean) * invar
    return dyf.sum(axis=0, dtype=F32), (dyf * xh).sum(axis=0, dtype=F32)


def _dx(x: np.ndarray, dy: np.ndarray, mean: np.ndarray, invar: np.ndarray, scale: np.ndarray,
        sdy: np.ndarray, sdyxh: np.ndarray, is_train: bool, m: int) -> np.ndarray:
    dyf = dy.astype(F32, copy=False)
    if not is_train:
        return dyf * (scale * invar)
    xh = (x.astype(F32, copy=False) - mean) * invar
    mf = F32.type(m)
    return (scale * invar / mf) * (mf * dyf - sdy - xh * sdyxh)


class BatchNormGrad:
    """The registry entry of batch_norm_grad."""

    name = "batch_norm_grad"
    #: What an hp_ call stores in fp16 (the rest, and the params array's int64, in fp32) and how it computes.
    tensors_in_precision = ("x", "dy", "dx")
    fp32_tensors = ("mean", "invar", "scale", "dbias", "dscale")
    fp16_arithmetic = ("computed in fp32 at the chip's fp32 vector rate: x and dy are widened as they are loaded, "
                       "the sums accumulate in fp32 and dx is rounded to fp16 once, as it is stored (no cycles are "
                       "charged for the conversions)")
    args = (
        ArgSpec("x", "in_ptr", "address of x [batch, channel]"),
        ArgSpec("dy", "in_ptr", "address of dy [batch, channel]"),
        ArgSpec("dx", "out_ptr", "address of dx [batch, channel] (output)"),
        ArgSpec("params", "params", "long long params[12]: mean*, invar*, scale*, dbias*, dscale*, batch, "
                                    "channel, is_train, then reserved slots that must be 0 -- 8..12 ints, or the "
                                    "address of an int64[12] array"),
    )

    def bind(self, symbol: str, precision: str, variant: str, cores: tuple[int, ...],
             args: Mapping[str, Any], read: MemoryReader) -> BoundCall:
        """Check the arguments and describe the call's buffers."""
        a = check_args(symbol, self.args, args)
        x, dy, dx = (require_address(n, a[n]) for n in ("x", "dy", "dx"))
        buffers: list[Buffer] = []
        raw = a["params"]
        if isinstance(raw, (int, np.integer)) and not isinstance(raw, bool):
            paddr = require_address("params", raw)
            buffers.append(Buffer("params", paddr, (12,), I64, "input"))
            values: Sequence[Any] = [int(v) for v in read(paddr, (12,), I64, "params")]
            origin = f"params array at {paddr:#x}"
        elif isinstance(raw, (list, tuple)) or (isinstance(raw, np.ndarray) and raw.ndim == 1):
            if not 8 <= len(raw) <= 12:  # before copying it: a huge sequence is refused by its length alone
                raise KernelArgError(f"argument 'params': expected 8 to 12 ints ({', '.join(PARAM_NAMES)}), "
                                     f"got {len(raw)}")
            values = list(raw)
            origin = "params"
        else:
            raise KernelArgError(f"argument 'params': expected a sequence of 8 to 12 ints or the address of an "
                                 f"int64[12] array, got {brief(raw)}")
        ptrs = [require_address(f"params[{i}] ({PARAM_NAMES[i]})", values[i]) for i in range(5)]
        batch = require_int("params[5] (batch)", values[5])
        channel = require_int("params[6] (channel)", values[6])
        if batch <= 0:
            raise KernelArgError(f"argument 'params[5] (batch)': expected a positive batch, got {batch} "
                                 f"(from {origin})")
        if channel <= 0:
            raise KernelArgError(f"argument 'params[6] (channel)': expected a positive channel count, got "
                                 f"{channel} (from {origin})")
        is_train = require_int("params[7] (is_train)", values[7])
        if is_train not in (0, 1):
            raise KernelArgError(f"argument 'params[7] (is_train)': expected 0 or 1, got {is_train}")
        for i in range(8, len(values)):
            # Reserved: no meaning yet, so anything but 0 is a mistake (an entry shifted out of place, an
            # uninitialised array) that must not pass silently, nor change meaning when a slot gets one.
            if require_int(f"params[{i}] (reserved)", values[i]) != 0:
                raise KernelArgError(f"argument 'params[{i}] (reserved)': slots [8]..[11] are reserved and must be "
                                     f"0, got {values[i]} (from {origin})")
        dt = PRECISION_DTYPES[precision]
        if batch * channel * dt.itemsize > 1 << 40:
            raise KernelArgError(f"arguments 'params[5] (batch)' x 'params[6] (channel)': {batch} x {channel} "
                                 f"elements exceed any chip's memory")
        buffers += [
            Buffer("x", x, (batch, channel), dt, "input"),
            Buffer("dy", dy, (batch, channel), dt, "input"),
            Buffer("mean", ptrs[0], (channel,), F32, "input"),
            Buffer("invar", ptrs[1], (channel,), F32, "input"),
            Buffer("scale", ptrs[2], (channel,), F32, "input"),
            Buffer("dx", dx, (batch, channel), dt, "output"),
            Buffer("dbias", ptrs[3], (channel,), F32, "output"),
            Buffer("dscale", ptrs[4], (channel,), F32, "output"),
        ]
        return BoundCall(symbol, precision, variant, cores, tuple(buffers),
                         {"batch": batch, "channel": channel, "is_train": bool(is_train)})

    # -- planning ---------------------------------------------------------------------------------

    def plan(self, call: BoundCall, ctx: PlanContext) -> Plan:
        """Channel blocks per core, or row ranges per core when ``ctx.tiling`` asks (see the module docstring)."""
        p = _Planner(call, ctx)
        return p.build(*p.requested())

    def tilings(self, call: BoundCall, ctx: PlanContext) -> list[dict[str, Any]]:
        """Candidates: the heuristic channel split, its widest one-pass blocks, the row split with its exchange.

        The widest one-pass blocks read x and dy once where the heuristic's
        whole-vector blocks would need two passes (or spend fewer DMA setups
        than its four blocks per core); the row split reads them twice in
        training but keeps every core busy when channels are few.
        """
        p = _Planner(call, ctx)
        out = []
        for split, largest in (("channels", False), ("channels", True), ("rows", False)):
            if split == "rows" and (len(call.cores) == 1 or p.batch == 1):
                continue
            (_, (r0, r1), (c0, c1)), = p.shares(split)[:1]
            try:
                ct, rows = p.blocks(split, c1 - c0, r1 - r0, None, None, largest)
            except LayoutError:
                continue
            out.append({"split": split, "channel_block": ct, "row_block": rows})
            if split == "channels" and not largest and rows < r1 - r0 and rows >= 4:
                # Two-pass row tiles: shorter ones fill the pipeline sooner (the first load is never hidden);
                # the longest that fit a slot spend the fewest DMA setups.
                out.append({"split": split, "channel_block": ct, "row_block": rows // 2})
                out.append({"split": split, "channel_block": ct, "row_block": p.max_rows(ct, r1 - r0, 1)})
                # The core's whole share of channels per tile: as many bytes per tile in fewer, longer rows.
                wide = (c1 - c0) // p.grain * p.grain or c1 - c0
                wide_rows = p.max_rows(wide, r1 - r0, 1)
                if wide > ct and wide_rows >= MIN_TILES_PER_PASS:
                    out.append({"split": split, "channel_block": wide, "row_block": wide_rows})
        return unique(out)


class _Planner:
    """The tiles of one call: shares of the cores, tile sizes, the scratchpad layout of each mode."""

    def __init__(self, call: BoundCall, ctx: PlanContext):
        self.call, self.ctx = call, ctx
        self.batch: int = call.attrs["batch"]
        self.channel: int = call.attrs["channel"]
        self.train: bool = call.attrs["is_train"]
        self.dt = PRECISION_DTYPES[call.precision]
        self.lanes = ctx.target.core.precisions[COMPUTE_PRECISION].lanes
        # Channel blocks in whole vectors and whole DDR/GSM bursts of a row (flops still pad to lanes only).
        self.align = ctx.alignment_bytes
        self.b = {buf.name: buf for buf in call.buffers}
        # Channel blocks in whole vectors and whole DDR/GSM bursts of a row (flops still pad to lanes only).
        self.grain = channel_grain(ctx, self.b["x"].addr, self.dt.itemsize, self.lanes)

    # -- what to build --------------------------------------------------------------------------

    def requested(self) -> tuple[str, int | None, int | None]:
        """(split, channel_block, row_block) of the call's tiling; None where the planner chooses."""
        tiling = tiling_keys(self.ctx, TILING_KEYS)
        split = choice_key(tiling, "split", SPLITS) or "channels"
        return (split, int_key(tiling, "channel_block", 1, self.channel),
                int_key(tiling, "row_block", 1, self.batch))

    def shares(self, split: str) -> list[tuple[int, tuple[int, int], tuple[int, int]]]:
        """(core, rows, channels) of each core with work."""
        cores = self.call.cores
        if split == "channels":
            return [(core, (0, self.batch), cr) for core, cr in zip(cores, split_even(self.channel, len(cores)))]
        return [(core, rr, (0, self.channel)) for core, rr in zip(cores, split_even(self.batch, len(cores)))]

    def parts(self, split: str) -> int:
        """Partial sums to exchange per channel: the cores sharing the rows (1: no exchange)."""
        return len(self.shares(split)) if split == "rows" else 1

    def build(self, split: str, ct: int | None, rows: int | None) -> Plan:
        """The plan: one phase (channels, or one core), else partial sums, barrier, reduce (+ dx)."""
        shares = self.shares(split)
        parts = self.parts(split)
        if split == "rows":
            # One tile size for every core: the reduce tiles of inference cut the channels alike everywhere.
            (_, (r0, r1), (c0, c1)) = shares[0]
            ct, rows = self.blocks(split, c1 - c0, r1 - r0, ct, rows, False)
        if parts > 1 and parts * 2 * self.channel * F32.itemsize > self.ctx.workspace_size_bytes:
            raise LayoutError(f"{self.call.symbol}: the {self.ctx.workspace_size_bytes}-byte workspace cannot hold "
                              f"the partial sums of {self.channel} channels for {parts} cores")
        first: dict[int, tuple[Tile, ...]] = {}
        second: dict[int, list[tuple[int, Tile]]] = {}  # core -> its reduce tiles, each with the core that runs it
        for idx, (core, (r0, r1), (c0, c1)) in enumerate(shares):
            bct, brows = self.blocks(split, c1 - c0, r1 - r0, ct, rows, False)
            if parts == 1 and brows >= r1 - r0:
                first[core] = tuple(self._whole_batch_tiles(c0, c1, bct))
                continue
            stream = _RowStream(self, bct, brows, parts)
            first[core] = tuple(stream.first_phase(idx, (r0, r1), (c0, c1)))
            if parts > 1:
                second[core] = stream.second_phase(idx, (r0, r1), (c0, c1), [s[0] for s in shares])
        if parts == 1:
            return Plan(cores=self.call.cores, phases=(Phase("batch_norm_grad", first, barrier_after=False),),
                        precision=self.call.precision)
        # Inference: the reduce tiles of the channel blocks are dealt over the cores.
        merged: dict[int, list[Tile]] = {}
        for tiles in second.values():
            for owner, tile in tiles:
                merged.setdefault(owner, []).append(tile)
        phase2 = {core: tuple(Tile(i, t.loads, t.compute, t.stores, t.slot) for i, t in enumerate(tiles))
                  for core, tiles in merged.items()}
        return Plan(cores=self.call.cores, phases=(Phase("partial sums", first, barrier_after=True),
                                                   Phase("reduce", phase2, barrier_after=False)),
                    precision=self.call.precision)

    # -- tile sizes -------------------------------------------------------------------------------

    def whole_fits(self, ct: int, rows: int) -> bool:
        """A one-pass tile of ``rows`` x ``ct`` (x, dy -- dx is written over dy -- and five vectors) fits half the
        scratchpad."""
        return fits([rows * ct * self.dt.itemsize] * 2 + [ct * 4] * 5, self.ctx.scratch_size_bytes // 2, self.align)

    def row_area(self, ct: int, parts: int) -> tuple[int, int]:
        """(bytes of one block area, bytes of each of the two row-tile slots) of the row-tile mode."""
        block = 5 * align_up(ct * 4, self.align) + (align_up(parts * 2 * ct * 4, self.align) if parts > 1 else 0)
        used = align_up(block, self.align) + block
        return block, (self.ctx.scratch_size_bytes - (used + self.align)) // 2

    def row_fits(self, ct: int, rows: int, parts: int) -> bool:
        """Row tiles of ``rows`` x ``ct`` (x, dy; dx is written over dy) fit a slot of the row-tile mode."""
        return fits([rows * ct * self.dt.itemsize] * 2, self.row_area(ct, parts)[1], self.align)

    def max_rows(self, ct: int, span_r: int, parts: int, exact: bool = True) -> int:
        """Most rows (<= span_r) of a row tile that fit a slot (0: not even one).

        Not ``exact``: the channel split's historical estimate, which charges an
        alignment per row and so stops short of the slot.
        """
        if not exact:
            rest = self.row_area(ct, parts)[1]
            rows = max(1, min(span_r, rest // (2 * ct * self.dt.itemsize + 2 * self.align)))
            while rows > 1 and not self.row_fits(ct, rows, parts):
                rows -= 1
            return rows if self.row_fits(ct, rows, parts) else 0
        lo, hi = 0, span_r
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if self.row_fits(ct, mid, parts) else (lo, mid - 1)
        return lo

    def blocks(self, split: str, span_c: int, span_r: int, ct: int | None, rows: int | None,
               largest: bool) -> tuple[int, int]:
        """(channels, rows) per tile of a share: the requested ones checked, else the heuristic's.

        Rows equal to the share's (channel split) mean one pass of whole-batch
        tiles.  ``largest`` asks the heuristic for the fewest tiles that fit.
        """
        parts = self.parts(split)
        if ct is None and rows is None:
            ct, rows = (self._channel_heuristic(span_c, span_r, largest) if split == "channels"
                        else self._row_heuristic(span_c, span_r, parts, largest))
        elif rows is None:
            assert ct is not None
            rows = (span_r if split == "channels" and self.whole_fits(min(ct, span_c), span_r)
                    else max(1, self.max_rows(min(ct, span_c), span_r, parts)))
        elif ct is None:
            ct = (self._channel_heuristic(span_c, span_r, largest)[0] if split == "channels"
                  else self._row_heuristic(span_c, span_r, parts, largest)[0])
        assert ct is not None and rows is not None
        ct, rows = min(ct, span_c), min(rows, span_r)
        one_pass = parts == 1 and rows >= span_r
        if not (self.whole_fits(ct, rows) if one_pass else self.row_fits(ct, rows, parts)):
            room = "one-pass tiles take half of it" if one_pass else "row tiles share it with the block vectors"
            raise LayoutError(f"{self.call.symbol}: tiling channel_block={ct}, row_block={rows} does not fit the "
                              f"{self.ctx.scratch_size_bytes}-byte scratchpad ({room})")
        return ct, rows

    def _channel_heuristic(self, span_c: int, span_r: int, largest: bool) -> tuple[int, int]:
        """Whole vectors, four blocks per core (pipeline depth) if the whole batch fits, else two-pass row tiles.

        ``largest``: the widest block whose whole batch fits instead.
        """
        lanes = self.grain
        if largest:
            # The widest block whose whole batch fits: one pass over x and dy even when that takes
            # part-filled vectors (reading them twice costs more where the memory bounds the call).
            lo, hi = 0, span_c
            while lo < hi:
                mid = (lo + hi + 1) // 2
                lo, hi = (mid, hi) if self.whole_fits(mid, span_r) else (lo, mid - 1)
            if lo:
                return (lo // lanes * lanes if lo >= lanes else lo), span_r
        want = max(lanes, padded_lanes(-(-span_c // 4), lanes))
        ct = min(span_c, want)
        while ct > lanes and not self.whole_fits(ct, span_r):
            ct = max(lanes, ct // 2 // lanes * lanes)
        ct = min(ct, span_c)
        if self.whole_fits(ct, span_r):
            return ct, span_r
        ct = min(ct, lanes)
        # The two block areas come first: when even they do not fit, the Arena says so (needs N bytes of M).
        area = Arena(self.ctx.scratch_base, self.ctx.scratch_size_bytes, self.align)
        for _ in range(2):
            area.alloc(self.row_area(ct, 1)[0])
        rows = self.max_rows(ct, span_r, 1, exact=False)
        if rows == 0:
            raise LayoutError(f"{self.call.symbol}: a tile of one row of {ct} channels does not fit the "
                              f"{self.ctx.scratch_size_bytes}-byte scratchpad")
        return ct, rows

    def _row_heuristic(self, span_c: int, span_r: int, parts: int, largest: bool) -> tuple[int, int]:
        """Every channel when a quarter of the rows fits a slot with them (else fewer, whole vectors)."""
        want = span_r if largest else -(-span_r // MIN_TILES_PER_PASS)
        ct = span_c
        while ct > self.grain and self.max_rows(ct, span_r, parts) < want:
            ct = max(self.grain, ct // 2 // self.grain * self.grain)
        rows = min(self.max_rows(ct, span_r, parts), want)
        if rows == 0:
            raise LayoutError(f"{self.call.symbol}: a tile of one row of {ct} channels does not fit the "
                              f"{self.ctx.scratch_size_bytes}-byte scratchpad")
        return ct, rows

    # -- one-pass tiles -----------------------------------------------------------------------------

    def _whole_batch_tiles(self, c0: int, c1: int, ct: int) -> list[Tile]:
        """Channel blocks of the whole batch, alternating the two halves of the scratchpad."""
        b, ctx, dt, batch, lanes = self.b, self.ctx, self.dt, self.batch, self.lanes
        channel, is_train = self.channel, self.train
        half = ctx.scratch_size_bytes // 2
        out: list[Tile] = []
        for i, start in enumerate(range(c0, c1, ct)):
            n = min(ct, c1 - start)
            arena = Arena(ctx.scratch_base + (i % 2) * half, half, ctx.alignment_bytes)
            ox, ody = arena.operand((batch, n), dt), arena.operand((batch, n), dt)
            om, oi, osc = (arena.operand((n,), F32) for _ in range(3))
            odx = ody  # dx is written over dy: the tile has read dy by then
            odb, ods = arena.operand((n,), F32), arena.operand((n,), F32)
            loads = (operand_in(ox, b["x"].addr, (batch, channel), (0, start)),
                     operand_in(ody, b["dy"].addr, (batch, channel), (0, start)),
                     operand_in(om, b["mean"].addr, (channel,), (start,)),
                     operand_in(oi, b["invar"].addr, (channel,), (start,)),
                     operand_in(osc, b["scale"].addr, (channel,), (start,)))
            stores = (operand_out(odx, b["dx"].addr, (batch, channel), (0, start)),
                      operand_out(odb, b["dbias"].addr, (channel,), (start,)),
                      operand_out(ods, b["dscale"].addr, (channel,), (start,)))

            def fn(x, dy, mean, invar, scale, _train=is_train, _m=batch, _dt=dt):
                sdy, sdyxh = _sums(x, dy, mean, invar)
                return _dx(x, dy, mean, invar, scale, sdy, sdyxh, _train, _m).astype(_dt, copy=False), sdy, sdyxh

            per_elem = FLOPS_SUMS + (FLOPS_DX_TRAIN if is_train else FLOPS_DX_INFER)
            compute = Compute(fn, (ox, ody, om, oi, osc), (odx, odb, ods),
                              flops=batch * n * per_elem, reductions=0, precision=COMPUTE_PRECISION,
                              extra_ops=batch * (padded_lanes(n, lanes) - n) * per_elem)
            out.append(Tile(tile_id=i, loads=loads, compute=compute, stores=stores, slot=i % 2))
        return out


class _RowStream:
    """Row tiles of one core: per channel block, its vectors in one of two block areas, rows in two slots.

    One part (channel split): pass 1 sums, pass 2 writes dx (inference: one pass
    does both), then the sums are stored.  Several parts (row split): phase 1
    ends a block by publishing its partial sums to the workspace; phase 2
    reduces every part's partials and (training) writes dx of the core's rows.
    """

    def __init__(self, p: _Planner, ct: int, rows: int, parts: int):
        self.p, self.ct, self.rows, self.parts = p, ct, rows, parts
        ctx, align = p.ctx, p.align
        self.block_bytes, self.slot_bytes = p.row_area(ct, parts)
        area = Arena(ctx.scratch_base, ctx.scratch_size_bytes, align)
        self.areas = [area.alloc(self.block_bytes) for _ in range(2)]
        self.slot_base = [ctx.scratch_base + align_up(area.used, align) + s * self.slot_bytes for s in range(2)]
        self.tid = 0

    def _vectors(self, k: int, n: int) -> tuple[Operand, ...]:
        """mean, invar, scale, Σdy, Σdy·x̂ (and the parts' partials) of block ``k`` in its block area."""
        blk = Arena(self.areas[k % 2], self.block_bytes, self.p.align)
        ops = tuple(blk.operand((n,), F32) for _ in range(5))
        return ops + ((blk.operand((self.parts, 2, n), F32),) if self.parts > 1 else ())

    def _vec_loads(self, ops: Sequence[Operand], start: int) -> tuple[Transfer, ...]:
        b, channel = self.p.b, self.p.channel
        return tuple(operand_in(op, b[name].addr, (channel,), (start,))
                     for op, name in zip(ops, ("mean", "invar", "scale")))

    def _add(self, out: list, tile: Tile) -> None:
        out.append(tile)
        self.tid += 1

    def first_phase(self, idx: int, rr: tuple[int, int], cr: tuple[int, int]) -> list[Tile]:
        """The tiles up to the barrier (all of them with one part)."""
        p = self.p
        out: list[Tile] = []
        for k, start in enumerate(range(cr[0], cr[1], self.ct)):
            n = min(self.ct, cr[1] - start)
            ops = self._vectors(k, n)
            osum, osum2 = ops[3], ops[4]
            zero = functools.partial(_zero_pair, n)
            self._add(out, Tile(self.tid, self._vec_loads(ops, start),
                                Compute(zero, (), (osum, osum2), flops=0, reductions=0, precision=COMPUTE_PRECISION,
                                        extra_ops=2 * padded_lanes(n, p.lanes)), (), slot=2 + k % 2))
            passes = (("sums", "dx") if self.parts == 1 else ("sums",)) if p.train else ("both",)
            for pname in passes:
                self._pass(out, pname, rr, start, n, ops)
            if self.parts == 1:
                stores = (operand_out(osum, p.b["dbias"].addr, (p.channel,), (start,)),
                          operand_out(osum2, p.b["dscale"].addr, (p.channel,), (start,)))
            else:
                ws, row = p.ctx.workspace_base, p.channel * F32.itemsize
                stores = (Transfer.contiguous(osum.addr, ws + (2 * idx) * row + start * 4, n * 4),
                          Transfer.contiguous(osum2.addr, ws + (2 * idx + 1) * row + start * 4, n * 4))
            self._add(out, Tile(self.tid, (), None, stores, slot=2 + k % 2))
        return out

    def second_phase(self, idx: int, rr: tuple[int, int], cr: tuple[int, int],
                     cores: Sequence[int]) -> list[tuple[int, Tile]]:
        """(core, tile) after the barrier: reduce the partials of each block, then (training) write dx.

        In training every core reduces every block (its dx needs the sums) and
        the first stores them; in inference block k is reduced by core k mod parts.
        """
        p, out = self.p, []
        self.tid = 0
        me = cores[idx]
        for k, start in enumerate(range(cr[0], cr[1], self.ct)):
            n = min(self.ct, cr[1] - start)
            if not p.train and k % self.parts != idx:
                continue
            ops = self._vectors(k, n)
            osum, osum2, opart = ops[3], ops[4], ops[5]
            part_load = Transfer.block(p.ctx.workspace_base + start * 4, opart.addr, (2 * self.parts, n), 4,
                                       (p.channel * 4, 4))
            stores = ((operand_out(osum, p.b["dbias"].addr, (p.channel,), (start,)),
                       operand_out(osum2, p.b["dscale"].addr, (p.channel,), (start,)))
                      if (idx == 0 or not p.train) else ())

            def reduce(parts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
                total = parts.sum(axis=0, dtype=F32)
                return total[0], total[1]

            tiles: list[Tile] = []
            self._add(tiles, Tile(self.tid, (self._vec_loads(ops, start) if p.train else ()) + (part_load,),
                                  Compute(reduce, (opart,), (osum, osum2), flops=0, reductions=0,
                                          precision=COMPUTE_PRECISION,
                                          extra_ops=2 * self.parts * padded_lanes(n, p.lanes)),
                                  stores, slot=2 + k % 2))
            if p.train:
                self._pass(tiles, "dx", rr, start, n, ops)
            out += [(me if p.train else cores[k % self.parts], t) for t in tiles]
        return out

    def _pass(self, out: list, pname: str, rr: tuple[int, int], start: int, n: int,
              ops: Sequence[Operand]) -> None:
        """One pass over the rows ``rr`` of channels [start, start + n): sums, dx, or both (inference)."""
        p = self.p
        b, dt, batch, channel, align = p.b, p.dt, p.batch, p.channel, p.align
        om, oi, osc, osum, osum2 = ops[:5]
        for r0 in range(rr[0], rr[1], self.rows):
            nr = min(self.rows, rr[1] - r0)
            sl = Arena(self.slot_base[self.tid % 2], self.slot_bytes, align)
            ox, ody = sl.operand((nr, n), dt), sl.operand((nr, n), dt)
            loads = (operand_in(ox, b["x"].addr, (batch, channel), (r0, start)),
                     operand_in(ody, b["dy"].addr, (batch, channel), (r0, start)))
            elems = nr * n  # the math's elements; the vector loop also spends the empty lanes of the last vector
            empty = nr * (padded_lanes(n, p.lanes) - n)
            if pname == "sums":
                def fn(x, dy, mean, invar, s1, s2):
                    d1, d2 = _sums(x, dy, mean, invar)
                    return s1 + d1, s2 + d2
                compute = Compute(fn, (ox, ody, om, oi, osum, osum2), (osum, osum2),
                                  flops=elems * FLOPS_SUMS, reductions=0, precision=COMPUTE_PRECISION,
                                  extra_ops=empty * FLOPS_SUMS)
                stores: tuple[Transfer, ...] = ()
            else:
                odx = ody  # dx is written over dy: the tile has read dy by then
                stores = (operand_out(odx, b["dx"].addr, (batch, channel), (r0, start)),)
                if pname == "dx":
                    def fn_dx(x, dy, mean, invar, scale, s1, s2, _m=batch, _dt=dt):
                        return (_dx(x, dy, mean, invar, scale, s1, s2, True, _m).astype(_dt, copy=False),)
                    compute = Compute(fn_dx, (ox, ody, om, oi, osc, osum, osum2), (odx,),
                                      flops=elems * FLOPS_DX_TRAIN, reductions=0, precision=COMPUTE_PRECISION,
                                      extra_ops=empty * FLOPS_DX_TRAIN)
                else:
                    def fn_infer(x, dy, mean, invar, scale, s1, s2, _dt=dt):
                        d1, d2 = _sums(x, dy, mean, invar)
                        dxv = _dx(x, dy, mean, invar, scale, s1, s2, False, 1).astype(_dt, copy=False)
                        return dxv, s1 + d1, s2 + d2
                    compute = Compute(fn_infer, (ox, ody, om, oi, osc, osum, osum2), (odx, osum, osum2),
                                      flops=elems * (FLOPS_SUMS + FLOPS_DX_INFER), reductions=0,
                                      precision=COMPUTE_PRECISION, extra_ops=empty * (FLOPS_SUMS + FLOPS_DX_INFER))
            self._add(out, Tile(self.tid, loads, compute, stores, slot=self.tid % 2))


KERNEL = BatchNormGrad()


def _zero_pair(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Two fp32 vectors of ``n`` zeros (a tile's fresh running sums)."""
    return np.zeros(n, F32), np.zeros(n, F32)
