"""Choosing a tiling: "the cost model" names this module and only this.

A kernel lists candidate tilings; each that plans is priced by a timing-only simulation (the engine moves no
bytes and runs no numerics, so memory is untouched); candidates within the tolerance of the cheapest tie, and
the tie goes to the fewest tiles.  Candidates are simulated fewest tiles first; one still running when it can
no longer tie is stopped there, and the search ends as soon as no candidate left can change the pick by a
lower bound of any run of it (:func:`sim.timing.run_lower_bound_cycles`): on a DDR-bound layer, a candidate
with smaller tiles moves the same bytes, cannot beat the first by more than the tolerance, and is never
simulated.  (Pruning with the closed-form :func:`sim.timing.estimate` was measured and does not pay: it
costs 50 to 100 % of a timing-only simulation on the bench's large plans, and it is no bound.)
:class:`TilingChoice` records what was chosen and how; :class:`TilingCache` remembers choices per call (and
:mod:`sim.files.tuning_cache` across processes).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sim.engine.engine import EngineMemo, SimulatedTiming, simulate
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
    ``candidates``, None for one stopped once it could no longer tie or left
    out since its lower bound could not change the pick) or
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
            # None: stopped once it could no longer tie, or never simulated since its bound could not change the pick.
            others = ", ".join(f"{c} {cycles if cycles is not None else 'cannot win'}" for c, cycles in self.candidates)
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


@dataclass(frozen=True)
class Candidate:
    """A candidate tiling as the search sees it: the plan it gives, the plan's engine memo, and a lower bound of
    its cycles that holds for any run of it (:func:`sim.timing.run_lower_bound_cycles`)."""

    tiling: dict
    plan: Plan
    memo: EngineMemo | None
    lower_bound_cycles: float


def _cannot_win(pick: tuple[int, int], rest: Sequence[tuple[int, Candidate]], tolerance: float) -> bool:
    """Whether none of the candidates not yet simulated can change the pick ``(tiles, cycles)``.

    Candidates are taken fewest tiles first, so each of ``rest`` has at least as many tiles as the pick.  The pick
    stays tied whatever they cost if none can come in under its cycles / (1 + tolerance) (the cheapest could then
    not leave it out of the tie); one with more tiles then loses the tie to it, and one with as many tiles loses
    unless it is cheaper (an equal count goes to the pick, which comes first in the kernel's order).
    """
    tiles, cycles = pick
    return all(c.lower_bound_cycles >= cycles / (1 + tolerance)
               and (c.plan.tile_count > tiles or c.lower_bound_cycles >= cycles) for _, c in rest)


def _pick(candidates: Sequence[Candidate], cycles_of: dict[int, int | None], best: int, tolerance: float) -> int:
    """Among the simulated candidates within ``tolerance`` of ``best``: the fewest tiles, then the fewest cycles,
    then the kernel's own order."""
    tied = [i for i, cycles in cycles_of.items() if cycles is not None and cycles <= best * (1 + tolerance)]
    return min(tied, key=lambda i: (candidates[i].plan.tile_count, cycles_of[i], i))


def choose_tiling(candidates: Sequence[Candidate], target: Target, memory: AddressSpace, tolerance: float,
                  progress: Progress | None = None) -> tuple[int, TilingChoice, SimulatedTiming]:
    """The index of the candidate the cost model picks among at least two planned ``candidates``, the
    :class:`TilingChoice` that says so, and the picked plan's simulated timing.

    Candidates are simulated fewest tiles first, each stopped once it can no longer tie; the search ends when
    no candidate left can change the pick, by their lower bounds (those are not simulated at all).  The pick is
    the one a simulation of every candidate would give.  ``progress``, when given, hears ``pricing tilings``:
    tiles simulated of all the candidates' tiles (a candidate stopped early or left out counts as done).
    """
    order = sorted(enumerate(candidates), key=lambda ic: (ic[1].plan.tile_count, ic[0]))
    cycles_of: dict[int, int | None] = {}
    timings: dict[int, SimulatedTiming] = {}
    best: int | None = None  # the fewest cycles so far
    total, done = sum(c.plan.tile_count for c in candidates), 0
    for k, (i, cand) in enumerate(order):
        if best is not None:
            pick = _pick(candidates, cycles_of, best, tolerance)
            if _cannot_win((candidates[pick].plan.tile_count, cycles_of[pick] or 0), order[k:], tolerance):
                break
        limit = None if best is None else int(best * (1 + tolerance))
        tick = None
        if progress is not None:
            progress("pricing tilings", done, total)
            tick = _TileCounter(progress, "pricing tilings", done, total)
        timing = simulate(cand.plan, target, memory, numerics=False, memo=cand.memo, on_tile=tick,
                          until_cycles=limit)
        done += cand.plan.tile_count
        cycles_of[i] = None if timing is None else timing.cycles
        if timing is not None:
            timings[i] = timing
            if best is None or timing.cycles < best:
                best = timing.cycles
    if progress is not None:
        progress("pricing tilings", total, total)
    assert best is not None
    pick = _pick(candidates, cycles_of, best, tolerance)
    priced = tuple((c.tiling, cycles_of.get(i)) for i, c in enumerate(candidates))
    return pick, TilingChoice(candidates[pick].tiling, "cost model", priced, tolerance, len(cycles_of)), \
        timings[pick]
