"""The fenced code blocks of a Markdown file, and how the documentation tests run them as a user would."""

from __future__ import annotations

import contextlib
import os
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import sim.cli

REPO = Path(__file__).resolve().parent.parent
#: Info strings a block may carry: code a user pastes (python, sh), files (yaml), and output (text, json).
LANGS = ("python", "sh", "yaml", "json", "text")
CI_MARKER = re.compile(r"^<!-- ci: ([\w-]+) -->$")


@dataclass(frozen=True)
class Block:
    """One fenced block: where it starts, its info string, its text, and the CI marker line just above it."""

    path: Path
    line: int
    lang: str
    code: str
    ci_name: str | None

    @property
    def where(self) -> str:
        """``FILE:LINE`` of the opening fence, for messages and test ids."""
        return f"{self.path.relative_to(REPO)}:{self.line}"


def blocks(path: Path) -> list[Block]:
    """Every fenced block of ``path`` in order; an unclosed fence is an error."""
    lines = path.read_text(encoding="utf-8").splitlines()
    out: list[Block] = []
    i = 0
    while i < len(lines):
        if lines[i].startswith("```"):
            start, lang = i, lines[i][3:].strip()
            end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("```")), None)
            if end is None:
                raise ValueError(f"{path}:{start + 1}: unclosed code block")
            marker = CI_MARKER.match(lines[start - 1]) if start > 0 else None
            out.append(Block(path, start + 1, lang, "\n".join(lines[start + 1:end]),
                             marker.group(1) if marker else None))
            i = end
        i += 1
    return out


def dspsim_lines(code: str) -> list[list[str]]:
    """The ``dspsim`` commands of a shell block as argument lists (comments dropped); [] if a line is another
    command, so the caller can tell a block of dspsim commands from anything else."""
    commands = [shlex.split(line, comments=True) for line in code.splitlines()]
    commands = [c for c in commands if c]
    return commands if commands and all(c[0] == "dspsim" for c in commands) else []


@contextlib.contextmanager
def working_dir(path: Path) -> Iterator[None]:
    """Run the body with ``path`` as the current folder, as a user running the block from there."""
    old = Path.cwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(old)


def run_python(block: Block, cwd: Path) -> dict:
    """Execute a python block as a fresh script in ``cwd``; its global names afterwards."""
    names: dict = {"__name__": "__main__"}
    with working_dir(cwd):
        exec(compile(block.code, block.where, "exec"), names)  # noqa: S102 - the project's own documentation
    return names


def run_dspsim(argv: list[str], cwd: Path) -> int:
    """Run one ``dspsim`` command line (without the leading ``dspsim``) through the CLI's entry point."""
    with working_dir(cwd):
        return sim.cli.main(argv)
