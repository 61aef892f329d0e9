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


def _config_runs():
    import sim
    from sim.config.run_config import load_config
    from sim.run.runner import prepare
    for path in sorted((ROOT / "configs").glob("*.yaml")):
        cfg = load_config(path)
        m = prepare(cfg, numerics=False)
        run = m.call(cfg.symbol, numerics=False, tiling=cfg.tiling, **cfg.args)
        assert isinstance(m, sim.Simulator)
        yield f"config/{path.name}", run


def _bench_runs():
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import cases
    finally:
        sys.path.pop(0)
    import sim
    for case_id in cases.case_ids():
        case = cases.build(case_id)
        m = sim.Simulator(case.chip)
        for addr, arr in case.inputs.items():
            m.write(addr, arr)
        run = m.call(case.symbol, numerics=False, **case.args)
        yield f"bench/{case_id}", run


def measure() -> dict[str, dict]:
    """Cycles, trace digest and chosen tiling of every shipped config and bench case."""
    out = {}
    for name, run in [*_config_runs(), *_bench_runs()]:
        out[name] = {"cycles": run.cycles, "trace": trace_digest(run.events),
                     "tiling": None if run.tiling is None else run.tiling.tiling}
    return out


@pytest.fixture(scope="module")
def measured() -> dict[str, dict]:
    return measure()


def test_cycles_and_traces_match_the_frozen_figures(measured):
    frozen = json.loads(FROZEN.read_text())
    assert sorted(measured) == sorted(frozen), "the set of configs / bench cases changed: regenerate"
    changed = [f"{k}: {frozen[k]} -> {v}" for k, v in measured.items() if v != frozen[k]]
    assert not changed, "timing changed (regenerate deliberately and explain):\n" + "\n".join(changed)


if __name__ == "__main__":
    if "--update" in sys.argv:
        FROZEN.parent.mkdir(exist_ok=True)
        FROZEN.write_text(json.dumps(measure(), indent=1, sort_keys=True) + "\n")
        print(f"wrote {FROZEN.relative_to(ROOT)}")
    else:
        print(json.dumps(measure(), indent=1, sort_keys=True))
