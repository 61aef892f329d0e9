"""The SimPy internals the engine relies on (sim/engine/clock.py, the one place that reads them) are what it
expects."""

import simpy

from sim.engine.clock import cycle_of, discard_pending


def test_simpy_keeps_its_clock_in_underscore_now():
    env = simpy.Environment(initial_time=7)
    env.timeout(5)
    assert env._now == env.now == 7
    env.step()
    assert env._now == env.now == 12


def test_a_run_leaves_no_reference_cycle_per_transfer():
    # A transfer that held its flow (whose on_done holds the transfer) made a cycle per DMA, garbage only the
    # cyclic collector frees: a big run then spent a good part of its time in collections.  With none, the
    # transfers and flows of a finished run are freed by reference counting.
    import gc
    import sys
    from pathlib import Path

    import sim
    from sim.engine.dma import Dma
    from sim.engine.fluid import Flow

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
    try:
        import cases
    finally:
        sys.path.pop(0)
    case = cases.build("fused_batch_norm_grad/FT78NE/fp/medium")
    m = sim.Simulator(case.chip)
    for addr, arr in case.inputs.items():
        m.write(addr, arr)
    m.call(case.symbol, numerics=False, **case.args)  # the tiling search (its runs stop early, flows in flight)
    gc.collect()
    was = gc.isenabled()
    gc.disable()
    try:
        gc.set_debug(gc.DEBUG_SAVEALL)
        run = m.call(case.symbol, numerics=False, **case.args)
        gc.collect()
        dmas = sum(type(o) is Dma for o in gc.garbage)
        flows = sum(type(o) is Flow for o in gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        if was:
            gc.enable()
    assert sum(e.kind.startswith("dma") for e in run.events) > 10
    # The run's own graph (engine, network, walks) is one cycle; it holds the flows of the last recomputation in
    # its scratch lists, at most one per DMA engine streaming then, and no other transfer.
    engines = 8 * m.target.dma.engines_per_core
    assert dmas <= engines and flows <= engines


def test_the_clock_adapter_reads_simpys_clock_and_empties_its_schedule():
    env = simpy.Environment(initial_time=3)
    env.timeout(4)
    env.timeout(9)
    assert cycle_of(env) == env.now == 3
    env.step()
    assert cycle_of(env) == 7
    discard_pending(env)
    assert env.peek() == float("inf")  # nothing scheduled any more


def _compute_bound_plan(target, tiles: int):
    """One core, ``tiles`` tiles alternating two AM slots: 4 KiB in from DDR, a 128-trip loop, 4 KiB back out.
    The first two tiles' loads are issued together at the launch (both slots are free) and land while the walk waits;
    every later tile's load is issued when the walk starts the tile before it, and the loop (about 6,200 cycles)
    outlasts it (the slot's previous store, then setup 64 + 205 cycles at 20 B/cycle + DDR's 200): it lands while
    the walk still computes that tile."""
    import numpy as np

    from kernels.common.loops import elementwise
    from sim.model.plan import Compute, Operand, Phase, Plan, Tile, Transfer
    ddr, am = target.region("ddr"), target.region("am")
    loop = elementwise(target.core, "fp32", 1024 * 128, loads=1, stores=1, fmac=4)
    out = []
    for i in range(tiles):
        slot = am.base + (i % 2) * 8192
        op = Operand(slot, (1024,), np.dtype(np.float32))
        out.append(Tile(i, (Transfer.contiguous(ddr.base + i * 4096, slot, 4096),),
                        Compute(lambda a: (a,), (op,), (op,), flops=8 * 1024, precision="fp32", loops=(loop,)),
                        (Transfer.contiguous(slot, ddr.base + 0x100000 + i * 4096, 4096),), slot=i % 2))
    return Plan((0,), (Phase("p", {0: tuple(out)}, barrier_after=False),), "fp32")


def test_loads_landing_during_the_previous_compute_cost_no_event():
    """The same run with every landing scheduled as an event (the walk told it must look at each): the same
    cycles and trace, and one SimPy event more for each tile after the first two."""
    from unittest import mock

    import sim
    from sim.engine.engine import simulate
    from sim.engine.walk import Walk
    from sim.model.memory import AddressSpace

    target = sim.load_target("FT78NE")
    plan = _compute_bound_plan(target, 12)
    fast = simulate(plan, target, AddressSpace(target), numerics=False)
    with mock.patch.object(Walk, "_loaded_before_looked_at", lambda self, i, cycle: False):
        plain = simulate(plan, target, AddressSpace(target), numerics=False)
    assert fast.cycles == plain.cycles and sorted(map(repr, fast.events)) == sorted(map(repr, plain.events))
    assert plain.sim_events - fast.sim_events == 12 - 2
