"""Split-reduce: partials -> barrier -> reduce across cores, the skeleton of every cross-core reduction.

Phase one: each core works on its share and ends by storing its partial result to its part of the shared
staging level (:meth:`SplitReduce.publish`, through an :class:`~kernels.common.exchange.Exchange`); a barrier
follows.  Phase two: each reducing core loads its slice of every core's partial in one descriptor, sums the
parts and stores the result (:meth:`SplitReduce.reduce_into`, or a kernel's own reduction compute over
:meth:`SplitReduce.gather`).  :meth:`SplitReduce.phases` makes the two phases, the barrier between them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kernels.common.exchange import Exchange
from kernels.common.shares import split_even
from kernels.common.streams import CoreStream, phase_of
from sim.model.plan import Operand, Phase, Transfer


@dataclass(frozen=True)
class SplitReduce:
    """A reduction of ``exchange.parts`` cores' partials through ``exchange``, phases named ``name:partials`` and
    ``name:reduce`` (or the names given to :meth:`phases`)."""

    exchange: Exchange
    name: str = "reduce"

    def publish(self, part: int, src: int, start: int = 0, count: int | None = None) -> Transfer:
        """Part ``part`` stores its partial's elements [start, start + count) from ``src`` (a phase-one store)."""
        return self.exchange.store(part, src, start, count)

    def gather(self, dst: int, start: int = 0, count: int | None = None) -> Transfer:
        """Elements [start, start + count) of every part into a dense ``[parts, count]`` block at ``dst``."""
        return self.exchange.gather(dst, start, count)

    def slices(self, reducers: Sequence[int], elements: int | None = None) -> list[tuple[int, int, int]]:
        """``(core, start, stop)``: the partial's ``elements`` (default: all) split evenly over ``reducers``."""
        total = self.exchange.elements if elements is None else elements
        return [(core, a, b) for core, (a, b) in zip(reducers, split_even(total, len(reducers)))]

    def reduce_into(self, stream: CoreStream, parts: Operand, out: Operand, start: int, stores: Sequence[Transfer],
                    precision: str = "fp32", slot: int | None = None) -> None:
        """A reduce tile on ``stream``: the parts of elements [start, ...) gathered into ``parts``, summed into
        ``out`` (in its dtype, as :meth:`Exchange.reduce` states it), then ``stores``."""
        stream.add((self.exchange.gather_into(parts, start),), self.exchange.reduce(parts, out, precision), stores,
                   slot=slot)

    def phases(self, partials: Mapping[int, CoreStream], reducing: Mapping[int, CoreStream],
               names: tuple[str, str] | None = None, *, drop_empty: bool = True) -> list[Phase]:
        """Phase one (``partials``' streams, a barrier after it) and phase two (``reducing``'s, no barrier: the
        plan's last phase, or :func:`~kernels.common.streams.plan_of` clears it); cores without tiles are left
        out when ``drop_empty``."""
        first, second = names or (f"{self.name}:partials", f"{self.name}:reduce")
        return [phase_of(first, partials, barrier_after=True, drop_empty=drop_empty),
                phase_of(second, reducing, barrier_after=False, drop_empty=drop_empty)]
