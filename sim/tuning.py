"""Choosing a tiling: "the cost model" names this module and only this.

A kernel declares its tiling space (:class:`sim.model.tiling.TilingSpace`: keys, the values worth trying,
what must hold for a tiling to fit, how many tiles it plans); the search here owns every choice.  It completes
the keys the caller fixed (none, some, or all), drops what does not fit or breaks a plan rule (listed with
the reason), prices the rest with timing-only simulations (the engine moves no bytes and runs no numerics,
so memory is untouched) and picks: candidates within the tolerance of the cheapest tie, and the tie goes to
the fewest tiles.

How much it plans: a space of at most :data:`EXHAUSTIVE_CANDIDATES` fitting tilings is planned whole;
a larger one is searched from the kernel's preferred tiling by steps of one key (each round plans the best
tiling's neighbours: the same tiling with another choice of one key, or the next smaller or larger value of
one integer key), until the best is its own best neighbour or :data:`MAX_PLANNED` tilings are planned.
Planned candidates are simulated fewest tiles first; one still running when it
can no longer tie is stopped there, and a round ends as soon as no candidate left can change the pick by a
lower bound of any run of it (:func:`sim.timing.run_lower_bound_cycles`): on a DDR-bound layer, a candidate
with smaller tiles moves the same bytes, cannot beat the first by more than the tolerance, and is never
simulated.  :class:`TilingChoice` records what was chosen and how; :class:`TilingCache` remembers choices
per call (and :mod:`sim.files.tuning_cache` across processes).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from sim.engine.engine import EngineMemo, SimulatedTiming, simulate
from sim.errors import KernelArgError, LayoutError, PlanError, SimError
from sim.model.memory import AddressSpace
from sim.model.plan import DoesNotFit, Plan
from sim.model.target import Target
from sim.model.tiling import IntKey, TilingSpace

#: Candidate tilings whose cycles are within this fraction of the cheapest count as tied; a tie goes to the
#: candidate with the fewest tiles.  The model is cycle-approximate: a fraction of a percent separates
#: tilings that differ only in how long the first load and the last store stay exposed, while fewer tiles
#: mean fewer DMA descriptors on the chip and a several times faster simulation.  The one tolerance of every
#: choice the simulator makes between tilings (a compute's loops are picked strictly cheapest:
#: :func:`sim.timing.cheapest_loops`).
TILING_TOLERANCE = 0.01
#: Most tiles a plan may have: a tiling beyond it is refused before it is planned (a plan costs a few KB of
#: memory and a few microseconds of simulation per tile; the largest shipped and benchmark plans have a few
#: thousand).
MAX_PLAN_TILES = 100_000
#: Most tilings a search takes from a space (the kernel's order of preference decides which).
MAX_COMPLETIONS = 4096
#: A space with at most this many fitting tilings is planned whole; a larger one is searched key by key.
EXHAUSTIVE_CANDIDATES = 6
#: Most candidates one search plans (the kernel's preferred tiling and its neighbours, round after round).
MAX_PLANNED = 16
#: Most dropped candidates a summary or an error lists by name (the others are counted).
LISTED_DROPS = 3

#: ``progress(phase, done, total)``: how a long search is going.
Progress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class TilingChoice:
    """The tiling a run used and how it was chosen.

    ``source`` is ``given`` (the caller named every key), ``cost model`` (the search chose, completing the
    keys in ``fixed`` when the caller named some) or ``kernel`` (the kernel offers one plan only).
    ``candidates`` are the tilings the search planned, each with its cycles (None for one stopped once it
    could no longer tie or left out since its lower bound could not change the pick), and ``notes`` say for
    each why it lost or was not simulated ("" when its cycles say it all); ``dropped`` lists the tilings that
    could not plan, with the reason.  ``simulated`` counts the candidates the search simulated in this
    process (0 for a choice read from the on-disk tuning cache, ``cached`` True then, ``searched`` the day it
    was searched).
    """

    tiling: dict | None
    source: str
    candidates: tuple[tuple[dict, int | None], ...] = ()
    tolerance: float = 0.0  # the simulator's tiling_tolerance when the cost model chose
    notes: tuple[str, ...] = ()
    dropped: tuple[tuple[dict, str], ...] = ()
    fixed: dict = field(default_factory=dict)
    # How the choice was reached, not what it is: choices compare equal whether searched or read from disk.
    simulated: int = field(default=0, compare=False)
    cached: bool = field(default=False, compare=False)
    searched: str | None = field(default=None, compare=False)

    def describe(self) -> str:
        """One line for summaries: the tiling, how it was chosen, and each other candidate by the keys it
        changes."""
        if self.source != "cost model":
            text = f"tiling {self.tiling if self.tiling else 'the kernel default'} ({self.source})"
            return text + self._dropped_text()
        chosen = self.tiling or {}
        priced = []
        for i, (c, cycles) in enumerate(self.candidates):
            note = self.notes[i] if i < len(self.notes) else ""
            if c == chosen:
                cheapest = min((x for _, x in self.candidates if x is not None), default=cycles)
                why = (f" (the fewest tiles within {self.tolerance:.0%} of the cheapest)"
                       if cycles is not None and cheapest is not None and cycles > cheapest else "")
                priced.append((f"this one {cycles}" if cycles is not None else "this one") + why)
                continue
            text = f"{_changes(c, chosen)} {cycles}" if cycles is not None else _changes(c, chosen)
            priced.append(f"{text} ({note})" if note else text)
        given = f" with {self.fixed} given" if self.fixed else ""
        among = f"the cost model{given} among {len(self.candidates)} candidates"
        how = (f"from the tuning cache (searched{' on ' + self.searched if self.searched else ''}: chosen by {among}"
               if self.cached else f"chosen by {among}")
        return f"tiling {chosen} {how} ({'; '.join(priced)}{self._dropped_text('; ')})" + (")" if self.cached else "")

    def _dropped_text(self, sep: str = "; ") -> str:
        if not self.dropped:
            return ""
        shown = "; ".join(f"{_changes(c, self.tiling or {})}: {reason}" for c, reason in self.dropped[:LISTED_DROPS])
        more = f" and {len(self.dropped) - LISTED_DROPS} more" if len(self.dropped) > LISTED_DROPS else ""
        return f"{sep}{len(self.dropped)} dropped: {shown}{more}"


def _changes(tiling: Mapping[str, Any], base: Mapping[str, Any]) -> str:
    """``tiling`` by the keys in which it differs from ``base`` (all of it when ``base`` is empty)."""
    diff = {k: v for k, v in tiling.items() if base.get(k) != v} if base else dict(tiling)
    return "{" + ", ".join(f"{k}: {v}" for k, v in diff.items()) + "}"


class TilingCache:
    """The tilings already chosen, per (symbol, bound call, fixed keys, tolerance): a repeated call chooses
    without listing or pricing its candidates again."""

    def __init__(self) -> None:
        self._choices: dict[tuple[str, str, str, float], TilingChoice] = {}

    @staticmethod
    def _key(symbol: str, call: Any, fixed: Mapping[str, Any], tolerance: float) -> tuple[str, str, str, float]:
        return symbol, repr(call), repr(sorted(fixed.items())), tolerance

    def get(self, symbol: str, call: Any, tolerance: float, fixed: Mapping[str, Any] | None = None) \
            -> TilingChoice | None:
        """The choice made for this call before, or None."""
        return self._choices.get(self._key(symbol, call, fixed or {}, tolerance))

    def put(self, symbol: str, call: Any, tolerance: float, choice: TilingChoice,
            fixed: Mapping[str, Any] | None = None) -> None:
        """Remember ``choice`` for this call."""
        self._choices[self._key(symbol, call, fixed or {}, tolerance)] = choice

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
    """A candidate tiling as the search sees it: the plan it gives, the plan's engine memo, a lower bound of its
    cycles that holds for any run of it (:func:`sim.timing.run_lower_bound_cycles`), and ``verify``, the plan
    check that must pass before the plan runs (a PlanError drops the candidate; None: checked already), made
    only for a candidate the search simulates."""

    tiling: dict
    plan: Plan
    memo: EngineMemo | None
    lower_bound_cycles: float
    verify: Callable[[], None] | None = None


class Planner(Protocol):
    """What the search needs of the simulator: a tiling planned and checked (a :class:`Candidate`), or the
    :class:`SimError` that says why it cannot be (a ``scratchpad-fit`` LayoutError, a PlanError...)."""

    def __call__(self, tiling: dict) -> Candidate:
        """The candidate of ``tiling``."""
        ...


# --- pricing planned candidates ---------------------------------------------------------------------------


def _cannot_win(pick: tuple[int, int], rest: Sequence[Candidate], tolerance: float) -> bool:
    """Whether none of the candidates not yet simulated can change the pick ``(tiles, cycles)``.

    Candidates are taken fewest tiles first, so each of ``rest`` has at least as many tiles as the pick.  The pick
    stays tied whatever they cost if none can come in under its cycles / (1 + tolerance) (the cheapest could then
    not leave it out of the tie); one with more tiles then loses the tie to it, and one with as many tiles loses
    unless it is cheaper (an equal count goes to the pick, which comes first in the kernel's order).
    """
    tiles, cycles = pick
    return all(c.lower_bound_cycles >= cycles / (1 + tolerance)
               and (c.plan.tile_count > tiles or c.lower_bound_cycles >= cycles) for c in rest)


class _Pricing:
    """The planned candidates of one search and their cycles: priced round after round, fewest tiles first."""

    def __init__(self, target: Target, memory: AddressSpace, tolerance: float, progress: Progress | None):
        self.target, self.memory, self.tolerance, self.progress = target, memory, tolerance, progress
        self.candidates: list[Candidate] = []
        self.cycles: dict[int, int | None] = {}  # index -> cycles (None: stopped early); absent: not simulated
        self.timings: dict[int, SimulatedTiming] = {}
        self.failed: dict[int, PlanError] = {}  # index -> the plan rule it breaks (never simulated)
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

    def cheapest(self) -> int:
        """The simulated candidate of the fewest cycles (the first planned on a tie)."""
        return min((i for i, c in self.cycles.items() if c is not None), key=lambda i: (self.cycles[i] or 0, i))

    def price(self, new: Sequence[Candidate]) -> None:
        """Add ``new`` candidates and simulate those that can change the pick, fewest tiles first."""
        start = len(self.candidates)
        self.candidates.extend(new)
        order = sorted(range(start, len(self.candidates)), key=lambda i: (self.candidates[i].plan.tile_count, i))
        self.total_tiles += sum(self.candidates[i].plan.tile_count for i in order)
        for k, i in enumerate(order):
            cand = self.candidates[i]
            if self.best is not None:
                pick = self.pick()
                rest = [self.candidates[j] for j in order[k:]]
                if _cannot_win((self.candidates[pick].plan.tile_count, self.cycles[pick] or 0), rest, self.tolerance):
                    break
            limit = None if self.best is None else int(self.best * (1 + self.tolerance))
            if limit is not None and cand.lower_bound_cycles > limit:
                continue  # it cannot come within the tolerance of the cheapest, whatever is simulated after it
            if cand.verify is not None:
                try:
                    cand.verify()
                except PlanError as e:
                    self.failed[i] = e
                    continue
            tick = None
            if self.progress is not None:
                self.progress("pricing tilings", self.done_tiles, self.total_tiles)
                tick = _TileCounter(self.progress, "pricing tilings", self.done_tiles, self.total_tiles)
            timing = simulate(cand.plan, self.target, self.memory, numerics=False, memo=cand.memo, on_tile=tick,
                              until_cycles=limit)
            self.done_tiles += cand.plan.tile_count
            self.cycles[i] = None if timing is None else timing.cycles
            if timing is not None:
                self.timings[i] = timing
                if self.best is None or timing.cycles < self.best:
                    self.best = timing.cycles
        self.done_tiles = self.total_tiles  # the candidates stopped early or left out count as done
        if self.progress is not None:
            self.progress("pricing tilings", self.done_tiles, self.total_tiles)

    def note(self, i: int, pick: int) -> str:
        """Why candidate ``i`` is not the pick ("" when its cycles say it: slower beyond the tolerance)."""
        if i == pick:
            return "chosen"
        if i not in self.cycles:
            return "not simulated: its lower bound cannot change the pick"
        cycles = self.cycles[i]
        if cycles is None:
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
    pricing = _Pricing(target, memory, tolerance, progress)
    pricing.price(candidates)
    if pricing.best is None:
        raise next(iter(pricing.failed.values()))
    pick = pricing.pick()
    return pick, _choice(pricing, pick, (), {}), pricing.timings[pick]


def _choice(pricing: _Pricing, pick: int, dropped: Sequence[tuple[dict, str]], fixed: Mapping[str, Any]) \
        -> TilingChoice:
    """The choice of ``pick``: every candidate the search planned (those that broke a plan rule among the
    dropped)."""
    cands = [(i, c) for i, c in enumerate(pricing.candidates) if i not in pricing.failed]
    failed = [(pricing.candidates[i].tiling, reason_of(e)) for i, e in pricing.failed.items()]
    return TilingChoice(pricing.candidates[pick].tiling, "cost model",
                        tuple((c.tiling, pricing.cycles.get(i)) for i, c in cands), pricing.tolerance,
                        tuple(pricing.note(i, pick) for i, _ in cands), tuple(dropped) + tuple(failed), dict(fixed),
                        len(pricing.cycles))


# --- the search over a space --------------------------------------------------------------------------------


@dataclass
class SearchResult:
    """What a search found: the picked candidate's index into ``candidates``, the choice and its timing."""

    candidates: list[Candidate]
    pick: int
    choice: TilingChoice
    timing: SimulatedTiming


def reason_of(e: SimError) -> str:
    """A dropped candidate's reason in one short line (a tiling that does not fit: the level and the bytes over
    first)."""
    if isinstance(e, DoesNotFit):
        level = e.resource or "vector level"
        return _short(f"{level}: {max(0, e.needed_bytes - e.available_bytes)} bytes over ({e})")
    return _short(str(e))


def _short(text: str, limit: int = 240) -> str:
    """``text`` on one line, at most ``limit`` characters."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def tiles_refusal(space: TilingSpace, tiling: Mapping[str, Any]) -> str | None:
    """Why ``tiling`` plans too many tiles (naming the key that makes them), or None: within the budget."""
    if space.tiles is None:
        return None
    count = space.tiles(dict(tiling))
    if count <= MAX_PLAN_TILES:
        return None
    # The key whose largest value the space offers cuts the most tiles is the one to raise.
    blame, fewest = None, count
    for key in space.keys.values():
        if not isinstance(key, IntKey) or key.name not in tiling:
            continue
        for v in (key.hi, *key.candidates(tiling)):
            try:
                n = space.tiles({**tiling, key.name: v})
            except SimError:
                continue
            if n < fewest:
                blame, fewest = key.name, n
    raise_key = f": raise tiling.{blame} (now {tiling[blame]})" if blame is not None else ""
    return (f"tiling {dict(tiling)} plans {count} tiles, more than the {MAX_PLAN_TILES} a plan may have "
            f"(sim.tuning.MAX_PLAN_TILES){raise_key}")


def prefilter(space: TilingSpace, tiling: dict) -> SimError | None:
    """Why a full ``tiling`` cannot plan, found without planning it (the space's ``tiles`` and ``fit``: a
    KernelArgError beyond the plan-size budget, the DoesNotFit of the level it overflows), or None."""
    too_many = tiles_refusal(space, tiling)
    if too_many is not None:
        return KernelArgError(f"argument 'tiling': {too_many}")
    if space.fit is not None:
        try:
            space.fit(dict(tiling))
        except (DoesNotFit, KernelArgError) as e:
            return e
    return None


def _distance(a: Mapping[str, Any], b: Mapping[str, Any]) -> int:
    return sum(1 for k in set(a) | set(b) if a.get(k) != b.get(k))


def neighbours(space: TilingSpace, tiling: Mapping[str, Any], pool: Sequence[dict],
               fixed: Mapping[str, Any]) -> list[dict]:
    """The tilings of ``pool`` one step from ``tiling``: for each key it sets (but the fixed ones), each other
    choice of a choice key, and the next smaller and the next larger value of an integer key that ``pool``
    has; each the tiling of ``pool`` with that value closest to ``tiling`` (fewest other keys changed, then the
    kernel's order)."""
    out: list[dict] = []
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
            near = min((t for t in pool if t.get(key) == value), key=lambda t: _distance(t, tiling))
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
    pricing = _Pricing(target, memory, tolerance, progress)
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
    return SearchResult(pricing.candidates, pick, _choice(pricing, pick, dropped, space.canonical(fixed)),
                        pricing.timings[pick])


# --- when nothing fits -----------------------------------------------------------------------------------


def _over(e: SimError) -> int:
    """Bytes a tiling is over its staging level by (a large number for other reasons)."""
    if isinstance(e, DoesNotFit):
        return max(0, e.needed_bytes - e.available_bytes)
    return 1 << 62


def nearest_fitting(space: TilingSpace, tiling: Mapping[str, Any], key: str) -> Any | None:
    """The value of ``key`` nearest to ``tiling``'s that fits with the other keys as they are (by the space's
    ``fit``), or None."""
    k = space.keys.get(key)
    if space.fit is None or not isinstance(k, IntKey) or key not in tiling:
        return None  # a choice key's other choices bring other keys: no "nearest value" of it
    now = tiling[key]
    probes = set(k.candidates(tiling))
    v = now
    while v > k.lo:
        v = max(k.lo, v // 2)
        probes.add(v)
    v = now
    while v < k.hi:
        v = min(k.hi, v * 2)
        probes.add(v)
    for v in sorted(probes - {now}, key=lambda x: (abs(x - now), x)):
        try:
            space.fit({**tiling, key: v})
        except (DoesNotFit, KernelArgError):
            continue
        if tiles_refusal(space, {**tiling, key: v}) is None:
            return v
    return None


def fit_hint(space: TilingSpace, tiling: Mapping[str, Any]) -> str:
    """For a tiling that does not fit: the keys to change and their nearest values that fit ("" if none)."""
    hints = []
    for key in tiling:
        v = nearest_fitting(space, tiling, key)
        if v is not None:
            hints.append(f"{key}={v}")
    return f"; the nearest that fit: {' or '.join(hints)}" if hints else ""


def no_candidate_error(space: TilingSpace, fixed: Mapping[str, Any],
                       errors: Sequence[tuple[dict, SimError]]) -> SimError:
    """The error of a search none of whose candidates plans: the nearest misses (fewest bytes over first), each
    with its reason, and the key to change."""
    if not errors:
        given = f" with {dict(fixed)} given" if fixed else ""
        return KernelArgError(f"argument 'tiling': the kernel's tiling space has no tiling{given}")
    ranked = sorted(errors, key=lambda te: _over(te[1]))
    first_t, first_e = ranked[0]
    if isinstance(first_e, PlanError):  # a kernel whose plans break the IR's rules: the rule, where, as it is
        return PlanError(first_e.rule, f"{first_e.detail} (with tiling {first_t}; every one of the {len(errors)} "
                                       f"tilings tried fails)", kernel=first_e.kernel, core=first_e.core,
                         tile=first_e.tile, phase=first_e.phase)
    misses = "; ".join(f"{t}: {reason_of(e)}" for t, e in ranked[:LISTED_DROPS])
    text = (f"no tiling{' with ' + str(dict(fixed)) + ' given' if fixed else ''} of the kernel's space plans "
            f"({len(errors)} tried); nearest misses: {misses}{fit_hint(space, first_t)}")
    if isinstance(first_e, DoesNotFit):
        return DoesNotFit(first_e.resource, first_e.needed_bytes, first_e.available_bytes, text)
    if isinstance(first_e, LayoutError) and getattr(first_e, "violations", None):
        return first_e
    return KernelArgError(f"argument 'tiling': {text}")
