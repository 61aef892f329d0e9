"""Refactors keep the simulated timing: cycles and trace digests of every shipped config and bench case.

``tests/frozen/cycles.json`` holds, for each shipped run-config (``configs/*.yaml``) and each benchmark case
(``bench/cases.py``), the run's cycle count and a digest of its trace's timing (every event's core, unit,
kind, start, end, bytes, addresses, regions, tile, phase and wait), with the tiling the cost model chose.
A change of the timing model is deliberate: regenerate the file with
``python tests/test_frozen_cycles.py --update`` and explain each changed line (before/after) in the note
that lands it.  Runs are timing-only (a timing-only run has the same cycles and trace as a full one,
tests/test_timing_only.py checks that), so the file is cheap to check.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FROZEN = Path(__file__).resolve().parent / "frozen" / "cycles.json"
#: Event fields that make up the timing of a trace (reported quantities such as flops are not timing).
TIMING_FIELDS = ("core", "unit", "kind", "start", "end", "bytes", "src", "dst", "src_region", "dst_region", "tile",
                 "phase", "wait_cycles", "wait_start")


def trace_digest(events) -> str:
    """SHA-256 of the events' timing fields, in the order the engine recorded them sorted stably."""
    rows = sorted(tuple("" if getattr(e, f) is None else getattr(e, f) for f in TIMING_FIELDS) for e in events)
    return hashlib.sha256(repr(rows).encode()).hexdigest()[:16]


def _config_names() -> list[str]:
    return [f"config/{path.name}" for path in sorted((ROOT / "configs").glob("*.yaml"))]


def _bench_cases():
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import cases
    finally:
        sys.path.pop(0)
    return cases


def case_names() -> list[str]:
    """Every shipped run-config and bench case, by the name cycles.json gives it."""
    return [*_config_names(), *(f"bench/{case_id}" for case_id in _bench_cases().case_ids())]


def run_of(name: str):
    """The timing-only run of one shipped config (``config/<file>``) or bench case (``bench/<id>``)."""
    import sim
    kind, _, rest = name.partition("/")
    if kind == "config":
        from sim.config.run_config import load_config
        from sim.run.runner import prepare
        cfg = load_config(ROOT / "configs" / rest)
        m = prepare(cfg, numerics=False)
        assert isinstance(m, sim.Simulator)
        return m.call(cfg.symbol, numerics=False, tiling=cfg.tiling, **cfg.args)
    case = _bench_cases().build(rest)
    m = sim.Simulator(case.chip)
    for addr, arr in case.inputs.items():
        m.write(addr, arr)
    return m.call(case.symbol, numerics=False, **case.args)


def measured_of(name: str) -> dict:
    """Cycles, trace digest and chosen tiling of one case."""
    run = run_of(name)
    return {"cycles": run.cycles, "trace": trace_digest(run.events),
            "tiling": None if run.tiling is None else run.tiling.tiling}


def measure() -> dict[str, dict]:
    """Cycles, trace digest and chosen tiling of every shipped config and bench case."""
    return {name: measured_of(name) for name in case_names()}


def _frozen() -> dict[str, dict]:
    return json.loads(FROZEN.read_text())


def test_the_frozen_file_lists_every_config_and_bench_case():
    assert sorted(case_names()) == sorted(_frozen()), "the set of configs / bench cases changed: regenerate"


# One test per case, so that the suite's workers share them out.
@pytest.mark.parametrize("name", case_names())
def test_cycles_and_traces_match_the_frozen_figures(name):
    frozen = _frozen().get(name)
    assert frozen is not None, f"{name} is not in {FROZEN.name}: regenerate"
    got = measured_of(name)
    assert got == frozen, f"timing changed (regenerate deliberately and explain): {name}: {frozen} -> {got}"


if __name__ == "__main__":
    os.environ["DSPSIM_NO_CACHE"] = "1"  # (the tilings the search picks now, as the tests' empty caches give them)
    if "--update" in sys.argv:
        FROZEN.parent.mkdir(exist_ok=True)
        FROZEN.write_text(json.dumps(measure(), indent=1, sort_keys=True) + "\n")
        print(f"wrote {FROZEN.relative_to(ROOT)}")
    else:
        print(json.dumps(measure(), indent=1, sort_keys=True))
