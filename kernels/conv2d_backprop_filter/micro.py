"""The inner loops of a row tile (what the timing model prices, :mod:`kernels.common.loops`) and the choice of its
micro-kernel: layout changes, the window's zero border or the im2col gather, then the GEMM micro-kernels."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from kernels.base import PRECISION_DTYPES
from kernels.common import loops as lp
from kernels.common.geometry import ConvGeometry, window_bound
from kernels.conv2d_backprop_filter.layout import _Block, window_cols
from kernels.conv2d_backprop_filter.numerics import F32
from sim.errors import KernelArgError
from sim.model.memo import memoized
from sim.model.plan import Loop
from sim.model.target import CoreModel, Target
from sim.timing import cheapest_loops

#: Where the micro-kernel reads A (the ``a_operand`` key): ``window``, the staged input window tap by tap (A's
#: rows are the window's positions: no gather, m_micro within a tap's channels); ``im2col``, im2col rows
#: gathered per tile (loads and stores), then any m_micro up to fh·fw·in_c.
A_OPERANDS = ("window", "im2col")
#: Most n_micro vectors and m_micro rows the kernel's own choice tries.
MICRO_N_VECTORS = 4
MICRO_M_ROWS = 32

#: A row tile's micro-kernel: (a_operand, m_micro, n_micro).
Micro = tuple[str, int, int]


class MicroAsk(NamedTuple):
    """The micro-kernel keys a caller's tiling fixes (None: the cost model picks)."""

    a_operand: str | None
    m_micro: int | None
    n_micro: int | None


class _TileShape(NamedTuple):
    """What a row tile's loops take from its block: its positions (the micro-kernels' k), its layout loops and
    its window's zero border."""

    positions: int
    layout: tuple[Loop, ...]
    padding: tuple[Loop, ...]


class _TileKind(NamedTuple):
    """Tiles of a slice whose micro-kernel options cost alike: as many positions, both starting the accumulator or
    neither, both windows with a zero border or neither.  The border's size is not part of the kind (it adds one
    loop to the window's options only): the first tile of a kind is priced, and its pick stands for the kind."""

    positions: int
    first: bool
    bordered: bool


def _blocks_of(total: int, size: int) -> list[tuple[int, int]]:
    """(block size, how many) covering ``total`` in blocks of ``size``: the full blocks and the remainder."""
    full, rest = divmod(total, size)
    return [(b, n) for b, n in ((size, full), (rest, 1)) if b and n]


@dataclass(frozen=True)
class TileLoops:
    """The loops of the row tiles of a filter slice of ``icg`` x ``ocg`` channels on ``core``, computing in
    ``precision`` tensors stored in ``storage``."""

    core: CoreModel
    precision: str
    storage: str
    geo: ConvGeometry
    icg: int
    ocg: int

    @property
    def convert(self) -> bool:
        """fp16 blocks widened to fp32 first (a chip without fp16 products accumulated in fp32)."""
        return PRECISION_DTYPES[self.storage].itemsize != F32.itemsize and self.precision == "fp32"

    @property
    def op_isz(self) -> int:
        """Bytes of an operand element as computed."""
        return F32.itemsize if self.convert else PRECISION_DTYPES[self.storage].itemsize

    @property
    def taps(self) -> int:
        """Taps of the filter (fh·fw)."""
        return self.geo.filter_h * self.geo.filter_w

    def x_cols(self) -> int:
        """Input columns any window touches (:func:`~kernels.conv2d_backprop_filter.layout.window_cols`)."""
        return window_cols(self.geo)

    def positions(self, blk: _Block) -> int:
        """Output positions of a row tile (the micro-kernels' k)."""
        return (blk.n1 - blk.n0) * (blk.r1 - blk.r0) * self.geo.out_w

    def layout_loops(self, blk: _Block) -> list[Loop]:
        """NCHW blocks transposed to channels-last (a butterfly: log2(lanes) permutes per vector) and fp16 blocks
        widened to fp32 when the chip computes them in fp32: a load, the permutes or conversion and the stores
        per vector of each staged block."""
        g = self.geo
        if not (g.nchw or self.convert):
            return []
        nb, rows = blk.n1 - blk.n0, blk.r1 - blk.r0
        h0, h1 = g.input_rows(blk.r0, blk.r1)
        staged = (("input", nb * max(h1 - h0, 0) * self.x_cols() * self.icg),
                  ("out_backprop", nb * rows * g.out_w * self.ocg))
        shuffles = (lp.lanes(self.core, self.storage).bit_length() - 1 if g.nchw else 0) + int(self.convert)
        what = " and ".join(w for w, on in (("to channels-last", g.nchw), ("to fp32", self.convert)) if on)
        return [lp.elementwise(self.core, self.storage, n, loads=1, stores=2 if self.convert else 1, valu=shuffles,
                               label=f"{name} {what}") for name, n in staged if n]

    def padding_loop(self, blk: _Block) -> list[Loop]:
        """The zero border of the input window (the micro-kernel reads its taps over every position): vector
        stores of zeros where the window lies outside the input."""
        g = self.geo
        nb, rows = blk.n1 - blk.n0, blk.r1 - blk.r0
        h0, h1 = g.input_rows(blk.r0, blk.r1)
        window = window_bound(rows, g.eff_h, g.stride_h) * window_bound(g.out_w, g.eff_w, g.stride_w)
        border = nb * max(window - max(h1 - h0, 0) * self.x_cols(), 0) * self.icg
        if not border:
            return []
        stored = "fp32" if self.op_isz == F32.itemsize else self.storage
        return [lp.elementwise(self.core, stored, border, loads=0, stores=1, label="zero border of the input window")]

    def gather_loop(self, positions: int) -> Loop:
        """The im2col gather: per position and filter row, the window's fw·icg elements (one run, or fw runs of
        icg when dilated) loaded and stored into the position's im2col row; runs that do not start on a vector
        boundary straddle one vector more on each side and need a two-source permute per vector stored."""
        g = self.geo
        per_vector = self.core.vector_width_bytes // self.op_isz
        run = g.filter_w * self.icg
        loads = -(-run // per_vector) if g.dilation_w == 1 else g.filter_w * -(-self.icg // per_vector)
        stores = -(-run // per_vector)
        shuffles = 0
        if self.icg % per_vector:
            loads, stores = loads + 1, stores + 1
            shuffles = stores
        return lp.gather_rows(self.core, positions * g.filter_h, load_vectors=loads, store_vectors=stores,
                              shuffles=shuffles, label=f"im2col gather {g.filter_h}x{g.filter_w}x{self.icg}")

    def micro_loops(self, positions: int, first: bool, micro: Micro) -> list[Loop]:
        """The GEMM micro-kernels of a tile: dW's rows (tap, channel) in blocks of m_micro, its columns in blocks
        of n_micro, each over the tile's positions (k).  With the window, a block stays within one tap's
        channels; with im2col rows it may span taps."""
        mode, m_r, n_r = micro
        rows, per = (self.taps * self.icg, 1) if mode == "im2col" else (self.icg, self.taps)
        out = []
        for m, m_count in _blocks_of(rows, m_r):
            for n, n_count in _blocks_of(self.ocg, n_r):
                out.append(lp.gemm_micro_kernel_from_am(self.core, self.precision, m, n, positions,
                                                         itemsize=self.op_isz, entries=per * m_count * n_count,
                                                         load_c=not first))
        return out

    def tile_loops(self, blk: _Block, first: bool, micro: Micro) -> tuple[Loop, ...]:
        """Every loop of a row tile: layout changes, then the window's zero border or the im2col gather, then
        the micro-kernels."""
        return self._loops_of(self.shape_of(blk), first, micro)

    def shape_of(self, blk: _Block) -> _TileShape:
        """All that a row tile's loops take from its block."""
        return _TileShape(self.positions(blk), tuple(self.layout_loops(blk)), tuple(self.padding_loop(blk)))

    def _loops_of(self, shape: _TileShape, first: bool, micro: Micro) -> tuple[Loop, ...]:
        loops = list(shape.layout)
        loops += [self.gather_loop(shape.positions)] if micro[0] == "im2col" else list(shape.padding)
        return tuple(loops + self.micro_loops(shape.positions, first, micro))

    def gathers(self) -> bool:
        """Whether the im2col gather of a slice's window row fits the core's vector registers (it moves the row's
        fw·icg elements in one trip: wide slices of wide filters do not)."""
        return self.gather_loop(1).vector_registers <= self.core.vector_registers

    def micro_fits(self, m_r: int, n_r: int) -> bool:
        """True when an m_r x n_r micro-kernel's live vectors fit the core's register file."""
        return _micro_fits(self.core, self.precision, self.op_isz, m_r, n_r)

    def options(self, asked: MicroAsk, shape: _TileShape, first: bool) -> list[tuple[Micro, tuple[Loop, ...]]]:
        """The micro-kernels a row tile may run, each with the tile's loops: the caller's keys where given
        (clipped to the tile); else every m_micro up to MICRO_M_ROWS rows (within a tap's channels with the
        window) and n_micro of 1 to MICRO_N_VECTORS vectors, among those that fit the vector registers."""
        return [(micro, self._loops_of(shape, first, micro)) for micro in self.micros(asked)]

    def micros(self, asked: MicroAsk) -> list[Micro]:
        """The micro-kernel shapes of :meth:`options`: a shape that does not fit the vector registers is skipped,
        so only the caller's own values can leave none, refused naming the key the caller gave."""
        lanes = lp.lanes(self.core, self.precision)
        modes = [m for m in ([asked.a_operand] if asked.a_operand else A_OPERANDS) if m != "im2col" or self.gathers()]
        if not modes:
            raise KernelArgError(f"argument 'tiling.a_operand': im2col gathers a position's {self.geo.filter_w} x "
                                 f"{self.icg} window row through more than the core's {self.core.vector_registers} "
                                 f"vector registers ({self.gather_loop(1).vector_registers}); take window, or a "
                                 f"smaller tiling.in_c_slice")
        n_opts = [min(asked.n_micro, self.ocg)] if asked.n_micro else sorted(
            {min(self.ocg, j * lanes) for j in range(1, MICRO_N_VECTORS + 1)})
        out: list[Micro] = []
        for mode in modes:
            limit = self.icg if mode == "window" else self.taps * self.icg
            m_opts = [min(asked.m_micro, limit)] if asked.m_micro else range(1, min(limit, MICRO_M_ROWS) + 1)
            out += [(mode, m_r, n_r) for n_r in n_opts for m_r in m_opts if self.micro_fits(m_r, n_r)]
        if not out:
            raise self.refusal(asked, modes)
        return out

    def refusal(self, asked: MicroAsk, modes: list[str] | None = None) -> KernelArgError:
        """The error of micro-kernel keys the caller gave of which no shape fits the vector registers (with the
        other key completed, if not given, from 1 row or column up): naming the key given (m_micro where both
        are), with the largest value of it that fits, if any."""
        lanes = lp.lanes(self.core, self.precision)
        modes = modes or ([asked.a_operand] if asked.a_operand else list(A_OPERANDS))
        # (the widest a_operand's rows: where neither fits, the largest m_micro that fits is no wider than that)
        limit = max(self.icg if mode == "window" else self.taps * self.icg for mode in modes)
        n_r = min(asked.n_micro, self.ocg) if asked.n_micro else min(self.ocg, lanes)
        if asked.m_micro:
            m_r = min(asked.m_micro, limit)
            key, shape = "m_micro", f"{m_r} x {n_r}"
            best = next((m for m in range(m_r - 1, 0, -1) if self.micro_fits(m, n_r)), None)
        else:
            key, shape = "n_micro", f"1 x {n_r}"
            best = next((n for n in range(n_r - 1, 0, -1) if self.micro_fits(1, n)), None)
        largest = f"; the largest that fits: {key}={best}" if best is not None else ""
        return KernelArgError(f"argument 'tiling.{key}': a {shape} micro-kernel needs more than the core's "
                              f"{self.core.vector_registers} vector registers (accumulators, B row, A vector and "
                              f"broadcasts){largest}")


@memoized
def _micro_fits(core: CoreModel, precision: str, itemsize: int, m_r: int, n_r: int) -> bool:
    """True when an m_r x n_r micro-kernel's live vectors fit ``core``'s register file."""
    loop = lp.gemm_micro_kernel_from_am(core, precision, m_r, n_r, 1, itemsize=itemsize)
    return loop.vector_registers <= core.vector_registers


@memoized
def micro_kernels(loops: TileLoops, asked: MicroAsk, target: Target,
                  sweeps: tuple[tuple[_Block, ...], ...]) -> tuple[tuple[Micro, ...], ...]:
    """The micro-kernel of every row tile of a slice's sweeps (one per core, each starting the accumulator on
    its first tile), in order: the cost model's pick (:func:`sim.timing.cheapest_loops`, what
    ``PlanContext.cheapest_loops`` asks: the option whose loops cost the tile the fewest cycles) among
    :meth:`TileLoops.options`.  Tiles of one kind (:class:`_TileKind`) take the pick made for the first of them,
    in sweep order, so each kind is priced once."""
    picked: dict[_TileKind, Micro] = {}
    out = []
    for blocks in sweeps:
        row = []
        for i, blk in enumerate(blocks):
            first = i == 0
            kind = _TileKind(loops.positions(blk), first, bool(loops.padding_loop(blk)))
            if kind not in picked:
                picked[kind] = _cheapest(loops, asked, target, loops.shape_of(blk), first)
            row.append(picked[kind])
        out.append(tuple(row))
    return tuple(out)


@memoized
def _cheapest(loops: TileLoops, asked: MicroAsk, target: Target, shape: _TileShape, first: bool) -> Micro:
    """The cost model's micro-kernel of a row tile of ``shape``: the tilings a search plans share their tiles'
    shapes, so each is priced once per call, not once per candidate."""
    return cheapest_loops(loops.options(asked, shape, first), target)
