"""The search over a kernel's tiling space: complete the caller's keys, drop what cannot plan, plan the rest
(all of a small space; a climb from the kernel's preferred tiling in a large one), price and pick."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sim.engine.engine import SimulatedTiming
from sim.errors import KernelArgError, LayoutError, PlanError, SimError
from sim.model.memory import AddressSpace
from sim.model.target import Target
from sim.model.tiling import IntKey, TilingSpace
from sim.tuning.choice import TilingChoice
from sim.tuning.limits import EXHAUSTIVE_CANDIDATES, MAX_COMPLETIONS, MAX_PLANNED, TILING_TOLERANCE
from sim.tuning.misses import no_candidate_error, prefilter, reason_of
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


def neighbours(space: TilingSpace, tiling: Mapping[str, Any], pool: Sequence[dict],
               fixed: Mapping[str, Any]) -> list[dict]:
    """The tilings of ``pool`` one step from ``tiling``: for each key it sets (but the fixed ones), each other
    choice of a choice key, and the next smaller and the next larger value of an integer key that ``pool``
    has; each the tiling of ``pool`` with that value and every other choice key unchanged closest to ``tiling``
    (fewest other keys changed, then the kernel's order); a value that needs another choice is left out."""
    out: list[dict] = []
    choices = [k for k in tiling if not isinstance(space.keys[k], IntKey)]
    for key in tiling:
        if key in fixed:
            continue
        now = tiling[key]
        values = list(dict.fromkeys(t[key] for t in pool if key in t and t[key] != now))
        if isinstance(space.keys[key], IntKey):
            below = [v for v in values if v < now]
            above = [v for v in values if v > now]
            values = ([max(below)] if below else []) + ([min(above)] if above else [])
        for value in values:
            # A step changes no other choice key: a move of this key that only exists with another choice is that
            # other key's step (taken from there, if it pays), not a step of this one.
            same_choices = [t for t in pool if t.get(key) == value and all(
                t.get(other) == tiling[other] for other in choices if other != key and other in tiling)]
            if not same_choices:
                continue
            near = min(same_choices, key=lambda t: _distance(t, tiling))
            if near not in out:
                out.append(near)
    return out


def search(space: TilingSpace, fixed: Mapping[str, Any], planner: Planner, target: Target, memory: AddressSpace,
           tolerance: float, progress: Progress | None = None) -> SearchResult:
    """The cost model's pick among the completions of ``fixed`` in ``space``.

    Raises the ``scratchpad-fit`` LayoutError (or the PlanError) of the nearest misses when no completion
    plans."""
    pool, _ = space.completions(fixed, MAX_COMPLETIONS)
    dropped: list[tuple[dict, str]] = []
    errors: list[tuple[dict, SimError]] = []
    fitting: list[dict] = []
    for t in pool:
        why = prefilter(space, t)
        if why is None:
            fitting.append(t)
        else:
            dropped.append((t, reason_of(why)))
            errors.append((t, why))
    pricing = Pricing(target, memory, tolerance, progress)
    planned: dict[str, int] = {}  # repr(tiling) -> index into pricing.candidates, or -1: could not plan

    if progress is not None:
        progress("planning tilings", 0, 0)  # 0 of a number not known yet: the search is taking the space in

    def plan_all(tilings: Sequence[dict]) -> None:
        new: list[Candidate] = []
        todo = [t for t in tilings if repr(t) not in planned][:max(0, MAX_PLANNED - len(planned))]
        for i, t in enumerate(todo):
            if progress is not None:
                progress("planning tilings", len(planned), len(planned) + len(todo) - i)
            try:
                cand = planner(t)
            except (LayoutError, PlanError, KernelArgError) as e:
                planned[repr(t)] = -1
                dropped.append((t, reason_of(e)))
                errors.append((t, e))
                continue
            planned[repr(t)] = len(pricing.candidates) + len(new)
            new.append(cand)
        if progress is not None:
            progress("planning tilings", len(planned), len(planned))
        if new:
            pricing.price(new)

    if len(fitting) <= EXHAUSTIVE_CANDIDATES:
        plan_all(fitting)
    else:
        incumbent: dict | None = None
        for t in fitting:  # the kernel's preferred tiling that plans and passes the plan check
            plan_all([t])
            if pricing.best is not None:
                incumbent = t
                break
        while incumbent is not None and len(planned) < MAX_PLANNED:
            here = pricing.cycles.get(planned[repr(incumbent)])
            plan_all(neighbours(space, incumbent, fitting, fixed))
            # The climb follows the cheapest (the tie rule picks among the candidates at the end), while a step
            # gains more than TILING_TOLERANCE: a tie is no way up, and the next round would cost as much as this.
            # The default tolerance, whatever the simulator's: every tolerance climbs the same way, so a strict
            # search and a tolerant one choose among the same candidates.
            cheapest = pricing.cheapest()
            if here is not None and (pricing.cycles[cheapest] or 0) * (1 + TILING_TOLERANCE) > here:
                break
            best = pricing.candidates[cheapest].tiling
            if best == incumbent:
                break
            incumbent = best
    if pricing.best is None:
        raise no_candidate_error(space, fixed, errors + [(pricing.candidates[i].tiling, e)
                                                         for i, e in pricing.failed.items()])
    pick = pricing.pick()
    return SearchResult(pricing.candidates, pick, priced_choice(pricing, pick, dropped, space.canonical(fixed)),
                        pricing.timings[pick])
