"""The convolution kernels' inner loops: one tile's cycles derived by hand from the target file's numbers, the
gather a few-channel 7x7 stem pays, GEMM-shaped calls near peak, and fp16 at the target's fp16 lanes.

The hand derivations read the YAML with pyyaml (not the simulator's loader) and price the loops with the
formula of docs/timing-model.md written out here (resource II per unit and per issue class, recurrence II,
fill, epilogue, loop overhead per entry, tile overhead per compute), so they check the kernels' stated issues
and the timing module's arithmetic together.
"""

from __future__ import annotations

from math import ceil
from pathlib import Path

import pytest
import yaml

import sim
from sim.timing import compute_cycles

ROOT = Path(__file__).resolve().parents[2]
PRIVATE = dict(input=0x10000000, out_backprop=0x10400000, output=0x10800000)
DW_PRIVATE = dict(filter=0x10000000, out_backprop=0x10400000, output=0x10800000)


def core_yaml(chip: str) -> dict:
    """The ``core:`` mapping of a shipped target file, read directly."""
    return yaml.safe_load((ROOT / "targets" / f"{chip}.yaml").read_text())["core"]


def latency(units: dict, name: str) -> int:
    """A unit's latency from the YAML; ``vls.store``: the unit's store latency (when it has one)."""
    if name.endswith(".store"):
        unit = units[name.removesuffix(".store")]
        return unit.get("store_latency_cycles", unit["latency_cycles"])
    return units[name]["latency_cycles"]


def price(core: dict, *, trips: int, entries: int, issues: dict, chain: tuple = (), carried: tuple = (),
          epilogue: dict | None = None) -> int:
    """Cycles of one loop by the documented formula, from the YAML's numbers."""
    units = core["units"]
    per_class: dict[str, int] = {}
    ii = 1
    for u, n in issues.items():
        ii = max(ii, ceil(n / units[u]["count"]))
        per_class[units[u]["class"]] = per_class.get(units[u]["class"], 0) + n
    for cls, n in per_class.items():
        ii = max(ii, ceil(n / core["issue_width"][cls]))
    ii = max(ii, sum(latency(units, u) for u in carried))
    fill = sum(latency(units, u) for u in chain)
    epi = 0
    if epilogue:  # one step: loads and stores share the vls units; the last unit's latency (a store's: its own)
        per_unit: dict[str, int] = {}
        for u, n in epilogue.items():
            per_unit[u.removesuffix(".store")] = per_unit.get(u.removesuffix(".store"), 0) + n
        epi = max(ceil(n / units[u]["count"]) for u, n in per_unit.items()) + latency(units, list(epilogue)[-1])
    return entries * (core["loop_overhead_cycles"] + fill + trips * ii + epi)


def computes(plan) -> list:
    """Every tile's compute of a plan, in core and tile order."""
    return [t.compute for ph in plan.phases for ts in ph.tiles.values() for t in ts if t.compute is not None]


# --- Conv2DBackpropFilter: one row tile by hand -----------------------------------------------------------

def test_conv2d_filter_micro_kernel_tile_by_hand():
    """A 1x1 64 -> 64 filter on 8 positions per tile, window layout, 16 x 64 micro-kernel on FT78NE."""
    core = core_yaml("FT78NE")
    attrs = dict(input_shape=[1, 4, 8, 64], filter_sizes=[1, 1, 64, 64], strides=[1, 1, 1, 1], padding="VALID")
    tiling = {"split": "filter", "in_c_slice": 64, "out_c_slice": 64, "a_operand": "window", "m_micro": 16,
              "n_micro": 64}
    m = sim.Simulator("FT78NE")
    _, plan = m.plan("fp_conv2d_backprop_filter_p", core=0, tiling=tiling, **PRIVATE, **attrs)
    row_tiles = [c for c in computes(plan) if c.flops]
    assert len(row_tiles) == 4 and all(c.flops == 2 * 8 * 64 * 64 for c in row_tiles)  # a row of 8 positions each

    vw, bpi = core["vector_width_bytes"], core["units"]["vls"]["bytes_per_issue"]
    lanes = core["precisions"]["fp32"]["lanes"]
    m_r, n_r, k = 16, 64, 8
    nv = ceil(n_r / lanes)                                     # B row: 2 vectors
    issues = {"vls": ceil(nv / (bpi // vw)) + ceil(ceil(m_r * 4 / vw) / (bpi // vw)),  # B row + A's 16 values
              "valu": ceil(m_r * 4 / vw),                      # A vector into the SVR
              "sload": ceil(m_r * 4 / core["units"]["sload"]["bytes_per_issue"]),  # SVR -> scalars, 8 B each
              "broadcast": m_r, "fmac": m_r * nv}
    acc = m_r * ceil(n_r * 4 / vw)
    chain = ("vls", "valu", "sload", "broadcast", "fmac")
    entries = 64 // m_r                                        # 4 blocks of dW's 64 rows, one block of columns
    first = core["tile_overhead_cycles"] + price(core, trips=k, entries=entries, issues=issues, chain=chain,
                                                 carried=("fmac",), epilogue={"vls.store": ceil(acc / (bpi // vw))})
    later = core["tile_overhead_cycles"] + price(core, trips=k, entries=entries, issues=issues, chain=chain,
                                                 carried=("fmac",), epilogue={"vls": ceil(acc / (bpi // vw)),
                                                                                  "vls.store": ceil(acc / (bpi // vw))})
    assert (first, later) == (568, 600)  # 24 + 4·(8 + 28 + 8·11 + 12): 8 stores + 4; C loaded too: 16 + 4
    assert [compute_cycles(c, m.target) for c in row_tiles] == [first, later, later, later]
    run = m.call("fp_conv2d_backprop_filter_p", core=0, tiling=tiling, numerics=False, **PRIVATE, **attrs)
    durations = [e.end - e.start for e in run.events if e.kind == "compute"]
    assert durations[:4] == [first, later, later, later]


def stem(chip: str = "FT78NE", prefix: str = "fp", **more) -> sim.Run:
    """A ResNet stem's filter gradient on one core: 7x7, stride 2, SAME, 3 -> 64 channels (compute-bound)."""
    attrs = dict(input_shape=[1, 32, 32, 3], filter_sizes=[7, 7, 3, 64], strides=[1, 2, 2, 1], padding="SAME")
    return sim.Simulator(chip).call(f"{prefix}_conv2d_backprop_filter_p", core=0, numerics=False, **PRIVATE,
                                    **attrs, **more)


def test_a_7x7_stride_2_stem_over_3_channels_pays_its_gather():
    """Bound, from the YAML: reading A from the window keeps a micro-kernel's rows within one tap's 3 channels,
    3 x 2 accumulators, whose FMAC chain (latency 6) allows 6 FMACs per 6 cycles: 1/3 of the 3 FMAC units.
    Gathering im2col rows instead costs, per position and filter row, a 21-element run that starts off a vector
    boundary: a two-source permute per vector stored (2), on the one valu unit: 7 x 2 = 14 cycles a position,
    beside 147 x 2 FMACs over 3 units (98 cycles).  So no schedule of either beats 98 / (98 + 14) of peak."""
    core = core_yaml("FT78NE")
    lanes, fmacs, valu = core["precisions"]["fp32"]["lanes"], core["units"]["fmac"]["count"], \
        core["units"]["valu"]["count"]
    nv = ceil(64 / lanes)
    window_bound = 3 * nv / core["units"]["fmac"]["latency_cycles"] / fmacs
    fmac_cycles = 7 * 7 * 3 * nv / fmacs
    gather_cycles = 7 * 2 / valu
    im2col_bound = fmac_cycles / (fmac_cycles + gather_cycles)
    bound = max(window_bound, im2col_bound)
    assert bound == pytest.approx(0.875)
    run = stem()
    assert run.roofline.bound_by == "compute"
    assert run.cycles >= run.roofline.cycles
    assert run.roofline_fraction <= bound
    assert run.roofline_fraction > 0.6  # the gather is paid, not the window's stalls
    labels = {loop.label for c in computes(run.plan) for loop in c.loops}
    assert any(label.startswith("im2col gather 7x7x3") for label in labels)


def test_gemm_shaped_calls_stay_near_peak():
    """A 1x1 filter over 4096 positions (a GEMM with k = 4096) on one core: the micro-kernel's fill and drain
    and the tile overheads are a few percent."""
    attrs = dict(input_shape=[1, 64, 64, 64], filter_sizes=[1, 1, 64, 64], strides=[1, 1, 1, 1], padding="VALID")
    run = sim.Simulator("FT78NE").call("fp_conv2d_backprop_filter_p", core=0, numerics=False, **PRIVATE, **attrs)
    assert run.roofline.bound_by == "compute"
    assert 0.9 < run.roofline_fraction <= 1.0
    labels = {loop.label for c in computes(run.plan) for loop in c.loops}
    assert not any("gather" in label for label in labels)  # x itself is A's position-major layout


def test_hp_is_faster_than_fp_by_the_targets_lane_ratio_on_mt7004():
    """hp_ multiplies fp16 and accumulates fp32 at the fp16_fp32acc lanes MT7004 lists: a compute-bound call runs
    close to the lane ratio faster than its fp_ twin (never more than it)."""
    core = core_yaml("MT7004")
    ratio = core["precisions"]["fp16_fp32acc"]["lanes"] / core["precisions"]["fp32"]["lanes"]
    attrs = dict(input_shape=[1, 32, 32, 64], filter_sizes=[3, 3, 64, 64], strides=[1, 1, 1, 1], padding="SAME")
    m = sim.Simulator("MT7004")
    fp = m.call("fp_conv2d_backprop_filter_p", core=0, numerics=False, **PRIVATE, **attrs)
    hp = m.call("hp_conv2d_backprop_filter_p", core=0, numerics=False, **PRIVATE, **attrs)
    assert fp.roofline.bound_by == hp.roofline.bound_by == "compute"
    assert {c.precision for c in computes(hp.plan) if c.flops} == {"fp16_fp32acc"}
    assert ratio == 2
    assert 0.9 * ratio < fp.cycles / hp.cycles <= ratio
    assert hp.cycles >= hp.roofline.cycles and fp.cycles >= fp.roofline.cycles


def test_a_micro_kernel_too_big_for_the_registers_is_refused():
    attrs = dict(input_shape=[1, 4, 8, 64], filter_sizes=[1, 1, 64, 64], strides=[1, 1, 1, 1], padding="VALID")
    with pytest.raises(sim.KernelArgError, match="tiling.m_micro"):
        sim.Simulator("FT78NE").plan("fp_conv2d_backprop_filter_p", core=0, **PRIVATE, **attrs,
                                     tiling={"m_micro": 40, "n_micro": 64})


# --- DepthwiseConv2dNativeBackpropInput: one tile by hand -------------------------------------------------

def test_depthwise_tap_loop_tile_by_hand():
    """3x3 SAME over a 4x32 block of 32 channels on FT78NE: 128 output vectors, 10 x 94 (tap, position) pairs
    (rows: 3 + 4 + 3, columns: 31 + 32 + 31), one FMAC each on its own out_backprop vector; the block size is the
    cheapest by the same hand formula, over every block the 64 registers allow."""
    core = core_yaml("FT78NE")
    args = dict(input_sizes=[1, 4, 32, 32], filter_shape=[3, 3, 32, 1], strides=[1, 1, 1, 1], padding="SAME")
    tiling = {"channel_parts": 1, "tile_rows": 4, "tile_cols": 32, "tile_channels": 32}
    m = sim.Simulator("FT78NE")
    _, plan = m.plan("fp_depthwise_conv2d_backprop_input_p", core=0, tiling=tiling, **DW_PRIVATE, **args)
    (tile,) = computes(plan)
    vectors, fmacs, pairs_per_issue = 4 * 32, 10 * 94, core["units"]["vls"]["bytes_per_issue"] // 128

    def cycles(b: int) -> int:
        resident = 2 * b + 9 <= core["vector_registers"]  # accumulators, loaded vectors, the 9 filter vectors
        entries = ceil(vectors / b)
        loads = ceil(b / pairs_per_issue) + (0 if resident else 1)
        return core["tile_overhead_cycles"] + price(
            core, trips=ceil(fmacs / (entries * b)), entries=entries, issues={"vls": loads, "fmac": b},
            chain=("vls", "fmac"), carried=("fmac",), epilogue={"vls.store": ceil(b / pairs_per_issue)})

    fitting = [b for b in range(1, 33) if 2 * b + 1 <= core["vector_registers"]]
    best = min(fitting, key=lambda b: (cycles(b), b))
    (loop,) = tile.loops
    assert loop.issues["fmac"] == best
    assert compute_cycles(tile, m.target) == cycles(best)
    assert tile.flops == 2 * fmacs * 32


def test_depthwise_hp_accumulates_fp16_products_in_fp32_at_the_fp16_rate():
    args = dict(input_sizes=[1, 32, 32, 64], filter_shape=[3, 3, 64, 1], strides=[1, 1, 1, 1], padding="SAME")
    m = sim.Simulator("MT7004")
    fp = m.call("fp_depthwise_conv2d_backprop_input_p", core=0, numerics=False, **DW_PRIVATE, **args)
    hp = m.call("hp_depthwise_conv2d_backprop_input_p", core=0, numerics=False, **DW_PRIVATE, **args)
    assert {c.precision for c in computes(hp.plan) if c.flops} == {"fp16_fp32acc"}
    assert "accumulated in fp32" in hp.precision_note
    assert hp.cycles < fp.cycles
    assert hp.cycles >= hp.roofline.cycles and fp.cycles >= fp.roofline.cycles


@pytest.mark.parametrize("fmt,strides,dilations", [("NHWC", [1, 2, 2, 1], [1, 1, 1, 1]),
                                                   ("NCHW", [1, 1, 2, 2], [1, 1, 1, 1]),
                                                   ("NHWC", [1, 1, 1, 1], [1, 2, 2, 1])])
def test_depthwise_strided_and_dilated_loops_never_beat_the_roofline(fmt, strides, dilations):
    shape = [2, 20, 20, 16] if fmt == "NHWC" else [2, 16, 20, 20]
    args = dict(input_sizes=shape, filter_shape=[3, 3, 16, 2], strides=strides, padding="SAME",
                data_format=fmt, dilations=dilations)
    run = sim.Simulator("FT78NE").call("fp_depthwise_conv2d_backprop_input_p", core=0, numerics=False,
                                       **DW_PRIVATE, **args)
    assert run.cycles >= run.roofline.cycles
    for c in computes(run.plan):
        for loop in c.loops:
            assert loop.vector_registers <= 64


def test_a_chip_without_the_mixed_rate_converts_fp16_to_fp32_first(tmp_path):
    """Without fp16_fp32acc an hp_ call computes in fp32: its fp16 blocks are widened in loops of their own, so it
    is slower than on MT7004 itself, and its numbers are the same."""
    import numpy as np
    doc = yaml.safe_load((ROOT / "targets" / "MT7004.yaml").read_text())
    del doc["core"]["precisions"]["fp16_fp32acc"]
    doc["name"] = "MT7004-no-mixed"
    path = tmp_path / "mt7004_no_mixed.yaml"
    path.write_text(yaml.safe_dump(doc))
    attrs = dict(input_shape=[1, 8, 8, 16], filter_sizes=[3, 3, 16, 32], strides=[1, 1, 1, 1], padding="SAME")
    rng = np.random.default_rng(7)
    x = rng.uniform(-1, 1, (1, 8, 8, 16)).astype(np.float16)
    dy = rng.uniform(-1, 1, (1, 8, 8, 32)).astype(np.float16)
    outs, runs = [], []
    for target in ("MT7004", str(path)):
        m = sim.Simulator(target)
        m.write(PRIVATE["input"], x, core=0)
        m.write(PRIVATE["out_backprop"], dy, core=0)
        runs.append(m.call("hp_conv2d_backprop_filter_p", core=0, **PRIVATE, **attrs))
        outs.append(m.read(PRIVATE["output"], (3, 3, 16, 32), np.float16, core=0))
    mixed, widened = runs
    assert {c.precision for c in computes(widened.plan) if c.flops} == {"fp32"}
    assert any("to fp32" in loop.label for c in computes(widened.plan) for loop in c.loops)
    assert widened.cycles > mixed.cycles
    np.testing.assert_array_equal(outs[0], outs[1])
