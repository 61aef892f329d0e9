"""The property every kernel's tiling space must have, for tests/test_tiling_spaces.py and the longer run of
bench/tiling_property.py: every candidate the space offers either plans legally (passes every rule of the plan
check) or is refused as not fitting (``DoesNotFit``, or the plan-size budget) -- never a ``PlanError``, a
foreign exception or an inconsistent tiling -- and the search over the space either chooses a plan or says
that nothing fits.

A call is drawn per kernel: shapes from tiny to large with odd sizes, 1 to all cores, both chips, both
variants, both precisions (where the chip has them).  Buffers lie 64 MiB apart in DDR (``_s``) or 1 MiB apart
in the core's private l2 (``_p``, small shapes only).
"""

from __future__ import annotations

import math

from hypothesis import strategies as st

import sim
from sim.testing import check_tiling_space

CHIPS = ("FT78NE", "MT7004")
TARGETS = {c: sim.load_target(c) for c in CHIPS}
KERNELS = ("batch_norm_grad", "fused_batch_norm_grad", "fake_quant_with_min_max_vars_gradient",
           "conv2d_backprop_filter", "depthwise_conv2d_backprop_input", "gemm")
#: Bytes a shared buffer may take (they lie this far apart) and a private one.
SHARED_BYTES, PRIVATE_BYTES = 64 << 20, 1 << 20


def addresses(variant: str) -> list[int]:
    """Buffer addresses: 64 MiB apart in DDR, or 1 MiB apart in l2."""
    if variant == "s":
        return [0x80000000 + k * SHARED_BYTES for k in range(16)]
    return [0x10000000 + k * PRIVATE_BYTES for k in range(16)]


def _dims(draw, n: int, hi: int) -> list[int]:
    """``n`` sizes, each tiny, small or odd up to ``hi``."""
    return [draw(st.one_of(st.integers(1, 4), st.integers(5, 40), st.integers(41, max(41, hi)))) for _ in range(n)]


@st.composite
def calls(draw, kernel: str, scale: int = 1) -> tuple[str, str, dict]:
    """(chip, symbol, call arguments) of a drawn call of ``kernel``; ``scale`` widens the largest sizes."""
    chip = draw(st.sampled_from(CHIPS))
    t = TARGETS[chip]
    prefix = draw(st.sampled_from([p for p, prec in (("fp", "fp32"), ("hp", "fp16")) if prec in t.precisions]))
    variant = draw(st.sampled_from(("s", "p")))
    isz = 4 if prefix == "fp" else 2
    cap = (SHARED_BYTES if variant == "s" else PRIVATE_BYTES) // isz  # elements a buffer may hold
    A = addresses(variant)
    where = ({"core_mask": draw(st.integers(1, t.all_cores_mask))} if variant == "s"
             else {"core": draw(st.integers(0, t.cores - 1))})

    def fit(dims: list[int]) -> list[int]:
        while math.prod(dims) > cap:  # shrink the largest until the buffer fits its slot
            i = dims.index(max(dims))
            dims[i] = max(1, dims[i] // 2)
        return dims

    if kernel == "batch_norm_grad":
        b, c = fit(_dims(draw, 2, 3000 * scale))
        args = dict(x=A[0], dy=A[1], dx=A[2], params=[A[3], A[4], A[5], A[6], A[7], b, c, draw(st.integers(0, 1))])
    elif kernel == "fused_batch_norm_grad":
        shape = fit(_dims(draw, 4, 60 * scale))
        args = dict(y_backprop=A[0], x=A[1], scale=A[2], reserve_space_1=A[3], reserve_space_2=A[4],
                    x_backprop=A[5], scale_backprop=A[6], offset_backprop=A[7], shape=shape,
                    data_format=draw(st.sampled_from(("NHWC", "NCHW"))), is_training=draw(st.booleans()))
    elif kernel == "fake_quant_with_min_max_vars_gradient":
        shape = fit(_dims(draw, draw(st.integers(1, 3)), 400 * scale))
        args = dict(gradients=A[0], inputs=A[1], min=A[2], max=A[3], backprops_wrt_input=A[4],
                    backprop_wrt_min=A[5], backprop_wrt_max=A[6], shape=shape,
                    num_bits=draw(st.integers(2, 8)), narrow_range=draw(st.booleans()))
    elif kernel == "gemm":
        m, n, k = _dims(draw, 3, 700 * scale)
        ta, tb = draw(st.integers(0, 1)), draw(st.integers(0, 1))
        m, k = fit([m, k])
        k, n = fit([k, n])
        m, n = fit([m, n])
        args = dict(a=A[0], b=A[1], c=A[2], m=m, n=n, k=k, trans_a=ta, trans_b=tb, beta=draw(st.integers(0, 1)))
    else:
        nb, h, w = draw(st.integers(1, 4)), *_dims(draw, 2, 30 * scale)
        c = draw(st.integers(1, 48 * scale))
        fh, fw = draw(st.integers(1, min(h, 5))), draw(st.integers(1, min(w, 5)))
        stride, dil = draw(st.integers(1, 3)), draw(st.integers(1, 2))
        padding = draw(st.sampled_from(("SAME", "VALID")))
        eff_h, eff_w = (fh - 1) * dil + 1, (fw - 1) * dil + 1
        if padding == "VALID" and (eff_h > h or eff_w > w):
            padding = "SAME"
        fmt = draw(st.sampled_from(("NHWC", "NCHW")))
        nb, h, w, c = fit([nb, h, w, c])
        order = (lambda a, b, cc, d: [a, b, cc, d]) if fmt == "NHWC" else (lambda a, b, cc, d: [a, d, b, cc])
        common = dict(strides=order(1, stride, stride, 1), padding=padding, data_format=fmt,
                      dilations=order(1, dil, dil, 1))
        if kernel == "conv2d_backprop_filter":
            oc = draw(st.integers(1, 48 * scale))
            args = dict(input=A[0], out_backprop=A[1], output=A[2], input_shape=order(nb, h, w, c),
                        filter_sizes=[fh, fw, c, oc], **common)
        else:
            mult = draw(st.integers(1, 3))
            args = dict(filter=A[0], out_backprop=A[1], output=A[2], input_sizes=order(nb, h, w, c),
                        filter_shape=[fh, fw, c, mult], **common)
    return chip, f"{prefix}_{kernel}_{variant}", {**args, **where}


def sample(pool: list[dict], data, most: int) -> list[dict]:
    """The candidates to check: the kernel's preferred ones, the last, and others drawn (at most ``most``)."""
    if len(pool) <= most:
        return pool
    picked = pool[:2] + [pool[-1]]
    rest = [t for t in pool if t not in picked]
    picked += data.draw(st.lists(st.sampled_from(rest), min_size=1, max_size=most - 3, unique_by=repr))
    return picked


def check_space(chip: str, symbol: str, args: dict, data, most: int = 6) -> None:
    """The property, for one call (:func:`sim.testing.check_tiling_space`, the candidates drawn by ``data``)."""
    check_tiling_space(chip, symbol, args, pick=lambda pool: sample(pool, data, most))
