"""BatchNormGrad of the chips' own kernel library: ``{fp,hp}_batch_norm_grad_{s,p}``.

On x, dy of shape [batch, channel] with per-channel mean, invar (1/sqrt(var+eps))
and scale, with m = batch and x̂ = (x - mean)·invar:

* dbias = Σ_batch dy, dscale = Σ_batch dy·x̂
* training:  dx = scale·invar/m · (m·dy − Σdy − x̂·Σdy·x̂)
* inference: dx = dy·scale·invar

``params`` is the C ``long long params[12]``: [0] mean*, [1] invar*, [2] scale*,
[3] dbias* (out), [4] dscale* (out), [5] batch, [6] channel, [7] is_train; given
as a sequence of 8 to 12 ints or as the address of an int64[12] array.  Slots
[8]..[11] are reserved: when present they must be 0.

This is FusedBatchNormGrad's NHWC case with H = W = 1 whose caller gives rs
(invar) instead of the variance: this module binds the arguments and maps the
call onto :mod:`kernels.fused_batch_norm_grad`'s planner, numerics and flop
table (no rsqrt per channel).  Its plans and tiling keys are that kernel's:
``split`` (``channels``: channel blocks over the whole batch per core;
``rows``: the batch split over the cores, partial sums exchanged through the
shared staging level), ``channel_block`` (channels per tile, channels split)
and ``tile_elements`` (rows x channels per tile, rows split).

Precision: ``fp_`` symbols store and compute everything in fp32.  ``hp_``
symbols store x, dy and dx in fp16 and the per-channel vectors in fp32, and
compute in fp32 (fp16 loads, a conversion each way on the vector ALU, fp32
arithmetic: FusedBatchNormGrad's loops, H = W = 1), so they report the same
flops.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from kernels.common.args import require_address, require_int
from kernels.common.binding import bind_arguments, bound_call
from kernels.fused_batch_norm_grad import BatchNormAttrs, BatchNormPlanning, Tensors, View, batch_norm_backprop
from sim.errors import KernelArgError, brief
from sim.model.call import ArgSpec, BoundCall, MemoryReader

F32 = np.dtype(np.float32)
I64 = np.dtype(np.int64)
PARAM_NAMES = ("mean", "invar", "scale", "dbias", "dscale", "batch", "channel", "is_train")
#: The buffers by role in the batch-norm planner: invar is rs itself.
TENSORS = Tensors(dy="dy", x="x", scale="scale", mean="mean", variance="invar", dx="dx", scale_grad="dscale",
                  offset_grad="dbias")


def batch_norm_grad_reference(x: np.ndarray, dy: np.ndarray, mean: np.ndarray, invar: np.ndarray,
                              scale: np.ndarray, is_train: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(dx, dbias, dscale) of whole tensors, computed in fp32 like the chip (dx in x's dtype)."""
    dx, dscale, dbias = batch_norm_backprop(x[:, :, None], dy[:, :, None], mean, np.asarray(invar, F32), scale,
                                            bool(is_train), False)
    return dx.reshape(x.shape), dbias, dscale


class BatchNormGrad(BatchNormPlanning):
    """The registry entry of batch_norm_grad: its own binding, FusedBatchNormGrad's planning."""

    name = "batch_norm_grad"
    #: What an hp_ call stores in fp16 (the rest, and the params array's int64, in fp32) and how it computes.
    tensors_in_precision = ("x", "dy", "dx")
    fp32_tensors = ("mean", "invar", "scale", "dbias", "dscale")
    fp16_arithmetic = ("computed in fp32 (as TensorFlow computes fp16 batch norm gradients): x and dy are loaded "
                       "as fp16 and widened on the vector ALU, the arithmetic runs at the chip's fp32 lanes, and dx "
                       "is narrowed to fp16 before it is stored; each conversion is a vector ALU issue of the loops, "
                       "not a flop")
    args = (
        ArgSpec("x", "in_ptr", "address of x [batch, channel]"),
        ArgSpec("dy", "in_ptr", "address of dy [batch, channel]"),
        ArgSpec("dx", "out_ptr", "address of dx [batch, channel] (output)"),
        ArgSpec("params", "params", "long long params[12]: mean*, invar*, scale*, dbias*, dscale*, batch, "
                                    "channel, is_train, then reserved slots that must be 0 -- 8..12 ints, or the "
                                    "address of an int64[12] array"),
    )

    def bind(self, symbol: str, precision: str, variant: str, cores: tuple[int, ...],
             args: Mapping[str, Any], read: MemoryReader) -> BoundCall:
        """Check the arguments (the params list or array) and describe the call's buffers."""
        a = bind_arguments(symbol, precision, self.args, args)
        buffers = []
        raw = a["params"]
        if isinstance(raw, (int, np.integer)) and not isinstance(raw, bool):
            paddr = require_address("params", raw)
            buffers.append(a.buffer("params", (12,), I64, addr=paddr, role="input"))
            values: Sequence[Any] = [int(v) for v in read(paddr, (12,), I64, "params")]
            origin = f"params array at {paddr:#x}"
        elif isinstance(raw, (list, tuple)) or (isinstance(raw, np.ndarray) and raw.ndim == 1):
            if not 8 <= len(raw) <= 12:  # before copying it: a huge sequence is refused by its length alone
                raise KernelArgError(f"argument 'params': expected 8 to 12 ints ({', '.join(PARAM_NAMES)}), "
                                     f"got {len(raw)}")
            values = list(raw)
            origin = "params"
        else:
            raise KernelArgError(f"argument 'params': expected a sequence of 8 to 12 ints or the address of an "
                                 f"int64[12] array, got {brief(raw)}")
        ptrs = [require_address(f"params[{i}] ({PARAM_NAMES[i]})", values[i]) for i in range(5)]
        batch = require_int("params[5] (batch)", values[5])
        channel = require_int("params[6] (channel)", values[6])
        if batch <= 0:
            raise KernelArgError(f"argument 'params[5] (batch)': expected a positive batch, got {batch} "
                                 f"(from {origin})")
        if channel <= 0:
            raise KernelArgError(f"argument 'params[6] (channel)': expected a positive channel count, got "
                                 f"{channel} (from {origin})")
        is_train = require_int("params[7] (is_train)", values[7])
        if is_train not in (0, 1):
            raise KernelArgError(f"argument 'params[7] (is_train)': expected 0 or 1, got {is_train}")
        for i in range(8, len(values)):
            # Reserved: no meaning yet, so anything but 0 is a mistake (an entry shifted out of place, an
            # uninitialised array) that must not pass silently, nor change meaning when a slot gets one.
            if require_int(f"params[{i}] (reserved)", values[i]) != 0:
                raise KernelArgError(f"argument 'params[{i}] (reserved)': slots [8]..[11] are reserved and must be "
                                     f"0, got {values[i]} (from {origin})")
        rows = (batch, channel)
        vec = {n: ptrs[PARAM_NAMES.index(n)] for n in ("mean", "invar", "scale", "dbias", "dscale")}
        buffers += [a.buffer("x", rows, size_arg="params"), a.buffer("dy", rows, size_arg="params")]
        buffers += [a.buffer(n, (channel,), F32, addr=vec[n], role="input") for n in ("mean", "invar", "scale")]
        buffers.append(a.buffer("dx", rows, size_arg="params"))
        buffers += [a.buffer(n, (channel,), F32, addr=vec[n], role="output") for n in ("dbias", "dscale")]
        attrs = BatchNormAttrs(View(batch, channel, 1, channels_on_lanes=True), bool(is_train), None, TENSORS,
                               tf_form=False)
        return bound_call(a, variant, cores, buffers, attrs)


KERNEL = BatchNormGrad()
