"""Stop signals and full disks end dspsim cleanly (issue 20, item 5): real processes, real signals.

* SIGTERM or SIGKILL to a ``dspsim sweep`` parent: its worker processes die with it (none left running as
  children of init), and SIGTERM keeps the finished points and exits 143 with one line;
* SIGTERM while ``dspsim run`` writes an output: the temporary file is removed, as on Ctrl-C;
* a sweep whose results cannot be written (a full disk, a file-size limit): one line on stderr, exit 2.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TESTS = Path(__file__).resolve().parent
SHARED = ROOT / "configs" / "ft78ne_batch_norm_grad_s.yaml"

# A kernel whose binding, in a sweep worker, records the worker's pid and then waits: the workers are busy.
SLOW_KERNEL = '''import os, sys, time
from pathlib import Path
sys.path.insert(0, {tests!r})
from tiny_kernels import Twice


class Slow(Twice):
    def bind(self, *args):
        Path({marks!r}, str(os.getpid())).write_text("busy")
        time.sleep(60)
        return super().bind(*args)


KERNEL = Slow("slow")
'''


def _alive(pid: int) -> bool:
    """Whether ``pid`` is a running process (a zombie, dead but not reaped by whoever adopted it, is not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def _wait_until(condition, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.05)


def _busy_sweep(tmp_path: Path) -> tuple[list[str], Path]:
    """The command of a sweep of two points on two workers that stay busy, and the folder of their pid files."""
    marks = tmp_path / "marks"
    marks.mkdir()
    (tmp_path / "slow.py").write_text(SLOW_KERNEL.format(tests=str(TESTS), marks=str(marks)))
    (tmp_path / "cfg.yaml").write_text("target: FT78NE\nsymbol: fp_slow_s\nkernels: [slow.py]\n"
                                       "args: {x: 0xA0000000, y: 0xA0100000, n: 1024, core_mask: 1}\n")
    (tmp_path / "sweep.yaml").write_text(json.dumps({"configs": ["cfg.yaml"], "grid": {"args.n": [1024, 2048]}}))
    cmd = [sys.executable, "-m", "sim.cli", "sweep", str(tmp_path / "sweep.yaml"), "-o", str(tmp_path / "out"),
           "--workers", "2", "--allow-kernels"]
    return cmd, marks


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL])
def test_the_workers_of_a_sweep_die_with_their_parent(tmp_path, signum):
    cmd, marks = _busy_sweep(tmp_path)
    proc = subprocess.Popen(cmd, cwd=tmp_path, start_new_session=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    workers: list[int] = []
    try:
        _wait_until(lambda: len(list(marks.iterdir())) == 2 or proc.poll() is not None, 30, "two busy workers")
        workers = [int(p.name) for p in marks.iterdir()]
        assert len(workers) == 2 and all(_alive(w) for w in workers), proc.communicate()
        os.kill(proc.pid, signum)  # the parent alone, as a process manager or the OOM killer would
        _, err = proc.communicate(timeout=10)
        _wait_until(lambda: not any(_alive(w) for w in workers), 3, "the workers to die with their parent")
    finally:
        for w in workers + [proc.pid]:  # whatever the test started and left running
            if _alive(w):
                os.kill(w, signal.SIGKILL)
        proc.wait()
    if signum == signal.SIGTERM:  # caught: the sweep stops as on Ctrl-C, one line, the resume command
        assert proc.returncode == 143, err
        assert "Traceback" not in err and err.count("\n") == 1 and "terminated (SIGTERM)" in err
        assert "--allow-kernels" in err and "resume" in err
    else:
        assert proc.returncode == -signal.SIGKILL


# Runs ``dspsim run`` with its .npy writer slowed down: the output's temporary file stays while the test signals.
SLOW_WRITE = '''import sys, time
import sim.run.runner as runner
from sim.cli import main
fast = runner._npy_writer
def slow(arr):
    write = fast(arr)
    def slowly(path):
        write(path)
        time.sleep(30)
    return slowly
runner._npy_writer = slow
sys.exit(main(sys.argv[1:]))
'''


def test_sigterm_during_runs_output_write_removes_the_temporary_file(tmp_path):
    """As Ctrl-C (SIGINT) always did."""
    signum = signal.SIGTERM
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-c", SLOW_WRITE, "run", str(SHARED), "--out-dir", str(out)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_until(lambda: any(out.glob(".*.tmp")) or proc.poll() is not None, 30, "the output's temporary file")
        assert proc.poll() is None, proc.communicate()
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + signum and err.count("\n") == 1 and "Traceback" not in err, err
    assert not list(out.glob(".*")), "a temporary file was left behind"
    assert not list(out.glob("*.npy"))  # the output being written is not there half-written either


# A sweep whose journal cannot grow: a file-size limit makes every write past 100 bytes fail (EFBIG), as a
# full disk makes it fail with ENOSPC.
LIMITED = '''import resource, sys
resource.setrlimit(resource.RLIMIT_FSIZE, (100, 100))
from sim.cli import main
sys.exit(main(sys.argv[1:]))
'''


def test_a_sweep_that_cannot_write_its_results_says_so_in_one_line(tmp_path):
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(json.dumps({"configs": [str(SHARED)], "grid": {"target": ["FT78NE"]}}))
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-c", LIMITED, "sweep", str(sweep), "-o", str(out), "--workers", "1"],
                          cwd=ROOT, capture_output=True, text=True, check=False, timeout=60)
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.splitlines()
    assert line == f"dspsim: error: output {out / 'points.jsonl'}: cannot write: File too large"


class _SignalsItselfWhenDropped:
    """An object whose finalizer sends this process ``signum`` and lets its handler run there, inside the
    finalizer, where Python drops the handler's exception ("Exception ignored in ...")."""

    def __init__(self, signum: int):
        self.signum = signum

    def __del__(self) -> None:
        os.kill(os.getpid(), self.signum)
        for _ in range(10_000):  # the handler runs at one of these steps: still inside the finalizer
            pass


class _FailsWhenDropped:
    """An object whose finalizer raises: Python drops the exception and reports it."""

    def __del__(self) -> None:
        raise ValueError("a finalizer's own error")


@pytest.fixture
def foreground_sigint():
    """Ctrl-C as a terminal's foreground process has it: Python's own handler (a suite started in the background
    inherits SIGINT ignored, which the code under test rightly leaves alone); put back as it was after."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_signal_lost_in_a_finalizer_is_raised_at_the_latch_check(signum, monkeypatch, foreground_sigint):
    """A sweep's loop keeps a StopLatch: a Ctrl-C (or SIGTERM) whose exception a finalizer swallowed still stops it
    at the loop's next turn, with the exception the signal stands for, and the swallowed one is not printed."""
    from sim.run.signals import StopLatch, Terminated, signal_number, sigterm_raises

    reported: list[BaseException | None] = []  # what Python reports it dropped ("Exception ignored in ...")
    monkeypatch.setattr(sys, "unraisablehook", lambda u: reported.append(u.exc_value))
    with sigterm_raises(), StopLatch() as latch:
        _SignalsItselfWhenDropped(signum)  # dropped at once: the signal's exception is raised and lost there
        lost = latch.signum == signum  # (reached with the signal noted: nothing propagated out of the finalizer)
        with pytest.raises(KeyboardInterrupt) as raised:
            latch.check()
        _FailsWhenDropped()  # another error a finalizer drops is still reported
    assert lost and signal_number(raised.value) == signum
    assert isinstance(raised.value, Terminated) == (signum == signal.SIGTERM)
    assert len(reported) == 1 and isinstance(reported[0], ValueError)
    # Left as they were: Ctrl-C raises as Python's own handler does, the hook is the one before, and a latch with
    # no signal checks quietly.
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert sys.unraisablehook is not None and getattr(sys.unraisablehook, "__self__", None) is None
    with StopLatch() as quiet:
        quiet.check()


def test_a_latch_leaves_an_ignored_signal_ignored():
    """``nohup`` and background jobs ignore Ctrl-C: the latch does not turn it back on."""
    from sim.run.signals import StopLatch

    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with StopLatch():
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, old)
