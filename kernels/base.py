"""The kernel protocol, what a kernel may know when it plans (:class:`PlanContext`), and the precision tables.

A kernel never touches time or SimPy.  It binds the user's arguments into a
:class:`~sim.model.call.BoundCall` and lowers that call into a
:class:`~sim.model.plan.Plan` (the public plan IR of :mod:`sim.model.plan`);
the engine executes plans, kernels describe them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Protocol

import numpy as np

from sim.errors import KernelArgError
from sim.model.call import ArgSpec, BoundCall, MemoryReader
from sim.model.plan import Plan
from sim.model.target import Target

#: Precision name -> numpy dtype of the big tensors of a kernel.
PRECISION_DTYPES: dict[str, np.dtype] = {"fp32": np.dtype(np.float32), "fp16": np.dtype(np.float16)}
#: Symbol prefix -> precision name.
PREFIX_PRECISION: dict[str, str] = {"fp": "fp32", "hp": "fp16"}


@dataclass(frozen=True)
class PlanContext:
    """What a kernel may know of the chip when it plans: target, cores, staging areas.

    ``scratch_base``/``scratch_size_bytes`` is the per-core scratchpad region
    where tiles are staged (the same local addresses on every core);
    ``workspace_base``/``workspace_size_bytes`` is a shared region the cores may
    use to exchange partial results behind a barrier.  ``tiling``, when given,
    names the partition and tile sizes the kernel must use (its keys are the
    kernel's own, see ``Kernel.tilings``); None lets the kernel choose.
    """

    target: Target
    cores: tuple[int, ...]
    precision: str
    variant: str
    scratch_base: int
    scratch_size_bytes: int
    workspace_base: int
    workspace_size_bytes: int
    alignment_bytes: int
    tiling: Mapping[str, Any] | None = None

    @property
    def peak_flops_per_cycle(self) -> int:
        """Vector element operations per cycle of one core at this precision."""
        return self.target.core.precisions[self.precision].peak_flops_per_cycle


class Kernel(Protocol):
    """What every kernel module provides to the registry.

    A kernel may also say what its ``hp_`` symbols store and compute in which
    precision (see :func:`precision_note`): ``tensors_in_precision`` names the
    buffers stored in the symbol's precision, ``fp32_tensors`` those always in
    fp32, and ``fp16_arithmetic`` says how an ``hp_`` call computes and what
    its conversions cost.
    """

    name: str
    args: tuple[ArgSpec, ...]

    def bind(self, symbol: str, precision: str, variant: str, cores: tuple[int, ...],
             args: Mapping[str, Any], read: MemoryReader) -> BoundCall:
        """Check ``args`` and describe the call's buffers; raise KernelArgError on bad input."""
        ...

    def plan(self, call: BoundCall, ctx: PlanContext) -> Plan:
        """Lower the bound call into per-core tiles that fit the scratchpad (honouring ``ctx.tiling``)."""
        ...

    def tilings(self, call: BoundCall, ctx: PlanContext) -> list[dict[str, Any]]:
        """Candidate tilings (each a valid ``ctx.tiling``) the simulator compares with the cost model."""
        ...


def precision_note(kernel: Any, precision: str) -> str:
    """One plain line: which buffers of ``kernel`` a ``precision`` symbol stores in fp16 and which in fp32, and in
    which precision it computes (for ``dspsim kernels``, run summaries and docs)."""
    if precision == "fp32":
        return "fp32 storage and fp32 arithmetic throughout"
    pointers = [a.name for a in kernel.args if a.kind in ("in_ptr", "out_ptr")]
    narrow = list(getattr(kernel, "tensors_in_precision", pointers))
    wide = list(getattr(kernel, "fp32_tensors", [n for n in pointers if n not in narrow]))
    how = getattr(kernel, "fp16_arithmetic", None)
    parts = [f"stored in {precision}: {', '.join(narrow)}"]
    if wide:
        parts.append(f"stored in fp32: {', '.join(wide)}")
    if how:
        parts.append(how)
    return "; ".join(parts)


#: Names a kernel argument may not have: ``Simulator.call()``'s own parameters (``self``, the positional
#: ``symbol``, and the keywords ``numerics``, ``progress``, ``tiling``), with where each belongs instead.
RESERVED_ARGUMENT_NAMES: dict[str, str] = {
    "symbol": "the symbol is the call's first, positional argument (a run-config's top-level 'symbol:')",
    "self": "no kernel takes it",
    "numerics": "it is call(numerics=...) (a run-config's top-level 'numerics:')",
    "progress": "it is call(progress=...)",
    "tiling": "it is call(tiling=...) (a run-config's top-level 'tiling:')",
}


def check_argument_names(args: Mapping[str, Any], where: str = "argument") -> None:
    """Refuse a kernel argument named like one of ``Simulator.call()``'s own parameters, naming the key
    (``where`` prefixes it: ``argument`` for the API, ``<file>: args`` for a run-config)."""
    for key in args:
        if key in RESERVED_ARGUMENT_NAMES:
            sep = "." if where.endswith("args") else " "
            raise KernelArgError(f"{where}{sep}'{key}': '{key}' is a parameter of Simulator.call() itself, not a "
                                 f"kernel argument: {RESERVED_ARGUMENT_NAMES[key]} (reserved names: "
                                 f"{', '.join(RESERVED_ARGUMENT_NAMES)})")


