"""The rules every plan obeys, checked before it runs: a plan that breaks one raises :class:`~sim.errors.PlanError`.

A kernel describes its work as a :class:`~sim.model.plan.Plan`; the engine would run whatever it is given.
:func:`check_plan` stands between them, so that a kernel written by a user (or a shipped kernel with a bug)
cannot move bytes the call does not own, compute on operands outside the staging memory, or confuse the
engine.  The rules, each with the id a :class:`~sim.errors.PlanError` names (see :data:`RULES`):

* ``plan-structure``: a Plan of Phases whose tiles map a core to Tiles of well-formed Transfers and
  Computes (int addresses and shapes, strides per dimension, at most :data:`MAX_TRANSFER_DIMS` dimensions, a
  ``Transfer.priority`` from 0 to :data:`~sim.model.plan.MAX_PRIORITY`, a ``Transfer.channel`` among the
  target's (none on a synchronised transfer), a precision the chip computes in, a
  callable function, str loop labels, a bool ``barrier_after``); a
  transfer's and an operand's numbers are Python ints or numpy int64 (a narrower numpy int overflows on a chip
  address, an unsigned one turns a sum with a signed offset into a float);
* ``cores``: the plan runs on cores of the call only, each once, and a phase has tiles on the plan's cores
  only;
* ``tile-ids``: a tile id appears once per core in a phase (traces and messages name a tile by phase and id);
* ``transfer-unmapped``: a transfer's source and destination each lie wholly inside one mapped region;
* ``private-memory``: a transfer never touches private memory the call has no buffer in (an ``_s`` call's
  buffers are all shared, so no core's private storage is the call's; a ``_p`` call runs on its own core);
* ``input-written``: a transfer never writes into an input buffer of the call;
* ``write-outside-outputs``: a transfer writes only into the call's output buffers and the staging levels;
* ``read-outside-buffers``: a transfer reads only from the call's buffers (inputs and outputs) and the staging
  levels (a read elsewhere would feed the kernel bytes its call never handed it);
* ``unwritten-read``: a transfer's source and a compute's input operands hold only the call's inputs or bytes
  the call wrote before (a staging level or an output holds, at the call's start, what an earlier call left
  there): :mod:`sim.model.written_bytes`;
* ``operand-level``: a compute operand lies wholly inside the innermost per-core staging level (the vector
  level), or the scalar level beside it;
* ``tile-size``: the operands of a tile fit the size of the staging level they lie in;
* ``output-overlap``: the output operands of one compute share no byte;
* ``transfer-overlap``: no two loads of one tile, and no two of its stores, touch the same bytes, one of them
  writing (they stream at the same time, in an order the engines' queues and priorities decide: a copy within
  DDR reading what another of the tile's stores writes is a race);
* ``store-race``: on one core in one phase, outside the per-core staging levels (``staging-alias`` has those) and
  the bytes staged buffers fill, no two transfers that may run at once touch the same bytes, one of them writing
  (both sides of every transfer count; the engine's order: :mod:`sim.model.walk_race`);
* ``core-race``: between two barriers, outside the per-core staging levels and the staged buffers' bytes, no two
  cores touch the same bytes of shared memory, one of them writing (only a barrier orders one core's transfers
  against another's; the rule does not follow chains of waits through staged buffers: :mod:`sim.model.core_race`);
  a staged buffer's bytes are its phase's own: another core's access to them in another phase of the window
  races its fills and uses.  (The staged buffers' bytes are those they fill in the staging levels: a fill
  elsewhere, into DDR say, is judged as any load.)
* ``buffers``: staged buffers (``Tile.fills`` / ``Tile.uses``) are references ``name@generation``; a staging
  tile (one that fills) has no compute and no stores and does not use what it fills; every generation used or
  refilled was filled in the phase, generations are filled in order (0, 1, 2 ...), and the phase's tiles can
  all run: no core waits, directly or through other cores, for a buffer that only its own later work fills or
  releases (a deadlock);
* ``compute-loops``: a compute that does arithmetic (``flops > 0``) or writes outputs states its loops (what it
  issues, and so what it costs: :func:`sim.timing.compute_cycles` prices loops only);
* ``compute-flops``: a compute states no more flops than its loops can issue (:data:`ARITHMETIC_RULE`: its flops
  are reported, never priced, so a compute claiming more would show its arithmetic in the time of far less);
* ``loop-units``: a compute's loops issue only on unit classes the core has (``core.units``), stores only on a unit
  that moves data (``vls.store``, ``sload.store``);
* ``loop-registers``: a loop keeps live at most the vector registers the core has;
* ``bounds``: every count a plan states is bounded, so that no report overflows: ``Loop.trips``, ``entries``,
  ``reductions`` and each issue count at most :data:`MAX_LOOP_COUNT` (2**32), ``Compute.flops`` at most
  :data:`MAX_TILE_FLOPS` (2**48), and (when the facade prices them) a tile's compute at most
  :data:`MAX_TILE_CYCLES` (2**40 cycles) and a core's computes in the plan at most
  :data:`MAX_CORE_COMPUTE_CYCLES` (2**52); each side of a transfer places at most :data:`MAX_TRANSFER_RUNS`
  (2**24) contiguous runs (the engine walks them: a broadcast of 2**32 elements would exhaust memory);
* ``staging-alias``: on one core, two tiles of different slots that the engine may run at the same time (a
  tile's loads overlap the previous tile's compute and stores, and a tile's stores the later tiles) never touch
  the same bytes of a per-core staging level with one of them writing (:mod:`sim.model.plan_alias`); two
  staged buffers of a phase never fill the same bytes, nor two staging tiles one generation's, only a buffer's
  fills write its bytes, and only tiles that use a buffer read them.  A core's tiles use at most 64 slots in a
  phase;
* ``sync-transfers``: the transfers that name one ``Transfer.sync`` key (a synchronised transfer,
  :mod:`sim.model.sync`) lie in one phase, each on a different core, at one ``Transfer.priority`` (a key names one
  group in the whole plan).

Also under ``plan-structure``: ``Plan.precision`` is one the chip computes in, and an operand's dtype is a
number type (bool, int, uint or float).

The check reads the plan only (no memory, no SimPy) and costs a few microseconds per transfer; the facade
runs it once per plan it builds (plans are cached), before anything runs, so a refused plan leaves memory
exactly as it was.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from sim.errors import PlanError, brief, one_line
from sim.model.block_overlap import covered, covered_offsets, layout_of, sides_meet
from sim.model.buffer_reads import buffer_spans, read_uses
from sim.model.call import BoundCall
from sim.model.core_race import Access, CoreRaces, Race
from sim.model.memory import MemoryMap, block_span
from sim.model.plan import (
    MAX_PRIORITY,
    REDUCE,
    Compute,
    Loop,
    Operand,
    Phase,
    Plan,
    Tile,
    TileFn,
    Transfer,
    parse_buffer_ref,
    run_layout,
    stored,
    unit_class,
)
from sim.model.plan_alias import AliasCheck, Spans, merged
from sim.model.target import StagingArea, Target
from sim.model.walk_race import Side, WalkRaces
from sim.model.written_bytes import LaterFills, WrittenBytes

#: Most steps a loop's ``epilogue_chain`` may state (a reduction tree of 2**32 accumulators has 32 levels).
MAX_EPILOGUE_STEPS = 256
#: Largest count a loop may state (``Loop.trips``, ``entries``, ``reductions``, each issue count): 2**32.
MAX_LOOP_COUNT = 1 << 32
#: Largest ``Compute.flops`` of one tile (2**48, about 2.8e14: a tile holds at most a staging level's elements).
MAX_TILE_FLOPS = 1 << 48
#: Most cycles one tile's compute may take (2**40: about ten minutes at 1.8 GHz), and a core's computes in one
#: plan (2**52): a run's cycles then stay far inside the 64-bit integers summaries and traces count them in.
MAX_TILE_CYCLES = 1 << 40
MAX_CORE_COMPUTE_CYCLES = 1 << 52

#: Most contiguous runs a transfer's side may place (the DRAM's rows and the numerics walk them one by one).
MAX_TRANSFER_RUNS = 1 << 24

#: Most dimensions a transfer may have (a DMA descriptor's; numpy's arrays have at most 64, and a copy views
#: each side with one more).
MAX_TRANSFER_DIMS = 32

def _covered(lo: int, hi: int, spans: Sequence[tuple[int, int]]) -> bool:
    """Whether ``[lo, hi)`` lies inside the union of ``spans`` (sorted by start)."""
    cursor = lo
    for s_lo, s_hi in spans:  # sweep [lo, hi) across them
        if s_lo > cursor:
            break
        if s_hi > cursor:
            cursor = s_hi
            if cursor >= hi:
                return True
    return cursor >= hi


def _unwritten_words(what: str, lo: int, hi: int, gap: tuple[int, int], writers: str) -> str:
    """The ``unwritten-read`` message: ``what`` reads ``[lo, hi)``, of which ``gap`` nothing wrote."""
    return (f"{what} reads {_span(lo, hi)}, whose bytes {_span(*gap)} nothing in this call wrote before it "
            f"({writers} loads, stores or computes): they hold whatever an earlier call left there; write them "
            f"first")


#: Rule id -> the rule in words (for the docs and for tools).
RULES: dict[str, str] = {
    "plan-structure": "a plan is a Plan of Phases whose tiles map a core to Tiles of well-formed Transfers and "
                      "Computes",
    "cores": "a plan runs on cores of the call only, each once; a phase has tiles on the plan's cores only",
    "tile-ids": "a tile id appears once per core in a phase",
    "transfer-unmapped": "a transfer's source and destination each lie wholly inside one mapped region",
    "private-memory": "a transfer never touches private memory the call has no buffer in",
    "input-written": "a transfer never writes into an input buffer of the call",
    "write-outside-outputs": "a transfer writes only into the call's output buffers and the staging levels",
    "read-outside-buffers": "a transfer reads only from the call's buffers and the staging levels",
    "unwritten-read": "a transfer or a compute reads only the call's inputs and bytes the call wrote before (in the "
                      "staging levels and the outputs)",
    "operand-level": "a compute operand lies wholly inside the innermost per-core staging level (the vector "
                     "level) or the scalar level beside it",
    "tile-size": "the operands of a tile fit the size of the staging level they lie in",
    "output-overlap": "the output operands of one compute share no byte",
    "transfer-overlap": "no two loads of one tile, and no two of its stores, touch the same bytes, one of them "
                        "writing",
    "store-race": "on a core, outside the per-core staging levels and the staged buffers' bytes, no two transfers "
                  "that may run at once touch the same bytes, one of them writing",
    "core-race": "between two barriers, outside the per-core staging levels and the staged buffers' bytes (their "
                 "phase's own), no two cores touch the same bytes of shared memory, one of them writing",
    "buffers": "staged buffers are filled before they are used, in generation order, by staging tiles (no compute, "
               "no stores), and the phase's waits on them cannot deadlock",
    "compute-loops": "a compute that does arithmetic or writes outputs states the loops that issue its work",
    "compute-flops": "a compute states no more flops than its loops can issue (2 per FMAC, vector ALU and scalar "
                     "ALU issue per lane)",
    "loop-units": "a compute's loops issue only on unit classes the core has, stores only on a load/store unit",
    "loop-registers": "a loop keeps live at most the vector registers the core has",
    "bounds": "a plan's counts are bounded: a loop's counts at most 2**32, a tile's flops at most 2**48, a tile's "
              "compute at most 2**40 cycles, a core's computes at most 2**52, and a transfer's runs at most 2**24 a "
              "side",
    "staging-alias": "two tiles of a core that may be in flight at once (of different slots) never touch the same "
                     "staging bytes, one of them writing; staged buffers keep their bytes to themselves (only their "
                     "fills write them, only their users read them)",
    "sync-transfers": "the members of a synchronised transfer (one Transfer.sync key) are issued in one phase, "
                      "each by a different core, at one priority",
}


def _is_int(v: object) -> bool:
    return type(v) is int or (isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)))


_JUST_INT = {int}


def _ints(values: tuple, minimum: int | None = None) -> bool:
    """Whether ``values`` are all ints (numpy ints too, never bools), each at least ``minimum`` if given."""
    # The first test runs at C speed and settles the common case (plain ints); numpy ints take the slow one.
    if not set(map(type, values)) <= _JUST_INT and not all(_is_int(v) for v in values):
        return False
    return minimum is None or not values or min(values) >= minimum


def _ints_only(values: object) -> bool:
    """Whether ``values`` is a tuple of Python ints only."""
    return type(values) is tuple and set(map(type, values)) <= _JUST_INT


def _wide(values: tuple) -> bool:
    """Whether ``values`` (ints) are Python ints or numpy int64: the types whose sums with chip addresses neither
    overflow nor turn into floats (a numpy int32 overflows past 2**31, a uint64 added to an int64 gives a float)."""
    return all(type(v) is int or type(v) is np.int64 for v in values)


def _span(lo: int, hi: int) -> str:
    return f"[{lo:#x}, {hi:#x})"


def _span_offsets(shape: tuple[int, ...], src_strides: tuple[int, ...], dst_strides: tuple[int, ...],
                  itemsize: int) -> tuple[int, int, int, int]:
    """(lowest, one past the highest) byte of a non-empty block from its source address, then from its
    destination address (:func:`~sim.model.memory.block_span` at address 0: a span moves with its address)."""
    src_lo, src_hi = block_span(0, shape, itemsize, src_strides)
    dst_lo, dst_hi = block_span(0, shape, itemsize, dst_strides)
    return src_lo, src_hi, dst_lo, dst_hi



#: Element operations one issue of a unit class can perform, per vector lane: a fused multiply-add two, a vector
#: ALU op up to two (a compare-and-select, a fused negate-and-add), a scalar ALU op up to two (per lane it stands
#: for one lane's work); loads, stores, broadcasts and scalar loads none.  Generous on purpose: the rule catches a
#: compute that states far more arithmetic than its loops issue, never one that counts its ops a little
#: differently.
OPS_PER_ISSUE: dict[str, int] = {"fmac": 2, "valu": 2, "salu": 2}
#: How the rule compute-flops counts what a compute's loops can do.
ARITHMETIC_RULE = ("2 per FMAC, vector ALU and scalar ALU issue per lane, each loop's trips and epilogue times its "
                   "entries, and a cross-lane reduction a lane each")

#: How a message says what a side of a transfer does to its bytes, by (kind, writes).
_ACCESS = {("load", False): "reads", ("load", True): "loads into", ("store", False): "stores from",
           ("store", True): "stores"}


def _moves_nothing(t: Transfer) -> bool:
    return 0 in t.shape


def _sides_meet(a: Side, b: Side) -> bool:
    """Whether two transfer sides (:data:`sim.model.walk_race.Side`) share a byte."""
    return sides_meet(layout_of(a[3], a[4]), layout_of(b[3], b[4]))


class _Where:
    """Where the check is (kernel, core, tile, phase): the PlanError it raises names them."""

    __slots__ = ("kernel", "core", "tile", "phase")

    def __init__(self, kernel: str) -> None:
        self.kernel = kernel
        self.core: int | None = None
        self.tile: int | None = None
        self.phase: str | None = None

    def error(self, rule: str, detail: str) -> PlanError:
        return PlanError(rule, detail, kernel=self.kernel, core=self.core, tile=self.tile, phase=self.phase)


class _Checker:
    """One check of one plan against one call (memoising the verdict on each operand it meets: tiles reuse their
    slots' operands)."""

    def __init__(self, call: BoundCall, target: Target, levels: Sequence[StagingArea],
                 operand_levels: Sequence[StagingArea], kernel: str, price: Callable[[Loop], int] | None = None):
        self.call, self.target = call, target
        self.levels = tuple(levels)
        self.operand_levels = tuple(operand_levels)
        self.where = _Where(kernel)
        self.mmap = MemoryMap(target)
        sized = [b for b in call.buffers if b.size_bytes]
        self.inputs = [b for b in sized if b.role != "output"]
        self.outputs = sorted(((b.addr, b.end, b) for b in sized if b.role == "output"), key=lambda t: t[:2])
        # The spans a transfer's source may lie in (a staging level, a buffer of the call) and its destination (a
        # staging level, an output buffer): a side wholly inside one needs no further look.
        self._buffers = merged([(b.addr, b.end) for b in sized])
        self.readable = [(a.base, a.end) for a in self.levels] + list(self._buffers)
        self.writable = [(a.base, a.end) for a in self.levels] + [(lo, hi) for lo, hi, _ in self.outputs]
        self._operands: dict[Any, tuple[int, int, int]] = {}  # (addr, shape, dtype) -> its span and level index
        self._loops: dict[int, Any] = {}  # id -> a loop already judged
        # (shape, src strides, dst strides, itemsize) of a well-formed transfer -> the offsets of its lowest byte
        # and one past its highest from its source address, then from its destination address: a block's span
        # is its address plus offsets that only these decide, and tiles move blocks of a few shapes.
        self._spans: dict[tuple, tuple[int, int, int, int]] = {}
        # id -> a compute that passed: the compute rules read nothing but the compute (frozen data), so tiles
        # sharing one are judged once; held so that its id is not reused.
        self._computes: dict[int, Compute] = {}
        self._compute_values: dict[tuple, Compute] = {}  # a compute that passed, by what the rules read of it
        self._refs: dict[str, tuple[str, int]] = {}  # a buffer reference -> (name, generation), parsed once
        self._transfer_memo: dict[int, tuple[int, int, int, int]] = {}  # id -> a checked transfer's spans
        self._compute_memo: dict[int, tuple[Spans, Spans]] = {}  # id -> its output and input spans, merged
        self.alias = AliasCheck(self.levels, self._transfer_spans, self._compute_spans)
        self._local = tuple((a.base, a.end) for a in self.levels if not a.shared)
        self._local_bounds = (min((lo for lo, _ in self._local), default=0),
                              max((hi for _, hi in self._local), default=0))
        # For core-race: the sides (reads, writes) that another core may touch too, since the last barrier (None:
        # a plan of one core).
        self._accesses: tuple[list[Access], list[Access]] | None = None
        # ... and those to the bytes a phase's staged buffers fill, which the buffers' rules judge within their
        # phase; a window of several phases compares them with the other phases' accesses.
        self._withheld: list[Access] = []
        self._window_from = 0  # the first phase of the window
        self._shared_levels = tuple((a.base, a.end) for a in self.levels if a.shared)
        self._core_races = CoreRaces(self._shared_byte)
        self._walk_races = WalkRaces(_sides_meet)
        self._filled: tuple[tuple[int, int], ...] = ()  # the bytes the phase's staged buffers fill, merged
        self._filled_starts: list[int] = []
        self._buffer_spans: dict[str, Spans] = {}  # each staged buffer's bytes in the phase (buffer_reads)
        # The tile being checked, and its transfers' sides the race rules judge (outside the per-core staging
        # levels and the staged buffers' bytes): its loads', its stores'; each checked tile's (id -> both).
        self._tile: Tile | None = None
        self._race: tuple[list[Side], list[Side]] = ([], [])
        self._race_sides: dict[int, tuple[list[Side], list[Side]]] = {}
        # No transfer writes an input (input-written): reading one races nothing.
        self._inputs = merged([(b.addr, b.end) for b in self.inputs])
        self._input_starts = [lo for lo, _ in self._inputs]
        # Outside the staging levels a transfer writes only into the call's outputs (write-outside-outputs), so a
        # race between cores there lies in them: a side that misses their hull races no other core's.
        self._outputs_hull = (min((lo for lo, _, _ in self.outputs), default=0),
                              max((hi for _, hi, _ in self.outputs), default=0))
        self._staged = False  # whether the phase being checked has staged buffers
        # The tile being checked's transfer spans in per-core staging levels (load and store destinations, load
        # and store sources), and each checked tile's footprint number (id -> number; the plan holds the tiles).
        self._sides: tuple[list[tuple[int, int]], ...] = ([], [], [], [])
        self._footprints: dict[int, int] = {}
        # (core, staged buffer) -> its fills into the core's own staging levels not yet counted as written, by
        # generation: (generation, lo, hi, transfer) (unwritten-read, :meth:`_fills_written`).
        self._local_fills: dict[tuple[int, str], list[tuple[int, int, int, Transfer]]] = {}
        self._local_fills_at: dict[tuple[int, str], int] = {}  # how many of them are counted
        self._later = LaterFills()  # the phase's fills into shared memory, by buffer and generation
        # What the call has written so far, per core and in shared memory (unwritten-read).
        self._written = WrittenBytes(self._local, [(a.base, a.end) for a in self.levels if a.shared]
                                     + [(lo, hi) for lo, hi, _ in self.outputs],
                                     [(b.addr, b.end) for b in sized if b.role == "output" and b.reads_too])
        self.price = price
        self._cycles: dict[int, int] = {}  # id of a compute that passed -> its cycles (when priced)
        self._loop_cycles: dict[int, int] = {}  # id of a loop that passed (kept alive in _loops) -> its cycles
        self._core_cycles: dict[int, int] = {}  # core -> its computes' cycles so far
        self._phase_no = 0  # the phase being checked, counted from 0
        # sync key -> (phase no, its name, members' cores, priority)
        self._sync: dict[str, tuple[int, str, set[int], int]] = {}

    def _ref(self, ref: Any) -> tuple[str, int]:
        """:func:`parse_buffer_ref` of ``ref``, remembered for plain strings (a plan names a buffer generation in
        the tile that fills it, in those that use it and in the buffers rule's walk)."""
        got = self._refs.get(ref) if type(ref) is str else None
        if got is None:
            got = parse_buffer_ref(ref)
            if type(ref) is str:
                self._refs[ref] = got
        return got

    # -- structure -----------------------------------------------------------------------------

    def fail(self, rule: str, detail: str) -> PlanError:
        return self.where.error(rule, detail)

    def plan(self, plan: Any) -> None:
        if not isinstance(plan, Plan):
            raise self.fail("plan-structure", f"the kernel's plan() returned {brief(plan)}, not a Plan")
        cores = plan.cores
        if not isinstance(cores, tuple) or not cores or not all(_is_int(c) for c in cores):
            raise self.fail("plan-structure", f"Plan.cores must be a non-empty tuple of core numbers, got "
                                              f"{brief(cores)}")
        outside = [int(c) for c in cores if int(c) not in self.call.cores]
        if outside:
            raise self.fail("cores", f"the plan runs on core {outside[0]}, which the call does not (it runs on "
                                     f"cores {', '.join(map(str, self.call.cores))})")
        if len(set(cores)) != len(cores):
            raise self.fail("cores", f"Plan.cores lists a core twice: {brief(cores)}")
        if not isinstance(plan.precision, str) or plan.precision not in self.target.core.precisions:
            raise self.fail("plan-structure", f"Plan.precision is {brief(plan.precision)}, which {self.target.name} "
                                              f"lacks (it computes in: {', '.join(self.target.core.precisions)})")
        if not isinstance(plan.phases, tuple) or not all(isinstance(p, Phase) for p in plan.phases):
            raise self.fail("plan-structure", f"Plan.phases must be a tuple of Phase, got {brief(plan.phases)}")
        plan_cores = {int(c) for c in cores}
        for self._phase_no, phase in enumerate(plan.phases):
            self.where.phase = phase.name if isinstance(phase.name, str) else brief(phase.name)
            if not isinstance(phase.tiles, Mapping):
                raise self.fail("plan-structure", f"Phase.tiles must map a core to its tiles, got "
                                                  f"{brief(phase.tiles)}")
            if not isinstance(phase.barrier_after, (bool, np.bool_)):
                raise self.fail("plan-structure", f"Phase.barrier_after must be True or False, got "
                                                  f"{brief(phase.barrier_after)}")
            self._staged = any(getattr(t, "fills", None) or getattr(t, "uses", None)
                               for ts in phase.tiles.values() if isinstance(ts, (tuple, list)) for t in ts)
            self._filled, self._filled_starts = (), []
            self._race_sides = {}
            self._local_fills, self._local_fills_at, self._later = {}, {}, LaterFills()
            if self._staged:
                self._fills_written(phase)
            if self._accesses is None and len(cores) > 1:
                self._accesses, self._window_from = ([], []), self._phase_no
            marks = (len(self._accesses[0]), len(self._accesses[1])) if self._accesses is not None else (0, 0)
            for core, tiles in phase.tiles.items():
                self.where.core, self.where.tile = None, None
                if not _is_int(core) or int(core) not in plan_cores:
                    raise self.fail("cores", f"the phase has tiles on core {brief(core)}, which is not one of the "
                                             f"plan's cores ({', '.join(map(str, cores))}): they would never run")
                self.where.core = int(core)
                if not isinstance(tiles, (tuple, list)):
                    raise self.fail("plan-structure", f"the tiles of a core must be a tuple of Tile, got "
                                                      f"{brief(tiles)}")
                ids: set[int] = set()  # a trace names a tile by its phase and id: ids restart in each phase
                for tile in tiles:
                    self.tile(tile, ids)
            self.where.core = self.where.tile = None
            if self._staged:  # the bytes staged buffers fill in the staging levels: the buffers and alias rules
                # judge their accesses (a fill elsewhere, into DDR say, is a load as any other to the race rules)
                self._buffer_spans = buffer_spans(phase)
                self._filled = merged([piece for ts in phase.tiles.values() for tile in ts if tile.fills
                                       for t in tile.loads if not _moves_nothing(t)
                                       if self._in_level(*self._transfer_spans(t)[2:])
                                       for piece in (covered(layout_of(t, "dst"))
                                                     or [self._transfer_spans(t)[2:]])])
                self._filled_starts = [lo for lo, _ in self._filled]
                if self._accesses is not None:
                    for i, mark in enumerate(marks):
                        kept: list[Access] = []
                        for a in self._accesses[i][mark:]:
                            (self._withheld if self._in_filled(a[0], a[1], a[4], a[3]) else kept).append(a)
                        self._accesses[i][mark:] = kept
            for core, tiles in phase.tiles.items():
                self.where.core = int(core)
                self._store_races(tiles)
            self.where.core = self.where.tile = None
            if self._accesses is not None and (phase.barrier_after or self._phase_no == len(plan.phases) - 1):
                # (a phase without a barrier after it lets each core walk on into the next: one window)
                race = self._core_races.first(*self._accesses)
                if race is None and self._withheld and self._phase_no > self._window_from:  # (a window of several
                    # phases: only the buffers' own phase orders the accesses to their bytes)
                    race = self._core_races.across(self._withheld, [*self._withheld, *self._accesses[0],
                                                                    *self._accesses[1]])
                self._core_race(race)
                self._accesses, self._withheld = None, []
            staged = self._staged
            if staged:
                self.buffers(phase)
                self.where.core = self.where.tile = None
            self.aliases(phase, staged)
            self.where.core = self.where.tile = None
            unwritten = self._written.end_phase()  # the shared reads, against every core's writes of the phase
            if unwritten is not None:
                read, gap = unwritten
                self.where.core, self.where.tile = read.core, read.tile
                raise self.fail("unwritten-read", _unwritten_words(read.what, read.lo, read.hi, gap, "any core's"))
        self.where.phase = None

    def _outside_staging(self, lo: int, hi: int) -> bool:
        """Whether ``[lo, hi)`` lies outside every per-core staging level (whose races ``staging-alias`` judges)."""
        lowest, highest = self._local_bounds
        return not (lowest <= lo and hi <= highest and any(base <= lo and hi <= end for base, end in self._local))

    def _store_races(self, tiles: Sequence[Tile]) -> None:
        """The ``store-race`` rule over one core's tiles of a phase (checked already): :mod:`sim.model.walk_race`."""
        race = self._walk_races.first(tiles, self._race_sides,
                                      (lambda side: not self._in_filled(side[0], side[1], side[3], side[2]))
                                      if self._filled else None,
                                      self._loads_wait if self._staged else None)
        if race is None:
            return
        (_, _, writes, _, _, kind, index), (_, _, o_writes, _, _, o_kind, o_index) = race.side, race.other
        self.where.tile = int(race.tile.tile_id)
        verb = _ACCESS[(kind, writes)]
        other = _ACCESS[(o_kind, o_writes)]
        mine = "a staging tile" if race.tile.fills else f"slot {race.tile.slot}"
        theirs = "a staging tile" if race.other_tile.fills else f"slot {race.other_tile.slot}"
        if race.staging:
            why = ("a staging tile's loads wait only for the buffers they fill, so they may run at any time until a "
                   "tile using those buffers computes")
        else:
            why = "the engine waits only for the previous tile of a tile's own slot"
        what = "what it " + ("writes" if writes else "reads")
        raise self.fail("store-race", f"{kind} {index} {verb} bytes of {_span(*race.shared)} that tile "
                                      f"{race.other_tile.tile_id} ({theirs}) {other}"
                                      f"{'' if o_kind == 'store' and o_writes else f' ({o_kind} {o_index})'} while "
                                      f"this tile ({mine}) may run: {why}, so {what} would be a race; put the two "
                                      f"tiles in one slot, or the access in a later phase")

    def _loads_wait(self, tile: Tile) -> frozenset[tuple[str, int]]:
        """The buffers (name, generation) whose fills ``tile``'s loads wait for: those it uses and reads the bytes
        of (:mod:`sim.model.buffer_reads`)."""
        return frozenset(self._ref(r) for r in read_uses(tile, self._buffer_spans))

    def _in_level(self, lo: int, hi: int) -> bool:
        """Whether ``[lo, hi)`` lies inside one staging level."""
        return any(a.base <= lo and hi <= a.end for a in self.levels)

    def _in_shared_level(self, lo: int, hi: int) -> bool:
        for base, end in self._shared_levels:
            if base <= lo and hi <= end:
                return True
        return False

    def _shared_byte(self, addr: int) -> bool:
        region = self.mmap.region_at(addr)
        return region is not None and region.shared

    def _core_race(self, race: Race | None) -> None:
        """Raise the ``core-race`` rule's PlanError for ``race`` (if any)."""
        if race is None:
            return
        # (placed at the lower core's access, naming the other's)
        (_, _, core, writes, _, tile, kind, index, phase), (_, _, o_core, o_writes, _, o_tile, o_kind, o_index,
                                                             o_phase) = sorted((race.earlier, race.later),
                                                                               key=lambda a: a[2])
        self.where.core, self.where.tile, self.where.phase = core, int(tile.tile_id), phase
        verb, other = ("writes" if writes else "reads"), ("writes" if o_writes else "reads")
        what = "which write lands last" if writes and o_writes else "whether the read sees the write"
        where = "in the same phase" if o_phase == phase else f"in phase {o_phase!r}, no barrier between"
        raise self.fail("core-race", f"{kind} {index} {verb} bytes of {_span(*race.shared)} that core {o_core}'s "
                                     f"tile {o_tile.tile_id} ({o_kind} {o_index}) {other} {where}: cores run a "
                                     f"phase side by side (only a barrier after it orders them), so {what} would be "
                                     f"a race; give each core its own bytes, or put the accesses in phases a barrier "
                                     f"separates")

    def aliases(self, phase: Phase, staged: bool) -> None:
        """The ``staging-alias`` rule on one phase (:mod:`sim.model.plan_alias`): per core, no two tiles that may
        be in flight at once touch the same staging bytes (one writing); staged buffers keep their bytes."""
        for core, tiles in phase.tiles.items():
            found = self.alias.slots(tiles, self._footprints)
            if found is not None:
                self.where.core, self.where.tile = int(core), int(tiles[found.index].tile_id)
                raise self.fail("staging-alias", found.detail)
        if staged:
            found = self.alias.buffers(phase, self._ref)
            where = self.alias.core
            if found is not None and where is not None:
                self.where.core, self.where.tile = where, int(phase.tiles[where][found.index].tile_id)
                raise self.fail("staging-alias", found.detail)

    def _transfer_spans(self, t: Transfer) -> tuple[int, int, int, int]:
        """``(src lo, src hi, dst lo, dst hi)`` of a checked transfer (as its check worked them out)."""
        got = self._transfer_memo.get(id(t))
        return got if got is not None else t.span("src") + t.span("dst")  # (one that moves nothing)

    def _compute_spans(self, c: Compute) -> tuple[Spans, Spans]:
        """(outputs, inputs) spans of a checked compute's operands, merged (as their check worked them out)."""
        got = self._compute_memo.get(id(c))
        if got is None:
            got = (merged([(int(o.addr), int(o.addr) + o.size_bytes) for o in c.outputs]),
                   merged([(int(o.addr), int(o.addr) + o.size_bytes) for o in c.inputs]))
        return got

    def tile(self, tile: Any, ids: set[int]) -> None:
        if type(tile) is not Tile and not isinstance(tile, Tile):
            raise self.fail("plan-structure", f"expected a Tile, got {brief(tile)}")
        if not _is_int(tile.tile_id):
            raise self.fail("plan-structure", f"Tile.tile_id must be an int, got {brief(tile.tile_id)}")
        self.where.tile = int(tile.tile_id)
        if tile.tile_id in ids:
            raise self.fail("tile-ids", f"tile id {tile.tile_id} is used twice on core {self.where.core} in this "
                                        f"phase: traces and messages name a core's tiles by phase and id")
        ids.add(tile.tile_id)
        if not _is_int(tile.slot):
            raise self.fail("plan-structure", f"Tile.slot must be an int, got {brief(tile.slot)}")
        self._tile = tile
        moved: dict[str, list[tuple[int, Transfer, tuple[int, int, int, int]]]] = {"load": [], "store": []}
        for kind, transfers in (("load", tile.loads), ("store", tile.stores)):
            if type(transfers) is not tuple:
                raise self.fail("plan-structure", f"Tile.{kind}s must be a tuple of Transfer, got "
                                                  f"{brief(transfers)}")
            touched: list[tuple[int, int, int, Transfer, bool]] | None = None
            for i, t in enumerate(transfers):
                spans = self.transfer(t, kind, i)
                if spans is not None:
                    moved[kind].append((i, t, spans))
                if spans is not None and len(transfers) > 1:
                    if touched is None:
                        touched = []
                    touched += ((spans[0], spans[1], i, t, False), (spans[2], spans[3], i, t, True))
            if touched is not None and len(touched) > 2:
                self._apart(touched, kind)
        # The tile in the engine's order: its loads read, then land; its compute reads and writes; its stores.
        if self._local_fills and type(tile.uses) is tuple and tile.uses:
            self._uses_filled(tile)
        if self._later and type(tile.uses) is tuple and tile.uses:
            self._later_reads(tile, moved["load"])
        self._moved(moved["load"], "load")
        if tile.compute is not None:
            self.compute(tile.compute)
            core = self.where.core
            assert core is not None
            outs, ins = self._compute_memo[id(tile.compute)]
            for lo, hi in ins:
                gap = self._written.read(lo, hi, core, int(tile.tile_id), "compute")
                if gap is not None:
                    self._unwritten_operand(tile.compute, gap)
            for lo, hi in outs:
                self._written.write(core, lo, hi)
        self._moved(moved["store"], "store")
        self._footprints[id(tile)] = self.alias.footprint_of(self._sides, tile.compute)
        self._sides = ([], [], [], [])
        if self._race[0] or self._race[1]:
            self._race_sides[id(tile)] = self._race
            self._race = ([], [])
        if type(tile.fills) is tuple and type(tile.uses) is tuple and not tile.fills and not tile.uses:
            return  # no staged buffers (most tiles): nothing below applies
        for field_name in ("fills", "uses"):
            refs = getattr(tile, field_name)
            if type(refs) is not tuple:
                raise self.fail("plan-structure", f"Tile.{field_name} must be a tuple of buffer references "
                                                  f"('name@generation'), got {brief(refs)}")
            for ref in refs:
                try:
                    self._ref(ref)
                except ValueError as e:
                    raise self.fail("plan-structure", f"Tile.{field_name}: {e}") from None
        if tile.fills:
            if tile.compute is not None or tile.stores:
                raise self.fail("buffers", f"the tile fills {', '.join(map(str, tile.fills))} and so is a staging "
                                           f"tile, which the walk does not wait for: it may have loads only (no "
                                           f"compute, no stores)")
            filled = {self._ref(r)[0] for r in tile.fills}
            both = sorted(filled & {self._ref(r)[0] for r in tile.uses})
            if both:
                raise self.fail("buffers", f"the tile both fills and uses buffer {both[0]!r}")

    def _fills_written(self, phase: Phase) -> None:
        """What the phase's staged buffers fill, for unwritten-read: a tile that uses a buffer generation waits
        for its fill, wherever the fill stands in the walks (the buffers rule sees that every generation used is
        filled).  A fill into shared memory counts as written from the phase's start (shared reads are judged at
        its end, against every core's writes); a fill into the core's own staging levels counts from the first of
        its tiles that uses that generation or a later one (:meth:`_uses_filled`): a later generation's fill
        waits for the earlier one's release, so its bytes are not there for the earlier one's users.  Malformed
        tiles are left to the tile rules."""
        for core, tiles in phase.tiles.items():
            if not isinstance(tiles, (tuple, list)) or not _is_int(core):
                continue
            for tile in tiles:
                if not isinstance(tile, Tile) or not tile.fills or type(tile.loads) is not tuple \
                        or type(tile.fills) is not tuple:
                    continue
                try:
                    refs = [self._ref(r) for r in tile.fills]
                except ValueError:
                    continue  # (the tile rules name it)
                for t in tile.loads:
                    if isinstance(t, Transfer) and not _moves_nothing(t):
                        try:
                            _, _, lo, hi = self._transfer_spans(t)
                        except Exception:  # noqa: BLE001 (a malformed transfer: the tile rules name it)
                            continue
                        if not self._written.is_local(lo, hi):
                            self._written.write(int(core), lo, hi, t)
                            if self._written.is_shared(lo, hi):
                                for name, generation in refs:
                                    self._later.add(name, generation, lo, hi, t)
                            continue
                        for name, generation in refs:
                            self._local_fills.setdefault((int(core), name), []).append((generation, lo, hi, t))
        for fills in self._local_fills.values():
            fills.sort(key=lambda fill: fill[0])

    def _uses_filled(self, tile: Tile) -> None:
        """The fills into the core's own staging levels of the generations ``tile`` uses, and of the earlier ones
        of those buffers, counted as written (once each) before its reads are judged."""
        core = self.where.core
        assert core is not None
        for ref in tile.uses:
            try:
                name, generation = self._ref(ref)
            except ValueError:
                continue  # (the tile rules name it)
            fills = self._local_fills.get((core, name))
            if fills is None:
                continue
            at = self._local_fills_at.get((core, name), 0)
            while at < len(fills) and fills[at][0] <= generation:
                _, lo, hi, t = fills[at]
                self._written.write(core, lo, hi, t)
                at += 1
            self._local_fills_at[core, name] = at

    def _later_reads(self, tile: Tile, loads: list[tuple[int, Transfer, tuple[int, int, int, int]]]) -> None:
        """The ``unwritten-read`` rule on a tile's loads from a shared staged buffer it uses: bytes that only a later
        generation's fill writes are not there yet (that fill waits for this generation's release).  A store
        reading a staged buffer is ``staging-alias``'s to refuse (the tile released it before its stores run)."""
        for ref in tile.uses:
            try:
                name, generation = self._ref(ref)
            except ValueError:
                continue  # (the tile rules name it)
            if generation >= self._later.latest(name, self._written.shared_before):
                continue  # (most uses: the generation's users read no bytes a later generation writes first)
            for i, t, (s_lo, s_hi, _, _) in loads:
                gap = self._later.first_read(name, generation, s_lo, s_hi, t)
                if gap is not None:
                    raise self.fail("unwritten-read", (
                        f"load {i} reads {_span(s_lo, s_hi)}, whose bytes {_span(*gap)} only a later generation of "
                        f"buffer {name!r} fills, after the tiles using {ref} are done: this tile uses {ref} and reads "
                        f"whatever an earlier call left there; fill them in {ref}'s own fill"))

    def _moved(self, transfers: list[tuple[int, Transfer, tuple[int, int, int, int]]], kind: str) -> None:
        """The ``unwritten-read`` rule on a tile's loads or stores (all read, then all write: they stream
        together).  A strided source that meets the bytes the rule follows is judged run by run (its span may
        cover bytes it does not read, such as the gap between two buffers)."""
        core, tile = self.where.core, self.where.tile
        assert core is not None and tile is not None
        written = self._written
        for i, t, (s_lo, s_hi, _, _) in transfers:
            gap = written.read(s_lo, s_hi, core, tile, (kind, i), t)
            if gap is not None:
                raise self.fail("unwritten-read", _unwritten_words(f"{kind} {i}", s_lo, s_hi, gap, "this core's"))
        for _, t, (_, _, d_lo, d_hi) in transfers:
            written.write(core, d_lo, d_hi, t)

    def _unwritten_operand(self, c: Compute, gap: tuple[int, int]) -> None:
        """The ``unwritten-read`` refusal of the first input operand of ``c`` meeting the unwritten ``gap``."""
        for i, op in enumerate(c.inputs):
            lo = int(op.addr)
            hi = lo + op.size_bytes
            if lo < gap[1] and gap[0] < hi:
                raise self.fail("unwritten-read", _unwritten_words(f"input operand {i}", lo, hi, gap,
                                                                   "this core's"))

    def buffers(self, phase: Phase) -> None:
        """The ``buffers`` rule on one phase: every generation used or refilled is filled, in order, and the waits
        cannot deadlock (a walk of the dependences the engine obeys, with Kahn's algorithm)."""
        fillers: dict[tuple[str, int], list[tuple[int, int]]] = {}
        users: dict[tuple[str, int], list[tuple[int, int]]] = {}
        for core, tiles in phase.tiles.items():
            for i, tile in enumerate(tiles):
                for ref in tile.fills:
                    fillers.setdefault(self._ref(ref), []).append((int(core), i))
                for ref in tile.uses:
                    users.setdefault(self._ref(ref), []).append((int(core), i))
        for key, where in [*users.items(), *fillers.items()]:
            name, g = key
            need = [key] if key in users and key not in fillers else []
            if key in fillers and g > 0 and (name, g - 1) not in fillers:
                need.append((name, g - 1))
            if need:
                core, i = where[0]
                tile = phase.tiles[core][i]
                self.where.core, self.where.tile = core, int(tile.tile_id)
                n, gen = need[0]
                raise self.fail("buffers", f"buffer {n!r} generation {gen} is never filled in this phase (no tile "
                                           f"lists '{n}@{gen}' in its fills), so the tile would wait for it forever")
        # Nodes: each tile done (a staging tile: landed; another: computed), numbered core after core from 0; then
        # each generation filled and each released, numbered as first met.  Edges say "before".  (Plain ints and
        # lists: a phase has a node per tile and per generation, and this walk is a good part of the check.)
        cores = [(int(core), tiles) for core, tiles in phase.tiles.items()]
        first = 0
        starts: list[int] = []
        for _, tiles in cores:
            starts.append(first)
            first += len(tiles)
        succ: list[list[int]] = [[] for _ in range(first)]
        indeg = [0] * first
        filled: dict[tuple[str, int], int] = {}
        released: dict[tuple[str, int], int] = {}
        parse = self._ref

        def gen_node(nodes: dict[tuple[str, int], int], key: tuple[str, int]) -> int:
            got = nodes.get(key)
            if got is None:
                got = nodes[key] = len(indeg)
                succ.append([])
                indeg.append(0)
            return got

        for (_, tiles), start in zip(cores, starts):
            last_walked = before_last = -1  # the latest tile the walk waits for (not a staging tile), the one before
            for i, tile in enumerate(tiles):
                node = start + i
                # The walk issues the tiles after the one it is at up to the next non-staging tile: a tile is issued
                # once the walk reaches the non-staging tile before it, i.e. once the non-staging tile before that
                # one is done; a non-staging tile also runs after the previous non-staging one.
                walked_before = last_walked if not tile.fills else before_last
                if walked_before >= 0:
                    succ[walked_before].append(node)
                    indeg[node] += 1
                for r in tile.uses:
                    key = parse(r)
                    f = gen_node(filled, key)
                    succ[f].append(node)
                    indeg[node] += 1
                    rel = gen_node(released, key)
                    succ[node].append(rel)
                    indeg[rel] += 1
                for r in tile.fills:
                    name, g = key = parse(r)
                    f = gen_node(filled, key)
                    succ[node].append(f)
                    indeg[f] += 1
                    if g > 0:
                        rel = gen_node(released, (name, g - 1))
                        succ[rel].append(node)
                        indeg[node] += 1
                if not tile.fills:
                    before_last, last_walked = last_walked, node
        for key in fillers:
            f, rel = gen_node(filled, key), gen_node(released, key)
            succ[f].append(rel)
            indeg[rel] += 1
        ready = [n for n, d in enumerate(indeg) if d == 0]
        done = 0
        while ready:
            node = ready.pop()
            done += 1
            for after in succ[node]:
                indeg[after] -= 1
                if not indeg[after]:
                    ready.append(after)
        if done < len(indeg):
            # (the first stuck tile of the lowest core with one)
            core, i = min(next((c, i) for i in range(len(tiles)) if indeg[start + i])
                          for (c, tiles), start in zip(cores, starts) if any(indeg[start:start + len(tiles)]))
            tile = phase.tiles[core][i]
            self.where.core, self.where.tile = core, int(tile.tile_id)
            waits = ", ".join((*tile.uses, *tile.fills)) or "the tiles before it"
            raise self.fail("buffers", f"the phase deadlocks: this tile waits (through {waits}) for work that "
                                       f"itself waits for this tile or for later tiles of its own core; fill a "
                                       f"buffer before the tiles that use it, and release a generation before "
                                       f"refilling it")

    def _apart(self, touched: list[tuple[int, int, int, Transfer, bool]], kind: str) -> None:
        """The ``transfer-overlap`` rule over one tile's loads (or stores): ``(lo, hi, index, transfer, writes)``
        of what each reads and writes; spans that overlap are judged by their bytes (:mod:`sim.model.block_overlap`:
        interleaved strided blocks share none)."""
        touched.sort(key=lambda w: (w[0], w[2]))
        for x, (lo, hi, i, t, writes) in enumerate(touched):
            for o_lo, o_hi, j, o, o_writes in touched[x + 1:]:
                if o_lo >= hi:
                    break
                if i == j or not (writes or o_writes):
                    continue
                if sides_meet(layout_of(t, "dst" if writes else "src"), layout_of(o, "dst" if o_writes else "src")):
                    (a, a_writes), (b, b_writes) = sorted(((i, writes), (j, o_writes)))
                    both = a_writes and b_writes
                    theirs = "writes too" if both else "writes" if a_writes else "reads"
                    what = "which bytes land last" if both else "whether the read sees the write"
                    raise self.fail("transfer-overlap", f"{kind} {b} {'writes' if b_writes else 'reads'} bytes "
                                                        f"{kind} {a} of the same tile {theirs} (in "
                                                        f"{_span(max(lo, o_lo), min(hi, o_hi))}): a tile's {kind}s "
                                                        f"stream at the same time, in an order the DMA engines' "
                                                        f"queues and priorities decide, so {what} would be a race; "
                                                        f"give each its own bytes")

    def transfer(self, t: Any, kind: str, index: int) -> tuple[int, int, int, int] | None:
        """Check transfer ``t``; the spans ``(src lo, src hi, dst lo, dst hi)`` it touches (None: it moves
        nothing)."""
        if type(t) is not Transfer and not isinstance(t, Transfer):
            raise self.fail("plan-structure", f"{kind} {index}: expected a Transfer, got {brief(t)}")
        shape, ss, ds, item = t.shape, t.src_strides, t.dst_strides, t.itemsize
        tuples = type(shape) is tuple and type(ss) is tuple and type(ds) is tuple
        numbers = (t.src, t.dst, item) + shape + ss + ds if tuples else ()
        plain = tuples and set(map(type, numbers)) <= _JUST_INT  # Python ints only: the common case
        if not (tuples and len(shape) == len(ss) == len(ds)
                and (plain or _ints(numbers)) and item >= 1 and (not shape or min(shape) >= 0)):
            raise self.fail("plan-structure", f"{kind} {index}: a Transfer needs int addresses, an itemsize >= 1, and "
                                              f"one size >= 0 and two int strides per dimension, got {brief(t, 160)}")
        if not plain and not _wide(numbers):
            raise self.fail("plan-structure", f"{kind} {index}: a Transfer's numbers must be Python ints or 64-bit "
                                              f"numpy ints (numpy.int64): a narrower or unsigned numpy int overflows "
                                              f"or changes type on chip addresses, got {brief(t, 160)}")
        if len(shape) > MAX_TRANSFER_DIMS:
            raise self.fail("plan-structure", f"{kind} {index}: a Transfer has at most {MAX_TRANSFER_DIMS} "
                                              f"dimensions, got {len(shape)}")
        priority = t.priority
        if type(priority) is not int or not 0 <= priority <= MAX_PRIORITY:
            raise self.fail("plan-structure", f"{kind} {index}: Transfer.priority must be an int from 0 to "
                                              f"{MAX_PRIORITY} (higher streams first), got {brief(priority)}")
        channel = t.channel
        if channel is not None and (type(channel) is not int or not 0 <= channel < self.target.dma.channels_per_core
                                    or t.sync is not None):
            raise self.fail("plan-structure", f"{kind} {index}: Transfer.channel must be None or an int from 0 to "
                                              f"{self.target.dma.channels_per_core - 1} ({self.target.name}'s "
                                              f"dma.channels_per_core), on a transfer that is not synchronised, got "
                                              f"{brief(channel)}" + (f" with sync {t.sync!r}" if t.sync else ""))
        if t.sync is not None:
            self._sync_member(t.sync, priority, kind, index)
        if 0 in shape:
            return None  # moves nothing
        if plain:  # equal keys of Python ints are equal numbers, so they give the same offsets
            key = (shape, ss, ds, item)
            offsets = self._spans.get(key)
            if offsets is None:
                self._runs_bounded(shape, item, ss, ds, kind, index)
                offsets = self._spans[key] = _span_offsets(shape, ss, ds, item)
            src_lo, src_hi, dst_lo, dst_hi = offsets
            spans = (t.src + src_lo, t.src + src_hi, t.dst + dst_lo, t.dst + dst_hi)
        else:  # numpy ints: worked out in Python ints (a narrow numpy int would overflow on a chip address)
            n_shape, n_item = tuple(map(int, shape)), int(item)
            self._runs_bounded(n_shape, n_item, tuple(map(int, ss)), tuple(map(int, ds)), kind, index)
            spans = block_span(int(t.src), n_shape, n_item, tuple(map(int, ss))) + \
                block_span(int(t.dst), n_shape, n_item, tuple(map(int, ds)))
        self._side(spans[0], spans[1], self.readable, False, t, kind, index)
        self._side(spans[2], spans[3], self.writable, True, t, kind, index)
        if self._staged:  # the staged buffers' alias rule reads every transfer's spans (the plan holds t)
            self._transfer_memo[id(t)] = spans
        # The bytes of per-core staging levels the transfer moves, for the slots' alias rule (most sides lie in
        # memory outside them all: one comparison each).
        s_lo, s_hi, d_lo, d_hi = spans
        lowest, highest = self._local_bounds
        d_local = s_local = False
        if lowest <= d_lo and d_hi <= highest:
            for base, end in self._local:
                if base <= d_lo and d_hi <= end:
                    self._sides[0 if kind == "load" else 1].append((d_lo, d_hi))
                    d_local = True
        if lowest <= s_lo and s_hi <= highest:
            for base, end in self._local:
                if base <= s_lo and s_hi <= end:
                    self._sides[2 if kind == "load" else 3].append((s_lo, s_hi))
                    s_local = True
        # The sides the race rules judge: outside the per-core levels (each core's own; staging-alias judges
        # them), reads of an input left out; those in the staged buffers' bytes (the buffers rule orders their
        # accesses) are left out once the phase's tiles are checked.
        if not s_local and s_hi > s_lo and not self._in_input(s_lo, s_hi):
            self._race_side((s_lo, s_hi, False, t, "src", kind, index))
        if not d_local and d_hi > d_lo:
            self._race_side((d_lo, d_hi, True, t, "dst", kind, index))
        return spans

    def _runs_bounded(self, shape: tuple[int, ...], itemsize: int, src_strides: tuple[int, ...],
                      dst_strides: tuple[int, ...], kind: str, index: int) -> None:
        """The ``bounds`` rule on a transfer's runs: each side places at most :data:`MAX_TRANSFER_RUNS`."""
        for side, strides in (("source", src_strides), ("destination", dst_strides)):
            runs = 1
            for n, _ in run_layout(shape, itemsize, strides)[1]:
                runs *= n
            if runs > MAX_TRANSFER_RUNS:
                raise self.fail("bounds", f"{kind} {index}: its {side} places {brief(runs)} contiguous runs, more "
                                          f"than the {MAX_TRANSFER_RUNS} (2**24) a transfer may: the DMA engine and "
                                          f"the DRAM rows are walked run by run")

    def _in_input(self, lo: int, hi: int) -> bool:
        """Whether ``[lo, hi)`` lies inside an input buffer of the call."""
        starts = self._input_starts
        if not starts or lo < starts[0]:
            return False
        i = bisect.bisect_right(starts, lo) - 1
        return hi <= self._inputs[i][1]

    def _in_filled(self, lo: int, hi: int, t: Transfer, writes: bool) -> bool:
        """Whether the side of ``t`` spanning ``[lo, hi)`` (its destination if ``writes``) touches only bytes the
        phase's staged buffers fill (byte by byte when its span meets gaps between them)."""
        if not self._filled or lo < self._filled_starts[0] or hi > self._filled[-1][1]:
            return False
        if self._in_one_filled(lo, hi):
            return True  # (the common case: inside one stretch of filled bytes)
        base, run, dims = layout_of(t, "dst" if writes else "src")
        got = covered_offsets(run, dims)
        if got is None:
            return False
        starts, ends = got[0] + base, got[1] + base
        filled_starts = np.array(self._filled_starts, dtype=np.int64)
        filled_ends = np.array([hi for _, hi in self._filled], dtype=np.int64)
        i = np.searchsorted(filled_starts, starts, side="right") - 1
        return bool(np.all((i >= 0) & (ends <= filled_ends[i.clip(0)])))

    def _in_one_filled(self, lo: int, hi: int) -> bool:
        """Whether ``[lo, hi)`` lies inside one stretch of the bytes the phase's staged buffers fill."""
        i = bisect.bisect_right(self._filled_starts, lo) - 1
        return i >= 0 and hi <= self._filled[i][1]

    def _race_side(self, side: Side) -> None:
        """A side ``store-race`` judges; ``core-race`` too if another core may touch it (in a shared staging level,
        or meeting the outputs' hull: outside the staging levels a transfer writes only into the outputs)."""
        self._race[0 if side[5] == "load" else 1].append(side)
        accesses = self._accesses
        if accesses is not None:
            lo, hi, writes = side[0], side[1], side[2]
            out_lo, out_hi = self._outputs_hull
            if (hi > out_lo and lo < out_hi) or self._in_shared_level(lo, hi):
                core, tile = self.where.core, self._tile
                assert core is not None and tile is not None
                accesses[writes].append((lo, hi, core, writes, side[3], tile, side[5], side[6],
                                         self.where.phase or ""))

    def _sync_member(self, key: Any, priority: int, kind: str, index: int) -> None:
        """The ``sync-transfers`` rule for one member of the synchronised transfer ``key``."""
        if type(key) is not str or not key:
            raise self.fail("plan-structure", f"{kind} {index}: Transfer.sync must be None or a non-empty str (the "
                                              f"synchronised transfer's key), got {brief(key)}")
        core, name = self.where.core, self.where.phase or ""
        assert core is not None
        seen = self._sync.get(key)
        if seen is None:
            self._sync[key] = (self._phase_no, name, {core}, priority)
            return
        phase_no, first_name, cores, first_priority = seen
        if phase_no != self._phase_no:
            raise self.fail("sync-transfers", f"{kind} {index} joins synchronised transfer {key!r}, whose members "
                                              f"so far are in phase {first_name!r}: a synchronised transfer's "
                                              f"members are issued in one phase (give each phase's group its own "
                                              f"key)")
        if core in cores:
            raise self.fail("sync-transfers", f"{kind} {index} is a second member of synchronised transfer {key!r} "
                                              f"on core {core}: each core issues one member of a group (give "
                                              f"each of the core's transfers its own key)")
        if priority != first_priority:
            raise self.fail("sync-transfers", f"{kind} {index} joins synchronised transfer {key!r} with priority "
                                              f"{priority}, its first member's is {first_priority}: a synchronised "
                                              f"transfer streams as one, at one priority")
        cores.add(core)

    def _side(self, lo: int, hi: int, legal: list[tuple[int, int]], writing: bool, t: Transfer, kind: str,
              index: int) -> None:
        """One side ``[lo, hi)`` of transfer ``t``: inside a span it may touch, or allowed by :meth:`_judge`."""
        for w_lo, w_hi in legal:
            if w_lo <= lo and hi <= w_hi:
                return  # wholly inside one span this side may touch: the common case, decided here
        verdict = self._judge(lo, hi, writing)
        if verdict is not None and verdict[0] != "transfer-unmapped" and t.runs("dst" if writing else "src")[0] > 1:
            # A strided side whose span takes in bytes between its runs (a gap between two buffers, an input
            # between two rows of an output): judged by the bytes it touches, the first run that breaks a rule
            # named.
            lo, hi, verdict = self._runs_verdict(t, writing, lo, hi, verdict)
        if verdict is not None:
            rule, text = verdict
            raise self.fail(rule, f"{kind} {index} ({t.size_bytes} bytes) {'writes' if writing else 'reads'} "
                                  f"{_span(lo, hi)}: {text}")

    def _runs_verdict(self, t: Transfer, writing: bool, lo: int, hi: int,
                      verdict: tuple[str, str]) -> tuple[int, int, tuple[str, str] | None]:
        """The first run of ``t``'s side that breaks a rule, and the rule (None: every run keeps them); the side's
        span and ``verdict`` as they are when its runs are too many to list."""
        got = covered(layout_of(t, "dst" if writing else "src"))
        if got is None:
            return lo, hi, verdict
        for run_lo, run_hi in got:
            for w_lo, w_hi in self.writable if writing else self.readable:
                if w_lo <= run_lo and run_hi <= w_hi:
                    break
            else:
                run_verdict = self._judge(run_lo, run_hi, writing)
                if run_verdict is not None:
                    return run_lo, run_hi, run_verdict
        return lo, hi, None

    def _judge(self, lo: int, hi: int, writing: bool) -> tuple[str, str] | None:
        """The rule a transfer's side ``[lo, hi)`` breaks (and why), or None (a write over two adjacent outputs)."""
        region = self.mmap.region_of(lo, hi - lo)
        if region is None:
            start = self.mmap.region_at(lo)
            return "transfer-unmapped", (self.mmap.describe(lo) if start is None else
                                         f"it runs past the end of region {start.name} {_span(start.base, start.end)}")
        if any(a.region == region.name and a.base <= lo and hi <= a.end for a in self.levels):
            return None  # a staging level: the kernel's own during the call
        if region.kind == "private" and region.role != "scratchpad" and self.call.variant == "s":
            return "private-memory", (f"region {region.name} is each core's private memory, and this _s call's "
                                      f"buffers all lie in shared memory: no core's {region.name} is the call's")
        if not writing:
            if _covered(lo, hi, self._buffers):
                return None
            names = ", ".join(f"'{b.name}' {_span(b.addr, b.end)}" for b in self.call.buffers if b.size_bytes)
            levels = ", ".join(f"{a.name} {_span(a.base, a.end)}" for a in self.levels)
            return "read-outside-buffers", (f"in region {region.name}, neither a staging level ({levels}) nor inside "
                                            f"the call's buffers ({names or 'none'}): a kernel reads what its call "
                                            f"gives it, not bytes it was never handed")
        for b in self.inputs:
            if b.addr < hi and lo < b.end:
                return "input-written", f"it overlaps input buffer '{b.name}' {_span(b.addr, b.end)}"
        if not _covered(lo, hi, [(b_lo, b_hi) for b_lo, b_hi, _ in self.outputs]):
            outs = ", ".join(f"'{b.name}' {_span(lo_, hi_)}" for lo_, hi_, b in self.outputs) or "none"
            levels = ", ".join(f"{a.name} {_span(a.base, a.end)}" for a in self.levels)
            return "write-outside-outputs", (f"in region {region.name}, neither a staging level ({levels}) nor "
                                             f"inside the call's output buffers ({outs})")
        return None

    def compute(self, c: Any) -> None:
        key = None
        if id(c) not in self._computes and type(c) is Compute:
            # A compute like one that passed (tiles of one slot and shape build such computes): the rules read no
            # more than this key, so it passes alike.  (Not the compute's own hash: that hashes its function's
            # parameters and its loops by value, which costs more than the rules.)
            key = self._compute_key(c)
            same = self._compute_values.get(key) if key is not None else None
            if same is not None:
                self._computes[id(c)] = c
                self._compute_memo[id(c)] = self._compute_memo[id(same)]
                if id(same) in self._cycles:
                    self._cycles[id(c)] = self._cycles[id(same)]
        if id(c) in self._computes:
            cycles = self._cycles.get(id(c))
        else:
            self._compute(c)
            cycles = self._priced(c)
            if type(c) is Compute:  # frozen: it passes again (a subclass might not be)
                self._computes[id(c)] = c
                if key is not None:
                    self._compute_values[key] = c
                if cycles is not None:
                    self._cycles[id(c)] = cycles
        if cycles is not None:
            core = self.where.core
            assert core is not None
            total = self._core_cycles[core] = self._core_cycles.get(core, 0) + cycles
            if total > MAX_CORE_COMPUTE_CYCLES:
                raise self.fail("bounds", f"the core's computes take {total} cycles up to this tile, more than the "
                                          f"{MAX_CORE_COMPUTE_CYCLES} (2**52) a core's may in one plan: the run's "
                                          f"cycles would overflow the 64-bit counts of summaries and traces")

    def _compute_key(self, c: Compute) -> tuple | None:
        """What the compute rules read of ``c``: its flops (and their type), precision, whether its function is
        callable, its loops (by identity: a judged loop is kept alive) and its operands' addresses, shapes and
        dtypes; None when a field is not of the types the key assumes (the compute is then judged in full)."""
        ins, outs, loops = c.inputs, c.outputs, c.loops
        if type(ins) is not tuple or type(outs) is not tuple or type(loops) is not tuple:
            return None
        if not all(type(o) is Operand and type(o.addr) is int and _ints_only(o.shape) for o in ins + outs):
            return None  # (numpy ints equal to Python ones hash alike: such a compute is judged in full)
        fn = c.fn
        fn_ok = callable(fn) and (type(fn) is not TileFn or (callable(fn.fn) and type(fn.params) is tuple))
        key = (type(c.flops), c.flops, c.precision, fn_ok, tuple(map(id, loops)),
               tuple((o.addr, o.shape, o.dtype) for o in ins), tuple((o.addr, o.shape, o.dtype) for o in outs))
        try:
            hash(key)
        except TypeError:  # (a shape in a list, say)
            return None
        return key

    def _priced(self, c: Compute) -> int | None:
        """The cycles a checked compute takes, the tile overhead and each loop's (None when the check was given no
        pricer; tiles share their loops, so each is priced once); PlanError ``bounds`` when they are more than a
        tile may take."""
        if self.price is None:
            return None
        cycles = self.target.core.tile_overhead_cycles
        for loop in c.loops:
            got = self._loop_cycles.get(id(loop))
            if got is None:
                got = self._loop_cycles[id(loop)] = self.price(loop)
            cycles += got
        if cycles > MAX_TILE_CYCLES:
            raise self.fail("bounds", f"the compute takes {brief(cycles)} cycles (the tile overhead and its loops), "
                                      f"more than the {MAX_TILE_CYCLES} (2**40) a tile's compute may: the run's "
                                      f"cycles would overflow the 64-bit counts of summaries and traces")
        return cycles

    def _compute(self, c: Any) -> None:
        if type(c) is not Compute and not isinstance(c, Compute):
            raise self.fail("plan-structure", f"Tile.compute must be a Compute or None, got {brief(c)}")
        if not callable(c.fn) or (isinstance(c.fn, TileFn) and not callable(c.fn.fn)):
            got = c.fn.fn if isinstance(c.fn, TileFn) else c.fn
            raise self.fail("plan-structure", f"Compute.fn must be callable (a TileFn a callable fn), got {brief(got)}")
        if isinstance(c.fn, TileFn) and type(c.fn.params) is not tuple:
            raise self.fail("plan-structure", f"TileFn.params must be a tuple, got {brief(c.fn.params)}")
        if not _ints((c.flops,), 0):
            raise self.fail("plan-structure", f"Compute.flops must be an int >= 0, got {brief(c.flops)}")
        if c.flops > MAX_TILE_FLOPS:
            raise self.fail("bounds", f"Compute.flops is {brief(c.flops)}, more than the {MAX_TILE_FLOPS} (2**48) a "
                                      f"tile's compute may state (a tile holds at most a staging level's elements)")
        if not isinstance(c.precision, str) or c.precision not in self.target.core.precisions:
            have = ", ".join(self.target.core.precisions)
            raise self.fail("plan-structure", f"the compute is in precision {brief(c.precision)}, which "
                                              f"{self.target.name} lacks (it computes in: {have})")
        if type(c.inputs) is not tuple or type(c.outputs) is not tuple:
            raise self.fail("plan-structure", "Compute.inputs and Compute.outputs must be tuples of Operand")
        if type(c.loops) is not tuple:
            raise self.fail("plan-structure", f"Compute.loops must be a tuple of Loop, got {brief(c.loops)}")
        if not c.loops and (c.flops or c.outputs):
            does = " and ".join(([f"does {c.flops} flops"] if c.flops else [])
                                + ([f"writes {len(c.outputs)} output operand{'s' if len(c.outputs) != 1 else ''}"]
                                   if c.outputs else []))
            raise self.fail("compute-loops", f"the compute {does} but states no loops: a compute is priced from "
                                             f"its inner loops only (its flops are reported, never priced), so "
                                             f"state the loop that issues its work in Compute.loops "
                                             f"(kernels/common/loops.py; see docs/writing-a-kernel.md)")
        for i, loop in enumerate(c.loops):
            if id(loop) not in self._loops:  # tiles share their loops: each is judged once
                self.loop(loop, i)
                self._loops[id(loop)] = loop  # kept alive so that its id is not reused
        if c.flops:
            capacity = self._arithmetic(c)
            if c.flops > capacity:
                raise self.fail("compute-flops", f"the compute states {c.flops} flops, but its loops issue at most "
                                                 f"{capacity} element operations ({ARITHMETIC_RULE}): state the "
                                                 f"loops that do its arithmetic (a compute is priced from its "
                                                 f"loops, so its flops would run in the time of far fewer)")
        # Each operand's (lo, hi, level index) once: an in-place operand (an output over an input) counts once.
        ins = [self.operand(op, "input", i) for i, op in enumerate(c.inputs)]
        outs = [self.operand(op, "output", i) for i, op in enumerate(c.outputs)]
        self._compute_memo[id(c)] = (merged([(lo, hi) for lo, hi, _ in outs]), merged([(lo, hi) for lo, hi, _ in ins]))
        distinct = set(ins)
        distinct.update(outs)
        used = [0] * len(self.operand_levels)
        for lo, hi, li in distinct:
            used[li] += hi - lo
        for total, level in zip(used, self.operand_levels):
            if total > level.size_bytes:
                raise self.fail("tile-size", f"the compute's distinct operands in staging level {level.name} take "
                                             f"{total} bytes, more than the level's {level.size_bytes}")
        if len(outs) > 1:
            spans = sorted((lo, hi, i) for i, (lo, hi, _) in enumerate(outs))
            for (a_lo, a_hi, a), (b_lo, b_hi, b) in zip(spans, spans[1:]):
                if b_lo < a_hi and a_lo < a_hi and b_lo < b_hi:
                    raise self.fail("output-overlap", f"output operand {a} {_span(a_lo, a_hi)} and output operand "
                                                      f"{b} {_span(b_lo, b_hi)} share bytes: the engine would write "
                                                      f"one over the other")

    def _arithmetic(self, c: Compute) -> int:
        """The most element operations ``c``'s loops can perform (:data:`ARITHMETIC_RULE`)."""
        lanes = self.target.core.precisions[c.precision].lanes
        total = 0
        for loop in c.loops:  # in Python ints: numpy counts would wrap around (their bounds are checked above)
            per_trip = sum(int(n) * OPS_PER_ISSUE.get(u, 0) for u, n in loop.issues.items())
            after = sum(int(n) * OPS_PER_ISSUE.get(u, 0) for step in (loop.epilogue, *loop.epilogue_chain)
                        for u, n in step.items())
            reduced = int(loop.reductions) + sum(int(step.get(REDUCE, 0)) for step in loop.epilogue_chain)
            total += int(loop.entries) * (int(loop.trips) * per_trip + after) * lanes + reduced * lanes
        return total

    def loop(self, loop: Any, index: int) -> None:
        """A compute's loop ``index``: well-formed, issuing on the core's unit classes only, fitting its
        vector registers."""
        if type(loop) is not Loop and not isinstance(loop, Loop):
            raise self.fail("plan-structure", f"loop {index}: expected a Loop, got {brief(loop)}")
        name = f"loop {index}" + (f" ({brief(loop.label, 60)})" if isinstance(loop.label, str) and loop.label else "")
        if not isinstance(loop.label, str):
            raise self.fail("plan-structure", f"{name}: Loop.label must be a str (it names the loop in reports), got "
                                              f"{brief(loop.label)}")
        if not _ints((loop.trips, loop.entries, loop.reductions, loop.vector_registers), 0):
            counts = (loop.trips, loop.entries, loop.reductions, loop.vector_registers)
            raise self.fail("plan-structure", f"{name}: Loop.trips, entries, reductions and vector_registers must "
                                              f"be ints >= 0, got {brief(counts)}")
        for field_name in ("trips", "entries", "reductions"):
            if getattr(loop, field_name) > MAX_LOOP_COUNT:
                raise self.fail("bounds", f"{name}: Loop.{field_name} is {brief(getattr(loop, field_name))}, more "
                                          f"than the {MAX_LOOP_COUNT} (2**32) a loop's count may be")
        named: list[str] = []
        steps = loop.epilogue_chain
        if type(steps) is not tuple or len(steps) > MAX_EPILOGUE_STEPS:
            raise self.fail("plan-structure", f"{name}: Loop.epilogue_chain must be a tuple of at most "
                                              f"{MAX_EPILOGUE_STEPS} mappings of issues, got {brief(steps)}")
        mappings = [("issues", loop.issues), ("epilogue", loop.epilogue)] + \
            [(f"epilogue_chain[{i}]", m) for i, m in enumerate(steps)]
        for field_name, m in mappings:
            if not isinstance(m, Mapping) or not all(isinstance(k, str) for k in m) or not _ints(tuple(m.values()), 0):
                raise self.fail("plan-structure", f"{name}: Loop.{field_name} must map a unit class to an int >= 0 "
                                                  f"of issues, got {brief(m)}")
            big = [(k, v) for k, v in m.items() if v > MAX_LOOP_COUNT]
            if big:
                raise self.fail("bounds", f"{name}: Loop.{field_name}[{brief(big[0][0], 40)}] is {brief(big[0][1])}, "
                                          f"more than the {MAX_LOOP_COUNT} (2**32) a loop's count may be")
            named.extend(u for u in m if not (field_name.startswith("epilogue") and u == REDUCE))
        for field_name in ("chain", "carried"):
            t = getattr(loop, field_name)
            if type(t) is not tuple or not all(isinstance(u, str) for u in t):
                raise self.fail("plan-structure", f"{name}: Loop.{field_name} must be a tuple of unit class names, "
                                                  f"got {brief(t)}")
            named.extend(t)
        core = self.target.core
        missing = [u for u in named if unit_class(u)[0] not in core.units]
        if missing:
            raise self.fail("loop-units", f"{name} issues on unit class {brief(missing[0], 40)}, which "
                                          f"{self.target.name}'s core lacks (it has: {', '.join(core.units)})")
        movers = [u for u, unit in core.units.items() if unit.bytes_per_issue]
        stores = [u for u in named if unit_class(u)[1] and not core.units[unit_class(u)[0]].bytes_per_issue]
        if stores:
            raise self.fail("loop-units", f"{name} names a store on unit class {brief(unit_class(stores[0])[0], 40)}, "
                                          f"which moves no data: a store issues on a load/store unit "
                                          f"({', '.join(stored(u) for u in movers)})")
        if loop.vector_registers > core.vector_registers:
            raise self.fail("loop-registers", f"{name} keeps {loop.vector_registers} vector registers live, more "
                                              f"than {self.target.name}'s core has ({core.vector_registers}): "
                                              f"block it smaller")

    def operand(self, op: Any, role: str, index: int) -> tuple[int, int, int]:
        """``(lo, hi, level)`` of a compute operand (``level`` indexes ``operand_levels``); PlanError when it is
        malformed or outside the levels."""
        key = None
        if type(op) is Operand:
            # (numpy ints equal to Python ones hash alike: only an operand of Python ints may meet a judged one)
            key = (op.addr, op.shape, op.dtype) if type(op.addr) is int and _ints_only(op.shape) else \
                (op.addr, op.shape, op.dtype, type(op.addr), tuple(map(type, op.shape)) if type(op.shape) is tuple
                 else None)
            try:
                known = self._operands.get(key)  # tiles reuse the same slots: most operands were judged before
            except TypeError:  # unhashable: a malformed operand (a list for a shape)
                key = known = None
            if known is not None:
                return known
        label = f"{role} operand {index}"
        try:
            ok = key is not None and _is_int(op.addr) and type(op.shape) is tuple and _ints(op.shape, 0) \
                and _wide((op.addr,) + op.shape)
            dt = np.dtype(op.dtype) if ok else None
            size = math.prod(op.shape) * dt.itemsize if dt is not None else 0
        except TypeError:
            ok, dt = False, None
        if not ok:
            raise self.fail("plan-structure", f"{label}: an Operand needs an int address, a tuple shape of sizes "
                                              f">= 0 (Python ints or numpy int64) and a numpy dtype, got "
                                              f"{brief(op, 160)}")
        assert dt is not None
        if dt.kind not in "biuf" or dt.fields is not None or dt.subdtype is not None:
            raise self.fail("plan-structure", f"{label}: dtype {one_line(str(dt), 40)} is not a number type (bool, "
                                              f"int, uint or float): a compute's operands are numeric arrays")
        lo, hi = int(op.addr), int(op.addr) + int(size)
        for li, level in enumerate(self.operand_levels):
            if level.base <= lo and hi <= level.end:
                self._operands[key] = (lo, hi, li)
                return lo, hi, li
        names = " or ".join(f"{a.name} {_span(a.base, a.end)}" for a in self.operand_levels)
        biggest = max(self.operand_levels, key=lambda a: a.size_bytes)
        if size > biggest.size_bytes:
            raise self.fail("tile-size", f"{label} {_span(lo, hi)} takes {size} bytes, more than the largest staging "
                                         f"level compute operands may lie in ({biggest.name}: {biggest.size_bytes} "
                                         f"bytes)")
        raise self.fail("operand-level", f"{label} {_span(lo, hi)} lies outside the staging levels compute operands "
                                         f"may lie in ({names}): DMA it there first")


def check_plan(plan: object, call: BoundCall, target: Target, levels: Sequence[StagingArea],
               operand_levels: Sequence[StagingArea], kernel: str,
               loop_cycles: Callable[[Loop], int] | None = None) -> None:
    """Raise :class:`~sim.errors.PlanError` for the first rule ``plan`` breaks (see the module's rules).

    ``levels`` are the staging levels the plan may use (``PlanContext.levels``); ``operand_levels`` those
    compute operands may lie in (``PlanContext.vector_level`` and, if the chip has one, the scalar level beside
    it).  ``kernel`` names the kernel in the message.  ``loop_cycles`` prices a loop on the target's core (the
    facade passes :func:`sim.timing.loop_cycles`, which this layer may not import; a compute costs the tile
    overhead plus its loops', as :func:`sim.timing.compute_cycles` says): with it, rule ``bounds`` also bounds
    the cycles of each compute and of each core's computes.
    """
    checker = _Checker(call, target, levels, operand_levels, kernel, loop_cycles)
    try:
        checker.plan(plan)
    finally:
        checker.alias = None  # type: ignore[assignment]  # (it holds the checker's methods: a reference cycle)

