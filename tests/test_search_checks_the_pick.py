"""The search runs its candidates unchecked and checks the one it picks (sim.tuning.pricing.Pricing.settle): a
candidate whose plan breaks a rule never wins, however fast its run, and the others are priced again against
the cheapest that is left."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from tiny_kernels import F32, Twice

import sim
from sim.model.tiling import ChoiceKey, TilingSpace

N = 1024
X, Y = 0x80000000, 0x80100000


class Choosy(Twice):
    """Twice with a tiling space of one key, ``way``: ``cheat`` skips tile 1's load and compute and stores its slot into
    the input x (faster, and against the rule that a plan writes only its outputs); ``honest`` is Twice."""

    def tiling_space(self, call, ctx):
        return TilingSpace(ChoiceKey("way", ("cheat", "honest"), "which plan"))

    def plan(self, call, ctx):
        plan = super().plan(call, ctx)
        if ctx.tiling["way"] == "honest":
            return plan
        phase, core = plan.phases[0], plan.cores[0]
        t0, t1 = phase.tiles[core]
        store = dataclasses.replace(t1.stores[0], dst=X)
        t1 = dataclasses.replace(t1, loads=(), compute=None, stores=(store,))
        return dataclasses.replace(plan, phases=(dataclasses.replace(phase, tiles={core: (t0, t1)}),))


def _machine() -> sim.Simulator:
    m = sim.Simulator("FT78NE", tuning_cache=False)
    m.write(X, np.arange(N, dtype=F32))
    m.write(Y, np.zeros(N, F32))
    return m


def test_a_faster_candidate_that_breaks_a_rule_is_dropped_and_the_other_priced_in_full():
    with sim.registered_kernel(Choosy("choosy")):
        m = _machine()
        with pytest.raises(sim.PlanError):  # forced, the cheat is refused as any plan breaking a rule is
            m.call("fp_choosy_s", x=X, y=Y, n=N, core_mask=0x1, tiling={"way": "cheat"}, numerics=False)
        run = m.call("fp_choosy_s", x=X, y=Y, n=N, core_mask=0x1)
        assert run.tiling.tiling == {"way": "honest"}
        (dropped, why), = run.tiling.dropped
        assert dropped == {"way": "cheat"} and "plan rule" in why
        # The honest plan ran against the cheat's cycles first (and was stopped); it was priced again in full.
        (honest, cycles), = run.tiling.candidates
        assert honest == {"way": "honest"} and cycles == run.cycles
        np.testing.assert_array_equal(m.read(Y, N, F32), 2 * np.arange(N, dtype=F32))
        np.testing.assert_array_equal(m.read(X, N, F32), np.arange(N, dtype=F32))
