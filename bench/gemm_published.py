"""Published GEMM figures of the FT-M7032 cluster against dspsim on FT78NE: ``python bench/gemm_published.py``.

Writes the table of bench/gemm_published.md (timing only). Each row is one published configuration, the same
configuration in dspsim with the published algorithm forced through tiling keys (docs/gemm.md), the ratio of the
two efficiencies and, where the search can run in reasonable time, the default plan's figure beside it.  The
published figures are fp64 on FT-M7032, whose bytes-to-flops balance FT78NE's fp32 keeps (a 6 x 48 fp64 micro-
kernel is a 6 x 96 fp32 one); they are a yardstick, not constants any number of the model was fitted to.

Sources: Yu et al., "Optimizing General Matrix Multiplications on Modern Multi-core DSPs", IPDPS 2024 (micro-
kernel, single core, weak scaling); VVinstonSmith/BLAS-for-multi-core-DSP (irregular GEMM reports).
``--quick`` leaves out the 8-core weak-scaling runs (the slowest, minutes each; ``--weak`` runs only them, raising
the plan-size budget for their 130,000 tiles; ``--weak-gsm-full`` runs them with M_G as tall as the GSM holds at each
KA, on a quarter of the columns); ``--nt`` prints only the table of the merged NT micro-kernel's cycles
(BLAS-for-multi-core-DSP, 相关说明/NT模式下微内核的合并与重叠); ``--nt-yu`` only the table of Yu et al.'s NT kernel
and GEMM (one core, and the speed-up on 4 and 8 cores); ``--tt`` only TT against NN (BLAS-for-multi-core-DSP,
相关说明/TT模式下GEMM两种实现方法的对比); ``--thin-b`` only the published thin-B runs (相关说明/不规则矩阵乘算法设计和
性能优化) against the default plan; ``--thin-c`` only thin C on one core, each formulation against the default plan;
``--max-plan-tiles N`` raises the plan-size budget for this run; ``--target PATH`` runs on another target file
(a variant of FT78NE's: an assumption changed).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import sim  # noqa: E402
from kernels.common.loops import (  # noqa: E402
    gemm_micro_kernel,
    gemm_nt_micro_kernel,
    gemm_nt_serial_micro_kernel,
)
from sim.timing import loop_cost, loop_cycles, loop_text  # noqa: E402

A, B, C = 0x80000000, 0x90000000, 0xA0000000
CHIP = "FT78NE"
#: The published library's NN blocking (BLAS-for-multi-core-DSP): M_G 576, K_G 512, N_A 128, core 0 loading A
#: into its one GSM block, C streamed per k block.
LIBRARY = {"split": "n", "c_home": "ddr", "a_loader": "core0", "a_buffers": 1, "m_block": 576, "k_block": 512,
           "n_block": 128}


def efficiency(m: int, n: int, k: int, cores: int, tiling: dict | None) -> tuple[float, sim.Run, float]:
    """(fraction of the cores' FMAC peak, the run, seconds) of one timing-only call."""
    t0 = time.perf_counter()
    run = sim.Simulator(CHIP, tuning_cache=False).call("fp_gemm_s", a=A, b=B, c=C, m=m, n=n, k=k, numerics=False,
                                                       core_mask=(1 << cores) - 1, tiling=tiling)
    core = run.target.core
    peak = core.precisions["fp32"].lanes * core.units["fmac"].count * 2 * cores
    return 2 * m * n * k / (run.cycles * peak), run, time.perf_counter() - t0


def row(what: str, published: float, forced: float | None, default: float | None, note: str = "") -> str:
    ratio = f"{forced / published:.3f}" if forced is not None else "-"
    f = f"{forced:.1%}" if forced is not None else "-"
    d = f"{default:.1%}" if default is not None else "-"
    return f"| {what} | {published:.1%} | {f} | {ratio} | {d} | {note} |"


def main(quick: bool) -> None:
    print("| configuration | published | dspsim, published algorithm | ratio | dspsim, default plan | notes |")
    print("|---|---|---|---|---|---|")
    core = sim.load_target(CHIP).core
    peak = core.precisions["fp32"].lanes * core.units["fmac"].count * 2
    for ka, pub in ((64, 0.920), (512, 0.989), (1024, 0.995)):
        loop = gemm_micro_kernel(core, "fp32", 6, 96, ka, itemsize=4)
        got = 2 * 6 * 96 * ka / peak / loop_cycles(loop, core)
        print(row(f"micro-kernel 6 x {ka} x 96 (fp64 6 x {ka} x 48), Yu et al.", pub, got, None, "the loop alone"),
              flush=True)
    for ka, pub in ((128, 0.92), (256, 0.94), (512, 0.96)):
        # The published 6 x 48 fp64 micro-kernel is 6 x 96 in fp32, and a B block of whole micro-kernels (N_A 96).
        tiling = {"c_home": "ddr", "k_block": ka, "m_micro": 6, "n_micro": 96, "n_block": 96}
        got, run, s = efficiency(576, 1536, 2048, 1, tiling)
        print(row(f"1 core NN, C streamed, KA = {ka}: 576 x 1536 x 2048, Yu et al. (about)", pub, got, None,
                  f"{run.tiling.tiling}; {s:.0f} s"), flush=True)
    for m, pub_lib, pub_best in ((144, 0.567, 0.81), (192, None, 0.914)):
        lib = default = None
        if pub_lib is not None:
            lib, run, s = efficiency(m, 12288, 4096, 8, {**LIBRARY, "m_block": m})
            note = f"library blocking, {run.tiling.tiling}; {s:.0f} s"
            print(row(f"8 cores, M = {m}, K = 4096, N = 12288: the library", pub_lib, lib, None, note), flush=True)
        default, run, s = efficiency(m, 12288, 4096, 8, None)
        print(row(f"8 cores, M = {m}, K = 4096, N = 12288: the best published kernel", pub_best, None, default,
                  f"default {run.tiling.tiling}; {s:.0f} s"), flush=True)
    if quick:
        return
    weak_scaling_rows()


#: Yu et al.'s NN weak scaling (M = 6048, K = 2048, N = 1536 P, C streamed per k block): (KA, published speed-up on 8
#: cores, published one-core efficiency at that KA).
WEAK_SCALING = ((512, 7.8, 0.96), (256, 5.4, 0.94), (128, 3.7, 0.92))
#: Yu et al.'s NN GSM block of A: M_G = 1512 rows (one 1512 x 512 fp64 block fills the 6 MiB GSM).
YU_M_G = 1512


def weak_scaling_rows() -> None:
    """Yu et al.'s NN weak scaling on one A block of their M_G rows (M = M_G: per block each core does what it does
    in the published run, and B is read once per block, as there), and the same with the library's M_G = 576.  Per
    row, the DDR bytes (A once, B once, C stored once per k block and loaded back for all but the first) over the
    run's cycles, and over the cycles the published figure implies for the same bytes."""
    raise_plan_budget(400_000)  # (KA = 128 on 8 cores plans about 130,000 tiles at M = 1512)
    core = sim.load_target(CHIP).core
    peak = core.precisions["fp32"].lanes * core.units["fmac"].count * 2
    print("| KA | M = M_G | published speed-up on 8 cores | dspsim | ratio | dspsim efficiency, 1 core / 8 cores | "
          "DDR B/cycle: dspsim / implied by the published figure | tiling; seconds |")
    print("|---|---|---|---|---|---|---|---|")
    for m_g in (YU_M_G, 576):
        for ka, pub, pub_one in WEAK_SCALING:
            # The published A panel (6 x 512) in SM's three slots: as many rows at a shallower KA (fewer tiles).
            tiling = {"c_home": "ddr", "a_loader": "core0", "a_buffers": 1, "k_block": ka, "m_block": m_g,
                      "m_micro": 6, "m_panel": 6 * 512 // ka, "n_micro": 96, "n_block": 96}
            one, _, _ = efficiency(m_g, 1536, 2048, 1, {**tiling, "a_loader": "cores"})
            eight, run, s = efficiency(m_g, 1536 * 8, 2048, 8, tiling)
            n, k, blocks = 1536 * 8, 2048, 2048 // ka
            ddr_bytes = 4 * (m_g * k + k * n + (2 * blocks - 1) * m_g * n)
            implied = 2 * m_g * n * k / (8 * peak * pub / 8 * pub_one)  # cycles of the published efficiency
            scale = 8 * eight / one
            print(f"| {ka} | {m_g} | about {pub}x | {scale:.2f}x | {scale / pub:.3f} | {one:.1%} / {eight:.1%} | "
                  f"{ddr_bytes / run.cycles:.1f} / {ddr_bytes / implied:.1f} | {run.tiling.tiling}; {s:.0f} s |",
                  flush=True)


#: Columns per core of :func:`weak_scaling_gsm_full_rows` (a quarter of the published 1536: the A from GSM, B and C
#: bytes per flop stay as they are, the plans a quarter as long).
GSM_FULL_N_PER_CORE = 384


def weak_scaling_gsm_full_rows() -> None:
    """Yu et al.'s NN weak scaling with a GSM block as tall as the GSM holds at each KA (M_G = 1512 / 3024 / 6048
    at KA = 512 / 256 / 128: one M_G x KA fp64 block in 6 MiB, an fp32 one in FT78NE's 3 MiB), and beside each the
    M_G = 1512 row again, all on a quarter of the published columns per core (the full plans of M_G = 6048 hold
    over a million tiles): Yu et al. do not give M_G per KA, and a taller block reads B less often."""
    raise_plan_budget(1_200_000)
    print("| KA | M = M_G | columns per core | published speed-up on 8 cores | dspsim | ratio | dspsim efficiency, "
          "1 core / 8 cores | DDR B/cycle | seconds |")
    print("|---|---|---|---|---|---|---|---|---|")
    n_core = GSM_FULL_N_PER_CORE
    for ka, pub, _ in WEAK_SCALING:
        for m_g in dict.fromkeys((YU_M_G * 512 // ka, YU_M_G)):
            tiling = {"split": "n", "b_staging": "am", "c_home": "ddr", "a_loader": "core0", "a_buffers": 1,
                      "k_block": ka, "m_block": m_g, "m_micro": 6, "m_panel": 6 * 512 // ka, "n_micro": 96,
                      "n_block": 96}
            one, _, s1 = efficiency(m_g, n_core, 2048, 1, {**tiling, "a_loader": "cores"})
            eight, run, s8 = efficiency(m_g, n_core * 8, 2048, 8, tiling)
            n, k, blocks = n_core * 8, 2048, 2048 // ka
            ddr_bytes = 4 * (m_g * k + k * n + (2 * blocks - 1) * m_g * n)
            scale = 8 * eight / one
            print(f"| {ka} | {m_g} | {n_core} | about {pub}x | {scale:.2f}x | {scale / pub:.3f} | {one:.1%} / "
                  f"{eight:.1%} | {ddr_bytes / run.cycles:.1f} | {s1 + s8:.0f} |", flush=True)


#: The merged NT micro-kernel's published cycles (fp64 on FT-M7032; 3 x 6 blocks): (blocks m/3, n/6, k, the
#: report's formula 92 + (14 + 3k/8) x blocks, measured with get_clk).  The measurement includes get_clk's 21
#: cycles and the call's 7; dspsim's loop counts the call (its 8 cycles of loop overhead), not get_clk.
NT_PUBLISHED = ((1, 1, 512, 298, 326), (4, 4, 512, 3388, 3416), (2, 2, 1024, 1684, 1712))
GET_CLK = 21


def nt_rows() -> None:
    """The merged NT micro-kernel: published cycles against dspsim's loop on FT78NE (fp32: a fp64 k-step of 32 is
    two vectors a row, as a fp32 k-step of 64 is, so fp64 k maps to fp32 2k)."""
    core = sim.load_target(CHIP).core
    print("| blocks (m/3 x n/6), k (fp64) | published formula | published measured - get_clk | dspsim | ratio | "
          "dspsim's loop |")
    print("|---|---|---|---|---|---|")
    for mb, nb, k, formula, measured in NT_PUBLISHED:
        loop = gemm_nt_micro_kernel(core, "fp32", 3, 6, 2 * k, blocks=mb * nb)
        got = loop_cycles(loop, core)
        print(f"| {mb} x {nb}, {k} | {formula:,} | {measured - GET_CLK:,} | {got:,} | "
              f"{got / (measured - GET_CLK):.3f} | {loop_text(loop_cost(loop, core), core)} |", flush=True)


#: Yu et al.'s NT micro-kernel (IPDPS 2024, Fig. 12(b): 6 x KA x 8, fp64): measured efficiencies, and the paper's
#: k / (k + 138) for the depths it plots but does not quote.
NT_YU_KERNEL = ((64, 0.303, "measured"), (512, 512 / 650, "formula"), (1024, 1024 / 1162, "formula"),
                (2048, 0.932, "measured"))
#: Yu et al.'s NT GEMM on one core (Fig. 14: stable over M, K and N, here M = 1440, N = 2048, K = 2048 fp64):
#: (KA, N_A, M_S, M_G, published efficiency).
NT_YU_ONE_CORE = ((512, 64, 12, 1440, 0.74), (1024, 32, 12, 720, 0.84), (2048, 16, 6, 288, 0.89))
#: Yu et al.'s NT GEMM on P cores (Fig. 16: M = 2880, K = 2048 fp64, N = 2048 P): (KA, N_A, M_S, M_G, cores,
#: published speed-up; None where the paper says "nearly linear" without a figure).  N_A, M_S and M_G as on one
#: core; K_A = 256 (not run on one core) with the widest B block of the others.
NT_YU_SCALING = ((256, 128, 12, 720, 8, None), (512, 64, 12, 720, 8, None), (1024, 32, 12, 720, 4, 3.73),
                 (1024, 32, 12, 720, 8, 6.52))


def yu_nt_tiling(ka: int, n_a: int, m_s: int, m_g: int, cores: int) -> dict:
    """Yu et al.'s NT schedule as tiling keys (docs/gemm.md): their 6 x 8 kernel, each block reduced before the next
    (``reduce_serial``); C streamed through SM per KA block; B blocks of N_A rows, A panels of M_S rows in AM; an fp64
    k-step of 16 lanes is half a 32-lane fp32 row, so K_A maps to 2 K_A fp32; A's blocks of M_G rows in GSM (on
    several cores core 0 loads each, one copy for every core).  Left to the search: how many GSM blocks are in
    flight (two where two fit)."""
    staged = {"a_loader": "core0"} if cores > 1 else {"a_staging": "gsm"}  # (several cores: A always in GSM)
    return {"split": "n", "nt_kernel": "reduce_serial", "c_home": "ddr", "b_staging": "am", **staged, "m_micro": 6,
            "n_micro": 8, "k_block": 2 * ka, "m_panel": m_s, "m_block": m_g, "n_block": n_a}


def efficiency_nt(m: int, n: int, k: int, cores: int, tiling: dict) -> tuple[float, sim.Run, float]:
    """:func:`efficiency` of C = A·Bᵀ (B stored transposed)."""
    t0 = time.perf_counter()
    run = sim.Simulator(CHIP, tuning_cache=False).call("fp_gemm_s", a=A, b=B, c=C, m=m, n=n, k=k, trans_b=1,
                                                       numerics=False, core_mask=(1 << cores) - 1, tiling=tiling)
    core = run.target.core
    peak = core.precisions["fp32"].lanes * core.units["fmac"].count * 2 * cores
    return 2 * m * n * k / (run.cycles * peak), run, time.perf_counter() - t0


def yu_nt_rows() -> None:
    """Yu et al.'s NT kernel and GEMM (Figs. 12(b), 14, 16) against dspsim with their schedule forced."""
    core = sim.load_target(CHIP).core
    peak = core.precisions["fp32"].lanes * core.units["fmac"].count * 2
    print("| configuration | published | dspsim, published algorithm | ratio | notes |")
    print("|---|---|---|---|---|")
    for ka, pub, how in NT_YU_KERNEL:
        loop = gemm_nt_serial_micro_kernel(core, "fp32", 6, 8, 2 * ka)
        got = 2 * 6 * 8 * 2 * ka / peak / loop_cycles(loop, core)
        print(f"| NT micro-kernel 6 x {ka} x 8 (fp64), Yu et al. ({how}) | {pub:.1%} | {got:.1%} | {got / pub:.3f} | "
              f"{loop_text(loop_cost(loop, core), core)} |", flush=True)
    for ka, n_a, m_s, m_g, pub in NT_YU_ONE_CORE:
        got, run, s = efficiency_nt(1440, 2048, 4096, 1, yu_nt_tiling(ka, n_a, m_s, m_g, 1))
        print(f"| 1 core NT, KA = {ka}, N_A = {n_a}, M_S = {m_s}, M_G = {m_g}: 1440 x 2048 x 2048 (fp64) | {pub:.1%} | "
              f"{got:.1%} | {got / pub:.3f} | {run.cycles:,} cycles, a_buffers {run.tiling.tiling['a_buffers']}; "
              f"{s:.0f} s |", flush=True)
    one: dict[int, float] = {}
    raise_plan_budget(250_000)  # (8 cores at K_A = 256 plan 122,000 tiles, staging tiles included)
    for ka, n_a, m_s, m_g, cores, pub_x in NT_YU_SCALING:
        # M = 720 rows, one A block of the published M_G (the published 2880 on 8 cores plans 245,760 tiles at
        # KA = 1024, beyond the plan-size budget): per A block each core does what it does in the published run,
        # and B and C move as often per flop; the speed-up compares like with like.
        m = 720
        if ka not in one:
            one[ka], _, _ = efficiency_nt(m, 2048, 4096, 1, yu_nt_tiling(ka, n_a, m_s, m_g, 1))
        got, run, s = efficiency_nt(m, 2048 * cores, 4096, cores, yu_nt_tiling(ka, n_a, m_s, m_g, cores))
        scale = cores * got / one[ka]
        pub = f"{pub_x}x" if pub_x is not None else "nearly linear"
        ratio = f"{scale / pub_x:.3f}" if pub_x is not None else "-"
        print(f"| NT speed-up on {cores} cores, KA = {ka}, N_A = {n_a}: {m} x 2048P x 2048 (fp64) | {pub} | "
              f"{scale:.2f}x | {ratio} | efficiency {one[ka]:.1%} on 1 core, {got:.1%} on {cores}; {s:.0f} s |",
              flush=True)


def tt_rows() -> None:
    """TT against NN (BLAS-for-multi-core-DSP, 相关说明/TT模式下GEMM两种实现方法的对比: M = 1536, K = 2048, N = 2304;
    the transpose of C fused into the GEMM costs less than 2 % against NN on every core count): dspsim's default
    plans of NN and TT on 1 and 8 cores, and TT's direct formulation (``formulation: direct``, B's blocks transposed
    in AM and A's panels read by strides: the search's other choice, which it does not take)."""
    m, n, k = 1536, 2304, 2048
    print("| cores | NN (default plan) | TT (default plan) | TT / NN | TT's plan | TT direct (forced) | / NN |")
    print("|---|---|---|---|---|---|---|")
    for cores in (1, 8):
        got = {}
        for name, trans, tiling in (("nn", 0, None), ("tt", 1, None), ("direct", 1, {"formulation": "direct"})):
            t0 = time.perf_counter()
            run = sim.Simulator(CHIP, tuning_cache=False).call(
                "fp_gemm_s", a=A, b=B, c=C, m=m, n=n, k=k, trans_a=trans, trans_b=trans, numerics=False,
                core_mask=(1 << cores) - 1, tiling=tiling)
            core = run.target.core
            peak = core.precisions["fp32"].lanes * core.units["fmac"].count * 2 * cores
            got[name] = (2 * m * n * k / (run.cycles * peak), run, time.perf_counter() - t0)
        (nn, _, _), (tt, run, s), (direct, _, _) = got["nn"], got["tt"], got["direct"]
        print(f"| {cores} | {nn:.1%} | {tt:.1%} | {tt / nn:.3f} | {run.tiling.tiling}; {s:.0f} s | {direct:.1%} | "
              f"{direct / nn:.3f} |", flush=True)


#: The published thin-B runs (BLAS-for-multi-core-DSP, 相关说明/不规则矩阵乘算法设计和性能优化, 8 cores, fp64, split m):
#: (m, n, k, the scheme, its efficiency).
THIN_B = ((13824, 192, 4096, "direct, scheme 2 (K_G 512, N_G 192)", 0.602),
          (12288, 192, 4096, "transposed to short A and back (K_G 2048, N_G 192)", 0.851))


#: Split m with each core's A panels read straight from memory and the B block shared through GSM, the whole
#: 192 columns a block in 6 x 128 micro-kernels (128 + 64 columns): beside the default (2 x 96), what the even
#: split buys.
THIN_B_DIRECT = {"split": "m", "a_staging": "memory", "a_loader": "cores", "b_staging": "gsm", "n_block": 192,
                 "k_block": 256, "m_micro": 6, "m_panel": 12, "n_micro": 128}


def thin_b_rows() -> None:
    """The published thin-B figures against dspsim's default plan on FT78NE's 8 cores, the default's keys with
    6 x 128 micro-kernels, and the transposed formulation (``formulation: transposed``, the rest the search's)."""
    print("| shape (m x n x k), 8 cores | published scheme | published | dspsim default | ratio | default plan | "
          "dspsim, the default with 6 x 128 micro-kernels (forced) | ratio | dspsim, transposed formulation | "
          "ratio |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for m, n, k, scheme, pub in THIN_B:
        got, run, s = efficiency(m, n, k, 8, None)
        limited = next((line for line in run.summary_text().splitlines() if line.startswith("limited by")), "")
        forced, _, _ = efficiency(m, n, k, 8, {**run.tiling.tiling, **THIN_B_DIRECT})
        swapped, srun, _ = efficiency(m, n, k, 8, {"formulation": "transposed"})
        print(f"| {m} x {n} x {k} | {scheme} | {pub:.1%} | {got:.1%} | {got / pub:.3f} | {run.tiling.tiling}; "
              f"{limited}; {s:.0f} s | {forced:.1%} | {forced / pub:.3f} | {swapped:.1%} "
              f"({srun.tiling.tiling}) | {swapped / pub:.3f} |", flush=True)


def thin_c_rows() -> None:
    """Thin C on one core (fp32, 4096 x n x 4096): the direct formulation, the transposed one (C's rows the
    vectors, each tile transposed into C), and the default plan, which searches both where n is below two
    vectors (docs/gemm.md, "The transposed formulation")."""
    print("| m x n x k, 1 core | direct | transposed | default plan | default's formulation |")
    print("|---|---|---|---|---|")
    for n in (16, 32, 48, 64):
        got = {}
        for name, tiling in (("direct", {"formulation": "direct"}), ("transposed", {"formulation": "transposed"}),
                             ("default", None)):
            try:
                got[name] = efficiency(4096, n, 4096, 1, tiling)
            except sim.SimError:  # (no formulation key: n of two vectors or more)
                got[name] = None
        default = got["default"]
        assert default is not None
        cells = [f"{got[x][0]:.1%}" if got[x] is not None else "- (no key)" for x in ("direct", "transposed")]
        print(f"| 4096 x {n} x 4096 | {cells[0]} | {cells[1]} | {default[0]:.1%} | "
              f"{default[1].tiling.tiling.get('formulation', 'direct (no key)')} |", flush=True)


def raise_plan_budget(tiles: int) -> None:
    """The plan-size budget (sim.tuning.MAX_PLAN_TILES) raised to ``tiles`` in every module that reads it, for
    this process (a benchmark of one huge plan; the simulator's own budget is unchanged)."""
    import sim.planning
    import sim.tuning.limits
    import sim.tuning.misses
    for module in (sim.tuning.limits, sim.tuning.misses, sim.planning):
        module.MAX_PLAN_TILES = tiles  # type: ignore[attr-defined]


def _args() -> argparse.Namespace:
    """The command line (the modules' docstring says what each table is)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    table = ap.add_mutually_exclusive_group()
    for flag, what in (("--quick", "the main table without the 8-core weak-scaling runs"),
                       ("--weak", "only the weak-scaling rows"), ("--weak-gsm-full", "weak scaling, M_G as tall "
                       "as the GSM holds"), ("--nt", "the merged NT micro-kernel's cycles"),
                       ("--nt-yu", "Yu et al.'s NT kernel and GEMM"), ("--tt", "TT against NN"),
                       ("--thin-b", "the published thin-B runs"), ("--thin-c", "thin C on one core")):
        table.add_argument(flag, action="store_true", help=what)
    ap.add_argument("--target", help="a target file to run on instead of FT78NE (an assumption changed)")
    ap.add_argument("--max-plan-tiles", type=int, help="raise the plan-size budget for this run")
    return ap.parse_args()


if __name__ == "__main__":
    args = _args()
    if args.target:
        CHIP = args.target
    if args.max_plan_tiles:
        raise_plan_budget(args.max_plan_tiles)
    if args.nt:
        nt_rows()
    elif args.nt_yu:
        yu_nt_rows()
    elif args.tt:
        tt_rows()
    elif args.thin_c:
        thin_c_rows()
    elif args.weak_gsm_full:
        weak_scaling_gsm_full_rows()
    elif args.weak:
        weak_scaling_rows()
    elif args.thin_b:
        thin_b_rows()
    else:
        main(args.quick)
