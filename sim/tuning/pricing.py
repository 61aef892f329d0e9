"""Pricing planned candidate tilings: timing-only simulations, fewest tiles first, each stopped once it can no
longer tie, and the ones a lower bound shows cannot change the pick left out; the tie rule's pick."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from sim.engine.engine import SimulatedTiming, simulate
from sim.errors import DeadlockError, PlanError, TimeLimitError, detached
from sim.model.memory import AddressSpace
from sim.model.plan import Plan
from sim.model.target import Target
from sim.tuning.choice import TilingChoice
from sim.tuning.misses import reason_of

#: ``progress(phase, done, total)``: how a long search is going.
Progress = Callable[[str, int, int], None]


class _TileCounter:
    """The engine's per-tile callback turned into ``progress(phase, done, total)`` calls."""

    def __init__(self, progress: Progress, phase: str, done: int, total: int):
        self.progress, self.phase, self.done, self.total = progress, phase, done, total

    def __call__(self, tiles: int, cycle: int) -> None:
        self.done += tiles
        self.progress(self.phase, self.done, self.total)


@dataclass(frozen=True)
class Candidate:
    """A candidate tiling as the search sees it: the plan it gives, a lower bound of its
    cycles that holds for any run of it (:func:`sim.timing.run_lower_bound_cycles`), and ``verify``, the plan
    check (a PlanError drops the candidate; None: checked already), made only for the candidate the search picks
    (or one whose timing-only run fails): a plan is checked before its results count."""

    tiling: dict
    plan: Plan
    lower_bound_cycles: float
    verify: Callable[[], None] | None = None
    #: Bytes the plan's transfers move through each region (its roofline's): what lets a run that cannot end by
    #: the search's limit stop sooner (:meth:`sim.engine.engine.Engine.run`).
    region_bytes: Mapping[str, int] | None = None


class Planner(Protocol):
    """What the search needs of the simulator: a tiling planned and checked (a :class:`Candidate`), or the
    :class:`SimError` that says why it cannot be (a ``scratchpad-fit`` LayoutError, a PlanError...)."""

    def __call__(self, tiling: dict) -> Candidate:
        """The candidate of ``tiling``."""
        ...


# --- pricing planned candidates ---------------------------------------------------------------------------


def _cannot_win(pick: tuple[int, int, int], best: int, c: Candidate, index: int, tolerance: float,
                proven: int = 0) -> bool:
    """Whether candidate ``c`` (planned ``index``-th), not yet simulated, cannot change the pick ``(tiles, cycles,
    index)`` whatever it costs, the cheapest simulated so far taking ``best`` cycles.

    The pick stays tied if ``c`` cannot come in under its cycles / (1 + tolerance) (the cheapest could then not
    leave it out of the tie); with more tiles ``c`` then loses the tie to it, and with as many tiles it loses
    unless it is cheaper, or as cheap and planned before it.  With fewer tiles (a round priced one candidate at a
    time takes them in the order of their bounds) it wins as soon as it comes within the tolerance of the cheapest,
    so only its bound beyond that rules it out.  ``proven``: a bound of ``c``'s cycles that a stopped run of it
    proved (the larger bound counts).
    """
    tiles, cycles, first = pick
    bound = max(c.lower_bound_cycles, proven)
    if c.plan.tile_count < tiles:
        return bound > best * (1 + tolerance)
    return bound >= cycles / (1 + tolerance) and (c.plan.tile_count > tiles or bound > cycles
                                                  or (bound == cycles and index > first))


class Pricing:
    """The planned candidates of one search and their cycles: priced round after round, fewest tiles first."""

    def __init__(self, target: Target, memory: AddressSpace, tolerance: float, progress: Progress | None):
        self.target, self.memory, self.tolerance, self.progress = target, memory, tolerance, progress
        self.candidates: list[Candidate] = []
        self.cycles: dict[int, int | None] = {}  # index -> cycles (None: stopped early); absent: not simulated
        self.timings: dict[int, SimulatedTiming] = {}
        self.failed: dict[int, PlanError] = {}  # index -> the plan rule it breaks (its cycles do not count)
        self.verified: set[int] = set()  # candidates whose plan passed the check
        self._left_out: set[int] = set()  # not simulated: they could not change the pick of their time
        # Candidates whose run was stopped once it could change neither the cheapest nor the pick, and the lower
        # bound of their cycles that the stop proved (they are left out too: looked at again if the pick changes).
        self._proven: dict[int, int] = {}
        self.best: int | None = None
        # Progress over every round: tiles simulated (a candidate stopped or left out counts as done) of all.
        self.done_tiles = self.total_tiles = 0

    def pick(self) -> int:
        """Among the simulated candidates within the tolerance of the cheapest: the fewest tiles, then the fewest
        cycles, then the first planned."""
        assert self.best is not None
        best = self.best
        tied = [i for i, cycles in self.cycles.items() if cycles is not None and cycles <= best * (1 + self.tolerance)]
        return min(tied, key=lambda i: (self.candidates[i].plan.tile_count, self.cycles[i] or 0, i))

    def cheapest(self, within: Mapping[str, Any] | None = None) -> int | None:
        """The simulated candidate of the fewest cycles (the first planned on a tie); with ``within``, among those
        whose tiling has its keys' values only (None when none has been simulated)."""
        return min((i for i, c in self.cycles.items() if c is not None and (within is None or all(
            self.candidates[i].tiling.get(k) == v for k, v in within.items()))),
            key=lambda i: (self.cycles[i] or 0, i), default=None)

    def price(self, new: Sequence[Candidate]) -> None:
        """Add ``new`` candidates and simulate those that can change the pick, fewest tiles first."""
        start = len(self.candidates)
        self.candidates.extend(new)
        self._price(range(start, len(self.candidates)))

    def settle(self) -> int | None:
        """The pick once its plan passed the check (None: no candidate is left).

        Candidates are simulated unchecked, since a search stops or leaves out most of them; the pick is checked,
        and so is the cheapest when the tie its cycles bound could, without it, take in a candidate ahead of the
        pick.  One that breaks a plan rule is dropped and the pick made again among the others (those whose runs
        it stopped, or whose bounds it left out, priced again against the new cheapest)."""
        while self.best is not None:
            pick = self.pick()
            broken = pick if not self._verified(pick) else self._broken_cheapest(pick)
            if broken is None:
                return pick
            del self.cycles[broken]
            self.timings.pop(broken, None)
            self.best = min((c for c in self.cycles.values() if c is not None), default=None)
            again = [i for i in range(len(self.candidates)) if i not in self.failed and self.cycles.get(i) is None]
            for i in again:
                self.cycles.pop(i, None)
            self._price(again)
        return None

    def _broken_cheapest(self, pick: int) -> int | None:
        """The cheapest simulated candidate if it is not the pick, its plan breaks a rule, and the pick could change
        without it (None otherwise).  Its cycles bound the tie: without it the tie can only widen, and the pick
        changes only if a candidate ahead of it in the tie rule (fewer tiles; as many and fewer cycles, or as many
        and planned before it) joins; one not simulated to the end might be ahead whatever its cycles."""
        cheapest = self.cheapest()
        if cheapest is None or cheapest == pick:
            return None
        best, tiles, cycles = self.best, self.candidates[pick].plan.tile_count, self.cycles[pick] or 0
        assert best is not None
        for i, c in enumerate(self.candidates):
            if i == pick or i in self.failed or c.plan.tile_count > tiles:
                continue
            mine = self.cycles.get(i)
            if mine is not None and mine <= best * (1 + self.tolerance):
                continue  # tied already, and behind the pick
            if c.plan.tile_count < tiles or mine is None or (mine, i) < (cycles, pick):
                return None if self._verified(cheapest) else cheapest
        return None

    def _verified(self, i: int) -> bool:
        """Whether candidate ``i``'s plan passes the check (run once; a failure is kept in ``failed``)."""
        verify = self.candidates[i].verify
        if verify is None or i in self.verified:
            return True
        try:
            verify()
        except PlanError as e:
            self.failed[i] = detached(e)
            return False
        self.verified.add(i)
        return True

    def _price(self, indices: Sequence[int]) -> None:
        """Simulate those of candidates ``indices`` that can change the pick, fewest tiles first; then those left
        out earlier (this round or another) against a pick that has changed since and that can now change it."""
        order = sorted(indices, key=lambda i: (self.candidates[i].plan.tile_count, i))
        self.total_tiles += sum(self.candidates[i].plan.tile_count for i in order)
        while order:
            for i in order:
                self._price_one(i)
            # A candidate left out against the pick of its time may win against today's (one with fewer tiles came
            # after it, or a cheaper one left the pick out of the tie): looked at again until none can.
            order = [i for i in sorted(self._left_out, key=lambda i: (self.candidates[i].plan.tile_count, i))
                     if not self._cannot_win(i)]
        self.done_tiles = self.total_tiles  # the candidates stopped early or left out count as done
        if self.progress is not None:
            self.progress("pricing tilings", self.done_tiles, self.total_tiles)

    def _cannot_win(self, i: int) -> bool:
        """Whether candidate ``i`` cannot change the pick, whatever it costs (:func:`_cannot_win`)."""
        if self.best is None:
            return False
        pick = self.pick()
        return _cannot_win((self.candidates[pick].plan.tile_count, self.cycles[pick] or 0, pick), self.best,
                           self.candidates[i], i, self.tolerance, self._proven.get(i, 0))

    def _irrelevant_after(self, i: int) -> int | None:
        """The cycles past which candidate ``i``'s run can change neither the cheapest nor the pick (None: any run
        of it within the tolerance may).  With more tiles than the pick it changes the pick only by leaving it out
        of the tie, which takes fewer cycles than the cheapest's; with as many, only by beating the pick (its
        cycles, or fewer when planned after it).  A run past that is stopped and its candidate left out, with
        those cycles as its bound."""
        if self.best is None:
            return None
        pick = self.pick()
        tiles, mine = self.candidates[pick].plan.tile_count, self.candidates[i].plan.tile_count
        if mine > tiles:
            return self.best - 1
        if mine == tiles:
            cycles = self.cycles[pick] or 0
            return cycles - 1 if i > pick else cycles
        return None

    def _price_one(self, i: int) -> None:
        """Simulate candidate ``i`` unless it cannot change the pick (then it is left out, to be looked at again
        if the pick changes) or its bound puts it beyond the tolerance of the cheapest (for good: the cheapest
        only gets cheaper)."""
        self._left_out.discard(i)
        cand = self.candidates[i]
        if self._cannot_win(i):
            self._left_out.add(i)
            return
        if self._proven.pop(i, None) is not None:
            self.done_tiles -= cand.plan.tile_count  # (its stopped run counted as done: it is simulated again)
        limit = None if self.best is None else int(self.best * (1 + self.tolerance))
        if limit is not None and cand.lower_bound_cycles > limit:
            return  # it cannot come within the tolerance of the cheapest, whatever is simulated after it
        irrelevant = self._irrelevant_after(i)
        tied_stop = irrelevant is not None and limit is not None and irrelevant < limit
        if tied_stop:
            limit = irrelevant
        tick = None
        if self.progress is not None:
            self.progress("pricing tilings", self.done_tiles, self.total_tiles)
            tick = _TileCounter(self.progress, "pricing tilings", self.done_tiles, self.total_tiles)
        try:
            timing = simulate(cand.plan, self.target, self.memory, numerics=False,
                              on_tile=tick, until_cycles=limit, region_bytes=cand.region_bytes)
        except TimeLimitError:
            raise  # the call's time ran out: nothing to do with this plan
        except DeadlockError as e:
            # A run that stalls breaks the rule the check cannot judge before it runs: dropped as a candidate
            # that breaks one (37 x 45 x 29 on two FT78NE cores with B broadcast and 12-row blocks of A stalled a
            # partial tiling's call before its plan was mended)
            self.failed[i] = detached(e)
            return
        except Exception:
            if self._verified(i):
                raise  # a plan that passes the check and fails to run: the engine's fault, not the plan's
            return  # a plan that breaks a rule: what its run does is undefined, the rule is what it broke
        self.done_tiles += cand.plan.tile_count
        self.cycles[i] = None if timing is None else timing.cycles
        if timing is None and tied_stop:
            assert limit is not None
            self._proven[i] = limit + 1
            self._left_out.add(i)
        if timing is not None:
            self.timings[i] = timing
            if self.best is None or timing.cycles < self.best:
                self.best = timing.cycles

    def note(self, i: int, pick: int) -> str:
        """Why candidate ``i`` is not the pick ("" when its cycles say it: slower beyond the tolerance)."""
        if i == pick:
            return "chosen"
        if i not in self.cycles:
            return "not simulated: its lower bound cannot change the pick"
        cycles = self.cycles[i]
        if cycles is None:
            if i in self._proven:
                return "stopped: it could no longer change the pick"
            return f"stopped: slower than {self.tolerance:.0%} over the cheapest"
        assert self.best is not None
        if cycles <= self.best * (1 + self.tolerance):
            more = self.candidates[i].plan.tile_count > self.candidates[pick].plan.tile_count
            return f"tied within {self.tolerance:.0%}, {'more tiles' if more else 'slower'}"
        return ""


def choose_tiling(candidates: Sequence[Candidate], target: Target, memory: AddressSpace, tolerance: float,
                  progress: Progress | None = None) -> tuple[int, TilingChoice, SimulatedTiming]:
    """The index of the candidate the cost model picks among at least one planned ``candidates``, the
    :class:`TilingChoice` that says so, and the picked plan's simulated timing (the pick is the one a simulation
    of every candidate would give)."""
    pricing = Pricing(target, memory, tolerance, progress)
    pricing.price(candidates)
    pick = pricing.settle()
    if pick is None:
        raise next(iter(pricing.failed.values()))
    return pick, priced_choice(pricing, pick, (), {}), pricing.timings[pick]


#: The note of a tiling the search left unplanned (:attr:`sim.model.tiling.TilingSpace.bound`).
UNPLANNED_NOTE = "not planned: its bound from the tiling cannot change the pick"


def priced_choice(pricing: Pricing, pick: int, dropped: Sequence[tuple[dict, str]], fixed: Mapping[str, Any],
                  unplanned: Sequence[dict] = (), budget_ended: bool = False) -> TilingChoice:
    """The choice of ``pick``: every candidate the search planned (those that broke a plan rule among the
    dropped), then those it left unplanned for their bound; ``budget_ended``: the search's budget ended the climb
    at the pick (:attr:`TilingChoice.budget_ended`)."""
    cands = [(i, c) for i, c in enumerate(pricing.candidates) if i not in pricing.failed]
    failed = [(pricing.candidates[i].tiling, reason_of(e)) for i, e in pricing.failed.items()]
    listed: tuple[tuple[dict, int | None], ...] = tuple((c.tiling, pricing.cycles.get(i)) for i, c in cands)
    return TilingChoice(pricing.candidates[pick].tiling, "cost model",
                        listed + tuple((t, None) for t in unplanned), pricing.tolerance,
                        tuple(pricing.note(i, pick) for i, _ in cands) + (UNPLANNED_NOTE,) * len(unplanned),
                        tuple(dropped) + tuple(failed), dict(fixed), len(pricing.cycles),
                        budget_ended=budget_ended)


# --- the search over a space --------------------------------------------------------------------------------
