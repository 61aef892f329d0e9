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

Every key is declared once, with its type, range and doc, in :class:`ProgramFile` and the structs below it
(read with :func:`sim.files.schema.decode`, as run-configs are); the keys a run-config has beside ``symbol``
and ``args`` (``target``, ``description``, ``numerics``, ``trace``, ``tiling_tolerance``,
``time_limit_seconds``, ``kernels``) are the run-config's own declarations
(:class:`sim.config.schema.CommonFile`) and mean what they mean there.  Errors name the file and the key
path (:class:`~sim.errors.ConfigError`).  Parsing imports nothing and touches no memory: the planner
(:mod:`sim.program.planner`) gives ``auto`` tensors their addresses, the checks (:mod:`sim.program.checks`)
judge the calls, the runner (:mod:`sim.program.runner`) runs them.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import numpy as np

from sim.config import schema as cs
from sim.config.run_config import (
    ArraySpec,
    CommonKeys,
    RunConfig,
    _array_spec,
    _fail,
    _int,
    _tiling,
    check_unique_names,
    common_keys,
)
from sim.errors import ConfigError, brief
from sim.files.schema import Spec, decode, param
from sim.files.yamlsafe import read_yaml_file

if TYPE_CHECKING:
    from sim.program.result import ProgramRun
    from sim.simulator import Simulator

#: The word that leaves a tensor's address to the planner.
AUTO = "auto"
#: Most tensors and most calls one program may have (a layer's backward pass has a few dozen of each).
MAX_TENSORS = 4096
MAX_CALLS = 4096
#: An identifier: a kernel symbol, a region's name.
IDENTIFIER = r"\A[A-Za-z_][A-Za-z0-9_]*\Z"


# --- the schema: every key of a program file declared once ---------------------------------------------------


class TensorEntry(Spec):
    """A ``tensors`` entry: an array that lives in one region of the chip's memory across the calls."""

    name: cs.ArrayName
    shape: cs.Shape
    dtype: cs.Dtype
    region: Annotated[str, param("the region that holds it (ddr, gsm, l2 ...)", pattern=IDENTIFIER,
                                 means="the name of a region of the chip (ddr, gsm, l2 ...)",
                                 absent="the chip's largest shared storage region")] | None = None
    # Either kind of value: checked after the schema (_tensor), so that a bad one is told what both kinds take.
    addr: Annotated[int | str, param("the address of its first byte, or `auto`: the planner's", unit="address",
                                     hexa=True)] = "auto"
    core: cs.Core | None = None


class TensorData(Spec):
    """A ``data`` entry naming a tensor: the tensor's bytes from one source (its shape, dtype and place are the
    tensor's); ``name`` names it in messages (default: the tensor's)."""

    tensor: Annotated[str, param("the tensor it places")]
    name: cs.ArrayName | None = None
    file: cs.FileSource | None = None
    fill: cs.FillSource | None = None
    random: cs.Random | None = None
    values: cs.ValuesSource = None


class TensorOutput(Spec):
    """An ``outputs`` entry naming a tensor, read back after the last call (saved as ``<stem>.<name>.npy``)."""

    tensor: Annotated[str, param("the tensor it reads back")]
    name: cs.ArrayName | None = None


class CallEntry(Spec):
    """A ``calls`` entry: a kernel symbol and its arguments, whose pointers may name tensors."""

    symbol: Annotated[str, param("kernel symbol", pattern=IDENTIFIER, means="a kernel symbol (an identifier)")]
    args: Annotated[dict[str, Any], param("mapping: argument name → value (a pointer: a tensor's name or an "
                                          "address)")]
    name: Annotated[cs.ArrayName, param("the call's name in tables and traces", absent="`<index>_<symbol>`")] \
        | None = None
    tiling: Annotated[dict[str, Any], param("mapping: tiling key → value", absent="the cost model chooses")] \
        | None = None


class ProgramFile(cs.CommonFile, kw_only=True):
    """A whole program file: the keys it shares with a run-config, its tensors, data, calls and outputs (a
    ``data``/``outputs`` entry names a tensor, or is a run-config's entry at a raw address)."""

    calls: Annotated[list[CallEntry], param("the calls, run back to back in this order", min_length=1,
                                            max_length=MAX_CALLS, items="calls")]
    tensors: Annotated[list[TensorEntry], param("the tensors", max_length=MAX_TENSORS, items="tensors",
                                                absent="none")] | None = None
    data: Annotated[list[dict[str, Any]], param("list of arrays to place: `{tensor: name, <source>}` or a "
                                                "run-config entry", items="arrays to place",
                                                absent="nothing placed")] | None = None
    outputs: Annotated[list[dict[str, Any]], param("list of arrays to save: `{tensor: name}` or a run-config "
                                                   "entry", items="arrays to save",
                                                   absent="nothing saved")] | None = None


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
    #: Whether ``kernels`` may be imported, as :attr:`sim.config.run_config.RunConfig.allow_kernels`.
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
        name -> address), so that the run-config pipeline places and saves them (:mod:`sim.run.runner`)."""
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


def _tensor(p: Path, t: TensorEntry, key: str) -> TensorSpec:
    if isinstance(t.addr, str) and t.addr != AUTO:
        raise _fail(p, f"{key}.addr", f"expected an address (an integer; hex like 0xA0000000 is fine) or {AUTO}, "
                                      f"got {brief(t.addr)}")
    addr = None if isinstance(t.addr, str) else _int(p, t.addr, f"{key}.addr", why=" (addresses are at most 64 bits)")
    if 0 in t.shape:
        # (a tensor of no bytes has no address range: a buffer named by it would be no tensor's, and one planned
        # at its address would land on the next tensor's bytes)
        raise _fail(p, f"{key}.shape", f"a tensor holds at least one element, got shape {list(t.shape)}")
    return TensorSpec(name=t.name, shape=tuple(t.shape), dtype=np.dtype(t.dtype), region=t.region, addr=addr,
                      core=t.core)


def _entry(p: Path, raw: Any, key: str, is_data: bool, tensors: Mapping[str, TensorSpec]) -> Entry:
    """A data or outputs entry: ``{tensor: name, <source>}`` (shape, dtype and place from the tensor), or a
    run-config entry at a raw address; each checked by its schema, then by the run-config's rules."""
    entry_schema: type[cs.Data] | type[cs.Output] = cs.Data if is_data else cs.Output
    if not isinstance(raw, dict) or "tensor" not in raw:
        return Entry(_array_spec(p, raw, decode(raw, entry_schema, str(p), ConfigError, top=key), key))
    named = decode(raw, TensorData, str(p), ConfigError, top=key) if is_data \
        else decode(raw, TensorOutput, str(p), ConfigError, top=key)
    t = tensors.get(named.tensor)
    if t is None:
        raise _fail(p, f"{key}.tensor", f"{named.tensor!r} names no tensor of the program (tensors: "
                                        f"{', '.join(sorted(tensors)) or 'none'})")
    # The tensor's shape and dtype, at a placeholder address: the source is checked as a run-config's is.
    shaped = {k: v for k, v in raw.items() if k != "tensor"}
    shaped.setdefault("name", t.name)
    shaped.update(addr=0, shape=list(t.shape), dtype=t.dtype.name)
    return Entry(_array_spec(p, shaped, decode(shaped, entry_schema, str(p), ConfigError, top=key), key),
                 tensor=t.name)


def _call(p: Path, c: CallEntry, key: str, index: int) -> CallSpec:
    if not all(k.isidentifier() for k in c.args):
        raise _fail(p, f"{key}.args", "expected a mapping of argument name (an identifier) -> value")
    return CallSpec(name=c.name or f"{index}_{c.symbol}", symbol=c.symbol, args=dict(c.args),
                    tiling=_tiling(p, c.tiling, f"{key}.tiling"))


def is_program_file(path: str | Path) -> bool:
    """Whether ``path`` is a program file (a YAML mapping with a top-level ``calls`` key, or ``tensors``, which
    only a program has: its reader then says ``calls`` is missing) rather than a run-config; False for anything
    unreadable (whose reader then says why)."""
    try:
        doc = read_yaml_file(Path(path), str(path), ConfigError, what="program")
    except ConfigError:
        return False
    return isinstance(doc, dict) and ("calls" in doc or "tensors" in doc)


def load_program(path: str | Path, *, allow_kernels: bool | None = None) -> Program:
    """Parse and check a program file (see the module docstring and docs/programs.md).

    ``allow_kernels`` is :func:`sim.config.run_config.load_config`'s: may the file's ``kernels:`` be imported.
    """
    p = Path(path)
    doc = read_yaml_file(p, str(p), ConfigError, what="program")
    top = decode(doc, ProgramFile, str(p), ConfigError, top_scalars=False, named=False)
    common = common_keys(p, top)
    tensors = tuple(_tensor(p, t, f"tensors[{i}]") for i, t in enumerate(top.tensors or ()))
    check_unique_names(p, "tensors", [t.name for t in tensors])
    by_name = {t.name: t for t in tensors}
    calls = tuple(_call(p, c, f"calls[{i}]", i) for i, c in enumerate(top.calls))
    check_unique_names(p, "calls", [c.name for c in calls])
    data = tuple(_entry(p, d, f"data[{i}]", True, by_name) for i, d in enumerate(top.data or ()))
    outputs = tuple(_entry(p, o, f"outputs[{i}]", False, by_name) for i, o in enumerate(top.outputs or ()))
    for key, entries in (("data", data), ("outputs", outputs)):
        check_unique_names(p, key, [e.spec.name for e in entries])
    return Program(path=p, common=common, tensors=tensors, calls=calls, data=data, outputs=outputs,
                   allow_kernels=allow_kernels)


__all__ = ["AUTO", "ProgramFile", "TensorSpec", "CallSpec", "Entry", "Program", "load_program", "is_program_file"]
