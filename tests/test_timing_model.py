"""Timing: hand-derived cycles of a hand-made plan, and SPEC section 6's properties for BatchNormGrad."""

from pathlib import Path

import numpy as np
import pytest
import yaml
from streams import assert_private_streams

import sim
from kernels.common.loops import elementwise
from sim.engine.engine import Engine
from sim.engine.events import Recorder
from sim.model.memory import AddressSpace, MemoryMap
from sim.model.plan import Compute, Loop, Operand, Phase, Plan, Tile, Transfer
from sim.timing import compute_cycles, stream_cycles

TARGETS = Path(__file__).resolve().parent.parent / "targets"


def run_plan(target, plan):
    rec = Recorder()
    mem = AddressSpace(target)
    return Engine(target, mem, rec).run(plan), rec.events, mem


def fma_stream(t, elements: int, precision: str = "fp32", **kw) -> Loop:
    """A streaming loop over ``elements`` elements: per vector one load, one multiply-add and one store."""
    return elementwise(t.core, precision, elements, loads=1, stores=1, fmac=1, **kw)


def test_compute_costs_what_the_target_file_says():
    """MT7004 (targets/MT7004.yaml: launch 1000; tile overhead 24, loop overhead 8, reduction 16 per vector;
    fp16 32 lanes in 64-byte vectors; vls 2 units, latency 9, 128 bytes an issue (two vectors); fmac 3 units,
    latency 6; 6 vector issues a cycle).  An elementwise loop over 10,000 fp16 elements, per vector one load,
    one multiply-add and one store, with 3 reductions: 313 vectors, unrolled by the two vectors a vls issue
    moves: 157 trips, each issuing vls ceil(4 / 2) = 2 and fmac 2: II = max(2/2, 2/3 -> 1, 4/6 -> 1) = 1;
    fill vls + fmac + the store = 9 + 6 + 4 (a store's latency) = 19; epilogue 3 x 16 = 48: 8 + 19 + 157 + 48 =
    232.  The tile: 24 + 232 = 256 after the launch, 1256.  The flops are reported, never priced: a billion more
    cost nothing."""
    t = sim.load_target("MT7004")
    core = t.core
    assert (t.launch_overhead_cycles, core.tile_overhead_cycles, core.loop_overhead_cycles,
            core.reduction_latency_cycles) == (1000, 24, 8, 16)
    assert (core.vector_width_bytes, core.precisions["fp16"].lanes, core.issue_width["vector"]) == (64, 32, 6)
    assert {u: (f.count, f.latency_cycles) for u, f in core.units.items() if u in ("fmac", "vls")} == {
        "fmac": (3, 6), "vls": (2, 9)} and core.units["vls"].bytes_per_issue == 128
    am = t.region("am")
    op = Operand(am.base, (4,), np.dtype(np.float32))
    loop = fma_stream(t, 10_000, "fp16", reductions=3)
    assert (loop.trips, dict(loop.issues), loop.chain) == (157, {"vls": 2, "fmac": 2}, ("vls", "fmac", "vls.store"))
    for flops in (20_000, 10 ** 9 + 20_000):
        c = Compute(lambda a: (a * 2,), (op,), (op,), flops=flops, precision="fp16", loops=(loop,))
        plan = Plan(cores=(1,), precision="fp16", phases=(Phase("p", {1: (Tile(0, (), c, ()),)}),))
        cycles, events, _ = run_plan(t, plan)
        assert compute_cycles(c, t) == 256
        assert cycles == 1256


def test_a_compute_that_issues_nothing_costs_the_tile_overhead():
    """A compute without loops, flops or outputs (the plan check refuses any other without loops): the 24 cycles
    of the tile's compute call (targets/FT78NE.yaml), whatever its precision."""
    t = sim.load_target("FT78NE")
    assert t.core.tile_overhead_cycles == 24
    assert compute_cycles(Compute(lambda: (), (), (), flops=0, precision="fp32"), t) == 24


def test_a_compute_with_loops_costs_the_tile_overhead_and_its_loops():
    """MT7004 (targets/MT7004.yaml: tile overhead 24, loop overhead 8; fmac 3 units latency 6, vls 2 units latency
    9, valu 1 unit latency 2; issue 6 vector a cycle).  Two loops, one after the other, on core 1:
    an accumulation of 100 trips issuing {fmac 3, vls 2}, carried (fmac): II = max(3/3, 2/2, 5/6 -> 1, 6) = 6,
    fill vls + fmac = 15, entered twice: 2 x (8 + 15 + 600) = 1246; a stream of 50 trips issuing {vls 4, valu 3}:
    II = max(4/2, 3/1, 7/6 -> 2) = 3, fill vls + valu + vls.store = 9 + 2 + 4 (a store's latency) = 15; epilogue:
    one reduction (16), then the store {vls.store 1}, which waits for it (its issue at 16), + its latency 4 = 20:
    8 + 15 + 150 + 20 = 193.  The tile: 24 + 1246 + 193 = 1463, after the launch; the flops count nothing."""
    t = sim.load_target("MT7004")
    core = t.core
    assert (core.tile_overhead_cycles, core.loop_overhead_cycles, core.reduction_latency_cycles) == (24, 8, 16)
    assert {u: (f.count, f.latency_cycles) for u, f in core.units.items() if u in ("fmac", "vls", "valu")} == {
        "fmac": (3, 6), "vls": (2, 9), "valu": (1, 2)} and core.issue_width["vector"] == 6
    am = t.region("am")
    op = Operand(am.base, (4,), np.dtype(np.float32))
    loops = (Loop(trips=100, issues={"fmac": 3, "vls": 2}, chain=("vls", "fmac"), carried=("fmac",), entries=2),
             Loop(trips=50, issues={"vls": 4, "valu": 3}, chain=("vls", "valu", "vls.store"),
                  epilogue={"vls.store": 1},
                  reductions=1))
    c = Compute(lambda a: (a * 2,), (op,), (op,), flops=10 ** 9, precision="fp32", loops=loops)
    plan = Plan(cores=(1,), precision="fp32", phases=(Phase("p", {1: (Tile(0, (), c, ()),)}),))
    cycles, events, _ = run_plan(t, plan)
    assert compute_cycles(c, t) == 1463
    assert cycles == t.launch_overhead_cycles + 1463


# Hand-derived DMA timing (the fluid model, docs/timing-model.md).  FT78NE's numbers, which the derivations in the
# comments use (each test checks them first):
#   launch 1800 cycles; DMA: 2 engines per core, setup 64 cycles, 64 B/cycle per engine;
#   ddr: shared, 20 B/cycle, latency 200, 64-byte bursts; gsm: shared, 64 B/cycle, latency 40, 32-byte bursts;
#   am: per core, 128 B/cycle, latency 4; l2: per core, 32 B/cycle, latency 24, 32-byte bursts.
# A transfer holds an engine from `start` (the trace event's start), streams from start + setup (`wait_start`),
# and lands the slower end's latency after its last byte left: its event ends then.  Its `wait_cycles` are what
# sharing cost its stream: stream cycles - the stream's cycles alone (sim.timing.stream_cycles).
FT78NE_NUMBERS = dict(launch=1800, setup=64, engines=2, engine=64, ddr=(20, 200, 64), gsm=(64, 40, 32),
                      am=(128, 4, 1), l2=(32, 24, 32))


def ft78ne():
    """FT78NE, after checking it still has the numbers the hand derivations below use."""
    t = sim.load_target("FT78NE")
    got = dict(launch=t.launch_overhead_cycles, setup=t.dma.setup_cycles, engines=t.dma.engines_per_core,
               engine=t.dma.engine_bytes_per_cycle,
               **{n: (t.region(n).bandwidth_bytes_per_cycle, t.region(n).latency_cycles, t.region(n).burst_bytes)
                  for n in ("ddr", "gsm", "am", "l2")})
    assert got == FT78NE_NUMBERS, "FT78NE changed: derive the figures of tests/test_timing_model.py again"
    return t


def loads_plan(loads_by_core):
    """One phase, one tile per core holding that core's loads (no compute, no barrier)."""
    return Plan(cores=tuple(loads_by_core), precision="fp32", phases=(Phase("p", {
        c: (Tile(0, tuple(loads), None, ()),) for c, loads in loads_by_core.items()}, barrier_after=False),))


def dma_events(events):
    return sorted((e for e in events if e.kind in ("dma_in", "dma_out")), key=lambda e: (e.core, e.unit, e.start))


def test_one_transfer_alone_costs_setup_stream_and_latency():
    """6000 bytes DDR -> AM on one core, alone: DDR moves ceil(6000 / 64) = 94 bursts = 6016 bytes, AM 6000, the
    engine 6016.  Alone, the stream takes ceil(max(6016 / 20, 6000 / 128, 6016 / 64)) = ceil(300.8) = 301 cycles
    (DDR is the slowest: a lone transfer gets all of it).  It starts after launch and setup, 1800 + 64 = 1864,
    and lands 301 + max(200, 4) = 501 cycles later: 2365."""
    t = ft78ne()
    ddr, am = t.region("ddr"), t.region("am")
    tr = Transfer.contiguous(ddr.base, am.base, 6000)
    assert stream_cycles(tr, ddr, am, t.dma) == 301
    cycles, events, _ = run_plan(t, loads_plan({0: [tr]}))
    (e,) = dma_events(events)
    assert (e.start, e.wait_start, e.end, e.wait_cycles, e.bytes) == (1800, 1864, 2365, 0, 6000)
    assert cycles == 2365


def test_short_strided_runs_pay_whole_bursts():
    """A slice of 4 fp32 channels (16 bytes) from each of 64 DDR rows 4096 bytes apart moves 64 whole 64-byte
    bursts on the DDR side (4096 bytes, also the engine's) and 1024 dense bytes into AM: ceil(max(4096 / 20,
    1024 / 128, 4096 / 64)) = ceil(204.8) = 205 cycles; the same 1024 bytes dense take ceil(1024 / 20) = 52."""
    t = ft78ne()
    ddr, am = t.region("ddr"), t.region("am")
    strided = Transfer.block(ddr.base, am.base, (64, 4), 4, (4096, 4))
    dense = Transfer.contiguous(ddr.base, am.base, 64 * 16)
    for transfer, stream in ((strided, 205), (dense, 52)):
        cycles, _, _ = run_plan(t, loads_plan({0: [transfer]}))
        assert cycles == 1800 + 64 + stream + 200


def test_a_copy_within_one_region_pays_its_read_and_its_write():
    """4096 bytes GSM -> GSM: GSM's link carries both ends, 8192 bytes at 64 B/cycle = 128 cycles (the engine
    only 4096 / 64 = 64): it lands at 1864 + 128 + 40 = 2032."""
    t = ft78ne()
    gsm = t.region("gsm")
    tr = Transfer.contiguous(gsm.base, gsm.base + 0x10000, 4096)
    assert stream_cycles(tr, gsm, gsm, t.dma) == 128
    cycles, events, _ = run_plan(t, loads_plan({0: [tr]}))
    assert cycles == 2032 and dma_events(events)[0].wait_cycles == 0


def test_two_equal_transfers_from_two_cores_share_ddr_equally():
    """Cores 0 and 1 each load 8192 bytes (128 bursts) from DDR at cycle 1864: each gets half of DDR, 10 B/cycle,
    and both streams end at 1864 + ceil(8192 / 10) = 1864 + ceil(819.2) = 2684, landing at 2884.  Alone each
    would take ceil(8192 / 20) = 410 cycles: sharing cost each 820 - 410 = 410."""
    t = ft78ne()
    ddr, am = t.region("ddr"), t.region("am")
    n = 8192
    cycles, events, _ = run_plan(t, loads_plan({c: [Transfer.contiguous(ddr.base + c * n, am.base, n)]
                                                for c in (0, 1)}))
    assert [(e.core, e.wait_start, e.end, e.wait_cycles) for e in dma_events(events)] == [
        (0, 1864, 2884, 410), (1, 1864, 2884, 410)]
    assert cycles == 2884


def test_the_long_transfer_speeds_up_when_the_short_one_ends():
    """Core 0 loads 2560 bytes (40 bursts), core 1 9600 bytes (150 bursts), both from DDR at cycle 1864.  Both
    stream at 10 B/cycle until the short one is done: 2560 / 10 = 256 cycles, at 2120 exactly (it lands at
    2320; alone it takes 2560 / 20 = 128 cycles: sharing cost it 128).  The long one has moved 2560 bytes by
    then; its 7040 left go at all of DDR, 20 B/cycle: 352 cycles, to 2472 (lands at 2672).  Its stream took 608
    cycles against 480 alone: sharing cost it 128 too."""
    t = ft78ne()
    ddr, am = t.region("ddr"), t.region("am")
    short = Transfer.contiguous(ddr.base, am.base, 2560)
    long = Transfer.contiguous(ddr.base + 0x100000, am.base, 9600)
    cycles, events, _ = run_plan(t, loads_plan({0: [short], 1: [long]}))
    assert [(e.core, e.wait_start, e.end, e.wait_cycles) for e in dma_events(events)] == [
        (0, 1864, 2320, 128), (1, 1864, 2672, 128)]
    assert cycles == 2672


def test_eight_cores_streaming_from_ddr_share_it_eight_ways():
    """Eight cores each load 8192 bytes from DDR at cycle 1864: each gets 20 / 8 = 2.5 B/cycle, and every stream
    ends at 1864 + ceil(8192 / 2.5) = 1864 + ceil(3276.8) = 5141, landing at 5341: DDR moved 65536 bytes in 3277
    cycles, its 20 B/cycle.  Each stream lost 3277 - 410 = 2867 cycles to sharing.  With two loads per core
    (sixteen streams, 4096 bytes each) DDR is shared sixteen ways, 1.25 B/cycle each: the same 3277 cycles."""
    t = ft78ne()
    ddr, am = t.region("ddr"), t.region("am")
    n = 8192
    cycles, events, _ = run_plan(t, loads_plan({c: [Transfer.contiguous(ddr.base + c * n, am.base, n)]
                                                for c in range(8)}))
    assert {(e.wait_start, e.end, e.wait_cycles) for e in dma_events(events)} == {(1864, 5341, 2867)}
    assert cycles == 5341
    half = n // 2
    cycles, events, _ = run_plan(t, loads_plan({c: [Transfer.contiguous(ddr.base + c * n + i * half,
                                                                        am.base + i * half, half)
                                                    for i in range(2)] for c in range(8)}))
    # Alone each half would take ceil(4096 / 20) = 205 cycles: sharing cost 3277 - 205 = 3072.
    assert {(e.unit, e.wait_start, e.end, e.wait_cycles) for e in dma_events(events)} == {
        ("dma0", 1864, 5341, 3072), ("dma1", 1864, 5341, 3072)}
    assert cycles == 5341


def test_a_transfer_capped_by_its_engine_leaves_the_rest_of_ddr_to_others(tmp_path):
    """A copy of FT78NE whose DMA engines stream at most 16 B/cycle: a lone 8192-byte DDR -> AM load takes
    ceil(max(8192 / 20, 8192 / 16)) = 512 cycles (the engine, not DDR, sets the pace; no sharing: wait 0) and
    lands at 1864 + 512 + 200 = 2576.  Two cores' loads want 16 each, 32 in all, more than DDR's 20: they share
    it, 10 each, ceil(8192 / 10) = 820 cycles (lost to sharing: 820 - 512 = 308), landing at 2884."""
    doc = yaml.safe_load((TARGETS / "FT78NE.yaml").read_text())
    doc["dma"]["engine_bytes_per_cycle"] = 16
    path = tmp_path / "slow_engines.yaml"
    path.write_text(yaml.safe_dump(doc))
    t = sim.load_target(path)
    ddr, am = t.region("ddr"), t.region("am")
    n = 8192
    tr = Transfer.contiguous(ddr.base, am.base, n)
    assert stream_cycles(tr, ddr, am, t.dma) == 512
    cycles, events, _ = run_plan(t, loads_plan({0: [tr]}))
    assert cycles == 2576 and dma_events(events)[0].wait_cycles == 0
    cycles, events, _ = run_plan(t, loads_plan({c: [Transfer.contiguous(ddr.base + c * n, am.base, n)]
                                                for c in (0, 1)}))
    assert {(e.end, e.wait_cycles) for e in dma_events(events)} == {(2884, 308)}
    assert cycles == 2884


def test_a_strided_stream_gets_as_much_ddr_as_a_dense_one_whatever_its_engine_beats(tmp_path):
    """Core 0 loads 8192 dense DDR bytes, core 1 128 runs of 64 B, 128 B apart (8192 DDR bytes too, 128 bursts),
    both into AM at cycle 1864.  With FT78NE's 64-byte beats each run is one beat: the engines carry 8192 bytes
    each.  With a copy whose engines stream 128 B/cycle a beat carries 128 bytes and core 1's engine 128 x 128 =
    16384.  Either way DDR is what both streams share: 10 B/cycle each, both end at 1864 + ceil(8192 / 10) = 2684
    and land at 2884.  (An engine link does not weigh a stream's share: weighed by its engine's 16384, the strided
    stream got half the dense one's DDR, which landed at 2679.)"""
    doc = yaml.safe_load((TARGETS / "FT78NE.yaml").read_text())
    doc["dma"]["engine_bytes_per_cycle"] = 128
    path = tmp_path / "fast_engines.yaml"
    path.write_text(yaml.safe_dump(doc))
    for t in (ft78ne(), sim.load_target(path)):
        ddr, am = t.region("ddr"), t.region("am")
        dense = Transfer.contiguous(ddr.base, am.base, 8192)
        strided = Transfer(ddr.base + 0x100000, am.base + 0x4000, (128, 16), 4, (128, 4), (64, 4))
        cycles, events, _ = run_plan(t, loads_plan({0: [dense], 1: [strided]}))
        assert [(e.core, e.wait_start, e.end) for e in dma_events(events)] == [(0, 1864, 2884), (1, 1864, 2884)]
        assert cycles == 2884


def test_a_transfer_of_a_higher_priority_takes_ddr_first():
    """Cores 0 and 1 each load 8192 bytes from DDR at cycle 1864, core 1's at priority 1.  Core 1's stream takes
    all of DDR's 20 B/cycle (its engine's 64 and AM's 128 allow more): 8192 / 20 = 409.6, it ends at 2274 and lands
    at 2474, never waiting.  Core 0's gets nothing until then, then all 20: 409.6 more, ending at
    ceil(2274 + 409.6) = 2684 and landing at 2884 (the run ends when it would have with equal shares), 410 of its
    820 stream cycles lost to core 1."""
    t = ft78ne()
    ddr, am = t.region("ddr"), t.region("am")
    n = 8192
    loads = {c: [Transfer(ddr.base + c * n, am.base, (n,), 1, (1,), (1,), priority=c)] for c in (0, 1)}
    cycles, events, _ = run_plan(t, loads_plan(loads))
    assert [(e.core, e.wait_start, e.end, e.wait_cycles) for e in dma_events(events)] == [
        (0, 1864, 2884, 410), (1, 1864, 2474, 0)]
    assert cycles == 2884


def test_a_waiting_transfer_of_a_higher_priority_takes_the_next_free_engine():
    """Core 0 issues four DDR -> AM loads at launch (1800): L1 of 4096 bytes and L2 of 8192 take the two engines;
    L3 and L4, 64 bytes each, wait, L3 first.  L1 and L2 stream from 1864 at 10 B/cycle each: L1's 4096 take 409.6
    cycles, to 2274, and it lands at 2474; L2 has moved 4100 bytes by 2274 and streams its other 4092 alone at 20,
    204.6 cycles, to 2479, landing at 2679.  The engine L1 frees at 2474 goes to the waiter served first, the
    other's at 2679 to the second.  First come, first served (every priority 0): L3 at 2474, L4 at 2679.  With L4
    at priority 1, L4 at 2474 and L3 at 2679.  (The two small loads each stream alone: 64 bytes are 3.2 cycles of
    DDR, but the row each opens takes 38 / 8 = 4.75 cycles of DDR's activation rate, so 5 cycles: 2474 + 64 + 5 +
    200 = 2743 and 2679 + 64 + 5 + 200 = 2948, the run's end.)"""
    t = ft78ne()
    ddr, am = t.region("ddr"), t.region("am")

    def load(at: int, n: int, priority: int = 0) -> Transfer:
        return Transfer(ddr.base + at, am.base + at, (n,), 1, (1,), (1,), priority=priority)

    for l4_priority, starts in ((0, {"L3": 2474, "L4": 2679}), (1, {"L3": 2679, "L4": 2474})):
        loads = [load(0, 4096), load(0x10000, 8192), load(0x20000, 64), load(0x30000, 64, l4_priority)]
        cycles, events, _ = run_plan(t, loads_plan({0: loads}))
        got = {e.src: (e.start, e.end) for e in dma_events(events)}
        assert got[loads[0].src] == (1800, 2474) and got[loads[1].src] == (1800, 2679)
        assert {name: got[loads[i].src][0] for name, i in (("L3", 2), ("L4", 3))} == starts
        assert sorted(got[loads[i].src][1] for i in (2, 3)) == [2743, 2948] and cycles == 2948


def test_a_private_transfer_sees_no_other_core():
    """Core 0 loads 8192 bytes from its own l2 into its AM: ceil(max(8192 / 32, 8192 / 128, 8192 / 64)) = 256
    cycles, landing at 1864 + 256 + max(24, 4) = 2144, exactly as alone, while the seven other cores stream from
    DDR and from their own l2 at the same time (they share DDR among themselves; each l2 is its core's)."""
    t = ft78ne()
    ddr, am, l2 = t.region("ddr"), t.region("am"), t.region("l2")
    n = 8192
    mine = Transfer.contiguous(l2.base, am.base, n)
    others = {c: [Transfer.contiguous(ddr.base + c * n, am.base, n), Transfer.contiguous(l2.base, am.base + n, n)]
              for c in range(1, 8)}
    _, events, _ = run_plan(t, loads_plan({0: [mine], **others}))
    (e,) = [e for e in dma_events(events) if e.core == 0]
    assert (e.wait_start, e.end, e.wait_cycles) == (1864, 2144, 0)
    assert any(e.wait_cycles for e in dma_events(events) if e.core != 0)  # the others did share DDR


def test_a_private_call_on_one_core_pays_only_its_own_streams():
    """A ``_p`` BatchNormGrad on one core: every DMA took setup + its stream alone (sim.timing.stream_cycles)
    + latency + what sharing cost it, and sharing cost it something only while another stream of its own core
    ran; the same call on another core takes the same cycles."""
    m = sim.Simulator("FT78NE")
    t = m.target
    runs = []
    for core in (0, 5):
        run = m.call("fp_batch_norm_grad_p", x=0x10000000, dy=0x10200000, dx=0x10400000,
                     params=[0x10600000, 0x10610000, 0x10620000, 0x10630000, 0x10640000, 64, 256, 1], core=core,
                     numerics=False)
        assert_private_streams(run, core)
        mmap = MemoryMap(t)
        for e in dma_events(run.events):
            tr = Transfer.contiguous(e.src, e.dst, e.bytes)  # BatchNormGrad's _p transfers are dense
            src, dst = mmap.region_at(e.src), mmap.region_at(e.dst)
            alone = stream_cycles(tr, src, dst, t.dma)
            assert e.end - e.start == t.dma.setup_cycles + alone + e.wait_cycles + max(src.latency_cycles,
                                                                                        dst.latency_cycles)
        runs.append(run)
    assert runs[0].cycles == runs[1].cycles
    # A transfer lost cycles to sharing only while another stream of its own core was streaming beside it.
    events = dma_events(runs[0].events)
    for e in events:
        if e.wait_cycles:
            assert any(o is not e and o.wait_start < e.end and e.wait_start < o.end for o in events)


def test_a_third_load_waits_for_one_of_the_cores_two_dma_engines():
    """Three 4096-byte loads of one tile on one core: two take the engines at 1800 and share DDR from 1864,
    10 B/cycle each, ceil(4096 / 10) = 410 cycles, landing at 1864 + 410 + 200 = 2474, when the third takes the
    first engine; it streams alone from 2538, ceil(4096 / 20) = 205 cycles, and lands at 2943.  The first two
    lost 410 - 205 = 205 cycles to sharing."""
    t = ft78ne()
    ddr, am = t.region("ddr"), t.region("am")
    n = 4096
    loads = [Transfer.contiguous(ddr.base + i * n, am.base + i * n, n) for i in range(3)]
    cycles, events, _ = run_plan(t, loads_plan({0: loads}))
    assert sorted((e.start, e.wait_start, e.end, e.wait_cycles) for e in dma_events(events)) == [
        (1800, 1864, 2474, 205), (1800, 1864, 2474, 205), (2474, 2538, 2943, 0)]
    assert cycles == 2943


def test_a_lone_core_streams_a_big_tile_at_all_of_ddr():
    """The issue's GEMM-shaped Conv2DBackpropFilter (1x1 filter, 16384 positions x 32 -> 1024 channels) on one
    core: its big tile is one descriptor, which now draws all of DDR, so the run is compute-bound and close to
    its roofline (66.6 % of it when a descriptor held one of DDR's four ports; above 93 % now that its micro-kernels'
    fill and drain and the accumulator's load and store per row tile are priced: Yu et al. measure 92-96 % for
    whole single-core GEMMs)."""
    m = sim.Simulator("FT78NE")
    run = m.call("fp_conv2d_backprop_filter_s", input=0x80000000, out_backprop=0xA0000000, output=0xC0000000,
                 input_shape=[16384, 1, 1, 32], filter_sizes=[1, 1, 32, 1024], strides=[1, 1, 1, 1],
                 padding="VALID", core_mask=0x1, numerics=False)
    assert run.roofline.bound_by == "compute"
    assert run.roofline_fraction > 0.93
    ddr = run.target.region("ddr")
    # Its biggest DDR loads stream at DDR's whole bandwidth (no other stream shares it at the time).
    big = max((e for e in dma_events(run.events) if e.src_region == "ddr"), key=lambda e: e.bytes)
    stream = big.end - big.wait_start - max(ddr.latency_cycles, run.target.region("am").latency_cycles)
    assert stream - big.wait_cycles <= big.bytes / ddr.bandwidth_bytes_per_cycle + 1


def test_double_buffering_overlaps_next_load_with_compute():
    t = sim.load_target("FT78NE")
    ddr, am = t.region("ddr"), t.region("am")
    op = Operand(am.base, (16,), np.dtype(np.float32))
    # 100,000 elements streamed through the FMACs: 1563 trips at II 1, far longer than a 4 KiB load from DDR.
    heavy = Compute(lambda a: (a,), (op,), (op,), flops=2 * 100_000, precision="fp32",
                    loops=(fma_stream(t, 100_000),))

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
    # Core 1 streams twice core 0's elements, so core 0 waits at the barrier longer.
    work = {c: (Tile(0, (), Compute(lambda a: (a,), (op,), (op,), flops=2 * 64_000 * (c + 1), precision="fp32",
                                    loops=(fma_stream(t, 64_000 * (c + 1)),)), ()),) for c in range(2)}
    after = {c: (Tile(1, (), Compute(lambda a: (a,), (op,), (op,), flops=2 * 640, precision="fp32",
                                     loops=(fma_stream(t, 640),)), ()),) for c in range(2)}
    cycles, events, _ = run_plan(t, Plan((0, 1), (Phase("a", work, barrier_after=True), Phase("b", after)), "fp32"))
    waits = {e.core: e for e in events if e.kind == "barrier_wait" and e.phase == "a"}
    assert set(waits) == {0, 1}
    # (no barrier before a phase without work: the cores have nothing left to wait for)
    _, alone, _ = run_plan(t, Plan((0, 1), (Phase("a", work, barrier_after=True), Phase("b", {})), "fp32"))
    assert not any(e.kind == "barrier_wait" for e in alone)
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


def test_one_core_and_eight_both_stream_at_ddrs_bandwidth_on_a_large_case():
    """Bandwidth-bound: a lone core's streams may use all of DDR, so eight cores are no faster than DDR allows;
    both get close to the DDR roofline."""
    one = bn_call(sim.Simulator("FT78NE"), 256, 1024, core_mask=0x01, numerics=False)
    eight = bn_call(sim.Simulator("FT78NE"), 256, 1024, core_mask=0xFF, numerics=False)
    for run in (one, eight):
        assert run.roofline.bound_by == "ddr" and run.roofline_fraction > 0.9


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
    assert {e.src_region for e in shared.events if e.kind == "dma_in"} == {"ddr"}
    for core in (0, 5):
        p = m.call("fp_batch_norm_grad_p", x=0x10000000, dy=0x10200000, dx=0x10400000,
                   params=[0x10600000, 0x10610000, 0x10620000, 0x10630000, 0x10640000, 64, 256, 1], core=core)
        assert_private_streams(p, core)
        assert {e.src_region for e in p.events if e.kind == "dma_in"} <= {"l2"}


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
    plan = Plan((0,), (Phase("p", {0: (Tile(0, (), Compute(scribble, (a,), (a,), flops=4, precision="fp32",
                                                           loops=(fma_stream(t, 4),)), ()),)}),), "fp32")
    rec, mem = Recorder(), AddressSpace(t)
    mem.write(a.addr, np.arange(4, dtype=np.float32), core=0)
    with pytest.raises(sim.KernelCodeError, match="read-only"):
        Engine(t, mem, rec).run(plan)
    assert (mem.read(a.addr, (4,), np.float32, core=0) == np.arange(4)).all()
    # Swap: outputs (a, b) = inputs (b, a); the second result is a's old bytes, not what the first write left.
    swap = Compute(lambda x, y: (y, x), (a, b), (a, b), flops=0, precision="fp32",
                   loops=(elementwise(t.core, "fp32", 4, loads=2, stores=2, label="swap"),))
    mem.write(b.addr, np.full(4, 9, np.float32), core=0)
    Engine(t, mem, Recorder()).run(Plan((0,), (Phase("p", {0: (Tile(0, (), swap, ()),)}),), "fp32"))
    assert (mem.read(a.addr, (4,), np.float32, core=0) == 9).all()
    assert (mem.read(b.addr, (4,), np.float32, core=0) == np.arange(4)).all()
