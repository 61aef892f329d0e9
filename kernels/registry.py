"""The kernel registry: symbol -> (kernel, precision, variant).

Each kernel module defines ``KERNEL``; :data:`KERNEL_MODULES` lists them.  Symbols
are ``<fp|hp>_<kernel>_<s|p>``: ``fp`` takes fp32 tensors, ``hp`` fp16 ones (only
on chips listing fp16; what each stores and computes in which precision is
:attr:`Symbol.precision_note`); ``_s`` takes buffers in shared memory and a
``core_mask``, ``_p`` in one core's private memory and a ``core``.  Dispatch goes
through :func:`lookup`, never through chains of names.
"""

from __future__ import annotations

import difflib
import importlib
from dataclasses import dataclass

from kernels.base import (
    PREFIX_PRECISION,
    RESERVED_ARGUMENT_NAMES,
    Kernel,
    precision_note,
)
from sim.errors import KernelArgError, brief

#: Modules under ``kernels/`` that each define a ``KERNEL``.
KERNEL_MODULES: tuple[str, ...] = (
    "depthwise_conv2d_backprop_input",
    "batch_norm_grad",
    "fused_batch_norm_grad",
    "fake_quant_with_min_max_vars_gradient",
    "conv2d_backprop_filter",
)

VARIANTS = ("s", "p")


@dataclass(frozen=True)
class Symbol:
    """One callable symbol of the kernel library."""

    name: str
    kernel: Kernel
    precision: str
    variant: str

    @property
    def precision_note(self) -> str:
        """What the symbol stores in fp16 and in fp32 and in which precision it computes, in one plain line."""
        return precision_note(self.kernel, self.precision)


def _build() -> dict[str, Symbol]:
    table: dict[str, Symbol] = {}
    for mod_name in KERNEL_MODULES:
        kernel = importlib.import_module(f"kernels.{mod_name}").KERNEL
        clash = [a.name for a in kernel.args if a.name in RESERVED_ARGUMENT_NAMES]
        if clash:  # a kernel author's mistake: such an argument could never be passed to call()
            raise TypeError(f"kernel {kernel.name}: argument name '{clash[0]}' is reserved by Simulator.call()")
        for prefix, precision in PREFIX_PRECISION.items():
            for variant in VARIANTS:
                name = f"{prefix}_{kernel.name}_{variant}"
                table[name] = Symbol(name, kernel, precision, variant)
    return table


REGISTRY: dict[str, Symbol] = _build()


def lookup(symbol: object) -> Symbol:
    """The registered symbol ``symbol``; KernelArgError (with close names) when there is none."""
    if not isinstance(symbol, str):
        raise KernelArgError(f"symbol: expected a kernel symbol name (str), got {brief(symbol)}")
    try:
        return REGISTRY[symbol]
    except KeyError:
        # difflib is quadratic in the name's length: a name far longer than any symbol gets no suggestions.
        close = difflib.get_close_matches(symbol, REGISTRY, n=3) if len(symbol) < 100 else []
        hint = f"; did you mean {', '.join(close)}?" if close else f"; known: {', '.join(sorted(REGISTRY))}"
        raise KernelArgError(f"symbol: unknown kernel symbol {brief(symbol)}{hint}") from None


def symbols() -> list[Symbol]:
    """Every registered symbol, sorted by name."""
    return [REGISTRY[k] for k in sorted(REGISTRY)]
