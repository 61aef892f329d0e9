"""A whole sweep: its points run (those a journal holds from an earlier run reused), recorded as they
finish, then the table (CSV and Parquet) and the plot."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from sim.errors import ConfigError, SimError
from sim.extras import need
from sim.files.atomic import atomic_write, atomic_write_text, folder_trouble
from sim.files.jsonsafe import load_json
from sim.files.regular_file import read_file
from sim.inspect.trace_metadata import MAX_TRACE_CYCLE
from sim.run.progress import PhaseBar
from sim.run.signals import signal_number
from sim.sweep.executors import run_dask, run_local, run_serial
from sim.sweep.spec import TILING_KEY, SweepInterrupted, SweepSpec

#: Largest journal read back (bytes): a point's row is about a kilobyte, so this holds some 250,000 points.
MAX_JOURNAL_BYTES = 256 << 20
#: Deepest nesting of a journal's row (a row, its tiling or target edits, a value).
MAX_JOURNAL_DEPTH = 16


@dataclass
class SweepResult:
    """What a sweep wrote: one row per point of the grid (in grid order) and the files."""

    rows: list[dict]
    journal: Path
    csv: Path
    parquet: Path
    plot: Path | None  # None when no point succeeded or the grid has no axis to plot against
    ran_now: int = 0  # points run by this call (the others came from the journal)

    @property
    def failed(self) -> list[dict]:
        """Rows of the points that failed (with their error)."""
        return [r for r in self.rows if r.get("error")]

    @property
    def skipped(self) -> list[dict]:
        """Rows of the points not run because the chip lacks what they ask for (more cores than it has)."""
        return [r for r in self.rows if not r.get("error") and r.get("skipped")]

    @property
    def succeeded(self) -> list[dict]:
        """Rows of the points that ran and have cycles."""
        return [r for r in self.rows if not r.get("error") and not r.get("skipped")]


def need_sweep_extra(scheduler: str | None) -> None:
    """A sweep's table and plot need the sweep extra, and a cluster its Dask: :class:`~sim.extras.MissingExtra`
    before anything runs (the sweep file's own kernels included) when they are not installed."""
    need("sweep", "dspsim sweep", ("pandas", "pyarrow", "matplotlib") + (("distributed",) if scheduler else ()))


def run_sweep(spec: SweepSpec, out_dir: str | Path, *, workers: int | None = None, scheduler: Any = None,
              on_point: Callable[[dict], None] | None = None, progress: IO[str] | None = None) -> SweepResult:
    """Run every point that has no successful row with the same id in ``out_dir/points.jsonl``; write the
    table, Parquet and plot.

    ``progress`` is a stream (the CLI passes stderr) on which, when it is a
    terminal, each phase longer than a second shows a bar.  Ctrl-C raises
    :class:`SweepInterrupted` within about a second, every finished point kept.
    """
    need_sweep_extra(scheduler)
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise SimError(f"output {out}: cannot create: {folder_trouble(out) or e.strerror or e}") from None
    journal = out / "points.jsonl"
    points = spec.points()
    # Only successes are reused: a failed point runs again (its cause may be fixed outside the inputs), and so
    # does one whose line is damaged (the last whole success of a point is the one reused).
    by_id = {p["id"]: p for p in points}
    done = {r["id"]: r for r in _read_jsonl(journal) if r["id"] in by_id and _reusable(r, by_id[r["id"]])}
    todo = [p for p in points if p["id"] not in done]
    ran_now = 0
    bar = PhaseBar(f"sweep: running {len(todo)} points", progress, total=len(todo), unit="point")
    latest: dict[str, dict] = {}  # rows recorded by this call, failures included
    with _open_journal(journal) as fh:
        failures = 0

        def record(row: dict) -> None:
            nonlocal ran_now, failures
            try:
                fh.write(json.dumps(row, default=str) + "\n")  # one write: a line is never half-written by Ctrl-C
                fh.flush()  # each finished point survives an interruption
            except OSError as e:  # a full disk, a quota: the sweep cannot keep its results, so it stops here
                raise SimError(f"output {journal}: cannot write: {e.strerror or e}") from None
            if not row.get("error"):
                done[row["id"]] = row
            else:
                failures += 1
            ran_now += 1
            latest[row["id"]] = row
            bar.advance(note=f"{failures} failed" if failures else None)
            if on_point is not None:
                on_point(row)

        try:
            if scheduler is not None:
                run_dask(todo, scheduler, record, bar)
            elif (workers or os.cpu_count() or 1) <= 1 or len(todo) <= 1:
                run_serial(todo, record, bar)
            else:
                run_local(todo, min(workers or os.cpu_count() or 1, len(todo)), record, bar)
        except KeyboardInterrupt as e:
            raise SweepInterrupted(journal, sum(1 for p in points if p["id"] in done or p["id"] in latest),
                                   len(points), signal_number(e)) from None
        finally:
            bar.close()
    rows = [latest.get(p["id"]) or done[p["id"]] for p in points if p["id"] in latest or p["id"] in done]
    with PhaseBar("sweep: writing the table and the plot", progress, total=3, unit="file") as wbar:
        csv, parquet = write_tables(rows, out, wbar)
        plot = plot_sweep(rows, spec, out / "sweep.png")
        wbar.advance()
    if plot is None:
        (out / "sweep.png").unlink(missing_ok=True)  # a plot of an earlier run would not match this table
    return SweepResult(rows=rows, journal=journal, csv=csv, parquet=parquet, plot=plot, ran_now=ran_now)


class _open_journal:
    """The journal opened for appending, starting on a fresh line (a line cut by a kill stays cut alone)."""

    def __init__(self, path: Path):
        self.path = path

    def __enter__(self) -> IO[str]:
        try:
            needs_newline = self.path.exists() and self.path.stat().st_size > 0 and \
                self.path.read_bytes()[-1:] != b"\n"
            self._fh = self.path.open("a", encoding="utf-8")
        except OSError as e:
            raise SimError(f"output {self.path}: cannot open the journal: {e.strerror or e}") from None
        if needs_newline:
            self._fh.write("\n")
        return self._fh

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        try:
            self._fh.close()  # flushes: the last line may meet a full disk here
        except OSError as e:
            if exc_type is None:  # else the error already on its way says more
                raise SimError(f"output {self.path}: cannot write: {e.strerror or e}") from None


#: The columns of a point's success besides its axes (as :func:`sim.sweep.point.run_point` writes them), each
#: with what its value must be.
_COUNT, _NUMBER, _TEXT, _EMPTY = "count", "number", "text", "empty"
_SUCCESS_COLUMNS = {"id": _TEXT, "config": _TEXT, "chip": _TEXT, "symbol": _TEXT, "cores": _COUNT,
                    "cycles": _COUNT, "roofline_cycles": _NUMBER, "roofline_fraction": _NUMBER,
                    "bound_by": _TEXT, "limited_by": _TEXT, "idle_cores": _COUNT, "load_imbalance": _NUMBER,
                    "tiles": _COUNT, "tiling": _TEXT, "tiling_source": _TEXT, "error": _EMPTY, "skipped": _EMPTY,
                    "wall_seconds": _NUMBER}


def _fits(value: Any, kind: str) -> bool:
    if kind == _COUNT:  # an int (not a bool) a run can reach: at most MAX_TRACE_CYCLE, like a trace's cycles
        return type(value) is int and 0 <= value <= MAX_TRACE_CYCLE
    if kind == _NUMBER:
        return type(value) in (int, float) and math.isfinite(value) and 0 <= value <= MAX_TRACE_CYCLE
    if kind == _EMPTY:
        return value == ""
    return isinstance(value, str)


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def _reusable(row: dict, point: dict) -> bool:
    """Whether a journal row is ``point``'s success to reuse: exactly the columns a success has (its config, each
    axis with the point's value, the results), each of its kind (a count an int in range, a number finite and
    not negative, a text a string, ``error`` and ``skipped`` empty).  A hand-edited or damaged line runs
    again, as a line the reader refuses does."""
    axes = point["settings"]
    if set(row) != set(_SUCCESS_COLUMNS) | set(axes) or row["config"] != point["config_label"]:
        return False
    if not all(_fits(row[k], kind) for k, kind in _SUCCESS_COLUMNS.items()):
        return False
    # The axis values as the point's row records them (json.dumps, as the journal line was written); a ``cores``
    # axis is also the count of cores the run used, a ``symbol`` axis the symbol run.
    return all(_canonical(row[a]) == _canonical(json.loads(_canonical(v))) for a, v in axes.items())


def _read_jsonl(path: Path) -> Iterable[dict]:
    """The rows of a journal, read by the guarded readers (a regular file of at most MAX_JOURNAL_BYTES, each
    line by the strict JSON reader); a line it refuses is skipped (a line cut by a kill: that point runs again)."""
    if not path.exists() and not path.is_symlink():
        return []
    data = read_file(path, f"output {path}", ConfigError, MAX_JOURNAL_BYTES, what="sweep journal")
    rows = []
    for line in data.decode("utf-8", errors="replace").splitlines():
        try:
            row = load_json(line, "journal line", ConfigError, MAX_JOURNAL_DEPTH, non_finite=True)
        except ConfigError:
            continue
        if isinstance(row, dict) and isinstance(row.get("id"), str):
            rows.append(row)
    return rows


def write_tables(rows: list[dict], out: Path, bar: PhaseBar | None = None) -> tuple[Path, Path]:
    """The sweep's table as ``sweep.csv`` and ``sweep.parquet`` (atomically)."""
    import pandas as pd

    df = pd.DataFrame(rows)
    for col in df.columns:
        if df[col].dtype == object:
            df[col] = df[col].map(lambda v: "" if v is None or (isinstance(v, float) and math.isnan(v)) else str(v))
    csv = atomic_write_text(out / "sweep.csv", df.to_csv(index=False))
    if bar is not None:
        bar.advance()
    parquet = atomic_write(out / "sweep.parquet", lambda tmp: df.to_parquet(tmp, index=False))
    if bar is not None:
        bar.advance()
    return csv, parquet


def plot_sweep(rows: list[dict], spec: SweepSpec, path: Path) -> Path | None:
    """Cycles against the swept parameter, one line per chip (and per value of the other axes); None (and no
    file) when no point has cycles or the grid has no axis to put on x."""
    axes = [a for a in spec.grid if a != "target"]
    x_axis = spec.plot_x or (axes[0] if axes else None)
    ok = [r for r in rows if not r.get("error") and not r.get("skipped")]
    if x_axis is None or not ok:
        return None
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

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
