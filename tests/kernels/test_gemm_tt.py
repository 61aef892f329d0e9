"""TT (C = Aᵀ·Bᵀ) as the published library computes it: Cᵀ = B·A of the operands as stored, an NN product, each
finished tile of Cᵀ transposed in AM into C's rows (kernels/gemm/state.py, ``GemmCall.c_transposed``).

Cycles derived by hand from targets/FT78NE.yaml: 32 fp32 lanes; two vector load/store units (a VLDDW moves two
vectors, latency 9; a store's data in AM 4 cycles after issue), one vector ALU (latency 2); 8 cycles per loop
entry, 24 per tile's compute call.
"""

from __future__ import annotations

from gemm_tiles import assert_tiles_transposed_into_c, compute_tiles

import sim
from kernels.common.loops import elementwise
from sim.timing import loop_cycles

FT = sim.load_target("FT78NE")
A, B, C = 0x80000000, 0x90000000, 0xA0000000
#: One core, one k block, C resident in AM: each tile is one 12-row panel of Cᵀ against a 96-column B block (a TT
#: call's keys name the blocks of Cᵀ = B·A: its m_block counts rows of Cᵀ, columns of C).
TILING = {"split": "n", "c_home": "am", "m_block": 24, "n_block": 96, "k_block": 64, "m_panel": 12, "m_micro": 6,
          "n_micro": 96}


def test_the_numbers_used_here_are_the_target_files():
    core = FT.core
    assert core.precisions["fp32"].lanes == 32 and (core.loop_overhead_cycles, core.tile_overhead_cycles) == (8, 24)
    vls, valu = core.units["vls"], core.units["valu"]
    assert (vls.count, vls.latency_cycles, vls.store_latency_cycles, valu.count, valu.latency_cycles) == (2, 9, 4, 1, 2)


def test_a_tile_transposed_out_costs_one_vector_pass_derived_by_hand():
    # 12 x 96 fp32 = 1,152 elements = 36 vectors, two per VLDDW: 18 trips of one load issue, one store issue and
    # two vector-ALU shuffles. II = max(vls 2 / 2, valu 2 / 1) = 2; fill = load 9 + shuffle 2 + store 4 = 15;
    # loop = 8 + 15 + 18 x 2 = 59 cycles.
    loop = elementwise(FT.core, "fp32", 12 * 96, loads=1, stores=1, valu=1, label="C transposed in AM")
    assert loop_cycles(loop, FT.core) == 59


def _plan(m: int, n: int, a: int = A, b: int = B, **kw):
    s = sim.Simulator(FT, tuning_cache=False)
    return s.plan("fp_gemm_s", a=a, b=b, c=C, m=m, n=n, k=64, core_mask=1, tiling=TILING, **kw)[1]


def test_tt_is_the_nn_product_of_the_stored_operands_and_a_transpose():
    # C[96, 24] = Aᵀ·Bᵀ with A stored [64, 96], B stored [24, 64]: planned as Cᵀ[24, 96] = B·A, the NN product of B
    # in A's role (m 24, lda 64) and A in B's role (n 96, ldb 96).
    tt = _plan(96, 24, trans_a=1, trans_b=1)
    nn = _plan(24, 96, a=B, b=A)  # (the same bytes as NN operands)
    assert len(compute_tiles(tt)) == 2  # two 12-row panels of Cᵀ
    # The same loads of A's panel (B's rows) and of the B block (A's rows); the same micro-kernels, then the
    # transpose: 59 cycles more per tile, as derived above. C's rows go out as 96 rows of 12 elements: Cᵀ's panel
    # [r0:r0 + 12, 0:96] is C's [0:96, r0:r0 + 12].
    assert {t.stores[0].shape for t in compute_tiles(tt)} == {(96, 12)}
    assert_tiles_transposed_into_c(tt, nn, FT, C, 24 * 4, 59)


def test_beta_brings_c_in_transposed_too():
    tt = _plan(96, 24, trans_a=1, trans_b=1, beta=1)
    tile = next(t for t in tt.phases[0].tiles[0] if t.compute is not None)
    assert [loop.label for loop in tile.compute.loops][0] == "old C transposed in AM"
    assert [loop.label for loop in tile.compute.loops][-1] == "C transposed in AM"
    old = tile.loads[-1]  # C's old rows: 96 rows of 12, as they lie in C
    assert (old.src, old.shape, old.src_strides) == (C, (96, 12), (24 * 4, 4))


def test_tt_has_no_split_k():
    # Split k would sum the cores' partial rows of Cᵀ as rows of C: a TT call's transposed formulation leaves it
    # out (its direct one, B's blocks transposed in AM, sums rows of C and has it).
    s = sim.Simulator(FT, tuning_cache=False)
    run = s.call("fp_gemm_s", a=A, b=B, c=C, m=24, n=24, k=4096, trans_a=1, trans_b=1, core_mask=0xFF,
                 numerics=False)
    assert not (run.tiling.tiling["split"] == "k" and run.tiling.tiling["formulation"] == "transposed")
    assert all(t["split"] != "k" for t, _ in run.tiling.candidates if t["formulation"] == "transposed")
