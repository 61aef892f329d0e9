"""What the engine records: one :class:`TraceEvent` per interval of activity of a core's unit.

:mod:`sim.inspect.trace` writes them out (Chrome trace JSON, CSV) and reads them back.
"""

from __future__ import annotations

from typing import NamedTuple

#: Event kinds the engine records.
KINDS = ("launch", "dma_in", "compute", "dma_out", "barrier_wait")
#: Kinds that move data.
DMA_KINDS = ("dma_in", "dma_out")


class TraceEvent(NamedTuple):
    """One interval of activity of one unit of one core (immutable).

    A named tuple rather than a frozen dataclass: a run records one event per
    DMA and compute, and a frozen dataclass's constructor sets each of its 15
    fields through ``object.__setattr__`` (as slow as a SimPy event); a named
    tuple is built in one call, with the same fields, defaults and keywords.
    ``TraceEvent._fields`` names the fields in order.

    ``unit`` is ``compute``, ``dma<k>`` (engine k of the core) or ``sync``
    (launch and barriers).  ``wait_cycles`` is, for a DMA, the cycles sharing
    bandwidth with other streams cost it (its stream's cycles beyond what they
    would be with its regions and engine to itself; ``wait_start`` is its
    stream's start, after the setup), and for a barrier the time spent waiting
    for other cores.  ``loops`` is, for a compute that states its inner loops,
    how they were priced (:func:`sim.timing.compute_text`: each loop's label,
    trips, initiation interval and the unit or issue class that bounds it, its
    fill, epilogue and overhead); None otherwise (and in traces written before).
    ``row_activations`` is, for a DMA, the DRAM rows it opened (:mod:`sim.model.dram`; 0 where it crosses no
    DRAM with rows, and in traces written before).  ``sync`` is, for a DMA that is a member of a synchronised
    transfer (``Transfer.sync``), its group's key (None otherwise): ``wait_start - start`` minus the DMA setup is
    then what it waited for the other members, and the group's row activations are on its first member's event.
    ``channel`` is, for a DMA issued on a numbered channel of its core (``Transfer.channel``), that channel (None
    otherwise): ``start`` is then when the channel was its, after the transfer before it there landed.
    """

    core: int
    unit: str
    kind: str
    start: int
    end: int
    bytes: int = 0
    src: int | None = None
    dst: int | None = None
    src_region: str | None = None
    dst_region: str | None = None
    tile: int | None = None
    phase: str | None = None
    flops: int = 0
    wait_cycles: int = 0
    wait_start: int | None = None
    loops: str | None = None
    row_activations: int = 0
    sync: str | None = None
    channel: int | None = None

    @property
    def cycles(self) -> int:
        """Duration of the event."""
        return self.end - self.start


class Recorder:
    """Collects the events of one run in the order the engine emits them."""

    def __init__(self) -> None:
        self.events: list[TraceEvent] = []

    def record(self, event: TraceEvent) -> None:
        """Append one event."""
        self.events.append(event)


#: The fields holding integers (cycles, bytes, addresses, ids, counts); the others hold text.
INT_FIELDS: frozenset[str] = frozenset(
    name for name, kind in TraceEvent.__annotations__.items()
    if getattr(kind, "__forward_arg__", kind) in ("int", "int | None"))
