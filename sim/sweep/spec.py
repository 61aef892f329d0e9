"""A sweep file read and checked: its base run-configs, the grid's axes, and the points of the grid, each
named by a digest of everything that decides its result (see :mod:`sim.sweep`)."""

from __future__ import annotations

import contextlib
import copy
import hashlib
import itertools
import json
import math
import os
import signal
from collections import Counter
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

from sim.config.run_config import ArraySpec, RunConfig, data_file_digest, load_config
from sim.config.user_kernels import load_kernels, source_digest
from sim.env_flags import check_switches
from sim.errors import ConfigError, SimError, TargetError
from sim.files.docedit import quote, set_path, split_path
from sim.files.schema import decode
from sim.files.tuning_cache import model_version
from sim.files.yamlsafe import decode_yaml_bytes, load_yaml, read_yaml_bytes
from sim.model.target import Target
from sim.model.target_loader import parse_target, resolve_target_path
from sim.program.schema import is_program_file
from sim.simulator import find_symbol
from sim.sweep.schema import SweepFile

TARGET_EDIT = "target."
TILING_KEY = "tiling."
ARGS_KEY = "args."
TOLERANCE_AXIS = "tiling_tolerance"
CORES_AXIS = "cores"
#: Columns of the result table that a plot may also put on x.
RESULT_AXES = ("cores",)
#: Most combinations of the target-edit axes checked on load per target file; past it each value is checked once
#: (with the other axes' first values), and a combination's own conflicts are judged when its point runs.
MAX_CHECKED_TARGET_EDITS = 1024
#: Part of every point id: bump it when what a row records changes, so old journals are not reused.
ROW_FORMAT = 2


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


def content_digest(data: bytes) -> str:
    """The digest that names a file's content in a point's id."""
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
    return str(p), content_digest(read_yaml_bytes(p, str(p), ConfigError, "target file"))


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

    ``allow_kernels`` is :func:`~sim.config.run_config.load_config`'s, for every base config: their ``kernels:``
    are imported (here, to look their symbols up, and by the workers) only when it is True, or None and
    ``$DSPSIM_ALLOW_KERNELS`` allows them.
    """
    p = Path(path)
    text = decode_yaml_bytes(read_yaml_bytes(p, str(p), ConfigError, "sweep file"), str(p), ConfigError,
                             "sweep file")
    check_switches()  # (each point would fail on a switch set to neither on nor off: refused here, once)
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
    _check_target_edits(p, grid, [path for path, _ in target_files.values()])
    return SweepSpec(path=p, configs=configs, grid=dict(grid), numerics=numerics, plot_x=plot_x,
                     target_files=target_files)


def swept_target(doc: dict, edits: dict[str, Any], path: str, where: str = "grid") -> Target:
    """The chip of target document ``doc`` (read from ``path``; edited in place) with each ``target.<key path>``
    edit of ``edits`` (key path -> value) applied; a key the file lacks may be one its format leaves to a default.
    Errors name ``where`` and the key."""
    for key, value in edits.items():
        set_path(doc, split_path(key), value, f"{where}.target.{key}", create=True)
    return parse_target(doc, f"{path} (swept)" if edits else path)


def _check_target_edits(p: Path, grid: dict, target_paths: list[str]) -> None:
    """Every combination of the grid's ``target.<key path>`` values applied to each target file the sweep runs,
    each judged by the target's own checks, so that a key the file format lacks (``target.nope``) or a value it
    refuses stops the sweep on load rather than failing its points one by one."""
    axes = [(axis[len(TARGET_EDIT):], values) for axis, values in grid.items() if axis.startswith(TARGET_EDIT)]
    if not axes:
        return
    if math.prod(len(values) for _, values in axes) <= MAX_CHECKED_TARGET_EDITS:
        combos: list[tuple] = list(itertools.product(*(values for _, values in axes)))
    else:  # each value once, beside the other axes' first values
        firsts = [values[0] for _, values in axes]
        combos = [tuple(firsts[:j] + [v] + firsts[j + 1:]) for j, (_, values) in enumerate(axes) for v in values]
    for path in dict.fromkeys(target_paths):
        doc = load_yaml(decode_yaml_bytes(read_yaml_bytes(path, path, ConfigError, "target file"), path,
                                          ConfigError, "target file"), path, TargetError)
        for combo in combos:
            edits = {key: value for (key, _), value in zip(axes, combo)}
            try:
                swept_target(copy.deepcopy(doc), edits, path, f"{p}: grid")
            except TargetError as e:
                point = ", ".join(f"target.{k}={json.dumps(v, default=str)}" for k, v in edits.items())
                point = point if len(point) <= 300 else point[:300] + "..."
                raise ConfigError(f"{p}: grid: the target file refuses {point}: {e}") from None


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
    if axis == TOLERANCE_AXIS:  # as a run-config's tiling_tolerance (and the simulator) takes it
        for i, v in enumerate(values):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < 1:
                raise ConfigError(f"{p}: grid.{TOLERANCE_AXIS}[{i}]: expected a fraction in [0, 1), got {quote(v)}")
    if axis == "symbol":
        for i, v in enumerate(values):
            if not isinstance(v, str):
                raise ConfigError(f"{p}: grid.symbol[{i}]: expected a symbol name, got {quote(v)}")
    # Two equal values would be two points of one meaning (or with one id: one row would shadow the other).
    seen = set()
    for i, v in enumerate(values):
        k = _value_key(axis, v)
        if k in seen:
            raise ConfigError(f"{p}: grid.{_short(axis)}[{i}]: {quote(v)} is listed twice")
        seen.add(k)


def _value_key(axis: str, v: object) -> object:
    """What an axis value means, for telling two listed values apart: numbers by value (12 and 12.0 are one),
    a target by the file it names (chip names are case-insensitive: ``ft78ne`` is FT78NE), anything else as its
    JSON."""
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        with contextlib.suppress(ValueError, OverflowError):  # (NaN and the infinities: as their JSON)
            return ("number", Fraction(v))
    if axis == "target" and isinstance(v, str):
        with contextlib.suppress(SimError, OSError):  # (one that names no target file is refused later)
            return ("target", str(Path(resolve_target_path(v)).resolve()))
    return ("json", json.dumps(v, sort_keys=True, default=str))


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
        if is_program_file(cp):
            raise ConfigError(f"{p}: configs[{i}]: {_short(c)} is a program (it has calls): a sweep's points are "
                              f"run-configs, one call each; sweep each call of the program as a run-config")
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
            _check_index(p, axis, c, name, cfg.args.get(name), rest)
        # The file name labels a config in the table, unless two configs share it: then the path as written.
        label = cp.name if names[cp.name] == 1 else c
        out.append(BaseConfig(path=cp, label=label, digest=content_digest(data), symbol=cfg.symbol, target=cfg.target,
                              arg_names=frozenset(cfg.args),
                              kernel_digests=tuple(source_digest(k) for k in cfg.kernels),
                              data_files=_data_files(cfg)))
    return tuple(out)


def _check_index(p: Path, axis: str, config: str, name: str, value: Any, path: list[str]) -> None:
    """An ``args.<name>.<index>...`` axis whose indices the config's list argument ``name`` has (every point would
    fail setting it otherwise)."""
    for i, key in enumerate(path):
        if not isinstance(value, list):
            return  # (a mapping, or a value the point replaces: judged when the point sets it)
        if not key.isdigit() or int(key) >= len(value):
            where = ".".join(["args", name, *path[:i]])
            raise ConfigError(f"{p}: grid.{_short(axis)}: {_short(config)} gives {_short(where)} as a list of "
                              f"{len(value)} elements: it has no element {_short(key)}")
        value = value[int(key)]


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


def check_unchanged(cfg: RunConfig, point: dict) -> None:
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


