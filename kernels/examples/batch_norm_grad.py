"""Example calls of BatchNormGrad ([batch, channel]; ``params`` inline or as an int64[12] array in memory)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from kernels.batch_norm_grad import batch_norm_grad_reference
from kernels.examples import DDR, PRIVATE, Data, Example, Output, tolerance

KERNEL = "batch_norm_grad"
VECTORS = ("mean", "invar", "scale", "dbias", "dscale")


def reference(train: bool):
    """The outputs from the inputs (the kernel's numerics on whole tensors)."""
    def fn(a: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        dx, dbias, dscale = batch_norm_grad_reference(a["x"], a["dy"], a["mean"], a["invar"], a["scale"], train)
        return {"dx": dx, "dbias": dbias, "dscale": dscale}
    return fn


def _example(size: str, chip: str, prefix: str, variant: str, batch: int, channel: int, train: bool,
             at: Mapping[str, int], description: str, *, params_at: int | None = None, core: int | None = None,
             core_mask: int | None = None, comment: str = "", config: str | None = None) -> Example:
    """An example whose buffers sit at the addresses ``at`` (x, dy, dx and the five vectors)."""
    dt = "float16" if prefix == "hp" else "float32"
    params = [at[n] for n in VECTORS] + [batch, channel, int(train)]
    args: dict[str, Any] = {"x": at["x"], "dy": at["dy"], "dx": at["dx"],
                            "params": params if params_at is None else params_at}
    args.update({"core": core} if core is not None else {"core_mask": core_mask} if core_mask is not None else {})
    rows = (batch, channel)
    data = [Data("x", at["x"], rows, dt, (1, -2.0, 2.0), core=core),
            Data("dy", at["dy"], rows, dt, (2, -1.0, 1.0), core=core),
            Data("mean", at["mean"], (channel,), "float32", (3, -0.5, 0.5), core=core),
            Data("invar", at["invar"], (channel,), "float32", (4, 0.5, 2.0), core=core),
            Data("scale", at["scale"], (channel,), "float32", (5, 0.5, 1.5), core=core)]
    if params_at is not None:
        data.append(Data("params", params_at, (12,), "int64", values=params + [0, 0, 0, 0], core=core))
    rtol, atol = tolerance(prefix, 1e-4, 1e-4)
    outputs = (Output("dx", at["dx"], rows, dt, rtol, atol, core),
               Output("dbias", at["dbias"], (channel,), "float32", 1e-3, 1e-2, core),
               Output("dscale", at["dscale"], (channel,), "float32", 1e-3, 1e-2, core))
    return Example(KERNEL, size, chip, prefix, variant, description, args, tuple(data), outputs, reference(train),
                   comment, config, f"{batch}x{channel} {'training' if train else 'inference'}")


def _spread(base: int, step: int) -> dict[str, int]:
    """x, dy, dx and the five vectors ``step`` apart from ``base``."""
    return {n: base + i * step for i, n in enumerate(("x", "dy", "dx") + VECTORS)}


#: The library's shared-memory example's addresses (its documentation's).
LIBRARY_S = dict(x=0xA0000000, dy=0xB0000000, dx=0xA1000000, mean=0xC0000000, invar=0xD0000000, scale=0xE0000000,
                 dbias=0xB1000000, dscale=0xC1000000)
#: The benchmark's addresses: tensors 256 MiB apart in DDR, the vectors 1 MiB apart after them.
BENCH = dict(x=0x80000000, dy=0x90000000, dx=0xA0000000, mean=0xB0000000, invar=0xB0100000, scale=0xB0200000,
             dbias=0xB0300000, dscale=0xB0400000)


def examples() -> list[Example]:
    """Every example of BatchNormGrad."""
    out = []
    for chip, prefix in (("FT78NE", "fp"), ("MT7004", "fp"), ("MT7004", "hp")):
        out.append(_example("tiny", chip, prefix, "s", 3, 5, True, _spread(DDR[0], 0x10000),
                            f"BatchNormGrad, 3 rows of 5 channels, on {chip}"))
    out += [
        _example("small", "FT78NE", "fp", "s", 4, 64, True, LIBRARY_S,
                 "BatchNormGrad, shared variant, the library's example on FT78NE", core_mask=0xFF,
                 comment="The library's shared-memory example of BatchNormGrad, as written in its documentation:\n"
                         "fp_batch_norm_grad_s(x, dy, dx, params, 0xff) with batch 4, channel 64, training.",
                 config="ft78ne_batch_norm_grad_s"),
        _example("small", "FT78NE", "fp", "p", 4, 32, True, _spread(PRIVATE[0], 0x100000),
                 "BatchNormGrad, private variant, the library's example on FT78NE core 0", core=0,
                 comment="The library's private-memory example of BatchNormGrad: every buffer in core 0's private "
                         "L2\n(x at 0x10000000 ... dscale at 0x10700000), batch 4, channel 32, training.",
                 config="ft78ne_batch_norm_grad_p"),
        _example("small", "MT7004", "fp", "s", 16, 128, False, _spread(DDR[0], 0x100000),
                 "BatchNormGrad fp32, shared variant, inference, on MT7004", core_mask=0xF),
        _example("small", "MT7004", "hp", "s", 64, 256, True, LIBRARY_S,
                 "BatchNormGrad fp16, shared variant, params array in memory, on MT7004", params_at=0xC2000000,
                 core_mask=0xF,
                 comment="BatchNormGrad in fp16 on MT7004's four cores: fp16 x, dy, dx; fp32 statistics; params "
                         "passed as\nthe address of an int64[12] array in DDR, as the C library does it.",
                 config="mt7004_hp_batch_norm_grad_s"),
    ]
    for size, (batch, channel) in (("medium", (16384, 64)), ("large", (25088, 256))):
        for chip, prefix in (("FT78NE", "fp"), ("MT7004", "fp"), ("MT7004", "hp")):
            out.append(_example(size, chip, prefix, "s", batch, channel, True, BENCH,
                                f"BatchNormGrad [batch, channel], training, params passed as ints, on {chip}"))
    return out


def scaled_args(n: int, base: tuple[int, ...]) -> dict[str, Any]:
    """Arguments whose work grows linearly with ``n`` (the batch: 64 n rows of 512 channels)."""
    a, b, c, d = base
    return dict(x=a, dy=b, dx=c, params=[d, d + 0x10000, d + 0x20000, d + 0x30000, d + 0x40000, 64 * n, 512, 1])
