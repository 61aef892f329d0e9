"""What makes a first call quick, and why each shortcut gives exactly what the long way gives.

- The tiling search simulates candidates fewest tiles first and leaves out those that cannot change the pick by
  a lower bound of any run of them: its pick is the one simulating every candidate gives, checked here against
  that exhaustive search; no run beats the bound.
- A plan simulated once (by the search or an earlier call) is not simulated again: a full call replays the
  effects the simulation recorded, and must leave the very bytes, cycles, trace and progress a simulating run
  leaves.
- A target file is parsed once per process; ``import sim`` imports no kernel module and no entry-point
  machinery; a run-config's random inputs are generated in place, chunk by chunk, to the same values as one
  ``rng.uniform(...)`` call; outputs are saved straight from simulated memory.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import sim
from kernels.examples import example, examples
from sim.config.run_config import RANDOM_CHUNK_ELEMENTS, ArraySpec, _random
from sim.inspect.summary import limiting_resource
from sim.timing import run_lower_bound_cycles
from sim.tuning import TILING_TOLERANCE

ROOT = Path(__file__).resolve().parent.parent


def _placed(ex, **kw) -> sim.Simulator:
    m = sim.Simulator(ex.chip, **kw)
    ex.place(m.write)
    return m


def _exhaustive_pick(ex, tilings, place: bool = True) -> tuple[dict, list[tuple[dict, int, int]]]:
    """The tie rule applied to each of ``tilings`` simulated to the end: (tiling, [(tiling, cycles, tiles)])."""
    m = _placed(ex, tuning_cache=False) if place else sim.Simulator(ex.chip, tuning_cache=False)
    rows = []
    for cand in tilings:
        try:
            run = m.call(ex.symbol, numerics=False, tiling=cand, **ex.args)
        except sim.LayoutError:  # a candidate that does not fit is dropped by the search too
            continue
        rows.append((dict(cand), run.cycles, run.plan.tile_count))
        assert _plan_bound(run, m.target) <= run.cycles, cand  # the bound the search leaves candidates out by
    best = min(c for _, c, _ in rows)
    tied = [i for i, (_, c, _) in enumerate(rows) if c <= best * (1 + TILING_TOLERANCE)]
    pick = min(tied, key=lambda i: (rows[i][2], rows[i][1], i))
    return rows[pick][0], rows


def _plan_bound(run: sim.Run, target: sim.Target) -> float:
    """The search's lower bound of ``run``'s plan (sim.planning.CallPlanner.lower_bound): its roofline's
    resources, barrier segments included, and each core's computes after its first ones' loads."""
    from sim.startup import startup
    from sim.timing import serial_compute_cycles
    serial = serial_compute_cycles(run.plan, target)
    return max(run_lower_bound_cycles(run.roofline, target), target.launch_overhead_cycles + max(serial.values()),
               startup(run.plan, target).bound_cycles(serial))


def _fitting(ex) -> list[dict]:
    """Every tiling of the call's space that passes its checks."""
    from sim.tuning import MAX_COMPLETIONS, prefilter
    m = sim.Simulator(ex.chip, tuning_cache=False)
    call = m.bind(ex.symbol, **ex.args)
    space = m.kernel_of(call).tiling_space(call, m.context(call))
    return [t for t in space.completions({}, MAX_COMPLETIONS)[0] if prefilter(space, t) is None]


CASES = [("fused_batch_norm_grad", "large", "FT78NE", "fp"), ("batch_norm_grad", "medium", "MT7004", "hp"),
         ("fake_quant_with_min_max_vars_gradient", "medium", "FT78NE", "fp"),
         ("conv2d_backprop_filter", "medium", "MT7004", "fp"), ("depthwise_conv2d_backprop_input", "medium",
                                                                 "FT78NE", "fp"),
         ("gemm", "medium", "MT7004", "hp")]


@pytest.mark.parametrize("kernel,size,chip,prefix", CASES)
def test_the_pruned_search_picks_what_simulating_every_candidate_picks(kernel, size, chip, prefix):
    """Of the tilings the search planned (all that fit in a small space; the climb's in a large one), it picks
    what simulating each of them to the end and applying the tie rule picks, though it stops or leaves out
    some; every number it reports is a full simulation's."""
    from sim.tuning import EXHAUSTIVE_CANDIDATES
    ex = example(kernel, size, chip, prefix)
    run = _placed(ex, tuning_cache=False).call(ex.symbol, numerics=False, **ex.args)
    planned = [t for t, _ in run.tiling.candidates]
    fitting = _fitting(ex)
    if len(fitting) <= EXHAUSTIVE_CANDIDATES:
        assert sorted(map(repr, planned)) == sorted(map(repr, fitting))
    expected, rows = _exhaustive_pick(ex, planned)
    assert run.tiling.tiling == expected
    if len(rows) > 1:
        assert run.tiling.source == "cost model" and 1 <= run.tiling.simulated <= len(rows)
        by_tiling = {repr(t): c for t, c, _ in rows}
        for tiling, cycles in run.tiling.candidates:  # a number is the candidate's full simulation
            assert cycles is None or cycles == by_tiling[repr(tiling)]


def test_a_run_that_can_no_longer_change_the_pick_is_stopped():
    """BatchNormGrad on MT7004 (fp16, medium): the candidate with 4x the pick's tiles ties with it, slower. Its run is
    stopped once it cannot end before the cheapest (with more tiles, only a run cheaper than the cheapest could
    leave the pick out of the tie or make a new cheapest): simulated to the end it is indeed no cheaper, and the
    pick is the exhaustive search's."""
    ex = example("batch_norm_grad", "medium", "MT7004", "hp")
    run = _placed(ex, tuning_cache=False).call(ex.symbol, numerics=False, **ex.args)
    stopped = [t for (t, c), note in zip(run.tiling.candidates, run.tiling.notes)
               if note == "stopped: it could no longer change the pick"]
    assert len(stopped) == 1
    expected, rows = _exhaustive_pick(ex, [t for t, _ in run.tiling.candidates])
    assert run.tiling.tiling == expected
    full = {repr(t): (cycles, tiles) for t, cycles, tiles in rows}
    cheapest = min(cycles for cycles, _ in full.values())
    picked_tiles = full[repr(run.tiling.tiling)][1]
    cycles, tiles = full[repr(stopped[0])]
    assert tiles > picked_tiles and cycles >= cheapest  # what allowed the stop, as the full run shows
    assert cycles <= cheapest * (1 + TILING_TOLERANCE)  # a tie: the stop the tolerance's limit would not make
    assert [c for t, c in run.tiling.candidates if t == stopped[0]] == [None]
    assert run.tiling.simulated == len(rows)  # (stopped, it was still simulated)


def test_a_ddr_bound_layer_leaves_out_the_smaller_tiles():
    """FusedBatchNormGrad 16x56x56x64 on FT78NE is DDR-bound: the candidate with 4x the tiles moves about the same
    bytes, its lower bound is within the tolerance of the first's cycles, so it is never
    simulated, and the pick is the exhaustive search's.  On a DDR whose bus never turns between reads and writes
    (no turn cycles, no write batch): the turns (sim/engine/turnaround.py) are a cost no lower bound counts, so on
    the shipped chip the first candidate's cycles lie further above its bound and both candidates are simulated."""
    ft = sim.load_target("FT78NE")
    no_turns = dataclasses.replace(ft, regions=tuple(
        dataclasses.replace(r, rows=dataclasses.replace(r.rows, write_to_read_cycles=0, read_to_write_cycles=0,
                                                            write_batch_bytes=0)) if r.rows else r
        for r in ft.regions))
    ex = example("fused_batch_norm_grad", "large", "FT78NE", "fp")
    ex = dataclasses.replace(ex, chip=no_turns, args=dict(ex.args, shape=[16, 56, 56, 64]))
    run = sim.Simulator(ex.chip, tuning_cache=False).call(ex.symbol, numerics=False, **ex.args)
    expected, rows = _exhaustive_pick(ex, [t for t, _ in run.tiling.candidates], place=False)
    most_tiles = max(rows, key=lambda r: r[2])
    assert most_tiles[0] != expected and len(rows) >= 2
    assert run.tiling.tiling == expected and run.tiling.simulated == len(rows) - 1
    assert [t for t, c in run.tiling.candidates if c is None] == [most_tiles[0]]


@pytest.mark.parametrize("kernel,size,chip,prefix", CASES[:4])
def test_a_replayed_call_leaves_what_a_simulated_call_leaves(kernel, size, chip, prefix):
    """The search simulated the picked plan timing-only; the full call then only replays its effects.  A second
    simulator given that tiling simulates with numerics: same bytes in every output, cycles, trace, progress."""
    ex = example(kernel, size, chip, prefix)
    replayed = _placed(ex, tuning_cache=False)
    ticks_a: list[tuple[int, int]] = []
    a = replayed.call(ex.symbol, progress=lambda n, c: ticks_a.append((n, c)), **ex.args)
    simulated = _placed(ex, tuning_cache=False)
    ticks_b: list[tuple[int, int]] = []
    b = simulated.call(ex.symbol, tiling=a.tiling.tiling, progress=lambda n, c: ticks_b.append((n, c)), **ex.args)
    assert (a.cycles, a.events) == (b.cycles, b.events)
    assert ticks_a == ticks_b and sum(n for n, _ in ticks_a) == a.plan.tile_count
    for out in ex.outputs:
        ra = replayed.read(out.addr, out.shape, out.dtype, core=out.core)
        rb = simulated.read(out.addr, out.shape, out.dtype, core=out.core)
        assert ra.tobytes() == rb.tobytes(), out.name
    assert replayed.memory.snapshot() == simulated.memory.snapshot()


def test_a_repeated_call_replays_and_computes_on_the_new_bytes():
    """The second call of the same plan is not simulated again (its trace is the first's), but its values come
    from the inputs in memory now: new inputs, new results, as the reference says."""
    ex = example("fake_quant_with_min_max_vars_gradient", "medium", "MT7004", "fp")
    m = _placed(ex, tuning_cache=False)
    first = m.call(ex.symbol, **ex.args)
    rng = np.random.default_rng(7)
    inputs = {d.name: (rng.uniform(-3, 3, d.shape).astype(d.dtype) if d.random is not None else d.array())
              for d in ex.data}
    ex.place(m.write, inputs)
    second = m.call(ex.symbol, **ex.args)
    assert second.events == first.events and second.events is not first.events
    want = ex.expected(inputs)
    for out in ex.outputs:
        got = m.read(out.addr, out.shape, out.dtype, core=out.core)
        np.testing.assert_allclose(got, want[out.name], rtol=out.rtol, atol=out.atol)


def test_a_failing_replay_rolls_memory_back():
    """A replayed compute that fails (here: the kernel's function replaced after the plan was simulated) leaves
    memory as it was, like a failing simulated run."""
    ex = example("fake_quant_with_min_max_vars_gradient", "medium", "MT7004", "fp")
    m = _placed(ex, tuning_cache=False)
    run = m.call(ex.symbol, numerics=False, **ex.args)
    tile = next(t for ph in run.plan.phases for ts in ph.tiles.values() for t in ts if t.compute is not None)
    before = m.memory.snapshot()

    def broken(*arrays):
        raise ValueError("kernel bug in a replayed tile")
    object.__setattr__(tile.compute, "fn", broken)
    with pytest.raises(sim.KernelCodeError, match="ValueError: kernel bug in a replayed tile"):
        m.call(ex.symbol, **ex.args)
    assert m.memory.snapshot() == before


def test_a_target_file_is_parsed_once_per_content(tmp_path):
    a, b = sim.Simulator("FT78NE"), sim.Simulator("ft78ne")
    assert a.target is b.target
    copy = tmp_path / "chip.yaml"
    copy.write_text((ROOT / "targets" / "FT78NE.yaml").read_text())
    c = sim.Simulator(str(copy))
    assert c.target is not a.target and c.target.cores == 8
    copy.write_text(copy.read_text().replace("clock_hz: 1800000000", "clock_hz: 1000000000"))
    d = sim.Simulator(str(copy))
    assert d.target.clock_hz == 1_000_000_000 and c.target.clock_hz == 1_800_000_000


def test_import_sim_imports_no_kernel_or_plotting_module():
    """(SimPy imports importlib.metadata for its version: the registry's entry points are listed on first use.)"""
    code = ("import sys, sim; sim.Simulator('MT7004'); "
            "print(sorted(m for m in sys.modules if m.startswith(('kernels.', 'matplotlib', 'pandas', 'dask', "
            "'tqdm', 'ruamel')) and m not in ('kernels.base', 'kernels.registry')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"
    # The kernels come in with the first lookup or listing.
    listed = subprocess.run([sys.executable, "-m", "sim.cli", "kernels"], capture_output=True, text=True, cwd=ROOT)
    assert listed.returncode == 0 and "gemm" in listed.stdout


@pytest.mark.parametrize("dtype", ["float32", "float16", "float64"])
def test_random_inputs_drawn_in_chunks_equal_one_draw(dtype):
    shape = (3, RANDOM_CHUNK_ELEMENTS // 2 + 7)  # more than two chunks, not a multiple of one
    spec = ArraySpec("x", 0x80000000, shape, np.dtype(dtype), None, {"random": {"seed": 11, "low": -2.5, "high": 4.0}})
    want = np.random.default_rng(11).uniform(-2.5, 4.0, size=shape).astype(dtype)
    got = _random(spec, {"seed": 11, "low": -2.5, "high": 4.0}, "x")
    assert got.dtype == want.dtype and got.tobytes() == want.tobytes()
    into = np.full(shape, np.nan, dtype)
    assert _random(spec, {"seed": 11, "low": -2.5, "high": 4.0}, "x", into) is into
    assert into.tobytes() == want.tobytes()


def test_the_collector_is_paused_for_a_call_and_comes_back_as_it_was():
    import gc

    from sim.engine.collector import collector_paused
    seen = []
    ex = example("fake_quant_with_min_max_vars_gradient", "tiny", "FT78NE", "fp")
    m = _placed(ex, tuning_cache=False)
    m.call(ex.symbol, progress=lambda n, c: seen.append(gc.isenabled()), **ex.args)
    assert seen and not any(seen) and gc.isenabled()
    with pytest.raises(RuntimeError), collector_paused():
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the outer pause still holds
        raise RuntimeError("a failing call")
    assert gc.isenabled()
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()  # off before: left off
    finally:
        gc.enable()


def test_what_a_call_keeps_goes_to_the_collectors_oldest_generation_unwalked(monkeypatch):
    """A call's plan, run and trace are not walked by the collector's young passes after it (they would free
    nothing); a user's frozen objects stay frozen; a full pass comes once the promoted objects outnumber the heap."""
    import gc

    import sim.engine.collector as collector
    ex = example("fused_batch_norm_grad", "medium", "FT78NE", "fp")
    m = _placed(ex, tuning_cache=False)
    # (what earlier tests in this process promoted must not bring the full pass into this call; and a call this
    # small stays under the floor below which nothing is promoted: tests/test_hostile_inputs.py)
    monkeypatch.setattr(collector, "PROMOTE_FLOOR", 0)
    monkeypatch.setattr(collector, "_promoted_since_full", 0)
    monkeypatch.setattr(collector, "_alive_after_full", 0)
    passes = []

    def count(phase, info):
        if phase == "start":
            passes.append(info["generation"])
    gc.callbacks.append(count)
    try:
        run = m.call(ex.symbol, numerics=False, **ex.args)
        assert not passes  # neither during the call nor when it ended (the floor is far off)
        def young_ids():
            return {id(o) for o in gc.get_objects(0)} | {id(o) for o in gc.get_objects(1)}
        young = young_ids()
        assert id(run) not in young and id(run.plan) not in young and id(run.events) not in young
        assert gc.get_count()[0] < 100
        # A user froze objects (before a fork): they stay frozen, and what the call kept stays young.
        gc.freeze()
        try:
            run = m.call(ex.symbol, numerics=False, **ex.args)
            assert gc.get_freeze_count() > 0 and id(run) in young_ids()
        finally:
            gc.unfreeze()
        # Past the floor, the call that crosses it ends with one full pass.
        monkeypatch.setattr(collector, "FULL_PASS_FLOOR", 0)
        passes.clear()
        m.call(ex.symbol, numerics=False, **ex.args)
        assert passes == [2]
        assert collector._promoted_since_full == 0 and collector._alive_after_full > 0
        # A process may pay that pass when it chooses (before timing something): one full pass, the count restarts.
        monkeypatch.setattr(collector, "FULL_PASS_FLOOR", 2_000_000)
        m.call(ex.symbol, numerics=False, **ex.args)
        assert collector._promoted_since_full > 0
        passes.clear()
        collector.collect_now()
        assert passes == [2] and collector._promoted_since_full == 0
    finally:
        gc.callbacks.remove(count)


def test_only_the_picked_plan_is_kept_after_a_search():
    """The losing candidates' plans are dropped once the search is over (a layer's plans hold hundreds of
    thousands of objects); the picked one stays, with its timing, for the calls that follow."""
    ex = example("fused_batch_norm_grad", "large", "FT78NE", "fp")
    m = sim.Simulator(ex.chip, tuning_cache=False)
    ex.place_values(m.write)
    run = m.call(ex.symbol, numerics=False, **ex.args)
    assert len(run.tiling.candidates) >= 2
    kept = list(m._plans._plans.values())
    assert [e.plan for e in kept] == [run.plan] and kept[0].timing is not None


@pytest.mark.parametrize("ex", [pytest.param(e, id=e.example_id) for e in examples(size="medium")])
def test_no_run_beats_the_search_bound(ex):
    """The bound the search prunes with (roofline resources after the launch, the DMA setup and the region's
    latency) is a physical one: no simulated run is faster, and it is within a few percent of DDR-bound runs."""
    m = sim.Simulator(ex.chip, tuning_cache=False)
    ex.place_values(m.write)
    run = m.call(ex.symbol, numerics=False, **ex.args)
    bound = run_lower_bound_cycles(run.roofline, m.target)
    assert bound > run.roofline.cycles
    assert run.cycles >= bound
    # The plan's own bound (its busiest core, not an even spread over the cores): plans that DDR bounds by far
    # (every other resource under two thirds of it: no two near-equal resources to overlap) come close to it.
    per_plan = {**run.roofline.resource_cycles, **run.roofline.busiest_core_cycles}
    limited = limiting_resource(run.roofline, run.summaries(), run.cycles)
    others = max(v for k, v in per_plan.items() if k != "ddr")
    if per_plan["ddr"] * 2 / 3 >= others and limited == "ddr" and ex.kernel != "conv2d_backprop_filter":
        assert run.cycles <= 1.05 * bound


def test_memory_views_for_filling_and_saving_in_place():
    """writable_view fills a dense input where it lies (journaled, so a rollback undoes it); read_only_view reads
    it back without a copy and refuses writes; a span across a page boundary gets None / a copy; an unmapped one
    the usual MemoryFault naming the range."""
    from sim.model.memory import PAGE_BYTES
    m = sim.Simulator("FT78NE")
    mem = m.memory
    mem.begin()
    view = mem.writable_view(0x80000000, (4, 8), np.dtype("float32"))  # journaled when taken
    assert view is not None
    view[...] = np.arange(32, dtype=np.float32).reshape(4, 8)
    back = mem.read_only_view(0x80000000, (4, 8), np.float32)
    assert back.base is not None and not back.flags.writeable
    assert np.array_equal(back, np.arange(32, dtype=np.float32).reshape(4, 8))
    with pytest.raises(ValueError):
        back[0, 0] = 1
    mem.rollback()
    assert not m.read(0x80000000, (4, 8), np.float32).any()
    edge = 0x80000000 + PAGE_BYTES - 8  # 16 bytes across a page boundary
    assert mem.writable_view(edge, (4,), np.dtype("float32")) is None
    m.write(edge, np.arange(4, dtype=np.float32))
    assert np.array_equal(mem.read_only_view(edge, (4,), np.float32), np.arange(4, dtype=np.float32))
    with pytest.raises(sim.MemoryFault, match="0x60000000"):
        mem.writable_view(0x60000000, (4,), np.dtype("float32"))


def test_dspsim_run_saves_outputs_equal_to_memory(tmp_path):
    """Outputs are streamed from simulated memory to .npy files: what np.load reads is what read() gives."""
    from sim.config.run_config import load_config
    from sim.run.runner import execute, save_outputs
    cfg = load_config(ROOT / "configs" / "ft78ne_fused_batch_norm_grad_s.yaml")
    m, _ = execute(cfg)
    paths = save_outputs(cfg, m, tmp_path)
    for spec, path in zip(cfg.outputs, paths):
        saved = np.load(path)
        assert saved.dtype == spec.dtype and saved.flags.writeable
        assert saved.tobytes() == m.read(spec.addr, spec.shape, spec.dtype, core=spec.core).tobytes()
