"""Fake quant gradient's numerics: TensorFlow's float32 nudge, the masks and sums, the tiles' compute functions
and the whole op on whole arrays (the reference)."""

from __future__ import annotations

import math

import numpy as np

from sim.errors import KernelArgError

F32 = np.dtype(np.float32)
#: Masks compare the fp32 value of each element with fp32 bounds, for both symbol precisions.
COMPUTE_PRECISION = "fp32"
#: Vector element operations per element: x < nmin, x > nmax, select the input gradient (2),
#: masked accumulation of the min and max sums (2 each).
FLOPS_PER_ELEMENT = 8
#: The scalar nudge, counted as vector ops on one lane each: sub, div, sub-div, round, clamp (2), 2 × (sub, mul).
FLOPS_NUDGE = 11
#: The nudge as the core runs it on one lane, each op waiting for the one before: load min and max; max - min and
#: the multiply by 1/(qmax - qmin) (scale); 1/scale (the estimate and a Newton step of two FMAs) and qmin - min/scale
#: (zero_point_from_min); round half away and the clamp (2); (qmin - zp)·scale and (qmax - zp)·scale side by side
#: (a sub and a mul deep); store the nudged bounds and the zeroed sums.
NUDGE_OPS = ("vls", "fmac", "fmac", "valu", "fmac", "fmac", "fmac", "valu", "valu", "valu", "fmac", "fmac", "vls",
             "vls")
#: The short-tile candidate takes this fraction of the heuristic's tile.
SHORT_TILE_FRACTION = 8


def _round_half_away(v: np.float32) -> float:
    """std::round of a float32 value that lies in [qmin, qmax] (non-negative): exact in float64."""
    return math.floor(float(v) + 0.5)


def nudge(min_value: float, max_value: float, num_bits: int, narrow_range: bool) -> tuple[np.float32, np.float32]:
    """(nudged_min, nudged_max) in float32, step by step as TensorFlow's Nudge; KernelArgError for bad bounds.

    min = max = 0 returns (-inf, +inf): every input passes and no gradient flows to min or max.
    """
    lo, hi = F32.type(min_value), F32.type(max_value)
    if not (np.isfinite(lo) and np.isfinite(hi)):
        raise KernelArgError(f"arguments 'min' and 'max': expected finite bounds, got min={float(lo)!r}, "
                             f"max={float(hi)!r}")
    if lo > hi or (lo == hi and lo != 0):
        raise KernelArgError(f"arguments 'min' and 'max': expected min < max (or min = max = 0), got "
                             f"min={float(lo)!r}, max={float(hi)!r}")
    if lo == hi:
        return F32.type(-np.inf), F32.type(np.inf)
    qmin = F32.type(1 if narrow_range else 0)
    qmax = F32.type((1 << num_bits) - 1)
    scale = F32.type((hi - lo) / (qmax - qmin))
    zp_from_min = F32.type(qmin - F32.type(lo / scale))
    if zp_from_min < qmin:
        zp = qmin
    elif zp_from_min > qmax:
        zp = qmax
    else:
        zp = F32.type(_round_half_away(zp_from_min))
    return F32.type(F32.type(qmin - zp) * scale), F32.type(F32.type(qmax - zp) * scale)


def masked_gradients(gradients: np.ndarray, inputs: np.ndarray, nudged_min: np.float32,
                     nudged_max: np.float32) -> tuple[np.ndarray, np.float32, np.float32]:
    """(input gradient in fp32, Σ gradients below nudged_min, Σ gradients above nudged_max) of one block."""
    g = gradients.astype(F32, copy=False)
    x = inputs.astype(F32, copy=False)
    below, above = x < nudged_min, x > nudged_max
    if np.isneginf(nudged_min) and np.isposinf(nudged_max):
        inside = np.ones(x.shape, bool)  # min = max = 0: every gradient passes, NaN inputs included
    else:  # neither below nor above nor NaN (a NaN compares false both ways): two passes, not four
        inside = (x >= nudged_min) & (x <= nudged_max)
    zero = F32.type(0)
    return (np.where(inside, g, zero), np.where(below, g, zero).sum(dtype=F32),
            np.where(above, g, zero).sum(dtype=F32))


def nudge_tile(num_bits: int, narrow_range: bool, bounds_value: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A core's first compute: the nudged bounds of ``[min, max]``, and its two sums zeroed."""
    nmin, nmax = nudge(bounds_value[0], bounds_value[1], num_bits, narrow_range)
    return np.array([nmin, nmax], F32), np.zeros(2, F32)


def masked_tile(dtype: np.dtype, g: np.ndarray, x: np.ndarray, nudged_value: np.ndarray,
                acc_value: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One data tile: the input gradient (in ``dtype``), and the core's two sums with this tile's added."""
    bp, below, above = masked_gradients(g, x, nudged_value[0], nudged_value[1])
    return bp.astype(dtype, copy=False), acc_value + np.array([below, above], F32)


def fake_quant_gradient_reference(gradients: np.ndarray, inputs: np.ndarray, min_value: float, max_value: float,
                                  num_bits: int = 8, narrow_range: bool = False
                                  ) -> tuple[np.ndarray, np.float32, np.float32]:
    """The whole op on whole arrays, as the chip computes it (input gradient in the gradients' dtype)."""
    nmin, nmax = nudge(min_value, max_value, num_bits, narrow_range)
    bp, wmin, wmax = masked_gradients(gradients, inputs, nmin, nmax)
    return bp.astype(gradients.dtype), wmin, wmax


