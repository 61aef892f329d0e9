"""A repeated call replays its plan's recorded effects through views prepared once per memory
(sim/engine/replay.py): the bytes it leaves are those a simulation with numerics leaves, call after call, on the
inputs in memory at each call; an effect whose operand has no kept view takes the engine's own way."""

from __future__ import annotations

import numpy as np
import pytest
from one_plan import AM, N, OnePlan, X, Y, copy_compute, plan_of

import sim
from kernels.examples import example
from sim.engine import forwarding
from sim.engine.engine import Engine
from sim.model import memory as memory_module
from sim.model.plan import Tile, Transfer

CASES = [("batch_norm_grad", "medium", "FT78NE", "fp"), ("fused_batch_norm_grad", "medium", "MT7004", "hp"),
         ("fake_quant_with_min_max_vars_gradient", "medium", "MT7004", "hp"),
         ("conv2d_backprop_filter", "medium", "FT78NE", "fp"),
         ("depthwise_conv2d_backprop_input", "medium", "MT7004", "hp"), ("gemm", "medium", "FT78NE", "fp")]


def _placed(ex, inputs=None) -> sim.Simulator:
    m = sim.Simulator(ex.chip, tuning_cache=False)
    ex.place(m.write, inputs) if inputs is not None else ex.place(m.write)
    return m


def _new_inputs(ex, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    return {d.name: (rng.uniform(-2, 2, d.shape).astype(d.dtype) if d.random is not None else d.array())
            for d in ex.data}


@pytest.mark.parametrize("kernel,size,chip,prefix", CASES)
def test_each_replay_leaves_what_a_simulation_of_the_same_bytes_leaves(kernel, size, chip, prefix):
    """Three calls on one simulator (the first simulates, the next two replay through the kept program, on new
    inputs each time) against a fresh simulator per call that simulates with numerics: the same memory, byte for
    byte."""
    ex = example(kernel, size, chip, prefix)
    m = _placed(ex)
    tiling = m.call(ex.symbol, **ex.args).tiling.tiling
    for seed in (1, 2):
        inputs = _new_inputs(ex, seed)
        ex.place(m.write, inputs)
        m.call(ex.symbol, **ex.args)
        fresh = _placed(ex, inputs)
        fresh.call(ex.symbol, tiling=tiling, **ex.args)
        assert m.memory.snapshot() == fresh.memory.snapshot(), seed


def test_an_operand_without_a_kept_view_takes_the_engines_way(monkeypatch):
    """When the memory keeps no view of an operand's bytes (they lie over pages of several runs), its compute
    is replayed as the engine runs it, reading and writing through the pages: the same bytes."""
    ex = example("fake_quant_with_min_max_vars_gradient", "medium", "FT78NE", "fp")
    m = _placed(ex)
    run = m.call(ex.symbol, numerics=False, **ex.args)
    tiling = run.tiling.tiling
    # No view of the first data tile's first input (a slot later tiles reuse, alternating with another).
    first = next(t for ph in run.plan.phases for ts in ph.tiles.values() for t in ts
                 if t.compute is not None and t.compute.inputs and t.loads)
    lost = first.compute.inputs[0].addr
    kept = memory_module.AddressSpace.kept_dense_views
    monkeypatch.setattr(memory_module.AddressSpace, "kept_dense_views",
                        lambda self, *a: (None, None) if a[1] == lost else kept(self, *a))
    engine_way = []
    own = Engine.compute_numerics
    monkeypatch.setattr(Engine, "compute_numerics", lambda self, *a: (engine_way.append(a), own(self, *a))[1])
    m.call(ex.symbol, **ex.args)
    monkeypatch.undo()
    computes = sum(1 for ph in run.plan.phases for ts in ph.tiles.values() for t in ts if t.compute is not None)
    assert 0 < len(engine_way) < computes  # (both ways taken)
    fresh = _placed(ex)
    fresh.call(ex.symbol, tiling=tiling, **ex.args)
    assert m.memory.snapshot() == fresh.memory.snapshot()


def test_a_result_of_another_dtype_is_converted_as_the_engine_converts_it(monkeypatch):
    """A tile function returning float64 for a float32 operand: the replay's quick path does not take it, the
    check does, and the value is stored as the simulated call stores it."""
    ex = example("fake_quant_with_min_max_vars_gradient", "medium", "FT78NE", "fp")
    wide = _placed(ex)
    run = wide.call(ex.symbol, numerics=False, **ex.args)
    tiling = run.tiling.tiling
    for phase in run.plan.phases:
        for tiles in phase.tiles.values():
            for tile in tiles:
                c = tile.compute
                if c is not None and c.outputs:
                    fn = c.fn
                    object.__setattr__(c, "fn", lambda *a, fn=fn: [np.asarray(r, np.float64) for r in fn(*a)])
    wide.call(ex.symbol, **ex.args)
    plain = _placed(ex)
    plain.call(ex.symbol, tiling=tiling, **ex.args)
    assert wide.memory.snapshot() == plain.memory.snapshot()


def test_a_result_of_another_kind_is_refused_in_a_replay_and_memory_is_left_as_it_was():
    """A replayed tile function returning complex values for a float32 operand: the replay refuses it as a
    simulated call does (ComputeOutputError naming the output), and the call leaves memory as it found it."""
    ex = example("fake_quant_with_min_max_vars_gradient", "medium", "FT78NE", "fp")
    m = _placed(ex)
    run = m.call(ex.symbol, numerics=False, **ex.args)
    tile = next(t for ph in run.plan.phases for ts in ph.tiles.values() for t in ts
                if t.compute is not None and t.compute.outputs and t.loads)
    fn = tile.compute.fn
    object.__setattr__(tile.compute, "fn", lambda *a: [np.asarray(r, np.complex64) for r in fn(*a)])
    before = m.memory.snapshot()
    with pytest.raises(sim.ComputeOutputError, match="output 0 has dtype complex64"):
        m.call(ex.symbol, **ex.args)
    assert m.memory.snapshot() == before


# -- copies left out of a replay (sim/engine/forwarding.py), on programs written out by hand -----------------------
# Store -1 is shared memory (DDR), 0 a core's own; a load copies S = [0, 64) of DDR into D = [0, 64) of core 0.
LOAD = (([(-1, 0, 64)], [(0, 0, 64, True)]), (-1, 0, 64, 0, 0), False)
RELOAD = (([(-1, 64, 128)], [(0, 0, 64, True)]), (-1, 64, 128, 0, 0), False)  # the next block of S into D


def _compute(reads, writes):
    return (reads, [(*w, True) for w in writes]), None, True


def _forwarded(*steps):
    return forwarding.forwarded([s[0] for s in steps], [s[1] for s in steps], [s[2] for s in steps])


def test_a_load_only_computes_read_before_it_is_overwritten_is_left_out_and_they_read_its_source():
    """Load, a compute reading its second half, reload (never overwritten: kept), a compute reading all of it:
    the first load is left out and its reader reads S's second half instead."""
    left_out, instead = _forwarded(LOAD, _compute([(0, 32, 64)], [(0, 256, 288)]), RELOAD,
                                   _compute([(0, 0, 64)], [(0, 512, 576)]))
    assert left_out == {0}
    assert instead == {(1, 0): (-1, 32)}


def test_a_load_another_copy_reads_is_kept():
    """The load's bytes stored back by a copy (not a compute): kept, though the reload overwrites them."""
    store = (([(0, 0, 64)], [(-1, 4096, 4160, True)]), (0, 0, 64, -1, 4096), False)
    assert _forwarded(LOAD, store, RELOAD) == (set(), {})


def test_a_load_whose_source_changes_while_its_bytes_are_read_is_kept():
    """A compute writes into S between the load and the load's reader: the reader must see the bytes loaded."""
    assert _forwarded(LOAD, _compute([], [(-1, 0, 16)]), _compute([(0, 0, 64)], [(0, 256, 320)]), RELOAD) \
        == (set(), {})


def test_a_load_read_across_bytes_overwritten_since_is_kept():
    """Half of D overwritten by a compute, then D read whole: its reader reads bytes of two writers."""
    assert _forwarded(LOAD, _compute([], [(0, 0, 32)]), _compute([(0, 0, 64)], [(0, 256, 320)]), RELOAD) \
        == (set(), {})


def test_a_load_never_overwritten_is_kept_and_a_step_of_unknown_accesses_keeps_every_copy():
    """D still holds the load's bytes at the end (the caller sees them): kept; and a step the engine takes its own
    way (accesses not known) keeps every copy of the program."""
    assert _forwarded(LOAD, _compute([(0, 0, 64)], [(0, 256, 320)])) == (set(), {})
    assert _forwarded(LOAD, _compute([(0, 0, 64)], [(0, 256, 320)]), RELOAD, (None, None, False)) == (set(), {})


def test_a_load_a_strided_write_then_covers_is_kept():
    """A strided copy's span over D (its runs leave gaps holding the load's bytes) does not overwrite D: a later
    read of a gap reads the load's bytes, and the load is kept even when a dense write ends D after it."""
    strided = (([(-1, 256, 320)], [(0, 0, 64, False)]), None, False)
    assert _forwarded(LOAD, strided, _compute([(0, 16, 32)], [(0, 256, 272)]), RELOAD) == (set(), {})
    assert _forwarded(LOAD, strided, RELOAD) == (set(), {})


def test_a_replay_reads_the_gaps_a_strided_load_leaves_as_a_simulation_does():
    """A user kernel: tile 0 loads x into AM (and copies it to y), tile 1 reloads x into AM by a strided load whose
    runs leave every other 16 bytes as tile 0 left them (and its last 16 bytes), tile 2 copies AM to y.  Call after
    call, with new x each time, y and AM hold this call's x: the gaps keep tile 0's load, which a replay must not
    leave out."""
    def plan(call, ctx):
        strided = Transfer(X, AM, (N // 8, 4), 4, (32, 4), (32, 4))  # 16 bytes of every 32, to byte 1008
        tail = Transfer.contiguous(X + 1008, AM + 1008, 16)  # (its span and the tail: all of tile 0's load)
        tiles = (Tile(0, (Transfer.contiguous(X, AM, N * 4),), copy_compute(ctx, AM, AM + 0x10000),
                      (Transfer.contiguous(AM + 0x10000, Y, N * 4),)),
                 Tile(1, (strided, tail), copy_compute(ctx, AM, AM + 0x20000), ()),
                 Tile(2, (), copy_compute(ctx, AM, AM + 0x30000), (Transfer.contiguous(AM + 0x30000, Y, N * 4),)))
        return plan_of({0: tiles})
    m = sim.Simulator("FT78NE")
    with sim.registered_kernel(OnePlan("strided_gaps", plan)):
        for seed in range(3):  # the first simulates, the next two replay
            x = np.random.default_rng(seed).standard_normal(N).astype(np.float32)
            m.write(X, x)
            m.call("fp_strided_gaps_s", x=X, y=Y)
            assert np.array_equal(m.read(Y, (N,), np.float32), x), seed
            assert np.array_equal(m.read(AM, (N,), np.float32, core=0), x), seed


def test_a_stand_in_view_runs_the_same_loops_only_when_contiguous_alike_and_aligned_alike():
    """same_loops: dtype, shape, C order and the address modulo 64 must all match."""
    buf = np.zeros(1024, np.uint8)
    at = 64 - buf.ctypes.data % 64
    a = buf[at:at + 256].view(np.float32)
    assert forwarding.same_loops(a, buf[at + 512:at + 768].view(np.float32))
    assert not forwarding.same_loops(a, buf[at + 516:at + 772].view(np.float32))  # 4 bytes off
    assert not forwarding.same_loops(a, buf[at + 512:at + 768].view(np.int32))
    assert not forwarding.same_loops(a.reshape(8, 8), buf[at + 512:at + 768].view(np.float32).reshape(8, 8).T)


def _forwarded_by_definition(accesses, copies, computes):
    """forwarding.forwarded's rule written out copy by copy: follow each copy forward until its bytes are all
    overwritten (left out, its readers read its source) or something else reads them, or its source is written
    (kept); a copy still there at the end is kept."""
    left_out, instead = set(), {}
    for i, copy in enumerate(copies):
        if copy is None or copy[0] == copy[3]:
            continue
        src_key, src_lo, src_hi, dst_key, dst_lo = copy
        f = forwarding._Followed(i, src_key, src_lo, src_hi, dst_lo, dst_lo + src_hi - src_lo)
        for j in range(i + 1, len(accesses)):
            reads, writes = accesses[j]
            if any(key == dst_key and f.meets(lo, hi) and not (computes[j] and f.holds(lo, hi))
                   for key, lo, hi in reads):
                break
            f.reads += [(j, n, lo) for n, (key, lo, hi) in enumerate(reads) if key == dst_key and f.meets(lo, hi)]
            for key, lo, hi, whole in writes:
                source_changes = key == src_key and lo < src_hi and src_lo < hi
                if source_changes or (key == dst_key and not whole and f.meets(lo, hi)):
                    f.left = [(0, 1)]  # (kept: its source changes, or a strided write leaves some of its bytes)
                    break
                if key == dst_key:
                    f.overwrite(lo, hi)
                    if not f.left:
                        break
            if not f.left or f.left == [(0, 1)]:
                break
        if not f.left:
            left_out.add(i)
            instead.update({(step, n): (src_key, src_lo + addr - dst_lo) for step, n, addr in f.reads})
    return left_out, instead


@pytest.mark.parametrize("seed", range(4))
def test_the_copies_left_out_are_those_the_rule_gives_copy_by_copy(seed):
    """Random programs of loads (DDR -> AM), stores (AM -> DDR) and computes (AM -> AM, some writing DDR) over a few
    overlapping blocks: the indexed walk leaves out exactly the copies the rule written out copy by copy does."""
    rng = np.random.default_rng(seed)
    accesses, copies, computes = [], [], []
    for _ in range(300):
        kind = rng.integers(0, 3)
        lo = int(rng.integers(0, 16)) * 32
        n = int(rng.integers(1, 4)) * 32
        other = int(rng.integers(0, 16)) * 32
        if kind < 2:  # a load, or a store
            src, dst = ((-1, other), (0, lo)) if kind == 0 else ((0, lo), (-1, other))
            accesses.append(([(src[0], src[1], src[1] + n)], [(dst[0], dst[1], dst[1] + n, True)]))
            copies.append((src[0], src[1], src[1] + n, dst[0], dst[1]))
            computes.append(False)
        else:
            reads = [(0, lo, lo + n), (0, other, other + 32)]
            out = (-1, other, other + 32) if rng.random() < 0.2 else (0, int(rng.integers(0, 16)) * 32,
                                                                       int(rng.integers(0, 16)) * 32 + 32)
            accesses.append((reads, [(*out, rng.random() < 0.8)]))
            copies.append(None)
            computes.append(True)
    got = forwarding.forwarded(accesses, copies, computes)
    assert got == _forwarded_by_definition(accesses, copies, computes)
    assert got[0]  # (some copies are left out: the test sees the rule work)
