"""The tiling space of a depthwise input gradient: how the cores split the work (``channel_parts``), the tile shape
(``tile_channels``, ``tile_cols``, ``tile_rows``, the values worth trying for the first core's share) and, per
tile, ``register_block``; with the space's ``fit`` (a tile fits the vector staging level) and ``tiles``.

Row cuts re-read halo rows, channel cuts (whole vectors in NHWC) may leave cores idle or lanes empty; few large
tiles spend fewer DMA setups, smaller ones keep the unhidden first load and last store short.  The search
(:mod:`sim.tuning`) chooses among them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kernels.base import PlanContext
from kernels.common.geometry import ConvGeometry
from kernels.common.shares import ceil_div, split_even, split_units
from kernels.common.tiling_space import IntKey, TilingSpace
from kernels.common.transfers import channel_grain
from kernels.depthwise_conv2d_backprop_input.shapes import (
    Footprint,
    Share,
    TileShape,
    row_options,
    shape_options,
)
from kernels.depthwise_conv2d_backprop_input.tap_loop import MAX_BLOCK, TapLoops
from sim.model.call import BoundCall
from sim.model.plan import DoesNotFit


def tile_shape(tiling: Mapping[str, Any]) -> TileShape:
    """The tile shape a full tiling names."""
    return TileShape(tiling["tile_rows"], tiling["tile_cols"], tiling["tile_channels"])


class CallTiling:
    """One call's tiling space (:attr:`space`) and what its values are worked out from: the cores' shares of each
    channel split, what a tile takes of the vector staging level (:attr:`footprint`) and its tap loops
    (:attr:`taps`).  ``asked`` holds the keys the caller fixed."""

    def __init__(self, call: BoundCall, ctx: PlanContext, geo: ConvGeometry, mult: int):
        self.call, self.ctx, self.geo, self.mult = call, ctx, geo, mult
        itemsize = call.buffer("output").dtype.itemsize
        self.taps = TapLoops(ctx, geo, mult, itemsize)
        self.footprint = Footprint(geo, mult, itemsize, ctx.vector_level)
        # NHWC channel cuts: whole vectors, and whole bursts of the tensors' region.
        self.grain = channel_grain(ctx, call.buffer("out_backprop").addr, itemsize, self.taps.lanes)
        g = geo
        units = g.in_c if g.nchw else ceil_div(g.in_c, self.grain)  # (what a channel cut cuts on)
        max_parts = min(len(call.cores), units)
        self.space = TilingSpace(
            IntKey("channel_parts", 1, max_parts, "channel groups the cores form (1: rows only)",
                   values=range(max_parts, 0, -1)),
            IntKey("tile_channels", 1, g.in_c, "channels of a tile", values=self._chan_values),
            IntKey("tile_cols", 1, g.in_w, "input columns of a tile", values=self._col_values),
            IntKey("tile_rows", 1, g.in_h, "input rows of a tile", values=self._row_values),
            IntKey("register_block", 1, MAX_BLOCK, "output vectors a tap loop accumulates in registers",
                   scope="compute", values=range(1, self.taps.shape.largest_block() + 1)),
            fit=self._fit, tiles=self._tiles,
            # Channel splits the climb's steps of one group at a time may not reach: the tile shape that suits the
            # preferred split's shares (its first steps keep it) seldom suits a split two or more groups away, so
            # the climb stops short of it (1x56x56x128 on seven FT78NE cores: 4 groups, 175,236 cycles; 2 groups,
            # their own rows, 169,168).  Those that cut the channels into equal groups (an uneven cut leaves the
            # busiest group a whole cut more, its cores' rows no fewer): each priced at its tiling nearest the
            # climb's end, the climb going on from it if it is the cheapest.
            starts=tuple({"channel_parts": p} for p in range(max_parts - 2, 0, -1) if units % p == 0))
        self.asked = self.space.parse(ctx)

    def shares(self, p_chans: int) -> list[Share]:
        """``p_chans`` channel groups of cores (channels, or whole vectors of them in NHWC, split evenly), each
        group's cores splitting the rows of every image."""
        g = self.geo
        p_rows = min(g.batch * g.in_h, len(self.call.cores) // p_chans)
        chans = split_units(g.in_c, 1 if g.nchw else self.grain, p_chans)
        return [Share(g0, g1, c0, c1) for g0, g1 in split_even(g.batch * g.in_h, p_rows) for c0, c1 in chans]

    def tile_count(self, share: Share, shape: TileShape) -> int:
        """Tiles of a core's ``share`` cut into tiles of ``shape``."""
        rows = sum(ceil_div(r, shape.rows) for r in share.segment_rows(self.geo.in_h))
        return rows * ceil_div(share.c1 - share.c0, shape.chans) * ceil_div(self.geo.in_w, shape.cols)

    # -- the keys' values: the first core's share of each split ----------------------------------------------

    def _options(self, parts: int) -> Mapping[int, tuple[TileShape, ...]]:
        """The tile shapes worth pricing for the first core's share with ``parts`` channel groups."""
        return shape_options(self.footprint, self.shares(parts)[0], self.grain)

    def _chan_values(self, tiling: Mapping[str, Any]) -> list[int]:
        """Channels of a tile worth trying with ``tiling['channel_parts']`` groups: those whose tallest tile holds
        the most elements first, then the widest (nothing fits: one channel, which the space's ``fit`` refuses
        naming the bytes)."""
        try:
            opts = self._options(tiling["channel_parts"])
        except DoesNotFit:
            return [1]
        return sorted(opts, key=lambda ct: (-max(s.rows * s.cols * s.chans for s in opts[ct]), -ct))

    def _col_values(self, tiling: Mapping[str, Any]) -> list[int]:
        """Columns of a tile: whole rows, unless not one fits (then the halvings that do; nothing fits: one)."""
        try:
            opts = self._options(tiling["channel_parts"])
        except DoesNotFit:
            return [1]
        shapes = opts.get(tiling["tile_channels"]) or next(iter(opts.values()))
        return [shapes[0].cols]

    def _row_values(self, tiling: Mapping[str, Any]) -> list[int]:
        """Rows of a tile worth trying: halvings of the most that fit and even cuts of the segments, tallest
        first."""
        share = self.shares(tiling["channel_parts"])[0]
        seg_rows = share.segment_rows(self.geo.in_h)
        chans = min(tiling["tile_channels"], share.c1 - share.c0)
        most = self.footprint.most_rows(max(seg_rows), tiling["tile_cols"], chans)
        return sorted(row_options(most, seg_rows), reverse=True)

    def _fit(self, tiling: Mapping[str, Any]) -> None:
        """The space's ``fit``: a tile of the shape (clipped to the first core's share) fits the scratchpad, and
        the caller's ``register_block``, clipped to such a tile's output vectors, fits the vector registers."""
        shape = self.shares(tiling["channel_parts"])[0].clip(tile_shape(tiling), self.geo.in_h)
        self.footprint.pipeline(shape)
        block = tiling.get("register_block")
        if block is not None:
            self.taps.shape.check_block(block, self.tile_vectors(shape))

    def tile_vectors(self, shape: TileShape) -> int:
        """Output vectors of a tile of ``shape`` (the most a tap loop of its tiles blocks)."""
        lanes = self.taps.lanes
        if self.geo.nchw:
            return shape.chans * shape.rows * ceil_div(shape.cols, lanes)
        return shape.rows * shape.cols * ceil_div(shape.chans * self.mult, lanes)

    def _tiles(self, tiling: Mapping[str, Any]) -> int:
        """The space's ``tiles``: every core's tiles."""
        shape = tile_shape(tiling)
        return sum(self.tile_count(share, shape) for share in self.shares(tiling["channel_parts"]))
