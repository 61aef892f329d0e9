"""The tile shapes of a depthwise input gradient: what a tile of a shape takes of the vector staging level, and the
shapes worth pricing for a core's share of the work.

The level holds two filter slices in its fixed area (a channel block's slice loads with the block's first tile,
into the area the block before last used) and two slots of tiles (the next tile's DMA overlaps this tile's
compute), each holding a tile's output block and out_backprop halo, and beside an fp16 block its fp32
accumulator.  :func:`shape_options` is a pure function of hashable values, remembered by value
(:mod:`sim.model.memo`): the tiling space asks it for every tiling it lists.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kernels.common.geometry import ConvGeometry, halo_bound, image_segments
from kernels.common.pipeline import Pipeline, slot_fits
from kernels.common.scratch import align_up
from kernels.common.shares import ceil_div
from kernels.common.tiling_space import largest
from kernels.depthwise_conv2d_backprop_input.numerics import F32
from sim.model.memo import FrozenDict, memoized
from sim.model.target import StagingArea

#: What a slot holds of one tile (an fp16 tile also its fp32 accumulator, :data:`ACCUMULATOR`).
SLOT_OPERANDS = ("output block", "out_backprop halo")
ACCUMULATOR = "fp32 accumulator"
#: Halvings of a share's channels that :func:`shape_options` tries at most.
HALVINGS = 12


@dataclass(frozen=True)
class TileShape:
    """Input rows, input columns and channels of one tile."""

    rows: int
    cols: int
    chans: int


@dataclass(frozen=True)
class Share:
    """One core's part of the work: flattened (image·in_h + row) range and channel range."""

    g0: int
    g1: int
    c0: int
    c1: int

    def segments(self, in_h: int) -> list[tuple[int, int, int]]:
        """(image, first row, end row) pieces of the share, one per image it touches."""
        return image_segments(self.g0, self.g1, in_h)

    def segment_rows(self, in_h: int) -> list[int]:
        """Rows of each of the share's :meth:`segments`."""
        return [r1 - r0 for _, r0, r1 in self.segments(in_h)]

    def clip(self, shape: TileShape, in_h: int) -> TileShape:
        """``shape`` clipped to the share: no taller than its tallest segment, no wider than its channels."""
        return TileShape(min(shape.rows, max(self.segment_rows(in_h))), shape.cols,
                         min(shape.chans, self.c1 - self.c0))


@dataclass(frozen=True)
class Footprint:
    """What tiles of one call take of the vector staging ``level``: the geometry, the depth multiplier and the
    tensors' ``itemsize`` decide every size."""

    geo: ConvGeometry
    mult: int
    itemsize: int
    level: StagingArea

    def filter_bytes(self, chans: int) -> int:
        """Bytes of one (aligned) filter slice of ``chans`` channels."""
        g = self.geo
        return align_up(g.filter_h * g.filter_w * chans * self.mult * self.itemsize, self.level.alignment_bytes)

    def tile_bytes(self, t: TileShape) -> list[int]:
        """Bytes of a tile's slot buffers: output block, halo (+ fp32 accumulator for fp16)."""
        g = self.geo
        o_rows = min(g.out_h, halo_bound(t.rows, g.eff_h, g.stride_h))
        o_cols = min(g.out_w, halo_bound(t.cols, g.eff_w, g.stride_w))
        out = t.rows * t.cols * t.chans
        sizes = [out * self.itemsize, o_rows * o_cols * t.chans * self.mult * self.itemsize]
        if self.itemsize != F32.itemsize:
            sizes.append(out * F32.itemsize)
        return sizes

    def fits(self, t: TileShape) -> bool:
        """True when two filter slices and two slots of tiles of shape ``t`` fit the vector level."""
        return slot_fits(self.level, 2 * self.filter_bytes(t.chans), self.tile_bytes(t))

    def pipeline(self, t: TileShape) -> Pipeline:
        """The layout of tiles of shape ``t``; DoesNotFit naming the vector level when they do not fit."""
        g = self.geo
        operands = SLOT_OPERANDS if self.itemsize == F32.itemsize else (*SLOT_OPERANDS, ACCUMULATOR)
        return Pipeline.for_tile(self.level, operands, self.tile_bytes(t), 2 * self.filter_bytes(t.chans),
                                 tile=f"a tile of {t.rows} rows x {t.cols} columns x {t.chans} channels",
                                 fixed=f"two {g.filter_h}x{g.filter_w} filter slices of multiplier {self.mult}")

    def most_rows(self, rows: int, cols: int, chans: int) -> int:
        """The most rows (at most ``rows``, at least 1) whose tiles of ``cols`` x ``chans`` fit."""
        return largest(rows, lambda r: self.fits(TileShape(r, cols, chans)), lo=1)


def row_options(max_rows: int, seg_rows: list[int]) -> list[int]:
    """Row counts worth pricing: halvings of the most that fit, and even cuts of the segments (ascending)."""
    opts = {max(1, max_rows >> i) for i in range(max_rows.bit_length())}
    opts |= {ceil_div(r, k) for r in seg_rows[:2] for k in range(1, 9)}
    return sorted(o for o in opts if o <= max_rows)


@memoized
def shape_options(fp: Footprint, share: Share, grain: int) -> Mapping[int, tuple[TileShape, ...]]:
    """The tile shapes worth pricing for ``share``, by channels (whole vectors of ``grain`` channels in NHWC,
    halvings in NCHW), each with rows from halvings of the most that fit and even cuts of the segments
    (ascending); whole rows unless not one fits.  DoesNotFit when not one element per channel fits.  Frozen:
    the memo hands every caller the same value."""
    g = fp.geo
    seg_rows = share.segment_rows(g.in_h)
    chans = share.c1 - share.c0
    if not g.nchw:
        chan_options = sorted({min(chans, k * grain) for k in range(1, ceil_div(chans, grain) + 1)})
        if not fp.fits(TileShape(1, g.in_w, chan_options[0])):
            # Part-filled vectors only when a whole vector of channels cannot fit (very wide rows).
            chan_options = sorted({max(1, chans // 2 ** i) for i in range(HALVINGS)})
    else:
        chan_options = sorted({max(1, ceil_div(chans, 2 ** i)) for i in range(HALVINGS)})
    cols = g.in_w
    while True:
        out = {}
        for ct in chan_options:
            if fp.fits(TileShape(1, cols, ct)):
                out[ct] = tuple(TileShape(rows, cols, ct)
                                for rows in row_options(fp.most_rows(max(seg_rows), cols, ct), seg_rows))
        if out or cols == 1:
            break
        cols = ceil_div(cols, 2)
    if not out:
        fp.pipeline(TileShape(1, 1, chan_options[0]))  # raises: not one element per channel fits
    return FrozenDict(out)
