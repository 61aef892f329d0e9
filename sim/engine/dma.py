"""One DMA transfer on one of a core's engines: engine, setup, a stream through the fluid network, landing."""

from __future__ import annotations

from typing import TYPE_CHECKING

from simpy.events import Timeout

from sim.engine.clock import cycle_of
from sim.engine.events import TraceEvent
from sim.engine.fluid import FlowShape, Link
from sim.engine.units import Group
from sim.model.plan import Tile, Transfer
from sim.timing import copy_turn_bytes, engine_bytes

if TYPE_CHECKING:
    from sim.engine.engine import Engine


class _UnitNames(dict):
    """``prefix<k>`` for every k, each string built once."""

    def __init__(self, prefix: str):
        super().__init__()
        self.prefix = prefix

    def __missing__(self, k: int) -> str:
        name = self[k] = f"{self.prefix}{k}"
        return name


_DMA_UNITS = _UnitNames("dma")


class Dma:
    """One transfer on one of a core's DMA engines, driven by SimPy timeouts and callbacks (no process).

    Engine (first come, first served), setup, then a stream: a flow through the
    chip's fluid network (:mod:`sim.engine.fluid`) across its source region, its
    destination region and its engine, each end moving its bytes in whole bursts,
    at the max-min fair share the other streams leave it.  When the stream ends,
    the last byte lands the slower end's access latency later; the engine is free
    then, and the transfer's group is told.
    """

    __slots__ = ("eng", "env", "core", "tile", "t", "kind", "phase", "group", "src", "dst", "src_link",
                 "dst_link", "src_bytes", "dst_bytes", "engine_bytes", "latency", "engines", "engine_id", "start_cycle",
                 "stream_start", "alone_cycles", "size_bytes", "rows", "index", "pos")

    def __init__(self, eng: Engine, core: int, tile: Tile, t: Transfer, kind: str, phase: str, group: Group,
                 index: int = -1, pos: int = 0):
        self.eng, self.core, self.tile, self.t, self.kind, self.phase = eng, core, tile, t, kind, phase
        self.group = group
        # Which tile of its core's walk (its index there, -1 if none) and which of the tile's loads or stores it
        # is: what the steady state (sim.engine.steady) reads of it.
        self.index, self.pos = index, pos
        self.env = eng.env
        ends = eng.ends(core, tile, t)
        self.src, self.dst, self.size_bytes, route, self.src_bytes, self.dst_bytes, self.rows = ends
        self.src_link, self.dst_link, self.latency = eng.routes.get(route) or eng.route(*self.src, *self.dst)
        self.engine_bytes = engine_bytes(t, self.src_bytes, self.dst_bytes, eng.target.dma)
        self.engines = eng.engine_pools.get(core) or eng.dma_engines(core)

    def start(self) -> None:
        """Ask for the transfer's numbered channel, if it names one (it waits for the transfer before it there to
        land), then for a DMA engine; program it (setup) once it is this transfer's."""
        channel = self.t.channel
        if channel is not None:
            if self.eng.dma_channel(self.core, channel).acquire(self._channel) is None:
                return  # (its turn comes when the transfer holding the channel lands: _channel)
        self._take_engine()

    def _channel(self, _unit: int, at: int) -> None:
        """The channel is this transfer's from cycle ``at`` (now or later): ask for an engine then."""
        now = cycle_of(self.env)
        if at > now:
            Timeout(self.env, at - now).callbacks.append(lambda _: self._take_engine())
        else:
            self._take_engine()

    def _take_engine(self) -> None:
        engine_id = self.engines.acquire(self._engine, self.t.priority)
        if engine_id is not None:
            self._engine(engine_id, cycle_of(self.env))

    def _engine(self, engine_id: int, at: int) -> None:
        """Engine ``engine_id`` is this transfer's from cycle ``at`` (now or later): program it; the stream starts
        once the setup is done, a start the fluid network makes at that cycle (no event of the transfer's own)."""
        self.engine_id = engine_id
        self.start_cycle = at
        eng = self.eng
        if self.t.sync is not None:  # programmed, it waits for the other members, then streams with them
            eng.rendezvous().arrive(self, at + eng.setup_cycles)
            return
        engine = eng.engine_links.get((self.core, engine_id)) or eng.engine_link(self.core, engine_id)
        # The same route, bytes and engine come back tile after tile: the flow's shape is worked out once a run.
        key = (self.src_link, self.src_bytes, self.dst_link, self.dst_bytes, engine, self.engine_bytes, self.rows,
               self.t.priority)
        shape = eng.flow_shapes.get(key)
        if shape is None:
            shape = eng.flow_shapes[key] = self._shape(engine)
        # Only the flow's alone time is kept: holding the flow, whose on_done holds this transfer, would make a
        # reference cycle per transfer, garbage that only the cyclic collector frees.
        self.alone_cycles = shape.alone_cycles
        eng.net.start_shape_at(at + eng.setup_cycles, shape, self._stream, self._streamed)

    def _shape(self, engine: Link) -> FlowShape:
        """The flow's demands: both ends' bytes (a copy within one region names its link twice: the network adds
        them), the engine's, and the rows it opens on each DRAM it crosses, with its busiest bank's pace."""
        eng = self.eng
        demands = [(self.src_link, self.src_bytes), (self.dst_link, self.dst_bytes),
                   (engine, self.engine_bytes)]
        if self.src[0] is self.dst[0] and self.src_link is self.dst_link:  # a copy within one region
            demands.append((self.src_link, copy_turn_bytes(self.src[0], self.dst_bytes)))
        least = 0
        for region, activations, bank_cycles in self.rows:
            key = self.src[1] if region is self.src[0] else self.dst[1]
            demands.append((eng.row_link(region, key), activations))
            least = max(least, bank_cycles)
        return eng.net.shape(tuple(demands), least, {self.dst_link: self.dst_bytes}, self.t.priority)

    def _stream(self) -> None:
        """Setup done: the bytes move now (in simulated memory); the network starts the stream right after."""
        t, eng = self.t, self.eng
        self.stream_start = cycle_of(self.env)
        left = eng.bytes_left
        if left is not None:  # (what the early stop counts: the roofline's bytes, a side each)
            for region in (self.src[0], self.dst[0]):
                if region.name in left:
                    left[region.name] -= self.size_bytes
        if eng.numerics:
            eng.copy_bytes(t, self.core, self.src[1], self.dst[1])
        if eng.effects is not None:
            eng.effects.append((t, self.core, self.src[1], self.dst[1]))
        if eng.elog is not None:
            eng.elog.append((0, self.core, self.index, self.kind, self.pos, self.src[1],
                             self.dst[1]))

    def _streamed(self, cycle: int) -> None:
        """The stream's last byte left at ``cycle`` (now): it lands one access latency later, the engine is free
        then, and the trace event and the group's landing are known."""
        landed = cycle + self.latency
        self.engines.release_at(landed, self.engine_id)
        if self.t.channel is not None:
            self.eng.dma_channel(self.core, self.t.channel).release_at(landed, 0)
        t, eng = self.t, self.eng
        off = eng.offset  # (the cycles a steady state skipped)
        # wait_cycles: what sharing cost the stream (its cycles beyond its alone time, Flow.wait_cycles), from the
        # stream's start.
        eng.record(TraceEvent(self.core, _DMA_UNITS[self.engine_id], self.kind, self.start_cycle + off, landed + off,
                              self.size_bytes, t.src, t.dst, self.src[0].name, self.dst[0].name,
                              self.tile.tile_id, self.phase, 0, cycle - self.stream_start - self.alone_cycles,
                              self.stream_start + off, None, sum(r[1] for r in self.rows) if self.rows else 0,
                              t.sync, t.channel))
        if eng.rprov is not None:
            eng.rprov.append((self.core, self.index, self.kind, self.pos))
        self.group.lands_at(landed)
