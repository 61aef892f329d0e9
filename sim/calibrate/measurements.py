"""Board measurements for a calibration: a CSV of calls (symbol, arguments) and the cycles the chip took."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sim.errors import ConfigError, brief
from sim.files.csvsafe import read_csv_rows
from sim.files.fields import bounded_int
from sim.files.jsonsafe import load_json
from sim.model.target_loader import MAX_CORES

#: Largest measurements CSV read (bytes): thousands of rows fit in far less.
MAX_MEASUREMENT_BYTES = 16 << 20
#: Largest measured cycle count: 10**15 cycles is more than six days of a 1.8 GHz chip, beyond any kernel call.
MAX_MEASURED_CYCLES = 10 ** 15
#: Deepest nesting of a measurement's ``args`` (the object and a ``params`` list in it need two levels).
MAX_ARGS_DEPTH = 8
#: Largest address a measurement's argument may give (64 bits).
MAX_ADDRESS = (1 << 64) - 1
#: Keywords of ``Simulator.call`` that a measurement's ``args`` cannot set: calibration simulates timing only.
_RESERVED_ARGS = frozenset({"numerics", "progress"})


#: The columns a measurements CSV may have: ``symbol``, ``args`` and ``cycles`` in every row, ``core_mask`` and
#: ``core`` optional (each the argument of that name, when ``args`` does not give it).
COLUMNS = ("symbol", "args", "cycles", "core_mask", "core")


class MeasurementError(ConfigError):
    """A measured call the simulator refuses, named by its file and line."""


@dataclass(frozen=True)
class Measurement:
    """One measured kernel call (``where``: the file and line it was read from, ``c.csv: line 5``, if any)."""

    symbol: str
    args: dict
    cycles: int
    where: str = ""


def _addr(v: Any, where: str) -> Any:
    """A measurement's argument with its ``"0x..."`` addresses as ints (a list's too); ConfigError naming
    ``where`` for text that starts like an address and is none."""
    if isinstance(v, str) and v.lower().startswith("0x"):
        return bounded_int(v, where, ConfigError, 0, MAX_ADDRESS, what="an address")
    if isinstance(v, list):
        return [_addr(x, f"{where}[{i}]") for i, x in enumerate(v)]
    return v


def _measurement(row: Mapping[str, str], where: str) -> Measurement:
    """One row of a measurements CSV (``where`` is ``<file>: line <n>``); ConfigError naming the column."""
    for col in ("symbol", "args", "cycles"):
        if not row.get(col):
            raise ConfigError(f"{where}: column '{col}' is missing or empty")
    given = load_json(row["args"], f"{where}: column 'args'", ConfigError, MAX_ARGS_DEPTH)
    if not isinstance(given, dict):
        raise ConfigError(f"{where}: column 'args' is not a JSON object: {brief(given, 60)}")
    reserved = sorted(set(given) & _RESERVED_ARGS)
    if reserved:
        raise ConfigError(f"{where}: column 'args': {reserved[0]!r} is not an argument of a measured call "
                          f"(calibration simulates timing only)")
    args = {k: _addr(v, f"{where}: column 'args': {brief(k, 40)[1:-1]}") for k, v in given.items()}
    for col, top in (("core_mask", (1 << MAX_CORES) - 1), ("core", MAX_CORES - 1)):
        if row.get(col):
            value = bounded_int(row[col], f"{where}: column '{col}'", ConfigError, 0, top)
            if col in args and not (type(args[col]) is int and args[col] == value):
                raise ConfigError(f"{where}: column '{col}': {value}, but column 'args' gives {col} "
                                  f"{brief(given[col], 40)}: a call has one {col} (give it in one column)")
            args[col] = value
    cycles = bounded_int(row["cycles"], f"{where}: column 'cycles'", ConfigError, -MAX_MEASURED_CYCLES,
                         MAX_MEASURED_CYCLES, what="a whole number of cycles")
    if cycles <= 0:
        raise ConfigError(f"{where}: cycles must be positive, got {cycles}")
    return Measurement(row["symbol"], args, cycles, where)


def load_measurements(path: str | Path) -> list[Measurement]:
    """Read a measurements CSV (ConfigError naming the line and column on a bad one): the header names only
    :data:`COLUMNS`, each once; a ``core_mask`` or ``core`` column may not contradict ``args``; a UTF-8 BOM
    (Excel's "CSV UTF-8") is read as the start of the file.

    Read through the guarded readers: a regular file of at most :data:`MAX_MEASUREMENT_BYTES` bytes
    (:func:`sim.files.csvsafe.read_csv_rows`), each ``args`` by the strict JSON reader (nested at most
    :data:`MAX_ARGS_DEPTH` levels), numbers bounded (cycles in ``[1, MAX_MEASURED_CYCLES]``, a core mask or
    core the chips could have, addresses of 64 bits); every message one short line.
    """
    p = Path(path)
    header, rows = read_csv_rows(p, str(p), ConfigError, MAX_MEASUREMENT_BYTES, what="measurements file")
    for i, col in enumerate(header):
        if col not in COLUMNS:
            raise ConfigError(f"{p}: line 1: column {brief(col, 40)} is not a measurements column "
                              f"(allowed: {', '.join(COLUMNS)})")
        if col in header[:i]:
            raise ConfigError(f"{p}: line 1: column '{col}' appears twice")
    out = [_measurement(row, f"{p}: line {line}") for line, row in rows]
    if not out:
        raise ConfigError(f"{p}: no measurements")
    return out


