"""Batch-norm gradient numerics (fp32, as the chip computes them) and the flop table the plans count."""

from __future__ import annotations

import numpy as np

from kernels.common.denormals import flushed, flushed_array
from kernels.common.halves import widened
from kernels.fused_batch_norm_grad.attrs import View

F32 = np.dtype(np.float32)

FORMATS = ("NHWC", "NCHW")
#: The chip widens fp16 and accumulates in fp32 for both symbol precisions.
COMPUTE_PRECISION = "fp32"
#: The flop table (BatchNormGrad's too). Vector element operations per element of a tile (FMA = 2):
FLOPS_XHAT = 2          # (x - mean) * rs
FLOPS_SUMS = 3          # Σdy += dy; Σdy·x̂ += dy·x̂ (FMA)
FLOPS_DX_TRAIN = 4      # dy − a, x̂·b, that subtracted, · k
FLOPS_DX_INFER = 1      # dy · k
#: Per-channel vector work: rs = rsqrt(var + eps) (2; none when rs is given), k = scale·rs (1), a = Σdy/m,
#: b = Σdy·x̂/m (2).
FLOPS_CHANNEL_RS = 2
FLOPS_CHANNEL_COEF = 3
#: Fraction of the vector level the rows plan may spend on its per-channel vectors and partials.
FIXED_AREA_FRACTION = 4
#: The two plans a caller's ``tiling`` may name.
SPLITS = ("channels", "rows")


def rsqrt_var(variance: np.ndarray, epsilon: float) -> np.ndarray:
    """rsqrt(variance + epsilon) in fp32, subnormal operands and sums read as zeros (kernels.common.denormals: a
    sum below the smallest normal value gives an infinite rs, as in TensorFlow)."""
    v = flushed_array(flushed_array(variance) + flushed(F32.type(epsilon)))
    with np.errstate(invalid="ignore", divide="ignore"):
        return (F32.type(1.0) / np.sqrt(v)).astype(F32)


def _per_channel(v: np.ndarray) -> np.ndarray:
    return np.asarray(v, F32).reshape(1, -1, 1)


def _in_f32(op: np.ufunc, first: np.ndarray | np.float32, block: np.ndarray, *, block_first: bool) -> np.ndarray:
    """``op`` of a block (in fp32: an fp16 block :func:`widened` first) and ``first`` (a scalar or per-channel
    vector), the block the left operand when ``block_first``, in a new fp32 array (a widened block's own)."""
    if block.dtype == F32:
        return op(block, first) if block_first else op(first, block)
    wide = widened(block)
    return op(wide, first, out=wide) if block_first else op(first, wide, out=wide)


def _xhat(x: np.ndarray, mean: np.ndarray, rs: np.ndarray) -> np.ndarray:
    """x̂ = (x - mean) · rs of a [a, c, b] block in fp32, in a new array (one for both steps)."""
    xh = _in_f32(np.subtract, _per_channel(mean), x, block_first=True)
    return np.multiply(xh, _per_channel(rs), out=xh)


def partial_sums(x: np.ndarray, dy: np.ndarray, mean: np.ndarray, rs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(Σdy, Σdy·x̂) per channel of a [a, c, b] block, in fp32."""
    dyf = widened(dy)
    prod = _xhat(x, mean, rs)
    np.multiply(dyf, prod, out=prod)
    return dyf.sum(axis=(0, 2), dtype=F32), prod.sum(axis=(0, 2), dtype=F32)


def tf_coefficients(sum_dy: np.ndarray, sum_dy_xhat: np.ndarray, m: int) -> tuple[np.ndarray, np.ndarray]:
    """(a, b) of TensorFlow's training x_backprop in fp32: a = Σdy · (1/m) (its ``rest_size_inv``, a float32
    reciprocal), b = Σdy·x̂ / m."""
    mf = F32.type(m)
    return np.multiply(sum_dy, F32.type(1.0) / mf, dtype=F32), np.divide(sum_dy_xhat, mf, dtype=F32)


def x_backprop_train(x: np.ndarray, dy: np.ndarray, mean: np.ndarray, rs: np.ndarray, scale: np.ndarray,
                     sum_dy: np.ndarray, sum_dy_xhat: np.ndarray, m: int, tf_form: bool) -> np.ndarray:
    """Training x_backprop of a [a, c, b] block from the whole-batch sums, in fp32, each step rounded to fp32 in
    its order (and with its operands in that order: of two NaNs, x86 keeps the first's).

    ``tf_form`` (FusedBatchNormGrad, TensorFlow's CPU kernel): scale·rs · ((dy − a) − x̂·b) with a = Σdy/m and
    b = Σdy·x̂/m (:func:`tf_coefficients`), whose intermediates stay in range where dy does; otherwise
    (BatchNormGrad, the library's page) k · ((m·dy − Σdy) − x̂·Σdy·x̂) with k = scale·rs/m."""
    mf = F32.type(m)
    xh = _xhat(x, mean, rs)
    if tf_form:
        a, b = tf_coefficients(sum_dy, sum_dy_xhat, m)
        t = _in_f32(np.subtract, _per_channel(a), dy, block_first=True)
        np.multiply(xh, _per_channel(b), out=xh)
        np.subtract(t, xh, out=t)
        return np.multiply(_per_channel(np.asarray(scale, F32) * rs), t, out=t)
    t = _in_f32(np.multiply, mf, dy, block_first=False)
    np.subtract(t, _per_channel(sum_dy), out=t)
    np.multiply(xh, _per_channel(sum_dy_xhat), out=xh)
    np.subtract(t, xh, out=t)
    return np.multiply(_per_channel(np.asarray(scale, F32) * rs / mf), t, out=t)


def x_backprop_infer(dy: np.ndarray, rs: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """Inference x_backprop of a [a, c, b] block, in fp32."""
    return widened(dy) * _per_channel(np.asarray(scale, F32) * rs)


def rs_of(variance_or_rs: np.ndarray, epsilon: float | None) -> np.ndarray:
    """rsqrt(variance + epsilon), or the given rs itself when ``epsilon`` is None (BatchNormGrad's invar)."""
    return rsqrt_var(variance_or_rs, epsilon) if epsilon is not None else flushed_array(variance_or_rs)


def batch_norm_backprop(x: np.ndarray, dy: np.ndarray, mean: np.ndarray, rs: np.ndarray, scale: np.ndarray,
                        is_training: bool, tf_form: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(x_backprop in x's dtype, Σdy·x̂, Σdy) of a whole [A, C, B] view, computed like the chip does
    (``tf_form``: :func:`x_backprop_train`)."""
    s1, s2 = partial_sums(x, dy, mean, rs)
    if is_training:
        dx = x_backprop_train(x, dy, mean, rs, scale, s1, s2, x.shape[0] * x.shape[2], tf_form)
    else:
        dx = x_backprop_infer(dy, rs, scale)
    return dx.astype(x.dtype, copy=False), s2, s1


def fused_batch_norm_grad_reference(dy: np.ndarray, x: np.ndarray, scale: np.ndarray, mean: np.ndarray,
                                    variance: np.ndarray, epsilon: float, data_format: str,
                                    is_training: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(x_backprop, scale_backprop, offset_backprop) of whole 4-D tensors, computed like the chip does."""
    v = View.of(x.shape, data_format)
    dx, s2, s1 = batch_norm_backprop(x.reshape(v.shape), dy.reshape(v.shape), mean, rsqrt_var(variance, epsilon),
                                     scale, is_training, True)
    return dx.reshape(x.shape), s2, s1


# --- the tiles' compute functions (module-level, so that a tile states them as TileFn values) ---------------

def _channel(v: np.ndarray) -> np.ndarray:
    """A per-channel vector in fp32, shaped to broadcast along a [a, c, b] block (as :func:`_per_channel`)."""
    return (v if v.dtype == F32 else v.astype(F32)).reshape(1, -1, 1)


def _fresh_f32(block: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """``block`` in fp32 and where an operation on it may write its result: into the widened copy of an fp16
    block, or a new array (None) for an fp32 block, which is read-only memory."""
    wide = widened(block)
    return wide, (None if wide is block else wide)


def _xhat_block(x: np.ndarray, mean: np.ndarray, rs: np.ndarray) -> np.ndarray:
    """:func:`_xhat` in two ufunc calls: (x - mean) · rs in fp32, in a new array."""
    xw, into = _fresh_f32(x)
    xh = np.subtract(xw, _channel(mean), out=into)
    return np.multiply(xh, _channel(rs), out=xh)


# The tiles' functions below run once per tile, on small blocks, so each is written as the few ufunc calls it needs
# (no helper calls, the reductions called directly): the same operations on the same operands in the same order as
# the reference functions above, so the same bits (tests/test_tile_numerics.py compares them).

def sums_tile(x: np.ndarray, dy: np.ndarray, mean: np.ndarray, rs: np.ndarray, s1: np.ndarray,
              s2: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A row block's two sums (:func:`partial_sums`) added to the running ones."""
    dyf = widened(dy)
    prod = _xhat_block(x, mean, rs)
    np.multiply(dyf, prod, out=prod)
    d1 = np.add.reduce(dyf, axis=(0, 2), dtype=F32)
    d2 = np.add.reduce(prod, axis=(0, 2), dtype=F32)
    return np.add(s1, d1, out=d1), np.add(s2, d2, out=d2)


def sums_and_dx_infer_tile(dtype: np.dtype, x: np.ndarray, dy: np.ndarray, mean: np.ndarray, rs: np.ndarray,
                           scale: np.ndarray, s1: np.ndarray, s2: np.ndarray) -> tuple[np.ndarray, ...]:
    """Inference's row block: x_backprop (in ``dtype``) and the two sums added to the running ones."""
    d1, d2 = partial_sums(x, dy, mean, rs)
    return x_backprop_infer(dy, rs, scale).astype(dtype, copy=False), s1 + d1, s2 + d2


def dx_train_tile(m: int, dtype: np.dtype, tf_form: bool, x: np.ndarray, dy: np.ndarray, mean: np.ndarray,
                  rs: np.ndarray, scale: np.ndarray, s1: np.ndarray, s2: np.ndarray) -> tuple[np.ndarray]:
    """Training's row block: x_backprop (:func:`x_backprop_train`, in ``dtype``) from the reduced sums over ``m``
    elements per channel."""
    mf = F32.type(m)
    dyw, into = _fresh_f32(dy)
    if tf_form:
        a, b = tf_coefficients(s1, s2, m)
        t = np.subtract(dyw, _channel(a), out=into)
        xh = _xhat_block(x, mean, rs)
        np.multiply(xh, _channel(b), out=xh)
        np.subtract(t, xh, out=t)
        k = np.multiply(scale if scale.dtype == F32 else scale.astype(F32), rs)
        return (np.multiply(k.reshape(1, -1, 1), t, out=t).astype(dtype, copy=False),)
    t = np.multiply(mf, dyw, out=into)
    np.subtract(t, _channel(s1), out=t)
    xh = _xhat_block(x, mean, rs)
    np.multiply(xh, _channel(s2), out=xh)
    np.subtract(t, xh, out=t)
    k = np.multiply(scale if scale.dtype == F32 else scale.astype(F32), rs)
    np.divide(k, mf, out=k)
    return (np.multiply(k.reshape(1, -1, 1), t, out=t).astype(dtype, copy=False),)


def rs_and_zero_sums_tile(epsilon: float | None, channels: int, var: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A core's first tile: rsqrt(var + eps) of its channels, and its two sums zeroed."""
    return rs_of(var, epsilon), np.zeros((2, channels), F32)


def channel_block_tile(epsilon: float | None, training: bool, tf_form: bool, x: np.ndarray, dy: np.ndarray,
                       mean: np.ndarray, var: np.ndarray, scale: np.ndarray) -> tuple[np.ndarray, ...]:
    """A whole-rows channel block: x_backprop and both per-channel gradients at once."""
    return batch_norm_backprop(x, dy, mean, rs_of(var, epsilon), scale, training, tf_form)
