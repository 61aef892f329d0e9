"""Which staged buffers a tile's loads read: the ones its loads wait for (the others only its compute waits for).

A tile's ``uses`` (:class:`~sim.model.plan.Tile`) name buffers its work needs filled.  Its loads need one filled
first only if they read its bytes (a panel of A copied out of a GSM block); a buffer only its compute reads (a B
block in AM) is waited for by the compute, while the loads stream, as a kernel on the chip issues a DMA at once
and waits for both before computing.  A buffer's bytes are every generation's filling loads' destinations,
merged: known from the plan alone, so the engine (:mod:`sim.engine.buffers`) and the startup bound
(:mod:`sim.startup`) agree.
"""

from __future__ import annotations

from collections.abc import Mapping

from sim.model.plan import AnyBufferRef, Phase, Tile, parse_buffer_ref
from sim.model.plan_alias import Spans, merged


def buffer_spans(phase: Phase) -> dict[str, Spans]:
    """Each buffer of ``phase``'s bytes: its filling tiles' load destinations (all generations), merged."""
    spans: dict[str, list[tuple[int, int]]] = {}
    for tiles in phase.tiles.values():
        for tile in tiles:
            for ref in tile.fills:
                spans.setdefault(parse_buffer_ref(ref)[0], []).extend(t.span("dst") for t in tile.loads)
    return {name: merged(got) for name, got in spans.items()}


def loads_read(tile: Tile, name: str, spans: Mapping[str, Spans]) -> bool:
    """Whether ``tile``'s loads read bytes of buffer ``name`` (a staging tile's always count: it has no compute
    to wait instead)."""
    if tile.fills:
        return True
    held = spans.get(name, ())
    for t in tile.loads:
        lo, hi = t.span("src")
        if any(lo < end and start < hi for start, end in held):
            return True
    return False


def read_uses(tile: Tile, spans: Mapping[str, Spans]) -> tuple[AnyBufferRef, ...]:
    """The buffers ``tile`` uses whose bytes its loads read (what its loads wait for)."""
    return tuple(ref for ref in tile.uses if loads_read(tile, parse_buffer_ref(ref)[0], spans))
