"""The target file's schema: every key of a chip description declared once, with its type, unit, range and doc.

:func:`sim.model.target_loader.load_target` reads a file with it (:func:`sim.files.schema.decode`), then checks
the rules between keys (regions not overlapping and inside the address width, power-of-two sizes, staging
levels inside their region, issue widths that keep the units busy ...) and builds the frozen
:mod:`sim.model.target` dataclasses.  Every number lies in a range a real chip could have: a value outside it
is a typo, and a 400-digit one would overflow the timing arithmetic.  :func:`range_table` lists the ranges.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from sim.files.schema import Spec, param, reference

#: Smallest bandwidth a target may give (bytes/cycle); below it transfer times overflow into nonsense.
MIN_RATE = 1e-3
#: Largest bandwidth (bytes/cycle): 64 TB/s at 1 GHz, beyond any memory or fabric built.
MAX_RATE = float(1 << 16)
#: Longest latency, overhead or setup time (cycles): 10 ms at 1 GHz, beyond any launch, barrier, memory
#: or DMA of a real chip (a 1e20-cycle latency is a typo, as a 1e-20 bandwidth is).
MAX_CYCLES = 10_000_000
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
MAX_DMA_ENGINES = 64
#: Most numbered DMA channels a core may have.
MAX_DMA_CHANNELS = 1024
MAX_REGIONS = 64
MAX_ALIGNMENT_BYTES = 1 << 30
MAX_BURST_BYTES = 1 << 20
#: Most staging levels a chip may have (a deep hierarchy has a handful).
MAX_LEVELS = 16
#: Longest chip or region name: names appear in every message and table.
MAX_NAME_CHARS = 64
#: The largest address width: region bases and sizes are checked against the file's own ``address_bits``.
MAX_ADDRESS_BITS = 64

_TYPO = " (a typo, not a chip)"
#: A latency, overhead or setup time: whole cycles in [0, MAX_CYCLES].
Cycles = Annotated[int, param("cycles", ge=0, le=MAX_CYCLES, unit="cycles", why=" cycles (10 ms at 1 GHz)")]
#: A functional unit's or a reduction's latency.
UnitCycles = Annotated[int, param("a pipeline's latency", ge=0, le=MAX_UNIT_LATENCY_CYCLES, unit="cycles")]
#: A bandwidth or a DMA rate.
Rate = Annotated[float, param("bytes per cycle", ge=MIN_RATE, le=MAX_RATE, unit="bytes/cycle", note=_TYPO)]
#: A name shown in messages and tables: one printable line.
Name = Annotated[str, param("a name", min_length=1, max_length=MAX_NAME_CHARS,
                            pattern=r"\A[^\x00-\x1f\x7f-\x9f\u2028\u2029]*\Z",
                            means="printable text without line breaks", kind="name")]
#: Where a group's numbers come from (published, or an assumption and why).
Source = Annotated[str, param("where the group's numbers come from: published, or assumed and why", pattern=r"\S",
                              kind="text")]
Text = Annotated[str, param("free text", kind="text")]
IssueClass = Literal["scalar", "vector"]


class Sync(Spec):
    """``sync:``: the group launch and barrier costs."""

    source: Source
    launch_overhead_cycles: Annotated[int, param("cycles from the launch of a core group to its first core's "
                                                 "start", ge=0, le=MAX_CYCLES, unit="cycles",
                                                 why=" cycles (10 ms at 1 GHz)")]
    barrier_latency_cycles: Annotated[int, param("cycles a barrier over the cores takes once the last arrives",
                                                 ge=0, le=MAX_CYCLES, unit="cycles", why=" cycles (10 ms at 1 GHz)")]


class ComputeUnit(Spec):
    """A class of functional units that moves no bytes (``fmac``, ``valu``, ``broadcast``, ``salu``)."""

    count: Annotated[int, param("units of the class; each issues one instruction per cycle", ge=1, le=MAX_UNITS,
                                unit="units")]
    issue_class: IssueClass = msgspec.field(name="class")
    latency_cycles: Annotated[int, param("cycles from issue to result", ge=0, le=MAX_UNIT_LATENCY_CYCLES,
                                         unit="cycles")]


class MemoryUnit(Spec):
    """A class of load/store units (``vls``: vector loads and stores from AM; ``sload``: scalar loads from SM)."""

    count: Annotated[int, param("units of the class; each issues one instruction per cycle", ge=1, le=MAX_UNITS,
                                unit="units")]
    issue_class: IssueClass = msgspec.field(name="class")
    latency_cycles: Annotated[int, param("cycles from issue to result", ge=0, le=MAX_UNIT_LATENCY_CYCLES,
                                         unit="cycles")]
    bytes_per_issue: Annotated[int, param("bytes one issue moves between memory and registers (vls: whole "
                                          "vectors)", ge=1, le=MAX_BYTES_PER_ISSUE, unit="bytes")]
    store_latency_cycles: Annotated[int, param(
        "cycles from a store's issue to its data in memory (latency_cycles is a load's, issue to result); a loop "
        "pays it after its last store (default: latency_cycles)", ge=0, le=MAX_UNIT_LATENCY_CYCLES,
        unit="cycles")] | None = None


class Units(Spec):
    """``core.units:``: the core's functional units by class; ``fmac`` and ``vls`` every core has."""

    fmac: ComputeUnit
    vls: MemoryUnit
    valu: ComputeUnit | None = None
    broadcast: ComputeUnit | None = None
    sload: MemoryUnit | None = None
    salu: ComputeUnit | None = None


class Lanes(Spec):
    """``core.precisions.<p>:``: the vector throughput at one precision."""

    lanes: Annotated[int, param("elements per vector instruction (a power of two)", ge=1, le=MAX_LANES,
                                unit="elements")]


class Precisions(Spec):
    """``core.precisions:``: the lanes of each precision the core computes in."""

    fp32: Lanes | None = None
    fp16: Lanes | None = None
    fp16_fp32acc: Lanes | None = None


class IssueWidth(Spec):
    """``core.issue_width:``: the VLIW slots per cycle of each issue class."""

    scalar: Annotated[int, param("scalar instructions issued per cycle", ge=1, le=MAX_ISSUE_WIDTH,
                                 unit="instructions/cycle")]
    vector: Annotated[int, param("vector instructions issued per cycle", ge=1, le=MAX_ISSUE_WIDTH,
                                 unit="instructions/cycle")]


class Core(Spec):
    """``core:``: one DSP core's compute."""

    source: Source
    precisions: Precisions
    vector_width_bytes: Annotated[int, param("bytes of one vector register (a power of two)", ge=1,
                                             le=MAX_VECTOR_WIDTH_BYTES, unit="bytes")]
    reduction_latency_cycles: Annotated[int, param("cycles to reduce one vector across its lanes", ge=0,
                                                   le=MAX_UNIT_LATENCY_CYCLES, unit="cycles")]
    loop_overhead_cycles: Annotated[int, param("cycles paid on each entry of a loop", ge=0, le=MAX_CYCLES,
                                               unit="cycles", why=" cycles (10 ms at 1 GHz)")]
    tile_overhead_cycles: Annotated[int, param("cycles paid once per tile's compute call", ge=0, le=MAX_CYCLES,
                                               unit="cycles", why=" cycles (10 ms at 1 GHz)")]
    issue_width: IssueWidth
    units: Units
    vector_registers: Annotated[int, param("vector registers of the core", ge=1, le=MAX_VECTOR_REGISTERS,
                                           unit="registers")]


class Dma(Spec):
    """``dma:``: the DMA engines of each core."""

    source: Source
    engines_per_core: Annotated[int, param("DMA engines of each core", ge=1, le=MAX_DMA_ENGINES, unit="engines")]
    setup_cycles: Annotated[int, param("cycles to program one transfer", ge=0, le=MAX_CYCLES, unit="cycles",
                                       why=" cycles (10 ms at 1 GHz)")]
    engine_bytes_per_cycle: Annotated[float, param(
        "the most bytes per cycle one DMA engine streams (a transfer's rate is capped by it and by the regions "
        "it crosses; the shipped chips assume 64)", ge=MIN_RATE, le=MAX_RATE, unit="bytes/cycle", note=_TYPO)]
    channels_per_core: Annotated[int, param(
        "numbered DMA channels of each core a plan's transfers may name (Transfer.channel): a channel carries one "
        "transfer at a time, in issue order", ge=1, le=MAX_DMA_CHANNELS, unit="channels",
        absent="20, the shipped chips' assumption (a target file written before channels were modelled)")] = 20


#: Most banks a DRAM may have, and the longest row (bytes): beyond any DDR, LPDDR or HBM device.
MAX_BANKS = 1024
MAX_ROW_BYTES = 1 << 20
#: Most activations one tFAW window may allow.
MAX_ACTIVATIONS_PER_WINDOW = 1024


class Rows(Spec):
    """``regions[].rows``: a DRAM's rows and banks (opening a row costs; see docs/timing-model.md)."""

    source: Source
    row_bytes: Annotated[int, param("bytes of one row (page); rows are cut from the region's base (a power of two, "
                                    "at least the region's burst)", ge=1, le=MAX_ROW_BYTES, unit="bytes")]
    banks: Annotated[int, param("banks the rows are interleaved over (row r in bank r % banks); each keeps its "
                                "last row open", ge=1, le=MAX_BANKS, unit="banks")]
    activations_per_window: Annotated[int, param(
        "row activations the device allows in any window_cycles (tFAW), over all its banks", ge=1,
        le=MAX_ACTIVATIONS_PER_WINDOW, unit="activations")]
    window_cycles: Annotated[int, param("the activation window (tFAW)", ge=1, le=MAX_CYCLES, unit="cycles",
                                        why=" cycles (10 ms at 1 GHz)")]
    bank_busy_cycles: Annotated[int, param("the least cycles between two activations of one bank (tRC)", ge=0,
                                           le=MAX_CYCLES, unit="cycles", why=" cycles (10 ms at 1 GHz)")]
    channels: Annotated[int, param("data buses (channels) the rows are spread over; each turns around on its own",
                                   ge=1, le=MAX_BANKS, unit="channels")] = 1
    write_to_read_cycles: Annotated[int, param(
        "cycles a channel's data bus idles from a write's last data to the next read's first (tWTR + CL)", ge=0,
        le=MAX_CYCLES, unit="cycles", why=" cycles (10 ms at 1 GHz)")] = 0
    read_to_write_cycles: Annotated[int, param(
        "cycles a channel's data bus idles from a read's last data to the next write's first", ge=0,
        le=MAX_CYCLES, unit="cycles", why=" cycles (10 ms at 1 GHz)")] = 0
    write_batch_bytes: Annotated[int, param(
        "bytes of writes the controller drains per turn while reads wait (0: the bus never turns around)", ge=0,
        le=MAX_ROW_BYTES, unit="bytes")] = 0


class Region(Spec):
    """``regions[]``: a mapped address range."""

    name: Name
    source: Source
    base: Annotated[int, param("the first address (inside the address_bits address space)", ge=0,
                               unit="address", hexa=True)]
    size_bytes: Annotated[int, param("bytes mapped (the region ends inside the address space)", ge=1,
                                     unit="bytes", hexa=True)]
    kind: Literal["shared", "private"]
    latency_cycles: Cycles
    bandwidth_bytes_per_cycle: Annotated[float, param(
        "what the region delivers in all, shared among the transfers streaming through it", ge=MIN_RATE,
        le=MAX_RATE, unit="bytes/cycle", note=_TYPO)]
    role: Literal["storage", "scratchpad"] = "storage"
    alignment_bytes: Annotated[int, param("alignment of call buffers in it (a power of two)", ge=1,
                                          le=MAX_ALIGNMENT_BYTES, unit="bytes")] = 1
    burst_bytes: Annotated[int, param("the smallest unit the region moves", ge=1, le=MAX_BURST_BYTES,
                                      unit="bytes")] = 1
    rows: Rows | None = None


class Level(Spec):
    """``staging.levels[]``: memory the kernels own during a call."""

    name: Name
    region: Name
    offset_bytes: Annotated[int, param("where the window starts in its region (required for a shared region)",
                                       ge=0, unit="bytes", hexa=True)] | None = None
    size_bytes: Annotated[int, param("bytes of the window (required for a shared region; default: the rest of "
                                     "a private one)", ge=1, unit="bytes", hexa=True)] | None = None
    beside: Name | None = None
    takes_free_bytes: bool = False


class Staging(Spec):
    """``staging:``: the staging levels, outermost first."""

    source: Source
    levels: Annotated[list[Level], param("staging levels, outermost first", min_length=1, max_length=MAX_LEVELS,
                                         items="staging levels")]


class TargetFile(Spec):
    """A whole target file."""

    name: Name
    source: Source
    clock_hz: Annotated[int, param("the cores' clock", ge=MIN_CLOCK_HZ, le=MAX_CLOCK_HZ, unit="Hz",
                                   why=" (100 GHz)")]
    address_bits: Annotated[int, param("width of an address", ge=8, le=MAX_ADDRESS_BITS, unit="bits")]
    cores: Annotated[int, param("DSP cores of the chip", ge=1, le=MAX_CORES, unit="cores")]
    sync: Sync
    core: Core
    dma: Dma
    regions: Annotated[list[Region], param("regions", min_length=1, max_length=MAX_REGIONS,
                                           items="regions")]
    staging: Staging
    description: Text | None = None


#: The sections of a target file and their schema structs, for :func:`range_table`.
SECTIONS: tuple[tuple[str, type], ...] = (
    ("", TargetFile), ("sync.", Sync), ("core.", Core), ("core.issue_width.", IssueWidth),
    ("core.units.*.", MemoryUnit), ("core.precisions.*.", Lanes), ("dma.", Dma), ("regions[].", Region),
    ("regions[].rows.", Rows),
    ("staging.", Staging), ("staging.levels[].", Level),
)


def range_table() -> dict[str, str]:
    """Key path -> declared range (``lo .. hi``) of every numeric key of a target file."""
    return {row.key: row.allowed for prefix, struct in SECTIONS for row in reference(struct, prefix)
            if row.allowed}
