"""Which DMA events of a trace read no bytes at their source: the members of a broadcast after the first.

A synchronised transfer whose members copy the same block of a shared region (a broadcast: B's block to every
core's AM) reads that block once (:func:`sim.model.sync.source_reads`; the roofline and the engine count it so).
Each member's trace event still carries the block's bytes, since each core receives them; summaries that count the
bytes a region moved take the source side of every member but the first (core order) out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sim.engine.events import DMA_KINDS, TraceEvent


def repeated_reads(events: Sequence[TraceEvent], regions: Mapping[str, Mapping] | None) -> frozenset[int]:
    """Indices into ``events`` of the synchronised DMAs whose source block (address and bytes, in a shared region)
    a member of the same group on a lower core reads already.  ``regions``: the trace's region facts (name ->
    ``kind``, :func:`sim.inspect.trace.region_facts`); a region they do not name is taken as shared."""
    first: dict[tuple, tuple[int, int]] = {}  # (group, source, bytes) -> (core, index) of its reader
    repeats: list[int] = []
    for i, e in enumerate(events):
        if e.sync is None or e.kind not in DMA_KINDS or e.src is None:
            continue
        if regions is not None and regions.get(e.src_region or "", {}).get("kind", "shared") != "shared":
            continue
        key = (e.sync, e.src_region, e.src, e.bytes)
        got = first.get(key)
        if got is None:
            first[key] = (e.core, i)
        elif e.core < got[0]:
            repeats.append(got[1])
            first[key] = (e.core, i)
        else:
            repeats.append(i)
    return frozenset(repeats)
