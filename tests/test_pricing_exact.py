"""The search's pricing (sim/tuning/pricing.py) picks what simulating every candidate to the end picks, whatever it
leaves out or stops: checked on random candidate sets, with runs that take exactly their cycles and stop at any
limit they pass (a stand-in for the engine), priced in rounds as the search prices them, some of whose plans break
a rule of the check (found only when one is the pick)."""

from __future__ import annotations

from types import SimpleNamespace

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from sim.errors import PlanError
from sim.tuning import pricing as pricing_module
from sim.tuning.pricing import Candidate, Pricing

TOLERANCE = 0.01


def _exhaustive(rows: list[tuple[int, int]]) -> int:
    """The tie rule on every candidate's full cycles: ``rows`` are (tiles, cycles) in planning order."""
    best = min(c for _, c in rows)
    tied = [i for i, (_, c) in enumerate(rows) if c <= best * (1 + TOLERANCE)]
    return min(tied, key=lambda i: (rows[i][0], rows[i][1], i))


#: (tiles, cycles, how far below them its lower bound is, whether its plan breaks a rule of the check)
candidate_sets = st.lists(st.tuples(st.integers(1, 4), st.integers(950, 1050), st.integers(0, 120),
                                    st.sampled_from([False, False, False, True])), min_size=1, max_size=7)


def _verify(breaks: bool):
    def verify() -> None:
        if breaks:
            raise PlanError("plan-structure", "the stand-in plan breaks a rule")
    return verify


@settings(max_examples=400, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # (the same stand-in for every input)
@given(cands=candidate_sets, cuts=st.lists(st.integers(1, 6), max_size=3))
# The cheapest breaks a rule: its cycles put the first candidate out of the tie it belongs to (found by this test).
@example(cands=[(1, 960, 0, False), (2, 951, 0, False), (3, 950, 0, True)], cuts=[])
# A candidate left out that ties the pick in tiles and cycles but was planned before it wins the tie (found too).
@example(cands=[(1, 1009, 0, False), (2, 1000, 0, False), (2, 1000, 1, False), (3, 991, 0, False)], cuts=[])
def test_the_pick_is_the_exhaustive_one_and_every_reported_number_a_full_run(cands, cuts, monkeypatch):
    rows = [(tiles, cycles) for tiles, cycles, _, _ in cands]
    runs: list[tuple[int, int | None]] = []

    def fake_simulate(plan, target, memory, *, numerics, on_tile=None, until_cycles=None, region_bytes=None):
        stopped = until_cycles is not None and plan.cycles > until_cycles
        runs.append((plan.index, until_cycles))
        return None if stopped else SimpleNamespace(cycles=plan.cycles)

    monkeypatch.setattr(pricing_module, "simulate", fake_simulate)
    made = [Candidate({"i": i}, SimpleNamespace(tile_count=tiles, cycles=cycles, index=i), max(cycles - slack, 1),
                      _verify(breaks)) for i, (tiles, cycles, slack, breaks) in enumerate(cands)]
    p = Pricing(None, None, TOLERANCE, None)  # type: ignore[arg-type]
    start = 0
    for cut in [*cuts, len(made)]:  # rounds, as a search's climb prices its neighbours
        end = min(len(made), start + cut)
        if end > start:
            p.price(made[start:end])
        start = end
    pick = p.settle()
    # (the tie rule among the plans that pass the check: a pick that breaks a rule is dropped and the pick made again)
    valid = [i for i, c in enumerate(cands) if not c[3]]
    assert pick == (valid[_exhaustive([rows[i] for i in valid])] if valid else None)
    for i, cycles in p.cycles.items():
        assert cycles is None or cycles == rows[i][1]
    # a run stopped for the tie was stopped only where its full run could change neither the cheapest nor the pick
    for i, bound in p._proven.items():
        assert rows[i][1] >= bound


def test_a_tied_candidate_with_more_tiles_is_stopped_at_the_cheapest(monkeypatch):
    """The pick (2 tiles, 1,000 cycles) then a candidate with 4 tiles of 1,004: it would tie, but could change
    neither the cheapest nor the pick, so its run stops at 999 cycles (the tolerance's limit would be 1,010)."""
    limits: list[int | None] = []

    def fake_simulate(plan, target, memory, *, numerics, on_tile=None, until_cycles=None, region_bytes=None):
        limits.append(until_cycles)
        return None if until_cycles is not None and plan.cycles > until_cycles else SimpleNamespace(cycles=plan.cycles)

    monkeypatch.setattr(pricing_module, "simulate", fake_simulate)
    made = [Candidate({"i": 0}, SimpleNamespace(tile_count=2, cycles=1000), 900),
            Candidate({"i": 1}, SimpleNamespace(tile_count=4, cycles=1004), 900)]
    p = Pricing(None, None, TOLERANCE, None)  # type: ignore[arg-type]
    p.price(made)
    assert p.settle() == 0 and limits == [None, 999]
    assert p.cycles == {0: 1000, 1: None} and p.note(1, 0) == "stopped: it could no longer change the pick"
