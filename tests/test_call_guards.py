"""What a call guards against while it runs: a call made from inside it, and work that never ends.

* A ``Simulator.call`` from inside another call's ``progress`` callback (on the same Simulator) is refused
  with ``sim.NestedCallError``, so that the outer call's rollback still covers every byte written during it
  (it once replaced the outer call's journal: the outer call failed with most of its outputs written).
  Reads from the callback keep working, a ``write`` from it is rolled back with the call, and a call on
  another Simulator is no nesting at all.
* ``call(..., time_limit_seconds=...)`` (a run-config's ``time_limit_seconds``, ``dspsim run --time-limit``)
  stops a compute that never returns, or a ``tilings()`` that never yields, with ``sim.TimeLimitError`` and
  memory as before; a kernel's endless ``tilings()`` generator ends the search after
  ``MAX_TILING_CANDIDATES`` candidates even without a limit.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import time
from pathlib import Path

import numpy as np
import pytest
import yaml
from hang import no_hang
from tiny_kernels import Twice

import sim
import sim.simulator
import sim.tuning.limits
from sim.cli import main
from sim.config.run_config import load_config
from sim.model.plan import Plan
from sim.run.progress import execute_with_progress

REPO = Path(__file__).resolve().parent.parent
F32 = np.float32
X, Y, N = 0xA0000000, 0xA0100000, 1024  # Twice's x and y (y = 2x in two tiles) in FT78NE's DDR
TWICE_ARGS = dict(x=X, y=Y, n=N, core_mask=0x1)
#: A BatchNormGrad on all cores in many tiles (dx is 8192 elements, as in the issue's report).
# (a block of 8 channels per core: a tile per core, eight in all, for the callbacks that act at a given tile)
BN = dict(x=0xA0000000, dy=0xA1000000, dx=0xA2000000,
          params=[0xC0000000, 0xC0100000, 0xC0200000, 0xC0300000, 0xC0400000, 128, 64, 1],
          tiling={"split": "channels", "channel_block": 8})
SENTINEL = -7.0


def _bn_machine() -> sim.Simulator:
    m = sim.Simulator("FT78NE")
    rng = np.random.default_rng(0)
    for addr in (BN["x"], BN["dy"]):
        m.write(addr, rng.standard_normal((128, 64)).astype(F32))
    for k in range(3):
        m.write(0xC0000000 + k * 0x100000, rng.uniform(0.5, 1.5, 64).astype(F32))
    m.write(BN["dx"], np.full((128, 64), SENTINEL, F32))
    return m


def _twice_machine() -> sim.Simulator:
    m = sim.Simulator("FT78NE")
    m.write(X, np.arange(N, dtype=F32))
    m.write(Y, np.full(N, SENTINEL, F32))
    return m


# --- a call inside a call ------------------------------------------------------------------------------------

def test_a_call_from_a_progress_callback_is_refused_and_the_outer_call_rolls_back():
    m = _bn_machine()
    before = m.memory.snapshot()
    tiles = [0]

    def progress(done: int, cycle: int) -> None:
        tiles[0] += done
        if tiles[0] == 3:  # the outer call has written some of dx by now
            m.call("fp_batch_norm_grad_s", numerics=False, **BN)

    with pytest.raises(sim.NestedCallError, match=r"^call: fp_batch_norm_grad_s was called while "
                                                  r"fp_batch_norm_grad_s runs on the same Simulator \(from its "
                                                  r"progress callback\)"):
        m.call("fp_batch_norm_grad_s", progress=progress, **BN)
    assert tiles[0] == 3
    assert m.memory.snapshot() == before
    assert (m.read(BN["dx"], (128, 64), F32) == SENTINEL).all()
    # The Simulator is not left thinking a call runs: the same call now runs, and equals a fresh machine's.
    m.call("fp_batch_norm_grad_s", **BN)
    fresh = _bn_machine()
    fresh.call("fp_batch_norm_grad_s", **BN)
    assert np.array_equal(m.read(BN["dx"], (128, 64), F32), fresh.read(BN["dx"], (128, 64), F32))


def test_a_refused_inner_call_caught_by_the_callback_leaves_the_outer_call_whole():
    m = _bn_machine()
    refusals: list[str] = []

    def progress(done: int, cycle: int) -> None:
        try:
            m.call("fp_batch_norm_grad_s", **BN)
        except sim.NestedCallError as e:
            refusals.append(str(e))

    m.call("fp_batch_norm_grad_s", progress=progress, **BN)
    fresh = _bn_machine()
    fresh.call("fp_batch_norm_grad_s", **BN)
    assert refusals
    assert m.memory.snapshot() == fresh.memory.snapshot()


def test_a_write_from_a_progress_callback_is_rolled_back_with_the_failing_call():
    m = _bn_machine()
    before = m.memory.snapshot()
    elsewhere = 0xB0000000
    tiles = [0]

    def progress(done: int, cycle: int) -> None:
        tiles[0] += done
        if tiles[0] == 2:
            m.write(elsewhere, np.full(16, 3.0, F32))
            assert (m.read(elsewhere, 16, F32) == 3.0).all()  # reads see it during the call
        if tiles[0] == 4:
            raise RuntimeError("the callback gives up")

    with pytest.raises(RuntimeError, match="gives up"):
        m.call("fp_batch_norm_grad_s", progress=progress, **BN)
    assert m.memory.snapshot() == before
    assert not m.read(elsewhere, 16, F32).any()
    # A call that succeeds keeps the callback's write, as it keeps its own.
    tiles[0] = -100
    m.call("fp_batch_norm_grad_s", progress=lambda d, c: m.write(elsewhere, np.full(16, 3.0, F32)), **BN)
    assert (m.read(elsewhere, 16, F32) == 3.0).all()


def test_a_call_on_another_simulator_from_a_callback_is_no_nesting():
    m, other = _bn_machine(), _twice_machine()
    with sim.registered_kernel(Twice("twice_guard")):
        m.call("fp_batch_norm_grad_s", progress=lambda d, c: other.call("fp_twice_guard_s", **TWICE_ARGS), **BN)
    assert np.array_equal(other.read(Y, N, F32), 2 * np.arange(N, dtype=F32))


# --- time limits ---------------------------------------------------------------------------------------------

def _forever(*arrays: np.ndarray) -> tuple[np.ndarray, ...]:
    while True:  # pure Python that never returns
        pass


def _tile1_forever(plan: Plan, call, ctx) -> Plan:
    """Twice's plan whose tile 1 computes forever (tile 0 has run and stored its half of y by then)."""
    phase, core = plan.phases[0], plan.cores[0]
    t0, t1 = phase.tiles[core]
    t1 = dataclasses.replace(t1, compute=dataclasses.replace(t1.compute, fn=_forever))
    return dataclasses.replace(plan, phases=(dataclasses.replace(phase, tiles={core: (t0, t1)}),))


class _EndlessTilings(Twice):
    """Twice whose tilings() generator never ends (the same legal tiling again and again), counting what it
    yields."""

    yielded = 0

    def tilings(self, call, ctx):
        while True:
            type(self).yielded += 1
            yield {}


class _SpinningTilings(Twice):
    """Twice whose tilings() never yields at all."""

    def tilings(self, call, ctx):
        while True:
            pass
        yield {}  # (a generator, as kernels write them)


def test_a_compute_that_never_returns_is_stopped_by_the_time_limit_and_memory_rolled_back():
    with sim.registered_kernel(Twice("forever", _tile1_forever)):
        m = _twice_machine()
        before = m.memory.snapshot()
        start = time.monotonic()
        with pytest.raises(sim.TimeLimitError, match=r"^fp_forever_s: the call ran longer than its time limit of "
                                                     r"0.2 s \(time_limit_seconds\) and was stopped while running "
                                                     r"its plan; memory is as it was before the call$"):
            m.call("fp_forever_s", time_limit_seconds=0.2, **TWICE_ARGS)
        assert time.monotonic() - start < 3
        assert m.memory.snapshot() == before
    # The simulator works on, and no late interruption hits code running after a call under a limit.
    with sim.registered_kernel(Twice("twice_after")):
        m.call("fp_twice_after_s", time_limit_seconds=0.2, **TWICE_ARGS)
        assert np.array_equal(m.read(Y, N, F32), 2 * np.arange(N, dtype=F32))
        end = time.monotonic() + 0.4
        while time.monotonic() < end:  # Python code past the limit: an interruption would land here
            pass


def test_a_tilings_generator_that_never_yields_is_stopped_while_planning():
    with sim.registered_kernel(_SpinningTilings("spinning")):
        m = _twice_machine()
        before = m.memory.snapshot()
        with pytest.raises(sim.TimeLimitError, match=r"stopped while planning \(listing, planning and pricing the "
                                                     r"kernel's tilings\)"):
            m.call("fp_spinning_s", time_limit_seconds=0.2, **TWICE_ARGS)
        assert m.memory.snapshot() == before


def test_an_endless_tilings_generator_ends_after_the_candidate_bound(monkeypatch):
    monkeypatch.setattr(sim.tuning.limits, "MAX_TILING_CANDIDATES", 8)  # the real bound (1024) takes seconds
    _EndlessTilings.yielded = 0
    with sim.registered_kernel(_EndlessTilings("endless")):
        m = _twice_machine()
        with no_hang(20):  # (without the bound the search would list candidates for ever)
            run = m.call("fp_endless_s", **TWICE_ARGS)  # no time limit: the bound alone ends the search
    assert _EndlessTilings.yielded == 8
    # The eight are one tiling, listed again and again: it is planned and priced once.
    assert run.tiling.tiling == {} and run.tiling.source == "kernel"
    assert np.array_equal(m.read(Y, N, F32), 2 * np.arange(N, dtype=F32))


@pytest.mark.parametrize("bad", [0, -1, 0.0, float("nan"), float("inf"), True, "5", 10 ** 400, 1e9])
def test_a_time_limit_must_be_a_positive_number_of_seconds(bad):
    with pytest.raises(sim.KernelArgError, match=r"call: 'time_limit_seconds': expected a number of seconds more "
                                                 r"than 0 and at most 2592000 \(or none\), got "):
        sim.Simulator("FT78NE").call("fp_batch_norm_grad_s", time_limit_seconds=bad, **BN)


# --- the run-config key and the CLI flag ----------------------------------------------------------------------

def _config(tmp_path: Path, name: str = "bn", **extra) -> Path:
    doc = yaml.safe_load((REPO / "configs" / "ft78ne_batch_norm_grad_s.yaml").read_text())
    doc.update(extra)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _dspsim(*argv: str) -> tuple[int, str]:
    """``dspsim ARGV`` in this process (the main thread, as from a shell): its exit code and stderr."""
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        rc = main(list(argv))
    return rc, err.getvalue()


def test_dspsim_run_stops_at_the_time_limit_of_the_flag_or_the_config(tmp_path, monkeypatch):
    """A limit far shorter than the call (a millisecond: the call's planning, its tiling search with the tuning
    cache bypassed, and its simulation take more; the binding and the layout check come before it, in the
    preflight) ends ``dspsim run`` with one line and exit 2, and writes no trace; the flag overrides the
    config."""
    # The tuning cache off, as --no-cache does it (an environment variable: set here, so that it is unset again).
    monkeypatch.setenv("DSPSIM_NO_CACHE", "1")
    generous = _config(tmp_path, time_limit_seconds=600)
    short = _config(tmp_path, "short", time_limit_seconds=0.001)
    out = tmp_path / "out"
    for argv in ((str(generous), "--time-limit", "0.001"), (str(short),)):
        rc, err = _dspsim("run", *argv, "--out-dir", str(out))
        assert rc == 2, err
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(
            "dspsim: error: fp_batch_norm_grad_s: the call ran longer than its time limit of 0.001 s"), err
        assert not out.exists() or not any(out.iterdir())
    rc, err = _dspsim("run", str(generous), "--out-dir", str(out))
    assert rc == 0, err
    rc, err = _dspsim("run", str(generous), "--time-limit", "-3")
    assert rc == 2 and "--time-limit: expected a number of seconds more than 0" in err
    # `none` lifts the config's own limit; another word is a usage error naming the option.
    rc, err = _dspsim("run", str(short), "--time-limit", "none", "--out-dir", str(tmp_path / "free"))
    assert rc == 0 and any((tmp_path / "free").iterdir()), err
    with pytest.raises(SystemExit) as e:
        _dspsim("run", str(generous), "--time-limit", "soon")  # (argparse's usage error)
    assert e.value.code == 2


@pytest.mark.parametrize("bad", [0, -2, "soon", True, [1]])
def test_a_run_config_time_limit_is_checked_naming_the_key(tmp_path, bad):
    with pytest.raises(sim.ConfigError, match=r"bn.yaml: time_limit_seconds: expected a number of seconds more "
                                              r"than 0"):
        load_config(_config(tmp_path, time_limit_seconds=bad))


class _Terminal(io.StringIO):
    """A stream that says it is a terminal, so progress bars draw on it (and planning runs ahead of the call)."""

    def isatty(self) -> bool:
        return True


def test_with_progress_bars_the_limit_covers_the_planning_done_ahead_of_the_call(tmp_path):
    cfg = load_config(_config(tmp_path, time_limit_seconds=0.001))
    with pytest.raises(sim.TimeLimitError, match=r"stopped while planning"):
        execute_with_progress(cfg, stream=_Terminal(), delay=0)
    m, run = execute_with_progress(dataclasses.replace(cfg, time_limit_seconds=600), stream=_Terminal(), delay=0)
    assert run.cycles > 0


def test_a_limit_that_expires_while_its_watchdog_starts_is_a_time_limit_error(monkeypatch):
    # On a loaded machine a very short limit can run out before the watchdog's thread has even told its starter
    # that it runs: the shot then lands in start() itself, and must still come out as the call's TimeLimitError.
    import sim.time_limit as time_limit

    start = time_limit._Watchdog.start

    def slow_start(dog):
        start(dog)
        deadline = time.monotonic() + 5
        while not dog._fired and time.monotonic() < deadline:
            time.sleep(0.001)  # the shot lands here, inside start()
        assert dog._fired

    monkeypatch.setattr(time_limit._Watchdog, "start", slow_start)
    with pytest.raises(sim.TimeLimitError, match="too slow"):
        time_limit.run_within(0.001, lambda: "too slow", lambda: None)


# --- callbacks and numpy's floating-point warnings ------------------------------------------------------------

@pytest.mark.parametrize("callback", [lambda tiles: None, lambda: None, lambda *, tiles, cycle: None])
def test_a_progress_callback_that_cannot_take_tiles_and_cycle_is_refused_naming_it(callback):
    """A callback that does not take (tiles, cycle) is refused before anything runs, naming the argument, and
    memory stays as it was (it failed from inside the engine with the caller's own TypeError before); likewise a
    search's progress callback that does not take (phase, done, total)."""
    m = _twice_machine()
    with pytest.raises(sim.KernelArgError, match=r"call: 'progress' is called as progress\(tiles, cycle\)"):
        with sim.registered_kernel(Twice("cb_arity")):
            m.call("fp_cb_arity_s", progress=callback, **TWICE_ARGS)
    assert (m.read(Y, N, F32) == SENTINEL).all()
    with pytest.raises(sim.KernelArgError, match=r"plan_with_choice: 'progress' is called as "
                                                 r"progress\(phase, done, total\)"):
        m.plan_with_choice("fp_gemm_s", a=0x80000000, b=0x90000000, c=0xA0000000, m=64, n=64, k=64,
                           progress=lambda phase: None)


def test_tiles_compute_without_numpy_warnings_and_the_callback_keeps_the_callers_settings():
    """An fp16 FusedBatchNormGrad whose x_backprop overflows fp16 (variance 0, so rs = 1/sqrt(epsilon)): its tiles
    compute inf as the chip does, with no RuntimeWarning, so warnings made errors do not break the call; the
    progress callback runs under the caller's own numpy settings."""
    import warnings

    from kernels.examples import example
    e = example("fused_batch_norm_grad", "small", "MT7004", "hp", "s")
    args = {**e.args, "reserve_space_2": 0x80000000}  # (memory never written there: a variance of zeros)
    m = sim.Simulator(e.chip, tuning_cache=False)
    e.place(m.write)
    seen: list[dict] = []
    with np.errstate(over="raise"), warnings.catch_warnings():
        warnings.simplefilter("error")
        run = m.call(e.symbol, progress=lambda tiles, cycle: seen.append(np.geterr()), **args)
        again = m.call(e.symbol, progress=lambda tiles, cycle: seen.append(np.geterr()), **args)  # (replayed)
    assert run.cycles == again.cycles and seen and all(s["over"] == "raise" for s in seen)
    dx = m.read(args["x_backprop"], int(np.prod(args["shape"])), np.float16)
    assert np.isinf(dx).any()


def test_a_call_interrupted_while_its_run_is_made_rolls_back(monkeypatch):
    """The Run a call returns is made before the call's memory journal is committed: a Ctrl-C landing while it is
    made (a few percent of a repeated call's time) fails the call and rolls its outputs back, as anywhere else in
    the call (it used to fail the call with the outputs kept)."""
    import sim.simulator as facade

    m = _bn_machine()
    before = m.memory.snapshot()

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(facade, "Run", interrupted)
    with pytest.raises(KeyboardInterrupt):
        m.call("fp_batch_norm_grad_s", **BN)
    assert m.memory.snapshot() == before
    monkeypatch.undo()
    assert m.call("fp_batch_norm_grad_s", **BN).cycles > 0  # and the simulator goes on
