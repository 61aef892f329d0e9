"""Choosing a tiling: "the cost model" names this module and only this.

A kernel lists candidate tilings; each that plans is priced by a timing-only simulation (the engine moves no
bytes and runs no numerics, so memory is untouched); candidates within the tolerance of the cheapest tie, and
the tie goes to the fewest tiles.  A candidate still running when it can no longer tie is stopped there.
(Pruning with the closed-form :func:`sim.timing.estimate` first was measured and does not pay: on the bench's
large plans the estimate costs 50 to 100 % of a timing-only simulation, while a candidate that cannot tie
is already stopped early.)
:class:`TilingChoice` records what was chosen and how; :class:`TilingCache` remembers choices per call (and
:mod:`sim.files.tuning_cache` across processes).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sim.engine.engine import Engine, EngineMemo
from sim.engine.events import Recorder
from sim.model.memory import AddressSpace
from sim.model.plan import Plan
from sim.model.target import Target

#: Candidate tilings whose cycles are within this fraction of the cheapest count as tied; a tie goes to the
#: candidate with the fewest tiles.  The model is cycle-approximate: a fraction of a percent separates
#: tilings that differ only in how long the first load and the last store stay exposed, while fewer tiles
#: mean fewer DMA descriptors on the chip and a several times faster simulation.
TILING_TOLERANCE = 0.01

#: ``progress(phase, done, total)``: how a long search is going.
Progress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class TilingChoice:
    """The tiling a run used and how it was chosen.

    ``source`` is ``given`` (the caller named it), ``cost model`` (the
    cheapest of the kernel's candidates, each simulated in timing-only mode,
    where candidates within the simulator's ``tiling_tolerance`` of the
    cheapest tie and the one with the fewest tiles wins; their cycles are in
    ``candidates``, None for one stopped once it could no longer tie) or
    ``kernel`` (the kernel offers one plan only).  ``simulated`` counts the
    candidates the search simulated in this process (0 for a choice read
    from the on-disk tuning cache, ``cached`` True then).
    """

    tiling: dict | None
    source: str
    candidates: tuple[tuple[dict, int | None], ...] = ()
    tolerance: float = 0.0  # the simulator's tiling_tolerance when the cost model chose
    # How the choice was reached, not what it is: choices compare equal whether searched or read from disk.
    simulated: int = field(default=0, compare=False)
    cached: bool = field(default=False, compare=False)

    def describe(self) -> str:
        """One line for summaries."""
        if self.source == "cost model":
            others = ", ".join(f"{c} {cycles if cycles is not None else 'slower'}" for c, cycles in self.candidates)
            priced = [cycles for _, cycles in self.candidates if cycles is not None]
            mine = next((cycles for c, cycles in self.candidates if c == self.tiling), None)
            why = ("" if not priced or mine is None or mine <= min(priced)
                   else f"; the fewest tiles within {self.tolerance:.0%} of the cheapest")
            return (f"tiling {self.tiling} chosen by the cost model among {len(self.candidates)} candidates "
                    f"({others}{why})")
        return f"tiling {self.tiling if self.tiling else 'the kernel default'} ({self.source})"


class TilingCache:
    """The tilings already chosen, per (symbol, bound call, tolerance): a repeated call chooses without listing
    or pricing its candidates again."""

    def __init__(self) -> None:
        self._choices: dict[tuple[str, str, float], TilingChoice] = {}

    def get(self, symbol: str, call: Any, tolerance: float) -> TilingChoice | None:
        """The choice made for this call before, or None."""
        return self._choices.get((symbol, repr(call), tolerance))

    def put(self, symbol: str, call: Any, tolerance: float, choice: TilingChoice) -> None:
        """Remember ``choice`` for this call."""
        self._choices[(symbol, repr(call), tolerance)] = choice

    def clear(self) -> None:
        """Forget every choice."""
        self._choices.clear()


class _TileCounter:
    """The engine's per-tile callback turned into ``progress(phase, done, total)`` calls."""

    def __init__(self, progress: Progress, phase: str, done: int, total: int):
        self.progress, self.phase, self.done, self.total = progress, phase, done, total

    def __call__(self, tiles: int, cycle: int) -> None:
        self.done += tiles
        self.progress(self.phase, self.done, self.total)


def choose_tiling(candidates: Sequence[tuple[dict, Plan, EngineMemo | None]], target: Target, memory: AddressSpace,
                  tolerance: float, progress: Progress | None = None) -> tuple[int, TilingChoice]:
    """The index of the candidate the cost model picks among at least two planned ``candidates`` (tiling, plan,
    the plan's engine memo) and the :class:`TilingChoice` that says so.

    ``progress``, when given, hears ``pricing tilings``: tiles simulated of all the candidates' tiles (a
    candidate stopped early counts as done).
    """
    priced: list[tuple[dict, int | None]] = []
    best: int | None = None  # the fewest cycles so far
    total, done = sum(p.tile_count for _, p, _ in candidates), 0
    for cand, plan, memo in candidates:
        limit = None if best is None else int(best * (1 + tolerance))
        tick = None
        if progress is not None:
            progress("pricing tilings", done, total)
            tick = _TileCounter(progress, "pricing tilings", done, total)
        cycles = Engine(target, memory, Recorder(), numerics=False, memo=memo, on_tile=tick).run(plan,
                                                                                                until_cycles=limit)
        done += plan.tile_count
        priced.append((cand, cycles))
        if cycles is not None and (best is None or cycles < best):
            best = cycles
    if progress is not None:
        progress("pricing tilings", total, total)
    assert best is not None
    tied = [i for i, (_, cycles) in enumerate(priced) if cycles is not None and cycles <= best * (1 + tolerance)]
    # Fewest tiles, then fewest cycles, then the kernel's own order.
    pick = min(tied, key=lambda i: (candidates[i][1].tile_count, priced[i][1], i))
    return pick, TilingChoice(candidates[pick][0], "cost model", tuple(priced), tolerance, len(priced))
