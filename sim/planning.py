"""From a bound call to the plan that runs it: the kernel's tiling space, the search's choice, the plan check.

:class:`CallPlanner` is the simulator's planning half.  A kernel that declares a tiling space
(``tiling_space(call, ctx)``) has its tiling chosen by :func:`sim.tuning.search`: a caller's full tiling is
planned as given, a partial one fixes the keys it names and the search completes the others, none lets it
choose everything.  A choice is remembered per call (in memory, and on disk in the tuning cache); a plan per
(call, tiling), checked against the plan IR's rules once.  A kernel with the older ``tilings(call, ctx)``
list has each listed tiling priced (a given one is planned as the kernel reads it).  Every refusal of a
tiling that does not fit is the ``scratchpad-fit`` layout violation.
"""

from __future__ import annotations

import datetime
import functools
import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from kernels.base import PlanContext
from kernels.registry import SHIPPED, lookup
from sim.errors import KernelArgError, KernelCodeError, LayoutError, PlanError, brief, in_kernel_code
from sim.files import tuning_cache as disk_tunings
from sim.model.call import BoundCall, Buffer
from sim.model.call_key import call_key, exact_text, kernel_state
from sim.model.layout import fit_violation, layout_error
from sim.model.memory import AddressSpace
from sim.model.plan import DoesNotFit, Plan
from sim.model.plan_check import check_plan
from sim.model.target import StagingArea, Target
from sim.model.tiling import TilingSpace
from sim.plan_cache import CachedPlan, PlanCache
from sim.startup import startup
from sim.timing import loop_cycles, run_lower_bound_cycles, serial_compute_cycles
from sim.tuning import (
    MAX_PLAN_TILES,
    Candidate,
    Progress,
    TilingCache,
    TilingChoice,
    choose_tiling,
    fit_hint,
    limits,
    prefilter,
    reason_of,
    search,
    tiles_refusal,
)


def staging_areas(target: Target, buffers: Sequence[Buffer] = ()) -> tuple[StagingArea, ...]:
    """The staging levels of ``target`` (``staging.levels`` of its file) as the plans of a call with ``buffers``
    see them, outermost first: each level's window, with allocations in it aligned to its region's alignment and
    the vector width.  A level that takes the free bytes of its region (``takes_free_bytes``) reaches, for this
    call, from the call's nearest buffer below its window to the nearest above (the region's ends without one),
    at that alignment."""
    vector_width = target.core.vector_width_bytes
    out = []
    for level in target.staging:
        region = target.region(level.region)
        align = max(region.alignment_bytes, vector_width)
        base, end = level.base, level.end
        if level.takes_free_bytes:
            taken = [(b.addr, b.end) for b in buffers if b.size_bytes and b.addr < region.end and region.base < b.end]
            lo = max([hi for _, hi in taken if hi <= level.base] + [region.base])
            hi = min([lo_ for lo_, _ in taken if lo_ >= level.end] + [region.end])
            base, end = -(-lo // align) * align, hi // align * align
        out.append(StagingArea(level.name, level.region, base, end - base, level.shared, align, level.beside))
    return tuple(out)


def _listed_tilings(kernel: Any, listed: Any) -> list[dict]:
    """The first :data:`~sim.tuning.limits.MAX_TILING_CANDIDATES` tilings a kernel's ``tilings()`` lists, each a
    dict; the ``tiling-space`` PlanError when it lists something else."""
    try:
        got = list(itertools.islice(listed, limits.MAX_TILING_CANDIDATES))
    except TypeError:
        raise PlanError("tiling-space", f"tilings() returned {brief(listed)}, not an iterable of tilings",
                        kernel=getattr(kernel, "name", None)) from None
    for c in got:
        if not isinstance(c, Mapping):
            raise PlanError("tiling-space", f"tilings() listed {brief(c)}, not a tiling (a dict of keys)",
                            kernel=getattr(kernel, "name", None))
    return [dict(c) for c in got]


def kernel_of(call: BoundCall) -> Any:
    """The kernel object behind a bound call."""
    return lookup(call.symbol).kernel


def takes_tiling(kernel: Any) -> bool:
    """Whether ``kernel`` has more than one way to tile a call (a tiling space, or the older candidate list)."""
    return hasattr(kernel, "tiling_space") or hasattr(kernel, "tilings")


@dataclass
class Planned:
    """A call planned: its plan's entry and how its tiling was chosen."""

    entry: CachedPlan
    choice: TilingChoice



def _printable(text: str) -> str:
    """``text`` without the characters a terminal would act on (escapes, newlines, other controls)."""
    return "".join(ch for ch in text if ch.isprintable())

class CallPlanner:
    """Plans calls on one chip (the simulator's planning half): spaces, choices, plans, each remembered.

    ``tolerance`` and ``use_disk`` are read at each call (the simulator's ``tiling_tolerance`` and
    ``tuning_cache`` may change between calls).
    """

    def __init__(self, target: Target, memory: AddressSpace, tolerance: Callable[[], float],
                 use_disk: Callable[[], bool]):
        self.target, self.memory = target, memory
        self._tolerance, self._use_disk = tolerance, use_disk
        self.plans = PlanCache()
        self.choices = TilingCache()
        self._target_text: str | None = None

    def clear(self) -> None:
        """Forget every plan and choice."""
        self.plans.clear()
        self.choices.clear()

    def context(self, call: BoundCall) -> PlanContext:
        """What the kernel may know of the chip when planning ``call``."""
        return PlanContext(target=self.target, cores=call.cores, precision=call.precision, variant=call.variant,
                           levels=staging_areas(self.target, call.buffers))

    # -- one call --------------------------------------------------------------------------------------------

    def plan_call(self, call: BoundCall, tiling: Mapping[str, Any] | None,
                  progress: Progress | None = None) -> Planned:
        """The plan of ``call`` with ``tiling`` (None: chosen by the search; a partial one: completed by it)."""
        kernel = kernel_of(call)
        ctx = self.context(call)
        if tiling is not None:
            if not isinstance(tiling, Mapping):
                raise KernelArgError(f"argument 'tiling': expected a mapping of tiling keys, got {brief(tiling)}")
            if not takes_tiling(kernel):
                raise KernelArgError(f"argument 'tiling': {call.symbol} takes no tiling (it has a single plan)")
            for key, value in tiling.items():
                if value is None:  # (a blank value in a config would otherwise run whatever the search picks)
                    raise KernelArgError(f"argument 'tiling.{key}': None is not a value; leave the key out for the "
                                         f"search to choose it")
        if hasattr(kernel, "tiling_space"):
            try:
                return self._in_space(kernel, call, ctx, tiling, progress)
            except KernelCodeError as e:  # (a tiling space's functions do not know their kernel: name it)
                if e.kernel is not None:
                    raise
                raise e.named(getattr(kernel, "name", None)) from e.error
            except PlanError as e:
                if e.rule != "tiling-space" or e.kernel is not None:
                    raise
                # (the tiling space refuses what a kernel declared in it, not knowing the kernel: name it)
                raise PlanError(e.rule, e.detail, kernel=getattr(kernel, "name", None)) from None
        if tiling is not None:
            return Planned(self.lower(kernel, call, replace(ctx, tiling=dict(tiling))),
                           TilingChoice(dict(tiling), "given"))
        if hasattr(kernel, "tilings"):
            return self._listed(kernel, call, ctx, progress)
        return Planned(self.lower(kernel, call, ctx), TilingChoice(None, "kernel"))

    def _in_space(self, kernel: Any, call: BoundCall, ctx: PlanContext, tiling: Mapping[str, Any] | None,
                  progress: Progress | None) -> Planned:
        """The plan of ``call`` by the kernel's tiling space: ``tiling`` if it is complete, else the search's."""
        if tiling is None:  # (a repeated call: its choice remembered, the space not built again)
            remembered = self.choices.get(call.symbol, call, self._tolerance(), {}, kernel=kernel)
            if remembered is not None:
                return Planned(self.lower(kernel, call, replace(ctx, tiling=remembered.tiling)), remembered)
        # (the space is asked for with the caller's tiling: a kernel may offer a key only where it is asked for)
        space = self.space(kernel, call, ctx if tiling is None else replace(ctx, tiling=dict(tiling)))
        fixed = space.fixed(tiling)
        if tiling is not None:
            fixed = space.implied(fixed)
        if tiling is not None and space.is_complete(fixed):
            return Planned(self._given(kernel, call, ctx, space, fixed), TilingChoice(fixed, "given"))
        return self._searched(kernel, call, ctx, space, fixed, progress)

    def space(self, kernel: Any, call: BoundCall, ctx: PlanContext) -> TilingSpace:
        """The kernel's tiling space of ``call``; a space that cannot exist (nothing of the call fits at all)
        is the ``scratchpad-fit`` violation."""
        try:
            space = in_kernel_code(getattr(kernel, "name", None), "tiling_space", kernel.tiling_space, call, ctx)
        except DoesNotFit as e:
            raise layout_error([fit_violation(call, self.target, e)]) from None
        if not isinstance(space, TilingSpace):
            raise PlanError("tiling-space", f"tiling_space() returned {brief(space)}, not a TilingSpace",
                            kernel=getattr(kernel, "name", None))
        return space

    def _given(self, kernel: Any, call: BoundCall, ctx: PlanContext, space: TilingSpace,
               tiling: dict[str, Any]) -> CachedPlan:
        """The caller's full tiling planned: refused before planning beyond the plan-size budget, and when it
        does not fit, the error names the nearest values of its keys that fit."""
        too_many = tiles_refusal(space, tiling)
        if too_many is not None:
            raise KernelArgError(f"argument 'tiling': {too_many}")
        try:
            return self.lower_raw(kernel, call, replace(ctx, tiling=tiling))
        except DoesNotFit as e:
            hinted = DoesNotFit(e.resource, e.needed_bytes, e.available_bytes, f"{e}{fit_hint(space, tiling)}")
            raise layout_error([fit_violation(call, self.target, hinted)]) from None

    def _searched(self, kernel: Any, call: BoundCall, ctx: PlanContext, space: TilingSpace,
                  fixed: dict[str, Any], progress: Progress | None) -> Planned:
        """The search's choice for ``call`` with ``fixed`` keys: remembered, read from disk, or searched now."""
        tolerance = self._tolerance()
        remembered = self.choices.get(call.symbol, call, tolerance, fixed, kernel=kernel)
        if remembered is not None:
            return Planned(self.lower(kernel, call, replace(ctx, tiling=remembered.tiling)), remembered)
        disk_key = self.disk_key(kernel, call, fixed) if self._use_disk() else None
        if disk_key is not None:
            def as_searched(tiling: dict) -> dict | None:
                # A stored tiling goes through the checks a searched one does (keys, plan-size budget, fit), and
                # must be one the space offers now: a kernel whose space depends on more than its source (a
                # setting read from the environment, a data file) may no longer list it.
                t = space.implied(space.canonical(space.fixed(tiling)))
                return t if space.is_complete(t) and space.offers(t, fixed) and prefilter(space, t) is None \
                    else None

            stored = self._stored(disk_key, kernel, call, ctx, as_searched, space.canonical, fixed)
            if stored is not None:
                self.choices.put(call.symbol, call, tolerance, stored.choice, fixed, kernel=kernel)
                return stored
        entries: dict[str, tuple[dict, CachedPlan]] = {}

        # A shipped kernel's candidates are checked only if simulated (a candidate its bound leaves out never
        # runs; the pick is checked before it stands); a user's before they are priced, as its docs say: a plan
        # that breaks a rule but prices cheap would pull the climb towards it, its pick dropped only at the end.
        check_first = lookup(call.symbol).origin != SHIPPED

        def planner(tiling: dict) -> Candidate:
            entry = self.lower_raw(kernel, call, replace(ctx, tiling=tiling), check=check_first)
            entries[repr(tiling)] = (tiling, entry)
            try:
                bound = self.lower_bound(entry)
            except Exception:
                self.check(kernel, call, ctx, entry)  # a plan its bound cannot price breaks a rule: say which
                raise
            return Candidate(tiling, entry.plan, bound,
                             None if entry.checked else functools.partial(self.check, kernel, call, ctx, entry),
                             entry.roofline(self.target).region_bytes)

        try:
            found = search(space, fixed, planner, self.target, self.memory, tolerance, progress)
        except DoesNotFit as e:
            raise layout_error([fit_violation(call, self.target, e)]) from None
        picked = entries[repr(found.choice.tiling)][1]
        picked.timing = found.timing
        for tiling, entry in entries.values():
            if entry is not picked:  # a layer's losing plans would keep their hundreds of thousands of objects
                self.plans.discard(PlanCache.key(call, tiling, kernel))
        choice = found.choice
        self.choices.put(call.symbol, call, tolerance, choice, fixed, kernel=kernel)
        self._store(disk_key, call, choice)
        return Planned(picked, choice)

    def _store(self, disk_key: str | None, call: BoundCall, choice: TilingChoice) -> None:
        """Keep a searched choice in the on-disk tuning cache (when the call has a key)."""
        if disk_key is None:
            return
        disk_tunings.store(disk_key, {
            "symbol": call.symbol, "target": self.target.name, "tiling": choice.tiling,
            "tolerance": choice.tolerance, "candidates": [[c, cycles] for c, cycles in choice.candidates],
            "notes": list(choice.notes), "fixed": choice.fixed, "budget_ended": choice.budget_ended,
            "searched": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")})

    def _listed(self, kernel: Any, call: BoundCall, ctx: PlanContext, progress: Progress | None) -> Planned:
        """A kernel of the older form: each tiling ``tilings(call, ctx)`` lists that plans, priced; the rest
        dropped with the reason."""
        tolerance = self._tolerance()
        remembered = self.choices.get(call.symbol, call, tolerance, kernel=kernel)
        if remembered is not None:
            return Planned(self.lower(kernel, call, replace(ctx, tiling=remembered.tiling)), remembered)
        if progress is not None:
            progress("planning tilings", 0, 0)  # 0 of an unknown number: the kernel is listing its candidates
        try:
            listed = in_kernel_code(getattr(kernel, "name", None), "tilings()", lambda: _listed_tilings(
                kernel, kernel.tilings(call, ctx)))
        except DoesNotFit as e:  # no candidate can fit at all (a chip without the level the kernel needs)
            raise layout_error([fit_violation(call, self.target, e)]) from None
        disk_key = self.disk_key(kernel, call) if self._use_disk() else None
        if disk_key is not None:
            def as_listed(tiling: dict) -> dict | None:
                # Only a tiling the kernel still lists, as it lists it (its keys in the kernel's order).
                return next((c for c in listed if c == tiling), None)

            stored = self._stored(disk_key, kernel, call, ctx, as_listed, lambda t: as_listed(t) or dict(t), {})
            if stored is not None:
                self.choices.put(call.symbol, call, tolerance, stored.choice, kernel=kernel)
                return stored
        planned: list[tuple[dict, CachedPlan]] = []
        dropped: list[tuple[dict, str]] = []
        for i, cand in enumerate(listed):
            if progress is not None:
                progress("planning tilings", i, len(listed))
            tiling = dict(cand)
            if any(tiling == t for t, _ in planned):
                continue
            try:
                planned.append((tiling, self.lower(kernel, call, replace(ctx, tiling=tiling))))
            except (LayoutError, PlanError) as e:
                dropped.append((tiling, reason_of(e)))
        if progress is not None:
            progress("planning tilings", len(listed), len(listed))
        if len(planned) <= 1:
            if planned:
                choice = TilingChoice(planned[0][0], "kernel", dropped=tuple(dropped))
                self.choices.put(call.symbol, call, tolerance, choice, kernel=kernel)
                return Planned(planned[0][1], choice)
            return Planned(self.lower(kernel, call, ctx), TilingChoice(None, "kernel", dropped=tuple(dropped)))
        pick, choice, timing = choose_tiling(
            [Candidate(c, e.plan, self.lower_bound(e), None, e.roofline(self.target).region_bytes)
             for c, e in planned], self.target, self.memory,
            tolerance, progress)
        choice = replace(choice, dropped=tuple(dropped))
        planned[pick][1].timing = timing
        for i, (tiling_i, _) in enumerate(planned):
            if i != pick:
                self.plans.discard(PlanCache.key(call, tiling_i, kernel))
        self.choices.put(call.symbol, call, tolerance, choice, kernel=kernel)
        self._store(disk_key, call, choice)
        return Planned(planned[pick][1], choice)

    def lower_bound(self, entry: CachedPlan) -> float:
        """Cycles no run of ``entry``'s plan can beat: its roofline's resources after what must precede them, and
        each core's computes one after another after what must land before its first (:mod:`sim.startup`)."""
        serial = serial_compute_cycles(entry.plan, self.target)
        return max(run_lower_bound_cycles(entry.roofline(self.target), self.target),
                   self.target.launch_overhead_cycles + max(serial.values(), default=0),
                   startup(entry.plan, self.target).bound_cycles(serial))

    # -- the on-disk tuning cache ---------------------------------------------------------------------------

    def disk_key(self, kernel: Any, call: BoundCall, fixed: Mapping[str, Any] | None = None) -> str | None:
        """The on-disk tuning cache's key of this call's choice, or None if it has none (no stable identity)."""
        kernel_id = disk_tunings.kernel_fingerprint(kernel)
        if kernel_id is None:
            return None
        if self._target_text is None:  # the parsed target, wherever its file lies: its content is what prices
            self._target_text = repr(replace(self.target, path=""))
        state = kernel_state(kernel)
        if state.startswith(("unkeyed:", "addressed:")):
            return None  # (no text that another process would give it)
        fixed_text = f"|fixed {exact_text(sorted(fixed.items()))}" if fixed else ""
        call_text = f"{call_key(call)}|kernel {state}{fixed_text}"
        return disk_tunings.entry_key(self._target_text, call.symbol, call_text, self._tolerance(), kernel_id)

    def _stored(self, key: str, kernel: Any, call: BoundCall, ctx: PlanContext,
                accept: Callable[[dict], dict | None], canonical: Callable[[dict], dict],
                fixed: Mapping[str, Any]) -> Planned | None:
        """The plan and choice the tuning cache holds for ``key``; None if it holds none or ``accept`` refuses
        its tiling (a stale or edited entry: ignored, never an error; the search that follows overwrites it).
        ``accept`` gives the tiling to plan (its keys in the kernel's order: a choice read back prints and
        traces as a searched one does), ``canonical`` orders the keys of the other candidates listed.  The keys
        the caller fixed are ``fixed`` (the key holds them: an entry's own say is not taken), and the entry's
        notes and search time are text shown on a terminal: only printable characters of them are kept."""
        doc = disk_tunings.load(key)
        if doc is None:
            return None
        try:
            tiling = accept(dict(doc["tiling"]))
            if tiling is None:
                return None
            entry = self.lower_raw(kernel, call, replace(ctx, tiling=tiling))
            candidates = tuple((canonical(dict(c)), cycles) for c, cycles in doc["candidates"])
            notes = doc.get("notes", [])
            notes = tuple(_printable(str(n)) for n in notes) if isinstance(notes, list) else ()
            searched = doc.get("searched")
        except Exception:  # noqa: BLE001 (a hand-edited or stale entry the kernel refuses: search instead)
            return None
        choice = TilingChoice(tiling, "cost model", candidates, doc["tolerance"], notes, (), dict(fixed), 0, True,
                              _printable(searched) if isinstance(searched, str) else None,
                              doc.get("budget_ended") is True)
        return Planned(entry, choice)

    # -- plans -------------------------------------------------------------------------------------------------

    def lower(self, kernel: Any, call: BoundCall, ctx: PlanContext) -> CachedPlan:
        """:meth:`lower_raw`, a tiling that does not fit becoming the ``scratchpad-fit`` layout violation."""
        try:
            return self.lower_raw(kernel, call, ctx)
        except DoesNotFit as e:
            raise layout_error([fit_violation(call, self.target, e)]) from None

    def lower_raw(self, kernel: Any, call: BoundCall, ctx: PlanContext, check: bool = True) -> CachedPlan:
        """``kernel.plan(call, ctx)``, reused when the same call was planned with the same tiling before, and
        checked against the plan IR's rules once (``check`` False: not yet, the caller checks it before it
        runs); DoesNotFit when the tiling does not fit."""
        key = PlanCache.key(call, ctx.tiling, kernel)
        entry = self.plans.get(key)
        if entry is not None:
            if check and not entry.checked:
                self.check(kernel, call, ctx, entry)
            return entry
        try:
            # (a copy of the tiling: one the kernel changes is not the one its plan is remembered by)
            plan = in_kernel_code(getattr(kernel, "name", None), "plan", kernel.plan, call,
                                  ctx if ctx.tiling is None else replace(ctx, tiling=dict(ctx.tiling)))
        except DoesNotFit:
            raise
        except LayoutError as e:  # a kernel not yet moved to DoesNotFit: counts against the vector level
            if getattr(e, "violations", None):
                raise
            raise DoesNotFit(None, 0, 0, str(e)) from None
        if isinstance(plan, Plan) and plan.tile_count > MAX_PLAN_TILES:
            raise PlanError("plan-size", f"the plan has {plan.tile_count} tiles, more than the {MAX_PLAN_TILES} a "
                                         f"plan may have (sim.tuning.MAX_PLAN_TILES): choose larger tiles",
                            kernel=getattr(kernel, "name", None))
        entry = self.plans.put(key, plan)
        if check:
            self.check(kernel, call, ctx, entry)
        return entry

    def check(self, kernel: Any, call: BoundCall, ctx: PlanContext, entry: CachedPlan) -> None:
        """The plan check, before anything runs the plan (the cost model's timing-only runs included), once per
        plan; a plan that fails it is forgotten."""
        if entry.checked:
            return
        try:
            check_plan(entry.plan, call, self.target, ctx.levels,
                       (ctx.vector_level,) + ((ctx.scalar_level,) if ctx.scalar_level is not None else ()),
                       kernel.name, functools.partial(loop_cycles, core=self.target.core))
        except BaseException:
            self.plans.discard(PlanCache.key(call, ctx.tiling, kernel))
            raise
        entry.checked = True

