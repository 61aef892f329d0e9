"""The loops the batch-norm kernels, fake quant, the partial-sum exchange and the ReluGrad example state, priced
by hand from the target files' numbers (timing model II: a tile's compute is its inner loops on the core's units).

Each test first checks the YAML numbers its arithmetic uses (so a changed target fails here, loudly, rather than
silently moving the figures), then derives one tile's cycles the way docs/timing-model.md does:
cycles = tile overhead + per loop: entries x (loop overhead + fill + trips x II + epilogue), with
II = max(busiest unit's issues / its count, VLIW slots, the carried chain's latency) and fill = the latencies of
one element's dependence chain.  Then it checks what the kernels' loops mean physically: the elementwise kernels
run at their memory's pace, never faster than the roofline, and hp_ symbols that compute in fp32 pay their
conversions on the vector ALU.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import yaml

import sim
from sim.inspect.summary import limiting_resource
from sim.timing import compute_cycles, loop_cost

ROOT = Path(__file__).resolve().parents[2]

FT = yaml.safe_load((ROOT / "targets" / "FT78NE.yaml").read_text())["core"]
MT = yaml.safe_load((ROOT / "targets" / "MT7004.yaml").read_text())["core"]


def _units(core: dict) -> dict:
    return {n: (u["count"], u["latency_cycles"], u.get("bytes_per_issue", 0)) for n, u in core["units"].items()}


def test_the_target_numbers_the_hand_arithmetic_uses():
    # FT78NE: 32 fp32 lanes in a 128-byte vector; a VLDDW moves 256 B (two vectors) on one of 2 load/store units
    # (latency 9); 3 FMACs (latency 6); one vector ALU (latency 2); 6 vector issue slots; 8 cycles a loop entry,
    # 24 a tile's compute call, 16 a cross-lane reduction.
    assert FT["precisions"]["fp32"]["lanes"] == 32 and FT["vector_width_bytes"] == 128
    assert {k: _units(FT)[k] for k in ("vls", "fmac", "valu")} == {"vls": (2, 9, 256), "fmac": (3, 6, 0),
                                                                   "valu": (1, 2, 0)}
    assert FT["issue_width"]["vector"] == 6 and FT["vector_registers"] == 64
    assert FT["units"]["vls"]["store_latency_cycles"] == MT["units"]["vls"]["store_latency_cycles"] == 4  # VSTDW
    assert (FT["loop_overhead_cycles"], FT["tile_overhead_cycles"], FT["reduction_latency_cycles"]) == (8, 24, 16)
    # MT7004: 16 fp32 / 32 fp16 lanes in 64 bytes; a double load moves 128 B; the other units as FT78NE's.
    assert (MT["precisions"]["fp32"]["lanes"], MT["precisions"]["fp16"]["lanes"], MT["vector_width_bytes"]) == (
        16, 32, 64)
    assert {k: _units(MT)[k] for k in ("vls", "fmac", "valu")} == {"vls": (2, 9, 128), "fmac": (3, 6, 0),
                                                                   "valu": (1, 2, 0)}
    assert (MT["loop_overhead_cycles"], MT["tile_overhead_cycles"]) == (8, 24)


def _tiles(plan):
    return [t for ph in plan.phases for tiles in ph.tiles.values() for t in tiles if t.compute is not None]


def _costs(compute, core):
    return {L.label: loop_cost(L, core) for L in compute.loops}


# -- ReluGrad (examples/relu_grad.py) ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def relu():
    """examples/relu_grad.py imported from its file and registered for the module's tests."""
    spec = importlib.util.spec_from_file_location("relu_grad_example_loops", ROOT / "examples" / "relu_grad.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with sim.registered_kernel(module.KERNEL):
        yield module.KERNEL


def test_relu_grad_tile_by_hand(relu):
    m = sim.Simulator("FT78NE")
    _, plan = m.plan("fp_relu_grad_s", dy=0xA0000000, x=0xA1000000, dx=0xA2000000, shape=[4096], core_mask=0x1,
                     tiling={"tile_elements": 4096})
    (tile,) = _tiles(plan)
    (loop,) = tile.compute.loops
    # 4096 fp32 = 128 vectors, two per iteration (a load issue moves two): 64 trips.  Per iteration: dy, x in and
    # dx out = 6 vectors = 3 vls issues (2 units: 2 cycles); compare + select on 2 vectors = 4 valu (1 unit: 4).
    assert (loop.trips, dict(loop.issues)) == (64, {"vls": 3, "valu": 4})
    cost = loop_cost(loop, m.target.core)
    assert (cost.ii, cost.bound_by) == (4, "valu")
    # fill: load 9 + the ALU 2 + store 4 (a store's latency) = 15; cycles = 24 + 8 + 15 + 64 x 4 = 303.
    assert cost.fill == 15
    assert compute_cycles(tile.compute, m.target) == 24 + 8 + 15 + 64 * 4 == 303


# -- FusedBatchNormGrad: one channel block, training, NHWC ------------------------------------------------

BN_SHAPE = [4, 4, 4, 32]  # A = 64 rows, C = 32 channels: one vector of channels


def _bn_plan(chip, prefix, shape=BN_SHAPE, fmt="NHWC", training=True, tiling=None):
    m = sim.Simulator(chip)
    _, plan = m.plan(f"{prefix}_fused_batch_norm_grad_s", y_backprop=0xA0000000, x=0xA1000000, scale=0xA2000000,
                     reserve_space_1=0xA2001000, reserve_space_2=0xA2002000, x_backprop=0xA3000000,
                     scale_backprop=0xA4000000, offset_backprop=0xA4001000, shape=shape, data_format=fmt,
                     is_training=training, core_mask=0x1, tiling=tiling or {"split": "channels", "channel_block": 32})
    return m, plan


def test_fused_batch_norm_grad_channel_block_by_hand():
    m, plan = _bn_plan("FT78NE", "fp")
    (tile,) = _tiles(plan)
    c = _costs(tile.compute, m.target.core)
    assert list(c) == ["rs", "partial sums", "coefficients", "x_backprop"]
    # rs = rsqrt(var + eps) of one vector of channels (one iteration of one vector: there is no second to pair
    # into a double load): 1 load, an add, the ALU's estimate, a 3-FMA Newton step, 1 store: issues {vls 2,
    # fmac 4, valu 1}: II = ceil(4/3) = 2; fill load 9 + 4 FMACs 24 + ALU 2 + store 4 = 39: 8 + 39 + 2 = 49.
    assert (dict(tile.compute.loops[0].issues), c["rs"].ii, c["rs"].fill, c["rs"].cycles) == (
        {"vls": 2, "fmac": 4, "valu": 1}, 2, 39, 49)
    # The sums: 64 x 32 = 2048 elements = 64 vectors; per vector x and dy in, 4 FMAC ops (x - mean, * rs,
    # dy added, dy * x^ added): two running sums, a carried FMAC chain of 6.  Two vectors per iteration give
    # 8 FMAC issues = 3 cycles < 6, so the loop unrolls to 4 vectors: 16 FMAC issues = 6 cycles (4 vls issues on
    # 2 units: 2; 20 vector issues in 6 slots: 4), matching the chain: II 6 over 16 trips.  Fill: load 9 +
    # 3 dependent FMACs 18 = 27.  Epilogue, a chain: the 4 accumulators of each sum added as a tree (2 x 2 adds,
    # 2 cycles on 3 FMACs; then 2 x 1 add, from 6, ending at max(6 + 1, 2 + 6) = 8); then the held mean/rs
    # loaded and the two sums loaded, added and stored (6 vectors: 2 loads and 1 store issue, 2 cycles), from
    # 6 + 6 = 12, ending at max(12 + 2, 8 + 6) = 14, + the store's latency 4 = 18.  8 + 27 + 16 x 6 + 18 = 149.
    s = c["partial sums"]
    assert (s.trips, s.ii, s.bound_by, s.fill, s.epilogue, s.cycles) == (16, 6, "fmac", 27, 18, 149)
    # k, a, b from the sums (4 vectors in, 3 FMAC ops, 3 out): 7 vls issues (4 cycles); fill 9 + 6 + 4 = 19.
    assert (c["coefficients"].ii, c["coefficients"].cycles) == (4, 8 + 19 + 4)
    # x_backprop: x, dy in, dx out, 5 FMAC ops per vector; two vectors per iteration: 3 vls issues (2 cycles),
    # 10 FMAC issues (4 cycles): II 4 over 32 trips; fill 9 + 4 dependent FMACs x 6 + 4 = 37 (x̂ = (x - mean)·rs
    # two deep, dy - a beside it, then the FMA t - x̂·b and the multiply by k); epilogue: the 5 coefficient vectors
    # loaded (3 issues: 2 cycles) + the load's 9 = 11.  8 + 37 + 32 x 4 + 11 = 184.
    d = c["x_backprop"]
    assert (d.trips, d.ii, d.fill, d.epilogue, d.cycles) == (32, 4, 37, 11, 184)
    assert compute_cycles(tile.compute, m.target) == 24 + 49 + 149 + 31 + 184


def test_hp_batch_norm_loads_fp16_and_converts_on_the_vector_alu():
    # MT7004, hp_: fp16 x and dy computed in fp32 (16 lanes).  A 128-byte load moves 64 fp16 = 4 fp32 vectors, so
    # the body is unrolled to 4 vectors; each tensor loaded is widened (one valu issue per fp32 vector) and
    # x_backprop narrowed: the sums loop issues 2 x 4 = 8 conversions and 16 FMACs per 4 vectors, the x_backprop
    # loop 12 conversions (valu: 12 cycles) against 20 FMACs (7 cycles): it is bound by the vector ALU.
    m, plan = _bn_plan("MT7004", "hp", tiling={"split": "channels", "channel_block": 32})
    (tile,) = _tiles(plan)
    loops = {L.label: L for L in tile.compute.loops}
    assert tile.compute.precision == "fp32"
    assert dict(loops["partial sums"].issues) == {"vls": 2, "fmac": 16, "valu": 8}
    assert dict(loops["x_backprop"].issues) == {"vls": 3, "fmac": 20, "valu": 12}
    assert loop_cost(loops["x_backprop"], m.target.core).bound_by == "valu"
    _, fp = _bn_plan("MT7004", "fp", tiling={"split": "channels", "channel_block": 32})
    (fp_tile,) = _tiles(fp)
    # Same math, same flops: the conversions are loop issues, not flops.
    assert fp_tile.compute.flops == tile.compute.flops
    assert "valu" not in {L.label: L for L in fp_tile.compute.loops}["x_backprop"].issues


def test_nchw_sums_reduce_across_the_lanes_once_per_channel():
    # NCHW puts the spatial positions on the lanes: a loop per channel (entries = channels) whose two sums end
    # in a cross-lane reduction each (16 cycles a vector on FT78NE).
    m, plan = _bn_plan("FT78NE", "fp", shape=[2, 32, 8, 8], fmt="NCHW")
    (tile,) = _tiles(plan)
    sums = {L.label: L for L in tile.compute.loops}["partial sums"]
    assert (sums.entries, sums.reductions) == (32, 2)
    # 2 x 64 positions per channel = 4 vectors: two per load issue, unrolled to 4 (8 -> 16 FMAC issues).
    assert sums.trips == 1 and sums.issues["fmac"] == 16
    assert loop_cost(sums, m.target.core).epilogue >= 2 * 16


# -- FakeQuantWithMinMaxVarsGradient --------------------------------------------------------------------------

FQ = dict(gradients=0xA0000000, inputs=0xA1000000, min=0xA2000000, max=0xA2000040, backprops_wrt_input=0xA3000000,
          backprop_wrt_min=0xA4000000, backprop_wrt_max=0xA4000040)


def test_fake_quant_tile_by_hand():
    m = sim.Simulator("FT78NE")
    _, plan = m.plan("fp_fake_quant_with_min_max_vars_gradient_s", **FQ, shape=[4096], core_mask=0x1,
                     tiling={"cores": 1, "tile_elements": 4096})
    nudge, data = _tiles(plan)
    (loop,) = data.compute.loops
    # 128 vectors, two per iteration: 64 trips.  Per iteration: 3 vls issues (2 cycles), 2 compares + a select
    # on 2 vectors = 6 valu issues (6 cycles), 2 masked adds x 2 = 4 FMAC issues; the two running sums' chain is
    # one FMAC latency, 6: II 6, the vector ALU busy every cycle.
    assert (loop.trips, dict(loop.issues), loop.carried) == (64, {"vls": 3, "fmac": 4, "valu": 6}, ("fmac",))
    cost = loop_cost(loop, m.target.core)
    assert (cost.ii, cost.bound_by) == (6, "valu")
    # fill: load 9, compare 2, select 2, store 4 = 17; epilogue, a chain: the 2 accumulators added (2 FMAC issues,
    # 1 cycle); the 2 reductions (2 x 16) from the add's latency 6: to 38; the core's sums loaded and stored (a
    # load and a store issue) waiting for them: the store issued at 38, + its latency 4 = 42.
    assert (cost.fill, cost.epilogue) == (17, 42)
    assert compute_cycles(data.compute, m.target) == 24 + 8 + 17 + 64 * 6 + 42 == 475
    # The nudge is one dependent chain on one lane: 3 loads/stores (9 each), 7 FMAC ops (6), 4 ALU ops (2).
    (chain,) = nudge.compute.loops
    assert loop_cost(chain, m.target.core).fill == 3 * 9 + 7 * 6 + 4 * 2


def test_fake_quant_partials_reduction_by_hand():
    m = sim.Simulator("FT78NE")
    _, plan = m.plan("fp_fake_quant_with_min_max_vars_gradient_s", **FQ, shape=[8 * 4096], core_mask=0xFF,
                     tiling={"cores": 8, "tile_elements": 4096})
    reduce = plan.phases[-1].tiles[0][0].compute
    (loop,) = reduce.loops
    # 8 partials of 2 values: one vector of output; per vector 8 loads + 1 store (9 vls issues: 5 cycles) and
    # 7 adds (3 cycles), a tree 3 deep: fill 9 + 3 x 6 + 4 (the store) = 31; 24 + 8 + 31 + 5 = 68.
    assert (dict(loop.issues), loop.trips) == ({"vls": 9, "fmac": 7}, 1)
    assert compute_cycles(reduce, m.target) == 24 + 8 + 31 + 5 == 68
    assert reduce.flops == 0


# -- physics ------------------------------------------------------------------------------------------------

ELEMENTWISE = [
    ("FT78NE", "fp_fake_quant_with_min_max_vars_gradient_s", dict(FQ, shape=[1 << 20])),
    ("MT7004", "hp_fake_quant_with_min_max_vars_gradient_s", dict(FQ, shape=[1 << 20])),
    ("FT78NE", "fp_relu_grad_s", dict(dy=0xA0000000, x=0xA1000000, dx=0xA2000000, shape=[1 << 20])),
    ("MT7004", "hp_relu_grad_s", dict(dy=0xA0000000, x=0xA1000000, dx=0xA2000000, shape=[1 << 20])),
]


@pytest.mark.parametrize("chip,symbol,args", ELEMENTWISE, ids=[f"{c}-{s}" for c, s, _ in ELEMENTWISE])
def test_elementwise_kernels_run_at_their_memorys_pace(relu, chip, symbol, args):
    m = sim.Simulator(chip)
    run = m.call(symbol, numerics=False, **args)
    assert run.cycles >= run.roofline.cycles
    assert run.roofline.bound_by == "ddr"
    assert limiting_resource(run.roofline, run.summaries(), run.cycles) == "ddr"
    # Within a few percent of the bytes over DDR's bandwidth (plus the launch and the pipeline's ends).
    assert run.cycles <= 1.15 * run.roofline.cycles + m.target.launch_overhead_cycles + 5000


def test_batch_norm_runs_never_beat_their_roofline():
    for chip, prefix in (("FT78NE", "fp"), ("MT7004", "hp")):
        m = sim.Simulator(chip)
        x = np.zeros((8, 7, 7, 64), np.float32)
        run = m.call(f"{prefix}_fused_batch_norm_grad_s", numerics=False, y_backprop=0xA0000000, x=0xA1000000,
                     scale=0xA2000000, reserve_space_1=0xA2001000, reserve_space_2=0xA2002000,
                     x_backprop=0xA3000000, scale_backprop=0xA4000000, offset_backprop=0xA4001000,
                     shape=list(x.shape))
        assert run.cycles >= run.roofline.cycles > 0
