"""Design-space sweeps: a grid over run-configs, chips, arguments and target-file parameters, run in parallel.

A sweep file::

    configs: [../configs/ft78ne_batch_norm_grad_s.yaml]   # base run-configs (paths relative to this file)
    numerics: false                 # timing only (default); true also computes and checks the numerics
    grid:                           # every combination of these values is one point
      target: [FT78NE, MT7004]      # the chip (name or target YAML path)
      args.core_mask: [0x1, 0x3, 0xf]
      args.params.5: [256, 1024]    # element 5 of the params argument
      target.regions.ddr.bandwidth_bytes_per_cycle: [12, 24]   # an edit of the target file
      tiling.row_block: [256, 1024] # a key of the kernel's tiling (merged into the config's tiling:)
      tiling_tolerance: [0, 0.01]   # the cost model's tie tolerance (when the tiling is left to it)
    plot: {x: args.core_mask}       # the axis the plot puts on x (default: the first non-chip axis)

Points run on a local process pool, or on a Dask distributed cluster given its
scheduler address.  Each finished point is appended to ``points.jsonl`` in the
output folder as it arrives, so an interrupted sweep started again skips what
is done; failed points are kept with their error.  At the end the table is
written as CSV and Parquet, with a plot of cycles against the swept parameter,
one line per chip; each row also names the tiling the point ran with.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import math
import os
import time
import traceback
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import yaml

from sim.atomic import atomic_write, atomic_write_text
from sim.config import load_config
from sim.errors import ConfigError, SimError
from sim.target import TARGETS_DIR, parse_target

TARGET_EDIT = "target."
TILING_KEY = "tiling."
TOLERANCE_AXIS = "tiling_tolerance"
#: Columns of the result table that a plot may also put on x.
RESULT_AXES = ("cores",)


@dataclass(frozen=True)
class SweepSpec:
    """A parsed sweep file."""

    path: Path
    configs: tuple[Path, ...]
    grid: dict[str, list]
    numerics: bool
    plot_x: str | None

    def points(self) -> list[dict]:
        """Every point of the grid: its base config and one value per axis, with a stable id."""
        axes = list(self.grid)
        out = []
        for cfg in self.configs:
            for values in itertools.product(*(self.grid[a] for a in axes)):
                settings = dict(zip(axes, values))
                key = json.dumps({"config": cfg.name, "settings": settings}, sort_keys=True, default=str)
                out.append({"id": hashlib.sha1(key.encode()).hexdigest()[:12], "config": str(cfg),
                            "settings": settings, "numerics": self.numerics})
        return out


def load_sweep(path: str | Path) -> SweepSpec:
    """Parse and check a sweep file (ConfigError naming the file and key)."""
    p = Path(path)
    try:
        doc = yaml.safe_load(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{p}: sweep file not found") from None
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise ConfigError(f"{p}: cannot read sweep file: {str(e).splitlines()[0]}") from None
    if not isinstance(doc, dict):
        raise ConfigError(f"{p}: expected a mapping with configs and grid")
    unknown = sorted(set(doc) - {"configs", "grid", "numerics", "plot", "description"})
    if unknown:
        raise ConfigError(f"{p}: {unknown[0]}: unknown key (allowed: configs, grid, numerics, plot, description)")
    configs = doc.get("configs")
    if not isinstance(configs, list) or not configs or not all(isinstance(c, str) for c in configs):
        raise ConfigError(f"{p}: configs: expected a non-empty list of run-config paths")
    paths = []
    for i, c in enumerate(configs):
        cp = Path(c) if Path(c).is_absolute() else p.parent / c
        if not cp.is_file():
            raise ConfigError(f"{p}: configs[{i}]: {cp} does not exist")
        load_config(cp)  # a broken base config is the sweep file's error, not every point's
        paths.append(cp)
    grid = doc.get("grid") or {}
    if not isinstance(grid, dict):
        raise ConfigError(f"{p}: grid: expected a mapping of axis -> list of values")
    for axis, values in grid.items():
        tiling_key = isinstance(axis, str) and axis.startswith(TILING_KEY) and axis[len(TILING_KEY):].isidentifier()
        if not isinstance(axis, str) or not (axis in ("target", "symbol", TOLERANCE_AXIS) or tiling_key
                                             or axis.startswith(("args.", TARGET_EDIT))):
            raise ConfigError(f"{p}: grid.{axis}: axes are target, symbol, args.<name>[.<index>], "
                              f"target.<key path>, tiling.<key> or {TOLERANCE_AXIS}")
        if not isinstance(values, list) or not values:
            raise ConfigError(f"{p}: grid.{axis}: expected a non-empty list of values")
    numerics = doc.get("numerics", False)
    if not isinstance(numerics, bool):
        raise ConfigError(f"{p}: numerics: expected true or false")
    plot = doc.get("plot") or {}
    if not isinstance(plot, dict) or set(plot) - {"x"}:
        raise ConfigError(f"{p}: plot: expected a mapping with key x")
    plot_x = plot.get("x")
    if plot_x is not None and plot_x not in grid and plot_x not in RESULT_AXES:
        raise ConfigError(f"{p}: plot.x: {plot_x!r} is neither an axis of the grid nor one of "
                          f"{', '.join(RESULT_AXES)}")
    return SweepSpec(path=p, configs=tuple(paths), grid=dict(grid), numerics=numerics, plot_x=plot_x)


# --- one point (runs in a worker process) -------------------------------------------------------

def _set_path(doc: Any, keys: list[str], value: Any, where: str) -> None:
    """Set ``value`` at a dotted key path; list items are picked by index or by their ``name``."""
    node = doc
    for i, k in enumerate(keys):
        last = i == len(keys) - 1
        if isinstance(node, list):
            if k.isdigit():
                idx = int(k)
            else:
                matches = [j for j, item in enumerate(node) if isinstance(item, dict) and item.get("name") == k]
                if not matches:
                    raise ConfigError(f"{where}: no list item named {k!r}")
                idx = matches[0]
            if not 0 <= idx < len(node):
                raise ConfigError(f"{where}: index {idx} is outside the list of {len(node)}")
            if last:
                node[idx] = value
            else:
                node = node[idx]
        elif isinstance(node, dict):
            if k not in node:
                raise ConfigError(f"{where}: no key {k!r}")
            if last:
                node[k] = value
            else:
                node = node[k]
        else:
            raise ConfigError(f"{where}: {k!r} descends into a scalar")


def _target_doc(name_or_path: str, base_dir: Path) -> tuple[dict, str]:
    p = Path(name_or_path)
    if not (p.suffix in (".yaml", ".yml") or "/" in name_or_path):
        matches = [t for t in TARGETS_DIR.glob("*.yaml") if t.stem.lower() == name_or_path.lower()]
        if not matches:
            raise ConfigError(f"unknown target {name_or_path!r}")
        p = matches[0]
    elif not p.is_absolute():
        p = base_dir / p
    return yaml.safe_load(p.read_text(encoding="utf-8")), str(p)


def run_point(point: dict) -> dict:
    """Run one sweep point; never raises: a failure is returned with its error."""
    from sim.runner import place_data  # imported here: worker processes import the facade on first use
    from sim.simulator import Simulator

    t0 = time.perf_counter()
    row: dict[str, Any] = {"id": point["id"], "config": Path(point["config"]).name, **point["settings"]}
    try:
        cfg = load_config(point["config"])
        args = copy.deepcopy(cfg.args)
        symbol, target = cfg.symbol, cfg.target
        tiling = dict(cfg.tiling) if cfg.tiling is not None else None
        tolerance = cfg.tiling_tolerance
        target_edits = {}
        for axis, value in point["settings"].items():
            if axis == "target":
                target = value
            elif axis == "symbol":
                symbol = value
            elif axis == TOLERANCE_AXIS:
                tolerance = value
            elif axis.startswith(TARGET_EDIT):
                target_edits[axis[len(TARGET_EDIT):]] = value
            elif axis.startswith(TILING_KEY):
                tiling = dict(tiling or {}, **{axis[len(TILING_KEY):]: value})
            else:
                _set_path(args, axis.split(".")[1:], value, f"grid.{axis}")
        doc, tpath = _target_doc(str(target), cfg.path.parent)
        for key, value in target_edits.items():
            _set_path(doc, key.split("."), value, f"grid.target.{key}")
        chip = parse_target(doc, f"{tpath} (swept)")
        m = Simulator(chip) if tolerance is None else Simulator(chip, tiling_tolerance=tolerance)
        place_data(cfg, m, point["numerics"])
        run = m.call(symbol, numerics=point["numerics"], tiling=tiling, **args)
        row.update(chip=chip.name, symbol=symbol, cores=len(run.cores), cycles=run.cycles,
                   roofline_cycles=run.roofline.cycles, roofline_fraction=run.roofline_fraction,
                   bound_by=run.roofline.bound_by, tiles=run.plan.tile_count,
                   tiling=json.dumps(run.tiling.tiling, sort_keys=True) if run.tiling and run.tiling.tiling else "",
                   tiling_source=run.tiling.source if run.tiling else "", error="")
    except SimError as e:
        row.update(error=f"{type(e).__name__}: {e}")
    except Exception as e:  # a bug must not lose the point either: record it whole
        row.update(error=f"internal {type(e).__name__}: {e} | {traceback.format_exc(limit=3)}")
    row["wall_seconds"] = time.perf_counter() - t0
    row.setdefault("chip", str(point["settings"].get("target", "")))
    return row


# --- executors ----------------------------------------------------------------------------------

def _local(points: list[dict], workers: int) -> Iterator[dict]:
    if workers <= 1:
        for p in points:
            yield run_point(p)
        return
    with ProcessPoolExecutor(max_workers=workers) as pool:
        futures = [pool.submit(run_point, p) for p in points]
        for f in as_completed(futures):
            yield f.result()


def _dask(points: list[dict], scheduler: Any) -> Iterator[dict]:
    from distributed import Client, as_completed as dask_completed

    client = scheduler if isinstance(scheduler, Client) else Client(scheduler)
    try:
        futures = client.map(run_point, points, pure=False)
        for f in dask_completed(futures):
            yield f.result()
    finally:
        if client is not scheduler:
            client.close()


def run_sweep(spec: SweepSpec, out_dir: str | Path, *, workers: int | None = None, scheduler: Any = None,
              on_point: Callable[[dict], None] | None = None) -> list[dict]:
    """Run every point not already in ``out_dir/points.jsonl``; write the table, Parquet and plot."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    journal = out / "points.jsonl"
    done = {r["id"]: r for r in _read_jsonl(journal)}
    todo = [p for p in spec.points() if p["id"] not in done]
    results = (_dask(todo, scheduler) if scheduler is not None
               else _local(todo, workers or max(1, (os.cpu_count() or 1))))
    with journal.open("a", encoding="utf-8") as fh:
        for row in results:
            fh.write(json.dumps(row, default=str) + "\n")
            fh.flush()  # each finished point survives an interruption
            done[row["id"]] = row
            if on_point is not None:
                on_point(row)
    order = [p["id"] for p in spec.points()]
    rows = [done[i] for i in order if i in done]
    write_tables(rows, out)
    plot_sweep(rows, spec, out / "sweep.png")
    return rows


def _read_jsonl(path: Path) -> Iterable[dict]:
    if not path.exists():
        return []
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a line cut by an interruption: that point runs again
    return rows


def write_tables(rows: list[dict], out: Path) -> None:
    """The sweep's table as ``sweep.csv`` and ``sweep.parquet`` (atomically)."""
    import pandas as pd

    df = pd.DataFrame(rows)
    for col in df.columns:
        if df[col].dtype == object:
            df[col] = df[col].map(lambda v: "" if v is None or (isinstance(v, float) and math.isnan(v)) else str(v))
    atomic_write_text(out / "sweep.csv", df.to_csv(index=False))
    atomic_write(out / "sweep.parquet", lambda tmp: df.to_parquet(tmp, index=False))


def plot_sweep(rows: list[dict], spec: SweepSpec, path: Path) -> Path | None:
    """Cycles against the swept parameter, one line per chip (and per value of the other axes)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    axes = [a for a in spec.grid if a != "target"]
    x_axis = spec.plot_x or (axes[0] if axes else None)
    ok = [r for r in rows if not r.get("error")]
    if x_axis is None or not ok:
        return None
    # Legend entries name only what varies: the chip, the config when there are several, the other axes.
    others = [a for a in spec.grid if a not in (x_axis, "target") and len(spec.grid[a]) > 1
              and not (x_axis == "cores" and a == "args.core_mask")]
    several_configs = len(spec.configs) > 1
    lines: dict[tuple, list[tuple[Any, int]]] = {}
    for r in ok:
        key = ((r.get("chip", ""),) + ((r.get("config", ""),) if several_configs else ())
               + tuple(f"{a.removeprefix('args.').removeprefix('target.regions.').removeprefix(TILING_KEY)}={r.get(a)}"
                       for a in others))
        lines.setdefault(key, []).append((r.get(x_axis), r["cycles"]))
    fig, ax = plt.subplots(figsize=(9, 5))
    xs_all = [x for pts in lines.values() for x, _ in pts]
    categorical = not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in xs_all)
    for key, pts in sorted(lines.items(), key=lambda kv: str(kv[0])):
        pts.sort(key=lambda p: str(p[0]) if categorical else p[0])
        xs = [str(x) for x, _ in pts] if categorical else [x for x, _ in pts]
        ax.plot(xs, [c for _, c in pts], marker="o", label=" ".join(str(k) for k in key if k))
    if not categorical and min(xs_all) > 0 and max(xs_all) / min(xs_all) > 16:
        ax.set_xscale("log", base=2)
    ax.set_xlabel(x_axis)
    ax.set_ylabel("cycles")
    ax.set_title(f"sweep {spec.path.stem}: cycles against {x_axis}")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.tight_layout()
    atomic_write(path, lambda tmp: fig.savefig(tmp, format="png", dpi=110))
    plt.close(fig)
    return path
