"""GEMM's fidelity figures (timing only, no numerics): run ``python bench/gemm_fidelity.py [--quick]``.

* one core: efficiency (flops over cycles × the core's FMAC peak) against k, the micro-kernel's loop alone and
  the whole call, so the fill and drain show at small k;
* FT78NE's eight cores: speed-up of a square 1024×1024×1024 GEMM and a skinny 128×128×16384 one from 1 to 2, 4
  and 8 cores, and the DDR bytes read for A (each A element once: the cores share GSM blocks) against what
  reading A per core would cost;
* MT7004: hp (fp16 products, fp32 accumulation) against fp on a compute-bound shape, with the lane ratio the
  target gives;
* a Conv2DBackpropFilter with a 1×1 filter against the GEMM of the same shape (dW = xᵀ·dy: m = in_c,
  n = out_c, k = batch·h·w, A = x stored [k, m], so trans_a = 1).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import sim  # noqa: E402
from kernels.common.loops import gemm_micro_kernel  # noqa: E402
from sim.timing import loop_cycles  # noqa: E402

A, B, C = 0x80000000, 0x90000000, 0xA0000000


def gemm(chip: str, symbol: str, m: int, n: int, k: int, mask: int | None = None, **kw) -> sim.Run:
    args = dict(a=A, b=B, c=C, m=m, n=n, k=k, **kw)
    if mask is not None:
        args["core_mask"] = mask
    return sim.Simulator(chip).call(symbol, numerics=False, **args)


def peak(chip: str, precision: str) -> int:
    core = sim.load_target(chip).core
    return core.precisions[precision].lanes * core.units["fmac"].count * 2


def efficiency_vs_k(quick: bool) -> None:
    t = sim.load_target("FT78NE")
    print("## One FT78NE core: efficiency against k (fp32, peak 192 flop/cycle)\n")
    print("| k | micro-kernel 6x128 loop cycles | loop efficiency | GEMM 96x128xk on core 0: cycles | efficiency |")
    print("|---|---|---|---|---|")
    for k in (64, 128, 256, 512, 1024, 2048, 4096)[: 4 if quick else None]:
        loop = gemm_micro_kernel(t.core, "fp32", 6, 128, k, itemsize=4)
        lc = loop_cycles(loop, t.core)
        ideal = 6 * 128 * k * 2 / peak("FT78NE", "fp32")
        run = gemm("FT78NE", "fp_gemm_s", 96, 128, k, mask=0x1)
        work = run.cycles - t.launch_overhead_cycles
        eff = 2 * 96 * 128 * k / work / peak("FT78NE", "fp32")
        print(f"| {k} | {lc} | {ideal / lc:.1%} | {run.cycles} | {eff:.1%} |")
    print()


def scaling(quick: bool, shape: tuple[int, int, int] | None = None) -> None:
    m, n, k = shape or ((512,) * 3 if quick else (1024,) * 3)
    print(f"## FT78NE: {m}x{n}x{k} fp32 from 1 to 8 cores\n")
    print("| cores | cycles | speed-up | efficiency | DDR bytes read for A | tiling |")
    print("|---|---|---|---|---|---|")
    base = None
    for cores in (1, 2, 4, 8):
        run = gemm("FT78NE", "fp_gemm_s", m, n, k, mask=(1 << cores) - 1)
        base = base or run.cycles
        a_bytes = sum(e.bytes for e in run.events if e.kind == "dma_in" and e.src is not None
                      and A <= e.src < A + m * k * 4)
        eff = 2 * m * n * k / (run.cycles * cores * peak("FT78NE", "fp32"))
        print(f"| {cores} | {run.cycles} | {base / run.cycles:.2f}x | {eff:.1%} | {a_bytes} "
              f"({a_bytes / (m * k * 4):.2f} x A) | {run.tiling.tiling if run.tiling else '-'} |")
    print()


def hp_vs_fp(quick: bool) -> None:
    m, n, k = (256, 512, 512) if quick else (512, 512, 1024)
    t = sim.load_target("MT7004")
    ratio = t.core.precisions["fp16_fp32acc"].lanes / t.core.precisions["fp32"].lanes
    print(f"## MT7004: hp against fp, {m}x{n}x{k} on 4 cores (lane ratio {ratio:g})\n")
    fp = gemm("MT7004", "fp_gemm_s", m, n, k)
    hp = gemm("MT7004", "hp_gemm_s", m, n, k)
    print(f"fp_gemm_s {fp.cycles} cycles, hp_gemm_s {hp.cycles} cycles: hp {fp.cycles / hp.cycles:.2f}x faster\n")


def conv_vs_gemm(quick: bool) -> None:
    nb, hw, ci, co = (4, 14, 64, 64) if quick else (8, 28, 128, 128)
    k = nb * hw * hw
    print(f"## FT78NE: Conv2DBackpropFilter 1x1 ({nb}x{hw}x{hw}x{ci} -> {co}) against GEMM {ci}x{co}x{k}\n")
    s = sim.Simulator("FT78NE")
    conv = s.call("fp_conv2d_backprop_filter_s", numerics=False, input=A, out_backprop=B, output=C,
                  input_shape=[nb, hw, hw, ci], filter_sizes=[1, 1, ci, co], strides=[1, 1, 1, 1], padding="VALID")
    g = gemm("FT78NE", "fp_gemm_s", ci, co, k, trans_a=1)
    print(f"conv2d_backprop_filter {conv.cycles} cycles ({conv.tiling.tiling if conv.tiling else '-'}); "
          f"gemm {g.cycles} cycles ({g.tiling.tiling if g.tiling else '-'}): ratio {conv.cycles / g.cycles:.2f}\n")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=(__doc__ or "").strip().splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller shapes (seconds instead of minutes)")
    quick = ap.parse_args().quick
    efficiency_vs_k(quick)
    scaling(quick)
    scaling(quick, (128, 128, 4096 if quick else 16384))  # skinny: a long reduction, small C
    hp_vs_fp(quick)
    conv_vs_gemm(quick)
