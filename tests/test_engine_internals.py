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
