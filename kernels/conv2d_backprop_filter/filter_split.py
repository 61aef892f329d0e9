"""The filter split: filter slices (out_c, and in_c when needed) over the cores, each core sweeping the whole input
for its slices and storing them; no exchange, one phase."""

from __future__ import annotations

from kernels.common.shares import core_shares
from kernels.common.streams import CoreStream, phase_of, plan_of
from kernels.conv2d_backprop_filter.tiles import _Tiles
from sim.model.plan import Plan


def filter_plan(tiles: _Tiles, icg: int, ocg: int) -> Plan:
    """Filter slices over the cores; each core sweeps every image for its slices and stores them."""
    lay = tiles.lay
    g = lay.geo
    sc = lay.scratch(icg, ocg)
    groups = lay.groups(icg, ocg)
    blocks = lay.blocks(0, g.batch * g.out_h, icg, ocg, sc)
    streams: dict[int, CoreStream] = {}
    for core, a, b in core_shares(lay.ctx.cores, len(groups)):
        stream = streams[core] = CoreStream()
        for grp in groups[a:b]:
            (micros,) = tiles.micros(grp, [blocks])
            tiles.accumulate(stream, blocks, grp, sc, micros)
            tiles.drain(stream, grp, sc)
    return plan_of(lay.call, [phase_of("filter_slices", streams, barrier_after=False)])
