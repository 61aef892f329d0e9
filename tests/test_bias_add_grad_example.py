"""The second worked example of docs/writing-a-kernel.md, BiasAddGrad (a cross-core reduction), against numpy on both
chips, on one core and on all of them (the partials published, reduced after the barrier)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

import sim
from sim.testing import check_results

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "bias_add_grad.py"
DY, OUT = 0xA0000000, 0xA1000000


@pytest.fixture(scope="module")
def kernel():
    spec = importlib.util.spec_from_file_location("bias_add_grad_example_under_test", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.KERNEL


@pytest.mark.parametrize("chip,mask", [("FT78NE", 0xFF), ("FT78NE", 0x1), ("MT7004", 0xF)])
@pytest.mark.parametrize("rows,channels", [(1000, 64), (3, 5), (517, 200)])
def test_bias_add_grad_sums_the_rows_across_the_cores(kernel, chip, mask, rows, channels):
    dy = np.random.default_rng(rows).standard_normal((rows, channels)).astype(np.float32)
    args = dict(dy=DY, bias_grad=OUT, rows=rows, channels=channels, core_mask=mask)
    with sim.registered_kernel(kernel):
        check_results(chip, "fp_bias_add_grad_s", args, [(DY, dy)], {"bias_grad": (OUT, (channels,), np.float32)},
                      {"bias_grad": dy.sum(axis=0, dtype=np.float64)}, rtol=1e-5, atol=1e-4)
        _, plan = sim.Simulator(chip).plan("fp_bias_add_grad_s", **args)
    assert [p.name for p in plan.phases] == ["bias:partials", "bias:reduce"]
    assert plan.phases[0].barrier_after and len(plan.phases[1].tiles) == 1
