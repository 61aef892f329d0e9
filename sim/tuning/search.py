"""The search over a kernel's tiling space: complete the caller's keys, drop what cannot plan, plan the rest
(all of a small space; a climb from the kernel's preferred tiling in a large one), price and pick."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sim.engine.engine import SimulatedTiming
from sim.errors import KernelArgError, LayoutError, PlanError, brief, detached
from sim.model.memory import AddressSpace
from sim.model.target import Target
from sim.model.tiling import IntKey, TilingSpace
from sim.tuning.choice import TilingChoice
from sim.tuning.limits import (
    EXHAUSTIVE_BOUNDED_CANDIDATES,
    EXHAUSTIVE_CANDIDATES,
    EXHAUSTIVE_SMALL_CANDIDATES,
    MAX_PLANNED,
    MAX_STARTED,
    PLANNED_TILES_FLOOR,
    TILING_TOLERANCE,
)
from sim.tuning.misses import no_candidate_error, reason_of
from sim.tuning.pool import Pool
from sim.tuning.pricing import Candidate, Planner, Pricing, Progress, priced_choice


@dataclass
class SearchResult:
    """What a search found: the picked candidate's index into ``candidates``, the choice and its timing."""

    candidates: list[Candidate]
    pick: int
    choice: TilingChoice
    timing: SimulatedTiming


def _distance(a: Mapping[str, Any], b: Mapping[str, Any]) -> int:
    return sum(1 for k in set(a) | set(b) if a.get(k) != b.get(k))


def neighbours(space: TilingSpace, tiling: Mapping[str, Any], pool: Pool, fixed: Mapping[str, Any],
               viable: Callable[[dict], bool] | None = None, far: bool = False) -> list[dict]:
    """The fitting tilings of ``pool`` one step from ``tiling``: for each key it sets (but the fixed ones), each
    other choice of a choice key, and the next smaller and the next larger value of an integer key that a fitting
    tiling with the same choices has; each the fitting tiling with that value and every other choice key unchanged
    closest to ``tiling`` (fewest other keys changed, then the kernel's order); a value that needs another choice
    is left out.  ``viable``: whether a tiling's bound leaves it a chance; an integer key's step passes over the
    values whose tilings it rules out to the next one on that side it does not (k_block 150 -> 300 over a 256 that
    its bound rules out: MT7004's 100 x 72 x 300 GEMM with B transposed, 62,788 -> 59,586 cycles), or is the
    nearest value when it rules out every one.  ``far``: instead, an integer key's far step on each side, past the
    value the first step takes, to the value nearest half (below) or twice (above) the key's, and no choice key's.
    Only the tilings this looks at are checked for fit."""
    out: list[dict] = []
    tilings = pool.tilings
    choices = [k for k in tiling if not isinstance(space.keys[k], IntKey)]
    for key in tiling:
        if key in fixed:
            continue
        now = tiling[key]
        by_value = {v: idxs for v, idxs in pool.by_value(key).items() if v != now}
        others = [c for c in choices if c != key]
        steps: list[int | None]
        if isinstance(space.keys[key], IntKey):
            # The nearest value on each side that a fitting tiling with the same choices has (a value between that
            # only other choices fit is passed over: 128 -> 512 columns with C streamed, where 256 fit C in AM only).
            below = sorted((v for v in by_value if v < now), reverse=True)
            above = sorted(v for v in by_value if v > now)
            steps = [_int_step(pool, tiling, others, [by_value[v] for v in side], viable) for side in (below, above)]
            if far:
                steps = [_far_step(pool, tiling, key, others, by_value, side, first, viable, target)
                         for side, first, target in zip((below, above), steps, (now / 2, now * 2))]
        elif not far:
            steps = [_nearest_step(pool, tiling, others, idxs) for idxs in by_value.values()]
        else:
            steps = []
        for near in steps:
            if near is not None and tilings[near] not in out:
                out.append(tilings[near])
    return out


def _int_step(pool: Pool, tiling: Mapping[str, Any], choices: Sequence[str], sides: Sequence[Sequence[int]],
              viable: Callable[[dict], bool] | None) -> int | None:
    """An integer key's step on one side (:func:`neighbours`): ``sides`` the tilings of each value, nearest first."""
    nearest: int | None = None
    for idxs in sides:
        i = _nearest_step(pool, tiling, choices, idxs)
        if i is None:
            continue
        if viable is None or viable(pool.tilings[i]):
            return i
        if nearest is None:
            nearest = i
    return nearest


def _far_step(pool: Pool, tiling: Mapping[str, Any], key: str, choices: Sequence[str],
              by_value: Mapping[int, Sequence[int]], side: Sequence[int], first: int | None,
              viable: Callable[[dict], bool] | None, target: float) -> int | None:
    """An integer key's far step on one side (:func:`neighbours`): of the values ``side`` has past the first step's,
    the one nearest ``target`` whose tiling fits and its bound leaves a chance."""
    if first is None:
        return None
    past = side[side.index(pool.tilings[first][key]) + 1:]
    step = _int_step(pool, tiling, choices, [by_value[v] for v in sorted(past, key=lambda v: abs(v - target))],
                     viable)
    return step if step is None or viable is None or viable(pool.tilings[step]) else None


def _nearest_step(pool: Pool, tiling: Mapping[str, Any], choices: Sequence[str], idxs: Sequence[int]) -> int | None:
    """Of the tilings ``idxs`` of ``pool`` (those with a key's new value), the fitting one with ``tiling``'s
    ``choices`` closest to it (fewest other keys changed, then the kernel's order), or None.  A step changes no
    other choice key: a move of one key that only exists with another choice is that other key's step (taken
    from there, if it pays).  A choice key that belongs to one choice of another (``only``) and is absent from one
    side is not a choice changed."""
    tilings = pool.tilings
    same = [i for i in idxs if all(tilings[i].get(c, tiling[c]) == tiling[c] for c in choices)]
    return next((i for i in sorted(same, key=lambda i: _distance(tilings[i], tiling)) if pool.fits(i)), None)


def _bound_held(tiling: Mapping[str, Any], bound: float, cycles: int | None) -> None:
    """The ``tiling-space`` PlanError when a run took fewer ``cycles`` than the space's ``bound`` said any run of
    ``tiling`` takes: a bound above a run leaves out tilings that would win, and the pick is silently worse."""
    if cycles is not None and cycles < bound * (1 - 1e-9):
        raise PlanError("tiling-space", (
            f"the tiling space's bound() gave {bound:.6g} cycles for {brief(dict(tiling), 160)}, whose plan ran in "
            f"{cycles}: a bound must be a lower bound of every run of the tiling (the search leaves out the tilings "
            f"whose bound is beyond the cheapest, so a bound too high drops tilings that would win; "
            f"sim.testing.check_tiling_space checks it)"))


#: Tilings of a start's algorithm whose bounds are compared when its nearest one is out of reach.
_START_BOUNDS = 64


def _lowest_bound_with(space: TilingSpace, pool: Pool, keys: Mapping[str, Any], fixed: Mapping[str, Any],
                       planned: Mapping[str, int]) -> dict | None:
    """Of the first :data:`_START_BOUNDS` fitting tilings of ``pool`` with ``keys``' values (the kernel's order)
    not looked at yet, the one whose bound from the tiling is lowest; None when there is none, or when the caller's
    fixed keys exclude ``keys``."""
    if any(fixed.get(k, v) != v for k, v in keys.items()) or space.bound is None:
        return None
    bound = space.bound
    found = itertools.islice((t for i, t in enumerate(pool.tilings) if all(t.get(k) == v for k, v in keys.items())
                              and repr(t) not in planned and pool.fits(i)), _START_BOUNDS)
    return min(found, key=lambda t: bound(dict(t)), default=None)


def _nearest_with(pool: Pool, keys: Mapping[str, Any], tiling: Mapping[str, Any],
                  fixed: Mapping[str, Any]) -> dict | None:
    """The fitting tiling of ``pool`` with ``keys``' values nearest ``tiling`` (fewest keys changed, then the
    kernel's order); None if ``tiling`` has them already, the caller's keys exclude them, or none fits."""
    if all(tiling.get(k) == v for k, v in keys.items()) or any(fixed.get(k, v) != v for k, v in keys.items()):
        return None
    idxs = [i for i, t in enumerate(pool.tilings) if all(t.get(k) == v for k, v in keys.items())]
    return next((pool.tilings[i] for i in sorted(idxs, key=lambda i: _distance(pool.tilings[i], tiling))
                 if pool.fits(i)), None)


def search(space: TilingSpace, fixed: Mapping[str, Any], planner: Planner, target: Target, memory: AddressSpace,
           tolerance: float, progress: Progress | None = None) -> SearchResult:
    """The cost model's pick among the completions of ``fixed`` in ``space``.

    Raises the ``scratchpad-fit`` LayoutError (or the PlanError) of the nearest misses when no completion
    plans."""
    pool = Pool(space, fixed)
    dropped, errors = pool.dropped, pool.errors
    pricing = Pricing(target, memory, tolerance, progress)
    planned: dict[str, int] = {}  # repr(tiling) -> index into pricing.candidates; -1: could not plan; -2: bound
    tiles = [0]  # the tiles of every plan made so far (PLANNED_TILES_FLOOR)
    unplanned: list[dict] = []  # left unplanned: their bound (from the tiling alone) could not change the pick

    if progress is not None:
        progress("planning tilings", 0, 0)  # 0 of a number not known yet: the search is taking the space in

    bounds_of: dict[str, float] = {}  # repr(tiling) -> its bound from the tiling (a step looks, a round plans)

    def bound(t: dict) -> float:
        key = repr(t)
        got = bounds_of.get(key)
        if got is None:
            assert space.bound is not None
            got = bounds_of[key] = space.bound(t)
        return got

    def viable(t: dict) -> bool:
        """Whether ``t``'s bound from the tiling leaves it a chance against the cheapest so far."""
        return space.bound is None or pricing.best is None or bound(t) <= pricing.best * (1 + tolerance)

    def spent() -> int:
        """Tilings the budgets count: those planned (or that failed to plan); not those left unplanned by their
        bound, which cost a bound from the tiling alone (MT7004 128 x 64 x 128 with B transposed on four cores: the
        first round's eight such of its eleven moves left the third round one plan, and a shallower k block, 10 %
        faster, was never looked at)."""
        return sum(1 for i in planned.values() if i != -2)

    def has_room(cap: int) -> bool:
        """Whether a budget of ``cap`` tilings has room for one more: fewer planned, or, while the plans made so far
        are small (fewer than PLANNED_TILES_FLOOR tiles in all), fewer than ``cap`` plus MAX_PLANNED."""
        n = spent()
        return n < cap or (tiles[0] < PLANNED_TILES_FLOOR and n < cap + MAX_PLANNED)

    def plan_all(tilings: Sequence[dict], cap: int = MAX_PLANNED) -> bool:
        """Plan (and price) ``tilings`` not planned yet, within the budget ``cap``; whether every one of them was
        planned or left unplanned by its bound (False: the budget cut them short)."""
        new: list[Candidate] = []
        todo = [t for t in tilings if repr(t) not in planned]
        given = list(todo)
        room = max(0, cap - spent())  # (beyond it, while has_room(cap): the plans are small)
        if tiles[0] < PLANNED_TILES_FLOOR:
            room = max(0, cap + MAX_PLANNED - spent())
        first = max(0, cap - spent())
        bounds: list[float] = []
        if space.bound is not None:
            # Lowest bound first, each priced before the next is planned: the cheapest known early, the tilings
            # that cannot come within the tolerance of it are never planned.  A round the budget cuts short plans
            # those of the lowest bounds, not the moves of the keys that come first (256 x 512 x 512 on eight FT78NE
            # cores: split m with B broadcast, 144,379 cycles, when a round cut short in the keys' order left out the
            # tiling the climb goes on to in the bounds' order, split n with 12-row micro-kernels: 141,205).
            bounds = [bound(t) for t in todo]
            order = sorted(range(len(todo)), key=lambda i: bounds[i])[:room]
            todo, bounds = [todo[i] for i in order], [bounds[i] for i in order]
        else:
            todo = todo[:room]
        for i, t in enumerate(todo):
            if i >= first and not has_room(cap):
                break
            if progress is not None:
                progress("planning tilings", len(planned), len(planned) + len(todo) - i)
            if bounds and pricing.best is not None and bounds[i] > pricing.best * (1 + tolerance):
                planned[repr(t)] = -2
                unplanned.append(t)
                continue
            try:
                cand = planner(t)
            except (LayoutError, PlanError, KernelArgError) as e:
                planned[repr(t)] = -1
                dropped.append((t, reason_of(e)))
                errors.append((t, detached(e)))
                continue
            planned[repr(t)] = len(pricing.candidates) + len(new)
            tiles[0] += cand.plan.tile_count
            if bounds:
                pricing.price([cand])
                _bound_held(t, bounds[i], pricing.cycles.get(planned[repr(t)]))
            else:
                new.append(cand)
        if progress is not None:
            progress("planning tilings", len(planned), len(planned))
        if new:
            pricing.price(new)
        return all(repr(t) in planned or not viable(t) for t in given)

    cut: set[str] = set()  # the tilings at which the budget ended a climb still descending
    widened: set[str] = set()  # the tilings whose integer keys' far steps a climb has planned

    def climb(incumbent: dict, cap: int = MAX_PLANNED, within: Mapping[str, Any] | None = None) -> dict:
        """From ``incumbent`` (planned and priced) to the cheapest of its neighbours, round after round, until
        ``cap`` tilings are planned in all; the tiling it ends at.  ``within``: a formulation's keys, the climb
        stepping among its tilings only (another formulation's tiling priced early would stop this one's candidates
        as soon as they could not beat it, before the climb could follow them)."""
        def better(here: int | None) -> dict | None:
            # The climb follows the cheapest (the tie rule picks among the candidates at the end), while a step
            # gains more than TILING_TOLERANCE: a tie is no way up, and the next round would cost as much as this.
            # The default tolerance, whatever the simulator's: every tolerance climbs the same way, so a strict
            # search and a tolerant one choose among the same candidates.
            cheapest = pricing.cheapest(within)
            if cheapest is None or (here is not None
                                    and (pricing.cycles[cheapest] or 0) * (1 + TILING_TOLERANCE) > here):
                return None
            best = pricing.candidates[cheapest].tiling
            return None if best == incumbent else best

        while has_room(cap):
            here = pricing.cycles.get(planned[repr(incumbent)])
            whole = plan_all([t for t in neighbours(space, incumbent, pool, fixed, viable)
                              if within is None or all(t.get(k) == v for k, v in within.items())], cap)
            best = better(here)
            if best is None:
                if not whole:
                    cut.add(repr(incumbent))  # (the budget cut the round short: not a local optimum)
                    break
                if repr(incumbent) in widened or not has_room(cap) or tiles[0] >= PLANNED_TILES_FLOOR:
                    break
                # A local optimum of one step, among small plans (cheap to make: PLANNED_TILES_FLOOR): once, a
                # round of each integer key's far step on each side, past the first step's value to the one
                # nearest half or twice the key's (1000 x 100 x 300 on eight FT78NE cores: k_block 256 to 150 and
                # 300, both slower, over the 128 of whole bursts, 6 % faster; a depthwise gradient's 960-channel
                # tiles, 30 values a vector apart, to 480).
                widened.add(repr(incumbent))
                whole = plan_all([t for t in neighbours(space, incumbent, pool, fixed, viable, far=True)
                                  if within is None or all(t.get(k) == v for k, v in within.items())], cap)
                best = better(here)
                if best is None:
                    if not whole:
                        cut.add(repr(incumbent))
                    break
            incumbent = best
        else:
            cut.add(repr(incumbent))  # (the budget, not a local optimum, ended this climb)
        return incumbent

    few = pool.at_most(EXHAUSTIVE_CANDIDATES)
    if few is None and space.bound is not None:
        few = pool.at_most(EXHAUSTIVE_BOUNDED_CANDIDATES)
    if few is None and space.tiles is not None:
        # A space of small plans is searched whole too, as cheap as a climb through it: the whole of it holds
        # fewer tiles than PLANNED_TILES_FLOOR (BatchNormGrad 100 x 100 on eight FT78NE cores: its climb's one step
        # into the channel split took 13-channel blocks, slower, and 64-channel ones were 8.7 % faster).
        small = pool.at_most(EXHAUSTIVE_SMALL_CANDIDATES)
        if small is not None and sum(space.tiles(dict(t)) for t in small) < PLANNED_TILES_FLOOR:
            few = small
    if few is not None:
        plan_all(few, max(MAX_PLANNED, len(few)))  # (all of them, as the space is small enough to be priced whole)
    else:
        incumbent: dict | None = None
        for t in pool.fitting():  # the kernel's preferred tiling that plans and runs (the pick is checked at the end)
            plan_all([t])
            if pricing.best is not None:
                incumbent = t
                break
        if incumbent is not None:
            # A space of several formulations climbs each on its own (the alternatives below): the first climb
            # steps among the preferred one's tilings, or a neighbour of another formulation priced early would
            # stop this one's candidates before the climb could follow them (3136 x 64 x 32 TT on one FT78NE core:
            # 122,509 cycles, against 102,027 searching the transposed one alone).
            main = {k: incumbent[k] for a in space.alternatives for k in a if k in incumbent} or None
            incumbent = climb(incumbent, within=main)
            for start in space.starts:
                # The space's other algorithms, a step that changes more than one choice: the tiling of the
                # algorithm nearest the climb's end (beyond the budget: one more), and if it is the cheapest now,
                # a climb from it of at most MAX_STARTED more.
                jump = _nearest_with(pool, start, incumbent, fixed)
                if jump is None or repr(jump) in planned:
                    continue
                plan_all([jump], spent() + 1)
                if planned[repr(jump)] == -2 and space.bound is not None:
                    # Its bound leaves it out (the climb's other keys do not suit the algorithm): the algorithm's
                    # tiling of the lowest bound instead, among the first few the kernel prefers.
                    lowest = _lowest_bound_with(space, pool, start, fixed, planned)
                    if lowest is not None:
                        plan_all([lowest], spent() + 1)
                        jump = lowest
                cheapest = pricing.cheapest()
                at = planned[repr(jump)]
                if cheapest is not None and pricing.candidates[cheapest].tiling == jump:
                    incumbent = climb(jump, spent() + MAX_STARTED)
                elif cheapest is not None and at >= 0 and pricing.cycles.get(at) is not None and \
                        (pricing.cycles[at] or 0) <= (pricing.cycles[cheapest] or 0) * (1 + TILING_TOLERANCE) and \
                        tiles[0] < PLANNED_TILES_FLOOR:
                    # ... or tied with it, among small plans: a start is tuned by the first climb's keys, not its own
                    # (MT7004 384 x 256 x 384 with A transposed: B broadcast on split m tied the cheapest within 1 %
                    # and won the tie, unclimbed; its k_block 192, a step away, is 6 % faster)
                    climbed = climb(jump, spent() + MAX_STARTED)
                    best = pricing.cheapest()
                    if best is not None and pricing.candidates[best].tiling == climbed:
                        incumbent = climbed
            for alternative in space.alternatives:
                # A formulation whose keys mean something else: a climb of its own among its tilings, from its
                # preferred one that plans, with a budget of its own (a start slower than the cheapest by more than
                # the tolerance is stopped unpriced: the climb then ends there).
                budget = spent() + MAX_PLANNED
                first = next((t for t in pool.fitting() if all(t.get(k) == v for k, v in alternative.items())), None)
                # ... and from its tiling nearest the first climb's end, whose other keys the climb has tuned (300 x
                # 200 x 700 TT on FT78NE: its preferred direct tiling, A staged in GSM, stops unpriced; the nearest,
                # A from memory and B broadcast as the transposed pick has them, is 1.2 % faster than that pick)
                near = _nearest_with(pool, alternative, incumbent, fixed)
                froms = [t for t in (near, first) if t is not None]
                for start in froms:
                    if repr(start) not in planned:
                        plan_all([start], spent() + 1)
                    if planned[repr(start)] >= 0:
                        climb(start, budget, alternative)
                if froms and all(planned[repr(t)] == -2 for t in froms):
                    # Both left out by their bound (the climb's other keys, and the formulation's preferred ones,
                    # do not suit it), as a start's nearest tiling can be: its tiling of the lowest bound among the
                    # first few the kernel prefers, and a climb from there (MT7004 1000 x 10 x 100 with B
                    # transposed on two cores: the direct formulation was never climbed, 38,772 cycles; its climb
                    # from there reaches 33,061).
                    lowest = _lowest_bound_with(space, pool, alternative, fixed, planned)
                    if lowest is not None:
                        plan_all([lowest], spent() + 1)
                        if planned[repr(lowest)] >= 0:
                            climb(lowest, budget, alternative)
    pick = pricing.settle()
    if pick is None:
        raise no_candidate_error(space, fixed, errors + [(pricing.candidates[i].tiling, e)
                                                         for i, e in pricing.failed.items()])
    return SearchResult(pricing.candidates, pick,
                        priced_choice(pricing, pick, dropped, space.canonical(fixed), unplanned,
                                      repr(pricing.candidates[pick].tiling) in cut),
                        pricing.timings[pick])
