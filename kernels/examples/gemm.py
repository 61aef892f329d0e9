"""Example calls of GEMM (C = op(A)·op(B) + beta·C, row-major, with row pitches)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from kernels.examples import Data, Example, Output

KERNEL = "gemm"


def reference(m: int, n: int, k: int, trans_a: int, trans_b: int, beta: int, lda: int, ldb: int, ldc: int):
    """C from the stored A, B (and C): op(A)·op(B) (+ C) in float64, rounded once to C's dtype; the elements
    between each row's end and its pitch are the ones C held before (never written)."""
    def fn(a: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        av, bv = np.asarray(a["a"]), np.asarray(a["b"])
        oa = av[:, :(m if trans_a else k)].astype(np.float64)
        ob = bv[:, :(k if trans_b else n)].astype(np.float64)
        prod = (oa.T if trans_a else oa) @ (ob.T if trans_b else ob)
        c = np.asarray(a["c"]).copy() if "c" in a else np.zeros((m, ldc), av.dtype)
        c[:, :n] = (prod + (c[:, :n].astype(np.float64) if beta else 0.0)).astype(av.dtype)
        return {"c": c}
    return fn


def _example(size: str, chip: str, prefix: str, variant: str, at: tuple[int, int, int], m: int, n: int, k: int,
             description: str, *, trans_a: int = 0, trans_b: int = 0, beta: int = 0, pad: int = 0,
             core: int | None = None, core_mask: int | None = None, comment: str = "",
             config: str | None = None) -> Example:
    """An example of an m×n×k product at ``at`` (A, B, C); ``pad`` elements between each row's end and its pitch
    (the pitches given as arguments only when there is a pad)."""
    dt = "float16" if prefix == "hp" else "float32"
    a_rows, a_cols = (k, m) if trans_a else (m, k)
    b_rows, b_cols = (n, k) if trans_b else (k, n)
    lda, ldb, ldc = a_cols + pad, b_cols + pad, n + pad
    args: dict[str, Any] = dict(a=at[0], b=at[1], c=at[2], m=m, n=n, k=k)
    args.update({key: v for key, v in (("trans_a", trans_a), ("trans_b", trans_b), ("beta", beta)) if v})
    if pad:
        args.update(lda=lda, ldb=ldb, ldc=ldc)
    args.update({"core": core} if core is not None else {"core_mask": core_mask} if core_mask is not None else {})
    data = [Data("a", at[0], (a_rows, lda), dt, (1, -1.0, 1.0), core=core),
            Data("b", at[1], (b_rows, ldb), dt, (2, -1.0, 1.0), core=core)]
    if beta or pad:  # C's old values: the addend, and the sentinels between its rows' ends and their pitch
        data.append(Data("c", at[2], (m, ldc), dt, (3, -1.0, 1.0), core=core))
    # Sums of k products of values in [-1, 1]: fp32 accumulation in another order than float64's (fp16 outputs
    # one rounding apart).
    rtol, atol = (1e-2, 2e-2 + 1e-3 * k ** 0.5) if prefix == "hp" else (1e-4, 1e-5 * k)
    outputs = (Output("c", at[2], (m, ldc), dt, rtol, atol, core),)
    text = f"{m}x{n}x{k}" + ("".join(f" {w}" for w, v in (("A^T", trans_a), ("B^T", trans_b), ("beta=1", beta)) if v)
                             + (f", pitch +{pad}" if pad else ""))
    return Example(KERNEL, size, chip, prefix, variant, description, args, tuple(data), outputs,
                   reference(m, n, k, trans_a, trans_b, beta, lda, ldb, ldc), comment, config, text,
                   {"m": m, "n": n, "k": k})


def examples() -> list[Example]:
    """Every example of GEMM."""
    ddr = (0x80000000, 0x90000000, 0xA0000000)
    out = [_example("tiny", "FT78NE", "fp", "s", ddr, 5, 7, 3, "GEMM 5x7x3 on FT78NE"),
           _example("tiny", "MT7004", "fp", "s", ddr, 4, 9, 6, "GEMM 4x9x6, A and B transposed, on MT7004",
                    trans_a=1, trans_b=1),
           _example("tiny", "MT7004", "hp", "s", ddr, 3, 5, 17, "GEMM fp16 3x5x17, beta = 1 with pitches, on MT7004",
                    beta=1, pad=2)]
    out += [
        _example("small", "FT78NE", "fp", "s", (0xA0000000, 0xA4000000, 0xA8000000), 384, 512, 512,
                 "GEMM fp32, shared variant, 384x512x512 on FT78NE's eight cores", core_mask=0xFF,
                 comment="GEMM in fp32 on FT78NE's eight cores: C[384, 512] = A[384, 512] . B[512, 512], buffers in "
                         "DDR.\nBlocks of A go through the shared GSM level (each core loads a share, every core "
                         "computes on\nthe whole block), each core's B block and C block stay in its AM, A's "
                         "micro-panels in SM.",
                 config="ft78ne_gemm_s"),
        _example("small", "MT7004", "fp", "p", (0x10000000, 0x10100000, 0x10200000), 100, 72, 300,
                 "GEMM fp32, private variant, B transposed, beta = 1 with row pitches, on MT7004 core 2",
                 trans_b=1, beta=1, pad=3, core=2,
                 comment="GEMM in fp32 on one MT7004 core's private L2: C[100, 72] += A[100, 300] . B^T with B stored "
                         "[72, 300],\nevery matrix with 3 elements between a row's end and its pitch (never read or "
                         "written).",
                 config="mt7004_gemm_p"),
        _example("small", "MT7004", "hp", "s", (0xA0000000, 0xA1000000, 0xB0000000), 256, 192, 384,
                 "GEMM fp16, shared variant, A transposed, on MT7004", trans_a=1, core_mask=0xF,
                 comment="GEMM in fp16 on MT7004's four cores: C[256, 192] = A^T . B with A stored [384, 256]; fp16 "
                         "products\naccumulated in fp32, C rounded to fp16 once; buffers in DDR.",
                 config="mt7004_hp_gemm_s"),
    ]
    for size, (m, n, k) in (("medium", (256, 512, 512)), ("large", (512, 512, 1024))):
        for chip, prefix in (("FT78NE", "fp"), ("MT7004", "fp"), ("MT7004", "hp")):
            out.append(_example(size, chip, prefix, "s", ddr, m, n, k, f"GEMM {m}x{n}x{k} on {chip}"))
    return out


def scaled_args(n: int, base: tuple[int, ...]) -> dict[str, Any]:
    """Arguments whose work grows linearly with ``n`` (128 n rows of C, 1024 columns, depth 128)."""
    a, b, c, _ = base
    return dict(a=a, b=b, c=c, m=128 * n, n=1024, k=128)
