"""sim.model.tiling.union: one space of a call's several formulations, a key choosing among them."""

from __future__ import annotations

import pytest

from sim.errors import KernelArgError
from sim.model.plan import DoesNotFit
from sim.model.tiling import ChoiceKey, IntKey, TilingSpace, union


def _fit_below(limit: int):
    def fit(t):
        if t["block"] > limit:
            raise DoesNotFit("am", t["block"], limit, "too big")
    return fit


def _spaces() -> dict[str, TilingSpace]:
    plain = TilingSpace(ChoiceKey("split", ("n", "m"), "split"), IntKey("block", 1, 64, "block", values=(64, 32)),
                        fit=_fit_below(48), tiles=lambda t: 1000 // t["block"], bound=lambda t: 10.0 * t["block"],
                        starts=({"split": "m"},))
    swapped = TilingSpace(ChoiceKey("split", ("n", "k"), "split"), IntKey("block", 1, 256, "block", values=(256, 8)),
                          IntKey("panel", 1, 4, "panel", values=(2,)), fit=_fit_below(512),
                          tiles=lambda t: 1, bound=lambda t: 1.0)
    return {"plain": plain, "swapped": swapped}


def _space() -> TilingSpace:
    return union(ChoiceKey("form", ("plain", "swapped"), "the formulation", values=("swapped", "plain")), _spaces(),
                 alternatives=({"form": "plain"},))


def test_the_keys_of_the_formulations_together():
    space = _space()
    assert list(space.keys) == ["form", "split", "block", "panel"]
    block = space.keys["block"]
    assert isinstance(block, IntKey) and (block.lo, block.hi) == (1, 256)
    assert space.keys["split"].choices == ("n", "m", "k")
    assert space.keys["panel"].only == ("form", "swapped")  # a key of one formulation only
    assert space.alternatives == ({"form": "plain"},)
    assert space.starts == ({"form": "plain", "split": "m"},)


def test_the_candidates_are_the_chosen_formulations():
    got, more = _space().completions({}, 100)
    assert not more
    assert got == [
        {"form": "swapped", "split": s, "block": b, "panel": 2} for s in ("n", "k") for b in (256, 8)
    ] + [{"form": "plain", "split": s, "block": b} for s in ("n", "m") for b in (64, 32)]


def test_fit_tiles_and_bound_are_the_chosen_formulations():
    space = _space()
    assert space.tiles({"form": "plain", "split": "n", "block": 32}) == 31
    assert space.bound({"form": "swapped", "split": "n", "block": 8, "panel": 2}) == 1.0
    space.fit({"form": "swapped", "split": "k", "block": 256, "panel": 2})
    with pytest.raises(DoesNotFit):
        space.fit({"form": "plain", "split": "n", "block": 64})
    # The union takes a block of 256 (the swapped range); the plain formulation's own range refuses it.
    space.check({"form": "plain", "block": 256})
    with pytest.raises(KernelArgError, match=r"tiling\.block.*1\.\.64"):
        space.fit({"form": "plain", "split": "n", "block": 256})
    with pytest.raises(KernelArgError, match=r"tiling\.split"):
        space.fit({"form": "plain", "split": "k", "block": 8})
    with pytest.raises(KernelArgError, match=r"tiling\.block.*1\.\.64"):
        space.tiles({"form": "plain", "split": "n", "block": 256})


def test_formulations_that_declare_a_key_differently_are_refused():
    spaces = _spaces()
    other = TilingSpace(ChoiceKey("block", ("a", "b")))
    with pytest.raises(ValueError, match="'block'"):
        union(ChoiceKey("form", ("plain", "other")), {"plain": spaces["plain"], "other": other})
    with pytest.raises(ValueError, match="choices"):
        union(ChoiceKey("form", ("plain",)), spaces)
