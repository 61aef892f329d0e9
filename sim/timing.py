"""The timing model: every formula that turns a plan's work into cycles, from the target's numbers only.

* :func:`stream_cycles` and :func:`transfer_latency_cycles`: how long a DMA transfer holds its ports, and
  how long after its last byte left them it lands;
* :func:`vector_cycles` and :func:`compute_cycles`: a tile's vector work;
* :class:`Roofline` / :func:`roofline`: the least cycles any schedule of a plan could take;
* :func:`estimate`: a closed-form estimate of a plan's cycles without simulating it.

The engine (:mod:`sim.engine`) charges exactly these formulas while it schedules transfers and computes
on SimPy; the run summaries report the roofline; kernels price candidate tilings with
``PlanContext.estimate`` (this module's :func:`estimate`).  Nothing else in ``sim/`` or ``kernels/``
computes cycles.  See docs/timing-model.md for the model in words.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field

from sim.errors import SimError
from sim.model.memory import MemoryMap
from sim.model.plan import Compute, Plan, Transfer
from sim.model.target import CoreModel, Region, Target

# --- transfers ------------------------------------------------------------------------------------


def stream_cycles(t: Transfer, src: Region, dst: Region) -> int:
    """Cycles a transfer holds its ports: each end moves whole bursts of its contiguous runs at its port's
    bandwidth, and the slower end sets the pace (a dense copy: bytes over the slower port)."""
    src_cycles = src.burst_bytes_for(*t.runs("src")) / src.port_bandwidth_bytes_per_cycle
    dst_cycles = dst.burst_bytes_for(*t.runs("dst")) / dst.port_bandwidth_bytes_per_cycle
    return max(1, math.ceil(max(src_cycles, dst_cycles)))


def transfer_latency_cycles(src: Region, dst: Region) -> int:
    """Cycles from a transfer's last byte leaving its ports to its landing: the slower end's access latency."""
    return max(src.latency_cycles, dst.latency_cycles)


# --- compute --------------------------------------------------------------------------------------


def vector_cycles(core: CoreModel, ops: int, precision: str) -> int:
    """Cycles of ``ops`` vector element operations at the achieved fraction of the core's ``precision`` peak
    (lanes x FMAC units x 2, times ``vector_efficiency``)."""
    peak = core.precisions[precision].peak_flops_per_cycle * core.vector_efficiency
    return math.ceil(ops / peak)


def compute_cycles(c: Compute, target: Target) -> int:
    """Cycles of one tile's vector work: loop overhead, the pipeline's latency, the operations at the achieved
    rate, and each cross-lane reduction's latency.  SimError when ``target`` lacks the tile's precision."""
    core = target.core
    if c.precision not in core.precisions:
        raise SimError(f"plan computes in {c.precision}, which {target.name} lacks")
    return (core.loop_overhead_cycles + core.vector_op_latency_cycles
            + vector_cycles(core, c.vector_ops, c.precision)
            + c.reductions * core.reduction_latency_cycles)


# --- the roofline ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Roofline:
    """The least cycles any schedule of a plan could take on the cores it uses.

    ``resource_cycles`` maps ``compute`` and each region name to the cycles that
    resource alone needs: vector operations (the math's flops and the extra ops,
    see ``Compute``) at the rate the target says a core's inner loop reaches (the
    peak of the tile's precision times ``core.vector_efficiency``, the same rate
    the engine charges); bytes over the bandwidth the plan's cores can draw from
    the region (its ports' bandwidth, as many ports as the cores' DMA engines can
    hold at once; times the cores for private regions, which every core has its
    own copy of).  The bound is their maximum; ``bound_by`` names the resource
    that sets it.  Which resource a *run* was limited by is
    :func:`sim.inspect.summary.limiting_resource`'s answer (it also looks at the trace).
    """

    resource_cycles: Mapping[str, float]
    total_flops: int  # the math's flops only: the same for every tiling and storage precision of a call
    region_bytes: Mapping[str, int]
    flops_by_precision: Mapping[str, int] = field(default_factory=dict)
    extra_ops: int = 0  # vector operations beyond the math (conversions, empty lanes, repeated work)

    @property
    def cycles(self) -> float:
        """The bound in cycles."""
        return max(self.resource_cycles.values(), default=0.0)

    @property
    def bound_by(self) -> str:
        """The resource that sets the bound."""
        return max(self.resource_cycles.items(), key=lambda kv: (kv[1], kv[0]))[0] if self.resource_cycles else "-"


def roofline(plan: Plan, target: Target) -> Roofline:
    """The roofline bound of ``plan`` on ``target`` (the compute rate and bandwidth of the cores it uses)."""
    mmap = MemoryMap(target)
    ops_by_prec: dict[str, int] = defaultdict(int)  # every vector operation, which the compute time counts
    flops_by_prec: dict[str, int] = defaultdict(int)  # the math's own flops (reported)
    region_bytes: dict[str, int] = defaultdict(int)
    for phase in plan.phases:
        for tiles in phase.tiles.values():
            for tile in tiles:
                if tile.compute is not None:
                    ops_by_prec[tile.compute.precision] += tile.compute.vector_ops
                    flops_by_prec[tile.compute.precision] += tile.compute.flops
                for t in tile.loads + tile.stores:
                    for side in ("src", "dst"):
                        lo, _ = t.span(side)
                        r = mmap.region_at(lo)
                        if r is not None:
                            region_bytes[r.name] += t.size_bytes
    n = len(plan.cores)
    cycles: dict[str, float] = {}
    # The engine charges vector ops / (peak x vector_efficiency) per tile: a bound at the bare peak would be
    # unreachable on a calibrated chip (efficiency < 1) and name the wrong resource.
    rate = target.core.vector_efficiency
    compute = sum(f / (target.core.precisions[p].peak_flops_per_cycle * rate * n)
                  for p, f in ops_by_prec.items() if p in target.core.precisions)
    cycles["compute"] = compute
    engines = target.dma.engines_per_core
    for name, b in region_bytes.items():
        r = target.region(name)
        # A transfer holds one port, and a core has only so many DMA engines: the cores of the plan can
        # keep at most min(ports, cores x engines) ports of a shared region busy (per core for a private one).
        if r.shared:
            bw = min(r.ports, n * engines) * r.port_bandwidth_bytes_per_cycle
        else:
            bw = min(r.ports, engines) * r.port_bandwidth_bytes_per_cycle * n
        cycles[name] = b / bw
    return Roofline(resource_cycles=dict(cycles), total_flops=sum(flops_by_prec.values()),
                    region_bytes=dict(region_bytes), flops_by_precision=dict(flops_by_prec),
                    extra_ops=sum(ops_by_prec.values()) - sum(flops_by_prec.values()))


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
      :func:`transfer_latency_cycles`), spread over the core's engines; and the port time it asks of each of
      its private regions (stream cycles over the region's ports);

    and the phase lasts, for the cores a barrier joins, the longest core's time, or the port time every
    core together asks of a shared region (its stream cycles over its ports), whichever is longer, plus the
    barrier's latency.  Queueing for ports and engines beyond these totals is left out, so the estimate is
    optimistic when transfers collide in bursts and pessimistic when a core's loads hide behind another's
    compute; it is never below :func:`roofline` (it is raised to it), and on the bench cases it lies within
    a few percent of the simulation (docs/timing-model.md lists the figures).
    """
    regions = _Regions(target)
    engines = target.dma.engines_per_core
    setup = target.dma.setup_cycles
    multi = len(plan.cores) > 1
    clock = {core: float(target.launch_overhead_cycles) for core in plan.cores}
    for phase in plan.phases:
        shared_port: dict[str, float] = defaultdict(float)  # shared region -> port cycles of every core
        first_port: dict[str, float] = defaultdict(float)  # the same, of the cores' first loads only
        first_fixed = 0  # setup and latency of the slowest first load
        cores: dict[int, tuple[int, int, int, float]] = {}  # core -> (compute, first loads, last stores, dma)
        for core in plan.cores:
            tiles = phase.tiles.get(core, ())
            compute = 0
            engine_time = 0
            private_port: dict[str, float] = defaultdict(float)
            first_loads = last_stores = 0
            for i, tile in enumerate(tiles):
                if tile.compute is not None:
                    compute += compute_cycles(tile.compute, target)
                for kind, transfers in (("load", tile.loads), ("store", tile.stores)):
                    longest = total = 0
                    for t in transfers:
                        src, dst = regions.of(t, "src"), regions.of(t, "dst")
                        stream = stream_cycles(t, src, dst)
                        fixed = setup + transfer_latency_cycles(src, dst)
                        engine_time += stream + fixed
                        longest = max(longest, stream + fixed)
                        total += stream + fixed
                        for r in ((src,) if src is dst else (src, dst)):
                            (shared_port if r.shared else private_port)[r.name] += stream / r.ports
                            if r.shared and kind == "load" and i == 0:
                                first_port[r.name] += stream / r.ports
                                first_fixed = max(first_fixed, fixed)
                    # A tile's transfers share the core's engines: the longest, or all of them spread over the
                    # engines, whichever is longer.
                    if kind == "load" and i == 0:
                        first_loads = max(longest, math.ceil(total / engines))
                    if kind == "store" and i == len(tiles) - 1:
                        last_stores = max(longest, math.ceil(total / engines))
            dma = max(engine_time / engines, max(private_port.values(), default=0.0))
            cores[core] = (compute, first_loads, last_stores, dma)
        # The cores start a phase together, so their first loads queue for the shared regions' ports at once.
        queued_first = max(first_port.values(), default=0.0) + first_fixed
        ends: dict[int, float] = {}
        for core, (compute, first_loads, last_stores, dma) in cores.items():
            pipeline = compute + max(first_loads, queued_first if first_loads else 0) + last_stores
            ends[core] = clock[core] + max(pipeline, dma)
        shared = max(shared_port.values(), default=0.0)
        if shared:  # the last transfer still lands a setup and an access latency after its stream
            shared += first_fixed
        if phase.barrier_after and multi:
            end = max(max(ends.values()), max(clock.values()) + shared) + target.barrier_latency_cycles
            clock = {core: end for core in plan.cores}
        else:
            clock = {core: max(ends[core], clock[core] + shared) for core in plan.cores}
    cycles = max(clock.values(), default=0.0)
    return math.ceil(max(cycles, target.launch_overhead_cycles + roofline(plan, target).cycles))
