"""Example calls of FusedBatchNormGrad (4-D tensors in NHWC or NCHW, training or inference)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from kernels.examples import DDR, Data, Example, Output, tolerance
from kernels.fused_batch_norm_grad import fused_batch_norm_grad_reference

KERNEL = "fused_batch_norm_grad"
BUFFERS = ("y_backprop", "x", "scale", "reserve_space_1", "reserve_space_2", "x_backprop", "scale_backprop",
           "offset_backprop")


def reference(epsilon: float, data_format: str, train: bool):
    """The outputs from the inputs (the kernel's numerics on whole tensors)."""
    def fn(a: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        dx, sb, ob = fused_batch_norm_grad_reference(a["y_backprop"], a["x"], a["scale"], a["reserve_space_1"],
                                                     a["reserve_space_2"], epsilon, data_format, train)
        return {"x_backprop": dx, "scale_backprop": sb, "offset_backprop": ob}
    return fn


def _example(size: str, chip: str, prefix: str, variant: str, shape: tuple[int, int, int, int], data_format: str,
             train: bool, epsilon: float, at: Mapping[str, int], description: str, *, core: int | None = None,
             core_mask: int | None = None, comment: str = "", config: str | None = None) -> Example:
    dt = "float16" if prefix == "hp" else "float32"
    c = shape[3] if data_format == "NHWC" else shape[1]
    args: dict[str, Any] = {n: at[n] for n in BUFFERS}
    args.update(shape=list(shape), epsilon=epsilon, data_format=data_format, is_training=train)
    args.update({"core": core} if core is not None else {"core_mask": core_mask} if core_mask is not None else {})
    data = (Data("y_backprop", at["y_backprop"], shape, dt, (1, -1.0, 1.0), core=core),
            Data("x", at["x"], shape, dt, (2, -2.0, 2.0), core=core),
            Data("scale", at["scale"], (c,), "float32", (3, 0.5, 1.5), core=core),
            Data("reserve_space_1", at["reserve_space_1"], (c,), "float32", (4, -0.5, 0.5), core=core),
            Data("reserve_space_2", at["reserve_space_2"], (c,), "float32", (5, 0.5, 2.0), core=core))
    rtol, atol = tolerance(prefix, 1e-4, 1e-4)
    outputs = (Output("x_backprop", at["x_backprop"], shape, dt, rtol, atol, core),
               Output("scale_backprop", at["scale_backprop"], (c,), "float32", 1e-3, 1e-2, core),
               Output("offset_backprop", at["offset_backprop"], (c,), "float32", 1e-3, 1e-2, core))
    text = "x".join(map(str, shape)) + f" {data_format} {'training' if train else 'inference'}"
    return Example(KERNEL, size, chip, prefix, variant, description, args, data, outputs,
                   reference(epsilon, data_format, train), comment, config, text)


def _at(big: tuple[int, int, int], vectors: int, step: int) -> dict[str, int]:
    """y_backprop, x and x_backprop at ``big``; the five vectors ``step`` apart from ``vectors``."""
    v = {n: vectors + i * step for i, n in enumerate(("scale", "reserve_space_1", "reserve_space_2",
                                                      "scale_backprop", "offset_backprop"))}
    return dict(v, y_backprop=big[0], x=big[1], x_backprop=big[2])


#: The shipped shared-memory configs' addresses: tensors in DDR, the outputs' vectors 16 MiB after the inputs'.
SHARED = dict(_at((0xA0000000, 0xA1000000, 0xB0000000), 0xC0000000, 0x100000),
              scale_backprop=0xC1000000, offset_backprop=0xC1100000)


def examples() -> list[Example]:
    """Every example of FusedBatchNormGrad."""
    tiny = _at(DDR[:3], DDR[3], 0x10000)
    out = [_example("tiny", "FT78NE", "fp", "s", (1, 2, 3, 5), "NHWC", True, 1e-3, tiny,
                    "FusedBatchNormGrad, 1x2x3x5 NHWC training, on FT78NE"),
           _example("tiny", "MT7004", "fp", "s", (2, 3, 2, 2), "NCHW", False, 1e-3, tiny,
                    "FusedBatchNormGrad, 2x3x2x2 NCHW inference, on MT7004"),
           _example("tiny", "MT7004", "hp", "s", (1, 3, 2, 7), "NHWC", True, 1e-3, tiny,
                    "FusedBatchNormGrad fp16, 1x3x2x7 NHWC training, on MT7004")]
    out += [
        _example("small", "FT78NE", "fp", "s", (8, 28, 28, 64), "NHWC", True, 0.001, SHARED,
                 "FusedBatchNormGrad fp32, shared variant, NHWC training, rows split over 8 cores, on FT78NE",
                 core_mask=0xFF,
                 comment="FusedBatchNormGrad (training) on FT78NE's eight cores: an 8x28x28x64 NHWC activation in "
                         "DDR.\n64 channels are two vectors, too few for eight cores, so the rows are split: partial "
                         "sums go to\nthe GSM workspace, a barrier, then every core reduces them and writes its rows "
                         "of x_backprop.",
                 config="ft78ne_fused_batch_norm_grad_s"),
        _example("small", "MT7004", "fp", "p", (2, 14, 14, 96), "NHWC", False, 0.001,
                 _at((0x10000000, 0x10100000, 0x10300000), 0x10200000, 0x1000),
                 "FusedBatchNormGrad fp32, private variant, NHWC inference, on MT7004 core 1", core=1,
                 comment="FusedBatchNormGrad (inference: population statistics) in fp32 on MT7004 core 1, every "
                         "buffer in\nthat core's private L2.",
                 config="mt7004_fused_batch_norm_grad_p"),
        _example("small", "MT7004", "hp", "s", (4, 128, 14, 14), "NCHW", True, 0.0001, SHARED,
                 "FusedBatchNormGrad fp16, shared variant, NCHW training, channels split over 4 cores, on MT7004",
                 core_mask=0xF,
                 comment="FusedBatchNormGrad in fp16 on MT7004's four cores: fp16 y_backprop, x, x_backprop in "
                         "NCHW;\nfp32 scale and statistics.  128 channels share out over the cores, each tile a "
                         "block of\nchannels over the whole batch (spatial positions on the vector lanes).",
                 config="mt7004_hp_fused_batch_norm_grad_s"),
    ]
    bench = _at((0x80000000, 0x90000000, 0xB0000000), 0xA0000000, 0x100000)
    for size, shape in (("medium", (8, 28, 28, 64)), ("large", (8, 56, 56, 64))):
        for chip, prefix in (("FT78NE", "fp"), ("MT7004", "fp"), ("MT7004", "hp")):
            out.append(_example(size, chip, prefix, "s", shape, "NHWC", True, 1e-3, bench,
                                f"FusedBatchNormGrad NHWC training on {chip} (rows split over the cores, partial "
                                f"sums through the shared level)"))
    return out


def scaled_args(n: int, base: tuple[int, ...]) -> dict[str, Any]:
    """Arguments whose work grows linearly with ``n`` (the batch: 2 n images of 28x28x64, NHWC training)."""
    a, b, c, d = base
    return dict(y_backprop=a, x=b, scale=d, reserve_space_1=d + 0x10000, reserve_space_2=d + 0x20000, x_backprop=c,
                scale_backprop=d + 0x30000, offset_backprop=d + 0x40000, shape=[2 * n, 28, 28, 64])
