"""What ``dspsim run`` prints once its files are written (a run-config's run and a program's alike)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path


def print_written(summary: str, trace: Path, csv: Path | None, outputs: Sequence[Path]) -> None:
    """The summary, then the paths of the trace, its CSV copy and the saved outputs, one line each."""
    print(summary)
    print(f"trace: {trace}")
    if csv is not None:
        print(f"csv: {csv}")
    for p in outputs:
        print(f"output: {p}")
