"""The merged NT micro-kernel (kernels/common/loops.py: gemm_nt_micro_kernel, modulo_reduction) priced by hand from
targets/FT78NE.yaml, read with pyyaml.

The published kernel (BLAS-for-multi-core-DSP, 相关说明/NT模式下微内核的合并与重叠) computes C = A·Bᵀ in blocks of
3 x 6 elements of C, one vector accumulator each (18: the 3 FMAC units times their latency 6), over k read as
vectors from AM; merged, a block's reduction across lanes issues while the next block computes, and the last
block's reduction ends the kernel.  Its report gives 92 + (14 + 3k/8) x blocks cycles (fp64, k a multiple of 32).
"""

from __future__ import annotations

from math import ceil
from pathlib import Path

import yaml

import sim
from kernels.common.loops import VSTORE, gemm_nt_micro_kernel, modulo_reduction
from sim.model.plan import REDUCE, stored
from sim.timing import loop_cost, loop_cycles

ROOT = Path(__file__).resolve().parents[1]
FT = yaml.safe_load((ROOT / "targets" / "FT78NE.yaml").read_text())["core"]
CORE = sim.load_target("FT78NE").core


def test_the_modulo_reduction_of_48_is_the_published_table():
    # Yu et al., Table III: 48 -> 12 -> 3 vectors through AM in modulo-4 order, then the SVR read-out, the scalar
    # adds and stores (tests/test_epilogue_chains.py derives its 121 cycles).
    assert modulo_reduction(CORE, 48) == (
        {VSTORE: 24}, {"vls": 24}, {"fmac": 24}, {"fmac": 12}, {VSTORE: 6}, {"vls": 6}, {"fmac": 6}, {"fmac": 3},
        {"valu": 3}, {REDUCE: 3}, {"salu": 48}, {stored("sload"): 48})


def test_a_3x6_block_by_hand():
    """k = 1024 fp32 (the published fp64 k = 512: a k-step of 32 fp64 is two vectors a row, as 64 fp32 are)."""
    u = FT["units"]
    lanes = FT["vector_width_bytes"] // 4  # 32 fp32 lanes
    per_issue = u["vls"]["bytes_per_issue"] // FT["vector_width_bytes"]  # a VLDDW / VSTDW moves 2 vectors
    steps_k = 1024 // lanes
    # A block's k-steps: 3 + 6 row vectors (5 VLDDW) and 18 FMACs per vector of k.
    vls_body, fmac_body = ceil(9 / per_issue) * steps_k, 18 * steps_k  # 160, 576
    # Its reduction, issued while the next block computes: 18 vectors stored and read back (9 + 9 issues), added in
    # groups of 4 (5 groups: 10 + 5 FMACs) to 5; 5 vectors stored and read back (3 + 3), added (2 groups: 4 + 2) to
    # 2; 2 VMVCGC; 18 elements read out (one a cycle on the scalar load unit), 18 scalar adds, 18 scalar stores.
    reduction = modulo_reduction(CORE, 18)
    assert reduction == ({VSTORE: 9}, {"vls": 9}, {"fmac": 10}, {"fmac": 5}, {VSTORE: 3}, {"vls": 3}, {"fmac": 4},
                         {"fmac": 2}, {"valu": 2}, {REDUCE: 2}, {"salu": 18}, {stored("sload"): 18})
    loop = gemm_nt_micro_kernel(CORE, "fp32", 3, 6, 1024, blocks=16)
    assert dict(loop.issues) == {"vls": vls_body + 24, "fmac": fmac_body + 21, "valu": 2, "sload": 18 + 18,
                                 "salu": 18}
    # The FMAC units bound a block: ceil(597 / 3) = 199 cycles (vls 184 / 2 = 92; the vector issue width
    # (184 + 597 + 2) / 6 = 131; the one scalar load unit 36).
    ii = ceil((fmac_body + 21) / u["fmac"]["count"])
    assert ii == 199
    # The last block's reduction as a chain (sim.timing.epilogue_cycles): (start S, end F) of each step, S =
    # S_before + L_before (or the last end on its units), F = max(S + issue cycles, F_before + L_before).
    st, ld, fm, va = (u["vls"]["store_latency_cycles"], u["vls"]["latency_cycles"], u["fmac"]["latency_cycles"],
                      u["valu"]["latency_cycles"])
    sa, ss, red = u["salu"]["latency_cycles"], u["sload"]["store_latency_cycles"], FT["reduction_latency_cycles"]
    s1, f1 = 0, ceil(9 / 2)                                  # VSTDW x 9: 0, 5
    s2 = max(s1 + st, f1)                                    # VLDDWM4 x 9: 5, 10
    f2 = max(s2 + ceil(9 / 2), f1 + st)
    s3 = s2 + ld                                             # 10 adds: 14, 19
    f3 = max(s3 + ceil(10 / 3), f2 + ld)
    s4 = s3 + fm                                             # 5 adds: 20, 25
    f4 = max(s4 + ceil(5 / 3), f3 + fm)
    s5 = max(s4 + fm, f2)                                    # VSTDW x 3: 26, 31
    f5 = max(s5 + ceil(3 / 2), f4 + fm)
    s6 = max(s5 + st, f5)                                    # VLDDWM4 x 3 after them: 31, 35
    f6 = max(s6 + ceil(3 / 2), f5 + st)
    s7 = s6 + ld                                             # 4 adds: 40, 44
    f7 = max(s7 + ceil(4 / 3), f6 + ld)
    s8 = s7 + fm                                             # 2 adds: 46, 50
    f8 = max(s8 + 1, f7 + fm)
    s9 = s8 + fm                                             # VMVCGC x 2: 52, 56
    f9 = max(s9 + 2, f8 + fm)
    s10 = s9 + va                                            # the SVR read, 16 a vector: 54, 86
    f10 = max(s10 + 2 * red, f9 + va)
    s11 = s10                                                # 18 scalar adds: 54, 86
    f11 = max(s11 + ceil(18 / 3), f10)
    s12 = s11 + sa                                           # 18 SSTDW on one unit: 55, 87
    f12 = max(s12 + 18, f11 + sa)
    assert [(s1, f1), (s2, f2), (s3, f3), (s4, f4), (s5, f5), (s6, f6), (s7, f7), (s8, f8), (s9, f9), (s10, f10),
            (s11, f11), (s12, f12)] == [(0, 5), (5, 10), (14, 19), (20, 25), (26, 31), (31, 35), (40, 44), (46, 50),
                                        (52, 56), (54, 86), (54, 86), (55, 87)]
    epilogue = f12 + ss                                      # 91
    fill = ld + fm                                           # the first VLDDW, then its FMAC: 15
    cost = loop_cost(loop, CORE)
    assert (cost.ii, cost.fill, cost.epilogue) == (ii, fill, epilogue) == (199, 15, 91)
    # 8 + 15 + 16 x 199 + 91 = 3298, against the report's 3388 + the 7-cycle call = 3395 (0.971); one block:
    # 8 + 15 + 199 + 91 = 313 against 305 (1.026).
    assert loop_cycles(loop, CORE) == FT["loop_overhead_cycles"] + fill + 16 * ii + epilogue == 3298
    assert loop_cycles(gemm_nt_micro_kernel(CORE, "fp32", 3, 6, 1024), CORE) == 313


def test_merging_pays_the_reduction_once():
    """The one-block kernel entered 16 times pays each entry's loop overhead, fill and final reduction chain; merged
    into one kernel of 16 blocks, those are paid once (the blocks' own work, reductions included, is the same)."""
    one = gemm_nt_micro_kernel(CORE, "fp32", 3, 6, 1024)
    apart = gemm_nt_micro_kernel(CORE, "fp32", 3, 6, 1024, entries=16)
    merged = gemm_nt_micro_kernel(CORE, "fp32", 3, 6, 1024, blocks=16)
    assert loop_cycles(apart, CORE) == 16 * loop_cycles(one, CORE) == 16 * 313
    assert loop_cycles(apart, CORE) - loop_cycles(merged, CORE) == 15 * (8 + 15 + 91)
    assert merged.vector_registers == 2 * 18 + 9 <= CORE.vector_registers


def test_yu_et_al_serial_6x8_block_by_hand():
    """Yu et al.'s NT micro-kernel (IPDPS 2024, "6 x KA x 8"): each 6 x 8 block of C computes its 48 dot products,
    then reduces them (the published improved reduction of 48 vectors), before the next block starts.  The block:
    the NN micro-kernel's 6 rows, and as many rows of B as the 64 vector registers hold with one accumulator per
    element of C and a row vector of each row: (64 - 6) // (6 + 1) = 8.  The paper gives the kernel's efficiency
    as k / (k + 138) for KA = k (fp64), measured 30.3 % at KA = 64 and 93.2 % at KA = 2048; an fp64 k-step of 16
    lanes is half the bytes of a row of 32 fp32, so KA maps to 2 KA fp32 here."""
    from kernels.common.loops import gemm_nt_serial_micro_kernel
    u = FT["units"]
    rows = 6
    cols = (FT["vector_registers"] - rows) // (rows + 1)
    assert cols == 8
    lanes = FT["vector_width_bytes"] // 4
    per_issue = u["vls"]["bytes_per_issue"] // FT["vector_width_bytes"]
    # A vector of k: 6 + 8 row vectors (7 VLDDW on 2 units: 4 cycles) and 48 FMACs on 3 units: 16 cycles, carried
    # from step to step (latency 6 < 16); the vector issue width (7 + 48) / 6 is 10.
    ii = max(ceil(ceil((rows + cols) / per_issue) / u["vls"]["count"]), ceil(rows * cols / u["fmac"]["count"]),
             ceil((ceil((rows + cols) / per_issue) + rows * cols) / FT["issue_width"]["vector"]))
    assert ii == 16
    fill = u["vls"]["latency_cycles"] + u["fmac"]["latency_cycles"]  # 15
    chain = 121  # the 48-vector reduction and write-back, derived step by step in tests/test_epilogue_chains.py
    for ka, published in ((64, 0.303), (2048, 0.932)):
        k = 2 * ka
        want = FT["loop_overhead_cycles"] + fill + (k // lanes) * ii + chain
        loop = gemm_nt_serial_micro_kernel(CORE, "fp32", rows, cols, k)
        assert loop.vector_registers == rows * cols + rows + cols == 62
        cost = loop_cost(loop, CORE)
        assert (cost.ii, cost.fill, cost.epilogue) == (ii, fill, chain)
        assert loop_cycles(loop, CORE) == want == ka + 144  # the paper's ka + 138
        assert abs(ka / want - published) < 0.006
    # Blocks one after another: each pays its entry, fill and reduction (no overlap, unlike the merged kernel).
    four = gemm_nt_serial_micro_kernel(CORE, "fp32", rows, cols, 1024, blocks=4)
    assert loop_cycles(four, CORE) == 4 * (512 + 144)
