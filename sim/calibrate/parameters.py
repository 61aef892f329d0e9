"""The free parameters of a target document: which, their values, a copy with others, and the cycles the
measurements take on a document (timing-only simulations)."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from sim.calibrate.measurements import Measurement, MeasurementError
from sim.errors import ConfigError, SimError
from sim.files.docedit import get_path, set_path, split_path
from sim.model.target_loader import parse_target

#: The free parameters every chip has besides its shared regions' bandwidths (key paths in the target file).
CHIP_PARAMETERS = ("dma.setup_cycles", "core.tile_overhead_cycles", "core.loop_overhead_cycles",
                   "core.units.fmac.latency_cycles", "sync.launch_overhead_cycles")
#: Significant digits of a fitted fractional value in the written file (far below what cycles can resolve).
FITTED_DIGITS = 6


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


#: The parameters of a DRAM's rows (``regions[].rows``) a fit may be asked for (``--params``): not fitted by
#: default, since only measurements of transfers that open rows often respond to them.
ROW_PARAMETERS = ("rows.window_cycles", "rows.bank_busy_cycles", "rows.write_to_read_cycles")


def row_parameters(doc: Mapping) -> list[str]:
    """The key paths of :data:`ROW_PARAMETERS` of every region of ``doc`` that states its rows, in file order."""
    return [f"regions.{r.get('name')}.{key}" for r in doc.get("regions", ()) if isinstance(r, Mapping)
            and isinstance(r.get("rows"), Mapping) for key in ROW_PARAMETERS]


def is_cycles(name: str) -> bool:
    """Whether the free parameter ``name`` is a whole number of cycles (every ``*_cycles`` key)."""
    return name.endswith("_cycles")


def check_parameter_names(names: Sequence[str], known: Sequence[str]) -> None:
    """ConfigError naming the first of ``names`` that is not a free parameter of the chip (``known``), with
    the key path meant when it is an old-style name such as ``ddr_bandwidth_bytes_per_cycle``, or one named twice
    (the fit would take two columns of one parameter for two, and identify neither)."""
    twice = sorted({n for n in names if list(names).count(n) > 1})
    if twice:
        raise ConfigError(f"free parameter {twice[0][:80]!r} is named twice: name each parameter to fit once")
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
    return max(0, round(value)) if is_cycles(name) else float(value)


def written_value(name: str, value: float) -> float | int:
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
    return np.array([run.cycles for run in runs_on(doc, measurements, label, on_call)], dtype=np.float64)


def runs_on(doc: Mapping, measurements: Sequence[Measurement], label: str,
          on_call: Callable[[], None] | None = None, failing: str | None = None) -> list[Any]:
    """The timing-only runs of ``measurements`` on the target document ``doc`` (one fresh simulator each);
    ``on_call()`` after each.  With ``failing`` (what a refused call means, e.g. "the measurement cannot run on
    the starting target"), a call the simulator refuses raises :class:`MeasurementError` naming the
    measurement's file and line (or its place in the list), ``failing`` and the simulator's reason."""
    from sim.simulator import Simulator

    target = parse_target(copy.deepcopy(dict(doc)), label)
    out = []
    for i, meas in enumerate(measurements):
        try:
            out.append(Simulator(target).call(meas.symbol, numerics=False, **meas.args))
        except SimError as e:
            if failing is None:
                raise
            where = meas.where or f"measurement {i + 1} ({meas.symbol})"
            raise MeasurementError(f"{where}: {failing}: {e}") from None
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
            out.append(dataclasses.replace(meas, args={**meas.args, "tiling": dict(choice.tiling)}))
    return out


