"""FakeQuantWithMinMaxVarsGradient: golden cases, TensorFlow's XLA test table, refusals, timing properties, and
its tilings (every one it lists right and honoured, bad ones refused)."""

import re
from pathlib import Path

import numpy as np
import pytest
import yaml
from golden import arrays, assert_matches, cases, chips_for
from streams import assert_private_streams
from tilings import (
    ADDR,
    assert_first_candidate_is_the_kernels_own_plan,
    assert_refused,
    candidates,
    loaded_blocks,
)

import sim
from kernels.fake_quant_with_min_max_vars_gradient.numerics import fake_quant_gradient_reference
from sim.testing import check_results

KERNEL = "fake_quant_with_min_max_vars_gradient"
OUTPUTS = ("backprops_wrt_input", "backprop_wrt_min", "backprop_wrt_max")
SHARED = dict(gradients=0xA0000000, inputs=0xA1000000, min=0xA2000000, max=0xA2000040,
              backprops_wrt_input=0xA3000000, backprop_wrt_min=0xA4000000, backprop_wrt_max=0xA4000040)
PRIVATE = dict(gradients=0x10000000, inputs=0x10200000, min=0x10400000, max=0x10400040,
               backprops_wrt_input=0x10500000, backprop_wrt_min=0x10700000, backprop_wrt_max=0x10700040)
TARGETS = Path(__file__).resolve().parents[2] / "targets"


def run_kernel(m, prefix, variant, gradients, inputs, lo, hi, core=2, **attrs):
    """Write the operands, call the kernel, return (run, {output name: array})."""
    a = SHARED if variant == "s" else PRIVATE
    c = core if variant == "p" else None
    m.write(a["gradients"], gradients, core=c)
    m.write(a["inputs"], inputs, core=c)
    m.write(a["min"], np.float32(lo), core=c)
    m.write(a["max"], np.float32(hi), core=c)
    where = {"core": core} if variant == "p" else {}
    run = m.call(f"{prefix}_{KERNEL}_{variant}", **a, shape=list(inputs.shape), **attrs, **where)
    return run, {"backprops_wrt_input": m.read(a["backprops_wrt_input"], inputs.shape, gradients.dtype, core=c),
                 "backprop_wrt_min": m.read(a["backprop_wrt_min"], (), np.float32, core=c),
                 "backprop_wrt_max": m.read(a["backprop_wrt_max"], (), np.float32, core=c)}


def check_kernel(chip, prefix, variant, gradients, inputs, lo, hi, expected, *, core=2, tiling=None, **attrs):
    """:func:`run_kernel` through ``sim.testing.check_results``: the three outputs equal (as values) to
    ``expected``'s; returns the run."""
    a = SHARED if variant == "s" else PRIVATE
    where = {"core": core} if variant == "p" else {}
    placed = [(a["gradients"], gradients), (a["inputs"], inputs), (a["min"], np.float32(lo)),
              (a["max"], np.float32(hi))]
    shapes = {"backprops_wrt_input": (inputs.shape, gradients.dtype), "backprop_wrt_min": ((), np.float32),
              "backprop_wrt_max": ((), np.float32)}
    return check_results(chip, f"{prefix}_{KERNEL}_{variant}", {**a, "shape": list(inputs.shape), **attrs, **where},
                         placed, {n: (a[n], *shapes[n]) for n in OUTPUTS}, expected, rtol=0, atol=0, tiling=tiling)


# -- TensorFlow's golden cases ----------------------------------------------------------------------

GOLDEN = [(c, chip, v) for c in cases(KERNEL) for chip in chips_for(c) for v in ("s", "p")]


@pytest.mark.parametrize("case,chip,variant", GOLDEN, ids=[f"{c['id']}-{chip}-{v}" for c, chip, v in GOLDEN])
def test_golden(case, chip, variant):
    d = arrays(case)
    prefix = "hp" if case["precision"] == "fp16" else "fp"
    attrs = {k: v for k, v in case["attrs"].items() if k != "shape"}
    run, out = run_kernel(sim.Simulator(chip), prefix, variant, d["gradients"], d["inputs"], d["min"], d["max"],
                          **attrs)
    for name in OUTPUTS:
        assert_matches(case, name, out[name], d[name])
    assert run.cycles >= run.roofline.cycles


# -- TensorFlow's XLA test table (compiler/tests/fake_quant_ops_test.py, FakeQuantWithMinMaxVarsGradientTest) --

# (min, max, num_bits, narrow_range, expected nudged min, expected nudged max, step)
XLA_TABLE = [
    (0.0, 255.0, 8, False, 0.0, 255.0, 1.0),
    (0.5, 128.0, 8, False, 0.0, 127.5, 0.5),
    (-128.0, -0.5, 8, False, -127.5, 0.0, 0.5),
    (-0.1, 127.4, 8, False, 0.0, 127.5, 0.5),
    (0.0, 254.0, 8, True, 0.0, 254.0, 1.0),
    (0.1, 127.1, 8, True, 0.0, 127.0, 0.5),
    (-127.1, -0.1, 8, True, -127.0, 0.0, 0.5),
    (-0.1, 126.9, 8, True, 0.0, 127.0, 0.5),
    (0.0, 127.0, 7, False, 0.0, 127.0, 1.0),
    (0.5, 64.0, 7, False, 0.0, 63.5, 0.5),
    (-64.0, -0.5, 7, False, -63.5, 0.0, 0.5),
    (-0.1, 63.4, 7, False, 0.0, 63.5, 0.5),
    (0.0, 126.0, 7, True, 0.0, 126.0, 1.0),
    (0.1, 63.1, 7, True, 0.0, 63.0, 0.5),
    (-63.1, -0.1, 7, True, -63.0, 0.0, 0.5),
    (-0.1, 62.9, 7, True, 0.0, 63.0, 0.5),
]


def xla_inputs(nmin, nmax, step):
    """The eleven inputs of the XLA test: around both nudged bounds and one step inside."""
    return np.array([nmin - step, nmin - 0.01, nmin, nmin + 0.01, nmin + step - 0.01, nmin + step,
                     nmin + step + 0.01, nmax - 0.01, nmax, nmax + 0.01, nmax + step], dtype=np.float32)


@pytest.mark.parametrize("row", XLA_TABLE, ids=[f"{r[0]}_{r[1]}_{r[2]}bits{'_narrow' if r[3] else ''}"
                                                for r in XLA_TABLE])
def test_xla_table(row):
    lo, hi, bits, narrow, nmin, nmax, step = row
    inputs = xla_inputs(nmin, nmax, step)
    gradients = np.arange(1, len(inputs) + 1, dtype=np.float32)
    expected = {"backprops_wrt_input": np.array([0, 0, 3, 4, 5, 6, 7, 8, 9, 0, 0], np.float32),
                "backprop_wrt_min": np.float32(1.0 + 2.0), "backprop_wrt_max": np.float32(10.0 + 11.0)}
    for chip, variant in (("FT78NE", "s"), ("MT7004", "p")):
        check_kernel(chip, "fp", variant, gradients, inputs, lo, hi, expected, num_bits=bits, narrow_range=narrow)


def test_xla_table_fp16_and_split_over_cores():
    # The same table repeated 40 times (440 elements) so every core of MT7004 gets a share, in fp16.
    lo, hi, bits, narrow, nmin, nmax, step = (-0.1, 62.9, 7, True, 0.0, 63.0, 0.5)
    inputs = np.tile(xla_inputs(nmin, nmax, step), 40).astype(np.float16)
    gradients = np.tile(np.arange(1, 12, dtype=np.float16), 40)
    # Named as the tiling: by default the cost model may find one core cheaper for so small a call.
    # fp16 moves the ±0.01 neighbours (63 ± 0.01 round to 63.0): check against the fp32 rule on the fp16 values.
    x = inputs.astype(np.float32)
    inside = (x >= nmin) & (x <= nmax)
    expected = {"backprops_wrt_input": np.where(inside, gradients, 0),
                "backprop_wrt_min": gradients[x < nmin].astype(np.float32).sum(),
                "backprop_wrt_max": gradients[x > nmax].astype(np.float32).sum()}
    run = check_kernel("MT7004", "hp", "s", gradients, inputs, lo, hi, expected, num_bits=bits, narrow_range=narrow,
                       tiling={"cores": 4})
    assert len(run.plan.phases[0].tiles) == 4


# -- hand cases and a float64 reference -----------------------------------------------------------------

def test_min_equal_max_zero_passes_every_gradient():
    g = np.linspace(-3, 3, 100).astype(np.float32)
    x = np.linspace(-5, 5, 100).astype(np.float32)
    check_kernel("FT78NE", "fp", "s", g, x, 0.0, 0.0, {"backprops_wrt_input": g, "backprop_wrt_min": np.float32(0),
                                                       "backprop_wrt_max": np.float32(0)})


@pytest.mark.parametrize("bits,narrow", [(2, False), (4, True), (8, False), (8, True)])
def test_against_float64_reference_away_from_the_bounds(bits, narrow):
    """Nudge in float64 from the formula; drop inputs within 1e-3 of a bound, where fp32 rounding matters."""
    rng = np.random.default_rng(bits)
    lo, hi = -2.3, 3.1
    qmin, qmax = (1 if narrow else 0), 2 ** bits - 1
    scale = (hi - lo) / (qmax - qmin)
    zp = min(max(qmin - lo / scale, qmin), qmax)
    zp = np.floor(zp + 0.5)
    nmin, nmax = (qmin - zp) * scale, (qmax - zp) * scale
    x = rng.uniform(-4, 4, 3000)
    x = x[(np.abs(x - nmin) > 1e-3) & (np.abs(x - nmax) > 1e-3)].astype(np.float32)
    g = rng.standard_normal(x.shape).astype(np.float32)
    # Eight cores, so that the partial sums go through the workspace (the cost model would pick one core for a
    # call this small: one core draws all of DDR, and needs no exchange).
    run, out = run_kernel(sim.Simulator("FT78NE"), "fp", "s", g, x, lo, hi, num_bits=bits, narrow_range=narrow,
                          tiling={"cores": 8, "tile_elements": 96})
    xd, gd = x.astype(np.float64), g.astype(np.float64)
    np.testing.assert_array_equal(out["backprops_wrt_input"], np.where((xd >= nmin) & (xd <= nmax), g, 0))
    np.testing.assert_allclose(out["backprop_wrt_min"], gd[xd < nmin].sum(), rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(out["backprop_wrt_max"], gd[xd > nmax].sum(), rtol=1e-5, atol=1e-4)
    assert len(run.plan.phases) == 2  # partial sums through the workspace, then one core reduces


@pytest.mark.parametrize("chip,prefix,variant", [("FT78NE", "fp", "s"), ("MT7004", "fp", "p"), ("MT7004", "hp", "s"),
                                                  ("MT7004", "hp", "p")])
def test_gradients_times_the_masks_as_tensorflow_computes_them(chip, prefix, variant):
    """TensorFlow multiplies the gradients by each mask (1.0 or 0.0, fake_quant_ops_functor.h): outside the range a
    gradient gives 0 with its sign, a NaN or infinite one NaN (0 x inf), in the input gradient and in both sums
    wherever it lies.  min = -1, max = 1, 8 bits: nudged [-0.9960785, 1.0039216]."""
    dt = np.float16 if prefix == "hp" else np.float32
    x = np.array([-2, -1, -0.5, 0, 0.5, 1, 2, 3, -3], dt)
    g = np.array([np.nan, 2, 3, 4, 5, 6, np.inf, -7, -8], dt)
    run, out = run_kernel(sim.Simulator(chip), prefix, variant, g, x, -1.0, 1.0)
    bp = out["backprops_wrt_input"]
    want = np.array([np.nan, 0, 3, 4, 5, 6, np.nan, -0.0, -0.0], dt)
    np.testing.assert_array_equal(bp, want)  # (NaNs where NaNs, values equal)
    assert list(np.signbit(bp[[1, 7, 8]])) == [False, True, True]  # 2 x 0 is +0; -7 x 0 and -8 x 0 are -0
    assert np.isnan(out["backprop_wrt_min"]) and np.isnan(out["backprop_wrt_max"])
    # Finite gradients: the sums are the gradients outside, each inside one adding 0.
    g[[0, 6]] = 1
    run, out = run_kernel(sim.Simulator(chip), prefix, variant, g, x, -1.0, 1.0)
    assert out["backprop_wrt_min"] == 1 + 2 - 8 and out["backprop_wrt_max"] == 1 - 7


@pytest.mark.parametrize("chip,prefix", [("FT78NE", "fp"), ("MT7004", "fp"), ("MT7004", "hp")])
def test_a_range_that_overflows_fp32_nudges_as_tensorflow_does(chip, prefix):
    """min = -3e38, max = 3e38: the fp32 scale (6e38 / 255) overflows to inf, so TensorFlow's nudged_min is
    0 x inf = NaN and nudged_max inf: no input is below, inside or above, and every output is 0 (fp16 inputs
    compared as fp16 keys must agree with the fp32 compares)."""
    dt = np.float16 if prefix == "hp" else np.float32
    x = np.array([-2, -1, -0.5, 0, 0.5, 1, 2], dt)
    g = np.arange(1, 8).astype(dt)
    run, out = run_kernel(sim.Simulator(chip), prefix, "s", g, x, -3e38, 3e38)
    np.testing.assert_array_equal(out["backprops_wrt_input"], np.zeros(7, dt))
    assert out["backprop_wrt_min"] == 0 and out["backprop_wrt_max"] == 0


@pytest.mark.parametrize("lo,hi", [(0.0, 2e-38), (-1e-39, 1e-37)])
@pytest.mark.parametrize("chip,prefix", [("FT78NE", "fp"), ("MT7004", "hp")])
def test_a_range_whose_scale_flushes_to_zero_nudges_as_tensorflow_does(chip, prefix, lo, hi):
    """min 0 (or subnormal, read as 0) and a range so small that (max - min) / 255 is subnormal, read as 0: min /
    scale is 0 / 0, and TensorFlow's zero point is its uint16 cast of the rounded NaN, 0 on x86, so the nudged
    bounds are [0, 0] (TensorFlow 2.21 on x86: gradients [1, 2, 0, 0], wrt min 4, wrt max 3, for the inputs
    [0, 5e-39, 2e-38, -1]). The call used to fail inside the tile, converting the NaN to an integer. In fp16 the
    two smallest inputs are zeros, inside the bounds."""
    dt = np.float16 if prefix == "hp" else np.float32
    x = np.array([0.0, 5e-39, 2e-38, -1.0], np.float32).astype(dt)
    g = np.array([1, 2, 3, 4], dt)
    inside = (x == 0) | (np.abs(x.astype(np.float32)) < np.finfo(np.float32).tiny)
    above = (x > 0) & ~inside
    check_kernel(chip, prefix, "s", g, x, lo, hi, {"backprops_wrt_input": np.where(inside, g, 0).astype(dt),
                                                     "backprop_wrt_min": np.float32(4),
                                                     "backprop_wrt_max": np.float32(g[above].sum())})


def test_input_exactly_on_fp32_nudged_bound_passes():
    # min=-0.1, max=127.4, 8 bits: fp32 nudging gives exactly [0, 127.5] (TensorFlow's test above);
    # the float32 scale is 0.5 exactly, so 127.5 itself must pass and its successor must not; below 0, the
    # negative value nearest it that TensorFlow's kernels do not read as 0 (the smallest normal one).
    x = np.array([0.0, 127.5, np.nextafter(np.float32(127.5), np.float32(200)),
                  -np.finfo(np.float32).tiny], np.float32)
    g = np.array([1, 2, 4, 8], np.float32)
    check_kernel("FT78NE", "fp", "p", g, x, -0.1, 127.4, {"backprops_wrt_input": np.array([1, 2, 0, 0], np.float32),
                                                         "backprop_wrt_min": np.float32(8),
                                                         "backprop_wrt_max": np.float32(4)})


def test_subnormal_inputs_compare_as_zeros_as_in_tensorflow():
    """TensorFlow's CPU kernels run with denormals flushed (flush-to-zero and denormals-are-zero,
    ``port::ScopedFlushDenormal``): a subnormal input compares as a zero, so at a bound of 0 it is inside.
    Bounds [0, 1] (nudged exactly), then [-1, 0]; subnormal bounds read as zeros too."""
    tiny = np.float32(1e-40)  # subnormal
    x = np.array([-tiny, tiny, np.nextafter(np.float32(0), np.float32(-1)), 0.5, -np.finfo(np.float32).tiny],
                 np.float32)
    g = np.array([1, 2, 4, 8, 16], np.float32)
    check_kernel("FT78NE", "fp", "p", g, x, 0.0, 1.0, {"backprops_wrt_input": np.array([1, 2, 4, 8, 0], np.float32),
                                                       "backprop_wrt_min": np.float32(16),
                                                       "backprop_wrt_max": np.float32(0)})
    check_kernel("FT78NE", "fp", "p", g, x, -1.0, 0.0, {"backprops_wrt_input": np.array([1, 2, 4, 0, 16],
                                                                                        np.float32),
                                                        "backprop_wrt_min": np.float32(0),
                                                        "backprop_wrt_max": np.float32(8)})
    # Bounds of [-1e-40, 1e-40] are [0, 0]: every input passes and no gradient flows to min or max.
    got = fake_quant_gradient_reference(g, x, -1e-40, 1e-40)
    assert got[0].tolist() == g.tolist() and (got[1], got[2]) == (0, 0)


# -- refusals -------------------------------------------------------------------------------------

def good_args(**over):
    args = dict(SHARED, shape=[4, 16], num_bits=8, narrow_range=False)
    args.update(over)
    return args


@pytest.mark.parametrize("over,name", [
    (dict(num_bits=1), "num_bits"),
    (dict(num_bits=9), "num_bits"),
    (dict(num_bits=16), "num_bits"),
    (dict(num_bits=8.0), "num_bits"),
    (dict(num_bits=True), "num_bits"),
    (dict(narrow_range=2), "narrow_range"),
    (dict(narrow_range="false"), "narrow_range"),
    (dict(shape=[4, 0]), "shape[1]"),
    (dict(shape=[-4, 16]), "shape[0]"),
    (dict(shape=[4, "16"]), "shape[1]"),
    (dict(shape=64), "shape"),
    (dict(shape=[1 << 30, 1 << 30, 4]), "shape"),
    (dict(min=-1), "min"),
    (dict(gradients=None), "gradients"),
    (dict(step=1), "step"),
])
def test_bad_arguments(over, name):
    with pytest.raises(sim.KernelArgError, match=re.escape(f"'{name}")):
        sim.Simulator("FT78NE").call(f"fp_{KERNEL}_s", **good_args(**over))


def test_missing_argument():
    args = good_args()
    del args["backprop_wrt_max"]
    with pytest.raises(sim.KernelArgError, match="backprop_wrt_max"):
        sim.Simulator("FT78NE").call(f"fp_{KERNEL}_s", **args)


def snapshot(m, variant, core, n):
    a = SHARED if variant == "s" else PRIVATE
    c = core if variant == "p" else None
    return {k: m.read(a[k], (n,), np.float32, core=c) for k in a} | \
           {"scratch": m.read(0x20000000, (4096,), np.uint8, core=core if c is not None else 0)}


@pytest.mark.parametrize("lo,hi,variant", [(1.0, -1.0, "s"), (0.5, 0.5, "s"), (-2.0, -2.0, "p"),
                                           (float("nan"), 1.0, "p"), (-1.0, float("inf"), "s")])
def test_bad_min_max_at_run_time_leaves_memory_unchanged(lo, hi, variant):
    m = sim.Simulator("MT7004")
    a = SHARED if variant == "s" else PRIVATE
    c = 1 if variant == "p" else None
    n = 200
    m.write(a["backprops_wrt_input"], np.full(n, 7.0, np.float32), core=c)
    m.write(a["backprop_wrt_min"], np.float32(5.0), core=c)
    m.write(a["backprop_wrt_max"], np.float32(6.0), core=c)
    g, x = np.ones(n, np.float32), np.linspace(-3, 3, n).astype(np.float32)
    m.write(a["gradients"], g, core=c)
    m.write(a["inputs"], x, core=c)
    m.write(a["min"], np.float32(lo), core=c)
    m.write(a["max"], np.float32(hi), core=c)
    before = snapshot(m, variant, 1, n)
    where = {"core": 1} if variant == "p" else {}
    with pytest.raises(sim.KernelArgError) as e:
        m.call(f"fp_{KERNEL}_{variant}", **a, shape=[n], **where)
    msg = str(e.value)
    assert "'min'" in msg and "'max'" in msg and f"min={float(np.float32(lo))!r}" in msg \
        and f"max={float(np.float32(hi))!r}" in msg
    after = snapshot(m, variant, 1, n)
    for k in before:
        np.testing.assert_array_equal(after[k], before[k], err_msg=k)


# -- timing properties ------------------------------------------------------------------------------

def timing_run(target, n, **where):
    return sim.Simulator(target).call(f"fp_{KERNEL}_s", **SHARED, shape=[n], numerics=False, **where)


def test_deterministic():
    rng = np.random.default_rng(1)
    g, x = rng.standard_normal(5000).astype(np.float32), rng.uniform(-3, 3, 5000).astype(np.float32)
    r1, o1 = run_kernel(sim.Simulator("FT78NE"), "fp", "s", g, x, -1.0, 2.0)
    r2, o2 = run_kernel(sim.Simulator("FT78NE"), "fp", "s", g, x, -1.0, 2.0)
    assert r1.cycles == r2.cycles
    assert [e._asdict() for e in r1.events] == [e._asdict() for e in r2.events]
    for k in OUTPUTS:
        np.testing.assert_array_equal(o1[k], o2[k])


@pytest.mark.parametrize("chip", ["FT78NE", "MT7004"])
def test_cycles_at_least_roofline_and_near_it(chip):
    run = timing_run(chip, 1 << 20)
    assert run.cycles >= run.roofline.cycles
    assert run.roofline.bound_by == "ddr"
    assert run.roofline_fraction > 0.8


def test_barrier_and_workspace_reduction_visible_in_trace():
    run = timing_run("FT78NE", 10000, tiling={"cores": 8, "tile_elements": 320})
    assert {e.core for e in run.events if e.kind == "barrier_wait"} == set(range(8))
    published = [e for e in run.events if e.kind == "dma_out" and e.dst_region == "gsm"]
    assert len({e.core for e in published}) == 8
    gathered = [e for e in run.events if e.kind == "dma_in" and e.src_region == "gsm"]
    assert [e.core for e in gathered] == [0] and gathered[0].bytes == 8 * 2 * 4
    barrier_end = max(e.end for e in run.events if e.kind == "barrier_wait")
    assert gathered[0].start >= barrier_end


def test_halving_ddr_bandwidth_slows_a_large_case(tmp_path):
    doc = yaml.safe_load((TARGETS / "FT78NE.yaml").read_text())
    for r in doc["regions"]:
        if r["name"] == "ddr":
            r["bandwidth_bytes_per_cycle"] = r["bandwidth_bytes_per_cycle"] / 2
    path = tmp_path / "half_ddr.yaml"
    path.write_text(yaml.safe_dump(doc))
    n = 1 << 20
    assert timing_run(sim.load_target(path), n).cycles > 1.7 * timing_run("FT78NE", n).cycles


def test_one_core_already_draws_all_of_ddr_on_a_large_case():
    """The op is DDR-bound and a lone core's streams may use all of DDR: more cores cannot make it faster than
    DDR allows, and one core alone comes within a few percent of that bound."""
    n = 1 << 20
    for chip, mask in (("FT78NE", 0xFF), ("MT7004", 0xF)):
        one, many = timing_run(chip, n, core_mask=0x1), timing_run(chip, n, core_mask=mask)
        assert one.roofline.bound_by == "ddr" and one.roofline_fraction > 0.95
        ddr_alone = one.roofline.region_bytes["ddr"] / sim.load_target(chip).region("ddr").bandwidth_bytes_per_cycle
        assert many.cycles >= ddr_alone
        assert abs(many.cycles - one.cycles) < 0.03 * one.cycles


def test_private_run_sees_no_other_core():
    run = sim.Simulator("FT78NE").call(f"fp_{KERNEL}_p", **PRIVATE, shape=[200000], core=6, numerics=False)
    assert_private_streams(run, 6)


# --- tilings --------------------------------------------------------------------

FQ = dict(gradients=ADDR[0], inputs=ADDR[1], backprops_wrt_input=ADDR[2], min=ADDR[3], max=ADDR[3] + 0x40,
          backprop_wrt_min=ADDR[3] + 0x80, backprop_wrt_max=ADDR[3] + 0xC0)


def fq_run(n: int, tiling: dict | None, chip="FT78NE"):
    """Run with [-2.3, 3.1] on 8 bits; inputs kept 1e-3 away from the nudged bounds (float64 nudge)."""
    lo, hi = -2.3, 3.1
    step = (hi - lo) / 255
    zp = np.floor(min(max(-lo / step, 0), 255) + 0.5)
    nmin, nmax = -zp * step, (255 - zp) * step
    rng = np.random.default_rng(n)
    x = rng.uniform(-4, 4, 3 * n)
    x = x[(np.abs(x - nmin) > 1e-3) & (np.abs(x - nmax) > 1e-3)][:n].astype(np.float32)
    g = rng.standard_normal(n).astype(np.float32)
    m = sim.Simulator(chip)
    m.write(FQ["gradients"], g)
    m.write(FQ["inputs"], x)
    m.write(FQ["min"], np.float32(lo))
    m.write(FQ["max"], np.float32(hi))
    run = m.call("fp_fake_quant_with_min_max_vars_gradient_s", tiling=tiling, **FQ, shape=[n])
    xd, gd = x.astype(np.float64), g.astype(np.float64)
    np.testing.assert_array_equal(m.read(FQ["backprops_wrt_input"], (n,), np.float32),
                                  np.where((xd >= nmin) & (xd <= nmax), g, 0))
    np.testing.assert_allclose(m.read(FQ["backprop_wrt_min"], (), np.float32), gd[xd < nmin].sum(), rtol=1e-5,
                               atol=1e-4)
    np.testing.assert_allclose(m.read(FQ["backprop_wrt_max"], (), np.float32), gd[xd > nmax].sum(), rtol=1e-5,
                               atol=1e-4)
    return run


@pytest.mark.parametrize("n", [40, 3000])
def test_fake_quant_every_tiling_right_and_honoured(n):
    listed = candidates(sim.Simulator("FT78NE"), "fp_fake_quant_with_min_max_vars_gradient_s", **FQ, shape=[n])
    assert 2 <= len(listed) <= 8  # (per core count the heuristic's tile, a longer and a shorter one, twice it)
    if n == 40:
        assert {"cores": 1, "tile_elements": 40} in listed  # a call that fits one tile may skip the exchange
    for tiling in listed + [{"cores": 3, "tile_elements": 16}, {"tile_elements": 7}]:
        run = fq_run(n, tiling)
        if len(tiling) == 2:  # every key: planned as given
            assert run.tiling.tiling == tiling and run.tiling.source == "given"
        else:  # a partial tiling: its keys fixed, the search completes the others
            assert run.tiling.source == "cost model" and run.tiling.fixed == tiling
            assert tiling.items() <= run.tiling.tiling.items()
        cores = run.tiling.tiling["cores"]
        busy = [c for c, tiles in run.plan.phases[0].tiles.items() if tiles]
        assert len(busy) == min(cores, -(-n // 32))
        assert len(run.plan.phases) == (2 if len(busy) > 1 else 1)
        sizes = [s[0] // 4 for s in loaded_blocks(run, "gradients")]  # contiguous copies count bytes
        share = -(-(-(-n // 32)) // len(busy)) * 32  # noqa: B002 (ceil divisions, not decrements) if len(busy) > 1 else n
        assert max(sizes) == min(tiling["tile_elements"], share)


FIRST = [("fp_fake_quant_with_min_max_vars_gradient_s", dict(FQ, shape=[4096]))]


@pytest.mark.parametrize("symbol,args", FIRST, ids=[str(i) for i in range(len(FIRST))])
def test_fake_quant_first_candidate_is_the_kernels_own_plan(symbol, args):
    assert_first_candidate_is_the_kernels_own_plan(symbol, args)


REFUSALS = [
    ("fp_fake_quant_with_min_max_vars_gradient_s", dict(FQ, shape=[3000]), {"cores": 9}, sim.KernelArgError,
     "tiling.cores"),
    ("fp_fake_quant_with_min_max_vars_gradient_s", dict(FQ, shape=[3000]), {"tile_elements": True},
     sim.KernelArgError, "tiling.tile_elements"),
    ("fp_fake_quant_with_min_max_vars_gradient_s", dict(FQ, shape=[10 ** 7]), {"tile_elements": 10 ** 6},
     sim.LayoutError, "scratchpad"),
]


@pytest.mark.parametrize("symbol,args,tiling,error,match", REFUSALS, ids=[str(t) for _, _, t, _, _ in REFUSALS])
def test_fake_quant_bad_tilings_are_refused(symbol, args, tiling, error, match):
    assert_refused(symbol, args, tiling, error, match)
