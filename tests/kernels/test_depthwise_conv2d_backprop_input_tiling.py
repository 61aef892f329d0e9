"""DepthwiseConv2dBackpropInput's tilings: every tiling it lists right (a float64 scatter written here from the
op's definition) and honoured (visible in the plan); bad tilings refused naming ``tiling.<key>`` or the
scratchpad.  (Its other tests are in tests/kernels/test_depthwise_conv2d_backprop_input.py.)"""

import numpy as np
import pytest
from tilings import ADDR, assert_first_candidate_is_the_kernels_own_plan, assert_refused, candidates

import sim

# --- tilings -------------------------------------------------------------------------

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
    pool = candidates(sim.Simulator("FT78NE"), "fp_depthwise_conv2d_backprop_input_s",
                      **dw_args(sizes, fh, fw, mult, stride, fmt))
    # The space's preferred tiling for each channel split, and its last candidate (the smallest tiles).
    listed = list({t["channel_parts"]: t for t in reversed(pool)}.values()) + [pool[-1]]
    assert len({t["channel_parts"] for t in listed}) >= 2
    extra = {"channel_parts": 2, "tile_rows": 3, "tile_cols": 5, "tile_channels": 7}
    for tiling in listed + [extra]:
        run = dw_run(sizes, fh, fw, mult, stride, fmt, tiling)
        assert run.tiling.tiling == tiling and run.tiling.source == "given"
        dw_honoured(run, tiling, fmt, mult)


FIRST = [("fp_depthwise_conv2d_backprop_input_s", dw_args((2, 16, 16, 64), 3, 3, 1, 1, "NHWC"))]


@pytest.mark.parametrize("symbol,args", FIRST, ids=[str(i) for i in range(len(FIRST))])
def test_depthwise_first_candidate_is_the_kernels_own_plan(symbol, args):
    assert_first_candidate_is_the_kernels_own_plan(symbol, args)


REFUSALS = [
    ("fp_depthwise_conv2d_backprop_input_s", dw_args((2, 16, 16, 64), 3, 3, 1, 1, "NHWC"), {"channel_parts": 3},
     sim.KernelArgError, "tiling.channel_parts"),
    ("fp_depthwise_conv2d_backprop_input_s", dw_args((2, 16, 16, 64), 3, 3, 1, 1, "NHWC"), {"tile_cols": 17},
     sim.KernelArgError, "tiling.tile_cols"),
    ("fp_depthwise_conv2d_backprop_input_s", dw_args((2, 16, 16, 64), 3, 3, 1, 1, "NHWC"), {"cols": 4},
     sim.KernelArgError, "'tiling'"),
    ("fp_depthwise_conv2d_backprop_input_s", dw_args((1, 512, 512, 64), 3, 3, 1, 1, "NHWC"),
     {"tile_rows": 512, "tile_cols": 512, "tile_channels": 64}, sim.LayoutError, "scratchpad"),
]


@pytest.mark.parametrize("symbol,args,tiling,error,match", REFUSALS, ids=[str(t) for _, _, t, _, _ in REFUSALS])
def test_depthwise_bad_tilings_are_refused(symbol, args, tiling, error, match):
    assert_refused(symbol, args, tiling, error, match)
