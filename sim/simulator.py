"""The :class:`Simulator` facade: a chip's memory plus kernel calls that run on it (SPEC section 3).

It also re-exports the kernel registry's public functions (:func:`register_kernel`, :func:`unregister_kernel`,
:func:`registered_kernel`): tools and users reach the registry through the facade.
"""

from __future__ import annotations

import functools
import itertools
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar, cast

import numpy as np

from kernels.base import PlanContext, check_argument_names
from kernels.registry import (
    SHIPPED,
    KernelInfo,
    Symbol,
    entry_point_errors,
    generation,
    kernels,
    lookup,
    register_kernel,  # noqa: F401 (re-exported: sim.register_kernel)
    registered_kernel,  # noqa: F401 (re-exported: sim.registered_kernel)
    symbols,
    unregister_kernel,  # noqa: F401 (re-exported: sim.unregister_kernel)
)
from sim.engine.collector import collector_paused
from sim.engine.engine import Engine, EngineMemo, SimulatedTiming, simulate
from sim.engine.events import Recorder, TraceEvent
from sim.errors import (
    ComputeOutputError,
    KernelArgError,
    KernelDefinitionError,
    LayoutError,
    MemoryFault,
    NestedCallError,
    TimeLimitError,
    brief,
)
from sim.files import tuning_cache as disk_tunings
from sim.inspect.summary import CoreSummary, core_summaries, run_summary_text
from sim.inspect.trace import run_metadata, write_trace
from sim.model.call import BoundCall, Buffer
from sim.model.layout import check_buffer, enforce_layout, fit_violation, layout_error
from sim.model.memory import AddressSpace, checked_dtype
from sim.model.plan import DoesNotFit, Plan
from sim.model.plan_check import check_plan
from sim.model.target import StagingArea, Target
from sim.model.target_loader import load_target
from sim.time_limit import PLANNING_STAGE, checked_time_limit, expired_message, run_within, symbol_text
from sim.timing import Roofline, loop_cycles, peak_flops_per_cycle, roofline, run_lower_bound_cycles
from sim.tuning import TILING_TOLERANCE, Candidate, Progress, TilingCache, TilingChoice, choose_tiling

F = TypeVar("F", bound=Callable[..., Any])

#: Plans a simulator keeps for calls it may see again (least recently used dropped first).
PLAN_CACHE_SIZE = 16
#: Candidate tilings taken from a kernel's ``tilings()`` at most (those it lists beyond are ignored), so that a
#: generator that never ends still ends the search; the shipped kernels list a handful.
MAX_TILING_CANDIDATES = 1024


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
    sim_events: int = 0  # SimPy events the simulation of the plan processed (the event engine's work)
    numerics: bool = True  # False: a timing-only run (no values computed)
    arg_kinds: Mapping[str, str] = field(default_factory=dict)  # argument name -> its ArgSpec kind
    precision_note: str = ""  # what the symbol stores in fp16 and fp32 and computes in (the registry's note)
    kernel_origin: str = ""  # where the symbol's kernel came from (shipped, a file, a module, an entry point)
    # The summaries of the events as they were when last summarised (the text, metadata and trace all need them).
    _summaries: tuple[tuple[int, int, int], list[CoreSummary]] | None = field(default=None, init=False, repr=False,
                                                                              compare=False)

    @property
    def user_kernel(self) -> bool:
        """Whether the symbol's kernel is a user's (registered, or from an installed package), not shipped."""
        return bool(self.kernel_origin) and self.kernel_origin != SHIPPED

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
        key = (id(self.events), len(self.events), self.cycles)
        if self._summaries is None or self._summaries[0] != key:
            self._summaries = (key, core_summaries(self.events, self.cores, self.cycles))
        return list(self._summaries[1])

    def summary_text(self) -> str:
        """A human-readable summary: per-core table, bound and limit, FLOP/s, precisions, tiling."""
        return run_summary_text(self)

    def metadata(self) -> dict:
        """Run metadata written into traces (:func:`sim.inspect.trace.run_metadata`)."""
        return run_metadata(self)

    def write_trace(self, path: str | Path) -> Path:
        """Write the trace: Chrome trace JSON (Perfetto, chrome://tracing), or CSV for a ``.csv`` path."""
        with collector_paused():  # a trace is many small dicts made at once and kept until written
            return write_trace(path, self.events, self.target.clock_hz, self.metadata())


def staging_areas(target: Target) -> tuple[StagingArea, ...]:
    """The staging levels of ``target`` (``staging.levels`` of its file) as plans see them, outermost first:
    each level's window, with allocations in it aligned to its region's alignment and the vector width."""
    vector_width = target.core.vector_width_bytes
    return tuple(StagingArea(level.name, level.region, level.base, level.size_bytes, level.shared,
                             max(target.region(level.region).alignment_bytes, vector_width), level.beside)
                 for level in target.staging)


def find_symbol(symbol: object) -> Symbol:
    """The registered kernel symbol ``symbol`` (its kernel, precision and variant); KernelArgError naming close
    names when there is none.  Tools reach the kernel registry through the facade, never directly."""
    return lookup(symbol)


def kernel_symbols() -> list[Symbol]:
    """Every registered kernel symbol, sorted by name."""
    return symbols()


def registry_generation() -> int:
    """A number that changes whenever a kernel is registered, replaced or unregistered."""
    return generation()


def kernel_infos() -> list[KernelInfo]:
    """Every registered kernel with where it came from (shipped ones first), and its symbols."""
    return kernels()


def kernel_entry_point_errors() -> list[str]:
    """One line per installed ``dspsim.kernels`` entry point that failed to load."""
    return entry_point_errors()


def _checked_bound_call(sym: Symbol, got: Any, cores: tuple[int, ...]) -> BoundCall:
    """What a kernel's ``bind`` returned, once it is a BoundCall of this very call with well-formed buffers (the
    layout check and the plan check rely on them); KernelDefinitionError naming the kernel otherwise."""
    where = f"kernel {sym.kernel.name!r} ({sym.origin}): bind() returned"
    if not isinstance(got, BoundCall):
        raise KernelDefinitionError(f"{where} {brief(got)}, not a sim.model.call.BoundCall")
    want = (sym.name, sym.precision, sym.variant, cores)
    if (got.symbol, got.precision, got.variant, got.cores) != want:
        raise KernelDefinitionError(f"{where} a call of (symbol, precision, variant, cores) = "
                                    f"{brief((got.symbol, got.precision, got.variant, got.cores))}, not the "
                                    f"{brief(want)} it was given")
    if not isinstance(got.buffers, tuple):
        raise KernelDefinitionError(f"{where} buffers {brief(got.buffers)}, not a tuple of Buffer")
    names: set[str] = set()
    for b in got.buffers:
        ok = (isinstance(b, Buffer) and isinstance(b.name, str) and b.role in ("input", "output")
              and isinstance(b.addr, (int, np.integer)) and not isinstance(b.addr, bool)
              and isinstance(b.shape, tuple) and all(isinstance(n, (int, np.integer)) and n >= 0 for n in b.shape)
              and isinstance(b.dtype, np.dtype))
        if not ok:
            raise KernelDefinitionError(f"{where} a malformed buffer {brief(b, 160)} (a Buffer needs a name, an int "
                                        f"address, a tuple shape, a numpy dtype and the role input or output)")
        if b.name in names:
            raise KernelDefinitionError(f"{where} two buffers named {b.name!r}")
        names.add(b.name)
    return got


def _cores_of_mask(mask: Any, target: Target) -> tuple[int, ...]:
    if isinstance(mask, bool) or not isinstance(mask, (int, np.integer)):
        raise KernelArgError(f"argument 'core_mask': expected an int bitmask, got {brief(mask)}")
    mask = int(mask)
    if mask <= 0 or mask > target.all_cores_mask:
        text = f"{mask:#x}" if -(1 << 64) < mask < 1 << 64 else brief(mask)
        raise KernelArgError(f"argument 'core_mask': {text} selects no core or a core {target.name} lacks "
                             f"(it has {target.cores} cores: masks 0x1..{target.all_cores_mask:#x})")
    return tuple(i for i in range(target.cores) if mask >> i & 1)


def _locked(method: F) -> F:
    """Run ``method`` holding the simulator's lock (see :class:`Simulator` on threads)."""
    @functools.wraps(method)
    def locked(sim: Simulator, /, *args: Any, **kwargs: Any) -> Any:  # positional-only: self= is a kwarg
        with sim._lock:
            return method(sim, *args, **kwargs)
    return cast(F, locked)


@dataclass
class CachedPlan:
    """A plan the simulator keeps, with what runs of it remember: the engine's memo (resolved transfers and
    operands, compute cycles) and the plan's roofline once computed."""

    plan: Plan
    engine_memo: EngineMemo = field(default_factory=EngineMemo)
    _roofline: Roofline | None = None
    # The plan's timing once simulated (timing never depends on the bytes): a later call of the same plan
    # reuses it, and a full one only replays its effects on memory.
    timing: SimulatedTiming | None = None

    def roofline(self, target: Target) -> Roofline:
        """The plan's roofline on ``target``, computed once."""
        if self._roofline is None:
            self._roofline = roofline(self.plan, target)
        return self._roofline


class PlanCache:
    """The plans of recent calls by (bound call, tiling), least recently used dropped first: a repeated call,
    or a sweep point, skips planning."""

    def __init__(self, size: int = PLAN_CACHE_SIZE):
        self.size = size
        self._plans: OrderedDict[str, CachedPlan] = OrderedDict()

    @staticmethod
    def key(call: BoundCall, tiling: Mapping[str, Any] | None) -> str:
        """A plan is a function of the bound call (its buffers, attributes, cores) and the tiling only."""
        return repr((call, sorted((tiling or {}).items())))

    def get(self, key: str) -> CachedPlan | None:
        """The entry under ``key`` (now the most recently used), or None."""
        entry = self._plans.get(key)
        if entry is not None:
            self._plans.move_to_end(key)
        return entry

    def put(self, key: str, plan: Plan) -> CachedPlan:
        """Keep ``plan`` under ``key``; returns its entry."""
        entry = self._plans[key] = CachedPlan(plan)
        if len(self._plans) > self.size:
            self._plans.popitem(last=False)
        return entry

    def discard(self, key: str) -> None:
        """Forget the entry under ``key``, if any."""
        self._plans.pop(key, None)

    def clear(self) -> None:
        """Forget every plan."""
        self._plans.clear()


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

    Tuning cache: the tiling the cost model chooses for a call is kept on disk
    (:mod:`sim.files.tuning_cache`, ``$DSPSIM_CACHE_DIR``), so the next process
    making the same call skips the search; ``tuning_cache=False`` neither
    reads nor writes it (the default follows ``$DSPSIM_NO_CACHE``).
    """

    def __init__(self, target: str | Path | Target = "FT78NE", *, tiling_tolerance: float = TILING_TOLERANCE,
                 tuning_cache: bool | None = None):
        # Re-entrant: a locked method calls others (call -> plan_with_choice -> bind), and a progress callback
        # runs inside call on the calling thread.
        self._lock = threading.RLock()
        self.target = load_target(target)
        self.tiling_tolerance = tiling_tolerance
        self._tilings = TilingCache()
        # The on-disk tuning cache (sim.files.tuning_cache): False neither reads nor writes it; None follows
        # $DSPSIM_NO_CACHE (what --no-cache sets, for the worker processes too).
        self.tuning_cache = disk_tunings.enabled_by_default() if tuning_cache is None else bool(tuning_cache)
        self._target_text: str | None = None
        self._plans = PlanCache()
        self._registry_generation = generation()
        self.memory = AddressSpace(self.target)
        self._running: str | None = None  # the symbol of the call running now (a call inside it is refused)

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

        return _checked_bound_call(sym, sym.kernel.bind(symbol, sym.precision, sym.variant, cores, args, read),
                                   cores)

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
                         progress: Progress | None = None,
                         **kwargs: Any) -> tuple[BoundCall, Plan, TilingChoice]:
        """Bind, layout-check and plan a call: with ``tiling`` if given, else the cheapest candidate tiling.

        ``progress(phase, done, total)``, when given, hears how the tiling search goes: ``planning tilings``
        (candidates planned of those the kernel lists; a total of 0 while it lists them) and ``pricing tilings``
        (tiles simulated of all the candidates' tiles; a candidate stopped early counts as done).
        """
        call, entry, choice = self._plan_entry(symbol, tiling, progress, kwargs)
        return call, entry.plan, choice

    @_locked
    def clear_caches(self) -> None:
        """Forget the plans and tiling choices this simulator remembers, so that the next call plans afresh.

        Plans are cached by the bound call and the tiling: after replacing a kernel's planner (as tests do to
        inject a fault), call this so that no plan of the old planner is reused.
        """
        self._plans.clear()
        self._tilings.clear()

    def _forget_plans_of_replaced_kernels(self) -> None:
        """Plans are cached by the bound call, which names a symbol: when the registry changed (a kernel
        registered, replaced or unregistered), the plans and choices of the kernels it held go."""
        now = generation()
        if now != self._registry_generation:
            self._plans.clear()
            self._tilings.clear()
            self._registry_generation = now

    def _plan_entry(self, symbol: str, tiling: Mapping[str, Any] | None, progress: Progress | None,
                    kwargs: Mapping[str, Any]) -> tuple[BoundCall, CachedPlan, TilingChoice]:
        call = self.bind(symbol, **kwargs)
        self._forget_plans_of_replaced_kernels()
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
        cached = self._tilings.get(symbol, call, self.tiling_tolerance)
        if cached is not None:  # same call as before: same choice, without listing or pricing candidates again
            return call, self._lower(kernel, call, replace(ctx, tiling=cached.tiling)), cached
        disk_key = self._disk_key(kernel, call) if offers and self.tuning_cache else None
        if disk_key is not None:
            stored = self._stored_choice(disk_key, kernel, call, ctx)
            if stored is not None:
                self._tilings.put(symbol, call, self.tiling_tolerance, stored[1])
                return call, stored[0], stored[1]
        candidates = self._lower_candidates(kernel, call, ctx, progress) if offers else []
        if len(candidates) <= 1:
            if candidates:
                choice = TilingChoice(candidates[0][0], "kernel")
                self._tilings.put(symbol, call, self.tiling_tolerance, choice)
                return call, candidates[0][1], choice
            return call, self._lower(kernel, call, ctx), TilingChoice(None, "kernel")
        pick, choice, timing = choose_tiling(
            [Candidate(c, e.plan, e.engine_memo, run_lower_bound_cycles(e.roofline(self.target), self.target))
             for c, e in candidates],
            self.target, self.memory, self.tiling_tolerance, progress)
        candidates[pick][1].timing = timing
        for i, (tiling_i, _) in enumerate(candidates):
            if i != pick:  # a layer's losing plans would keep their hundreds of thousands of objects alive
                self._plans.discard(PlanCache.key(call, tiling_i))
        self._tilings.put(symbol, call, self.tiling_tolerance, choice)
        if disk_key is not None:
            disk_tunings.store(disk_key, {"symbol": symbol, "target": self.target.name, "tiling": choice.tiling,
                                          "tolerance": choice.tolerance,
                                          "candidates": [[c, cycles] for c, cycles in choice.candidates]})
        return call, candidates[pick][1], choice

    def _disk_key(self, kernel: Any, call: BoundCall) -> str | None:
        """The on-disk tuning cache's key of this call's choice, or None if it has none (no stable identity)."""
        kernel_id = disk_tunings.kernel_fingerprint(kernel)
        if kernel_id is None:
            return None
        if self._target_text is None:  # the parsed target, wherever its file lies: its content is what prices
            self._target_text = repr(replace(self.target, path=""))
        return disk_tunings.entry_key(self._target_text, call.symbol, repr(call), self.tiling_tolerance, kernel_id)

    def _stored_choice(self, key: str, kernel: Any, call: BoundCall,
                       ctx: PlanContext) -> tuple[CachedPlan, TilingChoice] | None:
        """The plan and choice the tuning cache holds for ``key``; None if it holds none or its tiling no longer
        plans (a stale or edited entry: ignored, never an error; the search that follows overwrites it)."""
        doc = disk_tunings.load(key)
        if doc is None:
            return None
        try:
            entry = self._lower(kernel, call, replace(ctx, tiling=dict(doc["tiling"])))
        except Exception:  # noqa: BLE001 (a hand-edited or stale tiling the kernel refuses: search instead)
            return None
        candidates = tuple((dict(c), cycles) for c, cycles in doc["candidates"])
        return entry, TilingChoice(dict(doc["tiling"]), "cost model", candidates, doc["tolerance"], 0, True)

    @_locked
    def plan_bound(self, call: BoundCall, tiling: Mapping[str, Any] | None = None) -> Plan:
        """Plan an already bound call with ``tiling`` (None: the kernel's default plan), without a tiling search;
        a tiling that does not fit raises the ``scratchpad-fit`` LayoutError (``dspsim validate`` uses it)."""
        self._forget_plans_of_replaced_kernels()
        ctx = self.context(call)
        return self._lower(self.kernel_of(call), call, replace(ctx, tiling=dict(tiling) if tiling else None)).plan

    def _lower(self, kernel: Any, call: BoundCall, ctx: PlanContext) -> CachedPlan:
        """``kernel.plan(call, ctx)``, reused when the same call was planned with the same tiling before; a
        tiling that does not fit becomes the ``scratchpad-fit`` layout violation."""
        key = PlanCache.key(call, ctx.tiling)
        entry = self._plans.get(key)
        if entry is not None:
            return entry
        try:
            plan = kernel.plan(call, ctx)
        except DoesNotFit as e:
            raise layout_error([fit_violation(call, self.target, e)]) from None
        except LayoutError as e:  # a kernel not yet moved to DoesNotFit: counts against the vector level
            if getattr(e, "violations", None):
                raise
            raise layout_error([fit_violation(call, self.target, e)]) from None
        # Before anything runs it (the cost model's timing-only runs included), once per plan: cached plans passed.
        check_plan(plan, call, self.target, ctx.levels,
                   (ctx.vector_level,) + ((ctx.scalar_level,) if ctx.scalar_level is not None else ()), kernel.name,
                   functools.partial(loop_cycles, core=self.target.core))
        return self._plans.put(key, plan)

    def _lower_candidates(self, kernel: Any, call: BoundCall, ctx: PlanContext,
                          progress: Progress | None = None) -> list[tuple[dict, CachedPlan]]:
        """The kernel's candidate tilings that plan (a candidate that cannot fit is dropped)."""
        out = []
        if progress is not None:
            progress("planning tilings", 0, 0)  # 0 of an unknown number: the kernel is listing its candidates
        try:
            cands = list(itertools.islice(kernel.tilings(call, ctx), MAX_TILING_CANDIDATES))
        except DoesNotFit as e:  # no candidate can fit at all (a chip without the level the kernel needs)
            raise layout_error([fit_violation(call, self.target, e)]) from None
        for i, cand in enumerate(cands):
            if progress is not None:
                progress("planning tilings", i, len(cands))
            try:
                out.append((dict(cand), self._lower(kernel, call, replace(ctx, tiling=dict(cand)))))
            except LayoutError:
                continue
        if progress is not None:
            progress("planning tilings", len(cands), len(cands))
        return out

    def _reserve_outputs(self, call: BoundCall) -> None:
        """Each output buffer's pages as one run of memory, where none of them exists yet (address space only):
        a large output written a tile at a time is then saved, viewed and copied in single operations."""
        owner = call.cores[0] if call.variant == "p" else None
        for b in call.buffers:
            if b.role == "output":
                self.memory.reserve(b.addr, b.size_bytes, core=owner)

    def _run_plan(self, entry: CachedPlan, call: BoundCall, numerics: bool,
                  progress: Callable[[int, int], None] | None, kernel: str) -> SimulatedTiming:
        """The timing of ``entry``'s plan, simulated now unless it was before; its numerics run too when
        ``numerics`` (simulated, or replayed from the effects the simulation recorded).  The caller journals
        memory (:meth:`_journaled_call`) and rolls it back if this fails."""
        timing = entry.timing
        if numerics:
            self._reserve_outputs(call)
        try:
            if timing is None:
                timing = simulate(entry.plan, self.target, self.memory, numerics=numerics, memo=entry.engine_memo,
                                  on_tile=progress)
                assert timing is not None  # run to the end (no until_cycles)
                entry.timing = timing
            elif numerics:  # simulated before (by the tiling search or an earlier call): only the bytes move now
                Engine(self.target, self.memory, Recorder(), on_tile=progress,
                       memo=entry.engine_memo).replay(timing.effects)
        except ComputeOutputError as e:  # the engine knows the core and the tile: name the kernel and phase too
            raise e.located(kernel, _phase_of(entry.plan, e.core, e.tile_object)) from None
        return timing

    def _plan_and_run(self, symbol: str, tiling: Mapping[str, Any] | None, numerics: bool,
                      progress: Callable[[int, int], None] | None, kwargs: Mapping[str, Any],
                      stage: list[str]) -> tuple[BoundCall, CachedPlan, TilingChoice, SimulatedTiming]:
        """Plan the call (``stage[0]`` says so), then run it (and ``stage[0]`` says that)."""
        call, entry, choice = self._plan_entry(symbol, tiling, None, kwargs)
        stage[0] = "running its plan"
        return call, entry, choice, self._run_plan(entry, call, numerics, progress, self.kernel_of(call).name)

    def _journaled_call(self, symbol: str, tiling: Mapping[str, Any] | None, numerics: bool,
                        progress: Callable[[int, int], None] | None, time_limit: float | None,
                        kwargs: Mapping[str, Any]) -> tuple[BoundCall, CachedPlan, TilingChoice, SimulatedTiming]:
        """Plan and run a call within its time limit, every byte written meanwhile journaled (a ``write`` from
        its progress callback included) and rolled back if anything fails.  The journal is begun, committed and
        rolled back outside the time limit's watch, so that its interruption never lands in a rollback."""
        stage = [PLANNING_STAGE]

        self.memory.begin()
        try:
            got = run_within(time_limit, lambda: expired_message(symbol, cast(float, time_limit), stage[0]),
                             self._plan_and_run, symbol, tiling, numerics, progress, kwargs,
                             stage)
        except BaseException as e:
            self.memory.rollback()
            if isinstance(e, TimeLimitError):  # stopped anywhere: keep no plan or choice it may have half made
                self._plans.clear()
                self._tilings.clear()
            raise
        self.memory.commit()
        return got

    @staticmethod
    def kernel_of(call: BoundCall):
        """The kernel object behind a bound call."""
        return lookup(call.symbol).kernel

    @_locked
    def call(self, symbol: str, /, *, numerics: bool = True, progress: Callable[[int, int], None] | None = None,
             tiling: Mapping[str, Any] | None = None, time_limit_seconds: float | None = None,
             **kwargs: Any) -> Run:
        """Run ``symbol`` with its C arguments by name; memory is rolled back if anything fails.

        ``time_limit_seconds`` (None: no limit) bounds the call's wall-clock time, its planning and tiling
        search included: past it the call is interrupted (:mod:`sim.time_limit`) and raises TimeLimitError.
        ``progress(tiles, cycle)`` hears the tiles as they run; it may ``read`` memory (and a ``write`` from it
        is rolled back with the call's own writes if the call fails), but a ``call`` from it on this Simulator
        is refused with NestedCallError: the outer call's rollback must cover every byte written during it.
        """
        t0 = time.perf_counter()
        if not isinstance(numerics, (bool, np.bool_)):
            raise KernelArgError(f"call: 'numerics' must be True or False, got {brief(numerics)}")
        if progress is not None and not callable(progress):
            raise KernelArgError(f"call: 'progress' must be a callable or None, got {brief(progress)}")
        limit = checked_time_limit(time_limit_seconds)
        if self._running is not None:
            raise NestedCallError(f"call: {symbol_text(symbol)} was called while {self._running} runs on the same "
                                  f"Simulator (from its progress callback): a call cannot run inside another, whose "
                                  f"rollback must cover every byte written during it; make the call after the "
                                  f"running one returns, or on another Simulator")
        self._running = symbol_text(symbol)
        try:
            with collector_paused():
                call, entry, choice, timing = self._journaled_call(symbol, tiling, bool(numerics), progress, limit,
                                                                   kwargs)
        finally:
            self._running = None
        sym = lookup(call.symbol)
        plan = entry.plan
        return Run(symbol=symbol, target=self.target, call=call, plan=plan, cycles=timing.cycles,
                   events=list(timing.events), roofline=entry.roofline(self.target),
                   wall_seconds=time.perf_counter() - t0, args=dict(kwargs), tiling=choice,
                   sim_events=timing.sim_events, numerics=bool(numerics),
                   arg_kinds={a.name: a.kind for a in sym.kernel.args}, precision_note=sym.precision_note,
                   kernel_origin=sym.origin)


def _phase_of(plan: Plan, core: int | None, tile: object) -> str | None:
    """The name of the phase of ``plan`` whose tiles on ``core`` include ``tile`` (the object), or None."""
    if core is None:
        return None
    for phase in plan.phases:
        if any(t is tile for t in phase.tiles.get(core, ())):
            return phase.name
    return None
