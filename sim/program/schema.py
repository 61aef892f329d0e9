"""Program files: one YAML naming a chip, the tensors that live in its memory, and the kernel calls over them.

docs/programs.md describes every key.  Format::

    target: FT78NE
    kernels: [../../examples/relu_grad.py]   # user kernels, as in a run-config
    tensors:                                 # what lives in the chip's memory across the calls
      - {name: x, shape: [2, 8, 8, 64], dtype: float32, region: ddr}            # addr: auto (the planner's)
      - {name: w, shape: [1, 1, 64, 16], dtype: float32, region: ddr, addr: 0xA0000000}
    data:                                    # placed before the first call
      - {tensor: x, random: {seed: 1}}       # a tensor's bytes; or a run-config entry (name, addr, shape ...)
    calls:                                   # run back to back, in this order
      - name: relu                           # optional (default: <index>_<symbol>)
        symbol: fp_relu_grad_s
        args: {dy: dout, x: x, dx: dx, shape: [2, 8, 8, 64]}   # pointers name tensors, or raw addresses
        tiling: {tile_elements: 1024}        # optional, as in a run-config
    outputs:                                 # read back after the last call
      - {tensor: dx}

The keys a run-config has beside ``symbol`` and ``args`` (``target``, ``description``, ``numerics``, ``trace``,
``tiling_tolerance``, ``time_limit_seconds``, ``kernels``) mean what they mean there
(:func:`sim.tools.config.common_keys` reads them for both).  Errors name the file and the key path
(:class:`~sim.errors.ConfigError`).  Parsing imports nothing and touches no memory: the planner
(:mod:`sim.program.planner`) gives ``auto`` tensors their addresses, the checks (:mod:`sim.program.checks`)
judge the calls, the runner (:mod:`sim.program.runner`) runs them.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from sim.errors import ConfigError, brief
from sim.files.yamlsafe import read_yaml_file
from sim.model.target_loader import MAX_CORES
from sim.tools.config import (
    DTYPES,
    NAME_RE,
    ArraySpec,
    CommonKeys,
    RunConfig,
    _array_spec,
    _fail,
    _int,
    _mapping,
    _shape,
    _tiling,
    check_unique_names,
    common_keys,
    listed,
)

if TYPE_CHECKING:
    from sim.program.result import ProgramRun
    from sim.simulator import Simulator

#: The word that leaves a tensor's address to the planner.
AUTO = "auto"
#: The keys of a program file's top level (``calls`` is what tells a program from a run-config).
PROGRAM_KEYS = {"target", "calls"}
OPTIONAL_KEYS = {"tensors", "data", "outputs", "trace", "numerics", "description", "tiling_tolerance", "kernels",
                 "time_limit_seconds"}
#: Sources of a data entry (as in a run-config).
SOURCES = ("random", "file", "fill", "values")
#: Most tensors and most calls one program may have (a layer's backward pass has a few dozen of each).
MAX_TENSORS = 4096
MAX_CALLS = 4096


@dataclass(frozen=True)
class TensorSpec:
    """A tensor of a program: an array that lives in one region of the chip's memory across calls.

    ``addr`` None: ``auto``, placed by the planner.  ``core``: the core whose copy of a private region holds it
    (None in shared memory).  ``region`` None: the chip's largest shared storage region.
    """

    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    region: str | None
    addr: int | None
    core: int | None = None

    @property
    def size_bytes(self) -> int:
        """Bytes the tensor occupies."""
        return math.prod(self.shape) * self.dtype.itemsize


@dataclass(frozen=True)
class CallSpec:
    """One call of a program: a kernel symbol and its arguments (pointers may name tensors)."""

    name: str
    symbol: str
    args: Mapping[str, Any]
    tiling: dict | None = None


@dataclass(frozen=True)
class Entry:
    """A ``data`` or ``outputs`` entry: the array (its address a placeholder while ``tensor`` is not placed)
    and the tensor it names (None: an entry at a raw address, as in a run-config)."""

    spec: ArraySpec
    tensor: str | None = None

    def resolved(self, tensors: Mapping[str, TensorSpec], addrs: Mapping[str, int]) -> ArraySpec:
        """The entry's array at its tensor's planned address (itself for a raw entry)."""
        if self.tensor is None:
            return self.spec
        t = tensors[self.tensor]
        return dataclasses.replace(self.spec, addr=addrs[self.tensor], core=t.core)


@dataclass(frozen=True)
class Program:
    """A parsed program file (see the module docstring)."""

    path: Path
    common: CommonKeys
    tensors: tuple[TensorSpec, ...]
    calls: tuple[CallSpec, ...]
    data: tuple[Entry, ...]
    outputs: tuple[Entry, ...]
    #: Whether ``kernels`` may be imported, as :attr:`sim.tools.config.RunConfig.allow_kernels`.
    allow_kernels: bool | None = None

    @property
    def name(self) -> str:
        """The program's name: its file's stem."""
        return self.path.stem

    @property
    def target(self) -> str:
        """The chip name, or the path of its target file."""
        return self.common.target

    @property
    def numerics(self) -> bool:
        """False: timing only, as a run-config's ``numerics``."""
        return self.common.numerics

    def tensor(self, name: str) -> TensorSpec:
        """The tensor called ``name``."""
        for t in self.tensors:
            if t.name == name:
                return t
        raise KeyError(name)

    def as_run_config(self, addrs: Mapping[str, int]) -> RunConfig:
        """A run-config holding the program's data and outputs at their planned addresses (``addrs``: tensor
        name -> address), so that the run-config pipeline places and saves them (:mod:`sim.tools.runner`)."""
        by_name = {t.name: t for t in self.tensors}
        c = self.common
        return RunConfig(path=self.path, target=c.target, symbol="", args={},
                         data=tuple(e.resolved(by_name, addrs) for e in self.data),
                         outputs=tuple(e.resolved(by_name, addrs) for e in self.outputs), trace=c.trace,
                         numerics=c.numerics, description=c.description, tiling_tolerance=c.tiling_tolerance,
                         kernels=c.kernels, allow_kernels=self.allow_kernels, time_limit_seconds=c.time_limit_seconds)

    def run(self, simulator: Simulator, **options: Any) -> ProgramRun:
        """Run the program on ``simulator`` (:func:`sim.program.runner.run_program`; what
        ``Simulator.run_program(program)`` calls)."""
        from sim.program.runner import run_program
        return run_program(self, simulator, **options)


def _tensor(p: Path, raw: Any, key: str) -> TensorSpec:
    m = _mapping(p, raw, key, {"name", "shape", "dtype"}, {"region", "addr", "core"})
    name = m["name"]
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise _fail(p, f"{key}.name", f"expected a name of letters, digits, '_', '.', '-', got {brief(name)}")
    if not isinstance(m["dtype"], str) or m["dtype"] not in DTYPES:
        raise _fail(p, f"{key}.dtype", f"expected one of {', '.join(DTYPES)}, got {brief(m['dtype'])}")
    dtype = np.dtype(m["dtype"])
    shape = _shape(p, m["shape"], f"{key}.shape", dtype)
    region = m.get("region")
    if region is not None and (not isinstance(region, str) or not region.isidentifier()):
        raise _fail(p, f"{key}.region", f"expected the name of a region of the chip (ddr, gsm, l2 ...), got "
                                        f"{brief(region)}")
    addr = m.get("addr", AUTO)
    addr = None if addr == AUTO else _int(p, addr, f"{key}.addr", why=" (addresses are at most 64 bits); or auto")
    core = _int(p, m["core"], f"{key}.core", maximum=MAX_CORES - 1, why=" (no chip has more cores)") \
        if m.get("core") is not None else None
    return TensorSpec(name=name, shape=shape, dtype=dtype, region=region, addr=addr, core=core)


def _entry(p: Path, raw: Any, key: str, is_data: bool, tensors: Mapping[str, TensorSpec]) -> Entry:
    """A data or outputs entry: ``{tensor: name, <source>}`` (shape, dtype and place from the tensor; an optional
    ``name`` names the saved file), or a run-config entry at a raw address."""
    if not isinstance(raw, dict) or "tensor" not in raw:
        return Entry(_array_spec(p, raw, key, is_data))
    _mapping(p, raw, key, {"tensor"}, {"name"} | (set(SOURCES) if is_data else set()))
    name = raw["tensor"]
    if not isinstance(name, str) or name not in tensors:
        raise _fail(p, f"{key}.tensor", f"{brief(name)} names no tensor of the program (tensors: "
                                        f"{', '.join(sorted(tensors)) or 'none'})")
    t = tensors[name]
    # The tensor's shape and dtype, at a placeholder address: the source is checked as a run-config's is.
    shaped = {k: v for k, v in raw.items() if k != "tensor"}
    shaped.setdefault("name", name)
    shaped.update(addr=0, shape=list(t.shape), dtype=t.dtype.name)
    return Entry(_array_spec(p, shaped, key, is_data), tensor=name)


def _call(p: Path, raw: Any, key: str, index: int) -> CallSpec:
    m = _mapping(p, raw, key, {"symbol", "args"}, {"name", "tiling"})
    symbol = m["symbol"]
    if not isinstance(symbol, str) or not symbol.isidentifier():
        raise _fail(p, f"{key}.symbol", f"expected a kernel symbol (an identifier), got {brief(symbol)}")
    args = m["args"]
    if not isinstance(args, dict) or not all(isinstance(k, str) and k.isidentifier() for k in args):
        raise _fail(p, f"{key}.args", "expected a mapping of argument name (an identifier) -> value")
    name = m.get("name", f"{index}_{symbol}")
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise _fail(p, f"{key}.name", f"expected a name of letters, digits, '_', '.', '-', got {brief(name)}")
    return CallSpec(name=name, symbol=symbol, args=dict(args), tiling=_tiling(p, m.get("tiling"), f"{key}.tiling"))


def is_program_file(path: str | Path) -> bool:
    """Whether ``path`` is a program file (a YAML mapping with a top-level ``calls`` key) rather than a
    run-config; False for anything unreadable (whose reader then says why)."""
    try:
        doc = read_yaml_file(Path(path), str(path), ConfigError, what="program")
    except ConfigError:
        return False
    return isinstance(doc, dict) and "calls" in doc


def load_program(path: str | Path, *, allow_kernels: bool | None = None) -> Program:
    """Parse and check a program file (see the module docstring and docs/programs.md).

    ``allow_kernels`` is :func:`sim.tools.config.load_config`'s: may the file's ``kernels:`` be imported.
    """
    p = Path(path)
    doc = read_yaml_file(p, str(p), ConfigError, what="program")
    top = _mapping(p, doc, "<top>", PROGRAM_KEYS, OPTIONAL_KEYS)
    common = common_keys(p, top)
    raw_tensors, raw_calls = listed(p, top, "tensors"), listed(p, top, "calls")
    for key, items, most in (("tensors", raw_tensors, MAX_TENSORS), ("calls", raw_calls, MAX_CALLS)):
        if len(items) > most:
            raise _fail(p, key, f"at most {most} entries, got {len(items)}")
    if not raw_calls:
        raise _fail(p, "calls", "a program makes at least one call")
    tensors = tuple(_tensor(p, t, f"tensors[{i}]") for i, t in enumerate(raw_tensors))
    check_unique_names(p, "tensors", [t.name for t in tensors])
    by_name = {t.name: t for t in tensors}
    calls = tuple(_call(p, c, f"calls[{i}]", i) for i, c in enumerate(raw_calls))
    check_unique_names(p, "calls", [c.name for c in calls])
    data = tuple(_entry(p, d, f"data[{i}]", True, by_name) for i, d in enumerate(listed(p, top, "data")))
    outputs = tuple(_entry(p, o, f"outputs[{i}]", False, by_name) for i, o in enumerate(listed(p, top, "outputs")))
    for key, entries in (("data", data), ("outputs", outputs)):
        check_unique_names(p, key, [e.spec.name for e in entries])
    return Program(path=p, common=common, tensors=tensors, calls=calls, data=data, outputs=outputs,
                   allow_kernels=allow_kernels)


__all__ = ["AUTO", "TensorSpec", "CallSpec", "Entry", "Program", "load_program", "is_program_file"]
