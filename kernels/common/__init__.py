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
"""
