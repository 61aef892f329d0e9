"""The gradient kernels of dspsim and their registry (:mod:`kernels.registry`).

``import kernels`` loads :mod:`sim` first: the simulator's facade (:mod:`sim.simulator`) sits on top of
the registry, and every kernel module builds on :mod:`sim.model`, so the simulator package must be
initialised before the first kernel module starts.
"""

import sim  # noqa: F401  (first: see above)
from kernels.registry import (
    ENTRY_POINT_GROUP,
    KERNEL_MODULES,
    REGISTRY,
    VARIANTS,
    KernelInfo,
    Symbol,
    kernels,
    lookup,
    register_kernel,
    registered_kernel,
    symbols,
    unregister_kernel,
)

__all__ = ["ENTRY_POINT_GROUP", "KERNEL_MODULES", "REGISTRY", "VARIANTS", "KernelInfo", "Symbol", "kernels",
           "lookup", "register_kernel", "registered_kernel", "symbols", "unregister_kernel"]
