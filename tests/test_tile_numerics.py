"""The tiles' compute functions written for speed give the bits of the plain formulas they replace, NaN payloads,
infinities, signed zeros and subnormals included; a repeated call's replay names a tile function's failure as a
simulated call does, and notices a function replaced after its program was kept."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import sim
from kernels.common import halves
from kernels.common.geometry import ConvGeometry
from kernels.common.halves import widened, widened_again
from kernels.depthwise_conv2d_backprop_input import numerics as depthwise
from kernels.examples import example
from kernels.fused_batch_norm_grad.numerics import dx_train_tile, partial_sums, sums_tile, x_backprop_train

F32 = np.float32


def _with_specials(rng: np.random.Generator, shape: tuple[int, ...], dtype: type) -> np.ndarray:
    """Normal values with NaNs of several payloads and both signs, infinities, signed zeros and subnormals among
    them (NaNs meeting NaNs: which payload an operation keeps shows in the bits)."""
    a = rng.standard_normal(shape).astype(F32)
    flat = a.reshape(-1)
    special = np.array([np.inf, -np.inf, -0.0, 0.0, 1e-40, -1e-40, 3e38, -3e38], F32)
    flat[rng.integers(0, flat.size, max(1, flat.size // 40))] = special[rng.integers(0, special.size,
                                                                                   max(1, flat.size // 40))]
    nans = rng.integers(0, flat.size, max(2, flat.size // 40))
    payloads = rng.integers(1, 1 << 22, nans.size).astype(np.uint32) | (1 << 22)
    signs = rng.integers(0, 2, nans.size).astype(np.uint32) << 31
    flat.view(np.uint32)[nans] = 0x7F800000 | payloads | signs
    with np.errstate(over="ignore"):
        return a.astype(dtype)


def _frozen(*arrays: np.ndarray) -> list[np.ndarray]:
    out = []
    for a in arrays:
        a = a.copy()
        a.flags.writeable = False  # (as the replay passes its inputs: read-only views of memory)
        out.append(a)
    return out


@pytest.mark.parametrize("tf_form", [True, False])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("shape", [(42, 64, 1), (5, 3, 4), (1, 7, 1)])
def test_batch_norm_row_tiles_give_the_reference_formulas_bits(dtype, shape, tf_form):
    rng = np.random.default_rng(hash((shape, dtype.__name__)) % 2**32)
    c = shape[1]
    x, dy = (_with_specials(rng, shape, dtype) for _ in range(2))
    mean, rs, scale, s1, s2 = (_with_specials(rng, (c,), F32) for _ in range(5))
    x, dy, mean, rs, scale, s1, s2 = _frozen(x, dy, mean, rs, scale, s1, s2)
    with np.errstate(all="ignore"):
        got = sums_tile(x, dy, mean, rs, s1, s2)
        d1, d2 = partial_sums(x, dy, mean, rs)
        want = (s1 + d1, s2 + d2)
        m = shape[0] * shape[2] * 3
        got_dx = dx_train_tile(m, np.dtype(dtype), tf_form, x, dy, mean, rs, scale, s1, s2)
        want_dx = x_backprop_train(x, dy, mean, rs, scale, s1, s2, m, tf_form).astype(dtype)
    for g, w in zip((*got, *got_dx), (*want, want_dx)):
        assert g.dtype == w.dtype and g.shape == w.shape and g.tobytes() == w.tobytes()


def _depthwise_case(rng, height: int, width: int, ct: int, fh: int, fw: int, pad: int, dtype: type):
    geo = ConvGeometry(batch=1, in_h=height, in_w=width, in_c=ct, out_h=height + 2 * pad - fh + 1,
                       out_w=width + 2 * pad - fw + 1, filter_h=fh, filter_w=fw, stride_h=1, stride_w=1,
                       dilation_h=1, dilation_w=1, pad_top=pad, pad_bottom=pad, pad_left=pad, pad_right=pad,
                       data_format="NHWC")
    filt = _with_specials(rng, (fh, fw, ct, 1), dtype)
    dy = _with_specials(rng, (1, geo.out_h, geo.out_w, ct), dtype)
    return geo, filt, dy


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("case", [(20, 17, 16, 3, 3, 1), (13, 9, 32, 5, 5, 2), (11, 7, 16, 3, 1, 0),
                                  (16, 112, 16, 3, 3, 1)])
def test_depthwise_flat_runs_give_the_row_loops_bits(monkeypatch, dtype, case):
    """Each tile of a layer whose rows the flat runs take, against the 2-D loop over rows (the flat runs turned
    off): the same bits, row blocks at the top, in the middle and at the bottom."""
    rng = np.random.default_rng(sum(case))
    geo, filt, dy = _depthwise_case(rng, *case, dtype)
    taken = []
    flat_runs = depthwise._taps_flat_runs
    monkeypatch.setattr(depthwise, "_taps_flat_runs", lambda *a: (taken.append(1), flat_runs(*a))[1])
    cols = geo.col_taps(0, geo.in_w)
    for lo, hi in [(0, geo.in_h), (0, 4), (geo.in_h - 4, geo.in_h), (3, 7)]:
        rows = geo.row_taps(lo, hi)
        halo = dy[:, rows.o_lo:rows.o_lo + rows.o_n, cols.o_lo:cols.o_lo + cols.o_n]
        with np.errstate(all="ignore"):
            got = depthwise.tile_block(rows, cols, geo, geo.in_c, np.dtype(dtype), filt, halo)[0]
            with monkeypatch.context() as off:
                off.setattr(depthwise, "_FLAT_ROWS_MAX", 0)
                want = depthwise.tile_block(rows, cols, geo, geo.in_c, np.dtype(dtype), filt, halo)[0]
        assert got.tobytes() == want.tobytes(), (lo, hi)
    assert len(taken) == 4  # (the flat runs were taken, and turned off for the reference)


def test_depthwise_rows_with_a_scalar_tail_keep_the_row_loops(monkeypatch):
    """Channels that are not a whole number of vectors (rows of 8 channels) leave the 2-D loop in place: where
    numpy's scalar tail falls would change which of two NaNs a sum keeps."""
    rng = np.random.default_rng(3)
    geo, filt, dy = _depthwise_case(rng, 12, 9, 8, 3, 3, 1, np.float32)
    called = []
    flat_runs = depthwise._taps_flat_runs
    monkeypatch.setattr(depthwise, "_taps_flat_runs", lambda *a: (called.append(1), flat_runs(*a))[1])
    with np.errstate(all="ignore"):
        depthwise.tile_block(geo.row_taps(0, 12), geo.col_taps(0, 9), geo, 8, np.dtype(np.float32), filt, dy)
    assert not called


def test_accumulate_taps_into_a_block_that_is_not_fresh_keeps_its_negative_zeros(monkeypatch):
    """The flat runs add +0.0 where a tap does not reach, which is exact only on a fresh block of +0.0: a caller's
    block (accumulate_taps is public) keeps the 2-D loop unless it says the block is fresh.  A block of -0.0 that
    only -0.0 products reach stays -0.0 that way; the flat runs would turn some of it into +0.0 (where a 1x3
    tap does not reach)."""
    geo = ConvGeometry(batch=1, in_h=4, in_w=4, in_c=16, out_h=4, out_w=4, filter_h=1, filter_w=3, stride_h=1,
                       stride_w=1, dilation_h=1, dilation_w=1, pad_top=0, pad_bottom=0, pad_left=1, pad_right=1,
                       data_format="NHWC")
    called = []
    flat_runs = depthwise._taps_flat_runs
    monkeypatch.setattr(depthwise, "_taps_flat_runs", lambda *a: (called.append(1), flat_runs(*a))[1])
    rows, cols = geo.row_taps(0, 4), geo.col_taps(0, 4)
    dy, filt = np.full((4, 4, 16), -0.0, np.float32), np.ones((1, 3, 16, 1), np.float32)
    acc = np.full((4, 4, 16), -0.0, np.float32)
    depthwise.accumulate_taps(acc, dy, filt, rows, cols, 1, 1, False)
    assert not called and np.signbit(acc).all()
    flat = np.full((4, 4, 16), -0.0, np.float32)
    depthwise.accumulate_taps(flat, dy, filt, rows, cols, 1, 1, False, zeroed=True)  # (a wrong claim, to show why)
    assert called and not np.signbit(flat).all()


def test_widened_again_looks_up_unchanged_bytes_and_widens_changed_ones():
    rng = np.random.default_rng(5)
    a = _with_specials(rng, (64, 32), np.float16)
    first = widened_again(a)
    assert first.tobytes() == widened(a).tobytes() and not first.flags.writeable
    assert widened_again(a) is first  # the same bytes: looked up
    a[3, 4] = np.float16(7.5)  # one element changed in place (as a transfer into the buffer would)
    second = widened_again(a)
    assert second is not first and second.tobytes() == widened(a).tobytes()
    assert widened_again(a.T).tobytes() == widened(a.T).tobytes()  # (another view of the same buffer)
    b = a.astype(np.float32)
    assert widened_again(b) is b  # fp32: nothing to widen
    many = [rng.standard_normal(8).astype(np.float16) for _ in range(2 * halves._KEPT_OPERANDS)]
    for operand in many:  # many operands alive at once: only the last few are kept
        widened_again(operand)
    assert len(halves._kept.operands) == halves._KEPT_OPERANDS


def test_widened_again_keeps_its_operands_per_thread():
    a = np.arange(16, dtype=np.float16)
    mine = widened_again(a)
    theirs: list[np.ndarray] = []
    t = threading.Thread(target=lambda: theirs.append(widened_again(a)))
    t.start()
    t.join()
    assert theirs[0] is not mine and theirs[0].tobytes() == mine.tobytes()


def _kept_program_call():
    ex = example("fake_quant_with_min_max_vars_gradient", "medium", "FT78NE", "fp")
    m = sim.Simulator(ex.chip, tuning_cache=False)
    ex.place(m.write)
    run = m.call(ex.symbol, **ex.args)
    m.call(ex.symbol, **ex.args)  # (a replay: its program is kept with the memory)
    tile = next(t for ph in run.plan.phases for ts in ph.tiles.values() for t in ts
                if t.compute is not None and t.compute.outputs and t.loads)
    return ex, m, tile


def test_a_tile_function_failing_in_a_kept_program_is_named_and_rolled_back():
    ex, m, tile = _kept_program_call()
    # (the function the kept program calls: the TileFn's own)
    fn = tile.compute.fn
    calls = []

    def broken(*params_and_inputs):
        calls.append(1)
        raise ValueError("kernel bug in a kept program")
    object.__setattr__(fn, "fn", broken)
    before = m.memory.snapshot()
    with pytest.raises(sim.KernelCodeError, match="ValueError: kernel bug in a kept program") as raised:
        m.call(ex.symbol, **ex.args)
    assert calls and raised.value.tile == tile.tile_id
    assert m.memory.snapshot() == before


def test_a_tile_function_replaced_after_its_program_was_kept_is_called():
    """The program holds the function it was made of; a compute whose function is another by now is called
    through the engine's own check (here: results of another dtype, converted as a simulated call converts)."""
    ex, m, tile = _kept_program_call()
    fn = tile.compute.fn
    seen = []
    object.__setattr__(tile.compute, "fn",
                       lambda *a: (seen.append(1), [np.asarray(r, np.float64) for r in fn(*a)])[1])
    m.call(ex.symbol, **ex.args)
    assert seen
    plain = sim.Simulator(ex.chip, tuning_cache=False)
    ex.place(plain.write)
    plain.call(ex.symbol, **ex.args)
    for out in ex.outputs:
        got = m.read(out.addr, out.shape, out.dtype, core=out.core)
        want = plain.read(out.addr, out.shape, out.dtype, core=out.core)
        assert got.tobytes() == want.tobytes()
