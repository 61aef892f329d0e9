"""The examples col2im and depthwise_conv2d_backprop_filter (examples/) against references written here from their
formulas (TensorFlow's NHWC padding), on both chips and filters of 1 to 25 taps: a large filter's taps run in
passes whose loops fit the core's vector registers (kernels.common.loops.tap_groups), so a 4 x 4 filter (DCGAN's)
plans where it broke the plan rule loop-registers before."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

import sim
from kernels.common.loops import elementwise, tap_groups

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
A, B, C = 0x80000000, 0x84000000, 0x88000000


def _kernel(name: str):
    spec = importlib.util.spec_from_file_location(f"{name}_for_tests", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.KERNEL


def _geometry(size: int, f: int, s: int, padding: str) -> tuple[int, int]:
    """(output size, padding before) of one spatial dimension, as TensorFlow pads."""
    if padding == "VALID":
        return (size - f) // s + 1, 0
    out = -(-size // s)
    return out, max((out - 1) * s + f - size, 0) // 2


def _windows(h: int, w: int, fh: int, fw: int, s: int, padding: str):
    """Every (oh, ow, kh, kw, ih, iw) whose tap lands inside the input."""
    oh_n, pt = _geometry(h, fh, s, padding)
    ow_n, pl = _geometry(w, fw, s, padding)
    for oh in range(oh_n):
        for ow in range(ow_n):
            for kh in range(fh):
                for kw in range(fw):
                    ih, iw = oh * s + kh - pt, ow * s + kw - pl
                    if 0 <= ih < h and 0 <= iw < w:
                        yield oh, ow, kh, kw, ih, iw


CASES = [(1, 1, 1, "VALID"), (3, 3, 1, "SAME"), (4, 4, 2, "SAME"), (4, 4, 1, "VALID"), (5, 5, 1, "SAME")]


@pytest.mark.parametrize("chip", ["FT78NE", "MT7004"])
@pytest.mark.parametrize("fh,fw,s,padding", CASES)
def test_col2im_scatters_each_tap_into_the_input_it_read(chip, fh, fw, s, padding):
    n, h, w, c = 2, 9, 8, 3
    oh_n, _ = _geometry(h, fh, s, padding)
    ow_n, _ = _geometry(w, fw, s, padding)
    col = np.random.default_rng(fh * 10 + s).standard_normal((n, oh_n, ow_n, fh, fw, c)).astype(np.float32)
    want = np.zeros((n, h, w, c), np.float64)
    for oh, ow, kh, kw, ih, iw in _windows(h, w, fh, fw, s, padding):
        want[:, ih, iw, :] += col[:, oh, ow, kh, kw, :]
    m = sim.Simulator(chip)
    m.write(A, col)
    with sim.registered_kernel(_kernel("col2im")):
        m.call("fp_col2im_s", col=A, output=B, input_sizes=[n, h, w, c], filter_sizes=[fh, fw],
               strides=[1, s, s, 1], padding=padding)
    np.testing.assert_allclose(m.read(B, (n, h, w, c), np.float32), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("chip", ["FT78NE", "MT7004"])
@pytest.mark.parametrize("fh,fw,s,padding", CASES)
def test_depthwise_filter_gradient_sums_x_times_dy_over_the_windows(chip, fh, fw, s, padding):
    n, h, w, c, mult = 2, 9, 8, 3, 2
    oh_n, _ = _geometry(h, fh, s, padding)
    ow_n, _ = _geometry(w, fw, s, padding)
    rng = np.random.default_rng(fh * 10 + s)
    x = rng.standard_normal((n, h, w, c)).astype(np.float32)
    dy = rng.standard_normal((n, oh_n, ow_n, c * mult)).astype(np.float32)
    want = np.zeros((fh, fw, c, mult), np.float64)
    for oh, ow, kh, kw, ih, iw in _windows(h, w, fh, fw, s, padding):
        want[kh, kw] += np.einsum("nc,ncm->cm", x[:, ih, iw, :], dy[:, oh, ow, :].reshape(n, c, mult))
    m = sim.Simulator(chip)
    m.write(A, x)
    m.write(B, dy)
    with sim.registered_kernel(_kernel("depthwise_conv2d_backprop_filter")):
        m.call("fp_depthwise_conv2d_backprop_filter_s", input=A, out_backprop=B, output=C, input_sizes=[n, h, w, c],
               filter_sizes=[fh, fw, c, mult], strides=[1, s, s, 1], padding=padding)
    np.testing.assert_allclose(m.read(C, (fh, fw, c, mult), np.float32), want, rtol=1e-4, atol=1e-4)


def test_tap_groups_fit_the_registers_and_cover_the_taps():
    """Passes as few as fit, as even as can be: FT78NE's 64 registers take 15 taps of a loop loading 1 + k vectors
    and issuing k FMACs per vector (2 x (1 + 2k) registers, unrolled twice), so 16 taps make two passes of 8 and 25
    taps two of 13 and 12."""
    core = sim.load_target("FT78NE").core

    def loop(k: int, _: int):
        return elementwise(core, "fp32", 1024, loads=1 + k, stores=0, fmac=k)

    assert loop(15, 0).vector_registers <= 64 < loop(16, 0).vector_registers
    for taps, want in ((9, [9]), (15, [15]), (16, [8, 8]), (25, [13, 12])):
        got = tap_groups(taps, loop, core.vector_registers)
        assert [lp.issues["fmac"] // 2 for lp in got] == want
        assert all(lp.vector_registers <= 64 for lp in got)
