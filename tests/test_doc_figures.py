"""The bench reports that say their cycles are today's quote today's: every row of their tables that names a bench
case gives the cycles tests/frozen/cycles.json holds for it (an outside audit found a report's "now" column four
stops old). Reports that record a stop's change say which stop, and are not checked here."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FROZEN = json.loads((ROOT / "tests" / "frozen" / "cycles.json").read_text())

#: (report, the header of the column holding a bench case's cycles today, in the tables whose first column is a
#: bench case).
CURRENT = [("bench/sensitivity.md", "cycles"), ("bench/fidelity.md", "cycles"), ("bench/fidelity.md", "now")]


def _rows(text: str, column: str) -> list[tuple[str, str]]:
    """(bench case, the cell under ``column``) of every markdown table row whose first cell is a bench case."""
    out: list[tuple[str, str]] = []
    header: list[str] = []
    for line in text.splitlines():
        if not line.startswith("|"):
            header = []
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not header:
            header = cells
            continue
        if column in header and re.fullmatch(r"[a-z0-9_]+/(FT78NE|MT7004)/(fp|hp)/(medium|large)", cells[0]):
            out.append((cells[0], cells[header.index(column)]))
    return out


@pytest.mark.parametrize("report,column", CURRENT, ids=[f"{r}:{c}" for r, c in CURRENT])
def test_a_report_of_todays_cycles_quotes_the_frozen_ones(report, column):
    rows = _rows((ROOT / report).read_text(), column)
    assert rows, f"{report} has no table of bench cases with a {column!r} column"
    stale = [(case, cell, f"{FROZEN['bench/' + case]['cycles']:,}") for case, cell in rows
             if cell != f"{FROZEN['bench/' + case]['cycles']:,}"]
    assert not stale, f"{report}: (case, quoted, frozen) {stale}: re-run the script its header names"


def test_the_row_parser_reads_a_table_and_skips_other_rows():
    text = "| case | cycles | x |\n|---|---|---|\n| gemm/FT78NE/fp/large | 1,234 | y |\n| total | 9 | z |\n\n"
    assert _rows(text, "cycles") == [("gemm/FT78NE/fp/large", "1,234")]
    assert _rows(text, "missing") == []
