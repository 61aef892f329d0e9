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
``its bytes + alpha * its written bytes`` through the link while another flow reads there, and its plain bytes
otherwise.  A copy within the region reads and writes it itself: it asks for its own turns from the start
(:func:`sim.timing.copy_turn_bytes`) and the coupling leaves it be.  The region's capacity lost to the turns is
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

    __slots__ = ("alpha",)

    def __init__(self, region: Region) -> None:
        self.alpha = bus_cost_per_written_byte(region)

    def __call__(self, net: FlowNetwork, link: Link) -> None:
        flows = [(f, f.written.get(link, 0), _asked(f, link)) for f in link.flows]
        # Anything reading through the link (a flow moving more bytes through it than it writes) turns the bus for
        # the pure writers; a copy within the region, which reads too, asked for its own turns
        # (sim.timing.copy_turn_bytes) and is left as it is.
        reading = any(written < asked for _, written, asked in flows)
        for f, written, asked in flows:
            if written and written == asked:
                want = asked + self.alpha * written if reading else Fraction(asked)
                if want != f.bytes_through(link):
                    net.set_bytes(f, link, want)


def _asked(f: Flow, link: Link) -> int:
    """The bytes ``f`` asked to move through ``link`` (its shape's)."""
    for lk, b in f.demands:
        if lk is link:
            return b
    return 0
