"""The plan of a depthwise input gradient's tiling: per core, per channel block, its tiles row by row.

Each tile loads its halo -- the out_backprop rows and columns whose receptive field reaches the tile --
accumulates every tap into its block of ``output`` and stores the block; the block's first tile also loads the
channel block's filter slice into one of the two filter areas of the fixed area.  The tiles alternate between the
two slots, so the next tile's DMA overlaps this tile's compute; big transfers are cut into enough descriptors for
the busy cores to use all of the tensors' region.
"""

from __future__ import annotations

import math

from kernels.base import PlanContext
from kernels.common import loops as lp
from kernels.common.geometry import AxisTaps, ConvGeometry
from kernels.common.scratch import Arena
from kernels.common.shares import ceil_div, split_even
from kernels.common.streams import CoreStream, phase_of, plan_of
from kernels.common.tensor_view import TensorView
from kernels.depthwise_conv2d_backprop_input.numerics import F32, tile_block, zero_block
from kernels.depthwise_conv2d_backprop_input.shapes import Share, TileShape
from kernels.depthwise_conv2d_backprop_input.space import CallTiling
from sim.model.call import BoundCall, Buffer
from sim.model.plan import Compute, Operand, Plan, TileFn, Transfer, c_strides
from sim.timing import streams_to_fill

#: The kernel's name, which the plan's one phase takes too (no core waits for another: each stores its own blocks).
NAME = "depthwise_conv2d_backprop_input"


def split_transfers(op: Operand, tensor: Buffer | TensorView, starts: tuple[int, ...], parts: int,
                    inbound: bool) -> tuple[Transfer, ...]:
    """The DMA of operand ``op`` to or from its block of ``tensor``, cut into up to ``parts`` descriptors.

    The cut runs along the operand's first axis longer than one, so every piece
    is a contiguous part of the dense scratch operand.
    """
    view = tensor if isinstance(tensor, TensorView) else TensorView.of(tensor)
    axis = next((i for i, n in enumerate(op.shape) if n > 1), None)
    pieces = split_even(op.shape[axis], parts) if axis is not None else [(0, 1)]
    step = c_strides(op.shape, op.dtype.itemsize)[axis] if axis is not None else 0
    out = []
    for a, b in pieces:
        shape, at = list(op.shape), list(starts)
        if axis is not None:
            shape[axis], at[axis] = b - a, at[axis] + a
        local = op.addr + a * step
        out.append(view.load_block(at, shape, local) if inbound else view.store_block(local, at, shape))
    return tuple(out)


class Planner(CallTiling):
    """Plans one call: its tiling space (:class:`~kernels.depthwise_conv2d_backprop_input.space.CallTiling`) and the
    plan of a tiling of it."""

    def __init__(self, call: BoundCall, ctx: PlanContext, geo: ConvGeometry, mult: int):
        super().__init__(call, ctx, geo, mult)
        self.filt, self.dy, self.out = (TensorView.of(call.buffer(n)) for n in ("filter", "out_backprop", "output"))
        self.dt = call.buffer("output").dtype

    def build(self, parts: int, shape: TileShape) -> Plan:
        """The plan: ``parts`` channel groups of cores, tiles of ``shape`` clipped to each core's share."""
        shares = self.shares(parts)
        streams = {core: self._core_stream(share, shape, len(shares)) for core, share in zip(self.call.cores, shares)}
        return plan_of(self.call, [phase_of(NAME, streams, barrier_after=False)])

    def descriptors(self, busy_cores: int) -> int:
        """Descriptors to cut each big transfer into: enough for ``busy_cores`` cores to use all of the tensors'
        region (one descriptor streams at most its DMA engine's rate, a core has so many engines)."""
        t = self.ctx.target
        region = next(r for r in t.regions if r.contains(self.dy.addr, 1))
        return max(1, min(t.dma.engines_per_core, ceil_div(streams_to_fill(t.dma, region), busy_cores)))

    def _core_stream(self, share: Share, shape: TileShape, busy_cores: int) -> CoreStream:
        """Per channel block, its tiles row by row; the block's first tile also loads its filter slice."""
        g = self.geo
        shape = share.clip(shape, g.in_h)
        pipeline = self.footprint.pipeline(shape)
        # Two filter areas, alternating by block: block k+1's slice loads (with its first tile, while block k's
        # last tile computes) into the area block k-1 used.
        fixed = pipeline.fixed()
        f_bytes = self.footprint.filter_bytes(shape.chans)
        filter_areas = (fixed.alloc(f_bytes), fixed.alloc(f_bytes))
        parts = self.descriptors(busy_cores)
        col_blocks = [g.col_taps(w0, min(w0 + shape.cols, g.in_w)) for w0 in range(0, g.in_w, shape.cols)]
        stream = CoreStream()
        for k, c0 in enumerate(range(share.c0, share.c1, shape.chans)):
            c1 = min(c0 + shape.chans, share.c1)
            o_f = Operand(filter_areas[k % 2], (g.filter_h, g.filter_w, c1 - c0, self.mult), self.dt)
            filter_load: tuple[Transfer, ...] = (self.filt.load(o_f, (0, 0, c0, 0)),)
            for n, r0, r1 in share.segments(g.in_h):
                for h0 in range(r0, r1, shape.rows):
                    rows = g.row_taps(h0, min(h0 + shape.rows, r1))
                    for cols in col_blocks:
                        self._tile(stream, pipeline.slot(stream.slot), n, rows, cols, c0, o_f, filter_load, parts)
                        filter_load = ()
        return stream

    def _tile(self, stream: CoreStream, arena: Arena, n: int, rows: AxisTaps, cols: AxisTaps, c0: int, o_f: Operand,
              filter_load: tuple[Transfer, ...], parts: int) -> None:
        """One tile in ``arena`` (its slot): load the out_backprop halo (and ``filter_load``), accumulate every
        tap, store the block."""
        g, dt, taps = self.geo, self.dt, self.taps
        ct = o_f.shape[2]
        o_out = arena.operand(g.order(1, rows.hi - rows.lo, cols.hi - cols.lo, ct), dt)
        stores = split_transfers(o_out, self.out, g.order(n, rows.lo, cols.lo, c0), parts, inbound=False)
        if not rows.taps or not cols.taps:
            zeros = lp.elementwise(taps.core, self.ctx.precision, math.prod(o_out.shape), loads=0, stores=1,
                                   label="zero block")
            stream.add(filter_load, Compute(TileFn(zero_block, (o_out.shape, dt)), (), (o_out,), flops=0,
                                            precision=taps.precision, loops=(zeros,)), stores)
            return
        o_dy = arena.operand(g.order(1, rows.o_n, cols.o_n, ct * self.mult), dt)
        if dt != F32:
            arena.alloc(o_out.size_bytes * F32.itemsize // dt.itemsize)  # where the fp32 accumulator lives
        loads = filter_load + split_transfers(o_dy, self.dy, g.order(n, rows.o_lo, cols.o_lo, c0 * self.mult),
                                              parts, inbound=True)
        # The math: a multiply-add per (tap, output position) pair; the loop says what it costs.
        math_flops = 2 * self.mult * ct * rows.pairs * cols.pairs
        loop = taps.loop(rows, cols, ct, self.asked["register_block"])
        stream.add(loads, Compute(TileFn(tile_block, (rows, cols, g, ct, dt)), (o_f, o_dy), (o_out,),
                                  flops=math_flops, precision=taps.precision, loops=(loop,)), stores)

