"""The math of DepthwiseConv2dNativeBackpropInput: every tap's contribution accumulated into a block of the input
gradient, in the tensors' own layout (fp32 accumulation), the whole-tensor reference, and the tiles' computes."""

from __future__ import annotations

import numpy as np

from kernels.common.geometry import AxisTaps, ConvGeometry
from kernels.common.halves import widened

F32 = np.dtype(np.float32)


def _taps_channels_first(acc: np.ndarray, dy: np.ndarray, filt: np.ndarray, rows: AxisTaps, cols: AxisTaps,
                         stride_h: int, stride_w: int) -> None:
    """acc (ct, rows, cols) += taps of dy (ct·mult, o_rows, o_cols): inner loops along a row."""
    ct, mult = filt.shape[2], filt.shape[3]
    by_mult = dy.reshape((ct, mult) + dy.shape[1:])
    for kh, oh, nh, ih in rows.taps:
        h_sl = slice(ih, ih + (nh - 1) * stride_h + 1, stride_h)
        for kw, ow, nw, iw in cols.taps:
            w_sl = slice(iw, iw + (nw - 1) * stride_w + 1, stride_w)
            for m in range(mult):
                acc[:, h_sl, w_sl] += by_mult[:, m, oh:oh + nh, ow:ow + nw] * filt[kh, kw, :, m, None, None]


def _taps_channels_last(acc: np.ndarray, dy: np.ndarray, filt: np.ndarray, rows: AxisTaps, cols: AxisTaps,
                        stride_h: int, stride_w: int) -> None:
    """acc (rows, cols, ct) += taps of dy (o_rows, o_cols, ct·mult), both C-contiguous.

    Each row is taken as one flat run of cols·ct elements against the filter
    tiled along it (long inner loops rather than one of ct elements per pixel);
    output channel c·mult + m of a run is every mult-th element from m.
    """
    fh, fw, ct, mult = filt.shape
    width, o_width = acc.shape[1], dy.shape[1]
    k = ct * mult
    acc2 = acc.reshape(acc.shape[0], width * ct)
    dy2 = dy.reshape(dy.shape[0], o_width * k)
    n_run = max((t[2] for t in cols.taps), default=0)
    # tiled[kh, kw, m] = filter[kh, kw, :, m] repeated n_run times
    tiled = np.broadcast_to(filt.transpose(0, 1, 3, 2)[:, :, :, None, :], (fh, fw, mult, n_run, ct))
    tiled = tiled.reshape(fh, fw, mult, n_run * ct)
    for kh, oh, nh, ih in rows.taps:
        h_sl = slice(ih, ih + (nh - 1) * stride_h + 1, stride_h)
        for kw, ow, nw, iw in cols.taps:
            if stride_w == 1:
                dst = acc2[h_sl, iw * ct:(iw + nw) * ct]
            else:
                dst = acc[h_sl, iw:iw + (nw - 1) * stride_w + 1:stride_w]
            for m in range(mult):
                start = ow * k + m
                src = dy2[oh:oh + nh, start:start + (nw * ct - 1) * mult + 1:mult]
                if stride_w == 1:
                    dst += src * tiled[kh, kw, m, :nw * ct]
                else:
                    dst += src.reshape(nh, nw, ct) * filt[kh, kw, :, m]


def accumulate_taps(acc: np.ndarray, dy: np.ndarray, filt: np.ndarray, rows: AxisTaps, cols: AxisTaps,
                    stride_h: int, stride_w: int, channels_first: bool) -> None:
    """Add every tap's contribution into ``acc`` in place (fp32), in the tensors' own layout.

    ``acc`` is the tile's output block, (ct, rows, cols) channels-first or
    (rows, cols, ct) channels-last; ``dy`` its out_backprop halo, (ct·mult,
    o_rows, o_cols) or (o_rows, o_cols, ct·mult); ``filt`` (fh, fw, ct, mult).
    Output channel c·mult + m feeds input channel c through filter[..., c, m].
    """
    dy = np.ascontiguousarray(dy)
    if channels_first:
        _taps_channels_first(acc, dy, filt, rows, cols, stride_h, stride_w)
    else:
        _taps_channels_last(acc, dy, filt, rows, cols, stride_h, stride_w)


def depthwise_conv2d_backprop_input(filt: np.ndarray, out_backprop: np.ndarray, geo: ConvGeometry) -> np.ndarray:
    """The whole input gradient in one vectorised pass (fp32 accumulation, result in the inputs' dtype).

    Tensors are in ``geo.data_format`` order; this is the math each tile runs, on the whole tensor.
    """
    f = filt.astype(F32, copy=False)
    dy = out_backprop.astype(F32, copy=False)
    acc = np.zeros(geo.tensor_shape(geo.in_c), F32)
    rows, cols = geo.row_taps(0, geo.in_h), geo.col_taps(0, geo.in_w)
    for n in range(geo.batch):
        halo = dy[n, :, rows.o_lo:, cols.o_lo:] if geo.nchw else dy[n, rows.o_lo:, cols.o_lo:]
        accumulate_taps(acc[n], halo, f, rows, cols, geo.stride_h, geo.stride_w, geo.nchw)
    return acc.astype(out_backprop.dtype, copy=False)


def tile_block(rows: AxisTaps, cols: AxisTaps, geo: ConvGeometry, ct: int, out_dtype: np.dtype,
               filt: np.ndarray, dy: np.ndarray) -> tuple[np.ndarray]:
    """The compute of one tile (a :class:`TileFn` of its taps, geometry, channels and dtype): (filter slice,
    out_backprop halo) -> output block, in the tensors' layout."""
    acc = np.zeros(geo.order(1, rows.hi - rows.lo, cols.hi - cols.lo, ct)[1:], F32)
    accumulate_taps(acc, widened(dy[0]), widened(filt), rows, cols, geo.stride_h, geo.stride_w, geo.nchw)
    return (acc[None].astype(out_dtype, copy=False),)


def zero_block(shape: tuple[int, ...], out_dtype: np.dtype) -> tuple[np.ndarray]:
    """The compute of a tile no out_backprop position reaches (strides skipping it, padding): zeros."""
    return (np.zeros(shape, out_dtype),)
