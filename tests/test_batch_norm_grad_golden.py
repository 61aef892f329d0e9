"""BatchNormGrad against TensorFlow's golden cases, on every chip with the precision, in both variants."""

import numpy as np
import pytest
from golden import arrays, assert_matches, cases, chips_for

import sim

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
    m = sim.Simulator(chip)
    a = SHARED if variant == "s" else PRIVATE
    core = None if variant == "s" else 2
    for name in ("x", "dy", "mean", "invar", "scale"):
        m.write(a[name], data[name], core=core)
    at = case["attrs"]
    params = [a["mean"], a["invar"], a["scale"], a["dbias"], a["dscale"], at["batch"], at["channel"], at["is_train"]]
    if form == "address":
        m.write(a["params"], np.array(params + [0] * 4, np.int64), core=core)
        params = a["params"]
    prefix = "hp" if case["precision"] == "fp16" else "fp"
    where = {"core_mask": sim.load_target(chip).all_cores_mask} if variant == "s" else {"core": core}
    run = m.call(f"{prefix}_batch_norm_grad_{variant}", x=a["x"], dy=a["dy"], dx=a["dx"], params=params, **where)
    assert run.cycles > 0
    for name in ("dx", "dbias", "dscale"):
        exp = data[name]
        assert_matches(case, name, m.read(a[name], exp.shape, exp.dtype, core=core), exp)
