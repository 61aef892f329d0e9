"""The fit: the parameters the measurements identify, fitted by least squares within bounds; those they do
not, named with why."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO

import numpy as np

from sim.calibrate.measurements import Measurement, MeasurementError
from sim.calibrate.parameters import (
    check_parameter_names,
    free_parameters,
    is_cycles,
    parameter_values,
    pinned,
    row_parameters,
    runs_on,
    simulate,
    with_parameters,
    written_value,
)
from sim.errors import ConfigError, SimError, TargetError
from sim.extras import need
from sim.model.target_loader import MAX_CYCLES, MAX_RATE, MIN_RATE
from sim.run.progress import PhaseBar

#: A parameter is probed at its value times and divided by this factor.
PROBE_FACTOR = 1.5
#: Smallest relative change of some measurement's cycles that makes a probed parameter identifiable.
MIN_EFFECT = 1e-3
#: The fit stops once a step changes the error or the parameters (in log space) by less than this fraction: cycle
#: counts are whole numbers, so a tighter tolerance only chases their rounding, one evaluation (a simulation of
#: every measurement) after another.
FIT_TOLERANCE = 1e-4

#: The cycles of the measurements on each target document simulated so far (by the document's text): whole-cycle
#: parameters are rounded as a file holds them, so a step of the fit or of a probe often lands on a document
#: already simulated, and a simulation is deterministic.  Cleared at every calibration.
_SIMULATED: dict[tuple[str, int], np.ndarray] = {}


def _simulated(doc: Mapping, measurements: Sequence[Measurement]) -> np.ndarray:
    """:func:`~sim.calibrate.parameters.simulate`, once per distinct document and measurements."""
    key = (repr(doc), id(measurements))
    got = _SIMULATED.get(key)
    if got is None:
        got = _SIMULATED[key] = simulate(doc, measurements)
    return got.copy()
#: The fit keeps each parameter within this factor of the target's value; one that ends at that bound is
#: not identified by the measurements.
MAX_DRIFT = 1e3


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
    #: Each measurement's cycles on the fitted target with the tiling the search chooses there (what a call on it
    #: gives); ``cycles_after`` prices each with the starting target's tiling, as the fit does.  None: not run.
    cycles_own_tiling: np.ndarray | None = None

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
        own = self.cycles_own_tiling
        lines.append("measurement                                  measured    before (err)        after (err)"
                     + ("   fitted target's own tiling (err)" if own is not None else ""))
        for i, (meas, mc, b, a, eb, ea) in enumerate(zip(measurements, self.measured, self.cycles_before,
                                                         self.cycles_after, self.error_before, self.error_after)):
            line = f"{meas.symbol:<44} {mc:>8.0f}  {b:>8.0f} ({100 * eb:+6.2f}%)  {a:>8.0f} ({100 * ea:+6.2f}%)"
            if own is not None:
                line += f"  {own[i]:>8.0f} ({100 * (own[i] - mc) / mc:+6.2f}%)" + ("" if own[i] == a else " *")
            lines.append(line)
        lines.append(f"max |error|: before {100 * np.abs(self.error_before).max():.2f}%, "
                     f"after {100 * np.abs(self.error_after).max():.2f}%")
        lines.append("(before and after: each call with the tiling the search chose for it on the starting target, "
                     "as the fit prices it" + ("; * the fitted target's search chooses another tiling, and a call "
                                               "on it gives that column" if own is not None and
                                               bool((own != self.cycles_after).any()) else "") + ")")
        return "\n".join(lines)


def _limits(name: str, value: float) -> tuple[float, float]:
    """The range the fit may move a parameter in: MAX_DRIFT either way of the target's value, and what a
    target file accepts (a bandwidth of at least MIN_RATE and at most MAX_RATE, a cycle count of at most
    MAX_CYCLES)."""
    floor = 1e-9 if is_cycles(name) else MIN_RATE
    ceiling = MAX_CYCLES if is_cycles(name) else MAX_RATE  # the target file's own ranges
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
        if is_cycles(n):
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
                sides.append(_simulated(with_parameters(doc, dict(values, **{n: values[n] * factor})), measurements))
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
        default = free_parameters(doc)
    except TargetError as e:
        raise ConfigError(f"the starting target: {e}") from None
    known = default + row_parameters(doc)
    names = list(names or default)
    check_parameter_names(names, known)
    start = parameter_values(doc, names)
    measured = np.array([m.cycles for m in measurements], dtype=np.float64)
    n_meas = len(measurements)
    try:
        with PhaseBar(f"calibrate: simulating {n_meas} measurements on the starting target", progress,
                      total=n_meas, unit="call") as bar:
            runs = runs_on(with_parameters(doc, start), measurements, "calibration", on_call=bar.advance,
                           failing="the measurement cannot run on the starting target")
    except MeasurementError:
        raise
    except SimError as e:
        raise ConfigError(f"the measurements cannot run on the starting target: {e}") from None
    cycles_before = np.array([run.cycles for run in runs], dtype=np.float64)
    unpinned = measurements
    measurements = pinned(measurements, runs)  # the starting target's tilings, for every evaluation
    _SIMULATED.clear()
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
        return (_simulated(with_parameters(doc, trial(x, free)), measurements) - measured) / measured

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
                                max_nfev=max_evaluations, method="trf", ftol=FIT_TOLERANCE, xtol=FIT_TOLERANCE)
        fitted = trial(fit.x, free)
        at_limit = {n: float(np.exp(x)) for n, x in zip(free, fit.x)
                    if np.exp(x) <= lim[n][0] * 1.01 or np.exp(x) >= lim[n][1] / 1.01}
        for n, v in at_limit.items():
            unidentified[n] = (f"the fit drove it to {v:.3g}, the limit of a factor {MAX_DRIFT:g} from the "
                               f"target's {start[n]:.4g}: the measurements do not pin it down")
        if at_limit:
            continue
        base = _simulated(with_parameters(doc, fitted), measurements)
        with PhaseBar("calibrate: checking the fitted parameters are identified", progress,
                      total=2 * len(free), unit="probe") as bar:
            sens = _sensitivity(doc, measurements, free, fitted, base, bar)
        dropped = {**_alike(sens, free), **_flat(sens, free, fitted)}  # "no effect" says more
        unidentified.update(dropped)
        if not dropped:
            break
    after = {n: start[n] if n in unidentified else written_value(n, fitted[n]) for n in names}
    fitted_doc = with_parameters(doc, after)
    with PhaseBar(f"calibrate: simulating {n_meas} measurements on the fitted target", progress,
                  total=n_meas, unit="call") as bar:
        cycles_after = simulate(fitted_doc, measurements, on_call=bar.advance)
    with PhaseBar(f"calibrate: simulating {n_meas} measurements on the fitted target, its own tilings", progress,
                  total=n_meas, unit="call") as bar:
        own = np.array([run.cycles for run in runs_on(fitted_doc, unpinned, "calibration", on_call=bar.advance)],
                       dtype=np.float64)
    _SIMULATED.clear()
    return Calibration(before=start, after=after, measured=measured, cycles_before=cycles_before,
                       cycles_after=cycles_after, document=fitted_doc,
                       unidentified={n: unidentified[n] for n in names if n in unidentified}, cycles_own_tiling=own)


