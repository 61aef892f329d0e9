"""DepthwiseConv2dBackpropInput: TensorFlow's golden cases, a float64 reference of our own, refusals, timing."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml
from golden import arrays, cases, chips_for, tolerances
from streams import assert_private_streams

import sim
from sim.testing import check_results

KERNEL = "depthwise_conv2d_backprop_input"
SHARED = dict(filter=0xA0000000, out_backprop=0xA1000000, output=0xB0000000)
PRIVATE = dict(filter=0x10000000, out_backprop=0x10100000, output=0x10800000)
ROOT = Path(__file__).resolve().parents[2]


# --- an independent float64 reference: the definition, looped over output positions and taps ---------

def _nhwc_order(fmt: str) -> tuple[int, int, int, int]:
    return (0, 1, 2, 3) if fmt == "NHWC" else (0, 2, 3, 1)


def _pads(in_size: int, k: int, s: int, d: int, padding: str, explicit: tuple[int, int]) -> tuple[int, int]:
    """(out size, pad before) of one axis, written from TensorFlow's documented rules."""
    eff = (k - 1) * d + 1
    if padding == "SAME":
        out = -(-in_size // s)
        return out, max((out - 1) * s + eff - in_size, 0) // 2
    before, after = explicit if padding == "EXPLICIT" else (0, 0)
    return (in_size + before + after - eff) // s + 1, before


def reference(filt: np.ndarray, dy: np.ndarray, input_sizes, strides, padding, explicit_paddings=None,
              data_format="NHWC", dilations=(1, 1, 1, 1), filter_shape=None) -> np.ndarray:
    """dx in float64: for each output position and tap, add dy·filter at the input position it read."""
    o = _nhwc_order(data_format)
    n_, h_, w_, c_ = (input_sizes[i] for i in o)
    sh, sw = strides[o[1]], strides[o[2]]
    dh, dw = dilations[o[1]], dilations[o[2]]
    ep = explicit_paddings or [0] * 8
    fh, fw, _, mult = filt.shape
    assert filter_shape is None or tuple(filter_shape) == filt.shape
    out_h, top = _pads(h_, fh, sh, dh, padding, (ep[2 * o[1]], ep[2 * o[1] + 1]))
    out_w, left = _pads(w_, fw, sw, dw, padding, (ep[2 * o[2]], ep[2 * o[2] + 1]))
    g = dy.astype(np.float64)
    if data_format == "NCHW":
        g = g.transpose(0, 2, 3, 1)
    assert g.shape == (n_, out_h, out_w, c_ * mult)
    g = g.reshape(n_, out_h, out_w, c_, mult)
    f = filt.astype(np.float64)
    dx = np.zeros((n_, h_, w_, c_))
    for oh in range(out_h):
        for ow in range(out_w):
            for kh in range(fh):
                ih = oh * sh - top + kh * dh
                if not 0 <= ih < h_:
                    continue
                for kw in range(fw):
                    iw = ow * sw - left + kw * dw
                    if 0 <= iw < w_:
                        dx[:, ih, iw, :] += (g[:, oh, ow] * f[kh, kw]).sum(axis=-1)
    return dx.transpose(0, 3, 1, 2) if data_format == "NCHW" else dx


def forward(filt: np.ndarray, x: np.ndarray, strides, top_left, out_hw, dilations) -> np.ndarray:
    """The forward depthwise convolution (NHWC, float64), to check that dx is its adjoint."""
    n_, h_, w_, c_ = x.shape
    fh, fw, _, mult = filt.shape
    y = np.zeros((n_, out_hw[0], out_hw[1], c_, mult))
    for oh in range(out_hw[0]):
        for ow in range(out_hw[1]):
            for kh in range(fh):
                for kw in range(fw):
                    ih = oh * strides[0] - top_left[0] + kh * dilations[0]
                    iw = ow * strides[1] - top_left[1] + kw * dilations[1]
                    if 0 <= ih < h_ and 0 <= iw < w_:
                        y[:, oh, ow] += x[:, ih, iw, :, None] * filt[kh, kw]
    return y.reshape(n_, out_hw[0], out_hw[1], c_ * mult)


# --- running the kernel ---------------------------------------------------------------------------------

def out_shape(input_sizes, filter_shape, strides, padding, explicit_paddings=None, data_format="NHWC",
              dilations=(1, 1, 1, 1)) -> tuple[int, ...]:
    """out_backprop's shape in data_format order, from the reference's own geometry."""
    o = _nhwc_order(data_format)
    ep = explicit_paddings or [0] * 8
    oh, _ = _pads(input_sizes[o[1]], filter_shape[0], strides[o[1]], dilations[o[1]], padding,
                  (ep[2 * o[1]], ep[2 * o[1] + 1]))
    ow, _ = _pads(input_sizes[o[2]], filter_shape[1], strides[o[2]], dilations[o[2]], padding,
                  (ep[2 * o[2]], ep[2 * o[2] + 1]))
    k = input_sizes[o[3]] * filter_shape[3]
    return (input_sizes[0], oh, ow, k) if data_format == "NHWC" else (input_sizes[0], k, oh, ow)


def run_kernel(chip, symbol, filt, dy, attrs, variant="s", core=None, tiling=None, **where):
    """Place the inputs, call the symbol (with ``tiling`` if given), return (output, run)."""
    m = sim.Simulator(chip)
    a = SHARED if variant == "s" else PRIVATE
    core = None if variant == "s" else (0 if core is None else core)
    m.write(a["filter"], filt, core=core)
    m.write(a["out_backprop"], dy, core=core)
    if variant == "p":
        where = {"core": core}
    run = m.call(symbol, **a, **attrs, **where, tiling=tiling)
    return m.read(a["output"], tuple(attrs["input_sizes"]), filt.dtype, core=core), run


def check_kernel(chip, symbol, filt, dy, attrs, expected, *, rtol, atol, variant="s", core=None, tiling=None,
                 **where):
    """:func:`run_kernel` through ``sim.testing.check_results``: dx compared with ``expected`` (``rtol``,
    ``atol``); returns the run."""
    a = SHARED if variant == "s" else PRIVATE
    if variant == "p":
        where = {"core": 0 if core is None else core}
    return check_results(chip, symbol, {**a, **attrs, **where}, [(a["filter"], filt), (a["out_backprop"], dy)],
                         {"output": (a["output"], tuple(attrs["input_sizes"]), filt.dtype)}, {"output": expected},
                         rtol=rtol, atol=atol, tiling=tiling)


def random_case(seed, input_sizes, filter_shape, strides, padding, dtype=np.float32, **attrs):
    """Seeded filter and out_backprop for a call with these attributes."""
    rng = np.random.default_rng(seed)
    full = dict(input_sizes=list(input_sizes), filter_shape=list(filter_shape), strides=list(strides),
                padding=padding, **attrs)
    dy = rng.uniform(-1, 1, out_shape(**full)).astype(dtype)
    filt = rng.uniform(-1, 1, filter_shape).astype(dtype)
    return filt, dy, full


# --- TensorFlow's golden cases ----------------------------------------------------------------------------

GOLDEN = [(c, chip, v) for c in cases(KERNEL) for chip in chips_for(c) for v in ("s", "p")]


@pytest.mark.parametrize("case,chip,variant", GOLDEN, ids=[f"{c['id']}-{chip}-{v}" for c, chip, v in GOLDEN])
def test_golden(case, chip, variant):
    data = arrays(case)
    prefix = "hp" if case["precision"] == "fp16" else "fp"
    where = {"core_mask": sim.load_target(chip).all_cores_mask} if variant == "s" else {}
    run = check_kernel(chip, f"{prefix}_{KERNEL}_{variant}", data["filter"], data["out_backprop"], case["attrs"],
                       data["output"], variant=variant, core=2, **tolerances(case, ["output"]), **where)
    assert run.cycles > 0


def test_golden_set_covers_both_precisions_and_formats():
    cs = cases(KERNEL)
    assert {c["precision"] for c in cs} == {"fp16", "fp32"}
    assert {c["attrs"]["data_format"] for c in cs} == {"NHWC", "NCHW"}


# --- our own cases against the float64 reference ------------------------------------------------------------

OWN = [
    # (input_sizes, filter_shape, strides, padding, extra attrs)
    ([2, 9, 11, 5], [3, 3, 5, 2], [1, 1, 1, 1], "SAME", dict(dilations=[1, 2, 2, 1])),
    ([2, 5, 9, 11], [3, 2, 5, 3], [1, 1, 1, 1], "SAME", dict(data_format="NCHW", dilations=[1, 1, 2, 3])),
    ([1, 13, 10, 4], [4, 3, 4, 2], [1, 3, 2, 1], "VALID", {}),
    ([2, 4, 12, 13], [3, 5, 4, 2], [1, 1, 2, 3], "VALID", dict(data_format="NCHW", dilations=[1, 1, 2, 1])),
    ([1, 10, 9, 3], [3, 3, 3, 2], [1, 2, 2, 1], "EXPLICIT",
     dict(explicit_paddings=[0, 0, 2, 1, 0, 3, 0, 0], dilations=[1, 2, 1, 1])),
    ([2, 3, 8, 7], [2, 3, 3, 4], [1, 1, 2, 1], "EXPLICIT",
     dict(explicit_paddings=[0, 0, 0, 0, 1, 2, 3, 0], data_format="NCHW", dilations=[1, 1, 1, 2])),
    # stride larger than the dilated filter: some input rows/columns get no gradient at all
    ([1, 11, 11, 6], [1, 2, 6, 1], [1, 4, 3, 1], "VALID", {}),
    # output rows reaching past the padding: SAME with a large stride
    ([1, 7, 7, 34], [3, 3, 34, 1], [1, 3, 3, 1], "SAME", {}),
]


@pytest.mark.parametrize("chip,variant", [("FT78NE", "s"), ("FT78NE", "p"), ("MT7004", "s")])
@pytest.mark.parametrize("i", range(len(OWN)))
def test_fp32_against_float64_reference(i, chip, variant):
    sizes, fshape, strides, padding, extra = OWN[i]
    filt, dy, attrs = random_case(i, sizes, fshape, strides, padding, **extra)
    check_kernel(chip, f"fp_{KERNEL}_{variant}", filt, dy, attrs, reference(filt, dy, **attrs), rtol=1e-5, atol=1e-5,
                 variant=variant, core=5 if chip == "FT78NE" else 3)


@pytest.mark.parametrize("variant", ["s", "p"])
@pytest.mark.parametrize("i", [0, 1, 4, 5])
def test_fp16_against_float64_reference(i, variant):
    sizes, fshape, strides, padding, extra = OWN[i]
    filt, dy, attrs = random_case(100 + i, sizes, fshape, strides, padding, dtype=np.float16, **extra)
    assert filt.dtype == np.float16  # dx is read back as fp16, the filter's dtype
    # fp32 accumulation, one rounding to fp16 at the end: within half an fp16 ulp (plus fp32 noise).
    check_kernel("MT7004", f"hp_{KERNEL}_{variant}", filt, dy, attrs, reference(filt, dy, **attrs), rtol=2 ** -10,
                 atol=2 ** -14, variant=variant)


def test_is_the_adjoint_of_the_forward_convolution():
    """<conv(x), dy> == <x, dx> for the forward depthwise convolution written independently."""
    rng = np.random.default_rng(7)
    sizes, fshape, strides, dil = [2, 9, 8, 3], [3, 2, 3, 2], [1, 2, 1, 1], [1, 1, 2, 1]
    attrs = dict(input_sizes=sizes, filter_shape=fshape, strides=strides, padding="EXPLICIT",
                 explicit_paddings=[0, 0, 1, 2, 2, 0, 0, 0], dilations=dil)
    oshape = out_shape(**attrs)
    filt = rng.standard_normal(fshape).astype(np.float32)
    dy = rng.standard_normal(oshape).astype(np.float32)
    x = rng.standard_normal(sizes)
    got, _ = run_kernel("FT78NE", f"fp_{KERNEL}_s", filt, dy, attrs)
    y = forward(filt.astype(np.float64), x, (2, 1), (1, 2), oshape[1:3], (1, 2))
    lhs = float((y * dy.astype(np.float64)).sum())
    rhs = float((x * got.astype(np.float64)).sum())
    assert abs(lhs - rhs) <= 1e-4 * max(1.0, abs(lhs))


def test_hand_derived_values():
    """1x1 input channel, 2x2 filter, stride 1 VALID on a 3x3 input with a single dy 1 at (0,0): dx = filter."""
    filt = np.array([[1, 2], [3, 4]], np.float32).reshape(2, 2, 1, 1)
    dy = np.zeros((1, 2, 2, 1), np.float32)
    dy[0, 0, 0, 0] = 1.0
    dy[0, 1, 1, 0] = 10.0
    attrs = dict(input_sizes=[1, 3, 3, 1], filter_shape=[2, 2, 1, 1], strides=[1, 1, 1, 1], padding="VALID")
    exp = np.array([[1, 2, 0], [3, 4 + 10, 20], [0, 30, 40]], np.float32).reshape(1, 3, 3, 1)
    check_kernel("FT78NE", f"fp_{KERNEL}_s", filt, dy, attrs, exp, rtol=0, atol=0)


def test_multiplier_channel_order():
    """Output channel k = c·mult + m reads input channel c through filter[:, :, c, m]."""
    filt = np.zeros((1, 1, 2, 3), np.float32)
    filt[0, 0] = [[1, 10, 100], [1000, 10000, 100000]]
    dy = np.ones((1, 1, 1, 6), np.float32) * np.array([1, 2, 3, 4, 5, 6], np.float32)
    attrs = dict(input_sizes=[1, 1, 1, 2], filter_shape=[1, 1, 2, 3], strides=[1, 1, 1, 1], padding="VALID")
    exp = np.array([1 + 20 + 300, 4000 + 50000 + 600000], np.float32).reshape(1, 1, 1, 2)
    check_kernel("FT78NE", f"fp_{KERNEL}_p", filt, dy, attrs, exp, rtol=0, atol=0, variant="p")


# --- tiling: a tiny scratchpad forces row, channel and column blocks -----------------------------------------

def small_scratch_target(tmp_path: Path, am_bytes: int) -> sim.Target:
    """FT78NE with a smaller AM scratchpad (so small shapes need many tiles)."""
    doc = yaml.safe_load((ROOT / "targets" / "FT78NE.yaml").read_text())
    for r in doc["regions"]:
        if r["name"] == "am":
            r["size_bytes"] = am_bytes
    path = tmp_path / "small_am.yaml"
    path.write_text(yaml.safe_dump(doc))
    return sim.load_target(path)


@pytest.mark.parametrize("fmt", ["NHWC", "NCHW"])
@pytest.mark.parametrize("am_kib", [4, 16, 64])
def test_many_tiles_match_reference(tmp_path, fmt, am_kib):
    """Small scratchpads: row, channel and (at 4 KiB) column blocks, each with its halo, still give dx exactly."""
    target = small_scratch_target(tmp_path, am_kib * 1024)
    sizes = [2, 12, 70, 40] if fmt == "NHWC" else [2, 40, 12, 70]
    filt, dy, attrs = random_case(3, sizes, [3, 4, 40, 2], [1, 1, 1, 1], "SAME", data_format=fmt,
                                  dilations=[1, 2, 1, 1] if fmt == "NHWC" else [1, 1, 2, 1])
    run = check_kernel(target, f"fp_{KERNEL}_s", filt, dy, attrs, reference(filt, dy, **attrs), rtol=1e-5, atol=1e-5)
    n_tiles = sum(len(t) for t in run.plan.phases[0].tiles.values())
    assert n_tiles > 16
    widths = {t.compute.outputs[0].shape[2 if fmt == "NHWC" else 3]
              for tiles in run.plan.phases[0].tiles.values() for t in tiles}
    assert (max(widths) < 70) == (am_kib == 4)  # columns are cut only when a whole row cannot fit
    for tiles in run.plan.phases[0].tiles.values():
        assert {t.slot for t in tiles} <= {0, 1}
        assert all(a.slot != b.slot for a, b in zip(tiles, tiles[1:]))  # double-buffered
    # Each channel block's first tile brings the block's filter slice (more than one block per core here).
    filter_addr = SHARED["filter"]
    per_core = [sum(1 for t in tiles for tr in t.loads if tr.src >= filter_addr and tr.src < SHARED["out_backprop"])
                for tiles in run.plan.phases[0].tiles.values()]
    assert max(per_core) > 1


def test_nothing_fits_is_a_layout_error(tmp_path):
    target = small_scratch_target(tmp_path, 1024)
    filt, dy, attrs = random_case(0, [1, 4, 4, 8], [9, 9, 8, 4], [1, 1, 1, 1], "SAME")
    with pytest.raises(sim.LayoutError, match="does not fit"):
        run_kernel(target, f"fp_{KERNEL}_s", filt, dy, attrs)


@pytest.mark.parametrize("tiling,busy", [(None, None), ({"channel_parts": 1}, 3), ({"channel_parts": 2}, 6)])
def test_cores_share_the_work(tiling, busy):
    """3 input rows, 2 channel vectors of 32: rows only keeps 3 cores busy, two channel groups 3 x 2."""
    filt, dy, attrs = random_case(1, [1, 3, 16, 64], [3, 3, 64, 1], [1, 1, 1, 1], "SAME")
    run = check_kernel("FT78NE", f"fp_{KERNEL}_s", filt, dy, attrs, reference(filt, dy, **attrs), rtol=1e-5,
                       atol=1e-5, core_mask=0xFF, tiling=tiling)
    used = [c for c, tiles in run.plan.phases[0].tiles.items() if tiles]
    assert len(used) == (busy or 3 * run.tiling.tiling["channel_parts"])
    assert set(run.plan.cores) == set(range(8))


def test_core_mask_subset_runs_on_those_cores_only():
    filt, dy, attrs = random_case(4, [2, 7, 9, 6], [3, 3, 6, 2], [1, 2, 1, 1], "SAME", dilations=[1, 1, 2, 1])
    run = check_kernel("FT78NE", f"fp_{KERNEL}_s", filt, dy, attrs, reference(filt, dy, **attrs), rtol=1e-5,
                       atol=1e-5, core_mask=0b10100101)
    assert {e.core for e in run.events} == {0, 2, 5, 7}


# --- refusals ------------------------------------------------------------------------------------------------

GOOD = dict(input_sizes=[1, 6, 6, 4], filter_shape=[3, 3, 4, 2], strides=[1, 1, 1, 1], padding="SAME")

BAD = [
    ("strides", dict(strides=[1, 0, 1, 1])),
    ("strides", dict(strides=[2, 1, 1, 1])),
    ("strides", dict(strides=[1, 1, 1, 2])),
    ("strides", dict(strides=[1, 1, 1])),
    ("dilations", dict(dilations=[2, 1, 1, 1])),
    ("dilations", dict(dilations=[1, 1, 1, 3])),
    ("dilations", dict(dilations=[1, 0, 1, 1])),
    ("explicit_paddings", dict(padding="EXPLICIT", explicit_paddings=[0, 0, 1, 1, 1])),
    ("explicit_paddings", dict(padding="EXPLICIT", explicit_paddings=[0, 0, 1, -1, 1, 1, 0, 0])),
    ("explicit_paddings", dict(padding="EXPLICIT", explicit_paddings=[1, 0, 1, 1, 1, 1, 0, 0])),
    ("explicit_paddings", dict(padding="EXPLICIT", explicit_paddings=[0, 0, 1, 1, 1, 1, 0, 2])),
    ("explicit_paddings", dict(padding="EXPLICIT")),
    ("explicit_paddings", dict(padding="SAME", explicit_paddings=[0, 0, 1, 1, 1, 1, 0, 0])),
    ("padding", dict(padding="FULL")),
    ("padding", dict(padding="same")),
    ("data_format", dict(data_format="NCWH")),
    ("filter_shape", dict(filter_shape=[3, 3, 5, 2])),
    ("filter_shape", dict(filter_shape=[3, 3, 4, 0])),
    ("filter_shape", dict(filter_shape=[3, 3, 4])),
    ("input_sizes", dict(input_sizes=[1, 2, 6, 4], padding="VALID")),  # no output rows: out_backprop empty
    ("input_sizes", dict(input_sizes=[1, 0, 6, 4])),
    ("input_sizes", dict(input_sizes=[1, 6, 6])),
    ("input_sizes", dict(input_sizes=[1 << 16, 1 << 12, 1 << 12, 4], filter_shape=[3, 3, 4, 2])),
    ("filter_shape", dict(input_sizes=[1, 6, 6, 1 << 20], filter_shape=[1 << 10, 1 << 10, 1 << 20, 1])),
    ("output", dict(output=-4)),
    ("filter", dict(filter="0xA0000000")),
    ("input_sizes", dict(input_sizes=None)),
]


@pytest.mark.parametrize("name,change", BAD, ids=[f"{n}-{i}" for i, (n, _) in enumerate(BAD)])
def test_refusals_name_the_argument(name, change):
    m = sim.Simulator("FT78NE")
    before = m.memory.snapshot()
    kwargs = {**SHARED, **GOOD, **change}
    with pytest.raises(sim.KernelArgError, match=f"'{name}"):
        m.call(f"fp_{KERNEL}_s", **kwargs)
    assert m.memory.snapshot() == before


def test_missing_and_extra_arguments():
    m = sim.Simulator("FT78NE")
    kwargs = {**SHARED, **GOOD}
    del kwargs["strides"]
    with pytest.raises(sim.KernelArgError, match="strides"):
        m.call(f"fp_{KERNEL}_s", **kwargs)
    with pytest.raises(sim.KernelArgError, match="bias"):
        m.call(f"fp_{KERNEL}_s", **SHARED, **GOOD, bias=0xC0000000)


def test_fp16_refused_on_ft78ne_and_layout_checked():
    with pytest.raises(sim.KernelArgError, match="fp16"):
        sim.Simulator("FT78NE").call(f"hp_{KERNEL}_s", **SHARED, **GOOD)
    with pytest.raises(sim.LayoutError, match="out_backprop"):
        sim.Simulator("FT78NE").call(f"fp_{KERNEL}_p", **SHARED, **GOOD)
    with pytest.raises(sim.LayoutError, match="output"):
        sim.Simulator("FT78NE").call(f"fp_{KERNEL}_s", **{**SHARED, "output": SHARED["out_backprop"] + 64}, **GOOD)


# --- timing properties ------------------------------------------------------------------------------------------

def timing_run(target, *, core_mask=None, sizes=(4, 32, 32, 64), fshape=(3, 3, 64, 1)):
    filt, dy, attrs = random_case(11, sizes, fshape, [1, 1, 1, 1], "SAME")
    where = {} if core_mask is None else {"core_mask": core_mask}
    return run_kernel(target, f"fp_{KERNEL}_s", filt, dy, attrs, **where)[1]


def test_deterministic():
    a, b = timing_run("FT78NE"), timing_run("FT78NE")
    assert a.cycles == b.cycles
    assert a.events == b.events


@pytest.mark.parametrize("chip", ["FT78NE", "MT7004"])
def test_cycles_never_below_roofline(chip):
    run = timing_run(chip)
    assert run.cycles >= run.roofline.cycles
    # The big 3x3 depthwise case is DDR-bound, and the plan keeps DDR busy.
    assert run.roofline.bound_by == "ddr"
    assert run.roofline_fraction >= 0.5


def test_flops_counted():
    """2·fh·fw·mult·in_c per (output position, tap) inside the input, channels in whole vectors of 32 lanes."""
    run = timing_run("FT78NE", sizes=(1, 8, 8, 32), fshape=(3, 3, 32, 2))
    pairs = 3 * 8 - 2  # taps x output rows landing inside 8 input rows, SAME 3x3 (each edge loses one)
    assert run.roofline.total_flops == 2 * 2 * 32 * pairs * pairs


def test_more_cores_speed_up_a_compute_bound_shape():
    """9x9 taps, multiplier 4: on one core compute needs as long as the core's DMA engines can stream (within
    10%); eight cores split the channels (no halo re-reads) and share both."""
    sizes, fshape = (1, 12, 12, 256), (9, 9, 256, 4)
    one = timing_run("FT78NE", core_mask=0x01, sizes=sizes, fshape=fshape)
    eight = timing_run("FT78NE", core_mask=0xFF, sizes=sizes, fshape=fshape)
    assert one.roofline.resource_cycles["compute"] > 0.9 * one.roofline.cycles
    assert len([c for c, t in eight.plan.phases[0].tiles.items() if t]) == 8
    assert eight.cycles * 1.5 < one.cycles


def test_halving_ddr_bandwidth_slows_a_bandwidth_bound_shape(tmp_path):
    doc = yaml.safe_load((ROOT / "targets" / "FT78NE.yaml").read_text())
    for r in doc["regions"]:
        if r["name"] == "ddr":
            r["bandwidth_bytes_per_cycle"] = r["bandwidth_bytes_per_cycle"] / 2
    path = tmp_path / "slow_ddr.yaml"
    path.write_text(yaml.safe_dump(doc))
    fast, slow = timing_run("FT78NE"), timing_run(sim.load_target(path))
    assert fast.roofline.bound_by == "ddr"
    assert slow.cycles > 1.6 * fast.cycles


def test_private_run_sees_no_other_core():
    filt, dy, attrs = random_case(2, [2, 24, 24, 64], [3, 3, 64, 1], [1, 1, 1, 1], "SAME")
    _, run = run_kernel("FT78NE", f"fp_{KERNEL}_p", filt, dy, attrs, "p", core=4)
    assert_private_streams(run, 4)


# --- planning on the scaffold: typed "does not fit", the timing model's choice, no private cost model -----

def _context(m, attrs, tiling=None, **where):
    from dataclasses import replace
    call = m.bind(f"fp_{KERNEL}_s", **SHARED, **attrs, **where)
    return call, replace(m.context(call), tiling=tiling)


def test_a_tile_too_big_for_the_scratchpad_names_the_vector_level(tmp_path):
    import kernels.depthwise_conv2d_backprop_input as dw
    from sim.model.plan import DoesNotFit
    m = sim.Simulator(small_scratch_target(tmp_path, 4 * 1024))
    _, _, attrs = random_case(0, [1, 8, 8, 32], [3, 3, 32, 1], [1, 1, 1, 1], "SAME")
    call, ctx = _context(m, attrs, {"tile_rows": 8, "tile_cols": 8, "tile_channels": 32}, core_mask=0x01)
    with pytest.raises(DoesNotFit, match="does not fit") as err:
        dw.KERNEL.plan(call, ctx)
    # Two slots of an 8x8x32 fp32 output block and its halo (8 output rows and columns reach 8 SAME inputs):
    # 2 x (8192 + 8192) bytes, beside two 3x3x32 fp32 filter slices of 1152 bytes.
    assert err.value.resource == ctx.vector_level.name == "am"
    assert (err.value.needed_bytes, err.value.available_bytes) == (2 * (8192 + 8192) + 2 * 1152, 4 * 1024)


@pytest.mark.parametrize("chip,sizes,fshape", [("FT78NE", [2, 20, 20, 64], [3, 3, 64, 2]),
                                               ("MT7004", [1, 16, 18, 64], [5, 5, 64, 1]),
                                               ("FT78NE", [2, 12, 14, 40], [3, 3, 40, 1])])
def test_the_search_ends_where_no_neighbour_is_cheaper(chip, sizes, fshape):
    """With tolerance 0, the search's choice is a local optimum of the space: each of its one-key neighbours
    (another channel split, the next narrower or wider tile, the next shorter or taller) costs at least as much
    when simulated as given; the kernel prices none of them itself."""
    from tilings import space_of

    import sim.tuning as tuning

    m = sim.Simulator(chip, tiling_tolerance=0, tuning_cache=False)
    filt, dy, attrs = random_case(3, sizes, fshape, [1, 1, 1, 1], "SAME")
    args = dict(filter=SHARED["filter"], out_backprop=SHARED["out_backprop"], output=SHARED["output"], **attrs)
    symbol = f"fp_{KERNEL}_s"
    run = m.call(symbol, numerics=False, **args)
    space = space_of(m, symbol, **args)
    near = tuning.neighbours(space, run.tiling.tiling, tuning.Pool(space, {}), {})
    assert near
    for t in near:
        assert m.call(symbol, numerics=False, tiling=t, **args).cycles >= run.cycles, t


def test_the_kernel_keeps_no_timing_model_of_its_own():
    """The target's timing numbers are read by sim.timing only: the kernel prices nothing (its register blocks
    are the plan context's cheapest_loops pick)."""
    import ast

    import kernels.depthwise_conv2d_backprop_input as dw
    modules = sorted(Path(dw.__file__).parent.glob("*.py"))  # every module of the package
    assert len(modules) > 1
    timing = {"bandwidth_bytes_per_cycle", "port_bandwidth_bytes_per_cycle", "latency_cycles", "setup_cycles",
              "peak_flops_per_cycle", "loop_overhead_cycles", "vector_op_latency_cycles", "barrier_latency_cycles",
              "vector_efficiency", "launch_overhead_cycles"}
    for path in modules:
        tree = ast.parse(path.read_text())
        assert not {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)} & timing, path.name
