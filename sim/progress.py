"""A progress bar for long runs: tiles done and simulated cycles (tqdm), on a terminal only.

The bar appears once a run has taken more than a second and only when the
stream is a terminal, so quick runs, pipes, files and CI logs stay silent.
:meth:`sim.simulator.Simulator.call` accepts ``progress=callable(tiles_done,
cycle)``; the engine calls it after each tile's compute.
"""

from __future__ import annotations

import io
import os
import sys
from typing import IO, Any

from kernels.base import Plan
from sim.config import RunConfig
from sim.runner import execute, prepare
from sim.simulator import Run, Simulator

#: Seconds a run must last before its bar appears.
DELAY_SECONDS = 1.0


def tiles_in_plan(plan: Plan) -> int:
    """How many tiles the engine will run (it reports each after its compute)."""
    return sum(len(tiles) for phase in plan.phases for tiles in phase.tiles.values())


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

    def __enter__(self) -> "RunProgress":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def execute_with_progress(cfg: RunConfig, stream: IO[str] | None = None, delay: float = DELAY_SECONDS,
                          mininterval: float = 0.2) -> tuple[Simulator, Run]:
    """Run a run-config like :func:`sim.runner.execute`, with a progress bar when ``stream`` (default
    stderr) is a terminal; otherwise exactly ``execute(cfg)``.  ``delay`` and ``mininterval`` (seconds)
    are tqdm's: when the bar first shows, and how often it redraws."""
    stream = stream if stream is not None else sys.stderr
    if not is_terminal(stream):
        return execute(cfg)
    m = prepare(cfg)
    # Planned once more by call(); planning is cheap next to running.
    _, plan = m.plan(cfg.symbol, tiling=cfg.tiling, **cfg.args)
    with RunProgress(tiles_in_plan(plan), stream=stream, delay=delay, mininterval=mininterval) as bar:
        run = m.call(cfg.symbol, numerics=cfg.numerics, progress=bar, tiling=cfg.tiling, **cfg.args)
    return m, run
