"""Loading chip descriptions: :func:`load_target` builds the frozen :mod:`sim.model.target` dataclasses from YAML.

Every key of a target file is declared once, with its type, unit, range and doc, in
:mod:`sim.model.target_schema` (``range_table()`` lists the ranges); :func:`sim.files.schema.decode` checks a
parsed file against it, refusing unknown keys and naming the file and the key path of the first problem.
A file still written for an older model is refused first, saying what replaced the old key
(:mod:`sim.model.target_migrations`: ``vector_op_latency_cycles``, ``vector_efficiency``,
``precisions.*.fmac_units``, ``staging_region``/``workspace``, region ``ports``).  The rules between keys are
checked here, after the schema: regions inside the ``address_bits`` address space, not overlapping, with
unique names and power-of-two alignments; a power-of-two vector width and lane counts; vector loads moving
whole vectors; issue widths keeping each class's units busy; at least one storage precision, and fp16 for
``fp16_fp32acc``.

The staging levels (``staging.levels``, outermost first) are checked too: a level on a shared region is a
window inside it; a level on a private region must be a region with role scratchpad and covers all of it
unless ``offset_bytes``/``size_bytes`` are given; ``beside`` names an earlier per-core level; names are unique;
at least one level is per core; shared levels come first; no two levels overlap; ``takes_free_bytes`` on
shared levels only.

The YAML itself is read by :mod:`sim.files.yamlsafe` (YAML 1.2 numbers, no alias bombs, regular files only).
No SimPy here.
"""

from __future__ import annotations

from pathlib import Path
from types import MappingProxyType
from typing import Any

from sim.errors import TargetError, brief
from sim.files.schema import decode, key_text
from sim.files.yamlsafe import decode_yaml_bytes, load_yaml, read_yaml_bytes
from sim.model import target_schema as ts
from sim.model.target import (
    COMPUTE_PRECISIONS,
    ISSUE_CLASSES,
    STORAGE_PRECISIONS,
    UNIT_CLASSES,
    CoreModel,
    DmaModel,
    DramRows,
    FunctionalUnit,
    PrecisionModel,
    Region,
    StagingLevel,
    Target,
)
from sim.model.target_migrations import refuse_old_keys
from sim.model.target_schema import (  # noqa: F401 (the ranges, as the loader always exported them)
    MAX_CLOCK_HZ,
    MAX_CORES,
    MAX_CYCLES,
    MAX_NAME_CHARS,
    MAX_RATE,
    MIN_CLOCK_HZ,
    MIN_RATE,
)

__all__ = ["TARGETS_DIR", "available_targets", "is_target_path", "key_text", "load_target", "parse_target",
           "resolve_target_path"]

#: Folder of the chip files shipped with dspsim: ``sim/targets/`` once installed from a wheel (package
#: data, see pyproject.toml), the checkout's top-level ``targets/`` in a source tree or an editable install.
_SIM_DIR = Path(__file__).resolve().parent.parent
TARGETS_DIR = _SIM_DIR / "targets" if (_SIM_DIR / "targets").is_dir() else _SIM_DIR.parent / "targets"

#: Longest file path shown whole in a message (no real path is longer; a pasted megabyte is cut).
MAX_PATH_CHARS = 4096


def _power_of_two(n: int) -> bool:
    return n & (n - 1) == 0


def _not_power_of_two(n: int) -> str:
    """The message of a size that must be a power of two, with the nearest ones."""
    low = 1 << (n.bit_length() - 1)
    return f"must be a power of two, got {n} (nearest: {low} or {low * 2})"


class _Checker:
    """The rules between keys, naming the file and the key path of the first broken one."""

    def __init__(self, path: str):
        self.path = path

    def fail(self, key_path: str, message: str) -> TargetError:
        return TargetError(f"{self.path}: {key_path}: {message}")


def _parse(doc: Any, path: str) -> Target:
    c = _Checker(path)
    refuse_old_keys(c.fail, doc)
    spec = decode(doc, ts.TargetFile, path, TargetError)
    core = _core(c, spec.core)
    regions = _regions(c, spec.regions, spec.address_bits)
    return Target(
        name=spec.name, path=path, clock_hz=spec.clock_hz, address_bits=spec.address_bits, cores=spec.cores,
        launch_overhead_cycles=spec.sync.launch_overhead_cycles,
        barrier_latency_cycles=spec.sync.barrier_latency_cycles,
        core=core,
        dma=DmaModel(engines_per_core=spec.dma.engines_per_core, setup_cycles=spec.dma.setup_cycles,
                     engine_bytes_per_cycle=float(spec.dma.engine_bytes_per_cycle),
                     channels_per_core=spec.dma.channels_per_core),
        regions=tuple(sorted(regions, key=lambda g: g.base)),
        staging=_staging(c, spec.staging, {reg.name: reg for reg in regions}),
    )


def _rows(c: _Checker, kp: str, rs: ts.Rows, burst_bytes: int) -> DramRows:
    """A DRAM's rows: a power-of-two row of whole bursts."""
    if not _power_of_two(rs.row_bytes):
        raise c.fail(f"{kp}.row_bytes", _not_power_of_two(rs.row_bytes))
    if rs.row_bytes % burst_bytes:
        raise c.fail(f"{kp}.row_bytes", f"must be a whole number of the region's {burst_bytes}-byte bursts, got "
                                        f"{rs.row_bytes}")
    if (rs.write_to_read_cycles or rs.read_to_write_cycles) and not rs.write_batch_bytes:
        raise c.fail(f"{kp}.write_batch_bytes", "is needed with write_to_read_cycles or read_to_write_cycles: the bus "
                                                "turns once per batch of writes, and without one the turns would "
                                                "never be charged (give the bytes of writes drained per turn)")
    if rs.write_batch_bytes and rs.write_batch_bytes % burst_bytes:
        raise c.fail(f"{kp}.write_batch_bytes", f"must be a whole number of the region's {burst_bytes}-byte bursts, "
                                                f"got {rs.write_batch_bytes}")
    return DramRows(row_bytes=rs.row_bytes, banks=rs.banks, activations_per_window=rs.activations_per_window,
                    window_cycles=rs.window_cycles, bank_busy_cycles=rs.bank_busy_cycles, channels=rs.channels,
                    write_to_read_cycles=rs.write_to_read_cycles, read_to_write_cycles=rs.read_to_write_cycles,
                    write_batch_bytes=rs.write_batch_bytes)


def _regions(c: _Checker, specs: list[ts.Region], address_bits: int) -> list[Region]:
    """The regions, each inside the address space, with a power-of-two alignment, a unique name and no overlap."""
    limit = 1 << address_bits
    space = f" (the {address_bits}-bit address space)"
    regions: list[Region] = []
    for i, rs in enumerate(specs):
        kp = f"regions[{i}]({rs.name})"
        if rs.base > limit - 1:
            raise c.fail(f"{kp}.base", f"must be <= {limit - 1:#x}{space}, got {rs.base:#x}")
        if rs.size_bytes > limit:
            raise c.fail(f"{kp}.size_bytes", f"must be <= {limit:#x}{space}, got {rs.size_bytes:#x}")
        region = Region(name=rs.name, base=rs.base, size_bytes=rs.size_bytes, kind=rs.kind, role=rs.role,
                        latency_cycles=rs.latency_cycles, bandwidth_bytes_per_cycle=float(rs.bandwidth_bytes_per_cycle),
                        alignment_bytes=rs.alignment_bytes, burst_bytes=rs.burst_bytes,
                        rows=None if rs.rows is None else _rows(c, f"{kp}.rows", rs.rows, rs.burst_bytes))
        if not _power_of_two(region.alignment_bytes):
            raise c.fail(f"{kp}.alignment_bytes", _not_power_of_two(region.alignment_bytes))
        if region.end > limit:
            raise c.fail(f"{kp}.size_bytes", f"region {region.base:#x}..{region.end:#x} ends past the "
                                             f"{address_bits}-bit address space ({limit:#x})")
        for other in regions:
            if other.name == rs.name:
                raise c.fail(f"{kp}.name", f"duplicate region name {rs.name!r}")
            if region.base < other.end and other.base < region.end:
                raise c.fail(kp, f"region {rs.name} [{region.base:#x}, {region.end:#x}) overlaps region "
                                 f"{other.name} [{other.base:#x}, {other.end:#x})")
        regions.append(region)
    return regions


def _core(c: _Checker, cs: ts.Core) -> CoreModel:
    """The ``core:`` block: a power-of-two vector width, vector loads of whole vectors, issue widths that keep
    each class's units busy, the precisions' lanes (powers of two, a storage precision, fp16 for fp16_fp32acc)."""
    vector_width = cs.vector_width_bytes
    if not _power_of_two(vector_width):
        raise c.fail("core.vector_width_bytes", _not_power_of_two(vector_width))
    issue_width = {"scalar": cs.issue_width.scalar, "vector": cs.issue_width.vector}
    units: dict[str, FunctionalUnit] = {}
    for uname in UNIT_CLASSES:  # a fixed order: reports list the units the same way on every chip
        us = getattr(cs.units, uname)
        if us is None:
            continue
        store_latency = getattr(us, "store_latency_cycles", None)
        unit = FunctionalUnit(name=uname, count=us.count, issue_class=us.issue_class, latency_cycles=us.latency_cycles,
                              bytes_per_issue=getattr(us, "bytes_per_issue", 0),
                              store_latency_cycles=us.latency_cycles if store_latency is None else store_latency)
        if uname == "vls" and unit.bytes_per_issue % vector_width:
            raise c.fail(f"core.units.{uname}.bytes_per_issue",
                         f"a vector load or store moves whole vectors of core.vector_width_bytes {vector_width}: a "
                         f"multiple of it, got {unit.bytes_per_issue}")
        units[uname] = unit
    for cls in ISSUE_CLASSES:
        widest = max((u for u in units.values() if u.issue_class == cls), key=lambda u: u.count, default=None)
        if widest is not None and widest.count > issue_width[cls]:
            raise c.fail(f"core.issue_width.{cls}", f"{issue_width[cls]} {cls} instructions per cycle cannot keep "
                                                    f"the {widest.count} {widest.name} units of that class busy: "
                                                    f"at least {widest.count} (or fewer {widest.name} units)")
    given = {p: getattr(cs.precisions, p) for p in COMPUTE_PRECISIONS if getattr(cs.precisions, p) is not None}
    if not any(p in given for p in STORAGE_PRECISIONS):
        raise c.fail("core.precisions", f"at least one storage precision ({', '.join(STORAGE_PRECISIONS)}) is "
                                        f"required (allowed: {', '.join(COMPUTE_PRECISIONS)})")
    if "fp16_fp32acc" in given and "fp16" not in given:
        raise c.fail("core.precisions.fp16_fp32acc", "fp16 products accumulated in fp32 need fp16 storage: list "
                                                     "fp16 too")
    for pname, lanes in given.items():
        if not _power_of_two(lanes.lanes):
            raise c.fail(f"core.precisions.{pname}.lanes", _not_power_of_two(lanes.lanes))
    return CoreModel(
        precisions=MappingProxyType({p: PrecisionModel(lanes=lanes.lanes, fmac_units=units["fmac"].count)
                                     for p, lanes in given.items()}),
        vector_width_bytes=vector_width,
        reduction_latency_cycles=cs.reduction_latency_cycles,
        loop_overhead_cycles=cs.loop_overhead_cycles,
        tile_overhead_cycles=cs.tile_overhead_cycles,
        issue_width=MappingProxyType(issue_width),
        units=MappingProxyType(units),
        vector_registers=cs.vector_registers,
    )


def _staging(c: _Checker, ss: ts.Staging, by_name: dict[str, Region]) -> tuple[StagingLevel, ...]:
    """The ``staging`` block: levels outermost first, each a window of a shared region or a private scratchpad
    region (whole unless offset/size are given); names unique; ``beside`` an earlier per-core level; at least
    one per-core level; shared levels before the per-core ones; no two levels' windows overlap."""
    levels: list[StagingLevel] = []
    for i, ls in enumerate(ss.levels):
        name, rname = ls.name, ls.region
        kp = f"staging.levels[{i}]({name})"
        if any(other.name == name for other in levels):
            raise c.fail(f"{kp}.name", f"duplicate level name {name!r}")
        reg = by_name.get(rname)
        if reg is None:
            raise c.fail(f"{kp}.region", f"names no region ({', '.join(by_name)})")
        if reg.shared:
            for key in ("offset_bytes", "size_bytes"):
                if getattr(ls, key) is None:
                    raise c.fail(f"{kp}.{key}", f"required key is missing: a level in shared region {rname} is a "
                                                f"window of it (offset_bytes and size_bytes), never the whole "
                                                f"region call buffers live in")
            if levels and not levels[-1].shared:
                raise c.fail(kp, f"shared level {name} comes after per-core level {levels[-1].name}: levels are "
                                 f"listed outermost first, shared memory before the cores' own")
        elif reg.role != "scratchpad":
            raise c.fail(f"{kp}.region", f"region {rname} is private with role {reg.role}: a per-core level "
                                         f"must be a region with role scratchpad (call buffers may not use it)")
        inside = f" (inside region {rname} of {reg.size_bytes:#x} bytes)"
        offset = 0 if ls.offset_bytes is None else ls.offset_bytes
        if offset > reg.size_bytes - 1:
            raise c.fail(f"{kp}.offset_bytes", f"must be <= {reg.size_bytes - 1:#x}{inside}, got {offset:#x}")
        size = reg.size_bytes - offset if ls.size_bytes is None else ls.size_bytes
        if size > reg.size_bytes:
            raise c.fail(f"{kp}.size_bytes", f"must be <= {reg.size_bytes:#x}{inside}, got {size:#x}")
        if offset + size > reg.size_bytes:
            # Both fit the region alone: the offset places the window, so the offset is what runs it out.
            base = reg.base + offset
            raise c.fail(f"{kp}.offset_bytes",
                         f"window [{base:#x}, {base + size:#x}) (offset_bytes {offset:#x} + size_bytes "
                         f"{size:#x}) runs past the end of region {rname} at {reg.end:#x}: at most "
                         f"{reg.size_bytes - size:#x}")
        beside = ls.beside
        if beside is not None:
            if reg.shared:
                raise c.fail(f"{kp}.beside", "a shared level sits beside no other: only a per-core level "
                                             "(a scalar memory beside the vector one) says beside")
            earlier = next((lv for lv in levels if lv.name == beside), None)
            if earlier is None or earlier.shared or earlier.beside is not None:
                per_core = [lv.name for lv in levels if not lv.shared and lv.beside is None]
                raise c.fail(f"{kp}.beside", f"must name an earlier per-core level that is beside no other "
                                             f"(here: {', '.join(per_core) or 'none'}), got {beside!r}")
        if ls.takes_free_bytes and not reg.shared:
            raise c.fail(f"{kp}.takes_free_bytes", f"only a level of a shared region takes the free bytes of its "
                                                   f"region; {rname} is per-core")
        level = StagingLevel(name=name, region=rname, base=reg.base + offset, size_bytes=size, shared=reg.shared,
                             beside=beside, takes_free_bytes=ls.takes_free_bytes)
        for other in levels:
            if other.region == rname and level.base < other.end and other.base < level.end:
                raise c.fail(kp, f"window [{level.base:#x}, {level.end:#x}) of {rname} overlaps level "
                                 f"{other.name} [{other.base:#x}, {other.end:#x})")
        levels.append(level)
    if all(level.shared for level in levels):
        raise c.fail("staging.levels", "at least one per-core level (a private scratchpad region, where compute "
                                       "operands live) is required")
    return tuple(levels)


def available_targets() -> list[str]:
    """Names of the chip files shipped in ``targets/``."""
    return sorted(p.stem for p in TARGETS_DIR.glob("*.yaml"))


def is_target_path(name_or_path: str | Path) -> bool:
    """Whether a ``target`` value names a file (a path, or a name ending in .yaml/.yml) rather than a chip."""
    text = str(name_or_path)
    return isinstance(name_or_path, Path) or any(c in text for c in "/\\") or text.endswith((".yaml", ".yml"))


def resolve_target_path(name_or_path: str | Path, relative_to: Path | None = None) -> Path:
    """The one rule from a chip name or a target path to its file.

    A path (see :func:`is_target_path`) is taken as it is, or relative to ``relative_to`` (the folder of the
    file that names it) when given and not absolute; TargetError when no such file exists.  A name is a
    shipped chip's, matched case-insensitively; TargetError listing the known chips when there is none.
    """
    if is_target_path(name_or_path):
        p = Path(name_or_path)
        if relative_to is not None and not p.is_absolute():
            p = relative_to / p
        if not p.exists():  # a folder, a pipe or a device exists: the reader refuses it, naming what it is
            raise TargetError(f"{_shown(p)}: target file not found")
        return p
    if not isinstance(name_or_path, str) or not name_or_path:
        raise TargetError(f"target: expected a chip name or a YAML path, got {brief(name_or_path)}")
    for p in TARGETS_DIR.glob("*.yaml"):
        if p.stem.lower() == name_or_path.lower():
            return p
    raise TargetError(f"unknown target {brief(name_or_path, 60)} (known: {', '.join(available_targets())}; "
                      f"or pass a path to a YAML file)")


def load_target(name_or_path: str | Path | Target) -> Target:
    """Load a chip by name (case-insensitive, from ``targets/``) or from a YAML file path."""
    if isinstance(name_or_path, Target):
        return name_or_path
    if not isinstance(name_or_path, (str, Path)):
        raise TargetError(f"target: expected a chip name or a YAML path, got {type(name_or_path).__name__}")
    path = resolve_target_path(name_or_path)
    where = _shown(path)
    data = read_yaml_bytes(path, where, TargetError, what="target file")
    # A target is frozen data: one parse per file content and process serves every simulator made from it.
    key = (where, data)
    target = _PARSED.get(key)
    if target is None:
        target = _parse(load_yaml(decode_yaml_bytes(data, where, TargetError, "target file"), where, TargetError),
                        where)
        if len(_PARSED) >= PARSED_TARGETS_KEPT:
            _PARSED.pop(next(iter(_PARSED)))
        _PARSED[key] = target
    return target


#: Parsed targets kept per process, by (path as shown, file content): an edited file is parsed again.
PARSED_TARGETS_KEPT = 32
_PARSED: dict[tuple[str, bytes], Target] = {}


def _shown(path: Path) -> str:
    """A path as messages show it: whole, unless absurdly long."""
    return str(path) if len(str(path)) <= MAX_PATH_CHARS else brief(str(path), MAX_PATH_CHARS)


def parse_target(doc: Any, path: str = "<memory>") -> Target:
    """Build a Target from an already-parsed YAML document (used by tools that edit a copy)."""
    return _parse(doc, path)
