"""BatchNormGrad of the chips' own kernel library: ``{fp,hp}_batch_norm_grad_{s,p}``.

On x, dy of shape [batch, channel] with per-channel mean, invar (1/sqrt(var+eps))
and scale, with m = batch and x̂ = (x - mean)·invar:

* dbias = Σ_batch dy, dscale = Σ_batch dy·x̂
* training:  dx = scale·invar/m · (m·dy − Σdy − x̂·Σdy·x̂)
* inference: dx = dy·scale·invar

``params`` is the C ``long long params[12]``: [0] mean*, [1] invar*, [2] scale*,
[3] dbias* (out), [4] dscale* (out), [5] batch, [6] channel, [7] is_train; given
as a sequence of 8 to 12 ints or as the address of an int64[12] array.

Plan: channels are split over the cores (channels sit on the vector lanes, so
the batch sums are vertical vector adds, no cross-lane reduction).  Each tile is
a block of channels over the whole batch when that fits the scratchpad; when the
batch is too long, a channel block is done in two passes over row tiles (sums
first, then dx), with the sums held in the scratchpad between passes.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from kernels.base import (PRECISION_DTYPES, ArgSpec, BoundCall, Buffer, Compute, MemoryReader, Phase, Plan,
                          PlanContext, Tile, Transfer, align_up, check_args, require_address, require_int, split_even)
from kernels.tiling import Arena, fits, operand_in, operand_out, padded_lanes
from sim.errors import KernelArgError, LayoutError

F32 = np.dtype(np.float32)
I64 = np.dtype(np.int64)
PARAM_NAMES = ("mean", "invar", "scale", "dbias", "dscale", "batch", "channel", "is_train")
#: Vector element operations per (row, channel) element: x̂ (2), Σdy (1), Σdy·x̂ (2), dx (5 / 2).
FLOPS_SUMS = 5
FLOPS_DX_TRAIN = 5
FLOPS_DX_INFER = 2


def batch_norm_grad_reference(x: np.ndarray, dy: np.ndarray, mean: np.ndarray, invar: np.ndarray,
                              scale: np.ndarray, is_train: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(dx, dbias, dscale) of whole tensors, computed in fp32 like the chip (dx in x's dtype)."""
    sdy, sdyxh = _sums(x, dy, mean, invar)
    return _dx(x, dy, mean, invar, scale, sdy, sdyxh, is_train, x.shape[0]).astype(x.dtype), sdy, sdyxh


def _sums(x: np.ndarray, dy: np.ndarray, mean: np.ndarray, invar: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    dyf = dy.astype(F32)
    xh = (x.astype(F32) - mean) * invar
    return dyf.sum(axis=0, dtype=F32), (dyf * xh).sum(axis=0, dtype=F32)


def _dx(x: np.ndarray, dy: np.ndarray, mean: np.ndarray, invar: np.ndarray, scale: np.ndarray,
        sdy: np.ndarray, sdyxh: np.ndarray, is_train: bool, m: int) -> np.ndarray:
    dyf = dy.astype(F32)
    if not is_train:
        return dyf * (scale * invar)
    xh = (x.astype(F32) - mean) * invar
    mf = F32.type(m)
    return (scale * invar / mf) * (mf * dyf - sdy - xh * sdyxh)


class BatchNormGrad:
    """The registry entry of batch_norm_grad."""

    name = "batch_norm_grad"
    args = (
        ArgSpec("x", "in_ptr", "address of x [batch, channel]"),
        ArgSpec("dy", "in_ptr", "address of dy [batch, channel]"),
        ArgSpec("dx", "out_ptr", "address of dx [batch, channel] (output)"),
        ArgSpec("params", "params", "long long params[12]: mean*, invar*, scale*, dbias*, dscale*, batch, "
                                    "channel, is_train -- 8..12 ints, or the address of an int64[12] array"),
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
        elif isinstance(raw, (list, tuple, np.ndarray)):
            values = list(raw)
            if not 8 <= len(values) <= 12:
                raise KernelArgError(f"argument 'params': expected 8 to 12 ints ({', '.join(PARAM_NAMES)}), "
                                     f"got {len(values)}")
            origin = "params"
        else:
            raise KernelArgError(f"argument 'params': expected a sequence of 8 to 12 ints or the address of an "
                                 f"int64[12] array, got {raw!r}")
        ptrs = [require_address(f"params[{i}] ({PARAM_NAMES[i]})", values[i]) for i in range(5)]
        batch = require_int(f"params[5] (batch)", values[5])
        channel = require_int(f"params[6] (channel)", values[6])
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
            require_int(f"params[{i}] (reserved)", values[i])
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
        """Channel blocks per core; whole-batch tiles when they fit, else two passes over row tiles."""
        batch, channel = call.attrs["batch"], call.attrs["channel"]
        dt = PRECISION_DTYPES[call.precision]
        lanes = ctx.target.core.precisions[self._compute_precision(ctx)].lanes
        shares = split_even(channel, len(call.cores))
        tiles: dict[int, tuple[Tile, ...]] = {}
        for core, (c0, c1) in zip(call.cores, shares):
            tiles[core] = tuple(self._core_tiles(call, ctx, c0, c1, batch, dt, lanes))
        return Plan(cores=call.cores, phases=(Phase("batch_norm_grad", tiles, barrier_after=False),),
                    precision=call.precision)

    @staticmethod
    def _compute_precision(ctx: PlanContext) -> str:
        # The chip accumulates in fp32 for both symbol precisions.
        return "fp32"

    def _core_tiles(self, call: BoundCall, ctx: PlanContext, c0: int, c1: int, batch: int, dt: np.dtype,
                    lanes: int) -> list[Tile]:
        span = c1 - c0
        align = ctx.alignment_bytes
        cap = ctx.scratch_size_bytes

        def whole_batch_fits(ct: int) -> bool:
            return fits([batch * ct * dt.itemsize] * 3 + [ct * 4] * 5, cap // 2, align)

        # Channel block: whole vectors, at least 4 blocks per core when the share allows (pipeline depth).
        want = max(lanes, padded_lanes(-(-span // 4), lanes))
        ct = min(span, want)
        while ct > lanes and not whole_batch_fits(ct):
            ct = max(lanes, ct // 2 // lanes * lanes)
        ct = min(ct, span)
        if whole_batch_fits(ct):
            return self._whole_batch_tiles(call, ctx, c0, c1, ct, batch, dt, lanes)
        return self._row_tiles(call, ctx, c0, c1, min(ct, lanes), batch, dt, lanes)

    def _whole_batch_tiles(self, call: BoundCall, ctx: PlanContext, c0: int, c1: int, ct: int, batch: int,
                           dt: np.dtype, lanes: int) -> list[Tile]:
        b = {buf.name: buf for buf in call.buffers}
        channel, is_train = call.attrs["channel"], call.attrs["is_train"]
        slots = []
        for s in range(2):
            arena = Arena(ctx.scratch_base + s * (ctx.scratch_size_bytes // 2), ctx.scratch_size_bytes // 2,
                          ctx.alignment_bytes)
            slots.append(arena)
        out: list[Tile] = []
        for i, start in enumerate(range(c0, c1, ct)):
            n = min(ct, c1 - start)
            arena = Arena(slots[i % 2].base, slots[i % 2].size_bytes, ctx.alignment_bytes)
            ox, ody = arena.operand((batch, n), dt), arena.operand((batch, n), dt)
            om, oi, osc = (arena.operand((n,), F32) for _ in range(3))
            odx = arena.operand((batch, n), dt)
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
                return _dx(x, dy, mean, invar, scale, sdy, sdyxh, _train, _m).astype(_dt), sdy, sdyxh

            per_elem = FLOPS_SUMS + (FLOPS_DX_TRAIN if is_train else FLOPS_DX_INFER)
            compute = Compute(fn, (ox, ody, om, oi, osc), (odx, odb, ods),
                              flops=batch * padded_lanes(n, lanes) * per_elem, reductions=0,
                              precision=self._compute_precision(ctx))
            out.append(Tile(tile_id=i, loads=loads, compute=compute, stores=stores, slot=i % 2))
        return out

    def _row_tiles(self, call: BoundCall, ctx: PlanContext, c0: int, c1: int, ct: int, batch: int,
                   dt: np.dtype, lanes: int) -> list[Tile]:
        """Batch too long for one tile: per channel block, pass 1 sums over row tiles, pass 2 writes dx."""
        b = {buf.name: buf for buf in call.buffers}
        channel, is_train = call.attrs["channel"], call.attrs["is_train"]
        align = ctx.alignment_bytes
        # Fixed block area: the block's vectors and running sums, two copies alternating by block.
        block_bytes = 5 * align_up(ct * 4, align)
        area = Arena(ctx.scratch_base, ctx.scratch_size_bytes, align)
        blocks = [area.alloc(block_bytes) for _ in range(2)]
        rest = ctx.scratch_size_bytes - (area.used + align)
        rows = max(1, min(batch, (rest // 2) // (3 * ct * dt.itemsize + 3 * align)))
        while rows > 1 and not fits([rows * ct * dt.itemsize] * 3, rest // 2, align):
            rows -= 1
        slot_base = [ctx.scratch_base + align * (-(-area.used // align)) + s * (rest // 2) for s in range(2)]
        if not fits([rows * ct * dt.itemsize] * 3, rest // 2, align):
            raise LayoutError(f"{call.symbol}: a tile of one row of {ct} channels does not fit the "
                              f"{ctx.scratch_size_bytes}-byte scratchpad")
        out: list[Tile] = []
        tid = 0
        for k, start in enumerate(range(c0, c1, ct)):
            n = min(ct, c1 - start)
            blk = Arena(blocks[k % 2], block_bytes, align)
            om, oi, osc, osum, osum2 = (blk.operand((n,), F32) for _ in range(5))
            vec_loads = (operand_in(om, b["mean"].addr, (channel,), (start,)),
                         operand_in(oi, b["invar"].addr, (channel,), (start,)),
                         operand_in(osc, b["scale"].addr, (channel,), (start,)))
            zero = (lambda _n=n: (np.zeros(_n, F32), np.zeros(_n, F32)))
            out.append(Tile(tid, vec_loads, Compute(zero, (), (osum, osum2), flops=2 * padded_lanes(n, lanes),
                                                     reductions=0, precision="fp32"), (), slot=2 + k % 2))
            tid += 1
            passes = ("sums", "dx") if is_train else ("both",)
            for pname in passes:
                for r0 in range(0, batch, rows):
                    nr = min(rows, batch - r0)
                    sl = Arena(slot_base[tid % 2], rest // 2, align)
                    ox, ody = sl.operand((nr, n), dt), sl.operand((nr, n), dt)
                    loads = (operand_in(ox, b["x"].addr, (batch, channel), (r0, start)),
                             operand_in(ody, b["dy"].addr, (batch, channel), (r0, start)))
                    elems = nr * padded_lanes(n, lanes)
                    if pname == "sums":
                        def fn(x, dy, mean, invar, s1, s2):
                            d1, d2 = _sums(x, dy, mean, invar)
                            return s1 + d1, s2 + d2
                        compute = Compute(fn, (ox, ody, om, oi, osum, osum2), (osum, osum2),
                                          flops=elems * FLOPS_SUMS, reductions=0, precision="fp32")
                        stores: tuple[Transfer, ...] = ()
                    else:
                        odx = sl.operand((nr, n), dt)
                        stores = (operand_out(odx, b["dx"].addr, (batch, channel), (r0, start)),)
                        if pname == "dx":
                            def fn(x, dy, mean, invar, scale, s1, s2, _m=batch, _dt=dt):
                                return (_dx(x, dy, mean, invar, scale, s1, s2, True, _m).astype(_dt),)
                            compute = Compute(fn, (ox, ody, om, oi, osc, osum, osum2), (odx,),
                                              flops=elems * FLOPS_DX_TRAIN, reductions=0, precision="fp32")
                        else:
                            def fn(x, dy, mean, invar, scale, s1, s2, _dt=dt):
                                d1, d2 = _sums(x, dy, mean, invar)
                                dxv = _dx(x, dy, mean, invar, scale, s1, s2, False, 1).astype(_dt)
                                return dxv, s1 + d1, s2 + d2
                            compute = Compute(fn, (ox, ody, om, oi, osc, osum, osum2), (odx, osum, osum2),
                                              flops=elems * (FLOPS_SUMS + FLOPS_DX_INFER), reductions=0,
                                              precision="fp32")
                    out.append(Tile(tid, loads, compute, stores, slot=tid % 2))
                    tid += 1
            out.append(Tile(tid, (), None, (operand_out(osum, b["dbias"].addr, (channel,), (start,)),
                                            operand_out(osum2, b["dscale"].addr, (channel,), (start,))),
                            slot=2 + k % 2))
            tid += 1
        return out


KERNEL = BatchNormGrad()
