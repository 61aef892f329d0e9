"""The scaffold the kernels share, one job per module.

- :mod:`~kernels.common.args`: validators of C-style arguments (integers, sequences, floats, addresses).
- :mod:`~kernels.common.binding`: declarative binding from ArgSpecs (pointers -> checked Buffers, one size
  check) and typed attributes per kernel.
- :mod:`~kernels.common.tiling_space`: a kernel's tiling keys with their ranges, parsed from ``ctx.tiling``;
  candidate helpers; ``MIN_TILES_PER_CORE``.
- :mod:`~kernels.common.scratch`: a staging level as a fixed area plus N slots (double buffering); allocations
  that raise ``DoesNotFit`` naming the level.
- :mod:`~kernels.common.streams`: a core's tiles with running ids and alternating slots; phases and plans.
- :mod:`~kernels.common.transfers`: DMA descriptors of tensor blocks.
- :mod:`~kernels.common.exchange`: the partial-sum exchange through the shared staging level.
- :mod:`~kernels.common.tensor_view`: a buffer and its logical view, yielding load/store transfers.
- :mod:`~kernels.common.pipeline`: a staging level as a fixed area, N slots of named operands and a resident
  area; fit errors written from the operand names.
- :mod:`~kernels.common.split_reduce`: partials -> barrier -> reduce across cores.
- :mod:`~kernels.common.shares`: per-core shares of a range, in whole units.
- :mod:`~kernels.common.loops`: loop builders from the core's own numbers (``reduce_broadcast``: a column
  reduction with per-row broadcasts and a prologue); they remember their loops by value (:mod:`sim.model.memo`).
"""
