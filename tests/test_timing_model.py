"""Timing: hand-derived cycles of a hand-made plan, and SPEC section 6's properties for BatchNormGrad."""

import math
from pathlib import Path

import numpy as np
import pytest
import yaml

import sim
from sim.engine.engine import Engine
from sim.engine.events import Recorder
from sim.model.memory import AddressSpace
from sim.model.plan import Compute, Operand, Phase, Plan, Tile, Transfer

TARGETS = Path(__file__).resolve().parent.parent / "targets"


def run_plan(target, plan):
    rec = Recorder()
    mem = AddressSpace(target)
    return Engine(target, mem, rec).run(plan), rec.events, mem


def test_one_transfer_costs_what_the_target_file_says():
    t = sim.load_target("FT78NE")
    ddr, am = t.region("ddr"), t.region("am")
    n = 6000
    plan = Plan(cores=(0,), precision="fp32", phases=(Phase("p", {0: (
        Tile(0, (Transfer.contiguous(ddr.base, am.base, n),), None, ()),)}),))
    cycles, events, _ = run_plan(t, plan)
    # Each end moves whole bursts at its port's bandwidth; the slower end sets the pace.
    ddr_bytes = math.ceil(n / ddr.burst_bytes) * ddr.burst_bytes
    am_bytes = math.ceil(n / am.burst_bytes) * am.burst_bytes
    stream = math.ceil(max(ddr_bytes / (ddr.bandwidth_bytes_per_cycle / ddr.ports),
                           am_bytes / (am.bandwidth_bytes_per_cycle / am.ports)))
    expect = (t.launch_overhead_cycles + t.dma.setup_cycles + stream + max(ddr.latency_cycles, am.latency_cycles))
    assert ddr_bytes > n  # 6000 bytes is not whole bursts: the last one is paid in full
    assert cycles == expect


def test_compute_costs_what_the_target_file_says():
    t = sim.load_target("MT7004")
    am = t.region("am")
    op = Operand(am.base, (4,), np.dtype(np.float32))
    flops = 10_000
    c = Compute(lambda a: (a * 2,), (op,), (op,), flops=flops, reductions=3, precision="fp16")
    plan = Plan(cores=(1,), precision="fp16", phases=(Phase("p", {1: (Tile(0, (), c, ()),)}),))
    cycles, events, _ = run_plan(t, plan)
    p = t.core.precisions["fp16"]
    expect = (t.launch_overhead_cycles + t.core.loop_overhead_cycles + t.core.vector_op_latency_cycles
              + math.ceil(flops / (p.lanes * p.fmac_units * 2)) + 3 * t.core.reduction_latency_cycles)
    assert cycles == expect


def test_short_strided_runs_pay_whole_bursts():
    """A slice of 4 channels (16 bytes) from each of 64 DDR rows moves 64 whole 64-byte bursts."""
    t = sim.load_target("FT78NE")
    ddr, am = t.region("ddr"), t.region("am")
    strided = Transfer.block(ddr.base, am.base, (64, 4), 4, (4096, 4))
    dense = Transfer.contiguous(ddr.base, am.base, 64 * 16)
    port = ddr.bandwidth_bytes_per_cycle / ddr.ports
    fixed = t.launch_overhead_cycles + t.dma.setup_cycles + max(ddr.latency_cycles, am.latency_cycles)
    for transfer, ddr_bytes in ((strided, 64 * ddr.burst_bytes), (dense, 64 * 16)):
        plan = Plan(cores=(0,), precision="fp32", phases=(Phase("p", {0: (Tile(0, (transfer,), None, ()),)}),))
        cycles, _, _ = run_plan(t, plan)
        assert cycles == fixed + math.ceil(ddr_bytes / port)


def _dense_stream(t, n: int) -> int:
    ddr, am = t.region("ddr"), t.region("am")
    return math.ceil(max(math.ceil(n / ddr.burst_bytes) * ddr.burst_bytes / (ddr.bandwidth_bytes_per_cycle / ddr.ports),
                         n / (am.bandwidth_bytes_per_cycle / am.ports)))


def test_eight_cores_queue_for_four_ddr_ports_first_come_first_served():
    """Eight equal loads reach DDR's four ports in the same cycle: four stream, four wait exactly one stream."""
    t = sim.load_target("FT78NE")
    ddr, am = t.region("ddr"), t.region("am")
    n = 8192
    plan = Plan(cores=tuple(range(8)), precision="fp32", phases=(Phase("p", {
        c: (Tile(0, (Transfer.contiguous(ddr.base + c * n, am.base, n),), None, ()),) for c in range(8)},
        barrier_after=False),))
    cycles, events, _ = run_plan(t, plan)
    s = _dense_stream(t, n)
    first = t.launch_overhead_cycles + t.dma.setup_cycles
    assert ddr.ports == 4
    assert sorted(e.wait_cycles for e in events if e.kind == "dma_in") == [0] * 4 + [s] * 4
    assert all(e.wait_start == first for e in events if e.kind == "dma_in")
    assert cycles == first + 2 * s + ddr.latency_cycles


def test_a_third_load_waits_for_one_of_the_cores_two_dma_engines():
    """Three loads of one tile on one core: two take the engines, the third takes the first engine to land."""
    t = sim.load_target("FT78NE")
    ddr, am = t.region("ddr"), t.region("am")
    n = 4096
    loads = tuple(Transfer.contiguous(ddr.base + i * n, am.base + i * n, n) for i in range(3))
    plan = Plan(cores=(0,), precision="fp32", phases=(Phase("p", {0: (Tile(0, loads, None, ()),)}),))
    cycles, events, _ = run_plan(t, plan)
    one = t.dma.setup_cycles + _dense_stream(t, n) + max(ddr.latency_cycles, am.latency_cycles)
    assert t.dma.engines_per_core == 2
    starts = sorted(e.start for e in events if e.kind == "dma_in")
    assert starts == [t.launch_overhead_cycles] * 2 + [t.launch_overhead_cycles + one]
    assert all(e.wait_cycles == 0 for e in events if e.kind == "dma_in")
    assert cycles == t.launch_overhead_cycles + 2 * one


def test_double_buffering_overlaps_next_load_with_compute():
    t = sim.load_target("FT78NE")
    ddr, am = t.region("ddr"), t.region("am")
    op = Operand(am.base, (16,), np.dtype(np.float32))
    heavy = Compute(lambda a: (a,), (op,), (op,), flops=192 * 20000, reductions=0, precision="fp32")

    def tiles(slots):
        return tuple(Tile(i, (Transfer.contiguous(ddr.base + 4096 * i, am.base + 65536 * slots[i], 4096),),
                          heavy, (), slot=slots[i]) for i in range(4))
    serial, _, _ = run_plan(t, Plan((0,), (Phase("p", {0: tiles([0, 0, 0, 0])}),), "fp32"))
    double, events, _ = run_plan(t, Plan((0,), (Phase("p", {0: tiles([0, 1, 0, 1])}),), "fp32"))
    # Serial: each load waits for the previous tile; double buffered: loads hide under compute.
    assert double < serial
    loads = sorted((e for e in events if e.kind == "dma_in"), key=lambda e: e.tile)
    comps = sorted((e for e in events if e.kind == "compute"), key=lambda e: e.tile)
    assert loads[1].start < comps[0].end  # tile 1's DMA ran during tile 0's compute


def test_barrier_waits_for_the_slowest_core_and_costs_its_latency():
    t = sim.load_target("FT78NE")
    am = t.region("am")
    op = Operand(am.base, (1,), np.dtype(np.float32))
    work = {c: (Tile(0, (), Compute(lambda a: (a,), (op,), (op,), flops=192 * 1000 * (c + 1), reductions=0,
                                    precision="fp32"), ()),) for c in range(2)}
    cycles, events, _ = run_plan(t, Plan((0, 1), (Phase("a", work, barrier_after=True), Phase("b", {})), "fp32"))
    waits = {e.core: e for e in events if e.kind == "barrier_wait" and e.phase == "a"}
    assert set(waits) == {0, 1}
    assert waits[0].end == waits[1].end == waits[1].start + t.barrier_latency_cycles
    assert waits[0].wait_cycles > waits[1].wait_cycles


def bn_call(m, batch, channel, **kw):
    return m.call("fp_batch_norm_grad_s", x=0x80000000, dy=0x90000000, dx=0xA0000000,
                  params=[0xB0000000, 0xB0100000, 0xB0200000, 0xB0300000, 0xB0400000, batch, channel, 1], **kw)


def test_determinism_same_cycles_same_trace():
    a = bn_call(sim.Simulator("FT78NE"), 64, 512)
    b = bn_call(sim.Simulator("FT78NE"), 64, 512)
    assert a.cycles == b.cycles and a.events == b.events


@pytest.mark.parametrize("chip", ["FT78NE", "MT7004"])
@pytest.mark.parametrize("mask", [0x1, 0x3, 0xF])
def test_never_below_the_roofline_bound(chip, mask):
    run = bn_call(sim.Simulator(chip), 128, 300, core_mask=mask)
    assert run.cycles >= run.roofline.cycles > 0
    peak = sim.load_target(chip).core.precisions["fp32"].peak_flops_per_cycle * bin(mask).count("1")
    assert run.cycles >= run.roofline.total_flops / peak
    ddr = sim.load_target(chip).region("ddr")
    assert run.cycles >= run.roofline.region_bytes["ddr"] / ddr.bandwidth_bytes_per_cycle


def test_eight_cores_beat_one_by_a_wide_margin_on_a_large_case():
    one = bn_call(sim.Simulator("FT78NE"), 256, 1024, core_mask=0x01, numerics=False)
    eight = bn_call(sim.Simulator("FT78NE"), 256, 1024, core_mask=0xFF, numerics=False)
    assert one.cycles / eight.cycles > 1.8
    # Bandwidth-bound: 8 cores get close to the DDR roofline.
    assert eight.roofline.bound_by == "ddr" and eight.roofline_fraction > 0.8


def test_halving_ddr_bandwidth_slows_the_shared_variant(tmp_path):
    doc = yaml.safe_load((TARGETS / "FT78NE.yaml").read_text())
    for r in doc["regions"]:
        if r["name"] == "ddr":
            r["bandwidth_bytes_per_cycle"] /= 2
    slow_path = tmp_path / "slow_ddr.yaml"
    slow_path.write_text(yaml.safe_dump(doc))
    fast = bn_call(sim.Simulator("FT78NE"), 256, 512)
    slow = bn_call(sim.Simulator(sim.load_target(slow_path)), 256, 512)
    assert slow.cycles > 1.6 * fast.cycles


def test_private_variant_sees_no_contention_shared_variant_does():
    m = sim.Simulator("FT78NE")
    shared = bn_call(m, 256, 1024)
    assert sum(e.wait_cycles for e in shared.events if e.kind.startswith("dma")) > 0
    runs = []
    for core in (0, 5):
        p = m.call("fp_batch_norm_grad_p", x=0x10000000, dy=0x10200000, dx=0x10400000,
                   params=[0x10600000, 0x10610000, 0x10620000, 0x10630000, 0x10640000, 64, 256, 1], core=core)
        runs.append(p)
        waits = sum(e.wait_cycles for e in p.events if e.kind.startswith("dma"))
        # Two engines of one core share l2's two ports: never queued.
        assert waits == 0
        assert {e.src_region for e in p.events if e.kind == "dma_in"} <= {"l2"}
    assert runs[0].cycles == runs[1].cycles


def test_a_tile_cannot_write_simulated_memory_through_its_inputs():
    """Compute inputs are read-only views of the scratchpad: writing into one is refused, and a result that
    aliases an input is copied before another output lands on that input."""
    t = sim.load_target("FT78NE")
    am = t.region("am")
    f32 = np.dtype(np.float32)
    a, b = Operand(am.base, (4,), f32), Operand(am.base + 128, (4,), f32)

    def scribble(x):
        x += 1
        return (x,)
    plan = Plan((0,), (Phase("p", {0: (Tile(0, (), Compute(scribble, (a,), (a,), flops=4, reductions=0,
                                                                     precision="fp32"), ()),)}),), "fp32")
    rec, mem = Recorder(), AddressSpace(t)
    mem.write(a.addr, np.arange(4, dtype=np.float32), core=0)
    with pytest.raises(ValueError, match="read-only"):
        Engine(t, mem, rec).run(plan)
    assert (mem.read(a.addr, (4,), np.float32, core=0) == np.arange(4)).all()
    # Swap: outputs (a, b) = inputs (b, a); the second result is a's old bytes, not what the first write left.
    swap = Compute(lambda x, y: (y, x), (a, b), (a, b), flops=4, reductions=0, precision="fp32")
    mem.write(b.addr, np.full(4, 9, np.float32), core=0)
    Engine(t, mem, Recorder()).run(Plan((0,), (Phase("p", {0: (Tile(0, (), swap, ()),)}),), "fp32"))
    assert (mem.read(a.addr, (4,), np.float32, core=0) == 9).all()
    assert (mem.read(b.addr, (4,), np.float32, core=0) == np.arange(4)).all()
