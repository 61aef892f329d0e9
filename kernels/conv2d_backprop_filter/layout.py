"""What fits the staging levels: a filter slice's fp32 accumulator in the fixed area of the vector level, row tiles
of (image, output row) positions in its two slots, and the filter slices and row tiles a plan is cut into."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kernels.base import PlanContext
from kernels.common import loops as lp
from kernels.common.binding import attrs_of
from kernels.common.geometry import ConvGeometry, window_bound
from kernels.common.scratch import Scratch, align_up, aligned_bytes, fits
from kernels.common.tensor_view import TensorView
from kernels.common.tiling_space import largest, pipeline_tile, split_even
from kernels.conv2d_backprop_filter.numerics import F32
from sim.model.call import BoundCall


def window_cols(geo: ConvGeometry) -> int:
    """Input columns any window touches (all but those right of the last window): the columns a row tile loads."""
    return max(0, geo.input_cols(0, geo.out_w)[1])


@dataclass(frozen=True)
class FilterGradAttrs:
    """What binding found out about a call: its geometry and the filter's sizes [fh, fw, in_c, out_c]."""

    geometry: ConvGeometry
    filter_sizes: tuple[int, ...]


@dataclass(frozen=True)
class _Group:
    """A filter slice: input channels [ic0, ic1) x output channels [oc0, oc1)."""

    ic0: int
    ic1: int
    oc0: int
    oc1: int

    @property
    def icg(self) -> int:
        """Input channels of the slice."""
        return self.ic1 - self.ic0

    @property
    def ocg(self) -> int:
        """Output channels of the slice."""
        return self.oc1 - self.oc0


@dataclass(frozen=True)
class _Block:
    """A row tile: images [n0, n1), output rows [r0, r1) of each."""

    n0: int
    n1: int
    r0: int
    r1: int


class _Layout:
    """A call's sizes, views and staging levels, and what of it fits them."""

    def __init__(self, call: BoundCall, ctx: PlanContext):
        self.call, self.ctx = call, ctx
        attrs = attrs_of(call, FilterGradAttrs)
        self.geo = attrs.geometry
        self.fh, self.fw, self.in_c, self.out_c = attrs.filter_sizes
        self.taps = self.fh * self.fw
        self.x, self.dy = TensorView.of(call.buffer("input")), TensorView.of(call.buffer("out_backprop"))
        out = call.buffer("output")
        # dW as its rows (tap, input channel) by out_c, whole or tap by tap: the drain stores slices of either.
        self.out_rows = TensorView.of(out, (self.taps * self.in_c, self.out_c))
        self.out_taps = TensorView.of(out, (self.taps, self.in_c, self.out_c))
        self.dt = out.dtype
        self.isz = self.dt.itemsize
        self.core = ctx.target.core
        # hp_: fp16 products accumulated in fp32 where the chip has that rate, else converted to fp32 first.
        self.precision = lp.accumulate_precision(self.core, ctx.precision)
        self.lanes = lp.lanes(self.core, self.precision)
        self.level = ctx.vector_level
        self.align = self.level.alignment_bytes
        # Cores with (image, row) work in the spatial split.
        self.active = ctx.cores[:min(len(ctx.cores), self.geo.batch * self.geo.out_h)]

    # -- the fp32 accumulator of a slice in the fixed area, then two slots of row tiles ------------------------

    def acc_bytes(self, icg: int, ocg: int) -> int:
        """Bytes of the fp32 accumulator of a slice of icg x ocg channels (aligned)."""
        return align_up(self.taps * icg * ocg * F32.itemsize, self.align)

    def scratch(self, icg: int, ocg: int) -> Scratch:
        """The vector level of slices of icg x ocg channels: the accumulator, then the two slots."""
        return Scratch(self.level, self.acc_bytes(icg, ocg))

    def x_cols(self) -> int:
        """Input columns any window touches (:func:`window_cols`)."""
        return window_cols(self.geo)

    def tile_bytes(self, icg: int, ocg: int, nb: int, rows: int) -> list[int]:
        """Bytes of a row tile's input window and dy rows (upper bound: the window unclipped at the top)."""
        g = self.geo
        in_rows = min(window_bound(rows, g.eff_h, g.stride_h), g.in_h)
        return [nb * in_rows * self.x_cols() * icg * self.isz, nb * rows * g.out_w * ocg * self.isz]

    def reduce_row_bytes(self, ocg: int) -> list[int]:
        """One row of a reduce tile: every core's partial row and the result row."""
        return [ocg * F32.itemsize * len(self.ctx.cores), ocg * self.isz]

    def slices_fit(self, icg: int, ocg: int, half: bool = True) -> tuple[bool, bool]:
        """(the accumulator fits half the scratchpad, or with ``half`` False the scratchpad; that and a one-row
        tile and a reduce row fit each of the two slots left).  Half is the slices the space prefers (row tiles of
        half the scratchpad); larger accumulators leave shorter tiles, but fewer slices, and the search prices
        both."""
        if self.acc_bytes(icg, ocg) > (self.level.size_bytes // 2 if half else self.level.size_bytes):
            return False, False
        slot = Scratch.slot_bytes_for(self.level, self.acc_bytes(icg, ocg))
        return True, (fits(self.tile_bytes(icg, ocg, 1, 1), slot, self.align)
                      and fits(self.reduce_row_bytes(ocg), slot, self.align))

    def needed_bytes(self, icg: int, ocg: int) -> int:
        """Bytes of the scratchpad slices of icg x ocg channels need: the accumulator and two slots of a one-row
        tile or reduce row, whichever is larger."""
        row = max(aligned_bytes(self.tile_bytes(icg, ocg, 1, 1), self.align),
                  aligned_bytes(self.reduce_row_bytes(ocg), self.align))
        return self.acc_bytes(icg, ocg) + 2 * row

    def fitting_slices(self, icg: int, ocg: int, half: bool = True) -> tuple[int, int] | None:
        """The largest (icg, ocg) whose accumulator takes at most half the scratchpad (``half`` False: what leaves
        two slots of a one-row tile) and a one-row tile fits."""
        while True:
            acc_ok, all_ok = self.slices_fit(icg, ocg, half)
            if all_ok:
                return icg, ocg
            if icg == 1 and ocg == 1:
                return None
            x_b, dy_b = self.tile_bytes(icg, ocg, 1, 1)
            if acc_ok:
                # The tile is too big: shrink the side whose block is the larger.
                shrink_ic = icg > 1 and (x_b >= dy_b or ocg == 1)
            else:
                # The accumulator is too big: cut out_c first (input blocks stay whole rows in NHWC).
                shrink_ic = ocg == 1
            if shrink_ic:
                icg = self.shrink(icg)
            else:
                ocg = self.shrink(ocg)

    def fitting_out_c(self, icg: int, half: bool = True) -> int | None:
        """The largest out_c slice (halvings on whole vectors) that fits with ``icg`` input channels, or None
        (``half``: as :meth:`slices_fit`)."""
        ocg = self.out_c
        while not self.slices_fit(icg, ocg, half)[1]:
            if ocg == 1:
                return None
            ocg = self.shrink(ocg)
        return ocg

    def shrink(self, n: int) -> int:
        """About half of ``n``, on whole vectors while it is more than one vector."""
        half = -(-n // 2)
        return max(1, half // self.lanes * self.lanes if half > self.lanes else half)

    def rows_per_tile(self, row_bytes: Sequence[int], total: int, slot: int) -> int:
        """Most rows (<= total) whose operands of ``row_bytes`` per row each fit one slot."""
        per = max(1, min(total, slot // max(sum(row_bytes), 1)))
        return largest(per, lambda k: fits([k * b for b in row_bytes], slot, self.align), lo=1)

    # -- the slices and row tiles of a plan ----------------------------------------------------------------

    def groups(self, icg: int, ocg: int) -> list[_Group]:
        """The filter slices of icg x ocg channels (the last ones of each side may be short)."""
        return [_Group(i, min(i + icg, self.in_c), o, min(o + ocg, self.out_c))
                for i in range(0, self.in_c, icg) for o in range(0, self.out_c, ocg)]

    def blocks(self, start: int, stop: int, icg: int, ocg: int, sc: Scratch) -> list[_Block]:
        """Row tiles covering flattened (image, output row) indices [start, stop), each fitting a slot.

        Tiles take at most 1/MIN_TILES_PER_CORE of the range when they can, so the DMA of
        the next tile has a tile's compute to hide behind (pipeline depth).
        """
        g = self.geo
        cap = pipeline_tile(stop - start)
        rows_max = min(largest(g.out_h, lambda r: fits(self.tile_bytes(icg, ocg, 1, r), sc.slot_bytes, self.align),
                               lo=1), cap)
        images_max = 1
        if rows_max >= g.out_h:
            images_max = largest(g.batch, lambda k: k * g.out_h <= cap and fits(
                self.tile_bytes(icg, ocg, k, g.out_h), sc.slot_bytes, self.align), lo=1)
        out: list[_Block] = []
        pos = start
        while pos < stop:
            n, r = divmod(pos, g.out_h)
            if r == 0 and stop - pos >= g.out_h and rows_max >= g.out_h:
                k = min(images_max, (stop - pos) // g.out_h)
                out.append(_Block(n, n + k, 0, g.out_h))
                pos += k * g.out_h
                continue
            seg = min(g.out_h - r, stop - pos)
            # Even tiles over the segment: the pipeline's steps stay alike.
            for a, b in split_even(seg, -(-seg // rows_max)):
                out.append(_Block(n, n + 1, r + a, r + b))
            pos += seg
        return out
