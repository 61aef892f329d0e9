"""One sweep point, run in a worker process: the base run-config with the point's settings, through the run
pipeline's stages; a failure is returned as its row, never raised."""

from __future__ import annotations

import copy
import dataclasses
import json
import time
import traceback
from typing import Any

from sim.config.run_config import load_config
from sim.config.user_kernels import load_kernels
from sim.errors import ConfigError, SimError, TargetError
from sim.files.docedit import set_path, split_path
from sim.files.yamlsafe import decode_yaml_bytes, load_yaml, read_yaml_bytes
from sim.inspect.summary import limiting_resource
from sim.sweep.spec import (
    ARGS_KEY,
    CORES_AXIS,
    TARGET_EDIT,
    TILING_KEY,
    TOLERANCE_AXIS,
    check_unchanged,
    content_digest,
    swept_target,
)


def _checked_text(path: str, digest: str, what: str) -> str:
    """A file's text, refused if it changed since the sweep read it (the point's id names its content)."""
    data = read_yaml_bytes(path, path, ConfigError, what)
    if content_digest(data) != digest:
        raise ConfigError(f"{path}: the {what} changed while the sweep ran; run the sweep again")
    return decode_yaml_bytes(data, path, ConfigError, what)


def run_point(point: dict) -> dict:
    """Run one sweep point; never raises a SimError or a bug: a failure is returned with its error."""
    from sim.model.layout import enforce_layout
    from sim.run.runner import (  # imported here: worker processes import the facade on first use
        bound_call,
        run_bound,
    )

    t0 = time.perf_counter()
    settings = point["settings"]
    row: dict[str, Any] = {"id": point["id"], "config": point["config_label"], **settings}
    try:
        _checked_text(point["config"], point["config_sha256"], "run-config")
        # The sweep's parent imported this config's kernels (allowed, or it refused the sweep) and the point names
        # their digests, checked below: a worker (a Dask one too) runs the very files the parent did.
        cfg = load_config(point["config"], allow_kernels=True)
        load_kernels(cfg)  # a worker process imports the config's kernel files too (first: their helpers count)
        check_unchanged(cfg, point)
        args = copy.deepcopy(cfg.args)
        symbol = cfg.symbol
        tiling = dict(cfg.tiling) if cfg.tiling is not None else None
        tolerance = cfg.tiling_tolerance
        target_edits = {}
        for axis, value in settings.items():
            if axis == "symbol":
                symbol = value
            elif axis == TOLERANCE_AXIS:
                tolerance = value
            elif axis.startswith(TARGET_EDIT):
                target_edits[axis[len(TARGET_EDIT):]] = value
            elif axis.startswith(TILING_KEY):
                tiling = dict(tiling or {}, **{axis[len(TILING_KEY):]: value})
            elif axis.startswith(ARGS_KEY):
                # The argument itself may be new (left to its default); an index path must exist.
                set_path(args, split_path(axis[len(ARGS_KEY):]), value, f"grid.{axis}", create=True)
        tpath = point["target_file"]
        doc = load_yaml(_checked_text(tpath, point["target_sha256"], "target file"), tpath, TargetError)
        chip = swept_target(doc, target_edits, tpath)
        if CORES_AXIS in settings:
            n = settings[CORES_AXIS]
            if n > chip.cores:
                row.update(chip=chip.name, symbol=symbol, error="",
                           skipped=f"{chip.name} has {chip.cores} cores, fewer than {n}",
                           wall_seconds=time.perf_counter() - t0)
                return row
            args["core_mask"] = (1 << n) - 1
        # The point is the config with the grid's settings, run through the run pipeline's stages as `dspsim run`
        # runs one: one simulator, one bind (the literal data placed first), one layout check, the rest of the
        # data placed, the call run on the bound call.
        swept = dataclasses.replace(cfg, symbol=symbol, args=args, tiling=tiling, tiling_tolerance=tolerance,
                                    numerics=point["numerics"])
        bound = bound_call(swept, target=chip)
        enforce_layout(bound.call, chip)
        run = run_bound(swept, bound)
        row.update(chip=chip.name, symbol=symbol, cores=len(run.cores), cycles=run.cycles,
                   roofline_cycles=run.roofline.cycles, roofline_fraction=run.roofline_fraction,
                   bound_by=run.roofline.bound_by,
                   limited_by=limiting_resource(run.roofline, run.summaries(), run.cycles),
                   idle_cores=len(run.idle_cores), load_imbalance=round(run.load_imbalance, 4),
                   tiles=run.plan.tile_count,
                   tiling=json.dumps(run.tiling.tiling, sort_keys=True) if run.tiling and run.tiling.tiling else "",
                   tiling_source=run.tiling.source if run.tiling else "", error="", skipped="")
    except SimError as e:
        row.update(error=f"{type(e).__name__}: {e}")
    except Exception as e:  # noqa: BLE001 (a bug must not lose the point either: record it whole)
        row.update(error=f"internal {type(e).__name__}: {e} | {traceback.format_exc(limit=3)}")
    row["wall_seconds"] = time.perf_counter() - t0
    row.setdefault("chip", str(settings.get("target", "")))
    return row


def failed_row(point: dict, error: str) -> dict:
    """The row of a point whose worker died before it could report."""
    return {"id": point["id"], "config": point["config_label"], **point["settings"],
            "chip": str(point["settings"].get("target", "")), "error": error, "wall_seconds": 0.0}


