"""The dspsim command on the shipped configs."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from sim.cli import main

ROOT = Path(__file__).resolve().parent.parent
# Every shipped config runs with the core install alone: tests/test_extras.py (each one's exit code).


def test_run_shared_example_prints_table_and_writes_trace(tmp_path, capsys):
    assert main(["run", str(ROOT / "configs/ft78ne_batch_norm_grad_s.yaml"), "--out-dir", str(tmp_path),
                 "--csv"]) == 0
    out = capsys.readouterr().out
    assert "core" in out and "busy" in out and "roofline bound" in out
    trace = json.loads((tmp_path / "ft78ne_batch_norm_grad_s.json").read_text())
    assert trace["traceEvents"] and trace["metadata"]["symbol"] == "fp_batch_norm_grad_s"
    assert (tmp_path / "ft78ne_batch_norm_grad_s.csv").exists()
    dx = np.load(tmp_path / "ft78ne_batch_norm_grad_s.dx.npy")
    assert dx.shape == (4, 64) and np.isfinite(dx).all() and dx.any()


def test_targets_and_kernels_listings(capsys):
    assert main(["targets"]) == 0
    out = capsys.readouterr().out
    assert "FT78NE: 8 cores at 1.8 GHz" in out and "MT7004: 4 cores" in out and "ddr" in out
    # Each DRAM's rows as its target file states them (targets/*.yaml, regions[].rows).
    assert "rows of 8192 B over 32 banks, 8 activations per 38 cycles (tFAW), 84 cycles between two in one bank" in out
    assert "rows of 8192 B over 16 banks, 4 activations per 21 cycles (tFAW), 47 cycles" in out
    assert main(["kernels"]) == 0
    out = capsys.readouterr().out
    assert "fp_batch_norm_grad_s" in out and "hp_batch_norm_grad_p" in out and "params" in out


def test_bad_config_is_one_line_and_nonzero(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("target: FT78NE\nsymbol: fp_batch_norm_grad_s\nargs: {x: 0xA0000000}\n")
    proc = subprocess.run([sys.executable, "-m", "sim.cli", "run", str(bad), "--out-dir", str(tmp_path)],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode != 0
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr and "'dy'" in proc.stderr


def test_closed_pipe_is_no_traceback():
    # Enough output (about 3 MB) that the writer surely meets the closed pipe, like `dspsim kernels | head`.
    script = ("import sys\nfrom sim.cli import main\n"
              "for _ in range(200):\n    code = main(['kernels'])\n    if code:\n        sys.exit(code)\n")
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            cwd=ROOT)
    proc.stdout.read(10)
    proc.stdout.close()
    _, err = proc.communicate(timeout=120)
    assert b"Traceback" not in err and b"Exception ignored" not in err, err.decode()[-2000:]


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full")
def test_a_closed_or_full_standard_output_is_no_traceback(tmp_path):
    """Started with stdout closed, dspsim prints nothing and does its work (Python's print writes nothing there);
    on a full device (``> /dev/full``) it says so in one line and exits 2."""
    cmd = [sys.executable, "-m", "sim.cli", "run", str(ROOT / "configs" / "ft78ne_batch_norm_grad_s.yaml"),
           "--out-dir", str(tmp_path)]
    closed = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            pass_fds=(), close_fds=True, preexec_fn=lambda: os.close(1))
    assert closed.returncode == 0 and "Traceback" not in closed.stderr, closed.stderr
    assert (tmp_path / "ft78ne_batch_norm_grad_s.json").exists()
    with open("/dev/full", "w") as full:
        proc = subprocess.run(cmd, stdout=full, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        "dspsim: error: cannot write to standard output: No space left on device"], proc.stderr


@pytest.mark.parametrize("config", ["ft78ne_batch_norm_grad_s.yaml", "mt7004_hp_gemm_s.yaml",
                                    "mt7004_fused_batch_norm_grad_p.yaml"])
def test_dspsim_run_makes_one_simulator_binds_once_and_checks_the_layout_once(config, monkeypatch, tmp_path):
    """One pipeline (sim.run.runner): `dspsim run` binds its call once and checks its layout once, on one
    simulator, from the preflight to the run (it made two simulators, bound three times and checked three)."""
    from pipeline_counts import count_stages

    counts = count_stages(monkeypatch)
    assert main(["run", str(ROOT / "configs" / config), "--out-dir", str(tmp_path)]) == 0
    assert counts == {"simulators": 1, "binds": 1, "layout checks": 1}



def test_overlapping_data_entries_are_placed_in_the_configs_order_as_before(tmp_path, capsys):
    """Data entries sharing bytes (warned of): the last in the config's order wins, as when every entry was
    placed before the call was bound, though the preflight places a literal ``values`` entry first.  Here x's
    first row is filled with 100s, then given literal 1s: the 1s are what memory holds for the run."""
    import yaml
    doc = yaml.safe_load((ROOT / "configs" / "ft78ne_batch_norm_grad_s.yaml").read_text())
    x = next(d for d in doc["data"] if d["name"] == "x")
    doc["data"].append({"name": "filled", "addr": x["addr"], "shape": [64], "dtype": "float32", "fill": 100.0})
    doc["data"].append({"name": "literal", "addr": x["addr"], "shape": [64], "dtype": "float32",
                        "values": [1.0] * 64})
    path = tmp_path / "bn.yaml"
    path.write_text(yaml.safe_dump(doc))
    from sim.config.run_config import load_config
    from sim.run.runner import execute
    m, _ = execute(load_config(path))
    np.testing.assert_array_equal(m.read(x["addr"], (64,), np.float32), np.ones(64, np.float32))
