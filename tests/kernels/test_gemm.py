"""GEMM ({fp,hp}_gemm_{s,p}): numerics against numpy on both chips in all four symbol forms, transposes, pitches
(the elements past a row's end untouched), beta = 1 in place, tiny shapes, bad arguments and layouts; and the
blocking the plan states (A's blocks shared through GSM, micro-kernel loops at the chip's precision)."""

from __future__ import annotations

import numpy as np
import pytest

import sim
from kernels.gemm import MIXED

DDR = (0x80000000, 0x90000000, 0xA0000000)
L2 = (0x10000000, 0x10400000, 0x10800000)
SENTINEL = {np.dtype(np.float32): np.float32(-7.25), np.dtype(np.float16): np.float16(-7.25)}


def run_gemm(chip: str, symbol: str, m: int, n: int, k: int, *, trans_a: int = 0, trans_b: int = 0, beta: int = 0,
             pad: int = 0, seed: int = 0, where: dict | None = None, tiling: dict | None = None):
    """Place A, B, C (every row followed by ``pad`` sentinel elements), call, return (run, got C, want C, C before)."""
    s = sim.Simulator(chip)
    dt = np.dtype(np.float16 if symbol.startswith("hp") else np.float32)
    private = symbol.endswith("_p")
    core = (where or {}).get("core", 0) if private else None
    at = L2 if private else DDR
    rng = np.random.default_rng(seed)
    a_shape = (k, m) if trans_a else (m, k)
    b_shape = (n, k) if trans_b else (k, n)
    lda, ldb, ldc = a_shape[1] + pad, b_shape[1] + pad, n + pad

    def matrix(rows, cols, ld):
        x = np.full((rows, ld), SENTINEL[dt], dt)
        x[:, :cols] = rng.uniform(-1, 1, (rows, cols)).astype(dt)
        return x
    a, b, c = matrix(*a_shape, lda), matrix(*b_shape, ldb), matrix(m, n, ldc)
    for addr, x in zip(at, (a, b, c)):
        s.write(addr, x, core=core)
    args = dict(a=at[0], b=at[1], c=at[2], m=m, n=n, k=k, trans_a=trans_a, trans_b=trans_b, beta=beta)
    if pad:
        args.update(lda=lda, ldb=ldb, ldc=ldc)
    args.update(where or ({"core": 0} if private else {}))
    run = s.call(symbol, tiling=tiling, **args)
    got = s.read(at[2], (m, ldc), dt, core=core)
    oa = a[:, :a_shape[1]].astype(np.float64)
    ob = b[:, :b_shape[1]].astype(np.float64)
    want = (oa.T if trans_a else oa) @ (ob.T if trans_b else ob)
    if beta:
        want = want + c[:, :n].astype(np.float64)
    # The untouched inputs and the pad of C: exactly as placed.
    np.testing.assert_array_equal(s.read(at[0], a.shape, dt, core=core), a)
    np.testing.assert_array_equal(s.read(at[1], b.shape, dt, core=core), b)
    np.testing.assert_array_equal(got[:, n:], c[:, n:])
    return run, got[:, :n], want, c


def assert_close(got: np.ndarray, want: np.ndarray, k: int) -> None:
    if got.dtype == np.float16:
        # Products exact, fp32 sums, one rounding to fp16: half an fp16 ulp of the result, plus fp32 noise.
        tol = np.maximum(np.abs(want), 2.0 ** -14) * 2.0 ** -10 + 1e-6 * k
        assert (np.abs(got.astype(np.float64) - want) <= tol).all()
    else:
        np.testing.assert_allclose(got.astype(np.float64), want, rtol=1e-5, atol=2e-6 * k)


FORMS = [("FT78NE", "fp_gemm_s"), ("FT78NE", "fp_gemm_p"), ("MT7004", "fp_gemm_s"), ("MT7004", "fp_gemm_p"),
         ("MT7004", "hp_gemm_s"), ("MT7004", "hp_gemm_p")]


@pytest.mark.parametrize("chip,symbol", FORMS)
@pytest.mark.parametrize("trans_a,trans_b", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_every_symbol_form_and_transpose_matches_numpy(chip, symbol, trans_a, trans_b):
    run, got, want, _ = run_gemm(chip, symbol, 45, 70, 37, trans_a=trans_a, trans_b=trans_b, seed=trans_a + 2 * trans_b)
    assert_close(got, want, 37)
    assert run.cycles >= run.roofline.cycles


@pytest.mark.parametrize("chip,symbol", FORMS)
def test_beta_one_adds_into_c_in_place_with_pitches(chip, symbol):
    run, got, want, _ = run_gemm(chip, symbol, 30, 41, 66, beta=1, pad=5, trans_b=1)
    assert_close(got, want, 66)


@pytest.mark.parametrize("chip,symbol", FORMS)
def test_several_blocks_in_every_direction(chip, symbol):
    """Small blocks force several GSM blocks, B blocks, panels and k blocks (C held in AM across them)."""
    tiling = dict(m_block=24, n_block=32, k_block=16, m_panel=12, m_micro=6)
    run, got, want, _ = run_gemm(chip, symbol, 50, 70, 41, beta=1, pad=1, trans_a=1, tiling=tiling)
    assert_close(got, want, 41)
    if symbol.endswith("_s"):
        for split in ("m", "k"):  # each core its panels; each core a range of k, partials summed through GSM
            run_s, got_s, want_s, _ = run_gemm(chip, symbol, 50, 70, 41, beta=1, pad=2, trans_b=1,
                                               tiling={**tiling, "split": split})
            assert_close(got_s, want_s, 41)
            assert [p.name for p in run_s.plan.phases] == (["gemm"] if split == "m" else
                                                            ["gemm:partials", "gemm:reduce"])


@pytest.mark.parametrize("chip,symbol", FORMS)
def test_one_by_one_by_one(chip, symbol):
    for beta in (0, 1):
        _, got, want, _ = run_gemm(chip, symbol, 1, 1, 1, beta=beta, pad=2)
        assert_close(got, want, 1)


def test_the_a_blocks_go_through_gsm_once_and_the_cores_share_them():
    """An 8-core _s call loads each element of A from DDR once (the cores split each GSM block's loading), and
    every core reads its micro-panels from GSM: A's DDR bytes are A's size, not the cores' count times it."""
    m, n, k = 96, 1024, 64  # 128 columns per core
    run, got, want, _ = run_gemm("FT78NE", "fp_gemm_s", m, n, k)
    assert_close(got, want, k)
    a_lo, a_hi = DDR[0], DDR[0] + m * k * 4
    from_a = [e for e in run.events if e.kind == "dma_in" and e.src is not None and a_lo <= e.src < a_hi]
    assert sum(e.bytes for e in from_a) == m * k * 4
    assert {e.dst_region for e in from_a} == {"gsm"}
    assert len({e.core for e in from_a}) == 8  # the loading is split among the cores
    panels = [e for e in run.events if e.kind == "dma_in" and e.src_region == "gsm" and e.dst_region == "sm"]
    assert len({e.core for e in panels}) == 8
    plan = run.plan
    fills = {r for ts in plan.phases[0].tiles.values() for t in ts for r in t.fills}
    assert any(r.startswith("gsm.a") for r in fills) and not any(p.barrier_after for p in plan.phases)


def test_the_compute_is_the_micro_kernel_at_the_chips_precision():
    for chip, symbol, precision in (("FT78NE", "fp_gemm_s", "fp32"), ("MT7004", "hp_gemm_s", MIXED)):
        run, *_ = run_gemm(chip, symbol, 24, 64, 32)
        computes = [t.compute for ts in run.plan.phases[0].tiles.values() for t in ts if t.compute is not None]
        assert computes and all(c.precision == precision for c in computes)
        assert all(any(lp.label.startswith("gemm micro-kernel") and lp.carried == ("fmac",) for lp in c.loops)
                   for c in computes)
        assert sum(c.flops for c in computes) == 2 * 24 * 64 * 32


@pytest.mark.parametrize("args,name", [
    (dict(m=0), "m"), (dict(n=-1), "n"), (dict(k=1.5), "k"), (dict(trans_a=2), "trans_a"),
    (dict(trans_b="no"), "trans_b"), (dict(beta=2), "beta"), (dict(lda=3), "lda"), (dict(ldb=0), "ldb"),
    (dict(ldc=7), "ldc"), (dict(a=-8), "a"), (dict(alpha=1), "alpha"),
])
def test_bad_arguments_name_the_argument(args, name):
    m = sim.Simulator("FT78NE")
    base = dict(a=DDR[0], b=DDR[1], c=DDR[2], m=4, n=8, k=5)
    before = m.memory.snapshot()
    with pytest.raises(sim.KernelArgError, match=f"'{name}'"):
        m.call("fp_gemm_s", **{**base, **args})
    assert m.memory.snapshot() == before


def test_missing_argument_and_unknown_tiling_key():
    m = sim.Simulator("FT78NE")
    with pytest.raises(sim.KernelArgError, match="missing argument 'k'"):
        m.call("fp_gemm_s", a=DDR[0], b=DDR[1], c=DDR[2], m=4, n=8)
    with pytest.raises(sim.KernelArgError, match="tiling.m_panel"):
        m.call("fp_gemm_s", a=DDR[0], b=DDR[1], c=DDR[2], m=40, n=8, k=5, tiling={"m_panel": 7, "m_micro": 6})


def test_layout_errors():
    m = sim.Simulator("FT78NE")
    # C overlapping A (the last rows of A's pitch-wide rows).
    with pytest.raises(sim.LayoutError, match="'c'"):
        m.call("fp_gemm_s", a=DDR[0], b=DDR[1], c=DDR[0] + 64, m=4, n=8, k=5)
    # A private buffer for a shared call; a shared one for a private call.
    with pytest.raises(sim.LayoutError, match="'a'"):
        m.call("fp_gemm_s", a=L2[0], b=DDR[1], c=DDR[2], m=4, n=8, k=5)
    with pytest.raises(sim.LayoutError, match="'b'"):
        m.call("fp_gemm_p", a=L2[0], b=DDR[1], c=L2[2], m=4, n=8, k=5, core=1)
    # fp16 on a chip without it.
    with pytest.raises(sim.KernelArgError):
        m.call("hp_gemm_s", a=DDR[0], b=DDR[1], c=DDR[2], m=4, n=8, k=5)
