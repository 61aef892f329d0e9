"""TensorFlow's FusedBatchNormGrad: ``{fp,hp}_fused_batch_norm_grad_{s,p}``.

Inputs ``y_backprop`` (dy) and ``x`` are 4-D in ``data_format`` order (``shape``
gives the four sizes), ``scale``, ``reserve_space_1`` (mean) and
``reserve_space_2`` (variance) are [C] fp32.  With m = N·H·W, rs =
rsqrt(variance + epsilon) and x̂ = (x − mean)·rs, per channel:

* offset_backprop = Σ dy, scale_backprop = Σ dy·x̂
* training:  x_backprop = scale·rs · ((dy − Σdy/m) − x̂·Σdy·x̂/m)
* inference: x_backprop = dy·scale·rs

as TensorFlow's CPU kernels (FusedBatchNormGrad / FusedBatchNormFreezeGrad)
compute them, in fp32 (fp16 tensors are widened on load and x_backprop is
narrowed on store), the training form's intermediates in range wherever dy
is (TensorFlow's coef2 is rs²·Σdy·(x − mean)/m, which x̂·Σdy·x̂/m equals but
for rounding; with an infinite rs, var + epsilon flushed to 0, TensorFlow's
x_backprop is ±inf where this one is NaN).  BatchNormGrad (kernels/
batch_norm_grad.py) shares the planning with its page's training form,
scale·rs/m · (m·dy − Σdy − x̂·Σdy·x̂).

Precision: ``fp_`` symbols store and compute everything in fp32.  ``hp_``
symbols store y_backprop, x and x_backprop in fp16 and the per-channel vectors
in fp32, and compute in fp32 as TensorFlow does for fp16 batch norm: the loops
load fp16 (half the bytes per load), widen each vector on the ALU, run the
arithmetic at the chip's fp32 lanes and narrow x_backprop before storing it.
Both precisions report the same flops (the math's).

Loops (what a tile's compute issues, per vector of fp32 lanes; kernels.common.loops
turns them into issues on the target's units):

* partial sums: x and dy loaded, x̂ = (x − mean)·rs (two FMAC ops), Σdy += dy
  and Σdy·x̂ += dy·x̂ (two FMAC ops into running sums: a carried chain, unrolled
  into enough independent accumulators to hide the FMAC latency, added together
  at the end);
* x_backprop (training): x and dy loaded, x̂ (2), k·((dy − a) − x̂·b) (a subtract
  beside x̂, an FMA and a multiply), stored; inference does the sums and dy·k in
  one loop;
* per-channel loops before and between them: rs = rsqrt(var + eps) (an add, the
  ALU's estimate, a Newton step), the coefficients k = scale·rs, a, b;
* NHWC (channels on the lanes): one loop over the block's vectors, the
  coefficients of its channel vectors held in registers (or loaded again with
  every vector when there are too many); NCHW (positions on the lanes): a loop
  per channel, each sum reduced across the lanes once per channel;
* the rows plan adds the zero-fill of the sums (stores) and the reduction of
  the cores' partials (kernels.common.exchange).

Both layouts are handled as a 3-D view [A, C, B] with the channels in the
middle: NHWC is [N·H·W, C, 1] (channels on the vector lanes, the sums are
vertical vector adds), NCHW is [N, C, H·W] (spatial positions on the lanes, so
every per-channel sum of a tile ends in a cross-lane reduction).

Two plans:

* **channels** -- when every core can get at least one vector of channels
  (NHWC) or one channel (NCHW) and a tile of that many channels over the whole
  batch fits half the scratchpad: channels are split over the cores, each tile
  is a channel block over the whole batch, x and dy are read once.
* **rows** -- otherwise the rows (A, or B when that balances the cores better)
  are split over the cores.  Phase 1: every core sums its rows into partial
  per-channel sums kept in a fixed scratchpad area (inference also writes
  x_backprop here) and stores them to the shared staging level; barrier; phase
  2: every core loads all partials, reduces them and (training) writes
  x_backprop for its rows; the first core stores scale/offset backprop.
  Channels too many for the fixed area or the shared level are done in groups,
  two phases each.

Tiling (``tiling=`` of a call or run-config, all keys optional): ``split``
(``channels`` or ``rows``), ``channel_block`` (channels per tile, channels
split), ``tile_elements`` (elements per tile, rows split).  The keys a caller
leaves out the simulator's search chooses in :meth:`BatchNormPlanning.tiling_space`.

BatchNormGrad (:mod:`kernels.batch_norm_grad`) is this kernel's NHWC case with
H = W = 1 whose caller gives rs instead of the variance: its calls bind to the
same :class:`BatchNormAttrs` and are planned here, with the same numerics and
flop table.

The package: :mod:`~kernels.fused_batch_norm_grad.numerics` (the math and the flop table),
:mod:`~kernels.fused_batch_norm_grad.attrs` (the [A, C, B] view and the attributes),
:mod:`~kernels.fused_batch_norm_grad.base` (what both plans share), :mod:`~kernels.fused_batch_norm_grad.channels`
and :mod:`~kernels.fused_batch_norm_grad.rows` (the two plans), :mod:`~kernels.fused_batch_norm_grad.kernel`
(the registry entry and the tiling space).
"""

from kernels.fused_batch_norm_grad.attrs import FUSED_TENSORS, BatchNormAttrs, Tensors, View
from kernels.fused_batch_norm_grad.kernel import KERNEL, BatchNormPlanning, FusedBatchNormGrad, tiling_space
from kernels.fused_batch_norm_grad.numerics import (
    COMPUTE_PRECISION,
    F32,
    FIXED_AREA_FRACTION,
    FLOPS_CHANNEL_COEF,
    FLOPS_CHANNEL_RS,
    FLOPS_DX_INFER,
    FLOPS_DX_TRAIN,
    FLOPS_SUMS,
    FLOPS_XHAT,
    FORMATS,
    SPLITS,
    batch_norm_backprop,
    fused_batch_norm_grad_reference,
    partial_sums,
    rs_of,
    rsqrt_var,
    x_backprop_infer,
    x_backprop_train,
)

__all__ = ["FUSED_TENSORS", "BatchNormAttrs", "Tensors", "View", "KERNEL", "BatchNormPlanning", "FusedBatchNormGrad",
           "tiling_space", "COMPUTE_PRECISION", "F32", "FIXED_AREA_FRACTION", "FLOPS_CHANNEL_COEF", "FLOPS_CHANNEL_RS",
           "FLOPS_DX_INFER", "FLOPS_DX_TRAIN", "FLOPS_SUMS", "FLOPS_XHAT", "FORMATS", "SPLITS", "batch_norm_backprop",
           "fused_batch_norm_grad_reference", "partial_sums", "rs_of", "rsqrt_var", "x_backprop_infer",
           "x_backprop_train"]
