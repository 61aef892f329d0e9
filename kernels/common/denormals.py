"""TensorFlow's float environment for fp32: subnormal values read as zero, subnormal results flushed to zero.

TensorFlow runs every CPU kernel with the processor's flush-to-zero and denormals-are-zero modes on
(``port::ScopedFlushDenormal`` around ``device->Compute`` in eager execution, and in the threads of its pools): an
fp32 subnormal operand counts as a zero of its sign, and a subnormal result becomes one.  The kernels follow it
where it decides an outcome: the comparisons that route a value (FakeQuant's masks against its nudged bounds) and
the scalar and per-channel parameters computed before the element loops (FakeQuant's nudge, a batch norm's
rsqrt(variance + epsilon)).  fp16 values are unaffected (TensorFlow widens them to fp32, where none is subnormal).
"""

from __future__ import annotations

import numpy as np

F32 = np.dtype(np.float32)
#: The smallest normal fp32 magnitude: anything smaller but not zero is subnormal.
FLT_MIN = F32.type(np.finfo(F32).tiny)


def flushed(v: np.float32) -> np.float32:
    """``v`` (an fp32 scalar) as TensorFlow's kernels read it: a subnormal becomes a zero of its sign."""
    return F32.type(v * F32.type(0)) if -FLT_MIN < v < FLT_MIN else v


def flushed_array(a: np.ndarray) -> np.ndarray:
    """A new fp32 array of ``a``'s values, each subnormal a zero of its sign (for per-channel vectors: a pass)."""
    out = np.array(a, dtype=F32)
    tiny = np.abs(out) < FLT_MIN
    if tiny.any():
        np.multiply(out, F32.type(0), out=out, where=tiny)
    return out
