"""Random plans (tests/random_plans.py) through the engine: no run beats the bounds the search prunes with, a
core computes one tile at a time and a DMA engine streams one transfer at a time, and a replay of a run's
recorded effects leaves exactly the bytes a simulating run leaves, or, when a tile fails, the bytes there were."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sim
from sim.engine.engine import Engine
from sim.engine.events import Recorder
from sim.startup import startup
from sim.timing import roofline, run_lower_bound_cycles, serial_compute_cycles
from tests.random_plans import doubled, filled, random_plans, with_fn

FT78NE = sim.load_target("FT78NE")


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(target=st.sampled_from([FT78NE, sim.load_target("MT7004")]), data=st.data())
def test_no_run_beats_its_bounds_and_no_unit_does_two_things_at_once(target, data):
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
    return m.memory.snapshot()


@settings(max_examples=40, deadline=None, derandomize=True, database=None,
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
        with pytest.raises(ValueError, match="a tile that fails"):
            Engine(replayed.target, replayed.memory, Recorder(), numerics=True).replay(fx)
        replayed.memory.rollback()
        assert _bytes(replayed) == before
    else:
        Engine(replayed.target, replayed.memory, Recorder(), numerics=True).replay(fx)
        replayed.memory.commit()
