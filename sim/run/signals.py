"""Stop signals: SIGTERM ends dspsim as Ctrl-C does, and a sweep's worker processes never outlive it.

``dspsim`` turns SIGTERM into :class:`Terminated` (a ``KeyboardInterrupt``) in the main thread, so that every
cleanup Ctrl-C runs runs for it too: a half-written output's temporary file is removed
(:mod:`sim.files.atomic`), a sweep keeps its finished points and ends its workers.  SIGKILL cannot be caught:
a worker asks the kernel to kill it when its parent dies (Linux's ``PR_SET_PDEATHSIG``), and a thread of it
watches the parent as well (elsewhere, and should the parent die before the request).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
import sys
import threading
import time
import types
from collections.abc import Callable, Iterator
from typing import Any

#: Linux's prctl option that signals a process when its parent dies (linux/prctl.h).
PR_SET_PDEATHSIG = 1
#: Seconds between two looks of a worker's watch thread at its parent.
WATCH_SECONDS = 0.5


class Terminated(KeyboardInterrupt):
    """A stop signal (SIGTERM) arrived: raised in the main thread, it unwinds as Ctrl-C does."""

    def __init__(self, signum: int = signal.SIGTERM):
        super().__init__(f"terminated by {signal.Signals(signum).name}")
        self.signum = signum


def signal_number(e: BaseException) -> int:
    """The signal an interrupt stands for: a :class:`Terminated`'s, else SIGINT (Ctrl-C)."""
    return int(getattr(e, "signum", signal.SIGINT))


def _raise_terminated(signum: int, frame: types.FrameType | None) -> None:
    raise Terminated(signum)


@contextlib.contextmanager
def sigterm_raises() -> Iterator[None]:
    """Meanwhile SIGTERM raises :class:`Terminated` in the main thread (nothing changes in another thread,
    where no handler can be set)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


class StopSignalsIgnored:
    """Ignore Ctrl-C and SIGTERM meanwhile: while an interrupted command saves what it finished, a second
    signal must not lose it."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __enter__(self) -> None:
        self._old: dict[int, object] = {}
        for s in self.SIGNALS:
            try:
                self._old[s] = signal.signal(s, signal.SIG_IGN)
            except ValueError:  # not the main thread: signals go to the main thread anyway
                pass

    def __exit__(self, *exc: object) -> None:
        for s, old in self._old.items():
            signal.signal(s, old)  # type: ignore[arg-type]


class StopLatch:
    """Meanwhile each stop signal (Ctrl-C, SIGTERM) is also written down, and :meth:`check` raises it again.

    A signal's handler runs wherever the main thread is, a finalizer or a garbage collector callback included, and
    Python drops an exception raised there (printing "Exception ignored in ..."): the stop would be lost, and a
    sweep would run to its end.  A loop that calls :meth:`check` at each turn stops all the same, and the dropped
    exception is not printed (the stop's own one-line message says it all).  A signal this process ignores
    (``nohup``) stays ignored; nothing changes in another thread than the main one."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.signum: int | None = None
        self._old: dict[int, object] = {}
        self._hook: Callable[[Any], object] | None = None

    def __enter__(self) -> StopLatch:
        if threading.current_thread() is not threading.main_thread():
            return self
        for s in self.SIGNALS:
            old = signal.getsignal(s)
            if callable(old):  # (a handler of ours or Python's: SIG_IGN and SIG_DFL stay as they are)
                self._old[s] = old
                signal.signal(s, self._noted)
        self._hook = sys.unraisablehook
        sys.unraisablehook = self._dropped
        return self

    def _dropped(self, unraisable: Any) -> None:
        """An exception Python drops: the stop signal's own is raised again by :meth:`check`, not printed."""
        if not (self.signum is not None and isinstance(unraisable.exc_value, KeyboardInterrupt)):
            assert self._hook is not None
            self._hook(unraisable)

    def _noted(self, signum: int, frame: types.FrameType | None) -> None:
        self.signum = signum
        handler = self._old[signum]
        assert callable(handler)
        handler(signum, frame)

    def check(self) -> None:
        """Raise the stop signal that arrived meanwhile, if one did (its exception may have been lost)."""
        if self.signum is not None:
            if self.signum == signal.SIGINT:
                raise KeyboardInterrupt
            raise Terminated(self.signum)

    def __exit__(self, *exc: object) -> None:
        for s, old in self._old.items():
            signal.signal(s, old)  # type: ignore[arg-type]
        if self._hook is not None and sys.unraisablehook == self._dropped:
            sys.unraisablehook = self._hook


def _ask_for_death_signal() -> None:
    """Have Linux send this process SIGKILL when its parent dies (nothing elsewhere, or when prctl fails)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):
        pass  # the watch thread alone then


def _watch(parent: int) -> None:
    """End this process as soon as its parent is gone (it is then a child of another process)."""
    while True:
        if os.getppid() != parent:
            os._exit(1)  # nothing to clean up: a worker's results go to its parent, which is gone
        time.sleep(WATCH_SECONDS)


def die_with_parent(parent: int) -> None:
    """Make this worker process end when ``parent`` (the pid that started it) dies, even by SIGKILL."""
    _ask_for_death_signal()
    if os.getppid() != parent:  # the parent died before the request took effect
        os._exit(1)
    threading.Thread(target=_watch, args=(parent,), name="dspsim-parent-watch", daemon=True).start()
