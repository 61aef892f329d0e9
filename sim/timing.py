"""The timing model: every formula that turns a plan's work into cycles, from the target's numbers only.

* :func:`transfer_bytes`, :func:`stream_cycles` and :func:`transfer_latency_cycles`: the bytes each end of a
  DMA transfer moves (whole bursts), how long it streams when it has its regions and its engine to itself,
  and how long after its last byte left it lands;
* :func:`loop_cycles` / :func:`loop_cost` and :func:`compute_cycles`: a tile's inner loops on the core's
  functional units (:func:`cheapest_loops`: the cost model's pick among ways to run one compute);
* :class:`Roofline` / :func:`roofline`: the least cycles any schedule of a plan could take;
* :func:`estimate`: a closed-form estimate of a plan's cycles without simulating it.

The engine (:mod:`sim.engine`) charges exactly these formulas while it schedules transfers and computes
on SimPy; transfers streaming at the same time share their regions' bandwidth there, as a fluid
(:mod:`sim.engine.fluid`: max-min fair shares, so a transfer never streams faster than :func:`stream_cycles`
says and slows down only while others share its regions).  The run summaries report the roofline; the tiling
search (:mod:`sim.tuning`) prices candidate tilings by simulating them.  Nothing else in
``sim/`` or ``kernels/`` computes cycles.  See docs/timing-model.md for the model in words.
"""

from __future__ import annotations

import math
import warnings
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import TypeVar, cast

from sim.errors import SimError
from sim.model.dram import NO_ROWS, RowUse, copy_row_use, row_use, run_row_use
from sim.model.memo import memoized
from sim.model.memory import MemoryMap
from sim.model.plan import REDUCE, Compute, Loop, Plan, Transfer, unit_class
from sim.model.sync import group_row_uses, source_reads, sync_groups
from sim.model.target import CoreModel, DmaModel, FunctionalUnit, Region, Target

#: An option's label in :func:`cheapest_loops`.
T = TypeVar("T")

# --- transfers ------------------------------------------------------------------------------------


def exact_rate(bytes_per_cycle: float) -> Fraction:
    """A bandwidth from the target file as an exact fraction: the decimal the file wrote (12.8 is 64/5, not the
    binary double nearest to it), as the fluid network takes it, so that both agree to the cycle."""
    return Fraction(repr(bytes_per_cycle)) if isinstance(bytes_per_cycle, float) else Fraction(bytes_per_cycle)


def transfer_bytes(t: Transfer, src: Region, dst: Region) -> tuple[int, int]:
    """(bytes the source moves, bytes the destination moves): each end's contiguous runs in whole bursts of its
    region (a dense copy: its bytes rounded up to a burst; a slice of a few channels per row: a burst a row)."""
    return src.burst_bytes_for(*t.runs("src")), dst.burst_bytes_for(*t.runs("dst"))


def side_rows(t: Transfer, side: str, region: Region) -> RowUse:
    """The DRAM rows ``side`` ('src' or 'dst') of ``t`` opens in ``region`` (:func:`sim.model.dram.row_use`); none
    for a region without rows."""
    rows = region.rows
    if rows is None:
        return NO_ROWS
    # The transfer keeps its answer (outside its fields, as it keeps its engine ends): the engine and the roofline
    # ask for it, run after run, and hashing the descriptor for the value memo costs as much as the lookup saves.
    key = "_src_rows" if side == "src" else "_dst_rows"
    kept = t.__dict__.get(key)
    if kept is not None and kept[0] is region:
        return kept[1]
    addr, strides = (t.src, t.src_strides) if side == "src" else (t.dst, t.dst_strides)
    geometry = t._geometry
    count, run = geometry.src_runs if side == "src" else geometry.dst_runs
    if count == 1:  # one contiguous run (most of a plan's transfers)
        use = run_row_use(rows, addr - region.base, run)
    else:
        use = row_use(rows, addr - region.base, t.shape, t.itemsize, strides)
    t.__dict__[key] = (region, use)
    return use


def copy_rows(t: Transfer, region: Region) -> RowUse:
    """The DRAM rows a copy ``t`` within DRAM ``region`` opens, its reads and writes walked as the controller serves
    them (:func:`sim.model.dram.copy_row_use`); kept on the transfer as :func:`side_rows` keeps its sides'."""
    kept = t.__dict__.get("_copy_rows")
    if kept is not None and kept[0] is region:
        return kept[1]
    rows = region.rows
    assert rows is not None
    use = copy_row_use(rows, t.src - region.base, t.dst - region.base, t.shape, t.itemsize, t.src_strides,
                       t.dst_strides)
    t.__dict__["_copy_rows"] = (region, use)
    return use


def transfer_rows(t: Transfer, src: Region | None, dst: Region | None) -> tuple[tuple[Region, RowUse], ...]:
    """The DRAM rows ``t`` opens in each region with rows it crosses (a side whose region is None left out): each
    side's (:func:`side_rows`); a copy within one DRAM whose bus turns, its reads and writes as one walk
    (:func:`copy_rows`: a read row and a write row in one bank reopen each other at every batch of writes)."""
    if src is dst and src is not None and src.rows is not None and src.rows.turns_around:
        return ((src, copy_rows(t, src)),)
    return tuple((region, side_rows(t, side, region)) for side, region in (("src", src), ("dst", dst))
                 if region is not None and region.rows is not None)


def row_demands(t: Transfer, src: Region, dst: Region) -> tuple[tuple[Region, int, int], ...]:
    """What transfer ``t`` asks of the DRAM rows it crosses: ``(region, activations, least cycles)`` per region
    with rows (:func:`transfer_rows`), the least cycles its busiest bank's repeats take at tRC
    (:meth:`~sim.model.dram.RowUse.bank_cycles`); a copy within a DRAM whose bus does not turn adds both sides'
    activations and takes the slower side's banks."""
    if src.rows is None and dst.rows is None:
        return ()
    out: list[tuple[Region, int, int]] = []
    for region, use in transfer_rows(t, src, dst):
        assert region.rows is not None
        if not use.activations:
            continue
        least = use.bank_cycles(region.rows)
        if out and out[0][0] is region:
            out[0] = (region, out[0][1] + use.activations, max(out[0][2], least))
        else:
            out.append((region, use.activations, least))
    return tuple(out)


def sync_row_demands(transfers: Sequence[Transfer], src_regions: Sequence[Region], dst_regions: Sequence[Region],
                     reads: Sequence[bool]) -> tuple[tuple[Region, int, int], ...]:
    """What a synchronised transfer (members in core order, :mod:`sim.model.sync`) asks of the rows of the shared
    DRAMs it crosses: ``(region, activations, least cycles)`` of the merged stream, as :func:`row_demands` gives
    them for one transfer."""
    out = []
    for region, use in group_row_uses(transfers, src_regions, dst_regions, reads):
        assert region.rows is not None  # (only regions with rows are counted)
        out.append((region, use.activations, use.bank_cycles(region.rows)))
    return tuple(out)


def activation_rate(region: Region) -> Fraction:
    """Row activations per cycle ``region``'s DRAM allows over all its banks (tFAW: ``activations_per_window``
    in ``window_cycles``), exact."""
    rows = region.rows
    assert rows is not None
    return Fraction(rows.activations_per_window, rows.window_cycles)


def bus_cost_per_written_byte(region: Region) -> Fraction:
    """Bytes of ``region``'s bandwidth a byte written to it costs on top of itself while reads stream there too
    (its data bus turning between them, :mod:`sim.engine.turnaround`): ``(write_to_read_cycles +
    read_to_write_cycles) * bandwidth / (channels * write_batch_bytes)``; 0 if its bus does not turn."""
    rows = region.rows
    if rows is None or not rows.turns_around:
        return Fraction(0)
    turn = rows.write_to_read_cycles + rows.read_to_write_cycles
    return turn * exact_rate(region.bandwidth_bytes_per_cycle) / (rows.channels * rows.write_batch_bytes)


def copy_turn_bytes(region: Region, dst_bytes: int) -> int:
    """What a copy within DRAM ``region`` pays for its bus turning between its own reads and writes: bytes of the
    region, whole (:func:`bus_cost_per_written_byte` of its ``dst_bytes``, rounded up)."""
    return math.ceil(dst_bytes * bus_cost_per_written_byte(region))


def stream_demands(src: Region, dst: Region, src_bytes: int, dst_bytes: int) -> tuple[tuple[Region, int], ...]:
    """What a transfer asks of each region it crosses: (region, bytes); a copy within one region reads and
    writes it, so that region carries both ends' bytes (and, in a DRAM whose bus turns, its turns)."""
    if src is dst:
        return ((src, src_bytes + dst_bytes + copy_turn_bytes(src, dst_bytes)),)
    return ((src, src_bytes), (dst, dst_bytes))


def engine_bytes(t: Transfer, src_bytes: int, dst_bytes: int, dma: DmaModel) -> int:
    """Bytes a transfer moves through its DMA engine: the larger end's, and at least a whole engine beat
    (``dma.engine_bytes_per_cycle``) per contiguous run of either side, in the engine's units of bytes.

    An engine's beat carries the bytes of one run at one address: a run shorter than a beat still takes one, and
    a run a beat and a byte long takes two (the side with more beats sets the engine's cycles).  A dense copy is
    its bytes; a gather of 4-byte elements from AM is a cycle an element."""
    return max(src_bytes, dst_bytes, _beat_bytes(t.runs("src"), t.runs("dst"), dma.engine_bytes_per_cycle))


@memoized
def _beat_bytes(src_runs: tuple[int, int], dst_runs: tuple[int, int], rate_value: float) -> int:
    """The engine's bytes for whole beats of ``rate_value`` bytes, per (runs, bytes per run) of each side
    (remembered by value: a plan's transfers come in a few run layouts, and the engine asks per transfer run)."""
    rate = exact_rate(rate_value)
    beats = max(count * math.ceil(run / rate) for count, run in (src_runs, dst_runs))
    return math.ceil(beats * rate)


def lone_stream_bytes_per_cycle(dma: DmaModel, *regions: Region) -> float:
    """The most bytes per cycle one transfer streams between ``regions`` with them and its engine to itself: the
    smallest of their bandwidths and the engine's rate (what a kernel may count on for one descriptor)."""
    return min([dma.engine_bytes_per_cycle, *(r.bandwidth_bytes_per_cycle for r in regions)])


def streams_to_fill(dma: DmaModel, region: Region) -> int:
    """How many transfers streaming at once it takes to use all of ``region``'s bandwidth: each streams at most
    its DMA engine's rate (a kernel cuts its blocks into that many descriptors where one core streams alone)."""
    return max(1, math.ceil(region.bandwidth_bytes_per_cycle / dma.engine_bytes_per_cycle))


def stream_cycles(t: Transfer, src: Region, dst: Region, dma: DmaModel) -> int:
    """Cycles a transfer streams with its regions and its DMA engine to itself: every region it crosses moves its
    bytes (:func:`transfer_bytes`, :func:`stream_demands`) at that region's whole bandwidth and the engine the
    larger end's at ``dma.engine_bytes_per_cycle``, and a DRAM with rows opens the rows it touches at its
    activation rate (:func:`row_demands`: tFAW over the device, tRC for the busiest bank's repeats); the slowest
    of them sets the pace (a dense copy from DDR: ``ceil(bytes / min(DDR bandwidth, engine rate))``, a row
    opened per 8 KiB costing nothing more).  Sharing only slows it (:mod:`sim.engine.fluid`)."""
    sb, db = transfer_bytes(t, src, dst)
    worst = Fraction(engine_bytes(t, sb, db, dma)) / exact_rate(dma.engine_bytes_per_cycle)
    for region, nbytes in stream_demands(src, dst, sb, db):
        worst = max(worst, nbytes / exact_rate(region.bandwidth_bytes_per_cycle))
    for region, activations, least in row_demands(t, src, dst):
        worst = max(worst, activations / activation_rate(region), Fraction(least))
    return math.ceil(worst)


def transfer_latency_cycles(src: Region, dst: Region) -> int:
    """Cycles from a transfer's last byte leaving its source to its landing: the slower end's access latency."""
    return max(src.latency_cycles, dst.latency_cycles)


# --- compute --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LoopCost:
    """How :func:`loop_cycles` priced one :class:`~sim.model.plan.Loop` on a core (for reports and traces).

    ``ii`` is the initiation interval (cycles between iterations), ``bound_by`` what sets it: a unit class
    (``fmac``, ``vls``, ...: its issues over its count), an issue class (``scalar issue``, ``vector issue``:
    the VLIW slots), or ``recurrence`` (the loop-carried chain's latency); ``fill`` the cycles before the first
    iteration's results appear, ``epilogue`` the cycles after the last (stores, reductions), ``cycles`` the
    loop's whole cost over all its entries.
    """

    label: str
    trips: int
    entries: int
    ii: int
    bound_by: str
    resource_ii: int
    recurrence_ii: int
    fill: int
    epilogue: int
    cycles: int


def _unit(core: CoreModel, name: str, loop: Loop) -> FunctionalUnit:
    """The core's unit class ``name`` (a store, ``"vls.store"``, issues on ``vls``); SimError naming the loop when
    the core has none (the plan check refuses such a plan before it runs; this guards a plan priced without it,
    e.g. a kernel's own estimate)."""
    cls, store = unit_class(name)
    unit = core.units.get(cls)
    if unit is None:
        raise SimError(f"loop {loop.label or '(unlabelled)'} issues on unit class {name!r}, which the core lacks "
                       f"(it has: {', '.join(core.units)})")
    if store and not unit.bytes_per_issue:
        raise SimError(f"loop {loop.label or '(unlabelled)'} names a store on unit class {cls!r}, which moves no "
                       f"data (a store issues on a load/store unit)")
    return unit


def _latency(core: CoreModel, name: str, loop: Loop) -> int:
    """Cycles after its issue that an instruction on unit ``name`` is done: its result ready (``latency_cycles``),
    a store's data in memory (``"vls.store"``: the unit's store latency); a cross-lane reduction's (:data:`REDUCE`)
    is in its ``reduction_latency_cycles`` per vector."""
    if name == REDUCE:
        return 0
    return _unit(core, name, loop).latency(store=unit_class(name)[1])


def _issue_bound(issues: Mapping[str, int], core: CoreModel, loop: Loop) -> tuple[int, str]:
    """(cycles, what bounds them) to issue ``issues`` once: the busiest unit class over its count, or an issue
    class's instructions over its VLIW slots, whichever is larger (a tie names the unit).  Loads and stores on a
    unit class (``vls``, ``vls.store``) share its units; cross-lane reductions (:data:`REDUCE`) take
    ``reduction_latency_cycles`` each, one after the other."""
    best, by = 0, "-"
    per_class: dict[str, int] = defaultdict(int)
    per_unit: dict[str, int] = defaultdict(int)
    for name, count in issues.items():
        n = int(count)  # a numpy int would wrap around silently on a hostile count (the plan check bounds them)
        if name == REDUCE:
            if n * core.reduction_latency_cycles > best:
                best, by = n * core.reduction_latency_cycles, name
            continue
        per_unit[unit_class(name)[0]] += n
    for name, n in per_unit.items():
        unit = _unit(core, name, loop)
        per_class[unit.issue_class] += n
        need = -(-n // unit.count)
        if need > best:
            best, by = need, name
    for cls, n in per_class.items():
        need = -(-n // core.issue_width[cls])
        if need > best:
            best, by = need, f"{cls} issue"
    return best, by


def _priced(loop: Loop, core: CoreModel) -> tuple[LoopCost, str]:
    """(:func:`loop_cost`, :func:`loop_text`) of ``loop`` on ``core``, each worked out once per distinct loop (a
    plan prices the same few loops on thousands of tiles, and a re-lowered plan brings equal loops anew)."""
    try:
        return _priced_by_value(loop, core)
    except TypeError:  # an unhashable field (refused by the plan check): price it without the memo
        cost = _loop_cost(loop, core)
        return cost, loop_text(cost, core)


@memoized
def _priced_by_value(loop: Loop, core: CoreModel) -> tuple[LoopCost, str]:
    cost = _loop_cost(loop, core)
    return cost, loop_text(cost, core)


def loop_cost(loop: Loop, core: CoreModel) -> LoopCost:
    """The cost of ``loop`` on ``core`` and how it arises (docs/timing-model.md works it through by hand).

    * resource II: ``max(ceil(issues[u] / count(u)))`` over the unit classes the body issues on, and
      ``ceil(sum of a class's issues / issue_width[class])`` per VLIW issue class;
    * recurrence II: the latencies of the ``carried`` units summed (the next iteration's accumulate waits
      for this one's);
    * II = the larger (at least 1: an iteration takes a cycle);
    * fill: the latencies of the ``chain`` units summed (paid when the loop runs at all; a store's,
      ``vls.store``, is the unit's store latency);
    * epilogue: the chain of :meth:`~sim.model.plan.Loop.epilogue_steps` (``epilogue_chain``, the
      ``reductions``, the ``epilogue``), each step waiting for the one before, pipelined
      (:func:`epilogue_cycles`);
    * cycles = entries x (loop_overhead_cycles + fill + trips x II + epilogue).

    SimError when the loop names a unit class the core lacks (the plan check refuses such a plan first).
    """
    return _priced(loop, core)[0]


def _loop_cost(loop: Loop, core: CoreModel) -> LoopCost:
    """:func:`loop_cost` worked out (no memo)."""
    ii_res, bound_by = _issue_bound(loop.issues, core, loop)
    ii_rec = sum(_latency(core, u, loop) for u in loop.carried)
    if ii_rec > ii_res:
        bound_by = "recurrence"
    ii = max(1, ii_res, ii_rec)
    trips, entries = int(loop.trips), int(loop.entries)  # Python ints: exact whatever the kernel stated them in
    fill = sum(_latency(core, u, loop) for u in loop.chain) if trips else 0
    epilogue = epilogue_cycles([(_issue_bound(step, core, loop)[0], _latency(core, _last(step), loop),
                                 {unit_class(u)[0] for u, n in step.items() if int(n)})
                                for step in loop.epilogue_steps()])
    cycles = entries * (core.loop_overhead_cycles + fill + trips * ii + epilogue)
    return LoopCost(label=loop.label, trips=loop.trips, entries=loop.entries, ii=ii, bound_by=bound_by,
                    resource_ii=ii_res, recurrence_ii=ii_rec, fill=fill, epilogue=epilogue, cycles=cycles)


def _last(step: Mapping[str, int]) -> str:
    """The unit a step names last among those it issues on (its latency ends the step)."""
    return [u for u, n in step.items() if int(n)][-1]


def epilogue_cycles(steps: Sequence[tuple[int, int, Collection[str]]]) -> int:
    """Cycles of a chain of dependent steps, each ``(issue cycles, latency, unit classes it issues on)``, run as
    a software pipeline runs them (the published improved reduction's schedule, tests/test_epilogue_chains.py):

    * a step starts when the step before's first results are ready (its start + its latency), and not before
      the last earlier step on one of its unit classes has issued its last instruction (a unit class runs one
      step at a time);
    * its last instruction issues no sooner than its issue cycles after its start, and than the step before's
      last results are ready (the step before's end + its latency);
    * the chain is done the last step's latency after the last step's end.

    With issue cycles ``n_i``, latencies ``L_i``, starts ``S_i`` and ends ``F_i`` (the cycle after the last
    issue): ``S_i = max(S_{i-1} + L_{i-1}, F_j`` of earlier steps sharing a unit class), ``F_i = max(S_i +
    n_i, F_{i-1} + L_{i-1})``, cycles ``F_last + L_last``; one step costs ``n + L`` (its resource bound plus
    its latency), a chain of single instructions the sum of their latencies."""
    start = end = latency = 0
    busy: dict[str, int] = {}
    for issue, lat, units in steps:
        start = max([start + latency] + [busy[u] for u in units if u in busy])
        end = max(start + issue, end + latency)
        latency = lat
        for u in units:
            busy[u] = end
    return end + latency


def loop_cycles(loop: Loop, core: CoreModel) -> int:
    """Cycles ``core`` takes for ``loop`` over all its entries (:func:`loop_cost` gives the terms)."""
    return loop_cost(loop, core).cycles


def loop_text(cost: LoopCost, core: CoreModel) -> str:
    """One loop's price as a kernel engineer reads it, e.g. ``gemm micro-kernel 6x128: 4 x (8 + fill 17 + 512
    x II 8 [fmac] + epilogue 15) = 16544``: the entries, the loop overhead, the fill, the trips at the
    initiation interval and what bounds it (a unit class, an issue class or the recurrence), the epilogue."""
    body = f"{core.loop_overhead_cycles} + fill {cost.fill} + {cost.trips} x II {cost.ii} [{cost.bound_by}]" + \
        (f" + epilogue {cost.epilogue}" if cost.epilogue else "")
    return f"{cost.label or 'loop'}: " + (f"{cost.entries} x ({body})" if cost.entries != 1 else body) + \
        f" = {cost.cycles}"


def compute_text(c: Compute, target: Target) -> str | None:
    """A tile's compute price in words for its trace event: the tile overhead and each loop's
    :func:`loop_text`, separated by ``; `` (None for a compute that states no loops)."""
    if not c.loops:
        return None
    return _kept_price(c, target.core)[1]


def compute_cycles(c: Compute, target: Target) -> int:
    """Cycles of one tile's compute: ``tile_overhead_cycles`` plus each of its loops' :func:`loop_cycles`.

    The loops are all a compute issues; its ``flops`` are reported, never priced.  A compute without loops
    (one that neither computes nor writes: the plan check's rule ``compute-loops`` refuses any other) costs
    the tile overhead.  SimError when ``target`` lacks the tile's precision."""
    core = target.core
    if c.precision not in core.precisions:
        raise SimError(f"plan computes in {c.precision}, which {target.name} lacks")
    return _kept_price(c, core)[0]


def _kept_price(c: Compute, core: CoreModel) -> tuple[int, str]:
    """(cycles, text) of ``c``'s loops on ``core``: the value memo's, kept on the compute (outside its fields, as
    its hash is) for the next tile that states it, since the engine asks once per tile it runs."""
    last = c.__dict__.get("_price")
    if last is not None and last[0] is core:
        return last[1]
    price = (_by_loops(_loops_cycles, c.loops, core), _by_loops(_loops_text, c.loops, core))
    c.__dict__["_price"] = (core, price)
    return price


def loops_cycles(loops: Sequence[Loop], target: Target) -> int:
    """Cycles of a compute issuing ``loops``: :func:`compute_cycles` without the compute around them."""
    return _by_loops(_loops_cycles, tuple(loops), target.core)


_R = TypeVar("_R")


def _by_loops(price: Callable[[tuple[Loop, ...], CoreModel], _R], loops: Sequence[Loop], core: CoreModel) -> _R:
    """``price(loops, core)`` remembered by value (the engine asks once per tile it runs), worked out afresh for
    loops that cannot be hashed (a list: refused by the plan check, priced all the same)."""
    try:
        return price(loops, core)  # type: ignore[arg-type]
    except TypeError:
        return price.__wrapped__(tuple(loops), core)  # type: ignore[attr-defined]


@memoized
def _loops_cycles(loops: tuple[Loop, ...], core: CoreModel) -> int:
    cycles = core.tile_overhead_cycles
    for loop in loops:
        cycles += _priced(loop, core)[0].cycles
    return cycles


@memoized
def _loops_text(loops: tuple[Loop, ...], core: CoreModel) -> str:
    return "; ".join([f"tile overhead {core.tile_overhead_cycles}"] + [_priced(loop, core)[1] for loop in loops])


def cheapest_loops(options: Sequence[tuple[T, Sequence[Loop]]], target: Target) -> T:
    """The cost model's pick among ways to run one compute: of ``(label, loops)`` options, the label whose
    loops cost the fewest cycles (:func:`compute_cycles`: what the engine charges the tile), the first on a
    tie.  How a tiling key of scope ``compute`` (a micro-kernel's shape) is decided per tile when the caller
    does not fix it: strictly cheapest, since the options differ in nothing else."""
    if not options:
        raise ValueError("cheapest_loops: no options")
    return min(enumerate(options), key=lambda io: (loops_cycles(io[1][1], target), io[0]))[1][0]


# --- the roofline ---------------------------------------------------------------------------------


#: The roofline's name for the DMA engines' resource (the busiest core's engines at their total rate).
DMA_ENGINES = "dma engines"
#: How a roofline names a DRAM's activation rate as a resource: ``<region> rows``.
ROWS_SUFFIX = " rows"


def rows_resource(region: str) -> str:
    """The roofline's name of ``region``'s activation rate (``ddr rows``)."""
    return region + ROWS_SUFFIX


def region_of_resource(name: str) -> str:
    """The region a roofline resource other than compute and the DMA engines belongs to (``ddr`` for ``ddr`` and
    ``ddr rows``)."""
    return name.removesuffix(ROWS_SUFFIX)


@dataclass(frozen=True)
class Roofline:
    """The least cycles any schedule of a plan could take on the cores of its call.

    ``resource_cycles`` maps ``compute``, each region name and ``dma engines``
    (:data:`DMA_ENGINES`) to the cycles that resource alone needs with the work
    spread evenly over every core of the call: for ``compute``, all cores'
    loops with every iteration at its resource II (:func:`loop_resource_cycles`:
    no fill, recurrence, epilogue or overhead, so no schedule beats it) over
    the cores; a region's bytes over its bandwidth (a shared region's whole
    bandwidth, which its transfers share; a private region's times the cores,
    each of which has its own copy); a DRAM's rows opened over its activation
    rate (``<region> rows``, :func:`rows_resource`); and all cores' transfer bytes over their
    DMA engines' total rate.  A plan that leaves cores idle or loads one core
    more than the others cannot reach this bound: its run reads as that far
    from it.  ``busiest_core_cycles`` holds ``compute`` and ``dma engines`` for
    the busiest core alone (what bounds any run of this very plan, the tiling
    search's bound).  The bound is the largest of ``resource_cycles``;
    ``bound_by`` names the resource that sets it.  Which resource a *run* was
    limited by is :func:`sim.inspect.summary.limiting_resource`'s answer (it
    also looks at the trace).
    """

    resource_cycles: Mapping[str, float]
    total_flops: int  # the math's flops only: the same for every tiling and storage precision of a call
    region_bytes: Mapping[str, int]
    flops_by_precision: Mapping[str, int] = field(default_factory=dict)
    busiest_core_cycles: Mapping[str, float] = field(default_factory=dict)
    #: A plan of several cores whose phases a barrier separates: per segment between barriers (in order), the
    #: cycles each resource needs for that segment's work, as ``busiest_core_cycles`` and the regions' entries of
    #: ``resource_cycles`` count the whole plan's.  No segment's work overlaps another's, so a run takes at least
    #: their sum (:func:`run_lower_bound_cycles`).  Empty for a plan of one segment.
    segment_cycles: tuple[Mapping[str, float], ...] = ()

    @property
    def cycles(self) -> float:
        """The bound in cycles."""
        return max(self.resource_cycles.values(), default=0.0)

    @property
    def bound_by(self) -> str:
        """The resource that sets the bound."""
        return max(self.resource_cycles.items(), key=lambda kv: (kv[1], kv[0]))[0] if self.resource_cycles else "-"


def loop_resource_cycles(loop: Loop, core: CoreModel) -> int:
    """The least cycles ``core`` could run ``loop`` in: every iteration of every entry at the resource II (the
    busiest unit over its count, the issue width), without fill, recurrence, epilogue or overhead (what the
    roofline counts: :func:`loop_cycles` never charges less)."""
    return int(loop.trips) * int(loop.entries) * _priced(loop, core)[0].resource_ii


class RegionOf:
    """``MemoryMap.region_at``, answering at once for an address in the region it found last (a plan's
    transfers mostly alternate between two or three regions)."""

    def __init__(self, mmap: MemoryMap):
        self.mmap = mmap
        self.recent: list[tuple[int, int, Region]] = []  # (base, end, region), the last found first

    def __call__(self, addr: int) -> Region | None:
        for base, end, r in self.recent:
            if base <= addr < end:
                return r
        found = self.mmap.region_at(addr)
        if found is not None:
            self.recent = [(found.base, found.end, found), *self.recent[:3]]
        return found


def roofline(plan: Plan, target: Target) -> Roofline:
    """The roofline bound of ``plan`` on ``target`` (the compute rate and bandwidth of the cores it uses)."""
    mmap = MemoryMap(target)
    core_model = target.core
    flops_by_prec: dict[str, int] = defaultdict(int)  # the math's own flops (reported)
    loop_cycles_by_core: dict[int, int] = defaultdict(int)  # each core's loops at their resource II
    region_bytes: dict[str, int] = defaultdict(int)
    region_rows: dict[str, int] = defaultdict(int)  # DRAM rows opened (sim.model.dram), per region with rows
    core_bytes: dict[int, int] = defaultdict(int)  # bytes through each core's DMA engines
    loops_of: dict[int, int] = {}  # id(loops) -> at their resource II: tiles share computes and loops
    region_of = RegionOf(mmap)
    synced = False
    n = len(plan.cores)
    # Barriers cut a plan of several cores into segments that run one after another (each counted apart too).
    cuts = [i + 1 for i, phase in enumerate(plan.phases[:-1]) if phase.barrier_after] if n > 1 else []
    segments: list[tuple[dict[int, int], dict[str, int], dict[str, int], dict[int, int]]] = []
    for lo, hi in zip([0, *cuts], [*cuts, len(plan.phases)]):
        seg = (loop_cycles_by_core, region_bytes, region_rows, core_bytes) if not cuts else (
            defaultdict(int), defaultdict(int), defaultdict(int), defaultdict(int))
        seg_loops, seg_bytes, seg_rows, seg_core_bytes = seg
        for phase in plan.phases[lo:hi]:
            for core, tiles in phase.tiles.items():
                # (summed per core and per region here, added once: a plan has thousands of tiles)
                core_loops = core_transfer_bytes = 0
                for tile in tiles:
                    c = tile.compute
                    if c is not None:
                        flops_by_prec[c.precision] += c.flops
                        cycles_of_c = loops_of.get(id(c.loops))
                        if cycles_of_c is None:
                            cycles_of_c = loops_of[id(c.loops)] = sum(loop_resource_cycles(loop, core_model)
                                                                      for loop in c.loops)
                        core_loops += cycles_of_c
                    for transfers in (tile.loads, tile.stores):
                        for t in transfers:
                            geometry = t._geometry
                            size = geometry.size_bytes
                            core_transfer_bytes += size
                            if t.sync is not None:
                                synced = True  # its memory side is its group's (below)
                                continue
                            # Each side's region is the one holding the block's lowest byte.
                            r_src = region_of(t.src + geometry.src_span[0])
                            r_dst = region_of(t.dst + geometry.dst_span[0])
                            for r in (r_src, r_dst):
                                if r is not None:
                                    seg_bytes[r.name] += size
                            for r, use in transfer_rows(t, r_src, r_dst):
                                seg_rows[r.name] += use.activations
                seg_loops[core] += core_loops
                seg_core_bytes[core] += core_transfer_bytes
        if cuts:
            if synced:
                _synced_memory(replace(plan, phases=plan.phases[lo:hi]), region_of, seg_bytes, seg_rows)
                synced = False
            segments.append(seg)
            for key, value in seg_loops.items():
                loop_cycles_by_core[key] += value
            for name, value in seg_bytes.items():
                region_bytes[name] += value
            for name, value in seg_rows.items():
                region_rows[name] += value
            for key, value in seg_core_bytes.items():
                core_bytes[key] += value
    if synced:
        _synced_memory(plan, region_of, region_bytes, region_rows)
    cycles = _resource_cycles(target, n, region_bytes, region_rows)
    # Every core's loops at their resource II spread over the call's cores: an idle or underloaded core is work
    # the plan could have given it.  The busiest core's alone bounds this plan's runs.
    cycles["compute"] = sum(loop_cycles_by_core.values()) / n if n else 0
    busiest = _busiest(target, loop_cycles_by_core, core_bytes)
    if core_bytes:
        rate = target.dma.engines_per_core * target.dma.engine_bytes_per_cycle
        cycles[DMA_ENGINES] = sum(core_bytes.values()) / n / rate
    return Roofline(resource_cycles=dict(cycles), total_flops=sum(flops_by_prec.values()),
                    region_bytes=dict(region_bytes), flops_by_precision=dict(flops_by_prec),
                    busiest_core_cycles=busiest,
                    segment_cycles=tuple({**_resource_cycles(target, n, b, r), **_busiest(target, lc, cb)}
                                         for lc, b, r, cb in segments))


def _resource_cycles(target: Target, cores: int, region_bytes: Mapping[str, int],
                     region_rows: Mapping[str, int]) -> dict[str, float]:
    """Each region's bytes over its bandwidth and each DRAM's rows over its activation rate (the roofline's)."""
    cycles: dict[str, float] = {}
    for name, b in region_bytes.items():
        r = target.region(name)
        # Whatever the transfers, a region never delivers more than its bandwidth (each core's own copy of a
        # private region its own), and a lone transfer may take all of it.
        cycles[name] = b / (r.bandwidth_bytes_per_cycle * (1 if r.shared else cores))
    for name, activations in region_rows.items():
        # Every row a transfer opens goes through its DRAM's activation rate (tFAW), shared as its bandwidth is.
        r = target.region(name)
        cycles[rows_resource(name)] = activations / (float(activation_rate(r)) * (1 if r.shared else cores))
    return cycles


def _busiest(target: Target, loop_cycles_by_core: Mapping[int, int], core_bytes: Mapping[int, int]) -> dict[str, float]:
    """The busiest core's loops at their resource II and its DMA engines' bytes at their total rate."""
    busiest = {"compute": float(max(loop_cycles_by_core.values(), default=0))}
    if core_bytes:
        busiest[DMA_ENGINES] = max(core_bytes.values()) / (target.dma.engines_per_core
                                                           * target.dma.engine_bytes_per_cycle)
    return busiest


def _synced_memory(plan: Plan, region_of: Callable[[int], Region | None], region_bytes: dict[str, int],
                   region_rows: dict[str, int]) -> None:
    """The memory side of ``plan``'s synchronised transfers, added to the roofline's counts: each member's bytes
    at its destination, at its source where its read counts (a broadcast reads once), and the rows of each
    group's merged stream (:mod:`sim.model.sync`); a member's side in a private DRAM counts alone."""
    for members in sync_groups(plan).values():
        ts = [m.transfer for m in members]
        srcs = [region_of(t.span("src")[0]) for t in ts]
        dsts = [region_of(t.span("dst")[0]) for t in ts]
        if any(r is None for r in srcs + dsts):
            continue  # a side the plan check refuses: no bound to add
        src_regions, dst_regions = cast(list[Region], srcs), cast(list[Region], dsts)
        reads = source_reads(ts, src_regions)
        for t, src, dst, read in zip(ts, src_regions, dst_regions, reads):
            region_bytes[dst.name] += t.size_bytes
            if read:
                region_bytes[src.name] += t.size_bytes
            for side, region in (("src", src), ("dst", dst)):
                if region.rows is not None and not region.shared and (read or side == "dst"):
                    region_rows[region.name] += side_rows(t, side, region).activations
        for region, activations, _ in sync_row_demands(ts, src_regions, dst_regions, reads):
            region_rows[region.name] += activations


#: :func:`landed_cycles` prices at most this many of a set's transfers alone (the longest): beyond them, the set's
#: bytes through its shared regions and DMA engines are the bound (a staged block cut into hundreds of pieces).
ALONE_PRICED = 4


def landed_cycles(transfers: Iterable[tuple[int, Transfer, Region, Region]], target: Target) -> int:
    """The fewest cycles after they are issued, all at once, by which every one of ``transfers`` ``(core,
    transfer, source region, destination region)`` has landed, whatever else streams (0 for none): the DMA setup,
    then each alone (:func:`stream_cycles`, the :data:`ALONE_PRICED` longest), and all together through each
    shared region's bandwidth and DRAM activation rate and each core's DMA engines, the last byte landing the
    slower end's latency after it streamed.  A synchronised transfer streams with its group: it counts for
    nothing here."""
    dma = target.dma
    latest = Fraction(0)
    region_bytes: dict[str, int] = {}
    region_rows: dict[str, int] = {}
    region_latency: dict[str, int] = {}
    core_bytes: dict[int, int] = {}
    core_latency: dict[int, int] = {}
    regions: dict[str, Region] = {}
    alone: list[tuple[int, Transfer, Region, Region, int]] = []
    for core, t, src, dst in transfers:
        if t.sync is not None:
            continue
        latency = transfer_latency_cycles(src, dst)
        sb, db = transfer_bytes(t, src, dst)
        alone.append((max(sb, db), t, src, dst, latency))
        core_bytes[core] = core_bytes.get(core, 0) + engine_bytes(t, sb, db, dma)
        core_latency[core] = min(core_latency.get(core, latency), latency)
        for region, nbytes in stream_demands(src, dst, sb, db):
            if region.shared:
                regions[region.name] = region
                region_bytes[region.name] = region_bytes.get(region.name, 0) + nbytes
                region_latency[region.name] = min(region_latency.get(region.name, latency), latency)
        for region, use in transfer_rows(t, src, dst):
            if region.shared:
                region_rows[region.name] = region_rows.get(region.name, 0) + use.activations
    if not alone:
        return 0
    alone.sort(key=lambda a: a[0], reverse=True)
    for _, t, src, dst, latency in alone[:ALONE_PRICED]:
        latest = max(latest, Fraction(stream_cycles(t, src, dst, dma) + latency))
    engines = exact_rate(dma.engine_bytes_per_cycle) * dma.engines_per_core
    for core, nbytes in core_bytes.items():
        latest = max(latest, nbytes / engines + core_latency[core])
    for name, nbytes in region_bytes.items():
        region = regions[name]
        latest = max(latest, nbytes / exact_rate(region.bandwidth_bytes_per_cycle) + region_latency[name])
        if name in region_rows:
            latest = max(latest, region_rows[name] / activation_rate(region) + region_latency[name])
    return dma.setup_cycles + int(latest)  # (the engine's cycles are whole: the floor is never late)


def run_lower_bound_cycles(rf: Roofline, target: Target) -> float:
    """Cycles no run of the plan whose roofline is ``rf`` can beat: its roofline's resources, each after what
    must come before it and with what must follow it; and for a plan that barriers cut into segments, the sum of
    each segment's own such bound and the barriers' latency (a segment starts once every core has finished the
    one before: its stores landed, the barrier released).

    Nothing runs before the launch; no byte streams before a DMA engine is programmed (its setup); and the last
    byte through a region lands at least that region's access latency after it streamed (a transfer lands the
    slower end's latency after its stream), while a core ends only once its stores have landed.  The tiling
    search leaves out a candidate whose bound shows it cannot win.
    """
    launch = target.launch_overhead_cycles
    bound = launch + _resources_bound(target, {**rf.resource_cycles, **rf.busiest_core_cycles})
    if rf.segment_cycles:
        bound = max(bound, launch + sum(_resources_bound(target, seg) for seg in rf.segment_cycles)
                    + (len(rf.segment_cycles) - 1) * target.barrier_latency_cycles)
    return bound


def _resources_bound(target: Target, per_plan: Mapping[str, float]) -> float:
    """The cycles after the launch that ``per_plan``'s resources (a plan's busiest core's compute and DMA engines,
    its regions) need, each after the DMA setup and with the region's latency after it."""
    setup = target.dma.setup_cycles
    bound = per_plan.get("compute", 0)
    for name, cycles in per_plan.items():
        if name == "compute":
            continue
        after = 0 if name == DMA_ENGINES else target.region(region_of_resource(name)).latency_cycles
        bound = max(bound, setup + cycles + after)
    return bound


def serial_compute_cycles(plan: Plan, target: Target, memo: object = None) -> dict[int, int]:
    """Per core, the cycles of all its computes (:func:`compute_cycles`): a core runs them one after another, so
    no run of ``plan`` ends before the launch plus the largest of these.  (``memo`` is no longer used: prices
    are remembered by value, :mod:`sim.model.memo`; passing it warns.)"""
    if memo is not None:
        warnings.warn("serial_compute_cycles(memo=...) is no longer used: compute prices are remembered by value "
                      "(sim.model.memo); drop the argument", DeprecationWarning, stacklevel=2)
    out: dict[int, int] = {}
    for phase in plan.phases:
        for core, tiles in phase.tiles.items():
            total = out.get(core, 0)
            for tile in tiles:
                c = tile.compute
                if c is not None:
                    total += compute_cycles(c, target)
            out[core] = total
    return out


def flops_at_peak_cycles(flops: float, precision: str, target: Target, cores: int) -> float:
    """The fewest cycles ``flops`` element operations at ``precision`` take on ``cores`` cores of ``target``, every
    FMAC unit busy on every core (a lower bound of any plan that does them: a tiling space's ``bound``)."""
    return flops / (max(cores, 1) * target.core.precisions[precision].peak_flops_per_cycle)


def peak_flops_per_cycle(rf: Roofline, target: Target, cores: int) -> float:
    """The cores' peak in element operations per cycle at the precisions the plan computes in.

    Flops at several precisions combine harmonically (the time each share
    takes at its own peak); a plan without arithmetic reports the fp32 peak
    (or the chip's first precision).
    """
    precs = target.core.precisions
    timed = [(f, precs[p].peak_flops_per_cycle) for p, f in rf.flops_by_precision.items() if p in precs and f]
    if timed:
        return sum(f for f, _ in timed) / sum(f / peak for f, peak in timed) * cores
    model = precs.get("fp32") or next(iter(precs.values()))
    return float(model.peak_flops_per_cycle * cores)


# --- the closed-form estimate ---------------------------------------------------------------------


class _Regions:
    """The regions a transfer's two ends lie in, looked up once per span."""

    def __init__(self, target: Target):
        self.mmap = MemoryMap(target)
        self.cache: dict[tuple[int, int], Region] = {}

    def of(self, t: Transfer, side: str) -> Region:
        lo, hi = t.span(side)
        r = self.cache.get((lo, hi))
        if r is None:
            found = self.mmap.region_of(lo, hi - lo)
            if found is None:
                raise SimError(f"estimate: DMA {side} [{lo:#x}, {hi:#x}) is {self.mmap.describe(lo)}")
            r = self.cache[(lo, hi)] = found
        return r


def estimate(plan: Plan, target: Target) -> int:
    """A closed-form estimate of the cycles the engine takes for ``plan`` on ``target``, without SimPy.

    Every core starts after the launch overhead.  For each phase, each core's time is the larger of

    * its pipeline's compute side: the tiles' :func:`compute_cycles` summed, plus the first tile's loads
      (nothing to overlap them with) and the last tile's stores;
    * its DMA side: the time its DMA engines are held (per transfer: setup, :func:`stream_cycles` and
      :func:`transfer_latency_cycles`), spread over the core's engines; and the time its bytes need at each
      of its private regions' bandwidth;

    and the phase lasts, for the cores a barrier joins, the longest core's time, or the time every core's
    bytes together need at a shared region's bandwidth, whichever is longer, plus the barrier's latency.  A
    tile's group of transfers (its loads, its stores) takes the longest of them alone, all of them spread over
    the core's engines, or their bytes at each region's bandwidth (they share it) plus one setup and latency.
    The cores start a phase together and, with the same work, end it together, so their first loads and their
    last stores share the shared regions: the first loads end when the region has moved, for every engine, as
    much as the largest first load (streams share a region equally, and an engine whose first load is done
    streams the next tile's meanwhile), the last stores when it has moved all of them.  Sharing beyond these
    totals is left out, so the estimate is optimistic when transfers collide in bursts and pessimistic when a
    core's loads hide behind another's compute; it is never below :func:`roofline` (it is raised to it), and on
    the bench cases it lies within a few percent of the simulation (docs/timing-model.md lists the figures).
    """
    regions = _Regions(target)
    dma = target.dma
    engines = dma.engines_per_core
    setup = dma.setup_cycles
    clock = {core: float(target.launch_overhead_cycles) for core in plan.cores}
    # A broadcast reads its source block once (sim.model.sync.source_reads): its other members' source side
    # asks nothing of the shared region.
    unread: set[int] = set()
    for members in sync_groups(plan).values():
        ts = [member.transfer for member in members]
        reads = source_reads(ts, [regions.of(t, "src") for t in ts])
        unread.update(id(t) for t, read in zip(ts, reads) if not read)
    for phase, meets in zip(plan.phases, plan.barriers()):
        shared_time: dict[str, float] = defaultdict(float)  # shared region -> every core's bytes at its bandwidth
        first_bytes: dict[str, int] = defaultdict(int)  # shared region -> the cores' first tiles' load bytes
        largest_first: dict[str, int] = defaultdict(int)  # shared region -> the largest of those loads
        early_bytes: dict[tuple[int, str], int] = defaultdict(int)  # (core, shared region) -> tiles 0 and 1 loads
        last_bytes: dict[str, int] = defaultdict(int)  # shared region -> the cores' last tiles' store bytes
        first_fixed = last_fixed = 0  # setup and latency of the slowest first load, last store
        cores: dict[int, tuple[int, float, float, float]] = {}  # core -> (compute, first loads, last stores, dma)
        for core in plan.cores:
            tiles = phase.tiles.get(core, ())
            compute = 0
            engine_time = 0
            private_time: dict[str, float] = defaultdict(float)
            first_loads = last_stores = 0.0
            for i, tile in enumerate(tiles):
                if tile.compute is not None:
                    compute += compute_cycles(tile.compute, target)
                for kind, transfers in (("load", tile.loads), ("store", tile.stores)):
                    first, last = kind == "load" and i == 0, kind == "store" and i == len(tiles) - 1
                    longest = total = fixed_max = 0
                    group_time: dict[str, float] = defaultdict(float)  # this group's bytes at each region's bandwidth
                    for t in transfers:
                        src, dst = regions.of(t, "src"), regions.of(t, "dst")
                        stream = stream_cycles(t, src, dst, dma)
                        fixed = setup + transfer_latency_cycles(src, dst)
                        engine_time += stream + fixed
                        longest = max(longest, stream + fixed)
                        total += stream + fixed
                        fixed_max = max(fixed_max, fixed)
                        for r, nbytes in stream_demands(src, dst, *transfer_bytes(t, src, dst)):
                            if r is src and r is not dst and id(t) in unread:
                                continue
                            need = nbytes / r.bandwidth_bytes_per_cycle
                            (shared_time if r.shared else private_time)[r.name] += need
                            group_time[r.name] += need
                            if not r.shared:
                                continue
                            if kind == "load" and i <= 1:
                                early_bytes[(core, r.name)] += nbytes
                            if first:
                                first_bytes[r.name] += nbytes
                                largest_first[r.name] = max(largest_first[r.name], nbytes)
                                first_fixed = max(first_fixed, fixed)
                            if last:
                                last_bytes[r.name] += nbytes
                                last_fixed = max(last_fixed, fixed)
                    # A tile's transfers share the core's engines and the regions' bandwidth: the longest alone,
                    # all of them spread over the engines, or their bytes at a region's bandwidth, whichever is
                    # longest.
                    group = max(longest, math.ceil(total / engines),
                                max(group_time.values(), default=0.0) + fixed_max) if transfers else 0.0
                    if first:
                        first_loads = group
                    if last:
                        last_stores = group
            dma_side = max(engine_time / engines, max(private_time.values(), default=0.0))
            cores[core] = (compute, first_loads, last_stores, dma_side)
        # The first loads of all cores share each shared region: the largest ends once every engine has streamed
        # as much (or all its first two tiles' loads, if less), the smaller ones' engines going on to the next
        # tile's loads meanwhile.
        shared_first = 0.0
        for name, nbytes in first_bytes.items():
            during = sum(min(b, engines * largest_first[name]) for (_, r), b in early_bytes.items() if r == name)
            bw = target.region(name).bandwidth_bytes_per_cycle
            shared_first = max(shared_first, max(nbytes, during) / bw)
        shared_first += first_fixed
        shared_last = max((b / target.region(name).bandwidth_bytes_per_cycle for name, b in last_bytes.items()),
                          default=0.0) + last_fixed
        ends: dict[int, float] = {}
        for core, (compute, first_loads, last_stores, dma_side) in cores.items():
            pipeline = (compute + max(first_loads, shared_first if first_loads else 0)
                        + max(last_stores, shared_last if last_stores else 0))
            ends[core] = clock[core] + max(pipeline, dma_side)
        shared = max(shared_time.values(), default=0.0)
        if shared:  # the last transfer still lands a setup and an access latency after its stream
            shared += first_fixed
        if meets:
            end = max(max(ends.values()), max(clock.values()) + shared) + target.barrier_latency_cycles
            clock = {core: end for core in plan.cores}
        else:
            clock = {core: max(ends[core], clock[core] + shared) for core in plan.cores}
    cycles = max(clock.values(), default=0.0)
    return math.ceil(max(cycles, target.launch_overhead_cycles + roofline(plan, target).cycles))
