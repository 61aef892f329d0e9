"""kernels.common.geometry: which outputs of a convolution reach which inputs, against the definition.

An output position o of an axis reads input o·stride − pad + k·dilation through tap k (TensorFlow's
convolution); every expectation below is that rule applied by brute force or by hand.
"""

from __future__ import annotations

import itertools

import pytest

from kernels.common.geometry import (
    axis_taps,
    conv_geometry,
    halo_bound,
    image_segments,
    input_range,
    window_bound,
)

AXES = [(n_in, k, s, d, pad) for n_in, k, s, d, pad in itertools.product((1, 5, 9), (1, 2, 3), (1, 2, 3), (1, 2),
                                                                           (0, 1, 3))]


def _reads(o: int, k: int, s: int, d: int, pad: int) -> int:
    return o * s - pad + k * d


@pytest.mark.parametrize("n_in,ksize,stride,dilation,pad", AXES)
def test_axis_taps_lists_exactly_the_output_positions_landing_on_the_inputs(n_in, ksize, stride, dilation, pad):
    out_n = (n_in + 2 * pad - (ksize - 1) * dilation - 1) // stride + 1
    if out_n <= 0:
        return
    for lo, hi in [(a, b) for a in range(n_in) for b in range(a + 1, n_in + 1)]:
        taps = axis_taps(lo, hi, out_n, ksize, stride, dilation, pad)
        got = {(k, taps.o_lo + o0 + i, lo + i0 + i * stride) for k, o0, n, i0 in taps.taps for i in range(n)}
        want = {(k, o, _reads(o, k, stride, dilation, pad)) for k in range(ksize) for o in range(out_n)
                if lo <= _reads(o, k, stride, dilation, pad) < hi}
        assert got == want
        outputs = {o for _, o, _ in want}
        assert (taps.o_lo, taps.o_n) == ((min(outputs), max(outputs) - min(outputs) + 1) if outputs else (0, 0))
        assert taps.pairs == len(want)
        # No more outputs reach the inputs than the halo bound says.
        assert taps.o_n <= halo_bound(hi - lo, (ksize - 1) * dilation + 1, stride)


@pytest.mark.parametrize("n_in,ksize,stride,dilation,pad", AXES)
def test_input_range_is_what_the_windows_read(n_in, ksize, stride, dilation, pad):
    out_n = (n_in + 2 * pad - (ksize - 1) * dilation - 1) // stride + 1
    eff = (ksize - 1) * dilation + 1
    for o0, o1 in [(a, b) for a in range(out_n) for b in range(a + 1, out_n + 1)]:
        read = [_reads(o, k, stride, dilation, pad) for o in range(o0, o1) for k in range(ksize)]
        lo, hi = input_range(o0, o1, n_in, eff, stride, pad)
        inside = [i for i in read if 0 <= i < n_in]
        # The range covers every input read; its ends are the window's (clipped), so it may hold skipped inputs.
        assert all(lo <= i < hi for i in inside)
        assert (lo, hi) == (max(min(read), 0), min(max(read) + 1, n_in))
        assert max(read) - min(read) + 1 <= window_bound(o1 - o0, eff, stride)


def test_hand_derived_bounds():
    # 3-wide windows: 4 consecutive inputs are reached by 4 + 3 - 1 = 6 outputs at stride 1, by 3 at stride 2
    # (windows [0,2], [2,4], [4,6] meet inputs [1,4]); 3 outputs at stride 2 read (3 - 1)·2 + 3 = 7 inputs.
    assert halo_bound(4, 3, 1) == 6 and halo_bound(4, 3, 2) == 3
    assert window_bound(3, 3, 2) == 7
    # Output 2 of a stride-2 3-wide window padded by 1 reads inputs 3, 4, 5.
    assert input_range(2, 3, 8, 3, 2, 1) == (3, 6)


def test_image_segments_cut_a_flattened_row_range_at_image_boundaries():
    # Rows 5..17 of images of 6 rows: the last row of image 0, all of image 1, rows 0..4 of image 2.
    assert image_segments(5, 17, 6) == [(0, 5, 6), (1, 0, 6), (2, 0, 5)]
    assert image_segments(6, 12, 6) == [(1, 0, 6)]
    assert image_segments(3, 3, 6) == []


def test_geometry_orders_and_rows_in_the_calls_layout():
    geo = conv_geometry([2, 3, 7, 5], (3, 2), strides=[1, 1, 2, 1], padding="SAME", explicit_paddings=None,
                        data_format="NCHW", dilations=[1, 1, 1, 2])
    assert geo.nchw and geo.order(1, 2, 3, 4) == (1, 4, 2, 3)
    # NCHW [2, 3, 7, 5]: 7 rows at stride 2, SAME: out_h = ceil(7 / 2) = 4, total padding (4 - 1)·2 + 3 - 7 = 2,
    # 1 on top; output row 0 reads input rows -1..1, clipped to [0, 2).
    assert (geo.out_h, geo.pad_top) == (4, 1)
    assert geo.input_rows(0, 1) == (0, 2)
    assert geo.row_taps(0, 2) == axis_taps(0, 2, 4, 3, 2, 1, 1)
