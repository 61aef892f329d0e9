"""What a chip is: frozen dataclasses with a unit in every field name, built by :mod:`sim.model.target_loader`.

No loading, no checking and no timing here: :func:`sim.model.target_loader.load_target` reads and checks a
target file and builds these; :mod:`sim.timing` turns their numbers into cycles.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from sim.model.memo import cached_hash, state_without_hash

#: The storage precisions: the element types a kernel symbol's buffers hold (``fp32`` for ``fp_`` symbols,
#: ``fp16`` for ``hp_``).  A core may compute in further precisions (``fp16_fp32acc``: fp16 products accumulated
#: in fp32), which are rates, never symbols.
STORAGE_PRECISIONS = ("fp32", "fp16")
#: Every precision a core may list under ``core.precisions``: the storage ones and the mixed ones.
COMPUTE_PRECISIONS = STORAGE_PRECISIONS + ("fp16_fp32acc",)
#: The functional-unit classes a core may have (``core.units``) and a loop may name; ``fmac`` and ``vls``
#: every core has.
UNIT_CLASSES = ("fmac", "valu", "vls", "broadcast", "sload", "salu")
REQUIRED_UNITS = ("fmac", "vls")
#: The VLIW issue classes a unit issues from (``core.issue_width`` gives the slots per cycle of each).
ISSUE_CLASSES = ("scalar", "vector")


@dataclass(frozen=True)
class PrecisionModel:
    """Vector throughput of one core at one precision: ``lanes`` elements per vector instruction.

    ``fmac_units`` is the core's FMAC count (``core.units.fmac.count``), copied here by the loader so that the
    peak reads off one object.
    """

    lanes: int
    fmac_units: int

    @property
    def peak_flops_per_cycle(self) -> int:
        """Element operations per cycle: lanes x FMAC units x 2 (a multiply-add counts two)."""
        return self.lanes * self.fmac_units * 2


@dataclass(frozen=True)
class FunctionalUnit:
    """One class of a core's functional units (an entry of the target's ``core.units``).

    ``count`` units of the class issue one instruction each per cycle, from the
    VLIW slots of ``issue_class`` (``scalar`` or ``vector``); a result is ready
    ``latency_cycles`` after issue.  ``bytes_per_issue`` is what one issue moves
    between memory and registers, for the load/store classes (``vls``: a vector
    load or store from AM; ``sload``: a scalar load from SM); 0 for the others.
    ``store_latency_cycles`` is how long after its issue a store's data is in
    memory (a loop names a store on the unit as ``<unit>.store``,
    :data:`sim.model.plan.STORE`); the load/store classes may set it apart
    from a load's ``latency_cycles`` (FT-M7032: VSTDW 4, VLDDW 9).
    """

    name: str
    count: int
    issue_class: str
    latency_cycles: int
    bytes_per_issue: int = 0
    store_latency_cycles: int | None = None

    def latency(self, *, store: bool = False) -> int:
        """Cycles from an issue to its result (``store``: to a store's data in memory; a unit without its own
        store latency stores as it loads)."""
        if store and self.store_latency_cycles is not None:
            return self.store_latency_cycles
        return self.latency_cycles


@dataclass(frozen=True)
class CoreModel:
    """One DSP core's compute: its functional units and VLIW issue slots (the target's ``core:`` block).

    ``units`` maps a unit class (:data:`UNIT_CLASSES`) to its :class:`FunctionalUnit`; ``issue_width`` an issue
    class (:data:`ISSUE_CLASSES`) to the instructions of that class the core issues per cycle.
    ``loop_overhead_cycles`` is paid on each entry of a loop (call and setup: a scheduled loop's branch has
    delay slots, so no per-iteration cost), ``tile_overhead_cycles`` once per tile's compute call;
    ``reduction_latency_cycles`` per vector reduced across its lanes.  ``precisions`` maps each precision the
    core computes in (:data:`COMPUTE_PRECISIONS`) to its lanes.  :mod:`sim.timing` prices loops from these.
    """

    precisions: Mapping[str, PrecisionModel]
    vector_width_bytes: int
    reduction_latency_cycles: int
    loop_overhead_cycles: int
    tile_overhead_cycles: int
    issue_width: Mapping[str, int]
    units: Mapping[str, FunctionalUnit]
    vector_registers: int

    # Hashed by value once (its mappings by their items): loop prices are remembered per core model (sim.model.memo).
    __hash__ = cached_hash
    __getstate__ = state_without_hash


@dataclass(frozen=True)
class DmaModel:
    """The DMA engines of each core: how many, the cycles to program one, and the most bytes per cycle one
    engine streams (a transfer's rate is capped by it as well as by the regions it crosses); and the numbered
    channels a core's transfers may name."""

    engines_per_core: int
    setup_cycles: int
    engine_bytes_per_cycle: float
    #: Logical channels each core numbers its transfers on (``Transfer.channel``): a channel takes one transfer at a
    #: time, in issue order (the chip's numbered channels: hthreads' ``dma_p2p_opt(..., chno)``).
    channels_per_core: int


@dataclass(frozen=True)
class DramRows:
    """How a DRAM region's bytes sit in rows and banks, and what opening a row costs (``regions[].rows``).

    The region's bytes are cut into rows of ``row_bytes`` from its base; row ``r`` lies in bank ``r % banks``
    (rows interleaved over the banks).  Each bank keeps its last row open: reading or writing another row of
    the bank first activates it.  The device allows ``activations_per_window`` activations in any
    ``window_cycles`` (tFAW, over all its banks), and one bank activates at most once per
    ``bank_busy_cycles`` (tRC).  :func:`sim.model.dram.row_use` counts a transfer's activations;
    :mod:`sim.engine` streams them through the region's activation link (:mod:`sim.engine.fluid`).  While reads
    and writes stream through the region at once, each channel's data bus turns around twice per
    ``write_batch_bytes`` of writes (:mod:`sim.engine.turnaround`).
    """

    row_bytes: int
    banks: int
    activations_per_window: int
    window_cycles: int
    bank_busy_cycles: int
    #: Data buses (channels) the rows are spread over; each turns its bus around on its own.
    channels: int = 1
    #: Cycles a channel's data bus idles from a write burst's last data to the next read's first (tWTR + CL).
    write_to_read_cycles: int = 0
    #: Cycles it idles from a read burst's last data to the next write's first (DDR4: 2 clocks).
    read_to_write_cycles: int = 0
    #: Bytes of writes the controller drains per turn while reads wait (0: no turnaround is modelled).
    write_batch_bytes: int = 0

    # Hashed once: it keys the row counts remembered by value (sim.model.memo).
    __hash__ = cached_hash
    __getstate__ = state_without_hash

    @property
    def period_bytes(self) -> int:
        """Bytes after which the rows' banks repeat (``row_bytes * banks``)."""
        return self.row_bytes * self.banks

    @property
    def turns_around(self) -> bool:
        """Whether the data bus pays for switching between reads and writes."""
        return bool(self.write_batch_bytes) and bool(self.write_to_read_cycles + self.read_to_write_cycles)


@dataclass(frozen=True)
class Region:
    """A mapped address range.

    ``kind`` is ``shared`` (one backing store seen by every core, its
    bandwidth shared by every core's transfers) or ``private`` (one backing
    store per core at the same addresses, each with the whole bandwidth).
    ``role`` ``scratchpad`` marks kernel staging memory that call buffers may
    not use.  ``bandwidth_bytes_per_cycle`` is what the region delivers in
    all: the transfers streaming through it at a moment share it (max-min
    fair, :mod:`sim.engine.fluid`), and a lone one may take all of it.
    ``burst_bytes`` is the smallest unit the region moves: a DMA whose
    contiguous runs are shorter (a strided slice of a few channels per row)
    still pays whole bursts.  ``rows`` (DRAM only) is how its bytes sit in rows and banks, None for memory that
    opens no rows (SRAM scratchpads, GSM).
    """

    name: str
    base: int
    size_bytes: int
    kind: str
    role: str
    latency_cycles: int
    bandwidth_bytes_per_cycle: float
    alignment_bytes: int
    burst_bytes: int = 1
    rows: DramRows | None = None

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

    def contains(self, addr: int, size_bytes: int) -> bool:
        """True when ``[addr, addr + size_bytes)`` lies wholly inside the region."""
        return self.base <= addr and addr + size_bytes <= self.end


@dataclass(frozen=True)
class StagingLevel:
    """One staging level of the chip (an entry of ``staging.levels`` in the target file).

    A staging level is memory the kernels own during a call to stage data in: a
    window ``[base, base + size_bytes)`` of region ``region``.  ``shared`` levels
    lie in shared memory (one window every core sees: cross-core partial
    results); the others in a private scratchpad region (the same local addresses
    in every core's own copy).  ``beside`` names the per-core level this one sits
    next to rather than under (a scalar memory beside the vector one), or None.
    The chip's levels are listed outermost first (``Target.staging``).  ``takes_free_bytes`` (shared levels
    only): for a call, the level also takes the bytes of its region around its window that hold none of the
    call's buffers, other levels' included (the kernel staging through it uses no other shared level; see
    :func:`sim.planning.staging_areas`).
    """

    name: str
    region: str
    base: int
    size_bytes: int
    shared: bool
    beside: str | None = None
    takes_free_bytes: bool = False

    @property
    def end(self) -> int:
        """One past the window's last address."""
        return self.base + self.size_bytes


@dataclass(frozen=True)
class StagingArea:
    """One staging level as a plan sees it: a window of addresses a kernel owns during a call.

    ``region`` is the memory region holding it; ``base``/``size_bytes`` the window
    (the whole region for a per-core scratchpad; the same local addresses on every
    core of a private region); ``shared`` whether every core sees the same bytes;
    ``alignment_bytes`` the alignment allocations in it keep; ``beside`` the name of
    the per-core level it sits beside (a scalar memory next to the vector one), or None.
    """

    name: str
    region: str
    base: int
    size_bytes: int
    shared: bool
    alignment_bytes: int
    beside: str | None = None

    @property
    def end(self) -> int:
        """One past the window's last address."""
        return self.base + self.size_bytes


@dataclass(frozen=True)
class Target:
    """A whole chip: cores, clock, memory map, DMA, synchronisation costs, staging levels (outermost first)."""

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
    staging: tuple[StagingLevel, ...]

    @property
    def precisions(self) -> tuple[str, ...]:
        """The storage precisions the chip has kernel symbols for (``fp32``, ``fp16``: :data:`STORAGE_PRECISIONS`);
        ``core.precisions`` also lists the mixed ones the cores compute in (``fp16_fp32acc``)."""
        return tuple(p for p in self.core.precisions if p in STORAGE_PRECISIONS)

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

    def staging_level(self, name: str) -> StagingLevel:
        """The staging level called ``name``."""
        for level in self.staging:
            if level.name == name:
                return level
        raise KeyError(name)

    @property
    def shared_levels(self) -> tuple[StagingLevel, ...]:
        """The staging levels in shared memory (windows no call buffer may use), outermost first."""
        return tuple(level for level in self.staging if level.shared)

    @property
    def private_levels(self) -> tuple[StagingLevel, ...]:
        """The per-core staging levels (in private scratchpad regions), outermost first."""
        return tuple(level for level in self.staging if not level.shared)

    @property
    def vector_level(self) -> StagingLevel:
        """The innermost per-core staging level beside no other: where a tile's compute operands live."""
        return [level for level in self.staging if not level.shared and level.beside is None][-1]
