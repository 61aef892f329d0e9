"""BatchNormGrad: TensorFlow's golden cases on every chip with the precision, in both variants and both forms of
``params``; every tiling it lists right (float64 formulas) and honoured; bad tilings refused."""

import numpy as np
import pytest
from golden import arrays, cases, chips_for, tolerances
from tilings import (
    ADDR,
    assert_first_candidate_is_the_kernels_own_plan,
    assert_refused,
    batch_norm_honoured,
    candidates,
)

import sim
from sim.testing import check_results

SHARED = dict(x=0xA0000000, dy=0xA4000000, dx=0xA8000000, mean=0xC0000000, invar=0xC0100000,
              scale=0xC0200000, dbias=0xC0300000, dscale=0xC0400000, params=0xC0500000)
PRIVATE = dict(x=0x10000000, dy=0x10100000, dx=0x10200000, mean=0x10300000, invar=0x10310000,
               scale=0x10320000, dbias=0x10330000, dscale=0x10340000, params=0x10350000)

PARAMS = [(c, chip, variant, form) for c in cases("batch_norm_grad") for chip in chips_for(c)
          for variant in ("s", "p") for form in ("list", "address")]


@pytest.mark.parametrize("case,chip,variant,form", PARAMS,
                         ids=[f"{c['id']}-{chip}-{v}-{f}" for c, chip, v, f in PARAMS])
def test_golden(case, chip, variant, form):
    data = arrays(case)
    a = SHARED if variant == "s" else PRIVATE
    inputs = [(a[name], data[name]) for name in ("x", "dy", "mean", "invar", "scale")]
    at = case["attrs"]
    params = [a["mean"], a["invar"], a["scale"], a["dbias"], a["dscale"], at["batch"], at["channel"], at["is_train"]]
    if form == "address":
        inputs.append((a["params"], np.array(params + [0] * 4, np.int64)))
        params = a["params"]
    prefix = "hp" if case["precision"] == "fp16" else "fp"
    where = {"core_mask": sim.load_target(chip).all_cores_mask} if variant == "s" else {"core": 2}
    names = ("dx", "dbias", "dscale")
    run = check_results(chip, f"{prefix}_batch_norm_grad_{variant}",
                        dict(x=a["x"], dy=a["dy"], dx=a["dx"], params=params, **where), inputs,
                        {n: (a[n], data[n].shape, data[n].dtype) for n in names}, data, **tolerances(case, names))
    assert run.cycles > 0


# --- tilings (FusedBatchNormGrad's planner on the [batch, channel, 1] view) ----------------------------------

BN = dict(x=ADDR[0], dy=ADDR[1], dx=ADDR[2])
BN_VEC = dict(mean=ADDR[3], invar=ADDR[3] + 0x10000, scale=ADDR[3] + 0x20000, dbias=ADDR[3] + 0x30000,
              dscale=ADDR[3] + 0x40000)


def bn_args(batch: int, channel: int, train: int) -> dict:
    v = BN_VEC
    return dict(BN, params=[v["mean"], v["invar"], v["scale"], v["dbias"], v["dscale"], batch, channel, train])


def bn_run(batch: int, channel: int, train: int, tiling: dict | None):
    """Run on FT78NE's 8 cores; returns (run, max relative error of dx, dbias, dscale vs float64)."""
    rng = np.random.default_rng(batch + channel)
    x, dy = rng.uniform(-2, 2, (batch, channel)), rng.uniform(-1, 1, (batch, channel))
    mean, invar, scale = rng.uniform(-.5, .5, channel), rng.uniform(.5, 2, channel), rng.uniform(.5, 1.5, channel)
    m = sim.Simulator("FT78NE")
    for name, arr in (("x", x), ("dy", dy)):
        m.write(BN[name], arr.astype(np.float32))
    for name, arr in (("mean", mean), ("invar", invar), ("scale", scale)):
        m.write(BN_VEC[name], arr.astype(np.float32))
    run = m.call("fp_batch_norm_grad_s", tiling=tiling, **bn_args(batch, channel, train))
    x, dy = x.astype(np.float32).astype(np.float64), dy.astype(np.float32).astype(np.float64)
    mean, invar, scale = (v.astype(np.float32).astype(np.float64) for v in (mean, invar, scale))
    xh = (x - mean) * invar
    dbias, dscale = dy.sum(0), (dy * xh).sum(0)
    dx = scale * invar / batch * (batch * dy - dbias - xh * dscale) if train else dy * scale * invar
    np.testing.assert_allclose(m.read(BN["dx"], (batch, channel), np.float32), dx, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(m.read(BN_VEC["dbias"], (channel,), np.float32), dbias, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(m.read(BN_VEC["dscale"], (channel,), np.float32), dscale, rtol=1e-4, atol=1e-3)
    return run


BN_EXTRA = [{"split": "rows", "tile_elements": 7 * 32},  # tiles of 3 rows of the 70 channels
            {"split": "channels", "channel_block": 3}]   # part-filled vectors


@pytest.mark.parametrize("train", [1, 0])
def test_batch_norm_grad_every_tiling_right_and_honoured(train):
    batch, channel = 300, 70
    listed = candidates(sim.Simulator("FT78NE"), "fp_batch_norm_grad_s", **bn_args(batch, channel, train))
    assert 2 <= len(listed) <= 10 and {t["split"] for t in listed} == {"channels", "rows"}
    for tiling in listed + BN_EXTRA:
        run = bn_run(batch, channel, train, tiling)
        assert run.tiling.tiling == tiling and run.tiling.source == "given"
        batch_norm_honoured(run, tiling)


def test_batch_norm_grad_default_is_a_priced_candidate():
    run = bn_run(3000, 7, 0, None)
    assert run.tiling.source == "cost model" and len(run.tiling.candidates) >= 2
    priced = dict((str(c), cyc) for c, cyc in run.tiling.candidates)
    assert priced[str(run.tiling.tiling)] == run.cycles == min(c for c in priced.values() if c is not None)
    assert "chosen by the cost model" in run.summary_text()


FIRST = [("fp_batch_norm_grad_s", bn_args(320, 64, 1)),
         ("fp_batch_norm_grad_s", bn_args(25088, 64, 1))]


@pytest.mark.parametrize("symbol,args", FIRST, ids=[str(i) for i in range(len(FIRST))])
def test_batch_norm_grad_first_candidate_is_the_kernels_own_plan(symbol, args):
    assert_first_candidate_is_the_kernels_own_plan(symbol, args)


REFUSALS = [
    ("fp_batch_norm_grad_s", bn_args(300, 70, 1), {"rows": 4}, sim.KernelArgError, "'tiling'"),
    ("fp_batch_norm_grad_s", bn_args(300, 70, 1), {"split": "batch"}, sim.KernelArgError, "tiling.split"),
    ("fp_batch_norm_grad_s", bn_args(300, 70, 1), {"channel_block": 0}, sim.KernelArgError, "tiling.channel_block"),
    ("fp_batch_norm_grad_s", bn_args(300, 70, 1), {"tile_elements": 300 * 70 + 1}, sim.KernelArgError,
     "tiling.tile_elements"),
    ("fp_batch_norm_grad_s", bn_args(300, 70, 1), {"tile_elements": 2.5}, sim.KernelArgError, "tiling.tile_elements"),
    ("fp_batch_norm_grad_s", bn_args(300, 70, 1), {"split": "channels", "tile_elements": 8}, sim.KernelArgError,
     "tiling.tile_elements"),
    ("fp_batch_norm_grad_s", bn_args(60000, 70, 1), {"channel_block": 70}, sim.LayoutError, "scratchpad"),
]


@pytest.mark.parametrize("symbol,args,tiling,error,match", REFUSALS, ids=[str(t) for _, _, t, _, _ in REFUSALS])
def test_batch_norm_grad_bad_tilings_are_refused(symbol, args, tiling, error, match):
    assert_refused(symbol, args, tiling, error, match)
