"""A sweep reuses a journal row only when nothing that decides its result changed (issue 20, item 4).

docs/sweeps.md promises the point id digests everything that decides the result: besides the config, the
target and the grid values, the content of the data files the config places, the kernel files it names (and
the helpers they import from beside them) and the simulator's own sources.  Each is changed here in turn, and
the point runs again: with the cycles a fresh run gives, never the old row's.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import yaml

from sim.files import tuning_cache
from sim.sweep import load_sweep, run_point, run_sweep

ROOT = Path(__file__).resolve().parent.parent
TESTS = Path(__file__).resolve().parent
SHARED = ROOT / "configs" / "ft78ne_batch_norm_grad_s.yaml"


def _params_sweep(tmp_path: Path, batch: int) -> Path:
    """A timing-only sweep of BatchNormGrad whose params table (the batch in it) comes from params.npy."""
    doc = yaml.safe_load(SHARED.read_text())
    _write_params(tmp_path, doc["args"]["params"], batch)
    doc["args"]["params"] = 0xC2000000
    doc["data"].append({"name": "params", "addr": 0xC2000000, "shape": [12], "dtype": "int64", "file": "params.npy"})
    (tmp_path / "bn.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(json.dumps({"configs": ["bn.yaml"], "grid": {"target": ["FT78NE"]}}))  # one point, no plot
    return sweep


def _write_params(folder: Path, table: list[int], batch: int) -> None:
    np.save(folder / "params.npy", np.array(table[:5] + [batch] + table[6:] + [0, 0, 0, 0], np.int64))


def test_a_changed_data_file_reruns_its_points_with_the_fresh_cycles(tmp_path):
    sweep = _params_sweep(tmp_path, batch=4)
    out = tmp_path / "out"
    first = run_sweep(load_sweep(sweep), out, workers=1)
    assert not first.failed and first.ran_now == 1
    assert run_sweep(load_sweep(sweep), out, workers=1).ran_now == 0  # nothing changed: reused
    _write_params(tmp_path, [0xC0000000, 0xD0000000, 0xE0000000, 0xB1000000, 0xC1000000, 4, 64, 1], batch=64)
    again = run_sweep(load_sweep(sweep), out, workers=1)
    assert again.ran_now == 1 and not again.failed
    fresh = run_sweep(load_sweep(sweep), tmp_path / "fresh", workers=1)
    assert again.rows[0]["cycles"] == fresh.rows[0]["cycles"] != first.rows[0]["cycles"]


def test_another_simulator_version_reruns_every_point(tmp_path, monkeypatch):
    sweep = _params_sweep(tmp_path, batch=4)
    out = tmp_path / "out"
    assert run_sweep(load_sweep(sweep), out, workers=1).ran_now == 1
    # A changed timing model or kernel changes the hash of dspsim's sources (faked: the hash itself).
    monkeypatch.setattr(tuning_cache, "_model_version", "0123456789abcdef")
    assert tuning_cache.model_version() == "0123456789abcdef"
    spec = load_sweep(sweep)
    assert run_sweep(spec, out, workers=1).ran_now == 1
    # A worker of another version (a Dask worker, say) fails the point rather than record it under this id.
    point = spec.points()[0]
    monkeypatch.setattr(tuning_cache, "_model_version", "fedcba9876543210")
    row = run_point(point)
    assert "is not the sweep's (0123456789abcdef)" in row["error"] and "cycles" not in row


HELPER_KERNEL = '''import sys
sys.path.insert(0, {tests!r})
sys.path.insert(0, {folder!r})
from factor_helper import FACTOR
from tiny_kernels import Twice
KERNEL = Twice("helped", factor=FACTOR)
'''


def test_a_changed_helper_of_a_kernel_file_reruns_its_points(tmp_path):
    """The kernel file is unchanged; the module it imports from beside it is edited."""
    (tmp_path / "factor_helper.py").write_text("FACTOR = 2.0\n")
    (tmp_path / "helped.py").write_text(HELPER_KERNEL.format(tests=str(TESTS), folder=str(tmp_path)))
    (tmp_path / "cfg.yaml").write_text("target: FT78NE\nsymbol: fp_helped_s\nkernels: [helped.py]\n"
                                       "args: {x: 0xA0000000, y: 0xA0100000, n: 1024, core_mask: 1}\n")
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(json.dumps({"configs": ["cfg.yaml"], "grid": {"args.n": [1024]}}))
    before = load_sweep(sweep, allow_kernels=True).points()[0]["id"]
    assert load_sweep(sweep, allow_kernels=True).points()[0]["id"] == before  # stable while nothing changes
    (tmp_path / "factor_helper.py").write_text("FACTOR = 3.0\n")
    # This process imported the old helper already; what its source now says decides the id.
    assert load_sweep(sweep, allow_kernels=True).points()[0]["id"] != before


def test_a_journal_row_whose_cycles_are_not_a_count_runs_again(tmp_path):
    """A success line without its cycles, or with cycles that are not a count (hand-edited, damaged), is run
    again, as a line the reader refuses is: the resume crashed on the first (KeyError) and reused the second as it
    was."""
    sweep = _params_sweep(tmp_path, batch=4)
    out = tmp_path / "out"
    first = run_sweep(load_sweep(sweep), out, workers=1)
    journal = out / "points.jsonl"
    (row,) = [json.loads(line) for line in journal.read_text().splitlines()]
    for damaged in ({k: v for k, v in row.items() if k != "cycles"}, {**row, "cycles": "abc"},
                    {**row, "cycles": True}, {**row, "cycles": -1}):
        journal.write_text(json.dumps(damaged) + "\n")
        again = run_sweep(load_sweep(sweep), out, workers=1)
        assert again.ran_now == 1 and again.rows[0]["cycles"] == first.rows[0]["cycles"]


def test_a_journal_row_damaged_elsewhere_than_its_cycles_runs_again(tmp_path):
    """A line that holds only an id and a "count" (the outside attack's: cycles 10**30, roofline_fraction "x"),
    or a whole row with one column out of its range or type, its axis value missing or another, an unknown column,
    another config or a failure mark, is damaged: the point runs again (the same cycles as the first run) and its
    table row keeps every column, in order.  The row as written is reused."""
    sweep = _params_sweep(tmp_path, batch=4)
    out = tmp_path / "out"
    first = run_sweep(load_sweep(sweep), out, workers=1)
    journal = out / "points.jsonl"
    (row,) = [json.loads(line) for line in journal.read_text().splitlines()]
    header = (out / "sweep.csv").read_text().splitlines()[0]
    assert row["target"] == "FT78NE" and header.startswith("id,config,target,chip,")
    damaged_rows = [{"id": row["id"], "cycles": 10**30, "roofline_fraction": "x"},
                    {**row, "cycles": 10**30}, {**row, "roofline_fraction": "x"}, {**row, "tiles": 2.5},
                    {**row, "load_imbalance": -1.0}, {k: v for k, v in row.items() if k != "target"},
                    {**row, "target": "MT7004"}, {**row, "foo": 1}, {**row, "config": "other.yaml"},
                    {**row, "skipped": "no"}]
    journal.write_text("".join(json.dumps(d) + "\n" for d in damaged_rows))
    again = run_sweep(load_sweep(sweep), out, workers=1)
    assert again.ran_now == 1 and again.rows[0]["cycles"] == first.rows[0]["cycles"]
    assert (out / "sweep.csv").read_text().splitlines()[0] == header
    journal.write_text(json.dumps(row) + "\n")
    assert run_sweep(load_sweep(sweep), out, workers=1).ran_now == 0
