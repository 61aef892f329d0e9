"""Long work shows progress, named by phase, on a terminal only; ``dspsim run | head`` loses no file (issue 11)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import yaml

from sim.config.run_config import load_config
from sim.run.progress import PhaseProgress, execute_with_progress, progress_phases
from sim.run.runner import execute, prepare

ROOT = Path(__file__).resolve().parent.parent
CONV = ROOT / "configs" / "ft78ne_conv2d_backprop_filter_s.yaml"
BN_P = ROOT / "configs" / "ft78ne_batch_norm_grad_p.yaml"


class Terminal(io.StringIO):
    """A stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def test_tiling_search_reports_its_phases():
    cfg = load_config(CONV)
    m = prepare(cfg, numerics=False)
    heard: list[tuple[str, int, int]] = []
    call, plan, choice = m.plan_with_choice(cfg.symbol, progress=lambda *a: heard.append(a), **cfg.args)
    assert choice.source == "cost model"
    phases = [p for i, (p, _, _) in enumerate(heard) if i == 0 or heard[i - 1][0] != p]
    assert phases[0] == "planning tilings" and set(phases) == {"planning tilings", "pricing tilings"}
    assert all(a != b for a, b in zip(phases, phases[1:]))  # (rounds of planning, then pricing)
    # The candidates the search planned, and the tiles of their plans, counted independently.
    kernel = m.kernel_of(call)
    notes = list(choice.notes) + [""] * len(choice.candidates)
    cands = [c for (c, _), note in zip(choice.candidates, notes) if not note.startswith("not planned")]
    plans = [kernel.plan(call, replace(m.context(call), tiling=c)) for c in cands]
    planning = [h for h in heard if h[0] == "planning tilings"]
    looked = len(choice.candidates)  # (planned, or left unplanned by their bound: each counts as done)
    assert planning[0] == ("planning tilings", 0, 0) and planning[-1] == ("planning tilings", looked, looked)
    pricing = [h for h in heard if h[0] == "pricing tilings"]
    total = sum(p.tile_count for p in plans)
    assert pricing[-1] == ("pricing tilings", total, total)
    assert all(a[1] <= b[1] for a, b in zip(pricing, pricing[1:]))  # never goes back
    assert len(pricing) > len(cands) + 1  # tile by tile, not only per candidate
    # Listening changes nothing: same choice, same cycles as a simulator that was not asked for progress.
    quiet = prepare(cfg, numerics=False)
    assert quiet.plan_with_choice(cfg.symbol, **cfg.args)[2] == choice


def test_run_on_a_terminal_names_every_phase():
    cfg = load_config(CONV)
    out = Terminal()
    _, run = execute_with_progress(cfg, stream=out, delay=0, mininterval=0)
    text = out.getvalue()
    for phase in ("placing data", "planning tilings", "pricing tilings", "simulating"):
        assert phase in text, phase
    assert run.cycles == execute(cfg)[1].cycles


def test_a_long_single_step_shows_its_bar_after_the_delay():
    out = Terminal()
    with PhaseProgress(out, delay=0.1, mininterval=0.02) as phases:
        phases("planning", 0, 1)
        assert out.getvalue() == ""  # not before the delay
        deadline = time.monotonic() + 5
        while "planning" not in out.getvalue() and time.monotonic() < deadline:
            time.sleep(0.02)  # no further call: the ticker draws the bar
        assert "planning" in out.getvalue()
        assert phases.phases == ["planning"]


def test_no_progress_off_a_terminal():
    quiet = io.StringIO()
    with progress_phases(quiet, delay=0) as phases:
        phases("writing the trace", 0, 1)
    assert quiet.getvalue() == ""
    _, run = execute_with_progress(load_config(BN_P), stream=quiet, delay=0)
    assert quiet.getvalue() == "" and run.cycles > 0


def test_run_into_a_closed_pipe_writes_its_files_and_exits_quietly(tmp_path):
    # The reader is gone before the run prints a byte (what `dspsim run cfg | head -0` does, and `head -3` on
    # a longer output): every file is written first.
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = subprocess.run([sys.executable, "-m", "sim.cli", "run", str(BN_P), "--out-dir", str(tmp_path),
                               "--csv"], stdout=write_end, stderr=subprocess.PIPE, cwd=ROOT, timeout=120)
    finally:
        os.close(write_end)
    assert proc.returncode == 141 and proc.stderr == b"", proc.stderr.decode()
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["ft78ne_batch_norm_grad_p.csv", "ft78ne_batch_norm_grad_p.dbias.npy",
                     "ft78ne_batch_norm_grad_p.dscale.npy", "ft78ne_batch_norm_grad_p.dx.npy",
                     "ft78ne_batch_norm_grad_p.json"]


def test_run_piped_into_head(tmp_path):
    proc = subprocess.run(f"{sys.executable} -m sim.cli run {BN_P} --out-dir {tmp_path} | head -3", shell=True,
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0 and proc.stderr == ""
    assert len(proc.stdout.splitlines()) == 3 and proc.stdout.startswith("fp_batch_norm_grad_p on FT78NE")
    assert (tmp_path / "ft78ne_batch_norm_grad_p.json").exists()
    assert (tmp_path / "ft78ne_batch_norm_grad_p.dx.npy").exists()


def test_a_warning_on_a_closed_pipe_still_reaches_stderr(tmp_path):
    doc = yaml.safe_load(BN_P.read_text())
    doc["data"] = [d for d in doc["data"] if d["name"] != "dy"]
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(yaml.safe_dump(doc))
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = subprocess.run([sys.executable, "-m", "sim.cli", "run", str(cfg), "--out-dir", str(tmp_path)],
                              stdout=write_end, stderr=subprocess.PIPE, text=True, cwd=ROOT, timeout=120)
    finally:
        os.close(write_end)
    assert proc.returncode == 141
    assert proc.stderr.startswith("dspsim: warning: unplaced-input: ") and proc.stderr.count("\n") == 1
    assert (tmp_path / "ft78ne_batch_norm_grad_p.json").exists()  # the trace name the config gives
