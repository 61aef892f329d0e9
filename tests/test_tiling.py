"""Tiling choices (issue 6, item 3) of BatchNormGrad, FusedBatchNormGrad, FakeQuantWithMinMaxVarsGradient and
DepthwiseConv2dBackpropInput: every tiling a kernel lists is right (float64 references written here from the
ops' definitions) and honoured (visible in the plan), bad tilings are refused naming ``tiling.<key>`` or the
scratchpad, the cost model's default is never slower than a fixed naive tiling on the large shapes, and
run-configs carry a ``tiling:``."""

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import yaml

import kernels
import sim
from kernels.examples import KERNELS, example
from sim.cli import main
from sim.errors import ConfigError
from sim.tools.config import load_config
from sim.tools.runner import execute

ROOT = Path(__file__).resolve().parent.parent
# Every test tensor lives in DDR, 64 MiB apart (room for the large shapes).
ADDR = [0x80000000 + i * 0x4000000 for i in range(8)]


def candidates(m: sim.Simulator, symbol: str, **args) -> list[dict]:
    """The kernel's listed tilings for a call."""
    call = m.bind(symbol, **args)
    return kernels.lookup(symbol).kernel.tilings(call, m.context(call))


def plan_signature(plan) -> list:
    """What a plan does, without its compute functions: phases, per core the tiles' DMA, operands and flops."""
    return [(ph.name, ph.barrier_after, sorted(
        (core, [(t.tile_id, t.slot, t.loads, t.stores, t.compute and (t.compute.inputs, t.compute.outputs,
                                                                    t.compute.flops, t.compute.reductions))
                for t in tiles]) for core, tiles in ph.tiles.items()))
            for ph in plan.phases]


def loaded_blocks(run, name: str) -> list[tuple[int, ...]]:
    """Shapes (elements per dimension) of the DMA loads that read buffer ``name``: the tensor's tile blocks."""
    buf = run.call.buffer(name)
    return [tr.shape for ph in run.plan.phases for tiles in ph.tiles.values() for t in tiles for tr in t.loads
            if buf.addr <= tr.src < buf.end]


# --- BatchNormGrad ------------------------------------------------------------------------------------

BN = dict(x=ADDR[0], dy=ADDR[1], dx=ADDR[2])
BN_VEC = dict(mean=ADDR[3], invar=ADDR[3] + 0x10000, scale=ADDR[3] + 0x20000, dbias=ADDR[3] + 0x30000,
              dscale=ADDR[3] + 0x40000)


def bn_args(batch: int, channel: int, train: int) -> dict:
    v = BN_VEC
    return dict(BN, params=[v["mean"], v["invar"], v["scale"], v["dbias"], v["dscale"], batch, channel, train])


def bn_run(batch: int, channel: int, train: int, tiling: dict | None):
    """Run on FT78NE's 8 cores; returns (run, max relative error of dx, dbias, dscale vs float64)."""
    rng = np.random.default_rng(batch + channel)
    x, dy = rng.uniform(-2, 2, (batch, channel)), rng.uniform(-1, 1, (batch, channel))
    mean, invar, scale = rng.uniform(-.5, .5, channel), rng.uniform(.5, 2, channel), rng.uniform(.5, 1.5, channel)
    m = sim.Simulator("FT78NE")
    for name, arr in (("x", x), ("dy", dy)):
        m.write(BN[name], arr.astype(np.float32))
    for name, arr in (("mean", mean), ("invar", invar), ("scale", scale)):
        m.write(BN_VEC[name], arr.astype(np.float32))
    run = m.call("fp_batch_norm_grad_s", tiling=tiling, **bn_args(batch, channel, train))
    x, dy = x.astype(np.float32).astype(np.float64), dy.astype(np.float32).astype(np.float64)
    mean, invar, scale = (v.astype(np.float32).astype(np.float64) for v in (mean, invar, scale))
    xh = (x - mean) * invar
    dbias, dscale = dy.sum(0), (dy * xh).sum(0)
    dx = scale * invar / batch * (batch * dy - dbias - xh * dscale) if train else dy * scale * invar
    np.testing.assert_allclose(m.read(BN["dx"], (batch, channel), np.float32), dx, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(m.read(BN_VEC["dbias"], (channel,), np.float32), dbias, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(m.read(BN_VEC["dscale"], (channel,), np.float32), dscale, rtol=1e-4, atol=1e-3)
    return run


def bn_honoured(run, tiling: dict) -> None:
    """BatchNormGrad is planned as FusedBatchNormGrad's NHWC case with H = W = 1: its [batch, channel, 1] view."""
    fbn_honoured(run, tiling)


BN_EXTRA = [{"split": "rows", "tile_elements": 7 * 32},  # tiles of 3 rows of the 70 channels
            {"split": "channels", "channel_block": 3}]   # part-filled vectors


@pytest.mark.parametrize("train", [1, 0])
def test_batch_norm_grad_every_tiling_right_and_honoured(train):
    batch, channel = 300, 70
    listed = candidates(sim.Simulator("FT78NE"), "fp_batch_norm_grad_s", **bn_args(batch, channel, train))
    assert 2 <= len(listed) <= 6 and {t["split"] for t in listed} == {"channels", "rows"}
    for tiling in listed + BN_EXTRA:
        run = bn_run(batch, channel, train, tiling)
        assert run.tiling.tiling == tiling and run.tiling.source == "given"
        bn_honoured(run, tiling)


def test_batch_norm_grad_default_is_a_priced_candidate():
    run = bn_run(3000, 7, 0, None)
    assert run.tiling.source == "cost model" and len(run.tiling.candidates) >= 2
    priced = dict((str(c), cyc) for c, cyc in run.tiling.candidates)
    assert priced[str(run.tiling.tiling)] == run.cycles == min(c for c in priced.values() if c is not None)
    assert "chosen by the cost model" in run.summary_text()


# --- FusedBatchNormGrad -------------------------------------------------------------------------------

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


def fbn_honoured(run, tiling: dict) -> None:
    first = run.plan.phases[0].name
    blocks = loaded_blocks(run, "x")  # [A, C, B] blocks of the 3-D view
    if tiling["split"] == "channels":
        assert first == "channels"
        assert max(b[1] for b in blocks) == tiling["channel_block"]
    else:
        assert first.startswith("partial sums")
        assert max(int(np.prod(b)) for b in blocks) <= tiling["tile_elements"]


FBN_SHAPES = [((2, 8, 8, 40), "NHWC", True), ((2, 8, 8, 40), "NHWC", False), ((1, 3, 16, 40), "NCHW", True)]


@pytest.mark.parametrize("shape,fmt,train", FBN_SHAPES, ids=[f"{f}-{'train' if t else 'infer'}"
                                                             for _, f, t in FBN_SHAPES])
def test_fused_batch_norm_grad_every_tiling_right_and_honoured(shape, fmt, train):
    listed = candidates(sim.Simulator("FT78NE"), "fp_fused_batch_norm_grad_s", **FBN, shape=list(shape),
                        epsilon=1e-3, data_format=fmt, is_training=train)
    assert 2 <= len(listed) <= 6 and {t["split"] for t in listed} == {"channels", "rows"}
    for tiling in listed + [{"split": "rows", "tile_elements": 100}, {"split": "channels", "channel_block": 2}]:
        run = fbn_run(shape, fmt, train, tiling)
        assert run.tiling.tiling == tiling and run.tiling.source == "given"
        fbn_honoured(run, tiling)


def test_fused_batch_norm_grad_fp16_tilings_on_mt7004():
    shape = (2, 6, 6, 24)
    listed = candidates(sim.Simulator("MT7004"), "hp_fused_batch_norm_grad_s", **FBN, shape=list(shape),
                        epsilon=1e-3, data_format="NHWC", is_training=True)
    for tiling in listed:
        fbn_honoured(fbn_run(shape, "NHWC", True, tiling, "MT7004", "hp"), tiling)


# --- FakeQuantWithMinMaxVarsGradient --------------------------------------------------------------------

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
    assert 2 <= len(listed) <= 6
    if n == 40:
        assert {"cores": 1, "tile_elements": 40} in listed  # a call that fits one tile may skip the exchange
    for tiling in listed + [{"cores": 3, "tile_elements": 16}, {"tile_elements": 7}]:
        run = fq_run(n, tiling)
        assert run.tiling.tiling == tiling and run.tiling.source == "given"
        cores = tiling.get("cores", 8)
        busy = [c for c, tiles in run.plan.phases[0].tiles.items() if tiles]
        assert len(busy) == min(cores, -(-n // 32))
        assert len(run.plan.phases) == (2 if len(busy) > 1 else 1)
        sizes = [s[0] // 4 for s in loaded_blocks(run, "gradients")]  # contiguous copies count bytes
        share = -(-(-(-n // 32)) // len(busy)) * 32  # noqa: B002 (ceil divisions, not decrements) if len(busy) > 1 else n
        assert max(sizes) == min(tiling["tile_elements"], share)


# --- DepthwiseConv2dBackpropInput -------------------------------------------------------------------------

DW = dict(filter=ADDR[3], out_backprop=ADDR[0], output=ADDR[1])


def dw_args(sizes, fh, fw, mult, stride, fmt) -> dict:
    c = sizes[3] if fmt == "NHWC" else sizes[1]
    st = [1, stride, stride, 1] if fmt == "NHWC" else [1, 1, stride, stride]
    return dict(DW, input_sizes=list(sizes), filter_shape=[fh, fw, c, mult], strides=st, padding="SAME",
                data_format=fmt)


def dw_reference(filt: np.ndarray, dy: np.ndarray, sizes, stride: int, fmt: str) -> np.ndarray:
    """dx by scattering every output position through every tap, float64, NHWC internally (SAME padding)."""
    fh, fw, c, mult = filt.shape
    dyn = dy if fmt == "NHWC" else dy.transpose(0, 2, 3, 1)
    n, h, w = (sizes[0], sizes[1], sizes[2]) if fmt == "NHWC" else (sizes[0], sizes[2], sizes[3])
    oh, ow = dyn.shape[1], dyn.shape[2]
    pt = max((oh - 1) * stride + fh - h, 0) // 2
    pl = max((ow - 1) * stride + fw - w, 0) // 2
    dx = np.zeros((n, h, w, c))
    for kh in range(fh):
        for kw in range(fw):
            for i in range(oh):
                for j in range(ow):
                    ih, iw = i * stride - pt + kh, j * stride - pl + kw
                    if 0 <= ih < h and 0 <= iw < w:
                        dx[:, ih, iw, :] += (dyn[:, i, j, :].reshape(n, c, mult) * filt[kh, kw]).sum(-1)
    return dx if fmt == "NHWC" else dx.transpose(0, 3, 1, 2)


def dw_run(sizes, fh, fw, mult, stride, fmt, tiling: dict | None):
    args = dw_args(sizes, fh, fw, mult, stride, fmt)
    c = args["filter_shape"][2]
    n, h, w = (sizes[0], sizes[1], sizes[2]) if fmt == "NHWC" else (sizes[0], sizes[2], sizes[3])
    oh, ow = -(-h // stride), -(-w // stride)
    rng = np.random.default_rng(c + h)
    filt = rng.standard_normal((fh, fw, c, mult)).astype(np.float32)
    dy_shape = (n, oh, ow, c * mult) if fmt == "NHWC" else (n, c * mult, oh, ow)
    dy = rng.standard_normal(dy_shape).astype(np.float32)
    m = sim.Simulator("FT78NE")
    m.write(DW["filter"], filt)
    m.write(DW["out_backprop"], dy)
    run = m.call("fp_depthwise_conv2d_backprop_input_s", tiling=tiling, **args)
    want = dw_reference(filt.astype(np.float64), dy.astype(np.float64), sizes, stride, fmt)
    np.testing.assert_allclose(m.read(DW["output"], tuple(sizes), np.float32), want, rtol=1e-5, atol=1e-4)
    return run


def dw_honoured(run, tiling: dict, fmt: str, mult: int) -> None:
    outs = [t.compute.outputs[0].shape for tiles in run.plan.phases[0].tiles.values() for t in tiles]
    dims = [((o[2], o[3], o[1]) if fmt == "NCHW" else (o[1], o[2], o[3])) for o in outs]
    for i, key in enumerate(("tile_rows", "tile_cols", "tile_channels")):
        assert max(d[i] for d in dims) <= tiling[key]
    # The cores' channel groups: the channel each core's first tile loads the filter slice from.
    filt = run.call.buffer("filter")
    starts = {(t.loads[0].src - filt.addr) // (mult * 4) for tiles in run.plan.phases[0].tiles.values()
              for t in tiles[:1]}
    assert len(starts) == tiling["channel_parts"]


DW_CASES = [((2, 10, 12, 64), 3, 3, 2, 2, "NHWC"), ((2, 16, 9, 9), 3, 2, 1, 1, "NCHW")]


@pytest.mark.parametrize("case", DW_CASES, ids=[c[-1] for c in DW_CASES])
def test_depthwise_every_tiling_right_and_honoured(case):
    sizes, fh, fw, mult, stride, fmt = case
    listed = candidates(sim.Simulator("FT78NE"), "fp_depthwise_conv2d_backprop_input_s",
                        **dw_args(sizes, fh, fw, mult, stride, fmt))
    assert 2 <= len(listed) <= 6 and len({t["channel_parts"] for t in listed}) >= 2
    extra = {"channel_parts": 2, "tile_rows": 3, "tile_cols": 5, "tile_channels": 7}
    for tiling in listed + [extra]:
        run = dw_run(sizes, fh, fw, mult, stride, fmt, tiling)
        assert run.tiling.tiling == tiling and run.tiling.source == "given"
        dw_honoured(run, tiling, fmt, mult)


# --- the heuristic is the first candidate -----------------------------------------------------------------

FIRST = [("fp_batch_norm_grad_s", bn_args(320, 64, 1)),
         ("fp_batch_norm_grad_s", bn_args(25088, 64, 1)),
         ("fp_fused_batch_norm_grad_s", dict(FBN, shape=[2, 8, 8, 256], data_format="NHWC", is_training=True)),
         ("fp_fused_batch_norm_grad_s", dict(FBN, shape=[2, 8, 8, 40], data_format="NHWC", is_training=True)),
         ("fp_fake_quant_with_min_max_vars_gradient_s", dict(FQ, shape=[4096])),
         ("fp_depthwise_conv2d_backprop_input_s", dw_args((2, 16, 16, 64), 3, 3, 1, 1, "NHWC"))]


@pytest.mark.parametrize("symbol,args", FIRST, ids=[f"{s}-{i}" for i, (s, _) in enumerate(FIRST)])
def test_first_candidate_is_the_kernels_own_plan(symbol, args):
    m = sim.Simulator("FT78NE")
    call = m.bind(symbol, **args)
    kernel, ctx = kernels.lookup(symbol).kernel, m.context(call)
    first = kernel.tilings(call, ctx)[0]
    assert plan_signature(kernel.plan(call, replace(ctx, tiling=first))) == plan_signature(kernel.plan(call, ctx))


# --- refusals ----------------------------------------------------------------------------------------------

REFUSALS = [
    ("fp_batch_norm_grad_s", bn_args(300, 70, 1), {"rows": 4}, sim.KernelArgError, "'tiling'"),
    ("fp_batch_norm_grad_s", bn_args(300, 70, 1), {"split": "batch"}, sim.KernelArgError, "tiling.split"),
    ("fp_batch_norm_grad_s", bn_args(300, 70, 1), {"channel_block": 0}, sim.KernelArgError, "tiling.channel_block"),
    ("fp_batch_norm_grad_s", bn_args(300, 70, 1), {"tile_elements": 300 * 70 + 1}, sim.KernelArgError,
     "tiling.tile_elements"),
    ("fp_batch_norm_grad_s", bn_args(300, 70, 1), {"tile_elements": 2.5}, sim.KernelArgError, "tiling.tile_elements"),
    ("fp_batch_norm_grad_s", bn_args(300, 70, 1), {"split": "channels", "tile_elements": 8}, sim.KernelArgError,
     "tiling.tile_elements"),
    ("fp_batch_norm_grad_s", bn_args(60000, 70, 1), {"channel_block": 70}, sim.LayoutError, "scratchpad"),
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
    ("fp_fake_quant_with_min_max_vars_gradient_s", dict(FQ, shape=[3000]), {"cores": 9}, sim.KernelArgError,
     "tiling.cores"),
    ("fp_fake_quant_with_min_max_vars_gradient_s", dict(FQ, shape=[3000]), {"tile_elements": True},
     sim.KernelArgError, "tiling.tile_elements"),
    ("fp_fake_quant_with_min_max_vars_gradient_s", dict(FQ, shape=[10 ** 7]), {"tile_elements": 10 ** 6},
     sim.LayoutError, "scratchpad"),
    ("fp_depthwise_conv2d_backprop_input_s", dw_args((2, 16, 16, 64), 3, 3, 1, 1, "NHWC"), {"channel_parts": 3},
     sim.KernelArgError, "tiling.channel_parts"),
    ("fp_depthwise_conv2d_backprop_input_s", dw_args((2, 16, 16, 64), 3, 3, 1, 1, "NHWC"), {"tile_cols": 17},
     sim.KernelArgError, "tiling.tile_cols"),
    ("fp_depthwise_conv2d_backprop_input_s", dw_args((2, 16, 16, 64), 3, 3, 1, 1, "NHWC"), {"cols": 4},
     sim.KernelArgError, "'tiling'"),
    ("fp_depthwise_conv2d_backprop_input_s", dw_args((1, 512, 512, 64), 3, 3, 1, 1, "NHWC"),
     {"tile_rows": 512, "tile_cols": 512, "tile_channels": 64}, sim.LayoutError, "scratchpad"),
]


@pytest.mark.parametrize("symbol,args,tiling,error,match", REFUSALS,
                         ids=[f"{s.split('_')[1]}-{t}" for s, _, t, _, _ in REFUSALS])
def test_bad_tilings_are_refused(symbol, args, tiling, error, match):
    with pytest.raises(error, match=match):
        sim.Simulator("FT78NE").plan(symbol, tiling=tiling, **args)


# --- the cost model's default against a fixed naive tiling on the large shapes ------------------------------

# kernel, a naive tiling of its large example (the benchmark's): a plain split, one tile size everywhere
NAIVE = [
    ("batch_norm_grad", {"split": "rows", "tile_elements": 4096}),
    ("fused_batch_norm_grad", {"split": "rows", "tile_elements": 4096}),
    ("fake_quant_with_min_max_vars_gradient", {"tile_elements": 4096}),
    ("depthwise_conv2d_backprop_input", {"channel_parts": 1, "tile_rows": 8, "tile_cols": 112, "tile_channels": 32}),
    # Conv2DBackpropFilter lists its own tilings already; checked here too so every kernel's large shape is.
    ("conv2d_backprop_filter", {"split": "spatial", "in_c_slice": 32, "out_c_slice": 32}),
]


def test_every_kernel_has_a_naive_tiling_here():
    assert {k for k, _ in NAIVE} == set(KERNELS)


@pytest.mark.parametrize("chip,prefix", [("FT78NE", "fp"), ("MT7004", "hp")])
@pytest.mark.parametrize("name,naive", NAIVE, ids=[k for k, _ in NAIVE])
def test_default_never_slower_than_naive_on_large_shapes(name, naive, chip, prefix):
    """Strictly cheapest (tolerance 0): never slower than the naive tiling.  Default: within the tolerance of
    that, and never more tiles than the strict choice."""
    e = example(name, "large", chip, prefix)
    runs = {}
    for label, tiling, tolerance in (("strict", None, 0.0), ("default", None, sim.TILING_TOLERANCE),
                                     ("naive", naive, 0.0)):
        m = sim.Simulator(chip, tiling_tolerance=tolerance)
        e.place_values(m.write)
        runs[label] = m.call(e.symbol, numerics=False, tiling=tiling, **e.args)
    strict, default, naive_run = runs["strict"], runs["default"], runs["naive"]
    assert strict.tiling.source == default.tiling.source == "cost model" and naive_run.tiling.source == "given"
    assert strict.cycles <= naive_run.cycles, (strict.tiling.describe(), naive_run.cycles)
    assert default.cycles <= strict.cycles * (1 + sim.TILING_TOLERANCE), default.tiling.describe()
    assert default.plan.tile_count <= strict.plan.tile_count
    assert default.cycles >= default.roofline.cycles


def test_near_ties_go_to_the_fewest_tiles():
    """MT7004 fp16 BatchNormGrad, large shape: rows-split tiles of 3538 elements are the cheapest, and tiles of
    14154 elements cost within 0.02 % of them in a quarter of the tiles; the default takes the fewest tiles
    within 1 %, tolerance 0 the cheapest."""
    e = example("batch_norm_grad", "large", "MT7004", "hp")
    args, symbol = e.args, e.symbol
    runs = {tol: sim.Simulator("MT7004", tiling_tolerance=tol).call(symbol, numerics=False, **args)
            for tol in (0.0, 0.01)}
    priced = [(c, cycles) for c, cycles in runs[0.01].tiling.candidates if cycles is not None]
    best = min(cycles for _, cycles in priced)
    m = sim.Simulator("MT7004")
    tiles = {str(c): m.plan(symbol, tiling=c, **args)[1].tile_count for c, _ in priced}
    tied = [c for c, cycles in priced if cycles <= best * 1.01]
    assert len(tied) >= 2
    assert runs[0.01].tiling.tiling == min(tied, key=lambda c: tiles[str(c)])
    assert runs[0.0].cycles == best and runs[0.0].plan.tile_count > runs[0.01].plan.tile_count
    assert runs[0.01].plan.tile_count == min(tiles[str(c)] for c in tied)
    assert "the fewest tiles within 1% of the cheapest" in runs[0.01].tiling.describe()
    assert "fewest tiles" not in runs[0.0].tiling.describe()
    # The same simulator chooses again when its tolerance changes (choices are kept per tolerance).
    m.tiling_tolerance = 0.0
    assert m.call(symbol, numerics=False, **args).tiling.tiling == runs[0.0].tiling.tiling
    m.tiling_tolerance = 0.01
    assert m.call(symbol, numerics=False, **args).tiling.tiling == runs[0.01].tiling.tiling


@pytest.mark.parametrize("bad", [-0.1, 1.0, "0.01", True, None, float("nan")])
def test_tiling_tolerance_must_be_a_fraction(bad):
    with pytest.raises(sim.KernelArgError, match="tiling_tolerance"):
        sim.Simulator("FT78NE", tiling_tolerance=bad)
    m = sim.Simulator("FT78NE")
    with pytest.raises(sim.KernelArgError, match="tiling_tolerance"):
        m.tiling_tolerance = bad
    assert m.tiling_tolerance == sim.TILING_TOLERANCE


# --- run-configs ---------------------------------------------------------------------------------------------

def bn_config(tmp_path: Path, tiling) -> Path:
    doc = yaml.safe_load((ROOT / "configs" / "ft78ne_batch_norm_grad_s.yaml").read_text())
    if tiling is not None:
        doc["tiling"] = tiling
    path = tmp_path / "bn.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_run_config_tiling_is_kept_and_honoured(tmp_path, capsys):
    tiling = {"split": "rows", "tile_elements": 32}
    cfg = load_config(bn_config(tmp_path, tiling))
    assert cfg.tiling == tiling
    m, run = execute(cfg)
    assert run.tiling.tiling == tiling and run.tiling.source == "given"
    assert [p.name.split()[0] for p in run.plan.phases] == ["partial", "reduce"]
    assert main(["run", str(cfg.path), "--out-dir", str(tmp_path)]) == 0
    assert "(given)" in capsys.readouterr().out
    assert load_config(bn_config(tmp_path, None)).tiling is None


@pytest.mark.parametrize("tiling,match", [([1, 2], "tiling"), ({"split": {"a": 1}}, "tiling.split"),
                                          ({1: "rows"}, "tiling")])
def test_run_config_bad_tiling_refused_when_loaded(tmp_path, tiling, match):
    with pytest.raises(ConfigError, match=match):
        load_config(bn_config(tmp_path, tiling))


def test_run_config_tiling_the_kernel_refuses(tmp_path):
    with pytest.raises(sim.KernelArgError, match="tiling.split"):
        execute(load_config(bn_config(tmp_path, {"split": "diagonal"})))
    # validate plans with the config's tiling: one that cannot fit is a scratchpad-fit violation.
    path = bn_config(tmp_path, {"split": "channels", "channel_block": 64})
    assert main(["validate", str(path)]) == 0
    doc = yaml.safe_load(path.read_text())
    doc["args"]["params"][5:7] = [60000, 64]
    path.write_text(yaml.safe_dump(doc))
    assert main(["validate", str(path)]) == 1


def test_run_config_tiling_tolerance(tmp_path):
    """``tiling_tolerance:`` reaches the simulator: 0 keeps the strictly cheapest candidate."""
    doc = yaml.safe_load((ROOT / "configs" / "mt7004_hp_batch_norm_grad_s.yaml").read_text())
    # The bench's large shape, timing only: the params array in memory says 25088 rows.
    params = next(d for d in doc["data"] if d["name"] == "params")
    params["values"][5] = 25088
    doc["data"], doc["outputs"], doc["numerics"] = [params], [], False
    chosen = {}
    for tol in (0, 0.01):
        path = tmp_path / f"bn{tol}.yaml"
        path.write_text(yaml.safe_dump(dict(doc, tiling_tolerance=tol)))
        cfg = load_config(path)
        assert cfg.tiling_tolerance == tol
        m, run = execute(cfg)
        assert m.tiling_tolerance == tol
        chosen[tol] = run
    assert chosen[0].plan.tile_count > chosen[0.01].plan.tile_count
    assert chosen[0].cycles <= chosen[0.01].cycles <= chosen[0].cycles * 1.01
    for bad in (-1, 1, "x", True):
        path = tmp_path / "bad.yaml"
        path.write_text(yaml.safe_dump(dict(doc, tiling_tolerance=bad)))
        with pytest.raises(ConfigError, match="tiling_tolerance"):
            load_config(path)
