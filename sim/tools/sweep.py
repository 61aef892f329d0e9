"""Design-space sweeps: a grid over run-configs, chips, arguments and target-file parameters, run in parallel.

A sweep file::

    configs: [../configs/ft78ne_batch_norm_grad_s.yaml]   # base run-configs (paths relative to this file)
    numerics: false                 # timing only (default); true also computes and checks the numerics
    grid:                           # every combination of these values is one point
      target: [FT78NE, MT7004]      # the chip (a name, or a target YAML path relative to this file)
      cores: [1, 2, 4, 8]           # the first n cores (core_mask 2**n - 1); skipped on a chip with fewer
      args.params.5: [256, 1024]    # element 5 of the params argument
      args.epsilon: [0.001]         # any argument the symbol takes, given by the config or left to its default
      target.regions.ddr.bandwidth_bytes_per_cycle: [12, 24]   # an edit of the target file
      tiling.tile_elements: [256, 1024] # a key of the kernel's tiling (merged into the config's tiling:)
      tiling_tolerance: [0, 0.01]   # the cost model's tie tolerance (when the tiling is left to it)
    plot: {x: cores}                # the axis the plot puts on x (default: the first non-chip axis)

``cores`` is chip-relative, so one axis serves chips of different sizes: a
point asking for more cores than its chip has is *skipped* (recorded with the
reason, not run, not a failure).  ``args.core_mask`` sets the mask itself, the
same on every chip.

Points run on a local process pool, or on a Dask distributed cluster given its
scheduler address.  Each finished point is appended to ``points.jsonl`` in the
output folder as it arrives.  A point's id is a digest of everything that
decides its result: the base config's path and content, the target file's
content, the content of the config's data files and kernel files (with the
local modules those import), the simulator's own source digest, the grid
values and ``numerics``; a sweep started again into the same folder reuses the
points that succeeded with the same id and runs the rest (failed points, and
points any of whose inputs changed).  Ctrl-C stops
the sweep at once: the points that finished are in the journal, the ones still
running are dropped and run again on resume.  At the end the table is written
as CSV and Parquet, with a plot of cycles against the swept parameter, one
line per chip; each row also names the tiling the point ran with.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import copy
import dataclasses
import hashlib
import itertools
import json
import math
import os
import signal
import sys
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from sim.errors import ConfigError, SimError, TargetError
from sim.extras import need
from sim.files.atomic import atomic_write, atomic_write_text
from sim.files.jsonsafe import load_json
from sim.files.regular_file import read_file
from sim.files.schema import decode
from sim.files.tuning_cache import model_version
from sim.files.yamlsafe import decode_yaml_bytes, load_yaml, read_yaml_bytes
from sim.inspect.summary import limiting_resource
from sim.model.target_loader import parse_target, resolve_target_path
from sim.simulator import find_symbol
from sim.tools.config import ArraySpec, RunConfig, data_file_digest, load_config
from sim.tools.docedit import quote, set_path, split_path
from sim.tools.progress import PhaseBar
from sim.tools.signals import StopSignalsIgnored, die_with_parent, signal_number
from sim.tools.sweep_schema import SweepFile
from sim.tools.user_kernels import load_kernels, source_digest

TARGET_EDIT = "target."
TILING_KEY = "tiling."
ARGS_KEY = "args."
TOLERANCE_AXIS = "tiling_tolerance"
CORES_AXIS = "cores"
#: Columns of the result table that a plot may also put on x.
RESULT_AXES = ("cores",)
#: Largest journal read back (bytes): a point's row is about a kilobyte, so this holds some 250,000 points.
MAX_JOURNAL_BYTES = 256 << 20
#: Deepest nesting of a journal's row (a row, its tiling or target edits, a value).
MAX_JOURNAL_DEPTH = 16
#: Part of every point id: bump it when what a row records changes, so old journals are not reused.
ROW_FORMAT = 2
#: Seconds between two looks at the running points (how soon Ctrl-C and the progress bar are served).
POLL_SECONDS = 0.25


class SweepInterrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM: ``signum``) stopped a sweep; every finished point is in the journal (``finished`` of
    ``total``)."""

    def __init__(self, journal: Path, finished: int, total: int, signum: int = signal.SIGINT):
        super().__init__(f"sweep interrupted: {finished} of {total} points finished, kept in {journal}")
        self.journal = journal
        self.finished = finished
        self.total = total
        self.signum = signum


@dataclass(frozen=True)
class BaseConfig:
    """A base run-config of a sweep: where it is, how the table labels it, and its content's digest."""

    path: Path
    label: str
    digest: str
    symbol: str
    target: str
    arg_names: frozenset[str]
    #: Digests of the config's kernel files (module names as they are): an edited kernel's points run again.
    kernel_digests: tuple[str, ...] = ()
    #: Per ``file:`` data entry: (name, the file's content digest, its size and mtime in ns): a changed data file's
    #: points run again, and a worker refuses a file changed since the sweep read it.
    data_files: tuple[tuple[str, str, int, int], ...] = ()


@dataclass(frozen=True)
class SweepSpec:
    """A parsed sweep file."""

    path: Path
    configs: tuple[BaseConfig, ...]
    grid: dict[str, list]
    numerics: bool
    plot_x: str | None
    #: Target files of the ``target`` axis values and of the configs' own targets: value -> (path, digest).
    target_files: dict[str, tuple[str, str]] = field(default_factory=dict)
    #: The source digest of the simulator and its kernels (:func:`sim.files.tuning_cache.model_version`): a
    #: changed timing model or kernel reruns every point.
    model: str = field(default_factory=model_version)

    def points(self) -> list[dict]:
        """Every point of the grid: its base config, one value per axis, and an id naming all its inputs."""
        axes = list(self.grid)
        out = []
        for cfg in self.configs:
            for values in itertools.product(*(self.grid[a] for a in axes)):
                settings = dict(zip(axes, values))
                tfile, tdigest = self.target_files[str(settings.get("target", cfg.target))]
                where = os.path.relpath(cfg.path.resolve(), self.path.parent.resolve())
                data = {name: digest for name, digest, _, _ in cfg.data_files}
                inputs = {"format": ROW_FORMAT, "config": where, "config_sha256": cfg.digest,
                          "target_sha256": tdigest, "settings": settings, "numerics": self.numerics,
                          "kernels_sha256": list(cfg.kernel_digests), "data_sha256": data,
                          "model_version": self.model}
                key = json.dumps(inputs, sort_keys=True, default=str)
                out.append({"id": hashlib.sha256(key.encode()).hexdigest()[:16], "config": str(cfg.path),
                            "config_label": cfg.label, "config_sha256": cfg.digest, "target_file": tfile,
                            "target_sha256": tdigest, "settings": settings, "numerics": self.numerics,
                            "kernels_sha256": list(cfg.kernel_digests), "data_sha256": data,
                            "data_stamps": {name: [size, mtime] for name, _, size, mtime in cfg.data_files},
                            "model_version": self.model})
        return out


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _sweep_target(value: Any, sweep_dir: Path, where: str) -> tuple[str, str]:
    """The target file a ``target`` value names (a chip name, or a path relative to ``sweep_dir``) and its
    content's digest."""
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{where}: expected a chip name or a target YAML path, got {quote(value)}")
    try:
        p = resolve_target_path(value, relative_to=sweep_dir)
    except TargetError as e:
        raise ConfigError(f"{where}: {e}") from None
    return str(p), _digest(read_yaml_bytes(p, str(p), ConfigError, "target file"))


def _short(text: str) -> str:
    """A key or path from the user's file, cut for a one-line message."""
    return text if len(text) <= 80 else text[:80] + "..."


def _symbol_args(symbol: str, where: str) -> frozenset[str]:
    """The argument names ``symbol`` takes: the kernel's own and core_mask (_s) or core (_p)."""
    try:
        sym = find_symbol(symbol)
    except SimError as e:
        raise ConfigError(f"{where}: {e}") from None
    return frozenset(a.name for a in sym.kernel.args) | {"core_mask" if sym.variant == "s" else "core"}


def load_sweep(path: str | Path, *, allow_kernels: bool | None = None) -> SweepSpec:
    """Parse and check a sweep file (ConfigError naming the file and key).

    ``allow_kernels`` is :func:`~sim.tools.config.load_config`'s, for every base config: their ``kernels:``
    are imported (here, to look their symbols up, and by the workers) only when it is True, or None and
    ``$DSPSIM_ALLOW_KERNELS`` allows them.
    """
    p = Path(path)
    text = decode_yaml_bytes(read_yaml_bytes(p, str(p), ConfigError, "sweep file"), str(p), ConfigError,
                             "sweep file")
    spec = decode(load_yaml(text, str(p), ConfigError), SweepFile, str(p), ConfigError, top_scalars=False)
    grid = spec.grid or {}
    for axis, values in grid.items():
        _check_axis(p, axis, values)
    configs = _load_configs(p, spec.configs, grid, allow_kernels)
    numerics = spec.numerics
    plot_x = spec.plot.x if spec.plot is not None else None
    if plot_x is not None and plot_x not in grid and plot_x not in RESULT_AXES:
        raise ConfigError(f"{p}: plot.x: {quote(plot_x)} is neither an axis of the grid nor one of "
                          f"{', '.join(RESULT_AXES)}")
    target_files = {}
    for i, value in enumerate(grid.get("target", [])):
        target_files[str(value)] = _sweep_target(value, p.parent, f"{p}: grid.target[{i}]")
    for cfg in configs:
        if "target" not in grid and cfg.target not in target_files:
            # load_config made a path target absolute; a name stays a name.
            target_files[cfg.target] = _sweep_target(cfg.target, Path(), f"{cfg.path}: target")
    return SweepSpec(path=p, configs=configs, grid=dict(grid), numerics=numerics, plot_x=plot_x,
                     target_files=target_files)


def _check_axis(p: Path, axis: Any, values: Any) -> None:
    """An axis name of a known kind with a non-empty list of values."""
    text = axis if isinstance(axis, str) else ""
    known = (text in ("target", "symbol", CORES_AXIS, TOLERANCE_AXIS)
             or (text.startswith(TILING_KEY) and text[len(TILING_KEY):].isidentifier())
             or (text.startswith(ARGS_KEY) and text[len(ARGS_KEY):].split(".")[0].isidentifier())
             or (text.startswith(TARGET_EDIT) and len(text) > len(TARGET_EDIT)))
    if not known:
        label = _short(axis) if isinstance(axis, str) else quote(axis)
        raise ConfigError(f"{p}: grid.{label}: axes are target, symbol, cores, args.<name>[.<index>], "
                          f"target.<key path>, tiling.<key> or {TOLERANCE_AXIS}")
    if not isinstance(values, list) or not values:
        raise ConfigError(f"{p}: grid.{_short(axis)}: expected a non-empty list of values")
    if axis == CORES_AXIS:
        for i, v in enumerate(values):
            if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 64:
                raise ConfigError(f"{p}: grid.cores[{i}]: expected a number of cores (1..64), got {quote(v)}")
    if axis == "symbol":
        for i, v in enumerate(values):
            if not isinstance(v, str):
                raise ConfigError(f"{p}: grid.symbol[{i}]: expected a symbol name, got {quote(v)}")
    # Two equal values would be two points with one id: one row would shadow the other.
    seen = set()
    for i, v in enumerate(values):
        k = json.dumps(v, sort_keys=True, default=str)
        if k in seen:
            raise ConfigError(f"{p}: grid.{_short(axis)}[{i}]: {quote(v)} is listed twice")
        seen.add(k)


def _load_configs(p: Path, raw: list[str], grid: dict, allow_kernels: bool | None) -> tuple[BaseConfig, ...]:
    """The base configs, each checked against the grid's axes (an axis must fit every config)."""
    paths = [Path(c) if Path(c).is_absolute() else p.parent / c for c in raw]
    names = Counter(cp.name for cp in paths)
    seen: dict[Path, int] = {}
    out = []
    for i, (c, cp) in enumerate(zip(raw, paths)):
        real = cp.resolve()
        if real in seen:
            raise ConfigError(f"{p}: configs[{i}]: {_short(c)} is the same file as configs[{seen[real]}]")
        seen[real] = i
        data = read_yaml_bytes(cp, str(cp), ConfigError, f"configs[{i}]: run-config")
        # A broken base config is the sweep file's error, not every point's.
        cfg = load_config(cp, allow_kernels=allow_kernels)
        load_kernels(cfg)  # its own kernels, before its symbol is looked up
        symbols = grid.get("symbol", [cfg.symbol])
        takes = {s: _symbol_args(s, f"{p}: grid.symbol" if "symbol" in grid else f"{cp}: symbol") for s in symbols}
        for axis in grid:
            if axis == CORES_AXIS:
                for s, names_of in takes.items():
                    if "core_mask" not in names_of:
                        raise ConfigError(f"{p}: grid.cores: {s} runs on one core (a _p symbol); sweep args.core "
                                          f"instead")
                if "args.core_mask" in grid:
                    raise ConfigError(f"{p}: grid.cores: both cores and args.core_mask set the core mask; "
                                      f"keep one")
            if not axis.startswith(ARGS_KEY):
                continue
            name, *rest = split_path(axis[len(ARGS_KEY):])
            for s, names_of in takes.items():
                if name not in names_of:
                    raise ConfigError(f"{p}: grid.{_short(axis)}: {s} takes no argument {quote(name)} "
                                      f"(it takes: {', '.join(sorted(names_of))})")
            if rest and name not in cfg.args:
                raise ConfigError(f"{p}: grid.{_short(axis)}: {_short(c)} gives no {_short(name)} to index into; "
                                  f"sweep the whole argument (args.{_short(name)}: [...]) or give it in the config")
        # The file name labels a config in the table, unless two configs share it: then the path as written.
        label = cp.name if names[cp.name] == 1 else c
        out.append(BaseConfig(path=cp, label=label, digest=_digest(data), symbol=cfg.symbol, target=cfg.target,
                              arg_names=frozenset(cfg.args),
                              kernel_digests=tuple(source_digest(k) for k in cfg.kernels),
                              data_files=_data_files(cfg)))
    return tuple(out)


def _data_files(cfg: RunConfig) -> tuple[tuple[str, str, int, int], ...]:
    """(name, content digest, size, mtime in ns) of each ``file:`` data entry of ``cfg``.

    A file that cannot be read (missing, not a .npy array of the entry's shape) gets its error as its digest:
    the point runs, and fails on it if it places it, and a failed point is never reused.
    """
    out = []
    for spec in cfg.data:
        if "file" not in spec.source:
            continue
        try:
            digest = data_file_digest(cfg, spec)
        except ConfigError as e:
            out.append((spec.name, f"unreadable: {e}", -1, -1))
            continue
        st = _data_path(cfg, spec).stat()
        out.append((spec.name, digest, st.st_size, st.st_mtime_ns))
    return tuple(out)


def _data_path(cfg: RunConfig, spec: ArraySpec) -> Path:
    """The file of a ``file:`` data entry (relative to its config's folder unless absolute)."""
    p = Path(spec.source["file"])
    return p if p.is_absolute() else cfg.path.parent / p


def _check_unchanged(cfg: RunConfig, point: dict) -> None:
    """Refuse a point whose simulator sources, kernel files or data files differ from those its id names (they
    changed while the sweep ran, or a Dask worker runs another version of dspsim)."""
    if point.get("model_version") != model_version():
        raise ConfigError(f"this worker's dspsim (source digest {model_version()}) is not the sweep's "
                          f"({point.get('model_version')}): run the sweep with the same version everywhere")
    if [source_digest(k) for k in cfg.kernels] != point.get("kernels_sha256", []):
        raise ConfigError(f"{cfg.path}: a kernel file it names changed while the sweep ran; run the sweep again")
    stamps = point.get("data_stamps", {})
    for spec in cfg.data:
        if "file" not in spec.source or stamps.get(spec.name, [-1])[0] == -1:
            continue  # an unreadable file fails the point when it is placed
        try:
            st = _data_path(cfg, spec).stat()
            now = [st.st_size, st.st_mtime_ns]
        except OSError:
            now = None
        if now != stamps[spec.name]:
            raise ConfigError(f"{cfg.path}: data.{spec.name}.file changed while the sweep ran; run the sweep again")


# --- one point (runs in a worker process) -------------------------------------------------------

def _checked_text(path: str, digest: str, what: str) -> str:
    """A file's text, refused if it changed since the sweep read it (the point's id names its content)."""
    data = read_yaml_bytes(path, path, ConfigError, what)
    if _digest(data) != digest:
        raise ConfigError(f"{path}: the {what} changed while the sweep ran; run the sweep again")
    return decode_yaml_bytes(data, path, ConfigError, what)


def run_point(point: dict) -> dict:
    """Run one sweep point; never raises a SimError or a bug: a failure is returned with its error."""
    from sim.model.layout import enforce_layout
    from sim.tools.runner import (  # imported here: worker processes import the facade on first use
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
        _check_unchanged(cfg, point)
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
        for key, value in target_edits.items():
            set_path(doc, split_path(key), value, f"grid.target.{key}", create=True)
        chip = parse_target(doc, f"{tpath} (swept)" if target_edits else tpath)
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


def _failed_row(point: dict, error: str) -> dict:
    """The row of a point whose worker died before it could report."""
    return {"id": point["id"], "config": point["config_label"], **point["settings"],
            "chip": str(point["settings"].get("target", "")), "error": error, "wall_seconds": 0.0}


# --- executors ----------------------------------------------------------------------------------
# Each calls ``record(row)`` as points finish.  On Ctrl-C it records the points that finished but were not
# recorded yet, cancels the pending ones, stops the workers and re-raises at once: the points that were
# running are lost (they run again on resume), none that finished.

def _init_worker(parent: int) -> None:
    """Set up a local worker process: it dies with ``parent`` (SIGKILL included), leaves Ctrl-C to it, and
    prints nothing on its stdout."""
    # Workers leave Ctrl-C to the parent, which stops them; otherwise each would die mid-point with a traceback.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # A forked worker inherits the parent's SIGTERM handler: its own SIGTERM (from the parent) must end it.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    die_with_parent(parent)
    # What a user's kernel prints in a worker goes to stderr: the sweep's stdout is the parent's.
    with contextlib.suppress(OSError):
        os.dup2(2, 1)
    sys.stdout = sys.stderr


def _stop_workers(pool: cf.ProcessPoolExecutor) -> None:
    """Cancel what has not started and end the worker processes now (not after their current points)."""
    procs = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    terminate = getattr(pool, "terminate_workers", None)  # public from Python 3.14
    if terminate is not None:
        terminate()
        return
    for proc in procs:
        proc.terminate()
    for proc in procs:
        proc.join(timeout=2)


def _result(f: Any, point: dict) -> dict:
    """A finished future's row; a worker that died (killed, out of memory) fails its point."""
    try:
        return f.result()
    except KeyboardInterrupt:
        raise
    except BaseException as e:  # noqa: BLE001 (BrokenProcessPool, a lost Dask worker ...)
        return _failed_row(point, f"internal {type(e).__name__}: {e or 'the worker process died'}")


def _run_serial(points: list[dict], record: Callable[[dict], None], bar: PhaseBar) -> None:
    bar.start()
    for p in points:
        record(run_point(p))  # Ctrl-C interrupts the point itself: it is simply not recorded


def _run_local(points: list[dict], workers: int, record: Callable[[dict], None], bar: PhaseBar) -> None:
    pool = cf.ProcessPoolExecutor(max_workers=workers, initializer=_init_worker, initargs=(os.getpid(),))
    futures: dict[cf.Future, dict] = {}
    recorded: set[cf.Future] = set()
    try:
        futures = {pool.submit(run_point, p): p for p in points}
        bar.start()  # after the workers are forked: no thread of ours is copied into them
        pending = set(futures)
        while pending:
            # A short wait, not a blocking one: Ctrl-C is served within POLL_SECONDS.
            done, pending = cf.wait(pending, timeout=POLL_SECONDS, return_when=cf.FIRST_COMPLETED)
            for f in done:
                record(_result(f, futures[f]))
                recorded.add(f)  # after recording: an interrupt in between records it twice, never not at all
    except KeyboardInterrupt:
        with StopSignalsIgnored():
            for f, p in futures.items():
                if f.done() and not f.cancelled() and f not in recorded:
                    record(_result(f, p))
            _stop_workers(pool)
        raise
    except BaseException:
        _stop_workers(pool)  # the journal cannot be written, say: no worker may outlive the sweep
        raise
    pool.shutdown(wait=True)


def _run_dask(points: list[dict], scheduler: Any, record: Callable[[dict], None], bar: PhaseBar) -> None:
    from distributed import Client
    from distributed import as_completed as dask_completed

    client = scheduler if isinstance(scheduler, Client) else Client(scheduler)
    futures: list = []
    recorded: set[str] = set()
    try:
        futures = client.map(run_point, points, pure=False)  # pure=False: a failed point is never reused
        by_key = {f.key: p for f, p in zip(futures, points)}
        bar.start()
        for f in dask_completed(futures):
            record(_result(f, by_key[f.key]))
            recorded.add(f.key)
    except KeyboardInterrupt:
        with StopSignalsIgnored():
            for f, p in zip(futures, points):
                if f.status == "finished" and f.key not in recorded:
                    record(_result(f, p))
            client.cancel([f for f in futures if f.key not in recorded], force=True)
        raise
    finally:
        if client is not scheduler:
            client.close(timeout=2)


# --- the sweep ----------------------------------------------------------------------------------

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


def run_sweep(spec: SweepSpec, out_dir: str | Path, *, workers: int | None = None, scheduler: Any = None,
              on_point: Callable[[dict], None] | None = None, progress: IO[str] | None = None) -> SweepResult:
    """Run every point that has no successful row with the same id in ``out_dir/points.jsonl``; write the
    table, Parquet and plot.

    ``progress`` is a stream (the CLI passes stderr) on which, when it is a
    terminal, each phase longer than a second shows a bar.  Ctrl-C raises
    :class:`SweepInterrupted` within about a second, every finished point kept.
    """
    # Its table and plot need the sweep extra, and a cluster its Dask: said before any point runs.
    need("sweep", "dspsim sweep", ("pandas", "pyarrow", "matplotlib") + (("distributed",) if scheduler else ()))
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise SimError(f"output {out}: cannot create: {e.strerror or e}") from None
    journal = out / "points.jsonl"
    points = spec.points()
    # Only successes are reused: a failed point runs again (its cause may be fixed outside the inputs).
    done = {r["id"]: r for r in _read_jsonl(journal) if isinstance(r, dict) and "id" in r and not r.get("error")}
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
                _run_dask(todo, scheduler, record, bar)
            elif (workers or os.cpu_count() or 1) <= 1 or len(todo) <= 1:
                _run_serial(todo, record, bar)
            else:
                _run_local(todo, min(workers or os.cpu_count() or 1, len(todo)), record, bar)
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
