"""Fake quant gradient's numerics: TensorFlow's float32 nudge, the masks and sums, the tiles' compute functions
and the whole op on whole arrays (the reference)."""

from __future__ import annotations

import functools
import math

import numpy as np

from kernels.common.denormals import FLT_MIN, flushed
from kernels.common.halves import F16, widened
from sim.errors import KernelArgError

F32 = np.dtype(np.float32)
U16 = np.dtype(np.uint16)
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

    min = max = 0 returns (-inf, +inf): every input passes and no gradient flows to min or max.  Finite bounds
    whose range overflows fp32 give TensorFlow's infinite scale, and so a NaN nudged_min (0 x inf), which no input
    is below, above or inside.
    """
    # (each step in TensorFlow's float environment: subnormal operands and results are zeros, kernels.common.denormals)
    lo, hi = flushed(F32.type(min_value)), flushed(F32.type(max_value))
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
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        scale = flushed(F32.type(flushed(F32.type(hi - lo)) / (qmax - qmin)))
        zp_from_min = F32.type(qmin - flushed(F32.type(lo / scale)))
        if zp_from_min < qmin:
            zp = qmin
        elif zp_from_min > qmax:
            zp = qmax
        elif np.isnan(zp_from_min):
            # A range whose scale flushes to zero with min = 0 (0 / 0): TensorFlow's static_cast<uint16> of the
            # rounded NaN, which x86 converts to 0 (cvttss2si gives 0x80000000; its low 16 bits), unclamped.
            zp = F32.type(0)
        else:
            zp = F32.type(_round_half_away(zp_from_min))
        return flushed(F32.type(F32.type(qmin - zp) * scale)), flushed(F32.type(F32.type(qmax - zp) * scale))


#: An fp16 value's place in a total order of its 65536 bit patterns, as a uint16 (:func:`_f16_order`): every
#: non-NaN value in [0, _F16_ORDERED) in the order of its value (-0 just below +0), the NaNs above.
_F16_ORDERED = 63490


def _f16_order(h: np.ndarray) -> np.ndarray:
    """The uint16 order keys of an fp16 array's elements (four passes over 16-bit words, no widening)."""
    s = h.view(np.int16) >> 15  # 0, or -1 for the negative patterns
    np.bitwise_and(s, np.int16(0x7FFF), out=s)
    np.bitwise_xor(s, h.view(np.int16), out=s)  # signed integers in the values' order, NaNs at both ends
    u = s.view(U16)
    np.add(u, U16.type(31745), out=u)  # -inf (0xFC00 -> -31745) to 0: the negative NaNs wrap to the top
    return u


@functools.cache
def _f16_values_in_order() -> np.ndarray:
    """The fp32 value of every order key below _F16_ORDERED (non-decreasing)."""
    keys = (np.arange(_F16_ORDERED, dtype=np.int32) - 31745).astype(np.int16)
    bits = keys ^ ((keys >> 15) & np.int16(0x7FFF))
    return bits.view(F16).astype(F32)


def _f16_bounds(nudged_min: np.float32, nudged_max: np.float32) -> tuple[int, int]:
    """(lo, hi): an fp16 value v is below nudged_min iff its key < lo, above nudged_max iff hi < key <
    _F16_ORDERED; exact, since every fp16 value is an fp32 one."""
    values = _f16_values_in_order()
    return (int(np.searchsorted(values, nudged_min, "left")),
            int(np.searchsorted(values, nudged_max, "right")) - 1)


def _masks(x: np.ndarray, nudged_min: np.float32, nudged_max: np.float32,
           passes_all: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """(below, above, inside) of the fp32 values of ``x``, as fp32 compares give them (a NaN neither below, above
    nor inside); inside is None when every element passes (min = max = 0: NaN inputs included)."""
    if x.dtype == F16 and not (math.isnan(nudged_min) or math.isnan(nudged_max)):
        # Compared as order keys: no widening, and fp16 compares are slow in numpy.  (A NaN bound, which no
        # value is below or above, has no key: such bounds compare the fp32 values below.)
        key = _f16_order(x)
        lo, hi = _f16_bounds(nudged_min, nudged_max)
        below = np.less(key, U16.type(lo))
        np.subtract(key, U16.type(hi + 1), out=key)  # keys above hi from 0 (the lower ones wrap past the NaNs)
        above = np.less(key, U16.type(_F16_ORDERED - hi - 1))
        if passes_all:
            return below, above, None
        if lo > hi:  # no fp16 value lies in [nudged_min, nudged_max]
            return below, above, np.zeros(x.shape, bool)
        return below, above, np.greater_equal(key, U16.type(65535 - (hi - lo)))  # keys lo..hi, moved to the top
    xf = x.astype(F32, copy=False)
    # A subnormal input reads as zero (kernels.common.denormals): against a bound of zero it compares as zero, so
    # the comparisons with zero move to the smallest normal values; against any other bound as it is.
    below = np.less(xf, nudged_min) if nudged_min else np.less_equal(xf, -FLT_MIN)
    above = np.greater(xf, nudged_max) if nudged_max else np.greater_equal(xf, FLT_MIN)
    if passes_all:
        return below, above, None
    # (neither below nor above nor NaN: a NaN compares false both ways)
    inside = np.greater_equal(xf, nudged_min) if nudged_min else np.greater(xf, -FLT_MIN)
    inside &= np.less_equal(xf, nudged_max) if nudged_max else np.less(xf, FLT_MIN)
    return below, above, inside


def _times(g: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """``g × mask`` in fp32, the mask 1.0 or 0.0 per element (TensorFlow's ``gradients * mask``): g where the mask
    holds, else 0 carrying g's sign, and NaN where g is NaN or infinite (0 × inf is NaN)."""
    with np.errstate(invalid="ignore"):
        return np.multiply(g, mask, dtype=F32)


def _masked_sum(g: np.ndarray, mask: np.ndarray, finite: list[bool | None]) -> np.float32:
    """Σ ``g × mask`` in fp32 (TensorFlow's ``(gradients * mask).sum()``): +0 when the mask is empty and every
    gradient finite, NaN when a gradient is NaN or infinite anywhere (0 × inf); ``finite`` holds whether every
    gradient is finite once worked out (None before)."""
    if not mask.any():
        if finite[0] is None:
            finite[0] = bool(np.isfinite(g).all())
        if finite[0]:
            return F32.type(0)
    return flushed(_times(g, mask).sum(dtype=F32))


def masked(gradients: np.ndarray, inputs: np.ndarray, nudged_min: np.float32,
           nudged_max: np.float32) -> tuple[np.ndarray, np.float32, np.float32]:
    """(input gradient, Σ gradients below nudged_min, Σ gradients above nudged_max) of one block, the input
    gradient in fp16 for fp16 gradients (their fp32 values narrowed back: the same numbers), in fp32 otherwise.

    As TensorFlow's functor: each mask is 1.0 or 0.0 per element and multiplies the gradients, so a gradient
    outside the range gives 0 with its sign, and a NaN or infinite one gives NaN (in the input gradient, and in
    both sums wherever it lies).  The masks compare the fp32 values of the inputs with the fp32 bounds; a NaN
    input is neither below nor above nor inside; min = max = 0 (bounds ±inf) passes every gradient as it is and
    gives zero sums."""
    passes_all = float(nudged_min) == -math.inf and float(nudged_max) == math.inf
    below, above, inside = _masks(inputs, nudged_min, nudged_max, passes_all)
    g = widened(gradients)
    if inside is None:
        bp = gradients.copy()
        return bp, F32.type(0), F32.type(0)
    finite: list[bool | None] = [None]
    if gradients.dtype == F16:
        finite[0] = bool(np.isfinite(g).all())
        # Every gradient finite (the common case): g x mask is g or g's sign bit, computed on the fp16 bits (a
        # product in fp32 narrowed back would cost a slow fp32 -> fp16 pass); otherwise that product.
        bp = _sign_or_value(gradients, inside) if finite[0] else _times(g, inside).astype(F16)
    else:
        # (a subnormal gradient passes as it is, where TensorFlow's would be a zero of its sign: flushing it here
        # would cost two passes over every tile for a difference below the smallest normal value)
        bp = _times(g, inside)
    return bp, _masked_sum(g, below, finite), _masked_sum(g, above, finite)


def _sign_or_value(h: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """``h x mask`` of finite fp16 values, on their bits: h where ``mask``, else 0 with h's sign."""
    keep = np.empty(h.shape, U16)
    np.copyto(keep, mask)  # 1 or 0
    np.multiply(keep, U16.type(0x7FFF), out=keep)  # every bit but the sign's, or none
    np.bitwise_or(keep, U16.type(0x8000), out=keep)  # and the sign's always
    return np.bitwise_and(keep, h.view(U16), out=keep).view(F16)


def masked_gradients(gradients: np.ndarray, inputs: np.ndarray, nudged_min: np.float32,
                     nudged_max: np.float32) -> tuple[np.ndarray, np.float32, np.float32]:
    """(input gradient in fp32, Σ gradients below nudged_min, Σ gradients above nudged_max) of one block."""
    bp, below, above = masked(gradients, inputs, nudged_min, nudged_max)
    return bp.astype(F32, copy=False), below, above


def nudge_tile(num_bits: int, narrow_range: bool, bounds_value: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A core's first compute: the nudged bounds of ``[min, max]``, and its two sums zeroed."""
    nmin, nmax = nudge(bounds_value[0], bounds_value[1], num_bits, narrow_range)
    return np.array([nmin, nmax], F32), np.zeros(2, F32)


def masked_tile(dtype: np.dtype, g: np.ndarray, x: np.ndarray, nudged_value: np.ndarray,
                acc_value: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One data tile: the input gradient (in ``dtype``), and the core's two sums with this tile's added."""
    bp, below, above = masked(g, x, nudged_value[0], nudged_value[1])
    return bp.astype(dtype, copy=False), acc_value + np.array([below, above], F32)


def fake_quant_gradient_reference(gradients: np.ndarray, inputs: np.ndarray, min_value: float, max_value: float,
                                  num_bits: int = 8, narrow_range: bool = False
                                  ) -> tuple[np.ndarray, np.float32, np.float32]:
    """The whole op on whole arrays, as the chip computes it (input gradient in the gradients' dtype)."""
    nmin, nmax = nudge(min_value, max_value, num_bits, narrow_range)
    bp, wmin, wmax = masked(gradients, inputs, nmin, nmax)
    return bp.astype(gradients.dtype, copy=False), wmin, wmax


