"""The two convolution gradients in whole-tensor numpy, from their definitions (independent of the kernels).

TensorFlow's geometry: per spatial axis, a filter of ``k`` taps dilated by ``d`` spans ``(k - 1) d + 1``
inputs; SAME gives ``ceil(in / stride)`` outputs with the padding split evenly (the odd one after), VALID
no padding, EXPLICIT the given pads.  Both gradients accumulate in fp32 and round once to the tensors'
dtype, as the chips do.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

F32 = np.dtype(np.float32)


def window(size: int, k: int, stride: int, dilation: int, padding: str, pads: Sequence[int] = (0, 0)
           ) -> tuple[int, int]:
    """(outputs, padding before) of one spatial axis."""
    eff = (k - 1) * dilation + 1
    if padding == "SAME":
        out = -(-size // stride)
        return out, max((out - 1) * stride + eff - size, 0) // 2
    if padding == "VALID":
        return (size - eff) // stride + 1, 0
    return (size + pads[0] + pads[1] - eff) // stride + 1, pads[0]


def geometry(args: Mapping[str, Any], shape_key: str, fh: int, fw: int) -> dict[str, Any]:
    """The spatial geometry of a call's arguments: n, h, w, c of the input, the outputs and pads per axis."""
    fmt = args.get("data_format", "NHWC")
    hi, wi = (1, 2) if fmt == "NHWC" else (2, 3)
    shape = list(args[shape_key])
    strides = args["strides"]
    dilations = args.get("dilations") or [1, 1, 1, 1]
    pads = list(args.get("explicit_paddings") or [0] * 8)
    oh, pt = window(shape[hi], fh, strides[hi], dilations[hi], args["padding"], pads[2 * hi:2 * hi + 2])
    ow, pl = window(shape[wi], fw, strides[wi], dilations[wi], args["padding"], pads[2 * wi:2 * wi + 2])
    return dict(format=fmt, n=shape[0], h=shape[hi], w=shape[wi], c=shape[3] if fmt == "NHWC" else shape[1],
                oh=oh, ow=ow, pt=pt, pl=pl, sh=strides[hi], sw=strides[wi], dh=dilations[hi], dw=dilations[wi])


def out_shape(g: Mapping[str, Any], channels: int) -> tuple[int, int, int, int]:
    """The shape of the output gradient (``channels`` of them) in the call's data format."""
    if g["format"] == "NHWC":
        return g["n"], g["oh"], g["ow"], channels
    return g["n"], channels, g["oh"], g["ow"]


def _nhwc(a: np.ndarray, fmt: str) -> np.ndarray:
    return a if fmt == "NHWC" else a.transpose(0, 2, 3, 1)


def _taps(g: Mapping[str, Any], kh: int, kw: int) -> tuple[slice, slice]:
    """The rows and columns of the padded input that tap (kh, kw) meets, one per output position."""
    r0, c0 = kh * g["dh"], kw * g["dw"]
    return (slice(r0, r0 + (g["oh"] - 1) * g["sh"] + 1, g["sh"]), slice(c0, c0 + (g["ow"] - 1) * g["sw"] + 1, g["sw"]))


def _padded(g: Mapping[str, Any], fh: int, fw: int) -> tuple[int, int]:
    """Rows and columns of the input padded on both sides far enough for every tap."""
    return (max(g["h"] + g["pt"], (g["oh"] - 1) * g["sh"] + (fh - 1) * g["dh"] + 1),
            max(g["w"] + g["pl"], (g["ow"] - 1) * g["sw"] + (fw - 1) * g["dw"] + 1))


def filter_gradient(x: np.ndarray, dy: np.ndarray, g: Mapping[str, Any], fh: int, fw: int) -> np.ndarray:
    """Conv2DBackpropFilter: dW[kh, kw, ci, co] = Σ over images and output positions of the input the tap meets
    times the output gradient, in fp32, returned in x's dtype."""
    xs, dys = _nhwc(x, g["format"]).astype(F32), _nhwc(dy, g["format"]).astype(F32)
    ph, pw = _padded(g, fh, fw)
    xp = np.zeros((g["n"], ph, pw, g["c"]), F32)
    xp[:, g["pt"]:g["pt"] + g["h"], g["pl"]:g["pl"] + g["w"]] = xs
    dw = np.zeros((fh, fw, g["c"], dys.shape[3]), F32)
    flat = dys.reshape(-1, dys.shape[3])
    for kh in range(fh):
        for kw in range(fw):
            rows, cols = _taps(g, kh, kw)
            dw[kh, kw] = xp[:, rows, cols].reshape(-1, g["c"]).T @ flat
    return dw.astype(x.dtype)


def depthwise_input_gradient(filt: np.ndarray, dy: np.ndarray, g: Mapping[str, Any]) -> np.ndarray:
    """DepthwiseConv2dNativeBackpropInput: each output gradient, times each tap's filter value, summed over the
    depth multiplier, added to the input position the tap meets; in fp32, returned in dy's dtype."""
    fh, fw, c, mult = filt.shape
    dys = _nhwc(dy, g["format"]).astype(F32).reshape(g["n"], g["oh"], g["ow"], c, mult)
    f = filt.astype(F32)
    ph, pw = _padded(g, fh, fw)
    dxp = np.zeros((g["n"], ph, pw, c), F32)
    for kh in range(fh):
        for kw in range(fw):
            rows, cols = _taps(g, kh, kw)
            dxp[:, rows, cols] += (dys * f[kh, kw]).sum(axis=-1, dtype=F32)
    dx = dxp[:, g["pt"]:g["pt"] + g["h"], g["pl"]:g["pl"] + g["w"]]
    return (dx if g["format"] == "NHWC" else dx.transpose(0, 3, 1, 2)).astype(dy.dtype)
