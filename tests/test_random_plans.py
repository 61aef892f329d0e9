"""Random plans (tests/random_plans.py) through the engine and the simulator.

- No run beats the bounds the search prunes with; a core computes one tile at a time and a DMA engine streams one
  transfer at a time.
- Every stored block is its compute of the block its load read; a replay of a run's recorded effects leaves exactly
  the bytes a simulating run leaves, or, when a tile fails, the bytes there were.
- The plan check passes them, and refuses them with their slots overlapping where tiles would race.
- As a user kernel's plan through ``Simulator.call``: the same bytes, a replayed repeat call, summaries, trace
  files and the report page; memory as it was when a tile fails.
- The same cycles and trace whatever the process's string hash seed."""

from __future__ import annotations

import dataclasses
import json
import os
import pickle
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sim
from kernels.common.args import check_args, require_address
from sim.engine.engine import Engine
from sim.engine.events import Recorder
from sim.errors import PlanError
from sim.inspect.trace_tools import load_trace, summarize
from sim.model.call import ArgSpec, BoundCall, Buffer
from sim.model.plan import Plan, Tile, Transfer
from sim.model.plan_check import check_plan
from sim.report.page import report_html
from sim.startup import startup
from sim.timing import loop_cycles, roofline, run_lower_bound_cycles, serial_compute_cycles
from tests.random_plans import OUT_BYTES, PHASE_OUT_BYTES, doubled, filled, random_plans, with_fn

FT78NE = sim.load_target("FT78NE")


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(target=st.sampled_from([FT78NE, sim.load_target("MT7004")]), data=st.data())
def test_no_run_beats_its_bounds_and_no_unit_does_two_things_at_once(target, data):
    """The search's bounds (roofline resources after the launch, setup and latency; each core's computes one after
    another; what must land before the first) are physical: no run is shorter; every event lies in the run; and
    the roofline's bytes through each region are what the run's transfers moved there."""
    plan = data.draw(random_plans(target))
    m = sim.Simulator(target, tuning_cache=False)
    eng = Engine(m.target, m.memory, Recorder(), numerics=False)
    cycles = eng.run(plan)
    serial = serial_compute_cycles(plan, target)
    assert cycles >= run_lower_bound_cycles(roofline(plan, target), target)
    assert cycles >= target.launch_overhead_cycles + max(serial.values())
    assert cycles >= startup(plan, target).bound_cycles(serial)
    busy: dict[tuple[int, str], list[tuple[int, int]]] = {}
    for ev in eng.recorder.events:
        assert 0 <= ev.start <= ev.end <= cycles
        busy.setdefault((ev.core, ev.unit), []).append((ev.start, ev.end))
    for spans in busy.values():  # (a compute unit, or one DMA engine: its transfers from engine to landing)
        spans.sort()
        assert all(end <= start for (_, end), (start, _) in zip(spans, spans[1:]))
    # The roofline's bytes through each region (the early stop's count) are what the run's transfers moved there.
    moved: dict[str, int] = {}
    for ev in eng.recorder.events:
        if ev.kind in ("dma_in", "dma_out"):
            for region in (ev.src_region, ev.dst_region):
                moved[region] = moved.get(region, 0) + ev.bytes
    counted = roofline(plan, target).region_bytes
    assert {r: b for r, b in counted.items() if b} == {r: b for r, b in moved.items() if r in counted}


class _Fails:
    """A tile function that fails on its ``n``-th call (counted across tiles)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __call__(self, a: np.ndarray) -> tuple[np.ndarray]:
        self.n -= 1
        if self.n < 0:
            raise ValueError("a tile that fails")
        return doubled(a)


def _bytes(m: sim.Simulator) -> dict:
    """Every chunk of ``m``'s memory written and not all zero, and its bytes."""
    return m.memory.snapshot()


def _with_engines_twice_as_fast(target: sim.Target) -> sim.Target:
    doc = yaml.safe_load(Path(target.path).read_text())
    doc["dma"]["engine_bytes_per_cycle"] *= 2
    path = Path(tempfile.mkdtemp()) / f"{target.name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return sim.load_target(path)


FAST_ENGINES = {t.name: _with_engines_twice_as_fast(t) for t in (FT78NE, sim.load_target("MT7004"))}


@settings(max_examples=40, deadline=None, derandomize=True, database=None)
@given(target=st.sampled_from([FT78NE, sim.load_target("MT7004")]), data=st.data())
def test_dma_engines_twice_as_fast_never_slow_a_run(target, data):
    """A stream's fair share is weighed by its bytes through memory, not by its engine's beats (docs/timing-model.md):
    when the engines stream twice as fast, no random plan takes longer.  (Weighed by the engine's padded beats, 104
    of 600 such plans took longer, bench/timing_model_iii.md.)"""
    plan = data.draw(random_plans(target))
    runs = [Engine(t, sim.Simulator(t, tuning_cache=False).memory, Recorder(), numerics=False).run(plan)
            for t in (target, FAST_ENGINES[target.name])]
    assert runs[1] <= runs[0], runs


@settings(max_examples=25, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(plan=random_plans(FT78NE), fail_at=st.sampled_from([None, 0, 3, 17]))
def test_a_replay_leaves_the_bytes_a_simulating_run_leaves(plan, fail_at):
    """Each tile's compute doubles its block and adds one, in its AM slot, which the next tile of the slot loads
    over: the order of copies and computes decides the bytes.  A replay of a timing-only run's effects leaves what
    a run with numerics leaves; with a tile that fails, a replay inside a journal rolled back leaves memory as it
    was."""
    plan = with_fn(plan, doubled)
    simulated = filled(FT78NE)
    Engine(simulated.target, simulated.memory, Recorder(), numerics=True).run(plan)
    effects: list = []
    replayed = filled(FT78NE)
    Engine(replayed.target, replayed.memory, Recorder(), numerics=False, effects=effects).run(plan)
    eng = Engine(replayed.target, replayed.memory, Recorder(), numerics=True)
    eng.replay(effects)
    assert _bytes(replayed) == _bytes(simulated)
    eng.replay(effects)  # again (the program kept with the memory): the same steps on the bytes now there
    Engine(simulated.target, simulated.memory, Recorder(), numerics=True).run(plan)
    assert _bytes(replayed) == _bytes(simulated)
    if fail_at is None:
        return
    failing = with_fn(plan, _Fails(fail_at))
    fx: list = []
    Engine(replayed.target, replayed.memory, Recorder(), numerics=False, effects=fx).run(failing)
    before = _bytes(replayed)
    computes = sum(1 for e in fx if len(e) == 3)
    replayed.memory.begin()
    if fail_at < computes:
        with pytest.raises(sim.KernelCodeError, match="its compute raised ValueError: a tile that fails"):
            Engine(replayed.target, replayed.memory, Recorder(), numerics=True).replay(fx)
        replayed.memory.rollback()
        assert _bytes(replayed) == before
    else:
        Engine(replayed.target, replayed.memory, Recorder(), numerics=True).replay(fx)
        replayed.memory.commit()


def _panel(m: sim.Simulator, plan: Plan, tile: Tile) -> np.ndarray:
    """The block ``tile`` loads, as the memory ``m`` held it before the run: read from where its load reads it, or,
    from a staged buffer, from where the staging tiles that filled it read it."""
    (load,) = tile.loads
    rows, cols = (1, *load.shape) if len(load.shape) == 1 else load.shape
    row_stride = load.src_strides[0] if len(load.shape) == 2 else cols * load.itemsize
    src = load.src
    if tile.uses:
        fills = [t for p in plan.phases for ts in p.tiles.values() for t in ts if set(t.fills) & set(tile.uses)]
        staged = next(f.loads[0] for f in fills if f.loads[0].dst <= src < f.loads[0].dst + f.loads[0].size_bytes)
        src = staged.src + (src - staged.dst)
    dtype = np.dtype(np.float32) if load.itemsize == 4 else np.dtype(np.uint8)
    return np.concatenate([m.read(src + r * row_stride, (cols,), dtype) for r in range(rows)]).view(np.float32)


@settings(max_examples=40, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(target=st.sampled_from([FT78NE, sim.load_target("MT7004")]), data=st.data())
def test_every_stored_block_is_its_loaded_block_computed(target, data):
    """Whatever the timing (slots reused, blocks staged through GSM buffers and refilled, shares moving as one
    synchronised transfer), each tile that stores writes exactly its compute of the block its load read: the block
    as the memory held it before the run (through the staging tile that filled its buffer, if it read one)."""
    plan = with_fn(data.draw(random_plans(target)), doubled)
    before = filled(target)
    m = filled(target)
    Engine(m.target, m.memory, Recorder(), numerics=True).run(plan)
    stored = 0
    for phase in plan.phases:
        for tiles in phase.tiles.values():
            for tile in tiles:
                if tile.compute is None or not tile.stores:
                    continue
                (store,) = tile.stores
                want = doubled(_panel(before, plan, tile))[0]
                got = m.read(store.dst, want.shape, np.float32)
                assert np.array_equal(got, want, equal_nan=True), (tile.tile_id, hex(store.dst))
                stored += 1
    assert stored or not any(t.stores for p in plan.phases for ts in p.tiles.values() for t in ts)


def _buffers(x: int, y: int) -> tuple[Buffer, Buffer]:
    """A random plan's call's buffers: x, what it reads from DDR (its first 256 MiB), and y, where it writes (a
    phase's outputs each, from x's end on)."""
    f32 = np.dtype(np.float32)
    return (Buffer("x", x, (OUT_BYTES // 4,), f32, "input"), Buffer("y", y, (PHASE_OUT_BYTES,), f32, "output"))


def _check(plan: Plan, target: sim.Target) -> None:
    """The plan check on ``plan``, as a call on every core whose input and output buffers hold what random plans
    read from and write to DDR."""
    ddr = target.region("ddr").base
    call = BoundCall("fp_random_s", "fp32", "s", tuple(range(target.cores)), _buffers(ddr, ddr + OUT_BYTES), {})
    ctx = sim.Simulator(target, tuning_cache=False).context(call)
    operands = (ctx.vector_level,) + ((ctx.scalar_level,) if ctx.scalar_level is not None else ())
    check_plan(plan, call, target, ctx.levels, operands, "random", lambda loop: loop_cycles(loop, target.core))


def _slot_one_over_slot_zero(plan: Plan, target: sim.Target) -> Plan:
    """``plan`` with its AM slot 1 moved onto slot 0 (streaming phases put it 128 KiB on, staged ones 64 KiB on),
    so that a tile's block overlaps the slot of the tile before it."""
    am = target.region("am").base

    def moved(addr: int) -> int:
        for at in (am + 131072, am + 65536):
            if at <= addr < at + (at - am):
                return addr - (at - am)
        return addr

    def transfer(t: Transfer) -> Transfer:
        return dataclasses.replace(t, src=moved(t.src), dst=moved(t.dst))

    def tile(t: Tile) -> Tile:
        c = t.compute
        if c is not None:
            c = dataclasses.replace(c, inputs=tuple(dataclasses.replace(o, addr=moved(o.addr)) for o in c.inputs),
                                    outputs=tuple(dataclasses.replace(o, addr=moved(o.addr)) for o in c.outputs))
        return dataclasses.replace(t, loads=tuple(map(transfer, t.loads)), compute=c,
                                   stores=tuple(map(transfer, t.stores)))
    return dataclasses.replace(plan, phases=tuple(
        dataclasses.replace(p, tiles={c: tuple(map(tile, ts)) for c, ts in p.tiles.items()}) for p in plan.phases))


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(target=st.sampled_from([FT78NE, sim.load_target("MT7004")]), data=st.data())
def test_the_plan_check_passes_every_random_plan_and_refuses_it_with_its_slots_overlapping(target, data):
    """Random plans keep their two AM slots apart and stage through buffers the rules allow: the plan check passes
    them.  With slot 1 moved onto slot 0, a tile's loads overwrite the block the tile before it still computes on
    (as the chip would, corrupting it) wherever two tiles of different slots follow each other on a core: the check
    refuses exactly those, by its staging-alias rule."""
    plan = data.draw(random_plans(target))
    _check(plan, target)
    racing = any(a.slot != b.slot for p in plan.phases for ts in p.tiles.values()
                 for a, b in zip([t for t in ts if not t.fills], [t for t in ts if not t.fills][1:]))
    if racing:
        with pytest.raises(PlanError) as refused:
            _check(_slot_one_over_slot_zero(plan, target), target)
        assert refused.value.rule == "staging-alias"
    else:
        _check(_slot_one_over_slot_zero(plan, target), target)


def _fields(ev) -> tuple:
    """What a trace file keeps of an event: its core, unit, kind, cycles, bytes, tile and phase."""
    return (ev.core, ev.unit, ev.kind, ev.start, ev.end, ev.bytes, ev.tile, ev.phase)


class _GivenPlan:
    """A user kernel whose plan is whatever the test sets (``given``): it reads x (DDR's first 256 MiB, which random
    plans load from) and writes y (DDR from 256 MiB on, where they store)."""

    name = "random_plan"
    args = (ArgSpec("x", "in_ptr", "input"), ArgSpec("y", "out_ptr", "output"))
    precisions = ("fp32",)

    def __init__(self, given: Plan) -> None:
        self.given = given

    def bind(self, symbol, precision, variant, cores, args, read):
        a = check_args(symbol, self.args, args)
        return BoundCall(symbol, precision, variant, cores,
                         _buffers(require_address("x", a["x"]), require_address("y", a["y"])), {})

    def plan(self, call, ctx):
        return self.given


@settings(max_examples=15, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(target=st.sampled_from([FT78NE, sim.load_target("MT7004")]), data=st.data())
def test_a_user_kernel_of_a_random_plan_through_the_simulator(target, data):
    """Through ``Simulator.call`` (bind, plan check, simulation, a repeated call replayed): the first call leaves
    the bytes an engine run with numerics leaves, a repeated call on the same inputs leaves them again, its cycles
    and trace are the first's, each core's summary splits its run into parts that add up to it, the trace written to
    a file and read back gives the same events and summary, and the report page builds."""
    plan = with_fn(data.draw(random_plans(target)), doubled)
    kernel = _GivenPlan(plan)
    ddr = target.region("ddr").base
    engine_run = filled(target)
    Engine(engine_run.target, engine_run.memory, Recorder(), numerics=True).run(plan)
    with sim.registered_kernel(kernel):
        m = filled(target)
        mask = sum(1 << c for c in plan.cores)
        first = m.call("fp_random_plan_s", x=ddr, y=ddr + OUT_BYTES, core_mask=mask)
        assert _bytes(m) == _bytes(engine_run)
        again = m.call("fp_random_plan_s", x=ddr, y=ddr + OUT_BYTES, core_mask=mask)
        assert _bytes(m) == _bytes(engine_run)
    assert (again.cycles, again.events) == (first.cycles, first.events)
    # Each core's cycles split into compute only, both, DMA only, waiting and idle: together its whole run.
    for s in first.summaries():
        parts = (s.compute_only_cycles, s.overlap_cycles, s.dma_only_cycles, s.wait_cycles, s.idle_cycles)
        assert min(parts) >= 0 and sum(parts) == s.run_cycles == first.cycles, s.core
        assert 0 <= s.utilisation <= 1 and 0 <= s.compute_utilisation <= 1
    assert first.roofline_fraction <= 1 and 0 <= first.load_imbalance
    # Its trace, written as Chrome JSON and as CSV and read back: the same events, and the same per-core summary.
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("trace.json", "trace.csv"):
            back = load_trace(first.write_trace(Path(tmp) / name))
            assert sorted(map(_fields, back.events)) == sorted(map(_fields, first.events)), name
            assert list(summarize(back).cores) == first.summaries(), name
    # Its report page builds, the same twice, with the run's data in it as JSON.
    page = report_html(first)
    assert page == report_html(first)
    json.loads(page.split('id="run-data">', 1)[1].split("</script>", 1)[0])


@settings(max_examples=25, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(target=st.sampled_from([FT78NE, sim.load_target("MT7004")]), fail_at=st.integers(0, 30), data=st.data())
def test_a_user_kernel_whose_tile_fails_leaves_memory_as_it_was(target, fail_at, data):
    """A random plan whose ``fail_at``-th compute raises: the call raises a KernelCodeError and leaves every
    byte of memory as it was, on its first call (which replays the searched plan's effects) and on a repeated call
    of the same plan once it has run."""
    plan = data.draw(random_plans(target))
    computes = sum(1 for p in plan.phases for ts in p.tiles.values() for t in ts if t.compute is not None)
    ddr = target.region("ddr").base
    mask = sum(1 << c for c in plan.cores)
    failing = _Fails(min(fail_at, computes - 1))
    with sim.registered_kernel(_GivenPlan(with_fn(plan, failing))):
        m = filled(target)
        before = _bytes(m)
        with pytest.raises(sim.KernelCodeError, match="its compute raised ValueError: a tile that fails"):
            m.call("fp_random_plan_s", x=ddr, y=ddr + OUT_BYTES, core_mask=mask)
        assert _bytes(m) == before
        failing.n = computes  # (every compute passes: the plan runs, and is kept)
        m.call("fp_random_plan_s", x=ddr, y=ddr + OUT_BYTES, core_mask=mask)
        after = _bytes(m)
        failing.n = min(fail_at, computes - 1)
        with pytest.raises(sim.KernelCodeError, match="its compute raised ValueError: a tile that fails"):
            m.call("fp_random_plan_s", x=ddr, y=ddr + OUT_BYTES, core_mask=mask)
        assert _bytes(m) == after


_DIGESTS = r"""
import hashlib, json, pickle, sys
import sim
from sim.engine.engine import Engine
from sim.engine.events import Recorder
plans = pickle.load(open(sys.argv[1], "rb"))
out = []
for name, plan in plans:
    m = sim.Simulator(name, tuning_cache=False)
    eng = Engine(m.target, m.memory, Recorder(), numerics=False)
    cycles = eng.run(plan)
    out.append([cycles, eng.sim_events, hashlib.sha256(repr(eng.recorder.events).encode()).hexdigest()])
print(json.dumps(out))
"""


@settings(max_examples=1, deadline=None, derandomize=True, database=None)
@given(plans=st.lists(st.sampled_from(["FT78NE", "MT7004"]).flatmap(
    lambda name: random_plans(sim.load_target(name)).map(lambda p: (name, with_fn(p, doubled)))),
    min_size=16, max_size=16))
def test_random_plans_run_alike_whatever_the_hash_seed(plans):
    """Sixteen random plans run in two processes with different string hash seeds (the order of a set of names may
    differ): the same cycles, SimPy events and trace, bit for bit."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "plans.pickle"
        path.write_bytes(pickle.dumps(plans))
        got = []
        for seed in ("1", "2"):
            env = {**os.environ, "PYTHONHASHSEED": seed}
            out = subprocess.run([sys.executable, "-c", _DIGESTS, str(path)], capture_output=True, text=True,
                                 env=env, cwd=Path(__file__).resolve().parent.parent, check=True)
            got.append(json.loads(out.stdout))
    assert got[0] == got[1]
