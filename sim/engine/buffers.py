"""Staged buffers of one phase: when each generation is filled, and when it is released for the next fill.

A phase whose tiles name buffers (``Tile.fills`` / ``Tile.uses``, see :class:`~sim.model.plan.Tile`) gets one
:class:`PhaseBuffers`, shared by every core's walk through the phase.  Counts are known from the plan before
it runs: generation g of a buffer is *filled* when all its filling tiles have landed their loads, and
*released* when it is filled and every tile using it has finished; generation g + 1's loads wait for g's
release.  Gates open in callbacks of the events that cause them (no SimPy event of their own), so the run is
as deterministic as the rest of the engine.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from sim.engine.units import Gate
from sim.model.buffer_reads import buffer_spans, loads_read
from sim.model.plan import AnyBufferRef, Phase, Tile, parse_buffer_ref


class _Generation:
    """One generation of one buffer: fillers and users still to come, and its two gates."""

    __slots__ = ("fills_left", "uses_left", "filled", "released")

    def __init__(self, key: tuple[str, int] = ("", 0)) -> None:
        self.fills_left = 0
        self.uses_left = 0
        self.filled = Gate(("gen", *key, 0))
        self.released = Gate(("gen", *key, 1))

    def retag(self, key: tuple[str, int]) -> None:
        """Stand for generation ``key`` (a steady state's skip moved it there)."""
        self.filled.tag, self.released.tag = ("gen", *key, 0), ("gen", *key, 1)


class _Generations(dict):
    """(buffer, generation) -> its :class:`_Generation`, made on first use."""

    def __missing__(self, key: tuple[str, int]) -> _Generation:
        gen = self[key] = _Generation(key)
        return gen


class PhaseBuffers:
    """The staged buffers of one phase (every core's tiles' ``fills`` and ``uses`` counted up front)."""

    def __init__(self, phase: Phase):
        self.gens: dict[tuple[str, int], _Generation] = _Generations()
        # Each reference string parsed once: a plan names a generation from many tiles, and the walks look
        # them up at every tile.
        self._of: dict[AnyBufferRef, _Generation] = {}
        refs: dict[AnyBufferRef, tuple[str, int]] = {}
        for tiles in phase.tiles.values():
            for tile in tiles:
                for ref in tile.fills:
                    self._ref(ref, refs).fills_left += 1
                for ref in tile.uses:
                    self._ref(ref, refs).uses_left += 1
        #: Each buffer's bytes: a tile's loads wait for a buffer it uses only if they read them; otherwise only
        #: its compute waits (:meth:`before_compute`, :mod:`sim.model.buffer_reads`).
        self.spans = buffer_spans(phase)
        # (tile, buffer name) -> whether the tile's loads read the buffer's bytes: asked for each tile's loads, its
        # compute and the steady state's comparisons; the plan's tiles outlive the run, so their ids stay theirs.
        self._reads: dict[tuple[int, str], bool] = {}
        #: Each generation's fills and uses as the plan counts them (what the steady state compares).
        self.initial: dict[tuple[str, int], tuple[int, int]] = {
            key: (gen.fills_left, gen.uses_left) for key, gen in self.gens.items()}
        self.refs = refs
        self._refs_by_name: dict[str, list[tuple[AnyBufferRef, int]]] | None = None  # (made at the first shift)
        for gen in self.gens.values():
            if not gen.fills_left:  # refused by the plan check; a bare engine run just does not wait on it
                gen.filled.open()
                if not gen.uses_left:
                    gen.released.open()
        # A fill's previous generation (None for generation 0), whose release its loads wait for (one no tile
        # fills, which the plan check refuses, is made here and never opens: a bare engine run stalls on it).
        self._previous: dict[AnyBufferRef, _Generation | None] = {
            ref: (self.gens[(name, g - 1)] if g > 0 else None) for ref, (name, g) in refs.items()}

    def shift(self, moves: list[tuple[str, int, int, int]]) -> None:
        """For each ``(name, lo, hi, by)``: generations ``lo`` to ``hi`` of buffer ``name`` become generations
        ``lo + by`` to ``hi + by`` (a steady state skipped ``by`` generations of it); those in between are
        released, and every tile naming a generation of it finds the one it now stands for."""
        gens = self.gens
        for name, lo, hi, by in moves:
            moved = {g + by: gens[(name, g)] for g in range(lo, hi + 1)}
            for g in range(lo, lo + by):
                done = _Generation((name, g))
                done.filled.is_open = done.released.is_open = True
                gens[(name, g)] = done
            for g, gen in moved.items():
                gens[(name, g)] = gen
                gen.retag((name, g))
        if self._refs_by_name is None:
            self._refs_by_name = {}
            for ref, key in self.refs.items():
                self._refs_by_name.setdefault(key[0], []).append((ref, key[1]))
        for name, *_ in moves:
            for ref, g in self._refs_by_name.get(name, ()):
                self._of[ref] = gens[(name, g)]
                self._previous[ref] = gens[(name, g - 1)] if g > 0 else None

    def _ref(self, ref: AnyBufferRef, refs: dict[AnyBufferRef, tuple[str, int]]) -> _Generation:
        gen = self._of.get(ref)
        if gen is None:
            refs[ref] = key = parse_buffer_ref(ref)
            gen = self._of[ref] = self.gens[key]
        return gen

    @staticmethod
    def has_buffers(phase: Phase) -> bool:
        """Whether any tile of ``phase`` names a buffer."""
        return any(t.fills or t.uses for tiles in phase.tiles.values() for t in tiles)

    def _gen(self, ref: AnyBufferRef) -> _Generation:
        return self._of[ref]

    def reads(self, tile: Tile, ref: AnyBufferRef) -> bool:
        """Whether ``tile``'s loads read bytes of buffer ``ref`` (:func:`~sim.model.buffer_reads.loads_read`)."""
        name = self.refs[ref][0]
        key = (id(tile), name)
        got = self._reads.get(key)
        if got is None:
            got = self._reads[key] = loads_read(tile, name, self.spans)
        return got

    def before_loads(self, tile: Tile) -> list[Gate]:
        """The gates ``tile``'s loads wait for: the buffers it uses whose bytes they read filled, and the previous
        generation of each buffer it fills released."""
        gates = [self._of[ref].filled for ref in tile.uses if self.reads(tile, ref)]
        for ref in tile.fills:
            previous = self._previous[ref]
            if previous is not None:
                gates.append(previous.released)
        return gates

    def before_compute(self, tile: Tile) -> list[Gate]:
        """The gates of the buffers ``tile`` uses that its loads do not read (its compute reads them: a B block in
        AM, say), which its compute waits for and its loads do not."""
        return [self._of[ref].filled for ref in tile.uses if not self.reads(tile, ref)]

    def landed(self, tile: Tile) -> None:
        """A filling tile's loads have landed."""
        for ref in tile.fills:
            gen = self._gen(ref)
            gen.fills_left -= 1
            if not gen.fills_left:
                gen.filled.open()
                if not gen.uses_left:
                    gen.released.open()

    def finished(self, tile: Tile) -> None:
        """A tile has finished with the buffers it uses."""
        for ref in tile.uses:
            gen = self._gen(ref)
            gen.uses_left -= 1
            if not gen.uses_left and gen.filled.is_open:
                gen.released.open()


def after_all(gates: Iterable[Gate], callback: Callable[[], None]) -> None:
    """Run ``callback`` once every gate is open (at once if they all are), in the order the gates are listed."""
    _AfterAll(list(gates), callback).step()


class _AfterAll:
    """The gates :func:`after_all` still waits for, in order.  An object rather than a closure that registers
    itself: such a closure refers to itself through its cell, a reference cycle per tile that only the cyclic
    garbage collector frees."""

    __slots__ = ("pending", "callback")

    def __init__(self, pending: list[Gate], callback: Callable[[], None]):
        self.pending = pending
        self.callback = callback

    def step(self) -> None:
        """Wait on the first gate still closed; run the callback once none is."""
        pending = self.pending
        while pending:
            gate = pending.pop(0)
            if not gate.is_open:
                gate.then(self.step)
                return
        self.callback()
