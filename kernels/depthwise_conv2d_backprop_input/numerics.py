"""The math of DepthwiseConv2dNativeBackpropInput: every tap's contribution accumulated into a block of the input
gradient, in the tensors' own layout (fp32 accumulation), the whole-tensor reference, and the tiles' computes."""

from __future__ import annotations

import numpy as np

from kernels.common.geometry import AxisTaps, ConvGeometry
from kernels.common.halves import widened

F32 = np.dtype(np.float32)
#: numpy's fp32 loops run a contiguous run in vectors of up to 16 lanes (AVX-512; 8 with AVX2) and its last
#: ``len % 16`` elements one by one, and that scalar tail keeps the second operand's payload where two NaNs meet (the
#: vectors keep the first's): where a run ends decides those bits, so the flat runs below are taken only when every
#: run either way is a whole number of vectors (no tail at all).
_LANES = 16
#: The longest rows (elements) taken as flat runs: numpy runs 2-D operations over rows that are not contiguous at
#: about a third of its contiguous speed when they are short (rows of 1,792 elements: MT7004's depthwise tiles),
#: but at nearly full speed from about 3,000 on (FT78NE's rows of 3,584), where the flat runs' whole-row products
#: cost more than they save (measured with bench/repeat_calls.py; the bits are the same either way).
_FLAT_ROWS_MAX = 2048


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
                        stride_h: int, stride_w: int, zeroed: bool = False) -> None:
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
    if zeroed and mult == 1 and stride_h == 1 and stride_w == 1 and width == o_width and ct % _LANES == 0 \
            and width * ct <= _FLAT_ROWS_MAX:
        _taps_flat_runs(acc2, dy2, filt[:, :, :, 0], rows, cols)
        return
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


def _taps_flat_runs(acc2: np.ndarray, dy2: np.ndarray, filt: np.ndarray, rows: AxisTaps, cols: AxisTaps) -> None:
    """:func:`_taps_channels_last`'s loop when the rows of ``acc2`` and of ``dy2`` (both C-contiguous) are alike
    (stride 1, one output channel per input channel, as many output columns as input ones), ``filt`` (fh, fw, ct).

    numpy runs a 2-D operation over rows that are not contiguous (a tap short of the full width) several times
    slower than over contiguous ones, so each tap multiplies the whole rows of dy it reads by its filter row
    (zeros in the columns it does not reach: no product there can overflow), sets those columns of the products to
    +0.0 (a zero times an infinity is a NaN), and adds the products, as one flat run from the tap's first element to
    its last, into the accumulator's run of the same length.  Adding +0.0 leaves the pixels the tap does not reach
    as they are: an accumulator that starts at +0.0 and only has products added never holds -0.0 (x + y is -0.0 in
    round-to-nearest only when both are), and x + 0.0 is x for every other x, infinities and NaNs (their payloads)
    included.  So each element gets the same products, added in the same order, as the 2-D loop gives it; and with
    rows a whole number of :data:`_LANES` long, no element falls in numpy's scalar tail either way."""
    width_ct, ct = acc2.shape[1], filt.shape[2]
    accf = acc2.reshape(-1)
    # pattern[kh, kw] = the filter row of tap (kh, kw) along a whole row, zeros in the columns it does not reach
    pattern = np.tile(filt, (1, 1, width_ct // ct))
    for kw, ow, nw, _ in cols.taps:
        pattern[:, kw, :ow * ct] = 0
        pattern[:, kw, (ow + nw) * ct:] = 0
    # (one block for every tap's products: a new array per tap, over the allocator's threshold, costs page faults)
    block = np.empty((max((t[2] for t in rows.taps), default=0), width_ct), np.float32)
    with np.errstate(invalid="ignore"):  # (zeros times infinities, in the columns set to zero below)
        for kh, oh, nh, ih in rows.taps:
            for kw, ow, nw, iw in cols.taps:
                n = nw * ct
                if nh <= 0 or n <= 0:
                    continue
                prod = np.multiply(dy2[oh:oh + nh], pattern[kh, kw], out=block[:nh])
                if n < width_ct:
                    prod[:, :ow * ct] = 0
                    prod[:, ow * ct + n:] = 0
                span = (nh - 1) * width_ct + n
                dst = accf[ih * width_ct + iw * ct:][:span]
                np.add(dst, prod.reshape(-1)[ow * ct:][:span], out=dst)


def accumulate_taps(acc: np.ndarray, dy: np.ndarray, filt: np.ndarray, rows: AxisTaps, cols: AxisTaps,
                    stride_h: int, stride_w: int, channels_first: bool, zeroed: bool = False) -> None:
    """Add every tap's contribution into ``acc`` in place (fp32), in the tensors' own layout.

    ``acc`` is the tile's output block, (ct, rows, cols) channels-first or
    (rows, cols, ct) channels-last; ``dy`` its out_backprop halo, (ct·mult,
    o_rows, o_cols) or (o_rows, o_cols, ct·mult); ``filt`` (fh, fw, ct, mult).
    Output channel c·mult + m feeds input channel c through filter[..., c, m].
    ``zeroed``: ``acc`` holds +0.0 everywhere (a fresh block), which lets the
    flat runs add +0.0 where a tap does not reach.
    """
    dy = np.ascontiguousarray(dy)
    if channels_first:
        _taps_channels_first(acc, dy, filt, rows, cols, stride_h, stride_w)
    else:
        _taps_channels_last(acc, dy, filt, rows, cols, stride_h, stride_w, zeroed)


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
        accumulate_taps(acc[n], halo, f, rows, cols, geo.stride_h, geo.stride_w, geo.nchw, zeroed=True)
    return acc.astype(out_backprop.dtype, copy=False)


def tile_block(rows: AxisTaps, cols: AxisTaps, geo: ConvGeometry, ct: int, out_dtype: np.dtype,
               filt: np.ndarray, dy: np.ndarray) -> tuple[np.ndarray]:
    """The compute of one tile (a :class:`TileFn` of its taps, geometry, channels and dtype): (filter slice,
    out_backprop halo) -> output block, in the tensors' layout."""
    acc = np.zeros(geo.order(1, rows.hi - rows.lo, cols.hi - cols.lo, ct)[1:], F32)
    accumulate_taps(acc, widened(dy[0]), widened(filt), rows, cols, geo.stride_h, geo.stride_w, geo.nchw,
                    zeroed=True)
    return (acc[None].astype(out_dtype, copy=False),)


def zero_block(shape: tuple[int, ...], out_dtype: np.dtype) -> tuple[np.ndarray]:
    """The compute of a tile no out_backprop position reaches (strides skipping it, padding): zeros."""
    return (np.zeros(shape, out_dtype),)
