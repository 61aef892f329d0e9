"""Benchmark of the kernels on large shapes: simulator wall time against the same math once in numpy.

Run ``python3 bench/bench_kernels.py [name ...]`` from the repository root.  For each
kernel's large shape on FT78NE it prints the simulator's wall time, numpy's wall time for
the same math, their ratio, the simulated cycles, the fraction of the roofline bound
reached and the resource that sets the bound.  Not part of the tests.

Each kernel contributes one function to :data:`BENCHES`; it returns a :class:`Result`.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import sim  # noqa: E402


@dataclass(frozen=True)
class Result:
    """One benchmark's measurements."""

    name: str
    shape: str
    sim_seconds: float
    numpy_seconds: float
    run: "sim.simulator.Run"

    def line(self) -> str:
        """A one-line report."""
        r = self.run
        return (f"{self.name:<40} {self.shape:<28} sim {self.sim_seconds:7.3f} s  numpy {self.numpy_seconds:7.3f} s  "
                f"ratio {self.sim_seconds / self.numpy_seconds:6.1f}  cycles {r.cycles:>10}  "
                f"roofline {100 * r.roofline_fraction:5.1f}%  bound by {r.roofline.bound_by}")


def _timed(fn: Callable[[], object], repeat: int = 3) -> tuple[float, object]:
    """Best wall time of ``repeat`` calls, and the last result."""
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def bench_fused_batch_norm_grad() -> Result:
    """fp_fused_batch_norm_grad_s, training, NHWC 8x56x56x64 (rows split over 8 cores, partials via GSM)."""
    from kernels.fused_batch_norm_grad import fused_batch_norm_grad_reference
    shape, c = (8, 56, 56, 64), 64
    rng = np.random.default_rng(0)
    dy, x = rng.standard_normal(shape, dtype=np.float32), rng.standard_normal(shape, dtype=np.float32)
    scale, mean = rng.uniform(0.5, 1.5, c).astype(np.float32), rng.uniform(-0.5, 0.5, c).astype(np.float32)
    var = rng.uniform(0.5, 2.0, c).astype(np.float32)
    addr = dict(y_backprop=0x80000000, x=0x90000000, scale=0xA0000000, reserve_space_1=0xA0100000,
                reserve_space_2=0xA0200000, x_backprop=0xB0000000, scale_backprop=0xA0300000,
                offset_backprop=0xA0400000)
    m = sim.Simulator("FT78NE")
    for name, arr in (("y_backprop", dy), ("x", x), ("scale", scale), ("reserve_space_1", mean),
                      ("reserve_space_2", var)):
        m.write(addr[name], arr)
    t_sim, run = _timed(lambda: m.call("fp_fused_batch_norm_grad_s", **addr, shape=list(shape), epsilon=1e-3,
                                       data_format="NHWC", is_training=True))
    t_np, ref = _timed(lambda: fused_batch_norm_grad_reference(dy, x, scale, mean, var, 1e-3, "NHWC", True))
    got = m.read(addr["x_backprop"], shape, np.float32)
    np.testing.assert_allclose(got, ref[0], rtol=1e-4, atol=1e-4)
    return Result("fp_fused_batch_norm_grad_s", "8x56x56x64 NHWC training", t_sim, t_np, run)


def bench_fake_quant_with_min_max_vars_gradient() -> Result:
    """fp_fake_quant_with_min_max_vars_gradient_s on 16x56x56x64 fp32 elements, 8 bits, [-6, 6]."""
    from kernels.fake_quant_with_min_max_vars_gradient import fake_quant_gradient_reference
    shape = (16, 56, 56, 64)
    rng = np.random.default_rng(0)
    g = rng.standard_normal(shape, dtype=np.float32)
    x = rng.uniform(-8, 8, shape).astype(np.float32)
    addr = dict(gradients=0x80000000, inputs=0x90000000, min=0xA0000000, max=0xA0000040,
                backprops_wrt_input=0xB0000000, backprop_wrt_min=0xA0000080, backprop_wrt_max=0xA00000C0)
    m = sim.Simulator("FT78NE")
    m.write(addr["gradients"], g)
    m.write(addr["inputs"], x)
    m.write(addr["min"], np.float32(-6.0))
    m.write(addr["max"], np.float32(6.0))
    t_sim, run = _timed(lambda: m.call("fp_fake_quant_with_min_max_vars_gradient_s", **addr, shape=list(shape)))
    t_np, ref = _timed(lambda: fake_quant_gradient_reference(g, x, -6.0, 6.0))
    np.testing.assert_array_equal(m.read(addr["backprops_wrt_input"], shape, np.float32), ref[0])
    return Result("fp_fake_quant_with_min_max_vars_gradient_s", "16x56x56x64, 8 bits", t_sim, t_np, run)


def bench_conv2d_backprop_filter() -> Result:
    """fp_conv2d_backprop_filter_s, NHWC 8x56x56x64 input, 3x3x64x64 filter, SAME, stride 1 (batch over 8 cores)."""
    shape, fsz = (8, 56, 56, 64), (3, 3, 64, 64)
    rng = np.random.default_rng(0)
    x, dy = rng.standard_normal(shape, dtype=np.float32), rng.standard_normal(shape, dtype=np.float32)
    addr = dict(input=0x80000000, out_backprop=0x90000000, output=0xA0000000)
    m = sim.Simulator("FT78NE")
    m.write(addr["input"], x)
    m.write(addr["out_backprop"], dy)

    def numpy_im2col() -> np.ndarray:
        # The same math once in numpy: pad, im2col by a sliding window, one matrix product.
        xp = np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
        cols = np.lib.stride_tricks.sliding_window_view(xp, fsz[:2], axis=(1, 2)).transpose(0, 1, 2, 4, 5, 3)
        return (cols.reshape(-1, fsz[0] * fsz[1] * fsz[2]).T @ dy.reshape(-1, fsz[3])).reshape(fsz)

    t_sim, run = _timed(lambda: m.call("fp_conv2d_backprop_filter_s", **addr, input_shape=list(shape),
                                       filter_sizes=list(fsz), strides=[1, 1, 1, 1], padding="SAME"))
    t_np, ref = _timed(numpy_im2col)
    np.testing.assert_allclose(m.read(addr["output"], fsz, np.float32), ref, rtol=1e-3, atol=1e-2)
    return Result("fp_conv2d_backprop_filter_s", "8x56x56x64 NHWC, 3x3x64x64 SAME", t_sim, t_np, run)


def bench_depthwise_conv2d_backprop_input() -> Result:
    """fp_depthwise_conv2d_backprop_input_s, NHWC 8x112x112x64 input, 3x3 filter, multiplier 1, SAME, stride 1."""
    from kernels.conv_geometry import conv_geometry
    from kernels.depthwise_conv2d_backprop_input import depthwise_conv2d_backprop_input
    sizes, fshape = [8, 112, 112, 64], [3, 3, 64, 1]
    rng = np.random.default_rng(0)
    filt = rng.standard_normal(fshape, dtype=np.float32)
    dy = rng.standard_normal((8, 112, 112, 64), dtype=np.float32)
    addr = {"filter": 0x80000000, "out_backprop": 0x90000000, "output": 0xA0000000}
    m = sim.Simulator("FT78NE")
    m.write(addr["filter"], filt)
    m.write(addr["out_backprop"], dy)
    geom = conv_geometry(sizes, (3, 3), strides=[1, 1, 1, 1], padding="SAME", explicit_paddings=None,
                         data_format="NHWC", dilations=None)
    t_sim, run = _timed(lambda: m.call("fp_depthwise_conv2d_backprop_input_s", **addr, input_sizes=sizes,
                                       filter_shape=fshape, strides=[1, 1, 1, 1], padding="SAME"))
    # The same math once in numpy: every tap (kh, kw) scatter-added with strided slices, fp32.
    t_np, ref = _timed(lambda: depthwise_conv2d_backprop_input(filt, dy, geom))
    np.testing.assert_allclose(m.read(addr["output"], tuple(sizes), np.float32), ref, rtol=1e-5, atol=1e-5)
    return Result("fp_depthwise_conv2d_backprop_input_s", "8x112x112x64 NHWC, 3x3x64x1 SAME", t_sim, t_np, run)


#: Benchmark name -> function; each kernel adds its own entry.
BENCHES: dict[str, Callable[[], Result]] = {
    "depthwise_conv2d_backprop_input": bench_depthwise_conv2d_backprop_input,
    "fused_batch_norm_grad": bench_fused_batch_norm_grad,
    "fake_quant_with_min_max_vars_gradient": bench_fake_quant_with_min_max_vars_gradient,
    "conv2d_backprop_filter": bench_conv2d_backprop_filter,
}


def main(argv: list[str]) -> int:
    """Run the named benchmarks (all by default) and print one line each."""
    names = argv or list(BENCHES)
    unknown = [n for n in names if n not in BENCHES]
    if unknown:
        print(f"unknown benchmark(s): {', '.join(unknown)}; known: {', '.join(BENCHES)}", file=sys.stderr)
        return 2
    for name in names:
        print(BENCHES[name]().line(), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
