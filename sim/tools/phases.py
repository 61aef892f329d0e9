"""Progress of the phases of long commands (sweeps, calibration): a tqdm bar per phase, on a terminal only.

Each phase names itself (``sweep: running 32 points``).  Its bar appears only
when the stream is a terminal and only once the phase has lasted
:data:`DELAY_SECONDS`, so quick phases, pipes, files and CI logs stay silent.
A heartbeat thread redraws the bar twice a second, so the clock keeps moving
while one long step (a large sweep point, the plot) runs.
"""

from __future__ import annotations

import threading
import time
from typing import IO, Any

from sim.tools.progress import _columns, is_terminal

#: Seconds a phase must last before its bar appears.
DELAY_SECONDS = 1.0
#: Seconds between two redraws of a bar while no step finishes.
HEARTBEAT_SECONDS = 0.5


class PhaseBar:
    """A tqdm bar for one phase, drawn on ``stream`` when it is a terminal; a no-op otherwise.

    Use it as a context manager so that the bar is closed (and erased) when the
    phase ends or fails.
    """

    def __init__(self, label: str, stream: IO[str] | None, total: int | None = None, unit: str = "step",
                 delay: float | None = None):
        self.label = label
        self.enabled = stream is not None and is_terminal(stream)
        self._stream = stream
        self._total = total
        self._unit = unit
        self._delay = DELAY_SECONDS if delay is None else delay
        self._start = time.monotonic()
        self._bar: Any = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Draw from now on (the first :meth:`advance` starts it too).  A caller that forks worker processes
        starts the bar after forking, so that no thread of the bar's is running while the process is copied."""
        if not self.enabled or self._bar is not None:
            return
        from tqdm import tqdm

        self._start = time.monotonic()
        # Follow the terminal's width; a terminal that reports width 0 (never sized, as under ``script``)
        # would get an empty bar: use 80x24 there.
        sized = self._stream is not None and _columns(self._stream) > 0
        self._bar = tqdm(total=self._total, desc=self.label, unit=self._unit, file=self._stream,
                         delay=self._delay, leave=False, dynamic_ncols=sized, ncols=None if sized else 80,
                         nrows=None if sized else 24, mininterval=0.2)
        self._thread = threading.Thread(target=self._beat, name=f"progress: {self.label}", daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        while not self._stop.wait(HEARTBEAT_SECONDS):
            if time.monotonic() - self._start >= self._delay:
                with self._lock:
                    self._bar.refresh()

    def advance(self, steps: int = 1, note: str | None = None) -> None:
        """Count ``steps`` more steps done; ``note`` replaces the text after the bar."""
        self.start()
        if self._bar is None:
            return
        with self._lock:
            if note is not None:
                self._bar.set_postfix_str(note, refresh=False)
            self._bar.update(steps)

    def close(self) -> None:
        """Stop the heartbeat and remove the bar."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._bar is not None:
            with self._lock:
                self._bar.close()

    def __enter__(self) -> PhaseBar:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
