"""A run-config's ``kernels:`` list runs code only when asked (issue 20, item 1).

``validate`` (text and JSON), ``report``, ``run`` and ``sweep`` (a config listed by a relative or an absolute
path) refuse a config naming kernel code with one line naming the file, exit 2, and the file never runs; with
``--allow-kernels`` (or ``$DSPSIM_ALLOW_KERNELS=1``, or ``allow_kernels=True`` in Python) they import it, and
whatever it prints, at import or while binding, goes to stderr: ``validate --format json`` prints JSON alone.
``dspsim kernels --load FILE`` names the file on the command line: that is its own opt-in.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sim.cli import main
from sim.config.run_config import load_config
from sim.config.user_kernels import KernelsNotAllowed
from sim.run.runner import execute
from sim.sweep import load_sweep

TESTS = Path(__file__).resolve().parent
X, Y, N = 0xA0000000, 0xA0100000, 1024

LOUD = '''import os, sys
from pathlib import Path
sys.path.insert(0, {tests!r})
from tiny_kernels import Twice
Path({mark!r}).write_text("the file ran")
print("printed by the kernel file")
os.write(1, b"written to descriptor 1 by the kernel file\\n")


class Loud(Twice):
    def bind(self, *args):
        print("printed while binding")
        return super().bind(*args)


KERNEL = Loud("loud")
'''


@pytest.fixture
def loud(tmp_path: Path) -> tuple[Path, Path]:
    """A run-config naming a kernel file that prints, and the marker file its import writes."""
    mark = tmp_path / "ran.txt"
    (tmp_path / "loud.py").write_text(LOUD.format(tests=str(TESTS), mark=str(mark)))
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(f"target: FT78NE\nsymbol: fp_loud_s\nkernels: [loud.py]\n"
                   f"args: {{x: {X:#x}, y: {Y:#x}, n: {N}, core_mask: 1}}\n"
                   f"data: [{{name: x, addr: {X:#x}, shape: [{N}], dtype: float32, random: {{seed: 3}}}}]\n")
    return cfg, mark


def _sweep(tmp_path: Path, config: str) -> Path:
    path = tmp_path / "sweep.yaml"
    path.write_text(json.dumps({"configs": [config], "grid": {"args.n": [N]}}))
    return path


def test_every_command_refuses_a_configs_kernels_unless_asked(loud, tmp_path, capsys, monkeypatch):
    cfg, mark = loud
    monkeypatch.delenv("DSPSIM_ALLOW_KERNELS", raising=False)
    out = str(tmp_path / "out")
    commands = [["validate", str(cfg)], ["validate", "--format", "json", str(cfg)], ["run", str(cfg), "--out-dir", out],
                ["report", str(cfg), "-o", str(tmp_path / "r.html")],
                ["sweep", str(_sweep(tmp_path, "cfg.yaml")), "-o", out],
                ["sweep", str(_sweep(tmp_path, str(cfg.resolve()))), "-o", out]]
    for argv in commands:
        assert main(argv) == 2, argv
        captured = capsys.readouterr()
        (line,) = captured.err.splitlines()
        assert line.startswith(f"dspsim: error: {cfg}: kernels[0]: file {(tmp_path / 'loud.py').resolve()} not "
                               f"imported: ") and "--allow-kernels" in line and "DSPSIM_ALLOW_KERNELS=1" in line, line
        if "json" in argv:
            report = json.loads(captured.out)
            assert report["ok"] is False and "--allow-kernels" in report["errors"][0]
        assert not mark.exists(), f"dspsim {' '.join(argv)} ran the kernel file"
    # The Python tools refuse as the commands do, unless asked.
    with pytest.raises(KernelsNotAllowed, match=r"kernels\[0\]: file .*loud.py not imported"):
        execute(load_config(cfg))
    with pytest.raises(KernelsNotAllowed):
        load_sweep(_sweep(tmp_path, "cfg.yaml"))
    assert not mark.exists()
    # $DSPSIM_ALLOW_KERNELS=0, false, no or off is no permission either; a value that says neither is refused,
    # naming the variable, rather than read as set.
    for off in ("0", "false", "No", " off "):
        monkeypatch.setenv("DSPSIM_ALLOW_KERNELS", off)
        assert main(["run", str(cfg), "--out-dir", out]) == 2 and not mark.exists()
        assert "--allow-kernels" in capsys.readouterr().err
    monkeypatch.setenv("DSPSIM_ALLOW_KERNELS", "maybe")
    assert main(["run", str(cfg), "--out-dir", out]) == 2 and not mark.exists()
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "DSPSIM_ALLOW_KERNELS='maybe': expected one of 1, true, yes, on" in err


def test_asked_they_run_and_stdout_keeps_only_dspsims_output(loud, tmp_path):
    cfg, mark = loud
    cmd = [sys.executable, "-m", "sim.cli", "validate", "--format", "json", str(cfg), "--allow-kernels"]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["ok"] is True and mark.exists()  # stdout is the JSON and nothing else
    for words in ("printed by the kernel file", "written to descriptor 1", "printed while binding"):
        assert words in proc.stderr


def test_the_environment_asks_as_the_flag_does(loud, tmp_path, capsys, monkeypatch):
    cfg, mark = loud
    monkeypatch.setenv("DSPSIM_ALLOW_KERNELS", "1")  # worker processes inherit it
    assert main(["run", str(cfg), "--out-dir", str(tmp_path / "out")]) == 0 and mark.exists()
    for on in ("true", "YES", "on"):  # (the file is imported once a process: asked, the run goes ahead)
        monkeypatch.setenv("DSPSIM_ALLOW_KERNELS", on)
        assert main(["run", str(cfg), "--out-dir", str(tmp_path / "out")]) == 0
    assert "printed by the kernel file" in capsys.readouterr().err


def test_python_callers_ask_with_allow_kernels(loud, tmp_path):
    cfg, mark = loud
    _, run = execute(load_config(cfg, allow_kernels=True))
    assert run.cycles > 0 and mark.exists()
    assert load_sweep(_sweep(tmp_path, "cfg.yaml"), allow_kernels=True).points()


def test_a_file_named_by_kernels_load_is_its_own_opt_in(loud, capsys, monkeypatch):
    cfg, mark = loud
    monkeypatch.delenv("DSPSIM_ALLOW_KERNELS", raising=False)
    assert main(["kernels", "--load", str(cfg.parent / "loud.py")]) == 0 and mark.exists()
    captured = capsys.readouterr()
    assert "fp_loud_s" in captured.out and "printed by the kernel file" in captured.err
    assert "printed by the kernel file" not in captured.out
