"""A run-config's ``data`` entries as the checks and the runs see them (issue 20, item 10).

A pointer table a kernel reads while binding (BatchNormGrad's ``params`` given as an address, the C call's own
form) may come from a ``.npy`` file: it is placed before it is read, by ``validate``, ``run`` (numerics or timing
only) and a sweep alike.  Two ``data`` entries whose bytes overlap (the later one overwrites the earlier) are a
warning of ``validate`` and an error under ``--strict``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from sim.cli import main
from sim.config.run_config import load_config
from sim.run.runner import execute

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT / "configs" / "ft78ne_batch_norm_grad_s.yaml"
PARAMS_AT = 0xC2000000


def params_from_a_file(tmp_path: Path, numerics: bool = True) -> Path:
    """The shipped shared BatchNormGrad config with its params table at an address, read from params.npy."""
    doc = yaml.safe_load(SHARED.read_text())
    table = doc["args"]["params"] + [0, 0, 0, 0]
    np.save(tmp_path / "params.npy", np.array(table, np.int64))
    doc["args"]["params"] = PARAMS_AT
    doc["data"].append({"name": "params", "addr": PARAMS_AT, "shape": [12], "dtype": "int64", "file": "params.npy"})
    doc["numerics"] = numerics
    path = tmp_path / "bn_params_file.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def test_a_params_table_from_a_file_is_placed_before_the_binding_reads_it(tmp_path, capsys):
    cfg = params_from_a_file(tmp_path)
    assert main(["validate", str(cfg)]) == 0, capsys.readouterr()
    out = capsys.readouterr().out
    assert "params" in out and "layout OK" in out
    assert main(["validate", str(cfg), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["ok"]
    assert main(["run", str(cfg), "--out-dir", str(tmp_path / "out")]) == 0, capsys.readouterr().err
    # The same call as the shipped config's inline list: the same cycles and the same numbers.
    _, inline = execute(load_config(SHARED))
    m, run = execute(load_config(cfg))
    assert run.cycles == inline.cycles
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "bn_params_file.dx.npy"), m.read(0xA1000000, (4, 64),
                                                                                               np.float32))


def test_a_timing_only_run_places_the_table_too(tmp_path, capsys):
    """(A timing-only sweep of the same config: tests/test_sweep_resume.py.)"""
    cfg = params_from_a_file(tmp_path, numerics=False)
    assert main(["run", str(cfg), "--out-dir", str(tmp_path / "out")]) == 0, capsys.readouterr().err
    assert "timing only" in capsys.readouterr().out


def test_two_data_entries_whose_bytes_overlap_warn_and_strict_refuses(tmp_path, capsys):
    """The issue's case: a 25.7 MB y_backprop at 0xA0000000 and x at 0xA1000000 (16 MiB above it)."""
    doc = yaml.safe_load((ROOT / "configs" / "ft78ne_fused_batch_norm_grad_s.yaml").read_text())
    shape = [32, 56, 56, 64]  # 6,422,528 fp32 values: 25.7 MB
    doc["args"]["shape"] = shape
    doc["numerics"] = False  # placing is what is checked, not computing
    addrs = {e["name"]: e["addr"] for e in doc["data"]}
    for e in doc["data"]:
        if e["name"] in ("y_backprop", "x"):
            e["shape"] = shape
    assert (addrs["y_backprop"], addrs["x"]) == (0xA0000000, 0xA1000000)
    cfg = tmp_path / "fbn.yaml"
    cfg.write_text(yaml.safe_dump(doc, sort_keys=False))
    assert main(["validate", str(cfg)]) in (0, 1)
    out = capsys.readouterr().out
    (line,) = [ln for ln in out.splitlines() if "data-overlap" in ln]
    assert line.startswith("WARNING data-overlap: ") and "data 'x' [0xa1000000, 0xa2880000) overlaps data " \
        "'y_backprop' [0xa0000000, 0xa1880000) in ddr by 8912896 bytes" in line
    assert main(["validate", str(cfg), "--strict", "--format", "json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert not report["ok"] and any("data-overlap" in e for e in report["errors"])
    # Entries in two cores' copies of private memory share no bytes; entries side by side neither.
    doc = yaml.safe_load(SHARED.read_text())
    doc["data"].append({"name": "after_x", "addr": 0xA0000400, "shape": [4], "dtype": "float32", "fill": 0})
    side = tmp_path / "side.yaml"
    side.write_text(yaml.safe_dump(doc, sort_keys=False))
    assert main(["validate", str(side), "--strict"]) == 0
    assert "data-overlap" not in capsys.readouterr().out


@pytest.mark.parametrize("strict", [False, True])
def test_run_warns_of_overlapping_data_and_strict_refuses(tmp_path, capsys, strict):
    doc = yaml.safe_load(SHARED.read_text())
    doc["data"].append({"name": "over_x", "addr": 0xA0000100, "shape": [4], "dtype": "float32", "fill": 0})
    cfg = tmp_path / "over.yaml"
    cfg.write_text(yaml.safe_dump(doc, sort_keys=False))
    rc = main(["run", str(cfg), "--out-dir", str(tmp_path / "out"), *(["--strict"] if strict else [])])
    err = capsys.readouterr().err
    assert rc == (2 if strict else 0) and "data-overlap" in err and "data 'over_x'" in err
