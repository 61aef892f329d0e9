"""The math of the filter gradient: a block's dW contribution, the reference of whole tensors, the tiles' computes."""

from __future__ import annotations

import numpy as np

from kernels.common.geometry import ConvGeometry, axis_taps
from kernels.common.halves import widened

F32 = np.dtype(np.float32)
#: The precision of the fp32 accumulator's own loops (the drain's cast, the reduction of partials).
COMPUTE_PRECISION = "fp32"


def filter_grad_block(x: np.ndarray, dy: np.ndarray, geo: ConvGeometry, fh: int, fw: int,
                      rows: tuple[int, int], nchw: bool) -> np.ndarray:
    """dW contribution [fh, fw, icg, ocg] (fp32) of output rows ``rows`` of a block of images.

    ``x`` holds the input rows the window of those output rows touches, clipped to the
    input ([nb, h, w, icg], or [nb, icg, h, w] when ``nchw``; h may be 0), ``dy`` the
    output rows ([nb, rows, out_w, ocg] or [nb, ocg, rows, out_w]).  Rows and columns
    outside the input read as zero (the padding).  The im2col matrix is filled tap by tap
    from the input itself: the padded window is never built, so its size (a large
    dilation or padding) costs no memory.
    """
    r0, r1 = rows
    nrows = r1 - r0
    # fp16 blocks widened once by table look-up (exact, as every tap's copy into the fp32 matrix would widen them)
    x, dy = widened(x), widened(dy)
    xf = x.transpose(0, 2, 3, 1) if nchw else x
    dyf = dy.transpose(0, 2, 3, 1) if nchw else dy
    nb, hl, wl, icg = xf.shape
    ocg = dyf.shape[3]
    # Window positions (relative to the first output row's window) of the loaded input: x starts at input
    # row max(top, 0) and input column 0, which sits pad_left into the window.
    top = r0 * geo.stride_h - geo.pad_top
    rows_in = axis_taps(0, hl, nrows, fh, geo.stride_h, geo.dilation_h, max(top, 0) - top)
    cols_in = axis_taps(0, wl, geo.out_w, fw, geo.stride_w, geo.dilation_w, geo.pad_left)
    cols = np.zeros((nb, nrows, geo.out_w, fh, fw, icg), F32)
    sh, sw = geo.stride_h, geo.stride_w
    for kh, oh, nh, ih in rows_in.taps:
        oh += rows_in.o_lo
        for kw, ow, nw, iw in cols_in.taps:
            ow += cols_in.o_lo
            taps = xf[:, ih:ih + (nh - 1) * sh + 1:sh, iw:iw + (nw - 1) * sw + 1:sw]
            cols[:, oh:oh + nh, ow:ow + nw, kh, kw, :] = taps
    positions = nb * nrows * geo.out_w
    dmat = np.ascontiguousarray(dyf, dtype=F32).reshape(positions, ocg)
    return (cols.reshape(positions, fh * fw * icg).T @ dmat).reshape(fh, fw, icg, ocg)


def conv2d_backprop_filter_reference(x: np.ndarray, dy: np.ndarray, geo: ConvGeometry, fh: int,
                                     fw: int) -> np.ndarray:
    """dW [fh, fw, in_c, out_c] of whole tensors in the call's data_format, fp32 accumulation (dtype of x)."""
    nchw = geo.data_format == "NCHW"
    return filter_grad_block(x, dy, geo, fh, fw, (0, geo.out_h), nchw).astype(x.dtype)


def row_tile(geo: ConvGeometry, fh: int, fw: int, rows: tuple[int, int], nchw: bool, has_x: bool, first: bool,
             x_shape: tuple[int, ...], *operands: np.ndarray) -> tuple[np.ndarray]:
    """The compute of one row tile (a :class:`TileFn` of its block): the block's contribution, added to the
    accumulator unless first."""
    ops = list(operands)
    # A tile whose window lies wholly in the padding loads no input: its x is an empty block.
    x = ops.pop(0) if has_x else np.zeros(x_shape, F32)
    dy = ops.pop(0)
    part = filter_grad_block(x, dy, geo, fh, fw, rows, nchw)
    return (part if first else np.add(ops[0], part, out=part),)


def cast_to(dtype: np.dtype, acc: np.ndarray) -> tuple[np.ndarray]:
    """The compute of a drain tile: the fp32 accumulator rows, cast to the output dtype."""
    return (acc.astype(dtype),)
