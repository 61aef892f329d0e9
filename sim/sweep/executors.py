"""Where a sweep's points run: in this process, on a local process pool, or on a Dask cluster; each calls
``record(row)`` as points finish and stops at once on Ctrl-C, keeping every point that finished."""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import os
import signal
import sys
from collections.abc import Callable
from typing import Any

from sim.errors import SimError, one_line
from sim.run.progress import PhaseBar
from sim.run.signals import StopLatch, StopSignalsIgnored, die_with_parent
from sim.sweep.point import failed_row, run_point

#: Seconds between two looks at the running points (how soon Ctrl-C and the progress bar are served).
POLL_SECONDS = 0.25


# Each calls ``record(row)`` as points finish.  On Ctrl-C it records the points that finished but were not
# recorded yet, cancels the pending ones, stops the workers and re-raises at once: the points that were
# running are lost (they run again on resume), none that finished.

def _init_worker(parent: int) -> None:
    """Set up a local worker process: it dies with ``parent`` (SIGKILL included), leaves Ctrl-C to it, and
    prints nothing on its stdout."""
    # Workers leave Ctrl-C to the parent, which stops them; otherwise each would die mid-point with a traceback.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # A forked worker inherits the parent's SIGTERM handler: its own SIGTERM (from the parent) must end it.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    die_with_parent(parent)
    # What a user's kernel prints in a worker goes to stderr: the sweep's stdout is the parent's.
    with contextlib.suppress(OSError):
        os.dup2(2, 1)
    sys.stdout = sys.stderr


def _stop_workers(pool: cf.ProcessPoolExecutor) -> None:
    """Cancel what has not started and end the worker processes now (not after their current points)."""
    procs = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    terminate = getattr(pool, "terminate_workers", None)  # public from Python 3.14
    if terminate is not None:
        terminate()
        return
    for proc in procs:
        proc.terminate()
    for proc in procs:
        proc.join(timeout=2)


def _result(f: Any, point: dict) -> dict:
    """A finished future's row; a worker that died (killed, out of memory) fails its point."""
    try:
        return f.result()
    except KeyboardInterrupt:
        raise
    except BaseException as e:  # noqa: BLE001 (BrokenProcessPool, a lost Dask worker ...)
        return failed_row(point, f"internal {type(e).__name__}: {e or 'the worker process died'}")


def run_serial(points: list[dict], record: Callable[[dict], None], bar: PhaseBar) -> None:
    """Run ``points`` one after another in this process."""
    bar.start()
    with StopLatch() as latch:
        for p in points:
            record(run_point(p))  # Ctrl-C interrupts the point itself: it is simply not recorded
            latch.check()


def run_local(points: list[dict], workers: int, record: Callable[[dict], None], bar: PhaseBar) -> None:
    """Run ``points`` on a local pool of ``workers`` processes (each dies with this one)."""
    pool = cf.ProcessPoolExecutor(max_workers=workers, initializer=_init_worker, initargs=(os.getpid(),))
    futures: dict[cf.Future, dict] = {}
    recorded: set[cf.Future] = set()
    try:
        futures = {pool.submit(run_point, p): p for p in points}
        bar.start()  # after the workers are forked: no thread of ours is copied into them
        pending = set(futures)
        with StopLatch() as latch:
            while pending:
                # A short wait, not a blocking one: Ctrl-C is served within POLL_SECONDS, even when its
                # KeyboardInterrupt was raised in a finalizer and lost there (the latch raises it again).
                done, pending = cf.wait(pending, timeout=POLL_SECONDS, return_when=cf.FIRST_COMPLETED)
                for f in done:
                    record(_result(f, futures[f]))
                    recorded.add(f)  # after recording: an interrupt in between records it twice, never not at all
                latch.check()
    except KeyboardInterrupt:
        with StopSignalsIgnored():
            for f, p in futures.items():
                if f.done() and not f.cancelled() and f not in recorded:
                    record(_result(f, p))
            _stop_workers(pool)
        raise
    except BaseException:
        _stop_workers(pool)  # the journal cannot be written, say: no worker may outlive the sweep
        raise
    pool.shutdown(wait=True)


def _connected(client_type: Any, address: Any) -> Any:
    """A Dask client of the scheduler at ``address``; SimError on one line when it is no address or nothing
    answers there."""
    try:
        return client_type(address)
    except (OSError, ValueError, TypeError, TimeoutError) as e:
        raise SimError(f"--scheduler {address}: cannot connect to a Dask scheduler there ({one_line(str(e), 200)}); "
                       f"give its address as tcp://host:port") from None


def run_dask(points: list[dict], scheduler: Any, record: Callable[[dict], None], bar: PhaseBar) -> None:
    """Run ``points`` on the Dask cluster behind ``scheduler``."""
    from distributed import Client
    from distributed import as_completed as dask_completed

    client = scheduler if isinstance(scheduler, Client) else _connected(Client, scheduler)
    futures: list = []
    recorded: set[str] = set()
    try:
        futures = client.map(run_point, points, pure=False)  # pure=False: a failed point is never reused
        by_key = {f.key: p for f, p in zip(futures, points)}
        bar.start()
        with StopLatch() as latch:
            for f in dask_completed(futures):
                record(_result(f, by_key[f.key]))
                recorded.add(f.key)
                latch.check()
    except KeyboardInterrupt:
        with StopSignalsIgnored():
            for f, p in zip(futures, points):
                if f.status == "finished" and f.key not in recorded:
                    record(_result(f, p))
            client.cancel([f for f in futures if f.key not in recorded], force=True)
        raise
    finally:
        if client is not scheduler:
            client.close(timeout=2)


