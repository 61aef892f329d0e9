"""The exact steady state of a run: when the chip's whole state repeats, the periods in between are not simulated.

A pipeline of identical tiles settles into a period: every T cycles each core is p_c tiles further and everything
pending (the SimPy events, each stream's remaining bytes and rate, the DMA engines' queues, the staged buffers'
fills and uses, each walk's loads and slots) looks the same, relative to now and to each core's tile.  Each time
the watched walk (the first core's with tiles in its phase) begins a compute, :meth:`SteadyState.look` writes that
state down as its signature: cycles relative to now, tiles relative to each core's current one, buffer
generations relative to the lowest one still in use.  Timing is deterministic and depends on the bytes only
through the tiles' shapes, so when a signature comes back T cycles later, the run from there repeats the run
since, as long as the tiles ahead repeat too: tile j + p_c of every core has tile j's transfers (regions, bytes,
runs, DRAM rows: everything but addresses), compute cycles, slot and buffers (generations q later), and the
buffers' fill and use counts repeat.  The largest number K of periods for which they do is skipped at once:

- each walk's tiles lose K * p_c tiles after the ones still in use, which now stand for the tiles K periods on
  (streams in flight are relabelled to them); the staged buffers' live generations move K * q on;
- every cycle the run reports from then on is K * T later (:attr:`Engine.offset`);
- the trace events, memory effects, progress reports and SimPy event count of the skipped periods are those of
  the last period, K times over, with each copy's tile (its id, its transfers' addresses) K tiles further and its
  cycles k * T later; with numerics, the copies and computes are carried out in that order.

So a skip gives exactly what simulating the periods would: the same cycles, trace, memory and counts (the tests
compare every kernel's runs with and without it).  A run stops looking once a synchronised transfer is programmed,
and no tile with one counts as repeating; runs with a recorder other than a plain
:class:`~sim.engine.events.Recorder`, and walks of fewer than :data:`MIN_TILES` tiles, are not looked at.
``DSPSIM_NO_STEADY=1`` turns it off for a process.
"""

from __future__ import annotations

import os
import types
from dataclasses import dataclass
from math import gcd
from typing import TYPE_CHECKING, Any

from sim.engine.buffers import PhaseBuffers, _AfterAll
from sim.engine.clock import cycle_of
from sim.engine.dma import Dma
from sim.engine.events import TraceEvent
from sim.engine.fluid import _UNRATED, FlowNetwork
from sim.engine.stop_checks import periods_within
from sim.engine.units import Gate, Group, Units
from sim.engine.walk import Loaded, StagedLanded, StartLoads, StartStaging, Stored, UsesFilled, Walk
from sim.env_flags import OFF
from sim.errors import MemoryFault
from sim.model.plan import Plan, Tile, parse_buffer_ref
from sim.timing import engine_bytes

if TYPE_CHECKING:
    from sim.engine.engine import Engine

#: How many earlier boundaries with the same state a boundary tries (the nearest first).
_TRIES = 4
#: Walks of fewer tiles are not looked at (too few periods to skip), nor runs without a longer one.
MIN_TILES = 32
#: Boundaries looked at in vain before the steady state looks at every other one only (then every fourth...):
#: a run that does not settle costs few signatures; a skip looks at every boundary again.
_PATIENCE = 8

#: Whether engines skip repeated periods (the default of :class:`~sim.engine.engine.Engine`'s ``steady``).
#: ``DSPSIM_NO_STEADY`` turns it off (read at import: a value that is neither on nor off turns it off too, the
#: plain engine giving the same cycles and trace; :mod:`sim.env_flags`).
STEADY_STATE = os.environ.get("DSPSIM_NO_STEADY", "").strip().lower() in OFF


@dataclass(frozen=True)
class Skip:
    """Periods a run skipped: from ``at_cycle`` (a cycle as the run reports it), ``periods`` periods of
    ``period_cycles``, each ``tiles[core]`` tiles of each core."""

    at_cycle: int
    period_cycles: int
    periods: int
    tiles: tuple[tuple[int, int], ...]


class _Unknown(Exception):
    """A part of the state the signature cannot describe: no skip from here."""


@dataclass
class _Mark:
    """Where the run was at a boundary whose signature was written down."""

    now: int
    base: dict[int, int]  # core -> its walk's current tile
    issued: dict[int, int]
    low: dict[int, int]  # core -> its lowest tile still in use
    gen_base: dict[tuple[int, str], int]  # (phase, buffer) -> its lowest generation in use
    gen_high: dict[tuple[int, str], int]  # ... and its highest one touched
    counts: dict[tuple[tuple[int, str], int], tuple[int, int]]  # (buffer, generation - lowest) -> fills, uses left
    events: int
    records: int
    effects: int
    compute_left: dict[int, int] | None
    bytes_left: dict[str, int] | None  # (the early stop's count of bytes not yet streaming, per shared region)
    checks: int  # the early stop's checks passed so far (Engine.stop_log)


class SteadyState:
    """Looks for a repeated state at each boundary of one engine's run, and skips the periods it proves."""

    def __init__(self, eng: Engine, plan: Plan):
        self.eng = eng
        self.seen: dict[tuple, list[_Mark]] = {}
        self.skips: list[Skip] = []
        # The first core with tiles in each phase: its compute starts are the boundaries looked at.
        self.watched = [next((c for c in plan.cores if phase.tiles.get(c)), None) for phase in plan.phases]
        self._low: dict[int, int] = {}  # id(walk) -> its lowest tile still in use (found going up)
        self._pairs: dict[tuple, dict[int, bool]] = {}  # (walk, p, q) -> tile j -> whether tile j + p repeats it
        self._names: dict[int, list[tuple[str, list[int]]]] = {}  # id(phase buffers) -> each buffer's generations
        self._first_live: dict[tuple[int, str], int] = {}  # (id(phase buffers), buffer) -> lowest unfinished
        self.fingerprints: set[tuple] = set()
        self.boundaries = 0  # boundaries so far
        self.stride, self.misses = 1, 0  # look at every stride-th; looks since the stride last changed

    @staticmethod
    def worthwhile(plan: Plan) -> bool:
        """Whether some core walks a phase long enough to look for a period in (and no transfer names a DMA
        channel: a channel's queue is state the signature does not write down)."""
        if not any(len(tiles) >= MIN_TILES for phase in plan.phases for tiles in phase.tiles.values()):
            return False
        return not any(t.channel is not None for phase in plan.phases for tiles in phase.tiles.values()
                       for tile in tiles for t in tile.loads + tile.stores)

    def new_walk(self, walk: Walk) -> None:
        """A core began walking a phase."""
        walk.watch = walk.core == self.watched[walk.phase_index] and len(walk.tiles) >= MIN_TILES
        self.stride, self.misses = 1, 0
        self._low[id(walk)] = 0
        self.seen.clear()  # (a signature of another set of walks never comes back)

    # -- the signature ----------------------------------------------------------------------------------

    def look(self, events: int) -> int:
        """At a boundary (``events`` SimPy events processed so far): write the state down and, if it was seen
        before, skip what repeats; the SimPy events of the skipped periods (0 if none)."""
        eng = self.eng
        self.boundaries += 1
        if self.boundaries % self.stride or eng._rendezvous is not None:
            return 0
        self.misses += 1
        if self.misses >= _PATIENCE:
            self.stride, self.misses = 2 * self.stride, 0
        # A few numbers of the state first (a part of its signature): the whole signature is written down only
        # when they have been seen before, so a run that does not settle costs little.
        now = cycle_of(eng.env)
        fingerprint = (tuple(sorted(e[0] - now for e in eng.env._queue)),
                       tuple((w.core, w.issued - w.i, w.compute_end - now if w.compute_end >= 0 else None)
                             for w in eng.walk_of.values()),
                       tuple(None if f._finish == _UNRATED else f._finish - now for f in eng.net._active))
        if fingerprint not in self.fingerprints:
            self.fingerprints.add(fingerprint)
            return 0
        try:
            sig, mark = self._signature(events)
        except _Unknown:
            return 0
        marks = self.seen.setdefault(sig, [])
        marks.append(mark)
        # The same state came back: skip from the nearest earlier boundary whose period the tiles repeat (the
        # nearest may be too short: DRAM rows can repeat over several tiles).
        for before in reversed(marks[-1 - _TRIES:-1]):
            periods = self._periods(before, mark)
            if periods:
                del marks[:-1]
                self.stride, self.misses = 1, 0
                return self._skip(before, mark, periods)
        return 0

    def _signature(self, events: int) -> tuple[tuple, _Mark]:
        eng = self.eng
        now = cycle_of(eng.env)
        base: dict[int, int] = {}
        issued: dict[int, int] = {}
        low: dict[int, int] = {}
        walks: list[Walk] = []
        places: list[tuple] = []
        assert eng._plan is not None
        for core in eng._plan.cores:
            where = eng.where.get(core)
            if where is None:
                raise _Unknown
            if where[0] == "walk":
                walk = eng.walk_of.get(core)
                if walk is None or walk.phase_index != where[1] or walk.walked:
                    raise _Unknown  # between two phases
                base[core], issued[core] = walk.i, walk.issued
                low[core] = self._lowest_in_use(walk)
                walks.append(walk)
                places.append(("walk", where[1]))
            elif where[0] == "barrier":
                places.append(where[:2])  # (its arrival, reported as it was, does not change what comes)
            else:
                places.append(where)
        gen_base, gen_high, live = self._buffers(walks, low)
        d = _Describer(now, base, gen_base)
        buffers = tuple((key, tuple(d.generation(pb.gens[(key[1], g)]) if (key[1], g) in pb.gens else None
                                    for g in range(gen_base[key], gen_high[key] + 1)))
                        for key, pb in live)
        walks_sig = tuple(d.walk(w, low[w.core]) for w in walks)
        sig = (tuple(places), walks_sig, buffers, d.queue(eng.env._queue, eng.net, eng.engine_pools),
               tuple((core, d.units(pool)) for core, pool in sorted(eng.engine_pools.items())), d.net(eng.net))
        counts = {(key, g - gen_base[key]): (pb.gens[(key[1], g)].fills_left, pb.gens[(key[1], g)].uses_left)
                  for key, pb in live for g in range(gen_base[key], gen_high[key] + 1) if (key[1], g) in pb.gens}
        mark = _Mark(now, base, issued, low, gen_base, gen_high, counts, events, len(eng.recorder.events),
                     len(eng.elog or ()), dict(eng._compute_left) if eng._compute_left is not None else None,
                     dict(eng.bytes_left) if eng.bytes_left is not None else None,
                     len(eng.stop_log.entries) if eng.stop_log is not None else 0)
        return sig, mark

    def _lowest_in_use(self, walk: Walk) -> int:
        """The lowest tile of ``walk`` whose stores (a staging tile's loads) have not all landed, or its current
        tile if lower."""
        gates, k = walk.gates, self._low[id(walk)]
        while k < walk.issued and gates[k].is_open:
            k += 1
        self._low[id(walk)] = k
        return min(k, walk.i)

    def _buffers(self, walks: list[Walk], low: dict[int, int]) -> tuple[dict, dict, list]:
        """Each (phase, buffer)'s lowest generation in use and highest touched (counted, waited for, or named by
        a tile issued and not done: its gates may sit in a wait not reached yet), and its phase's buffers."""
        gen_base: dict[tuple[int, str], int] = {}
        gen_high: dict[tuple[int, str], int] = {}
        out: list[tuple[tuple[int, str], PhaseBuffers]] = []
        seen: set[int] = set()
        named: dict[tuple[int, str], int] = {}
        for walk in walks:
            for j in range(low[walk.core], walk.issued):
                tile = walk.tiles[j]
                for ref in tile.fills + tile.uses:
                    name, g = parse_buffer_ref(ref)
                    key = (walk.phase_index, name)
                    if g > named.get(key, -1):
                        named[key] = g
        for walk in walks:
            pb = walk.buffers
            if pb is None or id(pb) in seen:
                continue
            seen.add(id(pb))
            names = self._names.get(id(pb))
            if names is None:  # (the plan's generations of each buffer, in order: a skip adds none)
                by_name: dict[str, list[int]] = {}
                for name, g in pb.initial:
                    by_name.setdefault(name, []).append(g)
                names = self._names[id(pb)] = [(name, sorted(by_name[name])) for name in sorted(by_name)]
            gens = pb.gens
            for name, gs in names:
                # Generations are finished in order: the lowest in use is found going up from the last one found.
                at = self._first_live.get((id(pb), name), 0)
                while at < len(gs) and _finished(gens[(name, gs[at])]):
                    at += 1
                self._first_live[(id(pb), name)] = at
                lo = gs[at] if at < len(gs) else gs[-1] + 1
                key = (walk.phase_index, name)
                hi = max(lo - 1, named.get(key, -1))
                for g in gs[at:]:
                    if not _pristine(pb, name, g):
                        hi = max(hi, g)
                gen_base[key], gen_high[key] = lo, hi
                out.append((key, pb))
        return gen_base, gen_high, out

    # -- the skip ---------------------------------------------------------------------------------------

    def _periods(self, a: _Mark, b: _Mark) -> int:
        """How many periods from ``a`` to ``b`` the run can skip from ``b`` (0: none)."""
        eng = self.eng
        period = b.now - a.now
        steps = {core: b.base[core] - a.base[core] for core in b.base}
        if period <= 0 or any(p < 0 for p in steps.values()) or not any(steps.values()):
            return 0
        rprov = eng.rprov
        assert rprov is not None and eng.elog is not None
        if any(p is None for p in rprov[a.records:b.records]):
            return 0
        q = {key: b.gen_base[key] - a.gen_base[key] for key in b.gen_base}
        if any(v < 0 for v in q.values()) or set(q) != set(a.gen_base):
            return 0
        periods = 1 << 62
        for key, by in q.items():
            if by:
                periods = min(periods, self._counts_repeat(key, a.gen_base[key], b.gen_high[key], by))
        for core, p in steps.items():
            if not p:
                continue
            walk = eng.walk_of[core]
            periods = min(periods, (len(walk.tiles) - b.issued[core] - 2) // p)
            if periods < 1:
                return 0
            # (the tiles need to repeat only as far as the periods skipped reach)
            until = self._repeats_until(walk, a.low[core], p, q, b.issued[core] + (periods + 1) * p)
            periods = min(periods, (until - b.issued[core]) // p)
        # What each period takes of each live generation's counts (they must stay above zero).
        for pos, (fills, uses) in b.counts.items():
            fills_a, uses_a = a.counts[pos]
            df, du = fills_a - fills, uses_a - uses
            if df < 0 or du < 0:
                return 0
            if df:
                periods = min(periods, (fills - 1) // df)
            if du:
                periods = min(periods, (uses - 1) // du)
        limit = eng.limit_cycles
        if limit is not None:
            # A run with a limit processes no event past it, and stops at the first compute start whose early-stop
            # check fails: the skipped periods end by the limit and hold no such compute start, and the run goes on
            # from there as a plain one would (sim.engine.stop_checks).
            periods = min(periods, (limit - b.now - eng.offset) // period)
            if eng.stop_log is not None and a.compute_left is not None and b.compute_left is not None:
                per_bytes = ({name: a.bytes_left[name] - b.bytes_left[name] for name in a.bytes_left}
                             if a.bytes_left is not None and b.bytes_left is not None else {})
                most = periods_within(eng.stop_log, a.checks, b.checks, limit, period,
                                      {core: a.compute_left[core] - b.compute_left[core] for core in a.compute_left},
                                      per_bytes, eng._bandwidths)
                if most is not None:
                    periods = min(periods, most)
        return max(periods, 0)

    def _skip(self, a: _Mark, b: _Mark, periods: int) -> int:
        """Skip ``periods`` periods of ``a`` to ``b`` from ``b``; the SimPy events they hold."""
        period = b.now - a.now
        steps = {core: b.base[core] - a.base[core] for core in b.base}
        q = {key: b.gen_base[key] - a.gen_base[key] for key in b.gen_base}
        taken = {pos: (a.counts[pos][0] - fills, a.counts[pos][1] - uses) for pos, (fills, uses) in b.counts.items()}
        self._jump(a, b, period, steps, q, periods)
        for ((phase, name), r), (df, du) in taken.items():
            gen = self._phase_buffers(phase).gens[(name, b.gen_base[(phase, name)] + periods * q[(phase, name)] + r)]
            gen.fills_left -= periods * df
            gen.uses_left -= periods * du
        return periods * (b.events - a.events)

    def _repeats_until(self, walk: Walk, start: int, p: int, q: dict, enough: int) -> int:
        """The first tile j >= ``start`` of ``walk`` whose tile j + ``p`` does not repeat it (buffers ``q``
        generations on); the tiles' end if none, or any tile from ``enough`` on."""
        qn = {name: v for (phase, name), v in q.items() if phase == walk.phase_index}
        pairs = self._pairs.setdefault((id(walk), p, tuple(sorted(qn.items()))), {})
        tiles, n, j = walk.tiles, len(walk.tiles), start
        while j + p < n and j < enough:
            same = pairs.get(j)
            if same is None:
                same = pairs[j] = self._same_tile(walk.core, tiles[j], tiles[j + p], qn)
            if not same:
                break
            j += 1
        return j

    def _same_tile(self, core: int, r: Tile, y: Tile, q: dict[str, int]) -> bool:
        """Whether tile ``y`` of ``core`` runs as tile ``r`` does, its buffers ``q`` generations on."""
        if r.slot != y.slot or len(r.loads) != len(y.loads) or len(r.stores) != len(y.stores):
            return False
        c, d = r.compute, y.compute
        if (c is None) != (d is None) or (c is not None and d is not None and (
                c.loops != d.loops or c.precision != d.precision or c.flops != d.flops)):
            return False
        for refs_r, refs_y in ((r.fills, y.fills), (r.uses, y.uses)):
            if len(refs_r) != len(refs_y):
                return False
            for a, b in zip(refs_r, refs_y):
                (na, ga), (nb, gb) = parse_buffer_ref(a), parse_buffer_ref(b)
                if na != nb or gb - ga != q.get(na, 0):
                    return False
        if r.uses:  # the loads of both wait for the same buffers (those whose bytes they read), the computes the rest
            pb = self.eng.walk_of[core].buffers
            if pb is not None and any(pb.reads(r, a) != pb.reads(y, b) for a, b in zip(r.uses, y.uses)):
                return False
        for tr, ty in zip(r.loads + r.stores, y.loads + y.stores):
            if not self._same_transfer(core, r, tr, y, ty):
                return False
        return True

    def _same_transfer(self, core: int, r: Tile, tr: Any, y: Tile, ty: Any) -> bool:
        """Whether the engine makes of transfer ``ty`` (of tile ``y``) what it makes of ``tr`` (of tile ``r``):
        what it makes of a transfer depends on its addresses only through their regions, bursts and DRAM rows."""
        if tr.sync is not None or ty.sync is not None or tr.priority != ty.priority:
            return False
        try:
            ends, other = self.eng.ends(core, r, tr), self.eng.ends(core, y, ty)
        except MemoryFault:
            return False
        if ends is other:
            return True  # the same block placed alike (the engine keeps one answer per shape and placement)
        dma = self.eng.target.dma
        return ends[:3] == other[:3] and ends[4:] == other[4:] \
            and engine_bytes(tr, ends[4], ends[5], dma) == engine_bytes(ty, other[4], other[5], dma)

    def _counts_repeat(self, key: tuple[int, str], lo: int, hi: int, by: int) -> int:
        """How many periods of ``by`` generations the plan's fill and use counts of buffer ``key`` repeat for,
        counted from the generations in use (``lo`` to ``hi``) at the later boundary."""
        pb = self._phase_buffers(key[0])
        name = key[1]
        g = lo
        while pb.initial.get((name, g)) == pb.initial.get((name, g + by)) and (name, g + by) in pb.initial:
            g += 1
        return (g - hi) // by - 1

    def _phase_buffers(self, phase_index: int) -> PhaseBuffers:
        for walk in self.eng.walk_of.values():
            if walk.phase_index == phase_index and walk.buffers is not None:
                return walk.buffers
        raise AssertionError("a buffer of a phase no core walks")

    def _jump(self, a: _Mark, b: _Mark, period: int, steps: dict[int, int], q: dict, periods: int) -> None:
        eng = self.eng
        self._repeat_outputs(a, b, period, steps, periods)
        dmas = list(_live_dmas(eng))
        for core, p in steps.items():
            if not p:
                continue
            walk, cut, at = eng.walk_of[core], periods * p, b.low[core]
            assert not any(walk.loaded[-cut:])
            walk.tiles = walk.tiles[:at] + walk.tiles[at + cut:]
            del walk.loaded[-cut:]
            walk.stores_left -= cut
            walk.remaps.append((at, cut))
            for d in dmas:
                if d.core == core and d.index >= at:
                    tile = d.tile = walk.tiles[d.index]
                    d.t = (tile.loads if d.kind == "dma_in" else tile.stores)[d.pos]
        moves: dict[int, list[tuple[str, int, int, int]]] = {}
        for key, by in q.items():
            if by:
                moves.setdefault(key[0], []).append((key[1], b.gen_base[key], b.gen_high[key], periods * by))
        for phase, shifts in moves.items():
            self._phase_buffers(phase).shift(shifts)
        if eng._compute_left is not None:
            assert a.compute_left is not None and b.compute_left is not None
            for core in eng._compute_left:
                eng._compute_left[core] -= periods * (a.compute_left[core] - b.compute_left[core])
        if eng.bytes_left is not None:
            assert a.bytes_left is not None and b.bytes_left is not None
            for name in eng.bytes_left:
                eng.bytes_left[name] -= periods * (a.bytes_left[name] - b.bytes_left[name])
        eng.offset += periods * period
        self._pairs.clear()
        self._first_live.clear()
        self.seen.clear()
        self.fingerprints.clear()
        self.skips.append(Skip(b.now + eng.offset - periods * period, period, periods,
                               tuple(sorted((c, p) for c, p in steps.items()))))

    def _repeat_outputs(self, a: _Mark, b: _Mark, period: int, steps: dict[int, int], periods: int) -> None:
        """The trace events, memory effects and progress reports of the skipped periods, in order (before the
        walks are cut: the logs name tiles by their index in the walks as they are)."""
        eng = self.eng
        events, rprov, elog = eng.recorder.events, eng.rprov, eng.elog
        assert rprov is not None and elog is not None
        walks = {core: eng.walk_of[core] for core in steps}

        reals: dict[tuple[int, int], int] = {}

        def tile_of(core: int, index: int, k: int) -> Tile:
            real = reals.get((core, index))
            if real is None:
                real = reals[(core, index)] = walks[core].real_index(index)
            return walks[core].origin[real + k * steps[core]]

        window = list(zip(events[a.records:b.records], rprov[a.records:b.records]))
        append = events.append
        for k in range(1, periods + 1):
            dt = k * period
            for ev, prov in window:
                assert prov is not None
                core, index, kind, pos = prov
                tile = tile_of(core, index, k)
                # (built field by field: a named tuple's _replace costs several times more, per event of every copy)
                if kind == "compute":
                    append(TraceEvent(ev[0], ev[1], ev[2], ev[3] + dt, ev[4] + dt, ev[5], ev[6], ev[7], ev[8], ev[9],
                                      tile.tile_id, *ev[11:]))
                else:
                    t = (tile.loads if kind == "dma_in" else tile.stores)[pos]
                    wait_start = ev[14]
                    assert wait_start is not None  # (a DMA's event has its stream's start)
                    append(TraceEvent(ev[0], ev[1], ev[2], ev[3] + dt, ev[4] + dt, ev[5], t.src, t.dst, ev[8], ev[9],
                                      tile.tile_id, ev[11], ev[12], ev[13], wait_start + dt, *ev[15:]))
        rprov.extend([None] * (len(events) - len(rprov)))  # (no later window reaches back past a skip)
        if not (eng.numerics or eng.effects is not None or eng.on_tile is not None):
            return
        effects = elog[a.effects:b.effects]
        for k in range(1, periods + 1):
            dt = k * period
            for entry in effects:
                if entry[0] == 0:
                    _, core, index, kind, pos, src_key, dst_key = entry
                    tile = tile_of(core, index, k)
                    t = (tile.loads if kind == "dma_in" else tile.stores)[pos]
                    if eng.numerics:
                        eng.copy_bytes(t, core, src_key, dst_key)
                    if eng.effects is not None:
                        eng.effects.append((t, core, src_key, dst_key))
                elif entry[0] == 1:
                    _, core, index, cycle = entry
                    tile = tile_of(core, index, k)
                    if eng.numerics:
                        eng.compute_numerics(core, tile, cycle + dt)
                    if eng.effects is not None:
                        eng.effects.append((tile, core, cycle + dt))
                elif eng.on_tile is not None:
                    eng.on_tile(1, entry[1] + dt)


def _finished(gen: Any) -> bool:
    return gen.filled.is_open and gen.released.is_open and not gen.filled.waiting and not gen.released.waiting


def _pristine(pb: PhaseBuffers, name: str, g: int) -> bool:
    gen = pb.gens[(name, g)]
    fills, uses = pb.initial.get((name, g), (0, 0))
    return (gen.fills_left == fills and gen.uses_left == uses and not gen.filled.waiting
            and not gen.released.waiting and gen.filled.is_open == (not fills)
            and gen.released.is_open == (not fills and not uses))


def _live_dmas(eng: Engine) -> list[Dma]:
    """The transfers a run has started and not landed: waiting for an engine, in setup, streaming."""
    out: list[Dma] = []
    for pool in eng.engine_pools.values():
        out.extend(w.__self__ for w in pool.waiters)  # type: ignore[attr-defined]
    net = eng.net
    out.extend(entry[4].__self__ for entry in net._pending)  # type: ignore[attr-defined]
    out.extend(f.on_done.__self__ for f in net._active)  # type: ignore[attr-defined]
    out.extend(f.on_done.__self__ for f in net._done)  # type: ignore[attr-defined]
    return out


class _Describer:
    """Writes parts of a run's state relative to now, to each core's current tile and to each buffer's lowest
    generation in use (:class:`_Unknown` for anything it cannot)."""

    def __init__(self, now: int, base: dict[int, int], gen_base: dict[tuple[int, str], int]):
        self.now, self.base = now, base
        self.gen_base: dict[str, tuple[int, int] | None] = {}  # buffer -> (phase, lowest generation in use)
        for (phase, name), lo in gen_base.items():
            self.gen_base[name] = None if name in self.gen_base else (phase, lo)  # (two phases: ambiguous)

    def generation(self, gen: Any) -> tuple:
        # A count above zero only says "not yet": its value changes nothing until it reaches zero (the skip keeps
        # it above, and counts it down by what the periods it skips take of it).
        return (gen.fills_left > 0, gen.uses_left > 0, gen.filled.is_open, gen.released.is_open,
                tuple(self.callback(cb) for cb in gen.filled.waiting),
                tuple(self.callback(cb) for cb in gen.released.waiting))

    def rel(self, cycle: int | None) -> int | None:
        return None if cycle is None else cycle - self.now

    def walk(self, w: Walk, low: int) -> tuple:
        i, issued, now = w.i, w.issued, self.now
        gates = w.gates
        latest = []
        for slot, gate in w.latest.items():
            if not gate.is_open:
                latest.append((slot, self.gate(gate)))
        computing = w.compute_end >= 0
        return (w.core, issued - i, low - i, w.waiting, tuple(w.loaded[i:issued]),
                tuple((gates[j].is_open, tuple(self.callback(cb) for cb in gates[j].waiting))
                      for j in range(low, issued)),
                w.compute_end - now if computing else None, w.compute_start - now if computing else None,
                tuple(sorted(latest)))

    def gate(self, g: Gate) -> tuple:
        if g.is_open:
            return ("open",)
        tag = g.tag
        if tag and tag[0] == "tile":
            return ("tile", tag[1], tag[2] - self.base[tag[1]])
        if tag and tag[0] == "gen":
            at = self.gen_base.get(tag[1])
            if at is not None:
                return ("gen", at[0], tag[1], tag[2] - at[1], tag[3])
        raise _Unknown

    def callback(self, cb: Any) -> tuple:
        if isinstance(cb, (StartLoads, StartStaging, Loaded, StagedLanded, Stored, UsesFilled)):
            return (type(cb).__name__, cb.walk.core, cb.i - self.base[cb.walk.core])
        if type(cb) is types.MethodType and type(cb.__self__) is _AfterAll:
            after = cb.__self__
            return ("after", tuple(self.gate(g) for g in after.pending), self.callback(after.callback))
        raise _Unknown

    def group(self, g: Group) -> tuple:
        known = g.known
        if known is not None and not (type(known) is types.MethodType and type(known.__self__) is Loaded):
            raise _Unknown
        return g.left, self.rel(g.latest) if g.latest else None, self.callback(g.done), known is not None

    def dma(self, d: Any) -> tuple:
        if type(d) is not Dma or d.index < 0:
            raise _Unknown
        start = getattr(d, "start_cycle", None)
        return (d.core, d.index - self.base[d.core], d.kind, d.pos, getattr(d, "engine_id", None), self.rel(start),
                self.rel(getattr(d, "stream_start", None)), self.group(d.group))

    def queue(self, queue: list, net: FlowNetwork, pools: dict[int, Units]) -> tuple:
        pool_core = {id(pool): core for core, pool in pools.items()}
        out = []
        for at, priority, _, event in sorted(queue, key=lambda e: (e[0], e[1], e[2])):
            cbs = event.callbacks
            if cbs is None:
                raise _Unknown
            descs: list[tuple] = []
            for cb in cbs:
                if type(cb) is not types.MethodType:
                    raise _Unknown
                obj: Any = cb.__self__
                fn = cb.__func__
                if fn is Walk._computed:
                    descs.append(("computed", obj.core))
                elif fn is Group._landed:
                    descs.append(("landed", self.group(obj)))
                elif fn is Units._wake:
                    descs.append(("wake", pool_core[id(obj)]))
                elif fn is FlowNetwork._wake:
                    descs.append(("net", event._value == net._version))
                elif fn is FlowNetwork._rate:
                    descs.append(("rate",))
                else:
                    raise _Unknown
            out.append((at - self.now, priority, tuple(descs)))
        return tuple(out)

    def units(self, pool: Units) -> tuple:
        now = self.now
        free = list(pool.free) + [u for c, u in sorted(pool.busy) if c <= now]
        busy = tuple(sorted((c - now, u) for c, u in pool.busy if c > now))
        waiters = tuple(self.dma(w.__self__) if type(w) is types.MethodType else _fail() for w in pool.waiters)
        return (tuple(free), busy, waiters, tuple(sorted(w - now for w in pool.wakes)),
                self.rel(pool.next_wake), pool.serving)

    def net(self, net: FlowNetwork) -> tuple:
        now = self.now
        active = []
        for f in net._active:
            # Its remaining bytes as of now, a reduced fraction (as the network's next settling would work out).
            remn, remd = f._remn, f._remd
            if f._rd and now != f._since:
                remn, remd = remn * f._rd - f._rn * (now - f._since) * remd, remd * f._rd
                g = gcd(remn, remd)
                remn, remd = remn // g, remd // g
            rem = (remn, remd)
            active.append((self.dma(f.on_done.__self__), rem, f._rn, f._rd,  # type: ignore[attr-defined]
                           None if f._finish == _UNRATED else f._finish - now, f.start_cycle - now))
        pending = tuple((c - now, self.dma(on_done.__self__))  # type: ignore[attr-defined]
                        for c, _, _, _, on_done in sorted(net._pending, key=lambda e: (e[0], e[1])))
        done = tuple((self.dma(f.on_done.__self__), self.rel(f.end_cycle)) for f in net._done)  # type: ignore
        return (tuple(active), pending, done, self.rel(net._wake_at), net._settling,
                tuple(sorted(link.name for link in net._dirty)), net._waking)


def _fail() -> tuple:
    raise _Unknown
