"""The SimPy model of a chip running a lowered plan.

One process per core walks the plan's phases.  Each tile's loads go through the
core's DMA engines (first come, first served), each transfer
holding one port of every region it touches for ``bytes / port bandwidth``
cycles; shared regions have one set of ports for the whole chip, private regions
one set per core, so contention on DDR or GSM emerges from cores queueing for
ports.  The next tile's loads are issued while this tile computes (double
buffering through the tiles' slots), and phases end in a barrier.  Every number
comes from the target.  The engine knows no kernel: it moves bytes and calls
each tile's compute on the operands it reads back from simulated memory.

Transfers are not SimPy processes: each is a timeout (setup) whose callback
takes the next steps; a free engine or port is taken without an event, and when
a stream starts the cycles at which its ports and its engine come free are
known.  A queue whose holders have all said when they let go hands its first
waiter a unit and the cycle of its turn at once; only otherwise does it need an
event to wake its waiters.  A tile costs about one event per transfer, one for
its group's landing and one for its compute, so the event engine's work grows
with tiles, not with elements.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from collections import deque
from typing import Callable, Generator

import numpy as np
import simpy
from simpy.core import EmptySchedule
from simpy.events import Timeout

from sim.engine.events import Recorder, TraceEvent
from sim.errors import MemoryFault, SimError
from sim.model.memory import MAX_ACCESS_BYTES, SHARED, AddressSpace
from sim.model.plan import Compute, Operand, Plan, Tile, Transfer
from sim.model.target import Region, Target


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
    # Every field, in declaration order (the instance dict keeps it), with its default (None if required).
    template = {f.name: None if f.default is dataclasses.MISSING else f.default for f in fields}
    required = frozenset(f.name for f in fields if f.default is dataclasses.MISSING)
    allowed = frozenset(template)
    new = object.__new__

    def make(**values: object) -> TraceEvent:
        if required - values.keys() or values.keys() - allowed:
            return cls(**values)  # let the dataclass raise its own error
        event = new(cls)
        d = event.__dict__
        d.update(template)
        d.update(values)
        return event

    return make


_trace_event = _fast_constructor(TraceEvent)

# The engine reads SimPy's clock as ``env._now``: the public ``env.now`` is a property, a function call on
# every read, and the hot paths read it several times per transfer.  SimPy 4 keeps the clock there (pinned
# below 5 in pyproject.toml; tests/test_engine_internals.py checks it).

class _UnitNames(dict):
    """``prefix<k>`` for every k, each string built once."""

    def __init__(self, prefix: str):
        super().__init__()
        self.prefix = prefix

    def __missing__(self, k: int) -> str:
        name = self[k] = f"{self.prefix}{k}"
        return name


#: TraceEvent's fields in order; the DMA path fills an event's dict literally when they are exactly these.
_EVENT_FIELDS = ("core", "unit", "kind", "start", "end", "bytes", "src", "dst", "src_region", "dst_region", "tile",
                 "phase", "flops", "wait_cycles", "wait_start")
_DMA_UNITS = _UnitNames("dma")
_LITERAL_EVENTS = _trace_event is not TraceEvent and \
    tuple(f.name for f in dataclasses.fields(TraceEvent)) == _EVENT_FIELDS


#: Memo value of a copy not planned yet (None means: not plannable, copy the slow way).
_UNPLANNED = object()


class _Units:
    """Identical units (the ports of a memory, the DMA engines of a core), each held by one transfer at a time.

    A holder says when it will let go (:meth:`release_at`) as soon as it knows
    (when its stream starts), so no event is spent at the end of every hold: a
    unit whose release cycle has passed is simply free, and a free unit is taken
    without an event.  Requests that find none free wait first come, first
    served.  While every held unit's release cycle is known, the first waiter's
    turn is known too (the earliest release; later requests queue behind it),
    so it is granted at once with that cycle and no event is spent on the
    hand-over; while some holder has not said yet, one timeout at the earliest
    known release hands units over (a later-said release may be earlier).
    """

    __slots__ = ("env", "units", "free", "busy", "waiters", "wakes", "next_wake", "serving")

    def __init__(self, env: simpy.Environment, units: int):
        self.env = env
        self.units = units
        self.free: deque[int] = deque(range(units))
        self.busy: list[tuple[int, int]] = []  # heap of (cycle it comes free, unit) of the held units
        self.waiters: deque[Callable[[int, int], None]] = deque()
        self.wakes: list[int] = []  # cycles of the wake-ups already scheduled (one timeout each, never twice)
        self.next_wake: int | None = None  # the earliest of them
        self.serving = False  # a hand-over loop is running (a grant's callback may release a unit again)

    def _collect(self, now: int) -> None:
        busy, free = self.busy, self.free
        while busy and busy[0][0] <= now:
            free.append(heapq.heappop(busy)[1])

    def acquire(self, granted: Callable[[int, int], None]) -> int | None:
        """A unit taken now; else None, and ``granted(unit, cycle)`` runs when its turn is known (the cycle it
        gets the unit, now or later; perhaps before this returns)."""
        busy = self.busy
        if busy:
            now = self.env._now
            if busy[0][0] <= now:
                self._collect(now)
        if self.free and not self.waiters:
            return self.free.popleft()
        self.waiters.append(granted)
        if not self.serving:
            self._serve()
        return None

    def release_at(self, cycle: int, unit: int) -> None:
        """``unit`` is free from ``cycle`` on (now or later)."""
        heapq.heappush(self.busy, (cycle, unit))
        if self.waiters and not self.serving:
            self._serve()

    def _serve(self) -> None:
        """Hand units to waiters, first come first served: free ones now; while every held unit's release is
        known, the earliest at its release cycle; else wake at the earliest known release."""
        # An exception from a waiter's callback ends the whole run, so the flag needs no try/finally.
        self.serving = True
        busy, free, waiters, units = self.busy, self.free, self.waiters, self.units
        now = self.env._now
        if busy and busy[0][0] <= now:
            self._collect(now)
        while waiters:
            if free:
                waiters.popleft()(free.popleft(), now)
            elif len(busy) == units:
                cycle, unit = heapq.heappop(busy)
                waiters.popleft()(unit, cycle if cycle > now else now)
            else:
                self._wake_later()
                break
        self.serving = False

    def _wake_later(self) -> None:
        if not self.busy:
            return  # every unit is held with no end known yet: the holder's release_at wakes the queue
        at = self.busy[0][0]
        if self.next_wake is not None and self.next_wake <= at:
            return  # a wake-up at or before ``at`` is coming and will look again
        self.wakes.append(at)
        self.next_wake = at
        Timeout(self.env, at - self.env._now).callbacks.append(self._wake)

    def _wake(self, _: simpy.Event) -> None:
        wakes = self.wakes
        wakes.remove(self.env._now)
        self.next_wake = min(wakes) if wakes else None
        if self.waiters:
            self._serve()


class _Group:
    """The transfers a tile starts together; ``done()`` runs when the last of them has landed.

    Each member reports its landing cycle as soon as its stream starts (it is
    known then), so the group needs one timeout, not one per member.
    """

    __slots__ = ("env", "left", "latest", "done")

    def __init__(self, env: simpy.Environment, members: int, done: Callable[[], None]):
        self.env = env
        self.left = members
        self.latest = 0
        self.done = done

    def lands_at(self, cycle: int) -> None:
        """One member will have landed at ``cycle``."""
        self.left -= 1
        if cycle > self.latest:
            self.latest = cycle
        if not self.left:
            Timeout(self.env, self.latest - self.env._now).callbacks.append(self._landed)

    def _landed(self, _: simpy.Event) -> None:
        self.done()


class _Count:
    """Counts down; calls ``done()`` at zero."""

    __slots__ = ("left", "done")

    def __init__(self, members: int, done: Callable[[], None]):
        self.left = members
        self.done = done

    def one_done(self) -> None:
        """One member ended."""
        self.left -= 1
        if not self.left:
            self.done()


class _Gate:
    """Opens once; callbacks registered before run when it opens, those registered after run at once."""

    __slots__ = ("is_open", "waiting")

    def __init__(self) -> None:
        self.is_open = False
        self.waiting: list[Callable[[], None]] = []

    def then(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` when the gate is open."""
        if self.is_open:
            callback()
        else:
            self.waiting.append(callback)

    def open(self) -> None:
        """Open the gate and run what waited for it."""
        self.is_open = True
        waiting, self.waiting = self.waiting, []
        for callback in waiting:
            callback()


def stream_cycles(t: Transfer, src: Region, dst: Region) -> int:
    """Cycles a transfer holds its ports: each end moves whole bursts of its contiguous runs at its port's
    bandwidth, and the slower end sets the pace (a dense copy: bytes over the slower port)."""
    src_cycles = src.burst_bytes_for(*t.runs("src")) / src.port_bandwidth_bytes_per_cycle
    dst_cycles = dst.burst_bytes_for(*t.runs("dst")) / dst.port_bandwidth_bytes_per_cycle
    return max(1, math.ceil(max(src_cycles, dst_cycles)))


class _Dma:
    """One transfer on one of a core's DMA engines, driven by SimPy timeouts and callbacks (no process).

    Engine, setup, ports (in the route's fixed order), streaming; when the
    stream starts, the cycles at which the ports and the engine come free and
    the transfer lands are known, and the transfer's group is told.
    """

    __slots__ = ("eng", "env", "core", "tile", "t", "kind", "phase", "group", "src", "dst", "pools", "stream",
                 "latency", "engines", "engine_id", "start_cycle", "queued", "waited", "port", "size_bytes")

    def __init__(self, eng: "Engine", core: int, tile: Tile, t: Transfer, kind: str, phase: str, group: _Group):
        self.eng, self.core, self.tile, self.t, self.kind, self.phase = eng, core, tile, t, kind, phase
        self.group = group
        self.env = eng.env
        ends = eng._memo.get((id(t), core))
        if ends is None:
            src, dst = eng._resolve(core, tile, t, "src"), eng._resolve(core, tile, t, "dst")
            ends = eng._memo[(id(t), core)] = (src, dst, t.size_bytes, (src[0].name, src[1], dst[0].name, dst[1]),
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
            planned = eng._memo.get(("copy", id(t), self.core), _UNPLANNED)
            if planned is _UNPLANNED:  # the copy's views, kept with the plan: its later runs reuse them
                planned = eng._memo[("copy", id(t), self.core)] = eng.memory.copy_plan(
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
        if _LITERAL_EVENTS:  # one DMA event per transfer: the cheapest way to build it
            event = object.__new__(TraceEvent)
            object.__setattr__(event, "__dict__", {
                "core": self.core, "unit": _DMA_UNITS[self.engine_id], "kind": self.kind, "start": self.start_cycle,
                "end": landed, "bytes": self.size_bytes, "src": t.src, "dst": t.dst,
                "src_region": self.src[0].name, "dst_region": self.dst[0].name, "tile": self.tile.tile_id,
                "phase": self.phase, "flops": 0, "wait_cycles": self.waited, "wait_start": self.queued})
        else:
            event = _trace_event(
                core=self.core, unit=f"dma{self.engine_id}", kind=self.kind, start=self.start_cycle, end=landed,
                bytes=self.size_bytes, src=t.src, dst=t.dst, src_region=self.src[0].name,
                dst_region=self.dst[0].name, tile=self.tile.tile_id, phase=self.phase, wait_cycles=self.waited,
                wait_start=self.queued)
        eng.record(event)
        self.group.lands_at(landed)


class _Walk:
    """A core's walk through one phase's tiles, driven by callbacks (no SimPy process, no event per step).

    For each tile: issue the next tile's loads (prefetch; a tile's loads also wait
    for the previous tile of its slot to have stored), wait for this tile's loads,
    compute (one timeout), start its stores.  ``finished()`` runs once the walk is
    over and every store has landed.
    """

    __slots__ = ("eng", "core", "tiles", "phase", "finished", "i", "issued", "loaded", "waiting", "latest",
                 "gates", "stored", "walked", "compute_start")

    def __init__(self, eng: "Engine", core: int, tiles: tuple[Tile, ...], phase: str,
                 finished: Callable[[], None]):
        self.eng, self.core, self.tiles, self.phase, self.finished = eng, core, tiles, phase, finished
        self.i = 0  # the tile being walked
        self.issued = 0  # tiles whose loads were issued
        self.loaded = [False] * len(tiles)
        self.waiting = False  # the walk waits for tile i's loads
        self.latest: dict[int, _Gate] = {}  # slot -> gate of the latest tile issued on it
        self.gates: list[_Gate] = []  # per tile: opens when its stores have landed (its slot is free again)
        self.stored = _Count(len(tiles), self._stored_all)
        self.walked = False
        self.compute_start = 0

    def _issue(self, i: int) -> None:
        tile, eng = self.tiles[i], self.eng
        gate = _Gate()
        self.gates.append(gate)
        prev = self.latest.get(tile.slot)
        self.latest[tile.slot] = gate
        self.issued = i + 1

        def start() -> None:
            eng._start_transfers(self.core, tile, tile.loads, "dma_in", self.phase, lambda: self._loaded(i))

        if prev is None:
            start()
        else:
            prev.then(start)  # the slot's buffers are free once the previous tile's stores landed

    def _loaded(self, i: int) -> None:
        self.loaded[i] = True
        if self.waiting and i == self.i:
            self.waiting = False
            self.advance()

    def advance(self) -> None:
        """Walk on as far as the loads allow (a tile with compute continues in its timeout's callback)."""
        tiles, n = self.tiles, len(self.tiles)
        while self.i < n:
            i = self.i
            if self.issued <= i:
                self._issue(i)
            if self.issued == i + 1 and i + 1 < n:
                self._issue(i + 1)  # prefetch: the next tile's DMA overlaps this tile's compute
            if not self.loaded[i]:
                self.waiting = True
                return
            tile = tiles[i]
            if tile.compute is not None:
                eng = self.eng
                self.compute_start = eng.env._now
                Timeout(eng.env, eng._compute_start(self.core, tile)).callbacks.append(self._computed)
                return
            self._store(i)

        self.walked = True
        if not self.stored.left:
            self.finished()

    def _computed(self, _: simpy.Event) -> None:
        i = self.i
        self.eng._compute_record(self.core, self.tiles[i], self.phase, self.compute_start)
        self._store(i)
        self.advance()

    def _store(self, i: int) -> None:
        """Start tile ``i``'s stores and step to the next tile."""
        tile, gate, eng = self.tiles[i], self.gates[i], self.eng

        def stored_one() -> None:
            gate.open()
            self.stored.one_done()

        eng._start_transfers(self.core, tile, tile.stores, "dma_out", self.phase, stored_one)
        if eng.on_tile is not None:
            eng.on_tile(1, eng.env._now)
        self.i = i + 1

    def _stored_all(self) -> None:
        if self.walked:
            self.finished()


class Engine:
    """Runs one plan on a fresh SimPy environment; the cycle count is returned by :meth:`run`."""

    def __init__(self, target: Target, memory: AddressSpace, recorder: Recorder, *, numerics: bool = True,
                 on_tile: Callable[[int, int], None] | None = None, memo: dict | None = None):
        self.target = target
        self.memory = memory
        self.recorder = recorder
        # One trace event per transfer and compute: a plain Recorder's list is appended to directly.
        self.record = recorder.events.append if type(recorder) is Recorder else recorder.record
        self.numerics = numerics
        self.on_tile = on_tile
        self.env = simpy.Environment()
        self.events_processed = 0
        self.setup_cycles = target.dma.setup_cycles
        self._ports: dict[tuple[str, int], _Units] = {}
        self._engines: dict[int, _Units] = {}
        # (lo, hi, core) -> (region, store key): a plan touches the same spans again and again.
        self._resolved: dict[tuple[int, int, int], tuple[Region, int]] = {}
        # (id(transfer), core) -> its two resolved ends and size: kept with a plan (``memo``) by a caller that
        # runs the same plan again, since resolving spans is a good part of a transfer's cost.
        self._memo: dict = {} if memo is None else memo
        self._routes: dict[tuple[str, int, str, int], tuple[tuple[_Units, ...], int]] = {}
        self.core_end_cycles: dict[int, int] = {}

    @property
    def sim_events(self) -> int:
        """SimPy events processed so far by this engine's run."""
        return self.events_processed

    # -- resources ----------------------------------------------------------------------------

    def _port(self, region: Region, key: int) -> _Units:
        k = (region.name, key)
        pool = self._ports.get(k)
        if pool is None:
            pool = self._ports[k] = _Units(self.env, region.ports)
        return pool

    def _dma_engines(self, core: int) -> _Units:
        pool = self._engines.get(core)
        if pool is None:
            pool = self._engines[core] = _Units(self.env, self.target.dma.engines_per_core)
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
                raise MemoryFault(f"core {core}, tile {tile.tile_id}, cycle {self.env._now}: {e}") from None
        self._resolved[(lo, hi, core)] = got
        return got

    def _route(self, src_region: Region, src_key: int, dst_region: Region,
               dst_key: int) -> tuple[tuple[_Units, ...], int]:
        """(ports to hold, in deadlock-free order; access latency) of a transfer's two ends."""
        k = (src_region.name, src_key, dst_region.name, dst_key)
        route = self._routes.get(k)
        if route is None:
            # Ports are acquired in a fixed order (by region base, then store) so two transfers never deadlock.
            ends = sorted({(src_region.base, src_key): src_region, (dst_region.base, dst_key): dst_region}.items(),
                          key=lambda e: e[0])
            route = self._routes[k] = (
                tuple(self._port(region, key) for (_, key), region in ends),
                max(src_region.latency_cycles, dst_region.latency_cycles))
        return route

    def _start_transfers(self, core: int, tile: Tile, transfers: tuple[Transfer, ...], kind: str, phase: str,
                         done: Callable[[], None]) -> None:
        """Start ``transfers`` now, all at once; ``done()`` runs when the last has landed (at once if none)."""
        if not transfers:
            done()
            return
        group = _Group(self.env, len(transfers), done)
        for t in transfers:
            _Dma(self, core, tile, t, kind, phase, group).start()

    # -- compute ---------------------------------------------------------------------------------

    def compute_cycles(self, c: Compute) -> int:
        """Cycles of one tile's vector work, priced from the target's core model."""
        core = self.target.core
        if c.precision not in core.precisions:
            raise SimError(f"plan computes in {c.precision}, which {self.target.name} lacks") from None
        return (core.loop_overhead_cycles + core.vector_op_latency_cycles
                + core.peak_fraction_cycles(c.vector_ops, c.precision)
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
                raise MemoryFault(f"core {core}, tile {tile.tile_id}, cycle {self.env._now}: {label}: {e}") \
                    from None
            self._resolved[(op.addr, op.addr + n, core)] = got
        return got[1], n, dt

    def _operand_view(self, core: int, tile: Tile, op: Operand, label: str,
                      what: str) -> tuple[int, int, np.dtype, np.ndarray | None, np.ndarray | None]:
        """(store key, bytes, dtype, a view of the operand's bytes and a read-only one, or None twice if it
        crosses a page), kept in the memo: a cached plan's operands are the same every run."""
        got = self._memo.get(("operand", id(op), core))
        if got is None:
            key, n, dt = self._operand_key(core, tile, op, label, what)
            view = self.memory.dense_view(key, op.addr, op.shape, dt)
            frozen = None
            if view is not None:
                frozen = view.view()
                frozen.flags.writeable = False
            got = self._memo[("operand", id(op), core)] = (key, n, dt, view, frozen)
        return got

    def _read_operand(self, core: int, tile: Tile, op: Operand) -> np.ndarray:
        key, n, dt, _, frozen = self._operand_view(core, tile, op, "compute operand", "read")
        # Read-only: a tile's function cannot write simulated memory through its inputs (numpy refuses), and
        # its results are written back only once it has returned, so no input is copied.
        if frozen is not None:
            return frozen
        return self.memory.read_span(key, op.addr, n).copy().view(dt).reshape(op.shape)

    def _write_operand(self, core: int, tile: Tile, op: Operand, value: np.ndarray) -> None:
        key, n, dt, view, _ = self._operand_view(core, tile, op, "compute output", "write")
        arr = np.asarray(value, dtype=dt)
        if arr.nbytes != n:
            raise SimError(f"tile {tile.tile_id}: compute output of shape {arr.shape} does not fill "
                           f"operand {op.shape}")
        if view is not None:
            self.memory.touch(key, op.addr, op.addr + n)
            view[...] = arr.reshape(op.shape)
        else:
            self.memory.write_span(key, op.addr, np.ascontiguousarray(arr).reshape(-1).view(np.uint8))

    def _compute_start(self, core: int, tile: Tile) -> int:
        """Run a tile's numerics (results written back now) and return the cycles its compute takes."""
        c = tile.compute
        if self.numerics:
            arrays = [self._read_operand(core, tile, op) for op in c.inputs]
            results = c.fn(*arrays)
            if len(results) != len(c.outputs):
                raise SimError(f"tile {tile.tile_id}: compute returned {len(results)} arrays for "
                               f"{len(c.outputs)} outputs")
            if len(results) > 1:
                # A result that is (a view of) a read-only input must not change under an earlier output's write.
                results = [r.copy() if isinstance(r, np.ndarray) and not r.flags.writeable else r for r in results]
            for op, value in zip(c.outputs, results):
                self._write_operand(core, tile, op, value)
        cycles = self._memo.get(id(c))
        if cycles is None:
            cycles = self._memo[id(c)] = self.compute_cycles(c)
        return cycles

    def _compute_record(self, core: int, tile: Tile, phase: str, start: int) -> None:
        """The trace event of a tile's compute, which ran from ``start`` to now."""
        c = tile.compute
        if _LITERAL_EVENTS:
            event = object.__new__(TraceEvent)
            object.__setattr__(event, "__dict__", {
                "core": core, "unit": "compute", "kind": "compute", "start": start, "end": self.env._now, "bytes": 0,
                "src": None, "dst": None, "src_region": None, "dst_region": None, "tile": tile.tile_id,
                "phase": phase, "flops": c.flops, "wait_cycles": 0, "wait_start": None})
        else:
            event = _trace_event(core=core, unit="compute", kind="compute", start=start, end=self.env._now,
                                 tile=tile.tile_id, phase=phase, flops=c.flops)
        self.record(event)

    # -- a core's walk through the plan ---------------------------------------------------------

    def _tiles(self, core: int, tiles: tuple[Tile, ...], phase: str) -> Generator:
        if not tiles:
            return
        done = self.env.event()
        _Walk(self, core, tiles, phase, done.succeed).advance()
        yield done  # the last store of the phase has landed

    def _barrier(self, core: int, phase: str, state: dict) -> Generator:
        arrive = self.env._now
        state["arrived"] += 1
        if state["arrived"] == state["expected"]:
            release = state["release"]
            self.env.process(self._release(release))
        yield state["release"]
        self.recorder.record(_trace_event(core=core, unit="sync", kind="barrier_wait", start=arrive,
                                        end=self.env._now, phase=phase, wait_cycles=self.env._now - arrive,
                                        wait_start=arrive))

    def _release(self, event: simpy.Event) -> Generator:
        yield self.env.timeout(self.target.barrier_latency_cycles)
        event.succeed()

    def _core(self, core: int, plan: Plan, barriers: list[dict]) -> Generator:
        yield self.env.timeout(self.target.launch_overhead_cycles)
        self.recorder.record(_trace_event(core=core, unit="sync", kind="launch", start=0, end=self.env._now))
        for phase, state in zip(plan.phases, barriers):
            yield from self._tiles(core, tuple(phase.tiles.get(core, ())), phase.name)
            if state is not None:
                yield from self._barrier(core, phase.name, state)
        self.core_end_cycles[core] = self.env._now

    def _run_events(self, until_cycles: int | None) -> None:
        """Process events (those up to ``until_cycles`` if given) and count them.

        ``env.run`` with a counting ``step`` override would cost a call per event; this loop
        does the same work with a local counter.
        """
        env, step, n = self.env, self.env.step, 0
        try:
            if until_cycles is None:
                while True:
                    step()
                    n += 1
            else:
                peek = env.peek
                while peek() <= until_cycles:
                    step()
                    n += 1
        except EmptySchedule:
            pass
        finally:
            self.events_processed += n

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
        self._run_events(until_cycles)
        if until_cycles is not None and len(self.core_end_cycles) < len(plan.cores):
            return None
        missing = [c for c in plan.cores if c not in self.core_end_cycles]
        if missing:
            raise SimError(f"simulation stalled: cores {missing} never finished (deadlocked plan)")
        return max(self.core_end_cycles.values())
