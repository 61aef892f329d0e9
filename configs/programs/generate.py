"""Write the shipped programs (docs/programs.md): the backward pass of a ResNet-50 bottleneck block and of a
MobileNetV2 inverted-residual block, each on FT78NE (fp32) and MT7004 (fp16).

    python configs/programs/generate.py

The forward pass's activations and statistics the backward pass reads are seeded random stand-ins of their
shapes (the chain's arithmetic does not depend on their being a real forward pass; the variances are positive);
tests/test_program_examples.py checks every output against a numpy reference of the whole chain.  The shapes
are a small layer (``SHAPES``), so that the tests stay fast; ``--large`` writes the same blocks at a larger
scale beside them (``*_large.yaml``), for measuring.
"""

from __future__ import annotations

import argparse
from pathlib import Path

HERE = Path(__file__).resolve().parent
#: (batch, height, width, block channels, bottleneck or expansion channels) per block, small and large.
SHAPES = {"resnet50_bottleneck_bwd": (1, 4, 4, 32, 8), "mobilenetv2_block_bwd": (1, 4, 4, 16, 96)}
LARGE = {"resnet50_bottleneck_bwd": (4, 14, 14, 256, 64), "mobilenetv2_block_bwd": (4, 14, 14, 32, 192)}
CHIPS = (("FT78NE", "ft78ne", "fp", "float32"), ("MT7004", "mt7004_hp", "hp", "float16"))
KERNELS = ["../../examples/relu_grad.py", "../../examples/binary_elementwise.py", "../../examples/col2im.py",
           "../../examples/depthwise_conv2d_backprop_filter.py"]
EPSILON = 0.001


def _flow(d: dict) -> str:
    def v(x: object) -> str:
        if isinstance(x, bool):
            return "true" if x else "false"
        if isinstance(x, list):
            return "[" + ", ".join(v(i) for i in x) + "]"
        if isinstance(x, dict):
            return _flow(x)
        return str(x)
    return "{" + ", ".join(f"{k}: {v(x)}" for k, x in d.items()) + "}"


class _Block:
    """The tensors, data, calls and outputs of one block's backward pass, as they are added."""

    def __init__(self, prefix: str, big: str):
        self.p, self.big = prefix, big
        self.tensors: list[dict] = []
        self.data: list[dict] = []
        self.calls: list[tuple[str, str, dict]] = []
        self.outputs: list[str] = []

    def tensor(self, name: str, shape: list[int], dtype: str | None = None, seed: int | None = None,
               low: float = -1.0, high: float = 1.0, output: bool = False) -> str:
        self.tensors.append({"name": name, "shape": shape, "dtype": dtype or self.big, "region": "ddr"})
        if seed is not None:
            self.data.append({"tensor": name, "random": {"seed": seed, "low": low, "high": high}})
        if output:
            self.outputs.append(name)
        return name

    def call(self, name: str, op: str, args: dict) -> None:
        self.calls.append((name, f"{self.p}_{op}_s", args))

    def bn(self, name: str, channels: int, seed: int) -> tuple[str, str, str]:
        """A batch norm's scale, mean and variance (fp32 inputs)."""
        return (self.tensor(f"scale_{name}", [channels], "float32", seed, 0.5, 1.5),
                self.tensor(f"mean_{name}", [channels], "float32", seed + 1, -0.5, 0.5),
                self.tensor(f"var_{name}", [channels], "float32", seed + 2, 0.5, 2.0))

    def bn_grad(self, name: str, dy: str, x: str, shape: list[int], seed: int) -> str:
        scale, mean, var = self.bn(name, shape[3], seed)
        dx = self.tensor(f"d_{x}", shape)
        ds = self.tensor(f"dscale_{name}", [shape[3]], "float32", output=True)
        do = self.tensor(f"doffset_{name}", [shape[3]], "float32", output=True)
        self.call(name, "fused_batch_norm_grad", {
            "y_backprop": dy, "x": x, "scale": scale, "reserve_space_1": mean, "reserve_space_2": var,
            "x_backprop": dx, "scale_backprop": ds, "offset_backprop": do, "shape": shape, "epsilon": EPSILON})
        return dx

    def filter_grad(self, name: str, x: str, dy: str, in_shape: list[int], fsize: list[int]) -> None:
        self.call(name, "conv2d_backprop_filter", {
            "input": x, "out_backprop": dy, "output": self.tensor(f"dw_{name.split('_')[0]}", fsize, output=True),
            "input_shape": in_shape, "filter_sizes": fsize, "strides": [1, 1, 1, 1], "padding": "SAME"})

    def matmul_t(self, name: str, a: str, w: str, c: str, m: int, n: int, k: int) -> None:
        """c [m, n] = a [m, k] · wᵀ, w stored [n, k]: a 1x1 convolution's input gradient (or a 3x3's col)."""
        self.call(name, "gemm", {"a": a, "b": w, "c": c, "m": m, "n": n, "k": k, "trans_b": 1})


def resnet(prefix: str, big: str, n: int, h: int, w: int, c: int, m: int) -> _Block:
    """ResNet-50's bottleneck (1x1 reduce, 3x3, 1x1 expand, each followed by batch norm; ReLU after the first two
    and after the identity shortcut's add), backward."""
    b = _Block(prefix, big)
    full, mid, rows = [n, h, w, c], [n, h, w, m], n * h * w
    dout = b.tensor("dout", full, seed=1)
    s = b.tensor("s", full, seed=2)
    ds = b.tensor("ds", full)
    b.call("relu_out", "relu_grad", {"dy": dout, "x": s, "dx": ds, "shape": full})
    a3 = b.tensor("a3", full, seed=3)
    d_a3 = b.bn_grad("bn3", ds, a3, full, 10)
    b.filter_grad("conv3_filter", b.tensor("r2", mid, seed=4), d_a3, mid, [1, 1, m, c])
    w3 = b.tensor("w3", [1, 1, m, c], seed=5)
    d_r2 = b.tensor("d_r2", mid)
    b.matmul_t("conv3_input", d_a3, w3, d_r2, rows, m, c)
    b2, d_b2 = b.tensor("b2", mid, seed=6), b.tensor("d_b2", mid)
    b.call("relu2", "relu_grad", {"dy": d_r2, "x": b2, "dx": d_b2, "shape": mid})
    d_a2 = b.bn_grad("bn2", d_b2, b.tensor("a2", mid, seed=7), mid, 20)
    r1 = b.tensor("r1", mid, seed=8)
    b.filter_grad("conv2_filter", r1, d_a2, mid, [3, 3, m, m])
    w2 = b.tensor("w2", [3, 3, m, m], seed=9)
    dcol = b.tensor("dcol", [n, h, w, 3, 3, m])
    b.matmul_t("conv2_col", d_a2, w2, dcol, rows, 9 * m, m)
    d_r1 = b.tensor("d_r1", mid)
    b.call("conv2_input", "col2im", {"col": dcol, "output": d_r1, "input_sizes": mid, "filter_sizes": [3, 3],
                                     "strides": [1, 1, 1, 1], "padding": "SAME"})
    b1, d_b1 = b.tensor("b1", mid, seed=11), b.tensor("d_b1", mid)
    b.call("relu1", "relu_grad", {"dy": d_r1, "x": b1, "dx": d_b1, "shape": mid})
    d_a1 = b.bn_grad("bn1", d_b1, b.tensor("a1", mid, seed=12), mid, 30)
    x = b.tensor("x", full, seed=13)
    b.filter_grad("conv1_filter", x, d_a1, full, [1, 1, c, m])
    w1 = b.tensor("w1", [1, 1, c, m], seed=14)
    dx_main = b.tensor("dx_main", full)
    b.matmul_t("conv1_input", d_a1, w1, dx_main, rows, c, m)
    dx = b.tensor("dx", full, output=True)
    b.call("shortcut_add", "binary_elementwise", {"a": dx_main, "b": ds, "out": dx, "shape": full, "op": "add"})
    return b


def mobilenet(prefix: str, big: str, n: int, h: int, w: int, c: int, e: int) -> _Block:
    """MobileNetV2's inverted residual, stride 1 (1x1 expand, 3x3 depthwise, 1x1 project, each followed by batch
    norm; ReLU6 after the first two; the input added to the output), backward."""
    b = _Block(prefix, big)
    full, wide, rows = [n, h, w, c], [n, h, w, e], n * h * w
    dout = b.tensor("dout", full, seed=1)
    d_a3 = b.bn_grad("bn3", dout, b.tensor("a3", full, seed=2), full, 10)
    b.filter_grad("project_filter", b.tensor("r2", wide, seed=3, low=0.0, high=6.0), d_a3, wide, [1, 1, e, c])
    w3, d_r2 = b.tensor("w3", [1, 1, e, c], seed=4), b.tensor("d_r2", wide)
    b.matmul_t("project_input", d_a3, w3, d_r2, rows, e, c)
    b2, d_b2 = b.tensor("b2", wide, seed=5, low=-2.0, high=8.0), b.tensor("d_b2", wide)
    b.call("relu6_2", "binary_elementwise", {"a": d_r2, "b": b2, "out": d_b2, "shape": wide, "op": "relu6_grad"})
    d_a2 = b.bn_grad("bn2", d_b2, b.tensor("a2", wide, seed=6), wide, 20)
    r1 = b.tensor("r1", wide, seed=7, low=0.0, high=6.0)
    b.call("depthwise_filter", "depthwise_conv2d_backprop_filter", {
        "input": r1, "out_backprop": d_a2, "output": b.tensor("dw_depthwise", [3, 3, e, 1], output=True),
        "input_sizes": wide, "filter_sizes": [3, 3, e, 1], "strides": [1, 1, 1, 1], "padding": "SAME"})
    wd, d_r1 = b.tensor("wd", [3, 3, e, 1], seed=8), b.tensor("d_r1", wide)
    b.call("depthwise_input", "depthwise_conv2d_backprop_input", {
        "filter": wd, "out_backprop": d_a2, "output": d_r1, "input_sizes": wide, "filter_shape": [3, 3, e, 1],
        "strides": [1, 1, 1, 1], "padding": "SAME"})
    b1, d_b1 = b.tensor("b1", wide, seed=9, low=-2.0, high=8.0), b.tensor("d_b1", wide)
    b.call("relu6_1", "binary_elementwise", {"a": d_r1, "b": b1, "out": d_b1, "shape": wide, "op": "relu6_grad"})
    d_a1 = b.bn_grad("bn1", d_b1, b.tensor("a1", wide, seed=11), wide, 30)
    x = b.tensor("x", full, seed=12)
    b.filter_grad("expand_filter", x, d_a1, full, [1, 1, c, e])
    w1, dx_main = b.tensor("w1", [1, 1, c, e], seed=13), b.tensor("dx_main", full)
    b.matmul_t("expand_input", d_a1, w1, dx_main, rows, c, e)
    dx = b.tensor("dx", full, output=True)
    b.call("residual_add", "binary_elementwise", {"a": dx_main, "b": dout, "out": dx, "shape": full, "op": "add"})
    return b


BLOCKS = {"resnet50_bottleneck_bwd": (resnet, "the backward pass of a ResNet-50 bottleneck block"),
          "mobilenetv2_block_bwd": (mobilenet, "the backward pass of a MobileNetV2 inverted-residual block")}


def program_text(block: str, chip: str, prefix: str, big: str, shape: tuple[int, ...], stem: str) -> str:
    """The YAML text of one shipped program."""
    build, words = BLOCKS[block]
    b = build(prefix, big, *shape)
    n, h, w, c, inner = shape
    lines = [f"# {stem}.yaml, written by configs/programs/generate.py (edit that, not this)",
             f"# dspsim run configs/programs/{stem}.yaml --allow-kernels",
             f"description: {words} ({'fp16' if prefix == 'hp' else 'fp32'}), batch {n}, {h}x{w}, "
             f"{c} channels ({inner} inside), on {chip}",
             f"target: {chip}", "kernels:"]
    lines += [f"  - {k}" for k in KERNELS]
    lines.append("tensors:                 # every tensor in DDR, its address the planner's (addr: auto)")
    lines += [f"  - {_flow(t)}" for t in b.tensors]
    lines.append("data:                    # the forward pass's activations and statistics: seeded stand-ins")
    lines += [f"  - {_flow(d)}" for d in b.data]
    lines.append("calls:")
    for name, symbol, args in b.calls:
        lines += [f"  - name: {name}", f"    symbol: {symbol}", f"    args: {_flow(args)}"]
    lines.append("outputs:")
    lines += [f"  - {_flow({'tensor': o})}" for o in b.outputs]
    return "\n".join(lines) + "\n"


def main() -> None:
    """Write the programs (and, with ``--large``, their larger twins)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--large", action="store_true", help="also write the larger programs (*_large.yaml)")
    args = ap.parse_args()
    for block in BLOCKS:
        for chip, tag, prefix, big in CHIPS:
            sizes = [("", SHAPES[block])] + ([("_large", LARGE[block])] if args.large else [])
            for suffix, shape in sizes:
                stem = f"{tag}_{block}{suffix}"
                (HERE / f"{stem}.yaml").write_text(program_text(block, chip, prefix, big, shape, stem))
                print(f"wrote {stem}.yaml")


if __name__ == "__main__":
    main()
