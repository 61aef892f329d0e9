"""The climb's neighbours (sim.tuning.search.neighbours): one decision per step."""

from __future__ import annotations

import pytest

import sim
from sim.model.tiling import ChoiceKey, IntKey, TilingSpace
from sim.tuning.pool import Pool
from sim.tuning.search import _nearest_with, neighbours


def test_a_step_changes_one_choice_and_drags_only_integer_keys():
    """``mode`` has a second choice only with ``split`` b, and ``size`` 4 fits only with ``depth`` 1: from
    (a, x, depth 2, size 2) the neighbours are split b (mode kept x), depth 1 and the sizes next to 2 (size 4
    drags depth 1 with it), never (b, y): that is two decisions, the second one split b's own step."""
    space = TilingSpace(
        ChoiceKey("split", ("a", "b"), "split"),
        ChoiceKey("mode", ("x", "y"), "mode", values=lambda t: ("x", "y") if t["split"] == "b" else ("x",)),
        IntKey("depth", 1, 2, "depth", values=(2, 1)),
        IntKey("size", 1, 4, "size", values=lambda t: (2, 1, 4) if t["depth"] == 1 else (2, 1)))
    pool = Pool(space, {})
    here = {"split": "a", "mode": "x", "depth": 2, "size": 2}
    got = neighbours(space, here, pool, {})
    assert {"split": "b", "mode": "y", "depth": 2, "size": 2} in pool.tilings
    assert all(t["mode"] == "x" for t in got)
    assert {"split": "b", "mode": "x", "depth": 2, "size": 2} in got
    assert {"split": "a", "mode": "x", "depth": 1, "size": 2} in got
    assert {"split": "a", "mode": "x", "depth": 1, "size": 4} in got  # an integer step may change another integer
    assert {"split": "a", "mode": "x", "depth": 2, "size": 1} in got
    # From split b, mode y is one step.
    assert {"split": "b", "mode": "y", "depth": 2, "size": 2} in neighbours(space, {**here, "split": "b"}, pool, {})


def test_the_tiling_of_another_algorithm_nearest_the_climbs_end():
    """A space's ``starts`` name algorithms two choices away (``mode`` y exists only with ``split`` b): the search
    prices the tiling of each nearest where its climb ended (fewest keys changed), unless the caller's keys
    exclude it or the climb ended there already."""
    space = TilingSpace(
        ChoiceKey("split", ("a", "b"), "split"),
        ChoiceKey("mode", ("x", "y"), "mode", values=lambda t: ("x", "y") if t["split"] == "b" else ("x",)),
        IntKey("depth", 1, 2, "depth", values=(2, 1)),
        starts=({"mode": "y"},))
    pool = Pool(space, {})
    here = {"split": "a", "mode": "x", "depth": 1}
    assert _nearest_with(pool, space.starts[0], here, {}) == {"split": "b", "mode": "y", "depth": 1}
    assert _nearest_with(pool, space.starts[0], here, {"mode": "x"}) is None
    assert _nearest_with(pool, space.starts[0], {"split": "b", "mode": "y", "depth": 2}, {}) is None
    # A start naming a key the space lacks is the kernel's error (the space's), not the caller's.
    with pytest.raises(sim.PlanError, match=r"'tiling-space': the tiling space's starts entry \{'mode': 'y'\}: "
                                            r"'tiling': unknown key 'mode'"):
        TilingSpace(ChoiceKey("split", ("a", "b"), "split"), starts=({"mode": "y"},))


def test_an_integer_step_passes_over_the_values_its_bound_rules_out():
    """From size 2 the step above is 3; where the bound rules 3 out (``viable`` false) it is the next value above
    that it does not, 4; where it rules out every value above, the nearest, 3 (its plan is then left out by the same
    bound, as before)."""
    space = TilingSpace(IntKey("size", 1, 4, "size", values=(2, 1, 3, 4)))
    pool = Pool(space, {})
    here = {"size": 2}
    assert neighbours(space, here, pool, {}) == [{"size": 1}, {"size": 3}]
    assert neighbours(space, here, pool, {}, lambda t: t["size"] != 3) == [{"size": 1}, {"size": 4}]
    assert neighbours(space, here, pool, {}, lambda t: t["size"] < 3) == [{"size": 1}, {"size": 3}]
