"""Progress bars for long work (tqdm, on a terminal only): placing data, the tiling search, the run, writing;
the phases of sweeps and calibrations.

A bar appears once its phase has taken more than a second and only when the
stream is a terminal, so quick runs, pipes, files and CI logs stay silent.
Each bar names its phase.  :meth:`sim.simulator.Simulator.call` accepts
``progress=callable(tiles_done, cycle)`` (the engine calls it after each
tile's compute); :meth:`sim.simulator.Simulator.plan_with_choice` and
:func:`sim.run.runner.prepare` accept ``progress=callable(phase, done, total)``,
which :class:`PhaseProgress` draws; sweeps and calibrations draw each of their phases with a
:class:`PhaseBar` over it.
"""

from __future__ import annotations

import io
import os
import sys
import threading
import time
from typing import IO, Any, cast

from sim.config.run_config import RunConfig
from sim.errors import TimeLimitError
from sim.model.call import BoundCall
from sim.model.layout import enforce_layout
from sim.run.runner import Bound, bound_call, execute, place_rest
from sim.simulator import Run, Simulator
from sim.time_limit import PLANNING_STAGE, expired_message, run_within

#: Seconds a run must last before its bar appears.
DELAY_SECONDS = 1.0


def is_terminal(stream: IO[str] | None) -> bool:
    """Whether ``stream`` is an interactive terminal."""
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except (OSError, ValueError):
        return False


def _columns(stream: IO[str]) -> int:
    """The terminal's width, 0 when it reports none (a pseudo-terminal never sized, as under ``script``)."""
    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        return 0


class RunProgress:
    """The callback ``Simulator.call(progress=...)`` expects, drawing a tqdm bar on ``stream``.

    Use it as a context manager so that the bar is closed (and erased) when the
    run ends or fails.
    """

    def __init__(self, total: int | None, stream: IO[str] | None = None, delay: float = DELAY_SECONDS,
                 label: str = "simulating", mininterval: float = 0.2):
        from tqdm import tqdm

        self.stream = stream if stream is not None else sys.stderr
        self.cycle = 0
        # Follow the terminal's width; a terminal that reports width 0 would get an empty bar: use 80x24.
        sized = _columns(self.stream) > 0
        self._bar = tqdm(total=total, desc=label, unit="tile", file=self.stream, delay=delay, leave=False,
                         dynamic_ncols=sized, ncols=None if sized else 80, nrows=None if sized else 24,
                         mininterval=mininterval)

    def __call__(self, tiles_done: int, cycle: int) -> None:
        """Advance by ``tiles_done`` tiles; the simulation has reached ``cycle``."""
        self.cycle = max(self.cycle, int(cycle))
        self._bar.set_postfix_str(f"cycle {self.cycle:,}", refresh=False)
        self._bar.update(tiles_done)

    def close(self) -> None:
        """Remove the bar."""
        self._bar.close()

    def __enter__(self) -> RunProgress:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


#: What a phase counts, for its bar's rate.
PHASE_UNITS = {"placing data": "array", "planning tilings": "tiling", "pricing tilings": "tile",
               "writing outputs": "file"}


class PhaseProgress:
    """``progress(phase, done, total)`` drawn as one tqdm bar per phase on ``stream`` (a terminal).

    A phase's bar appears once the phase has lasted ``delay`` seconds, even in
    the middle of one long step (a background ticker looks every
    ``mininterval`` seconds and keeps the elapsed time moving), and is removed
    when the next phase starts or on :meth:`close`.  A total of 0 means not
    known yet.  Use it as a context manager.
    """

    def __init__(self, stream: IO[str] | None = None, delay: float = DELAY_SECONDS, mininterval: float = 0.2,
                 units: dict[str, str] | None = None):
        self.stream = stream if stream is not None else sys.stderr
        self.delay, self.mininterval = delay, mininterval
        self.units = {**PHASE_UNITS, **(units or {})}
        self._note: str | None = None
        self.phases: list[str] = []  # every phase heard of, in order (for tests and logs)
        self._lock = threading.Lock()
        self._bar: Any = None
        self._phase: str | None = None
        self._started = self._drawn = self._started_wall = 0.0
        self._done = self._total = 0
        self._stop = threading.Event()
        self._ticker = threading.Thread(target=self._tick, name="dspsim-progress", daemon=True)
        self._ticker.start()

    def __call__(self, phase: str, done: int, total: int, note: str | None = None) -> None:
        """The phase ``phase`` has done ``done`` of ``total`` steps; ``note``, when given, is shown after the bar."""
        with self._lock:
            now = time.monotonic()
            if phase != self._phase:
                self._close_bar()
                self._phase, self._started, self._started_wall = phase, now, time.time()
                self.phases.append(phase)
                self._note = None
            self._done, self._total = int(done), int(total)
            if note is not None:
                self._note = note
            if now - self._drawn >= self.mininterval or done == total:
                self._show(now)

    def _show(self, now: float) -> None:
        """Open the bar once the phase is old enough; bring it up to date (with the lock held)."""
        if self._phase is None:
            return
        if self._bar is None:
            if now - self._started < self.delay:
                return
            from tqdm import tqdm
            sized = _columns(self.stream) > 0
            self._bar = tqdm(total=self._total or None, desc=self._phase, file=self.stream, leave=False,
                             dynamic_ncols=sized, ncols=None if sized else 80, nrows=None if sized else 24,
                             mininterval=0, initial=self._done, unit=self.units.get(self._phase, "step"))
            self._bar.start_t = self._started_wall  # the elapsed time is the phase's, not the bar's
        self._bar.total = self._total or None
        self._bar.n = self._done
        if self._note is not None:
            self._bar.set_postfix_str(self._note, refresh=False)
        self._bar.refresh()
        self._drawn = now

    def _tick(self) -> None:
        while not self._stop.wait(self.mininterval):
            with self._lock:
                self._show(time.monotonic())

    def end_phase(self) -> None:
        """The current phase is over: remove its bar (the next call starts a new one)."""
        with self._lock:
            self._close_bar()
            self._phase = None

    def _close_bar(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def close(self) -> None:
        """Stop the ticker and remove the bar."""
        self._stop.set()
        self._ticker.join()
        self.end_phase()

    def __enter__(self) -> PhaseProgress:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class PhaseBar:
    """One named phase of a long command (a sweep, a calibration) drawn on ``stream`` when it is a terminal,
    after the phase has lasted ``delay`` seconds (default :data:`DELAY_SECONDS`); a no-op otherwise.

    A :class:`PhaseProgress` with a single phase, started on the first :meth:`advance` (or :meth:`start`): a
    caller that forks worker processes starts the bar after forking, so that no thread of the bar's is
    running while the process is copied.  Use it as a context manager so that the bar is closed (and
    erased) when the phase ends or fails.
    """

    def __init__(self, label: str, stream: IO[str] | None, total: int | None = None, unit: str = "step",
                 delay: float | None = None):
        self.label = label
        self.enabled = stream is not None and is_terminal(stream)
        self._stream = stream
        self._total = total or 0  # 0: not known
        self._unit = unit
        self._delay = DELAY_SECONDS if delay is None else delay
        self._done = 0
        self._phases: PhaseProgress | None = None

    def start(self) -> None:
        """Draw from now on (the first :meth:`advance` starts it too)."""
        if not self.enabled or self._phases is not None:
            return
        self._phases = PhaseProgress(self._stream, delay=self._delay, units={self.label: self._unit})
        self._phases(self.label, 0, self._total)

    def advance(self, steps: int = 1, note: str | None = None) -> None:
        """Count ``steps`` more steps done; ``note`` replaces the text after the bar."""
        self.start()
        if self._phases is None:
            return
        self._done += steps
        self._phases(self.label, self._done, self._total, note)

    def close(self) -> None:
        """Stop the bar's ticker and remove the bar."""
        if self._phases is not None:
            self._phases.close()

    def __enter__(self) -> PhaseBar:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Silent:
    """The do-nothing stand-in of :class:`PhaseProgress` off a terminal."""

    phases: list[str] = []

    def __call__(self, phase: str, done: int, total: int) -> None:
        """Ignore the report."""

    def end_phase(self) -> None:
        """Nothing to remove."""

    def __enter__(self) -> _Silent:
        return self

    def __exit__(self, *exc: Any) -> None:
        pass


def progress_phases(stream: IO[str] | None = None, delay: float = DELAY_SECONDS) -> PhaseProgress | _Silent:
    """A :class:`PhaseProgress` on ``stream`` (default stderr) when it is a terminal, else a silent stand-in."""
    stream = stream if stream is not None else sys.stderr
    return PhaseProgress(stream, delay=delay) if is_terminal(stream) else _Silent()


def execute_with_progress(cfg: RunConfig, stream: IO[str] | None = None, delay: float = DELAY_SECONDS,
                          mininterval: float = 0.2, bound: Bound | None = None) -> tuple[Simulator, Run]:
    """Run a run-config like :func:`sim.run.runner.execute` (``bound``: its call bound and checked already by
    the preflight), with progress bars when ``stream`` (default stderr) is a terminal: placing the data,
    planning and pricing the candidate tilings, then simulating; otherwise exactly ``execute(cfg, bound=...)``.
    ``delay`` and ``mininterval`` (seconds) are when a bar first shows and how often it redraws."""
    stream = stream if stream is not None else sys.stderr
    if not is_terminal(stream):
        return execute(cfg, bound=bound)
    if bound is None:
        bound = bound_call(cfg)
        enforce_layout(bound.call, bound.simulator.target)
    m = bound.simulator
    limit = cfg.time_limit_seconds
    with PhaseProgress(stream, delay=delay, mininterval=mininterval) as phases:
        bound = place_rest(cfg, bound, placing=phases)
        call = bound.call
        phases("planning", 0, 1)  # a named tiling plans in one step; a search reports its own phases
        # The search's choice is cached: the run below plans the same call again without searching.  The time
        # limit covers the call's planning, done here ahead of it: it gets what the planning left.
        start = time.monotonic()
        plan, _ = _plan_within(m, cfg, call, limit, phases)
    left = None if limit is None else max(limit - (time.monotonic() - start), 1e-3)
    with RunProgress(plan.tile_count, stream=stream, delay=delay, mininterval=mininterval) as bar:
        run = m.run_bound(call, cfg.args, numerics=cfg.numerics, progress=bar, tiling=cfg.tiling,
                          time_limit_seconds=left)
    return m, run


def _plan_within(m: Simulator, cfg: RunConfig, call: BoundCall, limit: float | None, phases: PhaseProgress) -> tuple:
    """``m.plan_bound_with_choice`` of the config's bound call, within ``limit`` seconds (None: no limit); on
    TimeLimitError the simulator forgets any plan it was making (planning writes no memory)."""
    def plan() -> tuple:
        return m.plan_bound_with_choice(call, cfg.tiling, progress=phases)

    def expired() -> str:
        return expired_message(cfg.symbol, cast(float, limit), PLANNING_STAGE)
    try:
        return run_within(limit, expired, plan)
    except TimeLimitError:
        m.clear_caches()
        raise
