"""Fitting a target's free parameters to measured cycle counts (``dspsim calibrate``).

Measurements are a CSV with columns ``symbol``, ``args`` (a JSON object of the
call's arguments, a ``tiling`` included when the board's kernel used a fixed
one; addresses may be ints or "0x..." strings), ``cycles``, and optionally
``core_mask`` or ``core``.  Pointer arguments must be given as lists or ints
(a ``params`` array read from memory cannot be measured without its data).  Each measurement is re-simulated in
timing-only mode under trial parameters; scipy's least squares minimises the
relative error of the cycles over the parameters in log space (so they stay
positive).  The report lists each measurement's error before and after.
"""

from __future__ import annotations

import copy
import csv
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import yaml

from sim.errors import ConfigError, SimError
from sim.target import Target, parse_target

#: Free parameters: name -> key path in the target YAML and whether the value is a whole number of cycles.
FREE_PARAMETERS: dict[str, tuple[str, bool]] = {
    "ddr_bandwidth_bytes_per_cycle": ("regions.ddr.bandwidth_bytes_per_cycle", False),
    "gsm_bandwidth_bytes_per_cycle": ("regions.gsm.bandwidth_bytes_per_cycle", False),
    "dma_setup_cycles": ("dma.setup_cycles", True),
    "loop_overhead_cycles": ("core.loop_overhead_cycles", True),
    "launch_overhead_cycles": ("sync.launch_overhead_cycles", True),
    "vector_efficiency": ("core.vector_efficiency", False),
}


@dataclass(frozen=True)
class Measurement:
    """One measured kernel call."""

    symbol: str
    args: dict
    cycles: int


def _addr(v: Any) -> Any:
    if isinstance(v, str) and v.lower().startswith("0x"):
        return int(v, 16)
    if isinstance(v, list):
        return [_addr(x) for x in v]
    return v


def load_measurements(path: str | Path) -> list[Measurement]:
    """Read a measurements CSV (ConfigError naming the row and column on a bad one)."""
    p = Path(path)
    try:
        rows = list(csv.DictReader(p.read_text(encoding="utf-8").splitlines()))
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{p}: cannot read measurements: {e}") from None
    out = []
    for i, row in enumerate(rows, start=2):
        for col in ("symbol", "args", "cycles"):
            if not row.get(col):
                raise ConfigError(f"{p}: line {i}: column '{col}' is missing or empty")
        try:
            args = {k: _addr(v) for k, v in json.loads(row["args"]).items()}
        except (json.JSONDecodeError, AttributeError) as e:
            raise ConfigError(f"{p}: line {i}: column 'args' is not a JSON object: {e}") from None
        for col in ("core_mask", "core"):
            if row.get(col):
                args[col] = int(row[col], 0)
        try:
            cycles = int(row["cycles"])
        except ValueError:
            raise ConfigError(f"{p}: line {i}: column 'cycles' is not an integer: {row['cycles']!r}") from None
        if cycles <= 0:
            raise ConfigError(f"{p}: line {i}: cycles must be positive")
        out.append(Measurement(row["symbol"], args, cycles))
    if not out:
        raise ConfigError(f"{p}: no measurements")
    return out


def _get(doc: Any, path: str) -> Any:
    node = doc
    for k in path.split("."):
        node = next(r for r in node if r.get("name") == k) if isinstance(node, list) else node[k]
    return node


def _set(doc: Any, path: str, value: Any) -> None:
    keys = path.split(".")
    node = doc
    for k in keys[:-1]:
        node = next(r for r in node if r.get("name") == k) if isinstance(node, list) else node[k]
    node[keys[-1]] = value


def parameter_values(doc: Mapping, names: Sequence[str]) -> dict[str, float]:
    """Current values of the free parameters ``names`` in a target document (vector_efficiency defaults 1)."""
    out = {}
    for n in names:
        try:
            out[n] = float(_get(doc, FREE_PARAMETERS[n][0]))
        except (KeyError, StopIteration):
            if n != "vector_efficiency":
                raise ConfigError(f"target has no {FREE_PARAMETERS[n][0]} to fit") from None
            out[n] = 1.0
    return out


def with_parameters(doc: Mapping, values: Mapping[str, float]) -> dict:
    """A copy of the target document with the free parameters set (cycles rounded, efficiency capped at 1)."""
    new = copy.deepcopy(dict(doc))
    for n, v in values.items():
        path, whole = FREE_PARAMETERS[n]
        if n == "vector_efficiency":
            v = min(v, 1.0)
        _set(new, path, max(0, int(round(v))) if whole else float(v))
    return new


def simulate(doc: Mapping, measurements: Sequence[Measurement], label: str = "calibration") -> np.ndarray:
    """Cycles of every measurement on the target document ``doc`` (timing only)."""
    from sim.simulator import Simulator

    target = parse_target(copy.deepcopy(dict(doc)), label)
    out = []
    for meas in measurements:
        out.append(Simulator(target).call(meas.symbol, numerics=False, **meas.args).cycles)
    return np.array(out, dtype=np.float64)


@dataclass(frozen=True)
class Calibration:
    """The fitted parameters and the per-measurement errors before and after."""

    before: dict[str, float]
    after: dict[str, float]
    measured: np.ndarray
    cycles_before: np.ndarray
    cycles_after: np.ndarray
    document: dict

    @property
    def error_before(self) -> np.ndarray:
        """Relative error of each measurement under the starting target."""
        return (self.cycles_before - self.measured) / self.measured

    @property
    def error_after(self) -> np.ndarray:
        """Relative error of each measurement under the fitted target."""
        return (self.cycles_after - self.measured) / self.measured

    def report(self, measurements: Sequence[Measurement]) -> str:
        """A text report: parameters before/after, errors per measurement."""
        lines = ["parameter                          start        fitted"]
        for n in self.before:
            lines.append(f"{n:<32} {self.before[n]:>10.4g}  {self.after[n]:>10.4g}")
        lines.append("")
        lines.append("measurement                                  measured    before (err)        after (err)")
        for meas, mc, b, a, eb, ea in zip(measurements, self.measured, self.cycles_before, self.cycles_after,
                                          self.error_before, self.error_after):
            lines.append(f"{meas.symbol:<44} {mc:>8.0f}  {b:>8.0f} ({100 * eb:+6.2f}%)  {a:>8.0f} ({100 * ea:+6.2f}%)")
        lines.append(f"max |error|: before {100 * np.abs(self.error_before).max():.2f}%, "
                     f"after {100 * np.abs(self.error_after).max():.2f}%")
        return "\n".join(lines)


def calibrate(doc: Mapping, measurements: Sequence[Measurement], names: Sequence[str] | None = None,
              max_evaluations: int = 400) -> Calibration:
    """Fit the free parameters ``names`` (default: all) of target document ``doc`` to ``measurements``."""
    from scipy.optimize import least_squares

    names = list(names or FREE_PARAMETERS)
    unknown = [n for n in names if n not in FREE_PARAMETERS]
    if unknown:
        raise ConfigError(f"unknown free parameter {unknown[0]!r} (known: {', '.join(FREE_PARAMETERS)})")
    start = parameter_values(doc, names)
    measured = np.array([m.cycles for m in measurements], dtype=np.float64)
    try:
        cycles_before = simulate(with_parameters(doc, start), measurements)
    except SimError as e:
        raise ConfigError(f"a measurement cannot run on the starting target: {e}") from None
    # Start strictly inside the bounds: an efficiency of exactly 1 would sit on its upper bound.
    x0 = np.log([min(max(start[n], 1e-9), 0.95) if n == "vector_efficiency" else max(start[n], 1e-9)
                 for n in names])
    upper = np.array([0.0 if n == "vector_efficiency" else np.inf for n in names])

    def residuals(x: np.ndarray) -> np.ndarray:
        vals = dict(zip(names, np.exp(x)))
        return (simulate(with_parameters(doc, vals), measurements) - measured) / measured

    # Cycles are integers, so the objective is a staircase: a finite-difference step of a few percent sees
    # its slope where a tiny one would see flat treads.
    fit = least_squares(residuals, x0, bounds=(-np.inf, upper + 1e-12), diff_step=0.03, x_scale=1.0,
                        max_nfev=max_evaluations, method="trf")
    after = dict(zip(names, np.exp(fit.x)))
    fitted_doc = with_parameters(doc, after)
    return Calibration(before=start, after={n: float(v) for n, v in after.items()}, measured=measured,
                       cycles_before=cycles_before, cycles_after=simulate(fitted_doc, measurements),
                       document=fitted_doc)


def load_target_document(name_or_path: str) -> tuple[dict, str]:
    """The YAML document of a shipped chip (by name) or of a target file."""
    from sim.target import TARGETS_DIR

    p = Path(name_or_path)
    if not p.is_file():
        matches = [t for t in TARGETS_DIR.glob("*.yaml") if t.stem.lower() == str(name_or_path).lower()]
        if not matches:
            raise ConfigError(f"unknown target {name_or_path!r}")
        p = matches[0]
    return yaml.safe_load(p.read_text(encoding="utf-8")), str(p)


def fitted_yaml(cal: Calibration, source_path: str) -> str:
    """The fitted target as YAML, with a note of where its fitted numbers come from."""
    doc = copy.deepcopy(cal.document)
    doc["source"] = (f"{doc.get('source', '')}; calibrated from measurements by dspsim calibrate "
                     f"(from {Path(source_path).name}): " +
                     ", ".join(f"{n}={v:.4g}" for n, v in cal.after.items()))
    return yaml.safe_dump(doc, sort_keys=False)
