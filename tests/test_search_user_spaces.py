"""The search over a user's tiling space (an outside test's findings at stop 58): a start or formulation naming a
key of another choice's ``only``, a choice key's numpy strings, a small space priced whole past the climb's budget."""

from __future__ import annotations

import importlib
import runpy
from pathlib import Path

import numpy as np
import pytest

import sim
from kernels.common.streams import CoreStream, phase_of, plan_of
from kernels.common.tiling_space import ChoiceKey, IntKey, TilingSpace
from sim.tuning.pool import Pool

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "relu_grad.py"
ADDR = dict(dy=0x10000000, x=0x10100000, dx=0x10200000)


def _kernel(name: str, space_of):
    """examples/relu_grad.py's ReluGrad (run from its file) whose tiling space is ``space_of(layout)``; its plan
    reads ``tile_elements``."""
    example = runpy.run_path(str(EXAMPLE))
    layout = example["_Layout"]

    class Spaced(example["ReluGrad"]):  # type: ignore[misc]
        def tiling_space(self, call, ctx):
            return space_of(layout(call, ctx))

        def plan(self, call, ctx):
            lay = layout(call, ctx)
            per = ctx.tiling["tile_elements"]
            lay.check(per)
            streams = {core: CoreStream() for core, _, _ in lay.shares}
            for core, first, end in lay.shares:
                for e0 in range(first, end, per):
                    lay.tile(streams[core], e0, min(e0 + per, end))
            return plan_of(call, [phase_of("relu_grad", streams, barrier_after=False)])

    Spaced.name = name
    return Spaced()


def test_a_start_or_formulation_naming_a_key_of_another_choice_adds_no_tiling_where_it_does_not_apply():
    """``mode`` applies to order rev only; an alternative naming it completed with order fwd gave tilings with a key
    that does not apply (picked once, then refused when given back). The entries are kept in their checked form
    (order rev with it), and the pool keeps no such tiling."""
    space = TilingSpace(ChoiceKey("order", ("fwd", "rev"), "order"),
                        ChoiceKey("mode", ("a", "b"), "mode", only=("order", "rev")),
                        IntKey("tile_elements", 1, 4096, "tile", values=(256, 512)),
                        alternatives=[{"mode": "b"}], starts=({"mode": "b"},))
    assert space.alternatives == ({"order": "rev", "mode": "b"},) == space.starts
    for fixed in ({}, {"order": "fwd"}):
        pool = Pool(space, space.fixed(fixed))
        assert pool.tilings and all(space.applies(space.keys[k], t) for t in pool.tilings for k in t)
        assert len({repr(t) for t in pool.tilings}) == len(pool.tilings)


def test_a_choice_keys_numpy_strings_are_its_plain_choices():
    """A values function giving numpy strings listed each tiling twice (np.str_('rev') and 'rev')."""
    key = ChoiceKey("order", ("fwd", "rev"), "order", values=lambda t: np.array(["rev", "fwd", "rev"]))
    got = key.candidates({})
    assert got == ["rev", "fwd"] and all(type(v) is str for v in got)


def test_a_small_space_with_a_bound_is_priced_whole_past_the_climbs_budget(monkeypatch):
    """32 tilings and a bound (0: a lower bound of every run): a space the search prices whole. Where its plans are
    large (here: no room for small plans, PLANNED_TILES_FLOOR 0) the climb's budget of 20 plans cut the last 12, the
    cheapest among them, without a word; every one is planned now, and the pick is at most the cheapest of those
    forced."""
    monkeypatch.setattr(importlib.import_module("sim.tuning.search"), "PLANNED_TILES_FLOOR", 0)
    values = [16 * i for i in range(1, 33)]

    def space(lay):
        return TilingSpace(IntKey("tile_elements", 1, lay.elements, "elements per tile", values=values),
                           fit=lambda t: lay.check(t["tile_elements"]),
                           tiles=lambda t: sum(-(-(e - f) // t["tile_elements"]) for _, f, e in lay.shares),
                           bound=lambda t: 0)

    kernel = _kernel("relu_grad_small_bounded_space", space)
    sim.register_kernel(kernel)
    n = 16384
    m = sim.Simulator("FT78NE", tuning_cache=False)
    run = m.call(f"fp_{kernel.name}_p", **ADDR, shape=[n], core=0, numerics=False)
    assert sorted(t["tile_elements"] for t, _ in run.tiling.candidates) == values
    forced = {v: m.call(f"fp_{kernel.name}_p", **ADDR, shape=[n], core=0, numerics=False,
                        tiling={"tile_elements": v}).cycles for v in (values[0], values[19], values[-1])}
    assert run.cycles <= min(forced.values()) and not run.tiling.budget_ended


def test_a_pick_whose_round_the_budget_cut_short_says_so(monkeypatch):
    """25 keys that change nothing before the tile size (no bound, so a round plans its neighbours in the keys'
    order): the budget ends a round before the tile size's next step, and the climb stopped there as at a local
    optimum, saying nothing. The pick says the budget ended its climb now."""
    monkeypatch.setattr(importlib.import_module("sim.tuning.search"), "PLANNED_TILES_FLOOR", 0)
    dummies = [f"d{i:02d}" for i in range(25)]

    def space(lay):
        keys = [IntKey(d, 0, 1, "does nothing", values=(0, 1)) for d in dummies]
        return TilingSpace(*keys, IntKey("tile_elements", 1, lay.elements, "elements per tile",
                                         values=(64, 128, 256)),
                           fit=lambda t: lay.check(t["tile_elements"]),
                           tiles=lambda t: sum(-(-(e - f) // t["tile_elements"]) for _, f, e in lay.shares))

    kernel = _kernel("relu_grad_wide_space", space)
    sim.register_kernel(kernel)
    run = sim.Simulator("FT78NE", tuning_cache=False).call(f"fp_{kernel.name}_p", **ADDR, shape=[16384], core=0,
                                                           numerics=False)
    assert len(run.tiling.candidates) == sim.tuning.MAX_PLANNED  # (the budget, spent on the keys that do nothing)
    assert not any(t["tile_elements"] == 256 for t, _ in run.tiling.candidates)
    assert run.tiling.budget_ended and "budget ended its climb" in run.tiling.describe()


@pytest.mark.parametrize("starts,alternatives,said", [
    (None, (), "starts must be a sequence of partial tilings (dicts), got None"),
    ({"order": "rev"}, (), "starts must be a sequence of partial tilings (dicts)"),
    ("order", (), "starts must be a sequence of partial tilings (dicts), got 'order'"),
    ((5,), (), "starts entry 5: not a partial tiling"),
    ((), ({"order": None},), "alternatives entry {'order': None}: not a partial tiling"),
    ((), ({"tile_elements": 256},), "a formulation names choice keys only"),
])
def test_malformed_starts_and_alternatives_are_the_spaces_error(starts, alternatives, said):
    """Malformed entries were a TypeError located inside sim, a None value reached the kernel's callbacks, and an
    integer key named as a formulation was held at its value in every climb."""
    with pytest.raises(sim.PlanError, match="tiling-space") as info:
        TilingSpace(ChoiceKey("order", ("fwd", "rev"), "order"),
                    IntKey("tile_elements", 1, 4096, "tile", values=(256, 512)),
                    starts=starts, alternatives=alternatives)
    assert said in str(info.value)
