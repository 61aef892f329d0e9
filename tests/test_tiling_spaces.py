"""Every shipped kernel's tiling space, on drawn calls (issue 21): each candidate it offers plans legally or does
not fit, never a PlanError or a foreign exception, and the search over it chooses a plan or says nothing fits.

The examples are bounded so that the suite stays within its time; ``bench/tiling_property.py`` runs many more
and larger shapes.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tiling_property import KERNELS, addresses, calls, check_space

import kernels
import sim
from sim.model.plan import DoesNotFit
from sim.tuning.limits import MAX_COMPLETIONS
from sim.tuning.misses import prefilter

#: Drawn calls per kernel in the suite.
EXAMPLES = 12


@pytest.mark.parametrize("kernel", KERNELS)
@settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_every_candidate_plans_legally_or_does_not_fit(kernel, data):
    chip, symbol, args = data.draw(calls(kernel))
    check_space(chip, symbol, args, data)


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(m=st.integers(1, 300), n=st.integers(1, 300), k=st.integers(1, 3000), cores=st.integers(1, 8),
       staged=st.booleans())
def test_gemm_choices_asked_for_only_plan_legally_or_do_not_fit(m, n, k, cores, staged):
    """GEMM's choices the search does not offer, asked for (Yu et al.'s NT kernel with B transposed; on one core, A
    staged in GSM): every candidate of the completed space plans legally or is refused as not fitting, never a
    PlanError or a foreign exception (the property above, over the space with those keys fixed)."""
    machine = sim.Simulator("FT78NE", tuning_cache=False)
    a, b, c = addresses("s")[:3]
    call = machine.bind("fp_gemm_s", a=a, b=b, c=c, m=m, n=n, k=k, trans_b=1, core_mask=(1 << cores) - 1)
    space = kernels.lookup("fp_gemm_s").kernel.tiling_space(call, machine.context(call))
    # (split n: the NT kernels run with split n or m, not k)
    fixed = {"split": "n", "nt_kernel": "reduce_serial"} if not staged or cores > 1 else {"a_staging": "gsm"}
    pool, _ = space.completions(fixed, MAX_COMPLETIONS)
    assert pool
    for t in pool[:: max(1, len(pool) // 6)]:  # a spread of them: the first, the last and between
        why = prefilter(space, t)
        if why is not None:
            assert isinstance(why, DoesNotFit) or "tiles" in str(why), (t, why)
            continue
        try:
            machine.plan_bound(call, t)  # every rule of the plan check
        except sim.LayoutError as e:
            assert any(v.rule == "scratchpad-fit" for v in e.violations), (t, e)
