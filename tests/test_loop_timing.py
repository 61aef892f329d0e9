"""A tile's compute priced from its inner loops (docs/timing-model.md, "Compute of one tile"): the arithmetic
from the target file's numbers to the cycles charged, worked by hand for a GEMM micro-kernel and an
elementwise loop, register blocking, issue-width limits, the roofline's compute bound, and the trace."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import numpy as np
import pytest
import yaml

import sim
from kernels.common.loops import elementwise, gemm_micro_kernel
from sim.engine.engine import Engine
from sim.engine.events import Recorder
from sim.inspect.trace_tools import load_trace
from sim.model.memory import AddressSpace
from sim.model.plan import Compute, Loop, Operand, Phase, Plan, Tile
from sim.model.target_loader import parse_target
from sim.timing import compute_cycles, estimate, loop_cost, loop_cycles, roofline

ROOT = Path(__file__).resolve().parent.parent
FT78NE_DOC = yaml.safe_load((ROOT / "targets" / "FT78NE.yaml").read_text())
#: FT78NE's core as targets/FT78NE.yaml gives it, the numbers every derivation below starts from:
#: unit -> (count, issue class, latency, bytes per issue).
UNITS = {"fmac": (3, "vector", 6, 0), "valu": (1, "vector", 2, 0), "vls": (2, "vector", 9, 256),
         "broadcast": (2, "scalar", 4, 0), "sload": (1, "scalar", 7, 8), "salu": (3, "scalar", 1, 0)}


def ft78ne_core():
    """FT78NE's core, after checking it still has the numbers the hand derivations below use."""
    core = sim.load_target("FT78NE").core
    got = {n: (u.count, u.issue_class, u.latency_cycles, u.bytes_per_issue) for n, u in core.units.items()}
    assert got == UNITS, "FT78NE's units changed: derive the figures of tests/test_loop_timing.py again"
    assert dict(core.issue_width) == {"scalar": 5, "vector": 6}
    assert (core.vector_width_bytes, core.precisions["fp32"].lanes, core.vector_registers) == (128, 32, 64)
    assert (core.loop_overhead_cycles, core.tile_overhead_cycles, core.reduction_latency_cycles) == (8, 24, 16)
    return core


def test_gemm_micro_kernel_6x128_fp32_is_fmac_bound_at_full_rate():
    """The worked example of docs/timing-model.md.  Per k-step, C[6, 128] += A[6, k] B[k, 128]:
    B's row is 128 / 32 = 4 vectors, loaded two per VLDDW (256 B / 128 B): 2 vls issues;
    A's 6 values, two fp32 per 8-byte SLDW: 3 sload issues; 6 broadcasts; 6 x 4 = 24 FMACs into 24 accumulators.
    Resource II: fmac 24/3 = 8, vls 2/2 = 1, sload 3/1 = 3, broadcast 6/2 = 3; vector slots (24 + 2)/6 -> 5,
    scalar slots (3 + 6)/5 -> 2: II 8, set by the FMACs.  Recurrence: one FMAC latency, 6 <= 8: 24 independent
    accumulators cover 3 units x 6 cycles.  Fill: sload 7 + broadcast 4 + fmac 6 = 17.  Epilogue: C's 24
    vectors stored, 12 vls issues on 2 units = 6 cycles + the store latency 4 (VSTDW) = 10.
    Loop: 8 + 17 + 512 x 8 + 10 = 4131; the tile: 24 + 4131 = 4155 cycles.  The math: 2 x 6 x 128 x 512 =
    786,432 flops, 4096 cycles at 192 flop/cycle: 98.6 % of peak, and the FMACs are busy 24 of every 8 x 3
    slots of the k-loop (100 %)."""
    core = ft78ne_core()
    loop = gemm_micro_kernel(core, "fp32", 6, 128, 512, itemsize=4)
    assert dict(loop.issues) == {"vls": 2, "sload": 3, "broadcast": 6, "fmac": 24}
    assert dict(loop.epilogue) == {"vls.store": 12} and loop.vector_registers == 24 + 4 + 6
    cost = loop_cost(loop, core)
    assert (cost.resource_ii, cost.recurrence_ii, cost.ii, cost.bound_by) == (8, 6, 8, "fmac")
    assert (cost.fill, cost.epilogue) == (17, 10)
    assert loop_cycles(loop, core) == 8 + 17 + 512 * 8 + 10 == 4131
    c = Compute(lambda: (), (), (), flops=2 * 6 * 128 * 512, precision="fp32", loops=(loop,))
    t = sim.load_target("FT78NE")
    assert compute_cycles(c, t) == 24 + 4131 == 4155
    peak = 32 * 3 * 2
    assert c.flops / peak == 4096 and round(100 * 4096 / 4155, 1) == 98.6
    assert loop.issues["fmac"] / (core.units["fmac"].count * cost.ii) == 1.0


def test_register_blocking_a_2x32_micro_kernel_is_recurrence_bound():
    """2 rows x 1 vector: 2 accumulators.  Per k-step vls 1 (one vector, a VLDDW moves up to two), sload 1,
    broadcast 2, fmac 2: every unit and issue class needs one cycle, resource II 1.  But each accumulator's
    next FMAC waits for its last one (latency 6): II 6, the recurrence.  The FMACs do 2 of 3 x 6 = 18 slots
    (11 %): fewer accumulators than 3 units x 6 cycles stall (Yu et al.'s m·n >= 18).
    k = 512: 8 + 17 + 512 x 6 + epilogue (1 vls store: 1 + its latency 4 = 5) = 3102 cycles for 65,536 flops, which the
    6x128 kernel does in 1/12 of its 4096 k-loop cycles."""
    core = ft78ne_core()
    loop = gemm_micro_kernel(core, "fp32", 2, 32, 512, itemsize=4)
    assert dict(loop.issues) == {"vls": 1, "sload": 1, "broadcast": 2, "fmac": 2}
    cost = loop_cost(loop, core)
    assert (cost.resource_ii, cost.recurrence_ii, cost.ii, cost.bound_by) == (1, 6, 6, "recurrence")
    assert loop_cycles(loop, core) == 8 + 17 + 512 * 6 + 5 == 3102
    assert 2 / (3 * 6) == pytest.approx(0.111, abs=1e-3)
    # 3 x 6 = 18 accumulators are what it takes: a 6x96 block (6 x 3 vectors) covers the latency exactly.
    exact = loop_cost(gemm_micro_kernel(core, "fp32", 6, 96, 512, itemsize=4), core)
    assert (exact.resource_ii, exact.recurrence_ii, exact.bound_by) == (6, 6, "fmac")


def test_a_micro_kernel_too_big_for_the_register_file_is_refused():
    """12 x 160 fp32 needs 12 x 5 = 60 accumulators + 5 B vectors + 12 broadcasts = 77 > 64 registers."""
    core = ft78ne_core()
    assert gemm_micro_kernel(core, "fp32", 12, 160, 8, itemsize=4).vector_registers == 77
    assert gemm_micro_kernel(core, "fp32", 12, 128, 8, itemsize=4).vector_registers == 48 + 4 + 12 == 64


def test_an_elementwise_loop_is_vls_bound():
    """y = a x + y over 4096 fp32 (docs/timing-model.md): per vector, 2 loads, 1 store and 1 FMA.  A vector is 32
    elements: 128 vectors, unrolled by the 2 vectors one vls issue moves: 64 trips, each issuing (2 + 1) x 2 =
    6 vectors = 3 vls issues and 2 FMACs.  Resource II: vls 3/2 -> 2, fmac 2/3 -> 1, vector slots 5/6 -> 1:
    II 2, set by the vector loads and stores.  No carried chain.  Fill: vls 9 + fmac 6 + the store's latency 4 = 19.
    Loop: 8 + 19 + 64 x 2 = 155; the tile 24 + 155 = 179 cycles for 8192 flops (43 cycles at the FMACs' peak)."""
    core = ft78ne_core()
    loop = elementwise(core, "fp32", 4096, loads=2, stores=1, fmac=1, label="axpy")
    assert (loop.trips, dict(loop.issues), loop.chain, loop.carried) == (64, {"vls": 3, "fmac": 2},
                                                                        ("vls", "fmac", "vls.store"), ())
    cost = loop_cost(loop, core)
    assert (cost.ii, cost.bound_by, cost.fill, cost.epilogue) == (2, "vls", 19, 0)
    assert loop_cycles(loop, core) == 8 + 19 + 64 * 2 == 155
    c = Compute(lambda: (), (), (), flops=2 * 4096, precision="fp32", loops=(loop,))
    assert compute_cycles(c, sim.load_target("FT78NE")) == 179
    assert math.ceil(2 * 4096 / 192) == 43


def test_an_fp16_elementwise_loop_on_mt7004_takes_half_the_trips_of_fp32():
    """MT7004 has 16 fp32 and 32 fp16 lanes in 64-byte vectors (a vls issue moves 128 B, two vectors): 4096
    elements are 256 fp32 vectors (128 trips) or 128 fp16 vectors (64 trips), both vls-bound at II 2."""
    core = sim.load_target("MT7004").core
    fp32 = loop_cost(elementwise(core, "fp32", 4096, loads=2, stores=1, fmac=1), core)
    fp16 = loop_cost(elementwise(core, "fp16", 4096, loads=2, stores=1, fmac=1), core)
    assert (fp32.trips, fp32.ii, fp16.trips, fp16.ii) == (128, 2, 64, 2)
    assert fp32.cycles - fp16.cycles == 64 * 2


def test_issue_width_limits_bite_where_they_should():
    """FT78NE's 6 vector slots equal its vector units (3 fmac + 1 valu + 2 vls), so a vector loop is bound by a
    unit first; its 5 scalar slots are fewer than its 6 scalar units (2 broadcast + 1 sload + 3 salu): a body
    issuing broadcast 2, sload 1, salu 3 needs one cycle on every unit but 6/5 -> 2 on the scalar slots.
    A copy of FT78NE with 3 vector slots turns the 6x128 micro-kernel's 26 vector issues into 9 cycles, above
    the FMACs' 8: the issue width then sets the II."""
    core = ft78ne_core()
    scalar = Loop(trips=100, issues={"broadcast": 2, "sload": 1, "salu": 3}, label="gather")
    cost = loop_cost(scalar, core)
    assert (cost.ii, cost.bound_by) == (2, "scalar issue")
    full = Loop(trips=100, issues={"fmac": 3, "valu": 1, "vls": 2})
    assert loop_cost(full, core).ii == 1  # 6 vector issues on 6 slots: no limit
    micro = gemm_micro_kernel(core, "fp32", 6, 128, 512, itemsize=4)
    assert loop_cost(micro, core).bound_by == "fmac"  # 26 / 6 -> 5 < 8
    doc = copy.deepcopy(FT78NE_DOC)
    doc["core"]["issue_width"]["vector"] = 3
    narrow = parse_target(doc, "narrow.yaml").core
    cost = loop_cost(micro, narrow)
    assert (cost.ii, cost.bound_by) == (math.ceil(26 / 3), "vector issue") == (9, "vector issue")


def test_reductions_and_entries():
    """A loop entered 4 times, each entry 10 trips of {valu 1} and a reduction of 2 vectors: per entry
    8 + fill 2 + 10 x 1 + 2 x 16 = 52; 4 entries 208."""
    core = ft78ne_core()
    loop = Loop(trips=10, issues={"valu": 1}, chain=("valu",), entries=4, reductions=2)
    assert loop_cycles(loop, core) == 4 * (8 + 2 + 10 + 32) == 208


def _plan(target, tiles_by_core):
    am = target.region("am")
    op = Operand(am.base, (4,), np.dtype(np.float32))
    return Plan(cores=tuple(tiles_by_core), precision="fp32", phases=(Phase("p", {
        core: tuple(Tile(i, (), Compute(lambda a: (a,), (op,), (op,), flops=f, precision="fp32",
                                        loops=loops), ()) for i, (loops, f) in enumerate(tiles))
        for core, tiles in tiles_by_core.items()}, barrier_after=False),))


def test_the_roofline_counts_every_cores_loops_at_their_resource_ii():
    """Core 0 runs two 6x128 micro-kernels (k = 512, resource II 8: 4096 cycles each), core 1 one: the compute
    bound spreads the three over the two cores, 3 x 4096 / 2 = 6144 (no fill, recurrence, epilogue or overhead:
    an even plan could reach it); this plan's own bound is its busiest core's 2 x 4096 = 8192, which the run
    exceeds by exactly those: launch + 2 x 4155.  A 2x32 kernel's bound is its resource II 1 x 512, far below
    its 3102."""
    t = sim.load_target("FT78NE")
    micro = gemm_micro_kernel(t.core, "fp32", 6, 128, 512, itemsize=4)
    flops = 2 * 6 * 128 * 512
    plan = _plan(t, {0: [((micro,), flops), ((micro,), flops)], 1: [((micro,), flops)]})
    rf = roofline(plan, t)
    assert rf.resource_cycles["compute"] == 6144 and rf.bound_by == "compute"
    assert rf.busiest_core_cycles["compute"] == 8192
    rec = Recorder()
    cycles = Engine(t, AddressSpace(t), rec, numerics=False).run(plan)
    assert cycles == t.launch_overhead_cycles + 2 * 4155 == estimate(plan, t)
    assert cycles >= t.launch_overhead_cycles + rf.cycles
    small = gemm_micro_kernel(t.core, "fp32", 2, 32, 512, itemsize=4)
    assert roofline(_plan(t, {0: [((small,), 2 * 2 * 32 * 512)]}), t).resource_cycles["compute"] == 512


def test_compute_events_say_how_their_loops_were_priced(tmp_path):
    """The trace's compute event carries, per loop, the label, the trips, the II and what bounds it, the fill,
    the epilogue and the overhead, in the order the formula adds them; it survives a round trip through the
    Chrome JSON and CSV writers."""
    t = sim.load_target("FT78NE")
    micro = gemm_micro_kernel(t.core, "fp32", 6, 128, 512, itemsize=4, entries=2)
    axpy = elementwise(t.core, "fp32", 4096, loads=2, stores=1, fmac=1, label="axpy")
    plan = _plan(t, {0: [((micro, axpy), 1)]})
    rec = Recorder()
    Engine(t, AddressSpace(t), rec, numerics=False).run(plan)
    (event,) = [e for e in rec.events if e.kind == "compute"]
    assert event.loops == ("tile overhead 24; gemm micro-kernel 6x128: 2 x (8 + fill 17 + 512 x II 8 [fmac] + "
                           "epilogue 10) = 8262; axpy: 8 + fill 19 + 64 x II 2 [vls] = 155")
    assert event.end - event.start == 24 + 8262 + 155
    from sim.inspect.trace import write_trace
    for name in ("t.json", "t.csv"):
        write_trace(tmp_path / name, rec.events, t.clock_hz, {})
        (back,) = [e for e in load_trace(tmp_path / name).events if e.kind == "compute"]
        assert back.loops == event.loops


def test_the_summary_groups_the_loops_by_what_bounds_them():
    """Two tiles each running the 6x128 micro-kernel (4131 cycles) and the axpy loop (155), one tile of a 2x32
    micro-kernel (3102): compute 2 x (24 + 4131 + 155) + (24 + 3102) = 11746 cycles; the 6x128 kernels are
    8262 / 11746 = 70.3 % of them, the 2x32 26.4 %, the axpy loops 2.6 %, tile overheads the rest."""
    from sim.inspect.summary import loop_summaries, loops_text
    t = sim.load_target("FT78NE")
    micro = gemm_micro_kernel(t.core, "fp32", 6, 128, 512, itemsize=4)
    axpy = elementwise(t.core, "fp32", 4096, loads=2, stores=1, fmac=1, label="axpy")
    small = gemm_micro_kernel(t.core, "fp32", 2, 32, 512, itemsize=4)
    plan = _plan(t, {0: [((micro, axpy), 1), ((small,), 1)], 1: [((micro, axpy), 1)]})
    rows, total = loop_summaries(plan, t)
    assert total == 2 * (24 + 4131 + 155) + 24 + 3102 == 11746
    assert [(r.label, r.ii, r.bound_by, r.tiles, r.trips, r.cycles) for r in rows] == [
        ("gemm micro-kernel 6x128", 8, "fmac", 2, 1024, 8262),
        ("gemm micro-kernel 2x32", 6, "recurrence", 1, 512, 3102),
        ("axpy", 2, "vls", 2, 128, 310)]
    assert loops_text(plan, t) == (
        "inner loops: gemm micro-kernel 6x128: II 8 set by fmac, 1,024 iterations in 2 tiles, 70.3% of compute; "
        "gemm micro-kernel 2x32: II 6 set by recurrence, 512 iterations in 1 tiles, 26.4% of compute; "
        "axpy: II 2 set by vls, 128 iterations in 2 tiles, 2.6% of compute")


def test_a_loop_is_priced_by_its_content_and_its_core():
    """The price of a loop is remembered by its content: an equal loop built again costs the same, a loop that
    differs in any priced field or a core with other numbers is priced afresh.  Hand figures: an elementwise
    body of 2 vls issues on 2 units and 1 valu is II 1; 100 trips, one entry: 8 + fill (vls 9 + valu 2 = 11) +
    100 x 1 = 119 cycles; at 3 entries 3 x 119 = 357; with a loop overhead of 20 instead of 8: 12 more."""
    import dataclasses

    core = ft78ne_core()

    def body(**kw):
        return Loop(trips=100, issues={"vls": 2, "valu": 1}, chain=("vls", "valu"), label="ew", **kw)

    assert loop_cycles(body(), core) == 119
    assert loop_cycles(body(), core) == 119  # an equal loop, another object
    assert loop_cycles(body(entries=3), core) == 357
    assert loop_cycles(Loop(trips=100, issues={"vls": 4, "valu": 1}, chain=("vls", "valu")), core) == 8 + 11 + 200
    slow = dataclasses.replace(core, loop_overhead_cycles=20)
    assert loop_cycles(body(), slow) == 131 and loop_cycles(body(), core) == 119
    assert "ew: 20 + fill 11 + 100 x II 1 [vls]" in compute_text_of(body(), slow)


def compute_text_of(loop, core):
    """The trace text of a compute made of ``loop`` on a target whose core is ``core``."""
    from types import SimpleNamespace

    from sim.timing import compute_text
    return compute_text(Compute(None, (), (), 0, "fp32", (loop,)), SimpleNamespace(core=core))  # type: ignore
