"""A user kernel's tiling space against the search: callbacks that change what they are given, a bound that is
not one, candidates that break a rule, counts too large to print, and the tuning cache's key of a kernel a factory
builds (an outside test of the kernel SDK, stop 57)."""

from __future__ import annotations

import importlib
import uuid

import numpy as np
import pytest

import sim
from kernels.common.streams import CoreStream, phase_of, plan_of
from kernels.common.tiling_space import IntKey, TilingSpace, complete
from sim.files import tuning_cache

ADDR = dict(dy=0x10000000, x=0x10100000, dx=0x10200000)
VALUES = [256, 512, 1024, 2048, 4096, 128, 64, 32]


@pytest.fixture()
def relu(monkeypatch):
    """examples/relu_grad.py's module (on the path for the test)."""
    from pathlib import Path
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parent.parent / "examples"))
    return importlib.import_module("relu_grad")


def custom(relu, name, *, bound=None, tiles=None, values=VALUES, breaks=None):
    """examples/relu_grad.py's kernel with a tiling space of its own: ``bound``/``tiles`` (t -> ...), and
    ``breaks``: the tile size whose plan breaks the rules (its tiles load nothing and state no loops)."""
    class Custom(relu.ReluGrad):
        def tiling_space(self, call, ctx):
            lay = relu._Layout(call, ctx)
            return TilingSpace(IntKey("tile_elements", 1, lay.elements, "elements per tile", values=values),
                               fit=lambda t: lay.check(t["tile_elements"]),
                               tiles=tiles or (lambda t: sum(-(-(e - s) // t["tile_elements"]) for _, s, e in
                                                            lay.shares)),
                               bound=bound)

        def plan(self, call, ctx):
            lay = relu._Layout(call, ctx)
            per = complete(self.tiling_space(call, ctx), ctx)["tile_elements"]
            streams = {core: CoreStream() for core, _, _ in lay.shares}
            for core, first, end in lay.shares:
                for e0 in range(first, end, per):
                    lay.tile(streams[core], e0, min(e0 + per, end))
            plan = plan_of(call, [phase_of("relu_grad", streams, barrier_after=False)])
            if per == breaks:  # no loads and no loops: cheap to run, and against the rules
                import dataclasses
                phase = plan.phases[0]
                tiles = {c: tuple(dataclasses.replace(t, loads=(), compute=dataclasses.replace(t.compute, loops=()))
                                  for t in ts) for c, ts in phase.tiles.items()}
                plan = dataclasses.replace(plan, phases=(dataclasses.replace(phase, tiles=tiles),))
            return plan
    Custom.name = name
    return Custom()


def run(kernel, **kw) -> sim.Run:
    with sim.registered_kernel(kernel):
        m = sim.Simulator("FT78NE", tuning_cache=False)
        rng = np.random.default_rng(0)
        m.write(ADDR["dy"], rng.standard_normal(4096).astype(np.float32), core=0)
        m.write(ADDR["x"], rng.standard_normal(4096).astype(np.float32), core=0)
        return m.call(f"fp_{kernel.name}_p", **ADDR, shape=[4096], core=0, numerics=False, **kw)


def test_a_bound_that_changes_its_tiling_changes_nothing_the_search_holds(relu):
    """bound() and a key's values() are given copies: a bound that wrote tile_elements = 64 into its tiling made
    every candidate 64 (the pick 3.6x slower), one that removed the key picked {}."""
    honest = run(custom(relu, "sdk_plain"))

    def writes(t):
        t["tile_elements"] = 64
        return 0

    def pops(t):
        t.clear()
        return 0

    for name, fn in (("sdk_writes", writes), ("sdk_pops", pops)):
        got = run(custom(relu, name, bound=fn))
        assert (got.tiling.tiling, got.cycles) == (honest.tiling.tiling, honest.cycles)
        assert len({repr(c) for c, _ in got.tiling.candidates}) == len(got.tiling.candidates)


def test_a_bound_a_run_beats_is_refused_naming_it(relu):
    """A bound must be a lower bound of every run of its tiling: one above a candidate's run is a 'tiling-space'
    PlanError naming bound(), the tiling and both figures (inf for every tiling priced only the first)."""
    with pytest.raises(sim.PlanError, match=r"breaks the plan rule 'tiling-space': the tiling space's bound\(\) "
                                            r"gave inf cycles for \{'tile_elements': \d+\}, whose plan ran in \d+: "
                                            r"a bound must be a lower bound"):
        run(custom(relu, "sdk_inf", bound=lambda t: float("inf")))


def test_a_user_kernels_candidate_that_breaks_a_rule_is_dropped_before_it_is_priced(relu):
    """A user kernel's candidates are checked before they are priced (docs/writing-a-kernel.md): the tiling whose
    plan loads nothing and states no loops (cheap to run) is listed as dropped with its rule and never priced.
    Priced first, it pulled the climb towards it, and once the check dropped it the pick was a slower neighbour
    than the search finds without it."""
    without = run(custom(relu, "sdk_clean", values=[v for v in VALUES if v != 128]))
    got = run(custom(relu, "sdk_breaks", breaks=128))
    assert {"tile_elements": 128} not in [c for c, _ in got.tiling.candidates]
    assert any(t == {"tile_elements": 128} and "breaks the plan rule" in why for t, why in got.tiling.dropped)
    assert got.tiling.tiling == without.tiling.tiling and got.cycles == without.cycles


@pytest.mark.parametrize("callback", ["tiles", "bound"])
def test_counts_too_large_to_print_are_refused_in_one_line(relu, callback):
    """tiles() of 10**5000 (more digits than Python prints) and bound() of 10**400 (beyond the floats) used to
    escape as ValueError and OverflowError from inside the search: a count past 2**62 reads as that many tiles
    (beyond the budget, refused naming it), a bound past the floats as inf (a bound no run can beat)."""
    if callback == "tiles":
        with pytest.raises(sim.KernelArgError, match=r"plans up to 4611686018427387904 tiles"):
            run(custom(relu, "sdk_huge_tiles", tiles=lambda t: 10 ** 5000))
    else:
        with pytest.raises(sim.PlanError, match=r"bound\(\) gave inf cycles"):
            run(custom(relu, "sdk_huge_bound", bound=lambda t: 10 ** 400))


FACTORY = '''
from relu_grad import ReluGrad


def build(name, tile_of):
    """A kernel class made by a factory: its plan reads the tile size through a function of the caller's."""
    class K(ReluGrad):
        pass
    K.name = name

    def tiling_space(self, call, ctx):
        space = ReluGrad.tiling_space(self, call, ctx)
        tile_of()  # (what the factory's user configures)
        return space
    K.tiling_space = tiling_space
    return K()
'''


def test_a_kernel_a_factory_builds_is_keyed_by_the_file_that_configures_it(tmp_path, monkeypatch, relu):
    """The tuning cache's key of a kernel whose class a factory in a shared module builds follows the functions its
    planner closes over: editing the kernel's own file, which only configures the factory through a lambda, is
    another key (it used to reuse the stored choice)."""
    uid = uuid.uuid4().hex[:12]
    factory, module = f"sdk_factory_{uid}", f"sdk_configured_{uid}"
    (tmp_path / f"{factory}.py").write_text(FACTORY)
    source = f"from {factory} import build\nSIZE = 0\nKERNEL = build('sdk_built_{uid}', lambda: SIZE)\n"
    (tmp_path / f"{module}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    kernel = importlib.import_module(module).KERNEL
    before = tuning_cache.kernel_fingerprint(kernel)
    assert before is not None and before == tuning_cache.kernel_fingerprint(kernel)
    (tmp_path / f"{module}.py").write_text(source.replace("SIZE = 0", "SIZE = 2048"))
    assert tuning_cache.kernel_fingerprint(kernel) != before


def test_a_space_that_could_never_search_a_key_is_refused_naming_it():
    """Kernel mistakes that left a key unsearched or the space empty were blamed on the call or passed silently:
    an ``only`` naming no key, no such choice, or a key declared after it; a range with lo > hi; a start or an
    alternative with a value outside its key's range. Each is the ``tiling-space`` PlanError naming the key."""
    from sim.model.tiling import ChoiceKey

    split = ChoiceKey("split", ("rows", "cols"), "split")
    for keys, words in (
            ((split, IntKey("tile", 1, 64, "", values=[8], only=("ghost", "rows"))), r"tiling key 'tile': only="),
            ((split, IntKey("tile", 1, 64, "", values=[8], only=("split", "diagonal"))), r"tiling key 'tile': only="),
            ((IntKey("tile", 1, 64, "", values=[8], only=("split", "rows")), split), r"tiling key 'tile': only="),
    ):
        with pytest.raises(sim.PlanError, match=r"'tiling-space': " + words):
            TilingSpace(*keys)
    with pytest.raises(sim.PlanError, match=r"'tiling-space': tiling key 'tile': its range 9..3 holds no value"):
        IntKey("tile", 9, 3, "", values=[4])
    with pytest.raises(sim.PlanError, match=r"the tiling space's alternatives entry \{'tile': -5\}: "
                                            r"'tiling.tile': expected an integer in 1..64"):
        TilingSpace(IntKey("tile", 1, 64, "", values=[8]), alternatives=[{"tile": -5}])


def test_a_numpy_str_choice_and_a_str_of_values_are_taken_as_what_they_are():
    """A caller's numpy str choice is kept as a str (it printed and cached as np.str_('b')); a ChoiceKey whose
    values function gives a str is refused, not read letter by letter."""
    from sim.model.tiling import ChoiceKey

    key = ChoiceKey("mode", ("a", "b"), "mode")
    got = key.check(np.str_("b"))
    assert got == "b" and type(got) is str
    words = ChoiceKey("mode", ("a", "b"), "mode", values=lambda chosen: "ab")
    with pytest.raises(sim.PlanError, match=r"'tiling-space': tiling key 'mode': its values are 'ab', not a list"):
        words.candidates({})
