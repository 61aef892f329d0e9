"""``dspsim validate`` catches what ``dspsim run`` would trip over, and ``run`` checks the same first (issue 11).

Each case is a config a user wrote: data of the wrong dtype, an input nobody placed, a ``_p`` call on
another core than its data, a missing data file, an ``outputs`` entry at a bad address.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import yaml

from sim.cli import main

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT / "configs" / "ft78ne_batch_norm_grad_s.yaml"
PRIVATE = ROOT / "configs" / "ft78ne_batch_norm_grad_p.yaml"
HP_CONV = ROOT / "configs" / "mt7004_hp_conv2d_backprop_filter_s.yaml"


def write(tmp_path: Path, doc: dict, name: str = "cfg.yaml") -> Path:
    p = tmp_path / name
    p.write_text(yaml.safe_dump(doc, sort_keys=False))
    return p


def load(base: Path) -> dict:
    return yaml.safe_load(base.read_text())


def entry(doc: dict, key: str, name: str) -> dict:
    return next(e for e in doc[key] if e["name"] == name)


def run(tmp_path: Path, cfg: Path, *extra: str) -> int:
    return main(["run", str(cfg), "--out-dir", str(tmp_path / "out"), *extra])


def written(tmp_path: Path) -> list[str]:
    out = tmp_path / "out"
    return sorted(p.name for p in out.iterdir()) if out.exists() else []


# --- data of the wrong dtype --------------------------------------------------------------------------

def test_float32_data_for_an_hp_call_is_refused_by_validate_and_run(tmp_path, capsys):
    doc = load(HP_CONV)
    entry(doc, "data", "input")["dtype"] = "float32"  # the bytes an fp16 kernel would read as garbage
    cfg = write(tmp_path, doc)
    assert main(["validate", str(cfg)]) == 1
    out = capsys.readouterr().out
    (line,) = [ln for ln in out.splitlines() if ln.startswith("ERROR")]
    assert line.startswith("ERROR data-dtype: ")
    # 2*16*20*20 = 12800 elements: 51200 bytes (0xc800) as float32, 25600 (0x6400) as float16.
    assert "data 'input' [0xa0000000, 0xa000c800) holds float32" in line
    assert "reads buffer 'input' [0xa0000000, 0xa0006400) as float16" in line
    assert out.rstrip().endswith("layout OK; 1 error(s) in the config's data and outputs")

    assert run(tmp_path, cfg) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "data-dtype" in err and "float32" in err and "float16" in err
    assert "'input'" in err
    assert written(tmp_path) == []  # refused before anything ran or was written


def test_json_names_the_dtype_error(tmp_path, capsys):
    doc = load(HP_CONV)
    entry(doc, "data", "out_backprop")["dtype"] = "float32"
    assert main(["validate", str(write(tmp_path, doc)), "--format", "json"]) == 1
    rep = json.loads(capsys.readouterr().out)
    assert rep["ok"] is False and rep["violations"] == []
    (e,) = rep["entries"]
    assert (e["rule"], e["buffer"], e["severity"]) == ("data-dtype", "out_backprop", "error")
    assert rep["errors"] == [e["text"]]


def test_an_output_read_back_in_another_dtype_is_refused(tmp_path, capsys):
    doc = load(HP_CONV)
    entry(doc, "outputs", "output")["dtype"] = "float32"
    entry(doc, "outputs", "output")["shape"] = [3, 3, 16, 16]  # the same bytes, read as float32
    assert main(["validate", str(write(tmp_path, doc))]) == 1
    assert re.search(r"^ERROR output-dtype: .*outputs 'output' .* reads float32, but hp_conv2d_backprop_filter_s "
                     r"writes buffer 'output' as float16", capsys.readouterr().out, re.M)


# --- inputs with no data ------------------------------------------------------------------------------

def test_an_input_where_no_data_was_placed_warns_and_strict_refuses(tmp_path, capsys):
    doc = load(SHARED)
    entry(doc, "data", "dy")["addr"] = 0xB0001000  # a typo: 4 KiB past the dy the call reads
    cfg = write(tmp_path, doc)
    assert main(["validate", str(cfg)]) == 0
    out = capsys.readouterr().out
    (line,) = [ln for ln in out.splitlines() if ln.startswith("WARNING")]
    assert line.startswith("WARNING unplaced-input: ")
    assert "input buffer 'dy' [0xb0000000, 0xb0000400) (1024 bytes in ddr) holds no data the config places" in line
    # The nearest placed array is the misplaced dy itself: it starts 0x1000 - 0x400 = 3072 bytes above the buffer.
    assert "nearest placed array: data 'dy' [0xb0001000, 0xb0001400) in ddr, 3072 bytes above it" in line
    assert out.rstrip().endswith("layout OK; 1 warning(s) in the config's data and outputs")

    assert main(["validate", str(cfg), "--strict"]) == 1
    assert "ERROR unplaced-input" in capsys.readouterr().out

    assert run(tmp_path, cfg) == 0  # a warning: the run goes ahead and says so on stderr
    err = capsys.readouterr().err
    assert err.startswith("dspsim: warning: unplaced-input: ") and "'dy'" in err
    assert run(tmp_path / "strict", cfg, "--strict") == 2
    assert "unplaced-input" in capsys.readouterr().err
    assert written(tmp_path / "strict") == []


def test_a_partly_placed_input_is_named_with_the_bytes_placed(tmp_path, capsys):
    doc = load(SHARED)
    entry(doc, "data", "x")["shape"] = [2, 64]  # half of x [4, 64]
    assert main(["validate", str(write(tmp_path, doc))]) == 0
    assert "input buffer 'x' [0xa0000000, 0xa0000400) (1024 bytes in ddr) is only partly placed (512 of 1024 " \
           "bytes)" in capsys.readouterr().out


def test_timing_only_configs_need_no_data(tmp_path, capsys):
    doc = load(SHARED)
    doc["numerics"] = False
    doc["data"] = []
    assert main(["validate", str(write(tmp_path, doc))]) == 0
    assert capsys.readouterr().out.rstrip().endswith("layout OK")


def test_a_p_call_on_another_core_than_its_data(tmp_path, capsys):
    doc = load(PRIVATE)
    doc["args"]["core"] = 1  # the data and outputs entries stay on core 0
    for e in doc["outputs"]:
        e["core"] = 1
    cfg = write(tmp_path, doc)
    assert main(["validate", str(cfg)]) == 0
    out = capsys.readouterr().out
    lines = [ln for ln in out.splitlines() if ln.startswith("WARNING")]
    assert len(lines) == 5  # x, dy, mean, invar, scale
    assert all(ln.startswith("WARNING data-core: ") for ln in lines)
    x = next(ln for ln in lines if "buffer 'x'" in ln)
    assert "runs on core 1 and reads input buffer 'x' [0x10000000, 0x10000200) from core 1's copy of l2" in x
    assert "data 'x' is placed in core 0's copy (its core: 0)" in x and "unplaced input" in x
    assert "place the data with core: 1, or call the symbol with core: 0" in x
    assert main(["validate", str(cfg), "--strict", "--format", "json"]) == 1
    rep = json.loads(capsys.readouterr().out)
    assert {(e["rule"], e["severity"]) for e in rep["entries"]} == {("data-core", "error")}
    assert run(tmp_path, cfg, "--strict") == 2
    assert "data-core" in capsys.readouterr().err


# --- data files ---------------------------------------------------------------------------------------

def file_config(tmp_path: Path, name: str) -> Path:
    doc = load(SHARED)
    e = entry(doc, "data", "x")
    del e["random"]
    e["file"] = name
    return write(tmp_path, doc)


@pytest.mark.parametrize("make,pattern", [
    (None, r"data\.x\.file: .*missing\.npy does not exist"),
    (lambda p: np.save(p, np.zeros((4, 32), np.float32)), r"has shape \[4, 32\], the config says \[4, 64\]"),
    (lambda p: np.save(p, np.zeros((4, 64), np.float16)), r"has dtype float16, the config says float32"),
    (lambda p: p.write_bytes(b"no npy"), r"is not a readable \.npy array"),
])
def test_a_bad_data_file_fails_validate_as_it_fails_run(tmp_path, capsys, monkeypatch, make, pattern):
    if make is not None:
        make(tmp_path / "missing.npy")
    cfg = file_config(tmp_path, "missing.npy")
    assert run(tmp_path, cfg) == 2
    assert re.search(pattern, capsys.readouterr().err)
    # validate reads the header only: a load of the data would fail here.
    monkeypatch.setattr(np, "load", lambda *a, **k: pytest.fail("validate read the data"))
    assert main(["validate", str(cfg)]) == 1
    out = capsys.readouterr().out
    assert re.search(r"^ERROR data-file: .*" + pattern, out, re.M)


def test_a_missing_data_file_fails_a_timing_only_run_too(tmp_path, capsys):
    doc = yaml.safe_load(file_config(tmp_path, "missing.npy").read_text())
    doc["numerics"] = False
    assert run(tmp_path, write(tmp_path, doc)) == 2
    assert "missing.npy does not exist" in capsys.readouterr().err


# --- outputs entries ----------------------------------------------------------------------------------

def test_an_output_entry_does_not_hide_the_layout_violation(tmp_path, capsys):
    # dx moved into private L2 along with its outputs entry: the mistake is dx's place (an _s call takes shared
    # memory), not the entry's missing core.
    doc = load(SHARED)
    doc["args"]["dx"] = 0x10000000
    entry(doc, "outputs", "dx")["addr"] = 0x10000000
    cfg = write(tmp_path, doc)
    assert main(["validate", str(cfg), "--format", "json"]) == 1
    rep = json.loads(capsys.readouterr().out)
    (v,) = rep["violations"]
    assert (v["rule"], v["buffer"]) == ("shared-memory", "dx")
    assert rep["entries"] == [] and "pass core" not in json.dumps(rep)
    assert run(tmp_path, cfg) == 2
    err = capsys.readouterr().err
    assert "layout rule 'shared-memory'" in err and "buffer 'dx'" in err and "pass core" not in err


def test_an_output_that_is_no_buffer_of_the_call_is_named(tmp_path, capsys):
    doc = load(SHARED)
    entry(doc, "outputs", "dx")["addr"] = 0xA2000000  # mapped, but not where the call writes dx
    entry(doc, "outputs", "dbias")["addr"] = 0x60000000  # unmapped
    cfg = write(tmp_path, doc)
    assert main(["validate", str(cfg), "--format", "json"]) == 1
    rep = json.loads(capsys.readouterr().out)
    assert rep["violations"] == []
    assert [(e["entry"], e["rule"]) for e in rep["entries"]] == [("outputs 'dx'", "output-not-a-buffer"),
                                                                 ("outputs 'dbias'", "output-not-a-buffer")]
    dx, dbias = rep["errors"]
    assert "outputs 'dx' [0xa2000000, 0xa2000400) in ddr is not one of the call's buffers" in dx
    assert "writes 'dx' [0xa1000000, 0xa1000400), 'dbias' [0xb1000000, 0xb1000100), 'dscale'" in dx
    assert "outputs 'dbias' [0x60000000, 0x60000100) is not one of the call's buffers" in dbias
    assert "unmapped" in dbias
    assert run(tmp_path, cfg) == 2
    err = capsys.readouterr().err
    assert err.startswith("dspsim: error: 2 problems: (1) output-not-a-buffer: ") and err.count("\n") == 1
    assert written(tmp_path) == []
