"""Inputs a fuzzing campaign found unguarded, each now refused on one line (a SimError naming what is wrong) or
taken as it should be: output paths that are devices, pipes, folders or not paths; a tiling space holding values
the search cannot use; a tuning-cache flag that is not one; a call that ends past its time limit; numpy ints in a
user kernel's plan reaching the trace writer; the collector keeping a loop's dropped cycles alive."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import weakref
from pathlib import Path

import numpy as np
import pytest
from tiny_kernels import Twice

import sim
import sim.time_limit as time_limit
from sim.engine import collector
from sim.files.atomic import atomic_write_text
from sim.model.tiling import IntKey, TilingSpace

REPO = Path(__file__).resolve().parent.parent
X, Y, N = 0xA0000000, 0xA0100000, 1024
F32 = np.dtype(np.float32)


# -- output paths -------------------------------------------------------------------------------------------

def test_a_pipe_is_written_into_not_replaced(tmp_path):
    """A rename over a FIFO (or a device: ``--trace /dev/null``) would replace it by a file: it is written into."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # a reader, there before the write (its buffer holds it)
    try:
        atomic_write_text(fifo, "through the pipe")
        assert os.read(fd, 100) == b"through the pipe"
    finally:
        os.close(fd)
    assert fifo.is_fifo()


def test_a_pipe_nothing_reads_is_refused_at_once(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(sim.SimError, match="a named pipe that no process reads"):
        atomic_write_text(fifo, "nobody listens")
    assert fifo.is_fifo()


@pytest.mark.parametrize("path,match", [(None, "expected the path of a file"), (5, "expected the path of a file"),
                                        ("", "expected the path of a file"), ("folder", "it is a folder")])
def test_output_paths_that_are_no_file_are_refused(tmp_path, path, match):
    (tmp_path / "folder").mkdir()
    target = tmp_path / path if isinstance(path, str) and path else path
    with pytest.raises(sim.SimError, match=match):
        atomic_write_text(target, "text")  # type: ignore[arg-type]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["folder"]  # no temporary file left


def test_a_trace_of_numpy_int_cores_and_ids_is_written(tmp_path):
    """The plan check takes numpy int64 core numbers and tile ids; the trace writer writes them as numbers."""
    def numpy_ints(p, c, x):
        phase = p.phases[0]
        tiles = {np.int64(core): tuple(_replace(t, tile_id=np.int64(t.tile_id)) for t in ts)
                 for core, ts in phase.tiles.items()}
        return _replace(p, cores=tuple(np.int64(core) for core in p.cores), phases=(_replace(phase, tiles=tiles),))

    with sim.registered_kernel(Twice("numpy_ints", numpy_ints)):
        m = sim.Simulator("FT78NE")
        m.write(X, np.arange(N, dtype=F32))
        run = m.call("fp_numpy_ints_s", x=X, y=Y, n=N, core_mask=0x3)
        for name in ("t.json", "t.csv"):
            run.write_trace(tmp_path / name)
        summary = run.summary_text()
    doc = json.loads((tmp_path / "t.json").read_text())
    computes = [e for e in doc["traceEvents"] if e.get("cat") == "compute"]
    assert len(computes) == 2 and "cores [0, 1]" in summary
    assert len((tmp_path / "t.csv").read_text().splitlines()) == len(run.events) + 1
    np.testing.assert_array_equal(m.read(Y, N, F32), 2 * np.arange(N, dtype=F32))


def _replace(obj, **changes):
    import dataclasses
    return dataclasses.replace(obj, **changes)


def test_a_gantt_chart_in_an_unknown_format_is_refused_in_one_line(tmp_path):
    pytest.importorskip("matplotlib")
    run = [sys.executable, "-m", "sim.cli"]
    trace = tmp_path / "bng.json"
    done = subprocess.run(run + ["run", str(REPO / "configs" / "ft78ne_batch_norm_grad_s.yaml"), "--out-dir",
                                 str(tmp_path), "--trace", trace.name], capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stderr
    done = subprocess.run(run + ["trace", "plot", str(trace), "-o", str(tmp_path / "p.xyz")], capture_output=True,
                          text=True, cwd=REPO)
    assert done.returncode == 2 and "unknown picture format 'xyz'" in done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "p.xyz").exists()


# -- a kernel's tiling space ----------------------------------------------------------------------------------

def _relu_grad():
    """examples/relu_grad.py's kernel class and its layout helper."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("relu_grad_hostile_spaces", REPO / "examples" / "relu_grad.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _call_with_space(make_key, **space):
    """examples' ReluGrad with the tiling space of one key ``make_key()`` (made inside the call, as a kernel
    makes its space) and ``space``'s callbacks."""
    module = _relu_grad()

    def tiling_space(self, call, ctx):
        lay = module._Layout(call, ctx)
        return TilingSpace(make_key(), fit=lambda t: lay.check(t["tile_elements"]), **space)

    kernel = type("Spaced", (module.ReluGrad,), {"name": "spaced", "tiling_space": tiling_space})()
    with sim.registered_kernel(kernel):
        m = sim.Simulator("FT78NE", tuning_cache=False)
        m.write(X, np.ones(4096, F32))
        before = m.memory.snapshot()
        try:
            return m.call("fp_spaced_s", dy=X, x=X + 0x400000, dx=X + 0x800000, shape=[4096], core_mask=0xFF)
        finally:
            if sys.exc_info()[0] is not None:
                assert m.memory.snapshot() == before


def _key(values, lo=1, hi=4096):
    return lambda: IntKey("tile_elements", lo, hi, values=values)


@pytest.mark.parametrize("make_key,space,match", [
    (_key([float("nan"), 512]), {}, "lists nan, not an integer"),
    (_key(["abc", 512]), {}, "lists 'abc', not an integer"),
    (_key([float("inf")]), {}, "lists inf, not an integer"),
    (_key(512), {}, "values must be a sequence"),
    (_key([512], hi=None), {}, "integer bounds lo and hi"),
    # (an endless iterator was exhausted: this one ends, its values out of range, so a search without the cap
    # fails quickly instead of eating the machine's memory)
    (_key(lambda chosen: iter(range(10_000, 12_000))), {}, "lists more than 1024 values"),
    (_key([512, 1024]), {"tiles": lambda t: None}, r"tiles\(\) gave None"),
    (_key([512, 1024, 128, 64]), {"bound": lambda t: None}, r"bound\(\) gave None"),
    (_key([512, 1024, 128, 64]), {"bound": lambda t: "x"}, r"bound\(\) gave 'x'"),
    (_key([512, 1024]), {"tiles": 3}, "tiles must be a function"),
], ids=["nan", "text", "inf", "a number", "no hi", "endless", "tiles None", "bound None", "bound text", "tiles 3"])
def test_a_tiling_space_holding_what_the_search_cannot_use_is_refused(make_key, space, match):
    with pytest.raises(sim.PlanError, match=match) as info:
        _call_with_space(make_key, **space)
    assert info.value.rule == "tiling-space" and info.value.kernel == "spaced"


def test_integral_floats_and_numpy_ints_are_values_a_key_may_list():
    run = _call_with_space(_key([512.0, np.int64(1024)]))
    assert run.tiling.tiling["tile_elements"] in (512, 1024)


@pytest.mark.parametrize("listed,match", [(None, "not an iterable of tilings"), ([1, 2, 3], "not a tiling")])
def test_a_kernel_listing_what_is_no_tiling_is_refused(listed, match):
    module = _relu_grad()

    class Listed(module.ReluGrad):
        """The older form of kernel: ``tilings()`` and no tiling space (ReluGrad's hidden)."""

        name = "listed"
        tiling_space = property(lambda self: (_ for _ in ()).throw(AttributeError("tiling_space")))

        def tilings(self, call, ctx):
            return listed

    kernel = Listed()
    assert not hasattr(kernel, "tiling_space")
    with sim.registered_kernel(kernel), pytest.raises(sim.PlanError, match=match):
        sim.Simulator("FT78NE", tuning_cache=False).call("fp_listed_s", dy=X, x=X + 0x400000, dx=X + 0x800000,
                                                         shape=[4096])


# -- the simulator's settings and its time limit ------------------------------------------------------------------

@pytest.mark.parametrize("flag", ["no", "false", 0, 2, [0]])
def test_a_tuning_cache_flag_must_be_a_bool(flag):
    with pytest.raises(sim.KernelArgError, match="'tuning_cache': expected True, False or None"):
        sim.Simulator("FT78NE", tuning_cache=flag)


def test_a_call_ending_past_its_limit_fails_though_the_watchdog_never_fired(monkeypatch):
    """The watchdog's thread needs the interpreter to run: a call may end a few milliseconds past its limit before
    it fires.  Such a call fails all the same (its result would otherwise depend on the thread switch)."""
    class Asleep:
        def __init__(self, seconds):
            pass

        def start(self):
            pass

        def stop(self):
            return False

    monkeypatch.setattr(time_limit, "_Watchdog", Asleep)
    import time
    with pytest.raises(sim.TimeLimitError, match="stopped while sleeping"):
        time_limit.run_within(0.001, lambda: "stopped while sleeping", time.sleep, 0.01)
    assert time_limit.run_within(10.0, lambda: "never", lambda: 7) == 7


# -- the collector ----------------------------------------------------------------------------------------------

def test_a_small_call_leaves_the_callers_dropped_cycles_to_the_young_passes():
    """A call that made few objects promotes none: a cycle the caller dropped before it is freed by the collector's
    young passes, not kept until a full one (a loop of calls each dropping a simulator in a cycle grew without
    bound)."""
    class Node:
        pass

    m = sim.Simulator("FT78NE", tuning_cache=False)
    m.write(X, np.arange(N, dtype=F32))
    with sim.registered_kernel(Twice("small")):
        m.call("fp_small_s", x=X, y=Y, n=N)  # (planned once: the call below makes few objects)
        gc.collect()
        node = Node()
        node.me = node  # type: ignore[attr-defined]
        alive = weakref.ref(node)
        del node
        m.call("fp_small_s", x=X, y=Y, n=N)
        assert gc.get_count()[0] < collector.PROMOTE_FLOOR
        gc.collect(1)  # the young and middle generations only
        assert alive() is None


def test_the_collector_comes_back_on_though_its_full_pass_is_interrupted(monkeypatch):
    """A Ctrl-C landing in the full pass a call's end runs left the collector off for the rest of the process."""
    def interrupted() -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(collector, "_promote_survivors", interrupted)
    assert gc.isenabled()
    with pytest.raises(KeyboardInterrupt), collector.collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_a_shipped_symbol_stays_in_the_table_while_kernels_register(monkeypatch):
    """The symbol table is refreshed in place, never emptied: lookups take no lock, and one in another thread
    between an emptying and the refill missed every symbol (a shipped kernel's bind failed with 'unknown kernel
    symbol' while a user kernel was registered and unregistered).  Every change to the table is watched here."""
    from kernels import registry
    registry.lookup("fp_gemm_s")  # (the shipped kernels loaded)
    gaps: list[str] = []

    class Watched(dict):
        def _look(self, what: str) -> None:
            if "fp_gemm_s" not in self:
                gaps.append(what)

        def clear(self) -> None:
            super().clear()
            self._look("clear")

        def __delitem__(self, key) -> None:
            super().__delitem__(key)
            self._look("del")

        def update(self, *args, **kwargs) -> None:
            super().update(*args, **kwargs)
            self._look("update")

    monkeypatch.setattr(registry._STATE, "symbols", Watched(registry._STATE.symbols))
    kernel = Twice("twice_watched")
    sim.register_kernel(kernel)
    sim.unregister_kernel(kernel)
    assert not gaps and "fp_twice_watched_s" not in registry._STATE.symbols


def test_what_a_simulator_keeps_for_repeat_calls_is_bounded_and_cleared(monkeypatch):
    """Each distinct call kept its replay program (its plan's effects: tiles, transfers and all) and its tiling
    choice for good, and clear_caches() did not give the programs back: memory grew call after call."""
    from sim.model import memory as memory_module
    monkeypatch.setattr(memory_module, "MAX_KEPT_VALUES", 2)
    m = sim.Simulator("FT78NE", tuning_cache=False)
    m.write(X, np.arange(N, dtype=F32))
    with sim.registered_kernel(Twice("kept")):
        for i in range(5):
            y = Y + i * 0x10000
            for _ in range(2):  # the first call simulates, the second replays
                m.call("fp_kept_s", x=X, y=y, n=N)
            np.testing.assert_array_equal(m.read(y, N, F32), 2 * np.arange(N, dtype=F32))
        assert len(m.memory._values) == 2
        m.clear_caches()
        assert not m.memory._values and not m.memory._kept
        m.call("fp_kept_s", x=X, y=Y, n=N)  # (made afresh as needed)


def test_the_tiling_choices_a_simulator_remembers_are_bounded(monkeypatch):
    from sim.tuning import TilingChoice
    from sim.tuning import choice as choice_module
    monkeypatch.setattr(choice_module, "MAX_CHOICES", 3)
    cache = choice_module.TilingCache()
    kernel = object()
    for i in range(5):
        cache.put("fp_x_s", ("call", i), 0.01, TilingChoice({"k": i}, "cost model"), kernel=kernel)
    assert cache.get("fp_x_s", ("call", 2), 0.01, kernel=kernel) is not None  # (used: kept over the older ones)
    cache.put("fp_x_s", ("call", 5), 0.01, TilingChoice({"k": 5}, "cost model"), kernel=kernel)
    assert [cache.get("fp_x_s", ("call", i), 0.01, kernel=kernel) is not None
            for i in range(6)] == [False, False, True, False, True, True]


def test_a_scheduler_address_that_is_no_address_is_refused_in_one_line():
    pytest.importorskip("distributed")
    from sim.sweep.executors import run_dask
    with pytest.raises(sim.SimError, match=r"--scheduler notaurl: cannot connect to a Dask scheduler there \(missing "
                                           r"port number"):
        run_dask([], "notaurl", lambda row: None, None)  # type: ignore[arg-type]
