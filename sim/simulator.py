"""The :class:`Simulator` facade: a chip's memory plus kernel calls that run on it (SPEC section 3)."""

from __future__ import annotations

import functools
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence, TypeVar, cast

import numpy as np

from kernels.base import PlanContext, check_argument_names
from kernels.registry import Symbol, lookup, symbols
from sim.engine.engine import Engine
from sim.engine.events import Recorder, TraceEvent
from sim.errors import KernelArgError, LayoutError, MemoryFault, brief
from sim.inspect.summary import CoreSummary, core_summaries, run_summary_text
from sim.inspect.trace import run_metadata, write_trace
from sim.model.call import BoundCall, Buffer
from sim.model.layout import check_buffer, enforce_layout, layout_error, plan_violation
from sim.model.memory import AddressSpace, checked_dtype
from sim.model.plan import Plan
from sim.timing import Roofline, peak_flops_per_cycle, roofline
from sim.model.target import StagingArea, Target
from sim.model.target_loader import load_target

F = TypeVar("F", bound=Callable[..., Any])

#: Plans a simulator keeps for calls it may see again (least recently used dropped first).
PLAN_CACHE_SIZE = 16
#: Candidate tilings whose cycles are within this fraction of the cheapest count as tied; a tie goes to the
#: candidate with the fewest tiles.  The model is cycle-approximate: a fraction of a percent separates
#: tilings that differ only in how long the first load and the last store stay exposed, while fewer tiles
#: mean fewer DMA descriptors on the chip and a several times faster simulation.
TILING_TOLERANCE = 0.01


@dataclass(frozen=True)
class TilingChoice:
    """The tiling a run used and how it was chosen.

    ``source`` is ``given`` (the caller named it), ``cost model`` (the
    cheapest of the kernel's candidates, each simulated in timing-only mode,
    where candidates within the simulator's ``tiling_tolerance`` of the
    cheapest tie and the one with the fewest tiles wins; their cycles are in
    ``candidates``, None for one stopped once it could no longer tie) or
    ``kernel`` (the kernel offers one plan only).
    """

    tiling: dict | None
    source: str
    candidates: tuple[tuple[dict, int | None], ...] = ()
    tolerance: float = 0.0  # the simulator's tiling_tolerance when the cost model chose

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


@dataclass
class Run:
    """The outcome of one kernel call: cycles, trace events, bounds and summaries."""

    symbol: str
    target: Target
    call: BoundCall
    plan: Plan
    cycles: int
    events: list[TraceEvent]
    roofline: Roofline
    wall_seconds: float
    args: dict = field(default_factory=dict)
    tiling: TilingChoice | None = None
    sim_events: int = 0  # SimPy events the engine processed (the run's event-engine work)
    numerics: bool = True  # False: a timing-only run (no values computed)
    arg_kinds: Mapping[str, str] = field(default_factory=dict)  # argument name -> its ArgSpec kind

    @property
    def cores(self) -> tuple[int, ...]:
        """The cores the call ran on."""
        return self.plan.cores

    @property
    def microseconds(self) -> float:
        """Simulated time of the run at the target's clock."""
        return self.cycles * 1e6 / self.target.clock_hz

    @property
    def roofline_fraction(self) -> float:
        """Roofline bound over achieved cycles (1.0 would be a perfect run)."""
        return self.roofline.cycles / self.cycles if self.cycles else 0.0

    @property
    def achieved_flops_per_second(self) -> float:
        """Vector element operations per second of simulated time."""
        return self.roofline.total_flops / (self.cycles / self.target.clock_hz) if self.cycles else 0.0

    @property
    def peak_flops_per_second(self) -> float:
        """Peak of the cores used at the precision(s) the plan's tiles compute in."""
        return peak_flops_per_cycle(self.roofline, self.target, len(self.cores)) * self.target.clock_hz

    def summaries(self) -> list[CoreSummary]:
        """Per-core busy / compute / DMA / wait cycles and bytes per region."""
        return core_summaries(self.events, self.cores, self.cycles)

    def summary_text(self) -> str:
        """A human-readable summary: per-core table, bound and limit, FLOP/s, precisions, tiling."""
        return run_summary_text(self)

    def metadata(self) -> dict:
        """Run metadata written into traces (:func:`sim.inspect.trace.run_metadata`)."""
        return run_metadata(self)

    def write_trace(self, path: str | Path) -> Path:
        """Write the trace: Chrome trace JSON (Perfetto, chrome://tracing), or CSV for a ``.csv`` path."""
        return write_trace(path, self.events, self.target.clock_hz, self.metadata())


def staging_areas(target: Target) -> tuple[StagingArea, ...]:
    """The staging levels of ``target`` as plans see them, outermost first: the shared workspace window, then
    the per-core staging scratchpad (allocations aligned to its alignment and the vector width)."""
    stage = target.region(target.staging_region)
    shared = target.region(target.workspace.region)
    ws_lo, ws_hi = target.workspace_range
    vector_width = target.core.vector_width_bytes
    return (StagingArea(shared.name, shared.name, ws_lo, ws_hi - ws_lo, True,
                        max(shared.alignment_bytes, vector_width)),
            StagingArea(stage.name, stage.name, stage.base, stage.size_bytes, False,
                        max(stage.alignment_bytes, vector_width)))


def find_symbol(symbol: object) -> Symbol:
    """The registered kernel symbol ``symbol`` (its kernel, precision and variant); KernelArgError naming close
    names when there is none.  Tools reach the kernel registry through the facade, never directly."""
    return lookup(symbol)


def kernel_symbols() -> list[Symbol]:
    """Every registered kernel symbol, sorted by name."""
    return symbols()


def _cores_of_mask(mask: Any, target: Target) -> tuple[int, ...]:
    if isinstance(mask, bool) or not isinstance(mask, (int, np.integer)):
        raise KernelArgError(f"argument 'core_mask': expected an int bitmask, got {brief(mask)}")
    mask = int(mask)
    if mask <= 0 or mask > target.all_cores_mask:
        text = f"{mask:#x}" if -(1 << 64) < mask < 1 << 64 else brief(mask)
        raise KernelArgError(f"argument 'core_mask': {text} selects no core or a core {target.name} lacks "
                             f"(it has {target.cores} cores: masks 0x1..{target.all_cores_mask:#x})")
    return tuple(i for i in range(target.cores) if mask >> i & 1)


class _TileCounter:
    """The engine's per-tile callback turned into ``progress(phase, done, total)`` calls."""

    def __init__(self, progress: Callable[[str, int, int], None], phase: str, done: int, total: int):
        self.progress, self.phase, self.done, self.total = progress, phase, done, total

    def __call__(self, tiles: int, cycle: int) -> None:
        self.done += tiles
        self.progress(self.phase, self.done, self.total)


def _locked(method: F) -> F:
    """Run ``method`` holding the simulator's lock (see :class:`Simulator` on threads)."""
    @functools.wraps(method)
    def locked(sim: "Simulator", /, *args: Any, **kwargs: Any) -> Any:  # positional-only: self= is a kwarg
        with sim._lock:
            return method(sim, *args, **kwargs)
    return cast(F, locked)


class Simulator:
    """One chip with fresh, zeroed memory at cycle 0.  ``call`` runs kernels on it.

    Threads: a Simulator may be shared by threads.  ``call``, ``bind``, ``plan``,
    ``plan_with_choice``, ``read`` and ``write`` each hold the simulator's lock
    while they run, so they happen one at a time: a ``read`` or ``write`` from
    another thread during a running call waits until the call has finished (or
    rolled back) and sees memory as the call left it, never half-written
    outputs; two calls from two threads run one after the other.  The lock is
    re-entrant, so a ``progress`` callback may read memory from the calling
    thread (a callback that waits for another thread to use the simulator
    deadlocks).  ``m.memory`` accessed directly bypasses the lock.  For calls
    that run in parallel, give each thread its own Simulator.
    """

    def __init__(self, target: str | Path | Target = "FT78NE", *, tiling_tolerance: float = TILING_TOLERANCE):
        # Re-entrant: a locked method calls others (call -> plan_with_choice -> bind), and a progress callback
        # runs inside call on the calling thread.
        self._lock = threading.RLock()
        self.target = load_target(target)
        self.tiling_tolerance = tiling_tolerance
        # Tiling choices already made: (symbol, bound call, tolerance) -> (chosen tiling, priced candidates,
        # source).
        self._tiling_cache: dict[tuple[str, str, float], tuple[dict, tuple, str]] = {}
        # Plans of recent calls (plan key -> plan): a repeated call, or a sweep point, skips planning.
        self._plans: OrderedDict[str, tuple[Callable, Plan, dict]] = OrderedDict()
        self._memos: dict[int, tuple[Plan, dict]] = {}  # id(plan) -> (plan, memo) of the cached plans
        self.memory = AddressSpace(self.target)

    @property
    def tiling_tolerance(self) -> float:
        """Cycles within this fraction of the cheapest candidate tiling tie; ties go to the fewest tiles
        (0: the strictly cheapest)."""
        return self._tiling_tolerance

    @tiling_tolerance.setter
    def tiling_tolerance(self, value: float) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
            raise KernelArgError(f"argument 'tiling_tolerance': expected a fraction in [0, 1), got {brief(value)}")
        self._tiling_tolerance = float(value)

    # -- memory -----------------------------------------------------------------------------------

    @_locked
    def write(self, addr: int, array: Any, core: int | None = None) -> None:
        """Store an array's bytes (C order, little-endian) at ``addr``; private addresses need ``core``.

        The address, the region and the size (from the array's shape and dtype) are checked before the
        array's data is touched: a refused write costs no copy, whatever its size.  Masked arrays are
        refused (their mask would be silently dropped).
        """
        if isinstance(array, np.ma.MaskedArray):
            raise MemoryFault("write: a masked array's mask cannot be stored (only its data would be): pass "
                              "np.ma.getdata(a), or a.filled(value) to decide what masked elements hold")
        try:
            arr = np.asarray(array)
        except (TypeError, ValueError, OverflowError) as e:
            raise MemoryFault(f"write: cannot make an array of {type(array).__name__}: {brief(str(e))}") from None
        if arr.dtype.kind not in "biuf":
            raise MemoryFault(f"write: expected a numeric array, got dtype {arr.dtype}")
        self.memory.write(addr, arr, core=core)

    @_locked
    def read(self, addr: int, shape: Sequence[int] | int, dtype: Any, core: int | None = None) -> np.ndarray:
        """A fresh array decoded from the bytes at ``addr``; private addresses need ``core``.  ``dtype`` is
        required (numpy would read None as float64)."""
        return self.memory.read(addr, shape, checked_dtype(dtype), core=core)

    # -- calls ------------------------------------------------------------------------------------

    @_locked
    def bind(self, symbol: str, /, **kwargs: Any) -> BoundCall:
        """Check a call's symbol and arguments without running it (no layout check)."""
        check_argument_names(kwargs)
        sym = lookup(symbol)
        odd = [k for k in kwargs if not k.isidentifier()]
        if odd:
            raise KernelArgError(f"{symbol}: argument name {brief(odd[0])} is not an identifier")
        if sym.precision not in self.target.precisions:
            raise KernelArgError(f"symbol '{symbol}' computes in {sym.precision}, which {self.target.name} "
                                 f"lacks (it has: {', '.join(self.target.precisions)})")
        args = dict(kwargs)
        if sym.variant == "s":
            if "core" in args:
                raise KernelArgError(f"{symbol}: unexpected argument 'core': shared-memory (_s) symbols run on "
                                     f"'core_mask'")
            cores = _cores_of_mask(args.pop("core_mask", self.target.all_cores_mask), self.target)
            owner = None
        else:
            if "core_mask" in args:
                raise KernelArgError(f"{symbol}: unexpected argument 'core_mask': private-memory (_p) symbols run "
                                     f"on one 'core'")
            core = args.pop("core", 0)
            if isinstance(core, bool) or not isinstance(core, (int, np.integer)) \
                    or not 0 <= int(core) < self.target.cores:
                raise KernelArgError(f"argument 'core': expected a core of {self.target.name} "
                                     f"(0..{self.target.cores - 1}), got {brief(core)}")
            cores = (int(core),)
            owner = int(core)

        def read(addr: int, shape: tuple[int, ...], dtype: np.dtype, name: str = "pointer") -> np.ndarray:
            # A pointer array is layout-checked before it is dereferenced: reading a misaligned or
            # wrong-kind params array would feed the kernel garbage sizes and hide the real error.
            if isinstance(addr, (int, np.integer)) and not isinstance(addr, bool):
                bad = check_buffer(Buffer(name, int(addr), tuple(shape), np.dtype(dtype), "input"),
                                   sym.variant, owner, self.target)
                if bad is not None:
                    raise layout_error([bad])
            try:
                return self.memory.read(addr, shape, dtype, core=owner)
            except MemoryFault as e:
                raise LayoutError(f"buffer '{name}' at {addr:#x} cannot be read: {e}") from None

        return sym.kernel.bind(symbol, sym.precision, sym.variant, cores, args, read)

    def context(self, call: BoundCall) -> PlanContext:
        """What the kernel may know of the chip when planning ``call``."""
        return PlanContext(target=self.target, cores=call.cores, precision=call.precision, variant=call.variant,
                           levels=staging_areas(self.target))

    @_locked
    def plan(self, symbol: str, /, *, tiling: Mapping[str, Any] | None = None, **kwargs: Any) -> tuple[BoundCall, Plan]:
        """Bind, layout-check and plan a call without running it."""
        call, plan, _ = self.plan_with_choice(symbol, tiling=tiling, **kwargs)
        return call, plan

    @_locked
    def plan_with_choice(self, symbol: str, /, *, tiling: Mapping[str, Any] | None = None,
                         progress: Callable[[str, int, int], None] | None = None,
                         **kwargs: Any) -> tuple[BoundCall, Plan, TilingChoice]:
        """Bind, layout-check and plan a call: with ``tiling`` if given, else the cheapest candidate tiling.

        ``progress(phase, done, total)``, when given, hears how the tiling search goes: ``planning tilings``
        (candidates planned of those the kernel lists; a total of 0 while it lists them) and ``pricing tilings``
        (tiles simulated of all the candidates' tiles; a candidate stopped early counts as done).
        """
        call = self.bind(symbol, **kwargs)
        enforce_layout(call, self.target)
        kernel = self.kernel_of(call)
        ctx = self.context(call)
        offers = hasattr(kernel, "tilings")
        if tiling is not None:
            if not isinstance(tiling, Mapping):
                raise KernelArgError(f"argument 'tiling': expected a mapping of tiling keys, got {brief(tiling)}")
            if not offers:
                raise KernelArgError(f"argument 'tiling': {symbol} takes no tiling (it has a single plan)")
            return call, self._lower(kernel, call, replace(ctx, tiling=dict(tiling))), \
                TilingChoice(dict(tiling), "given")
        # Keyed by the bound call, which holds what the kernel read from memory (a params array's sizes).
        key = (symbol, repr(call), self.tiling_tolerance)
        cached = self._tiling_cache.get(key)
        if cached is not None:  # same call as before: same choice, without listing or pricing candidates again
            chosen, priced_list, source = cached
            return call, self._lower(kernel, call, replace(ctx, tiling=chosen)), \
                TilingChoice(chosen, source, priced_list, self.tiling_tolerance if source == "cost model" else 0.0)
        candidates = self._lower_candidates(kernel, call, ctx, progress) if offers else []
        if len(candidates) <= 1:
            if candidates:
                self._tiling_cache[key] = (candidates[0][0], (), "kernel")
                return call, candidates[0][1], TilingChoice(candidates[0][0], "kernel")
            return call, self._lower(kernel, call, ctx), TilingChoice(None, "kernel")
        priced: list[tuple[dict, int | None]] = []
        best: int | None = None  # the fewest cycles so far
        total, done = sum(p.tile_count for _, p in candidates), 0
        for cand, plan in candidates:
            # Timing only: the engine moves no bytes and runs no numerics, so memory is untouched. A candidate
            # still running when it can no longer tie with the best so far is stopped there.
            limit = None if best is None else int(best * (1 + self.tiling_tolerance))
            tick = None
            if progress is not None:
                progress("pricing tilings", done, total)
                tick = _TileCounter(progress, "pricing tilings", done, total)
            cycles = Engine(self.target, self.memory, Recorder(), numerics=False, memo=self._memo(plan),
                            on_tile=tick).run(plan, until_cycles=limit)
            done += plan.tile_count
            priced.append((cand, cycles))
            if cycles is not None and (best is None or cycles < best):
                best = cycles
        if progress is not None:
            progress("pricing tilings", total, total)
        assert best is not None
        tied = [i for i, (_, cycles) in enumerate(priced)
                if cycles is not None and cycles <= best * (1 + self.tiling_tolerance)]
        # Fewest tiles, then fewest cycles, then the kernel's own order.
        pick = min(tied, key=lambda i: (candidates[i][1].tile_count, priced[i][1], i))
        self._tiling_cache[key] = (candidates[pick][0], tuple(priced), "cost model")
        return call, candidates[pick][1], TilingChoice(candidates[pick][0], "cost model", tuple(priced),
                                                      self.tiling_tolerance)

    @staticmethod
    def _plan_key(call: BoundCall, tiling: Mapping[str, Any] | None) -> str:
        """A plan is a function of the bound call (its buffers, attributes, cores) and the tiling only."""
        return repr((call, sorted((tiling or {}).items())))

    def _cached_plan(self, kernel: Any, call: BoundCall, ctx: PlanContext) -> Plan:
        """``kernel.plan(call, ctx)``, reused when the same call was planned with the same tiling before."""
        key = self._plan_key(call, ctx.tiling)
        planner = getattr(kernel.plan, "__func__", kernel.plan)  # a replaced planner must not see old plans
        cached = self._plans.get(key)
        if cached is not None and cached[0] is planner:
            self._plans.move_to_end(key)
            return cached[1]
        plan = kernel.plan(call, ctx)
        self._plans[key] = (planner, plan, {})
        if len(self._plans) > PLAN_CACHE_SIZE:
            self._plans.popitem(last=False)
        self._memos = {id(p): (p, memo) for _, p, memo in self._plans.values()}
        return plan

    def _memo(self, plan: Plan) -> dict | None:
        """What runs of a cached ``plan`` remember (resolved transfers, its roofline); None if not cached."""
        entry = self._memos.get(id(plan))
        return entry[1] if entry is not None and entry[0] is plan else None

    def _roofline(self, plan: Plan) -> Roofline:
        memo = self._memo(plan)
        if memo is None:
            return roofline(plan, self.target)
        if "roofline" not in memo:
            memo["roofline"] = roofline(plan, self.target)
        return memo["roofline"]

    def _lower(self, kernel: Any, call: BoundCall, ctx: PlanContext) -> Plan:
        try:
            return self._cached_plan(kernel, call, ctx)
        except LayoutError as e:
            if getattr(e, "violations", None):
                raise
            raise layout_error([plan_violation(call, self.target, e)]) from None

    def _lower_candidates(self, kernel: Any, call: BoundCall, ctx: PlanContext,
                          progress: Callable[[str, int, int], None] | None = None) -> list[tuple[dict, Plan]]:
        """The kernel's candidate tilings that plan (a candidate that cannot fit is dropped)."""
        out = []
        if progress is not None:
            progress("planning tilings", 0, 0)  # 0 of an unknown number: the kernel is listing its candidates
        cands = list(kernel.tilings(call, ctx))
        for i, cand in enumerate(cands):
            if progress is not None:
                progress("planning tilings", i, len(cands))
            try:
                out.append((dict(cand), self._cached_plan(kernel, call, replace(ctx, tiling=dict(cand)))))
            except LayoutError:
                continue
        if progress is not None:
            progress("planning tilings", len(cands), len(cands))
        return out

    @staticmethod
    def kernel_of(call: BoundCall):
        """The kernel object behind a bound call."""
        return lookup(call.symbol).kernel

    @_locked
    def call(self, symbol: str, /, *, numerics: bool = True, progress: Callable[[int, int], None] | None = None,
             tiling: Mapping[str, Any] | None = None, **kwargs: Any) -> Run:
        """Run ``symbol`` with its C arguments by name; memory is rolled back if anything fails."""
        t0 = time.perf_counter()
        if not isinstance(numerics, (bool, np.bool_)):
            raise KernelArgError(f"call: 'numerics' must be True or False, got {brief(numerics)}")
        if progress is not None and not callable(progress):
            raise KernelArgError(f"call: 'progress' must be a callable or None, got {brief(progress)}")
        call, plan, choice = self.plan_with_choice(symbol, tiling=tiling, **kwargs)
        recorder = Recorder()
        engine = Engine(self.target, self.memory, recorder, numerics=numerics, on_tile=progress,
                        memo=self._memo(plan))
        self.memory.begin()
        try:
            cycles = engine.run(plan)
        except BaseException:
            self.memory.rollback()
            raise
        self.memory.commit()
        return Run(symbol=symbol, target=self.target, call=call, plan=plan, cycles=cycles,
                   events=recorder.events, roofline=self._roofline(plan),
                   wall_seconds=time.perf_counter() - t0, args=dict(kwargs), tiling=choice,
                   sim_events=engine.sim_events, numerics=bool(numerics),
                   arg_kinds={a.name: a.kind for a in self.kernel_of(call).args})
