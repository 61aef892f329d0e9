"""The tiles both splits are made of: row tiles accumulating a filter slice's dW in the fixed area, and the drain
that casts the finished accumulator and stores it to ``output``."""

from __future__ import annotations

from collections.abc import Sequence

from kernels.common import loops as lp
from kernels.common.scratch import Scratch
from kernels.common.streams import CoreStream
from kernels.conv2d_backprop_filter.layout import _Block, _Group, _Layout
from kernels.conv2d_backprop_filter.micro import Micro, MicroAsk, TileLoops, micro_kernels
from kernels.conv2d_backprop_filter.numerics import COMPUTE_PRECISION, F32, cast_to, row_tile
from sim.model.plan import Compute, Loop, Operand, TileFn, Transfer


class _Tiles:
    """Writes a plan's tiles onto core streams: ``lay``'s call, with the micro-kernel keys ``asked`` fixes."""

    def __init__(self, lay: _Layout, asked: MicroAsk):
        self.lay, self.asked = lay, asked

    def tile_loops(self, grp: _Group) -> TileLoops:
        """The loops of the row tiles of slice ``grp``."""
        lay = self.lay
        return TileLoops(lay.core, lay.precision, lay.ctx.precision, lay.geo, grp.icg, grp.ocg)

    def micros(self, grp: _Group, sweeps: Sequence[Sequence[_Block]]) -> tuple[tuple[Micro, ...], ...]:
        """The micro-kernel of every row tile of slice ``grp``'s sweeps (one per core, in the plan's order)."""
        return micro_kernels(self.tile_loops(grp), self.asked, self.lay.ctx.target,
                             tuple(tuple(blocks) for blocks in sweeps))

    def accumulate(self, stream: CoreStream, blocks: Sequence[_Block], grp: _Group, sc: Scratch,
                   micros: Sequence[Micro]) -> None:
        """The row tiles of ``blocks`` (the first starts the accumulator), each with its micro-kernel."""
        loops = self.tile_loops(grp)
        for i, (blk, micro) in enumerate(zip(blocks, micros)):
            self._row_tile(stream, blk, grp, sc, i == 0, loops.tile_loops(blk, i == 0, micro))

    def _row_tile(self, stream: CoreStream, blk: _Block, grp: _Group, sc: Scratch, first: bool,
                  loops: tuple[Loop, ...]) -> None:
        """DMA the block's input window and dy rows, accumulate its contribution into the accumulator."""
        lay = self.lay
        g = lay.geo
        arena = sc.slot(stream.slot)
        acc = Operand(sc.fixed_base, (lay.fh, lay.fw, grp.icg, grp.ocg), F32)
        nb, rows = blk.n1 - blk.n0, blk.r1 - blk.r0
        h0, h1 = g.input_rows(blk.r0, blk.r1)
        cols = lay.x_cols()
        hl = max(h1 - h0, 0) if cols else 0
        x_shape = g.order(nb, hl, cols, grp.icg)
        loads, inputs = [], []
        if hl:
            ox = arena.operand(x_shape, lay.dt)
            loads.append(lay.x.load(ox, g.order(blk.n0, h0, 0, grp.ic0)))
            inputs.append(ox)
        ody = arena.operand(g.order(nb, rows, g.out_w, grp.ocg), lay.dt)
        loads.append(lay.dy.load(ody, g.order(blk.n0, blk.r0, 0, grp.oc0)))
        inputs.append(ody)
        if not first:
            inputs.append(acc)
        fn = TileFn(row_tile, (g, lay.fh, lay.fw, (blk.r0, blk.r1), g.nchw, bool(hl), first, x_shape))
        # The math: a multiply-add per tap, position and (in, out) channel pair; the loops say what it costs.
        math = 2 * lay.taps * nb * rows * g.out_w * grp.icg * grp.ocg
        stream.add(loads, Compute(fn, tuple(inputs), (acc,), flops=math, precision=lay.precision, loops=loops), ())

    def rows_out(self, src: int, m0: int, m1: int, grp: _Group) -> list[Transfer]:
        """DMA dense rows [m0, m1) of a dW slice (row m = tap·icg + channel) to their place in ``output``."""
        lay = self.lay
        if grp.icg == lay.in_c:
            return [lay.out_rows.store_block(src, (m0, grp.oc0), (m1 - m0, grp.ocg))]
        transfers = []
        for t in range(m0 // grp.icg, (m1 - 1) // grp.icg + 1):
            a, b = max(m0, t * grp.icg), min(m1, (t + 1) * grp.icg)
            transfers.append(lay.out_taps.store_block(src + (a - m0) * grp.ocg * lay.isz,
                                                      (t, grp.ic0 + a - t * grp.icg, grp.oc0), (1, b - a, grp.ocg)))
        return transfers

    def drain(self, stream: CoreStream, grp: _Group, sc: Scratch) -> None:
        """Cast the finished accumulator into the slots (freeing it for the next slice) and store it."""
        lay = self.lay
        m_rows = lay.taps * grp.icg
        per = lay.rows_per_tile([grp.ocg * lay.isz], m_rows, sc.slot_bytes)
        for m0 in range(0, m_rows, per):
            m1 = min(m_rows, m0 + per)
            acc_rows = Operand(sc.fixed_base + m0 * grp.ocg * F32.itemsize, (m1 - m0, grp.ocg), F32)
            dst = sc.slot(stream.slot).operand((m1 - m0, grp.ocg), lay.dt)
            # A cast, not math: per vector of the fp32 rows, a load, a conversion to fp16 (hp_) and a store.
            cast = lp.elementwise(lay.core, COMPUTE_PRECISION, (m1 - m0) * grp.ocg, loads=1, stores=1,
                                  valu=int(lay.isz != F32.itemsize), label="dW drain")
            compute = Compute(TileFn(cast_to, (lay.dt,)), (acc_rows,), (dst,), flops=0,
                              precision=COMPUTE_PRECISION, loops=(cast,))
            stream.add((), compute, self.rows_out(dst.addr, m0, m1, grp))
