"""Every shipped kernel's tiling space, on drawn calls (issue 21): each candidate it offers plans legally or does
not fit, never a PlanError or a foreign exception, and the search over it chooses a plan or says nothing fits.

The examples are bounded so that the suite stays within its time; ``bench/tiling_property.py`` runs many more
and larger shapes.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tiling_property import KERNELS, calls, check_space

#: Drawn calls per kernel in the suite.
EXAMPLES = 12


@pytest.mark.parametrize("kernel", KERNELS)
@settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_every_candidate_plans_legally_or_does_not_fit(kernel, data):
    chip, symbol, args = data.draw(calls(kernel))
    check_space(chip, symbol, args, data)
