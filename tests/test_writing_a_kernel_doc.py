"""docs/writing-a-kernel.md cannot drift from examples/: its code is the example's, and its blocks run as written.

* A ``python`` block whose first line is ``# examples/relu_grad.py`` is an excerpt: the rest of it appears, line
  for line, in that file, and the excerpts together cover every line of the file after its docstring (blank
  lines and ``# --`` section rules aside): the page walks through the whole kernel.
* The ``toml`` block is an excerpt of examples/relu_grad_pkg/pyproject.toml; the ``yaml`` block is
  examples/relu_grad.yaml, whole.
* The other ``python`` blocks run as fresh scripts (subprocesses) in a folder holding a copy of examples/;
  the ``text`` block after the last one is exactly what it prints.  The ``sh`` block's dspsim commands run
  there through the CLI.
* The README links the page.
"""

from __future__ import annotations

import ast
import contextlib
import io
import shutil
import subprocess
import sys

import pytest
from markdown_blocks import REPO, Block, blocks, dspsim_lines, run_dspsim

DOC = REPO / "docs" / "writing-a-kernel.md"
BLOCKS = blocks(DOC)
EXAMPLE = REPO / "examples" / "relu_grad.py"
PYPROJECT = REPO / "examples" / "relu_grad_pkg" / "pyproject.toml"
MARK = "# examples/relu_grad.py"
#: The worked examples whose every line the page shows: ReluGrad, then BiasAddGrad (a cross-core reduction).
EXAMPLES = (EXAMPLE, REPO / "examples" / "bias_add_grad.py")


def _excerpts(mark: str) -> list[Block]:
    return [b for b in BLOCKS if b.code.splitlines()[:1] == [mark]]


def _find(lines: list[str], part: list[str]) -> int | None:
    """Where ``part`` starts as a contiguous run of ``lines``, or None."""
    for i in range(len(lines) - len(part) + 1):
        if lines[i:i + len(part)] == part:
            return i
    return None


def test_every_block_is_of_a_known_kind():
    assert {b.lang for b in BLOCKS} <= {"python", "toml", "yaml", "sh", "text"}, [b.where for b in BLOCKS]


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.name for e in EXAMPLES])
def test_the_excerpts_are_the_examples_code_and_cover_all_of_it(example):
    lines = example.read_text().splitlines()
    covered: set[int] = set()
    for b in _excerpts(f"# examples/{example.name}"):
        part = b.code.splitlines()[1:]
        at = _find(lines, part)
        assert at is not None, f"{b.where}: this excerpt is not in {example.name} as written"
        covered |= set(range(at, at + len(part)))
    assert covered, f"the page shows nothing of {example.name}"
    body_start = ast.parse(example.read_text()).body[0].end_lineno or 0  # after the module docstring
    missing = [f"{i + 1}: {line}" for i, line in enumerate(lines) if i >= body_start and i not in covered
               and line.strip() and not line.strip().startswith("# --")]
    assert not missing, "lines of the example the page does not show:\n" + "\n".join(missing)


def test_the_package_and_config_blocks_are_the_examples():
    (toml,) = [b for b in BLOCKS if b.lang == "toml"]
    assert toml.code.splitlines()[0] == "# examples/relu_grad_pkg/pyproject.toml"
    assert _find(PYPROJECT.read_text().splitlines(), toml.code.splitlines()[1:]) is not None
    (config,) = [b for b in BLOCKS if b.lang == "yaml"]
    assert config.code + "\n" == (REPO / "examples" / "relu_grad.yaml").read_text()


@pytest.fixture(scope="module")
def user_dir(tmp_path_factory):
    """A folder with a copy of examples/, where a user runs the page's blocks."""
    folder = tmp_path_factory.mktemp("writing-a-kernel")
    shutil.copytree(REPO / "examples", folder / "examples", ignore=shutil.ignore_patterns("__pycache__"))
    return folder


def _scripts() -> list[Block]:
    excerpts = [b for e in EXAMPLES for b in _excerpts(f"# examples/{e.name}")]
    return [b for b in BLOCKS if b.lang == "python" and b not in excerpts]


@pytest.mark.parametrize("block", _scripts(), ids=lambda b: b.where)
def test_python_blocks_run_as_written(block, user_dir):
    proc = subprocess.run([sys.executable, "-c", block.code], cwd=user_dir, capture_output=True, text=True,
                          check=False, timeout=120)
    assert proc.returncode == 0, f"{block.where}:\n{proc.stderr[-3000:]}"
    following = BLOCKS[BLOCKS.index(block) + 1]
    if following.lang == "text":  # the page says what it prints
        assert proc.stdout.strip() == following.code.strip(), f"{block.where} prints:\n{proc.stdout}"


def test_the_refusal_shown_is_the_real_one():
    assert [BLOCKS[BLOCKS.index(b) + 1].lang for b in _scripts()][-1] == "text"


def test_shell_block_runs_as_written(user_dir):
    (block,) = [b for b in BLOCKS if b.lang == "sh"]
    argvs = dspsim_lines(block.code)
    assert argvs, f"{block.where}: a shell block of something other than dspsim commands"
    printed = []
    for argv in argvs:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert run_dspsim(argv[1:], user_dir) == 0, " ".join(argv)
        printed.append(out.getvalue())
    assert printed[0].rstrip().endswith("layout OK")
    assert f"kernel: file {(user_dir / 'examples' / 'relu_grad.py').resolve()}" in printed[1]
    assert "fp_relu_grad_s  [fp32, shared memory]" in printed[2]
    assert "8 points: 8 ran, 0 failed" in printed[3]


def test_the_readme_links_the_page():
    assert "](docs/writing-a-kernel.md)" in (REPO / "README.md").read_text()
