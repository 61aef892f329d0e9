"""The inner loop of a depthwise input gradient's tile: the taps accumulated into blocks of output vectors held
in registers (:func:`~kernels.common.loops.tap_accumulate`), as the timing model prices it.

NHWC: vectors run along the channels (the multipliers interleaved as out_backprop stores them, folded once per
output vector in the epilogue); every FMAC takes its own out_backprop vector, loaded for its tap at that tap's
strided, dilated position: a load per FMAC, a wide load moving the adjacent vectors of consecutive positions when a
position's channels fill whole vectors.  NCHW: vectors run along an input row; each out_backprop vector needs a
permute (shifted onto the row's lanes at stride 1, spread onto every stride-th lane otherwise) and one load of its
own.  The filter's vectors for the block's channels stay in registers when they fit beside the block.  fp16
results are narrowed in the epilogue (and fp16 operands widened per load where the chip computes fp16 in fp32).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from kernels.base import PlanContext
from kernels.common import loops as lp
from kernels.common.geometry import AxisTaps, ConvGeometry
from kernels.common.shares import ceil_div
from kernels.depthwise_conv2d_backprop_input.numerics import F32
from sim.errors import KernelArgError
from sim.model.memo import memoized
from sim.model.plan import Loop
from sim.model.target import CoreModel, Target
from sim.timing import cheapest_loops

#: Most output vectors a tap loop accumulates at once (the register block) that the kernel's choice tries.
MAX_BLOCK = 32


class _Work(NamedTuple):
    """What a tile's taps ask of the loop, whatever its block: output vectors, FMACs, whether a wide load moves
    adjacent operand vectors, whether the multipliers fold, and the filter's vectors."""

    vectors: int
    fmacs: int
    adjacent: bool
    folds: bool
    filter_vectors: int


@dataclass(frozen=True)
class TapShape:
    """What every tap loop of one call shares: the core, the layout, the multiplier, the operands' itemsize, and
    the precision and lanes the loop computes in (a hashable value, so the block pick is remembered by value)."""

    core: CoreModel
    nchw: bool
    mult: int
    itemsize: int
    precision: str
    convert: bool
    lanes: int

    def blocked(self, work: _Work, block: int) -> Loop:
        """The tap loop of ``work`` in blocks of ``block`` output vectors."""
        entries = ceil_div(work.vectors, block)
        trips = ceil_div(work.fmacs, entries * block)
        resident = self.registers(block, work.filter_vectors) <= self.core.vector_registers
        shuffles = block * (int(self.nchw) + int(self.convert))
        narrow = int(self.itemsize != F32.itemsize)
        return lp.tap_accumulate(self.core, block=block, taps=trips, entries=entries, operand_pairs=work.adjacent,
                                 shuffles=shuffles, filter_loads=0 if resident else 1,
                                 epilogue_stores=ceil_div(block, self.mult) if work.folds else block,
                                 epilogue_valu=block * (int(work.folds) + narrow),
                                 registers=self.registers(block, work.filter_vectors if resident else 1),
                                 label=f"taps into {block} output vectors")

    def largest_block(self) -> int:
        """The most output vectors a tap loop may block (the filter's vectors streamed: one register for them)."""
        return max((b for b in range(1, MAX_BLOCK + 1) if self.registers(b, 1) <= self.core.vector_registers),
                   default=0)

    def check_block(self, block: int, vectors: int) -> None:
        """Refuse the caller's ``register_block`` where a tile of ``vectors`` output vectors would block more of
        them than the core's vector registers hold (the plan check's ``loop-registers`` rule otherwise)."""
        used = min(block, max(1, vectors))
        regs = self.registers(used, 1)
        if regs > self.core.vector_registers:
            raise KernelArgError(f"argument 'tiling.register_block': a tap loop of {used} output vectors keeps "
                                 f"{regs} vector registers live (fp32 accumulators, out_backprop vectors and a "
                                 f"filter vector), the core has {self.core.vector_registers}; the largest block "
                                 f"that fits: register_block={self.largest_block()}")

    def registers(self, block: int, filter_vectors: int) -> int:
        """Vector registers a tap loop of ``block`` output vectors keeps live: the fp32 accumulators, the loaded
        out_backprop vectors and ``filter_vectors`` filter vectors."""
        acc = block * lp.registers_for(self.core, self.lanes, F32.itemsize)
        return acc + block * lp.registers_for(self.core, self.lanes, self.itemsize) + filter_vectors


@memoized
def cheapest_block(shape: TapShape, work: _Work, target: Target) -> int:
    """The register block the cost model picks for ``work`` (:func:`sim.timing.cheapest_loops`, what
    ``PlanContext.cheapest_loops`` asks) among the blocks whose registers fit the core."""
    fitting = [b for b in range(1, min(MAX_BLOCK, work.vectors) + 1)
               if shape.registers(b, 1) <= shape.core.vector_registers]
    return cheapest_loops([(b, (shape.blocked(work, b),)) for b in fitting], target)


@memoized
def blocked_loop(shape: TapShape, work: _Work, block: int) -> Loop:
    """:meth:`TapShape.blocked`, remembered by value: a call's tiles (and the tilings a search plans) repeat a
    few works."""
    return shape.blocked(work, block)


class TapLoops:
    """The tap loops of one call's tiles, and the precision and lanes they compute in.

    The register block is the caller's (``register_block``, clipped to a tile's vectors) or else the cost model's
    pick (:func:`cheapest_block`), remembered by value for the chip it is priced on.
    """

    def __init__(self, ctx: PlanContext, geo: ConvGeometry, mult: int, itemsize: int):
        self.ctx, self.geo, self.mult, self.itemsize = ctx, geo, mult, itemsize
        self.core = ctx.target.core
        # hp_: fp16 products accumulated in fp32 where the chip has that rate, else widened to fp32 first.
        self.precision = lp.accumulate_precision(self.core, ctx.precision)
        self.convert = itemsize != F32.itemsize and self.precision == "fp32"
        self.lanes = lp.lanes(self.core, self.precision)
        self.shape = TapShape(self.core, geo.nchw, mult, itemsize, self.precision, self.convert, self.lanes)

    def loop(self, rows: AxisTaps, cols: AxisTaps, ct: int, asked: int | None = None) -> Loop:
        """The taps of a tile of ``ct`` channels accumulated into blocks of output vectors held in registers:
        blocks of ``asked`` vectors (the tiling's ``register_block``) when given, else the cheapest block the
        timing model prices."""
        work = self._work(rows, cols, ct)
        if asked is not None:
            self.shape.check_block(asked, work.vectors)
            return blocked_loop(self.shape, work, min(asked, max(1, work.vectors)))
        return blocked_loop(self.shape, work, cheapest_block(self.shape, work, self.ctx.target))

    def _work(self, rows: AxisTaps, cols: AxisTaps, ct: int) -> _Work:
        """What the taps of a tile of ``ct`` channels over ``rows`` x ``cols`` ask of its loop."""
        g, mult = self.geo, self.mult
        width = cols.hi - cols.lo
        if g.nchw:
            per_vector = sum(ceil_div(t[2], self.lanes) for t in cols.taps)
            vectors = ct * (rows.hi - rows.lo) * ceil_div(width, self.lanes)  # output vectors
            return _Work(vectors, mult * ct * rows.pairs * per_vector, False, False, g.filter_h * g.filter_w * mult)
        per_position = ceil_div(ct * mult, self.lanes)  # interleaved vectors of a position
        return _Work((rows.hi - rows.lo) * width * per_position, rows.pairs * cols.pairs * per_position,
                     (ct * mult) % self.lanes == 0, mult > 1, g.filter_h * g.filter_w * per_position)
