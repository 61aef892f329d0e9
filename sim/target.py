"""Chip descriptions: frozen dataclasses built only by :func:`load_target` from a YAML file.

Every field carries its unit.  The loader checks types, required keys, positive
sizes, non-overlapping regions inside the address width, and rejects unknown
keys, naming the file and the key path of the first problem.  No SimPy here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

from sim.errors import TargetError
from sim.yamlsafe import load_yaml

#: Folder of the chip files shipped with dspsim: ``sim/targets/`` once installed from a wheel (package
#: data, see pyproject.toml), the checkout's top-level ``targets/`` in a source tree or an editable install.
_SIM_DIR = Path(__file__).resolve().parent
TARGETS_DIR = _SIM_DIR / "targets" if (_SIM_DIR / "targets").is_dir() else _SIM_DIR.parent / "targets"

REGION_KINDS = ("shared", "private")
REGION_ROLES = ("storage", "scratchpad")
#: Smallest bandwidth a target may give (bytes/cycle); below it transfer times overflow into nonsense.
MIN_RATE = 1e-3


def key_text(key: str) -> str:
    """A key as it may appear in a one-line message: itself when plain, else its repr (no raw newlines)."""
    return key if key.isidentifier() else repr(key)


def _hint(v: Any) -> str:
    """A hint for a YAML string that was meant as a number (YAML 1.1 reads ``1e9`` as a string)."""
    if isinstance(v, str):
        try:
            float(v)
        except ValueError:
            return ""
        return " (YAML read it as a string: write exponents with a decimal point, e.g. 1.0e9)"
    return ""


@dataclass(frozen=True)
class PrecisionModel:
    """Vector throughput of one core at one precision."""

    lanes: int
    fmac_units: int

    @property
    def peak_flops_per_cycle(self) -> int:
        """Element operations per cycle: lanes x FMAC units x 2 (a multiply-add counts two)."""
        return self.lanes * self.fmac_units * 2


@dataclass(frozen=True)
class CoreModel:
    """One DSP core's compute timing.

    ``vector_efficiency`` (0 < e <= 1, default 1) is the fraction of the vector
    peak a tile's inner loop achieves: a calibration knob for boards whose
    kernels run below the lanes x FMAC peak.
    """

    precisions: Mapping[str, PrecisionModel]
    vector_width_bytes: int
    vector_op_latency_cycles: int
    reduction_latency_cycles: int
    loop_overhead_cycles: int
    vector_efficiency: float = 1.0

    def peak_fraction_cycles(self, flops: int, precision: str) -> int:
        """Cycles of ``flops`` element operations at the achieved fraction of the vector peak."""
        peak = self.precisions[precision].peak_flops_per_cycle * self.vector_efficiency
        return math.ceil(flops / peak)


@dataclass(frozen=True)
class DmaModel:
    """The DMA engines of each core."""

    engines_per_core: int
    setup_cycles: int


@dataclass(frozen=True)
class Region:
    """A mapped address range.

    ``kind`` is ``shared`` (one backing store seen by every core, contended
    through ``ports``) or ``private`` (one backing store per core at the same
    addresses).  ``role`` ``scratchpad`` marks kernel staging memory that call
    buffers may not use.  ``bandwidth_bytes_per_cycle`` is the region's total;
    each of its ``ports`` serves an equal share of it.  ``burst_bytes`` is the
    smallest unit the region moves: a DMA whose contiguous runs are shorter
    (a strided slice of a few channels per row) still pays whole bursts.
    """

    name: str
    base: int
    size_bytes: int
    kind: str
    role: str
    latency_cycles: int
    bandwidth_bytes_per_cycle: float
    ports: int
    alignment_bytes: int
    burst_bytes: int = 1

    def burst_bytes_for(self, runs: int, run_bytes: int) -> int:
        """Bytes the region moves for ``runs`` contiguous runs of ``run_bytes`` each (whole bursts)."""
        return runs * (-(-run_bytes // self.burst_bytes) * self.burst_bytes)

    @property
    def end(self) -> int:
        """One past the last address of the region."""
        return self.base + self.size_bytes

    @property
    def shared(self) -> bool:
        """True for memory every core sees at the same bytes."""
        return self.kind == "shared"

    @property
    def port_bandwidth_bytes_per_cycle(self) -> float:
        """Bandwidth one port delivers."""
        return self.bandwidth_bytes_per_cycle / self.ports

    def contains(self, addr: int, size_bytes: int) -> bool:
        """True when ``[addr, addr + size_bytes)`` lies wholly inside the region."""
        return self.base <= addr and addr + size_bytes <= self.end


@dataclass(frozen=True)
class Workspace:
    """The window of a shared region reserved for cross-core partial results."""

    region: str
    offset_bytes: int
    size_bytes: int


@dataclass(frozen=True)
class Target:
    """A whole chip: cores, clock, memory map, DMA, synchronisation costs."""

    name: str
    path: str
    clock_hz: int
    address_bits: int
    cores: int
    launch_overhead_cycles: int
    barrier_latency_cycles: int
    core: CoreModel
    dma: DmaModel
    regions: tuple[Region, ...]
    staging_region: str
    workspace: Workspace

    @property
    def precisions(self) -> tuple[str, ...]:
        """Precision names the cores compute in."""
        return tuple(self.core.precisions)

    @property
    def all_cores_mask(self) -> int:
        """The core_mask with every core set."""
        return (1 << self.cores) - 1

    def region(self, name: str) -> Region:
        """The region called ``name``."""
        for r in self.regions:
            if r.name == name:
                return r
        raise KeyError(name)

    @property
    def workspace_range(self) -> tuple[int, int]:
        """``(base, end)`` of the shared workspace window."""
        r = self.region(self.workspace.region)
        base = r.base + self.workspace.offset_bytes
        return base, base + self.workspace.size_bytes


# --- loading ---------------------------------------------------------------------------------

class _Reader:
    """Walks a parsed YAML mapping, checking keys and types, naming file and key path in errors."""

    def __init__(self, path: str):
        self.path = path

    def fail(self, key_path: str, message: str) -> TargetError:
        return TargetError(f"{self.path}: {key_path}: {message}")

    def mapping(self, value: Any, key_path: str, required: set[str], optional: set[str] = frozenset()) -> dict:
        if not isinstance(value, dict):
            raise self.fail(key_path, f"expected a mapping, got {type(value).__name__}")
        for k in value:
            if not isinstance(k, str):
                raise self.fail(key_path, f"key {k!r} is not a string")
        unknown = sorted(set(value) - required - optional)
        if unknown:
            raise self.fail(f"{key_path}.{key_text(unknown[0])}",
                            f"unknown key (allowed: {', '.join(sorted(required | optional))})")
        missing = sorted(required - set(value))
        if missing:
            raise self.fail(f"{key_path}.{missing[0]}", "required key is missing")
        return value

    def integer(self, m: dict, key: str, key_path: str, *, minimum: int = 0, maximum: int | None = None) -> int:
        v = m[key]
        if isinstance(v, bool) or not isinstance(v, int):
            raise self.fail(f"{key_path}.{key}", f"expected an integer, got {v!r}{_hint(v)}")
        if v < minimum:
            raise self.fail(f"{key_path}.{key}", f"must be >= {minimum}, got {v}")
        if maximum is not None and v > maximum:
            raise self.fail(f"{key_path}.{key}", f"must be <= {maximum}, got {v}")
        return v

    def number(self, m: dict, key: str, key_path: str, *, minimum: float = MIN_RATE) -> float:
        v = m[key]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            raise self.fail(f"{key_path}.{key}", f"expected a positive finite number, got {v!r}{_hint(v)}")
        if v < minimum:
            raise self.fail(f"{key_path}.{key}", f"must be >= {minimum:g}, got {v!r} (a typo, not a chip)")
        return float(v)

    def string(self, m: dict, key: str, key_path: str, choices: tuple[str, ...] | None = None) -> str:
        v = m[key]
        if not isinstance(v, str) or not v:
            raise self.fail(f"{key_path}.{key}", f"expected a non-empty string, got {v!r}")
        if key != "source" and not v.isprintable():
            # Names end up in messages that must stay on one line.
            raise self.fail(f"{key_path}.{key}", f"expected printable text without line breaks, got {v!r}")
        if choices is not None and v not in choices:
            raise self.fail(f"{key_path}.{key}", f"expected one of {', '.join(choices)}, got {v!r}")
        return v

    def source(self, m: dict, key_path: str) -> None:
        """Every group of numbers must say where they come from."""
        self.string(m, "source", key_path)


def _parse(doc: Any, path: str) -> Target:
    r = _Reader(path)
    top = r.mapping(doc, "<top>", {"name", "clock_hz", "address_bits", "cores", "sync", "core", "dma",
                                   "regions", "staging_region", "workspace", "source"},
                    {"description"})
    r.source(top, "<top>")
    name = r.string(top, "name", "<top>")
    clock_hz = r.integer(top, "clock_hz", "<top>", minimum=1)
    address_bits = r.integer(top, "address_bits", "<top>", minimum=8, maximum=64)
    cores = r.integer(top, "cores", "<top>", minimum=1, maximum=64)

    sync = r.mapping(top["sync"], "sync", {"launch_overhead_cycles", "barrier_latency_cycles", "source"})
    r.source(sync, "sync")

    cm = r.mapping(top["core"], "core", {"precisions", "vector_width_bytes", "vector_op_latency_cycles",
                                         "reduction_latency_cycles", "loop_overhead_cycles", "source"},
                   {"vector_efficiency"})
    r.source(cm, "core")
    precs_raw = r.mapping(cm["precisions"], "core.precisions", set(), {"fp32", "fp16"})
    if not precs_raw:
        raise r.fail("core.precisions", "at least one precision (fp32, fp16) is required")
    precisions = {}
    for pname, pm in precs_raw.items():
        kp = f"core.precisions.{pname}"
        pm = r.mapping(pm, kp, {"lanes", "fmac_units"})
        precisions[pname] = PrecisionModel(lanes=r.integer(pm, "lanes", kp, minimum=1),
                                           fmac_units=r.integer(pm, "fmac_units", kp, minimum=1))
    core = CoreModel(
        precisions=MappingProxyType(precisions),
        vector_width_bytes=r.integer(cm, "vector_width_bytes", "core", minimum=1),
        vector_op_latency_cycles=r.integer(cm, "vector_op_latency_cycles", "core"),
        reduction_latency_cycles=r.integer(cm, "reduction_latency_cycles", "core"),
        loop_overhead_cycles=r.integer(cm, "loop_overhead_cycles", "core"),
        vector_efficiency=r.number(cm, "vector_efficiency", "core") if "vector_efficiency" in cm else 1.0,
    )
    if core.vector_efficiency > 1:
        raise r.fail("core.vector_efficiency", f"is a fraction of the peak, at most 1, got {core.vector_efficiency}")
    if core.vector_width_bytes & (core.vector_width_bytes - 1):
        raise r.fail("core.vector_width_bytes", f"must be a power of two, got {core.vector_width_bytes}")

    dm = r.mapping(top["dma"], "dma", {"engines_per_core", "setup_cycles", "source"})
    r.source(dm, "dma")
    dma = DmaModel(engines_per_core=r.integer(dm, "engines_per_core", "dma", minimum=1, maximum=64),
                   setup_cycles=r.integer(dm, "setup_cycles", "dma"))

    regs_raw = top["regions"]
    if not isinstance(regs_raw, list) or not regs_raw:
        raise r.fail("regions", "expected a non-empty list of regions")
    regions: list[Region] = []
    limit = 1 << address_bits
    for i, rm in enumerate(regs_raw):
        # Name the region in key paths as soon as its name is readable, even before the keys are checked.
        named = isinstance(rm, dict) and isinstance(rm.get("name"), str) and rm["name"].isprintable()
        kp = f"regions[{i}]" + (f"({rm['name']})" if named else "")
        rm = r.mapping(rm, kp, {"name", "base", "size_bytes", "kind", "latency_cycles",
                                "bandwidth_bytes_per_cycle", "source"},
                       {"role", "ports", "alignment_bytes", "burst_bytes"})
        r.source(rm, kp)
        rname = r.string(rm, "name", kp)
        kp = f"regions[{i}]({rname})"
        kind = r.string(rm, "kind", kp, REGION_KINDS)
        role = r.string(rm, "role", kp, REGION_ROLES) if "role" in rm else "storage"
        region = Region(
            name=rname,
            base=r.integer(rm, "base", kp),
            size_bytes=r.integer(rm, "size_bytes", kp, minimum=1),
            kind=kind,
            role=role,
            latency_cycles=r.integer(rm, "latency_cycles", kp),
            bandwidth_bytes_per_cycle=r.number(rm, "bandwidth_bytes_per_cycle", kp),
            ports=r.integer(rm, "ports", kp, minimum=1, maximum=1024) if "ports" in rm else 1,
            alignment_bytes=r.integer(rm, "alignment_bytes", kp, minimum=1) if "alignment_bytes" in rm else 1,
            burst_bytes=r.integer(rm, "burst_bytes", kp, minimum=1, maximum=1 << 20) if "burst_bytes" in rm else 1,
        )
        if region.alignment_bytes & (region.alignment_bytes - 1):
            raise r.fail(f"{kp}.alignment_bytes", f"must be a power of two, got {region.alignment_bytes}")
        if region.end > limit:
            raise r.fail(f"{kp}.size_bytes", f"region {region.base:#x}..{region.end:#x} ends past the "
                                             f"{address_bits}-bit address space ({limit:#x})")
        for other in regions:
            if other.name == rname:
                raise r.fail(f"{kp}.name", f"duplicate region name {rname!r}")
            if region.base < other.end and other.base < region.end:
                raise r.fail(kp, f"region {rname} [{region.base:#x}, {region.end:#x}) overlaps region "
                                 f"{other.name} [{other.base:#x}, {other.end:#x})")
        regions.append(region)
    by_name = {reg.name: reg for reg in regions}

    staging = r.string(top, "staging_region", "<top>")
    if staging not in by_name:
        raise r.fail("staging_region", f"names no region ({', '.join(by_name)})")
    if by_name[staging].kind != "private" or by_name[staging].role != "scratchpad":
        raise r.fail("staging_region", f"region {staging} must be private with role scratchpad")

    wm = r.mapping(top["workspace"], "workspace", {"region", "offset_bytes", "size_bytes", "source"})
    r.source(wm, "workspace")
    workspace = Workspace(region=r.string(wm, "region", "workspace"),
                          offset_bytes=r.integer(wm, "offset_bytes", "workspace"),
                          size_bytes=r.integer(wm, "size_bytes", "workspace", minimum=1))
    wreg = by_name.get(workspace.region)
    if wreg is None or wreg.kind != "shared":
        raise r.fail("workspace.region", f"must name a shared region, got {workspace.region!r}")
    if workspace.offset_bytes + workspace.size_bytes > wreg.size_bytes:
        raise r.fail("workspace.size_bytes", f"window runs past the end of region {wreg.name}")

    return Target(
        name=name, path=path, clock_hz=clock_hz, address_bits=address_bits, cores=cores,
        launch_overhead_cycles=r.integer(sync, "launch_overhead_cycles", "sync"),
        barrier_latency_cycles=r.integer(sync, "barrier_latency_cycles", "sync"),
        core=core, dma=dma, regions=tuple(sorted(regions, key=lambda g: g.base)),
        staging_region=staging, workspace=workspace,
    )


def available_targets() -> list[str]:
    """Names of the chip files shipped in ``targets/``."""
    return sorted(p.stem for p in TARGETS_DIR.glob("*.yaml"))


def _resolve(name_or_path: str | Path) -> Path:
    if isinstance(name_or_path, Path) or any(c in str(name_or_path) for c in "/\\") \
            or str(name_or_path).endswith((".yaml", ".yml")):
        p = Path(name_or_path)
        if not p.is_file():
            raise TargetError(f"{p}: target file not found")
        return p
    if not isinstance(name_or_path, str) or not name_or_path:
        raise TargetError(f"target: expected a chip name or a YAML path, got {name_or_path!r}")
    for p in TARGETS_DIR.glob("*.yaml"):
        if p.stem.lower() == name_or_path.lower():
            return p
    raise TargetError(f"unknown target {name_or_path!r} (known: {', '.join(available_targets())}; "
                      f"or pass a path to a YAML file)")


def load_target(name_or_path: "str | Path | Target") -> Target:
    """Load a chip by name (case-insensitive, from ``targets/``) or from a YAML file path."""
    if isinstance(name_or_path, Target):
        return name_or_path
    if not isinstance(name_or_path, (str, Path)):
        raise TargetError(f"target: expected a chip name or a YAML path, got {type(name_or_path).__name__}")
    path = _resolve(name_or_path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise TargetError(f"{path}: cannot read target file: {e}") from None
    return _parse(load_yaml(text, str(path), TargetError), str(path))


def parse_target(doc: Any, path: str = "<memory>") -> Target:
    """Build a Target from an already-parsed YAML document (used by tools that edit a copy)."""
    return _parse(doc, path)
