"""dspsim: a cycle-approximate simulator of the FT78NE and MT7004 multicore DSP chips.

The public API (a contract, SPEC section 3)::

    import sim
    m = sim.Simulator("FT78NE")
    m.write(0xA0000000, x)
    run = m.call("fp_batch_norm_grad_s", x=..., dy=..., dx=..., params=[...], core_mask=0xFF)
    run.cycles, run.events, run.write_trace("traces/bn.json")

Kernels written by users join with ``sim.register_kernel(kernel)`` (docs/writing-a-kernel.md); a plan that
breaks the IR's rules raises :class:`PlanError` before it runs.
"""

from sim.errors import (
           ComputeOutputError,
           ConfigError,
           DeadlockError,
           KernelArgError,
           KernelCodeError,
           KernelDefinitionError,
           LayoutError,
           MemoryFault,
           NestedCallError,
           PlanError,
           SimError,
           TargetError,
           TimeLimitError,
)
from sim.model.target import Target
from sim.model.target_loader import available_targets, load_target
from sim.simulator import (
           TILING_TOLERANCE,
           Run,
           Simulator,
           register_kernel,
           registered_kernel,
           unregister_kernel,
)

__all__ = ["SimError", "TargetError", "KernelArgError", "LayoutError", "MemoryFault", "ConfigError", "PlanError",
           "KernelDefinitionError", "ComputeOutputError", "DeadlockError", "KernelCodeError", "NestedCallError",
           "TimeLimitError", "Simulator", "Run", "TILING_TOLERANCE", "Target", "load_target", "available_targets",
           "register_kernel", "unregister_kernel", "registered_kernel"]
