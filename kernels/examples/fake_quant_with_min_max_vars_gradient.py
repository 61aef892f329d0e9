"""Example calls of FakeQuantWithMinMaxVarsGradient (min and max are fp32 scalars in memory)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from kernels.examples import DDR, Data, Example, Output, tolerance
from kernels.fake_quant_with_min_max_vars_gradient import fake_quant_gradient_reference

KERNEL = "fake_quant_with_min_max_vars_gradient"
BUFFERS = ("gradients", "inputs", "min", "max", "backprops_wrt_input", "backprop_wrt_min", "backprop_wrt_max")


def reference(num_bits: int, narrow_range: bool):
    """The outputs from the inputs (the kernel's numerics on whole arrays)."""
    def fn(a: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        bp, wmin, wmax = fake_quant_gradient_reference(a["gradients"], a["inputs"], float(a["min"]),
                                                       float(a["max"]), num_bits, narrow_range)
        return {"backprops_wrt_input": bp, "backprop_wrt_min": np.float32(wmin), "backprop_wrt_max": np.float32(wmax)}
    return fn


def _example(size: str, chip: str, prefix: str, variant: str, shape: tuple[int, ...], bounds: tuple[float, float],
             spread: tuple[float, float], at: Mapping[str, int], description: str, *, num_bits: int | None = None,
             narrow_range: bool | None = None, core: int | None = None, core_mask: int | None = None,
             comment: str = "", config: str | None = None) -> Example:
    """An example quantising ``bounds`` (min, max), its inputs uniform over ``spread``; ``num_bits`` and
    ``narrow_range`` left to their defaults when None."""
    dt = "float16" if prefix == "hp" else "float32"
    args: dict[str, Any] = {n: at[n] for n in BUFFERS}
    args["shape"] = list(shape)
    args.update({k: v for k, v in (("num_bits", num_bits), ("narrow_range", narrow_range)) if v is not None})
    args.update({"core": core} if core is not None else {"core_mask": core_mask} if core_mask is not None else {})
    data = (Data("gradients", at["gradients"], shape, dt, (1, -1.0, 1.0), core=core),
            Data("inputs", at["inputs"], shape, dt, (2, *spread), core=core),
            Data("min", at["min"], (), "float32", values=bounds[0], core=core),
            Data("max", at["max"], (), "float32", values=bounds[1], core=core))
    outputs = (Output("backprops_wrt_input", at["backprops_wrt_input"], shape, dt, 0.0, 0.0, core),
               Output("backprop_wrt_min", at["backprop_wrt_min"], (), "float32", *tolerance(prefix, 1e-3, 1e-1),
                      core),
               Output("backprop_wrt_max", at["backprop_wrt_max"], (), "float32", *tolerance(prefix, 1e-3, 1e-1),
                      core))
    bits = 8 if num_bits is None else num_bits
    text = "x".join(map(str, shape)) + f", {bits} bits" + (", narrow range" if narrow_range else "")
    return Example(KERNEL, size, chip, prefix, variant, description, args, data, outputs,
                   reference(bits, bool(narrow_range)), comment, config, text)


def _at(big: tuple[int, int, int], scalars: int, step: int) -> dict[str, int]:
    """gradients, inputs, backprops_wrt_input at ``big``; min, max and their gradients ``step`` apart."""
    s = {n: scalars + i * step for i, n in enumerate(("min", "max", "backprop_wrt_min", "backprop_wrt_max"))}
    return dict(s, gradients=big[0], inputs=big[1], backprops_wrt_input=big[2])


#: The shipped shared-memory configs' addresses: the gradients of min and max 16 MiB after min and max.
SHARED = dict(_at((0xA0000000, 0xA1000000, 0xB0000000), 0xC0000000, 0x40),
              backprop_wrt_min=0xC1000000, backprop_wrt_max=0xC1000040)


def examples() -> list[Example]:
    """Every example of FakeQuantWithMinMaxVarsGradient."""
    tiny = _at(DDR[:3], DDR[3], 0x40)
    out = [_example("tiny", chip, prefix, "s", (7,), (-1.0, 1.0), (-2.0, 2.0), tiny,
                    f"FakeQuantWithMinMaxVarsGradient, 7 elements, on {chip}")
           for chip, prefix in (("FT78NE", "fp"), ("MT7004", "fp"), ("MT7004", "hp"))]
    out += [
        _example("small", "FT78NE", "fp", "s", (64, 128, 128), (-6.0, 6.0), (-8.0, 8.0), SHARED,
                 "FakeQuantWithMinMaxVarsGradient fp32, shared variant, 8 bits, on FT78NE", num_bits=8,
                 narrow_range=False, core_mask=0xFF,
                 comment="FakeQuantWithMinMaxVarsGradient on FT78NE's eight cores: one million fp32 activations in "
                         "DDR,\n8-bit quantisation of [-6, 6]; min and max are scalars in memory, read by the kernel."
                         "  Each core\npublishes its partial min/max gradients to the GSM workspace; core 0 reduces "
                         "them after a barrier.",
                 config="ft78ne_fake_quant_with_min_max_vars_gradient_s"),
        _example("small", "MT7004", "fp", "p", (32, 1024), (-2.5, 2.5), (-3.0, 3.0),
                 _at((0x10000000, 0x10100000, 0x10300000), 0x10200000, 0x40),
                 "FakeQuantWithMinMaxVarsGradient fp32, private variant, 8 bits, on MT7004 core 2", num_bits=8,
                 narrow_range=False, core=2,
                 comment="FakeQuantWithMinMaxVarsGradient in fp32 on MT7004 core 2, every buffer in its private L2; "
                         "one\ncore, so the min/max gradients need no workspace exchange.",
                 config="mt7004_fake_quant_with_min_max_vars_gradient_p"),
        _example("small", "MT7004", "hp", "s", (16, 56, 56), (-1.0, 3.0), (-2.0, 4.0), SHARED,
                 "FakeQuantWithMinMaxVarsGradient fp16, shared variant, 4 bits narrow range, on MT7004", num_bits=4,
                 narrow_range=True, core_mask=0xF,
                 comment="FakeQuantWithMinMaxVarsGradient in fp16 on MT7004's four cores: fp16 gradients and "
                         "inputs, fp32\nmin/max scalars; 4-bit narrow-range quantisation of [-1, 3].  Masks compare "
                         "in fp32.",
                 config="mt7004_hp_fake_quant_with_min_max_vars_gradient_s"),
    ]
    bench = _at((0x80000000, 0x90000000, 0xB0000000), 0xA0000000, 0x40)
    for size, shape in (("medium", (4, 56, 56, 64)), ("large", (16, 56, 56, 64))):
        for chip, prefix in (("FT78NE", "fp"), ("MT7004", "fp"), ("MT7004", "hp")):
            out.append(_example(size, chip, prefix, "s", shape, (-6.0, 6.0), (-8.0, 8.0), bench,
                                f"FakeQuantWithMinMaxVarsGradient, 8 bits, [-6, 6], inputs over [-8, 8], on {chip}"))
    return out


def scaled_args(n: int, base: tuple[int, ...]) -> dict[str, Any]:
    """Arguments whose work grows linearly with ``n`` (64 n rows of 1024 elements)."""
    a, b, c, d = base
    return dict(gradients=a, inputs=b, min=d, max=d + 0x100, backprops_wrt_input=c, backprop_wrt_min=d + 0x200,
                backprop_wrt_max=d + 0x300, shape=[64 * n, 1024])
