"""The :class:`Simulator` facade: a chip's memory plus kernel calls that run on it (SPEC section 3).

It also re-exports the kernel registry's public functions (:func:`register_kernel`, :func:`unregister_kernel`,
:func:`registered_kernel`): tools and users reach the registry through the facade.
"""

from __future__ import annotations

import functools
import math
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol, TypeVar, cast

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
from sim.callbacks import check_callback
from sim.engine.collector import collector_paused
from sim.engine.engine import Engine, SimulatedTiming, simulate
from sim.engine.events import Recorder
from sim.errors import (
    ComputeOutputError,
    DeadlockError,
    E,
    KernelArgError,
    KernelCodeError,
    KernelDefinitionError,
    LayoutError,
    MemoryFault,
    NestedCallError,
    TimeLimitError,
    brief,
    in_kernel_code,
)
from sim.files import tuning_cache as disk_tunings
from sim.inspect.run import Run
from sim.model.call import BoundCall, Buffer
from sim.model.layout import check_buffer, enforce_layout, layout_error
from sim.model.memory import AddressSpace, checked_dtype
from sim.model.plan import Plan
from sim.model.target import Target
from sim.model.target_loader import load_target
from sim.plan_cache import CachedPlan
from sim.planning import CallPlanner, kernel_of, staging_areas  # noqa: F401 (staging_areas re-exported)
from sim.time_limit import PLANNING_STAGE, checked_time_limit, expired_message, run_within, symbol_text
from sim.tuning import TILING_TOLERANCE, Progress, TilingChoice

F = TypeVar("F", bound=Callable[..., Any])


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


class RunsOnSimulator(Protocol):
    """What :meth:`Simulator.run_program` takes: a program (``sim.program.load_program(path)``), which knows how
    to run itself on a simulator."""

    def run(self, simulator: Simulator, **options: Any) -> Any:
        """Run on ``simulator``; return the program's run."""
        ...


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
    deadlocks).  ``m.memory`` accessed directly bypasses the lock; ``with
    m.exclusive():`` holds it around several operations (a program holds it
    from its first call to its last).  For calls that run in parallel, give
    each thread its own Simulator.

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
        # The on-disk tuning cache (sim.files.tuning_cache): False neither reads nor writes it; None follows
        # $DSPSIM_NO_CACHE (what --no-cache sets, for the worker processes too).
        if tuning_cache is not None and not isinstance(tuning_cache, (bool, np.bool_)):
            raise KernelArgError(f"Simulator: 'tuning_cache': expected True, False or None, got {brief(tuning_cache)}")
        self.tuning_cache = disk_tunings.enabled_by_default() if tuning_cache is None else bool(tuning_cache)
        self._registry_generation = generation()
        self.memory = AddressSpace(self.target)
        # The planner reads the two settings through a weak reference: a closure over self would make a reference
        # cycle, and a dropped simulator (its memory and plans) would wait for the cyclic collector.
        me = weakref.ref(self)
        self._planner = CallPlanner(self.target, self.memory, lambda: _alive(me).tiling_tolerance,
                                    lambda: _alive(me).tuning_cache)
        self._plans = self._planner.plans  # the plans of recent calls (tests look inside)
        #: Called as ``before_bind_read(addr, size_bytes, core)`` just before a kernel's binding reads memory (a
        #: pointer table such as BatchNormGrad's params array), after the table's layout check; ``core`` is the
        #: owner of private memory (None for shared).  The run-config tools place a config's data there on
        #: demand, so that a table from a ``.npy`` file is in memory before it is read.  None: nothing is called.
        self.before_bind_read: Callable[[int, int, int | None], None] | None = None
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
                if self.before_bind_read is not None:
                    self.before_bind_read(int(addr), math.prod(tuple(shape)) * np.dtype(dtype).itemsize, owner)
            try:
                return self.memory.read(addr, shape, dtype, core=owner)
            except MemoryFault as e:
                raise LayoutError(f"buffer '{name}' at {addr:#x} cannot be read: {e}") from None

        bound = in_kernel_code(getattr(sym.kernel, "name", None), "bind", sym.kernel.bind, symbol, sym.precision,
                               sym.variant, cores, args, read)
        return _checked_bound_call(sym, bound, cores)

    def context(self, call: BoundCall) -> PlanContext:
        """What the kernel may know of the chip when planning ``call``."""
        return self._planner.context(call)

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
        check_callback(progress, "plan_with_choice", "progress", "(phase, done, total)", 3)
        call, entry, choice = self._plan_entry(symbol, tiling, progress, kwargs)
        return call, entry.plan, choice

    @_locked
    def clear_caches(self) -> None:
        """Forget the plans and tiling choices this simulator remembers, so that the next call plans afresh.

        Plans are cached by the bound call and the tiling: after replacing a kernel's planner (as tests do to
        inject a fault), call this so that no plan of the old planner is reused.  The views and replay programs the
        memory keeps for repeat calls go too (they hold the forgotten plans' effects).
        """
        self._planner.clear()
        self.memory.forget_kept()

    def _forget_plans_of_replaced_kernels(self) -> None:
        """Plans are cached by the bound call, which names a symbol: when the registry changed (a kernel
        registered, replaced or unregistered), the plans and choices of the kernels it held go."""
        now = generation()
        if now != self._registry_generation:
            self._planner.clear()
            self._registry_generation = now

    def _plan_entry(self, symbol: str, tiling: Mapping[str, Any] | None, progress: Progress | None,
                    kwargs: Mapping[str, Any], bound: BoundCall | None = None
                    ) -> tuple[BoundCall, CachedPlan, TilingChoice]:
        """Bind and layout-check the call (``bound``: bound and checked already), then plan it."""
        if bound is None:
            call = self.bind(symbol, **kwargs)
            self._forget_plans_of_replaced_kernels()
            enforce_layout(call, self.target)
        else:
            call = bound
            self._forget_plans_of_replaced_kernels()
        planned = self._planner.plan_call(call, tiling, progress)
        return call, planned.entry, planned.choice

    def _disk_key(self, kernel: Any, call: BoundCall) -> str | None:
        """The on-disk tuning cache's key of this call's choice (no keys fixed), or None if it has none."""
        return self._planner.disk_key(kernel, call)

    @_locked
    def plan_bound(self, call: BoundCall, tiling: Mapping[str, Any] | None = None) -> Plan:
        """Plan an already bound call with ``tiling`` (None: the tiling the search chooses, the tuning cache
        honoured; a partial one: completed by it); a tiling that does not fit raises the ``scratchpad-fit``
        LayoutError."""
        return self.plan_bound_with_choice(call, tiling)[0]

    @_locked
    def plan_bound_with_choice(self, call: BoundCall, tiling: Mapping[str, Any] | None = None,
                               progress: Progress | None = None) -> tuple[Plan, TilingChoice]:
        """:meth:`plan_bound` and how the tiling was chosen (what ``dspsim validate`` plans: the very plan a
        call would run, no numerics, no simulation when the choice is in the tuning cache); ``progress`` as
        :meth:`plan_with_choice` takes it."""
        self._forget_plans_of_replaced_kernels()
        with collector_paused():
            planned = self._planner.plan_call(call, tiling, progress)
        return planned.entry.plan, planned.choice

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
            # The tiles compute IEEE results as the chip does, without numpy's warnings of overflow, invalid and
            # divide (which a caller's warning filters would turn into errors from inside a kernel); the caller's
            # progress callback hears the tiles under the caller's own settings.
            tick = _under_errstate(progress, np.geterr()) if progress is not None else None
            with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
                if timing is None:
                    timing = simulate(entry.plan, self.target, self.memory, numerics=numerics, on_tile=tick)
                    assert timing is not None  # run to the end (no until_cycles)
                    entry.timing = timing
                elif numerics:  # simulated before (by the tiling search or an earlier call): only the bytes move
                    Engine(self.target, self.memory, Recorder(), on_tile=tick).replay(timing.effects)
        except DeadlockError as raised:  # (the engine does not know the kernel)
            raise DeadlockError(_original(raised).detail, kernel=kernel) from None
        except ComputeOutputError as raised:  # the engine knows the core and the tile: name the kernel and phase too
            out = _original(raised)
            raise out.located(kernel, _phase_of(entry.plan, out.core, out.tile_object)) from None
        except MemoryFault as raised:
            fault = _original(raised)
            if fault.tile_object is None:
                raise
            raise fault.located(kernel, _phase_of(entry.plan, fault.core, fault.tile_object)) from None
        except KernelCodeError as raised:
            got = _original(raised)
            if got.kernel is not None or got.tile_object is None or got.error is None:
                raise
            # A compute's own exception (sim.engine.results): named by its kernel and phase here.
            tile = got.tile_object
            phase = _phase_of(entry.plan, got.core, tile)
            err = KernelCodeError(kernel, "compute", got.error, f", core {got.core}, tile {got.tile}, phase {phase!r}")
            err.core, err.tile, err.phase, err.tile_object = got.core, got.tile, phase, tile
            raise err from got.error
        return timing

    def _plan_and_run(self, symbol: str, tiling: Mapping[str, Any] | None, numerics: bool,
                      progress: Callable[[int, int], None] | None, kwargs: Mapping[str, Any],
                      stage: list[str], bound: BoundCall | None
                      ) -> tuple[BoundCall, CachedPlan, TilingChoice, SimulatedTiming]:
        """Plan the call (``stage[0]`` says so), then run it (and ``stage[0]`` says that)."""
        call, entry, choice = self._plan_entry(symbol, tiling, None, kwargs, bound)
        stage[0] = "running its plan"
        return call, entry, choice, self._run_plan(entry, call, numerics, progress, self.kernel_of(call).name)

    def _journaled_call(self, symbol: str, tiling: Mapping[str, Any] | None, numerics: bool,
                        progress: Callable[[int, int], None] | None, time_limit: float | None,
                        kwargs: Mapping[str, Any], bound: BoundCall | None,
                        result: Callable[[BoundCall, CachedPlan, TilingChoice, SimulatedTiming], Run]) -> Run:
        """Plan and run a call within its time limit, every byte written meanwhile journaled (a ``write`` from
        its progress callback included) and rolled back if anything fails; ``result`` makes its Run before the
        journal is committed, so that a call interrupted (Ctrl-C) while its Run is made rolls back as well.  The
        journal is begun, committed and rolled back outside the time limit's watch, so that its interruption
        never lands in a rollback."""
        stage = [PLANNING_STAGE]

        self.memory.begin()
        try:
            got = run_within(time_limit, lambda: expired_message(symbol, cast(float, time_limit), stage[0]),
                             self._plan_and_run, symbol, tiling, numerics, progress, kwargs,
                             stage, bound)
            run = result(*got)
        except BaseException as e:
            self.memory.rollback()
            if isinstance(e, TimeLimitError):  # stopped anywhere: keep no plan or choice it may have half made
                self._planner.clear()
            raise
        self.memory.commit()
        return run

    @staticmethod
    def kernel_of(call: BoundCall) -> Any:
        """The kernel object behind a bound call."""
        return kernel_of(call)

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
        return self._call(symbol, numerics, progress, tiling, time_limit_seconds, kwargs, None)

    @_locked
    def run_bound(self, call: BoundCall, args: Mapping[str, Any], *, numerics: bool = True,
                  progress: Callable[[int, int], None] | None = None, tiling: Mapping[str, Any] | None = None,
                  time_limit_seconds: float | None = None) -> Run:
        """:meth:`call` of a call bound (from ``args``, its C arguments by name) and layout-checked already: the
        run pipeline's last stage (:mod:`sim.run.runner`), which binds and checks a run-config's call once."""
        return self._call(call.symbol, numerics, progress, tiling, time_limit_seconds, args, call)

    def exclusive(self) -> AbstractContextManager[Any]:
        """The simulator's lock as a ``with`` block: what runs inside it is one operation to other threads, no
        call, read or write of theirs in between (:func:`sim.program.run_program` holds it for a whole program,
        whose rollback must not undo another thread's write).  Re-entrant."""
        return self._lock

    @_locked
    def run_program(self, program: RunsOnSimulator, **options: Any) -> Any:
        """Run a program (``sim.program.load_program(path)``: a chain of calls over tensors, docs/programs.md) on
        this simulator's memory: its tensors planned, every call checked before any runs (a refusal leaves
        memory as it was), its data placed, its calls run back to back.  Returns its
        ``sim.program.ProgramRun`` (per-call table, one trace, the total cycles); ``options`` are
        ``sim.program.run_program``'s."""
        return program.run(self, **options)

    def _call(self, symbol: str, numerics: bool, progress: Callable[[int, int], None] | None,
              tiling: Mapping[str, Any] | None, time_limit_seconds: float | None, kwargs: Mapping[str, Any],
              bound: BoundCall | None) -> Run:
        """:meth:`call` (``bound``: the call bound and layout-checked already)."""
        t0 = time.perf_counter()
        if not isinstance(numerics, (bool, np.bool_)):
            raise KernelArgError(f"call: 'numerics' must be True or False, got {brief(numerics)}")
        check_callback(progress, "call", "progress", "(tiles, cycle)", 2)
        limit = checked_time_limit(time_limit_seconds)
        if self._running is not None:
            raise NestedCallError(f"call: {symbol_text(symbol)} was called while {self._running} runs on the same "
                                  f"Simulator (from its progress callback): a call cannot run inside another, whose "
                                  f"rollback must cover every byte written during it; make the call after the "
                                  f"running one returns, or on another Simulator")
        self._running = symbol_text(symbol)
        try:
            # The Run is made inside the pause too: its roofline and events are objects the run keeps.
            def result(call: BoundCall, entry: CachedPlan, choice: TilingChoice, timing: SimulatedTiming) -> Run:
                sym = lookup(call.symbol)
                return Run(symbol=symbol, target=self.target, call=call, plan=entry.plan, cycles=timing.cycles,
                           events=list(timing.events), roofline=entry.roofline(self.target),
                           wall_seconds=time.perf_counter() - t0, args=dict(kwargs), tiling=choice,
                           sim_events=timing.sim_events, numerics=bool(numerics),
                           arg_kinds={a.name: a.kind for a in sym.kernel.args}, precision_note=sym.precision_note,
                           kernel_origin=sym.origin, user_kernel=bool(sym.origin) and sym.origin != SHIPPED)

            with collector_paused():
                return self._journaled_call(symbol, tiling, bool(numerics), progress, limit, kwargs, bound, result)
        finally:
            self._running = None


def _alive(ref: weakref.ReferenceType[Simulator]) -> Simulator:
    """The simulator ``ref`` refers to (its planner runs only inside one of its calls, so it is alive)."""
    sim = ref()
    assert sim is not None
    return sim


def _under_errstate(progress: Callable[[int, int], None], settings: Any) -> Callable[[int, int], None]:
    """``progress`` called under numpy's floating-point ``settings`` (``np.geterr()`` of the caller, outside the
    tiles' own)."""
    def tick(tiles: int, cycle: int) -> None:
        with np.errstate(**settings):
            progress(tiles, cycle)
    return tick


def _original(e: E) -> E:
    """``e`` itself, or the exception it copies: SimPy re-raises a failed process's exception as a new one of the
    same type and message, the original (with its attributes) as its cause."""
    cause = e.__cause__
    return cause if type(cause) is type(e) and cause.args == e.args else e


def _phase_of(plan: Plan, core: int | None, tile: object) -> str | None:
    """The name of the phase of ``plan`` whose tiles on ``core`` include ``tile`` (the object), or None."""
    if core is None:
        return None
    for phase in plan.phases:
        if any(t is tile for t in phase.tiles.get(core, ())):
            return phase.name
    return None
