"""Synchronised transfers (``Transfer.sync``): which transfers of a plan move together, and what one group asks of
memory (no timing here: :mod:`sim.engine.sync` runs a group, :func:`sim.timing.roofline` bounds it).

The chip's DMA can synchronise the descriptors of several cores (the library's row-synchronised transfers): each
core programs its own descriptor on its own engine, and the group's runs then stream in lock step, run ``i`` of
every member before run ``i + 1`` of any, in core order.  Two things follow from the addresses alone:

* a DRAM sees one merged stream, so the rows it opens are the merged stream's
  (:func:`sim.model.dram.interleaved_row_use`): the cores' neighbouring runs of one row open it once, where the
  same runs streamed at different times would each open it; members that copy within one DRAM whose bus turns
  are two merged streams, reads and writes, served a write batch at a time
  (:func:`sim.model.dram.interleaved_copy_row_use`);
* a source block that several members read alike (the same address, shape and strides) from a shared region is
  read once and delivered to each of them (a broadcast).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from sim.model.dram import NO_ROWS, RowUse, interleaved_copy_row_use, interleaved_row_use
from sim.model.plan import Plan, Tile, Transfer
from sim.model.target import Region


class SyncMember(NamedTuple):
    """One member of a synchronised transfer: the core that issues it, its tile, and its descriptor."""

    core: int
    tile: Tile
    transfer: Transfer


def sync_groups(plan: Plan) -> dict[str, tuple[SyncMember, ...]]:
    """Every synchronised transfer of ``plan``: its key (``Transfer.sync``) -> its members in core order (the plan
    check has made sure that a key names one group of one phase, each member on its own core).  Worked out once
    per plan (kept on it, outside its fields)."""
    kept = plan.__dict__.get("_sync_groups")
    if kept is not None:
        return kept
    groups: dict[str, list[SyncMember]] = {}
    for phase in plan.phases:
        for core, tiles in phase.tiles.items():
            for tile in tiles:
                for t in tile.loads + tile.stores:
                    if t.sync is not None:
                        groups.setdefault(t.sync, []).append(SyncMember(core, tile, t))
    out = {key: tuple(sorted(members, key=lambda m: m.core)) for key, members in groups.items()}
    plan.__dict__["_sync_groups"] = out
    return out


def source_reads(transfers: Sequence[Transfer], src_regions: Sequence[Region]) -> tuple[bool, ...]:
    """Per member (core order), whether its source read counts: False for a member whose source block in a shared
    region is one an earlier member reads alike (same address, shape, itemsize and strides): a broadcast reads it
    once."""
    seen: set[tuple] = set()
    out = []
    for t, region in zip(transfers, src_regions):
        key = (t.src, t.shape, t.itemsize, t.src_strides)
        out.append(not (region.shared and key in seen))
        if region.shared:
            seen.add(key)
    return tuple(out)


def group_row_uses(transfers: Sequence[Transfer], src_regions: Sequence[Region], dst_regions: Sequence[Region],
                   reads: Sequence[bool]) -> list[tuple[Region, RowUse]]:
    """The DRAM rows a synchronised transfer opens: per shared region with rows, the merged stream of every
    member's side in it (each member's source side where its read counts, then its destination side, members in
    core order), as :func:`~sim.model.dram.interleaved_row_use` walks it; where the members both read and write a
    DRAM whose bus turns, its reads and its writes as two streams served batch by batch, as one copy within a DRAM is
    (:func:`~sim.model.dram.interleaved_copy_row_use`).  (A private DRAM is each core's own: a member's side there
    is counted alone by the engine's usual rule, not here.)"""
    Block = tuple[int, tuple[int, ...], int, tuple[int, ...]]
    sides: dict[str, tuple[Region, list[Block], list[Block], list[Block]]] = {}
    for t, src, dst, read in zip(transfers, src_regions, dst_regions, reads):
        for region, addr, strides, counts, writes in ((src, t.src, t.src_strides, read, False),
                                                      (dst, t.dst, t.dst_strides, True, True)):
            if counts and region.shared and region.rows is not None:
                _, blocks, read_blocks, write_blocks = sides.setdefault(region.name, (region, [], [], []))
                block = (addr - region.base, t.shape, t.itemsize, strides)
                blocks.append(block)
                (write_blocks if writes else read_blocks).append(block)
    out = []
    for region, blocks, read_blocks, write_blocks in sides.values():
        rows = region.rows
        assert rows is not None
        if read_blocks and write_blocks and rows.turns_around:
            use = interleaved_copy_row_use(rows, read_blocks, write_blocks)
        else:
            use = interleaved_row_use(rows, blocks)
        if use != NO_ROWS:
            out.append((region, use))
    return out
