"""Convolution geometry: TensorFlow's output sizes and paddings, and which outputs reach which inputs.

* :func:`conv_geometry` checks a convolution's attributes (data_format order, NHWC or NCHW, as in
  TensorFlow; refusals name the argument and what was expected), bounds absurd geometry once
  (:func:`geometry_limit`) and returns a :class:`ConvGeometry` in NHWC terms;
* along one spatial axis, :func:`axis_taps` says which output positions of each filter tap land on a
  range of inputs (a tile's halo and the strided slices its compute takes), :func:`input_range` which
  inputs a range of outputs reads, and :func:`halo_bound` / :func:`window_bound` bound both for tile
  sizing;
* :func:`image_segments` cuts a range of the flattened (image, row) space into one piece per image.

Both convolution kernels plan and compute with these; nothing here knows a kernel.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from kernels.common.args import require_choice, require_ints
from sim.errors import KernelArgError, brief

DATA_FORMATS = ("NHWC", "NCHW")
PADDINGS = ("SAME", "VALID", "EXPLICIT")
#: Along each spatial axis of n input positions, the effective (dilated) filter, the stride and each explicit
#: padding may be at most GEOMETRY_FACTOR·n + GEOMETRY_SLACK.  Every TensorFlow convolution worth running fits,
#: with room to spare: a 3x3 filter dilated by 36 on a 1x1 map, strides and dilations well past a tiny input,
#: "full" padding of eff - 1, a stride-32 patchify stem.  Beyond it windows read nothing but padding, or only
#: the first output exists, and the numbers only serve to exhaust the host (a dilation of 2**40, a stride of
#: 662001 with paddings of 134315).  The output extent follows: at most n + 2·(GEOMETRY_FACTOR·n + GEOMETRY_SLACK).
GEOMETRY_FACTOR = 16
GEOMETRY_SLACK = 256


@dataclass(frozen=True)
class ConvGeometry:
    """Spatial geometry of a 2-D convolution in NHWC terms, whatever the data format of the tensors."""

    batch: int
    in_h: int
    in_w: int
    in_c: int
    out_h: int
    out_w: int
    filter_h: int
    filter_w: int
    stride_h: int
    stride_w: int
    dilation_h: int
    dilation_w: int
    pad_top: int
    pad_bottom: int
    pad_left: int
    pad_right: int
    data_format: str

    @property
    def eff_h(self) -> int:
        """Effective (dilated) filter height: (k - 1)·d + 1."""
        return (self.filter_h - 1) * self.dilation_h + 1

    @property
    def eff_w(self) -> int:
        """Effective (dilated) filter width."""
        return (self.filter_w - 1) * self.dilation_w + 1

    def nhwc_shape(self, channels: int, spatial: str = "in") -> tuple[int, int, int, int]:
        """(batch, h, w, channels) of the input (``spatial='in'``) or output tensor."""
        h, w = (self.in_h, self.in_w) if spatial == "in" else (self.out_h, self.out_w)
        return (self.batch, h, w, channels)

    def tensor_shape(self, channels: int, spatial: str = "in") -> tuple[int, int, int, int]:
        """The same shape in the call's data_format order."""
        n, h, w, c = self.nhwc_shape(channels, spatial)
        return (n, h, w, c) if self.data_format == "NHWC" else (n, c, h, w)

    @property
    def nchw(self) -> bool:
        """True when the tensors are channels-first."""
        return self.data_format == "NCHW"

    def order(self, n: int, h: int, w: int, c: int) -> tuple[int, int, int, int]:
        """An NHWC 4-tuple (an index, a start or a block shape) in the call's data_format order."""
        return (n, c, h, w) if self.nchw else (n, h, w, c)

    def row_taps(self, lo: int, hi: int) -> AxisTaps:
        """Which output rows of each tap land on input rows [lo, hi)."""
        return axis_taps(lo, hi, self.out_h, self.filter_h, self.stride_h, self.dilation_h, self.pad_top)

    def col_taps(self, lo: int, hi: int) -> AxisTaps:
        """Which output columns of each tap land on input columns [lo, hi)."""
        return axis_taps(lo, hi, self.out_w, self.filter_w, self.stride_w, self.dilation_w, self.pad_left)

    def input_rows(self, o0: int, o1: int) -> tuple[int, int]:
        """Input rows [lo, hi) the windows of output rows [o0, o1) read, clipped to the input (hi may be <= lo)."""
        return input_range(o0, o1, self.in_h, self.eff_h, self.stride_h, self.pad_top)

    def input_cols(self, o0: int, o1: int) -> tuple[int, int]:
        """Input columns [lo, hi) the windows of output columns [o0, o1) read, clipped to the input."""
        return input_range(o0, o1, self.in_w, self.eff_w, self.stride_w, self.pad_left)


# --- one spatial axis: which outputs reach which inputs -------------------------------------------

@dataclass(frozen=True)
class AxisTaps:
    """One spatial axis of a tile: input range [lo, hi) and the output range [o_lo, o_lo + o_n) it reads.

    ``taps`` lists, per filter tap k that reaches the tile, ``(k, o_start, count,
    i_start)``: the output positions ``o_lo + o_start ..`` (``count`` of them)
    land on input positions ``lo + i_start``, ``+ stride`` each.
    """

    lo: int
    hi: int
    o_lo: int
    o_n: int
    taps: tuple[tuple[int, int, int, int], ...]

    @property
    def pairs(self) -> int:
        """(tap, output position) pairs of this axis: the multiply-adds per element of the other axes."""
        return sum(t[2] for t in self.taps)


def axis_taps(lo: int, hi: int, out_n: int, ksize: int, stride: int, dilation: int, pad: int) -> AxisTaps:
    """Which outputs of an axis of ``out_n`` reach inputs [lo, hi): input = out·stride − pad + k·dilation."""
    found = []
    for k in range(ksize):
        off = k * dilation - pad
        a = max(0, -(-(lo - off) // stride))
        b = min(out_n - 1, (hi - 1 - off) // stride)
        if a <= b:
            found.append((k, a, b - a + 1, a * stride + off - lo))
    if not found:
        return AxisTaps(lo, hi, 0, 0, ())
    o_lo = min(t[1] for t in found)
    o_hi = max(t[1] + t[2] for t in found)
    taps = tuple((k, a - o_lo, n, i) for k, a, n, i in found)
    return AxisTaps(lo, hi, o_lo, o_hi - o_lo, taps)


def input_range(o0: int, o1: int, n_in: int, eff: int, stride: int, pad: int) -> tuple[int, int]:
    """Inputs [lo, hi) the windows of outputs [o0, o1) read, clipped to the ``n_in`` inputs (hi may be <= lo
    when every window lies in the padding)."""
    return max(o0 * stride - pad, 0), min((o1 - 1) * stride - pad + eff, n_in)


def halo_bound(n_in: int, eff: int, stride: int) -> int:
    """The most output positions whose receptive field reaches ``n_in`` consecutive inputs."""
    return (n_in - 1 + eff - 1) // stride + 1


def window_bound(n_out: int, eff: int, stride: int) -> int:
    """The most input positions the windows of ``n_out`` consecutive outputs read (before clipping)."""
    return (n_out - 1) * stride + eff


def image_segments(g0: int, g1: int, rows: int) -> list[tuple[int, int, int]]:
    """(image, first row, end row) pieces of the flattened (image·rows + row) range [g0, g1), one per image."""
    out = []
    g = g0
    while g < g1:
        n, r = divmod(g, rows)
        stop = min(g1, (n + 1) * rows)
        out.append((n, r, r + stop - g))
        g = stop
    return out


def hw_index(data_format: str) -> tuple[int, int, int, int]:
    """Positions of (N, H, W, C) in a 4-vector of ``data_format`` order."""
    return (0, 1, 2, 3) if data_format == "NHWC" else (0, 2, 3, 1)


def to_nhwc(values: Sequence[int], data_format: str) -> tuple[int, int, int, int]:
    """A 4-vector in ``data_format`` order, reordered to NHWC."""
    n, h, w, c = hw_index(data_format)
    return (values[n], values[h], values[w], values[c])


def _window(name: str, size: int, eff: int, stride: int, padding: str, pads: tuple[int, int]) -> tuple[int, int, int]:
    """(out, pad_before, pad_after) of one spatial dimension, TensorFlow's GetWindowedOutputSize."""
    if padding == "SAME":
        out = -(-size // stride)
        total = max((out - 1) * stride + eff - size, 0)
        return out, total // 2, total - total // 2
    before, after = pads if padding == "EXPLICIT" else (0, 0)
    out = (size + before + after - eff + stride) // stride
    if out <= 0:
        raise KernelArgError(f"argument '{name}': the dilated filter ({eff}) is larger than the padded input "
                             f"({size + before + after}): the output size would be {out}")
    return out, before, after


def geometry_limit(size: int) -> int:
    """The largest effective filter, stride or explicit padding an axis of ``size`` input positions takes."""
    return GEOMETRY_FACTOR * size + GEOMETRY_SLACK


def _check_extent(attr: str, what: str, value: int, axis: str, size: int, input_name: str) -> None:
    """Refuse ``value`` (``what`` along ``axis``) when it is absurd for ``size`` input positions."""
    limit = geometry_limit(size)
    if value > limit:
        raise KernelArgError(f"argument '{attr}': {what} along {axis} is {brief(value)}, absurd for the "
                             f"{size} {axis} positions of {input_name} (rule: at most {GEOMETRY_FACTOR} x the "
                             f"input's extent + {GEOMETRY_SLACK} = {limit})")


def _no_explicit_paddings(value: Any) -> bool:
    """True when ``value`` is absent or an empty sequence (what a non-EXPLICIT padding takes)."""
    if value is None:
        return True
    if isinstance(value, (list, tuple)):
        return len(value) == 0
    return isinstance(value, np.ndarray) and value.size == 0


def conv_geometry(input_shape: Any, filter_hw: tuple[int, int], *, strides: Any, padding: Any,
                  explicit_paddings: Any, data_format: Any, dilations: Any,
                  input_name: str = "input_shape", filter_name: str = "filter") -> ConvGeometry:
    """Check the convolution attributes and compute the geometry (KernelArgError on any bad attribute).

    Besides TensorFlow's own rules, the effective filter, the strides and the explicit paddings of each
    spatial axis are bounded by the input's extent (:func:`geometry_limit`), before anything is planned.
    """
    fmt = require_choice("data_format", data_format, DATA_FORMATS)
    pad = require_choice("padding", padding, PADDINGS)
    shape = require_ints(input_name, input_shape, 4, minimum=1)
    st = require_ints("strides", strides, 4)
    dil = require_ints("dilations", dilations if dilations is not None else (1, 1, 1, 1), 4)
    n_i, h_i, w_i, c_i = hw_index(fmt)
    for attr, vals in (("strides", st), ("dilations", dil)):
        if vals[n_i] != 1 or vals[c_i] != 1:
            raise KernelArgError(f"argument '{attr}': must be 1 in the batch and depth dimensions "
                                 f"({fmt} order), got {list(vals)}")
        if vals[h_i] <= 0 or vals[w_i] <= 0:
            raise KernelArgError(f"argument '{attr}': spatial values must be > 0, got {list(vals)}")
    if pad == "EXPLICIT":
        ep = require_ints("explicit_paddings", explicit_paddings if explicit_paddings is not None else (), 8,
                          minimum=0)
        pairs = [(ep[2 * i], ep[2 * i + 1]) for i in range(4)]
        if pairs[n_i] != (0, 0) or pairs[c_i] != (0, 0):
            raise KernelArgError(f"argument 'explicit_paddings': batch and depth paddings must be 0 "
                                 f"({fmt} order), got {list(ep)}")
        pad_h, pad_w = pairs[h_i], pairs[w_i]
    else:
        if not _no_explicit_paddings(explicit_paddings):
            raise KernelArgError(f"argument 'explicit_paddings': must be absent or empty unless padding is "
                                 f"EXPLICIT (padding is {pad}), got {brief(explicit_paddings)}")
        pad_h = pad_w = (0, 0)
    fh, fw = (require_ints(filter_name, filter_hw, 2, minimum=1))
    eff_h, eff_w = (fh - 1) * dil[h_i] + 1, (fw - 1) * dil[w_i] + 1
    for axis, size, stride, eff, k, pads in (("height", shape[h_i], st[h_i], eff_h, fh, pad_h),
                                             ("width", shape[w_i], st[w_i], eff_w, fw, pad_w)):
        _check_extent("strides", "the stride", stride, axis, size, input_name)
        _check_extent("dilations" if eff > k else filter_name, "the effective filter (k - 1)·d + 1", eff, axis,
                      size, input_name)
        for side, p in zip(("before", "after"), pads):
            _check_extent("explicit_paddings", f"the padding {side}", p, axis, size, input_name)
    out_h, top, bottom = _window(input_name, shape[h_i], eff_h, st[h_i], pad, pad_h)
    out_w, left, right = _window(input_name, shape[w_i], eff_w, st[w_i], pad, pad_w)
    return ConvGeometry(batch=shape[n_i], in_h=shape[h_i], in_w=shape[w_i], in_c=shape[c_i], out_h=out_h,
                        out_w=out_w, filter_h=fh, filter_w=fw, stride_h=st[h_i], stride_w=st[w_i],
                        dilation_h=dil[h_i], dilation_w=dil[w_i], pad_top=top, pad_bottom=bottom, pad_left=left,
                        pad_right=right, data_format=fmt)
