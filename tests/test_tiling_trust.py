"""Tiling you can trust (issue 21) and what the tuning cache and plan sizes owed (issue 20, items 3, 8, 9).

* the GEMM shapes that aborted (column blocks spread unevenly over the cores) run, and compute C right;
* a partial tiling fixes its keys and the search completes the others; a full one that does not fit names the
  level, the bytes over and the nearest values of its keys that fit;
* ``Run.idle_cores``, the balance line and a roofline that counts every core's work;
* a tiling beyond the plan-size budget is refused before it is planned, naming the key and the count, from a
  call and from a poisoned tuning-cache entry alike;
* a warm tuning cache gives the trace a cold one gives, byte for byte; its summary says the choice came from
  the cache.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import sim
from sim.files import tuning_cache
from sim.tuning import MAX_PLAN_TILES

ROOT = Path(__file__).resolve().parent.parent
A, B, C = 0x80000000, 0x90000000, 0xA0000000


def gemm(chip: str, symbol: str, m: int, n: int, k: int, mask: int, **kw) -> sim.Run:
    """A timing-only GEMM call on a fresh simulator without the disk cache."""
    return sim.Simulator(chip, tuning_cache=False).call(symbol, a=A, b=B, c=C, m=m, n=n, k=k, core_mask=mask,
                                                        numerics=False, **kw)


def assert_pick_beats(chip: str, shape: tuple[int, int, int], mask: int, tiling: dict, before: int, **kw) -> None:
    """The search's pick for an fp32 GEMM costs at most ``tiling`` forced, which beats the pick of ``before``
    cycles that a search miss left."""
    run = gemm(chip, "fp_gemm_s", *shape, mask, **kw)
    forced = gemm(chip, "fp_gemm_s", *shape, mask, tiling=tiling, **kw)
    assert run.cycles <= forced.cycles < before


# --- the shapes that aborted ---------------------------------------------------------------------------

@pytest.mark.parametrize("chip,symbol,m,n,k,mask", [
    ("FT78NE", "fp_gemm_s", 512, 1536, 512, 0xFF),   # 12 column blocks over 8 cores
    ("MT7004", "fp_gemm_s", 144, 640, 512, 0xF),      # 10 over 4
    ("MT7004", "hp_gemm_s", 512, 768, 512, 0xF),      # 6 over 4
])
def test_gemm_shapes_that_aborted_run(chip, symbol, m, n, k, mask):
    run = gemm(chip, symbol, m, n, k, mask)
    assert run.tiling.source == "cost model" and run.cycles >= run.roofline.cycles
    # Every split-n candidate the search planned is legal now: none is among the dropped for a plan rule.
    assert not any("plan rule" in why for _, why in run.tiling.dropped)
    assert any(c["split"] == "n" and cycles is not None for c, cycles in run.tiling.candidates)


def test_uneven_column_blocks_compute_c_right():
    """Five 32-column chunks over three cores (two, two, one): the core with fewer B blocks numbers its
    generations over its own steps; C is right to the last element."""
    rng = np.random.default_rng(4)
    m_, n_, k_ = 40, 5 * 32, 96
    a, b = rng.standard_normal((m_, k_), dtype=np.float32), rng.standard_normal((k_, n_), dtype=np.float32)
    s = sim.Simulator("MT7004", tuning_cache=False)
    s.write(A, a)
    s.write(B, b)
    tiling = {"split": "n", "c_home": "am", "a_loader": "cores", "a_buffers": 2, "b_staging": "am",
              "m_micro": 6, "n_micro": 32, "m_panel": 12, "k_block": 32, "m_block": 24, "n_block": 32}
    run = s.call("fp_gemm_s", a=A, b=B, c=C, m=m_, n=n_, k=k_, core_mask=0b111, tiling=tiling)
    assert run.tiling.source == "given"
    np.testing.assert_allclose(s.read(C, (m_, n_), np.float32), a @ b, rtol=1e-4, atol=1e-4)


# --- partial and full tilings ----------------------------------------------------------------------------

@pytest.mark.parametrize("k_block,shape", [(32, (128, 256, 256)), (1024, (256, 512, 1024))])
def test_a_partial_tiling_fixes_its_key_and_the_search_completes_the_rest(k_block, shape):
    """k_block alone: 32 deep, and 1024 deep on 256x512x1024, where the published 128-column B blocks do not fit
    AM and 12-row panels do not fit SM; the search finds the completions that do (64 columns, 6 rows)."""
    run = gemm("FT78NE", "fp_gemm_s", *shape, 0xFF, tiling={"k_block": k_block})
    assert run.tiling.source == "cost model" and run.tiling.fixed == {"k_block": k_block}
    assert run.tiling.tiling["k_block"] == k_block
    assert all(c["k_block"] == k_block for c, _ in run.tiling.candidates)
    assert f"with {{'k_block': {k_block}}} given" in run.tiling.describe()


def test_every_single_key_of_a_space_can_be_fixed_alone():
    """For each key of GEMM's and the fused batch norm's spaces, each of the values the kernel's preferred
    tiling has: the call runs with that key alone given, and the choice keeps it."""
    calls = [("fp_gemm_s", dict(a=A, b=B, c=C, m=60, n=96, k=80, core_mask=0x3F)),
             ("fp_fused_batch_norm_grad_s", dict(y_backprop=A, x=B, scale=C, reserve_space_1=C + 0x10000,
                                                 reserve_space_2=C + 0x20000, x_backprop=C + 0x1000000,
                                                 scale_backprop=C + 0x30000, offset_backprop=C + 0x40000,
                                                 shape=[2, 9, 9, 40]))]
    for symbol, args in calls:
        m = sim.Simulator("FT78NE", tuning_cache=False)
        preferred = m.plan_with_choice(symbol, **args)[2].tiling
        for key, value in preferred.items():
            run = m.call(symbol, numerics=False, tiling={key: value}, **args)
            assert run.tiling.tiling[key] == value, (symbol, key)


def test_a_full_tiling_that_does_not_fit_names_the_level_the_bytes_and_the_nearest_values():
    tiling = {"split": "n", "c_home": "am", "a_loader": "cores", "a_buffers": 2, "b_staging": "am",
              "m_micro": 6, "n_micro": 128, "m_panel": 12, "k_block": 1024, "m_block": 256,
              "n_block": 128}
    with pytest.raises(sim.LayoutError) as info:
        gemm("FT78NE", "fp_gemm_s", 256, 512, 1024, 0xFF, tiling=tiling)
    text = str(info.value)
    assert "scratchpad-fit" in text and "am level" in text and "do not fit" in text
    assert "the nearest that fit:" in text and "k_block=" in text
    # The value named fits: the tiling with it runs.
    nearest = int(text.split("k_block=")[1].split()[0].rstrip(")"))
    assert nearest < 1024
    gemm("FT78NE", "fp_gemm_s", 256, 512, 1024, 0xFF, tiling={**tiling, "k_block": nearest})


def test_a_call_nothing_fits_names_the_nearest_misses():
    """A 64-KiB-row GEMM on a chip copy whose AM is 16 KiB: every candidate is over, and the error lists the
    closest ones with their level and bytes over."""
    with pytest.raises(sim.LayoutError) as info:
        gemm("FT78NE", "fp_gemm_s", 64, 16384, 64, 0xFF, tiling={"n_block": 16384})
    text = str(info.value)
    assert "bytes over" in text and "no tiling with {'n_block': 16384} given" in text


# --- honest utilisation ------------------------------------------------------------------------------------

def test_a_call_too_small_for_every_core_says_which_idle():
    """Fake quant of 40 elements on eight cores: two vectors of work, so at most two cores get a tile."""
    run = sim.Simulator("FT78NE", tuning_cache=False).call(
        "fp_fake_quant_with_min_max_vars_gradient_s", numerics=False, gradients=A, inputs=B, min=C, max=C + 64,
        backprops_wrt_input=C + 0x1000000, backprop_wrt_min=C + 128, backprop_wrt_max=C + 192, shape=[40])
    assert len(run.idle_cores) >= 6 and set(run.idle_cores) < set(range(8))
    text = run.summary_text()
    assert f"cores {list(run.idle_cores)} idle" in text and "gives them no work" in text
    assert run.load_imbalance > 3 and "load imbalance" in text
    assert run.metadata()["idle_cores"] == list(run.idle_cores)


def test_cores_that_only_stage_blocks_are_said_to_compute_nothing():
    """GEMM 8x32x16 on eight cores: one column block, so one core computes; the others only load their share of
    the shared A block (a_loader cores: with core0 they would not even do that)."""
    run = gemm("FT78NE", "fp_gemm_s", 8, 32, 16, 0xFF, tiling={"a_loader": "cores", "split": "n"})
    text = run.summary_text()
    assert "compute nothing" in text and "only transfers" in text and run.load_imbalance > 1.5


def test_a_core_whose_share_of_a_staged_block_is_empty_is_idle():
    """1 x 1 x 1 fp16 GEMM on MT7004 cores 1 and 3, A's GSM block loaded by the cores: core 3's share of the one
    row is empty, and its one tile loads, computes and stores nothing. It was not among the idle cores, and the
    summary said it "computes nothing" but moves data (an outside test's finding)."""
    m = sim.Simulator("MT7004", tuning_cache=False)
    run = m.call("hp_gemm_s", numerics=False, a=A, b=B, c=C, m=1, n=1, k=1, beta=1, core_mask=0b1010, tiling={
        "split": "n", "nt_kernel": "transpose", "c_home": "am", "a_loader": "cores", "a_buffers": 1,
        "b_staging": "am", "m_micro": 1, "k_block": 1, "m_panel": 1, "m_block": 1, "n_block": 1, "n_micro": 32})
    assert not any(e.core == 3 and e.kind in ("compute", "dma_in", "dma_out") for e in run.events)
    assert run.idle_cores == (3,) and run.metadata()["idle_cores"] == [3]
    text = run.summary_text()
    assert "cores [3] idle" in text and "compute nothing" not in text


def test_a_call_that_uses_every_core_says_so():
    run = gemm("FT78NE", "fp_gemm_s", 512, 1024, 256, 0xFF)
    assert run.idle_cores == ()
    assert "every core of the call computed" in run.summary_text()
    assert 1.0 <= run.load_imbalance < 1.2


def test_an_unbalanced_tiling_no_longer_reads_as_near_its_bound():
    """Conv2DBackpropFilter with one filter slice on eight cores: one core works, seven idle, and the bound
    (every core's work spread over the call's cores) says the run is far from it."""
    args = dict(input=A, out_backprop=B, output=C, input_shape=[4, 28, 28, 64], filter_sizes=[3, 3, 64, 64],
                strides=[1, 1, 1, 1], padding="SAME")
    m = sim.Simulator("FT78NE", tuning_cache=False)
    lone = m.call("fp_conv2d_backprop_filter_s", numerics=False,
                  tiling={"split": "filter", "in_c_slice": 64, "out_c_slice": 64}, **args)
    assert len(lone.idle_cores) == 7 and lone.load_imbalance == pytest.approx(8, rel=0.01)
    assert lone.roofline_fraction < 0.2
    # The cores' work alone: the busiest core's loops are what the roofline's compute spreads over eight.
    assert lone.roofline.busiest_core_cycles["compute"] == pytest.approx(8 * lone.roofline.resource_cycles["compute"])
    best = m.call("fp_conv2d_backprop_filter_s", numerics=False, **args)
    assert best.roofline_fraction > 3 * lone.roofline_fraction


# --- the plan-size budget ------------------------------------------------------------------------------------

def test_a_tiling_beyond_the_plan_size_budget_is_refused_before_planning():
    tiling = {"split": "n", "c_home": "am", "a_loader": "cores", "a_buffers": 2, "b_staging": "am",
              "m_block": 384, "n_block": 16, "k_block": 1, "m_panel": 1, "m_micro": 1, "n_micro": 16}
    with pytest.raises(sim.KernelArgError) as info:
        gemm("FT78NE", "fp_gemm_s", 384, 512, 512, 0xFF, tiling=tiling)
    text = str(info.value)
    assert "tiles" in text and str(MAX_PLAN_TILES) in text and "raise tiling." in text
    with pytest.raises(sim.KernelArgError, match="tiles"):
        sim.Simulator("FT78NE").call("fp_fake_quant_with_min_max_vars_gradient_s", numerics=False, gradients=A,
                                     inputs=B, min=C, max=C + 64, backprops_wrt_input=C + 0x1000000,
                                     backprop_wrt_min=C + 128, backprop_wrt_max=C + 192, shape=[1 << 20],
                                     tiling={"tile_elements": 1})


def test_a_search_whose_every_tiling_is_beyond_the_budget_says_so_with_the_fewest_tiles_first(monkeypatch):
    """With the budget at 5 tiles no tiling of a 96 x 256 x 256 GEMM on 8 cores plans: the error lists the nearest
    misses fewest tiles first, each with its count (not cut off after repeating the tiling)."""
    import re

    import sim.tuning.misses
    monkeypatch.setattr(sim.tuning.misses, "MAX_PLAN_TILES", 5)
    with pytest.raises(sim.KernelArgError) as info:
        gemm("FT78NE", "fp_gemm_s", 96, 256, 256, 0xFF)
    text = str(info.value)
    assert text.startswith("the call (no tiling given): no tiling of the kernel's space plans")  # (none was given)
    counts = [int(n) for n in re.findall(r"the tiling plans up to (\d+) tiles \(the kernel's count without "
                                         r"planning: an upper bound\), more than the 5 a plan may have", text)]
    assert len(counts) == 3 and counts == sorted(counts) and counts[0] > 5


def test_a_poisoned_cache_entry_beyond_the_budget_is_ignored(tmp_path, monkeypatch):
    monkeypatch.setenv(tuning_cache.ENV_VAR, str(tmp_path))
    args = dict(a=A, b=B, c=C, m=96, n=128, k=128, core_mask=0xFF)
    m = sim.Simulator("FT78NE")
    first = m.call("fp_gemm_s", numerics=False, **args)
    (entry,) = tuning_cache.entries()
    doc = json.loads(entry.read_text())
    doc["tiling"] = {**doc["tiling"], "k_block": 1, "m_panel": 1, "m_micro": 1, "n_block": 16, "n_micro": 16}
    entry.write_text(json.dumps(doc))
    again = sim.Simulator("FT78NE").call("fp_gemm_s", numerics=False, **args)
    assert not again.tiling.cached and again.tiling.tiling == first.tiling.tiling  # searched afresh


# --- the tuning cache's word and its determinism ----------------------------------------------------------

#: One shipped config of each kernel with a tiling space (both chips, both variants among them).
CONFIGS = [ROOT / "configs" / f"{name}.yaml" for name in (
    "ft78ne_batch_norm_grad_s", "mt7004_fused_batch_norm_grad_p", "mt7004_hp_fake_quant_with_min_max_vars_gradient_s",
    "ft78ne_conv2d_backprop_filter_s", "ft78ne_depthwise_conv2d_backprop_input_s", "mt7004_hp_gemm_s")]


@pytest.mark.parametrize("config", CONFIGS, ids=[p.stem for p in CONFIGS])
def test_a_warm_cache_writes_the_trace_a_cold_one_writes(tmp_path, monkeypatch, config):
    """A shipped config of each kernel, timing only: the run whose choice came from the tuning cache writes the
    trace, byte for byte, that the run which searched wrote."""
    from sim.config.run_config import load_config
    from sim.run.runner import prepare
    monkeypatch.setenv(tuning_cache.ENV_VAR, str(tmp_path / "cache"))
    monkeypatch.delenv(tuning_cache.NO_CACHE_ENV_VAR, raising=False)
    cfg = load_config(config)
    cold, warm = (prepare(cfg, numerics=False).call(cfg.symbol, numerics=False, tiling=cfg.tiling, **cfg.args)
                  for _ in range(2))
    if cold.tiling.source != "cost model":
        assert cold.tiling == warm.tiling  # given or single-plan: nothing cached
        return
    assert not cold.tiling.cached and warm.tiling.cached
    assert list(warm.tiling.tiling) == list(cold.tiling.tiling)  # the kernel's key order, not the file's sorted one
    cold.write_trace(tmp_path / "cold.json")
    warm.write_trace(tmp_path / "warm.json")
    assert (tmp_path / "cold.json").read_bytes() == (tmp_path / "warm.json").read_bytes()
    said = warm.tiling.describe()
    assert said.startswith(f"tiling {warm.tiling.tiling} from the tuning cache (searched on ")
    assert "from the tuning cache" not in cold.tiling.describe()


def test_no_candidate_is_listed_or_simulated_twice():
    """Conv2DBackpropFilter 8x56x56x128, 3x3, stride 2 listed one filter split twice: a space's tilings are
    each one once."""
    run = sim.Simulator("FT78NE", tuning_cache=False).call(
        "fp_conv2d_backprop_filter_s", numerics=False, input=A, out_backprop=B, output=C,
        input_shape=[8, 56, 56, 128], filter_sizes=[3, 3, 128, 128], strides=[1, 2, 2, 1], padding="SAME")
    listed = [repr(c) for c, _ in run.tiling.candidates] + [repr(c) for c, _ in run.tiling.dropped]
    assert len(listed) == len(set(listed)) >= 2


# --- what an outside attack on ordinary shapes found (stop 55) ------------------------------------------

def _conv_filter(chip: str, symbol: str, shape: list[int], filt: list[int], mask: int, **kw) -> sim.Run:
    return sim.Simulator(chip, tuning_cache=False).call(
        symbol, input=A, out_backprop=B, output=C, input_shape=shape, filter_sizes=filt, strides=[1, 1, 1, 1],
        padding="SAME", core_mask=mask, numerics=False, **kw)


def test_a_3x3_512_to_512_filter_gradient_plans():
    """ResNet's last 3x3 layer: the slices whose accumulator takes half of AM are 512 x 16 channels, whose
    per-slice drain (taps x input channels tiles) makes the plan 147,744 tiles, over the budget; the space once
    offered nothing else and the call aborted.  Slices of fewer input channels plan it."""
    run = _conv_filter("FT78NE", "fp_conv2d_backprop_filter_s", [1, 7, 7, 512], [3, 3, 512, 512], 0xFF)
    assert run.tiling.tiling["in_c_slice"] < 512 and run.cycles > 0


def test_a_slice_whose_accumulator_takes_more_than_half_of_am_is_a_candidate():
    """MT7004 fp16, 1x14x14x256 NCHW, 3x3 to 256: the half-of-AM slices (256 x 16) took 1,160,594 cycles; the
    space now also offers slices whose accumulator leaves just two one-row slots, and fewer input channels where
    the accumulator cut the output channels, and the search's pick is far cheaper.  A full tiling past half of
    AM is judged by the same rule whether the caller gives every key or some."""
    run = sim.Simulator("MT7004", tuning_cache=False).call(
        "hp_conv2d_backprop_filter_s", input=A, out_backprop=B, output=C, input_shape=[1, 256, 14, 14],
        filter_sizes=[3, 3, 256, 256], strides=[1, 1, 1, 1], padding="SAME", data_format="NCHW",
        numerics=False)
    assert run.cycles < 0.8 * 1_160_594
    partial = _conv_filter("FT78NE", "fp_conv2d_backprop_filter_s", [2, 28, 28, 128], [3, 3, 128, 128], 0xFF,
                           tiling={"out_c_slice": 128})
    full = _conv_filter("FT78NE", "fp_conv2d_backprop_filter_s", [2, 28, 28, 128], [3, 3, 128, 128], 0xFF,
                        tiling={"split": "spatial", "in_c_slice": 128, "out_c_slice": 128})
    assert partial.cycles == full.cycles


def test_a_tt_gemm_searches_the_direct_formulation_too():
    """C = Aᵀ·Bᵀ of 513 x 511 x 3 on three MT7004 cores, fp16: the transposed formulation (the published TT loop
    nest) took 92,885 cycles; the direct one, now searched after it, is under half of that."""
    run = gemm("MT7004", "hp_gemm_s", 513, 511, 3, 0x7, trans_a=1, trans_b=1)
    assert run.tiling.tiling["formulation"] == "direct" and run.cycles < 0.5 * 92_885


def test_the_search_tries_b_broadcast_on_split_m():
    """A 127 x 129 x 255 TT GEMM on 8 FT78NE cores: with B's blocks broadcast to every core (one synchronised
    read of DDR) the search's pick is 58 % faster than the best plan without (36,714 cycles)."""
    run = gemm("FT78NE", "fp_gemm_s", 127, 129, 255, 0xFF, trans_a=1, trans_b=1)
    assert run.tiling.tiling["b_staging"] == "broadcast" and run.cycles < 0.7 * 36_714


def test_a_core_left_without_a_column_block_is_not_left_idle_when_split_m_is_faster():
    """384 x 512 x 512 on seven FT78NE cores: split n's 96-column blocks leave core 6 without one (244,282
    cycles); the search now prices B broadcast on split m, all of B's columns a block, after its climb, and takes
    it: every core busy, 18 % fewer cycles."""
    run = gemm("FT78NE", "fp_gemm_s", 384, 512, 512, 0x7F)
    assert run.idle_cores == () and run.tiling.tiling["split"] == "m" and run.cycles < 0.9 * 244_282


def test_partial_tilings_that_have_a_completion_plan():
    """One core asked for on a fake-quant call larger than a slot: tiles as large as a slot holds (the whole
    call was its one value); a thin C's n_block the transposed formulation takes (the direct one's range is
    1..n): the search completes with the formulation whose range it is in, and a full tiling out of the range
    names the formulation."""
    m = sim.Simulator("MT7004", tuning_cache=False)
    run = m.call("hp_fake_quant_with_min_max_vars_gradient_s", gradients=A, inputs=B, min=C, max=C + 64,
                 backprops_wrt_input=C + 0x100000, backprop_wrt_min=C + 128, backprop_wrt_max=C + 192,
                 shape=[64, 128, 128], numerics=False, tiling={"cores": 1})
    assert run.tiling.tiling["cores"] == 1
    got = gemm("FT78NE", "fp_gemm_s", 1025, 7, 257, 0xFF, tiling={"n_block": 128})
    assert (got.tiling.tiling["formulation"], got.tiling.tiling["n_block"]) == ("transposed", 128)
    with pytest.raises(sim.KernelArgError, match=r"tiling\.n_block': expected an integer in 1\.\.7, got 128 with "
                                                 r"formulation direct"):
        gemm("FT78NE", "fp_gemm_s", 1025, 7, 257, 0xFF, tiling={"formulation": "direct", "n_block": 128})


def test_each_formulation_is_climbed_on_its_own():
    """C = Aᵀ·Bᵀ of 3136 x 64 x 32 on one FT78NE core: the transposed formulation's climb reaches C streamed in
    512-column blocks (102,027 cycles) only if it stays among its own tilings; a direct tiling priced in its first
    round once ended it there, and the pick was the direct one's 122,509."""
    run = gemm("FT78NE", "fp_gemm_s", 3136, 64, 32, 0x1, trans_a=1, trans_b=1)
    assert run.cycles <= 102_027


def test_every_formulation_has_completions_of_its_own():
    """C = Aᵀ·Bᵀ of 300 x 200 x 700 on FT78NE: the transposed formulation's 4,068 completions came first and the
    direct one's best (A from memory, B broadcast: 124,964 cycles) was past the search's limit of completions, so
    its climb could not reach it; each now has a limit of its own, and the direct one's climb starts from its
    tiling nearest the first climb's end as well. (Since stop 58 the transposed one's 8-row micro-kernels win:
    114,514.)"""
    run = gemm("FT78NE", "fp_gemm_s", 300, 200, 700, 0xFF, trans_a=1, trans_b=1)
    assert run.cycles <= 124_964
    assert any(t.get("formulation") == "direct" for t, _ in run.tiling.candidates)


def test_a_small_space_with_a_bound_is_searched_whole():
    """Conv2DBackpropFilter of a 1x1 1024 -> 256 layer on five FT78NE cores: 18 fitting tilings, which a climb of
    one key at a time left at 512 x 64 slices (337,515 cycles); with a bound (the multiply-adds at the FMAC peak of
    the cores with work) the space is planned whole, lowest bound first, and the 256 x 256 slices are found."""
    run = sim.Simulator("FT78NE", tuning_cache=False).call(
        "fp_conv2d_backprop_filter_s", input=A, out_backprop=B, output=C, input_shape=[1, 1024, 14, 14],
        filter_sizes=[1, 1, 1024, 256], strides=[1, 1, 1, 1], padding="VALID", data_format="NCHW",
        core_mask=0x1F, numerics=False)
    assert run.cycles < 0.8 * 337_515


@pytest.mark.parametrize("out_c", [48, 96])
def test_the_filter_split_offers_input_channels_cut_evenly_over_the_cores(out_c):
    """Conv2DBackpropFilter of 1x15x15x33 with a 5x5 filter on four FT78NE cores: the space offered 33 input
    channels a slice only (the accumulator cut none), so the filter split gave every core a slice by cutting the
    output channels (12 of a vector's 32 lanes, for 48) and the pick was the spatial split (77,100 cycles for 48);
    11 x 48 slices, forced, ran in 65,801. The input channels cut evenly over the cores (9 + 9 + 9 + 6) are offered
    now, and the pick is at most what the forced slices take."""
    args = dict(input=A, out_backprop=B, output=C, input_shape=[1, 15, 15, 33], filter_sizes=[5, 5, 33, out_c],
                strides=[1, 1, 1, 1], padding="SAME", core_mask=0xF)
    run = sim.Simulator("FT78NE", tuning_cache=False).call("fp_conv2d_backprop_filter_s", numerics=False, **args)
    forced = sim.Simulator("FT78NE", tuning_cache=False).call(
        "fp_conv2d_backprop_filter_s", numerics=False,
        tiling={"split": "filter", "in_c_slice": 11, "out_c_slice": 48}, **args)
    assert run.cycles <= forced.cycles and run.idle_cores == ()


@pytest.mark.parametrize("chip,symbol,shape,filt,mask", [
    ("FT78NE", "fp_conv2d_backprop_filter_s", [1, 14, 14, 64], [3, 3, 64, 96], 0x1F),
    ("MT7004", "hp_conv2d_backprop_filter_s", [2, 7, 7, 128], [1, 1, 128, 160], 0x7),
])
def test_the_filter_gradients_bound_is_below_every_run_of_its_tilings(chip, symbol, shape, filt, mask):
    from kernels.registry import lookup
    m = sim.Simulator(chip, tuning_cache=False)
    args = dict(input=A, out_backprop=B, output=C, input_shape=shape, filter_sizes=filt, strides=[1, 1, 1, 1],
                padding="SAME", core_mask=mask)
    call = m.bind(symbol, **args)
    space = lookup(symbol).kernel.tiling_space(call, m.context(call))
    tilings, _ = space.completions({}, 64)
    ran = 0
    for t in tilings:
        try:
            run = sim.Simulator(chip, tuning_cache=False).call(symbol, numerics=False, tiling=t, **args)
        except sim.SimError:
            continue  # (a tiling that does not fit)
        assert space.bound(dict(t)) <= run.cycles, t
        ran += 1
    assert ran >= 3


def test_a_start_whose_nearest_tiling_its_bound_rules_out_is_tried_at_its_lowest_bound():
    """300 x 200 x 700 with B transposed on MT7004: the NT kernel's tiling nearest the climb's end (B loaded by every
    core, 128-column blocks) is out of reach by its bound and was all the search tried of it (the pick 320,378
    cycles); the NT kernel's tiling of the lowest bound (B broadcast, all 200 columns a block) is 285,888."""
    run = gemm("MT7004", "fp_gemm_s", 300, 200, 700, 0xF, trans_b=1)
    assert run.tiling.tiling["nt_kernel"] == "reduce" and run.cycles <= 285_888


def test_tilings_left_unplanned_by_their_bound_do_not_spend_the_climbs_budget():
    """128 x 64 x 128 with B transposed on four MT7004 cores: eight of the first round's eleven moves were left
    unplanned by their bound and counted against the budget, the third round had one plan left, and the climb ended
    at 128-deep k blocks (14,163 cycles). They cost a bound only and count no more: the pick is at most the 64-deep
    blocks of the same schedule, forced."""
    assert_pick_beats("MT7004", (128, 64, 128), 0xF, {
        "split": "m", "nt_kernel": "transpose", "c_home": "am", "a_staging": "memory", "a_loader": "cores",
        "a_buffers": 2, "b_staging": "broadcast", "m_micro": 6, "k_block": 64, "m_panel": 12, "m_block": 128,
        "n_block": 64, "n_micro": 64}, 14_163, trans_b=1)


def test_a_formulation_whose_starts_its_bound_rules_out_is_climbed_from_its_lowest_bound():
    """1000 x 10 x 100 with B transposed on two MT7004 cores (a thin C: both formulations searched): the direct
    formulation's preferred tiling and its tiling nearest the transposed climb's end were both left out by their
    bounds, so it was never climbed (the pick 38,772 cycles); a climb from its tiling of the lowest bound reaches
    split m with B broadcast, at most what that tiling takes forced."""
    run = gemm("MT7004", "fp_gemm_s", 1000, 10, 100, 0x3, trans_b=1)
    forced = gemm("MT7004", "fp_gemm_s", 1000, 10, 100, 0x3, trans_b=1, tiling={
        "formulation": "direct", "split": "m", "nt_kernel": "transpose", "c_home": "ddr", "a_staging": "memory",
        "a_loader": "cores", "a_buffers": 2, "b_staging": "broadcast", "m_micro": 12, "k_block": 100,
        "m_panel": 24, "m_block": 1000, "n_block": 10, "n_micro": 16})
    assert run.cycles <= forced.cycles < 38_772


def test_the_depthwise_search_prices_the_channel_splits_its_climb_stops_short_of():
    """DepthwiseConv2dBackpropInput of a 1x56x56x128 MobileNet layer, 3x3, on seven FT78NE cores: the climb from 4
    channel groups stepped to 3 with the 26-row tiles that suit 4 and stopped there (175,236 cycles); the channel
    splits into equal groups are priced after the climb, and the pick is at most 2 groups of 19-row tiles, forced."""
    args = dict(filter=A, out_backprop=B, output=C, input_sizes=[1, 56, 56, 128], filter_shape=[3, 3, 128, 1],
                strides=[1, 1, 1, 1], padding="SAME", core_mask=0x7F)
    run = sim.Simulator("FT78NE", tuning_cache=False).call("fp_depthwise_conv2d_backprop_input_s", numerics=False,
                                                           **args)
    forced = sim.Simulator("FT78NE", tuning_cache=False).call(
        "fp_depthwise_conv2d_backprop_input_s", numerics=False,
        tiling={"channel_parts": 2, "tile_channels": 32, "tile_cols": 56, "tile_rows": 19}, **args)
    assert run.cycles <= forced.cycles < 175_236


def test_a_round_the_budget_cuts_short_plans_its_lowest_bounds():
    """256 x 512 x 512 on eight FT78NE cores (the bench's medium GEMM): a round cut short by the budget planned its
    moves in the keys' order, and the climb ended at split m with B broadcast (144,379 cycles); in the bounds'
    order it goes on to split n with 12-row micro-kernels, and the pick is at most that tiling, forced."""
    run = gemm("FT78NE", "fp_gemm_s", 256, 512, 512, 0xFF)
    forced = gemm("FT78NE", "fp_gemm_s", 256, 512, 512, 0xFF, tiling={
        "split": "n", "nt_kernel": "transpose", "c_home": "am", "a_loader": "core0", "a_buffers": 2,
        "b_staging": "am", "m_micro": 12, "k_block": 128, "m_panel": 24, "m_block": 256, "n_block": 64,
        "n_micro": 64})
    assert run.cycles <= forced.cycles < 144_379


def test_a_search_of_small_plans_goes_on_past_the_budget():
    """256 x 256 x 1024 with A transposed on eight FT78NE cores (the 1x1 filter gradient's product): its 20 plans
    hold 120 to 818 tiles, and the budget of 20 cut the climb short at 151,741 cycles. Small plans are cheap, so a
    budget goes on while the plans made so far hold fewer than PLANNED_TILES_FLOOR tiles: the pick is at most core
    0 loading A's GSM blocks with 128-deep k blocks, forced. A large search's budget is as it was: the pick of
    bench/plan_cost.py's case is still checked by tests/test_frozen_cycles.py."""
    assert_pick_beats("FT78NE", (256, 256, 1024), 0xFF, {
        "split": "m", "nt_kernel": "transpose", "c_home": "am", "a_staging": "gsm", "a_loader": "core0",
        "a_buffers": 2, "b_staging": "broadcast", "m_micro": 6, "k_block": 128, "m_panel": 12, "m_block": 256,
        "n_block": 256, "n_micro": 128}, 151_741, trans_a=1)


def test_a_deeper_k_block_past_one_its_bound_rules_out_is_tried():
    """configs/mt7004_gemm_p.yaml (100 x 72 x 300, B transposed, one core): from the NT kernel's 150-deep k blocks
    the next deeper value, 256, is ruled out by its bound (two k blocks, the second 44 deep), and the climb stopped
    (62,788 cycles); the step passes over it to 300, one block: the pick is at most that tiling, forced."""
    args = dict(a=0x10000000, b=0x10100000, c=0x10200000, m=100, n=72, k=300, trans_b=1, beta=1, lda=303, ldb=303,
                ldc=75, core=2, numerics=False)
    run = sim.Simulator("MT7004", tuning_cache=False).call("fp_gemm_p", **args)
    forced = sim.Simulator("MT7004", tuning_cache=False).call("fp_gemm_p", tiling={
        "split": "n", "nt_kernel": "reduce", "c_home": "ddr", "a_loader": "cores", "a_buffers": 2, "b_staging": "am",
        "m_micro": 3, "k_block": 300, "m_panel": 12, "m_block": 100, "n_block": 72, "n_micro": 6}, **args)
    assert run.cycles <= forced.cycles < 62_788


@pytest.mark.parametrize("config,before", [("mt7004_hp_batch_norm_grad_s.yaml", 9_781),
                                           ("mt7004_hp_fused_batch_norm_grad_s.yaml", 44_155),
                                           ("ft78ne_batch_norm_grad_s.yaml", 3_707)])
def test_the_batch_norm_channel_split_offers_blocks_between_its_own(config, before):
    """The batch norms' channel split offered two block widths (its default and the widest of a core's even
    share): the shipped configs took 64, 8 and 8 channels where 32, 16 and 64 are 16 %, 10 % and 6 % faster. It
    offers whole vectors of channels by doubling up to all of them now, and the pick is at most the best of them,
    forced."""
    from sim.config.run_config import load_config
    from sim.run.runner import prepare
    cfg = load_config(Path(__file__).resolve().parent.parent / "configs" / config)
    m = prepare(cfg, numerics=False)
    run = m.call(cfg.symbol, numerics=False, **cfg.args)
    view = m.bind(cfg.symbol, **cfg.args).attrs.view
    forced = []
    block = m.target.core.vector_width_bytes // 4 if view.channels_on_lanes else 1
    while block <= view.c:
        try:
            forced.append(m.call(cfg.symbol, numerics=False, tiling={"split": "channels", "channel_block": block},
                                 **cfg.args).cycles)
        except sim.LayoutError:  # (a whole-batch block that does not fit the vector level)
            pass
        block *= 2
    assert run.cycles <= min(forced) * 1.01 and run.cycles < before


def test_a_pick_where_the_budget_ended_the_climb_says_so(tmp_path, monkeypatch):
    """128 x 128 x 256 on one MT7004 core, its search's budget cut to 3 plans and a start's to 1 (and no room for
    small plans): the climb's third plan is its pick, one round before the climb would have looked around it, so the
    summary says a cheaper tiling may lie a few keys away, read back from the tuning cache too. With the shipped
    budget the climb ends by finding no cheaper neighbour, and says nothing."""
    import importlib
    search = importlib.import_module("sim.tuning.search")
    monkeypatch.setenv(tuning_cache.ENV_VAR, str(tmp_path))
    args = dict(a=A, b=B, c=C, m=128, n=128, k=256, core_mask=1, numerics=False)
    whole = sim.Simulator("MT7004", tuning_cache=False).call("fp_gemm_s", **args)
    assert not whole.tiling.budget_ended and "budget ended" not in whole.tiling.describe()
    monkeypatch.setattr(search, "MAX_PLANNED", 3)
    monkeypatch.setattr(search, "PLANNED_TILES_FLOOR", 0)
    monkeypatch.setattr(search, "MAX_STARTED", 1)
    cut = sim.Simulator("MT7004").call("fp_gemm_s", **args)
    assert cut.tiling.budget_ended and "the search's budget ended its climb here" in cut.tiling.describe()
    assert cut.cycles > whole.cycles  # (the climb had further to go)
    read_back = sim.Simulator("MT7004").call("fp_gemm_s", **args).tiling
    assert read_back.cached and read_back.budget_ended and "budget ended its climb" in read_back.describe()


def test_taller_micro_kernels_that_pad_fewer_rows_are_tried():
    """One FT78NE core, 32 x 1024 x 16384: 6-row micro-kernels cover 32 rows in six blocks, the last computing 4
    padded rows (36 rows of work for 32: 6,395,053 cycles, the pick before). The space offers the taller blocks the
    registers hold that pad fewer rows (8: four whole blocks, no padding), and the pick is at most that tiling,
    forced."""
    assert_pick_beats("FT78NE", (32, 1024, 16384), 1, {
        "split": "n", "nt_kernel": "transpose", "c_home": "am", "a_staging": "memory", "a_loader": "cores",
        "a_buffers": 2, "b_staging": "am", "m_micro": 8, "k_block": 512, "m_panel": 16, "m_block": 32,
        "n_block": 128, "n_micro": 128}, int(6_395_053 * 0.95))


def test_a_start_past_the_first_completions_is_priced():
    """FT78NE 300 x 300 x 300 with B transposed on eight cores: the space's first 4,096 tilings all transpose B's
    blocks, so the NT kernel's start found no tiling in the search's pool and was never priced (96,784 cycles). A
    start's completions join the pool with a limit of their own: the pick is at most the NT kernel, forced."""
    args = dict(a=A, b=B, c=C, m=300, n=300, k=300, trans_b=1, core_mask=0xFF, numerics=False)
    run = sim.Simulator("FT78NE", tuning_cache=False).call("fp_gemm_s", **args)
    forced = sim.Simulator("FT78NE", tuning_cache=False).call("fp_gemm_s", tiling={"nt_kernel": "reduce"}, **args)
    assert any(t.get("nt_kernel") == "reduce" for t, _ in run.tiling.candidates)
    assert run.cycles <= forced.cycles < 96_784


def test_a_climb_at_a_local_optimum_of_one_step_tries_each_integer_keys_far_step():
    """1000 x 100 x 300 on eight FT78NE cores: from k_block 256 the climb's steps are 150 and 300, both slower, and
    it stopped at 99,018 cycles; the 128-deep blocks past 150 (rows of whole bursts, half of 256) are faster. At a
    local optimum of one step, among small plans, a round of each integer key's far step on each side is planned
    once: the pick is at most k_block 128, forced (the search completing the rest)."""
    args = dict(a=A, b=B, c=C, m=1000, n=100, k=300, core_mask=0xFF, numerics=False)
    run = sim.Simulator("FT78NE", tuning_cache=False).call("fp_gemm_s", **args)
    forced = sim.Simulator("FT78NE", tuning_cache=False).call("fp_gemm_s", tiling={"k_block": 128}, **args)
    assert run.cycles <= forced.cycles < 99_018 * 0.95


def test_a_slope_of_small_steps_does_not_end_the_climb():
    """The depthwise input gradient of MobileNet's last layer (1 x 7 x 7 x 960, 3 x 3, SAME) on one FT78NE core:
    its tile_channels step a vector (32 channels) at a time, each step gaining under the 1 % a climb needs, and the
    pick was 864-channel tiles, 20,015 cycles, where 96-channel tiles take 15,360. The far steps (half the
    channels) go down the slope: the pick is within 3 % of that tiling, forced."""
    args = dict(filter=0x10000000, out_backprop=0x10100000, output=0x10200000, input_sizes=[1, 7, 7, 960],
                filter_shape=[3, 3, 960, 1], strides=[1, 1, 1, 1], padding="SAME", data_format="NHWC", core=5,
                numerics=False)
    symbol = "fp_depthwise_conv2d_backprop_input_p"
    run = sim.Simulator("FT78NE", tuning_cache=False).call(symbol, **args)
    forced = sim.Simulator("FT78NE", tuning_cache=False).call(symbol, tiling={
        "channel_parts": 1, "tile_channels": 96, "tile_cols": 7, "tile_rows": 7}, **args)
    assert run.cycles <= forced.cycles * 1.03 and forced.cycles < 20_015 * 0.8


def test_a_space_of_small_plans_is_searched_whole():
    """BatchNormGrad 100 x 100 (training) on eight FT78NE cores: a space without a bound, of 7 tilings, was climbed
    (whole only up to 6): from the rows split its one step into the channel split took 13-channel blocks, slower,
    and the 64-channel blocks, 8.7 % faster than the pick of 10,856 cycles, were never priced. A space whose tilings
    hold fewer than PLANNED_TILES_FLOOR tiles in all is priced whole: the pick is at most that tiling, forced."""
    d = 0x80000000
    args = dict(x=d, dy=d + 0x100000, dx=d + 0x200000, params=[d + 0x400000 + i * 0x10000 for i in range(5)]
                + [100, 100, 1], numerics=False)
    run = sim.Simulator("FT78NE", tuning_cache=False).call("fp_batch_norm_grad_s", **args)
    forced = sim.Simulator("FT78NE", tuning_cache=False).call(
        "fp_batch_norm_grad_s", tiling={"split": "channels", "channel_block": 64}, **args)
    assert run.cycles <= forced.cycles < 10_856 * 0.95


@pytest.mark.parametrize("symbol,mask,tile,before", [("hp_fake_quant_with_min_max_vars_gradient_s", 0x1, 2016, 4723),
                                                     ("fp_fake_quant_with_min_max_vars_gradient_s", 0xF, 2000, 5502)])
def test_fake_quant_offers_two_tiles_where_one_or_four_were_its_choices(symbol, mask, tile, before):
    """4 x 1000 on MT7004: on its one core (fp16) the space offered the heuristic's 1,008-element tiles, on one core
    of four (fp32) the whole call as one tile; two tiles overlap one's transfers with the other's computes, and
    the pick is at most such a tiling, forced."""
    d = 0x80000000
    args = dict(gradients=d, inputs=d + 0x100000, min=d + 0x200000, max=d + 0x200040,
                backprops_wrt_input=d + 0x300000, backprop_wrt_min=d + 0x200080, backprop_wrt_max=d + 0x2000C0,
                shape=[4, 1000], core_mask=mask, numerics=False)
    run = sim.Simulator("MT7004", tuning_cache=False).call(symbol, **args)
    forced = sim.Simulator("MT7004", tuning_cache=False).call(symbol, tiling={"cores": 1, "tile_elements": tile},
                                                              **args)
    assert run.cycles <= forced.cycles < before * 0.95


def test_the_channel_split_offers_a_block_for_every_core_where_a_share_is_under_a_vector():
    """BatchNormGrad 256 x 64 (training) on FT78NE cores 0-2: 32-channel blocks (a vector) make two blocks, and
    core 2 idled (13,812 cycles); the largest power of two within a core's 21-channel share, 16, gives every core
    a block, and the pick is at most that tiling, forced, with no core idle."""
    d = 0x80000000
    args = dict(x=d, dy=d + 0x100000, dx=d + 0x200000, params=[d + 0x400000 + i * 0x10000 for i in range(5)]
                + [256, 64, 1], core_mask=0x7, numerics=False)
    run = sim.Simulator("FT78NE", tuning_cache=False).call("fp_batch_norm_grad_s", **args)
    forced = sim.Simulator("FT78NE", tuning_cache=False).call(
        "fp_batch_norm_grad_s", tiling={"split": "channels", "channel_block": 16}, **args)
    assert run.cycles <= forced.cycles < 13_812 * 0.95 and forced.idle_cores == ()


@pytest.mark.parametrize("chip,symbol,before", [("MT7004", "fp_gemm_s", 134_333), ("MT7004", "hp_gemm_s", 69_111),
                                                ("FT78NE", "fp_gemm_s", 82_329)])
def test_b_transposed_with_fewer_rows_of_c_than_columns_searches_the_transposed_formulation(chip, symbol, before):
    """64 x 1024 x 256 with B transposed on every core: the direct formulation transposes each B block in AM (or
    reduces B's rows); the transposed one transposes A's, the smaller operand's, and was searched only when asked
    for. Both are searched now: the pick is within the tolerance of the transposed one, forced."""
    args = dict(a=A, b=B, c=C, m=64, n=1024, k=256, trans_b=1, numerics=False)
    run = sim.Simulator(chip, tuning_cache=False).call(symbol, **args)
    forced = sim.Simulator(chip, tuning_cache=False).call(symbol, tiling={"formulation": "transposed"}, **args)
    assert run.cycles <= forced.cycles * (1 + sim.TILING_TOLERANCE) and forced.cycles < before * 0.95


def test_a_start_tied_with_the_cheapest_is_climbed():
    """MT7004 384 x 256 x 384 with A transposed on four cores: B broadcast on split m, a start, tied the cheapest
    within the tolerance and won the tie unclimbed (233,250 cycles); a step from it, k_block 192, is 6 % faster. A
    start tied with the cheapest is climbed as one that is the cheapest: the pick is at most that tiling, forced."""
    assert_pick_beats("MT7004", (384, 256, 384), 0xF, {
        "split": "m", "nt_kernel": "transpose", "c_home": "am", "a_staging": "memory", "a_loader": "cores",
        "a_buffers": 2, "b_staging": "broadcast", "m_micro": 6, "k_block": 192, "m_panel": 12, "m_block": 384,
        "n_block": 128, "n_micro": 64}, int(233_250 * 0.95), trans_a=1)
