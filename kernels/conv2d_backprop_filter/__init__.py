"""Conv2DBackpropFilter: ``{fp,hp}_conv2d_backprop_filter_{s,p}``, the gradient of a 2-D convolution wrt its filter.

With ``input`` x (``input_shape``, data_format order) and ``out_backprop`` dy (shape
from the geometry: [batch, out_h, out_w, out_c] in data_format order), the output
``output`` dW [fh, fw, in_c, out_c] is, as TensorFlow defines it::

    dW[kh, kw, c, o] = Σ_{n, i, j} x[n, i·sh + kh·dh − pad_top, j·sw + kw·dw − pad_left, c] · dy[n, i, j, o]

with x read as zero outside the input (SAME / VALID / EXPLICIT padding, see
:mod:`kernels.common.geometry`).  Dilations > 1 are computed (TensorFlow's CPU kernel
refuses them).  Grouped convolution is out of scope: ``filter_sizes[2]`` must equal
the input's channels.  ``out_backprop_shape`` (optional) states the shape the caller
believes dy has; it must equal the computed one, as TensorFlow checks its tensor.

Plan.  The work is the sum over (image, output row); the accumulator dW block
[fh, fw, icg, ocg] (fp32) stays in the core's scratchpad while tiles of output
rows stream through the two slots (input rows with their halo for the dilated,
strided window; padding handled inside the compute).  Two ways to use the cores
(the ``split`` key; the simulator's search chooses between them):

* **spatial**: the (image, row) space is split over the cores; each core
  accumulates a partial dW, writes it to the shared staging level, barrier, then
  each core reduces a slice of rows of dW from all partials and stores it (in
  rounds when the partials exceed the level's window);
* **filter**: filter slices (out_c, and in_c when needed) are split over the
  cores; each core sweeps the whole input for its slices, no exchange.

Precision: ``fp_`` symbols store and compute in fp32.  ``hp_`` symbols store input, out_backprop and output
in fp16, multiply in fp16 and accumulate dW in fp32 (``fp16_fp32acc``, the rate the target gives fp16 products
accumulated in fp32, where it lists it: MT7004 does, at its fp16 lanes; a chip without it converts the fp16
blocks to fp32 first, in a loop of its own), and round dW to fp16 once, as it is stored.

The inner loops (what the timing model prices, :mod:`kernels.common.loops`).  The work of a row tile is a GEMM
over the reduction: dW[(tap, ic), oc] += Σ_k A[k, (tap, ic)] · dy[k, oc] over the tile's positions k, with
dW's columns (out_c) along the vector lanes, dy's rows loaded as vectors and A's elements broadcast.  A lives
in AM (the staged input window), not in SM where scalar loads read, so each k-step loads its A elements as a
vector and moves them to the scalar side (:func:`~kernels.common.loops.gemm_micro_kernel_from_am`).  Two
ways to lay A out (the ``a_operand`` key): ``window`` reads the window itself tap by tap (no gather; the
micro-kernel's rows stay within one tap's channels, over every position, the window's zero border stored
per tile), ``im2col`` first gathers each position's fh·fw·icg patch into an im2col row (vector loads, permutes
for runs that do not start on a vector, stores: :func:`~kernels.common.loops.gather_rows`) and then blocks
any rows.  Few input channels (3 in an RGB stem) leave the window's micro-kernel without enough accumulators
to cover the FMAC latency, so the gather pays; 64 channels need none.  The micro-kernel's m_micro x n_micro
block (register blocking: m_micro·ceil(n_micro/lanes) fp32 accumulators beside the B row, A vector and
broadcasts, within the core's vector registers) and the layout are keys of scope ``compute``: per tile shape,
the plan context's ``cheapest_loops`` (the cost model) picks among them unless the caller fixes them.
NCHW blocks are transposed to channels-last first (a butterfly of log2(lanes) permutes per vector); the drain's
cast and the partial sums' reduction are loops of their own.

Tiling (``tiling=`` of a call or run-config, all keys optional): ``split``
(spatial or filter), ``in_c_slice`` and ``out_c_slice`` (the filter slice each
accumulator holds), ``a_operand`` (window or im2col), ``m_micro`` and ``n_micro``
(the micro-kernel's block of dW).  :meth:`Conv2DBackpropFilter.tiling_space`
declares them; the simulator's search completes the keys a caller leaves out.

The package, one job per module: :mod:`~kernels.conv2d_backprop_filter.numerics` (the math: a block's dW, the
reference, the tiles' computes), :mod:`~kernels.conv2d_backprop_filter.layout` (the call's sizes and views, what
fits the staging levels, the filter slices and row tiles), :mod:`~kernels.conv2d_backprop_filter.micro` (a row
tile's loops and the micro-kernel choice), :mod:`~kernels.conv2d_backprop_filter.tiles` (row tiles and the drain),
:mod:`~kernels.conv2d_backprop_filter.spatial` and :mod:`~kernels.conv2d_backprop_filter.filter_split` (the two
plans), :mod:`~kernels.conv2d_backprop_filter.space` (the tiling space and the plan of a tiling) and
:mod:`~kernels.conv2d_backprop_filter.kernel` (the registry entry and its binding).
"""

from kernels.conv2d_backprop_filter.kernel import KERNEL, Conv2DBackpropFilter
from kernels.conv2d_backprop_filter.layout import FilterGradAttrs
from kernels.conv2d_backprop_filter.micro import A_OPERANDS, MICRO_M_ROWS, MICRO_N_VECTORS
from kernels.conv2d_backprop_filter.numerics import (
    COMPUTE_PRECISION,
    F32,
    cast_to,
    conv2d_backprop_filter_reference,
    filter_grad_block,
    row_tile,
)
from kernels.conv2d_backprop_filter.space import LONG_TILE_POSITIONS, MORE_OUT_C_CUTS, SPLITS
from kernels.conv2d_backprop_filter.space import _Planner as _Planner  # the planner tests list candidates with

__all__ = ["A_OPERANDS", "COMPUTE_PRECISION", "F32", "KERNEL", "LONG_TILE_POSITIONS", "MICRO_M_ROWS",
           "MICRO_N_VECTORS", "MORE_OUT_C_CUTS", "SPLITS", "Conv2DBackpropFilter", "FilterGradAttrs", "cast_to",
           "conv2d_backprop_filter_reference", "filter_grad_block", "row_tile"]
