"""A run with a cycle limit stops as soon as the bytes its transfers have still to start through a shared region
outlast the limit at that region's bandwidth (``region_bytes``, the plan's roofline bytes): never for a run that
ends by the limit, and much sooner than its compute bound for a run bound by DDR."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sim
from sim.engine.engine import Engine
from sim.engine.events import Recorder
from sim.model.plan import Compute, Operand, Phase, Plan, Tile, Transfer
from sim.timing import roofline
from tests.random_plans import random_plans

FT78NE = sim.load_target("FT78NE")


def _ddr_bound_plan(tiles: int) -> Plan:
    """Eight cores each loading 64 KiB a tile from DDR for a short compute: DDR's 20 B/cycle bounds the run."""
    from kernels.common.loops import elementwise
    ddr, am = FT78NE.region("ddr"), FT78NE.region("am")
    loop = elementwise(FT78NE.core, "fp32", 1024, loads=1, stores=0, fmac=1)
    per_core = {}
    for core in range(8):
        out = []
        for i in range(tiles):
            slot = am.base + (i % 2) * 65536
            op = Operand(slot, (1024,), np.dtype(np.float32))
            out.append(Tile(i, (Transfer.contiguous(ddr.base + ((core * tiles + i) << 16), slot, 65536),),
                            Compute(lambda a: (a,), (op,), (op,), flops=1024, precision="fp32", loops=(loop,)),
                            (), slot=i % 2))
        per_core[core] = tuple(out)
    return Plan(tuple(range(8)), (Phase("p", per_core, barrier_after=True),), "fp32")


def _run(plan: Plan, until: int | None, region_bytes: dict | None, steady: bool = False) -> tuple[int | None, int]:
    m = sim.Simulator(FT78NE, tuning_cache=False)
    eng = Engine(m.target, m.memory, Recorder(), numerics=False, steady=steady)
    return eng.run(plan, until_cycles=until, region_bytes=region_bytes), eng.sim_events


@pytest.mark.parametrize("margin", [0, 1, 1000])
def test_a_run_that_ends_by_the_limit_is_never_stopped(margin):
    plan = _ddr_bound_plan(24)
    full, _ = _run(plan, None, None)
    rf = roofline(plan, FT78NE)
    assert _run(plan, full + margin, rf.region_bytes)[0] == full


def test_a_ddr_bound_run_past_the_limit_stops_early():
    plan = _ddr_bound_plan(24)
    full, events = _run(plan, None, None)
    # 8 x 24 x 64 KiB through DDR at 20 B/cycle: no run is shorter than this (hand-derived).
    assert full >= 8 * 24 * 65536 / 20
    rf = roofline(plan, FT78NE)
    limit = int(full * 0.95)
    plain, plain_events = _run(plan, limit, None)
    bounded, bounded_events = _run(plan, limit, rf.region_bytes)
    assert plain is None and bounded is None
    # The compute bound sees nothing (its computes are short): the plain run goes to the limit; the byte bound
    # stops once the bytes left need more than the cycles left, about a twentieth of the way in.
    assert bounded_events < plain_events / 4


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(plan=random_plans(FT78NE), margin=st.integers(0, 50), steady=st.booleans())
def test_a_random_run_stops_only_if_it_cannot_end_by_its_limit(plan, margin, steady):
    """Whatever the plan: with its roofline's bytes, a run given a limit at or past its cycles ends with those
    cycles, and one given a limit a cycle short of them never ends (the search's stops are only ever right), with
    the steady state or without."""
    full, _ = _run(plan, None, None, steady)
    rf = roofline(plan, FT78NE)
    assert _run(plan, full + margin, rf.region_bytes, steady)[0] == full
    assert _run(plan, full - 1, rf.region_bytes, steady)[0] is None
