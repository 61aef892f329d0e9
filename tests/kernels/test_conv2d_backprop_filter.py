"""Conv2DBackpropFilter: TensorFlow's golden and literal cases, a float64 reference of our own, refusals, timing."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml
from golden import arrays, cases, chips_for, tolerances
from streams import assert_private_streams

import kernels.conv2d_backprop_filter as cbf
import sim
from sim.testing import check_results

KERNEL = "conv2d_backprop_filter"
SHARED = dict(input=0xA0000000, out_backprop=0xA4000000, output=0xA8000000)
PRIVATE = dict(input=0x10000000, out_backprop=0x10400000, output=0x10800000)
ROOT = Path(__file__).resolve().parents[2]


# --- an independent float64 reference: the definition, looped over taps and output positions ----------

def _order(fmt: str) -> tuple[int, int, int, int]:
    """Positions of N, H, W, C in a 4-vector of ``fmt`` order."""
    return (0, 1, 2, 3) if fmt == "NHWC" else (0, 2, 3, 1)


def _axis(size: int, k: int, s: int, d: int, padding: str, explicit: tuple[int, int]) -> tuple[int, int]:
    """(output size, pad before) of one spatial axis, from TensorFlow's documented rules."""
    eff = (k - 1) * d + 1
    if padding == "SAME":
        out = -(-size // s)
        return out, max((out - 1) * s + eff - size, 0) // 2
    before, after = explicit if padding == "EXPLICIT" else (0, 0)
    return (size + before + after - eff) // s + 1, before


def geometry(input_shape, filter_sizes, strides, padding, explicit_paddings=None, data_format="NHWC",
             dilations=(1, 1, 1, 1)) -> dict:
    """Output sizes and pads of a call, written independently of kernels/common/geometry.py."""
    o = _order(data_format)
    ep = explicit_paddings or [0] * 8
    fh, fw = filter_sizes[:2]
    out_h, top = _axis(input_shape[o[1]], fh, strides[o[1]], dilations[o[1]], padding, (ep[2 * o[1]], ep[2 * o[1] + 1]))
    out_w, left = _axis(input_shape[o[2]], fw, strides[o[2]], dilations[o[2]], padding,
                        (ep[2 * o[2]], ep[2 * o[2] + 1]))
    n = input_shape[o[0]]
    dy_nhwc = (n, out_h, out_w, filter_sizes[3])
    dy_shape = dy_nhwc if data_format == "NHWC" else (n, filter_sizes[3], out_h, out_w)
    return dict(top=top, left=left, dy_shape=dy_shape, sh=strides[o[1]], sw=strides[o[2]],
                dh=dilations[o[1]], dw=dilations[o[2]])


def reference(x: np.ndarray, dy: np.ndarray, filter_sizes, strides, padding, explicit_paddings=None,
              data_format="NHWC", dilations=(1, 1, 1, 1), input_shape=None) -> np.ndarray:
    """dW in float64: for each tap and output position, add x at the input position it read times dy."""
    assert input_shape is None or tuple(input_shape) == x.shape
    g = geometry(x.shape, filter_sizes, strides, padding, explicit_paddings, data_format, dilations)
    xf, gf = x.astype(np.float64), dy.astype(np.float64)
    if data_format == "NCHW":
        xf, gf = xf.transpose(0, 2, 3, 1), gf.transpose(0, 2, 3, 1)
    _, h, w, _ = xf.shape
    _, out_h, out_w, _ = gf.shape
    fh, fw = filter_sizes[:2]
    dw_ = np.zeros(tuple(filter_sizes))
    for kh in range(fh):
        for kw in range(fw):
            for i in range(out_h):
                r = i * g["sh"] + kh * g["dh"] - g["top"]
                if not 0 <= r < h:
                    continue
                for j in range(out_w):
                    q = j * g["sw"] + kw * g["dw"] - g["left"]
                    if 0 <= q < w:
                        dw_[kh, kw] += xf[:, r, q, :].T @ gf[:, i, j, :]
    return dw_


# --- helpers ---------------------------------------------------------------------------------------------

def _where(target: sim.Target, variant: str, core: int = 1, mask: int | None = None) -> tuple[dict, dict, int | None]:
    if variant == "s":
        return SHARED, {"core_mask": mask if mask is not None else target.all_cores_mask}, None
    return PRIVATE, {"core": core}, core


def run_case(chip, precision: str, variant: str, x: np.ndarray, dy: np.ndarray, attrs: dict, *,
             mask: int | None = None, numerics: bool = True,
             tiling: dict | None = None) -> tuple[np.ndarray, sim.Run]:
    """Place x and dy, call the kernel (with ``tiling`` if given), read dW back."""
    m = sim.Simulator(chip)
    a, where, core = _where(m.target, variant, mask=mask)
    m.write(a["input"], x, core=core)
    m.write(a["out_backprop"], dy, core=core)
    prefix = "hp" if precision == "fp16" else "fp"
    run = m.call(f"{prefix}_{KERNEL}_{variant}", input=a["input"], out_backprop=a["out_backprop"],
                 output=a["output"], numerics=numerics, tiling=tiling, **attrs, **where)
    dt = np.float16 if precision == "fp16" else np.float32
    return m.read(a["output"], tuple(attrs["filter_sizes"]), dt, core=core), run


def check_case(chip, precision: str, variant: str, x: np.ndarray, dy: np.ndarray, attrs: dict, expected: np.ndarray,
               *, rtol: float, atol: float, mask: int | None = None, tiling: dict | None = None) -> sim.Run:
    """:func:`run_case` through ``sim.testing.check_results``: dW compared with ``expected`` (``rtol``, ``atol``);
    returns the run."""
    a, where, _ = _where(chip if isinstance(chip, sim.Target) else sim.load_target(chip), variant, mask=mask)
    prefix, dt = ("hp", np.float16) if precision == "fp16" else ("fp", np.float32)
    return check_results(chip, f"{prefix}_{KERNEL}_{variant}",
                         dict(input=a["input"], out_backprop=a["out_backprop"], output=a["output"], **attrs, **where),
                         [(a["input"], x), (a["out_backprop"], dy)],
                         {"output": (a["output"], tuple(attrs["filter_sizes"]), dt)}, {"output": expected}, rtol=rtol,
                         atol=atol, tiling=tiling)


def random_case(seed: int, attrs: dict, dtype=np.float32) -> tuple[np.ndarray, np.ndarray]:
    """Seeded x and dy for ``attrs`` (dy's shape from the independent geometry)."""
    rng = np.random.default_rng(seed)
    g = geometry(**{k: attrs.get(k, d) for k, d in (("input_shape", None), ("filter_sizes", None),
                                                     ("strides", None), ("padding", None),
                                                     ("explicit_paddings", None), ("data_format", "NHWC"),
                                                     ("dilations", (1, 1, 1, 1)))})
    x = rng.uniform(-1, 1, attrs["input_shape"]).astype(dtype)
    dy = rng.uniform(-1, 1, g["dy_shape"]).astype(dtype)
    return x, dy


def small_target(tmp_path: Path, base: str = "FT78NE", am_bytes: int = 0x8000, workspace_bytes: int = 0x1000,
                 ddr_scale: float = 1.0) -> sim.Target:
    """A copy of ``base`` with a small scratchpad and workspace (and optionally scaled DDR bandwidth)."""
    doc = yaml.safe_load((ROOT / "targets" / f"{base}.yaml").read_text())
    for r in doc["regions"]:
        if r["name"] == "am":
            r["size_bytes"] = am_bytes
        if r["name"] == "ddr":
            r["bandwidth_bytes_per_cycle"] = r["bandwidth_bytes_per_cycle"] * ddr_scale
    next(lv for lv in doc["staging"]["levels"] if lv["name"] == "gsm")["size_bytes"] = workspace_bytes
    path = tmp_path / f"{base}_small.yaml"
    path.write_text(yaml.safe_dump(doc))
    return sim.load_target(path)


# --- TensorFlow's golden cases ----------------------------------------------------------------------------

GOLDEN = [(c, chip, v) for c in cases(KERNEL) for chip in chips_for(c) for v in ("s", "p")]


@pytest.mark.parametrize("case,chip,variant", GOLDEN, ids=[f"{c['id']}-{chip}-{v}" for c, chip, v in GOLDEN])
def test_golden(case, chip, variant):
    data = arrays(case)
    attrs = {k: v for k, v in case["attrs"].items() if v is not None}
    run = check_case(chip, case["precision"], variant, data["input"], data["out_backprop"], attrs, data["output"],
                     **tolerances(case, ["output"]))
    assert run.cycles >= run.roofline.cycles


def test_golden_cases_are_all_there():
    ids = {c["id"] for c in cases(KERNEL)}
    assert len(ids) == 10 and {c["precision"] for c in cases(KERNEL)} == {"fp16", "fp32"}


# --- TensorFlow's literal test case (conv_ops_test: Conv2D2x2FilterBackprop-like VALID case) -----------

@pytest.mark.parametrize("chip,variant", [("FT78NE", "s"), ("FT78NE", "p"), ("MT7004", "s"), ("MT7004", "p")])
def test_tensorflow_literal_case(chip, variant):
    x = np.arange(1, 7, dtype=np.float32).reshape(1, 2, 3, 1)
    dy = np.array([1, 2], np.float32).reshape(1, 1, 2, 1)
    attrs = dict(input_shape=[1, 2, 3, 1], filter_sizes=[2, 2, 1, 1], strides=[1, 1, 1, 1], padding="VALID")
    check_case(chip, "fp32", variant, x, dy, attrs, np.array([5, 8, 14, 17], np.float32).reshape(2, 2, 1, 1), rtol=0,
               atol=0)


def test_hand_derived_stride_two_same():
    # 1x3x3x1 input 1..9, 2x2 filter, stride 2, SAME: out 2x2, total pad 1 -> top/left 0, bottom/right 1.
    # dW[kh,kw] = Σ_{i,j} x[2i+kh, 2j+kw]·dy[i,j] with x = 0 outside; dy = [[1,2],[3,4]].
    x = np.arange(1, 10, dtype=np.float32).reshape(1, 3, 3, 1)
    dy = np.array([1, 2, 3, 4], np.float32).reshape(1, 2, 2, 1)
    attrs = dict(input_shape=[1, 3, 3, 1], filter_sizes=[2, 2, 1, 1], strides=[1, 2, 2, 1], padding="SAME")
    # kh,kw=0,0: 1·1+3·2+7·3+9·4 = 64; (0,1): 2·1+0+8·3+0 = 26; (1,0): 4·1+6·2+0+0 = 16; (1,1): 5·1 = 5
    check_case("FT78NE", "fp32", "s", x, dy, attrs, np.array([64, 26, 16, 5], np.float32).reshape(2, 2, 1, 1), rtol=0,
               atol=0)


# --- our own float64 reference: dilated, strided, explicitly padded, both layouts ------------------------

OWN = {
    "nhwc-dilated-same": dict(input_shape=[2, 9, 8, 5], filter_sizes=[3, 2, 5, 7], strides=[1, 1, 1, 1],
                              padding="SAME", dilations=[1, 2, 3, 1]),
    "nhwc-strided-valid": dict(input_shape=[2, 11, 10, 6], filter_sizes=[3, 3, 6, 4], strides=[1, 2, 3, 1],
                               padding="VALID"),
    "nhwc-explicit-dilated": dict(input_shape=[1, 7, 9, 3], filter_sizes=[2, 3, 3, 5], strides=[1, 2, 1, 1],
                                  padding="EXPLICIT", explicit_paddings=[0, 0, 2, 1, 0, 3, 0, 0],
                                  dilations=[1, 1, 2, 1]),
    "nhwc-windows-in-padding": dict(input_shape=[1, 3, 3, 2], filter_sizes=[2, 2, 2, 3], strides=[1, 1, 1, 1],
                                    padding="EXPLICIT", explicit_paddings=[0, 0, 5, 4, 0, 1, 0, 0]),
    "nhwc-stride-beyond-input": dict(input_shape=[2, 6, 6, 2], filter_sizes=[2, 2, 2, 3], strides=[1, 100, 7, 1],
                                     padding="SAME"),
    "nchw-dilated-strided-same": dict(input_shape=[2, 5, 10, 9], filter_sizes=[3, 3, 5, 6], strides=[1, 1, 2, 2],
                                      padding="SAME", data_format="NCHW", dilations=[1, 1, 2, 1]),
    "nchw-explicit": dict(input_shape=[1, 4, 8, 7], filter_sizes=[2, 2, 4, 3], strides=[1, 1, 1, 2],
                          padding="EXPLICIT", explicit_paddings=[0, 0, 0, 0, 1, 2, 3, 0], data_format="NCHW"),
    "nchw-valid-dilated": dict(input_shape=[3, 2, 9, 9], filter_sizes=[2, 3, 2, 4], strides=[1, 1, 3, 1],
                               padding="VALID", data_format="NCHW", dilations=[1, 1, 3, 2]),
}
OWN_RUNS = [(name, chip, variant, mask) for name in OWN
            for chip, variant, mask in (("FT78NE", "s", None), ("FT78NE", "s", 0b10100110), ("MT7004", "p", None))]


@pytest.mark.parametrize("name,chip,variant,mask", OWN_RUNS,
                         ids=[f"{n}-{c}-{v}-{m or 'all'}" for n, c, v, m in OWN_RUNS])
def test_own_reference_fp32(name, chip, variant, mask):
    attrs = OWN[name]
    x, dy = random_case(list(OWN).index(name), attrs)
    run = check_case(chip, "fp32", variant, x, dy, attrs, reference(x, dy, **attrs), rtol=1e-5, atol=1e-5, mask=mask)
    assert run.cycles >= run.roofline.cycles


@pytest.mark.parametrize("name", ["nhwc-dilated-same", "nchw-dilated-strided-same", "nhwc-explicit-dilated"])
@pytest.mark.parametrize("variant", ["s", "p"])
def test_own_reference_fp16(name, variant):
    attrs = OWN[name]
    x, dy = random_case(7, attrs, np.float16)
    # dW read back as fp16; fp32 accumulation, one rounding to fp16 at the end: within an fp16 ulp or so of the
    # float64 truth.
    check_case("MT7004", "fp16", variant, x, dy, attrs, reference(x, dy, **attrs), rtol=2e-3, atol=2e-3)


def test_out_backprop_shape_when_right_is_accepted():
    attrs = dict(OWN["nchw-explicit"], out_backprop_shape=list(geometry(**OWN["nchw-explicit"])["dy_shape"]))
    x, dy = random_case(3, OWN["nchw-explicit"])
    check_case("FT78NE", "fp32", "s", x, dy, attrs, reference(x, dy, **OWN["nchw-explicit"]), rtol=1e-5, atol=1e-5)


# --- every plan the planner may choose is right: forced spatial / filter splits, tiny scratchpads ---------

FORCED = {
    # dW bigger than the scratchpad allows: out_c slices; both splits possible.
    "many-slices": dict(input_shape=[2, 5, 4, 48], filter_sizes=[3, 3, 48, 40], strides=[1, 1, 1, 1],
                        padding="SAME", dilations=[1, 1, 2, 1]),
    # Input rows too wide for a slot: in_c slices, dW stored tap by tap; partials in several rounds.
    "in-c-slices": dict(input_shape=[2, 4, 64, 40], filter_sizes=[3, 3, 40, 2], strides=[1, 1, 1, 1],
                        padding="SAME"),
    # Row tiles and whole-image tiles, NCHW, strided.
    "nchw-rows": dict(input_shape=[3, 6, 17, 12], filter_sizes=[3, 2, 6, 5], strides=[1, 1, 2, 1],
                      padding="VALID", data_format="NCHW", dilations=[1, 1, 1, 2]),
}


def _choices(chip_target: sim.Target, attrs: dict) -> list:
    m = sim.Simulator(chip_target)
    call = m.bind(f"fp_{KERNEL}_s", input=SHARED["input"], out_backprop=SHARED["out_backprop"],
                  output=SHARED["output"], **attrs)
    return cbf._Planner(call, m.context(call)).candidates()


@pytest.mark.parametrize("name", list(FORCED))
def test_every_candidate_plan_is_right(name, tmp_path):
    attrs = FORCED[name]
    target = small_target(tmp_path)
    x, dy = random_case(11, attrs)
    exp = reference(x, dy, **attrs)
    choices = _choices(target, attrs)
    assert {c.kind for c in choices} == {"spatial", "filter"}
    for choice in choices:
        out, run = run_case(target, "fp32", "s", x, dy, attrs, tiling=choice.as_tiling())
        np.testing.assert_allclose(out, exp, rtol=1e-5, atol=1e-5, err_msg=str(choice))
        assert run.cycles >= run.roofline.cycles
        slices = -(-attrs["filter_sizes"][2] // choice.icg) * -(-attrs["filter_sizes"][3] // choice.ocg)
        if choice.kind == "spatial" and slices > 1:
            assert any(p.name.startswith(f"slice{slices - 1}:") for p in run.plan.phases)


def test_in_c_slices_exchange_in_rounds(tmp_path):
    attrs = FORCED["in-c-slices"]
    target = small_target(tmp_path)
    spatial = [c for c in _choices(target, attrs) if c.kind == "spatial"]
    assert all(c.icg < 40 for c in spatial)  # the input rows were cut into channel slices
    choice = spatial[0]  # (the space's preferred one)
    x, dy = random_case(5, attrs)
    run = check_case(target, "fp32", "s", x, dy, attrs, reference(x, dy, **attrs), rtol=1e-5, atol=1e-5,
                     tiling=choice.as_tiling())
    names = [p.name for p in run.plan.phases]
    assert "slice0:reduce1" in names  # the partials did not fit the 4 KiB workspace at once


def test_filter_split_for_small_images_and_big_filters():
    attrs = dict(input_shape=[1, 4, 4, 256], filter_sizes=[3, 3, 256, 256], strides=[1, 1, 1, 1], padding="SAME")
    x, dy = random_case(2, attrs)
    run = check_case("FT78NE", "fp32", "s", x, dy, attrs, reference(x, dy, **attrs), rtol=1e-4, atol=1e-4)
    assert [p.name for p in run.plan.phases] == ["filter_slices"]
    assert all(run.plan.phases[0].tiles[c] for c in range(8))  # every core has a slice


# --- argument refusals -----------------------------------------------------------------------------------

BASE = dict(input_shape=[1, 6, 6, 4], filter_sizes=[3, 3, 4, 8], strides=[1, 1, 1, 1], padding="SAME")
REFUSALS = {
    "stride-zero": (dict(strides=[1, 0, 1, 1]), "strides"),
    "stride-negative": (dict(strides=[1, 1, -2, 1]), "strides"),
    "stride-batch": (dict(strides=[2, 1, 1, 1]), "strides"),
    "stride-depth": (dict(strides=[1, 1, 1, 2]), "strides"),
    "stride-three-ints": (dict(strides=[1, 1, 1]), "strides"),
    "stride-not-int": (dict(strides=[1, 1.5, 1, 1]), "strides"),
    "stride-nchw-depth": (dict(strides=[1, 2, 1, 1], data_format="NCHW", input_shape=[1, 4, 6, 6]), "strides"),
    "dilation-batch": (dict(dilations=[2, 1, 1, 1]), "dilations"),
    "dilation-depth": (dict(dilations=[1, 1, 1, 3]), "dilations"),
    "dilation-zero": (dict(dilations=[1, 0, 1, 1]), "dilations"),
    "explicit-with-same": (dict(explicit_paddings=[0, 0, 1, 1, 1, 1, 0, 0]), "explicit_paddings"),
    "explicit-missing": (dict(padding="EXPLICIT"), "explicit_paddings"),
    "explicit-seven": (dict(padding="EXPLICIT", explicit_paddings=[0, 0, 1, 1, 1, 1, 0]), "explicit_paddings"),
    "explicit-negative": (dict(padding="EXPLICIT", explicit_paddings=[0, 0, -1, 1, 1, 1, 0, 0]),
                          "explicit_paddings"),
    "explicit-batch-pad": (dict(padding="EXPLICIT", explicit_paddings=[1, 0, 1, 1, 1, 1, 0, 0]),
                           "explicit_paddings"),
    "explicit-depth-pad": (dict(padding="EXPLICIT", explicit_paddings=[0, 0, 1, 1, 1, 1, 0, 2]),
                           "explicit_paddings"),
    "padding-unknown": (dict(padding="FULL"), "padding"),
    "padding-lowercase": (dict(padding="same"), "padding"),
    "data-format-unknown": (dict(data_format="NCWH"), "data_format"),
    "in-c-mismatch": (dict(filter_sizes=[3, 3, 5, 8]), "filter_sizes"),
    "grouped": (dict(input_shape=[1, 6, 6, 8], filter_sizes=[3, 3, 4, 8]), "filter_sizes"),
    "filter-zero": (dict(filter_sizes=[3, 0, 4, 8]), "filter_sizes"),
    "filter-three": (dict(filter_sizes=[3, 3, 4]), "filter_sizes"),
    "out-c-zero": (dict(filter_sizes=[3, 3, 4, 0]), "filter_sizes"),
    "input-zero": (dict(input_shape=[0, 6, 6, 4]), "input_shape"),
    "input-negative": (dict(input_shape=[1, -6, 6, 4]), "input_shape"),
    "input-five": (dict(input_shape=[1, 6, 6, 4, 1]), "input_shape"),
    "filter-larger-than-input": (dict(padding="VALID", filter_sizes=[7, 3, 4, 8]), "input_shape"),
    "dilated-filter-larger": (dict(padding="VALID", dilations=[1, 3, 1, 1]), "input_shape"),
    "out-backprop-shape": (dict(out_backprop_shape=[1, 6, 6, 7]), "out_backprop_shape"),
    "out-backprop-spatial": (dict(out_backprop_shape=[1, 3, 6, 8]), "out_backprop_shape"),
    "out-backprop-layout": (dict(out_backprop_shape=[1, 8, 6, 6]), "out_backprop_shape"),
    "absurd-size": (dict(input_shape=[1 << 20, 1 << 20, 1 << 10, 4], padding="VALID"), "input_shape"),
    "unexpected": (dict(groups=2), "groups"),
    "address-not-int": (dict(input="0xA0000000"), "input"),
    "address-negative": (dict(output=-4), "output"),
}


@pytest.mark.parametrize("name", list(REFUSALS))
def test_refusals(name):
    override, argname = REFUSALS[name]
    m = sim.Simulator("FT78NE")
    args = dict(SHARED, **BASE)
    args.update(override)
    before = m.memory.snapshot()
    with pytest.raises(sim.KernelArgError, match=argname):
        m.call(f"fp_{KERNEL}_s", **args)
    assert m.memory.snapshot() == before


@pytest.mark.parametrize("missing", ["input", "out_backprop", "output", "input_shape", "filter_sizes", "strides",
                                     "padding"])
def test_missing_arguments(missing):
    args = dict(SHARED, **BASE)
    del args[missing]
    with pytest.raises(sim.KernelArgError, match=missing):
        sim.Simulator("FT78NE").call(f"fp_{KERNEL}_s", **args)


def test_fp16_refused_on_ft78ne_and_variant_arguments():
    m = sim.Simulator("FT78NE")
    with pytest.raises(sim.KernelArgError, match="fp16"):
        m.call(f"hp_{KERNEL}_s", **SHARED, **BASE)
    with pytest.raises(sim.KernelArgError, match="core"):
        m.call(f"fp_{KERNEL}_s", core=0, **SHARED, **BASE)
    with pytest.raises(sim.KernelArgError, match="core_mask"):
        m.call(f"fp_{KERNEL}_p", core_mask=1, **PRIVATE, **BASE)


def test_layout_refusals():
    m = sim.Simulator("FT78NE")
    with pytest.raises(sim.LayoutError, match="output"):
        m.call(f"fp_{KERNEL}_s", input=0xA0000000, out_backprop=0xA4000000, output=0xA0000040, **BASE)
    with pytest.raises(sim.LayoutError, match="out_backprop"):
        m.call(f"fp_{KERNEL}_s", input=0xA0000000, out_backprop=0x10000000, output=0xA8000000, **BASE)
    with pytest.raises(sim.LayoutError, match="input"):
        m.call(f"fp_{KERNEL}_p", input=0xA0000000, out_backprop=0x10100000, output=0x10200000, **BASE)


def test_untileable_shape_is_a_layout_error():
    # One input row of one channel is wider than a slot of the scratchpad: no tile can be planned.
    attrs = dict(input_shape=[1, 1, 300000, 1], filter_sizes=[1, 1, 1, 1], strides=[1, 1, 1, 1], padding="VALID")
    with pytest.raises(sim.LayoutError, match="scratchpad"):
        sim.Simulator("FT78NE").plan(f"fp_{KERNEL}_s", **SHARED, **attrs)


# --- timing properties -------------------------------------------------------------------------------------

COMPUTE_BOUND = dict(input_shape=[2, 16, 16, 64], filter_sizes=[3, 3, 64, 64], strides=[1, 1, 1, 1],
                     padding="SAME")
#: Many images, a small filter: the spatial split (partials exchanged through the workspace) is cheapest.
BATCH_SPLIT = dict(input_shape=[4, 16, 16, 32], filter_sizes=[3, 3, 32, 32], strides=[1, 1, 1, 1], padding="SAME")
BANDWIDTH_BOUND = dict(input_shape=[16, 32, 32, 4], filter_sizes=[1, 1, 4, 4], strides=[1, 1, 1, 1],
                       padding="VALID")


def test_deterministic():
    x, dy = random_case(1, COMPUTE_BOUND)
    out1, r1 = run_case("FT78NE", "fp32", "s", x, dy, COMPUTE_BOUND)
    out2, r2 = run_case("FT78NE", "fp32", "s", x, dy, COMPUTE_BOUND)
    assert r1.cycles == r2.cycles and r1.events == r2.events
    np.testing.assert_array_equal(out1, out2)


def test_more_cores_are_faster_when_compute_bound():
    x, dy = random_case(1, COMPUTE_BOUND)
    out8, r8 = run_case("FT78NE", "fp32", "s", x, dy, COMPUTE_BOUND, mask=0xFF)
    out1, r1 = run_case("FT78NE", "fp32", "s", x, dy, COMPUTE_BOUND, mask=0x01)
    assert r1.roofline.bound_by == "compute"
    # On eight cores this small batch is split by filter slices, the input channels cut evenly over the cores (8 a
    # core): each core reads the whole input for its slice, so the run is bound by DDR (the spatial split, bound by
    # the exchange of the partial sums through GSM, takes 89,628 cycles against 85,244).
    assert r8.roofline.bound_by == "ddr" and r8.tiling.tiling["split"] == "filter"
    assert r8.cycles * 2.4 < r1.cycles
    assert r1.cycles >= r1.roofline.cycles and r8.cycles >= r8.roofline.cycles
    assert r1.roofline_fraction > 0.8 and r8.roofline_fraction > 0.4
    np.testing.assert_allclose(out8, out1, rtol=1e-5, atol=1e-5)


def test_barrier_and_workspace_exchange_when_split_over_the_batch():
    x, dy = random_case(1, BATCH_SPLIT)
    run = check_case("FT78NE", "fp32", "s", x, dy, BATCH_SPLIT, reference(x, dy, **BATCH_SPLIT), rtol=1e-4, atol=1e-4)
    names = [p.name for p in run.plan.phases]
    assert names[0] == "slice0:partials0" and "slice0:reduce0" in names
    waits = [e for e in run.events if e.kind == "barrier_wait"]
    assert {e.core for e in waits} == set(range(8))
    ws = run.target.staging_level("gsm")
    ws_lo, ws_hi = ws.base, ws.end
    to_ws = [e for e in run.events if e.kind == "dma_out" and ws_lo <= e.dst < ws_hi and e.phase == names[0]]
    from_ws = [e for e in run.events if e.kind == "dma_in" and ws_lo <= e.src < ws_hi and e.phase == names[1]]
    assert {e.core for e in to_ws} == set(range(8)) and {e.core for e in from_ws} == set(range(8))
    # Every partial is written before any core reads partials back (the barrier between them).
    assert max(e.end for e in to_ws) <= min(e.start for e in from_ws)


def test_halving_ddr_bandwidth_slows_a_bandwidth_bound_call(tmp_path):
    x, dy = random_case(1, BANDWIDTH_BOUND)
    _, fast = run_case("FT78NE", "fp32", "s", x, dy, BANDWIDTH_BOUND)
    slow_target = small_target(tmp_path, am_bytes=0xC0000, workspace_bytes=0x80000, ddr_scale=0.5)
    _, slow = run_case(slow_target, "fp32", "s", x, dy, BANDWIDTH_BOUND)
    assert fast.roofline.bound_by == "ddr"
    assert slow.cycles > 1.4 * fast.cycles


def test_private_runs_see_no_other_core():
    x, dy = random_case(1, COMPUTE_BOUND)
    _, run = run_case("FT78NE", "fp32", "p", x, dy, COMPUTE_BOUND)
    assert_private_streams(run, run.cores[0])
    assert run.cycles >= run.roofline.cycles


def test_flops_count_the_multiply_adds_and_the_vector_work_their_padding():
    attrs = dict(input_shape=[1, 5, 5, 3], filter_sizes=[3, 3, 3, 64], strides=[1, 1, 1, 1], padding="SAME")
    x, dy = random_case(1, attrs)
    _, run = run_case("FT78NE", "fp32", "p", x, dy, attrs)
    mac = 2 * 3 * 3 * 3 * 64 * 5 * 5  # out_c = 64 is two whole vectors of 32 lanes: no padding
    row_tiles = [t.compute for ph in run.plan.phases for ts in ph.tiles.values() for t in ts
                 if t.compute is not None and t.compute.inputs[0].shape[-1] == 3]
    assert sum(c.flops for c in row_tiles) == mac
    # No padding, so every lane of every multiply-add the loops issue is the math's: FT78NE's 32 fp32 lanes, two
    # flops a lane per FMAC issue.
    fmacs = sum(lp.entries * (lp.trips * lp.issues.get("fmac", 0) + lp.epilogue.get("fmac", 0))
                for c in row_tiles for lp in c.loops)
    assert run.target.core.precisions["fp32"].lanes == 32 and 2 * 32 * fmacs == mac


def test_module_reference_agrees_with_the_definition():
    from kernels.common.geometry import conv_geometry
    attrs = OWN["nchw-dilated-strided-same"]
    x, dy = random_case(4, attrs)
    geo = conv_geometry(attrs["input_shape"], attrs["filter_sizes"][:2], strides=attrs["strides"],
                        padding=attrs["padding"], explicit_paddings=None, data_format="NCHW",
                        dilations=attrs["dilations"])
    got = cbf.conv2d_backprop_filter_reference(x, dy, geo, *attrs["filter_sizes"][:2])
    np.testing.assert_allclose(got, reference(x, dy, **attrs), rtol=1e-5, atol=1e-5)


# --- a caller's tiling: call(..., tiling=...) -------------------------------------------------------------

def test_every_listed_tiling_is_honoured_and_right():
    attrs = FORCED["many-slices"]
    x, dy = random_case(12, attrs)
    exp = reference(x, dy, **attrs)
    tilings = [c.as_tiling() for c in _choices("FT78NE", attrs)]
    assert {t["split"] for t in tilings} == {"spatial", "filter"}
    for tiling in tilings:
        out, run = run_case("FT78NE", "fp32", "s", x, dy, attrs, tiling=tiling)
        assert run.tiling.tiling == tiling and run.tiling.source == "given"
        np.testing.assert_allclose(out, exp, rtol=1e-5, atol=1e-5, err_msg=str(tiling))
        assert (run.plan.phases[0].name == "filter_slices") == (tiling["split"] == "filter")


@pytest.mark.parametrize("tiling,error,name", [
    ({"rows": 4}, sim.KernelArgError, "tiling"),
    ({"split": "batch"}, sim.KernelArgError, "tiling.split"),
    ({"out_c_slice": 0}, sim.KernelArgError, "tiling.out_c_slice"),
    ({"in_c_slice": 49}, sim.KernelArgError, "tiling.in_c_slice"),
    ({"in_c_slice": 48, "out_c_slice": 40}, sim.LayoutError, "scratchpad"),
])
def test_bad_tilings_are_refused(tmp_path, tiling, error, name):
    attrs = FORCED["many-slices"]
    target = small_target(tmp_path)
    with pytest.raises(error, match=name):
        sim.Simulator(target).plan(f"fp_{KERNEL}_s", tiling=tiling, **SHARED, **attrs)


# --- planning on the scaffold: typed "does not fit", the timing model's choice, no private cost model -----

def _context(m: sim.Simulator, attrs: dict, tiling: dict | None = None):
    from dataclasses import replace
    call = m.bind(f"fp_{KERNEL}_s", **SHARED, **attrs)
    return call, replace(m.context(call), tiling=tiling)


def test_an_exchange_too_big_for_the_shared_level_names_it(tmp_path):
    # 256 bytes of workspace over 8 cores: a core's share (32 bytes, aligned down to the scratchpad's 64) cannot
    # hold one row of its partial dW, so the spatial split is not a candidate and asking for it names the level.
    from sim.model.plan import DoesNotFit
    m = sim.Simulator(small_target(tmp_path, workspace_bytes=0x100))
    attrs = FORCED["many-slices"]
    call, ctx = _context(m, attrs)
    run = m.call(f"fp_{KERNEL}_s", numerics=False, **SHARED, **attrs)
    assert {c["split"] for c, _ in run.tiling.candidates} == {"filter"}
    assert {c["split"] for c, _ in run.tiling.dropped} == {"spatial"}  # dropped, with the level named
    assert all("gsm" in why for c, why in run.tiling.dropped)
    with pytest.raises(DoesNotFit) as err:
        cbf.KERNEL.plan(call, _context(m, attrs, {"split": "spatial"})[1])
    assert err.value.resource == ctx.shared_level.name == "gsm"
    assert err.value.available_bytes == 0x100 and err.value.needed_bytes > 0x100
    with pytest.raises(sim.LayoutError, match="workspace") as layout:
        m.plan(f"fp_{KERNEL}_s", tiling={"split": "spatial"}, **SHARED, **attrs)
    (violation,) = layout.value.violations
    assert (violation.rule, violation.region) == ("scratchpad-fit", "gsm")


def test_slices_too_big_for_the_scratchpad_name_the_vector_level(tmp_path):
    from sim.model.plan import DoesNotFit
    m = sim.Simulator(small_target(tmp_path))
    _, ctx = _context(m, FORCED["many-slices"])
    call, asked = _context(m, FORCED["many-slices"], {"in_c_slice": 48, "out_c_slice": 40})
    with pytest.raises(DoesNotFit) as err:
        cbf.KERNEL.plan(call, asked)
    # The accumulator alone, 3x3x48x40 fp32, is 69120 bytes: more than the 32 KiB scratchpad, and two one-row
    # slots come on top of it.
    assert err.value.resource == ctx.vector_level.name == "am"
    assert err.value.available_bytes == 0x8000 and err.value.needed_bytes > 69120


@pytest.mark.parametrize("name", ["many-slices", "in-c-slices", "nchw-rows"])
def test_the_search_picks_the_cheapest_of_the_spaces_candidates(tmp_path, name):
    """Strict tolerance: the search's choice costs what the cheapest of the space's candidates costs when each is
    simulated as given (the kernel itself compares nothing)."""
    target = small_target(tmp_path)
    attrs = FORCED[name]
    x, dy = random_case(3, attrs)
    cycles = [run_case(target, "fp32", "s", x, dy, attrs, numerics=False, tiling=c.as_tiling())[1].cycles
              for c in _choices(target, attrs)]
    assert len(cycles) >= 2
    m = sim.Simulator(target, tiling_tolerance=0, tuning_cache=False)
    run = m.call(f"fp_{KERNEL}_s", numerics=False, **SHARED, **attrs)
    assert run.cycles == min(cycles)


def test_the_kernel_keeps_no_timing_model_of_its_own():
    """The target's timing numbers are read by sim.timing only: the kernel prices nothing, not even its
    micro-kernels (the plan context's cheapest_loops picks them)."""
    import ast
    timing = {"bandwidth_bytes_per_cycle", "port_bandwidth_bytes_per_cycle", "latency_cycles", "setup_cycles",
              "peak_flops_per_cycle", "loop_overhead_cycles", "vector_op_latency_cycles", "barrier_latency_cycles",
              "vector_efficiency", "launch_overhead_cycles"}
    modules = sorted(Path(cbf.__file__).parent.glob("*.py"))  # every module of the package
    assert len(modules) > 1
    for path in modules:
        tree = ast.parse(path.read_text())
        assert not {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)} & timing, path.name


def test_a_window_row_too_wide_to_gather_in_the_registers_takes_the_window_operand():
    """A 1x4 filter over 290 input channels: the im2col gather moves a position's 4 x 290 elements in one trip,
    76 vector registers on FT78NE's 64; every tiling once planned it and broke `loop-registers`.  The micro-kernels
    now read the window there; asked for im2col, the key is refused, naming it.  (Slices of all 290 input
    channels, as the search picked before it offered them cut evenly over the cores: 49 a slice gather in one trip.)"""
    args = dict(input=0xA0000000, out_backprop=0xA0100000, output=0xA0200000, input_shape=[1, 3, 2, 290],
                filter_sizes=[1, 4, 290, 3], strides=[1, 1, 3, 1], padding="SAME", core_mask=0x7E, numerics=False)
    run = sim.Simulator("FT78NE", tuning_cache=False).call(f"fp_{KERNEL}_s", tiling={"in_c_slice": 290}, **args)
    assert not any(loop.label.startswith("im2col gather") for phase in run.plan.phases for tiles in
                   phase.tiles.values() for t in tiles if t.compute is not None for loop in t.compute.loops)
    with pytest.raises(sim.KernelArgError, match=r"tiling\.a_operand': im2col gathers .* 64 vector registers"):
        sim.Simulator("FT78NE", tuning_cache=False).call(f"fp_{KERNEL}_s", tiling={"a_operand": "im2col",
                                                                              "in_c_slice": 290}, **args)
