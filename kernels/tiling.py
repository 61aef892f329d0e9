"""Moved to :mod:`kernels.common` (scratch, transfers, tiling_space): these names stay importable from here
until the last kernel has moved to the scaffold; new code imports them from ``kernels.common``."""

from kernels.common.scratch import Arena, align_up, fits
from kernels.common.tiling_space import padded_lanes, split_even
from kernels.common.transfers import block_in, block_out, channel_grain, operand_in, operand_out

__all__ = ["Arena", "align_up", "fits", "block_in", "block_out", "operand_in", "operand_out", "channel_grain",
           "padded_lanes", "split_even"]
