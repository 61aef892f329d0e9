"""The plan IR: what a kernel hands the engine, as plain frozen data (public: user kernels build it too).

A kernel lowers a bound call (:mod:`sim.model.call`) into a :class:`Plan`: phases separated by
barriers, each a list of :class:`Tile` per core.  A tile is DMA-in :class:`Transfer` descriptors into the
core's staging memory, one :class:`Compute` on staged :class:`Operand` arrays, and DMA-out transfers.
The engine (:mod:`sim.engine`) executes plans and :mod:`sim.timing` prices them; kernels only describe
them.  Addresses are raw chip addresses; private regions resolve to the issuing core's own memory.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, NamedTuple, TypeVar, overload

import numpy as np

from sim.errors import LayoutError
from sim.model.direct_init import direct_init
from sim.model.memo import FrozenDict, cached_hash, memoized, state_without_hash
from sim.model.memory import block_span


def c_strides(shape: Sequence[int], itemsize: int) -> tuple[int, ...]:
    """Byte strides of a C-ordered array of ``shape`` with ``itemsize`` bytes per element."""
    if len(shape) == 2 and type(itemsize) is int:  # (most blocks: rows of a matrix)
        rows, cols = shape
        if type(rows) is int and type(cols) is int:
            return (itemsize * max(cols, 1), itemsize)
    strides: list[int] = []
    step = itemsize
    for n in reversed(tuple(shape)):
        strides.append(step)
        step *= max(int(n), 1)
    return tuple(reversed(strides))


_V = TypeVar("_V")


class _derived(Generic[_V]):
    """A value worked out from a frozen instance's fields on first use and kept on the instance (outside its
    fields: equality, hashing and ``repr`` do not see it).  ``functools.cached_property`` without its lock, which
    costs more than the values it would keep here (Python 3.11 takes it on every first use)."""

    def __init__(self, fn: Callable[[Any], _V]):
        self.fn = fn
        self.name = fn.__name__
        self.__doc__ = fn.__doc__

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> _derived[_V]: ...

    @overload
    def __get__(self, obj: object, owner: type | None = None) -> _V: ...

    def __get__(self, obj: object, owner: type | None = None) -> _V | _derived[_V]:
        if obj is None:
            return self
        value = obj.__dict__[self.name] = self.fn(obj)  # a non-data descriptor: the instance's entry wins next
        return value


#: The highest ``Transfer.priority`` a plan may give: eight levels, the model's (how many the chip's DMA has is not
#: published).
MAX_PRIORITY = 7


def _plain(priority: object) -> Any:
    """A numpy integer priority as the Python int it is, as the helpers below make their other numbers; anything
    else as given (the plan check refuses what is not an int from 0 to :data:`MAX_PRIORITY`, naming it)."""
    if isinstance(priority, numbers.Integral) and not isinstance(priority, bool) and type(priority) is not int:
        return int(priority)
    return priority


@direct_init
@dataclass(frozen=True)
class Transfer:
    """One DMA descriptor: an n-d block of elements copied from ``src`` to ``dst``.

    Addresses are raw chip addresses; private regions resolve to the issuing core's
    own memory.  ``shape`` counts elements per dimension; the strides are in bytes
    and may differ on each side (a strided gather of a channel slice into a
    contiguous scratchpad buffer, for instance).
    """

    src: int
    dst: int
    shape: tuple[int, ...]
    itemsize: int
    src_strides: tuple[int, ...]
    dst_strides: tuple[int, ...]
    #: A synchronised transfer's group (None: the transfer runs alone).  The transfers of one phase that name the
    #: same key, each on a different core, move together as one synchronised transfer (the chip's row-synchronised
    #: DMA, docs/timing-model.md): their descriptors' runs stream in lock step, interleaved run by run in core
    #: order, so their DRAM rows are the merged stream's; a source block that several of them read alike from a
    #: shared region is read once (a broadcast).  A key names one group in the whole plan.
    sync: str | None = None
    #: The descriptor's priority (the chip's ``prir``, hthreads' ``raw_dma_p2p``), 0 to :data:`MAX_PRIORITY`: a
    #: higher one takes its core's next free DMA engine before lower ones waiting, and where streams share a memory
    #: region or a core's memory, those of the highest priority present take what they can first and the others
    #: share what they leave (docs/timing-model.md, "Priorities").  The members of a synchronised transfer have one
    #: priority.
    priority: int = 0
    #: The core's numbered DMA channel the descriptor is issued on (the chip's ``chno``, hthreads'
    #: ``dma_p2p_opt``), 0 to the target's ``dma.channels_per_core`` - 1; None: the core's next free engine, as
    #: before.  A channel carries one transfer at a time: a transfer waits until the one issued before it on its
    #: channel has landed (the walk issues a tile's loads in order, then its stores), then takes an engine as any
    #: other (docs/timing-model.md, "DMA channels").  A synchronised transfer names none.
    channel: int | None = None

    # Hashed by value once per descriptor: the engine keys its work on a transfer by it, per transfer it runs.
    __hash__ = cached_hash
    __getstate__ = state_without_hash

    # The derived geometry below is worked out once per descriptor (cached on the instance, outside the
    # fields), from the geometry of its shape and strides, which is worked out once per distinct shape and strides
    # (:func:`transfer_geometry`): a plan's transfers repeat a few geometries at thousands of addresses.
    @_derived
    def _geometry(self) -> TransferGeometry:
        try:
            return transfer_geometry(self.shape, self.itemsize, self.src_strides, self.dst_strides)
        except TypeError:  # fields a hostile kernel gave unhashable (lists): worked out, not remembered
            return _geometry_of(self.shape, self.itemsize, self.src_strides, self.dst_strides)

    @_derived
    def size_bytes(self) -> int:
        """Bytes moved by this descriptor."""
        return self._geometry.size_bytes

    @staticmethod
    def contiguous(src: int, dst: int, size_bytes: int, priority: int = 0) -> Transfer:
        """A plain copy of ``size_bytes`` contiguous bytes."""
        return Transfer(src, dst, (int(size_bytes),), 1, (1,), (1,), None, _plain(priority))

    @staticmethod
    def block(src: int, dst: int, shape: Sequence[int], itemsize: int,
              src_strides: Sequence[int], dst_strides: Sequence[int] | None = None, priority: int = 0) -> Transfer:
        """A strided block; ``dst_strides`` defaults to a dense C-ordered destination."""
        shape = tuple(map(int, shape))
        itemsize = int(itemsize)
        dst_s = tuple(map(int, dst_strides)) if dst_strides is not None else c_strides(shape, itemsize)
        return Transfer(src, dst, shape, itemsize, tuple(map(int, src_strides)), dst_s, None, _plain(priority))

    def runs(self, side: str) -> tuple[int, int]:
        """``(number of contiguous runs, bytes per run)`` of ``side`` ('src' or 'dst').

        The run grows from the innermost dimension outwards while each stride
        continues the bytes before it; size-1 dimensions never break a run.
        """
        return self._src_runs if side == "src" else self._dst_runs

    def span(self, side: str) -> tuple[int, int]:
        """``(lowest address, one past the highest byte)`` touched on ``side`` ('src' or 'dst')."""
        return self._src_span if side == "src" else self._dst_span

    @_derived
    def _src_runs(self) -> tuple[int, int]:
        return self._geometry.src_runs

    @_derived
    def _dst_runs(self) -> tuple[int, int]:
        return self._geometry.dst_runs

    @_derived
    def _src_span(self) -> tuple[int, int]:
        lo, hi = self._geometry.src_span
        return self.src + lo, self.src + hi

    @_derived
    def _dst_span(self) -> tuple[int, int]:
        lo, hi = self._geometry.dst_span
        return self.dst + lo, self.dst + hi


class TransferGeometry(NamedTuple):
    """What a transfer's shape, itemsize and strides decide, wherever it lies: its bytes, each side's contiguous
    runs ``(number, bytes per run)`` and each side's span relative to its address ``(lowest, one past the
    highest byte)``."""

    size_bytes: int
    src_runs: tuple[int, int]
    dst_runs: tuple[int, int]
    src_span: tuple[int, int]
    dst_span: tuple[int, int]


def run_layout(shape: Sequence[int], itemsize: int, strides: Sequence[int]) -> tuple[int, list[tuple[int, int]]]:
    """(bytes per contiguous run, the dimensions ``(count, byte stride)`` that place the runs, outermost first): the
    run grows from the innermost dimension outwards while each stride continues the bytes before it; size-1
    dimensions never break a run and place none."""
    run = itemsize
    dims = list(zip(shape, strides))
    while dims:
        n, st = dims[-1]
        if n != 1:
            if st != run:
                break
            run *= n
        dims.pop()
    return run, [(n, st) for n, st in dims if n != 1]


def _runs_of(shape: tuple[int, ...], itemsize: int, strides: tuple[int, ...], total: int) -> tuple[int, int]:
    """``(runs, bytes per run)`` (:func:`run_layout`)."""
    run = run_layout(shape, itemsize, strides)[0]
    return (total // run if run else 0), run


def _geometry_of(shape: tuple[int, ...], itemsize: int, src_strides: tuple[int, ...],
                 dst_strides: tuple[int, ...]) -> TransferGeometry:
    """The :class:`TransferGeometry` of a transfer of ``shape`` elements of ``itemsize`` bytes at these strides."""
    total = itemsize
    for d in shape:
        total *= d
    return TransferGeometry(total, _runs_of(shape, itemsize, src_strides, total),
                            _runs_of(shape, itemsize, dst_strides, total),
                            block_span(0, shape, itemsize, src_strides), block_span(0, shape, itemsize, dst_strides))


#: :func:`_geometry_of` remembered by value (:mod:`sim.model.memo`).
transfer_geometry = memoized(_geometry_of)


@direct_init
@dataclass(frozen=True)
class Operand:
    """A dense C-ordered array at ``addr`` in the issuing core's view of memory."""

    addr: int
    shape: tuple[int, ...]
    dtype: np.dtype

    __hash__ = cached_hash
    __getstate__ = state_without_hash

    @property
    def size_bytes(self) -> int:
        """Bytes the operand occupies."""
        return math.prod(int(d) for d in self.shape) * np.dtype(self.dtype).itemsize


#: How a loop names a store on a load/store unit class: ``"vls" + STORE`` (``"vls.store"``) issues on ``vls`` like
#: a load and is done its unit's ``store_latency_cycles`` after issue (its data in memory), where a load's result
#: is ready ``latency_cycles`` after (FT-M7032: VSTDW 4, VLDDW 9).  Allowed wherever a loop names a unit class.
STORE = ".store"
#: The pseudo-unit of an epilogue step that reduces vectors across their lanes (through the scalar-vector
#: register): ``{REDUCE: n}`` takes n x the core's ``reduction_latency_cycles``; ``Loop.reductions`` is such a step.
REDUCE = "reduce"


def stored(unit: str) -> str:
    """The name of a store on load/store unit class ``unit`` (``stored("vls") == "vls.store"``)."""
    return unit + STORE


def unit_class(name: str) -> tuple[str, bool]:
    """``(unit class, is a store)`` of a unit name a loop states: ``"vls.store"`` -> ``("vls", True)``."""
    if name.endswith(STORE):
        return name[:-len(STORE)], True
    return name, False


@dataclass(frozen=True)
class Loop:
    """One loop of a tile's compute as the core runs it (the timing module prices it, :func:`sim.timing.loop_cycles`).

    ``trips`` iterations of a body that issues ``issues[unit]`` instructions on each functional-unit class of
    the core (``fmac``, ``valu``, ``vls``, ``broadcast``, ``sload``, ``salu``: the names of the target's
    ``core.units``; vector loads and stores both issue on ``vls``), software-pipelined: a new iteration starts
    every initiation interval.  ``chain`` lists the unit classes on one iteration's dependence chain, in order
    (the pipeline fill: e.g. ``("sload", "broadcast", "fmac")``); ``carried`` those on the dependence from one
    iteration to the next (an accumulation into the same registers: ``("fmac",)``), which bounds the interval
    from below by their latencies.  The loop is entered ``entries`` times (the product of the enclosing loops'
    trips), each entry paying the loop overhead, the fill, the trips and the epilogue after the last iteration.
    The epilogue is a chain of dependent steps, in order: ``epilogue_chain`` (each step a mapping of issues
    per unit class that waits for the step before: the levels of a tree adding accumulators together, a store
    then the modulo load reading it back, ...), then ``reductions`` cross-lane vector reductions (a step
    ``{REDUCE: reductions}``), then ``epilogue`` (issues after all that: storing the results, ...).  A store is
    named ``"vls.store"`` (:data:`STORE`) wherever its latency matters (the last step of a chain, a fill that
    ends in a store): it issues on ``vls`` and is done its store latency after issue.  ``vector_registers`` is
    how many vector registers the body keeps live (at most the core has); ``label`` names the loop in reports
    ("gemm micro-kernel 6x128", "elementwise").

    A loop is a hashable value: ``issues``, ``epilogue`` and each step of ``epilogue_chain`` may be given as any
    mapping (a dict, as kernels write them) and are kept as :class:`~sim.model.memo.FrozenDict` (equal to the
    dict they were given), so equal loops price once (:mod:`sim.model.memo`).
    """

    trips: int
    issues: Mapping[str, int]
    chain: tuple[str, ...] = ()
    carried: tuple[str, ...] = ()
    entries: int = 1
    epilogue: Mapping[str, int] = field(default_factory=dict)
    reductions: int = 0
    vector_registers: int = 0
    label: str = ""
    epilogue_chain: tuple[Mapping[str, int], ...] = ()

    __hash__ = cached_hash
    __getstate__ = state_without_hash

    def __post_init__(self) -> None:
        # Frozen mappings make the loop hashable; a mapping that is not one (a kernel's dict) is copied into one.
        for name in ("issues", "epilogue"):
            value = getattr(self, name)
            if type(value) is not FrozenDict and isinstance(value, Mapping):
                object.__setattr__(self, name, FrozenDict(value))
        steps = self.epilogue_chain
        if isinstance(steps, (tuple, list)) and any(type(m) is not FrozenDict and isinstance(m, Mapping)
                                                    for m in steps):
            object.__setattr__(self, "epilogue_chain", tuple(FrozenDict(m) if isinstance(m, Mapping) else m
                                                             for m in steps))

    def epilogue_steps(self) -> tuple[Mapping[str, int], ...]:
        """The whole epilogue as the chain :func:`sim.timing.loop_cost` prices: ``epilogue_chain``, the
        ``reductions`` step, the ``epilogue`` step (each left out when it issues nothing)."""
        tail = (FrozenDict({REDUCE: self.reductions}), self.epilogue)
        return tuple(m for m in (*self.epilogue_chain, *tail) if any(int(n) for n in m.values()))


@direct_init
@dataclass(frozen=True)
class TileFn:
    """A tile's compute function as a value: a module-level function ``fn`` and the parameters it is called with,
    ``fn(*params, *operands)`` (``functools.partial`` as frozen data).  Two tiles stating the same function with
    equal parameters state equal computes, so everything remembered of one (its price, :mod:`sim.model.memo`) serves the
    other.  ``params`` must be hashable (ints, strings, tuples, numpy dtypes).  A plain function or closure stays a
    valid ``Compute.fn`` (a user kernel's): it is hashed by identity, so only the same object is the same fn."""

    fn: Callable[..., Sequence[np.ndarray]]
    params: tuple[Any, ...] = ()

    __hash__ = cached_hash
    __getstate__ = state_without_hash

    def __call__(self, *operands: np.ndarray) -> Sequence[np.ndarray]:
        return self.fn(*self.params, *operands)

    @property
    def __name__(self) -> str:  # messages name a tile's function: name the function this one calls
        return getattr(self.fn, "__name__", type(self.fn).__name__)


@direct_init
@dataclass(frozen=True)
class Compute:
    """The vector work of one tile.

    ``fn`` receives the input operands as numpy arrays (read from simulated
    memory) and returns one array per output operand, which the engine writes
    back.  ``loops`` are the tile's inner loops (:class:`Loop`), run one after
    the other: every instruction the tile issues (the math, conversions,
    transpositions, reductions, loads and stores), which is all the timing
    module prices (:func:`sim.timing.compute_cycles`: the tile overhead plus
    each loop on the core's functional units).  ``flops`` counts the math's own
    element operations on this tile's elements (a fused multiply-add is two):
    summed over a plan they are the operation's flops, whatever the tiling or
    the storage precision; they are reported (FLOP, FLOP/s, the roofline's
    arithmetic intensity), never priced.  A compute that does arithmetic
    (``flops > 0``) or writes outputs must state its loops (the plan check's
    rule ``compute-loops``); one that does neither costs the tile overhead.
    ``fn`` is best a :class:`TileFn` (a module-level function and its parameters: a hashable value); a plain
    function or closure works too and is hashed by identity.
    """

    fn: Callable[..., Sequence[np.ndarray]]
    inputs: tuple[Operand, ...]
    outputs: tuple[Operand, ...]
    flops: int
    precision: str
    loops: tuple[Loop, ...] = ()

    __hash__ = cached_hash
    __getstate__ = state_without_hash


#: Separates a staged buffer's name from its generation in the string form of a buffer reference.
GENERATION_MARK = "@"


class BufferRef(str):
    """Fill number ``generation`` (0, 1, 2 ...) of the staged buffer ``name``: what a :class:`Tile`'s ``fills`` and
    ``uses`` list.  A typed reference that is also its string form ``"<name>@<generation>"`` (a ``str``: equal to
    it, hashed alike, immutable), so kernels written when references were strings keep working and both forms
    may be mixed.  Its fields are not checked here: the plan check refuses a malformed one, naming the tile."""

    name: str
    generation: int
    _parsed: tuple[str, int] | None

    def __new__(cls, name: str, generation: int) -> BufferRef:
        ref = super().__new__(cls, f"{name}{GENERATION_MARK}{generation}")
        # (name, generation) as parse_buffer_ref answers for a well-formed reference, worked out once: the engine,
        # the plan check and the steady state parse a plan's references tens of thousands of times.
        well_formed = isinstance(name, str) and name and type(generation) is int and generation >= 0
        ref.__dict__.update(name=name, generation=generation, _parsed=(name, generation) if well_formed else None)
        return ref

    def __setattr__(self, key: str, value: object) -> None:
        raise AttributeError("a BufferRef cannot change: make another")

    def __getnewargs__(self) -> tuple[str, int]:  # type: ignore[override]
        return self.name, self.generation

    def __repr__(self) -> str:
        return f"BufferRef({self.name!r}, {self.generation!r})"


#: What a tile's ``fills`` and ``uses`` hold: a :class:`BufferRef` or its string form (a BufferRef is a str).
AnyBufferRef = str


def buffer_ref(name: str, generation: int) -> BufferRef:
    """The reference to fill number ``generation`` (0, 1, 2 ...) of the staged buffer ``name``: a
    :class:`BufferRef`, which is the string ``"<name>@<generation>"``."""
    return BufferRef(name, int(generation))


def parse_buffer_ref(ref: AnyBufferRef) -> tuple[str, int]:
    """``(name, generation)`` of a buffer reference (a :class:`BufferRef` or its string form
    ``"name@generation"``); ValueError when malformed."""
    if type(ref) is BufferRef:
        parsed = ref._parsed
        if parsed is not None:
            return parsed  # else its string form says what is wrong with it
    if not isinstance(ref, str):
        raise ValueError(f"a buffer reference is a BufferRef(name, generation) or a string "
                         f"'name{GENERATION_MARK}generation', got {ref!r}")
    name, mark, gen = ref.rpartition(GENERATION_MARK)
    if not mark or not name or not gen.isdigit() or not gen.isascii():
        raise ValueError(f"buffer reference {ref!r} is not 'name{GENERATION_MARK}generation' (a name, "
                         f"'{GENERATION_MARK}', a generation 0, 1, 2 ...)")
    return name, int(gen)


@direct_init
@dataclass(frozen=True)
class Tile:
    """DMA in, compute, DMA out: the unit the engine double-buffers.

    ``slot`` names the scratchpad buffer set the tile uses; the engine does not
    start a tile's loads before the previous tile of the same slot has finished
    its stores, so a kernel that alternates two slots gets a double-buffered
    pipeline and one that uses a single slot gets a serial one.

    Blocking through several levels (DDR -> a shared level -> a core's level) names staged buffers.  A
    reference is a :class:`BufferRef` (:func:`buffer_ref`) or its string ``"<buffer>@<generation>"``:
    generation g of a buffer is its g-th fill in the phase (names are the phase's, shared by all its cores).

    * ``fills``: the buffers this tile's loads fill.  Such a *staging tile* has no compute and no stores, takes
      no part in slot ordering, and the core's walk does not wait for it: it moves on to its next tile while
      the loads stream (the next block streams while the cores compute on the current one).  Generation g is
      filled once every tile that lists it in ``fills`` (on any core: one core loads a block, or the cores
      split it) has landed its loads.  Its loads start only once generation g - 1 is filled and every tile
      that uses it has finished (the write-after-read hazard: a buffer is refilled only when no one reads it).
    * ``uses``: buffers that must be filled (by any core's tiles) before this tile's compute starts, and before
      its loads start if they read the buffer's bytes (:mod:`sim.model.buffer_reads`: a panel copied out of a
      staged block waits for the block, a load next to a block only the compute reads does not); the tile has
      finished with them once its compute is done (for a tile without compute: its loads have landed).

    A plan without ``fills`` and ``uses`` runs exactly as before they existed.  The plan check
    (:mod:`sim.model.plan_check`, rule ``buffers``) refuses references that cannot be met or that deadlock.
    """

    tile_id: int
    loads: tuple[Transfer, ...]
    compute: Compute | None
    stores: tuple[Transfer, ...]
    slot: int = 0
    fills: tuple[AnyBufferRef, ...] = ()
    uses: tuple[AnyBufferRef, ...] = ()


@dataclass(frozen=True)
class Phase:
    """Work of every participating core until the next barrier."""

    name: str
    tiles: Mapping[int, tuple[Tile, ...]]
    barrier_after: bool = True


@dataclass(frozen=True)
class Plan:
    """A lowered kernel call: the cores it runs on and its phases."""

    cores: tuple[int, ...]
    phases: tuple[Phase, ...]
    precision: str

    @property
    def tile_count(self) -> int:
        """Tiles of every core in every phase."""
        return sum(len(tiles) for phase in self.phases for tiles in phase.tiles.values())

    def barriers(self) -> tuple[bool, ...]:
        """Per phase, whether the cores meet at a barrier after it: its ``barrier_after`` on several cores, when a
        later phase has a tile (after the last phase with work the cores have nothing left to wait for: a reduce
        phase a small call leaves empty ended the run a barrier's latency after its work)."""
        last_work = max((i for i, phase in enumerate(self.phases) if any(phase.tiles.values())), default=-1)
        multi = len(self.cores) > 1
        return tuple(phase.barrier_after and multi and i < last_work for i, phase in enumerate(self.phases))


class DoesNotFit(LayoutError):
    """Planning's typed "does not fit": what a plan needs of a staging level is more than the level has.

    ``resource`` names the staging level (``PlanContext.level(name)``: ``am``, ``gsm`` ...); None means the
    vector level (the per-core level compute operands live in).  ``needed_bytes`` and ``available_bytes``
    say by how much.  The facade turns it into the ``scratchpad-fit`` layout violation
    (:func:`sim.model.layout.fit_violation`); a kernel's candidate tiling that raises it is dropped.  A
    LayoutError (the ``scratchpad-fit`` rule is a layout rule), so that kernels catching LayoutError to try
    another tiling keep working while they move to it.
    """

    def __init__(self, resource: str | None, needed_bytes: int, available_bytes: int, message: str | None = None):
        self.resource = resource
        self.needed_bytes = int(needed_bytes)
        self.available_bytes = int(available_bytes)
        where = f"staging level {resource}" if resource is not None else "the vector staging level"
        super().__init__(message or f"does not fit {where}: needs {self.needed_bytes} bytes of "
                                    f"{self.available_bytes}")
