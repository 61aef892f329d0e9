"""A DRAM's data bus turning around between reads and writes: the coupling of a DRAM region's link.

A DRAM channel's data bus carries either reads or writes.  While both stream through a DRAM region at once, its
controller drains the writes in batches of ``rows.write_batch_bytes`` while the reads wait, then turns back to the
reads: each batch costs the channel ``rows.write_to_read_cycles + rows.read_to_write_cycles`` of idle bus (DDR4:
tWTR + CL after the last write, two clocks after the last read), in which it moves none of the region's bytes.  The
region's bandwidth is its channels' together, the writes spread over them, so each byte written beside reads costs
the region

    alpha = (write_to_read_cycles + read_to_write_cycles) * bandwidth_bytes_per_cycle
            / (channels * write_batch_bytes)

bytes of bus on top of itself.  :class:`Turnaround` is the coupling (:meth:`sim.engine.fluid.FlowNetwork.couple`)
that charges it: whenever a flow starts on the region's link or leaves it, each flow that writes through it moves
``its bytes + alpha * its written bytes`` through the link while another flow reads there (one of its priority or
a higher one: ``Transfer.priority``), and its plain bytes otherwise.  A copy within the region reads and writes
it itself: it asks for its own turns from the start (:func:`sim.timing.copy_turn_bytes`) and the coupling leaves
it be.  The region's capacity lost to the turns is
so shared by every flow on it, max-min fairly, and the turns cost nothing while only reads or only writes stream:
the effect follows from which streams overlap in the SimPy model.  A transfer's ``wait_cycles`` include what the
turns beside other streams cost it; its alone time (:func:`sim.timing.stream_cycles`) and the run's bounds count
only a copy's own.
"""

from __future__ import annotations

from fractions import Fraction

from sim.engine.fluid import Flow, FlowNetwork, Link
from sim.model.target import Region
from sim.timing import bus_cost_per_written_byte


class Turnaround:
    """The coupling of one DRAM region's link: writers pay ``alpha`` per written byte while anything reads there."""

    __slots__ = ("_kinds", "alpha")

    def __init__(self, alpha: Fraction) -> None:
        self.alpha = Fraction(alpha)
        # What each flow shape is to the link, worked out once (flows of one shape stream tile after tile): keyed
        # by id of the shape's demands, which the entry keeps alive.
        self._kinds: dict[int, tuple[tuple, int, int, int, int, int]] = {}

    @classmethod
    def of_region(cls, region: Region) -> Turnaround:
        """The coupling of ``region``'s link (its ``alpha``: :func:`sim.timing.bus_cost_per_written_byte`)."""
        return cls(bus_cost_per_written_byte(region))

    def __call__(self, net: FlowNetwork, link: Link) -> None:
        kinds = [(f, self._kind(f, link)) for f in link.flows]
        # Anything reading through the link (a flow moving more bytes through it than it writes) turns the bus for
        # the pure writers; a copy within the region, which reads too, asked for its own turns
        # (sim.timing.copy_turn_bytes) and is left as it is.  Under priorities (FlowNetwork.shape), a writer shares
        # the link as if the flows below its priority were absent: only a reader of its priority or a higher one
        # turns the bus for it (a lower reader gets what the writers leave, and no turns are counted for it).
        top = max((f.priority for f, kind in kinds if kind[1] == _READS), default=-1)
        for f, (_, pos, plain_n, plain_d, turned_n, turned_d) in kinds:
            if pos >= 0:
                if top >= f.priority:
                    net.set_coefficient(f, pos, turned_n, turned_d)
                else:
                    net.set_coefficient(f, pos, plain_n, plain_d)

    def _kind(self, f: Flow, link: Link) -> tuple[tuple, int, int, int, int, int]:
        """``(f's demands, pos, plain coefficient, turned coefficient)`` for a flow that only writes through
        ``link`` (``pos`` the link's place among its demands; a coefficient is bytes through the link per byte of
        ``size_bytes``, a reduced pair), ``pos`` :data:`_READS` for one that reads there, -1 for neither."""
        got = self._kinds.get(id(f.demands))
        if got is not None:
            return got
        pos, asked = next(((i, b) for i, (lk, b) in enumerate(f.demands) if lk is link), (-1, 0))
        written = f.written.get(link, 0)
        plain = turned = Fraction(0)
        if written < asked:
            pos = _READS
        elif not (written and written == asked):
            pos = -1
        else:
            plain = Fraction(asked, f.size_bytes)
            turned = (asked + self.alpha * written) / f.size_bytes
        got = self._kinds[id(f.demands)] = (f.demands, pos, plain.numerator, plain.denominator,
                                           turned.numerator, turned.denominator)
        return got


#: The place :meth:`Turnaround._kind` gives a flow that reads through the link.
_READS = -2
