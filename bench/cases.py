"""The benchmark cases: every kernel's medium and large examples (kernels/examples/), per chip and precision.

A case knows its call (symbol and arguments), the input arrays to place in simulated memory, the same math
once in plain numpy (the example's reference: whole tensors, one vectorised pass) and how to compare the
simulator's outputs with numpy's.  The shapes, addresses, inputs and tolerances are the examples' own: a
kernel's examples module is the one place they are written.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kernels.examples import CHIP_PRECISIONS, KERNELS, Example, example

#: The example sizes the benchmark runs.
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
    #: The inputs by the example's names (the same arrays as :attr:`inputs`): what ``bench/tf_ops.py`` feeds TF.
    arrays: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def case_id(self) -> str:
        """``kernel/chip/prefix/size``: the name ``bench/run.py --case`` takes."""
        return f"{self.kernel}/{self.chip}/{self.symbol[:2]}/{self.size}"


def case_of(e: Example) -> Case:
    """The benchmark case of example ``e`` (its inputs generated here, seeded)."""
    arrays = e.inputs()

    def numpy_fn() -> tuple[np.ndarray, ...]:
        got = e.reference(arrays)
        return tuple(np.asarray(got[o.name]) for o in e.outputs)

    return Case(e.kernel, e.chip, e.size, e.symbol, e.shape_text, {d.addr: arrays[d.name] for d in e.data},
                dict(e.args), numpy_fn,
                tuple(Output(o.name, o.addr, o.shape, np.dtype(o.dtype), o.rtol, o.atol) for o in e.outputs),
                dict(e.meta), arrays)


def _build(kernel: str, chip: str, prefix: str, size: str) -> Case:
    return case_of(example(kernel, size, chip, prefix))


#: Kernel name -> builder(chip, prefix, size).
BUILDERS: dict[str, Callable[[str, str, str], Case]] = {k: functools.partial(_build, k) for k in KERNELS}


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
