"""Example calls of Conv2DBackpropFilter (the filter gradient of a 2-D convolution)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from kernels.examples import DDR, Data, Example, Output
from kernels.examples.conv_math import filter_gradient, geometry, out_shape

KERNEL = "conv2d_backprop_filter"


def _example(size: str, chip: str, prefix: str, variant: str, at: tuple[int, int, int], input_shape: list[int],
             filter_sizes: list[int], strides: list[int], padding: str, description: str, *,
             more: Mapping[str, Any] | None = None, core: int | None = None, core_mask: int | None = None,
             comment: str = "", config: str | None = None) -> Example:
    """An example with input, out_backprop and output at ``at``; ``more`` holds the optional arguments given."""
    dt = "float16" if prefix == "hp" else "float32"
    args: dict[str, Any] = dict(input=at[0], out_backprop=at[1], output=at[2], input_shape=input_shape,
                                filter_sizes=filter_sizes, strides=strides, padding=padding, **(more or {}))
    g = geometry(args, "input_shape", filter_sizes[0], filter_sizes[1])
    args.update({"core": core} if core is not None else {"core_mask": core_mask} if core_mask is not None else {})
    fh, fw = filter_sizes[:2]

    def reference(a: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {"output": filter_gradient(a["input"], a["out_backprop"], g, fh, fw)}

    # Sums over many positions: fp32 accumulation order differs between tiles and one matmul; fp16 outputs of
    # magnitude ~100-200 are one ulp (0.06-0.125) apart.
    rtol, atol = (2e-2, 0.5) if prefix == "hp" else (1e-3, 2e-2)
    data = (Data("input", at[0], tuple(input_shape), dt, (1, -1.0, 1.0), core=core),
            Data("out_backprop", at[1], out_shape(g, filter_sizes[3]), dt, (2, -1.0, 1.0), core=core))
    outputs = (Output("output", at[2], tuple(filter_sizes), dt, rtol, atol, core),)
    text = "x".join(map(str, input_shape)) + f" {g['format']}, {'x'.join(map(str, filter_sizes))} {padding}"
    return Example(KERNEL, size, chip, prefix, variant, description, args, data, outputs, reference, comment,
                   config, text)


def examples() -> list[Example]:
    """Every example of Conv2DBackpropFilter."""
    ddr = DDR[:3]
    out = [_example("tiny", "FT78NE", "fp", "s", ddr, [1, 3, 4, 2], [2, 2, 2, 3], [1, 1, 1, 1], "VALID",
                    "Conv2DBackpropFilter, 2x2 VALID on a 1x3x4x2 input, on FT78NE"),
           _example("tiny", "MT7004", "fp", "s", ddr, [1, 2, 5, 5], [3, 3, 2, 2], [1, 1, 2, 2], "SAME",
                    "Conv2DBackpropFilter, 3x3 SAME stride 2 on a 1x2x5x5 NCHW input, on MT7004",
                    more={"data_format": "NCHW"}),
           _example("tiny", "MT7004", "hp", "s", ddr, [1, 4, 4, 3], [3, 3, 3, 2], [1, 1, 1, 1], "SAME",
                    "Conv2DBackpropFilter fp16, 3x3 SAME on a 1x4x4x3 input, on MT7004")]
    out += [
        _example("small", "FT78NE", "fp", "s", (0xA0000000, 0xA4000000, 0xA8000000), [4, 28, 28, 64],
                 [3, 3, 64, 64], [1, 1, 1, 1], "SAME",
                 "Conv2DBackpropFilter fp32, shared variant, 3x3 SAME on a 4x28x28x64 batch, on FT78NE",
                 more={"data_format": "NHWC"}, core_mask=0xFF,
                 comment="Conv2DBackpropFilter in fp32 on FT78NE's eight cores: a ResNet-style 3x3 layer, 64 -> 64 "
                         "channels,\nSAME padding, stride 1, on a 4x28x28x64 NHWC batch in DDR.  The batch's rows "
                         "are split over the cores;\neach core's partial filter gradient goes through the GSM "
                         "workspace and is reduced slice by slice.",
                 config="ft78ne_conv2d_backprop_filter_s"),
        _example("small", "MT7004", "fp", "p", (0x10000000, 0x10100000, 0x10200000), [1, 15, 15, 24],
                 [4, 4, 24, 16], [1, 2, 2, 1], "EXPLICIT",
                 "Conv2DBackpropFilter fp32, private variant, 4x4 stride 2 EXPLICIT, on MT7004 core 2",
                 more={"explicit_paddings": [0, 0, 1, 2, 2, 1, 0, 0]}, core=2,
                 comment="Conv2DBackpropFilter in fp32 on one MT7004 core's private L2: 4x4 filter, stride 2, "
                         "explicit padding\n(top 1, bottom 2, left 2, right 1), 24 -> 16 channels on a 1x15x15x24 "
                         "NHWC input.",
                 config="mt7004_conv2d_backprop_filter_p"),
        _example("small", "MT7004", "hp", "s", (0xA0000000, 0xA1000000, 0xB0000000), [2, 16, 20, 20],
                 [3, 3, 16, 32], [1, 1, 1, 1], "SAME",
                 "Conv2DBackpropFilter fp16, shared variant, NCHW, dilated 3x3 SAME, on MT7004",
                 more={"data_format": "NCHW", "dilations": [1, 1, 2, 2]}, core_mask=0xF,
                 comment="Conv2DBackpropFilter in fp16 on MT7004's four cores: NCHW, 3x3 filter dilated by 2 "
                         "(TensorFlow's CPU\nkernel refuses dilations; the chip library computes them), SAME, 16 -> "
                         "32 channels on a 2x16x20x20\ninput; fp16 tensors, fp32 accumulation, buffers in DDR.",
                 config="mt7004_hp_conv2d_backprop_filter_s"),
    ]
    for size, shape in (("medium", [4, 28, 28, 64]), ("large", [8, 56, 56, 64])):
        for chip, prefix in (("FT78NE", "fp"), ("MT7004", "fp"), ("MT7004", "hp")):
            out.append(_example(size, chip, prefix, "s", (0x80000000, 0x90000000, 0xA0000000), shape,
                                [3, 3, 64, 64], [1, 1, 1, 1], "SAME",
                                f"Conv2DBackpropFilter NHWC, 3x3 filter, 64 -> 64 channels, SAME, stride 1, on "
                                f"{chip} (the SPEC's target shape)"))
    return out


def scaled_args(n: int, base: tuple[int, ...]) -> dict[str, Any]:
    """Arguments whose work grows linearly with ``n`` (2 n images of 28x28x64, a 3x3x64x64 filter, SAME)."""
    a, b, c, _ = base
    return dict(input=a, out_backprop=b, output=c, input_shape=[2 * n, 28, 28, 64], filter_sizes=[3, 3, 64, 64],
                strides=[1, 1, 1, 1], padding="SAME")
