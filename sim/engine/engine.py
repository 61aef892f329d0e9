"""The SimPy model of a chip running a lowered plan.

One process per core walks the plan's phases.  Each tile's loads go through the
core's DMA engines (first come, first served); once a transfer holds an engine
and its setup is done, it streams as a flow through the chip's fluid network
(:mod:`sim.engine.fluid`): a link per shared region for the whole chip, a link
per private region and core, a link per DMA engine, each with its bandwidth
from the target, divided max-min fairly among the flows streaming through it
at each moment and recomputed whenever one starts or ends.  A lone transfer
thus gets all its regions and its engine allow, and contention on DDR or GSM
emerges from the flows sharing it.  The next tile's loads are issued while this
tile computes (double buffering through the tiles' slots), and phases end in a
barrier.  Every number comes from the target.  The engine knows no kernel: it
moves bytes and calls each tile's compute on the operands it reads back from
simulated memory.

Transfers are not SimPy processes: once a transfer holds an engine, the network
starts its flow when the setup is done (at the network's own wake-up, no event of
the transfer's), holds one pending timeout (its next start or completion) and
calls each flow back when it ends; a free engine is taken without an event, and
an engine queue whose holders have all said when they let go hands its first
waiter an engine and the cycle of its turn at once.  A tile costs its share of
the network's wake-ups, one event for its group's landing (none when the loads
land while the walk still computes the tile before) and one for its compute, so
the event engine's work grows with tiles, not with elements.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import simpy
from simpy.core import EmptySchedule

from sim.engine import steady as steady_state
from sim.engine.buffers import PhaseBuffers
from sim.engine.clock import cycle_of, discard_pending
from sim.engine.dma import Dma
from sim.engine.ends import EndsMemo
from sim.engine.events import Recorder, TraceEvent
from sim.engine.fluid import FlowNetwork, FlowShape, Link, exact_capacity
from sim.engine.replay import replay as replay_effects
from sim.engine.results import tile_results
from sim.engine.steady import Skip, SteadyState
from sim.engine.stop_checks import StopLog
from sim.engine.sync import Rendezvous
from sim.engine.turnaround import Turnaround
from sim.engine.units import Group, Units
from sim.engine.walk import Walk
from sim.errors import DeadlockError, MemoryFault
from sim.model.memory import AddressSpace
from sim.model.plan import Operand, Plan, Tile, Transfer
from sim.model.target import Region, Target
from sim.timing import (
    activation_rate,
    compute_cycles,
    compute_text,
    transfer_latency_cycles,
)


class _PastLimit(Exception):
    """A run with a cycle limit that can no longer end by it (raised from inside the event loop)."""


#: What a run does to simulated memory, in the order it does it: a transfer's bytes moving
#: ``(transfer, core, source store key, destination store key)`` or a tile's compute ``(tile, core, cycle)``;
#: and the progress it reports, ``(tiles, cycle)``.
Effect = tuple


class Engine:
    """Runs one plan on a fresh SimPy environment; the cycle count is returned by :meth:`run`.

    Its parts (a core's :class:`~sim.engine.walk.Walk`, one :class:`~sim.engine.dma.Dma` transfer) drive it
    through its public methods and read its public tables (``routes``, ``engine_links``,
    ``engine_pools``, ``flow_shapes``): the engine's interface to them, nothing private.

    With ``effects`` (a list), the run also appends every :data:`Effect` it has on memory, in order, whether it
    carries them out (``numerics``) or not.  Timing never depends on the bytes, so a full run of the same plan
    would carry out exactly those effects in exactly that order: :meth:`replay` does, without simulating.
    """

    def __init__(self, target: Target, memory: AddressSpace, recorder: Recorder, *, numerics: bool = True,
                 on_tile: Callable[[int, int], None] | None = None, effects: list[Effect] | None = None,
                 steady: bool | None = None):
        self.target = target
        self.memory = memory
        self.recorder = recorder
        # One trace event per transfer and compute: a plain Recorder's list is appended to directly.
        self.record = recorder.events.append if type(recorder) is Recorder else recorder.record
        self.numerics = numerics
        self.effects = effects
        if effects is not None:  # the tiles' progress is replayed too, each at the cycle it was reported
            on_tile = self._ticker(effects, on_tile)
        self.on_tile = on_tile
        self.env = simpy.Environment()
        self.events_processed = 0
        self.setup_cycles = target.dma.setup_cycles
        # The shared bandwidth: one network per run, its links made on first use.
        self.net = FlowNetwork(self.env)
        self._region_links: dict[tuple[str, int], Link] = {}
        self._row_links: dict[tuple[str, int], Link] = {}
        self.engine_links: dict[tuple[int, int], Link] = {}
        self.engine_pools: dict[int, Units] = {}
        self.channel_units: dict[tuple[int, int], Units] = {}  # (core, channel) -> its one unit (Transfer.channel)
        # (lo, hi, core) -> (region, store key) of compute operands: a plan touches the same spans again and again.
        self._resolved: dict[tuple[int, int, int], tuple[Region, int]] = {}
        self.routes: dict[tuple[str, int, str, int], tuple[Link, Link, int]] = {}
        # (source link, its bytes, destination link, its bytes, engine link, rows) -> the flow's shape in this run's
        # net.
        self.flow_shapes: dict[tuple, FlowShape] = {}
        self._ends = EndsMemo(memory.map)  # (each transfer's ends, kept per shape and placement)
        self.core_end_cycles: dict[int, int] = {}
        # A run with a cycle limit: the limit, each core's compute cycles not started yet, and with the plan's
        # bytes per region, those not yet streaming through each shared region and its bandwidth.
        self.limit_cycles: int | None = None  # the run's cycle limit, if given (the steady state skips no further)
        self.stop_log: StopLog | None = None  # the early stop's checks passed, under a limit with the steady state
        self._compute_left: dict[int, int] | None = None
        self.bytes_left: dict[str, int] | None = None
        self._bandwidths: dict[str, Fraction] = {}
        self._walks: list[Walk] = []  # every walk started (dropped when the run is over: :meth:`_abandon`)
        self._buffers: list[PhaseBuffers] = []  # the phases' staged buffers (dropped with the walks)
        self._plan: Plan | None = None  # the plan being run
        self._prioritised: set[int] | None = None  # (made on first use: _prioritised_cores)
        self._rendezvous: Rendezvous | None = None  # its synchronised transfers' meeting place, once one comes
        self._steady: SteadyState | None = None
        self._skips: tuple[Skip, ...] = ()
        # The exact steady state (sim.engine.steady): on unless ``steady`` is False (or STEADY_STATE is, when
        # ``steady`` is None), and only with a plain Recorder (the skipped periods' events are appended to it).
        self.steady_on = (steady_state.STEADY_STATE if steady is None else steady) and type(recorder) is Recorder
        self.offset = 0  # cycles skipped so far: added to every cycle the run reports
        self.boundary = False  # a watched walk began a compute: the steady state looks at the run after the event
        # Per trace event, (core, tile index in its walk, kind, position) or None; and the memory effects and
        # progress reports with the same: what the steady state repeats.
        self.rprov: list[tuple | None] | None = None
        self.elog: list[tuple] | None = None
        self.walk_of: dict[int, Walk] = {}  # each core's current walk
        self.where: dict[int, tuple] = {}  # each core's place: ("walk", phase) / ("barrier", phase) / ("done",)

    @property
    def sim_events(self) -> int:
        """SimPy events processed so far by this engine's run."""
        return self.events_processed

    # -- resources ----------------------------------------------------------------------------

    def _region_link(self, region: Region, key: int) -> Link:
        """The link of ``region`` (its one store for a shared region; core ``key``'s for a private one)."""
        k = (region.name, key)
        link = self._region_links.get(k)
        if link is None:
            name = region.name if region.shared else f"{region.name}@core{key}"
            link = self._region_links[k] = self.net.add_link(name, region.bandwidth_bytes_per_cycle)
            if region.rows is not None and region.rows.turns_around:
                self.net.couple(link, Turnaround.of_region(region))  # (its bus turns between reads and writes)
        return link

    def row_link(self, region: Region, key: int) -> Link:
        """The activation link of DRAM ``region`` (its one device for a shared region; core ``key``'s for a private
        one): the rows its transfers open, at the device's tFAW rate (:func:`sim.timing.activation_rate`)."""
        k = (region.name, key)
        link = self._row_links.get(k)
        if link is None:
            name = f"{region.name}.rows" if region.shared else f"{region.name}.rows@core{key}"
            link = self._row_links[k] = self.net.add_link(name, activation_rate(region), weighs=False)
        return link

    def engine_link(self, core: int, engine_id: int) -> Link:
        """The link of DMA engine ``engine_id`` of ``core`` (its rate caps the one transfer it streams)."""
        link = self.engine_links[(core, engine_id)] = self.net.add_link(
            f"dma{engine_id}@core{core}", self.target.dma.engine_bytes_per_cycle, weighs=False)
        return link

    def dma_engines(self, core: int) -> Units:
        """The DMA engines of ``core`` (made on first use)."""
        pool = self.engine_pools.get(core)
        if pool is None:
            pool = self.engine_pools[core] = Units(self.env, self.target.dma.engines_per_core,
                                                   core in self._prioritised_cores())
        return pool

    def dma_channel(self, core: int, channel: int) -> Units:
        """Numbered DMA channel ``channel`` of ``core``: one transfer at a time, first come, first served (made on
        first use)."""
        unit = self.channel_units.get((core, channel))
        if unit is None:
            unit = self.channel_units[(core, channel)] = Units(self.env, 1)
        return unit

    def _prioritised_cores(self) -> set[int]:
        """The cores whose transfers in the plan have more than one priority (their engines serve by priority)."""
        found = self._prioritised
        if found is None:
            assert self._plan is not None
            found = self._prioritised = set()
            for phase in self._plan.phases:
                for core, tiles in phase.tiles.items():
                    if core not in found and len({t.priority for tile in tiles
                                                  for t in (*tile.loads, *tile.stores)}) > 1:
                        found.add(core)
        return found

    # -- one transfer ------------------------------------------------------------------------------

    def ends(self, core: int, tile: Tile, t: Transfer) -> tuple:
        """:func:`~sim.engine.ends.resolve_transfer_ends` of ``t`` on ``core``; a MemoryFault naming the core, the
        tile and the cycle when a side is not one region's bytes."""
        mmap = self.memory.map
        # The transfer keeps its last answer (outside its fields, as it keeps its hash): a plan's transfers are
        # issued by one core over one map, run after run, and this path is taken once per transfer run.
        last = t.__dict__.get("_ends")
        if last is not None and last[0] is mmap and last[1] == core:
            return last[2]
        try:
            # Looked up by the transfer's shape and placement rather than asked of the value memo: hashing a new
            # transfer by value costs as much as resolving it, and the transfer keeps the answer for its later runs.
            ends = self._ends(t, core)
        except MemoryFault as e:
            raise MemoryFault.in_tile(e, core, tile, cycle_of(self.env) + self.offset) from None
        t.__dict__["_ends"] = (mmap, core, ends)
        return ends

    def rendezvous(self) -> Rendezvous:
        """Where this run's synchronised transfers meet (:mod:`sim.engine.sync`), made at the first one."""
        if self._rendezvous is None:
            assert self._plan is not None
            self._rendezvous = Rendezvous(self, self._plan)
        return self._rendezvous

    def route(self, src_region: Region, src_key: int, dst_region: Region, dst_key: int) -> tuple[Link, Link, int]:
        """(source link, destination link, access latency) of a transfer's two ends."""
        route = self.routes[(src_region.name, src_key, dst_region.name, dst_key)] = (
            self._region_link(src_region, src_key), self._region_link(dst_region, dst_key),
            transfer_latency_cycles(src_region, dst_region))
        return route

    def start_transfers(self, core: int, tile: Tile, transfers: tuple[Transfer, ...], kind: str, phase: str,
                         done: Callable[[], None], known: Callable[[int], bool] | None = None,
                         index: int = -1) -> None:
        """Start ``transfers`` now, all at once; ``done()`` runs when the last has landed (at once if none), unless
        ``known(landing cycle)`` takes the landing as done when it is known (:class:`~sim.engine.units.Group`).
        ``index``: the tile's in its core's walk."""
        if not transfers:
            done()
            return
        group = Group(self.env, len(transfers), done, known)
        for pos, t in enumerate(transfers):
            Dma(self, core, tile, t, kind, phase, group, index, pos).start()

    def tick(self) -> None:
        """A tile is done: tell ``on_tile`` (at the cycle the run reports)."""
        cycle = cycle_of(self.env) + self.offset
        if self.elog is not None:
            self.elog.append((2, cycle))
        assert self.on_tile is not None
        self.on_tile(1, cycle)

    # -- compute ---------------------------------------------------------------------------------

    def copy_bytes(self, t: Transfer, core: int, src_key: int, dst_key: int) -> None:
        """Move a transfer's bytes in simulated memory (through views the memory keeps after the first time)."""
        planned = self.memory.kept_copy_plan(src_key, t.src, dst_key, t.dst, t.shape, t.itemsize, t.src_strides,
                                             t.dst_strides)
        if planned is None:
            self.memory.copy(src_key, t.src, dst_key, t.dst, t.shape, t.itemsize, t.src_strides, t.dst_strides)
        else:
            self.memory.copy_planned(planned)

    @staticmethod
    def _ticker(effects: list[Effect], on_tile: Callable[[int, int], None] | None) -> Callable[[int, int], None]:
        """``on_tile`` that also logs each report ``(tiles, cycle)`` among the effects."""
        log = effects.append

        def tick(tiles: int, cycle: int) -> None:
            log((tiles, cycle))
            if on_tile is not None:
                on_tile(tiles, cycle)
        return tick

    def replay(self, effects: Sequence[Effect]) -> None:
        """Carry out the effects a run of this engine's plan recorded, in their order: the memory a full run
        leaves, without simulating again; ``on_tile`` hears the tiles as the run reported them."""
        replay_effects(self, effects)

    def _operand_key(self, core: int, tile: Tile, op: Operand, label: str, what: str,
                     cycle: int) -> tuple[int, int, np.dtype]:
        """(store key, bytes, little-endian dtype) of a compute operand; MemoryFault if it is not mapped."""
        dt = np.dtype(op.dtype).newbyteorder("<")
        n = math.prod(op.shape) * dt.itemsize
        got = self._resolved.get((op.addr, op.addr + n, core))
        if got is None:
            try:
                got = self.memory.map.resolve(op.addr, n, core, what=what)
            except MemoryFault as e:
                raise MemoryFault.in_tile(e, core, tile, cycle, label) from None
            self._resolved[(op.addr, op.addr + n, core)] = got
        return got[1], n, dt

    def operand_view(self, core: int, tile: Tile, op: Operand, label: str, what: str,
                      cycle: int) -> tuple[int, int, np.dtype, np.ndarray | None, np.ndarray | None]:
        """(store key, bytes, dtype, a view of the operand's bytes and a read-only one, or None twice if it
        crosses a page), the views kept by the memory: a cached plan's operands are the same every run."""
        key, n, dt = self._operand_key(core, tile, op, label, what, cycle)
        view, frozen = self.memory.kept_dense_views(key, op.addr, tuple(op.shape), dt)
        return key, n, dt, view, frozen

    def _read_operand(self, core: int, tile: Tile, op: Operand, cycle: int) -> np.ndarray:
        key, n, dt, _, frozen = self.operand_view(core, tile, op, "compute operand", "read", cycle)
        # Read-only: a tile's function cannot write simulated memory through its inputs (numpy refuses), and
        # its results are written back only once it has returned, so no input is copied.
        if frozen is not None:
            return frozen
        return self.memory.read_span(key, op.addr, n).copy().view(dt).reshape(op.shape)

    def _write_operand(self, core: int, tile: Tile, op: Operand, value: np.ndarray, cycle: int) -> None:
        key, n, dt, view, _ = self.operand_view(core, tile, op, "compute output", "write", cycle)
        arr = np.asarray(value, dtype=dt)
        if view is not None:
            self.memory.touch(key, op.addr, op.addr + n)
            view[...] = arr.reshape(op.shape)
        else:
            self.memory.write_span(key, op.addr, np.ascontiguousarray(arr).reshape(-1).view(np.uint8))

    def compute_numerics(self, core: int, tile: Tile, cycle: int) -> None:
        """Run a tile's compute function on its operands in simulated memory and write its results back."""
        c = tile.compute
        assert c is not None  # the walk computes only tiles that have a compute
        results = tile_results(c, [self._read_operand(core, tile, op, cycle) for op in c.inputs], core, tile)
        for op, value in zip(c.outputs, results):
            self._write_operand(core, tile, op, value, cycle)

    def begin_compute(self, core: int, tile: Tile, index: int = -1) -> int:
        """Run a tile's numerics (results written back now) and return the cycles its compute takes.

        In a run with a cycle limit, stop the run (:class:`_PastLimit`) as soon as this core's computes still to
        come cannot end by the limit: a core runs its computes one after another, so it ends no sooner than now
        plus their cycles.  ``index``: the tile's in its core's walk (what the steady state logs)."""
        c = tile.compute
        assert c is not None  # the walk computes only tiles that have a compute
        now = cycle_of(self.env) + self.offset
        if self.numerics:
            self.compute_numerics(core, tile, now)
        if self.effects is not None:
            self.effects.append((tile, core, now))
        if self.elog is not None:
            self.elog.append((1, core, index, now))
        cycles = compute_cycles(c, self.target)
        if self._compute_left is not None:
            limit = self.limit_cycles
            assert limit is not None  # (the compute still to come is counted only under a limit)
            left = self._compute_left[core]
            if now + left > limit:
                raise _PastLimit
            self._compute_left[core] = left - cycles
            if self.bytes_left is not None:
                # The bytes no stream has started yet cross their shared region at its bandwidth at most.
                ahead = limit - now
                for name, left_bytes in self.bytes_left.items():
                    if left_bytes > ahead * self._bandwidths[name]:
                        raise _PastLimit
            if self.stop_log is not None:
                self.stop_log.entries.append((now, core, left, tuple(self.bytes_left.values())
                                              if self.bytes_left is not None else ()))
        return cycles

    def record_compute(self, core: int, tile: Tile, phase: str, start: int, index: int = -1) -> None:
        """The trace event of a tile's compute, which ran from ``start`` to now (``index``: the tile's in its
        core's walk)."""
        c = tile.compute
        assert c is not None
        text = compute_text(c, self.target)
        off = self.offset
        self.record(TraceEvent(core, "compute", "compute", start + off, cycle_of(self.env) + off, 0, None, None, None,
                               None, tile.tile_id, phase, c.flops, 0, None, text))
        if self.rprov is not None:
            self.rprov.append((core, index, "compute", 0))

    # -- a core's walk through the plan ---------------------------------------------------------

    def _tiles(self, core: int, tiles: tuple[Tile, ...], phase: str,
               buffers: PhaseBuffers | None = None) -> Generator:
        if not tiles:
            self.walk_of.pop(core, None)
            return
        done = self.env.event()
        walk = Walk(self, core, tiles, phase, done.succeed, buffers)
        self._walks.append(walk)
        self.walk_of[core] = walk
        walk.phase_index = self.where[core][1]
        if self._steady is not None:
            self._steady.new_walk(walk)
        walk.advance()
        yield done  # the last store of the phase has landed

    def _barrier(self, core: int, phase: str, state: dict) -> Generator:
        # (as reported: a skip while the core waits moves what comes after, not its arrival)
        arrived = cycle_of(self.env) + self.offset
        self.where[core] = ("barrier", phase)
        state["arrived"] += 1
        if state["arrived"] == state["expected"]:
            release = state["release"]
            self.env.process(self._release(release))
        yield state["release"]
        end = cycle_of(self.env) + self.offset
        self.recorder.record(TraceEvent(core=core, unit="sync", kind="barrier_wait", start=arrived, end=end,
                                        phase=phase, wait_cycles=end - arrived, wait_start=arrived))
        if self.rprov is not None:
            self.rprov.append(None)

    def _release(self, event: simpy.Event) -> Generator:
        yield self.env.timeout(self.target.barrier_latency_cycles)
        event.succeed()

    def _core(self, core: int, plan: Plan, barriers: list[dict[str, Any] | None],
              buffers: list[PhaseBuffers | None]) -> Generator:
        yield self.env.timeout(self.target.launch_overhead_cycles)
        self.recorder.record(TraceEvent(core=core, unit="sync", kind="launch", start=0, end=cycle_of(self.env)))
        if self.rprov is not None:
            self.rprov.append(None)
        for index, (phase, state, staged) in enumerate(zip(plan.phases, barriers, buffers)):
            self.where[core] = ("walk", index)
            yield from self._tiles(core, tuple(phase.tiles.get(core, ())), phase.name, staged)
            if state is not None:
                yield from self._barrier(core, phase.name, state)
        self.where[core] = ("done",)
        self.core_end_cycles[core] = cycle_of(self.env) + self.offset

    def _abandon(self, cores: list[Generator]) -> None:
        """Drop what a run stopped before its end still holds (its pending events, streams and walks).

        Events, callbacks, walks and the engine refer to one another: left as they are, a stopped run is a web of
        reference cycles holding its plan's tiles and its trace, freed only by a pass of the cyclic collector
        (a tiling search stops most of its candidates' runs).  A run that ended holds nothing pending."""
        discard_pending(self.env)
        self.net.abandon()
        for walk in self._walks:
            walk.abandon()
        self._walks.clear()
        for staged in self._buffers:
            staged.gens.clear()
        for pool in self.engine_pools.values():
            pool.waiters.clear()
            pool.ranks.clear()
        self._rendezvous = None  # (it refers to the engine)
        for process in cores:
            process.close()

    def _run_events(self, until_cycles: int | None) -> None:
        """Process events (those up to ``until_cycles`` if given) and count them.

        ``env.run`` with a counting ``step`` override would cost a call per event; this loop
        does the same work with a local counter.
        """
        env, step, n = self.env, self.env.step, 0
        steady = self._steady
        try:
            if until_cycles is None:
                if steady is None:
                    while True:
                        step()
                        n += 1
                while True:
                    step()
                    n += 1
                    if self.boundary:
                        self.boundary = False
                        n += steady.look(self.events_processed + n)  # (+ the events of the periods it skips)
            else:
                peek = env.peek
                while peek() + self.offset <= until_cycles:
                    step()
                    n += 1
                    if self.boundary:
                        self.boundary = False
                        if steady is not None:
                            n += steady.look(self.events_processed + n)
        except EmptySchedule:
            pass
        finally:
            self.events_processed += n

    def run(self, plan: Plan, until_cycles: int | None = None,
            region_bytes: Mapping[str, int] | None = None) -> int | None:
        """Simulate ``plan``; returns the cycles from launch to the last core's end.

        With ``until_cycles``, stop there and return None if the plan has not finished by then (a candidate already
        slower than the best one known), and sooner once it cannot: when a core's computes still to come, or
        (given ``region_bytes``, the bytes the plan's transfers move through each region, its roofline's) the
        bytes still to start streaming through a shared region at its bandwidth, outlast the limit.
        """
        if until_cycles is not None:
            # Each core's compute cycles, all of which it runs one after another (the early stop's bound).
            self.limit_cycles = until_cycles
            self._compute_left = {core: sum(compute_cycles(t.compute, self.target) for ph in plan.phases
                                            for t in ph.tiles.get(core, ()) if t.compute is not None)
                                  for core in plan.cores}
            if region_bytes is not None:
                shared = [r for r in self.target.regions if r.shared and r.name in region_bytes]
                self.bytes_left = {r.name: region_bytes[r.name] for r in shared}
                self._bandwidths = {r.name: exact_capacity(r.bandwidth_bytes_per_cycle) for r in shared}
        self._plan = plan
        self._prioritised = None
        self._steady = SteadyState(self, plan) if self.steady_on and SteadyState.worthwhile(plan) else None
        if self._steady is not None:
            self.rprov, self.elog = [], []
            if until_cycles is not None:
                self.stop_log = StopLog(tuple(self.bytes_left or ()))
        barriers = [
            {"arrived": 0, "expected": len(plan.cores), "release": self.env.event()} if meets else None
            for meets in plan.barriers()
        ]
        # Staged buffers (Tile.fills / uses) are the phase's, shared by its cores' walks.
        buffers = [PhaseBuffers(phase) if PhaseBuffers.has_buffers(phase) else None for phase in plan.phases]
        self._buffers = [b for b in buffers if b is not None]
        cores = [self._core(core, plan, barriers, buffers) for core in plan.cores]
        for process in cores:
            self.env.process(process)
        try:
            self._run_events(until_cycles)
        except _PastLimit:
            return None
        finally:
            stalled = self._rendezvous.stalled() if self._rendezvous is not None else ""
            self._abandon(cores)
            if self._steady is not None:  # (it refers to the engine: kept, it would make the engine a cycle)
                self._skips, self._steady = tuple(self._steady.skips), None
        if until_cycles is not None and len(self.core_end_cycles) < len(plan.cores):
            return None
        missing = [c for c in plan.cores if c not in self.core_end_cycles]
        if missing:
            raise DeadlockError(f"simulation stalled: cores {missing} never finished (deadlocked plan)"
                                + (f": {stalled}" if stalled else ""))
        return max(self.core_end_cycles.values())

    @property
    def skips(self) -> tuple[Skip, ...]:
        """The periods the steady state skipped in this run (:class:`sim.engine.steady.Skip`, in order)."""
        return self._skips


@dataclass(frozen=True)
class SimulatedTiming:
    """What simulating a plan gave: its cycles, trace events and SimPy events, and the effects on memory a full
    run carries out in order (so that another call of the same plan needs no simulation, only
    :meth:`Engine.replay` when it computes values)."""

    cycles: int
    events: tuple[TraceEvent, ...]
    sim_events: int
    effects: tuple[Effect, ...]


def simulate(plan: Plan, target: Target, memory: AddressSpace, *, numerics: bool,
             on_tile: Callable[[int, int], None] | None = None,
             until_cycles: int | None = None, memo: object = None,
             region_bytes: Mapping[str, int] | None = None) -> SimulatedTiming | None:
    """Run ``plan`` (its numerics too when ``numerics``) and return its timing, effects recorded; None when it
    has not finished by ``until_cycles`` (or cannot: :meth:`Engine.run`, ``region_bytes``).  (``memo``, an
    EngineMemo once, is no longer used: passing it warns.)"""
    if memo is not None:
        warnings.warn("simulate(memo=...) is no longer used: what runs remember is kept by value "
                      "(sim.model.memo) and by the memory; drop the argument", DeprecationWarning, stacklevel=2)
    recorder = Recorder()
    effects: list[Effect] = []
    engine = Engine(target, memory, recorder, numerics=numerics, on_tile=on_tile, effects=effects)
    cycles = engine.run(plan, until_cycles=until_cycles, region_bytes=region_bytes)
    if cycles is None:
        return None
    return SimulatedTiming(cycles, tuple(recorder.events), engine.sim_events, tuple(effects))


class _EngineMemoGone:
    """What ``EngineMemo()`` gives now: nothing to keep (runs remember by value, :mod:`sim.model.memo`)."""


def __getattr__(name: str) -> Any:
    if name == "EngineMemo":  # removed: a caller that made one and passed it as memo= keeps working, warned
        warnings.warn("sim.engine.engine.EngineMemo is gone: what runs of a plan remember is kept by value "
                      "(sim.model.memo) and by the memory; stop passing memo=", DeprecationWarning, stacklevel=2)
        return _EngineMemoGone
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
