"""Example calls of every shipped kernel, one module per kernel: arguments, seeded inputs, reference outputs.

Each kernel's module (``kernels/examples/<kernel>.py``) lists its examples -- sizes ``tiny``, ``small``,
``medium`` and ``large`` on each chip and precision (:data:`CHIP_PRECISIONS`) -- and the arguments of a
call whose work grows linearly with a number (:func:`scaled_args`, for the timing-property tests).  The
tests, the benchmark (``bench/cases.py``, the medium and large sizes) and the shipped run-configs
(``configs/*.yaml``: the examples with a ``config`` name, written by ``configs/generate.py`` and checked
against them by the tests) all take them from here, so an example is written once.

An input is seeded uniform noise or literal values, generated exactly as a run-config's ``data`` entry is
(``numpy.random.default_rng(seed).uniform(low, high, shape)``), so a config and its example place the same
bytes; the reference computes the outputs from the inputs with whole-tensor numpy.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

#: Example sizes, smallest first: tiny (a handful of elements), small (the shipped run-configs' sizes),
#: medium and large (the benchmark's).
SIZES = ("tiny", "small", "medium", "large")
#: (chip, symbol prefix) pairs every kernel has examples for: fp32 on both chips, fp16 on the chip that has it.
CHIP_PRECISIONS = (("FT78NE", "fp"), ("MT7004", "fp"), ("MT7004", "hp"))
#: Kernels with examples (a module of this package each).
KERNELS = ("batch_norm_grad", "fused_batch_norm_grad", "fake_quant_with_min_max_vars_gradient",
           "conv2d_backprop_filter", "depthwise_conv2d_backprop_input", "gemm")

#: Addresses examples use: four 256 MiB apart in DDR (room for the large shapes), four in a core's private L2.
DDR = (0x80000000, 0x90000000, 0xA0000000, 0xB0000000)
PRIVATE = (0x10000000, 0x10400000, 0x10800000, 0x10C00000)


@dataclass(frozen=True)
class Data:
    """One input placed in memory before the call: seeded uniform noise (``random`` = seed, low, high) or literal
    ``values``; ``core`` for a private address."""

    name: str
    addr: int
    shape: tuple[int, ...]
    dtype: str
    random: tuple[int, float, float] | None = None
    values: Any = None
    core: int | None = None

    def array(self) -> np.ndarray:
        """The bytes a run-config with this ``data`` entry would place (a fresh array)."""
        if self.random is not None:
            seed, low, high = self.random
            return np.random.default_rng(seed).uniform(low, high, size=self.shape).astype(self.dtype)
        return np.asarray(self.values, dtype=self.dtype).reshape(self.shape)


@dataclass(frozen=True)
class Output:
    """One output read back after the call and compared with the reference within ``rtol`` / ``atol``."""

    name: str
    addr: int
    shape: tuple[int, ...]
    dtype: str
    rtol: float = 0.0
    atol: float = 0.0
    core: int | None = None


@dataclass(frozen=True)
class Example:
    """One example call of a kernel: its symbol and arguments, inputs, outputs and reference."""

    kernel: str
    size: str
    chip: str
    prefix: str
    variant: str
    description: str
    args: Mapping[str, Any]
    data: tuple[Data, ...]
    outputs: tuple[Output, ...]
    #: Whole-tensor numpy: the inputs by name -> the outputs by name (each output of :attr:`outputs`).
    reference: Callable[[Mapping[str, np.ndarray]], Mapping[str, np.ndarray]]
    #: What the call shows, a line or three (the run-config's header comment).
    comment: str = ""
    #: The stem of the shipped run-config (``configs/<config>.yaml``), None when the example is not shipped.
    config: str | None = None
    #: A short text of the shape for tables (the benchmark's).
    shape_text: str = ""
    #: Free-form facts for tools (the benchmark's metadata).
    meta: Mapping[str, Any] = field(default_factory=dict)

    @property
    def symbol(self) -> str:
        """The kernel symbol the example calls."""
        return f"{self.prefix}_{self.kernel}_{self.variant}"

    @property
    def example_id(self) -> str:
        """``kernel/chip/prefix/size/variant``: unique among the examples."""
        return f"{self.kernel}/{self.chip}/{self.prefix}/{self.size}/{self.variant}"

    @property
    def dtype(self) -> np.dtype:
        """The dtype of the call's big tensors."""
        return np.dtype(np.float16 if self.prefix == "hp" else np.float32)

    def inputs(self) -> dict[str, np.ndarray]:
        """The inputs by name (fresh arrays, the same bytes every time)."""
        return {d.name: d.array() for d in self.data}

    def expected(self, inputs: Mapping[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
        """The reference outputs by name, from ``inputs`` (default: :meth:`inputs`)."""
        got = self.reference(self.inputs() if inputs is None else inputs)
        return {o.name: np.asarray(got[o.name]) for o in self.outputs}

    def place(self, write: Callable[..., Any], inputs: Mapping[str, np.ndarray] | None = None) -> None:
        """Write the inputs with ``write(addr, array, core=...)`` (a Simulator's ``write``)."""
        arrays = self.inputs() if inputs is None else inputs
        for d in self.data:
            write(d.addr, arrays[d.name], core=d.core)

    def place_values(self, write: Callable[..., Any]) -> None:
        """Write only the literal inputs (a params array, min/max scalars): all a timing-only run reads, as a
        run-config with ``numerics: false`` places."""
        for d in self.data:
            if d.random is None:
                write(d.addr, d.array(), core=d.core)


def tolerance(prefix: str, rtol: float, atol: float) -> tuple[float, float]:
    """An output's tolerance: fp16 outputs are compared after rounding (both sides round the same fp32 value, up
    to one ulp apart)."""
    return (max(rtol, 2e-3), max(atol, 2e-3)) if prefix == "hp" else (rtol, atol)


def _module(kernel: str) -> Any:
    if kernel not in KERNELS:
        raise KeyError(f"no examples of kernel {kernel!r} (kernels with examples: {', '.join(KERNELS)})")
    return importlib.import_module(f"kernels.examples.{kernel}")


def examples(kernel: str | None = None, size: str | None = None, chip: str | None = None,
             prefix: str | None = None, variant: str | None = None) -> list[Example]:
    """Every example, in kernel and then listing order, filtered by the given fields."""
    out: list[Example] = []
    for k in ([kernel] if kernel else KERNELS):
        out += [e for e in _module(k).examples()
                if (size is None or e.size == size) and (chip is None or e.chip == chip)
                and (prefix is None or e.prefix == prefix) and (variant is None or e.variant == variant)]
    return out


def example(kernel: str, size: str, chip: str, prefix: str = "fp", variant: str | None = None) -> Example:
    """The example of ``kernel`` of that size on that chip and precision (the shared variant's when there are
    both and ``variant`` is None)."""
    found = examples(kernel, size, chip, prefix, variant)
    if not found:
        raise KeyError(f"no {size} example of {kernel} for {prefix} on {chip}")
    return next((e for e in found if e.variant == "s"), found[0])


def scaled_args(kernel: str, n: int, variant: str = "s", base: tuple[int, ...] | None = None) -> dict[str, Any]:
    """Arguments of a call of ``kernel`` whose work grows linearly with ``n`` (buffers at ``base``: default four
    DDR addresses, or four private ones for the ``p`` variant)."""
    return dict(_module(kernel).scaled_args(n, base or (DDR if variant == "s" else PRIVATE)))


def configs() -> list[Example]:
    """The examples shipped as run-configs, by config name."""
    return sorted((e for e in examples() if e.config), key=lambda e: str(e.config))
