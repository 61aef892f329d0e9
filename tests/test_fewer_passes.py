"""The branch-free numerics of fake quant and the batch norms give the bits the plain numpy formulas give."""

from __future__ import annotations

import numpy as np
import pytest

from kernels.common.halves import widened
from kernels.fake_quant_with_min_max_vars_gradient.numerics import masked, masked_gradients
from kernels.fused_batch_norm_grad.numerics import partial_sums, x_backprop_infer, x_backprop_train

F32 = np.float32
EVERY_FP16 = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)


def _plain_masked(g: np.ndarray, x: np.ndarray, lo: F32, hi: F32) -> tuple[np.ndarray, F32, F32]:
    """TensorFlow's formula on fp32 values: each mask 1.0 or 0.0, times the gradients, and the sums of those
    products; min = max = 0 (bounds ±inf, SPEC section 4) passes every gradient and gives zero sums."""
    g32, x32 = g.astype(F32), x.astype(F32)
    if (lo, hi) == (-np.inf, np.inf):
        return g32, F32(0), F32(0)
    one, zero = F32(1), F32(0)
    mask = [np.where(m, one, zero) for m in ((x32 >= lo) & (x32 <= hi), x32 < lo, x32 > hi)]
    return g32 * mask[0], (g32 * mask[1]).sum(dtype=F32), (g32 * mask[2]).sum(dtype=F32)


def _bits(a: np.ndarray) -> bytes:
    return np.ascontiguousarray(a).tobytes()


def test_widened_is_astype_for_every_fp16_pattern():
    assert _bits(widened(EVERY_FP16)) == _bits(EVERY_FP16.astype(F32))
    assert widened(EVERY_FP16.astype(F32)).dtype == F32


@pytest.mark.parametrize("lo,hi", [(-6.0, 6.0), (0.0, 1.0), (-1.0, 0.0), (1.0001, 1.0002), (-1e6, 1e6),
                                   (0.1, 0.1000001), (65504.0, 7e4), (-np.inf, np.inf)])
@pytest.mark.parametrize("dt", [np.float16, np.float32])
@pytest.mark.parametrize("finite", [True, False])
def test_masks_and_sums_match_the_formula_bit_for_bit(lo, hi, dt, finite):
    """Every fp16 pattern as an input (NaNs, ±inf, ±0, subnormals), bounds on, between and beside fp16 values;
    gradients of both signs and ±0, with NaNs and infinities among them or not (fp16 takes a path of its own for
    finite gradients)."""
    rng = np.random.default_rng(7)
    x = EVERY_FP16.astype(dt)
    g = rng.standard_normal(x.size).astype(dt)
    g[2::83], g[3::79] = -0.0, 0.0
    if not finite:
        g[::97], g[1::89] = np.nan, np.inf
    lo32, hi32 = F32(lo), F32(hi)
    for a, b in ((lo32, hi32), (np.nextafter(lo32, F32(np.inf)), np.nextafter(hi32, F32(-np.inf)))):
        with np.errstate(invalid="ignore"):
            want = _plain_masked(g, x, a, b)
            bp, below, above = masked(g, x, a, b)
            assert bp.dtype == np.dtype(dt)
            got = masked_gradients(g, x, a, b)
        assert [_bits(v) for v in got] == [_bits(v) for v in want]
        assert _bits(bp) == _bits(want[0].astype(dt)) and _bits(below) == _bits(want[1])


@pytest.mark.parametrize("dt", [np.float16, np.float32])
def test_batch_norm_blocks_match_the_formula_bit_for_bit(dt):
    rng = np.random.default_rng(11)
    x, dy = (rng.uniform(-2, 2, (9, 6, 5)).astype(dt) for _ in range(2))
    x.reshape(-1)[::13], dy.reshape(-1)[::17], dy.reshape(-1)[1::19] = np.nan, np.inf, np.nan
    mean, rs, scale, s1, s2 = (rng.uniform(0.5, 1.5, 6).astype(F32) for _ in range(5))
    mean[1] = np.nan
    pc = [v.reshape(1, -1, 1) for v in (mean, rs, scale, s1, s2)]
    xh = (x.astype(F32) - pc[0]) * pc[1]
    dyf = dy.astype(F32)
    m = F32(45)
    with np.errstate(invalid="ignore"):
        want_dx = (scale * rs / m).reshape(1, -1, 1) * (m * dyf - pc[3] - xh * pc[4])
        assert [_bits(v) for v in partial_sums(x, dy, mean, rs)] == [_bits(dyf.sum(axis=(0, 2), dtype=F32)),
                                                                     _bits((dyf * xh).sum(axis=(0, 2), dtype=F32))]
        assert _bits(x_backprop_train(x, dy, mean, rs, scale, s1, s2, 45, False)) == _bits(want_dx)
        # FusedBatchNormGrad: TensorFlow's form, scale·rs · ((dy − Σdy·(1/m)) − x̂·(Σdy·x̂/m))
        want_tf = (scale * rs).reshape(1, -1, 1) * ((dyf - (s1 * (F32(1) / m)).reshape(1, -1, 1))
                                                    - xh * (s2 / m).reshape(1, -1, 1))
        assert _bits(x_backprop_train(x, dy, mean, rs, scale, s1, s2, 45, True)) == _bits(want_tf)
    assert _bits(x_backprop_infer(dy, rs, scale)) == _bits(dyf * (scale * rs).reshape(1, -1, 1))
