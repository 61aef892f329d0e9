"""The kernel protocol, what a kernel may know when it plans (:class:`PlanContext`), and the precision tables.

A kernel never touches time or SimPy.  It binds the user's arguments into a
:class:`~sim.model.call.BoundCall` and lowers that call into a
:class:`~sim.model.plan.Plan` (the public plan IR of :mod:`sim.model.plan`);
the engine executes plans, kernels describe them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import numpy as np

from sim.errors import KernelArgError
from sim.model.call import ArgSpec, BoundCall, MemoryReader
from sim.model.plan import DoesNotFit, Loop, Plan
from sim.model.target import StagingArea, Target
from sim.model.tiling import TilingSpace
from sim.timing import cheapest_loops, flops_at_peak_cycles, loops_cycles

#: An option's label in :meth:`PlanContext.cheapest_loops`.
T = TypeVar("T")
#: Precision name -> numpy dtype of the big tensors of a kernel.
PRECISION_DTYPES: dict[str, np.dtype] = {"fp32": np.dtype(np.float32), "fp16": np.dtype(np.float16)}
#: Symbol prefix -> precision name.
PREFIX_PRECISION: dict[str, str] = {"fp": "fp32", "hp": "fp16"}


@dataclass(frozen=True)
class PlanContext:
    """What a kernel may know of the chip when it plans: target, cores, precision, staging levels, tiling.

    ``levels`` are the staging areas a plan may use, outermost first (see
    :class:`~sim.model.target.StagingArea`): :attr:`shared_level` is a window of
    shared memory where cores exchange partial results behind a barrier;
    :attr:`vector_level` the per-core memory where compute operands live (the
    same local addresses on every core); :attr:`scalar_level` a per-core level
    beside it, if the chip has one.  ``tiling`` is the tiling the kernel must
    plan (its keys are the kernel's own, see ``Kernel.tiling_space``): the
    simulator's search completes every key of scope ``plan``; a key of scope
    ``compute`` it leaves out unless the caller fixed it, and the kernel asks
    :meth:`cheapest_loops` for the cost model's pick per tile.  A kernel never
    compares tilings itself.  When the simulator asks for the tiling space,
    ``tiling`` is the caller's tiling as given (some keys, or None): a space may
    offer a key only where it is asked for (GEMM's ``formulation``, docs/gemm.md),
    and a full tiling it plans then has that key too.
    """

    target: Target
    cores: tuple[int, ...]
    precision: str
    variant: str
    levels: tuple[StagingArea, ...]
    tiling: Mapping[str, Any] | None = None

    def level(self, name: str) -> StagingArea:
        """The staging level called ``name``; KeyError naming the levels there are when none is."""
        for area in self.levels:
            if area.name == name:
                return area
        raise KeyError(f"no staging level {name!r} (levels: {', '.join(a.name for a in self.levels)})")

    @property
    def shared_level(self) -> StagingArea | None:
        """The outermost staging level in shared memory (where cores exchange partial results), or None."""
        return next((a for a in self.levels if a.shared), None)

    @property
    def vector_level(self) -> StagingArea:
        """The innermost per-core level that is not beside another: where compute operands live."""
        return [a for a in self.levels if not a.shared and a.beside is None][-1]

    @property
    def scalar_level(self) -> StagingArea | None:
        """A per-core level beside the vector level (scalar operands), or None."""
        vector = self.vector_level.name
        return next((a for a in self.levels if a.beside == vector), None)

    def cheapest_loops(self, options: Sequence[tuple[T, Sequence[Loop]]]) -> T:
        """The cost model's pick among ways to run one compute, given as ``(label, loops)``: the label of the
        cheapest (:func:`sim.timing.cheapest_loops`)."""
        return cheapest_loops(options, self.target)

    def compute_cycles(self, loops: Sequence[Loop]) -> int:
        """Cycles the engine charges a tile's compute that issues ``loops`` (:func:`sim.timing.loops_cycles`): what
        a kernel's tiling-space ``bound`` sums without building the tiles."""
        return loops_cycles(loops, self.target)

    def flops_at_peak_cycles(self, flops: float, cores: int) -> float:
        """The fewest cycles ``flops`` element operations at this precision take on ``cores`` cores at their FMAC
        peak (:func:`sim.timing.flops_at_peak_cycles`): a lower bound a tiling space's ``bound`` may build on."""
        return flops_at_peak_cycles(flops, self.precision, self.target, cores)

    @property
    def peak_flops_per_cycle(self) -> int:
        """Vector element operations per cycle of one core at this precision."""
        return self.target.core.precisions[self.precision].peak_flops_per_cycle

    # The single-level view the kernels were written against (they move to the levels above).

    @property
    def scratch_base(self) -> int:
        """Base of the vector level (per-core staging scratchpad)."""
        return self.vector_level.base

    @property
    def scratch_size_bytes(self) -> int:
        """Size of the vector level."""
        return self.vector_level.size_bytes

    @property
    def alignment_bytes(self) -> int:
        """Alignment of allocations in the vector level."""
        return self.vector_level.alignment_bytes

    @property
    def workspace_base(self) -> int:
        """Base of the shared level (the cross-core partial-results window)."""
        return self._shared().base

    @property
    def workspace_size_bytes(self) -> int:
        """Size of the shared level."""
        return self._shared().size_bytes

    def _shared(self) -> StagingArea:
        area = self.shared_level
        if area is None:  # a chip may list no shared level: then no plan exchanges anything across cores
            raise DoesNotFit(None, 1, 0, f"{self.target.name} has no shared staging level to exchange partial "
                                         f"results between cores through")
        return area


class Kernel(Protocol):
    """What every kernel provides to the registry (shipped kernels, and users' through
    :func:`kernels.registry.register_kernel`; docs/writing-a-kernel.md walks through one).

    ``name`` (an identifier: the symbols are ``<fp|hp>_<name>_<s|p>``), ``args``
    (its ArgSpecs), ``bind`` and ``plan`` are required.  A kernel with more than
    one way to tile a call declares its tiling space, ``tiling_space(call, ctx)``
    (:class:`sim.model.tiling.TilingSpace`: the keys, the values worth trying,
    what must hold for a tiling to fit, how many tiles it plans), and the
    simulator's search (:mod:`sim.tuning`) chooses; the older form, a
    ``tilings(call, ctx)`` list of candidate tilings, is still taken.  Without
    either a call takes no ``tiling``.  Optional attributes: ``precisions``
    (the precisions it has symbols for, default ``("fp32", "fp16")``) and
    ``variants`` (default ``("s", "p")``).  A kernel may also say what its
    ``hp_`` symbols store and compute in which precision (see
    :func:`precision_note`): ``tensors_in_precision`` names the buffers stored
    in the symbol's precision, ``fp32_tensors`` those always in fp32, and
    ``fp16_arithmetic`` says how an ``hp_`` call computes and what its
    conversions cost.
    """

    name: str
    args: tuple[ArgSpec, ...]

    def bind(self, symbol: str, precision: str, variant: str, cores: tuple[int, ...],
             args: Mapping[str, Any], read: MemoryReader) -> BoundCall:
        """Check ``args`` and describe the call's buffers; raise KernelArgError on bad input."""
        ...

    def plan(self, call: BoundCall, ctx: PlanContext) -> Plan:
        """Lower the bound call into per-core tiles of the tiling ``ctx.tiling`` (a full tiling of the space)."""
        ...

    def tiling_space(self, call: BoundCall, ctx: PlanContext) -> TilingSpace:
        """The call's tiling space: the search completes and chooses a tiling in it."""
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
    "time_limit_seconds": "it is call(time_limit_seconds=...) (a run-config's top-level 'time_limit_seconds:')",
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


