"""Run-configs: YAML files naming a target, a kernel symbol, its arguments, the data to place and what to save.

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

Errors name the file and the key path (:class:`ConfigError`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from sim.errors import ConfigError

DTYPES = ("float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
#: Largest array a run-config may ask to generate (elements); beyond it a typo, not a test.
MAX_ELEMENTS = 1 << 31


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

    def materialise(self, spec: ArraySpec) -> np.ndarray:
        """The array a ``data`` entry describes (seeded random, a .npy file, a fill value, or literal values)."""
        src = spec.source
        where = f"{self.path}: data.{spec.name}"
        if "random" in src:
            r = src["random"] or {}
            rng = np.random.default_rng(r.get("seed", 0))
            low, high = r.get("low", -1.0), r.get("high", 1.0)
            if spec.dtype.kind in "iu":
                return rng.integers(int(low), int(high), size=spec.shape, endpoint=True).astype(spec.dtype)
            return rng.uniform(low, high, size=spec.shape).astype(spec.dtype)
        if "fill" in src:
            return np.full(spec.shape, src["fill"], dtype=spec.dtype)
        if "values" in src:
            try:
                arr = np.asarray(src["values"], dtype=spec.dtype)
            except (TypeError, ValueError) as e:
                raise ConfigError(f"{where}.values: {e}") from None
            if arr.shape != spec.shape:
                raise ConfigError(f"{where}.values: shape {list(arr.shape)} does not match shape {list(spec.shape)}")
            return arr
        p = Path(src["file"])
        if not p.is_absolute():
            p = self.path.parent / p
        try:
            arr = np.load(p, allow_pickle=False)
        except FileNotFoundError:
            raise ConfigError(f"{where}.file: {p} does not exist") from None
        except (OSError, ValueError) as e:
            raise ConfigError(f"{where}.file: {p} is not a readable .npy array: {e}") from None
        if arr.shape != spec.shape:
            raise ConfigError(f"{where}.file: {p} has shape {list(arr.shape)}, the config says {list(spec.shape)}")
        if arr.dtype != spec.dtype:
            raise ConfigError(f"{where}.file: {p} has dtype {arr.dtype}, the config says {spec.dtype}")
        return arr


def _fail(path: Path, key: str, msg: str) -> ConfigError:
    return ConfigError(f"{path}: {key}: {msg}")


def _mapping(path: Path, value: Any, key: str, required: set[str], optional: set[str]) -> dict:
    if not isinstance(value, dict):
        raise _fail(path, key, f"expected a mapping, got {type(value).__name__}")
    unknown = sorted(str(k) for k in set(value) - required - optional)
    if unknown:
        raise _fail(path, f"{key}.{unknown[0]}", f"unknown key (allowed: {', '.join(sorted(required | optional))})")
    missing = sorted(required - set(value))
    if missing:
        raise _fail(path, f"{key}.{missing[0]}", "required key is missing")
    return value


def _int(path: Path, value: Any, key: str, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(path, key, f"expected an integer (hex like 0xA0000000 is fine), got {value!r}")
    if value < minimum:
        raise _fail(path, key, f"must be >= {minimum}, got {value}")
    return value


def _array_spec(path: Path, raw: Any, key: str, is_data: bool) -> ArraySpec:
    sources = {"random", "file", "fill", "values"}
    m = _mapping(path, raw, key, {"name", "addr", "shape", "dtype"}, {"core"} | (sources if is_data else set()))
    name = m["name"]
    if not isinstance(name, str) or not name:
        raise _fail(path, f"{key}.name", f"expected a non-empty string, got {name!r}")
    addr = _int(path, m["addr"], f"{key}.addr")
    shape_raw = m["shape"]
    if not isinstance(shape_raw, list):
        raise _fail(path, f"{key}.shape", f"expected a list of sizes, got {shape_raw!r}")
    shape = tuple(_int(path, s, f"{key}.shape[{i}]") for i, s in enumerate(shape_raw))
    if math.prod(shape) > MAX_ELEMENTS:
        raise _fail(path, f"{key}.shape", f"{list(shape)} has more than {MAX_ELEMENTS} elements")
    if m["dtype"] not in DTYPES:
        raise _fail(path, f"{key}.dtype", f"expected one of {', '.join(DTYPES)}, got {m['dtype']!r}")
    core = _int(path, m["core"], f"{key}.core") if m.get("core") is not None else None
    src: dict = {}
    if is_data:
        given = sorted(sources & set(m))
        if len(given) != 1:
            raise _fail(path, key, f"give exactly one of {', '.join(sorted(sources))} (got {given or 'none'})")
        src = {given[0]: m[given[0]]}
        if "random" in src:
            r = _mapping(path, src["random"] or {}, f"{key}.random", set(), {"seed", "low", "high"})
            for k in ("low", "high"):
                if k in r and (isinstance(r[k], bool) or not isinstance(r[k], (int, float))
                               or not math.isfinite(r[k])):
                    raise _fail(path, f"{key}.random.{k}", f"expected a finite number, got {r[k]!r}")
            if "seed" in r:
                _int(path, r["seed"], f"{key}.random.seed")
        if "file" in src and not isinstance(src["file"], str):
            raise _fail(path, f"{key}.file", f"expected a path string, got {src['file']!r}")
        if "fill" in src and (isinstance(src["fill"], bool) or not isinstance(src["fill"], (int, float))):
            raise _fail(path, f"{key}.fill", f"expected a number, got {src['fill']!r}")
    return ArraySpec(name=name, addr=addr, shape=shape, dtype=np.dtype(m["dtype"]), core=core, source=src)


def load_config(path: str | Path) -> RunConfig:
    """Parse and check a run-config file."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{p}: run-config not found") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{p}: cannot read run-config: {e}") from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"{p}: not valid YAML: {str(e).splitlines()[0]}") from None
    top = _mapping(p, doc, "<top>", {"target", "symbol", "args"},
                   {"data", "outputs", "trace", "numerics", "description"})
    for k in ("target", "symbol"):
        if not isinstance(top[k], str) or not top[k]:
            raise _fail(p, k, f"expected a non-empty string, got {top[k]!r}")
    if not isinstance(top["args"], dict) or not all(isinstance(k, str) for k in top["args"]):
        raise _fail(p, "args", "expected a mapping of argument name -> value")
    target = top["target"]
    if any(c in target for c in "/\\") or target.endswith((".yaml", ".yml")):
        tp = Path(target)
        target = str(tp if tp.is_absolute() else p.parent / tp)
    data = top.get("data") or []
    outputs = top.get("outputs") or []
    for key, val in (("data", data), ("outputs", outputs)):
        if not isinstance(val, list):
            raise _fail(p, key, f"expected a list, got {type(val).__name__}")
    numerics = top.get("numerics", True)
    if not isinstance(numerics, bool):
        raise _fail(p, "numerics", f"expected true or false, got {numerics!r}")
    trace = top.get("trace", f"{p.stem}.json")
    if not isinstance(trace, str) or not trace or "/" in trace or "\\" in trace:
        raise _fail(p, "trace", f"expected a file name (written under the output folder), got {trace!r}")
    return RunConfig(
        path=p, target=target, symbol=top["symbol"], args=dict(top["args"]),
        data=tuple(_array_spec(p, d, f"data[{i}]", True) for i, d in enumerate(data)),
        outputs=tuple(_array_spec(p, o, f"outputs[{i}]", False) for i, o in enumerate(outputs)),
        trace=trace, numerics=numerics, description=str(top.get("description", "")))
