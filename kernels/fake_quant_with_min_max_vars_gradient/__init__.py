"""TensorFlow's FakeQuantWithMinMaxVarsGradient: ``{fp,hp}_fake_quant_with_min_max_vars_gradient_{s,p}``.

``gradients`` and ``inputs`` have shape ``shape``; ``min`` and ``max`` are fp32
scalars read from memory when the kernel runs.  With the quantisation range
[qmin, qmax] = [narrow_range ? 1 : 0, 2^num_bits − 1], the bounds are nudged in
float32, step by step, as TensorFlow's ``Nudge`` does::

    scale = (max − min) / (qmax − qmin)
    zero_point_from_min = qmin − min / scale
    zero_point = clamp(round_half_away(zero_point_from_min), qmin, qmax)
    nudged_min = (qmin − zero_point) · scale,  nudged_max = (qmax − zero_point) · scale

then ``backprops_wrt_input = gradients · (nudged_min ≤ x ≤ nudged_max)``,
``backprop_wrt_min = Σ gradients where x < nudged_min`` and ``backprop_wrt_max =
Σ gradients where x > nudged_max`` (sums in fp32).  min = max = 0 passes every
gradient and gives zero min/max gradients; min > max, min = max ≠ 0 or a
non-finite bound raise KernelArgError when the values are read.

Precision: ``fp_`` symbols store and compute in fp32; ``hp_`` symbols store
gradients, inputs and backprops_wrt_input in fp16 and the four scalars in
fp32, compare and sum in fp32 (fp16 loads and stores, three conversions per
vector on the vector ALU, fp32 arithmetic; not counted as flops).

Loops: the nudge is straight-line code on one lane (:data:`NUDGE_OPS`); a data
tile is one streaming loop, per vector of fp32 lanes: gradients and inputs
loaded, two compares and a select on the vector ALU, two masked adds into the
min and max sums on the FMACs (running sums: a carried chain, unrolled into
enough accumulators), the input gradient stored; each tile ends with a
cross-lane reduction per sum.  The partials' reduction is
kernels.common.exchange's loop.

Plan: the flattened elements are split over the cores in whole vectors.  Each
core first loads min and max into its scratchpad and nudges them (that tile's
compute is where bad bounds are refused), then streams tiles of gradients and
inputs through two scratchpad slots, accumulating its two partial sums.  With
several cores the partials go to the shared staging level, a barrier follows,
and the first core loads, reduces and stores the two scalars.

Tiling (``tiling=`` of a call or run-config): ``cores`` -- how many of the
call's cores share the elements (the first ones; one core needs no exchange
and no barrier), ``tile_elements`` -- elements per tile (tried: a quarter of
a core's share in whole vectors, as much as a slot holds, an eighth of the
first).  The keys a caller leaves out the simulator's search chooses in
:meth:`FakeQuantWithMinMaxVarsGradient.tiling_space`.

The package: :mod:`~kernels.fake_quant_with_min_max_vars_gradient.numerics` (the nudge, the masks, the tiles'
functions, the reference) and :mod:`~kernels.fake_quant_with_min_max_vars_gradient.kernel` (binding, the tiling
space and the plan).
"""

from kernels.fake_quant_with_min_max_vars_gradient.kernel import KERNEL, FakeQuantAttrs, FakeQuantWithMinMaxVarsGradient
from kernels.fake_quant_with_min_max_vars_gradient.numerics import (
    COMPUTE_PRECISION,
    F32,
    FLOPS_NUDGE,
    FLOPS_PER_ELEMENT,
    NUDGE_OPS,
    SHORT_TILE_FRACTION,
    fake_quant_gradient_reference,
    masked_gradients,
    masked_tile,
    nudge,
    nudge_tile,
)

__all__ = ["COMPUTE_PRECISION", "F32", "FLOPS_NUDGE", "FLOPS_PER_ELEMENT", "KERNEL", "NUDGE_OPS",
           "SHORT_TILE_FRACTION", "FakeQuantAttrs", "FakeQuantWithMinMaxVarsGradient", "fake_quant_gradient_reference",
           "masked_gradients", "masked_tile", "nudge", "nudge_tile"]
