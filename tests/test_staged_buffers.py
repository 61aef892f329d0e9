"""Blocking through the hierarchy: staged buffers (Tile.fills / Tile.uses), hand-derived on FT78NE.

A staging tile fills a named buffer (``name@generation``) and the core's walk does not wait for it; a tile that
uses the buffer waits until every tile filling that generation (on any core) has landed; the next generation's
loads wait until every user of the previous one has finished.  Expected cycles are derived in the comments from
FT78NE's numbers (checked first): launch 1800; DMA setup 64, 2 engines per core at 64 B/cycle; ddr shared
20 B/cycle, latency 200, 64-byte bursts; gsm shared 64 B/cycle, latency 40, 32-byte bursts; am per core
128 B/cycle, latency 4.  A transfer holds its engine from its start, streams from start + 64 and lands its
slower end's latency after its last byte left.
"""

from __future__ import annotations

import numpy as np
import pytest

import sim
from kernels.common.loops import elementwise
from sim.model.call import ArgSpec, BoundCall, Buffer
from sim.model.plan import (
    Compute,
    Loop,
    Operand,
    Phase,
    Plan,
    Tile,
    Transfer,
    buffer_ref,
    parse_buffer_ref,
)
from sim.startup import startup

F32 = np.dtype(np.float32)
X, Y = 0xA0000000, 0xA1000000  # DDR: the input x (4096 floats) and the output y (4096 floats)
N = 4096


class Given:
    """A user kernel whose plan is ``build(call, ctx)``: x in, y out, two cores (core_mask 0x3)."""

    args = (ArgSpec("x", "in_ptr", "input"), ArgSpec("y", "out_ptr", "output"))
    precisions = ("fp32",)
    variants = ("s",)

    def __init__(self, name, build):
        self.name, self.build = name, build

    def bind(self, symbol, precision, variant, cores, args, read):
        return BoundCall(symbol, precision, variant, cores, (Buffer("x", args["x"], (N,), F32, "input"),
                                                             Buffer("y", args["y"], (N,), F32, "output")), {})

    def plan(self, call, ctx):
        phases = self.build(ctx)
        return Plan(call.cores, (Phase("p", phases, barrier_after=False),), "fp32")


def run(build, name="staged"):
    t = sim.load_target("FT78NE")
    assert (t.launch_overhead_cycles, t.dma.setup_cycles, t.dma.engines_per_core, t.dma.engine_bytes_per_cycle) \
        == (1800, 64, 2, 64)
    for region, numbers in (("ddr", (20, 200, 64)), ("gsm", (64, 40, 32)), ("am", (128, 4, 1))):
        r = t.region(region)
        assert (r.bandwidth_bytes_per_cycle, r.latency_cycles, r.burst_bytes) == numbers
    with sim.registered_kernel(Given(name, build)):
        m = sim.Simulator(t)
        m.write(X, np.arange(N, dtype=F32))
        m.write(Y, np.full(N, -1.0, F32))
        got = m.call(f"fp_{name}_s", x=X, y=Y, core_mask=0x3)
        return got, m


def dma(events, core, tile):
    return sorted((e for e in events if e.core == core and e.tile == tile and e.unit.startswith("dma")),
                  key=lambda e: e.start)


def test_buffer_references_name_a_generation():
    assert buffer_ref("gsm.a0", 3) == "gsm.a0@3"
    assert parse_buffer_ref("gsm.a@b@12") == ("gsm.a@b", 12)
    for bad in ("a", "@1", "a@", "a@-1", "a@x", 5):
        with pytest.raises(ValueError):
            parse_buffer_ref(bad)


def test_a_use_waits_for_the_staging_tile_and_the_walk_does_not():
    """Core 0: tile 0 stages 6400 bytes DDR -> GSM (fills g@0); tile 1, independent, loads 640 bytes DDR -> AM;
    tile 2 uses g@0 (640 bytes GSM -> AM) and stores them to y.

    Tile 0: engine 0 at 1800, streams from 1864; alone on DDR it would take 6400 / 20 = 320 cycles, but tile 1's
    640 bytes stream on engine 1 from 1864 too (the walk did not wait for tile 0): both share DDR at 10 B/cycle
    until tile 1 is done at 1864 + 64 = 1928 (640 bytes), then tile 0 has 6400 - 640 = 5760 bytes left at
    20 B/cycle: 288 cycles -> 2216; lands 200 later at 2416.  Tile 1 lands at 1928 + 200 = 2128.
    Tile 2's load waits for g@0 (2416): setup to 2480, 640 bytes at 64 B/cycle (GSM, engine) = 10 -> 2490, lands
    40 later: 2530.  Its store (no compute) AM -> DDR: engine at 2530, stream from 2594, 640 / 20 = 32 -> 2626,
    lands 200 later: 2826, the end of the run."""
    def build(ctx):
        gsm, am = ctx.shared_level.base, ctx.vector_level.base
        return {0: (Tile(0, (Transfer.contiguous(X, gsm, 6400),), None, (), fills=("g@0",)),
                    Tile(1, (Transfer.contiguous(X + 6400, am + 4096, 640),), None, ()),
                    Tile(2, (Transfer.contiguous(gsm + 640, am, 640),), None, (Transfer.contiguous(am, Y, 640),),
                         uses=("g@0",)))}
    r, m = run(build)
    (s0,), (t1,), (t2_in, t2_out) = dma(r.events, 0, 0), dma(r.events, 0, 1), dma(r.events, 0, 2)
    assert (s0.start, s0.end) == (1800, 2416)
    assert (t1.start, t1.end) == (1800, 2128)
    assert (t2_in.start, t2_in.end) == (2416, 2530)
    assert (t2_out.start, t2_out.end, r.cycles) == (2530, 2826, 2826)
    # The bytes went DDR -> GSM -> AM -> y: x[160:320] (bytes 640..1280 of x, staged at gsm + 640).
    np.testing.assert_array_equal(m.read(Y, 160, F32), np.arange(160, 320, dtype=F32))


def test_loads_that_read_none_of_a_used_buffer_start_at_once_and_the_compute_waits_for_it():
    """Core 0: tile 0 stages 6400 bytes DDR -> AM (fills b@0, at am + 8192: a block the compute reads, as GEMM's
    B block); tile 1 uses b@0 but its load (640 bytes of x, DDR -> am) reads none of b's bytes, so the load does
    not wait for b@0, the compute does (on the chip the DMA is issued at once, the core waits for both).

    Both loads start at 1800 (engines 0 and 1), stream from 1864 sharing DDR at 10 B/cycle until tile 1's 640 bytes
    are done at 1928 (lands 2128); tile 0's 5760 bytes left at 20 B/cycle -> 2216, lands 2416: b@0 filled.
    Tile 1's compute starts then, at 2416, not at its load's 2128; its store follows the compute."""
    def build(ctx):
        am = ctx.vector_level.base
        x, b, out = Operand(am, (160,), F32), Operand(am + 8192, (160,), F32), Operand(am + 1024, (160,), F32)
        add = Compute(lambda u, v: (u + v,), (x, b), (out,), flops=160, precision="fp32",
                      loops=(elementwise(ctx.target.core, "fp32", 160, loads=2, stores=1, valu=1, label="add"),))
        return {0: (Tile(0, (Transfer.contiguous(X + 640, am + 8192, 6400),), None, (), fills=("b@0",)),
                    Tile(1, (Transfer.contiguous(X, am, 640),), add, (Transfer.contiguous(am + 1024, Y, 640),),
                         uses=("b@0",)))}
    r, m = run(build)
    (fill,), (load, store) = dma(r.events, 0, 0), dma(r.events, 0, 1)
    assert (fill.start, fill.end) == (1800, 2416)
    assert (load.start, load.end) == (1800, 2128)
    (compute,) = [e for e in r.events if e.core == 0 and e.kind == "compute"]
    assert compute.start == 2416 and store.start == compute.end
    # The startup bound (sim/startup.py) by the same rule: alone, the fill would land at 64 + 6400 / 20 + 200 =
    # 584 after the launch and the load at 64 + 640 / 20 + 200 = 296, at once: the compute starts no sooner than
    # 1800 + max(584, 296) = 2384 (the old rule's 1800 + 584 + 296 = 2680 would be past the run's 2416).
    assert startup(r.plan, sim.load_target("FT78NE")).first_compute_cycles[0] == 2384 <= compute.start
    # y[i] = x[i] + x[160 + i]: the compute read the staged block.
    got = m.read(Y, 160, F32)
    np.testing.assert_array_equal(got, np.arange(160, dtype=F32) + np.arange(160, 320, dtype=F32))


def test_cores_split_a_fill_and_both_wait_for_the_whole_block():
    """Cores 0 and 1 each stage half of a 6400-byte block (3200 bytes each, fills g@0); each then uses the whole
    block (6400 bytes GSM -> AM).  Both halves stream from 1864 sharing DDR at 10 B/cycle: 320 cycles -> 2184, land
    at 2384: g@0 is filled then (not when the first half landed).  Each use: setup to 2448, two 6400-byte streams
    share GSM at 32 B/cycle: 200 cycles -> 2648, land at 2688."""
    def build(ctx):
        gsm, am = ctx.shared_level.base, ctx.vector_level.base
        tiles = {}
        for c in (0, 1):
            tiles[c] = (Tile(0, (Transfer.contiguous(X + 3200 * c, gsm + 3200 * c, 3200),), None, (), fills=("g@0",)),
                        Tile(1, (Transfer.contiguous(gsm, am, 6400),), None, (), uses=("g@0",)))
        return tiles
    r, _ = run(build)
    for c in (0, 1):
        (fill,), (use,) = dma(r.events, c, 0), dma(r.events, c, 1)
        assert (fill.start, fill.end) == (1800, 2384)
        assert (use.start, use.end) == (2384, 2688)
    assert r.cycles == 2688


def test_a_refill_waits_for_every_user_of_the_previous_generation():
    """Write-after-read: core 0 stages block 0 (g@0), uses it, stages block 1 into the same GSM bytes (g@1) and
    uses it; core 1 uses g@0 in a long compute.  The refill may not start before core 1's compute is done, and
    core 1 still reads block 0's values, core 0 block 1's."""
    # A long compute on core 1: a dependent chain of 2000 multiply-adds (each waits for the previous one's
    # result): FT78NE's fmac latency 6 is the interval, the fill one more latency; 24 (tile overhead) + 8 (loop
    # overhead) + 6 + 2000 x 6 = 12038 cycles.
    chain = Loop(trips=2000, issues={"fmac": 1}, chain=("fmac",), carried=("fmac",), label="dependent chain")

    def build(ctx):
        gsm, am = ctx.shared_level.base, ctx.vector_level.base
        a, b = Operand(am, (16,), F32), Operand(am + 128, (16,), F32)
        double = Compute(lambda v: (v * 2,), (a,), (b,), flops=16, precision="fp32", loops=(chain,))
        copy = Compute(lambda v: (v + 0,), (a,), (b,), flops=0, precision="fp32",
                       loops=(elementwise(ctx.target.core, "fp32", 16, loads=1, stores=1, label="copy"),))
        return {
            0: (Tile(0, (Transfer.contiguous(X, gsm, 64),), None, (), fills=("g@0",)),
                Tile(1, (Transfer.contiguous(gsm, am, 64),), copy, (Transfer.contiguous(am + 128, Y, 64),),
                     uses=("g@0",)),
                Tile(2, (Transfer.contiguous(X + 64, gsm, 64),), None, (), fills=("g@1",)),
                Tile(3, (Transfer.contiguous(gsm, am, 64),), copy, (Transfer.contiguous(am + 128, Y + 64, 64),),
                     uses=("g@1",))),
            1: (Tile(0, (Transfer.contiguous(gsm, am, 64),), double, (Transfer.contiguous(am + 128, Y + 128, 64),),
                     uses=("g@0",)),),
        }
    r, m = run(build)
    computes = {e.core: e for e in r.events if e.kind == "compute"}
    (refill,) = dma(r.events, 0, 2)
    assert (m.target.core.tile_overhead_cycles, m.target.core.loop_overhead_cycles,
            m.target.core.units["fmac"].latency_cycles) == (24, 8, 6)
    assert computes[1].end - computes[1].start == 12038
    assert refill.start == computes[1].end  # released by core 1's compute, not a cycle before
    np.testing.assert_array_equal(m.read(Y, 48, F32), np.concatenate(
        [np.arange(16), np.arange(16, 32), 2 * np.arange(16)]).astype(F32))


def test_plans_without_buffers_do_not_build_any():
    from sim.engine.buffers import PhaseBuffers
    phase = Phase("p", {0: (Tile(0, (), None, ()),)})
    assert not PhaseBuffers.has_buffers(phase)


@pytest.mark.parametrize("what,tiles,detail", [
    ("a use nobody fills", lambda g, a: {0: (Tile(0, (Transfer.contiguous(g, a, 64),), None, (), uses=("g@0",)),)},
     "buffer 'g' generation 0 is never filled in this phase"),
    ("a generation skipped", lambda g, a: {0: (
        Tile(0, (Transfer.contiguous(X, g, 64),), None, (), fills=("g@0",)),
        Tile(1, (Transfer.contiguous(X, g, 64),), None, (), fills=("g@2",)))},
     "buffer 'g' generation 1 is never filled"),
    ("a staging tile that stores", lambda g, a: {0: (
        Tile(0, (Transfer.contiguous(X, a, 64),), None, (Transfer.contiguous(a, Y, 64),), fills=("g@0",)),)},
     "it may have loads only"),
    ("a tile that fills what it uses", lambda g, a: {0: (
        Tile(0, (Transfer.contiguous(X, g, 64),), None, (), fills=("g@0",)),
        Tile(1, (Transfer.contiguous(X, g, 64),), None, (), fills=("g@1",), uses=("g@0",)))},
     "both fills and uses buffer 'g'"),
    ("a malformed reference", lambda g, a: {0: (Tile(0, (), None, (), uses=("g",)),)}, "is not 'name@generation'"),
    # Core 0 uses g@0, then computes, then stages g@0: the staging tile is issued only once the walk reaches the
    # tile before it, which waits for the use, which waits for the staging tile.
    ("a fill after the walk blocks on its use", lambda g, a: {0: (
        Tile(0, (Transfer.contiguous(g, a, 64),), None, (), uses=("g@0",)),
        Tile(1, (Transfer.contiguous(X, a + 128, 64),), None, ()),
        Tile(2, (Transfer.contiguous(X, g, 64),), None, (), fills=("g@0",)))},
     "the phase deadlocks"),
    # Each core uses what only the other core's later work fills.
    ("two cores waiting for each other", lambda g, a: {c: (
        Tile(0, (Transfer.contiguous(g + 64 * c, a, 64),), None, (), uses=(f"b{c}@0",)),
        Tile(1, (Transfer.contiguous(X, a + 128, 64),), None, ()),
        Tile(2, (Transfer.contiguous(X, g + 64 * (1 - c), 64),), None, (), fills=(f"b{1 - c}@0",)))
        for c in (0, 1)},
     "the phase deadlocks"),
])
def test_misused_buffers_are_refused_before_the_run(what, tiles, detail):
    def build(ctx):
        return tiles(ctx.shared_level.base, ctx.vector_level.base)
    with pytest.raises(sim.PlanError) as info:
        run(build, name="misused")
    assert detail in str(info.value), str(info.value)
    assert info.value.rule in ("buffers", "plan-structure")


def test_a_deadlock_names_the_first_stuck_tile_of_the_lowest_core():
    """Cores listed 1 then 0, each waiting for the other's later fill: the refusal names core 0's tile 0 (the
    lowest core with a stuck tile, its first), whatever order the phase lists its cores in."""
    def build(ctx):
        g, a = ctx.shared_level.base, ctx.vector_level.base
        return {c: (Tile(0, (Transfer.contiguous(X, a + 256, 64),), None, ()),
                    Tile(1, (Transfer.contiguous(g + 64 * c, a, 64),), None, (), uses=(f"b{c}@0",)),
                    Tile(2, (Transfer.contiguous(X, a + 128, 64),), None, ()),
                    Tile(3, (Transfer.contiguous(X, g + 64 * (1 - c), 64),), None, (), fills=(f"b{1 - c}@0",)))
                for c in (1, 0)}
    with pytest.raises(sim.PlanError) as info:
        run(build, name="misused")
    assert (info.value.rule, info.value.core, info.value.tile) == ("buffers", 0, 1), str(info.value)


def test_a_prefetched_fill_right_after_its_use_is_no_deadlock():
    """Core 0 uses g@0 in tile 0 and stages it in tile 1: the walk issues tile 1 with tile 0 (one tile ahead), so
    the fill lands and the use follows."""
    def build(ctx):
        g, a = ctx.shared_level.base, ctx.vector_level.base
        return {0: (Tile(0, (Transfer.contiguous(g, a, 64),), None, (Transfer.contiguous(a, Y, 64),), uses=("g@0",)),
                    Tile(1, (Transfer.contiguous(X + 256, g, 64),), None, (), fills=("g@0",)))}
    _, m = run(build)
    np.testing.assert_array_equal(m.read(Y, 16, F32), np.arange(64, 80, dtype=F32))
