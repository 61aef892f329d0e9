"""One DMA transfer on one of a core's engines: engine, setup, ports, stream, landing (no SimPy process)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import simpy
from simpy.events import Timeout

from sim.engine.events import TraceEvent
from sim.engine.units import Group
from sim.model.plan import Tile, Transfer
from sim.timing import stream_cycles

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
#: Memo value of a copy not planned yet (None means: not plannable, copy the slow way).
_UNPLANNED = object()


class Dma:
    """One transfer on one of a core's DMA engines, driven by SimPy timeouts and callbacks (no process).

    Engine, setup, ports (in the route's fixed order), streaming; when the
    stream starts, the cycles at which the ports and the engine come free and
    the transfer lands are known, and the transfer's group is told.
    """

    __slots__ = ("eng", "env", "core", "tile", "t", "kind", "phase", "group", "src", "dst", "pools", "stream",
                 "latency", "engines", "engine_id", "start_cycle", "queued", "waited", "port", "size_bytes")

    def __init__(self, eng: Engine, core: int, tile: Tile, t: Transfer, kind: str, phase: str, group: Group):
        self.eng, self.core, self.tile, self.t, self.kind, self.phase = eng, core, tile, t, kind, phase
        self.group = group
        self.env = eng.env
        ends = eng._memo.transfers.get((id(t), core))
        if ends is None:
            src, dst = eng._resolve(core, tile, t, "src"), eng._resolve(core, tile, t, "dst")
            route = (src[0].name, src[1], dst[0].name, dst[1])
            ends = eng._memo.transfers[(id(t), core)] = (src, dst, t.size_bytes, route,
                                                         stream_cycles(t, src[0], dst[0]))
        self.src, self.dst, self.size_bytes, route, self.stream = ends
        self.pools, self.latency = eng._routes.get(route) or eng._route(*self.src, *self.dst)
        self.engines = eng._engines.get(core) or eng._dma_engines(core)
        self.port = 0

    def start(self) -> None:
        """Ask for a DMA engine; program it (setup) once it is this transfer's."""
        engine_id = self.engines.acquire(self._engine)
        if engine_id is not None:
            self._engine(engine_id, self.env._now)

    def _engine(self, engine_id: int, at: int) -> None:
        """Engine ``engine_id`` is this transfer's from cycle ``at`` (now or later): program it."""
        self.engine_id = engine_id
        self.start_cycle = at
        Timeout(self.env, at - self.env._now + self.eng.setup_cycles).callbacks.append(self._ports)

    def _ports(self, _: simpy.Event | None = None) -> None:
        now = self.env._now
        if _ is not None:
            self.queued = now
        pools = self.pools
        while self.port < len(pools):
            pool = pools[self.port]
            self.port += 1
            if pool.acquire(self._granted) is None:
                return
        self._stream(now)

    def _granted(self, _: int, at: int) -> None:
        if self.port == len(self.pools):
            self._stream(at)  # the last port: the stream starts at its turn, no event needed
        elif at > self.env._now:
            Timeout(self.env, at - self.env._now).callbacks.append(self._ports)  # the next port is asked then
        else:
            self._ports(None)

    def _stream(self, start: int) -> None:
        """The stream starts at cycle ``start`` (now or later): every cycle of the transfer is known now."""
        t, eng = self.t, self.eng
        self.waited = start - self.queued
        if eng.numerics:
            planned = eng._memo.copies.get((id(t), self.core), _UNPLANNED)
            if planned is _UNPLANNED:  # the copy's views, kept with the plan: its later runs reuse them
                planned = eng._memo.copies[(id(t), self.core)] = eng.memory.copy_plan(
                    self.src[1], t.src, self.dst[1], t.dst, t.shape, t.itemsize, t.src_strides, t.dst_strides)
            if planned is None:
                eng.memory.copy(self.src[1], t.src, self.dst[1], t.dst, t.shape, t.itemsize, t.src_strides,
                                t.dst_strides)
            else:
                eng.memory.copy_planned(planned)
        released = start + self.stream
        for pool in self.pools:  # ports are counted, not named: unit 0
            pool.release_at(released, 0)
        # The last byte lands one access latency after it left the port; then the engine is free.
        landed = released + self.latency
        self.engines.release_at(landed, self.engine_id)
        # Everything about the transfer is known now: its trace event is recorded and its group told when it
        # lands, so no event is spent on the landing itself.
        eng.record(TraceEvent(self.core, _DMA_UNITS[self.engine_id], self.kind, self.start_cycle, landed,
                              self.size_bytes, t.src, t.dst, self.src[0].name, self.dst[0].name, self.tile.tile_id,
                              self.phase, 0, self.waited, self.queued))
        self.group.lands_at(landed)
