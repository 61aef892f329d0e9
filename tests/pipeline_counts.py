"""Counting what a run makes of the pipeline's stages: simulators made, calls bound, layouts checked (the tests of
`dspsim run` and of a sweep point: one of each per run)."""

from __future__ import annotations

import collections

import sim
import sim.model.layout as layout
import sim.run.preflight as preflight


def count_stages(monkeypatch) -> collections.Counter:
    """A Counter of ``simulators``, ``binds`` and ``layout checks``, counting from now (``monkeypatch``'d)."""
    counts: collections.Counter = collections.Counter()
    real_init, real_bind, real_check = sim.Simulator.__init__, sim.Simulator.bind, layout.check_layout

    def init(self, *a, **k):
        counts["simulators"] += 1
        real_init(self, *a, **k)

    def bind(self, *a, **k):
        counts["binds"] += 1
        return real_bind(self, *a, **k)

    def check(*a, **k):
        counts["layout checks"] += 1
        return real_check(*a, **k)
    monkeypatch.setattr(sim.Simulator, "__init__", init)
    monkeypatch.setattr(sim.Simulator, "bind", bind)
    monkeypatch.setattr(layout, "check_layout", check)
    monkeypatch.setattr(preflight, "check_layout", check)
    return counts
