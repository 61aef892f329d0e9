"""The GEMM algorithms of docs/gemm.md as tiling keys: C streamed per k block (``c_home: ddr``), A's GSM blocks
loaded by core 0 (``a_loader: core0``), micro-kernel shapes the search chooses; numerics against numpy, the
memory traffic and a tile's cycles derived by hand from targets/FT78NE.yaml."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import yaml

import kernels
import sim
from kernels.common.loops import gemm_micro_kernel
from sim.timing import loop_cost, loop_cycles
from tests.kernels.test_gemm import DDR, L2, assert_close, run_gemm


def c_traffic(run, m: int, n: int, ldc: int | None = None) -> tuple[int, int]:
    """(bytes loaded from C, bytes stored to C) over the run's transfers."""
    lo, hi = DDR[2], DDR[2] + m * (ldc or n) * 4
    loaded = sum(e.bytes for e in run.events if e.kind == "dma_in" and e.src is not None and lo <= e.src < hi)
    stored = sum(e.bytes for e in run.events if e.kind == "dma_out" and e.dst is not None and lo <= e.dst < hi)
    return loaded, stored


@pytest.mark.parametrize("beta", [0, 1])
def test_streamed_c_goes_to_memory_once_per_k_block_and_matches_numpy(beta):
    """48x256x384, k_block 128: three k blocks.  C in AM: C stored once (and loaded once when beta = 1).  C
    streamed: every k block stores all of C, and every k block but the first (all three with beta = 1) loads it:
    3 x 48 x 256 x 4 = 147,456 bytes stored, 2 x (or 3 x) 49,152 loaded."""
    m, n, k = 48, 256, 384
    size = m * n * 4
    for home, stores, loads in (("am", 1, beta), ("ddr", 3, 2 + beta)):
        run, got, want, _ = run_gemm("FT78NE", "fp_gemm_s", m, n, k, beta=beta,
                                     tiling={"c_home": home, "k_block": 128, "split": "n"})
        assert_close(got, want, k)
        assert run.tiling.tiling["c_home"] == home
        assert c_traffic(run, m, n) == (loads * size, stores * size), home


def test_a_streamed_c_tile_costs_what_the_target_file_gives():
    """One core, C streamed, a 12-row panel of 6x32 micro-kernels (k_block 128): a tile of a later k block loads
    its C rows, so the micro-kernel's epilogue loads and stores C.  From FT78NE's numbers: per k-step B's row is
    one vector (1 vls issue on 2 units: 1 cycle), A's 6 values 3 SLDW (sload 3), 6 broadcasts on 2 units (3), 6
    FMACs on 3 units (2): resource II 3; the chain is one FMAC latency, 6: II 6 (6 accumulators cannot cover 3 x 6).
    Fill 7 + 4 + 6 = 17; epilogue 6 accumulators loaded and stored, 12 vectors in 6 vls issues on 2 units, 3 cycles
    + the vector store latency 4 (the stores come last) = 7.  Loop: 8 + 17 + 128 x 6 + 7 = 800; two per tile (12
    rows / 6), plus the tile's 24: 1624 cycles.  The first k block's tiles load no C: their epilogue stores only (6
    vectors, 3 issues: 2 + 4 = 6, the loop 799)."""
    core = sim.load_target("FT78NE").core
    loop = gemm_micro_kernel(core, "fp32", 6, 32, 128, itemsize=4, load_c=True)
    cost = loop_cost(loop, core)
    assert (cost.resource_ii, cost.recurrence_ii, cost.ii, cost.fill, cost.epilogue) == (3, 6, 6, 17, 7)
    assert loop_cycles(loop, core) == 800
    run, got, want, _ = run_gemm("FT78NE", "fp_gemm_s", 36, 32, 256, where={"core_mask": 0x1},
                                 tiling={"c_home": "ddr", "k_block": 128, "m_panel": 12, "m_micro": 6, "n_micro": 32})
    assert_close(got, want, 256)
    computes = sorted((e for e in run.events if e.kind == "compute"), key=lambda e: e.start)
    assert len(computes) == 6  # three panels, two k blocks
    assert [e.end - e.start for e in computes] == [24 + 2 * 799] * 3 + [24 + 2 * 800] * 3


def test_a_taller_micro_kernel_covers_the_fmac_latency_on_thin_columns():
    """64 columns per core (two vectors): 6 rows give 12 accumulators, fewer than 3 FMACs x 6 cycles: II 6 for 12
    FMACs.  8 rows: sload 4, broadcast 4, fmac 16 / 3 -> 6, the chain 6: II 6 for 16 FMACs, a third more work per
    cycle (loop at k = 256: 8 + 17 + 256 x 6 + epilogue 16 vectors, 8 store issues: 4 + the store latency 4 = 8
    -> 1569).  The search is
    offered the taller shapes there, and only there."""
    core = sim.load_target("FT78NE").core
    six, eight = (loop_cost(gemm_micro_kernel(core, "fp32", r, 64, 256, itemsize=4), core) for r in (6, 8))
    assert (six.ii, eight.ii, eight.resource_ii) == (6, 6, 6)
    assert loop_cycles(gemm_micro_kernel(core, "fp32", 8, 64, 256, itemsize=4), core) == 8 + 17 + 256 * 6 + 8
    s = sim.Simulator("FT78NE", tuning_cache=False)
    args = dict(a=DDR[0], b=DDR[1], c=DDR[2], m=256, n=512, k=256)
    call = s.bind("fp_gemm_s", **args)
    thin = kernels.lookup("fp_gemm_s").kernel.tiling_space(call, s.context(call)).keys["m_micro"]
    assert thin.candidates({"split": "n"}) == [6, 8, 12]
    # Every core all 512 columns: 6 x 4 vectors = 24 accumulators cover the latency; 8 rows only because they pad
    # none of the 256 rows (6 pad 2: 43 blocks for 258), as 6 rows pad none of 252.
    assert thin.candidates({"split": "m"}) == [6, 8]
    call = s.bind("fp_gemm_s", **{**args, "m": 252})
    space = kernels.lookup("fp_gemm_s").kernel.tiling_space(call, s.context(call))
    assert space.keys["m_micro"].candidates({"split": "m"}) == [6]
    with pytest.raises(sim.KernelArgError, match=r"tiling\.m_micro.*registers"):
        s.call("fp_gemm_s", numerics=False, tiling={"m_micro": 16, "n_micro": 128, "split": "m"}, **args)


def test_core0_loads_every_gsm_block_and_the_other_cores_wait_for_it():
    """a_loader core0: A's DDR bytes are A's size, every one of them on core 0's engines (the published library);
    no other core computes before the first block has landed."""
    m, n, k = 96, 1024, 64
    run, got, want, _ = run_gemm("FT78NE", "fp_gemm_s", m, n, k, tiling={"a_loader": "core0", "split": "n"})
    assert_close(got, want, k)
    a_lo, a_hi = DDR[0], DDR[0] + m * k * 4
    from_a = [e for e in run.events if e.kind == "dma_in" and e.src is not None and a_lo <= e.src < a_hi]
    assert sum(e.bytes for e in from_a) == m * k * 4 and {e.core for e in from_a} == {0}
    first_block = min(e.end for e in from_a)  # the first GSM block's fill, one descriptor on core 0
    first_compute = min(e.start for e in run.events if e.kind == "compute" and e.core != 0)
    assert first_compute >= first_block


def test_streamed_c_with_fewer_tiles_per_k_block_than_buffers_keeps_its_order():
    """One 12x32 panel per k block on one core: each tile loads the C rows the previous one stored, so the C tiles
    may not overlap (one buffer): every tile's C load starts after the previous tile's store has landed, and C is
    right."""
    run, got, want, _ = run_gemm("FT78NE", "fp_gemm_s", 12, 32, 512, where={"core_mask": 0x1},
                                 tiling={"c_home": "ddr", "k_block": 128, "m_panel": 12})
    assert_close(got, want, 512)
    lo, hi = DDR[2], DDR[2] + 12 * 32 * 4
    loads = sorted(e.start for e in run.events if e.kind == "dma_in" and e.src is not None and lo <= e.src < hi)
    stores = sorted(e.end for e in run.events if e.kind == "dma_out" and e.dst is not None and lo <= e.dst < hi)
    assert len(loads) == 3 and len(stores) == 4
    assert all(load >= store for load, store in zip(loads, stores))


def test_algorithms_that_do_not_go_with_the_call_are_refused_by_key():
    s = sim.Simulator("FT78NE", tuning_cache=False)
    args = dict(a=DDR[0], b=DDR[1], c=DDR[2], m=12, n=32, k=256, numerics=False)
    with pytest.raises(sim.KernelArgError, match=r"tiling\.c_home.*fp16 C is rounded once"):
        sim.Simulator("MT7004", tuning_cache=False).call("hp_gemm_s", tiling={"c_home": "ddr"}, **args)
    with pytest.raises(sim.KernelArgError, match=r"tiling\.a_loader.*only an _s call on several cores"):
        s.call("fp_gemm_s", core_mask=0x1, tiling={"a_loader": "core0"}, **args)


def test_one_gsm_block_takes_the_whole_window_and_waits_for_every_core():
    """a_buffers 1 (the published library's single GSM block): with k_block 512 the block is all of m's 1536 rows
    (the window, all of GSM here, would hold 3072), and the next block (the second k block) is loaded only after
    every core has finished its last compute on the first."""
    m, n, k = 1536, 256, 1024
    run, got, want, _ = run_gemm("FT78NE", "fp_gemm_s", m, n, k, tiling={"a_buffers": 1, "k_block": 512,
                                                                          "split": "n", "m_panel": 12})
    assert_close(got, want, k)
    assert run.tiling.tiling["m_block"] == 1536
    a_lo, a_hi = DDR[0], DDR[0] + m * k * 4
    fills = [e for e in run.events if e.kind == "dma_in" and e.src is not None and a_lo <= e.src < a_hi]
    second = [e for e in fills if (e.src - a_lo) % (k * 4) >= 512 * 4]  # columns 512.. of A: the second k block
    last_first_block = 0
    for core in range(8):
        computes = sorted((e for e in run.events if e.kind == "compute" and e.core == core), key=lambda e: e.start)
        last_first_block = max(last_first_block, computes[len(computes) // 2 - 1].end)
    assert second and min(e.start for e in second) >= last_first_block


def test_transposed_a_costs_about_what_the_1x1_convolution_doing_the_same_product_costs():
    """dW of a 1x1 Conv2DBackpropFilter (4x16x16x256 -> 256x256) is x^T dy: GEMM with trans_a = 1, m = n = 256,
    k = 1024.  A stored [k, m] is read in panel rows of m_panel elements; the default plan takes whole 64-byte
    bursts of DDR (48 = lcm(6, 16) fp32 rows, no burst half wasted) and lands within 25 % of the convolution."""
    s = sim.Simulator("FT78NE", tuning_cache=False)
    g = s.call("fp_gemm_s", a=DDR[0], b=DDR[1], c=DDR[2], m=256, n=256, k=1024, trans_a=1, numerics=False)
    conv = s.call("fp_conv2d_backprop_filter_s", input=DDR[0], out_backprop=DDR[1], output=DDR[2],
                  input_shape=[4, 16, 16, 256], filter_sizes=[1, 1, 256, 256], strides=[1, 1, 1, 1],
                  padding="VALID", numerics=False)
    if g.tiling.tiling.get("a_staging", "gsm") == "memory":  # (panels from GSM pay no DDR burst each)
        assert g.tiling.tiling["m_panel"] * 4 % 64 == 0
    assert g.cycles <= 1.25 * conv.cycles, (g.cycles, conv.cycles)


def test_b_staged_in_gsm_is_read_from_memory_once_for_all_cores():
    """Split m on 8 cores: every core uses every B block.  b_staging am: each core loads B from DDR, 8 x B's
    131,072 bytes; gsm: the cores share each block's loading into GSM (131,072 bytes from DDR in all) and each
    copies the block from GSM into its AM (a staging tile that uses the GSM block: the next block may not overwrite
    it before every core's copy has landed); broadcast: each core's engine carries its copy, DDR reads the block
    once.  One A block of all 2,048 rows, so each B block is loaded once.  C is right every way."""
    m, n, k = 2048, 64, 512
    b_lo, b_hi = DDR[1], DDR[1] + k * n * 4
    for staging, reads in (("am", 8), ("gsm", 1), ("broadcast", 8)):
        run, got, want, _ = run_gemm("FT78NE", "fp_gemm_s", m, n, k,
                                     tiling={"split": "m", "b_staging": staging, "k_block": 256, "m_block": 2048})
        assert_close(got, want, k)
        from_b = [e for e in run.events if e.kind == "dma_in" and e.src is not None and b_lo <= e.src < b_hi]
        assert sum(e.bytes for e in from_b) == reads * k * n * 4, staging
        if staging == "gsm":
            assert {e.dst_region for e in from_b} == {"gsm"} and len({e.core for e in from_b}) == 8
            copies = [e for e in run.events if e.kind == "dma_in" and e.src_region == "gsm" and e.dst_region == "am"]
            assert sum(e.bytes for e in copies) == 8 * k * n * 4  # each core its own copy of every block
        if staging == "broadcast":
            # Each core's engine carries its copy (8 x B through the engines), but DDR reads each block once.
            assert {e.dst_region for e in from_b} == {"am"} and len({e.core for e in from_b}) == 8
            assert run.roofline.region_bytes["ddr"] - (m * k + m * n) * 4 == k * n * 4
    for staging in ("gsm", "broadcast"):
        with pytest.raises(sim.KernelArgError, match=r"tiling\.b_staging"):
            run_gemm("FT78NE", "fp_gemm_s", 64, 64, 64, tiling={"split": "n", "b_staging": staging})


def test_a_broadcast_b_block_streams_in_lock_step_at_its_share_of_ddr(tmp_path):
    """Split m, core 0 loading the one A block (576 x 64, 147,456 bytes) into GSM while the 8 cores load the B
    block (64 x 64, 16,384 bytes) as one broadcast.  From FT78NE's numbers: both start at the launch (1,800) on
    their engines, stream from the setup's end (+ 64), and share DDR's 20 B/cycle max-min fairly, 10 each (the
    broadcast reads B once: its engines, 64 B/cycle each, and AM do not limit it): B's 16,384 bytes take 1,638.4
    -> 1,639 cycles, then land DDR's latency (200) later, on every core at once."""
    ft = sim.load_target("FT78NE")
    ddr = ft.region("ddr")
    m, n, k = 576, 64, 64
    run, got, want, _ = run_gemm("FT78NE", "fp_gemm_s", m, n, k,
                                 tiling={"split": "m", "b_staging": "broadcast", "a_loader": "core0",
                                         "a_buffers": 1, "k_block": 64, "n_block": 64})
    assert_close(got, want, k)
    b_lo, b_hi = DDR[1], DDR[1] + k * n * 4
    members = [e for e in run.events if e.kind == "dma_in" and e.src is not None and b_lo <= e.src < b_hi]
    assert len(members) == 8 and {e.core for e in members} == set(range(8))
    start = ft.launch_overhead_cycles
    for e in members:
        assert (e.start, e.wait_start, e.end) == (start, start + ft.dma.setup_cycles,
                                                  start + ft.dma.setup_cycles + 1639 + ddr.latency_cycles)
    # The trace names each member's group (and reads it back); the summary counts the groups and the waits.
    assert {e.sync for e in members} == {"b.0"} and all(e.sync is None for e in run.events if e not in members)
    assert ("synchronised transfers: 1 group of 8 member transfers; the members waited 0 cycles in all for one "
            "another (at most 0)") in run.summary_text()
    from sim.report.page import report_html
    assert "<dt>synchronised transfers</dt><dd>1 group of 8 member transfers" in report_html(run)
    from sim.inspect.trace_tools import load_trace
    for ext in ("json", "csv"):
        back = load_trace(run.write_trace(tmp_path / f"t.{ext}"))
        assert sorted(back.events) == sorted(run.events), ext


@pytest.mark.parametrize("chip,symbol,shape,given", [
    ("FT78NE", "fp_gemm_s", (200, 300, 700), {"split": "n", "c_home": "am"}),
    ("FT78NE", "fp_gemm_s", (200, 300, 700), {"split": "m", "c_home": "ddr"}),
    ("MT7004", "hp_gemm_s", (100, 136, 260), {"split": "n"}),
    ("FT78NE", "fp_gemm_s", (200, 300, 700), {"split": "n", "nt_kernel": "reduce"}),
])
def test_the_bound_from_the_tiling_is_the_plans_serial_compute(chip, symbol, shape, given):
    """The space's bound (the search plans a tiling only when it could still win) is, for a split without the
    reduce phase, exactly the plan's own: each core's computes one after another (the sum the engine charges,
    worked out without building the tiles) after what must land before its first (sim.startup, from the plan's
    first tiles alone), and never less than the launch plus the busiest core's computes; every sampled
    candidate of each space, edge panels and edge blocks included (200 rows, 300 columns and a depth of 700 leave
    partial ones), and no simulated run is faster."""
    from sim.startup import startup
    from sim.timing import serial_compute_cycles
    from sim.tuning import MAX_COMPLETIONS, prefilter
    machine = sim.Simulator(chip, tuning_cache=False)
    args = dict(a=DDR[0], b=DDR[1], c=DDR[2], m=shape[0], n=shape[1], k=shape[2], trans_a=0, trans_b=1, beta=1)
    call = machine.bind(symbol, **args)
    kernel = kernels.lookup(symbol).kernel
    space = kernel.tiling_space(call, machine.context(call))
    pool, _ = space.completions(given, MAX_COMPLETIONS)
    tried = [t for t in pool if prefilter(space, t) is None][:6]
    assert tried
    for t in tried:
        plan = kernel.plan(call, replace(machine.context(call), tiling=t))
        serial = serial_compute_cycles(plan, machine.target)
        computes = machine.target.launch_overhead_cycles + max(serial.values())
        assert space.bound(t) == max(computes, startup(plan, machine.target).bound_cycles(serial)), t
        assert space.bound(t) > computes, t  # (every core waits for its first blocks)
        assert machine.call(symbol, tiling=t, numerics=False, **args).cycles >= space.bound(t), t


def test_gsm_blocks_take_every_byte_of_gsm_the_call_leaves_free():
    """FT78NE's gsm_blocks (3 MiB at 0x40280000) takes the free bytes of GSM: with A, B and C in DDR it is all
    6 MiB of GSM for the call's plans, the partial-results window above it included; a call buffer in GSM below it
    stops it at that buffer's end (rounded up to the 128-byte alignment).  One A block of a_buffers 1 and k_block
    512 then holds 6 MiB / (512 x 4 bytes) = 3072 rows: a 3072-row A is one block, loaded at GSM's base."""
    from sim.model.call import Buffer
    from sim.planning import staging_areas
    target = sim.load_target("FT78NE")
    f32 = np.dtype(np.float32)
    in_ddr = (Buffer("a", DDR[0], (64,), f32, "input"),)
    assert [(a.name, a.base, a.size_bytes) for a in staging_areas(target, in_ddr) if a.shared] == [
        ("gsm", 0x40580000, 0x80000), ("gsm_blocks", 0x40000000, 0x600000)]
    in_gsm = in_ddr + (Buffer("x", 0x40100000, (1000,), f32, "input"),)  # ends at 0x40100FA0
    blocks = next(a for a in staging_areas(target, in_gsm) if a.name == "gsm_blocks")
    assert (blocks.base, blocks.end) == (0x40101000, 0x40600000)
    m, n, k = 3072, 64, 1024
    machine = sim.Simulator("FT78NE", tuning_cache=False)
    _, plan = machine.plan("fp_gemm_s", a=DDR[0], b=DDR[1], c=DDR[2], m=m, n=n, k=k, trans_a=0, trans_b=0, beta=0,
                           tiling={"a_buffers": 1, "k_block": 512, "split": "n", "m_panel": 6, "m_micro": 6,
                                   "n_block": 64, "n_micro": 16, "c_home": "ddr", "a_loader": "core0",
                                   "b_staging": "am", "m_block": 3072})
    fills = [t for ph in plan.phases for t in ph.tiles[0] for t in t.loads if DDR[0] <= t.src < DDR[1]]
    assert min(t.dst for t in fills) == 0x40000000
    assert max(t.dst + t.size_bytes for t in fills) == 0x40000000 + 3072 * 512 * 4 == 0x40600000


def test_core0_refills_the_one_gsm_block_after_every_core_is_done_with_it_at_the_cycles_the_target_gives():
    """a_loader core0, a_buffers 1, 2 cores, 96 x 64 x 1024 in two 512-deep k blocks (each core 32 columns of C).
    From FT78NE's file: block 1's refill (96 x 512 fp32, 196,608 bytes, with core 0's B block, 32 x 512 fp32,
    65,536) starts when the last compute on block 0 ends, on core 0's engines only; it cannot land before
    that + the 64-cycle setup + 262,144 bytes over DDR's 20 B/cycle + DDR's 200-cycle latency.  Once it has, each
    core loads its next two panels (12 x 512 fp32, 24,576 bytes each) from GSM into SM on its two engines: 64
    cycles of setup, 49,152 bytes through the core's SM at 16 B/cycle (3,072 cycles; four such streams take
    GSM's 64 B/cycle exactly), GSM's 40-cycle latency: its first compute on block 1 starts 3,176 cycles after
    the refill landed."""
    m, n, k = 96, 64, 1024
    run, got, want, _ = run_gemm("FT78NE", "fp_gemm_s", m, n, k, where={"core_mask": 0x3}, tiling={
        "split": "n", "c_home": "am", "a_loader": "core0", "a_buffers": 1, "b_staging": "am", "m_micro": 6,
        "k_block": 512, "m_panel": 12, "m_block": 96, "n_block": 32, "n_micro": 32})
    assert_close(got, want, k)
    computes = {c: sorted((e for e in run.events if e.kind == "compute" and e.core == c), key=lambda e: e.start)
                for c in (0, 1)}
    per_block = m // 12  # eight panels a core per k block
    block0_done = max(computes[c][per_block - 1].end for c in (0, 1))
    refill = [e for e in run.events if e.kind == "dma_in" and e.dst_region == "gsm" and e.start >= block0_done]
    b_next = [e for e in run.events if e.kind == "dma_in" and e.src_region == "ddr" and e.dst_region == "am"
              and e.core == 0 and e.start >= block0_done]
    assert sum(e.bytes for e in refill) == 96 * 512 * 4 and {e.core for e in refill} == {0}
    assert min(e.start for e in refill) == block0_done
    landed = max(e.end for e in refill + b_next)
    assert landed >= block0_done + 64 + -(-(96 * 512 * 4 + sum(e.bytes for e in b_next)) // 20) + 200
    for c in (0, 1):
        assert computes[c][per_block].start == landed + 64 + 2 * 24576 // 16 + 40


# --- the NT reduction kernel (nt_kernel: reduce) ---------------------------------------------------------------

def _sm_range(chip: str) -> tuple[int, int]:
    sm = next(r for r in sim.load_target(chip).regions if r.name == "sm")
    return sm.base, sm.base + sm.size_bytes


@pytest.mark.parametrize("beta, pad", [(1, 3), (0, 0)])
def test_the_nt_reduction_kernel_matches_numpy_with_c_rows_in_sm(beta, pad):
    """B stored transposed, the published NT kernel forced: C's rows come from memory into SM (beta = 1, or a
    later k block) and go back from SM; the pitches' pads are never touched (run_gemm checks them)."""
    lo, hi = _sm_range("FT78NE")
    run, got, want, _ = run_gemm("FT78NE", "fp_gemm_s", 40, 50, 300, trans_b=1, beta=beta, pad=pad,
                                 tiling={"nt_kernel": "reduce", "k_block": 128})
    assert_close(got, want, 300)
    assert run.tiling.tiling["nt_kernel"] == "reduce" and run.tiling.tiling["c_home"] == "ddr"
    c_lo, c_hi = DDR[2], DDR[2] + 40 * (50 + pad) * 4
    into_sm = [e for e in run.events if e.kind == "dma_in" and e.src is not None and c_lo <= e.src < c_hi]
    out_of_sm = [e for e in run.events if e.kind == "dma_out" and e.dst is not None and c_lo <= e.dst < c_hi]
    assert into_sm and out_of_sm
    assert all(lo <= e.dst < hi for e in into_sm) and all(lo <= e.src < hi for e in out_of_sm)


def test_an_nt_reduction_tile_costs_what_the_target_file_gives():
    """One core, 12 x 18 x 1024 with B transposed, one k block: one tile of 4 x 3 blocks of 3 x 6 (the FMAC units
    x their latency, FT78NE: 3 x 6), merged into one loop (tests/test_nt_micro_kernel.py derives its parts): per
    block 1024 / 32 = 32 vectors of k, 18 FMACs each, and the block before's reduction adds (10 + 5 + 4 + 2): II =
    ceil((576 + 21) / 3) = 199 on the FMAC units; fill = VLDDW 9 + FMAC 6; the last block's reduction chain 91.
    The tile: its 24 cycles of control + 8 + 15 + 12 x 199 + 91 = 2526, no B transpose."""
    t = sim.load_target("FT78NE")
    fmac = t.core.units["fmac"]
    assert (fmac.count, fmac.latency_cycles) == (3, 6)
    lanes = t.core.vector_width_bytes // 4
    ii = -(-(fmac.count * fmac.latency_cycles * (1024 // lanes) + 10 + 5 + 4 + 2) // fmac.count)
    fill = t.core.units["vls"].latency_cycles + fmac.latency_cycles
    want = t.core.tile_overhead_cycles + t.core.loop_overhead_cycles + fill + 12 * ii + 91
    assert (ii, fill, want) == (199, 15, 2526)
    run, got, ref, _ = run_gemm("FT78NE", "fp_gemm_s", 12, 18, 1024, trans_b=1, where={"core_mask": 0x1},
                                tiling={"nt_kernel": "reduce", "k_block": 1024, "m_panel": 12, "n_block": 18})
    assert_close(got, ref, 1024)
    computes = [e for e in run.events if e.kind == "compute"]
    assert [e.end - e.start for e in computes] == [want]


def direct_space(machine: sim.Simulator, call):
    """The direct formulation's tiling space of ``call`` (B transposed with fewer rows of C than columns searches the
    transposed formulation too, under the key ``formulation``: these tests look at the NT kernels, direct's)."""
    from kernels.gemm.build import GemmPlanner
    return GemmPlanner(call, machine.context(call)).space


def test_the_nt_kernel_is_one_step_from_streamed_c_and_cheaper_with_few_rows_per_b_block():
    """B transposed, one core, 24 x 1024 x 2048.  The space's first tiling transposes B in AM with C in AM (the
    published NN schedule); the NT kernel streams C, so it is one step from a tiling that transposes B with C
    streamed (a step changes one choice), with its 3 x 6 block.  With 24 rows of A per B block the transpose of
    each block is paid over few rows: the NT kernel costs less, and the search's pick is it (once its tiling of the
    lowest bound is priced where the one nearest the climb's end is out of reach; the pick transposed until then)."""
    from sim.tuning.pool import Pool
    from sim.tuning.search import neighbours
    machine = sim.Simulator("FT78NE", tuning_cache=False)
    args = dict(a=DDR[0], b=DDR[1], c=DDR[2], m=24, n=1024, k=2048, trans_b=1, core_mask=0x1)
    call = machine.bind("fp_gemm_s", **args)
    space = direct_space(machine, call)
    pool = Pool(space, {})
    first = next(pool.fitting())
    assert (first["nt_kernel"], first["c_home"]) == ("transpose", "am")
    assert all(t["nt_kernel"] == "transpose" for t in neighbours(space, first, pool, {}))
    streamed = next(t for t in neighbours(space, first, pool, {}) if t["c_home"] == "ddr")
    steps = [t for t in neighbours(space, streamed, pool, {}) if t["nt_kernel"] == "reduce"]
    assert steps and all(t["c_home"] == "ddr" and (t["m_micro"], t["n_micro"]) == (3, 6) for t in steps)
    # Besides the published 128 columns, B blocks of whole 6-column blocks and whole 32-lane vectors: lcm 96.
    assert space.keys["n_block"].candidates(steps[0])[:2] == [128, 96]
    picked = machine.call("fp_gemm_s", numerics=False, **args)
    nt = machine.call("fp_gemm_s", numerics=False, tiling={"nt_kernel": "reduce"}, **args)
    assert picked.tiling.tiling["nt_kernel"] == "reduce"
    assert all(t["nt_kernel"] == "reduce" for t, _ in nt.tiling.candidates)
    assert picked.cycles <= nt.cycles * (1 + sim.TILING_TOLERANCE)
    # A call whose B is not transposed offers the transpose choice only, and a full tiling written without the
    # key is still a full one (given, not searched).
    nn = machine.bind("fp_gemm_s", a=DDR[0], b=DDR[1], c=DDR[2], m=24, n=1024, k=2048)
    pool_nn, _ = kernels.lookup("fp_gemm_s").kernel.tiling_space(nn, machine.context(nn)).completions({}, 50)
    assert {t["nt_kernel"] for t in pool_nn} == {"transpose"}
    old = {k: v for k, v in pool_nn[0].items() if k != "nt_kernel"}
    run = machine.call("fp_gemm_s", numerics=False, tiling=old, a=DDR[0], b=DDR[1], c=DDR[2], m=24, n=1024, k=2048)
    assert run.tiling.source == "given" and run.tiling.tiling == pool_nn[0]


def test_the_search_prices_the_nt_tiling_nearest_its_climbs_end():
    """FT78NE, 8 cores, 2048 x 64 x 512 with B transposed: the climb from the NN schedule steps through transposing
    tilings; once it ends, the NT tiling nearest its end is priced too (a step of one key cannot reach it), here
    by its lower bound, which the climb's end beats: split m with B's blocks transposed in AM and broadcast to
    every core (254,992 cycles; 266,450 shared through GSM, before the search tried the broadcast), A's panels
    straight from memory in one 2048-row block.  (The NT kernel won this call, 312,297 cycles, before split m
    could read A from memory.)  The pick is the cheapest candidate."""
    run = sim.Simulator("FT78NE", tuning_cache=False).call(
        "fp_gemm_s", a=DDR[0], b=DDR[1], c=DDR[2], m=2048, n=64, k=512, trans_b=1, core_mask=0xFF, numerics=False)
    candidates = run.tiling.candidates
    nt = [note for (t, _), note in zip(candidates, run.tiling.notes) if t["nt_kernel"] == "reduce"]
    assert len(nt) == 1 and "lower bound" in nt[0]
    got = run.tiling.tiling
    assert (got["nt_kernel"], got["a_staging"], got["b_staging"], got["m_block"]) == ("transpose", "memory",
                                                                                       "broadcast", 2048)
    priced = [c for _, c in candidates if c is not None]
    assert run.cycles == min(priced) < 266_450


def test_the_nt_kernel_is_refused_by_key_where_it_cannot_run():
    with pytest.raises(sim.KernelArgError, match=r"tiling\.nt_kernel.*A that is not"):
        run_gemm("FT78NE", "fp_gemm_s", 24, 24, 64, trans_a=1, trans_b=1, tiling={"nt_kernel": "reduce"})
    with pytest.raises(sim.KernelArgError, match=r"tiling\.nt_kernel.*c_home ddr"):
        run_gemm("FT78NE", "fp_gemm_s", 24, 24, 64, trans_b=1, tiling={"nt_kernel": "reduce", "c_home": "am"})


# --- Yu et al.'s NT kernel (nt_kernel: reduce_serial) -----------------------------------------------------------

@pytest.mark.parametrize("beta, pad", [(1, 2), (0, 0)])
def test_the_serial_nt_kernel_matches_numpy_with_c_rows_in_sm(beta, pad):
    """B stored transposed, Yu et al.'s NT kernel forced (6 x 8 blocks, 20 x 50 leaves partial blocks both ways):
    C's rows come into SM and go back from it, and the result is numpy's."""
    lo, hi = _sm_range("FT78NE")
    run, got, want, _ = run_gemm("FT78NE", "fp_gemm_s", 20, 50, 300, trans_b=1, beta=beta, pad=pad,
                                 tiling={"nt_kernel": "reduce_serial", "k_block": 128})
    assert_close(got, want, 300)
    t = run.tiling.tiling
    assert (t["nt_kernel"], t["c_home"], t["m_micro"], t["n_micro"]) == ("reduce_serial", "ddr", 6, 8)
    c_lo, c_hi = DDR[2], DDR[2] + 20 * (50 + pad) * 4
    into_sm = [e for e in run.events if e.kind == "dma_in" and e.src is not None and c_lo <= e.src < c_hi]
    assert into_sm and all(lo <= e.dst < hi for e in into_sm)


def test_a_serial_nt_tile_costs_what_the_target_file_gives():
    """One core, 12 x 16 x 1024 with B transposed, one k block, one tile of 2 x 2 blocks of 6 x 8, block after
    block (tests/test_nt_micro_kernel.py derives a block): per block 8 + fill 15 + 1024 / 32 x 16 + the 48-vector
    reduction 121 = 656; the tile 24 + 4 x 656 = 2648, no B transpose."""
    t = sim.load_target("FT78NE")
    fmac, vls = t.core.units["fmac"], t.core.units["vls"]
    lanes = t.core.vector_width_bytes // 4
    block = t.core.loop_overhead_cycles + vls.latency_cycles + fmac.latency_cycles + \
        (1024 // lanes) * -(-48 // fmac.count) + 121
    want = t.core.tile_overhead_cycles + 4 * block
    assert (block, want) == (656, 2648)
    run, got, ref, _ = run_gemm("FT78NE", "fp_gemm_s", 12, 16, 1024, trans_b=1, where={"core_mask": 0x1},
                                tiling={"nt_kernel": "reduce_serial", "k_block": 1024, "m_panel": 12,
                                        "n_block": 16})
    assert_close(got, ref, 1024)
    assert [e.end - e.start for e in run.events if e.kind == "compute"] == [want]


def test_the_serial_nt_kernel_is_asked_for_only_and_refused_where_it_cannot_run():
    """The search never offers it (the merged kernel does the same work in fewer cycles: 1 core, 24 x 96 x 1024,
    forced, it costs more than the merged one forced); asked for, every candidate runs it; where no NT kernel can
    run, or with C in AM, it is refused by key."""
    machine = sim.Simulator("FT78NE", tuning_cache=False)
    args = dict(a=DDR[0], b=DDR[1], c=DDR[2], m=24, n=96, k=1024, trans_b=1, core_mask=0x1)
    call = machine.bind("fp_gemm_s", **args)
    space = direct_space(machine, call)
    assert space.keys["nt_kernel"].candidates({"split": "n"}) == ["transpose", "reduce"]
    serial = machine.call("fp_gemm_s", numerics=False, tiling={"nt_kernel": "reduce_serial"}, **args)
    merged = machine.call("fp_gemm_s", numerics=False, tiling={"nt_kernel": "reduce"}, **args)
    assert all(t["nt_kernel"] == "reduce_serial" for t, _ in serial.tiling.candidates)
    assert merged.cycles < serial.cycles
    with pytest.raises(sim.KernelArgError, match=r"tiling\.nt_kernel.*reduce_serial.*A that is not"):
        run_gemm("FT78NE", "fp_gemm_s", 24, 24, 64, trans_a=1, trans_b=1, tiling={"nt_kernel": "reduce_serial"})
    with pytest.raises(sim.KernelArgError, match=r"tiling\.nt_kernel.*reduce_serial.*c_home ddr"):
        run_gemm("FT78NE", "fp_gemm_s", 24, 24, 64, trans_b=1,
                 tiling={"nt_kernel": "reduce_serial", "c_home": "am"})


@pytest.mark.parametrize("where, tiling, why", [
    (dict(trans_a=1, trans_b=1), {"nt_kernel": "reduce_serial"}, "A that is not"),  # both formulations refuse it
    (dict(trans_b=1, precision="hp"), {"nt_kernel": "reduce_serial"}, "A that is not"),  # fp16 on MT7004
    (dict(trans_b=1), {"nt_kernel": "reduce_serial", "split": "k"}, "split k"),
    (dict(trans_b=1), {"nt_kernel": "reduce", "c_home": "am"}, "c_home ddr only"),
])
def test_an_nt_kernel_the_call_cannot_run_is_refused_before_the_search_completes_it(where, tiling, why):
    """A partial tiling asking for an NT reduction kernel that no completion can run is refused up front, with the
    message a full tiling gets (naming tiling.nt_kernel), not after its hundreds of completions were each refused
    and listed as the search's nearest misses."""
    chip, symbol = ("MT7004", "hp_gemm_s") if where.pop("precision", None) == "hp" else ("FT78NE", "fp_gemm_s")
    machine = sim.Simulator(chip, tuning_cache=False)
    args = dict(a=DDR[0], b=DDR[1], c=DDR[2], m=300, n=200, k=700, **where)
    with pytest.raises(sim.KernelArgError, match=r"^argument 'tiling\.nt_kernel'") as got:
        machine.call(symbol, numerics=False, tiling=tiling, **args)
    assert why in str(got.value) and "tried" not in str(got.value)


@pytest.mark.parametrize("nt_kernel, floor", [("reduce", 6), ("reduce_serial", 8)])
def test_deep_nt_blocks_halve_the_b_block_below_a_vector(nt_kernel, floor):
    """An NT kernel's B block is rows of B, not vectors: at a depth where two 32-row blocks and the A panels do not
    fit AM (k_block 4096 fp32, the published K_A 2048 fp64: 16 KiB a row), the space halves it on, down to one NT
    block's columns, as the published schedules do (N_A 64, 32, 16 for K_A 512, 1024, 2048); before, it stopped at
    a vector's 32 and no tiling of that depth fitted."""
    machine = sim.Simulator("FT78NE", tuning_cache=False)
    args = dict(a=DDR[0], b=DDR[1], c=DDR[2], m=12, n=64, k=4096, trans_b=1, core_mask=0x1)
    call = machine.bind("fp_gemm_s", **args)
    space = direct_space(machine, call)
    chosen = {"split": "n", "nt_kernel": nt_kernel, "c_home": "ddr", "a_loader": "cores", "a_buffers": 2,
              "b_staging": "am", "m_micro": 6 if nt_kernel == "reduce_serial" else 3, "k_block": 4096,
              "m_panel": 6, "m_block": 12}
    values = space.keys["n_block"].candidates(chosen)
    assert min(values) >= floor and any(v < 32 for v in values)
    run = machine.call("fp_gemm_s", numerics=False, tiling={"formulation": "direct", "nt_kernel": nt_kernel,
                                                            "k_block": 4096}, **args)
    # AM: two B blocks and two 6-row A panels (one loading, one computing) of 16 KiB rows within 768 KiB:
    # 2 n + 12 <= 48, n <= 18: the published 16.
    assert run.tiling.tiling["n_block"] == 16 and run.tiling.tiling["k_block"] == 4096


# --- A staged in GSM on one core (a_staging) ---------------------------------------------------------------------

def _space_of(chip: str, symbol: str, mask: int, **args):
    machine = sim.Simulator(chip, tuning_cache=False)
    call = machine.bind(symbol, **args, **({"core_mask": mask} if symbol.endswith("_s") else {"core": 0}))
    return kernels.lookup(symbol).kernel.tiling_space(call, machine.context(call))


def test_a_staging_is_a_key_of_one_core_calls_and_of_split_m():
    """One core of an _s call chooses where its A panels come from, memory first; on several cores split m
    chooses, GSM first (each core's rows of A are its own), while split n always stages A and split k never (a key
    of split m only: absent from the others' tilings, so the climb steps between splits); a _p call has no shared
    level to stage in: no key there."""
    args = dict(a=DDR[0], b=DDR[1], c=DDR[2], m=100, n=200, k=300)
    one = _space_of("FT78NE", "fp_gemm_s", 0x1, **args)
    assert one.keys["a_staging"].candidates({"split": "n"}) == ["memory", "gsm"]
    several = _space_of("FT78NE", "fp_gemm_s", 0xFF, **args)
    assert several.keys["a_staging"].only == ("split", "m")
    assert several.keys["a_staging"].candidates({"split": "m"}) == ["gsm", "memory"]
    assert several.keys["a_staging"].candidates({"split": "k"}) == ["memory"]  # (split k stages nothing)
    assert "a_staging" not in _space_of("MT7004", "fp_gemm_p", 0x1, a=L2[0], b=L2[1], c=L2[2], m=100, n=200,
                                        k=300).keys


@pytest.mark.parametrize("trans_b, nt_kernel", [(0, "transpose"), (1, "reduce_serial")])
def test_one_core_staging_a_in_gsm_matches_numpy_and_reads_a_from_memory_once(trans_b, nt_kernel):
    """One core, a_staging gsm: A's blocks go memory -> GSM once, then each panel GSM -> SM (or AM for the NT
    kernel), re-read from GSM for every column block; the result is numpy's."""
    run, got, want, _ = run_gemm("FT78NE", "fp_gemm_s", 40, 96, 256, trans_b=trans_b, beta=1,
                                 where={"core_mask": 0x1},
                                 tiling={"a_staging": "gsm", "nt_kernel": nt_kernel, "n_block": 32})
    assert_close(got, want, 256)
    assert run.tiling.tiling["a_staging"] == "gsm"
    a_lo, a_hi = DDR[0], DDR[0] + 40 * 256 * 4
    from_a = [e for e in run.events if e.kind == "dma_in" and e.src is not None and a_lo <= e.src < a_hi]
    assert from_a and all(e.dst_region == "gsm" for e in from_a)
    assert sum(e.bytes for e in from_a) == 40 * 256 * 4  # once, though three column blocks use it
    panels = [e for e in run.events if e.kind == "dma_in" and e.src_region == "gsm"]
    assert sum(e.bytes for e in panels) == 3 * 40 * 256 * 4


def test_a_one_core_gsm_fill_costs_what_the_target_file_gives():
    """One core, 24 x 32 x 64, A staged in GSM: the block's one descriptor moves 24 x 64 fp32 = 6,144 bytes, 96
    whole 64-byte bursts of DDR in one row, in the same staging tile as the B block (64 x 32 fp32, 8,192 bytes from
    DDR into AM).  Both are programmed at once (setup 64, an engine each) and share DDR's 20 B/cycle at equal byte
    rates (max-min fair; GSM's 64 B/cycle, the engines' 64 and one row's activation, 38 / 8 cycles, bind neither)
    until the smaller, A's, is done: ceil(6144 / 10) = 615 cycles of stream, 307 of them waiting for DDR, then
    the slower end's latency, DDR's 200."""
    doc = yaml.safe_load((Path(__file__).resolve().parents[2] / "targets" / "FT78NE.yaml").read_text())
    regions = {r["name"]: r for r in doc["regions"]}
    ddr, gsm = regions["ddr"], regions["gsm"]
    a_bytes, b_bytes = 24 * 64 * 4, 64 * 32 * 4
    assert a_bytes < b_bytes and a_bytes % ddr["burst_bytes"] == b_bytes % ddr["burst_bytes"] == 0
    share = ddr["bandwidth_bytes_per_cycle"] / 2
    assert max(gsm["bandwidth_bytes_per_cycle"], doc["dma"]["engine_bytes_per_cycle"]) > share
    assert ddr["rows"]["window_cycles"] / ddr["rows"]["activations_per_window"] < a_bytes / share
    stream = -(-a_bytes // share)
    alone = -(-a_bytes // ddr["bandwidth_bytes_per_cycle"])
    want = doc["dma"]["setup_cycles"] + stream + max(ddr["latency_cycles"], gsm["latency_cycles"])
    assert (stream, alone, want) == (615, 308, 64 + 615 + 200)
    run, got, ref, _ = run_gemm("FT78NE", "fp_gemm_s", 24, 32, 64, where={"core_mask": 0x1},
                                tiling={"a_staging": "gsm"})
    assert_close(got, ref, 64)
    fill = [e for e in run.events if e.kind == "dma_in" and e.dst_region == "gsm"]
    b_load = [e for e in run.events if e.kind == "dma_in" and e.src == DDR[1]]
    assert len(fill) == 1 and fill[0].bytes == a_bytes and fill[0].end - fill[0].start == want
    assert fill[0].wait_cycles == stream - alone and b_load[0].wait_start == fill[0].wait_start


def test_a_staging_is_refused_by_key_where_it_cannot_be():
    with pytest.raises(sim.KernelArgError, match=r"tiling.*unknown key 'a_staging'"):
        run_gemm("MT7004", "fp_gemm_p", 24, 24, 64, tiling={"a_staging": "gsm"})
    with pytest.raises(sim.KernelArgError, match=r"tiling\.a_staging.*applies to split 'm' only"):
        run_gemm("FT78NE", "fp_gemm_s", 96, 96, 64, where={"core_mask": 0x3},
                 tiling={"split": "n", "a_staging": "memory"})
    with pytest.raises(sim.KernelArgError, match=r"tiling\.a_loader.*a_staging memory"):
        run_gemm("FT78NE", "fp_gemm_s", 96, 96, 64, where={"core_mask": 0x3},
                 tiling={"a_staging": "memory", "a_loader": "core0"})
    with pytest.raises(sim.KernelArgError, match=r"tiling\.a_buffers"):
        run_gemm("FT78NE", "fp_gemm_s", 24, 24, 64, where={"core_mask": 0x1},
                 tiling={"a_staging": "memory", "a_buffers": 1})


def test_split_n_offers_column_blocks_that_share_the_columns_out_evenly():
    """Split n shares C's columns out in micro-kernel widths.  1152 columns on FT78NE's 8 cores in the published
    128: 9 blocks, one core gets two (256 columns, the mean is 144), and the run waits for it.  The space also offers
    the widest equal split of a core's 144 columns into whole vectors no wider than 128 (two of 72, whole vectors:
    96), 12 blocks, no core more than 192 columns; the search takes it, more than 15 % faster than 128 forced."""
    machine = sim.Simulator("FT78NE", tuning_cache=False)
    args = dict(a=DDR[0], b=DDR[1], c=DDR[2], m=384, n=1152, k=256, core_mask=0xFF, numerics=False)
    picked = machine.call("fp_gemm_s", **args)
    forced = machine.call("fp_gemm_s", tiling={"n_block": 128}, **args)
    assert (picked.tiling.tiling["n_block"], picked.tiling.tiling["n_micro"]) == (96, 96)
    assert forced.tiling.tiling["n_micro"] == 128
    assert picked.cycles < 0.85 * forced.cycles
    assert picked.load_imbalance < forced.load_imbalance


# --- split m with A's panels read straight from memory (a_staging memory on several cores) -------------------------

def test_split_m_reading_a_from_memory_matches_numpy_and_reads_a_once_with_no_gsm_block():
    """Split m on 4 cores, A's panels straight from memory, B staged in GSM: every element of A leaves DDR once,
    into a core's SM (no GSM block of A: the layout places only B's two blocks there), B's blocks once into GSM;
    C is numpy's.  Asking for the key sets split m."""
    m, n, k = 96, 64, 128
    run, got, want, _ = run_gemm("FT78NE", "fp_gemm_s", m, n, k, beta=1, where={"core_mask": 0xF},
                                 tiling={"a_staging": "memory", "b_staging": "gsm", "k_block": 64, "m_block": 96})
    assert_close(got, want, k)
    assert run.tiling.tiling["split"] == "m" and run.tiling.tiling["a_staging"] == "memory"
    a_lo, a_hi = DDR[0], DDR[0] + m * k * 4
    from_a = [e for e in run.events if e.kind == "dma_in" and e.src is not None and a_lo <= e.src < a_hi]
    assert sum(e.bytes for e in from_a) == m * k * 4 and {e.dst_region for e in from_a} == {"sm"}
    assert len({e.core for e in from_a}) == 4
    into_gsm = [e for e in run.events if e.kind == "dma_in" and e.dst_region == "gsm"]
    assert sum(e.bytes for e in into_gsm) == k * n * 4  # B only, once


def test_the_next_b_blocks_copy_from_gsm_streams_within_the_step_not_after_it():
    """With B staged in GSM, a step's staging pieces (the next B block's shares) follow its first third of compute
    tiles, one after each, and the copy of that block into AM right after them, while the step still computes
    (it used to come after the step's last tile, the next step's first tile waiting for it).  Two cores, 12 panels
    each per k block of 64, four k blocks: s a share, c a copy, C a compute, in each core's tile order."""
    run, got, want, _ = run_gemm("FT78NE", "fp_gemm_s", 288, 64, 256, where={"core_mask": 0x3},
                                 tiling={"a_staging": "memory", "b_staging": "gsm", "k_block": 64, "m_block": 288,
                                         "m_panel": 12})
    assert_close(got, want, 256)
    pieces = (12 + 2) // 3
    step = "C" + "sC" * pieces + "c" + "C" * (12 - 1 - pieces)
    for core, tiles in run.plan.phases[0].tiles.items():
        kinds = "".join("C" if t.compute is not None else
                        "c" if any(str(r).startswith("gsm.b") for r in t.uses) else "s" for t in tiles)
        assert kinds == "sc" + step * 3 + "C" * 12, core


def test_on_thin_b_the_search_prices_the_published_direct_scheme_once_its_climb_ends():
    """FT78NE, 8 cores, 768 x 192 x 512 (B thin: split m preferred): the climb ends at split m, A from memory,
    in 128-column blocks (its budget spent on the steps around the preferred tiling); the space's thin-B start,
    the published direct scheme with all 192 columns a block, is priced then and wins, with 96-column
    micro-kernels and B broadcast to the cores (142,129 cycles; 159,515 with B shared through GSM, the published
    scheme as it is): more than 15 % fewer cycles than the climb's end with the same keys (219,790)."""
    run = sim.Simulator("FT78NE", tuning_cache=False).call(
        "fp_gemm_s", a=DDR[0], b=DDR[1], c=DDR[2], m=768, n=192, k=512, core_mask=0xFF, numerics=False)
    got = run.tiling.tiling
    assert (got["split"], got["a_staging"], got["b_staging"], got["n_block"]) == ("m", "memory", "broadcast", 192)
    climbs_end = {**got, "n_block": 128, "n_micro": 128}
    other = sim.Simulator("FT78NE", tuning_cache=False).call(
        "fp_gemm_s", a=DDR[0], b=DDR[1], c=DDR[2], m=768, n=192, k=512, core_mask=0xFF, numerics=False,
        tiling=climbs_end)
    assert run.cycles < 0.85 * other.cycles


def test_with_a_from_memory_split_m_takes_the_tallest_m_block_whose_c_block_fits_am():
    """Split m, A's panels from memory: an m block only says how many rows a B block serves, so its one value is
    the tallest of m and its halvings whose C block fits AM beside two B blocks at all of B's columns.  12288 x 192
    x 4096 on 8 cores, k_block 256, from targets/FT78NE.yaml's AM: a 6144-row block gives each core 768 rows of
    C, 768 x 192 x 4 = 589,824 bytes, and two B blocks 2 x 256 x 192 x 4 = 393,216: over the 786,432 bytes of AM;
    3072 rows: 294,912 + 393,216 + the C tiles' slots fit."""
    doc = yaml.safe_load((Path(__file__).resolve().parents[2] / "targets" / "FT78NE.yaml").read_text())
    am = next(r for r in doc["regions"] if r["name"] == "am")["size_bytes"]
    b_blocks = 2 * 256 * 192 * 4
    assert 6144 // 8 * 192 * 4 + b_blocks > am > 3072 // 8 * 192 * 4 + b_blocks
    space = _space_of("FT78NE", "fp_gemm_s", 0xFF, a=DDR[0], b=DDR[1], c=DDR[2], m=12288, n=192, k=4096)
    t = {"split": "m", "nt_kernel": "transpose", "c_home": "am", "a_staging": "memory", "a_loader": "cores",
         "a_buffers": 2, "b_staging": "gsm", "m_micro": 6, "k_block": 256, "m_panel": 12}
    assert space.keys["m_block"].candidates(t) == [3072]
    assert space.keys["m_block"].candidates({**t, "a_staging": "gsm"})[0] == 576  # a GSM block: the published


def test_a_b_block_that_is_not_a_multiple_of_the_widest_micro_kernel_prefers_an_even_split():
    """192 columns are 2 x 96 before 128 + 64 (the 64-column kernel keeps 6 x 2 vector accumulators, fewer than
    FT78NE's 3 FMAC units times their 6-cycle latency: its loop is bound by the recurrence; 6 x 3 cover it); a
    128- or 256-column block keeps the published 128 first."""
    core = sim.load_target("FT78NE").core
    fmac, lanes = core.units["fmac"], core.precisions["fp32"].lanes
    assert 6 * 64 // lanes < fmac.count * fmac.latency_cycles <= 6 * 96 // lanes
    space = _space_of("FT78NE", "fp_gemm_s", 0xFF, a=DDR[0], b=DDR[1], c=DDR[2], m=12288, n=192, k=4096)
    t = {"split": "m", "nt_kernel": "transpose", "c_home": "am", "a_staging": "memory", "a_loader": "cores",
         "a_buffers": 2, "b_staging": "gsm", "m_micro": 6, "k_block": 256, "m_panel": 12, "m_block": 3072}
    assert space.keys["n_micro"].candidates({**t, "n_block": 192})[:2] == [96, 128]
    assert space.keys["n_micro"].candidates({**t, "n_block": 128})[0] == 128


@pytest.mark.parametrize("mask,shape,trans_b", [(0x3, (37, 45, 29), 0), (0xFF, (37, 45, 29), 0),
                                                (0xF, (130, 70, 200), 1)])
def test_b_broadcast_leaves_out_the_cores_without_rows_in_a_block(mask, shape, trans_b):
    """Split m with B broadcast and A's blocks of fewer panels than cores: a core with no panel in a block took part
    in its B block's broadcast all the same; with no tile computing, its walk passed through its staging tiles at
    once, two members took both its engines while they waited for core 0, and core 0 waited for the A blocks that
    core still had to load: the run stalled. Such a core now takes no B block, and C is right."""
    m, n, k = shape
    tiling = {"split": "m", "nt_kernel": "transpose", "c_home": "ddr", "a_staging": "gsm", "a_loader": "cores",
              "a_buffers": 2, "b_staging": "broadcast", "m_micro": 6, "k_block": 14, "m_panel": 12, "m_block": 12,
              "n_block": n, "n_micro": 64}
    run, got, want, _ = run_gemm("FT78NE", "fp_gemm_s", m, n, k, trans_b=trans_b, where={"core_mask": mask},
                                 tiling=tiling)
    assert_close(got, want, k)
    members = {e.core for e in run.events if e.kind == "dma_in" and e.src is not None
               and DDR[1] <= e.src < DDR[1] + k * n * 4}
    assert members == {0}  # 12-row blocks: one panel each, core 0's
