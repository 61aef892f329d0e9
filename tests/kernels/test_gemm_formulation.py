"""GEMM's ``formulation`` key: C = op(A)·op(B) planned directly, or as Cᵀ = op(B)ᵀ·op(A)ᵀ with each finished tile
transposed into C's rows (kernels/gemm/kernel.py, ``_formulations``; docs/gemm.md).

A thin C (fewer columns than two vectors) is the case the transposed formulation is for: a micro-kernel with one
vector of C's columns issues one A broadcast per FMAC, and FT78NE's core has 2 broadcast units for 3 FMAC units
(targets/FT78NE.yaml), so at most 2/3 of the FMAC peak; swapped, C's many rows are the vectors.
"""

from __future__ import annotations

import numpy as np
import pytest
from gemm_tiles import assert_tiles_transposed_into_c, compute_tiles

import sim
from kernels.common.loops import gemm_micro_kernel
from sim.timing import loop_cost

FT = sim.load_target("FT78NE")
A, B, C = 0x80000000, 0x90000000, 0xA0000000
#: One core, one k block, C in AM: tiles of 12 rows of the planned product against a 96-column block.
TILING = {"split": "n", "c_home": "am", "m_block": 24, "n_block": 96, "k_block": 64, "m_panel": 12, "m_micro": 6,
          "n_micro": 96}


def _plan(m: int, n: int, a: int = A, b: int = B, **kw):
    s = sim.Simulator(FT, tuning_cache=False)
    return s.plan("fp_gemm_s", a=a, b=b, c=C, m=m, n=n, k=64, core_mask=1, **kw)[1]


def test_one_vector_of_columns_is_bound_by_the_broadcasts_of_the_target():
    core = FT.core
    assert (core.units["broadcast"].count, core.units["fmac"].count, core.precisions["fp32"].lanes) == (2, 3, 32)
    # 12 x 32: per k-step 12 broadcasts on 2 units (6 cycles) for 12 FMACs on 3 (4 cycles): 4/6 of the FMAC peak.
    cost = loop_cost(gemm_micro_kernel(core, "fp32", 12, 32, 512, itemsize=4), core)
    assert cost.ii == 6


def test_thin_c_transposed_is_the_tt_product_of_the_swapped_operands_and_a_transpose():
    # C[96, 24] = A·B (A [96, 64], B [64, 24]) transposed: Cᵀ[24, 96] = Bᵀ·Aᵀ, the product of B stored [k, 24] in
    # A's role (transposed) and A stored [96, k] in B's (transposed): the direct plan of the TT call on the same
    # bytes, each tile then transposed into C's rows (12 x 96 fp32: 59 cycles, derived in test_gemm_tt.py).
    thin = _plan(96, 24, tiling={"formulation": "transposed", **TILING})
    tt = _plan(24, 96, a=B, b=A, trans_a=1, trans_b=1, tiling={"formulation": "direct", **TILING})
    assert len(compute_tiles(thin)) == 2
    # Cᵀ's panel [r0:r0 + 12, 0:96] is C's [0:96, r0:r0 + 12]: 96 rows of 12 elements, C's pitch apart.
    assert {t.stores[0].shape for t in compute_tiles(thin)} == {(96, 12)}
    assert_tiles_transposed_into_c(thin, tt, FT, C, 24 * 4, 59)


@pytest.mark.parametrize("chip,symbol,dtype,m,n,k,trans_a,trans_b,beta", [
    ("FT78NE", "fp_gemm_s", np.float32, 200, 24, 72, 0, 0, 0),
    ("FT78NE", "fp_gemm_s", np.float32, 130, 40, 64, 0, 1, 1),
    ("FT78NE", "fp_gemm_s", np.float32, 96, 8, 40, 1, 0, 0),
    ("FT78NE", "fp_gemm_s", np.float32, 64, 20, 48, 1, 1, 1),
    ("MT7004", "hp_gemm_s", np.float16, 160, 40, 64, 0, 0, 1),
    ("FT78NE", "fp_gemm_s", np.float32, 80, 100, 48, 0, 1, 0),  # (not thin: the key only where asked for)
])
@pytest.mark.parametrize("formulation", ["direct", "transposed"])
def test_both_formulations_compute_the_product(chip, symbol, dtype, m, n, k, trans_a, trans_b, beta, formulation):
    rng = np.random.default_rng(m + n + k)
    a = rng.uniform(-1, 1, (k, m) if trans_a else (m, k)).astype(dtype)
    b = rng.uniform(-1, 1, (n, k) if trans_b else (k, n)).astype(dtype)
    c0 = rng.uniform(-1, 1, (m, n)).astype(dtype)
    s = sim.Simulator(chip, tuning_cache=False)
    s.write(A, a)
    s.write(B, b)
    s.write(C, c0)
    run = s.call(symbol, a=A, b=B, c=C, m=m, n=n, k=k, trans_a=trans_a, trans_b=trans_b, beta=beta, core_mask=0x3,
                 tiling={"formulation": formulation})
    assert run.tiling.tiling["formulation"] == formulation
    ref = (a.T if trans_a else a).astype(np.float32) @ (b.T if trans_b else b).astype(np.float32)
    if beta:
        ref += c0.astype(np.float32)
    got = s.read(C, m * n, dtype).reshape(m, n).astype(np.float32)
    tol = 1e-4 if dtype == np.float32 else 2e-2
    np.testing.assert_allclose(got, ref.astype(dtype).astype(np.float32), rtol=tol, atol=tol)


def _cycles(m: int, n: int, k: int, **kw) -> tuple[int, dict]:
    run = sim.Simulator(FT, tuning_cache=False).call("fp_gemm_s", a=A, b=B, c=C, m=m, n=n, k=k, numerics=False,
                                                     **kw)
    return run.cycles, run.tiling.tiling


def test_the_search_takes_the_faster_formulation_of_a_thin_c():
    # One core, 1024 x 32 x 512: direct, the micro-kernel of one vector of columns (2/3 of the FMAC peak at most);
    # transposed, 32 rows against vectors of C's 1024 columns.
    direct, _ = _cycles(1024, 32, 512, core_mask=1, tiling={"formulation": "direct"})
    transposed, _ = _cycles(1024, 32, 512, core_mask=1, tiling={"formulation": "transposed"})
    default, tiling = _cycles(1024, 32, 512, core_mask=1)
    peak = 3 * 32 * 2  # FMAC units x lanes x 2 flops
    assert 2 * 1024 * 32 * 512 / direct <= peak * 2 / 3
    assert transposed < 0.9 * direct
    assert tiling["formulation"] == "transposed" and default <= 1.01 * min(direct, transposed)


def test_the_search_climbs_each_formulation_of_a_thin_c():
    # 8 cores, 512 x 32 x 1024: both formulations DDR-bound; the search climbs from each one's preferred tiling,
    # so its pick is as good as the best of either searched alone.
    direct, _ = _cycles(512, 32, 1024, core_mask=0xFF, tiling={"formulation": "direct"})
    transposed, _ = _cycles(512, 32, 1024, core_mask=0xFF, tiling={"formulation": "transposed"})
    default, _ = _cycles(512, 32, 1024, core_mask=0xFF)
    assert default <= 1.01 * min(direct, transposed)


def test_which_calls_have_the_key():
    # Not thin (n of two vectors or more), or too few rows to swap: direct searched, no key (the tilings as before).
    for m, n in ((256, 64), (48, 32)):
        _, tiling = _cycles(m, n, 64, core_mask=1)
        assert "formulation" not in tiling
    # C = Aᵀ·Bᵀ: both searched, transposed first (the published TT loop nest); here it wins.
    run = sim.Simulator(FT, tuning_cache=False).call("fp_gemm_s", a=A, b=B, c=C, m=96, n=96, k=64, trans_a=1,
                                                     trans_b=1, core_mask=1, numerics=False)
    assert run.tiling.tiling["formulation"] == "transposed"
    assert run.tiling.candidates[0][0]["formulation"] == "transposed"
    assert {t["formulation"] for t, _ in run.tiling.candidates} == {"transposed", "direct"}
    # Any call takes the key where a tiling names it: the one named is searched.
    _, tiling = _cycles(256, 64, 64, core_mask=1, tiling={"formulation": "transposed"})
    assert tiling["formulation"] == "transposed"
    with pytest.raises(sim.SimError, match=r"tiling\.formulation"):
        _cycles(256, 64, 64, core_mask=1, tiling={"formulation": "sideways"})


def test_a_full_tiling_is_checked_against_its_formulations_own_ranges():
    # Transposed, 1024 x 32 x 512 is the product of 32 rows by 1024 columns: a block of 576 rows is no block of it.
    tiling = {"formulation": "transposed", "split": "n", "nt_kernel": "transpose", "c_home": "am",
              "a_staging": "memory", "a_loader": "cores", "a_buffers": 2, "b_staging": "am", "m_micro": 6,
              "k_block": 256, "m_panel": 32, "m_block": 576, "n_block": 256, "n_micro": 128}
    with pytest.raises(sim.SimError, match=r"tiling\.m_block': expected an integer in 1\.\.32"):
        _cycles(1024, 32, 512, core_mask=1, tiling=tiling)
    _cycles(1024, 32, 512, core_mask=1, tiling={**tiling, "m_block": 32})


def test_split_k_is_refused_transposed_and_asking_for_it_searches_direct():
    """Split k sums the cores' partial rows of C; the transposed formulation's partials are rows of Cᵀ, which the
    reduce phase wrote as rows of C (a thin C with a row pitch past its columns came out wrong, its pitch's padding
    overwritten).  Asked for with the transposed formulation, split k is refused naming the key, memory untouched;
    asked for alone, the direct formulation is searched and C is right, its padding untouched."""
    m, n, k, ldc = 64, 1, 257, 3
    rng = np.random.default_rng(7)
    a = rng.uniform(-1, 1, (m, k)).astype(np.float32)
    b = rng.uniform(-1, 1, (k, n)).astype(np.float32)
    c0 = rng.uniform(-1, 1, (m, ldc)).astype(np.float32)
    s = sim.Simulator(FT, tuning_cache=False)
    s.write(A, a)
    s.write(B, b)
    s.write(C, c0)
    args = dict(a=A, b=B, c=C, m=m, n=n, k=k, ldc=ldc, beta=1, core_mask=0xFF)
    with pytest.raises(sim.SimError, match=r"tiling\.split': k does not go with formulation transposed"):
        s.call("fp_gemm_s", tiling={"formulation": "transposed", "split": "k"}, **args)
    assert np.array_equal(s.read(C, m * ldc, np.float32).reshape(m, ldc), c0)
    run = s.call("fp_gemm_s", tiling={"split": "k"}, **args)
    assert (run.tiling.tiling["formulation"], run.tiling.tiling["split"]) == ("direct", "k")
    got = s.read(C, m * ldc, np.float32).reshape(m, ldc)
    np.testing.assert_allclose(got[:, :n], a @ b + c0[:, :n], rtol=1e-4, atol=1e-4)
    assert np.array_equal(got[:, n:], c0[:, n:])
