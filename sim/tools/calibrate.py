"""Fitting a target's free parameters to measured cycle counts (``dspsim calibrate``).

Measurements are a CSV with columns ``symbol``, ``args`` (a JSON object of the
call's arguments, a ``tiling`` included when the board's kernel used a fixed
one; addresses may be ints or "0x..." strings), ``cycles``, and optionally
``core_mask`` or ``core``.  Pointer arguments must be given as lists or ints
(a ``params`` array read from memory cannot be measured without its data).  Each measurement is re-simulated in
timing-only mode under trial parameters; scipy's least squares minimises the
relative error of the cycles over the parameters in log space (so they stay
positive).  The report lists each measurement's error before and after.

The free parameters come from the chip at hand (:func:`free_parameters`), each named by its key path in the
target file: the bandwidth of every shared region (``regions.<name>.bandwidth_bytes_per_cycle``, outermost
first), ``dma.setup_cycles``, ``sync.launch_overhead_cycles``, and the compute parameters
``core.tile_overhead_cycles`` (per tile's compute call), ``core.loop_overhead_cycles`` (per entry of an inner
loop) and ``core.units.fmac.latency_cycles`` (the FMAC latency: a loop's fill, an accumulation's recurrence).
The unit counts, lanes and issue widths are the chip's design (whole numbers no fit moves smoothly): they stay
as the target says.  A chip with other shared regions (an extra ``l3``, no ``gsm``) calibrates its own.

Not every set of measurements says something about every parameter.  Before
the fit each parameter is moved by a factor of :data:`PROBE_FACTOR` both ways;
one that changes no measurement by :data:`MIN_EFFECT` or more cannot be
identified from them.  A parameter the fit drives against its bounds (a factor
:data:`MAX_DRIFT` from the target's value, where a lone parameter goes when
the measurements only ever ask for less of it) is not identified either.
Both are reported and kept at the target's values; the rest are fitted again
without them.

The fitted target is written as a copy of the starting target file that keeps
its comments, hex numbers and key order (ruamel.yaml round-trip editing):
only the fitted values change, the ``name`` says the chip is calibrated, and
the ``source`` notes say which values were fitted from which measurements.
"""

from __future__ import annotations

import copy
import io
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np

from sim.errors import ConfigError, SimError, TargetError, brief
from sim.extras import need
from sim.files.csvsafe import read_csv_rows
from sim.files.fields import bounded_int
from sim.files.jsonsafe import load_json
from sim.files.yamlsafe import load_yaml, read_yaml_text
from sim.model.target_loader import MAX_CORES, MAX_CYCLES, MAX_RATE, MIN_RATE, parse_target, resolve_target_path
from sim.tools.docedit import get_path, set_path, split_path
from sim.tools.progress import PhaseBar

#: The free parameters every chip has besides its shared regions' bandwidths (key paths in the target file).
CHIP_PARAMETERS = ("dma.setup_cycles", "core.tile_overhead_cycles", "core.loop_overhead_cycles",
                   "core.units.fmac.latency_cycles", "sync.launch_overhead_cycles")
#: A parameter is probed at its value times and divided by this factor.
PROBE_FACTOR = 1.5
#: Smallest relative change of some measurement's cycles that makes a probed parameter identifiable.
MIN_EFFECT = 1e-3
#: The fit keeps each parameter within this factor of the target's value; one that ends at that bound is
#: not identified by the measurements.
MAX_DRIFT = 1e3
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
#: Significant digits of a fitted fractional value in the written file (far below what cycles can resolve).
FITTED_DIGITS = 6


@dataclass(frozen=True)
class Measurement:
    """One measured kernel call."""

    symbol: str
    args: dict
    cycles: int


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
            args[col] = bounded_int(row[col], f"{where}: column '{col}'", ConfigError, 0, top)
    cycles = bounded_int(row["cycles"], f"{where}: column 'cycles'", ConfigError, -MAX_MEASURED_CYCLES,
                         MAX_MEASURED_CYCLES, what="a whole number of cycles")
    if cycles <= 0:
        raise ConfigError(f"{where}: cycles must be positive, got {cycles}")
    return Measurement(row["symbol"], args, cycles)


def load_measurements(path: str | Path) -> list[Measurement]:
    """Read a measurements CSV (ConfigError naming the line and column on a bad one).

    Read through the guarded readers: a regular file of at most :data:`MAX_MEASUREMENT_BYTES` bytes
    (:func:`sim.files.csvsafe.read_csv_rows`), each ``args`` by the strict JSON reader (nested at most
    :data:`MAX_ARGS_DEPTH` levels), numbers bounded (cycles in ``[1, MAX_MEASURED_CYCLES]``, a core mask or
    core the chips could have, addresses of 64 bits); every message one short line.
    """
    p = Path(path)
    _, rows = read_csv_rows(p, str(p), ConfigError, MAX_MEASUREMENT_BYTES, what="measurements file")
    out = [_measurement(row, f"{p}: line {line}") for line, row in rows]
    if not out:
        raise ConfigError(f"{p}: no measurements")
    return out


def free_parameters(doc: Mapping) -> list[str]:
    """The free parameters of the chip target document ``doc`` describes, as key paths: the bandwidth of each
    of its shared regions, outermost first (regions holding no staging level in the file's order, then those
    holding one in the order of the levels), then :data:`CHIP_PARAMETERS`.  TargetError when ``doc`` is not
    a valid target."""
    target = parse_target(copy.deepcopy(dict(doc)), "calibration target")
    in_file = [r.get("name") for r in doc["regions"]]  # a valid target: a list of mappings with names
    depth: dict[str, int] = {}
    for i, level in enumerate(target.staging):
        depth.setdefault(level.region, i)
    shared = sorted((r.name for r in target.regions if r.shared), key=lambda n: (depth.get(n, -1), in_file.index(n)))
    return [f"regions.{name}.bandwidth_bytes_per_cycle" for name in shared] + list(CHIP_PARAMETERS)


def _is_cycles(name: str) -> bool:
    """Whether the free parameter ``name`` is a whole number of cycles (every ``*_cycles`` key)."""
    return name.endswith("_cycles")


def check_parameter_names(names: Sequence[str], known: Sequence[str]) -> None:
    """ConfigError naming the first of ``names`` that is not a free parameter of the chip (``known``), with
    the key path meant when it is an old-style name such as ``ddr_bandwidth_bytes_per_cycle``."""
    for n in names:
        if n in known:
            continue
        if n.removeprefix("core.") == "vector_efficiency":
            raise ConfigError(f"{n!r} is gone: a tile's compute is priced from its kernel's inner loops on the "
                              f"core's functional units; fit core.tile_overhead_cycles, core.loop_overhead_cycles "
                              f"or core.units.fmac.latency_cycles instead")
        flat = {k: k.replace("regions.", "", 1).replace(".", "_") for k in known}  # the names before key paths
        meant = [k for k in known if flat[k] == n or flat[k].endswith("_" + n)]
        hint = f"; did you mean {meant[0]}?" if len(meant) == 1 else ""
        raise ConfigError(f"unknown free parameter {n[:80]!r}{hint} (this chip's, by key path: {', '.join(known)})")


def parameter_values(doc: Mapping, names: Sequence[str]) -> dict[str, float]:
    """Current values of the free parameters ``names`` (key paths) in a target document."""
    out = {}
    for n in names:
        try:
            out[n] = float(get_path(doc, split_path(n), n))
        except (ConfigError, TypeError, ValueError):
            raise ConfigError(f"target has no {n} to fit") from None
    return out


def stored_value(name: str, value: float) -> float | int:
    """A parameter's value as a target file holds it: whole cycles rounded."""
    return max(0, round(value)) if _is_cycles(name) else float(value)


def _written(name: str, value: float) -> float | int:
    """A fitted value as the output file holds it: whole cycles, or FITTED_DIGITS significant digits."""
    v = stored_value(name, value)
    return v if isinstance(v, int) else float(f"{v:.{FITTED_DIGITS}g}")


def with_parameters(doc: Mapping, values: Mapping[str, float]) -> dict:
    """A copy of the target document with the free parameters set (cycles rounded)."""
    new = copy.deepcopy(dict(doc))
    for n, v in values.items():
        set_path(new, split_path(n), stored_value(n, v), n, create=True)
    return new


def simulate(doc: Mapping, measurements: Sequence[Measurement], label: str = "calibration",
             on_call: Callable[[], None] | None = None) -> np.ndarray:
    """Cycles of every measurement on the target document ``doc`` (timing only)."""
    return np.array([run.cycles for run in _runs(doc, measurements, label, on_call)], dtype=np.float64)


def _runs(doc: Mapping, measurements: Sequence[Measurement], label: str,
          on_call: Callable[[], None] | None = None) -> list[Any]:
    from sim.simulator import Simulator

    target = parse_target(copy.deepcopy(dict(doc)), label)
    out = []
    for meas in measurements:
        out.append(Simulator(target).call(meas.symbol, numerics=False, **meas.args))
        if on_call is not None:
            on_call()
    return out


def pinned(measurements: Sequence[Measurement], runs: Sequence[Any]) -> list[Measurement]:
    """The measurements with the tiling each run chose (where the search chose one): the fit then prices the
    same plans under every parameter set it tries, as the chip ran one plan per measured call, and needs no
    tiling search per evaluation (a search's choice jumps as parameters move, which makes the objective
    step)."""
    out = []
    for meas, run in zip(measurements, runs):
        choice = run.tiling
        if "tiling" in meas.args or choice is None or choice.source != "cost model" or not choice.tiling:
            out.append(meas)
        else:
            out.append(Measurement(meas.symbol, {**meas.args, "tiling": dict(choice.tiling)}, meas.cycles))
    return out


@dataclass(frozen=True)
class Calibration:
    """The fitted parameters, those the measurements cannot identify, and the per-measurement errors."""

    before: dict[str, float]
    after: dict[str, float]
    measured: np.ndarray
    cycles_before: np.ndarray
    cycles_after: np.ndarray
    document: dict
    #: Parameters kept at the target's value because the measurements cannot identify them: name -> why.
    unidentified: dict[str, str] = field(default_factory=dict)

    @property
    def fitted(self) -> list[str]:
        """The parameters the fit set (the others are the target's)."""
        return [n for n in self.after if n not in self.unidentified]

    @property
    def error_before(self) -> np.ndarray:
        """Relative error of each measurement under the starting target."""
        return (self.cycles_before - self.measured) / self.measured

    @property
    def error_after(self) -> np.ndarray:
        """Relative error of each measurement under the fitted target."""
        return (self.cycles_after - self.measured) / self.measured

    def report(self, measurements: Sequence[Measurement]) -> str:
        """A text report: parameters before/after, which were not identified and why, errors per measurement."""
        width = max(32, *(len(n) for n in self.before))
        lines = [f"{'parameter':<{width}}   start        fitted"]
        for n in self.before:
            after = "kept" if n in self.unidentified else f"{self.after[n]:>10.4g}"
            lines.append(f"{n:<{width}} {self.before[n]:>10.4g}  {after:>10}")
        if self.unidentified:
            lines.append("")
            lines.append("not identified by these measurements (kept at the target's values):")
            for n, why in self.unidentified.items():
                lines.append(f"  {n}: {why}")
        lines.append("")
        lines.append("measurement                                  measured    before (err)        after (err)")
        for meas, mc, b, a, eb, ea in zip(measurements, self.measured, self.cycles_before, self.cycles_after,
                                          self.error_before, self.error_after):
            lines.append(f"{meas.symbol:<44} {mc:>8.0f}  {b:>8.0f} ({100 * eb:+6.2f}%)  {a:>8.0f} ({100 * ea:+6.2f}%)")
        lines.append(f"max |error|: before {100 * np.abs(self.error_before).max():.2f}%, "
                     f"after {100 * np.abs(self.error_after).max():.2f}%")
        return "\n".join(lines)


def _limits(name: str, value: float) -> tuple[float, float]:
    """The range the fit may move a parameter in: MAX_DRIFT either way of the target's value, and what a
    target file accepts (a bandwidth of at least MIN_RATE and at most MAX_RATE, a cycle count of at most
    MAX_CYCLES)."""
    floor = 1e-9 if _is_cycles(name) else MIN_RATE
    ceiling = MAX_CYCLES if _is_cycles(name) else MAX_RATE  # the target file's own ranges
    low = max(value / MAX_DRIFT, floor)
    high = min(max(value, floor) * MAX_DRIFT, ceiling)
    return low, high


#: The finite-difference step of the fit, relative to log(parameter): a few percent of the parameter.
DIFF_STEP = 0.03


def _diff_steps(names: Sequence[str], x0: np.ndarray) -> np.ndarray:
    """The fit's finite-difference step for each parameter (relative to its log value, as scipy takes it).

    Cycles are integers, so the objective is a staircase: a step of a few percent sees its slope where a tiny one
    would see flat treads.  A whole-cycle parameter with a small value (a latency of 6) needs a step that moves it
    by at least one cycle, or its rounded value never changes and the fit never moves it.
    """
    steps = []
    for n, x in zip(names, x0):
        step = DIFF_STEP
        if _is_cycles(n):
            value = math.exp(x)
            step = max(step, 1.2 * math.log1p(1 / max(value, 1e-9)) / max(1.0, abs(x)))
        steps.append(step)
    return np.array(steps)


def _sensitivity(doc: Mapping, measurements: Sequence[Measurement], names: Sequence[str],
                 values: Mapping[str, float], base: np.ndarray, bar: PhaseBar) -> np.ndarray:
    """How the measurements respond to each parameter: column j is the change of every measurement's cycles
    (relative to ``base``) per unit change of log(parameter j), a central difference over PROBE_FACTOR either
    way (wide, because cycles are a staircase).  A side the simulator refuses leaves a one-sided difference."""
    step = math.log(PROBE_FACTOR)
    cols = []
    for n in names:
        sides: list[np.ndarray | None] = []
        for factor in (PROBE_FACTOR, 1 / PROBE_FACTOR):
            try:
                sides.append(simulate(with_parameters(doc, dict(values, **{n: values[n] * factor})), measurements))
            except SimError:
                sides.append(None)
            bar.advance()
        up, down = sides
        if up is None and down is None:
            cols.append(np.full(len(base), np.inf))  # no neighbour runs at all: the measurements hinge on it
        else:
            width = step * ((up is not None) + (down is not None))
            cols.append(((base if up is None else up) - (base if down is None else down)) / base / width)
    return np.array(cols).T


def _flat(sens: np.ndarray, names: Sequence[str], values: Mapping[str, float]) -> dict[str, str]:
    """The parameters no measurement responds to: name -> why."""
    out = {}
    for j, n in enumerate(names):
        effect = float(np.max(np.abs(sens[:, j]))) * math.log(PROBE_FACTOR)
        if effect < MIN_EFFECT:
            out[n] = ("its target value is 0, which a multiplicative fit cannot move" if values[n] == 0 else
                      f"moving it by a factor of {PROBE_FACTOR:g} either way changes no measurement by "
                      f"{100 * MIN_EFFECT:g} % or more (at most {100 * effect:.2g} %)")
    return out


def _underdetermined(sens: np.ndarray, names: Sequence[str], responding: Sequence[str], n_meas: int) -> str:
    """The refusal of a fit of more responding parameters than measurements: no fit can tell them apart (it would
    report some as fitted, at any values that happen to match), so the user chooses which to fit."""
    effect = {n: float(np.max(np.abs(sens[:, names.index(n)]))) for n in responding}
    ranked = sorted(responding, key=lambda n: -effect[n])
    shown = ", ".join(f"{n} ({100 * effect[n] * math.log(PROBE_FACTOR):.2g} %)" for n in ranked)
    return (f"{n_meas} measurement(s) cannot identify {len(responding)} parameters: a fit needs at least one "
            f"measurement per parameter it fits, or it reports values that merely match; fit at most {n_meas} "
            f"of them, the one(s) you expect to differ from the target, e.g. --params "
            f"{','.join(ranked[:n_meas])}, or add measurements.  What a change by a factor of {PROBE_FACTOR:g} "
            f"moves the measurements by, most first: {shown}")


def _alike(sens: np.ndarray, names: Sequence[str]) -> dict[str, str]:
    """The parameters whose effect is (almost) a combination of the others': name -> why.

    A pivoted QR decomposition orders the parameters by how much each adds to
    those before it; one that adds less than a PROBE_FACTOR change moving some
    measurement by MIN_EFFECT cannot be told apart from the ones kept.
    """
    need("calibrate", "calibration", ("scipy",))
    from scipy.linalg import lstsq, qr

    if not np.all(np.isfinite(sens)):
        return {}
    floor = MIN_EFFECT / math.log(PROBE_FACTOR)
    _, r, order = qr(sens, mode="economic", pivoting=True)
    diag = np.abs(np.diag(r))
    rank = sum(1 for d in diag if d >= floor)
    kept = [int(j) for j in order[:rank]]
    out = {}
    for j in (int(j) for j in order[rank:]):
        coef = lstsq(sens[:, kept], sens[:, j])[0] if kept else np.zeros(0)
        weight = np.abs(coef) * np.linalg.norm(sens[:, kept], axis=0)
        like = [names[k] for k, w in zip(kept, weight) if w >= 0.1 * np.linalg.norm(sens[:, j])]
        if len(names) > len(sens):
            out[names[j]] = (f"{len(sens)} measurement(s) cannot identify {len(names)} parameters; the fit "
                             f"keeps {', '.join(names[k] for k in kept)}")
        else:
            out[names[j]] = (f"its effect on these measurements is (almost) a combination of "
                             f"{', '.join(like) or 'the other parameters'}'s: they cannot tell them apart")
    return out


def calibrate(doc: Mapping, measurements: Sequence[Measurement], names: Sequence[str] | None = None,
              max_evaluations: int = 400, progress: IO[str] | None = None) -> Calibration:
    """Fit the free parameters ``names`` (key paths; default: all of the chip's, :func:`free_parameters`) of
    target document ``doc`` to ``measurements``.

    Parameters the measurements cannot identify are kept at the target's
    values and listed in :attr:`Calibration.unidentified`: those no
    measurement responds to (probed before the fit), those the fit drives to a
    limit, and those whose effect at the fitted values is a combination of the
    others' (each time the rest is fitted again without them).  Each measured
    call is priced with the tiling the search chooses for it on the starting
    target (or the one it names) under every parameter set the fit tries
    (:func:`pinned`).  ``progress`` is a stream (the CLI passes stderr) on
    which, when it is a terminal, each phase longer than a second shows a bar.
    """
    need("calibrate", "calibration", ("scipy",))
    from scipy.optimize import least_squares

    try:
        known = free_parameters(doc)
    except TargetError as e:
        raise ConfigError(f"the starting target: {e}") from None
    names = list(names or known)
    check_parameter_names(names, known)
    start = parameter_values(doc, names)
    measured = np.array([m.cycles for m in measurements], dtype=np.float64)
    n_meas = len(measurements)
    try:
        with PhaseBar(f"calibrate: simulating {n_meas} measurements on the starting target", progress,
                      total=n_meas, unit="call") as bar:
            runs = _runs(with_parameters(doc, start), measurements, "calibration", on_call=bar.advance)
    except SimError as e:
        raise ConfigError(f"a measurement cannot run on the starting target: {e}") from None
    cycles_before = np.array([run.cycles for run in runs], dtype=np.float64)
    measurements = pinned(measurements, runs)  # the starting target's tilings, for every evaluation
    with PhaseBar("calibrate: probing which parameters the measurements respond to", progress,
                  total=2 * len(names), unit="probe") as bar:
        sens = _sensitivity(doc, measurements, names, start, cycles_before, bar)
    # Only parameters no measurement responds to are dropped here: which combinations the measurements can
    # tell apart is judged at the fitted values, where the parameters' effects may differ from the start.
    unidentified = _flat(sens, names, start)
    responding = [n for n in names if n not in unidentified]
    if len(responding) > n_meas:
        raise ConfigError(_underdetermined(sens, names, responding, n_meas))

    def trial(x: np.ndarray, free: list[str]) -> dict[str, float]:
        # Clamped rather than bounded: least squares runs unbounded in log space (bounds change its steps and
        # land it in worse minima); past a limit the objective is flat, and a parameter that ends there is
        # reported as not identified.
        return dict(start, **{n: min(max(v, lim[n][0]), lim[n][1]) for n, v in zip(free, np.exp(x))})

    def residuals(x: np.ndarray, free: list[str]) -> np.ndarray:
        bar.advance()
        return (simulate(with_parameters(doc, trial(x, free)), measurements) - measured) / measured

    lim = {n: _limits(n, start[n]) for n in names}
    fitted = dict(start)
    while True:  # fit; drop what the fit cannot pin down; fit the rest again
        free = [n for n in names if n not in unidentified]
        if not free:
            break
        x0 = np.log([max(start[n], lim[n][0]) for n in free])
        with PhaseBar(f"calibrate: fitting {len(free)} parameters ({n_meas} simulations per evaluation)",
                      progress, unit="evaluation") as bar:
            fit = least_squares(residuals, x0, args=(free,), diff_step=_diff_steps(free, x0), x_scale=1.0,
                                max_nfev=max_evaluations, method="trf")
        fitted = trial(fit.x, free)
        at_limit = {n: float(np.exp(x)) for n, x in zip(free, fit.x)
                    if np.exp(x) <= lim[n][0] * 1.01 or np.exp(x) >= lim[n][1] / 1.01}
        for n, v in at_limit.items():
            unidentified[n] = (f"the fit drove it to {v:.3g}, the limit of a factor {MAX_DRIFT:g} from the "
                               f"target's {start[n]:.4g}: the measurements do not pin it down")
        if at_limit:
            continue
        base = simulate(with_parameters(doc, fitted), measurements)
        with PhaseBar("calibrate: checking the fitted parameters are identified", progress,
                      total=2 * len(free), unit="probe") as bar:
            sens = _sensitivity(doc, measurements, free, fitted, base, bar)
        dropped = {**_alike(sens, free), **_flat(sens, free, fitted)}  # "no effect" says more
        unidentified.update(dropped)
        if not dropped:
            break
    after = {n: start[n] if n in unidentified else _written(n, fitted[n]) for n in names}
    fitted_doc = with_parameters(doc, after)
    with PhaseBar(f"calibrate: simulating {n_meas} measurements on the fitted target", progress,
                  total=n_meas, unit="call") as bar:
        cycles_after = simulate(fitted_doc, measurements, on_call=bar.advance)
    return Calibration(before=start, after=after, measured=measured, cycles_before=cycles_before,
                       cycles_after=cycles_after, document=fitted_doc,
                       unidentified={n: unidentified[n] for n in names if n in unidentified})


@dataclass(frozen=True)
class TargetDocument:
    """A target file as read for calibration: its parsed document, its text (for the commented copy), its path."""

    doc: dict
    text: str
    path: Path


def read_target_document(name_or_path: str | Path) -> TargetDocument:
    """A shipped chip (by name) or a target file, read with the project's strict YAML reader."""
    try:
        p = resolve_target_path(name_or_path)
        # Regular files only (a named pipe would block), at most 1 MiB, UTF-8: the strict reader's rules.
        text = read_yaml_text(p, str(p), TargetError, what="target file")
    except TargetError as e:
        raise ConfigError(f"--target: {e}") from None
    doc = load_yaml(text, str(p), TargetError)
    parse_target(copy.deepcopy(doc), str(p))  # a broken starting target is refused before any fitting
    return TargetDocument(doc=doc, text=text, path=p)


def load_target_document(name_or_path: str | Path) -> tuple[dict, str]:
    """The YAML document of a shipped chip (by name) or of a target file, and its path."""
    t = read_target_document(name_or_path)
    return t.doc, str(t.path)


def _guess_indent(text: str) -> tuple[int, int, int]:
    """The file's mapping indent, sequence indent and dash offset, so a round trip keeps its layout."""
    mapping = sequence = offset = None
    prev_key_indent = None
    parent_indent = 0
    for line in text.splitlines():
        stripped = line.lstrip(" ")
        if not stripped or stripped.startswith("#"):
            continue
        indent = len(line) - len(stripped)
        if stripped.startswith("- ") and sequence is None and prev_key_indent is not None:
            offset = indent - parent_indent
            sequence = offset + 2 + (len(stripped[2:]) - len(stripped[2:].lstrip(" ")))
        elif mapping is None and prev_key_indent is not None and indent > prev_key_indent:
            mapping = indent - prev_key_indent
        if stripped.rstrip().endswith(":"):
            prev_key_indent = parent_indent = indent
        else:
            prev_key_indent = None
        if mapping is not None and sequence is not None:
            break
    mapping = mapping or 2
    return mapping, sequence or mapping + 2, offset if offset is not None else 2


def _append_note(node: Any, note: str) -> None:
    """Append ``note`` to a mapping's ``source`` (the provenance every group of numbers in a target carries)."""
    if isinstance(node, dict) and isinstance(node.get("source"), str):
        node["source"] = type(node["source"])(f"{node['source']}; {note}") if node["source"] else note


def fitted_yaml(cal: Calibration, target: TargetDocument, measurements_path: str | Path) -> str:
    """The fitted target file: a copy of ``target`` that keeps its comments, hex numbers and key order, with
    only the fitted values changed, ``name`` marked calibrated, and notes of what was fitted from what."""
    need("calibrate", "writing a calibrated target file", ("ruamel.yaml",))
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError as RuamelError
    from ruamel.yaml.scalarint import ScalarInt

    rt = YAML()  # round trip: comments, key order, quoting and number formats survive
    rt.preserve_quotes = True
    rt.width = 1 << 16  # never fold a long line the file did not fold
    mapping, sequence, offset = _guess_indent(target.text)
    rt.indent(mapping=mapping, sequence=sequence, offset=offset)
    try:
        doc = rt.load(target.text)
    except RuamelError as e:
        raise ConfigError(f"{target.path}: cannot edit a copy of this file: {' '.join(str(e).split())[:200]}") \
            from None
    mname = Path(measurements_path).name
    for n in cal.fitted:
        keys = split_path(n)
        parent = get_path(doc, keys[:-1], n)
        old = parent.get(keys[-1]) if isinstance(parent, dict) else None
        new: Any = cal.after[n]
        if _is_cycles(n) and isinstance(old, ScalarInt):
            new = type(old)(int(new))  # a hex or binary number stays hex or binary
        set_path(doc, keys, new, n, create=True)
        was = "absent" if old is None else f"{old}"
        _append_note(parent, f"{keys[-1]} fitted by dspsim calibrate to {mname} (was {was})")
    name = str(doc.get("name"))
    doc["name"] = name if name.endswith(" (calibrated)") else f"{name} (calibrated)"  # a recalibration says it once
    kept = f"; not identified, kept: {', '.join(cal.unidentified)}" if cal.unidentified else ""
    fitted = ", ".join(f"{n} {cal.before[n]:.4g} -> {cal.after[n]:.4g}" for n in cal.fitted) or "nothing"
    _append_note(doc, f"calibrated by dspsim calibrate from {target.path.name} and {len(cal.measured)} "
                      f"measurements in {mname}: fitted {fitted}{kept}")
    buf = io.StringIO()
    rt.dump(doc, buf)
    header = (f"# Calibrated: a copy of {target.path.name} with {', '.join(cal.fitted) or 'no parameter'} fitted "
              f"by dspsim calibrate to {mname}.\n")
    text = header + buf.getvalue()
    _check_copy(text, target, cal, f"calibrated copy of {target.path}")
    return text


def _check_copy(text: str, target: TargetDocument, cal: Calibration, where: str) -> None:
    """The written copy reads (with the strict reader) as the target with only the fitted values, the name and
    the source notes changed, and loads as a target."""
    got = load_yaml(text, where, TargetError)
    expected = with_parameters(target.doc, {n: cal.after[n] for n in cal.fitted})

    def without_notes(node: Any) -> Any:
        if isinstance(node, dict):
            return {k: without_notes(v) for k, v in node.items() if k not in ("source", "name")}
        if isinstance(node, list):
            return [without_notes(v) for v in node]
        return node

    if without_notes(got) != without_notes(expected) or not isinstance(got.get("name"), str):
        raise ConfigError(f"{where}: the edited copy does not read back as the fitted target (a YAML construct "
                          f"this editor cannot keep?); nothing written")
    parse_target(got, where)
