"""DepthwiseConv2dNativeBackpropInput: ``{fp,hp}_depthwise_conv2d_backprop_input_{s,p}``.

The gradient of a depthwise convolution with respect to its input, as
TensorFlow's ``DepthwiseConv2dNativeBackpropInput``: ``filter`` is
[fh, fw, in_c, mult], ``out_backprop`` is [batch, out_h, out_w, in_c·mult] in
data_format order, and output channel k = c·mult + m reads input channel c
through ``filter[:, :, c, m]``.  The input gradient is the transposed
convolution

    dx[n, ih, iw, c] = Σ_{kh, kw, m} out_backprop[n, oh, ow, c·mult + m] · filter[kh, kw, c, m]
                       over oh·stride_h − pad_top + kh·dil_h = ih and ow·stride_w − pad_left + kw·dil_w = iw.

Dilations > 1 are computed (TensorFlow's CPU kernel refuses them).

Precision: ``fp_`` symbols store and compute in fp32; ``hp_`` symbols store
filter, out_backprop and output in fp16, multiply in fp16 and accumulate in
fp32, as TensorFlow's fp16 path accumulates (``fp16_fp32acc`` where the target
lists that rate: MT7004 does, at its fp16 lanes; elsewhere the operands are
widened to fp32 as they are loaded, a permute per vector), and round each output
block to fp16 once, on store (a conversion per vector in the loop's epilogue).

The inner loop (what the timing model prices, :mod:`kernels.common.loops`): per
tile, blocks of output vectors accumulate in registers over the taps that reach
them (:func:`~kernels.common.loops.tap_accumulate`): per tap, an FMAC per output
vector on its own out_backprop vector, loaded at that tap's strided, dilated
position (NHWC: along the channels, the multipliers interleaved as out_backprop
stores them and folded once per block; a wide load moves the adjacent vectors of
consecutive positions when a position's channels fill whole vectors.  NCHW:
along an input row, each out_backprop vector shifted or spread onto the row's
lanes by a permute).  The block is as large as the FMAC latency needs and the
register file allows (with the filter's vectors resident when they fit): the
``register_block`` key, of scope ``compute``, which the plan context's
``cheapest_loops`` (the cost model) picks per tile unless the caller fixes it.

Plan: the work is cut into tiles of (image, block of input rows, block of
input columns, block of channels).  The cores split the rows of all images,
or the channels, or both (row cuts re-read halo rows; NHWC channel cuts come
in whole vectors of lanes).  Each tile loads its halo — the out_backprop rows and
columns whose receptive field reaches the tile — accumulates every tap
(kh, kw) into its block of ``output`` with strided slices, and stores the
block.  A channel block's filter slice is loaded once, with the block's
first tile, into one of two filter areas that alternate between blocks; the
tiles alternate between two slots of the rest of the scratchpad, so the next
tile's DMA overlaps this tile's compute.  NCHW tensors are moved and computed
in their own layout.  The split and the tile shape are keys of the kernel's
tiling space, chosen by the simulator's search: short tiles expose less of the
first load and the last store, tall ones pay fewer transfers and halo rows.

Tiling (``tiling=`` of a call or run-config, all keys optional):
``channel_parts`` -- the cores form that many channel groups (channels, or
whole vectors of them in NHWC, split evenly), each group's cores splitting the
rows of all images (1: rows only); ``tile_rows``, ``tile_cols``,
``tile_channels`` -- the tile shape (input rows, input columns, channels),
clipped to a core's share; ``register_block`` (per tile, see above).
:meth:`DepthwiseConv2dBackpropInput.tiling_space` declares them; the
simulator's search completes the keys a caller leaves out.

The package, one job per module: :mod:`~kernels.depthwise_conv2d_backprop_input.numerics` (the math, the
reference and the tiles' computes), :mod:`~kernels.depthwise_conv2d_backprop_input.shapes` (tile shapes: what a
tile takes of the scratchpad, the shapes worth pricing), :mod:`~kernels.depthwise_conv2d_backprop_input.space`
(the tiling space and its fit), :mod:`~kernels.depthwise_conv2d_backprop_input.tap_loop` (the inner loop),
:mod:`~kernels.depthwise_conv2d_backprop_input.build` (the plan) and
:mod:`~kernels.depthwise_conv2d_backprop_input.kernel` (the arguments, binding, and the registry entry).
"""

from kernels.depthwise_conv2d_backprop_input.build import Planner, split_transfers
from kernels.depthwise_conv2d_backprop_input.kernel import KERNEL, DepthwiseConv2dBackpropInput, InputGradAttrs
from kernels.depthwise_conv2d_backprop_input.numerics import (
    F32,
    accumulate_taps,
    depthwise_conv2d_backprop_input,
    tile_block,
    zero_block,
)
from kernels.depthwise_conv2d_backprop_input.shapes import Footprint, Share, TileShape, row_options, shape_options
from kernels.depthwise_conv2d_backprop_input.space import CallTiling, tile_shape
from kernels.depthwise_conv2d_backprop_input.tap_loop import MAX_BLOCK, TapLoops

__all__ = ["F32", "KERNEL", "MAX_BLOCK", "CallTiling", "DepthwiseConv2dBackpropInput", "Footprint", "InputGradAttrs",
           "Planner", "Share", "TapLoops", "TileShape", "accumulate_taps", "depthwise_conv2d_backprop_input",
           "row_options", "shape_options", "split_transfers", "tile_block", "tile_shape", "zero_block"]
