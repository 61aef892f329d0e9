"""``dspsim validate CONFIG``: the layout map, the violations, JSON for tools, the picture."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from sim.cli import main

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = sorted((ROOT / "configs").glob("*.yaml"))
SHARED = ROOT / "configs" / "ft78ne_batch_norm_grad_s.yaml"
PRIVATE = ROOT / "configs" / "ft78ne_batch_norm_grad_p.yaml"


def variant(tmp_path: Path, base: Path, name: str = "cfg.yaml", **args) -> Path:
    """A copy of ``base`` with some call arguments changed (params slots as params__<i>)."""
    doc = yaml.safe_load(base.read_text())
    for k, v in args.items():
        if k.startswith("params__"):
            doc["args"]["params"][int(k.split("__")[1])] = v
        else:
            doc["args"][k] = v
    p = tmp_path / name
    p.write_text(yaml.safe_dump(doc, sort_keys=False))
    return p


@pytest.mark.parametrize("config", CONFIGS, ids=[c.stem for c in CONFIGS])
def test_every_shipped_config_validates(config, capsys):
    assert main(["validate", str(config)]) == 0
    out = capsys.readouterr().out
    assert out.rstrip().endswith("layout OK") and "region " in out


def test_map_of_shared_example(capsys):
    assert main(["validate", str(SHARED)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0] == "fp_batch_norm_grad_s on FT78NE (cores 0, 1, 2, 3, 4, 5, 6, 7)"
    assert lines[1] == "region ddr [0x80000000, 0x100000000) shared, 2 GiB"
    names = re.findall(r"^  0x[0-9a-f]+-0x[0-9a-f]+  (\w+) ", out, re.M)
    assert names == ["x", "dx", "dy", "dbias", "mean", "dscale", "invar", "scale"]  # address order
    assert "  0xa0000000-0xa0000400  x                input         1024 B  float32[4, 64]" in lines
    assert any(line.startswith("  0xa0000400-0xa1000000  (gap ") for line in lines)


def test_map_of_private_example_names_owner_core(capsys):
    assert main(["validate", str(PRIVATE)]) == 0
    out = capsys.readouterr().out
    assert "region l2 [0x10000000, 0x11000000) private, core 0's copy, 16 MiB" in out


def test_violations_listed_and_exit_one(tmp_path, capsys):
    p = variant(tmp_path, SHARED, dx=0xA0000100, dy=0x40590000, params__2=0xE0000002, params__3=0x20000000)
    assert main(["validate", str(p)]) == 1
    out = capsys.readouterr().out
    found = re.findall(r"^VIOLATION layout rule '([a-z-]+)': (?:output )?buffer '(\w+)'", out, re.M)
    assert sorted(found) == sorted([("no-overlap", "dx"), ("workspace", "dy"), ("alignment", "scale"),
                                    ("not-scratchpad", "dbias")])
    # The outputs entries stayed where dx and dbias were: named as no buffer of the call, after the violations.
    assert out.rstrip().splitlines()[-1] == "4 layout violation(s); 2 error(s) in the config's data and outputs"
    assert out.index("VIOLATION") < out.index("ERROR output-not-a-buffer: ")
    assert re.search(r"^  0xa0000100-0xa0000500  dx .*!$", out, re.M)  # marked in the map
    assert "^ overlaps the buffer above by 768 bytes" in out
    assert "[reserved: kernels' workspace, 512 KiB]" in out


def test_json_format_for_tools(tmp_path, capsys):
    p = variant(tmp_path, SHARED, dx=0xA0000100)
    assert main(["validate", str(p), "--format", "json"]) == 1
    rep = json.loads(capsys.readouterr().out)
    assert rep["ok"] is False and rep["symbol"] == "fp_batch_norm_grad_s" and rep["target"] == "FT78NE"
    assert rep["cores"] == list(range(8)) and rep["config"] == str(p)
    (v,) = rep["violations"]
    assert v["rule"] == "no-overlap" and v["buffer"] == "dx" and v["region"] == "ddr"
    assert (v["start"], v["end"], v["suggestion"]) == (0xA0000100, 0xA0000500, 0xA0000400)
    assert v["text"].startswith("layout rule 'no-overlap'")
    (ddr,) = rep["regions"]
    starts = [b["start"] for b in ddr["buffers"]]
    assert starts == sorted(starts) and {b["buffer"] for b in ddr["buffers"]} >= {"x", "dx"}
    assert all(set(b) >= {"buffer", "role", "start", "end", "size_bytes", "dtype", "shape", "core"}
               for b in ddr["buffers"])
    assert ddr["gaps"][0] == {"start": 0x80000000, "end": 0xA0000000, "size_bytes": 0x20000000}


def test_json_ok(capsys):
    assert main(["validate", str(PRIVATE), "--format", "json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["ok"] is True and rep["violations"] == []
    assert {b["core"] for b in rep["regions"][0]["buffers"]} == {0}


def test_json_error_before_layout(tmp_path, capsys):
    p = variant(tmp_path, SHARED, core_mask=0x100)
    assert main(["validate", str(p), "--format", "json"]) == 2
    captured = capsys.readouterr()
    rep = json.loads(captured.out)
    assert rep["ok"] is False and "core_mask" in rep["errors"][0]
    assert captured.err.count("\n") == 1 and "core_mask" in captured.err


def test_core_mask_outside_the_chip_is_one_line(tmp_path, capsys):
    p = variant(tmp_path, SHARED, core_mask=0x1FF)
    assert main(["validate", str(p)]) == 2
    err = capsys.readouterr().err
    assert err == ("dspsim: error: argument 'core_mask': 0x1ff selects no core or a core FT78NE lacks "
                   "(it has 8 cores: masks 0x1..0xff)\n")


def test_tiles_that_cannot_fit_the_scratchpad(tmp_path, capsys):
    chip = yaml.safe_load((ROOT / "targets" / "FT78NE.yaml").read_text())
    next(r for r in chip["regions"] if r["name"] == "am")["size_bytes"] = 0x400
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(chip))
    doc = yaml.safe_load(SHARED.read_text())
    doc["target"] = "tiny.yaml"  # relative to the config
    p = tmp_path / "cfg.yaml"
    p.write_text(yaml.safe_dump(doc))
    assert main(["validate", str(p)]) == 1
    out = capsys.readouterr().out
    assert re.search(r"^VIOLATION layout rule 'scratchpad-fit': fp_batch_norm_grad_s: the kernel cannot tile this "
                     r"call into the staging memory, the am scratchpad \[0x20000000, 0x20000400\) \(1024 bytes per "
                     r"core\)", out, re.M)
    assert main(["validate", str(p), "--format", "json"]) == 1
    assert json.loads(capsys.readouterr().out)["violations"][0]["rule"] == "scratchpad-fit"


@pytest.mark.parametrize("suffix,magic", [(".png", b"\x89PNG"), (".svg", b"<?xml"), (".pdf", b"%PDF")])
def test_plot_formats(tmp_path, capsys, suffix, magic):
    pic = tmp_path / f"map{suffix}"
    assert main(["validate", str(SHARED), "--plot", str(pic)]) == 0
    assert pic.read_bytes().startswith(magic)
    assert f"plot: {pic}" in capsys.readouterr().out
    assert [p.name for p in tmp_path.iterdir()] == [pic.name]  # no temporary file left


def test_plot_of_bad_layout_is_drawn_and_exit_is_one(tmp_path, capsys):
    p = variant(tmp_path, SHARED, dx=0xA0000100, x=0x60000000)
    pic = tmp_path / "bad.png"
    assert main(["validate", str(p), "--plot", str(pic), "--format", "json"]) == 1
    assert json.loads(capsys.readouterr().out)["unmapped"][0]["buffer"] == "x"
    assert pic.stat().st_size > 1000


def test_plot_unknown_format_keeps_old_file(tmp_path, capsys):
    old = tmp_path / "map.gif"
    old.write_bytes(b"previous")
    assert main(["validate", str(SHARED), "--plot", str(old)]) == 2
    assert "unknown picture format '.gif'" in capsys.readouterr().err
    assert old.read_bytes() == b"previous"


def test_validate_does_not_simulate_or_write(tmp_path):
    # A config whose run would take long is validated at once; nothing is written beside it.
    doc = yaml.safe_load(SHARED.read_text())
    doc["args"]["params"][5] = 1 << 16  # batch 65536 x 64 channels
    doc["data"] = [d for d in doc["data"] if d["name"] not in ("x", "dy")]
    p = tmp_path / "big.yaml"
    p.write_text(yaml.safe_dump(doc))
    proc = subprocess.run([sys.executable, "-m", "sim.cli", "validate", str(p)], capture_output=True, text=True,
                          cwd=tmp_path, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "float32[65536, 64]" in proc.stdout and proc.stderr == ""
    assert sorted(q.name for q in tmp_path.iterdir()) == ["big.yaml"]
