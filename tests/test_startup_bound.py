"""The bound the tiling search prunes with beyond the computes: what must land before each core's first compute
(sim.startup), and a plan cut by barriers into segments that cannot overlap (sim.timing.run_lower_bound_cycles).

Hand-derived on FT78NE's numbers (checked in tests/test_staged_buffers.py's ``run``): launch 1800; DMA setup 64,
2 engines per core at 64 B/cycle; ddr shared 20 B/cycle, latency 200; gsm shared 64 B/cycle, latency 40; am per
core 128 B/cycle, latency 4; a barrier releases 180 cycles after the last core arrives.
"""

from __future__ import annotations

import numpy as np
import pytest

import sim
from kernels.common.loops import elementwise
from sim.model.plan import Compute, Operand, Phase, Plan, Tile, Transfer
from sim.startup import startup
from sim.timing import roofline, run_lower_bound_cycles, serial_compute_cycles
from tests.test_staged_buffers import X, Y, run

FT = sim.load_target("FT78NE")
F32 = np.dtype(np.float32)


def _compute(am: int, n: int) -> Compute:
    """A copy of ``n`` floats at ``am`` to the 8 KiB after them, priced as one elementwise loop."""
    return Compute(lambda x: [x], (Operand(am, (n,), F32),), (Operand(am + 8192, (n,), F32),), flops=0,
                   precision="fp32", loops=(elementwise(FT.core, "fp32", n, loads=1, stores=1),))


def _first_computes(events) -> dict[int, int]:
    out: dict[int, int] = {}
    for e in events:
        if e.kind == "compute":
            out[e.core] = min(out.get(e.core, 1 << 62), e.start)
    return out


def test_a_chain_of_copies_is_waited_for_exactly():
    """Core 0 stages 6400 bytes DDR -> GSM (g@0), then copies them GSM -> AM (uses g@0, fills h@0); its compute
    tile uses h@0 and loads nothing.  g@0 is filled at 1800 + 64 + 6400 / 20 + 200 = 2384; the copy streams
    6400 bytes at 64 B/cycle (GSM, its engine): 2384 + 64 + 100 + 40 = 2588, and the compute begins then, as the
    bound says (alone on the chip, nothing shares a resource: the bound is the run)."""
    def build(ctx):
        gsm, am = ctx.shared_level.base, ctx.vector_level.base
        return {0: (Tile(0, (Transfer.contiguous(X, gsm, 6400),), None, (), fills=("g@0",)),
                    Tile(1, (Transfer.contiguous(gsm, am, 6400),), None, (), fills=("h@0",), uses=("g@0",)),
                    Tile(2, (), _compute(am, 1600), (Transfer.contiguous(am + 8192, Y, 6400),), uses=("h@0",)))}
    r, m = run(build, "chain")
    first = startup(r.plan, m.target)
    assert first.first_compute_cycles == {0: 2588} and first.own_load_cycles == {0: 0}
    assert first.all_filled_cycles == 2588
    assert _first_computes(r.events) == {0: 2588}
    serial = serial_compute_cycles(r.plan, m.target)
    assert first.bound_cycles(serial) == 2588 + serial[0] <= r.cycles


def test_cores_that_split_a_fill_each_wait_for_all_of_it_and_the_last_for_every_first_block():
    """Cores 0 and 1 each stage half of a 6400-byte block (g@0) and then load all of it GSM -> AM for their
    compute.  Together the halves cross DDR at 20 B/cycle: g@0 is filled at 1800 + 64 + 320 + 200 = 2384; each
    core's own load alone takes 64 + 6400 / 64 + 40 = 204 more: no first compute before 2588.  The run is slower
    (both loads share GSM, 200 cycles instead of 100: 2688), which the bound does not see."""
    def build(ctx):
        gsm, am = ctx.shared_level.base, ctx.vector_level.base
        return {c: (Tile(0, (Transfer.contiguous(X + 3200 * c, gsm + 3200 * c, 3200),), None, (), fills=("g@0",)),
                    Tile(1, (Transfer.contiguous(gsm, am, 6400),), _compute(am, 1600), (), uses=("g@0",)))
                for c in (0, 1)}
    r, m = run(build, "split_fill")
    first = startup(r.plan, m.target)
    assert first.first_compute_cycles == {0: 2588, 1: 2588} and first.own_load_cycles == {0: 204, 1: 204}
    assert first.all_filled_cycles == 2384
    assert _first_computes(r.events) == {0: 2688, 1: 2688}
    serial = serial_compute_cycles(r.plan, m.target)
    assert first.bound_cycles(serial) == 2588 + serial[0] <= r.cycles


def test_the_last_core_to_start_waits_for_every_cores_first_block():
    """Each of two cores loads its own 6400-byte block DDR -> AM (fills b<core>@0) and computes on it.  Alone,
    a block lands 64 + 320 + 200 = 584 after the launch: 2384.  Both share DDR: the second to land cannot land
    before 12800 bytes crossed it, 1800 + 64 + 640 + 200 = 2704, and that core still computes after it."""
    def build(ctx):
        am = ctx.vector_level.base
        return {c: (Tile(0, (Transfer.contiguous(X + 6400 * c, am, 6400),), None, (), fills=(f"b{c}@0",)),
                    Tile(1, (), _compute(am, 1600), (), uses=(f"b{c}@0",)))
                for c in (0, 1)}
    r, m = run(build, "own_blocks")
    first = startup(r.plan, m.target)
    assert first.first_compute_cycles == {0: 2384, 1: 2384} and first.all_filled_cycles == 2704
    serial = serial_compute_cycles(r.plan, m.target)
    assert first.bound_cycles(serial) == 2704 + min(serial.values())
    assert max(_first_computes(r.events).values()) >= 2704 and r.cycles >= first.bound_cycles(serial)


@pytest.mark.parametrize("barrier", [True, False])
def test_segments_a_barrier_separates_add_up(barrier):
    """Two phases on two cores, each streaming 64000 bytes DDR -> AM per core (no compute): a phase alone needs
    128000 / 20 = 6400 cycles of DDR, after the setup and with the latency after: 6664.  With a barrier between
    them the phases cannot overlap: 1800 + 2 x 6664 + 180 = 15308 (the whole plan's DDR alone says 1800 + 64 +
    12800 + 200 = 14864); without one, only the whole plan's bound holds."""
    am = FT.region("am").base
    phases = tuple(Phase(f"p{k}", {c: (Tile(0, (Transfer.contiguous(X + 64000 * (2 * k + c), am, 64000),), None,
                                            ()),) for c in (0, 1)}, barrier_after=barrier and k == 0)
                   for k in (0, 1))
    plan = Plan((0, 1), phases, "fp32")
    rf = roofline(plan, FT)
    assert len(rf.segment_cycles) == (2 if barrier else 0)
    assert run_lower_bound_cycles(rf, FT) == (15308 if barrier else 14864)
    one_core = Plan((0,), tuple(Phase(p.name, {0: p.tiles[0]}, barrier_after=p.barrier_after) for p in phases),
                    "fp32")
    assert roofline(one_core, FT).segment_cycles == ()  # (one core: its barriers wait for no one)
