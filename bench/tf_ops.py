"""TensorFlow's CPU op for the same math as a benchmark case: the yardstick ``bench/run.py --tf`` measures.

Each kernel maps to the ``tf.raw_ops`` op a TensorFlow user would run instead:

* batch_norm_grad and fused_batch_norm_grad: ``FusedBatchNormGradV3`` (NHWC; BatchNormGrad's [batch, channel]
  as [batch, 1, 1, channel]; its inverse standard deviation ``invar`` given as the variance 1 / invar**2 with
  epsilon 0, since TF's CPU kernel takes the variance and applies rsqrt(variance + epsilon) itself);
* fake_quant_with_min_max_vars_gradient: ``FakeQuantWithMinMaxVarsGradient`` (float32 only in TF: an hp case
  runs it on its fp16 inputs widened to fp32);
* conv2d_backprop_filter: ``Conv2DBackpropFilter``; depthwise_conv2d_backprop_input:
  ``DepthwiseConv2dNativeBackpropInput``; gemm: ``MatMul`` (no row pitch, no beta in TF: only the bench's
  plain products).

fp16 cases run in fp16 wherever TF's CPU kernel has a half registration (every op above but the fake-quant
gradient).  tensorflow is imported only here, and only when ``bench/run.py --tf`` asks for it
(``pip install -e '.[bench]'``).
"""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Callable
from typing import Any

import numpy as np

#: Kernel name -> the TF op its cases run.
TF_OPS = {
    "batch_norm_grad": "FusedBatchNormGradV3",
    "fused_batch_norm_grad": "FusedBatchNormGradV3",
    "fake_quant_with_min_max_vars_gradient": "FakeQuantWithMinMaxVarsGradient",
    "conv2d_backprop_filter": "Conv2DBackpropFilter",
    "depthwise_conv2d_backprop_input": "DepthwiseConv2dNativeBackpropInput",
    "gemm": "MatMul",
}
#: Kernels whose TF CPU op has no fp16 kernel: their hp cases run TF in fp32.
FP32_ONLY = ("fake_quant_with_min_max_vars_gradient",)


def available() -> str | None:
    """None when tensorflow is installed, else why not (one line).  Found without importing it: the import
    takes seconds, and each benchmark child imports it anyway (a broken install fails there, as a case error)."""
    try:
        found = importlib.util.find_spec("tensorflow") is not None
    except (ImportError, ValueError) as exc:
        return f"{type(exc).__name__}: {exc}".splitlines()[0]
    return None if found else "no module named 'tensorflow'"


def _op(case: Any) -> tuple[Callable[[], tuple[Any, ...]], str]:
    """A no-argument function running TF's op for ``case`` on tensors made once, and the dtype it runs in."""
    import tensorflow as tf
    raw = tf.raw_ops
    a, args = case.arrays, case.args
    hp = case.symbol.startswith("hp")
    dtype = np.float16 if hp and case.kernel not in FP32_ONLY else np.float32

    def t(x: Any, dt: Any = dtype) -> Any:
        return tf.constant(np.asarray(x, dtype=dt))

    if case.kernel == "batch_norm_grad":
        _, _, _, _, _, batch, channel, train = args["params"][:8]
        shape4 = (batch, 1, 1, channel)
        dy, x = t(a["dy"].reshape(shape4)), t(a["x"].reshape(shape4))
        scale, mean = t(a["scale"], np.float32), t(a["mean"], np.float32)
        var = t(1.0 / np.square(a["invar"].astype(np.float64)), np.float32)
        empty = tf.constant(np.zeros(0, np.float32))

        def bn() -> tuple[Any, ...]:
            dx, ds, db, _, _ = raw.FusedBatchNormGradV3(y_backprop=dy, x=x, scale=scale, reserve_space_1=mean,
                                                         reserve_space_2=var, reserve_space_3=empty, epsilon=0.0,
                                                         data_format="NHWC", is_training=bool(train))
            return tf.reshape(dx, (batch, channel)), db, ds  # the case's order: dx, dbias, dscale
        return bn, np.dtype(dtype).name
    if case.kernel == "fused_batch_norm_grad":
        dy, x = t(a["y_backprop"]), t(a["x"])
        scale, mean, var = (t(a[n], np.float32) for n in ("scale", "reserve_space_1", "reserve_space_2"))
        empty = tf.constant(np.zeros(0, np.float32))

        def fbn() -> tuple[Any, ...]:
            dx, ds, db, _, _ = raw.FusedBatchNormGradV3(y_backprop=dy, x=x, scale=scale, reserve_space_1=mean,
                                                         reserve_space_2=var, reserve_space_3=empty,
                                                         epsilon=float(args["epsilon"]),
                                                         data_format=args.get("data_format", "NHWC"),
                                                         is_training=bool(args.get("is_training", True)))
            return dx, ds, db
        return fbn, np.dtype(dtype).name
    if case.kernel == "fake_quant_with_min_max_vars_gradient":
        g, x = t(a["gradients"]), t(a["inputs"])
        lo, hi = t(a["min"], np.float32), t(a["max"], np.float32)

        def fq() -> tuple[Any, ...]:
            return tuple(raw.FakeQuantWithMinMaxVarsGradient(
                gradients=g, inputs=x, min=lo, max=hi, num_bits=int(args.get("num_bits", 8)),
                narrow_range=bool(args.get("narrow_range", False))))
        return fq, np.dtype(dtype).name
    if case.kernel == "conv2d_backprop_filter":
        x, dy = t(a["input"]), t(a["out_backprop"])
        sizes = tf.constant(np.asarray(args["filter_sizes"], np.int32))

        def conv() -> tuple[Any, ...]:
            return (raw.Conv2DBackpropFilter(input=x, filter_sizes=sizes, out_backprop=dy, strides=args["strides"],
                                             padding=args["padding"],
                                             explicit_paddings=args.get("explicit_paddings", []),
                                             data_format=args.get("data_format", "NHWC"),
                                             dilations=args.get("dilations", [1, 1, 1, 1])),)
        return conv, np.dtype(dtype).name
    if case.kernel == "depthwise_conv2d_backprop_input":
        f, dy = t(a["filter"]), t(a["out_backprop"])
        sizes = tf.constant(np.asarray(args["input_sizes"], np.int32))

        def dw() -> tuple[Any, ...]:
            return (raw.DepthwiseConv2dNativeBackpropInput(
                input_sizes=sizes, filter=f, out_backprop=dy, strides=args["strides"], padding=args["padding"],
                explicit_paddings=args.get("explicit_paddings", []), data_format=args.get("data_format", "NHWC"),
                dilations=args.get("dilations", [1, 1, 1, 1])),)
        return dw, np.dtype(dtype).name
    if case.kernel == "gemm":
        if args.get("beta") or any(k in args for k in ("lda", "ldb", "ldc")):
            raise ValueError(f"{case.case_id}: TF's MatMul has no beta or row pitch; only plain products compare")
        ma, mb = t(a["a"]), t(a["b"])
        ta, tb = bool(args.get("trans_a", 0)), bool(args.get("trans_b", 0))

        def mm() -> tuple[Any, ...]:
            return (raw.MatMul(a=ma, b=mb, transpose_a=ta, transpose_b=tb),)
        return mm, np.dtype(dtype).name
    raise KeyError(f"no TensorFlow op for kernel {case.kernel!r} (known: {', '.join(TF_OPS)})")


def check(case: Any, got: tuple[Any, ...], reference: tuple[np.ndarray, ...]) -> str:
    """``ok`` when TF's outputs match the reference within the case's tolerances (as dspsim's must), else what
    differs: a mismatch is reported, not raised, because TF's fp16 CPU kernels may accumulate in fp16 where the
    chip (and the reference) accumulate in fp32 -- the timing still stands, the table says how far apart."""
    notes = []
    for o, g, w in zip(case.outputs, got, reference):
        g64 = np.asarray(g).astype(o.dtype).astype(np.float64).reshape(o.shape)
        w64 = np.asarray(w).astype(o.dtype).astype(np.float64)
        bad = ~np.isclose(g64, w64, rtol=o.rtol, atol=o.atol)
        if bad.any():
            notes.append(f"{o.name}: {int(bad.sum())} of {bad.size} beyond rtol {o.rtol:g} atol {o.atol:g}, "
                         f"max |diff| {float(np.max(np.abs(g64 - w64))):.3g}")
    return "ok" if not notes else "; ".join(notes)


def measure_tf(case: Any, reference: tuple[np.ndarray, ...], repeat: int) -> dict[str, Any]:
    """TF's op for ``case`` in this process: its first call, its best warm call of ``repeat``, the dtype it ran
    in and its thread pools; its outputs are checked against ``reference`` (the case's numpy math) within the
    case's tolerances (:func:`check`), so the comparison is of the same math."""
    import tensorflow as tf
    fn, dtype = _op(case)
    t0 = time.perf_counter()
    out = fn()
    first = time.perf_counter() - t0
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()  # eager CPU ops run synchronously: the result is computed when the call returns
        best = min(best, time.perf_counter() - t0)
    return {"tf_s": best, "tf_first_s": first, "tf_op": TF_OPS[case.kernel], "tf_dtype": dtype,
            "tf_check": check(case, out, reference),
            "tf_version": tf.__version__,
            "tf_threads": (tf.config.threading.get_intra_op_parallelism_threads(),
                           tf.config.threading.get_inter_op_parallelism_threads())}
