"""The kernels' example calls (kernels/examples/): one place per kernel for its arguments, inputs and reference,
from which the shipped run-configs are generated and which the benchmark and the tests take.

The small and tiny examples run with numerics and must match their references: for the batch-norm and fake
quant kernels the references are the kernels' own whole-tensor numerics (their tests check those against
TensorFlow's golden cases and float64 formulas); for the two convolutions they are written from the
definitions in kernels/examples/conv_math.py, independently of the kernels.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import kernels
import sim
from kernels.examples import CHIP_PRECISIONS, KERNELS, SIZES, configs, example, examples, scaled_args
from kernels.examples.conv_math import depthwise_input_gradient, filter_gradient, geometry, window
from kernels.examples.run_config import run_config_text
from sim.config.run_config import load_config

ROOT = Path(__file__).resolve().parent.parent
SMALL = [e for e in examples() if e.size in ("tiny", "small")]


def test_every_registered_kernel_has_every_size_on_every_chip_and_precision():
    assert set(KERNELS) == {s.kernel.name for s in kernels.symbols()}
    for kernel in KERNELS:
        for size in SIZES:
            for chip, prefix in CHIP_PRECISIONS:
                assert example(kernel, size, chip, prefix).symbol.startswith(prefix)
    ids = [e.example_id for e in examples()]
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize("e", SMALL, ids=[e.example_id for e in SMALL])
def test_small_examples_run_and_match_their_reference(e):
    m = sim.Simulator(e.chip)
    inputs = e.inputs()
    e.place(m.write, inputs)
    run = m.call(e.symbol, **e.args)
    assert run.cycles >= run.roofline.cycles
    for out, want in zip(e.outputs, e.expected(inputs).values()):
        got = m.read(out.addr, out.shape, out.dtype, core=out.core)
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=out.rtol, atol=out.atol,
                                   err_msg=f"{e.example_id} {out.name}")


def test_inputs_are_seeded_and_the_same_every_time():
    e = example("fused_batch_norm_grad", "tiny", "FT78NE")
    a, b = e.inputs(), e.inputs()
    assert all(np.array_equal(a[k], b[k]) for k in a) and a["x"] is not b["x"]
    # A run-config's data entry {random: {seed: 2, low: -2.0, high: 2.0}} draws exactly these values.
    want = np.random.default_rng(2).uniform(-2.0, 2.0, size=(1, 2, 3, 5)).astype(np.float32)
    assert np.array_equal(a["x"], want)


@pytest.mark.parametrize("e", [e for e in examples() if e.size in ("medium", "large")],
                         ids=lambda e: e.example_id)
def test_benchmark_examples_bind(e):
    call = sim.Simulator(e.chip).bind(e.symbol, **e.args)
    shapes = {b.name: b.shape for b in call.buffers}
    assert all(shapes[d.name] == d.shape for d in e.data if d.name in shapes)
    assert all(shapes[o.name] == o.shape for o in e.outputs)


# --- the shipped run-configs are the examples --------------------------------------------------------------

def test_every_config_is_an_example_written_by_the_generator():
    shipped = sorted(p.name for p in (ROOT / "configs").glob("*.yaml"))
    assert shipped == sorted(f"{e.config}.yaml" for e in configs())
    for e in configs():
        assert (ROOT / "configs" / f"{e.config}.yaml").read_text() == run_config_text(e), \
            f"configs/{e.config}.yaml differs from its example: run python configs/generate.py"
    done = subprocess.run([sys.executable, str(ROOT / "configs" / "generate.py"), "--check"], capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stdout


@pytest.mark.parametrize("e", configs(), ids=lambda e: e.config)
def test_a_config_places_what_its_example_places(e):
    cfg = load_config(ROOT / "configs" / f"{e.config}.yaml")
    assert (cfg.symbol, cfg.target, cfg.args) == (e.symbol, e.chip, dict(e.args))
    inputs = e.inputs()
    for spec in cfg.data:
        assert np.array_equal(cfg.materialise(spec), inputs[spec.name]), spec.name


# --- the independent convolution references ------------------------------------------------------------------

def test_conv_windows_follow_tensorflow():
    # SAME: ceil(in / stride) outputs, the odd padding after (20 inputs, 3 taps dilated by 2 span 5, stride 2:
    # 10 outputs need 9 * 2 + 5 = 23 inputs, 3 of padding, 1 before); VALID: none; EXPLICIT: as given.
    assert window(28, 3, 1, 1, "SAME") == (28, 1) and window(20, 3, 2, 2, "SAME") == (10, 1)
    assert window(24, 5, 2, 1, "VALID") == (10, 0) and window(15, 4, 2, 1, "EXPLICIT", (1, 2)) == (8, 1)


def test_conv_references_by_hand():
    # A 1x2x2x1 input, a 2x2 VALID filter: one output position, dW[kh, kw] = x[kh, kw] * dy.
    x = np.array([1, 2, 3, 4], np.float32).reshape(1, 2, 2, 1)
    dy = np.array([0.5, -1.0], np.float32).reshape(1, 1, 1, 2)
    g = geometry(dict(input_shape=[1, 2, 2, 1], strides=[1, 1, 1, 1], padding="VALID"), "input_shape", 2, 2)
    dw = filter_gradient(x, dy, g, 2, 2)
    assert dw.shape == (2, 2, 1, 2) and dw[1, 0, 0].tolist() == [1.5, -3.0]
    # Depthwise, 3 inputs, a 2-tap filter, stride 1 VALID: dx[i] = Σ_k dy[i - k] f[k].
    f = np.array([2, 3], np.float32).reshape(1, 2, 1, 1)
    dy1 = np.array([1, 10], np.float32).reshape(1, 1, 2, 1)
    g1 = geometry(dict(input_sizes=[1, 1, 3, 1], strides=[1, 1, 1, 1], padding="VALID"), "input_sizes", 1, 2)
    assert depthwise_input_gradient(f, dy1, g1).ravel().tolist() == [2.0, 3 + 20.0, 30.0]


@pytest.mark.parametrize("kernel", KERNELS)
def test_scaled_arguments_grow_the_work_linearly(kernel):
    m = sim.Simulator("FT78NE")
    sizes = [sum(b.size_bytes for b in m.bind(f"fp_{kernel}_s", **scaled_args(kernel, n)).buffers
                 if b.role == "output" or b.name in ("x", "input", "gradients", "out_backprop"))
             for n in (1, 2)]
    assert 1.5 < sizes[1] / sizes[0] <= 2
    assert m.bind(f"fp_{kernel}_p", **scaled_args(kernel, 1, "p"), core=1).cores == (1,)
