"""The exact steady state (sim/engine/steady.py): a run that skips repeated periods gives exactly what the plain
engine gives -- the same cycles, trace events, SimPy event count, memory effects in the same order, memory
bytes, progress reports and early stop -- on hand-built pipelines, every kernel's examples and drawn calls."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import sim
from kernels.examples import example
from sim.engine.engine import Engine
from sim.engine.events import Recorder
from sim.errors import MemoryFault
from sim.model.plan import Compute, Operand, Phase, Plan, Tile, Transfer
from sim.testing import DoesNotFit
from tests import tiling_property
from tests.random_plans import doubled, filled, random_plans, with_fn

FT78NE = sim.load_target("FT78NE")


def _pipeline(target: sim.Target, tiles: int, cores: tuple[int, ...] = (0,), bad_tile: int | None = None,
              row_step: int = 4096, fewer: dict[int, int] | None = None) -> Plan:
    """``tiles`` tiles per core (``fewer[core]`` on some) alternating two AM slots: 4 KiB in from DDR
    (``row_step`` apart), a loop, 4 KiB back out; with ``bad_tile``, that tile of every core loads from an
    address no region holds.  Several cores end the phase in a barrier, and a second, short phase follows."""
    from kernels.common.loops import elementwise
    ddr, am = target.region("ddr"), target.region("am")
    loop = elementwise(target.core, "fp32", 1024 * 8, loads=1, stores=1, fmac=4)
    per_core = {}
    for core in cores:
        out = []
        for i in range((fewer or {}).get(core, tiles)):
            slot = am.base + (i % 2) * 8192
            op = Operand(slot, (1024,), np.dtype(np.float32))
            src = ddr.base + (core * tiles + i) * row_step
            if i == bad_tile:
                src = 0x7FFF0000
            out.append(Tile(i, (Transfer.contiguous(src, slot, 4096),),
                            Compute(lambda a: (a * 2,), (op,), (op,), flops=8 * 1024, precision="fp32",
                                    loops=(loop,)),
                            (Transfer.contiguous(slot, ddr.base + 0x4000000 + (core * tiles + i) * 4096, 4096),),
                            slot=i % 2))
        per_core[core] = tuple(out)
    phases = (Phase("p", per_core, barrier_after=len(cores) > 1),)
    if len(cores) > 1:
        phases += (Phase("after", {c: per_core[c][:2] for c in cores}, barrier_after=False),)
    return Plan(cores, phases, "fp32")


def _run(plan: Plan, target: sim.Target, steady: bool, *, numerics: bool = False, until: int | None = None,
         fill: dict | None = None) -> dict:
    """One engine run of ``plan``: what it reports (and the memory's bytes at ``fill``'s addresses after)."""
    m = sim.Simulator(target, tuning_cache=False)
    for addr, array in (fill or {}).items():
        m.write(addr, array)
    effects: list = []
    ticks: list = []
    eng = Engine(m.target, m.memory, Recorder(), numerics=numerics, effects=effects,
                 on_tile=lambda n, c: ticks.append((n, c)), steady=steady)
    cycles = eng.run(plan, until_cycles=until)
    return {"cycles": cycles, "events": list(eng.recorder.events), "sim_events": eng.sim_events,
            "effects": [tuple(id(x) if isinstance(x, (Tile, Transfer)) else x for x in e) for e in effects],
            "ticks": ticks, "skips": eng.skips,
            "memory": {a: m.read(a, arr.shape, arr.dtype) for a, arr in (fill or {}).items()}}


def _same(plain: dict, steady: dict) -> None:
    for key in ("cycles", "events", "sim_events", "effects", "ticks"):
        assert plain[key] == steady[key], key
    for addr, got in plain["memory"].items():
        assert np.array_equal(got, steady["memory"][addr]), hex(addr)


def test_a_long_pipeline_skips_most_of_its_periods_and_reports_them_all():
    plan = _pipeline(FT78NE, 400)
    plain, steady = _run(plan, FT78NE, False), _run(plan, FT78NE, True)
    _same(plain, steady)
    assert not plain["skips"]
    skipped = sum(s.periods * dict(s.tiles)[0] for s in steady["skips"])
    assert skipped >= 300  # of 400 tiles, the pipeline's start and end are simulated, the rest skipped
    assert steady["sim_events"] == plain["sim_events"]
    assert len(steady["events"]) == 1 + 3 * 400  # launch, and each tile's load, compute and store
    # Each skipped tile's events carry its own tile and addresses.
    loads = [e for e in steady["events"] if e.kind == "dma_in"]
    assert [e.tile for e in loads] == list(range(400))
    assert [e.src for e in loads] == [FT78NE.region("ddr").base + i * 4096 for i in range(400)]


def test_eight_cores_sharing_ddr_skip_together():
    plan = _pipeline(FT78NE, 120, cores=tuple(range(8)))
    plain, steady = _run(plan, FT78NE, False), _run(plan, FT78NE, True)
    _same(plain, steady)
    assert steady["skips"] and all(len(s.tiles) == 8 for s in steady["skips"])


def test_a_core_waiting_at_the_barrier_while_the_others_skip():
    """Core 1 has 40 tiles and waits at the phase's barrier while core 0 walks 300: its wait, recorded after
    core 0's skips, is what simulating every period gives."""
    plan = _pipeline(FT78NE, 300, cores=(0, 1), fewer={1: 40})
    plain, steady = _run(plan, FT78NE, False), _run(plan, FT78NE, True)
    _same(plain, steady)
    assert steady["skips"]
    waits = [e for e in steady["events"] if e.kind == "barrier_wait" and e.core == 1]
    assert waits and waits[0].wait_cycles > 100_000


def test_numerics_of_skipped_tiles_run_on_their_own_bytes():
    ddr = FT78NE.region("ddr")
    data = np.arange(120 * 1024, dtype=np.float32)
    out = np.zeros(120 * 1024, dtype=np.float32)
    fill = {ddr.base: data, ddr.base + 0x4000000: out}
    plan = _pipeline(FT78NE, 120)
    plain = _run(plan, FT78NE, False, numerics=True, fill=fill)
    steady = _run(plan, FT78NE, True, numerics=True, fill=fill)
    _same(plain, steady)
    assert steady["skips"]
    assert np.array_equal(steady["memory"][ddr.base + 0x4000000], data * 2)


def test_row_activations_that_repeat_over_several_tiles_still_skip():
    # 4 KiB + 1 KiB apart: each tile opens one or two DRAM rows, a pattern that repeats every 8 tiles.
    plan = _pipeline(FT78NE, 300, row_step=5120)
    plain, steady = _run(plan, FT78NE, False), _run(plan, FT78NE, True)
    _same(plain, steady)
    assert len({e.row_activations for e in plain["events"] if e.kind == "dma_in"}) > 1
    assert steady["skips"]


@pytest.mark.parametrize("margin", [-1, 0, 1])
def test_an_early_stop_is_the_same(margin):
    plan = _pipeline(FT78NE, 300)
    full = _run(plan, FT78NE, False)["cycles"]
    plain = _run(plan, FT78NE, False, until=full + margin)
    steady = _run(plan, FT78NE, True, until=full + margin)
    assert plain["cycles"] == steady["cycles"] == (None if margin < 0 else full)
    if margin >= 0:
        _same(plain, steady)


def test_a_fault_past_the_steady_part_is_raised_as_the_plain_engine_raises_it():
    plan = _pipeline(FT78NE, 300, bad_tile=250)
    messages = []
    for steady in (False, True):
        with pytest.raises(MemoryFault) as e:
            _run(plan, FT78NE, steady)
        messages.append(str(e.value))
    assert messages[0] == messages[1] and "tile 250" in messages[0]


def test_turned_off_it_never_skips(monkeypatch):
    from sim.engine import steady
    monkeypatch.setattr(steady, "STEADY_STATE", False)
    m = sim.Simulator(FT78NE, tuning_cache=False)
    eng = Engine(m.target, m.memory, Recorder(), numerics=False)
    eng.run(_pipeline(FT78NE, 200))
    assert eng.skips == ()


#: Each kernel's example with the tiling the search picks for it (given, so the test does not search).
EXAMPLES = [
    ("batch_norm_grad", "MT7004", "hp", "large", {"split": "rows", "tile_elements": 14154}, True),
    ("fused_batch_norm_grad", "MT7004", "fp", "large", {"split": "rows", "tile_elements": 7216}, True),
    ("fake_quant_with_min_max_vars_gradient", "FT78NE", "fp", "medium", {"cores": 4, "tile_elements": 32704},
     False),
    ("conv2d_backprop_filter", "MT7004", "hp", "medium",
     {"split": "spatial", "in_c_slice": 64, "out_c_slice": 64}, False),
    ("depthwise_conv2d_backprop_input", "MT7004", "hp", "large",
     {"channel_parts": 2, "tile_channels": 32, "tile_cols": 112, "tile_rows": 8}, True),
    ("gemm", "FT78NE", "fp", "medium", {"split": "n", "c_home": "am", "a_loader": "core0", "a_buffers": 2,
                                        "b_staging": "am", "m_micro": 8, "k_block": 256, "m_panel": 16,
                                        "m_block": 256, "n_block": 64, "n_micro": 64}, True)]


@pytest.mark.parametrize("kernel,chip,prefix,size,tiling,skips", EXAMPLES)
def test_every_kernels_example_runs_the_same_with_its_numerics(kernel, chip, prefix, size, tiling, skips):
    """An example's plan, numerics on: cycles, trace, effects, outputs; ``skips``: the plan is long enough to
    skip periods (the others' plans are too short to look at)."""
    e = example(kernel, size, chip, prefix)
    m = sim.Simulator(chip, tuning_cache=False)
    e.place(m.write)
    _, plan = m.plan(e.symbol, tiling=tiling, **e.args)
    fill = {d.addr: arr for d, arr in zip(e.data, (d.array() for d in e.data)) if d.core is None}
    outputs = {o.addr: np.zeros(o.shape, o.dtype) for o in e.outputs}
    plain = _run(plan, m.target, False, numerics=True, fill={**fill, **outputs})
    steady = _run(plan, m.target, True, numerics=True, fill={**fill, **outputs})
    _same(plain, steady)
    assert bool(steady["skips"]) == skips


@settings(max_examples=4, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
@pytest.mark.parametrize("kernel", tiling_property.KERNELS)
def test_drawn_calls_run_the_same(kernel, data):
    """A drawn call of every kernel (tests/tiling_property.py, larger shapes), one candidate of its tiling
    space: the same timing, trace and effects with and without the steady state."""
    chip, symbol, args = data.draw(tiling_property.calls(kernel, scale=4))
    m = sim.Simulator(chip, tuning_cache=False)
    try:
        call = m.bind(symbol, **args)
        space = m.kernel_of(call).tiling_space(call, m.context(call))
        pool, _ = space.completions({}, 64)
        assume(pool)
        plan = m.plan_bound(call, data.draw(st.sampled_from(pool)))
    except (DoesNotFit, sim.SimError):
        assume(False)
    _same(_run(plan, m.target, False), _run(plan, m.target, True))


def test_a_buffer_generation_a_wait_has_not_reached_yet_moves_with_the_skip():
    """A GEMM of one column on two cores (core 1 idle): a tile's wait lists the next A block's fill after its B
    block's, and that A generation is touched by nothing yet.  The skip must move it with the generations in use,
    or the wait is left on a generation no tile fills any more (found by bench/steady_equivalence.py)."""
    m = sim.Simulator("FT78NE", tuning_cache=False)
    call = m.bind("fp_gemm_s", a=0x80000000, b=0x84000000, c=0x88000000, m=17, n=1, k=2285, trans_a=0, trans_b=0,
                  beta=0, core_mask=3)
    plan = m.plan_bound(call, {"split": "n", "c_home": "am", "a_loader": "core0", "a_buffers": 2,
                               "b_staging": "am", "m_micro": 12, "k_block": 128, "m_panel": 17, "m_block": 17,
                               "n_block": 1, "n_micro": 32})
    plain, steady = _run(plan, m.target, False), _run(plan, m.target, True)
    _same(plain, steady)
    assert steady["skips"]


@settings(max_examples=50, deadline=None, derandomize=True, database=None)
@given(target=st.sampled_from([FT78NE, sim.load_target("MT7004")]), until=st.sampled_from([None, 0.5, 0.9]),
       data=st.data())
def test_random_plans_run_the_same(target, until, data):
    """Random plans (tests/random_plans.py: regular pipelines on several cores sharing DDR, irregular ones, blocks
    staged through GSM), run to their end or stopped at a limit, on either chip: the same cycles, trace, SimPy
    events, effects and progress both ways."""
    plan = data.draw(random_plans(target))
    plain = _run(plan, target, False)
    limit = None if until is None else int(plain["cycles"] * until)
    if limit is not None:
        plain = _run(plan, target, False, until=limit)
    _same(plain, _run(plan, target, True, until=limit))


@settings(max_examples=25, deadline=None, derandomize=True, database=None)
@given(plan=random_plans(FT78NE))
def test_random_plans_compute_the_same_bytes(plan):
    """With numerics (each tile doubling its block in its AM slot, which the slot's next tile loads over): the same
    bytes everywhere in memory after a run with the steady state as after a plain one."""
    plan = with_fn(plan, doubled)
    after = []
    for steady in (False, True):
        m = filled(FT78NE)
        Engine(m.target, m.memory, Recorder(), numerics=True, steady=steady).run(plan)
        after.append(m.memory.snapshot())
    assert after[0] == after[1]
