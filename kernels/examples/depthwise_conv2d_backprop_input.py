"""Example calls of DepthwiseConv2dBackpropInput (the input gradient of a depthwise 2-D convolution)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from kernels.examples import DDR, Data, Example, Output, tolerance
from kernels.examples.conv_math import depthwise_input_gradient, geometry, out_shape

KERNEL = "depthwise_conv2d_backprop_input"


def _example(size: str, chip: str, prefix: str, variant: str, at: tuple[int, int, int], input_sizes: list[int],
             filter_shape: list[int], strides: list[int], padding: str, description: str, *,
             more: Mapping[str, Any] | None = None, core: int | None = None, core_mask: int | None = None,
             comment: str = "", config: str | None = None) -> Example:
    """An example with filter, out_backprop and output at ``at``; ``more`` holds the optional arguments given."""
    dt = "float16" if prefix == "hp" else "float32"
    args: dict[str, Any] = dict(filter=at[0], out_backprop=at[1], output=at[2], input_sizes=input_sizes,
                                filter_shape=filter_shape, strides=strides, padding=padding, **(more or {}))
    g = geometry(args, "input_sizes", filter_shape[0], filter_shape[1])
    args.update({"core": core} if core is not None else {"core_mask": core_mask} if core_mask is not None else {})

    def reference(a: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {"output": depthwise_input_gradient(a["filter"], a["out_backprop"], g)}

    data = (Data("filter", at[0], tuple(filter_shape), dt, (1, -1.0, 1.0), core=core),
            Data("out_backprop", at[1], out_shape(g, filter_shape[2] * filter_shape[3]), dt, (2, -1.0, 1.0),
                 core=core))
    outputs = (Output("output", at[2], tuple(input_sizes), dt, *tolerance(prefix, 1e-5, 1e-5), core),)
    text = "x".join(map(str, input_sizes)) + f" {g['format']}, {'x'.join(map(str, filter_shape))} {padding}"
    return Example(KERNEL, size, chip, prefix, variant, description, args, data, outputs, reference, comment,
                   config, text)


def examples() -> list[Example]:
    """Every example of DepthwiseConv2dBackpropInput."""
    ddr = DDR[:3]
    out = [_example("tiny", "FT78NE", "fp", "s", ddr, [1, 3, 4, 2], [2, 2, 2, 1], [1, 1, 1, 1], "VALID",
                    "DepthwiseConv2dBackpropInput, 2x2 VALID on a 1x3x4x2 input, on FT78NE"),
           _example("tiny", "MT7004", "fp", "s", ddr, [1, 2, 5, 5], [3, 3, 2, 2], [1, 1, 2, 2], "SAME",
                    "DepthwiseConv2dBackpropInput, 3x3 SAME stride 2, multiplier 2, NCHW, on MT7004",
                    more={"data_format": "NCHW"}),
           _example("tiny", "MT7004", "hp", "s", ddr, [1, 4, 4, 3], [3, 3, 3, 1], [1, 1, 1, 1], "SAME",
                    "DepthwiseConv2dBackpropInput fp16, 3x3 SAME on a 1x4x4x3 input, on MT7004")]
    out += [
        _example("small", "FT78NE", "fp", "s", (0xA0000000, 0xA1000000, 0xB0000000), [2, 28, 28, 32],
                 [3, 3, 32, 2], [1, 1, 1, 1], "SAME",
                 "DepthwiseConv2dBackpropInput fp32, shared variant, 3x3 SAME, multiplier 2, on FT78NE",
                 more={"data_format": "NHWC", "dilations": [1, 1, 1, 1]}, core_mask=0xFF,
                 comment="DepthwiseConv2dNativeBackpropInput on FT78NE's eight cores: the input gradient of a 3x3 "
                         "depthwise\nconvolution (depth multiplier 2, stride 1, SAME) of a 2x28x28x32 NHWC input, "
                         "buffers in DDR.",
                 config="ft78ne_depthwise_conv2d_backprop_input_s"),
        _example("small", "MT7004", "fp", "p", (0x10000000, 0x10100000, 0x10200000), [1, 24, 24, 8],
                 [5, 5, 8, 3], [1, 2, 2, 1], "VALID",
                 "DepthwiseConv2dBackpropInput fp32, private variant, 5x5 VALID stride 2, multiplier 3, on MT7004 "
                 "core 1", core=1,
                 comment="DepthwiseConv2dNativeBackpropInput in fp32 on one MT7004 core's private L2: 5x5 filter, "
                         "depth\nmultiplier 3, stride 2, VALID, on a 1x24x24x8 NHWC input.",
                 config="mt7004_depthwise_conv2d_backprop_input_p"),
        _example("small", "MT7004", "hp", "s", (0xA0000000, 0xA1000000, 0xB0000000), [2, 16, 20, 20],
                 [3, 3, 16, 1], [1, 1, 2, 2], "EXPLICIT",
                 "DepthwiseConv2dBackpropInput fp16, shared variant, NCHW, dilated + strided + explicit pads, on "
                 "MT7004",
                 more={"explicit_paddings": [0, 0, 0, 0, 2, 1, 1, 2], "data_format": "NCHW",
                       "dilations": [1, 1, 2, 2]}, core_mask=0xF,
                 comment="DepthwiseConv2dNativeBackpropInput in fp16 on MT7004's four cores: NCHW, 3x3 filter "
                         "dilated by 2,\nstride 2, explicit padding, on a 2x16x20x20 input; fp16 tensors, fp32 "
                         "accumulation, buffers in DDR.",
                 config="mt7004_hp_depthwise_conv2d_backprop_input_s"),
    ]
    for size, sizes in (("medium", [8, 56, 56, 64]), ("large", [8, 112, 112, 64])):
        for chip, prefix in (("FT78NE", "fp"), ("MT7004", "fp"), ("MT7004", "hp")):
            out.append(_example(size, chip, prefix, "s", (0x80000000, 0x90000000, 0xA0000000), sizes,
                                [3, 3, 64, 1], [1, 1, 1, 1], "SAME",
                                f"DepthwiseConv2dBackpropInput NHWC, 3x3 filter, multiplier 1, SAME, stride 1, on "
                                f"{chip}"))
    return out


def scaled_args(n: int, base: tuple[int, ...]) -> dict[str, Any]:
    """Arguments whose work grows linearly with ``n`` (2 n images of 28x28x64, a 3x3 filter, SAME)."""
    a, _, c, d = base
    return dict(filter=d, out_backprop=a, output=c, input_sizes=[2 * n, 28, 28, 64], filter_shape=[3, 3, 64, 1],
                strides=[1, 1, 1, 1], padding="SAME")
