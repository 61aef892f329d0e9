"""The one CSV reader of dspsim: trace CSVs read back and ``dspsim calibrate`` measurements.

A file is read as :mod:`sim.files.regular_file` reads every file (regular files only, at most the caller's
number of bytes, UTF-8, a byte order mark skipped); the standard :mod:`csv` module parses it (its own limit of
131,072 characters a field stands).  A row with more fields than the header, or a malformed one, is refused
on one line naming the file and the line; a row with fewer fields has its missing columns empty.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

from sim.errors import SimError, brief
from sim.files.regular_file import read_text_file


def read_csv_rows(path: str | Path, where: str, error: type[SimError], max_bytes: int,
                  what: str = "CSV file") -> tuple[list[str], list[tuple[int, dict[str, str]]]]:
    """The header of the CSV file ``path`` and its rows, each with the line it starts on; ``error`` naming
    ``where`` (and the line) when the file cannot be read or parsed."""
    # A UTF-8 byte order mark (Excel's "CSV UTF-8" starts with one) is not part of the first column's name: the
    # text as the 'utf-8-sig' codec reads it.
    text = read_text_file(path, where, error, max_bytes, what).removeprefix("\ufeff")
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next(reader, [])
        rows = []
        line = reader.line_num + 1
        for fields in reader:
            if len(fields) > len(header):
                raise error(f"{where}: line {line}: {len(fields)} fields, the header names {len(header)} "
                            f"(a field holding commas must be quoted)")
            if fields:  # a blank line holds no row
                rows.append((line, dict(zip(header, fields + [""] * (len(header) - len(fields))))))
            line = reader.line_num + 1
    except csv.Error as e:
        raise error(f"{where}: line {reader.line_num}: not valid CSV: {brief(str(e), 120)[1:-1]}") from None
    return header, rows
