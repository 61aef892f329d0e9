"""The README as written: CI runs its two commands, and every block a user would paste runs.

Each fenced block of the README carries an info string: ``python`` and ``sh`` blocks are code a user
pastes, ``text`` and ``json`` blocks are output examples (the layout messages among them are checked
by tests/test_layout.py).  Python blocks run as fresh scripts in a temporary folder holding a copy of
``configs/``; shell blocks of ``dspsim`` commands run there through the CLI.  The two install commands
(marked ``<!-- ci: NAME -->``) are what ``.ci/run`` runs, which the first tests check.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from markdown_blocks import (
    LANGS,
    REPO,
    Block,
    blocks,
    dspsim_lines,
    run_dspsim,
    run_python,
)

README = REPO / "README.md"
BLOCKS = blocks(README)
CI_BLOCKS = {b.ci_name: b for b in BLOCKS if b.ci_name}


def _ci_dry_run() -> list[str]:
    """The commands ``.ci/run`` runs, as it prints them (``CI_DRY_RUN=1``: printed, none run)."""
    out = subprocess.run(["bash", str(REPO / ".ci" / "run")], env={**os.environ, "CI_DRY_RUN": "1"},
                         capture_output=True, text=True, timeout=60, check=True).stdout
    return [line[2:] for line in out.splitlines() if line.startswith("+ ")]


def test_ci_runs_exactly_the_readme_commands():
    assert set(CI_BLOCKS) == {"simulate", "test"}
    assert all(b.lang == "sh" for b in CI_BLOCKS.values())
    # First the README's two commands, verbatim and in order; checks added later come after them.
    assert _ci_dry_run()[:2] == [CI_BLOCKS["simulate"].code, CI_BLOCKS["test"].code]


def test_ci_fails_when_the_readme_loses_a_command(tmp_path):
    # CI reads the README: without the marked block it must stop, not run an empty command and pass.
    (tmp_path / ".ci").mkdir()
    shutil.copy(REPO / ".ci" / "run", tmp_path / ".ci" / "run")
    (tmp_path / "README.md").write_text(README.read_text().replace("<!-- ci: test -->", "<!-- ci: tests -->"))
    r = subprocess.run(["bash", str(tmp_path / ".ci" / "run")], env={**os.environ, "CI_DRY_RUN": "1"},
                       check=False, capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert "README.md has no ```sh block after the line <!-- ci: test -->" in r.stderr


def test_readme_test_command_installs_the_browser_before_the_tests():
    steps = [s.strip() for s in CI_BLOCKS["test"].code.split("&&")]
    assert "sh tests/install_chromium.sh" in steps
    pytest = next(i for i, s in enumerate(steps) if s.startswith("python -m pytest -q"))
    assert steps.index("sh tests/install_chromium.sh") < pytest == len(steps) - 1
    assert (REPO / "tests" / "install_chromium.sh").is_file()


def test_readme_first_command_runs_a_shipped_config(tmp_path):
    last = CI_BLOCKS["simulate"].code.split("&&")[-1]
    (argv,) = dspsim_lines(last)
    assert argv[:2] == ["dspsim", "run"] and (REPO / argv[2]).is_file()
    shutil.copytree(REPO / "configs", tmp_path / "configs")
    assert run_dspsim(argv[1:], tmp_path) == 0
    assert (tmp_path / "traces" / f"{Path(argv[2]).stem}.json").is_file()


def test_every_block_says_what_it_is():
    untagged = [f"{b.where} ```{b.lang}" for b in BLOCKS if b.lang not in LANGS]
    assert not untagged, f"tag each block with one of {LANGS}: {untagged}"


def _runnable(kind: str) -> list[Block]:
    if kind == "python":
        return [b for b in BLOCKS if b.lang == "python"]
    return [b for b in BLOCKS if b.lang == "sh" and not b.ci_name]


def test_every_shell_block_is_ci_or_dspsim_commands():
    # A shell block that is neither the CI's install commands nor dspsim commands would run nowhere.
    for b in _runnable("sh"):
        assert dspsim_lines(b.code), f"{b.where}: a shell block of something other than dspsim commands"
    assert len(_runnable("python")) >= 2 and len(_runnable("sh")) >= 1


@pytest.fixture
def user_dir(tmp_path: Path) -> Path:
    """A folder like a checkout's top, as the README's commands expect: the shipped run-configs and programs, and
    the example kernels the programs name."""
    shutil.copytree(REPO / "configs", tmp_path / "configs")
    shutil.copytree(REPO / "examples", tmp_path / "examples")
    return tmp_path


@pytest.mark.parametrize("block", _runnable("python"), ids=lambda b: b.where)
def test_python_block_runs_as_written(block, user_dir):
    run_python(block, user_dir)


@pytest.mark.parametrize("block", _runnable("sh"), ids=lambda b: b.where)
def test_shell_block_runs_as_written(block, user_dir, capsys):
    for argv in dspsim_lines(block.code):
        assert run_dspsim(argv[1:], user_dir) == 0, f"{block.where}: {' '.join(argv)}: {capsys.readouterr().err}"


def test_tour_reads_back_batch_norm_grad(user_dir, capsys):
    # The tour's result is the real BatchNormGrad of the data it writes (formula of kernels/batch_norm_grad.py).
    (tour,) = [b for b in _runnable("python") if "run.write_trace" in b.code]
    env = run_python(tour, user_dir)
    x, dy, dx = (env[k].astype(np.float64) for k in ("x", "dy", "dx"))
    invar = 1 / np.sqrt(x.var(axis=0) + 1e-3)
    xh = (x - x.mean(axis=0)) * invar
    m = x.shape[0]
    want = invar / m * (m * dy - dy.sum(axis=0) - xh * (dy * xh).sum(axis=0))
    np.testing.assert_allclose(dx, want, rtol=1e-4, atol=1e-5)
    assert (user_dir / "traces" / "bn.json").is_file()
    assert str(env["run"].cycles) in capsys.readouterr().out


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.lang == "json"], ids=lambda b: b.where)
def test_json_example_is_json(block):
    assert isinstance(json.loads(block.code), dict)
