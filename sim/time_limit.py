"""A wall-clock limit on a call: a watchdog thread interrupts the calling thread's Python code when it expires.

``Simulator.call(..., time_limit_seconds=...)`` runs its planning (the kernel's ``tilings()`` and ``plan()``,
the tiling search) and its simulation (the tiles' computes) through :func:`run_within`.  A kernel whose
``tilings()`` generator never ends, or whose compute loops forever, is interrupted once the limit is spent,
and the call raises :class:`~sim.errors.TimeLimitError` (the facade rolls memory back).

How, and why so: a watchdog thread waits for the limit, then raises an exception asynchronously in the calling
thread (``PyThreadState_SetAsyncExc``), which the interpreter delivers at the next bytecode the thread runs.
The alternative, ``signal.setitimer`` and a SIGALRM handler, works on the main thread only, takes the
process's one alarm timer (a program that uses SIGALRM for itself would lose it, or take ours) and interrupts
blocking system calls of unrelated code; the watchdog works on any thread, and two Simulators in two threads
each get their own.  Neither can interrupt a single long call into C (a numpy operation on a huge array, a
``time.sleep``): the exception lands when it returns.  The exception is a BaseException, so a kernel's
``except Exception`` does not swallow it (one that catches BaseException can; the call then ends when the
kernel's code does, and still raises TimeLimitError).

The watchdog fires at most once, and a race between it firing and the call ending is settled by one atomic
test-and-set (a lock acquired without blocking, never released) that either side may win: if the call wins,
the watchdog never fires; if the watchdog wins, the call waits for the shot and clears it if it is still
pending.  So nothing can land after :func:`run_within` has returned, and since there is only one shot, what
it interrupts (the kernel's code, or the disarming itself) never runs again under fire: the caller's cleanup
(the memory rollback) runs outside the watched region.  The watchdog's thread needs the interpreter to let it
run, which takes a few milliseconds: a call that ends past its limit before the shot fires fails all the same
(its wall-clock time is compared with the limit as it returns), so whether a call passes never depends on a
thread switch.
"""

from __future__ import annotations

import ctypes
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from sim.errors import KernelArgError, TimeLimitError, brief

T = TypeVar("T")

#: Largest time limit a call takes (seconds: 30 days); beyond it a typo (the timer cannot wait longer anyway).
MAX_TIME_LIMIT_SECONDS = 30 * 24 * 3600.0


class _Expired(BaseException):
    """Raised in the watched thread by its watchdog: a BaseException, so ``except Exception`` lets it pass."""


# One C function, two prototypes: the exception type to raise, or NULL to clear a pending one.
_raise_in = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_ulong, ctypes.py_object)(
    ("PyThreadState_SetAsyncExc", ctypes.pythonapi))
_clear_in = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p)(
    ("PyThreadState_SetAsyncExc", ctypes.pythonapi))


class _Watchdog:
    """Interrupts the thread that made it with :class:`_Expired` once ``seconds`` have passed, unless stopped."""

    def __init__(self, seconds: float):
        self._target = threading.get_ident()
        self._token = threading.Lock()  # whoever takes it first decides: the watchdog to fire, the call to stop it
        self._wake = threading.Event()
        self._fired = False  # set once the shot is raised (after it, never before)
        self._thread = threading.Thread(target=self._watch, args=(seconds,), name="dspsim-time-limit", daemon=True)

    def start(self) -> None:
        """Start counting."""
        self._thread.start()

    def _watch(self, seconds: float) -> None:
        if self._wake.wait(seconds):
            return  # stopped in time
        if self._token.acquire(blocking=False):
            _raise_in(self._target, _Expired)
            self._fired = True

    def stop(self) -> bool:
        """Stop the watchdog; True if it fired.  Once this returns, nothing can be raised in the thread any more."""
        if self._token.acquire(blocking=False):
            self._wake.set()  # it can no longer fire: let its thread end now
            return False
        while not self._fired:  # it took the token a moment ago and is raising its one shot
            time.sleep(0.0005)
        _clear_in(self._target, None)  # the shot, if it has not landed yet
        return True


def checked_time_limit(seconds: Any, what: str = "call: 'time_limit_seconds': ") -> float | None:
    """``seconds`` as a float, None for no limit; KernelArgError (its message starting with ``what``) unless it
    is a number of seconds more than 0 and at most :data:`MAX_TIME_LIMIT_SECONDS`."""
    if seconds is None:
        return None
    ok = not isinstance(seconds, bool) and isinstance(seconds, (int, float)) and 0 < seconds <= MAX_TIME_LIMIT_SECONDS
    if not ok:  # (a NaN compares false: refused too)
        raise KernelArgError(f"{what}expected a number of seconds more than 0 and at most "
                             f"{MAX_TIME_LIMIT_SECONDS:.0f} (or none), got {brief(seconds)}")
    return float(seconds)


#: What a call does before it runs its plan (the stage a TimeLimitError during it names).
PLANNING_STAGE = "planning (listing, planning and pricing the kernel's tilings)"


def symbol_text(symbol: object) -> str:
    """A call's symbol for a message: as it is when it is a plausible symbol, else :func:`brief` of it."""
    return symbol if isinstance(symbol, str) and symbol.isidentifier() and len(symbol) <= 100 else brief(symbol, 60)


def expired_message(symbol: str, seconds: float, stage: str) -> str:
    """The TimeLimitError message of a call of ``symbol`` stopped after ``seconds`` while doing ``stage``."""
    return (f"{symbol_text(symbol)}: the call ran longer than its time limit of {seconds:g} s (time_limit_seconds) "
            f"and was stopped while {stage}; memory is as it was before the call")


def run_within(seconds: float | None, describe: Callable[[], str], fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)``, interrupted after ``seconds`` of wall-clock time (None: no limit) with TimeLimitError, whose
    message is ``describe()`` (called then: it may say how far the work got)."""
    if seconds is None:
        return fn(*args)
    dog = _Watchdog(seconds)
    began = time.monotonic()
    try:
        try:
            # Started inside the try: on a loaded machine a very short limit can expire while the watchdog's
            # thread is still starting, and its shot then lands in start() itself.
            dog.start()
            result = fn(*args)
        finally:
            fired = dog.stop()
    except _Expired:  # the one shot landed in fn (or in stop itself, which then has nothing left to do)
        raise TimeLimitError(describe()) from None
    if fired:  # the shot was swallowed (a kernel catching BaseException), or fn ended as it was fired
        raise TimeLimitError(describe())
    if time.monotonic() - began > seconds:
        # Past its limit, though the shot never came: the watchdog's thread waits for the interpreter to let it
        # run (a few milliseconds), so a call ending just after its limit would otherwise pass or fail by chance.
        raise TimeLimitError(describe())
    return result
