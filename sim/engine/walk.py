"""A core's walk through one phase's tiles: prefetch, wait for loads, compute, store (no SimPy process)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import simpy
from simpy.events import Timeout

from sim.engine.buffers import PhaseBuffers, after_all
from sim.engine.clock import cycle_of
from sim.engine.units import Gate
from sim.model.plan import Tile

if TYPE_CHECKING:
    from sim.engine.engine import Engine


class Walk:
    """A core's walk through one phase's tiles, driven by callbacks (no SimPy process, no event per step).

    For each tile: issue the next tile's loads (prefetch; a tile's loads also wait
    for the previous tile of its slot to have stored), wait for this tile's loads,
    compute (one timeout), start its stores.  ``finished()`` runs once the walk is
    over and every store has landed.

    With ``buffers`` (a phase whose tiles name staged buffers, :class:`~sim.model.plan.Tile`), a tile's loads
    also wait for the buffers it uses whose bytes they read to be filled (its compute for all it uses) and, for a
    staging tile (one that fills buffers), for the
    previous generation of each to be released; the walk passes a staging tile at once (its loads land in the
    background, and count as its stores for the end of the walk), and prefetches through staging tiles to the
    next tile that is not one.
    """

    __slots__ = ("eng", "core", "tiles", "phase", "finished", "i", "issued", "loaded", "waiting", "latest",
                 "gates", "stores_left", "walked", "compute_start", "compute_end", "buffers", "watch", "origin",
                 "remaps", "phase_index")

    def __init__(self, eng: Engine, core: int, tiles: tuple[Tile, ...], phase: str,
                 finished: Callable[[], None], buffers: PhaseBuffers | None = None):
        self.eng, self.core, self.tiles, self.phase, self.finished = eng, core, tiles, phase, finished
        self.buffers = buffers
        self.i = 0  # the tile being walked
        self.issued = 0  # tiles whose loads were issued
        self.loaded = [False] * len(tiles)
        self.waiting = False  # the walk waits for tile i's loads
        self.latest: dict[int, Gate] = {}  # slot -> gate of the latest tile issued on it
        self.gates: list[Gate] = []  # per tile: opens when its stores have landed (its slot is free again)
        # Tiles whose stores have not all landed (a count, not a units.Count holding a method of the walk: that
        # would make every walk a reference cycle, and its tiles garbage only the cyclic collector frees).
        self.stores_left = len(tiles)
        self.walked = False
        self.compute_start = 0
        self.compute_end = -1  # while a compute runs: the cycle it ends (the walk looks at the next tile then)
        # The steady state (sim.engine.steady): whether this walk's compute starts are the run's period boundaries,
        # the tiles as the plan lists them, and the (index, tiles) cuts a skip made in ``tiles``.
        self.watch = False
        self.origin = tiles
        self.remaps: list[tuple[int, int]] = []
        self.phase_index = 0  # (set by the engine)

    def _issue(self, i: int) -> None:
        tile = self.tiles[i]
        gate = Gate(("tile", self.core, i))
        self.gates.append(gate)
        if self.buffers is not None and (tile.fills or tile.uses):
            self._issue_staged(i, tile)
            return
        prev = self.latest.get(tile.slot)
        self.latest[tile.slot] = gate
        self.issued = i + 1
        if prev is None:
            self.start_loads(i)
        else:
            prev.then(StartLoads(self, i))  # the slot's buffers are free once the previous tile's stores landed

    def start_loads(self, i: int) -> None:
        """Start tile ``i``'s loads (its slot and buffers are free): the walk hears when they have landed."""
        tile, loaded = self.tiles[i], Loaded(self, i)
        self.eng.start_transfers(self.core, tile, tile.loads, "dma_in", self.phase, loaded, loaded.known, i)

    def start_staging(self, i: int) -> None:
        """Start staging tile ``i``'s loads (the buffers it fills are free)."""
        tile = self.tiles[i]
        self.eng.start_transfers(self.core, tile, tile.loads, "dma_in", self.phase, StagedLanded(self, i), None, i)

    def _issue_staged(self, i: int, tile: Tile) -> None:
        """Issue tile ``i``, which names staged buffers: its loads wait for its buffers' gates (and, unless it is
        a staging tile, for its slot as any tile's)."""
        buffers = self.buffers
        assert buffers is not None
        self.issued = i + 1
        waits = buffers.before_loads(tile)
        if tile.fills:
            after_all(waits, StartStaging(self, i))
            return
        prev = self.latest.get(tile.slot)
        self.latest[tile.slot] = self.gates[i]
        if prev is not None:
            waits.insert(0, prev)
        after_all(waits, StartLoads(self, i))

    def staged_landed(self, i: int) -> None:
        """Staging tile ``i``'s loads have landed: its buffers are filled, and it counts as stored."""
        tile, buffers = self.tiles[i], self.buffers
        assert buffers is not None
        buffers.landed(tile)
        if tile.uses:  # a staging tile that copies from another buffer is done with it once it landed
            buffers.finished(tile)
        self.loaded[i] = True
        self.gates[i].open()
        self._one_stored()

    def stored(self, i: int) -> None:
        """Tile ``i``'s stores have all landed: its slot is free again."""
        self.gates[i].open()
        self._one_stored()

    def _loaded(self, i: int) -> None:
        self.loaded[i] = True
        if self.waiting and i == self.i:
            self.waiting = False
            self.advance()

    def _loaded_before_looked_at(self, i: int, cycle: int) -> bool:
        """Tile ``i``'s loads land at ``cycle``: if the walk is computing tile ``i - 1`` until then or later, it
        looks at tile ``i`` only when that compute ends, so the landing needs no event of its own (taken now)."""
        if self.i == i - 1 and self.compute_end >= cycle:
            self.loaded[i] = True
            return True
        return False

    def advance(self) -> None:
        """Walk on as far as the loads allow (a tile with compute continues in its timeout's callback)."""
        tiles, n = self.tiles, len(self.tiles)
        while self.i < n:
            i = self.i
            if self.issued <= i:
                self._issue(i)
            if self.issued == i + 1 and i + 1 < n:
                self._issue(i + 1)  # prefetch: the next tile's DMA overlaps this tile's compute
                if self.buffers is not None:
                    # Staging tiles do not count as the next tile: prefetch through them to the next one that
                    # computes, so that blocks staged between two tiles do not cost the second its prefetch.
                    while self.issued < n and tiles[self.issued - 1].fills:
                        self._issue(self.issued)
            if self.buffers is not None and tiles[i].fills:
                self._pass_staging(i)  # a staging tile: its loads land in the background
                continue
            if not self.loaded[i]:
                self.waiting = True
                return
            tile = tiles[i]
            if self.buffers is not None and tile.uses and not self._compute_may_start(i, tile):
                return
            if tile.compute is not None:
                eng = self.eng
                self.compute_start = cycle_of(eng.env)
                cycles = eng.begin_compute(self.core, tile, i)
                self.compute_end = self.compute_start + cycles
                Timeout(eng.env, cycles).callbacks.append(self._computed)
                if self.watch:
                    eng.boundary = True
                return
            self._store(i)

        self.walked = True
        if not self.stores_left:
            self.finished()

    def _compute_may_start(self, i: int, tile: Tile) -> bool:
        """Whether the buffers tile ``i``'s compute uses and its loads did not wait for (they read none of their
        bytes) are filled; if not, the walk waits for them (:class:`UsesFilled` resumes it)."""
        assert self.buffers is not None
        pending = [g for g in self.buffers.before_compute(tile) if not g.is_open]
        if not pending:
            return True
        self.waiting = True
        after_all(pending, UsesFilled(self, i))
        return False

    def _uses_filled(self, i: int) -> None:
        if self.waiting and i == self.i:
            self.waiting = False
            self.advance()

    def _computed(self, _: simpy.Event) -> None:
        i = self.i
        self.compute_end = -1
        self.eng.record_compute(self.core, self.tiles[i], self.phase, self.compute_start, i)
        self._store(i)
        self.advance()

    def _store(self, i: int) -> None:
        """Start tile ``i``'s stores and step to the next tile."""
        tile, eng = self.tiles[i], self.eng
        if self.buffers is not None and tile.uses:
            self.buffers.finished(tile)  # its compute is done: the buffers it read may be refilled
        eng.start_transfers(self.core, tile, tile.stores, "dma_out", self.phase, Stored(self, i), None, i)
        if eng.on_tile is not None:
            eng.tick()
        self.i = i + 1

    def _pass_staging(self, i: int) -> None:
        """Step past staging tile ``i`` (issued already): the walk does not wait for its loads."""
        if self.eng.on_tile is not None:
            self.eng.tick()
        self.i = i + 1

    def real_index(self, i: int) -> int:
        """The index in the plan's tiles (:attr:`origin`) of the tile at ``i`` in :attr:`tiles` (a skip cuts
        periods out of ``tiles``)."""
        for at, cut in reversed(self.remaps):  # (each cut's index is in the tiles the cuts before it left)
            if i >= at:
                i += cut
        return i

    def abandon(self) -> None:
        """Drop the tiles, the engine and the gates (a run stopped: its pending callbacks still refer to the walk,
        whose tiles and engine they must no longer keep alive)."""
        self.tiles, self.loaded, self.gates, self.latest = (), [], [], {}
        self.eng = self.buffers = self.finished = None  # type: ignore[assignment]

    def _one_stored(self) -> None:
        self.stores_left -= 1
        if not self.stores_left:
            self._stored_all()

    def _stored_all(self) -> None:
        if self.walked:
            self.finished()


class _Step:
    """A callback on tile ``i`` of a walk, that reads the tile when it runs (a skip may have replaced it by the
    tile periods later: :mod:`sim.engine.steady`); an object rather than a closure so that the steady state can
    read which tile it is for."""

    __slots__ = ("walk", "i")

    def __init__(self, walk: Walk, i: int):
        self.walk, self.i = walk, i


class StartLoads(_Step):
    """Start the tile's loads."""

    def __call__(self) -> None:
        self.walk.start_loads(self.i)


class StartStaging(_Step):
    """Start a staging tile's loads."""

    def __call__(self) -> None:
        self.walk.start_staging(self.i)


class Loaded(_Step):
    """The tile's loads have landed; :meth:`known` takes a landing as done when the walk cannot look sooner."""

    def __call__(self) -> None:
        self.walk._loaded(self.i)

    def known(self, cycle: int) -> bool:
        """Whether the landing at ``cycle`` needs no event (the walk computes the tile before until then)."""
        return self.walk._loaded_before_looked_at(self.i, cycle)


class UsesFilled(_Step):
    """The buffers the tile's compute uses (and its loads do not read) are filled."""

    def __call__(self) -> None:
        self.walk._uses_filled(self.i)


class StagedLanded(_Step):
    """A staging tile's loads have landed."""

    def __call__(self) -> None:
        self.walk.staged_landed(self.i)


class Stored(_Step):
    """The tile's stores have landed."""

    def __call__(self) -> None:
        self.walk.stored(self.i)
