"""A guard that fails a test instead of hanging the suite (shared by the fuzz and hostile-file tests)."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def no_hang(seconds: float) -> Iterator[None]:
    """Fail (TimeoutError) when the body runs longer than ``seconds``: an open() blocked on a named pipe, or a
    loop that never ends, is interrupted by the alarm."""
    def alarm(*_: Any) -> None:
        raise TimeoutError(f"still running after {seconds} s: a hang")
    old = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
