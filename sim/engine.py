"""The SimPy model of a chip running a lowered plan.

One process per core walks the plan's phases.  Each tile's loads go through the
core's DMA engines (a first-come-first-served pool of engine ids), each transfer holding one port
of every region it touches for ``bytes / port bandwidth`` cycles; shared regions
have one set of ports for the whole chip, private regions one set per core, so
contention on DDR or GSM emerges from cores queueing for ports.  The next
tile's loads are issued while this tile computes (double buffering through the
tiles' slots), and phases end in a barrier.  Every number comes from the target.
The engine knows no kernel: it moves bytes and calls each tile's compute on the
operands it reads back from simulated memory.
"""

from __future__ import annotations

import dataclasses
import math
from collections import deque
from typing import Callable, Generator

import numpy as np
import simpy

from kernels.base import Compute, Operand, Plan, Tile, Transfer
from sim.errors import MemoryFault, SimError
from sim.memory import MAX_ACCESS_BYTES, SHARED, AddressSpace
from sim.target import Region, Target
from sim.trace import Recorder, TraceEvent


def _fast_constructor(cls: type) -> Callable[..., TraceEvent]:
    """A constructor of the frozen dataclass ``cls`` that fills the instance dict at once.

    A frozen dataclass's ``__init__`` sets every field through ``object.__setattr__``,
    which costs as much as a SimPy event for a 15-field trace event; runs record
    one per DMA and compute.  Falls back to the class itself if it ever gains
    slots or a ``__post_init__``.
    """
    if not dataclasses.is_dataclass(cls) or hasattr(cls, "__slots__") or hasattr(cls, "__post_init__"):
        return cls
    fields = dataclasses.fields(cls)
    if any(f.default_factory is not dataclasses.MISSING for f in fields):
        return cls
    defaults = {f.name: f.default for f in fields if f.default is not dataclasses.MISSING}
    required = frozenset(f.name for f in fields) - defaults.keys()
    allowed = frozenset(f.name for f in fields)
    new = object.__new__

    def make(**values: object) -> TraceEvent:
        if required - values.keys() or values.keys() - allowed:
            return cls(**values)  # let the dataclass raise its own error
        event = new(cls)
        d = event.__dict__
        d.update(defaults)
        d.update(values)
        return event

    return make


_trace_event = _fast_constructor(TraceEvent)


class CountingEnvironment(simpy.Environment):
    """A SimPy environment that counts the events it processes (the engine's unit of work)."""

    def __init__(self) -> None:
        super().__init__()
        self.events_processed = 0

    def step(self) -> None:
        """Process the next event and count it."""
        super().step()
        self.events_processed += 1


class _Pool:
    """Identical units (the ports of a memory, the DMA engines of a core) handed out first come, first served.

    A free unit is taken without a SimPy event; a request that must queue waits
    on an event that the release of a unit triggers, handing that unit straight
    to the oldest waiter.  Same FIFO order as ``simpy.Resource``/``Store``, with
    no event for uncontended acquisitions and releases (most of them).
    """

    __slots__ = ("env", "free", "waiters")

    def __init__(self, env: simpy.Environment, units: range):
        self.env = env
        self.free: deque[int] = deque(units)
        self.waiters: deque[simpy.Event] = deque()

    def acquire(self) -> simpy.Event | None:
        """None when a unit is free (claim it with :meth:`take`); else an event whose value is the unit."""
        if self.free:
            return None
        event = self.env.event()
        self.waiters.append(event)
        return event

    def take(self) -> int:
        """Claim the free unit :meth:`acquire` found."""
        return self.free.popleft()

    def release(self, unit: int) -> None:
        """Give ``unit`` back: to the oldest waiter if there is one."""
        if self.waiters:
            self.waiters.popleft().succeed(unit)
        else:
            self.free.append(unit)


class Engine:
    """Runs one plan on a fresh SimPy environment; the cycle count is returned by :meth:`run`."""

    def __init__(self, target: Target, memory: AddressSpace, recorder: Recorder, *, numerics: bool = True,
                 on_tile: Callable[[int, int], None] | None = None):
        self.target = target
        self.memory = memory
        self.recorder = recorder
        self.numerics = numerics
        self.on_tile = on_tile
        self.env = CountingEnvironment()
        self._ports: dict[tuple[str, int], _Pool] = {}
        self._engines: dict[int, _Pool] = {}
        # (lo, hi, core) -> (region, store key): a plan touches the same spans again and again.
        self._resolved: dict[tuple[int, int, int], tuple[Region, int]] = {}
        self._routes: dict[tuple[str, int, str, int], tuple[tuple[_Pool, ...], int, int]] = {}
        self.core_end_cycles: dict[int, int] = {}

    @property
    def sim_events(self) -> int:
        """SimPy events processed so far by this engine's run."""
        return self.env.events_processed

    # -- resources ----------------------------------------------------------------------------

    def _port(self, region: Region, key: int) -> "_Pool":
        k = (region.name, key)
        pool = self._ports.get(k)
        if pool is None:
            pool = self._ports[k] = _Pool(self.env, range(region.ports))
        return pool

    def _dma_engines(self, core: int) -> "_Pool":
        pool = self._engines.get(core)
        if pool is None:
            pool = self._engines[core] = _Pool(self.env, range(self.target.dma.engines_per_core))
        return pool

    # -- one transfer ------------------------------------------------------------------------------

    def _resolve(self, core: int, tile: Tile, t: Transfer, side: str) -> tuple[Region, int]:
        lo, hi = t.span(side)
        got = self._resolved.get((lo, hi, core))
        if got is not None:
            return got
        region = self.memory.map.region_of(lo, hi - lo)
        if region is not None and hi - lo <= MAX_ACCESS_BYTES:
            got = (region, SHARED if region.shared else core)
        else:
            try:  # the full check, for its message
                got = self.memory.map.resolve(lo, hi - lo, core, what=f"DMA {side}")
            except MemoryFault as e:
                raise MemoryFault(f"core {core}, tile {tile.tile_id}, cycle {self.env.now}: {e}") from None
        self._resolved[(lo, hi, core)] = got
        return got

    def _route(self, src_region: Region, src_key: int, dst_region: Region,
               dst_key: int) -> tuple[tuple[_Pool, ...], int, int]:
        """(ports to hold, in deadlock-free order; port bandwidth; access latency) of a transfer's two ends."""
        k = (src_region.name, src_key, dst_region.name, dst_key)
        route = self._routes.get(k)
        if route is None:
            # Ports are acquired in a fixed order (by region base, then store) so two transfers never deadlock.
            ends = sorted({(src_region.base, src_key): src_region, (dst_region.base, dst_key): dst_region}.items(),
                          key=lambda e: e[0])
            route = self._routes[k] = (
                tuple(self._port(region, key) for (_, key), region in ends),
                min(src_region.port_bandwidth_bytes_per_cycle, dst_region.port_bandwidth_bytes_per_cycle),
                max(src_region.latency_cycles, dst_region.latency_cycles))
        return route

    def _transfer(self, core: int, tile: Tile, t: Transfer, kind: str, phase: str) -> Generator:
        src_region, src_key = self._resolve(core, tile, t, "src")
        dst_region, dst_key = self._resolve(core, tile, t, "dst")
        pools, bw, latency = self._route(src_region, src_key, dst_region, dst_key)
        engines = self._dma_engines(core)
        wait = engines.acquire()
        engine_id = engines.take() if wait is None else (yield wait)
        start = self.env.now
        yield self.env.timeout(self.target.dma.setup_cycles)
        queued = self.env.now
        for pool in pools:
            wait = pool.acquire()
            if wait is None:
                pool.take()
            else:
                yield wait
        waited = self.env.now - queued
        size_bytes = t.size_bytes
        if self.numerics:
            self.memory.copy(src_key, t.src, dst_key, t.dst, t.shape, t.itemsize, t.src_strides, t.dst_strides)
        yield self.env.timeout(max(1, math.ceil(size_bytes / bw)))
        for pool in pools:
            pool.release(0)
        # The last byte lands one access latency after it left the port.
        yield self.env.timeout(latency)
        engines.release(engine_id)
        self.recorder.record(_trace_event(
            core=core, unit=f"dma{engine_id}", kind=kind, start=start, end=self.env.now, bytes=size_bytes,
            src=t.src, dst=t.dst, src_region=src_region.name, dst_region=dst_region.name,
            tile=tile.tile_id, phase=phase, wait_cycles=waited, wait_start=queued))

    def _transfers(self, core: int, tile: Tile, transfers: tuple[Transfer, ...], kind: str,
                   phase: str) -> Generator:
        procs = [self.env.process(self._transfer(core, tile, t, kind, phase)) for t in transfers]
        if len(procs) == 1:
            yield procs[0]  # one transfer: wait for it directly (an all_of would cost one more event)
        elif procs:
            yield self.env.all_of(procs)

    # -- compute ---------------------------------------------------------------------------------

    def compute_cycles(self, c: Compute) -> int:
        """Cycles of one tile's vector work, priced from the target's core model."""
        core = self.target.core
        if c.precision not in core.precisions:
            raise SimError(f"plan computes in {c.precision}, which {self.target.name} lacks") from None
        return (core.loop_overhead_cycles + core.vector_op_latency_cycles
                + core.peak_fraction_cycles(c.flops, c.precision)
                + c.reductions * core.reduction_latency_cycles)

    def _operand_key(self, core: int, tile: Tile, op: Operand, label: str,
                     what: str) -> tuple[int, int, np.dtype]:
        """(store key, bytes, little-endian dtype) of a compute operand; MemoryFault if it is not mapped."""
        dt = np.dtype(op.dtype).newbyteorder("<")
        n = math.prod(op.shape) * dt.itemsize
        got = self._resolved.get((op.addr, op.addr + n, core))
        if got is None:
            try:
                got = self.memory.map.resolve(op.addr, n, core, what=what)
            except MemoryFault as e:
                raise MemoryFault(f"core {core}, tile {tile.tile_id}, cycle {self.env.now}: {label}: {e}") \
                    from None
            self._resolved[(op.addr, op.addr + n, core)] = got
        return got[1], n, dt

    def _read_operand(self, core: int, tile: Tile, op: Operand) -> np.ndarray:
        key, n, dt = self._operand_key(core, tile, op, "compute operand", "read")
        # A fresh copy: a tile's function may keep or modify its inputs without touching simulated memory.
        return self.memory.read_span(key, op.addr, n).copy().view(dt).reshape(op.shape)

    def _write_operand(self, core: int, tile: Tile, op: Operand, value: np.ndarray) -> None:
        key, n, dt = self._operand_key(core, tile, op, "compute output", "write")
        arr = np.ascontiguousarray(value, dtype=dt)
        if arr.nbytes != n:
            raise SimError(f"tile {tile.tile_id}: compute output of shape {arr.shape} does not fill "
                           f"operand {op.shape}")
        self.memory.write_span(key, op.addr, arr.reshape(-1).view(np.uint8))

    def _compute(self, core: int, tile: Tile, phase: str) -> Generator:
        c = tile.compute
        if c is None:
            return
        start = self.env.now
        if self.numerics:
            arrays = [self._read_operand(core, tile, op) for op in c.inputs]
            results = c.fn(*arrays)
            if len(results) != len(c.outputs):
                raise SimError(f"tile {tile.tile_id}: compute returned {len(results)} arrays for "
                               f"{len(c.outputs)} outputs")
            for op, value in zip(c.outputs, results):
                self._write_operand(core, tile, op, value)
        yield self.env.timeout(self.compute_cycles(c))
        self.recorder.record(_trace_event(core=core, unit="compute", kind="compute", start=start,
                                        end=self.env.now, tile=tile.tile_id, phase=phase, flops=c.flops))

    # -- a core's walk through the plan ---------------------------------------------------------

    def _tiles(self, core: int, tiles: tuple[Tile, ...], phase: str) -> Generator:
        env = self.env
        released: dict[int, simpy.Event] = {}  # slot -> event fired when its latest tile's stores are done
        loads: list[simpy.Process] = []
        done_events: list[simpy.Event] = []

        def load(i: int, after: simpy.Event | None) -> Generator:
            if after is not None:
                yield after
            yield from self._transfers(core, tiles[i], tiles[i].loads, "dma_in", phase)

        def issue(i: int) -> None:
            slot = tiles[i].slot
            prev = released.get(slot)
            done = env.event()
            released[slot] = done
            done_events.append(done)
            loads.append(env.process(load(i, prev)))

        def store(i: int) -> Generator:
            yield from self._transfers(core, tiles[i], tiles[i].stores, "dma_out", phase)
            done_events[i].succeed()

        if tiles:
            issue(0)
        for i, tile in enumerate(tiles):
            if i + 1 < len(tiles):
                issue(i + 1)  # prefetch: the next tile's DMA overlaps this tile's compute
            yield loads[i]
            yield from self._compute(core, tile, phase)
            env.process(store(i))
            if self.on_tile is not None:
                self.on_tile(1, env.now)
        if done_events:
            yield env.all_of(done_events)

    def _barrier(self, core: int, phase: str, state: dict) -> Generator:
        arrive = self.env.now
        state["arrived"] += 1
        if state["arrived"] == state["expected"]:
            release = state["release"]
            self.env.process(self._release(release))
        yield state["release"]
        self.recorder.record(_trace_event(core=core, unit="sync", kind="barrier_wait", start=arrive,
                                        end=self.env.now, phase=phase, wait_cycles=self.env.now - arrive,
                                        wait_start=arrive))

    def _release(self, event: simpy.Event) -> Generator:
        yield self.env.timeout(self.target.barrier_latency_cycles)
        event.succeed()

    def _core(self, core: int, plan: Plan, barriers: list[dict]) -> Generator:
        yield self.env.timeout(self.target.launch_overhead_cycles)
        self.recorder.record(_trace_event(core=core, unit="sync", kind="launch", start=0, end=self.env.now))
        for phase, state in zip(plan.phases, barriers):
            yield from self._tiles(core, tuple(phase.tiles.get(core, ())), phase.name)
            if state is not None:
                yield from self._barrier(core, phase.name, state)
        self.core_end_cycles[core] = self.env.now

    def run(self, plan: Plan, until_cycles: int | None = None) -> int | None:
        """Simulate ``plan``; returns the cycles from launch to the last core's end.

        With ``until_cycles``, stop there and return None if the plan has not
        finished by then (a candidate already slower than the best one known).
        """
        multi = len(plan.cores) > 1
        barriers = [
            {"arrived": 0, "expected": len(plan.cores), "release": self.env.event()}
            if (phase.barrier_after and multi) else None
            for phase in plan.phases
        ]
        for core in plan.cores:
            self.env.process(self._core(core, plan, barriers))
        if until_cycles is not None:
            self.env.run(until=until_cycles + 1)
            if len(self.core_end_cycles) < len(plan.cores):
                return None
        else:
            self.env.run()
        missing = [c for c in plan.cores if c not in self.core_end_cycles]
        if missing:
            raise SimError(f"simulation stalled: cores {missing} never finished (deadlocked plan)")
        return max(self.core_end_cycles.values())
