"""A core's walk through one phase's tiles: prefetch, wait for loads, compute, store (no SimPy process)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import simpy
from simpy.events import Timeout

from sim.engine.units import Count, Gate
from sim.model.plan import Tile

if TYPE_CHECKING:
    from sim.engine.engine import Engine


class Walk:
    """A core's walk through one phase's tiles, driven by callbacks (no SimPy process, no event per step).

    For each tile: issue the next tile's loads (prefetch; a tile's loads also wait
    for the previous tile of its slot to have stored), wait for this tile's loads,
    compute (one timeout), start its stores.  ``finished()`` runs once the walk is
    over and every store has landed.
    """

    __slots__ = ("eng", "core", "tiles", "phase", "finished", "i", "issued", "loaded", "waiting", "latest",
                 "gates", "stored", "walked", "compute_start")

    def __init__(self, eng: Engine, core: int, tiles: tuple[Tile, ...], phase: str,
                 finished: Callable[[], None]):
        self.eng, self.core, self.tiles, self.phase, self.finished = eng, core, tiles, phase, finished
        self.i = 0  # the tile being walked
        self.issued = 0  # tiles whose loads were issued
        self.loaded = [False] * len(tiles)
        self.waiting = False  # the walk waits for tile i's loads
        self.latest: dict[int, Gate] = {}  # slot -> gate of the latest tile issued on it
        self.gates: list[Gate] = []  # per tile: opens when its stores have landed (its slot is free again)
        self.stored = Count(len(tiles), self._stored_all)
        self.walked = False
        self.compute_start = 0

    def _issue(self, i: int) -> None:
        tile, eng = self.tiles[i], self.eng
        gate = Gate()
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
