"""The benchmark cases: for every kernel a medium and a large shape, per chip and precision.

A case knows its call (symbol and arguments), the input arrays to place in simulated
memory, the same math once in plain numpy (whole tensors, one vectorised pass: the
kernels' reference functions, which the per-tile code reuses), and how to compare
the simulator's outputs with numpy's.  Each kernel contributes one builder function
to :data:`BUILDERS`; :func:`all_cases` expands them over chips, precisions and sizes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

F32 = np.dtype(np.float32)
#: (chip, symbol prefix) pairs the bench covers: fp32 on both chips, fp16 on the chip that has it.
CHIP_PRECISIONS = (("FT78NE", "fp"), ("MT7004", "fp"), ("MT7004", "hp"))
SIZES = ("medium", "large")


@dataclass(frozen=True)
class Output:
    """One output buffer to read back and compare with numpy's result."""

    name: str
    addr: int
    shape: tuple[int, ...]
    dtype: np.dtype
    rtol: float
    atol: float


@dataclass
class Case:
    """One benchmark point: a call, its inputs, and its numpy baseline."""

    kernel: str
    chip: str
    size: str
    symbol: str
    shape_text: str
    inputs: dict[int, np.ndarray]  # address -> array placed before the call
    args: dict[str, Any]
    numpy_fn: Callable[[], tuple[np.ndarray, ...]]  # the same math once, whole tensors
    outputs: tuple[Output, ...]  # compared with numpy_fn()'s results, in order
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def case_id(self) -> str:
        """``kernel/chip/prefix/size``: the name ``bench/run.py --case`` takes."""
        return f"{self.kernel}/{self.chip}/{self.symbol[:2]}/{self.size}"


def _dtype(prefix: str) -> np.dtype:
    return np.dtype(np.float16) if prefix == "hp" else F32


def _tol(prefix: str, rtol: float, atol: float) -> tuple[float, float]:
    """fp16 outputs are compared after rounding: both sides round the same fp32 value, up to one ulp."""
    return (max(rtol, 2e-3), max(atol, 2e-3)) if prefix == "hp" else (rtol, atol)


# -- per-kernel builders -------------------------------------------------------------------------

def batch_norm_grad(chip: str, prefix: str, size: str) -> Case:
    """BatchNormGrad [batch, channel], training, params passed as ints."""
    from kernels.batch_norm_grad import batch_norm_grad_reference
    batch, channel = {"medium": (16384, 64), "large": (25088, 256)}[size]
    dt = _dtype(prefix)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, channel), dtype=F32).astype(dt)
    dy = rng.standard_normal((batch, channel), dtype=F32).astype(dt)
    mean = rng.uniform(-0.5, 0.5, channel).astype(F32)
    invar = rng.uniform(0.5, 2.0, channel).astype(F32)
    scale = rng.uniform(0.5, 1.5, channel).astype(F32)
    a = dict(x=0x80000000, dy=0x90000000, dx=0xA0000000, mean=0xB0000000, invar=0xB0100000, scale=0xB0200000,
             dbias=0xB0300000, dscale=0xB0400000)
    args = dict(x=a["x"], dy=a["dy"], dx=a["dx"],
                params=[a["mean"], a["invar"], a["scale"], a["dbias"], a["dscale"], batch, channel, 1])
    rtol, atol = _tol(prefix, 1e-4, 1e-4)
    return Case("batch_norm_grad", chip, size, f"{prefix}_batch_norm_grad_s", f"{batch}x{channel} training",
                {a["x"]: x, a["dy"]: dy, a["mean"]: mean, a["invar"]: invar, a["scale"]: scale}, args,
                lambda: batch_norm_grad_reference(x, dy, mean, invar, scale, True),
                (Output("dx", a["dx"], (batch, channel), dt, rtol, atol),
                 Output("dbias", a["dbias"], (channel,), F32, 1e-3, 1e-2),
                 Output("dscale", a["dscale"], (channel,), F32, 1e-3, 1e-2)))


def fused_batch_norm_grad(chip: str, prefix: str, size: str) -> Case:
    """FusedBatchNormGrad NHWC, training (rows split over the cores, partial sums through GSM)."""
    from kernels.fused_batch_norm_grad import fused_batch_norm_grad_reference
    shape = {"medium": (8, 28, 28, 64), "large": (8, 56, 56, 64)}[size]
    c = shape[3]
    dt = _dtype(prefix)
    rng = np.random.default_rng(0)
    dy = rng.standard_normal(shape, dtype=F32).astype(dt)
    x = rng.standard_normal(shape, dtype=F32).astype(dt)
    scale, mean = rng.uniform(0.5, 1.5, c).astype(F32), rng.uniform(-0.5, 0.5, c).astype(F32)
    var = rng.uniform(0.5, 2.0, c).astype(F32)
    a = dict(y_backprop=0x80000000, x=0x90000000, scale=0xA0000000, reserve_space_1=0xA0100000,
             reserve_space_2=0xA0200000, x_backprop=0xB0000000, scale_backprop=0xA0300000,
             offset_backprop=0xA0400000)
    rtol, atol = _tol(prefix, 1e-4, 1e-4)
    return Case("fused_batch_norm_grad", chip, size, f"{prefix}_fused_batch_norm_grad_s",
                "x".join(map(str, shape)) + " NHWC training",
                {a["y_backprop"]: dy, a["x"]: x, a["scale"]: scale, a["reserve_space_1"]: mean,
                 a["reserve_space_2"]: var},
                dict(a, shape=list(shape), epsilon=1e-3, data_format="NHWC", is_training=True),
                lambda: fused_batch_norm_grad_reference(dy, x, scale, mean, var, 1e-3, "NHWC", True),
                (Output("x_backprop", a["x_backprop"], shape, dt, rtol, atol),
                 Output("scale_backprop", a["scale_backprop"], (c,), F32, 1e-3, 1e-2),
                 Output("offset_backprop", a["offset_backprop"], (c,), F32, 1e-3, 1e-2)))


def fake_quant_with_min_max_vars_gradient(chip: str, prefix: str, size: str) -> Case:
    """FakeQuantWithMinMaxVarsGradient, 8 bits, [-6, 6], inputs spread over [-8, 8]."""
    from kernels.fake_quant_with_min_max_vars_gradient import (
        fake_quant_gradient_reference,
    )
    shape = {"medium": (4, 56, 56, 64), "large": (16, 56, 56, 64)}[size]
    dt = _dtype(prefix)
    rng = np.random.default_rng(0)
    g = rng.standard_normal(shape, dtype=F32).astype(dt)
    x = rng.uniform(-8, 8, shape).astype(dt)
    a = dict(gradients=0x80000000, inputs=0x90000000, min=0xA0000000, max=0xA0000040,
             backprops_wrt_input=0xB0000000, backprop_wrt_min=0xA0000080, backprop_wrt_max=0xA00000C0)

    def ref() -> tuple[np.ndarray, ...]:
        bp, wmin, wmax = fake_quant_gradient_reference(g, x, -6.0, 6.0)
        return bp, np.float32(wmin), np.float32(wmax)

    return Case("fake_quant_with_min_max_vars_gradient", chip, size,
                f"{prefix}_fake_quant_with_min_max_vars_gradient_s", "x".join(map(str, shape)) + ", 8 bits",
                {a["gradients"]: g, a["inputs"]: x, a["min"]: np.float32(-6.0), a["max"]: np.float32(6.0)},
                dict(a, shape=list(shape)), ref,
                (Output("backprops_wrt_input", a["backprops_wrt_input"], shape, dt, 0.0, 0.0),
                 Output("backprop_wrt_min", a["backprop_wrt_min"], (), F32, 1e-3, 1e-1),
                 Output("backprop_wrt_max", a["backprop_wrt_max"], (), F32, 1e-3, 1e-1)))


def conv2d_backprop_filter(chip: str, prefix: str, size: str) -> Case:
    """Conv2DBackpropFilter NHWC, 3x3 filter, 64 -> 64 channels, SAME, stride 1 (the SPEC's target shape)."""
    from kernels.common.geometry import conv_geometry
    from kernels.conv2d_backprop_filter import conv2d_backprop_filter_reference
    shape = {"medium": (4, 28, 28, 64), "large": (8, 56, 56, 64)}[size]
    fsz = (3, 3, 64, 64)
    dt = _dtype(prefix)
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape, dtype=F32).astype(dt)
    dy = rng.standard_normal(shape[:3] + (fsz[3],), dtype=F32).astype(dt)
    a = dict(input=0x80000000, out_backprop=0x90000000, output=0xA0000000)
    geo = conv_geometry(list(shape), fsz[:2], strides=[1, 1, 1, 1], padding="SAME", explicit_paddings=None,
                        data_format="NHWC", dilations=None)
    # Sums over up to 25088 positions: fp32 accumulation order differs between tiles and one matmul.
    rtol, atol = _tol(prefix, 1e-3, 2e-2)
    if prefix == "hp":
        rtol, atol = 2e-2, 0.5  # fp16 outputs of magnitude ~100-200: one ulp is 0.06-0.125
    return Case("conv2d_backprop_filter", chip, size, f"{prefix}_conv2d_backprop_filter_s",
                "x".join(map(str, shape)) + " NHWC, 3x3x64x64 SAME",
                {a["input"]: x, a["out_backprop"]: dy},
                dict(a, input_shape=list(shape), filter_sizes=list(fsz), strides=[1, 1, 1, 1], padding="SAME"),
                lambda: (conv2d_backprop_filter_reference(x, dy, geo, 3, 3),),
                (Output("output", a["output"], fsz, dt, rtol, atol),))


def depthwise_conv2d_backprop_input(chip: str, prefix: str, size: str) -> Case:
    """DepthwiseConv2dBackpropInput NHWC, 3x3 filter, multiplier 1, SAME, stride 1."""
    from kernels.common.geometry import conv_geometry
    from kernels.depthwise_conv2d_backprop_input import (
        depthwise_conv2d_backprop_input as reference,
    )
    sizes = {"medium": [8, 56, 56, 64], "large": [8, 112, 112, 64]}[size]
    fshape = [3, 3, sizes[3], 1]
    dt = _dtype(prefix)
    rng = np.random.default_rng(0)
    filt = rng.standard_normal(fshape, dtype=F32).astype(dt)
    dy = rng.standard_normal(tuple(sizes), dtype=F32).astype(dt)
    a = {"filter": 0x80000000, "out_backprop": 0x90000000, "output": 0xA0000000}
    geom = conv_geometry(sizes, (3, 3), strides=[1, 1, 1, 1], padding="SAME", explicit_paddings=None,
                         data_format="NHWC", dilations=None)
    rtol, atol = _tol(prefix, 1e-5, 1e-5)
    return Case("depthwise_conv2d_backprop_input", chip, size, f"{prefix}_depthwise_conv2d_backprop_input_s",
                "x".join(map(str, sizes)) + " NHWC, 3x3x64x1 SAME",
                {a["filter"]: filt, a["out_backprop"]: dy},
                dict(a, input_sizes=sizes, filter_shape=fshape, strides=[1, 1, 1, 1], padding="SAME"),
                lambda: (reference(filt, dy, geom),),
                (Output("output", a["output"], tuple(sizes), dt, rtol, atol),))


#: Kernel name -> builder(chip, prefix, size); each kernel adds its own entry.
BUILDERS: dict[str, Callable[[str, str, str], Case]] = {
    "batch_norm_grad": batch_norm_grad,
    "fused_batch_norm_grad": fused_batch_norm_grad,
    "fake_quant_with_min_max_vars_gradient": fake_quant_with_min_max_vars_gradient,
    "conv2d_backprop_filter": conv2d_backprop_filter,
    "depthwise_conv2d_backprop_input": depthwise_conv2d_backprop_input,
}


def case_ids(kernels: list[str] | None = None, sizes: list[str] | None = None,
             chips: list[str] | None = None) -> list[str]:
    """Every case id, in table order (kernel, size, chip), filtered by the given names."""
    out = []
    for kernel in kernels or list(BUILDERS):
        for size in sizes or list(SIZES):
            for chip, prefix in CHIP_PRECISIONS:
                if chips is None or chip in chips:
                    out.append(f"{kernel}/{chip}/{prefix}/{size}")
    return out


def build(case_id: str) -> Case:
    """The case named ``kernel/chip/prefix/size`` (its arrays generated here, seeded)."""
    kernel, chip, prefix, size = case_id.split("/")
    return BUILDERS[kernel](chip, prefix, size)
