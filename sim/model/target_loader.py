"""Loading chip descriptions: :func:`load_target` builds the frozen :mod:`sim.model.target` dataclasses from YAML.

Every field carries its unit.  The loader checks types, required keys, non-overlapping regions inside the
address width, and rejects unknown keys, naming the file and the key path of the first problem.  Every
number must lie in a range a real chip could have (a value outside it is a typo, and a 400-digit one would
overflow the timing arithmetic):

==========================================================  ==========================================
field                                                       range
==========================================================  ==========================================
``clock_hz``                                                1 MHz .. 100 GHz
``address_bits``                                            8 .. 64
``cores``                                                   1 .. 64
``core.vector_width_bytes``                                 1 .. 4096, a power of two
``core.precisions.*.lanes``                                 1 .. 4096, a power of two
``core.issue_width.scalar`` / ``vector``                    1 .. 64, at least the count of each unit of that class
``core.units.*.count``                                      1 .. 64
``core.units.*.latency_cycles``                             0 .. 10,000
``core.reduction_latency_cycles``                           0 .. 10,000
``core.units.{vls,sload}.bytes_per_issue``                  1 .. 65536 (``vls``: whole vectors)
``core.vector_registers``                                   1 .. 4096
every ``*_cycles`` not above                                0 .. 10,000,000 (10 ms at 1 GHz): overheads, memory
                                                            latencies, DMA setup
``dma.engines_per_core``                                    1 .. 64
``dma.engine_bytes_per_cycle``                              0.001 .. 65536
``regions``                                                 1 .. 64 regions
``regions[].base`` / ``size_bytes``                         inside the ``address_bits`` address space
``regions[].bandwidth_bytes_per_cycle``                     0.001 .. 65536
``regions[].alignment_bytes`` / ``burst_bytes``             1 .. 2**30 (a power of two) / 1 .. 2**20
``staging.levels``                                          1 .. 16 levels
``staging.levels[].offset_bytes`` / ``size_bytes``          inside the level's region
``staging.levels[].takes_free_bytes``                        true or false; shared levels only
names (``name``, region and level names)                    printable, one line, at most 64 characters
==========================================================  ==========================================

The core (``core:``) is a set of functional units, each of a class among ``fmac``, ``valu``, ``vls``,
``broadcast``, ``sload``, ``salu`` (``fmac`` and ``vls`` are required; ``vls`` and ``sload`` say the bytes one
issue moves), issuing from the ``scalar`` or ``vector`` VLIW slots of ``issue_width``; ``precisions`` lists the
lanes of the storage precisions ``fp32``/``fp16`` and of the mixed ``fp16_fp32acc`` (which needs fp16).  A file
still written for the flops-over-peak model (``vector_op_latency_cycles``, ``vector_efficiency``,
``precisions.*.fmac_units``) is refused, saying what replaced the key.

The staging levels (``staging.levels``, outermost first) are checked too: a level on a shared region is a
window inside it; a level on a private region must be a region with role scratchpad and covers all of it
unless ``offset_bytes``/``size_bytes`` are given; ``beside`` names an earlier per-core level; names are unique;
at least one level is per core; shared levels come first; no two levels overlap.  A file still written with
``staging_region``/``workspace`` is refused with the ``staging:`` block to write instead, and one whose regions
still give ``ports`` is refused with what to delete (a region's bandwidth is shared fluidly among the transfers
streaming through it, each capped by its engine's ``dma.engine_bytes_per_cycle``).

The YAML itself is read by :mod:`sim.files.yamlsafe` (YAML 1.2 numbers, no alias bombs, regular files only).
No SimPy here.
"""

from __future__ import annotations

import math
from pathlib import Path
from types import MappingProxyType
from typing import Any

from sim.errors import TargetError, brief
from sim.files.yamlsafe import decode_yaml_bytes, load_yaml, read_yaml_bytes
from sim.model.target import (
    COMPUTE_PRECISIONS,
    ISSUE_CLASSES,
    REQUIRED_UNITS,
    STORAGE_PRECISIONS,
    UNIT_CLASSES,
    CoreModel,
    DmaModel,
    FunctionalUnit,
    PrecisionModel,
    Region,
    StagingLevel,
    Target,
)

#: Folder of the chip files shipped with dspsim: ``sim/targets/`` once installed from a wheel (package
#: data, see pyproject.toml), the checkout's top-level ``targets/`` in a source tree or an editable install.
_SIM_DIR = Path(__file__).resolve().parent.parent
TARGETS_DIR = _SIM_DIR / "targets" if (_SIM_DIR / "targets").is_dir() else _SIM_DIR.parent / "targets"

REGION_KINDS = ("shared", "private")
REGION_ROLES = ("storage", "scratchpad")
#: Smallest bandwidth a target may give (bytes/cycle); below it transfer times overflow into nonsense.
MIN_RATE = 1e-3
#: Largest bandwidth (bytes/cycle): 64 TB/s at 1 GHz, beyond any memory or fabric built.
MAX_RATE = float(1 << 16)
#: Longest latency, overhead or setup time (cycles): 10 ms at 1 GHz, beyond any launch, barrier, memory
#: or DMA of a real chip (a 1e20-cycle latency is a typo, as a 1e-20 bandwidth is).
MAX_CYCLES = 10_000_000
_CYCLES_WHY = " cycles (10 ms at 1 GHz)"
MIN_CLOCK_HZ = 1_000_000
MAX_CLOCK_HZ = 100_000_000_000
#: Most cores a chip may have (core masks are at most 64 bits).
MAX_CORES = 64
MAX_VECTOR_WIDTH_BYTES = 4096
MAX_LANES = 4096
#: Most units of one class a core may have, and most instructions of one issue class it issues per cycle.
MAX_UNITS = 64
MAX_ISSUE_WIDTH = 64
#: Longest latency of a functional unit or a reduction (cycles): a pipeline, not a memory system.
MAX_UNIT_LATENCY_CYCLES = 10_000
#: Most bytes one load/store issue moves between memory and registers.
MAX_BYTES_PER_ISSUE = 1 << 16
MAX_VECTOR_REGISTERS = 4096
#: The unit classes that move bytes between memory and registers: they say how many per issue.
MEMORY_UNITS = ("vls", "sload")
MAX_DMA_ENGINES = 64
MAX_REGIONS = 64
MAX_ALIGNMENT_BYTES = 1 << 30
MAX_BURST_BYTES = 1 << 20
#: Most staging levels a chip may have (a deep hierarchy has a handful).
MAX_LEVELS = 16
#: Longest chip or region name: names appear in every message and table.
MAX_NAME_CHARS = 64
#: Longest file path shown whole in a message (no real path is longer; a pasted megabyte is cut).
MAX_PATH_CHARS = 4096


def key_text(key: str) -> str:
    """A key as it may appear in a one-line message: itself when a short identifier, else a cut repr."""
    return key if key.isidentifier() and len(key) <= MAX_NAME_CHARS else brief(key, 40)


def _hint(v: Any) -> str:
    """Why a value of the wrong type may have been meant right: a quoted number, or a float for an integer."""
    if isinstance(v, str):
        try:
            float(v)
        except ValueError:
            return ""
        return " (YAML read it as text: write the number without quotes)"
    if isinstance(v, float) and math.isfinite(v) and v.is_integer():
        return " (a decimal point or an exponent makes a float: write the whole number, e.g. 1000000000)"
    return ""


# --- loading ---------------------------------------------------------------------------------

class _Reader:
    """Walks a parsed YAML mapping, checking keys, types and ranges, naming file and key path in errors."""

    def __init__(self, path: str):
        self.path = path

    def fail(self, key_path: str, message: str) -> TargetError:
        return TargetError(f"{self.path}: {key_path}: {message}")

    def mapping(self, value: Any, key_path: str, required: set[str], optional: frozenset[str] | set[str] = frozenset()
                ) -> dict:
        if not isinstance(value, dict):
            raise self.fail(key_path, f"expected a mapping, got {type(value).__name__}")
        for k in value:
            if not isinstance(k, str):
                raise self.fail(key_path, f"key {brief(k, 40)} is not a string")
        unknown = sorted(set(value) - required - optional)
        if unknown:
            raise self.fail(f"{key_path}.{key_text(unknown[0])}",
                            f"unknown key (allowed: {', '.join(sorted(required | optional))})")
        missing = sorted(required - set(value))
        if missing:
            raise self.fail(f"{key_path}.{missing[0]}", "required key is missing")
        return value

    def integer(self, m: dict, key: str, key_path: str, *, minimum: int, maximum: int, why: str = "",
                hexa: bool = False) -> int:
        """``m[key]``, an integer in ``[minimum, maximum]``; ``why`` says what the maximum stands for;
        ``hexa`` shows the bound and the value in hex (addresses and sizes)."""
        v = m[key]
        if isinstance(v, bool) or not isinstance(v, int):
            raise self.fail(f"{key_path}.{key}", f"expected an integer, got {brief(v)}{_hint(v)}")

        def show(n: int) -> str:
            return f"{n:#x}" if hexa and 0 <= n < 1 << 128 else brief(n)
        if v < minimum:
            raise self.fail(f"{key_path}.{key}", f"must be >= {minimum}, got {show(v)}")
        if v > maximum:
            raise self.fail(f"{key_path}.{key}", f"must be <= {show(maximum)}{why}, got {show(v)}")
        return v

    def cycles(self, m: dict, key: str, key_path: str) -> int:
        """A latency, overhead or setup time: a whole number of cycles in ``[0, MAX_CYCLES]``."""
        return self.integer(m, key, key_path, minimum=0, maximum=MAX_CYCLES, why=_CYCLES_WHY)

    def number(self, m: dict, key: str, key_path: str, *, minimum: float = MIN_RATE,
               maximum: float = MAX_RATE, why: str = "") -> float:
        """``m[key]``, a finite number (int or float) in ``[minimum, maximum]``."""
        v = m[key]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or (isinstance(v, float) and not math.isfinite(v)):
            raise self.fail(f"{key_path}.{key}", f"expected a positive finite number, got {brief(v)}{_hint(v)}")
        # Compared before any float(): a 400-digit int would overflow it; Python compares int and float exactly.
        if v < minimum:
            raise self.fail(f"{key_path}.{key}", f"must be >= {minimum:g}, got {brief(v)} (a typo, not a chip)")
        if v > maximum:
            raise self.fail(f"{key_path}.{key}", f"must be <= {maximum:g}{why}, got {brief(v)} (a typo, not a chip)")
        return float(v)

    def string(self, m: dict, key: str, key_path: str, choices: tuple[str, ...] | None = None) -> str:
        v = m[key]
        if not isinstance(v, str) or not v:
            raise self.fail(f"{key_path}.{key}", f"expected a non-empty string, got {brief(v)}")
        if not v.isprintable():
            # Names end up in messages that must stay on one line.
            raise self.fail(f"{key_path}.{key}", f"expected printable text without line breaks, got {brief(v)}")
        if choices is not None and v not in choices:
            raise self.fail(f"{key_path}.{key}", f"expected one of {', '.join(choices)}, got {brief(v)}")
        if len(v) > MAX_NAME_CHARS:
            raise self.fail(f"{key_path}.{key}", f"a name of at most {MAX_NAME_CHARS} characters, got {len(v)}: "
                                                 f"{brief(v, 40)}")
        return v

    def boolean(self, m: dict, key: str, key_path: str) -> bool:
        """``m[key]``, true or false (YAML's ``true``/``false``; no 0, 1 or strings)."""
        v = m[key]
        if not isinstance(v, bool):
            raise self.fail(f"{key_path}.{key}", f"expected true or false, got {brief(v)}")
        return v

    def text(self, m: dict, key: str, key_path: str, *, required: bool) -> None:
        """A free-text note (``source``, ``description``): a string, any length, line breaks allowed."""
        if key not in m and not required:
            return
        v = m[key]
        if not isinstance(v, str) or (required and not v.strip()):
            raise self.fail(f"{key_path}.{key}", f"expected {'non-empty ' if required else ''}text, got "
                                                 f"{type(v).__name__} {brief(v, 40)} (put it in quotes to make "
                                                 f"it text)")

    def source(self, m: dict, key_path: str) -> None:
        """Every group of numbers must say where they come from."""
        self.text(m, "source", key_path, required=True)


def _parse(doc: Any, path: str) -> Target:
    r = _Reader(path)
    if isinstance(doc, dict):
        _refuse_old_staging_keys(r, doc)
        _refuse_ports(r, doc)
    top = r.mapping(doc, "<top>", {"name", "clock_hz", "address_bits", "cores", "sync", "core", "dma",
                                   "regions", "staging", "source"},
                    {"description"})
    r.source(top, "<top>")
    r.text(top, "description", "<top>", required=False)
    name = r.string(top, "name", "<top>")
    clock_hz = r.integer(top, "clock_hz", "<top>", minimum=MIN_CLOCK_HZ, maximum=MAX_CLOCK_HZ, why=" (100 GHz)")
    address_bits = r.integer(top, "address_bits", "<top>", minimum=8, maximum=64)
    cores = r.integer(top, "cores", "<top>", minimum=1, maximum=MAX_CORES)

    sync = r.mapping(top["sync"], "sync", {"launch_overhead_cycles", "barrier_latency_cycles", "source"})
    r.source(sync, "sync")

    core = _core(r, top["core"])

    if isinstance(top["dma"], dict) and "engine_bytes_per_cycle" not in top["dma"]:
        raise r.fail("dma.engine_bytes_per_cycle", "required key is missing: the most bytes per cycle one DMA "
                                                   "engine streams (a transfer's rate is capped by it and by the "
                                                   "regions it crosses; the shipped chips assume 64)")
    dm = r.mapping(top["dma"], "dma", {"engines_per_core", "setup_cycles", "engine_bytes_per_cycle", "source"})
    r.source(dm, "dma")
    dma = DmaModel(engines_per_core=r.integer(dm, "engines_per_core", "dma", minimum=1, maximum=MAX_DMA_ENGINES),
                   setup_cycles=r.cycles(dm, "setup_cycles", "dma"),
                   engine_bytes_per_cycle=r.number(dm, "engine_bytes_per_cycle", "dma"))

    regs_raw = top["regions"]
    if not isinstance(regs_raw, list) or not regs_raw:
        raise r.fail("regions", "expected a non-empty list of regions")
    if len(regs_raw) > MAX_REGIONS:
        raise r.fail("regions", f"at most {MAX_REGIONS} regions, got {len(regs_raw)}")
    regions: list[Region] = []
    limit = 1 << address_bits
    space = f" (the {address_bits}-bit address space)"
    for i, rm in enumerate(regs_raw):
        # Name the region in key paths as soon as its name is readable, even before the keys are checked.
        named = isinstance(rm, dict) and isinstance(rm.get("name"), str) and rm["name"].isprintable() \
            and len(rm["name"]) <= MAX_NAME_CHARS
        kp = f"regions[{i}]" + (f"({rm['name']})" if named else "")
        rm = r.mapping(rm, kp, {"name", "base", "size_bytes", "kind", "latency_cycles",
                                "bandwidth_bytes_per_cycle", "source"},
                       {"role", "alignment_bytes", "burst_bytes"})
        r.source(rm, kp)
        rname = r.string(rm, "name", kp)
        kp = f"regions[{i}]({rname})"
        kind = r.string(rm, "kind", kp, REGION_KINDS)
        role = r.string(rm, "role", kp, REGION_ROLES) if "role" in rm else "storage"
        region = Region(
            name=rname,
            base=r.integer(rm, "base", kp, minimum=0, maximum=limit - 1, why=space, hexa=True),
            size_bytes=r.integer(rm, "size_bytes", kp, minimum=1, maximum=limit, why=space, hexa=True),
            kind=kind,
            role=role,
            latency_cycles=r.cycles(rm, "latency_cycles", kp),
            bandwidth_bytes_per_cycle=r.number(rm, "bandwidth_bytes_per_cycle", kp),
            alignment_bytes=r.integer(rm, "alignment_bytes", kp, minimum=1, maximum=MAX_ALIGNMENT_BYTES)
            if "alignment_bytes" in rm else 1,
            burst_bytes=r.integer(rm, "burst_bytes", kp, minimum=1, maximum=MAX_BURST_BYTES)
            if "burst_bytes" in rm else 1,
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

    staging = _staging(r, top["staging"], by_name)

    return Target(
        name=name, path=path, clock_hz=clock_hz, address_bits=address_bits, cores=cores,
        launch_overhead_cycles=r.cycles(sync, "launch_overhead_cycles", "sync"),
        barrier_latency_cycles=r.cycles(sync, "barrier_latency_cycles", "sync"),
        core=core, dma=dma, regions=tuple(sorted(regions, key=lambda g: g.base)),
        staging=staging,
    )


#: Keys of the flops-over-peak core model and what replaced each (a file still giving one is refused with this).
_REPLACED_CORE_KEYS = {
    "vector_op_latency_cycles": "replaced by the latencies of the core's functional units "
                                "(core.units.<unit>.latency_cycles: a loop's fill is the latencies on its "
                                "dependence chain, e.g. fmac 6)",
    "vector_efficiency": "a tile's compute is now priced from its inner loops on the core's functional units "
                         "(core.units, core.issue_width), so its efficiency emerges from the loop's shape",
}


def _core(r: _Reader, value: Any) -> CoreModel:
    """The ``core:`` block: issue widths, functional units, registers, overheads and the lanes per precision
    (see the module's table for the ranges), refusing the keys of the flops-over-peak model by what replaced
    them."""
    if isinstance(value, dict):
        old = [k for k in _REPLACED_CORE_KEYS if k in value]
        if old:
            raise r.fail(f"core.{old[0]}", f"is gone: {_REPLACED_CORE_KEYS[old[0]]}; delete "
                                           f"{' and '.join(old)} (the shipped targets show the core: block "
                                           f"with units, issue_width, vector_registers, loop_overhead_cycles "
                                           f"and tile_overhead_cycles)")
    cm = r.mapping(value, "core", {"precisions", "vector_width_bytes", "reduction_latency_cycles",
                                   "loop_overhead_cycles", "tile_overhead_cycles", "issue_width", "units",
                                   "vector_registers", "source"})
    r.source(cm, "core")
    vector_width = r.integer(cm, "vector_width_bytes", "core", minimum=1, maximum=MAX_VECTOR_WIDTH_BYTES)
    if vector_width & (vector_width - 1):
        raise r.fail("core.vector_width_bytes", f"must be a power of two, got {vector_width}")

    iw = r.mapping(cm["issue_width"], "core.issue_width", set(ISSUE_CLASSES))
    issue_width = {c: r.integer(iw, c, "core.issue_width", minimum=1, maximum=MAX_ISSUE_WIDTH)
                   for c in ISSUE_CLASSES}

    um = r.mapping(cm["units"], "core.units", set(REQUIRED_UNITS), set(UNIT_CLASSES))
    units: dict[str, FunctionalUnit] = {}
    for uname in UNIT_CLASSES:  # a fixed order: reports list the units the same way on every chip
        if uname not in um:
            continue
        kp = f"core.units.{uname}"
        loads = uname in MEMORY_UNITS
        u = r.mapping(um[uname], kp, {"count", "class", "latency_cycles"} | ({"bytes_per_issue"} if loads else set()))
        unit = FunctionalUnit(name=uname, count=r.integer(u, "count", kp, minimum=1, maximum=MAX_UNITS),
                              issue_class=r.string(u, "class", kp, ISSUE_CLASSES),
                              latency_cycles=r.integer(u, "latency_cycles", kp, minimum=0,
                                                       maximum=MAX_UNIT_LATENCY_CYCLES),
                              bytes_per_issue=r.integer(u, "bytes_per_issue", kp, minimum=1,
                                                        maximum=MAX_BYTES_PER_ISSUE) if loads else 0)
        if uname == "vls" and unit.bytes_per_issue % vector_width:
            raise r.fail(f"{kp}.bytes_per_issue", f"a vector load or store moves whole vectors of "
                                                  f"core.vector_width_bytes {vector_width}: a multiple of it, "
                                                  f"got {unit.bytes_per_issue}")
        units[uname] = unit
    for cls in ISSUE_CLASSES:
        widest = max((u for u in units.values() if u.issue_class == cls), key=lambda u: u.count, default=None)
        if widest is not None and widest.count > issue_width[cls]:
            raise r.fail(f"core.issue_width.{cls}", f"{issue_width[cls]} {cls} instructions per cycle cannot keep "
                                                    f"the {widest.count} {widest.name} units of that class busy: "
                                                    f"at least {widest.count} (or fewer {widest.name} units)")

    allowed = ", ".join(COMPUTE_PRECISIONS)
    precs_raw = value.get("precisions") if isinstance(value, dict) else None
    if isinstance(precs_raw, dict):
        for pname, pm in precs_raw.items():
            if isinstance(pm, dict) and "fmac_units" in pm and pname in COMPUTE_PRECISIONS:
                raise r.fail(f"core.precisions.{pname}.fmac_units",
                             "is gone: the FMAC count is the core's, core.units.fmac.count; delete fmac_units "
                             "from every precision")
    precs_raw = r.mapping(cm["precisions"], "core.precisions", set(), set(COMPUTE_PRECISIONS))
    if not any(p in precs_raw for p in STORAGE_PRECISIONS):
        raise r.fail("core.precisions", f"at least one storage precision ({', '.join(STORAGE_PRECISIONS)}) is "
                                        f"required (allowed: {allowed})")
    if "fp16_fp32acc" in precs_raw and "fp16" not in precs_raw:
        raise r.fail("core.precisions.fp16_fp32acc", "fp16 products accumulated in fp32 need fp16 storage: list "
                                                     "fp16 too")
    precisions = {}
    for pname in COMPUTE_PRECISIONS:
        if pname not in precs_raw:
            continue
        kp = f"core.precisions.{pname}"
        pm = r.mapping(precs_raw[pname], kp, {"lanes"})
        lanes = r.integer(pm, "lanes", kp, minimum=1, maximum=MAX_LANES)
        if lanes & (lanes - 1):
            raise r.fail(f"{kp}.lanes", f"must be a power of two, got {lanes}")
        precisions[pname] = PrecisionModel(lanes=lanes, fmac_units=units["fmac"].count)

    return CoreModel(
        precisions=MappingProxyType(precisions),
        vector_width_bytes=vector_width,
        reduction_latency_cycles=r.integer(cm, "reduction_latency_cycles", "core", minimum=0,
                                           maximum=MAX_UNIT_LATENCY_CYCLES),
        loop_overhead_cycles=r.cycles(cm, "loop_overhead_cycles", "core"),
        tile_overhead_cycles=r.cycles(cm, "tile_overhead_cycles", "core"),
        issue_width=MappingProxyType(issue_width),
        units=MappingProxyType(units),
        vector_registers=r.integer(cm, "vector_registers", "core", minimum=1, maximum=MAX_VECTOR_REGISTERS),
    )


def _refuse_old_staging_keys(r: _Reader, top: dict) -> None:
    """A file written for the single staging level (``staging_region`` + ``workspace``) is refused, with the
    ``staging:`` block that says the same thing written out from the file's own values."""
    old = [k for k in ("staging_region", "workspace") if k in top]
    if not old:
        return
    ws = top.get("workspace")
    ws = ws if isinstance(ws, dict) else {}

    def shown(v: Any, default: str) -> str:
        if isinstance(v, bool) or v is None:
            return default
        if isinstance(v, int):
            return f"{v:#x}" if 0 <= v < 1 << 64 else default
        return v if isinstance(v, str) and v.isidentifier() and len(v) <= MAX_NAME_CHARS else default

    shared = shown(ws.get("region"), "gsm")
    stage = shown(top.get("staging_region"), "am")
    levels = (f"{{name: {shared}, region: {shared}, offset_bytes: {shown(ws.get('offset_bytes'), 'OFFSET')}, "
              f"size_bytes: {shown(ws.get('size_bytes'), 'SIZE')}}}, {{name: {stage}, region: {stage}}}")
    verb = "were" if len(old) > 1 else "was"
    raise r.fail(old[0], f"{' and '.join(old)} {verb} replaced by a list of staging levels, outermost first; write "
                         f"instead: staging: {{source: \"...\", levels: [{levels}]}} (a per-core level beside "
                         f"another, such as a scalar memory, adds {{name: sm, region: sm, beside: {stage}}}; see "
                         f"the README's 'Staging levels')")


def _refuse_ports(r: _Reader, top: dict) -> None:
    """A file written for the port model (``regions[].ports``) is refused, naming the first region that gives
    ports and saying what replaced them and what to delete."""
    regions = top.get("regions")
    if not isinstance(regions, list):
        return
    with_ports = [(i, rm) for i, rm in enumerate(regions) if isinstance(rm, dict) and "ports" in rm]
    if not with_ports:
        return
    i, rm = with_ports[0]
    name = rm.get("name")
    kp = f"regions[{i}]" + (f"({name})" if isinstance(name, str) and name.isprintable()
                            and len(name) <= MAX_NAME_CHARS else "")
    names = [rm.get("name") for _, rm in with_ports]
    shown = ", ".join(n if isinstance(n, str) and n.isidentifier() and len(n) <= MAX_NAME_CHARS else "?"
                      for n in names[:8]) + (", ..." if len(names) > 8 else "")
    dma = top.get("dma")
    add = "" if isinstance(dma, dict) and "engine_bytes_per_cycle" in dma else \
        " and give dma.engine_bytes_per_cycle (the most bytes per cycle one DMA engine streams, e.g. 64)"
    raise r.fail(f"{kp}.ports", f"ports are gone: a region's bandwidth_bytes_per_cycle is now shared fluidly among "
                                f"the transfers streaming through it (max-min fair shares, recomputed as streams "
                                f"start and end; a lone transfer may use all of it), each capped by its DMA "
                                f"engine's rate; delete ports: from every region ({len(names)} give it: "
                                f"{shown}){add}")


def _staging(r: _Reader, value: Any, by_name: dict[str, Region]) -> tuple[StagingLevel, ...]:
    """The ``staging`` block: levels outermost first, each a window of a shared region or a private scratchpad
    region (whole unless offset/size are given); names unique; ``beside`` an earlier per-core level; at least
    one per-core level; shared levels before the per-core ones; no two levels' windows overlap."""
    sm = r.mapping(value, "staging", {"levels", "source"})
    r.source(sm, "staging")
    raw = sm["levels"]
    if not isinstance(raw, list) or not raw:
        raise r.fail("staging.levels", "expected a non-empty list of staging levels, outermost first")
    if len(raw) > MAX_LEVELS:
        raise r.fail("staging.levels", f"at most {MAX_LEVELS} levels, got {len(raw)}")
    levels: list[StagingLevel] = []
    for i, lm in enumerate(raw):
        named = isinstance(lm, dict) and isinstance(lm.get("name"), str) and lm["name"].isprintable() \
            and len(lm["name"]) <= MAX_NAME_CHARS
        kp = f"staging.levels[{i}]" + (f"({lm['name']})" if named else "")
        lm = r.mapping(lm, kp, {"name", "region"}, {"offset_bytes", "size_bytes", "beside", "takes_free_bytes"})
        name = r.string(lm, "name", kp)
        kp = f"staging.levels[{i}]({name})"
        if any(other.name == name for other in levels):
            raise r.fail(f"{kp}.name", f"duplicate level name {name!r}")
        rname = r.string(lm, "region", kp)
        reg = by_name.get(rname)
        if reg is None:
            raise r.fail(f"{kp}.region", f"names no region ({', '.join(by_name)})")
        if reg.shared:
            for key in ("offset_bytes", "size_bytes"):
                if key not in lm:
                    raise r.fail(f"{kp}.{key}", f"required key is missing: a level in shared region {rname} is a "
                                                f"window of it (offset_bytes and size_bytes), never the whole "
                                                f"region call buffers live in")
            if levels and not levels[-1].shared:
                raise r.fail(kp, f"shared level {name} comes after per-core level {levels[-1].name}: levels are "
                                 f"listed outermost first, shared memory before the cores' own")
        elif reg.role != "scratchpad":
            raise r.fail(f"{kp}.region", f"region {rname} is private with role {reg.role}: a per-core level "
                                         f"must be a region with role scratchpad (call buffers may not use it)")
        inside = f" (inside region {rname} of {reg.size_bytes:#x} bytes)"
        offset = r.integer(lm, "offset_bytes", kp, minimum=0, maximum=reg.size_bytes - 1, why=inside, hexa=True) \
            if "offset_bytes" in lm else 0
        size = r.integer(lm, "size_bytes", kp, minimum=1, maximum=reg.size_bytes, why=inside, hexa=True) \
            if "size_bytes" in lm else reg.size_bytes - offset
        if offset + size > reg.size_bytes:
            # Both fit the region alone: the offset places the window, so the offset is what runs it out.
            base = reg.base + offset
            raise r.fail(f"{kp}.offset_bytes",
                         f"window [{base:#x}, {base + size:#x}) (offset_bytes {offset:#x} + size_bytes "
                         f"{size:#x}) runs past the end of region {rname} at {reg.end:#x}: at most "
                         f"{reg.size_bytes - size:#x}")
        beside = r.string(lm, "beside", kp) if "beside" in lm else None
        if beside is not None:
            if reg.shared:
                raise r.fail(f"{kp}.beside", "a shared level sits beside no other: only a per-core level "
                                             "(a scalar memory beside the vector one) says beside")
            earlier = next((lv for lv in levels if lv.name == beside), None)
            if earlier is None or earlier.shared or earlier.beside is not None:
                per_core = [lv.name for lv in levels if not lv.shared and lv.beside is None]
                raise r.fail(f"{kp}.beside", f"must name an earlier per-core level that is beside no other "
                                             f"(here: {', '.join(per_core) or 'none'}), got {beside!r}")
        takes_free = r.boolean(lm, "takes_free_bytes", kp) if "takes_free_bytes" in lm else False
        if takes_free and not reg.shared:
            raise r.fail(f"{kp}.takes_free_bytes", f"only a level of a shared region takes the free bytes of its "
                                                   f"region; {rname} is per-core")
        level = StagingLevel(name=name, region=rname, base=reg.base + offset, size_bytes=size, shared=reg.shared,
                             beside=beside, takes_free_bytes=takes_free)
        for other in levels:
            if other.region == rname and level.base < other.end and other.base < level.end:
                raise r.fail(kp, f"window [{level.base:#x}, {level.end:#x}) of {rname} overlaps level "
                                 f"{other.name} [{other.base:#x}, {other.end:#x})")
        levels.append(level)
    if all(level.shared for level in levels):
        raise r.fail("staging.levels", "at least one per-core level (a private scratchpad region, where compute "
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
