"""A core's tiles as a plan builds them: running tile ids and alternating slots, and phases of such streams.

The engine double-buffers by slot: it does not start a tile's loads before the previous tile of the same
slot has finished its stores.  A :class:`CoreStream` hands its tiles slots 0, 1, 0, 1 ... (by position),
unless a tile asks for its own (a fixed-area tile, a block resident between passes).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sim.model.call import BoundCall
from sim.model.plan import Compute, Phase, Plan, Tile, Transfer

#: The slot of tiles that work in the fixed area only (load per-phase vectors, publish sums): apart from the
#: streaming slots 0 and 1, so the next streamed tile's loads overlap them.
FIXED_SLOT = 2


class CoreStream:
    """The tiles of one core in one phase, with running tile ids and alternating slots."""

    def __init__(self, first_id: int = 0, slots: int = 2):
        self.tiles: list[Tile] = []
        self.next_id = first_id
        self.slots = slots

    def __len__(self) -> int:
        return len(self.tiles)

    @property
    def slot(self) -> int:
        """The slot the next tile takes when it names none (0, 1, 0, 1 ... by position in the stream)."""
        return len(self.tiles) % self.slots

    def add(self, loads: Sequence[Transfer], compute: Compute | None, stores: Sequence[Transfer],
            slot: int | None = None) -> Tile:
        """Append a tile (in the next alternating slot unless ``slot`` is given) and return it."""
        tile = Tile(self.next_id, tuple(loads), compute, tuple(stores), slot=self.slot if slot is None else slot)
        self.tiles.append(tile)
        self.next_id += 1
        return tile


def phase_of(name: str, streams: Mapping[int, CoreStream], barrier_after: bool = True,
             drop_empty: bool = False) -> Phase:
    """A phase of the cores' streams (``drop_empty``: cores whose stream is empty are left out of it)."""
    return Phase(name, {core: tuple(s.tiles) for core, s in streams.items() if s.tiles or not drop_empty},
                 barrier_after)


def plan_of(call: BoundCall, phases: Sequence[Phase]) -> Plan:
    """The call's plan of ``phases``; the last one never waits at a barrier (nothing follows it)."""
    out = list(phases)
    if out and out[-1].barrier_after:
        last = out[-1]
        out[-1] = Phase(last.name, last.tiles, barrier_after=False)
    return Plan(cores=call.cores, phases=tuple(out), precision=call.precision)
