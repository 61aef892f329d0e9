"""The shipped programs (configs/programs/) against a numpy reference of their whole chain.

The reference is written here from the kernels' definitions (TensorFlow's semantics: ReluGrad, Relu6Grad,
FusedBatchNormGrad in training, Conv2DBackpropFilter/Input, DepthwiseConv2dNative's gradients, a residual add),
in float64 from the very inputs the program places, and never calls dspsim: every output the program saves must
match it, fp32 programs closely, fp16 ones within what rounding every intermediate to fp16 costs.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import sim
from sim.program import load_program

ROOT = Path(__file__).resolve().parent.parent
PROGRAMS = sorted((ROOT / "configs" / "programs").glob("*_bwd.yaml"))
EPS = 0.001  # the programs' batch-norm epsilon (configs/programs/generate.py)


def relu_grad(dy, x):
    return dy * (x > 0)


def relu6_grad(dy, x):
    return dy * ((x > 0) & (x < 6))


def bn_grad(dy, x, scale, mean, var):
    """FusedBatchNormGrad, training: (dx, dscale, doffset) over the NHWC tensor's channels."""
    inv = 1 / np.sqrt(var + EPS)
    xh = (x - mean) * inv
    count = x.size // x.shape[-1]
    doff = dy.sum(axis=(0, 1, 2))
    dsc = (dy * xh).sum(axis=(0, 1, 2))
    return scale * inv * (dy - doff / count - xh * dsc / count), dsc, doff


def pad1(t):
    return np.pad(t, ((0, 0), (1, 1), (1, 1), (0, 0)))


def conv_filter_grad(x, dy, k):
    """Conv2DBackpropFilter of a kxk SAME stride-1 convolution (k = 1 or 3), NHWC."""
    if k == 1:
        return np.einsum("nhwi,nhwo->io", x, dy)[None, None]
    xp, (_, h, w, _) = pad1(x), x.shape
    return np.stack([np.stack([np.einsum("nhwi,nhwo->io", xp[:, a:a + h, b:b + w], dy) for b in range(3)])
                     for a in range(3)])


def conv_input_grad(dy, wt):
    """Conv2DBackpropInput of a SAME stride-1 convolution with filter ``wt`` [k, k, in, out], NHWC."""
    k = wt.shape[0]
    if k == 1:
        return dy @ wt[0, 0].T
    n, h, w, _ = dy.shape
    dx = np.zeros((n, h + 2, w + 2, wt.shape[2]))
    for a in range(3):
        for b in range(3):
            dx[:, a:a + h, b:b + w] += dy @ wt[a, b].T
    return dx[:, 1:h + 1, 1:w + 1]


def depthwise_filter_grad(x, dy):
    xp, (_, h, w, _) = pad1(x), x.shape
    return np.stack([np.stack([(xp[:, a:a + h, b:b + w] * dy).sum(axis=(0, 1, 2)) for b in range(3)])
                     for a in range(3)])[..., None]


def depthwise_input_grad(dy, wd):
    n, h, w, c = dy.shape
    dx = np.zeros((n, h + 2, w + 2, c))
    for a in range(3):
        for b in range(3):
            dx[:, a:a + h, b:b + w] += dy * wd[a, b, :, 0]
    return dx[:, 1:h + 1, 1:w + 1]


def resnet_reference(t):
    ds = relu_grad(t["dout"], t["s"])
    d_a3, dsc3, doff3 = bn_grad(ds, t["a3"], t["scale_bn3"], t["mean_bn3"], t["var_bn3"])
    d_b2 = relu_grad(conv_input_grad(d_a3, t["w3"]), t["b2"])
    d_a2, dsc2, doff2 = bn_grad(d_b2, t["a2"], t["scale_bn2"], t["mean_bn2"], t["var_bn2"])
    d_b1 = relu_grad(conv_input_grad(d_a2, t["w2"]), t["b1"])
    d_a1, dsc1, doff1 = bn_grad(d_b1, t["a1"], t["scale_bn1"], t["mean_bn1"], t["var_bn1"])
    return {"dx": conv_input_grad(d_a1, t["w1"]) + ds, "dw_conv1": conv_filter_grad(t["x"], d_a1, 1),
            "dw_conv2": conv_filter_grad(t["r1"], d_a2, 3), "dw_conv3": conv_filter_grad(t["r2"], d_a3, 1),
            "dscale_bn1": dsc1, "doffset_bn1": doff1, "dscale_bn2": dsc2, "doffset_bn2": doff2,
            "dscale_bn3": dsc3, "doffset_bn3": doff3}


def mobilenet_reference(t):
    d_a3, dsc3, doff3 = bn_grad(t["dout"], t["a3"], t["scale_bn3"], t["mean_bn3"], t["var_bn3"])
    d_b2 = relu6_grad(conv_input_grad(d_a3, t["w3"]), t["b2"])
    d_a2, dsc2, doff2 = bn_grad(d_b2, t["a2"], t["scale_bn2"], t["mean_bn2"], t["var_bn2"])
    d_b1 = relu6_grad(depthwise_input_grad(d_a2, t["wd"]), t["b1"])
    d_a1, dsc1, doff1 = bn_grad(d_b1, t["a1"], t["scale_bn1"], t["mean_bn1"], t["var_bn1"])
    return {"dx": conv_input_grad(d_a1, t["w1"]) + t["dout"], "dw_expand": conv_filter_grad(t["x"], d_a1, 1),
            "dw_depthwise": depthwise_filter_grad(t["r1"], d_a2), "dw_project": conv_filter_grad(t["r2"], d_a3, 1),
            "dscale_bn1": dsc1, "doffset_bn1": doff1, "dscale_bn2": dsc2, "doffset_bn2": doff2,
            "dscale_bn3": dsc3, "doffset_bn3": doff3}


@pytest.mark.parametrize("path", PROGRAMS, ids=lambda p: p.stem)
def test_a_shipped_program_equals_the_reference_of_its_whole_chain(path):
    program = load_program(path, allow_kernels=True)
    m = sim.Simulator(program.target)
    result = m.run_program(program)
    cfg = program.as_run_config(result.plan.addrs)
    inputs = {spec.name: cfg.materialise(spec).astype(np.float64) for spec in cfg.data}
    ref = (resnet_reference if "resnet" in path.stem else mobilenet_reference)(inputs)
    fp16 = "_hp_" in path.stem
    assert sorted(ref) == sorted(e.tensor for e in program.outputs)
    for spec in cfg.outputs:
        got = m.read(spec.addr, spec.shape, spec.dtype).astype(np.float64)
        want = ref[spec.name].reshape(spec.shape)
        scale = np.abs(want).max()
        err = np.abs(got - want).max() / scale
        assert err < (2e-2 if fp16 else 1e-5), f"{path.stem}: {spec.name}: worst error {err:.2e} of {scale:.3g}"
    assert result.cycles == sum(c.cycles for c in result.calls)
    assert [c.start_cycle for c in result.calls] == [0] + [c.end_cycle for c in result.calls[:-1]]
    assert result.plan.sharing()  # the planner put some dead tensor's bytes to use
