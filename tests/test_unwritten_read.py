"""The plan rule ``unwritten-read`` (sim/model/written_bytes.py): a plan reads only the call's inputs and bytes the
call wrote before, so that no result depends on what an earlier call left in a staging level or an output.

Each plan is a user kernel of one input x and one output y (n floats) on FT78NE; the memory it would read holds
other values first (as an earlier call would leave it), so that a refusal is the only way not to read them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from one_plan import AM, F32, SM, WINDOW, N, OnePlan, X, Y, copy_compute, plan_of

import sim
from sim.model.plan import Phase, Plan, Tile, Transfer
from sim.model.written_bytes import ByteSet


def _load(src: int, dst: int) -> Transfer:
    return Transfer.contiguous(src, dst, N * 4)


def _run(name: str, make: Callable[[Any, Any], Plan], core_mask: int = 0x1) -> sim.Simulator | sim.PlanError:
    m = sim.Simulator("FT78NE")
    m.write(X, np.arange(N, dtype=F32) + 1)
    for core in range(8):  # what an earlier call left in the staging levels
        m.write(AM + 0x40000, np.full(N, 7.0, F32), core=core)
        m.write(SM, np.full(N, 8.0, F32), core=core)
    m.write(WINDOW, np.full(N, 9.0, F32))
    m.write(Y, np.full(N, 5.0, F32))
    before = m.memory.snapshot()
    with sim.registered_kernel(OnePlan(name, make)):
        try:
            m.call(f"fp_{name}_s", x=X, y=Y, core_mask=core_mask)
        except sim.PlanError as e:
            assert m.memory.snapshot() == before
            return e
    return m


def _refused(got: object, words: str) -> None:
    assert isinstance(got, sim.PlanError) and got.rule == "unwritten-read", got
    assert words in str(got), str(got)
    assert "nothing in this call wrote before it" in str(got)


def test_stale_staging_bytes_moved_by_a_transfer_are_refused():
    """An AM-to-AM copy of bytes nothing wrote, a store of them straight to y, a load from the GSM window nothing
    wrote: each would carry an earlier call's bytes into the result."""
    def am_to_am(call, ctx):
        return plan_of({0: (Tile(0, (_load(AM + 0x40000, AM),), copy_compute(ctx, AM, AM + 0x10000),
                               (_load(AM + 0x10000, Y),)),)})
    _refused(_run("am_to_am", am_to_am), "load 0 reads [0x20040000, 0x20040400)")

    def store_stale(call, ctx):
        return plan_of({0: (Tile(0, (), None, (_load(AM + 0x40000, Y),)),)})
    _refused(_run("store_stale", store_stale), "store 0 reads [0x20040000, 0x20040400)")

    def window(call, ctx):
        return plan_of({0: (Tile(0, (_load(WINDOW, AM),), copy_compute(ctx, AM, AM + 0x10000),
                               (_load(AM + 0x10000, Y),)),)})
    _refused(_run("window", window), "load 0 reads [0x40580000, 0x40580400)")


def test_an_output_read_before_its_core_writes_it_is_refused():
    """Loading y before the same core stores it (later in the walk) reads what the caller left in y."""
    def read_first(call, ctx):
        return plan_of({0: (Tile(0, (_load(Y, AM),), copy_compute(ctx, AM, AM + 0x10000),
                               (_load(AM + 0x10000, Y),)),)})
    _refused(_run("read_first", read_first), "load 0 reads [0xa0100000, 0xa0100400)")


def test_a_partial_result_no_core_published_is_refused():
    """Two cores publish their partial results to the GSM window, a barrier, then core 0 reads three slots: the
    third, which no core wrote in the call, is named (the published slots pass)."""
    def gather(call, ctx):
        publish = {c: (Tile(0, (_load(X, AM),), None, (Transfer.contiguous(AM, WINDOW + c * N * 4, N * 4),)),)
                   for c in (0, 1)}
        reduce = {0: (Tile(0, (Transfer.contiguous(WINDOW, AM + 0x10000, 3 * N * 4),), None, ()),)}
        return plan_of(publish, reduce)
    _refused(_run("gather", gather, core_mask=0x3), "bytes [0x40580800, 0x40580c00)")


def test_bytes_the_call_wrote_are_read_whoever_wrote_them_in_the_phase():
    """A store into SM read back after a barrier; one core's publish read by another in the same phase (the race
    rules order cores, not this one); an output written, then read back and updated: all legal, all right."""
    def through_sm(call, ctx):
        first = {0: (Tile(0, (_load(X, AM),), None, (Transfer.contiguous(AM, SM, N * 4),)),)}
        second = {0: (Tile(0, (), copy_compute(ctx, SM, AM + 0x10000), (_load(AM + 0x10000, Y),)),)}
        return plan_of(first, second)
    m = _run("through_sm", through_sm)
    assert isinstance(m, sim.Simulator), m
    assert np.array_equal(m.read(Y, (N,), F32), np.arange(N, dtype=F32) + 1)

    def back_and_forth(call, ctx):
        first = {0: (Tile(0, (_load(X, AM),), None, (_load(AM, Y),)),)}
        second = {0: (Tile(0, (_load(Y, AM + 0x10000),), copy_compute(ctx, AM + 0x10000, AM + 0x20000),
                           (_load(AM + 0x20000, Y),)),)}
        return plan_of(first, second)
    m = _run("back_and_forth", back_and_forth)
    assert isinstance(m, sim.Simulator), m
    assert np.array_equal(m.read(Y, (N,), F32), np.arange(N, dtype=F32) + 1)


def test_a_strided_source_over_two_buffers_is_judged_by_its_runs():
    """read-outside-buffers: one descriptor reads x's first half and y's (written before) as the two rows of a
    block whose span covers the bytes between the two buffers: every run lies in a buffer, so it is legal."""
    def two_rows(call, ctx):
        first = {0: (Tile(0, (_load(X, AM),), None, (_load(AM, Y),)),)}
        gather = Transfer(X, AM + 0x10000, (2, N // 2), 4, (Y - X, 4), (N * 2, 4))
        second = {0: (Tile(0, (gather,), copy_compute(ctx, AM + 0x10000, AM + 0x20000),
                           (_load(AM + 0x20000, Y),)),)}
        return plan_of(first, second)
    m = _run("two_rows", two_rows)
    assert isinstance(m, sim.Simulator), m
    x = np.arange(N, dtype=F32) + 1
    assert np.array_equal(m.read(Y, (N,), F32), np.concatenate([x[:N // 2], x[:N // 2]]))


@pytest.mark.parametrize("seed", range(3))
def test_the_byte_set_against_a_set_of_bytes(seed):
    rng = np.random.default_rng(seed)
    bs, truth = ByteSet(), set()
    for _ in range(200):
        lo = int(rng.integers(0, 300))
        hi = lo + int(rng.integers(0, 20))
        bs.add(lo, hi)
        truth |= set(range(lo, hi))
        a = int(rng.integers(0, 300))
        b = a + int(rng.integers(1, 30))
        assert bs.covers(a, b) == (set(range(a, b)) <= truth)
        assert [byte for g in bs.gaps(a, b) for byte in range(*g)] == sorted(set(range(a, b)) - truth)
    assert all(e < s for e, s in zip(bs.ends, bs.starts[1:]))  # disjoint, never touching


def test_a_strided_destination_writes_its_runs_not_the_gaps_between_them():
    """A load that fills every other float of AM, then a compute on all of them: the floats in between hold what
    an earlier call left (the rule once counted a destination by its span and passed it).  Filling the gaps with a
    second strided load makes the same compute legal."""
    half = Transfer(X, AM, (N // 2,), 4, (8,), (8,))  # x's even floats to AM's even floats

    def gaps(call, ctx):
        return plan_of({0: (Tile(0, (half,), copy_compute(ctx, AM, AM + 0x10000), (_load(AM + 0x10000, Y),)),)})
    _refused(_run("gaps", gaps), "input operand 0 reads [0x20000000, 0x20000400), whose bytes "
                                 "[0x20000004, 0x20000008)")

    def both(call, ctx):
        odd = Transfer(X + 4, AM + 4, (N // 2,), 4, (8,), (8,))
        return plan_of({0: (Tile(0, (half, odd), copy_compute(ctx, AM, AM + 0x10000), (_load(AM + 0x10000, Y),)),)})
    m = _run("both", both)
    assert isinstance(m, sim.Simulator), m
    assert np.array_equal(m.read(Y, (N,), F32), np.arange(N, dtype=F32) + 1)


def test_a_later_generations_fill_does_not_count_for_an_earlier_generations_user():
    """blk@0 fills AM's first half, blk@1 (which waits for blk@0's release) all of it: a tile using blk@0 that
    computes on all of AM reads bytes only blk@1 writes, after it; refused.  With blk@0 filling all of it, legal."""
    def make(first_bytes: int) -> Callable[[Any, Any], Plan]:
        def plan(call, ctx):
            tiles = (Tile(0, (Transfer.contiguous(X, AM, first_bytes),), None, (), fills=("blk@0",)),
                     Tile(1, (), copy_compute(ctx, AM, AM + 0x10000), (_load(AM + 0x10000, Y),), uses=("blk@0",)),
                     Tile(2, (_load(X, AM),), None, (), fills=("blk@1",)),
                     Tile(3, (), copy_compute(ctx, AM, AM + 0x20000), (), uses=("blk@1",), slot=1))
            return Plan((0,), (Phase("p", {0: tiles}, False),), "fp32")
        return plan
    _refused(_run("half_fill", make(N * 2)), "input operand 0 reads [0x20000000, 0x20000400), whose bytes "
                                             "[0x20000200, 0x20000400)")
    m = _run("whole_fill", make(N * 4))
    assert isinstance(m, sim.Simulator), m
    assert np.array_equal(m.read(Y, (N,), F32), np.arange(N, dtype=F32) + 1)


def test_a_later_generations_fill_of_a_shared_buffer_does_not_count_for_an_earlier_generations_user():
    """The same in the GSM window (shared reads are otherwise judged against the whole phase's writes): blk@0 fills
    the window's first half, blk@1 all of it; a tile using blk@0 that loads the whole window reads bytes only
    blk@1 writes, after it.  Refused naming the later generation; with blk@0 filling the whole window, legal."""
    def make(first_bytes: int) -> Callable[[Any, Any], Plan]:
        def plan(call, ctx):
            tiles = (Tile(0, (Transfer.contiguous(X, WINDOW, first_bytes),), None, (), fills=("blk@0",)),
                     Tile(1, (_load(WINDOW, AM),), copy_compute(ctx, AM, AM + 0x10000), (_load(AM + 0x10000, Y),),
                          uses=("blk@0",)),
                     Tile(2, (_load(X, WINDOW),), None, (), fills=("blk@1",)),
                     Tile(3, (_load(WINDOW, AM + 0x20000),), None, (), uses=("blk@1",), slot=1))
            return Plan((0,), (Phase("p", {0: tiles}, False),), "fp32")
        return plan
    got = _run("gsm_half_fill", make(N * 2))
    assert isinstance(got, sim.PlanError) and got.rule == "unwritten-read", got
    assert ("load 0 reads [0x40580000, 0x40580400), whose bytes [0x40580200, 0x40580400) only a later generation "
            "of buffer 'blk' fills") in str(got), str(got)
    m = _run("gsm_whole_fill", make(N * 4))
    assert isinstance(m, sim.Simulator), m
    assert np.array_equal(m.read(Y, (N,), F32), np.arange(N, dtype=F32) + 1)


def test_a_store_reading_a_staged_buffer_is_refused_since_its_tile_released_it():
    """A tile using a@0 stores the GSM buffer's bytes straight to y; a@1 refills half of them.  The walk releases a
    tile's buffers when its compute is done, before its stores run, so a@1's fill may land while the store reads:
    refused (staging-alias), naming the store and the buffer; memory as it was."""
    def plan(call, ctx):
        tiles = (Tile(0, (_load(X, WINDOW),), None, (), fills=("a@0",)),
                 Tile(1, (), None, (_load(WINDOW, Y),), uses=("a@0",)),
                 Tile(2, (Transfer.contiguous(X, WINDOW, N * 2),), None, (), fills=("a@1",)),
                 Tile(3, (Transfer.contiguous(WINDOW, AM, N * 2),), None, (), uses=("a@1",), slot=1))
        return Plan((0,), (Phase("p", {0: tiles}, False),), "fp32")
    got = _run("store_from_buffer", plan)
    assert isinstance(got, sim.PlanError) and got.rule == "staging-alias", got
    assert "tile 1 (slot 0) stores from [0x40580000, " in str(got), str(got)
    assert "bytes of staged buffer 'a': a tile releases the buffers it uses once its compute is done" in str(got)


@pytest.mark.parametrize("seed", range(3))
def test_the_byte_set_joins_a_blocks_runs_at_once_as_one_by_one(seed):
    rng = np.random.default_rng(seed)
    at_once, one_by_one = ByteSet(), ByteSet()
    for _ in range(100):
        lo = int(rng.integers(0, 400))
        runs, at = [], lo
        for _ in range(int(rng.integers(1, 6))):
            at += int(rng.integers(1, 12))  # a gap, then a run
            runs.append((at, at + int(rng.integers(1, 9))))
            at = runs[-1][1]
        at_once.add_sorted(runs)
        for run in runs:
            one_by_one.add(*run)
        assert (at_once.starts, at_once.ends) == (one_by_one.starts, one_by_one.ends)


def test_the_byte_set_merges_many_runs_and_sets_as_it_adds_them_one_by_one():
    rng = np.random.default_rng(9)
    big, one_by_one = ByteSet(), ByteSet()
    runs = [(int(lo), int(lo) + int(n)) for lo, n in zip(np.arange(0, 40_000, 97), rng.integers(1, 90, 413))]
    big.add_sorted(runs)  # (past the numpy threshold)
    for run in runs:
        one_by_one.add(*run)
    assert (big.starts, big.ends) == (one_by_one.starts, one_by_one.ends)
    others = [ByteSet([(int(a), int(a) + 50)]) for a in rng.integers(0, 41_000, 300)]
    joined, added = ByteSet(runs), ByteSet(runs)
    joined.join(others)
    for b in others:
        for lo, hi in zip(b.starts, b.ends):
            added.add(lo, hi)
    assert (joined.starts, joined.ends) == (added.starts, added.ends)


def test_the_byte_set_joins_a_block_given_as_arrays_as_its_runs_one_by_one():
    rng = np.random.default_rng(11)
    for n in (5, 600):  # (below and past the numpy threshold)
        starts = np.cumsum(rng.integers(10, 30, n)).astype(np.int64)
        ends = starts + rng.integers(1, 9, n)
        block, one_by_one = ByteSet([(0, 40), (500, 900)]), ByteSet([(0, 40), (500, 900)])
        block.add_block(1000, starts, ends)
        for lo, hi in zip(starts.tolist(), ends.tolist()):
            one_by_one.add(1000 + lo, 1000 + hi)
        assert (block.starts, block.ends) == (one_by_one.starts, one_by_one.ends)
