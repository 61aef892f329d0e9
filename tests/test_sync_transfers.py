"""Synchronised transfers (Transfer.sync: sim/model/sync.py, sim/engine/sync.py): the members of a group meet, then
stream as one flow; the rows a DRAM opens are the merged stream's, and a shared source block read alike by
several members is read once.  Costs derived by hand from FT78NE's file.

FT78NE (targets/FT78NE.yaml): DDR 20 B/cycle, 64-byte bursts, latency 200, rows of 8 KiB over 32 banks, 8
activations per 38 cycles (tFAW), tRC 84; DMA setup 64 cycles, 64 B/cycle per engine, 2 engines per core; launch
1,800 cycles.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import sim
from sim.engine.engine import simulate
from sim.errors import SimError
from sim.model.dram import interleaved_row_use, row_use
from sim.model.memory import AddressSpace
from sim.model.plan import Phase, Plan, Tile, Transfer
from sim.model.target import DramRows
from sim.timing import roofline, run_lower_bound_cycles

FT = sim.load_target("FT78NE")
DDR, AM = FT.region("ddr"), FT.region("am")
ROWS = DDR.rows
assert ROWS is not None
LAUNCH, SETUP = FT.launch_overhead_cycles, FT.dma.setup_cycles
LATENCY = max(DDR.latency_cycles, AM.latency_cycles)


def _column(src: int, sync: str | None = None) -> Transfer:
    """64 runs of 64 B, 16 KiB apart in DDR (a row each), packed into AM."""
    return Transfer(src, AM.base, (64, 16), 4, (16384, 4), (64, 4), sync)


def _plan(loads_by_core: dict[int, tuple[Transfer, ...]]) -> Plan:
    tiles = {core: (Tile(0, loads, None, ()),) for core, loads in loads_by_core.items()}
    return Plan(tuple(sorted(tiles)), (Phase("p", tiles, barrier_after=False),), "fp32")


def _run(loads_by_core: dict[int, tuple[Transfer, ...]]):
    return simulate(_plan(loads_by_core), FT, AddressSpace(FT), numerics=False)


def _events(run, core: int):
    return [e for e in run.events if e.kind == "dma_in" and e.core == core]


def test_the_merged_stream_opens_the_rows_its_members_share():
    # Core 0's run i and core 1's run i lie in the same row: streamed in lock step (run i of both before run i + 1
    # of either) they open that row once, 64 rows in all, where each stream alone opens its 64.
    alone = row_use(ROWS, 0, (64, 16), 4, (16384, 4))
    assert alone == (64, 4)
    sides = [(0, (64, 16), 4, (16384, 4)), (64, (64, 16), 4, (16384, 4))]
    assert interleaved_row_use(ROWS, sides) == (64, 4)
    # Members in different rows of one bank take turns in it: 256 KiB apart, core 1's run i closes core 0's row
    # and the next run of core 0 opens it again: 2 x 10 activations, all in bank 0.
    camping = [(0, (10, 16), 4, (128, 4)), (262144, (10, 16), 4, (128, 4))]
    assert row_use(ROWS, 0, (10, 16), 4, (128, 4)) == (1, 1)
    assert interleaved_row_use(ROWS, camping) == (20, 20)


def test_the_interleaved_count_matches_an_element_walk():
    rows = DramRows(row_bytes=256, banks=4, activations_per_window=4, window_cycles=21, bank_busy_cycles=47)
    rng = np.random.default_rng(3)
    for _ in range(100):
        sides = []
        for _ in range(int(rng.integers(1, 4))):
            n, run = int(rng.integers(1, 12)), int(rng.choice([4, 16, 40]))
            sides.append((int(rng.integers(0, 3000)), (n, run // 4), 4, (int(rng.integers(run, 900)), 4)))
        open_row: dict[int, int] = {}
        per_bank: dict[int, int] = {}
        for i in range(max(s[1][0] for s in sides)):
            for offset, (n, per), _, (pitch, _) in sides:
                if i < n:
                    for r in range((offset + i * pitch) // 256, (offset + i * pitch + 4 * per - 1) // 256 + 1):
                        if open_row.get(r % 4) != r:
                            open_row[r % 4] = r
                            per_bank[r % 4] = per_bank.get(r % 4, 0) + 1
        assert interleaved_row_use(rows, sides) == (sum(per_bank.values()), max(per_bank.values())), sides


def test_synchronising_two_cores_short_runs_recovers_the_long_run_time():
    """Two cores read their runs of the same rows: unsynchronised, each stream opens its 64 rows, 128 at 8 per 38
    cycles: 608 cycles.  Synchronised, the merged stream opens 64 rows (304 cycles) and the 8,192 bytes take
    8192 / 20 = 409.6 -> 410 cycles of DDR: the time one long run each takes."""
    apart = _run({0: (_column(DDR.base),), 1: (_column(DDR.base + 64),)})
    together = _run({0: (_column(DDR.base, "b"),), 1: (_column(DDR.base + 64, "b"),)})
    for core in (0, 1):
        (a,) = _events(apart, core)
        (t,) = _events(together, core)
        assert (a.start, a.end) == (LAUNCH, LAUNCH + SETUP + 608 + LATENCY)
        assert (t.start, t.wait_start, t.end) == (LAUNCH, LAUNCH + SETUP, LAUNCH + SETUP + 410 + LATENCY)
    # The group's 64 activations are recorded once, on the first member's event.
    assert [e.row_activations for e in _events(together, 0) + _events(together, 1)] == [64, 0]
    assert sum(e.row_activations for e in apart.events) == 128
    assert together.cycles == LAUNCH + SETUP + 410 + LATENCY


def test_a_broadcast_reads_its_shared_source_once():
    """Two cores load the same 4,096 bytes of DDR into their own AM: unsynchronised, DDR carries both reads
    (8192 / 20 -> 410 cycles); synchronised, it reads them once (4096 / 20 = 204.8 -> 205) and each core's engine
    carries its copy."""
    block = Transfer.contiguous(DDR.base, AM.base, 4096)
    apart = _run({0: (block,), 1: (block,)})
    shared = dataclasses.replace(block, sync="a")
    together = _run({0: (shared,), 1: (shared,)})
    assert apart.cycles == LAUNCH + SETUP + 410 + LATENCY
    assert together.cycles == LAUNCH + SETUP + 205 + LATENCY
    rf = roofline(_plan({0: (shared,), 1: (shared,)}), FT)
    assert rf.region_bytes["ddr"] == 4096 and rf.region_bytes["am"] == 8192
    assert run_lower_bound_cycles(rf, FT) <= together.cycles


def test_the_group_streams_once_its_last_member_is_programmed():
    """Core 1's member waits for an engine behind two plain loads (8,192 bytes over DDR: 410 cycles, landing the
    latency later); core 0's member, programmed at once, waits for it.  The group then streams from core 1's
    setup end: a 4,096-byte broadcast, 205 cycles."""
    plain = (Transfer.contiguous(DDR.base + 65536, AM.base + 8192, 4096),
             Transfer.contiguous(DDR.base + 131072, AM.base + 16384, 4096))
    member = Transfer(DDR.base, AM.base, (4096,), 1, (1,), (1,), "late")
    run = _run({0: (member,), 1: (*plain, member)})
    free = LAUNCH + SETUP + 410 + LATENCY  # core 1's engines land their plain loads
    (m0,) = _events(run, 0)
    m1 = [e for e in _events(run, 1) if e.src == DDR.base][0]
    assert (m0.start, m1.start) == (LAUNCH, free)
    assert m0.wait_start == m1.wait_start == free + SETUP
    assert m0.end == m1.end == free + SETUP + 205 + LATENCY


def test_members_waiting_for_each_other_in_crossed_order_stall_with_the_groups_named():
    # Core 0 takes group A then B, core 1 B then A, each group on one engine: with one engine per core, each
    # core's first member holds its engine while waiting for a member the other core cannot start.
    one_engine = dataclasses.replace(FT, dma=dataclasses.replace(FT.dma, engines_per_core=1))
    a0, b0 = _column(DDR.base, "A"), _column(DDR.base + 8192, "B")
    a1, b1 = _column(DDR.base + 64, "A"), _column(DDR.base + 8256, "B")
    plan = _plan({0: (a0, b0), 1: (b1, a1)})
    with pytest.raises(SimError, match=r"cores \[0, 1\] never finished .*synchronised transfer 'A' waits for "
                                       r"cores \[1\] \(cores \[0\] are ready\)"):
        simulate(plan, one_engine, AddressSpace(one_engine), numerics=False)


def test_numerics_move_every_members_bytes():
    memory = AddressSpace(FT)
    data = np.arange(2048, dtype=np.float32)
    memory.write(DDR.base, data)
    shared = Transfer(DDR.base, AM.base, (2048,), 4, (4,), (4,), "n")
    simulate(_plan({0: (shared,), 1: (shared,)}), FT, memory, numerics=True)
    for core in (0, 1):
        np.testing.assert_array_equal(memory.read(AM.base, 2048, np.float32, core=core), data)


# --- the plan check (through the facade: refused before anything runs, memory as it was) -------------------------


def _refused(breaker):
    from test_plan_check import _machine
    from tiny_kernels import Twice

    with sim.registered_kernel(Twice("synced", breaker)):
        m, args, _ = _machine("s")
        before = m.memory.snapshot()
        with pytest.raises(sim.PlanError) as info:
            m.call("fp_synced_s", **args)
        assert m.memory.snapshot() == before
    return info.value


@pytest.mark.parametrize("key", [["x"], "", 3])
def test_a_sync_key_is_a_non_empty_string(key):
    def breaker(p, c, x):
        from test_plan_check import tile1
        return tile1(p, loads=tuple(dataclasses.replace(t, sync=key) for t in p.phases[0].tiles[p.cores[0]][1].loads))
    err = _refused(breaker)
    assert err.rule == "plan-structure" and "Transfer.sync must be None or a non-empty str" in str(err)


def test_a_group_lies_in_one_phase():
    def breaker(p, c, x):
        phase = p.phases[0]
        core = p.cores[0]
        t0, t1 = phase.tiles[core]
        synced = [dataclasses.replace(t, loads=tuple(dataclasses.replace(ld, sync="g") for ld in t.loads))
                  for t in (t0, t1)]
        first = dataclasses.replace(phase, tiles={core: (synced[0],)})
        second = dataclasses.replace(phase, name="again", tiles={core: (dataclasses.replace(synced[1], tile_id=0),)})
        return dataclasses.replace(p, phases=(first, second))
    err = _refused(breaker)
    assert err.rule == "sync-transfers" and err.phase == "again"
    assert "joins synchronised transfer 'g', whose members so far are in phase 'twice'" in str(err)


def test_a_group_streams_at_one_priority():
    def breaker(p, c, x):
        phase = p.phases[0]
        t0 = phase.tiles[0][0]
        tiles = {core: (dataclasses.replace(t0, loads=tuple(dataclasses.replace(ld, sync="g", priority=core)
                                                             for ld in t0.loads)),) for core in (0, 1)}
        return dataclasses.replace(p, cores=(0, 1), phases=(dataclasses.replace(phase, tiles=tiles),))
    err = _refused(breaker)
    assert err.rule == "sync-transfers" and "load 0 joins synchronised transfer 'g' with priority 1, its first " \
                                               "member's is 0: a synchronised transfer streams as one" in str(err)


def test_a_group_of_a_higher_priority_overtakes_its_cores_earlier_groups():
    """Three FT78NE cores meet six groups in one issue order (A, F, D, E, B, C), two engines each.  Core 0 first
    loads two 16 KiB blocks alone, then A, F, B, C; core 1 A, F, D, E; core 2 D, E, B, C.  With one priority the
    groups go in turn and the run ends.  With B and C at priority 1, core 0's freed engines go to B and C, which wait
    for core 2, whose engines wait in D and E for core 1, whose wait in A and F for core 0: the run stalls, naming
    every group that waits (docs/timing-model.md, "Priorities")."""
    def ld(i: int, core: int, n: int = 4096, sync: str | None = None, priority: int = 0) -> Transfer:
        return Transfer(DDR.base + (core * 64 + i) * 0x10000, AM.base + i * 0x4000, (n,), 1, (1,), (1,), sync,
                        priority)

    def plan(hi: int) -> Plan:
        tiles = {0: [ld(0, 0, 16384), ld(1, 0, 16384), ld(2, 0, sync="A"), ld(3, 0, sync="F"),
                     ld(4, 0, sync="B", priority=hi), ld(5, 0, sync="C", priority=hi)],
                 1: [ld(0, 1, sync="A"), ld(1, 1, sync="F"), ld(2, 1, sync="D"), ld(3, 1, sync="E")],
                 2: [ld(0, 2, sync="D"), ld(1, 2, sync="E"), ld(2, 2, sync="B", priority=hi),
                     ld(3, 2, sync="C", priority=hi)]}
        return Plan((0, 1, 2), (Phase("p", {c: (Tile(0, tuple(ls), None, ()),) for c, ls in tiles.items()},
                                          barrier_after=False),), "fp32")
    assert simulate(plan(0), FT, AddressSpace(FT), numerics=False).cycles > 0
    with pytest.raises(SimError, match=r"simulation stalled: .*synchronised transfer 'A' waits for cores \[0\].*"
                                       r"'D' waits for cores \[1\].*'B' waits for cores \[2\]"):
        simulate(plan(1), FT, AddressSpace(FT), numerics=False)


def test_a_stalled_group_through_the_facade_names_the_groups_and_leaves_memory_as_it_was():
    """Two cores take groups A and B in opposite orders, each group in a tile of the one slot (a tile waits for the
    one before it to finish): each core's first member waits for the other core's second.  (Core 1's tiles store
    nothing: storing the bytes core 0's do would be a race the plan check refuses.)"""
    from test_plan_check import _machine
    from tiny_kernels import Twice

    def breaker(p, c, x):
        phase = p.phases[0]
        t0, t1 = phase.tiles[0]

        def synced(t, key, stores=True):
            return dataclasses.replace(t, slot=0, loads=tuple(dataclasses.replace(ld, sync=key) for ld in t.loads),
                                       stores=t.stores if stores else ())
        tiles = {0: (synced(t0, "A"), synced(t1, "B")), 1: (synced(t0, "B", False), synced(t1, "A", False))}
        return dataclasses.replace(p, cores=(0, 1), phases=(dataclasses.replace(phase, tiles=tiles),))

    with sim.registered_kernel(Twice("stall", breaker)):
        m, args, _ = _machine("s")
        before = m.memory.snapshot()
        with pytest.raises(SimError, match=r"simulation stalled: cores \[0, 1\] never finished .*synchronised "
                                           r"transfer 'A' waits for cores \[1\] \(cores \[0\] are ready\); "
                                           r"synchronised transfer 'B' waits for cores \[0\]"):
            m.call("fp_stall_s", **args)
        assert m.memory.snapshot() == before


def _merged_bytes(blocks):
    """The byte addresses of blocks streamed in lock step: run i of every block, in order, before run i + 1."""
    runs = []
    for offset, (n, per), item, (pitch, _) in blocks:
        runs.append([[offset + i * pitch + b for b in range(per * item)] for i in range(n)])
    out = []
    for i in range(max((len(r) for r in runs), default=0)):
        for r in runs:
            if i < len(r):
                out += r[i]
    return out


def test_members_copying_within_ddr_are_walked_batch_by_batch():
    """Members that read and write one DRAM whose bus turns: their merged reads and merged writes served as one
    copy's are (the reads of each write batch's bytes, then its writes), against a byte walk by hand; rows of 64
    bytes over 4 banks and a batch of 96 bytes, so that runs cross rows and batches."""
    from sim.model.dram import interleaved_copy_row_use
    rows = dataclasses.replace(ROWS, row_bytes=64, banks=4, write_batch_bytes=96)
    assert rows.turns_around
    rng = np.random.default_rng(11)
    for _ in range(200):
        reads, writes = [], []
        for _ in range(int(rng.integers(1, 4))):
            n, per = int(rng.integers(1, 6)), int(rng.choice([1, 4, 10]))
            reads.append((int(rng.integers(0, 700)), (n, per), 4, (int(rng.integers(4 * per, 300)), 4)))
            writes.append((int(rng.integers(0, 700)), (n, per), 4, (int(rng.integers(4 * per, 300)), 4)))
        if rng.random() < 0.3:  # a member whose read is another's (a broadcast source read once)
            reads.pop()
        r, w = _merged_bytes(reads), _merged_bytes(writes)
        open_row: dict[int, int] = {}
        per_bank: dict[int, int] = {}
        for k in range(0, max(len(r), len(w)), 96):
            for address in r[k:k + 96] + w[k:k + 96]:
                row = address // 64
                if open_row.get(row % 4) != row:
                    open_row[row % 4] = row
                    per_bank[row % 4] = per_bank.get(row % 4, 0) + 1
        got = interleaved_copy_row_use(rows, reads, writes)
        assert (got.activations, got.busiest_bank) == (sum(per_bank.values()), max(per_bank.values())), \
            (reads, writes)


def test_a_synchronised_copy_within_ddr_opens_the_rows_of_its_batches():
    """Two cores copy 64 bytes each within DDR, in sync: from row 0 (bytes 0 and 64) to row 32 (bank 0 again).
    Served batch by batch (both copies' 128 bytes in one 2 KiB batch), the reads open row 0 once and the writes row
    32 once: 2 activations in bank 0, so the stream lasts at least tRC (84 cycles).  Walked run by run, read and
    write would reopen each other at every run: 4 activations, 3 x 84 = 252 cycles."""
    base = DDR.base
    members = {core: (Transfer.contiguous(base + 64 * core, base + 32 * 8192 + 64 * core, 64),) for core in (0, 1)}
    members = {core: (dataclasses.replace(t, sync="c"),) for core, (t,) in members.items()}
    run = _run(members)
    events = _events(run, 0) + _events(run, 1)
    assert [e.row_activations for e in events] == [2, 0]
    for e in events:
        assert e.end - e.wait_start == 84 + LATENCY
    assert run.cycles >= run_lower_bound_cycles(roofline(_plan(members), FT), FT)


def test_a_tiling_whose_run_stalls_is_a_deadlock_error_and_the_search_drops_it():
    """A kernel whose tiling space orders two cores' synchronised groups either way: ``crossed`` (as above: each
    core's first member waits for the other core's second) stalls as it runs, a PlanError of rule 'deadlock'
    (sim.DeadlockError) when forced, memory as it was; the search prices both, drops the crossed one naming the
    rule, and runs the other (a stalled candidate used to end the call with the stall)."""
    from test_plan_check import _machine
    from tiny_kernels import Twice

    from kernels.common.tiling_space import complete
    from sim.model.tiling import ChoiceKey, TilingSpace

    class Ordered(Twice):
        def tiling_space(self, call, ctx):
            return TilingSpace(ChoiceKey("order", ("crossed", "same"), "the cores' order of the groups"))

        def plan(self, call, ctx):
            crossed = complete(self.tiling_space(call, ctx), ctx)["order"] == "crossed"
            p = super().plan(call, ctx)
            phase = p.phases[0]
            t0, t1 = phase.tiles[call.cores[0]]

            def synced(t, key, stores=True):
                return dataclasses.replace(t, slot=0, loads=tuple(dataclasses.replace(ld, sync=key) for ld in t.loads),
                                           stores=t.stores if stores else ())
            second = (synced(t0, "B", False), synced(t1, "A", False)) if crossed else (
                synced(t0, "A", False), synced(t1, "B", False))
            tiles = {0: (synced(t0, "A"), synced(t1, "B")), 1: second}
            return dataclasses.replace(p, cores=(0, 1), phases=(dataclasses.replace(phase, tiles=tiles),))

    with sim.registered_kernel(Ordered("ordered")):
        m, args, _ = _machine("s")
        before = m.memory.snapshot()
        with pytest.raises(sim.DeadlockError, match=r"breaks the plan rule 'deadlock': simulation stalled: cores "
                                                    r"\[0, 1\] never finished") as e:
            m.call("fp_ordered_s", tiling={"order": "crossed"}, **args)
        assert e.value.rule == "deadlock" and isinstance(e.value, sim.PlanError)
        assert m.memory.snapshot() == before
        run = m.call("fp_ordered_s", **args)
        assert run.tiling.tiling == {"order": "same"}
        assert any(t == {"order": "crossed"} and "deadlock" in why for t, why in run.tiling.dropped)
        np.testing.assert_array_equal(m.read(args["y"], (args["n"],), np.float32),
                                      2 * np.arange(args["n"], dtype=np.float32))
