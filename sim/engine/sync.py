"""Synchronised transfers in a run (``Transfer.sync``, :mod:`sim.model.sync`): the members meet, then stream as one.

Each member holds an engine of its own core and is programmed (its setup) as any transfer is; it then waits for
the others.  When the last member's setup is done, the group streams as one flow through the fluid network: the
members' bytes at every region and engine they cross (a broadcast's shared source read once) and the merged
stream's DRAM rows, so that the group moves in lock step at the pace its slowest link allows.  Every member's
last byte streams at the same cycle; each then lands its own access latency later, frees its engine and records
its trace event (the group's row activations on the first member's, in core order, so that sums over a trace
count each once).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sim.model.memory import SHARED
from sim.model.plan import Plan
from sim.model.sync import SyncMember, source_reads, sync_groups
from sim.timing import sync_row_demands

if TYPE_CHECKING:
    from sim.engine.dma import Dma
    from sim.engine.engine import Engine
    from sim.engine.fluid import FlowShape, Link


class Rendezvous:
    """Where a run's synchronised transfers wait for their members (one per run, made at its first member)."""

    def __init__(self, eng: Engine, plan: Plan):
        self.eng = eng
        self.groups: dict[str, tuple[SyncMember, ...]] = sync_groups(plan)
        self.waiting: dict[str, list[tuple[Dma, int]]] = {}  # key -> (member, cycle its setup is done)

    def arrive(self, dma: Dma, ready_cycle: int) -> None:
        """Member ``dma`` is programmed by ``ready_cycle`` (now or later); the group streams once all are."""
        key = dma.t.sync
        assert key is not None
        here = self.waiting.setdefault(key, [])
        here.append((dma, ready_cycle))
        if len(here) < len(self.groups[key]):
            return
        del self.waiting[key]
        members = [d for d, _ in sorted(here, key=lambda m: m[0].core)]
        shape = self._shape(members)
        for d in members:
            d.alone_cycles = shape.alone_cycles
        for d in members[1:]:
            # The group's activations are the first member's to record; each keeps its private DRAM's own.
            d.rows = tuple(r for r in d.rows if not r[0].shared)

        def stream() -> None:
            for d in members:
                d._stream()

        def streamed(cycle: int) -> None:
            for d in members:
                d._streamed(cycle)

        self.eng.net.start_shape_at(max(r for _, r in here), shape, stream, streamed)

    def _shape(self, members: list[Dma]) -> FlowShape:
        """The group's flow: each member's destination and engine bytes, its source bytes where its read counts, and
        the merged stream's rows on each shared DRAM (a member's private DRAM side counts alone)."""
        eng = self.eng
        reads = source_reads([d.t for d in members], [d.src[0] for d in members])
        demands = []
        written: dict[Link, int] = {}
        least = 0
        for d, read in zip(members, reads):
            if read:
                demands.append((d.src_link, d.src_bytes))
            demands.append((d.dst_link, d.dst_bytes))
            written[d.dst_link] = written.get(d.dst_link, 0) + d.dst_bytes
            engine = eng.engine_links.get((d.core, d.engine_id)) or eng.engine_link(d.core, d.engine_id)
            demands.append((engine, d.engine_bytes))
            for region, activations, bank_cycles in d.rows:
                if not region.shared and (read or region is d.dst[0]):
                    demands.append((eng.row_link(region, d.core), activations))
                    least = max(least, bank_cycles)
        merged = sync_row_demands([d.t for d in members], [d.src[0] for d in members],
                                  [d.dst[0] for d in members], reads)
        for region, activations, bank_cycles in merged:
            demands.append((eng.row_link(region, SHARED), activations))
            least = max(least, bank_cycles)
        members[0].rows = tuple(merged) + tuple(r for r in members[0].rows if not r[0].shared)
        return eng.net.shape(tuple(demands), least, written, members[0].t.priority)  # (one for all: the plan check)

    def stalled(self) -> str:
        """What still waits when a run can go no further: each group's key, the cores whose members came and the
        cores still missing ('' when nothing waits)."""
        out = []
        for key, here in self.waiting.items():
            came = sorted(d.core for d, _ in here)
            missing = [m.core for m in self.groups[key] if m.core not in came]
            out.append(f"synchronised transfer {key!r} waits for cores {missing} (cores {came} are ready)")
        return "; ".join(out)
