"""Run-configs: YAML files naming a target, a kernel symbol, its arguments, the data to place and what to save.

Every key is declared once, with its type, range and doc, in :mod:`sim.config.schema` (read with
:func:`sim.files.schema.decode`); the rules between keys are checked here.  docs/run-config.md describes every
key (its key tables generated from the schema), with a complete example that tests/test_run_config_doc.py runs.

Format::

    target: FT78NE                 # chip name, or a path to a target YAML (relative to this file)
    symbol: fp_batch_norm_grad_s
    numerics: true                 # optional; false = timing only
    args:                          # the C call's arguments by name; addresses as ints (0xA0000000)
      x: 0xA0000000
      params: [0xC0000000, 0xD0000000, 0xE0000000, 0xB1000000, 0xC1000000, 4, 64, 1]
      core_mask: 0xff
    data:                          # placed in memory before the call
      - name: x
        addr: 0xA0000000
        shape: [4, 64]
        dtype: float32
        random: {seed: 1, low: -1.0, high: 1.0}   # or file: x.npy | fill: 0.5 | values: [..]
        core: 0                    # only for private addresses
    outputs:                       # read back after the call and saved as <out_dir>/<stem>.<name>.npy
      - {name: dx, addr: 0xA1000000, shape: [4, 64], dtype: float32}
    trace: bn_shared.json          # optional trace file name (default <config stem>.json)
    tiling:                        # optional: the partition over the cores and the tile sizes
      split: rows                  #   (keys are the kernel's own: see its module docstring)
      tile_elements: 128
    tiling_tolerance: 0.01         # optional: candidates this close to the cheapest tie (0: the cheapest)
    time_limit_seconds: 600        # optional: stop the call (planning and simulating) after this wall-clock time
    kernels: [relu_grad.py]        # optional: Python files (relative to this file) or modules defining kernels

Without ``tiling`` the simulator plans every candidate tiling the kernel lists,
prices each with the cost model (a timing-only run) and keeps the cheapest (or,
among those within ``tiling_tolerance`` of it, the one with the fewest tiles); the
run's summary prints the choice.  A ``tiling`` names the kernel's keys (those a
kernel does not know, or values it cannot take, are refused naming
``tiling.<key>``; a tiling that cannot fit the scratchpad is a layout error);
keys left out are the kernel's own choice.

``kernels`` names kernels of the user's own (docs/writing-a-kernel.md): each entry is a Python file (a value
ending in ``.py`` or holding a ``/``; relative to the config's folder unless absolute) or an importable module
name, imported (and its ``KERNEL`` registered) by :mod:`sim.config.user_kernels` before the call is bound.
Importing runs the file's code, so it is refused unless asked for: ``load_config(path, allow_kernels=True)``,
``--allow-kernels`` on the command line, or ``$DSPSIM_ALLOW_KERNELS=1``.

Errors name the file and the key path (:class:`ConfigError`).
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from sim.config import schema as cs
from sim.config.schema import DTYPES, NAME_PATTERN
from sim.errors import ConfigError, KernelArgError, brief
from sim.files.regular_file import NotRegularFile, open_regular
from sim.files.schema import decode
from sim.files.yamlsafe import read_yaml_file
from sim.model.target_loader import MAX_PATH_CHARS, is_target_path, key_text
from sim.time_limit import checked_time_limit

__all__ = ["DTYPES", "ArraySpec", "CommonKeys", "KernelSource", "RunConfig", "check_data_file", "check_unique_names",
           "common_keys", "data_file_digest", "kernel_source", "load_config"]
#: Largest array a run-config may place or save (bytes); beyond it a typo that would exhaust the host's memory.
MAX_ARRAY_BYTES = 1 << 31
#: Largest address a run-config may give (addresses are at most 64 bits wide in every target).
MAX_ADDRESS = (1 << 64) - 1
#: Largest random seed (numpy takes any non-negative integer; 128 bits are more than enough).
MAX_SEED = (1 << 128) - 1
#: Array and trace names become file names under the output folder: no paths, no hidden files.
NAME_RE = re.compile(NAME_PATTERN)


@dataclass(frozen=True)
class ArraySpec:
    """An array placed before (``data``) or read after (``outputs``) the call."""

    name: str
    addr: int
    shape: tuple[int, ...]
    dtype: np.dtype
    core: int | None = None
    source: dict = field(default_factory=dict)  # data only: random / file / fill / values


@dataclass(frozen=True)
class KernelSource:
    """An entry of a run-config's ``kernels`` list: a Python file (``path``) or a module name (``module``)."""

    text: str  # as the config wrote it (for messages)
    path: Path | None = None
    module: str | None = None


@dataclass(frozen=True)
class RunConfig:
    """A parsed run-config."""

    path: Path
    target: str
    symbol: str
    args: dict
    data: tuple[ArraySpec, ...]
    outputs: tuple[ArraySpec, ...]
    trace: str
    numerics: bool = True
    description: str = ""
    tiling: dict | None = None  # the kernel's tiling keys; None: the cost model chooses
    tiling_tolerance: float | None = None  # the cost model's tie tolerance; None: the simulator's default
    kernels: tuple[KernelSource, ...] = ()  # user kernels to import before binding
    #: Whether ``kernels`` may be imported (their code run): True or False, or None for the environment's
    #: word ($DSPSIM_ALLOW_KERNELS; :func:`sim.config.user_kernels.load_kernels` decides and refuses).
    allow_kernels: bool | None = None
    time_limit_seconds: float | None = None  # the call's wall-clock limit; None: none

    def materialise(self, spec: ArraySpec, out: np.ndarray | None = None) -> np.ndarray:
        """The array a ``data`` entry describes (seeded random, a .npy file, a fill value, or literal values).

        ``out`` (an array of the entry's shape and dtype, such as a view of simulated memory) receives seeded
        random values in place, after the entry is checked; the result is then ``out`` itself.
        """
        src = spec.source
        where = f"{self.path}: data.{spec.name}"
        if "random" in src:
            return _random(spec, src["random"] or {}, where, out)
        if "fill" in src:
            return np.full(spec.shape, _fill_value(spec, src["fill"], where), dtype=spec.dtype)
        if "values" in src:
            return _values(spec, src["values"], where)
        return _load_npy(self.path, spec, src["file"], where)


def _values(spec: ArraySpec, values: object, where: str) -> np.ndarray:
    """A ``values:`` source's array: numbers of the entry's shape, each one a value of its dtype (an integer
    dtype's an integer in its range, a float dtype's no finite number past its largest: as ``fill`` is checked)."""
    try:
        given = np.asarray(values)
        if given.dtype.kind == "O" and all(type(v) is int for v in given.flat):  # (past 64 bits)
            if spec.dtype.kind in "iu":
                info = np.iinfo(spec.dtype)
                raise ValueError(f"a value leaves its range [{info.min}, {info.max}]")
            given = given.astype(np.float64)
        if given.dtype.kind not in "iufb" or given.shape != spec.shape:
            raise ValueError(f"got shape {list(given.shape)}" if given.dtype.kind in "iufb" else "not all numbers")
        if spec.dtype.kind in "iu":
            info = np.iinfo(spec.dtype)
            bad = ~np.isfinite(given) | (given != np.floor(given)) if given.dtype.kind == "f" else None
            if bad is not None and bad.any():
                raise ValueError(f"{brief(given[bad].flat[0].item())} is not an integer")
            if given.size and (given.min() < info.min or given.max() > info.max):
                raise ValueError(f"a value leaves its range [{info.min}, {info.max}]")
        elif spec.dtype.kind == "f" and given.size:
            wide = given.astype(np.float64)
            finite = np.abs(wide[np.isfinite(wide)])
            if finite.size and finite.max() > float(np.finfo(spec.dtype).max):
                raise ValueError(f"{brief(finite.max().item())} overflows {spec.dtype}")
        return given.astype(spec.dtype)
    except (TypeError, ValueError, OverflowError) as e:
        raise ConfigError(f"{where}.values: not {len(spec.shape)}-d {spec.dtype} numbers of shape "
                          f"{list(spec.shape)}: {e}") from None


def _random_range(spec: ArraySpec, r: dict, where: str) -> tuple[int | float, int | float]:
    """A ``random:`` source's bounds, checked against its dtype: an integer dtype's whole numbers in them."""
    low, high = r.get("low", -1.0), r.get("high", 1.0)
    if low > high:
        raise ConfigError(f"{where}.random: low ({brief(low)}) is above high ({brief(high)})")
    if spec.dtype.kind in "iu":
        info = np.iinfo(spec.dtype)
        lo, hi = math.ceil(low), math.floor(high)
        if lo > hi or lo < info.min or hi > info.max:
            raise ConfigError(f"{where}.random: [{brief(low)}, {brief(high)}] holds no {spec.dtype} value or leaves "
                              f"its range [{info.min}, {info.max}]")
        return lo, hi
    if not math.isfinite(high - low) or max(abs(low), abs(high)) > float(np.finfo(spec.dtype).max):
        raise ConfigError(f"{where}.random: [{brief(low)}, {brief(high)}] does not fit {spec.dtype}")
    return float(low), float(high)


def check_source(spec: ArraySpec, where: str) -> None:
    """Refuse a ``fill``, ``random`` or ``values`` source that does not fit the entry's dtype (as placing it
    would: so ``validate`` refuses what ``run`` refuses; a ``file`` is :func:`check_data_file`'s)."""
    src = spec.source
    if "fill" in src:
        _fill_value(spec, src["fill"], where)
    elif "random" in src:
        _random_range(spec, src["random"] or {}, where)
    elif "values" in src:
        _values(spec, src["values"], where)


def _random(spec: ArraySpec, r: dict, where: str, out: np.ndarray | None = None) -> np.ndarray:
    rng = np.random.default_rng(r.get("seed", 0))
    lo, hi = _random_range(spec, r, where)
    if spec.dtype.kind in "iu":
        ints = rng.integers(int(lo), int(hi), size=spec.shape, endpoint=True, dtype=spec.dtype)
        if out is None:
            return ints
        out[...] = ints
        return out
    return _uniform(rng, float(lo), float(hi), np.empty(spec.shape, spec.dtype) if out is None else out)


#: Doubles drawn per step of :func:`_uniform`: large enough to amortise the call, small enough to stay in cache.
RANDOM_CHUNK_ELEMENTS = 1 << 20


def _uniform(rng: np.random.Generator, low: float, high: float, out: np.ndarray) -> np.ndarray:
    """``out`` filled with ``rng.uniform(low, high, out.shape)`` converted to its dtype, a chunk at a time.

    The generator hands out its doubles in sequence, so the values are the very ones a single call gives; a
    layer-sized tensor then never holds a float64 copy of itself (twice its bytes for fp32, four times for
    fp16), and each chunk is converted while it is still in cache.
    """
    flat = out.reshape(-1)  # a view: ``out`` is dense
    for start in range(0, flat.size, RANDOM_CHUNK_ELEMENTS):
        stop = min(start + RANDOM_CHUNK_ELEMENTS, flat.size)
        flat[start:stop] = rng.uniform(low, high, size=stop - start)
    return out


def _fill_value(spec: ArraySpec, v: int | float, where: str) -> int | float:
    if spec.dtype.kind in "iu":
        info = np.iinfo(spec.dtype)
        if not (isinstance(v, int) or (math.isfinite(v) and float(v).is_integer())) \
                or not info.min <= int(v) <= info.max:
            raise ConfigError(f"{where}.fill: {brief(v)} is not a {spec.dtype} value ([{info.min}, {info.max}])")
        return int(v)
    if math.isfinite(v) and abs(v) > float(np.finfo(spec.dtype).max):
        raise ConfigError(f"{where}.fill: {brief(v)} overflows {spec.dtype}")
    return v  # NaN and inf are legal float fills (to test how a kernel propagates them)


def _load_npy(config_path: Path, spec: ArraySpec, file: str, where: str) -> np.ndarray:
    """A .npy file's array, its header checked against the spec before the data is read."""
    with _open_npy(config_path, spec, file, f"{where}.file") as (f, shown):
        try:
            f.seek(0)
            arr = np.load(f, allow_pickle=False)
        except (OSError, ValueError, EOFError) as e:
            raise ConfigError(f"{where}.file: {shown} is not a readable .npy array: {brief(str(e), 160)[1:-1]}") \
                from None
    if not isinstance(arr, np.ndarray) or arr.shape != spec.shape:
        raise ConfigError(f"{where}.file: {shown} holds no complete array of shape {list(spec.shape)}")
    return arr


@contextlib.contextmanager
def _open_npy(config_path: Path, spec: ArraySpec, file: str, where: str) -> Iterator[tuple[BinaryIO, str]]:
    """The .npy file of a ``file:`` entry, open, its header read and checked against ``spec``; yields the
    file and the path as messages show it.  ``where`` names the key (``<config>: data.<name>.file``).

    Only a regular file is opened (a named pipe would block, ``/dev/zero`` never end), checked on the
    open file itself, before any byte is read.
    """
    p = Path(file)
    if not p.is_absolute():
        p = config_path.parent / p
    shown = str(p) if len(str(p)) <= 200 else brief(str(p), 200)
    try:
        f = open_regular(p)
    except FileNotFoundError:
        raise ConfigError(f"{where}: {shown} does not exist") from None
    except NotRegularFile as e:
        raise ConfigError(f"{where}: {shown} {e}") from None
    except (OSError, ValueError) as e:
        raise ConfigError(f"{where}: {shown} cannot be read: {brief(str(e), 160)[1:-1]}") from None
    with f:
        try:
            version = np.lib.format.read_magic(f)
            if version == (1, 0):
                shape, _, dtype = np.lib.format.read_array_header_1_0(f)
            elif version == (2, 0):
                shape, _, dtype = np.lib.format.read_array_header_2_0(f)
            else:
                raise ValueError(f"unsupported .npy version {version}")
        except (OSError, ValueError, EOFError) as e:
            raise ConfigError(f"{where}: {shown} is not a readable .npy array: {brief(str(e), 160)[1:-1]}") \
                from None
        if tuple(shape) != spec.shape:
            raise ConfigError(f"{where}: {shown} has shape {list(shape)}, the config says {list(spec.shape)}")
        if dtype != spec.dtype:
            raise ConfigError(f"{where}: {shown} has dtype {dtype}, the config says {spec.dtype}")
        yield f, shown


def _finite_number(v: Any) -> bool:
    """A YAML int or float that converts to a finite float (YAML ints can be arbitrarily large)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return False
    try:
        return math.isfinite(float(v))
    except OverflowError:
        return False


def _fail(path: Path, key: str, msg: str) -> ConfigError:
    return ConfigError(f"{path}: {key}: {msg}")


def _int(path: Path, value: Any, key: str, minimum: int = 0, maximum: int = MAX_ADDRESS, why: str = "") -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(path, key, f"expected an integer (hex like 0xA0000000 is fine), got {brief(value)}")
    if value < minimum:
        raise _fail(path, key, f"must be >= {minimum}, got {brief(value)}")
    if value > maximum:
        raise _fail(path, key, f"must be <= {maximum:#x}{why}, got {brief(value)}" if maximum == MAX_ADDRESS
                    else f"must be <= {maximum}{why}, got {brief(value)}")
    return value


def _array_spec(path: Path, raw: dict, entry: cs.Data | cs.Output, key: str) -> ArraySpec:
    """A ``data`` or ``outputs`` entry the schema accepted (``raw`` as the file gives it): the rules between its
    keys checked (one source, a shape that fits, ``low`` not above ``high``, 64-bit addresses and seeds)."""
    addr = _int(path, entry.addr, f"{key}.addr", why=" (addresses are at most 64 bits)")
    dtype = np.dtype(entry.dtype)
    shape = _shape(path, entry.shape, f"{key}.shape", dtype)
    src: dict = {}
    if isinstance(entry, cs.Data):
        sources = ("file", "fill", "random", "values")
        given = [k for k in sources if k in raw]
        if len(given) != 1:
            raise _fail(path, key, f"give exactly one of {', '.join(sources)} (got {given or 'none'})")
        src = {given[0]: raw[given[0]]}
        r = entry.random
        if r is not None:
            for k in ("low", "high"):
                if not math.isfinite(getattr(r, k)):
                    raise _fail(path, f"{key}.random.{k}", f"expected a finite number, got {brief(raw['random'][k])}")
            _int(path, r.seed, f"{key}.random.seed", maximum=MAX_SEED, why=" (a 128-bit seed)")
            if r.low > r.high:
                raise _fail(path, f"{key}.random", f"low ({brief(r.low)}) is above high ({brief(r.high)})")
        if entry.fill is not None and not _finite_number(entry.fill) and isinstance(entry.fill, int):
            raise _fail(path, f"{key}.fill", f"expected a number, got {brief(entry.fill)}")
    spec = ArraySpec(name=entry.name, addr=addr, shape=shape, dtype=dtype, core=entry.core, source=src)
    check_source(spec, f"{path}: {key}")
    return spec


def _shape(path: Path, raw: list[int], key: str, dtype: np.dtype) -> tuple[int, ...]:
    """A shape whose array fits :data:`MAX_ARRAY_BYTES`: checked per dimension and for the whole.

    A zero-size array passes a bytes check whatever its other dimensions, but numpy still refuses to build
    ``[0, 2**62, 2**62]`` ("array is too big"): so each dimension alone, and the product of the non-zero
    ones, must fit as well.
    """
    most = MAX_ARRAY_BYTES // dtype.itemsize
    shape = tuple(_int(path, s, f"{key}[{i}]", maximum=most,
                       why=f" (the elements of a {dtype} array of at most {MAX_ARRAY_BYTES} bytes)")
                  for i, s in enumerate(raw))
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes > MAX_ARRAY_BYTES:
        raise _fail(path, key, f"{list(shape)} of {dtype} is {nbytes} bytes, more than the "
                               f"{MAX_ARRAY_BYTES} bytes a run-config may place or save")
    nonzero = math.prod(d for d in shape if d)
    if nonzero > most:
        raise _fail(path, key, f"{list(shape)}: an empty array, but its other dimensions hold {nonzero} "
                               f"elements, more than a {dtype} array of at most {MAX_ARRAY_BYTES} bytes")
    return shape


def _tiling(path: Path, raw: dict | None, key: str = "tiling") -> dict | None:
    """The optional ``tiling`` mapping: key (an identifier) -> a number, string, boolean or list of them.

    Which keys and values a kernel takes is the kernel's to check when it plans.  ``key`` names it in messages.
    """
    if raw is None:
        return None
    for k, v in raw.items():
        if not k.isidentifier():
            raise _fail(path, f"{key}.{key_text(str(k))}", "expected a key that is an identifier")
        items = v if isinstance(v, list) else [v]
        if not all(isinstance(x, (int, float, str, bool)) for x in items):
            raise _fail(path, f"{key}.{k}", f"expected a number, string, boolean or a list of them, got {brief(v)}")
    return dict(raw)


def kernel_source(text: str, folder: Path) -> KernelSource:
    """A ``kernels`` entry: a Python file (ending in ``.py`` or holding a ``/``; relative to ``folder`` unless
    absolute), which must exist, or a module name (dotted identifiers); ValueError saying why not otherwise."""
    if text.endswith(".py") or "/" in text or "\\" in text:
        p = Path(text)
        p = p if p.is_absolute() else folder / p
        if not p.is_file():
            raise ValueError(f"{brief(str(p), 200)[1:-1]} is not a file (a Python file defining a kernel)")
        return KernelSource(text, path=p)
    if all(part.isidentifier() for part in text.split(".")):
        return KernelSource(text, module=text)
    raise ValueError(f"{brief(text)} is neither a Python file (ending in .py) nor a module name (dotted "
                     f"identifiers)")


def _kernel_sources(path: Path, raw: list[str] | None) -> tuple[KernelSource, ...]:
    """The optional ``kernels`` list: Python files (relative to the config's folder) or module names."""
    if raw is None:
        return ()
    out = []
    for i, entry in enumerate(raw):
        key = f"kernels[{i}]"
        if not entry or not entry.isprintable() or len(entry) > MAX_PATH_CHARS:
            raise _fail(path, key, f"expected a Python file or a module name (one line of at most "
                                   f"{MAX_PATH_CHARS} characters), got {brief(entry)}")
        try:
            out.append(kernel_source(entry, path.parent))
        except ValueError as e:
            raise _fail(path, key, str(e)) from None
    return tuple(out)


def load_config(path: str | Path, *, allow_kernels: bool | None = None) -> RunConfig:
    """Parse and check a run-config file.

    ``allow_kernels`` True lets the config's ``kernels:`` entries be imported (their code run), False refuses
    them, None leaves it to ``$DSPSIM_ALLOW_KERNELS``; parsing never imports anything.
    """
    p = Path(path)
    doc = read_yaml_file(p, str(p), ConfigError, what="run-config")
    if isinstance(doc, dict) and "configs" in doc and "grid" in doc:  # (its keys would each be "unknown")
        raise ConfigError(f"{p}: a sweep file (it has configs and grid), not a run-config: run it with dspsim sweep "
                          f"(docs/sweeps.md)")
    top = decode(doc, cs.RunConfigFile, str(p), ConfigError, top_scalars=False, named=False)
    if not all(k.isidentifier() for k in top.args):
        raise _fail(p, "args", "expected a mapping of argument name (an identifier) -> value")
    common = common_keys(p, top)
    tiling = _tiling(p, top.tiling)
    data_specs = tuple(_array_spec(p, doc["data"][i], d, f"data[{i}]") for i, d in enumerate(top.data or ()))
    out_specs = tuple(_array_spec(p, doc["outputs"][i], o, f"outputs[{i}]") for i, o in enumerate(top.outputs or ()))
    for key, specs in (("data", data_specs), ("outputs", out_specs)):
        check_unique_names(p, key, [spec.name for spec in specs])
    return RunConfig(
        path=p, target=common.target, symbol=top.symbol, args=dict(doc["args"]),
        data=data_specs, outputs=out_specs,
        trace=common.trace, numerics=common.numerics, description=common.description, tiling=tiling,
        tiling_tolerance=common.tiling_tolerance,
        kernels=common.kernels, allow_kernels=allow_kernels,
        time_limit_seconds=common.time_limit_seconds)


@dataclass(frozen=True)
class CommonKeys:
    """The top-level keys a run-config and a program file (:mod:`sim.program.schema`) share, checked
    (:class:`sim.config.schema.CommonFile` declares them)."""

    target: str  # a chip name, or the path of a target file (relative paths resolved against the file's folder)
    description: str
    numerics: bool
    trace: str
    tiling_tolerance: float | None
    time_limit_seconds: float | None
    kernels: tuple[KernelSource, ...]


def common_keys(p: Path, top: cs.CommonFile) -> CommonKeys:
    """The shared keys of file ``p`` as the schema read them, with the rules the schema cannot state: a
    target path relative to the file's folder, the trace's default name, the time limit, the kernel files."""
    target = top.target
    if is_target_path(target):
        tp = Path(target)
        target = str(tp if tp.is_absolute() else p.parent / tp)
    try:
        time_limit = checked_time_limit(top.time_limit_seconds, "")
    except KernelArgError as e:
        raise _fail(p, "time_limit_seconds", str(e)) from None
    return CommonKeys(target=target, description=top.description or "", numerics=top.numerics,
                      trace=f"{p.stem}.json" if top.trace is None else top.trace,
                      tiling_tolerance=None if top.tiling_tolerance is None else float(top.tiling_tolerance),
                      time_limit_seconds=time_limit, kernels=_kernel_sources(p, top.kernels))


def check_unique_names(p: Path, key: str, names: list[str]) -> None:
    """ConfigError naming ``<key>[i].name`` at the first name of ``names`` that an earlier entry has."""
    seen: set[str] = set()
    for i, name in enumerate(names):
        if name in seen:
            raise _fail(p, f"{key}[{i}].name", f"duplicate name {name!r}")
        seen.add(name)


def check_data_file(cfg: RunConfig, spec: ArraySpec) -> None:
    """Check a ``file:`` data entry without reading its data: a regular file holding a .npy array whose header
    states the entry's shape and dtype.  ConfigError naming ``data.<name>.file`` otherwise (``validate``
    refuses what placing the data would refuse, without reading large files)."""
    with _open_npy(cfg.path, spec, spec.source["file"], f"{cfg.path}: data.{spec.name}.file"):
        pass


def data_file_digest(cfg: RunConfig, spec: ArraySpec) -> str:
    """The SHA-256 of a ``file:`` data entry's whole file, its header checked first as placing it checks it
    (ConfigError naming ``data.<name>.file`` as :func:`check_data_file`); read a chunk at a time."""
    with _open_npy(cfg.path, spec, spec.source["file"], f"{cfg.path}: data.{spec.name}.file") as (f, _):
        f.seek(0)
        h = hashlib.sha256()
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
        return h.hexdigest()
