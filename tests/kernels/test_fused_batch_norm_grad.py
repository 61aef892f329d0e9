"""FusedBatchNormGrad: TensorFlow's golden cases, a float64 reference, argument refusals, timing properties, and
its tilings (every one it lists right and honoured, bad ones refused)."""

import re
from pathlib import Path

import numpy as np
import pytest
import yaml
from golden import arrays, cases, chips_for, tolerances
from streams import assert_private_streams
from tilings import (
    ADDR,
    assert_first_candidate_is_the_kernels_own_plan,
    assert_refused,
    batch_norm_honoured,
    candidates,
)

import sim
from sim.testing import check_results

KERNEL = "fused_batch_norm_grad"
INPUTS = ("y_backprop", "x", "scale", "reserve_space_1", "reserve_space_2")
OUTPUTS = ("x_backprop", "scale_backprop", "offset_backprop")
SHARED = dict(y_backprop=0xA0000000, x=0xA1000000, scale=0xA2000000, reserve_space_1=0xA2100000,
              reserve_space_2=0xA2200000, x_backprop=0xA3000000, scale_backprop=0xA4000000,
              offset_backprop=0xA4100000)
PRIVATE = dict(y_backprop=0x10000000, x=0x10200000, scale=0x10400000, reserve_space_1=0x10410000,
               reserve_space_2=0x10420000, x_backprop=0x10500000, scale_backprop=0x10700000,
               offset_backprop=0x10710000)
TARGETS = Path(__file__).resolve().parents[2] / "targets"


def run_kernel(m: sim.Simulator, prefix: str, variant: str, data: dict, core: int = 1, **attrs):
    """Write the inputs, call the kernel, return (run, outputs)."""
    addrs = SHARED if variant == "s" else PRIVATE
    where = {"core": core} if variant == "p" else {}
    c = core if variant == "p" else None
    for name in INPUTS:
        m.write(addrs[name], data[name], core=c)
    run = m.call(f"{prefix}_{KERNEL}_{variant}", **addrs, **attrs, **where)
    shape, dt = data["x"].shape, data["x"].dtype
    ch = data["scale"].shape
    out = {"x_backprop": m.read(addrs["x_backprop"], shape, dt, core=c),
           "scale_backprop": m.read(addrs["scale_backprop"], ch, np.float32, core=c),
           "offset_backprop": m.read(addrs["offset_backprop"], ch, np.float32, core=c)}
    return run, out


# -- TensorFlow's golden cases ----------------------------------------------------------------------

GOLDEN = [(c, chip, v) for c in cases(KERNEL) for chip in chips_for(c) for v in ("s", "p")]


@pytest.mark.parametrize("case,chip,variant", GOLDEN, ids=[f"{c['id']}-{chip}-{v}" for c, chip, v in GOLDEN])
def test_golden(case, chip, variant):
    data = arrays(case)
    prefix = "hp" if case["precision"] == "fp16" else "fp"
    addrs = SHARED if variant == "s" else PRIVATE
    where = {"core": 1} if variant == "p" else {}
    run = check_results(chip, f"{prefix}_{KERNEL}_{variant}", {**addrs, **case["attrs"], **where},
                        [(addrs[n], data[n]) for n in INPUTS],
                        {n: (addrs[n], data[n].shape, data[n].dtype) for n in OUTPUTS}, data,
                        **tolerances(case, OUTPUTS))
    assert run.cycles >= run.roofline.cycles


def test_golden_cases_cover_both_formats_and_modes():
    seen = {(c["attrs"]["data_format"], c["attrs"]["is_training"]) for c in cases(KERNEL)}
    assert ("NCHW", True) in seen and ("NHWC", False) in seen and ("NCHW", False) in seen


# -- a float64 reference written from TensorFlow's formulas -------------------------------------------

def reference64(dy, x, scale, mean, var, epsilon, data_format, is_training):
    """TensorFlow's formulas in float64 on the 4-D arrays (sums over every axis but the channel one)."""
    axes = (0, 1, 2) if data_format == "NHWC" else (0, 2, 3)
    bshape = (1, 1, 1, -1) if data_format == "NHWC" else (1, -1, 1, 1)
    x, dy = x.astype(np.float64), dy.astype(np.float64)
    mean, var, scale = (np.asarray(v, np.float64).reshape(bshape) for v in (mean, var, scale))
    rs = 1.0 / np.sqrt(var + epsilon)
    xc = x - mean
    offset_bp = dy.sum(axis=axes)
    scale_bp = (dy * xc * rs).sum(axis=axes)
    if is_training:
        dx = scale * rs * (dy - dy.mean(axis=axes, keepdims=True)
                           - xc * rs ** 2 * (dy * xc).mean(axis=axes, keepdims=True))
    else:
        dx = dy * scale * rs
    return dx, scale_bp, offset_bp


def make_data(shape, data_format, dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    c = shape[3] if data_format == "NHWC" else shape[1]
    return {"y_backprop": rng.uniform(-1, 1, shape).astype(dtype),
            "x": rng.uniform(-2, 2, shape).astype(dtype),
            "scale": rng.uniform(0.5, 1.5, c).astype(np.float32),
            "reserve_space_1": rng.uniform(-0.5, 0.5, c).astype(np.float32),
            "reserve_space_2": rng.uniform(0.5, 2.0, c).astype(np.float32)}


def check_against_reference(data, out, epsilon, data_format, is_training, rtol=2e-5, atol=2e-5):
    dx, sbp, obp = reference64(data["y_backprop"], data["x"], data["scale"], data["reserve_space_1"],
                               data["reserve_space_2"], epsilon, data_format, is_training)
    np.testing.assert_allclose(out["x_backprop"].astype(np.float64), dx, rtol=rtol, atol=atol)
    np.testing.assert_allclose(out["scale_backprop"], sbp, rtol=rtol, atol=atol * 100)
    np.testing.assert_allclose(out["offset_backprop"], obp, rtol=rtol, atol=atol * 100)


# shape, data_format, the plan FT78NE's 8 cores take by the kernel's own rule (named as the tiling's split here:
# by default the cost model may prefer another candidate)
SHAPES = [((2, 8, 8, 256), "NHWC", "channels"),     # 8 vectors of channels: one per core
          ((2, 8, 8, 40), "NHWC", "rows"),          # too few channels: rows split, partials through GSM
          ((2, 16, 8, 8), "NCHW", "channels"),      # a channel or more per core
          ((1, 3, 16, 40), "NCHW", "rows")]         # one image, 3 channels: H*W split over the cores


@pytest.mark.parametrize("is_training", [True, False])
@pytest.mark.parametrize("shape,data_format,plan", SHAPES, ids=[f"{s[1]}-{s[2]}" for s in SHAPES])
def test_float64_reference_shared(shape, data_format, plan, is_training):
    data = make_data(shape, data_format)
    run, out = run_kernel(sim.Simulator("FT78NE"), "fp", "s", data, shape=list(shape), epsilon=1e-3,
                          data_format=data_format, is_training=is_training, tiling={"split": plan})
    assert run.plan.phases[0].name.startswith("channels" if plan == "channels" else "partial sums")
    check_against_reference(data, out, 1e-3, data_format, is_training)


@pytest.mark.parametrize("epsilon", [0.0, 1e-60])
@pytest.mark.parametrize("is_training", [True, False])
def test_epsilon_zero_is_tensorflows_rsqrt_of_the_variance(epsilon, is_training):
    """TensorFlow's CPU kernel takes epsilon = 0 (rsqrt of the variance alone), and one that rounds to 0 in fp32."""
    shape = (2, 8, 8, 40)
    data = make_data(shape, "NHWC", seed=5)
    run, out = run_kernel(sim.Simulator("FT78NE"), "fp", "s", data, shape=list(shape), epsilon=epsilon,
                          data_format="NHWC", is_training=is_training)
    check_against_reference(data, out, 0.0, "NHWC", is_training)


@pytest.mark.parametrize("split", ["channels", "rows"])
@pytest.mark.parametrize("case", ["large dy", "tiny scale"])
def test_training_x_backprop_in_tensorflows_form_stays_in_range(case, split):
    """TensorFlow's CPU kernel computes x_backprop = scale·rs · ((dy − Σdy/m) − x̂·Σdy·x̂/m), whose intermediates
    stay in range where dy and scale do. Formed as BatchNormGrad's page has it, k · (m·dy − Σdy − x̂·Σdy·x̂) with
    k = scale·rs/m, m·dy overflowed for |dy| > FLT_MAX / m (1024 elements of ±1e36 per channel: every x_backprop
    ±inf, where float64 gives about 1.7e36), and a scale near the smallest normal made k subnormal, read as 0."""
    shape = (4, 16, 16, 8)
    data = make_data(shape, "NHWC", seed=9)
    if case == "large dy":  # Σdy = 0 and Σdy·x̂ in range: x rises along the rows, dy alternates in sign
        rows = np.linspace(-1, 1, 1024, dtype=np.float32)
        data["x"] = np.repeat(rows[:, None], 8, axis=1).reshape(shape)
        data["y_backprop"] = np.repeat(np.where(np.arange(1024) % 2, 1e36, -1e36)[:, None], 8, axis=1).reshape(
            shape).astype(np.float32)
        data["reserve_space_1"] = np.full(8, rows.mean(), np.float32)
        data["reserve_space_2"] = np.full(8, rows.var(), np.float32)
    else:
        data["scale"] = np.full(shape[-1], 1.3e-38, np.float32)
    run, out = run_kernel(sim.Simulator("FT78NE"), "fp", "s", data, shape=list(shape), epsilon=1e-3,
                          data_format="NHWC", is_training=True, tiling={"split": split})
    assert np.isfinite(out["x_backprop"]).all()
    dx = reference64(data["y_backprop"], data["x"], data["scale"], data["reserve_space_1"], data["reserve_space_2"],
                     1e-3, "NHWC", True)[0]
    # (fp32 rounding of the sums over 1024 elements: a few units in the last place of the largest element)
    err = np.abs(out["x_backprop"].astype(np.float64) - dx).max() / np.abs(dx).max()
    assert err < 1e-5, err


@pytest.mark.parametrize("is_training", [True, False])
@pytest.mark.parametrize("data_format", ["NHWC", "NCHW"])
def test_float64_reference_private_mt7004(data_format, is_training):
    shape = (3, 5, 6, 20) if data_format == "NHWC" else (3, 20, 5, 6)
    data = make_data(shape, data_format, seed=3)
    run, out = run_kernel(sim.Simulator("MT7004"), "fp", "p", data, core=3, shape=list(shape), epsilon=0.01,
                          data_format=data_format, is_training=is_training)
    assert run.cores == (3,)
    check_against_reference(data, out, 0.01, data_format, is_training)


@pytest.mark.parametrize("data_format", ["NHWC", "NCHW"])
def test_float64_reference_fp16(data_format):
    shape = (2, 6, 6, 24) if data_format == "NHWC" else (2, 24, 6, 6)
    data = make_data(shape, data_format, dtype=np.float16, seed=5)
    run, out = run_kernel(sim.Simulator("MT7004"), "hp", "s", data, shape=list(shape), data_format=data_format)
    assert out["x_backprop"].dtype == np.float16
    check_against_reference(data, out, 1e-4, data_format, True, rtol=2e-3, atol=2e-3)


def small_scratch_target(tmp_path, am_bytes=0x8000):
    """FT78NE with a 32 KiB array memory: forces channel groups and partly resident row blocks."""
    doc = yaml.safe_load((TARGETS / "FT78NE.yaml").read_text())
    for r in doc["regions"]:
        if r["name"] == "am":
            r["size_bytes"] = am_bytes
    path = tmp_path / "ft78ne_small_am.yaml"
    path.write_text(yaml.safe_dump(doc))
    return sim.load_target(path)


@pytest.mark.parametrize("is_training", [True, False])
def test_channel_groups_and_partly_resident_blocks(tmp_path, is_training):
    shape = (8, 8, 8, 100)
    data = make_data(shape, "NHWC", seed=7)
    run, out = run_kernel(sim.Simulator(small_scratch_target(tmp_path)), "fp", "s", data, shape=list(shape),
                          is_training=is_training, tiling={"split": "rows"})
    names = [p.name for p in run.plan.phases]
    assert len(names) == 4, names  # two channel groups, two phases each
    check_against_reference(data, out, 1e-4, "NHWC", is_training)
    if is_training:
        dx_tiles = [t for t in run.plan.phases[1].tiles[0] if t.stores and t.compute is not None and t.tile_id > 0]
        reloaded = [t for t in dx_tiles if t.loads]
        assert reloaded and len(reloaded) < len(dx_tiles)  # some blocks stayed in the scratchpad, some did not


def test_resident_rows_read_x_and_dy_once():
    shape = (2, 16, 16, 64)
    data = make_data(shape, "NHWC")
    run, out = run_kernel(sim.Simulator("FT78NE"), "fp", "s", data, shape=list(shape))
    check_against_reference(data, out, 1e-4, "NHWC", True)
    tensor = int(np.prod(shape)) * 4
    ddr_in = sum(e.bytes for e in run.events if e.kind == "dma_in" and e.src_region == "ddr")
    assert tensor * 2 <= ddr_in < tensor * 2 + 64 * 1024  # x and dy once, plus the per-channel vectors


# -- argument refusals ----------------------------------------------------------------------------

def good_args(**over):
    args = dict(SHARED, shape=[2, 4, 4, 8], epsilon=1e-3, data_format="NHWC", is_training=True)
    args.update(over)
    return args


@pytest.mark.parametrize("over,name", [
    (dict(shape=[2, 4, 4]), "shape"),
    (dict(shape=[2, 4, 4, 8, 1]), "shape"),
    (dict(shape=[2, 0, 4, 8]), "shape[1]"),
    (dict(shape=[2, 4, -4, 8]), "shape[2]"),
    (dict(shape=[2, 4, 4, 8.0]), "shape[3]"),
    (dict(shape="2x4x4x8"), "shape"),
    (dict(shape=[1 << 20, 1 << 20, 1 << 10, 8]), "shape"),
    (dict(data_format="NCDHW"), "data_format"),
    (dict(data_format="nhwc"), "data_format"),
    (dict(epsilon=float("nan")), "epsilon"),
    (dict(epsilon=float("inf")), "epsilon"),
    (dict(epsilon=-1e-3), "epsilon"),
    (dict(epsilon=-1e-60), "epsilon"),
    (dict(epsilon="small"), "epsilon"),
    (dict(is_training="yes"), "is_training"),
    (dict(is_training=2), "is_training"),
    (dict(x=-4), "x"),
    (dict(scale="0xA2000000"), "scale"),
    (dict(momentum=0.9), "momentum"),
])
def test_bad_arguments(over, name):
    m = sim.Simulator("FT78NE")
    with pytest.raises(sim.KernelArgError, match=re.escape(f"'{name}")):
        m.call(f"fp_{KERNEL}_s", **good_args(**over))


def test_missing_argument_and_fp16_on_ft78ne():
    m = sim.Simulator("FT78NE")
    args = good_args()
    del args["reserve_space_2"]
    with pytest.raises(sim.KernelArgError, match="reserve_space_2"):
        m.call(f"fp_{KERNEL}_s", **args)
    with pytest.raises(sim.KernelArgError, match="fp16"):
        m.call(f"hp_{KERNEL}_s", **good_args())


def test_private_buffers_refused_in_shared_variant():
    m = sim.Simulator("FT78NE")
    with pytest.raises(sim.LayoutError, match="x_backprop"):
        m.call(f"fp_{KERNEL}_s", **good_args(x_backprop=0x10000000))


# -- timing properties ------------------------------------------------------------------------------

def timing_run(target, shape, data_format="NHWC", is_training=True, **where):
    m = sim.Simulator(target)
    return m.call(f"fp_{KERNEL}_s", **SHARED, shape=list(shape), data_format=data_format,
                  is_training=is_training, numerics=False, **where)


def test_deterministic():
    data = make_data((2, 8, 8, 40), "NHWC")
    r1, o1 = run_kernel(sim.Simulator("FT78NE"), "fp", "s", data, shape=[2, 8, 8, 40])
    r2, o2 = run_kernel(sim.Simulator("FT78NE"), "fp", "s", data, shape=[2, 8, 8, 40])
    assert r1.cycles == r2.cycles
    assert [e._asdict() for e in r1.events] == [e._asdict() for e in r2.events]
    for name in OUTPUTS:
        np.testing.assert_array_equal(o1[name], o2[name])


@pytest.mark.parametrize("shape,data_format", [((4, 28, 28, 64), "NHWC"), ((4, 64, 28, 28), "NCHW"),
                                               ((1, 3, 112, 112), "NCHW")])
@pytest.mark.parametrize("is_training", [True, False])
def test_cycles_at_least_roofline_and_near_it(shape, data_format, is_training):
    run = timing_run("FT78NE", shape, data_format, is_training)
    assert run.cycles >= run.roofline.cycles
    assert run.roofline.bound_by == "ddr"
    assert run.roofline_fraction > 0.8


def test_barrier_when_rows_are_split():
    rows = timing_run("FT78NE", (2, 8, 8, 40), tiling={"split": "rows"})
    waits = [e for e in rows.events if e.kind == "barrier_wait"]
    assert {e.core for e in waits} == set(range(8))
    assert all(e.end >= e.start for e in waits)
    partials = [e for e in rows.events if e.kind == "dma_out" and e.dst_region == "gsm"]
    assert len({e.core for e in partials}) == 8  # every core published its partial sums
    channels = timing_run("FT78NE", (2, 8, 8, 256))
    assert not [e for e in channels.events if e.kind == "barrier_wait"]


def test_halving_ddr_bandwidth_slows_a_large_case(tmp_path):
    doc = yaml.safe_load((TARGETS / "FT78NE.yaml").read_text())
    for r in doc["regions"]:
        if r["name"] == "ddr":
            r["bandwidth_bytes_per_cycle"] = r["bandwidth_bytes_per_cycle"] / 2
    path = tmp_path / "ft78ne_half_ddr.yaml"
    path.write_text(yaml.safe_dump(doc))
    shape = (4, 28, 28, 64)
    fast, slow = timing_run("FT78NE", shape), timing_run(sim.load_target(path), shape)
    assert slow.cycles > 1.7 * fast.cycles


def test_more_cores_faster_on_a_large_case_by_reading_ddr_once():
    """DDR-bound, and one core's streams already use all of DDR: more cores are faster because their shares are
    small enough to stay in the scratchpad between the passes, so that they read DDR once (fewer bytes), and
    every run streams close to DDR's bandwidth."""
    shape = (4, 28, 28, 64)
    for chip, mask in (("FT78NE", 0xFF), ("MT7004", 0xF)):
        one, many = timing_run(chip, shape, core_mask=0x1), timing_run(chip, shape, core_mask=mask)
        assert many.roofline.region_bytes["ddr"] < 0.75 * one.roofline.region_bytes["ddr"]
        assert many.cycles < 0.75 * one.cycles
        assert one.roofline.bound_by == many.roofline.bound_by == "ddr"
        assert one.roofline_fraction > 0.9 and many.roofline_fraction > 0.9


@pytest.mark.parametrize("data_format", ["NHWC", "NCHW"])
def test_private_run_sees_no_other_core(data_format):
    shape = (2, 16, 16, 64) if data_format == "NHWC" else (2, 64, 16, 16)
    m = sim.Simulator("FT78NE")
    run = m.call(f"fp_{KERNEL}_p", **PRIVATE, shape=list(shape), data_format=data_format, core=5, numerics=False)
    assert_private_streams(run, 5)
    assert run.cycles >= run.roofline.cycles


# --- tilings -------------------------------------------------------------------------------

FBN = dict(y_backprop=ADDR[0], x=ADDR[1], x_backprop=ADDR[2], scale=ADDR[3], reserve_space_1=ADDR[3] + 0x10000,
           reserve_space_2=ADDR[3] + 0x20000, scale_backprop=ADDR[3] + 0x30000, offset_backprop=ADDR[3] + 0x40000)


def fbn_run(shape, fmt: str, train: bool, tiling: dict | None, chip="FT78NE", prefix="fp"):
    """Run and check against TensorFlow's formulas in float64."""
    rng = np.random.default_rng(sum(shape))
    dt = np.float16 if prefix == "hp" else np.float32
    c = shape[3] if fmt == "NHWC" else shape[1]
    dy, x = rng.uniform(-1, 1, shape).astype(dt), rng.uniform(-2, 2, shape).astype(dt)
    scale, mean, var = (rng.uniform(lo, hi, c).astype(np.float32) for lo, hi in ((.5, 1.5), (-.5, .5), (.5, 2)))
    m = sim.Simulator(chip)
    for name, arr in (("y_backprop", dy), ("x", x), ("scale", scale), ("reserve_space_1", mean),
                      ("reserve_space_2", var)):
        m.write(FBN[name], arr)
    run = m.call(f"{prefix}_fused_batch_norm_grad_s", tiling=tiling, **FBN, shape=list(shape), epsilon=1e-3,
                 data_format=fmt, is_training=train)
    axes, bshape = ((0, 1, 2), (1, 1, 1, -1)) if fmt == "NHWC" else ((0, 2, 3), (1, -1, 1, 1))
    x64, dy64 = x.astype(np.float64), dy.astype(np.float64)
    mean64, var64, scale64 = (v.astype(np.float64).reshape(bshape) for v in (mean, var, scale))
    rs = 1 / np.sqrt(var64 + 1e-3)
    xc = x64 - mean64
    if train:
        want = scale64 * rs * (dy64 - dy64.mean(axes, keepdims=True) - xc * rs ** 2 * (dy64 * xc).mean(axes,
                                                                                                       keepdims=True))
    else:
        want = dy64 * scale64 * rs
    tol = 3e-3 if prefix == "hp" else 2e-5
    np.testing.assert_allclose(m.read(FBN["x_backprop"], shape, dt).astype(np.float64), want, rtol=tol, atol=tol)
    np.testing.assert_allclose(m.read(FBN["offset_backprop"], (c,), np.float32), dy64.sum(axes), rtol=1e-4,
                               atol=1e-3)
    np.testing.assert_allclose(m.read(FBN["scale_backprop"], (c,), np.float32), (dy64 * xc * rs).sum(axes),
                               rtol=1e-4, atol=1e-3)
    return run


FBN_SHAPES = [((2, 8, 8, 40), "NHWC", True), ((2, 8, 8, 40), "NHWC", False), ((1, 3, 16, 40), "NCHW", True)]


@pytest.mark.parametrize("shape,fmt,train", FBN_SHAPES, ids=[f"{f}-{'train' if t else 'infer'}"
                                                             for _, f, t in FBN_SHAPES])
def test_fused_batch_norm_grad_every_tiling_right_and_honoured(shape, fmt, train):
    listed = candidates(sim.Simulator("FT78NE"), "fp_fused_batch_norm_grad_s", **FBN, shape=list(shape),
                        epsilon=1e-3, data_format=fmt, is_training=train)
    assert 2 <= len(listed) <= 10 and {t["split"] for t in listed} == {"channels", "rows"}
    for tiling in listed + [{"split": "rows", "tile_elements": 100}, {"split": "channels", "channel_block": 2}]:
        run = fbn_run(shape, fmt, train, tiling)
        assert run.tiling.tiling == tiling and run.tiling.source == "given"
        batch_norm_honoured(run, tiling)


def test_fused_batch_norm_grad_fp16_tilings_on_mt7004():
    shape = (2, 6, 6, 24)
    listed = candidates(sim.Simulator("MT7004"), "hp_fused_batch_norm_grad_s", **FBN, shape=list(shape),
                        epsilon=1e-3, data_format="NHWC", is_training=True)
    for tiling in listed:
        batch_norm_honoured(fbn_run(shape, "NHWC", True, tiling, "MT7004", "hp"), tiling)


FIRST = [("fp_fused_batch_norm_grad_s", dict(FBN, shape=[2, 8, 8, 256], data_format="NHWC", is_training=True)),
         ("fp_fused_batch_norm_grad_s", dict(FBN, shape=[2, 8, 8, 40], data_format="NHWC", is_training=True))]


@pytest.mark.parametrize("symbol,args", FIRST, ids=[str(i) for i in range(len(FIRST))])
def test_fused_batch_norm_grad_first_candidate_is_the_kernels_own_plan(symbol, args):
    assert_first_candidate_is_the_kernels_own_plan(symbol, args)


REFUSALS = [
    ("fp_fused_batch_norm_grad_s", dict(FBN, shape=[2, 8, 8, 40]), {"tile": 4}, sim.KernelArgError, "'tiling'"),
    ("fp_fused_batch_norm_grad_s", dict(FBN, shape=[2, 8, 8, 40]), {"split": "rows", "channel_block": 8},
     sim.KernelArgError, "tiling.channel_block"),
    ("fp_fused_batch_norm_grad_s", dict(FBN, shape=[2, 8, 8, 40]), {"split": "channels", "tile_elements": 8},
     sim.KernelArgError, "tiling.tile_elements"),
    ("fp_fused_batch_norm_grad_s", dict(FBN, shape=[2, 8, 8, 40]), {"channel_block": 41}, sim.KernelArgError,
     "tiling.channel_block"),
    ("fp_fused_batch_norm_grad_s", dict(FBN, shape=[8, 56, 56, 64]), {"channel_block": 2}, sim.LayoutError,
     "scratchpad"),
    ("fp_fused_batch_norm_grad_s", dict(FBN, shape=[8, 56, 56, 64]), {"tile_elements": 10 ** 6}, sim.LayoutError,
     "scratchpad"),
]


@pytest.mark.parametrize("symbol,args,tiling,error,match", REFUSALS, ids=[str(t) for _, _, t, _, _ in REFUSALS])
def test_fused_batch_norm_grad_bad_tilings_are_refused(symbol, args, tiling, error, match):
    assert_refused(symbol, args, tiling, error, match)


def test_rs_reads_subnormal_operands_and_sums_as_zeros_as_in_tensorflow():
    """TensorFlow computes rsqrt(variance + epsilon) with denormals flushed (``port::ScopedFlushDenormal``): a
    subnormal epsilon or variance is a zero, and a sum below the smallest normal value is one, so rs is infinite
    where the plain fp32 sum would give about 1e20; a normal sum is untouched."""
    from kernels.fused_batch_norm_grad.numerics import rs_of, rsqrt_var
    tiny = np.float32(1e-40)
    assert np.isposinf(rsqrt_var(np.array([0.0, tiny], np.float32), 1e-40)).all()
    got = rsqrt_var(np.array([tiny, 4.0], np.float32), 1e-30)
    assert got[0] == np.float32(1) / np.sqrt(np.float32(1e-30)) and got[1] == np.float32(0.5)
    assert rs_of(np.array([tiny, 2.0], np.float32), None).tolist() == [0.0, 2.0]
