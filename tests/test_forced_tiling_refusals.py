"""Forced tilings (``Simulator.call(..., tiling=...)``) are refused naming the key at fault, their hints name values
that are accepted, and the values they leave to the search are filled in as without a tiling.

Each test is one defect an outside tester found: a forced ``n_micro`` of conv2d_backprop_filter blamed on the
``m_micro`` the caller never gave; a depthwise ``register_block`` beyond the vector registers let through to the plan
check; GEMM's split k on one core refused as a scratchpad overflow (and a split-k candidate of the space's own, a k
block as deep as k, refused the same way); batch norm's "nearest that fit" naming a tile size refused in turn, and a
stated maximum that was not one."""

from __future__ import annotations

import re

import numpy as np
import pytest

import sim
from sim.simulator import find_symbol
from sim.tuning import prefilter

S = 0xA0000000  # shared memory (FT78NE and MT7004)
P = 0x10000000  # a core's private memory
STEP_S, STEP_P = 0x01000000, 0x00100000


def _refusal(fn, *args, **kwargs) -> str:
    """The message of the KernelArgError ``fn`` raises (any other outcome fails)."""
    with pytest.raises(sim.SimError) as info:
        fn(*args, **kwargs)
    assert type(info.value) is sim.KernelArgError, f"{type(info.value).__name__}: {info.value}"
    return str(info.value)


# -- 1. conv2d_backprop_filter: a forced n_micro alone ----------------------------------------------------------


def _conv_call(m: sim.Simulator, x: np.ndarray, dy: np.ndarray, tiling: dict | None) -> np.ndarray:
    n, h, w, c = x.shape
    oc = dy.shape[3]
    m.write(S, x)
    m.write(S + STEP_S, dy)
    m.call("fp_conv2d_backprop_filter_s", input=S, out_backprop=S + STEP_S, output=S + 2 * STEP_S,
           input_shape=[n, h, w, c], filter_sizes=[3, 3, c, oc], strides=[1, 1, 1, 1], padding="SAME",
           data_format="NHWC", dilations=[1, 1, 1, 1], tiling=tiling)
    return m.read(S + 2 * STEP_S, (3, 3, c, oc), np.float32)


def _conv_reference(x: np.ndarray, dy: np.ndarray) -> np.ndarray:
    """dW of a 3x3 SAME stride-1 convolution, in float64."""
    n, h, w, c = x.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (1, 1), (1, 1), (0, 0)))
    out = np.zeros((3, 3, c, dy.shape[3]))
    for i in range(3):
        for j in range(3):
            out[i, j] = np.einsum("nhwc,nhwo->co", xp[:, i:i + h, j:j + w, :], dy.astype(np.float64))
    return out


@pytest.fixture(scope="module")
def conv_data():
    rng = np.random.default_rng(7)
    x = rng.standard_normal((1, 9, 9, 33)).astype(np.float32)
    dy = rng.standard_normal((1, 9, 9, 2)).astype(np.float32)
    return x, dy, _conv_reference(x, dy)


@pytest.mark.parametrize("tiling", [{"n_micro": 1}, {"n_micro": 2},
                                    {"n_micro": 2, "split": "filter", "out_c_slice": 1}])
def test_conv_forced_n_micro_alone_gets_a_fitting_m_micro(conv_data, tiling):
    x, dy, want = conv_data
    got = _conv_call(sim.Simulator("FT78NE", tuning_cache=False), x, dy, tiling)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)


def test_conv_forced_m_micro_that_does_not_fit_names_m_micro_and_the_largest_that_fits(conv_data):
    x, dy, _ = conv_data
    text = _refusal(_conv_call, sim.Simulator("FT78NE", tuning_cache=False), x, dy, {"m_micro": 32, "n_micro": 2})
    assert "tiling.m_micro" in text and "tiling.n_micro" not in text
    largest = int(re.search(r"the largest that fits: m_micro=(\d+)", text).group(1))
    # and the value named is accepted
    got = _conv_call(sim.Simulator("FT78NE", tuning_cache=False), x, dy, {"m_micro": largest, "n_micro": 2})
    np.testing.assert_allclose(got, _conv_reference(x, dy), rtol=1e-4, atol=1e-3)


def test_conv_space_fit_refuses_a_micro_kernel_that_does_not_fit(conv_data):
    """The space's fit refuses the caller's micro-kernel keys where no shape fits, so no "nearest that fit" names a
    slice the plan then refuses."""
    x, dy, _ = conv_data
    m = sim.Simulator("FT78NE", tuning_cache=False)
    m.write(S, x)
    m.write(S + STEP_S, dy)
    args = dict(input=S, out_backprop=S + STEP_S, output=S + 2 * STEP_S, input_shape=[1, 9, 9, 33],
                filter_sizes=[3, 3, 33, 2], strides=[1, 1, 1, 1], padding="SAME", data_format="NHWC",
                dilations=[1, 1, 1, 1])
    call = m.bind("fp_conv2d_backprop_filter_s", **args)
    kernel = find_symbol("fp_conv2d_backprop_filter_s").kernel
    space = kernel.tiling_space(call, m.context(call))
    t = {"split": "filter", "in_c_slice": 33, "out_c_slice": 1, "n_micro": 2}
    assert prefilter(space, t) is None
    why = prefilter(space, {**t, "m_micro": 32})
    assert isinstance(why, sim.KernelArgError) and "tiling.m_micro" in str(why)


# -- 2. depthwise_conv2d_backprop_input: register_block beyond the vector registers ---------------------------

DW_ARGS = dict(input_sizes=[3, 7, 17, 3], filter_shape=[5, 1, 7, 1], strides=[1, 1, 1, 3], padding="EXPLICIT",
               explicit_paddings=[0, 0, 0, 0, 1, 2, 1, 1], data_format="NCHW", dilations=[1, 1, 1, 2])
DW_FULL = {"channel_parts": 1, "tile_channels": 7, "tile_cols": 3, "tile_rows": 17}


def _dw_call(chip: str, tiling: dict | None) -> np.ndarray:
    rng = np.random.default_rng(3)
    filt = rng.standard_normal((5, 1, 7, 1)).astype(np.float32)
    out_h = (17 + 1 + 2 - 9) // 1 + 1
    out_w = (3 + 1 + 1 - 1) // 3 + 1
    dy = rng.standard_normal((3, 7, out_h, out_w)).astype(np.float32)
    m = sim.Simulator(chip, tuning_cache=False)
    m.write(P, filt, core=0)
    m.write(P + STEP_P, dy, core=0)
    m.call("fp_depthwise_conv2d_backprop_input_p", filter=P, out_backprop=P + STEP_P, output=P + 2 * STEP_P,
           core=0, tiling=tiling, **DW_ARGS)
    return m.read(P + 2 * STEP_P, (3, 7, 17, 3), np.float32, core=0)


@pytest.mark.parametrize("chip", ["FT78NE", "MT7004"])
def test_depthwise_register_block_beyond_the_registers_is_a_kernel_arg_error(chip):
    text = _refusal(_dw_call, chip, {**DW_FULL, "register_block": 32})
    assert "tiling.register_block" in text and "loop-registers" not in text
    largest = int(re.search(r"the largest block that fits: register_block=(\d+)", text).group(1))
    assert largest < 32
    want = _dw_call(chip, None)
    np.testing.assert_allclose(_dw_call(chip, {**DW_FULL, "register_block": largest}), want, rtol=1e-5, atol=1e-5)


def test_depthwise_partial_register_block_is_completed_where_it_fits():
    """Given alone, the search completes the tile around the block (tiles whose vectors clip it), and the space's
    values never list a block beyond the registers."""
    want = _dw_call("FT78NE", None)
    np.testing.assert_allclose(_dw_call("FT78NE", {"register_block": 32}), want, rtol=1e-5, atol=1e-5)
    m = sim.Simulator("FT78NE", tuning_cache=False)
    call = m.bind("fp_depthwise_conv2d_backprop_input_p", filter=P, out_backprop=P + STEP_P,
                  output=P + 2 * STEP_P, core=0, **DW_ARGS)
    space = find_symbol("fp_depthwise_conv2d_backprop_input_p").kernel.tiling_space(call, m.context(call))
    assert max(space.keys["register_block"].candidates(DW_FULL)) < 32
    assert isinstance(prefilter(space, {**DW_FULL, "register_block": 32}), sim.KernelArgError)


# -- 3. GEMM: split k where it cannot be ----------------------------------------------------------------------


def _gemm(chip: str, symbol: str, m_: int, n: int, k: int, tiling: dict | None, dtype=np.float32, **where):
    base = P if symbol.endswith("_p") else S
    kw = {"core": where["core"]} if "core" in where else {}
    rng = np.random.default_rng(5)
    a = rng.standard_normal((m_, k)).astype(dtype)
    b = rng.standard_normal((k, n)).astype(dtype)
    s = sim.Simulator(chip, tuning_cache=False)
    s.write(base, a, **kw)
    s.write(base + STEP_P, b, **kw)
    s.call(symbol, a=base, b=base + STEP_P, c=base + 2 * STEP_P, m=m_, n=n, k=k, tiling=tiling, **where)
    return s.read(base + 2 * STEP_P, (m_, n), dtype, **kw), a.astype(np.float64) @ b.astype(np.float64)


@pytest.mark.parametrize("symbol, where", [("fp_gemm_p", {"core": 0}), ("fp_gemm_s", {"core_mask": 0x1})])
def test_gemm_split_k_on_one_core_names_tiling_split(symbol, where):
    text = _refusal(_gemm, "FT78NE", symbol, 64, 64, 256, {"split": "k"}, **where)
    assert "tiling.split" in text and "several cores of an _s call" in text
    assert "scratchpad-fit" not in text and "bytes over" not in text


def test_gemm_split_k_with_one_k_block_names_tiling_k_block():
    text = _refusal(_gemm, "MT7004", "hp_gemm_s", 16, 16, 191, {"split": "k", "k_block": 191}, np.float16,
                    core_mask=0x5)
    assert "tiling.k_block" in text and "scratchpad-fit" not in text
    got, want = _gemm("MT7004", "hp_gemm_s", 16, 16, 191, {"split": "k"}, np.float16, core_mask=0x5)
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=2e-2, atol=0.25)


def test_gemm_split_k_on_a_depth_of_one_names_tiling_split_and_the_values_offered():
    """k = 1 on eight cores: the space offers no tiling with split k (no k block below k), and the refusal names
    the key and the values the space has for it; it said only "the kernel's tiling space has no tiling"."""
    text = _refusal(_gemm, "FT78NE", "fp_gemm_s", 64, 64, 1, {"split": "k"})
    assert text.startswith("argument 'tiling.split': the kernel's tiling space offers no tiling with split 'k'")
    assert "its values here: 'm', 'n'" in text


@pytest.mark.parametrize("tiling", [{"split": None}, {"k_block": None}, {"split": "n", "c_home": None}])
def test_a_tiling_key_given_as_none_is_refused_naming_it(tiling):
    """A blank value (None; null in a run config) was dropped, and the search chose that key."""
    key = next(k for k, v in tiling.items() if v is None)
    text = _refusal(_gemm, "FT78NE", "fp_gemm_s", 64, 64, 64, tiling)
    assert text == f"argument 'tiling.{key}': None is not a value; leave the key out for the search to choose it"


def test_gemm_split_k_candidates_of_the_space_all_pass_its_checks():
    m = sim.Simulator("MT7004", tuning_cache=False)
    call = m.bind("hp_gemm_s", a=S, b=S + STEP_P, c=S + 2 * STEP_P, m=16, n=16, k=191, core_mask=0x5)
    space = find_symbol("hp_gemm_s").kernel.tiling_space(call, m.context(call))
    pool, _ = space.completions({"split": "k"}, 512)
    assert pool
    for t in pool:
        assert t["k_block"] < 191, t
        why = prefilter(space, t)
        assert why is None or not isinstance(why, sim.KernelArgError), (t, why)


# -- 4. batch norm: the stated maximum and the nearest that fit -----------------------------------------------


def _fbn(tile_elements: int | None, full: bool = False):
    shape = (2, 65, 33, 63)
    rng = np.random.default_rng(11)
    y = rng.standard_normal(shape).astype(np.float16)
    x = rng.standard_normal(shape).astype(np.float16)
    c = shape[3]
    vecs = [rng.standard_normal(c).astype(np.float32), rng.standard_normal(c).astype(np.float32),
            (rng.random(c) + 0.1).astype(np.float32)]
    m = sim.Simulator("MT7004", tuning_cache=False)
    for i, arr in enumerate([y, x, *vecs]):
        m.write(P + i * STEP_P, arr, core=1)
    tiling = None if tile_elements is None else \
        ({"split": "rows", "tile_elements": tile_elements} if full else {"tile_elements": tile_elements})
    m.call("hp_fused_batch_norm_grad_p", y_backprop=P, x=P + STEP_P, scale=P + 2 * STEP_P,
           reserve_space_1=P + 3 * STEP_P, reserve_space_2=P + 4 * STEP_P, x_backprop=P + 5 * STEP_P,
           scale_backprop=P + 6 * STEP_P, offset_backprop=P + 7 * STEP_P, shape=list(shape), data_format="NHWC",
           is_training=False, core=1, tiling=tiling)
    return m.read(P + 5 * STEP_P, shape, np.float16, core=1), m.read(P + 6 * STEP_P, (c,), np.float32, core=1)


def _bn(tile_elements: int | None, full: bool = False):
    batch, chans = 903, 65
    rng = np.random.default_rng(13)
    x = rng.standard_normal((batch, chans)).astype(np.float32)
    dy = rng.standard_normal((batch, chans)).astype(np.float32)
    mean, invar = rng.standard_normal(chans).astype(np.float32), (rng.random(chans) + 0.5).astype(np.float32)
    scale = rng.standard_normal(chans).astype(np.float32)
    m = sim.Simulator("FT78NE", tuning_cache=False)
    for i, arr in enumerate([x, dy, mean, invar, scale]):
        m.write(S + i * STEP_S, arr)
    tiling = None if tile_elements is None else \
        ({"split": "rows", "tile_elements": tile_elements} if full else {"tile_elements": tile_elements})
    m.call("fp_batch_norm_grad_s", x=S, dy=S + STEP_S, dx=S + 5 * STEP_S,
           params=[S + 2 * STEP_S, S + 3 * STEP_S, S + 4 * STEP_S, S + 6 * STEP_S, S + 7 * STEP_S, batch, chans, 1],
           tiling=tiling)
    return m.read(S + 5 * STEP_S, (batch, chans), np.float32), m.read(S + 7 * STEP_S, (chans,), np.float32)


def _scratchpad_refusal(fn, *args) -> str:
    with pytest.raises(sim.LayoutError) as info:
        fn(*args)
    assert [v.rule for v in info.value.violations] == ["scratchpad-fit"]
    text = str(info.value)
    assert "tile_elements" in text
    return text


def _stated(text: str) -> tuple[int, int]:
    most = int(re.search(r"at most (\d+) elements per tensor", text).group(1))
    hint = int(re.search(r"the nearest that fit: tile_elements=(\d+)", text).group(1))
    return most, hint


@pytest.mark.parametrize("fn, too_big", [(_fbn, 270270), (_bn, 58695)],
                         ids=["fused_batch_norm_grad", "batch_norm_grad"])
def test_batch_norm_hint_and_maximum_are_accepted_and_true(fn, too_big):
    most, hint = _stated(_scratchpad_refusal(fn, too_big))
    assert hint <= most
    want = fn(None)
    for ok in (hint, most):
        for got, ref in zip(fn(ok), want):
            np.testing.assert_allclose(got.astype(np.float64), ref.astype(np.float64), rtol=1e-3, atol=1e-3)
    # the maximum stated is the maximum: one more is refused, stating the same maximum (partial or full tiling)
    for full in (False, True):
        assert _stated(_scratchpad_refusal(fn, most + 1, full))[0] == most


def test_a_tiling_over_the_plan_budget_that_no_one_key_brings_under_says_so():
    """Conv2DBackpropFilter 1 x 7 x 7 x 512, 3 x 3, 512 -> 512 on one FT78NE core, spatial with 512-channel input
    slices of 32 output channels: over the plan-size budget, and no one key's value that fits plans fewer (in_c
    is at its most; wider output slices do not fit). The refusal named no key and said no more; it says so now."""
    p = 0x10000000
    m = sim.Simulator("FT78NE", tuning_cache=False)
    with pytest.raises(sim.KernelArgError) as info:
        m.call("fp_conv2d_backprop_filter_p", numerics=False, input=p, out_backprop=p + 0x100000,
               output=p + 0x200000, input_shape=[1, 7, 7, 512], filter_sizes=[3, 3, 512, 512], strides=[1, 1, 1, 1],
               padding="SAME", data_format="NHWC", core=5,
               tiling={"split": "spatial", "in_c_slice": 512, "out_c_slice": 32})
    text = str(info.value)
    assert text.startswith("argument 'tiling': the tiling plans up to ") and "raise tiling." not in text
    assert text.endswith("no one key's value that fits plans fewer (leave keys out for the search to choose them)")
