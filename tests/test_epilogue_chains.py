"""Epilogues priced as chains of dependent steps, and the store latency (timing model III, issue 23).

The published improved reduction (Yu et al., "Optimizing General Matrix Multiplications on Modern Multi-core
DSPs", IPDPS 2024, Table III; BLAS-for-multi-core-DSP, 相关说明/现代多核DSP上的通用矩阵乘优化) reduces the 48
accumulators of the NT micro-kernel and writes them back in 122 cycles:

    step  instruction  latency  what                                                  insts  cycles
    1     VSTDW        4        write 48 vectors into AM in sequence                   24     12
          VLDDWM4      9        read them back into registers in modulo-4 order        24     12
    2     VFMULAD      6        reduce 48 vectors to 12 (adds)                          36     18
    3     VSTDW        4        write the 12 vectors into AM                             6      3
          VLDDWM4      9        read them back in modulo-4 order                         6      9
    4     VFMULAD      6        reduce 12 vectors to 3                                   9     12
    5     VMVCGC       3        write the 3 vectors into the SVR                         3      3
          SMVCCG       2        read each element into a scalar register                48     48
          SFADDD       3        add the 48 scalars to C's old values                    48      2
          SSTDW        4        write the results back to C in SM                       48      3
                                                                                 total        122

The rows after the first are what each step adds once it overlaps the step before ("after instruction packing
and pipelining"): SFADDD adds SMVCCG's latency 2, SSTDW adds SFADDD's 3.  The model prices such an epilogue
as a pipelined chain (sim.timing.epilogue_cycles): a step starts its predecessor's latency after the
predecessor starts (and after the last step on its units has issued), and ends no sooner than its issue cycles
after its start nor than its predecessor's end plus its latency; the chain ends the last step's latency later.
The derivations below work that through from targets/FT78NE.yaml's numbers, read with pyyaml.
"""

from __future__ import annotations

import dataclasses
from math import ceil
from pathlib import Path

import pytest
import yaml
from tiny_kernels import Twice

import sim
from kernels.common.loops import VSTORE, gemm_micro_kernel, streaming, tree_levels, vls_issues
from sim.model.plan import REDUCE, Loop, Plan, Tile, stored
from sim.model.target import FunctionalUnit
from sim.timing import epilogue_cycles, loop_cost, loop_cycles

ROOT = Path(__file__).resolve().parents[1]
FT = yaml.safe_load((ROOT / "targets" / "FT78NE.yaml").read_text())["core"]
MT = yaml.safe_load((ROOT / "targets" / "MT7004.yaml").read_text())["core"]


def test_the_numbers_the_derivations_use():
    u = FT["units"]
    assert (u["vls"]["count"], u["vls"]["latency_cycles"], u["vls"]["store_latency_cycles"]) == (2, 9, 4)
    assert u["vls"]["bytes_per_issue"] == 2 * FT["vector_width_bytes"] == 256  # a VSTDW / VLDDW moves 2 vectors
    assert (u["fmac"]["count"], u["fmac"]["latency_cycles"]) == (3, 6)
    assert (u["valu"]["count"], u["valu"]["latency_cycles"]) == (1, 2)
    assert (u["salu"]["count"], u["salu"]["latency_cycles"]) == (3, 1)
    assert (u["sload"]["count"], u["sload"]["store_latency_cycles"]) == (1, 4)
    assert FT["reduction_latency_cycles"] == 16 and FT["loop_overhead_cycles"] == 8
    # MT7004 stores as FT78NE does (assumed: same ISA family).
    assert MT["units"]["vls"]["store_latency_cycles"] == MT["units"]["sload"]["store_latency_cycles"] == 4


def published_reduction(core) -> Loop:
    """The improved reduction of Table III as a loop's epilogue chain on the target's unit classes: the vector
    stores and modulo loads on vls, the adds as trees on fmac (4 vectors to 1: 2 adds, then 1), VMVCGC on the
    vector ALU, the SVR read-out as the core's cross-lane reduction (16 cycles a vector: one SMVCCG an element),
    SFADDD on the scalar ALUs, SSTDW a scalar store."""
    assert tree_levels(4) == (2, 1)
    steps = ({VSTORE: vls_issues(core, 48)}, {"vls": vls_issues(core, 48)},       # step 1: 24 + 24 issues
             *({"fmac": 12 * adds} for adds in tree_levels(4)),                   # step 2: 12 groups of 4
             {VSTORE: vls_issues(core, 12)}, {"vls": vls_issues(core, 12)},       # step 3: 6 + 6 issues
             *({"fmac": 3 * adds} for adds in tree_levels(4)),                    # step 4: 3 groups of 4
             {"valu": 3}, {REDUCE: 3}, {"salu": 48}, {stored("sload"): 48})       # step 5
    return Loop(trips=0, issues={}, epilogue_chain=steps, label="improved reduction of 48 vectors")


def test_the_published_improved_reduction_by_hand():
    core = sim.load_target("FT78NE").core
    u = FT["units"]
    st, ld, fm = u["vls"]["store_latency_cycles"], u["vls"]["latency_cycles"], u["fmac"]["latency_cycles"]
    va, sa, ss = u["valu"]["latency_cycles"], u["salu"]["latency_cycles"], u["sload"]["store_latency_cycles"]
    vls, fmac = u["vls"]["count"], u["fmac"]["count"]
    # (start S, end F) of each step; S = S_before + L_before (or the end of the last step on the same units),
    # F = max(S + issue cycles, F_before + L_before).
    s1, f1 = 0, ceil(24 / vls)  # VSTDW x 24: 0, 12
    s2 = max(s1 + st, f1)  # VLDDWM4 x 24 after the stores: 12, 24
    f2 = max(s2 + ceil(24 / vls), f1 + st)
    s3 = s2 + ld  # 24 adds (pairs): 21, 33
    f3 = max(s3 + ceil(24 / fmac), f2 + ld)
    s4 = s3 + fm  # 12 adds: 27, 39
    f4 = max(s4 + ceil(12 / fmac), f3 + fm)
    s5 = max(s4 + fm, f2)  # VSTDW x 6: 33, 45
    f5 = max(s5 + ceil(6 / vls), f4 + fm)
    s6 = max(s5 + st, f5)  # VLDDWM4 x 6 after them: 45, 49
    f6 = max(s6 + ceil(6 / vls), f5 + st)
    s7 = s6 + ld  # 6 adds: 54, 58
    f7 = max(s7 + ceil(6 / fmac), f6 + ld)
    s8 = s7 + fm  # 3 adds: 60, 64
    f8 = max(s8 + ceil(3 / fmac), f7 + fm)
    s9 = s8 + fm  # VMVCGC x 3 on one valu: 66, 70
    f9 = max(s9 + 3, f8 + fm)
    s10 = s9 + va  # the SVR read, 16 a vector: 68, 116
    f10 = max(s10 + 3 * 16, f9 + va)
    s11 = s10  # SFADDD x 48 (the read's latency is in its 16s)
    f11 = max(s11 + ceil(48 / 3), f10)
    s12 = s11 + sa  # SSTDW x 48 on one unit: 69, 117
    f12 = max(s12 + 48, f11 + sa)
    assert [(s1, f1), (s2, f2), (s3, f3), (s4, f4), (s5, f5), (s6, f6), (s7, f7), (s8, f8), (s9, f9),
            (s10, f10), (s11, f11), (s12, f12)] == [
        (0, 12), (12, 24), (21, 33), (27, 39), (33, 45), (45, 49), (54, 58), (60, 64), (66, 70), (68, 116),
        (68, 116), (69, 117)]
    hand = f12 + ss                                                # the last store in SM: 117 + 4 = 121
    cost = loop_cost(published_reduction(core), core)
    assert cost.epilogue == hand == 121
    assert cost.cycles == FT["loop_overhead_cycles"] + 121
    # The published 122 counts to the last SSTDW's issue (the table's last row adds SFADDD's latency, 3, not the
    # store's 4); the model also charges the store's latency, the cycles until the results are in SM.  The same
    # recurrence on the table's own latencies and issue counts ends the last SSTDW at the published 122 exactly
    # (126 with its latency), its issue-bound steps at the table's running totals (12, 24, 45, then SMVCCG
    # 69 + 48 = 117, SFADDD 119, SSTDW 122).  Between those the model starts each add tree as soon as the first
    # loads land, so its adds end at 39 and 64 where the table's running totals are 42 and 66, and VMVCGC at 70
    # where the table says 69: the SVR read starts at 69 either way.  From the file it is 121 = 126 - 5: the
    # file's VMVCGC (valu) latency is 2, not 3 (the SVR read starts at 68: -1); the read-out is the core's
    # cross-lane reduction, 16 cycles a vector with SMVCCG's latency inside (-2); a scalar add on salu takes 1,
    # not SFADDD's 3 (-2).
    published = [(12, 4, {"vls"}), (12, 9, {"vls"}), (8, 6, {"fmac"}), (4, 6, {"fmac"}), (3, 4, {"vls"}),
                 (3, 9, {"vls"}), (2, 6, {"fmac"}), (1, 6, {"fmac"}), (3, 3, {"valu"}), (48, 2, {"svr"}),
                 (16, 3, {"salu"}), (48, 4, {"sst"})]
    assert epilogue_cycles(published) - 4 == 122


def test_the_old_pricing_of_that_epilogue_was_one_latency():
    """Issue 23's 49: the same issues as one independent step (the resource bound plus the last unit's latency):
    the 48 SVR reads set the bound, 48 cycles, + salu's 1.  The chain prices what each step waits for."""
    core = sim.load_target("FT78NE").core
    flat = Loop(trips=0, issues={}, epilogue={"vls": 60, "fmac": 45, "valu": 3, "sload": 48, "salu": 48})
    assert loop_cost(flat, core).epilogue == 48 + 1 == 49


def test_a_loop_ending_in_a_store_pays_the_store_latency():
    core = sim.load_target("FT78NE").core
    st = FT["units"]["vls"]["store_latency_cycles"]
    # The 6 x 128 micro-kernel stores its 24 accumulators: 12 VSTDW on 2 units, 6 cycles, + the store's 4 = 10
    # (the load's 9 charged before: 15).
    loop = gemm_micro_kernel(core, "fp32", 6, 128, 512, itemsize=4)
    assert dict(loop.epilogue) == {VSTORE: 12}
    assert loop_cost(loop, core).epilogue == ceil(12 / 2) + st == 10
    # With C loaded first (beta = 1): 12 loads and 12 stores share the 2 units, 12 cycles, the stores last: 16.
    assert loop_cost(gemm_micro_kernel(core, "fp32", 6, 128, 512, itemsize=4, load_c=True), core).epilogue == 16
    # A stream's fill ends in its store: load 9 + FMAC 6 + store 4 = 19.
    axpy = streaming(core, "fp32", 4096, loads=2, stores=1, fmac=1)
    assert axpy.chain == ("vls", "fmac", VSTORE) and loop_cost(axpy, core).fill == 9 + 6 + st == 19
    # A unit without its own store latency stores as it loads.
    unit = FunctionalUnit(name="vls", count=2, issue_class="vector", latency_cycles=9, bytes_per_issue=256)
    assert (unit.latency(), unit.latency(store=True)) == (9, 9)


def test_one_step_is_its_resource_bound_plus_its_latency_and_a_chain_of_single_ops_its_latencies():
    core = sim.load_target("FT78NE").core
    one = Loop(trips=0, issues={}, epilogue={"fmac": 7, "vls": 3})        # ceil(7 / 3) = 3, + vls's 9
    assert loop_cost(one, core).epilogue == 3 + 9
    ops = Loop(trips=0, issues={}, epilogue_chain=({"vls": 1}, {"fmac": 1}, {"fmac": 1}, {VSTORE: 1}))
    assert loop_cost(ops, core).epilogue == 9 + 6 + 6 + 4 + 1            # the first issue's cycle, then latencies


def test_a_streams_running_sums_are_added_as_a_tree():
    core = sim.load_target("FT78NE").core
    # 2 sums over 4096 fp32: unrolled to 8 accumulators each; the tree adds 8, 4 then 2 (3, 2, 1 cycles on 3
    # FMACs), each level from the one before's start + 6 and ending no sooner than its end + 6: 3, 9, 15; the
    # 2 reductions (32 cycles) from 18: 50.  The old price: 14 adds, ceil(14 / 3) = 5 + 6 = 11, + 32 = 43.
    loop = streaming(core, "fp32", 4096, loads=2, fmac=2, sums=2, reductions=2)
    assert loop.epilogue_chain == ({"fmac": 8}, {"fmac": 4}, {"fmac": 2})
    assert loop_cost(loop, core).epilogue == 50
    assert tree_levels(1) == () and tree_levels(5) == (2, 1, 1) and tree_levels(8) == (4, 2, 1)


def _with_loop(loop: Loop):
    """A breaker for tiny_kernels.Twice: every compute of its plan states ``loop`` instead of its own."""
    def breaker(plan: Plan, call, ctx) -> Plan:
        def tile(t: Tile) -> Tile:
            return dataclasses.replace(t, compute=dataclasses.replace(t.compute, loops=(loop,)))
        return dataclasses.replace(plan, phases=tuple(dataclasses.replace(
            ph, tiles={c: tuple(tile(t) for t in ts) for c, ts in ph.tiles.items()}) for ph in plan.phases))
    return breaker


@pytest.mark.parametrize("loop, refused", [
    (Loop(trips=256, issues={"vls": 1, "fmac": 1}, chain=("vls", VSTORE), epilogue={VSTORE: 1},
          epilogue_chain=({"fmac": 1}, {REDUCE: 1})), None),
    (Loop(trips=256, issues={"vls": 1, "fmac": 1}, epilogue_chain=({"tensor.store": 1},)), "loop-units"),
    (Loop(trips=256, issues={"vls": 1, "fmac": 1}, epilogue_chain=({"fmac": -1},)), "plan-structure"),
    (Loop(trips=256, issues={"vls": 1, "fmac": 1}, chain=(REDUCE,)), "loop-units"),
    (Loop(trips=256, issues={"vls": 1, "fmac": 1}, chain=("vls", "fmac.store")), "loop-units"),
])
def test_the_plan_check_takes_stores_and_reductions_and_refuses_other_units(loop, refused):
    m = sim.Simulator("FT78NE")
    args = {"x": 0xA0000000, "y": 0xA0100000, "n": 1024, "core_mask": 0x1}
    with sim.registered_kernel(Twice(f"chain_{refused or 'ok'}".replace("-", "_"), _with_loop(loop))):
        if refused is None:
            run = m.call("fp_chain_ok_s", numerics=False, **args)
            assert run.cycles > 0
        else:
            with pytest.raises(sim.PlanError) as info:
                m.call(f"fp_chain_{refused.replace('-', '_')}_s", numerics=False, **args)
            assert info.value.rule == refused


def test_a_store_on_a_unit_that_moves_no_data_is_refused_naming_it():
    """An FMAC stores nothing: 'fmac.store' is refused by the plan check (the call runs nothing) and by the
    pricing of a loop the check never saw, each naming the unit."""
    m = sim.Simulator("FT78NE")
    args = {"x": 0xA0000000, "y": 0xA0100000, "n": 1024, "core_mask": 0x1}
    loop = Loop(trips=256, issues={"vls": 1, "fmac": 1}, chain=("vls", "fmac.store"), label="bad store")
    with sim.registered_kernel(Twice("chain_fmac_store", _with_loop(loop))):
        with pytest.raises(sim.PlanError, match=r"names a store on unit class 'fmac', which moves no data: a store "
                                                r"issues on a load/store unit \(vls\.store, sload\.store\)"):
            m.call("fp_chain_fmac_store_s", numerics=False, **args)
    with pytest.raises(sim.SimError, match=r"loop bad store names a store on unit class 'fmac', which moves no data"):
        loop_cycles(loop, m.target.core)
