"""The rules every plan obeys, checked before it runs: a plan that breaks one raises :class:`~sim.errors.PlanError`.

A kernel describes its work as a :class:`~sim.model.plan.Plan`; the engine would run whatever it is given.
:func:`check_plan` stands between them, so that a kernel written by a user (or a shipped kernel with a bug)
cannot move bytes the call does not own, compute on operands outside the staging memory, or confuse the
engine.  The rules, each with the id a :class:`~sim.errors.PlanError` names (see :data:`RULES`):

* ``plan-structure``: a Plan of Phases whose tiles map a core to Tiles of well-formed Transfers and
  Computes (int addresses and shapes, strides per dimension, a precision the chip computes in);
* ``cores``: the plan runs on cores of the call only, each once, and a phase has tiles on the plan's cores
  only;
* ``tile-ids``: a tile id appears once per core in a phase (traces and messages name a tile by phase and id);
* ``transfer-unmapped``: a transfer's source and destination each lie wholly inside one mapped region;
* ``private-memory``: a transfer never touches private memory the call has no buffer in (an ``_s`` call's
  buffers are all shared, so no core's private storage is the call's; a ``_p`` call runs on its own core);
* ``input-written``: a transfer never writes into an input buffer of the call;
* ``write-outside-outputs``: a transfer writes only into the call's output buffers and the staging levels;
* ``operand-level``: a compute operand lies wholly inside the innermost per-core staging level (the vector
  level), or the scalar level beside it;
* ``tile-size``: the operands of a tile fit the size of the staging level they lie in;
* ``output-overlap``: the output operands of one compute share no byte.

The check reads the plan only (no memory, no SimPy) and costs a few microseconds per transfer; the facade
runs it once per plan it builds (plans are cached), before anything runs, so a refused plan leaves memory
exactly as it was.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from sim.errors import PlanError, brief
from sim.model.call import BoundCall
from sim.model.memory import MemoryMap, block_span
from sim.model.plan import Compute, Operand, Phase, Plan, Tile, Transfer
from sim.model.target import StagingArea, Target

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
    "operand-level": "a compute operand lies wholly inside the innermost per-core staging level (the vector "
                     "level) or the scalar level beside it",
    "tile-size": "the operands of a tile fit the size of the staging level they lie in",
    "output-overlap": "the output operands of one compute share no byte",
}


def _is_int(v: object) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def _span(lo: int, hi: int) -> str:
    return f"[{lo:#x}, {hi:#x})"


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
    """One check of one plan against one call (memoising the verdict on each span it meets)."""

    def __init__(self, call: BoundCall, target: Target, levels: Sequence[StagingArea],
                 operand_levels: Sequence[StagingArea], kernel: str):
        self.call, self.target = call, target
        self.levels = tuple(levels)
        self.operand_levels = tuple(operand_levels)
        self.where = _Where(kernel)
        self.mmap = MemoryMap(target)
        sized = [b for b in call.buffers if b.size_bytes]
        self.inputs = [b for b in sized if b.role != "output"]
        self.outputs = sorted(((b.addr, b.end, b) for b in sized if b.role == "output"), key=lambda t: t[:2])
        # (lo, hi, writing) -> the rule that side breaks and why, or None: a plan meets the same spans again and again
        self._sides: dict[tuple[int, int, bool], tuple[str, str] | None] = {}

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
        if not isinstance(plan.phases, tuple) or not all(isinstance(p, Phase) for p in plan.phases):
            raise self.fail("plan-structure", f"Plan.phases must be a tuple of Phase, got {brief(plan.phases)}")
        plan_cores = {int(c) for c in cores}
        for phase in plan.phases:
            self.where.phase = phase.name if isinstance(phase.name, str) else brief(phase.name)
            if not isinstance(phase.tiles, Mapping):
                raise self.fail("plan-structure", f"Phase.tiles must map a core to its tiles, got "
                                                  f"{brief(phase.tiles)}")
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
        self.where.phase = None

    def tile(self, tile: Any, ids: set[int]) -> None:
        if not isinstance(tile, Tile):
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
        for kind, transfers in (("load", tile.loads), ("store", tile.stores)):
            if not isinstance(transfers, tuple):
                raise self.fail("plan-structure", f"Tile.{kind}s must be a tuple of Transfer, got "
                                                  f"{brief(transfers)}")
            for i, t in enumerate(transfers):
                self.transfer(t, f"{kind} {i}")
        if tile.compute is not None:
            self.compute(tile.compute)

    def transfer(self, t: Any, label: str) -> None:
        if not isinstance(t, Transfer):
            raise self.fail("plan-structure", f"{label}: expected a Transfer, got {brief(t)}")
        shape, ss, ds = t.shape, t.src_strides, t.dst_strides
        if not (isinstance(shape, tuple) and isinstance(ss, tuple) and isinstance(ds, tuple)
                and len(shape) == len(ss) == len(ds) and _is_int(t.src) and _is_int(t.dst)
                and _is_int(t.itemsize) and t.itemsize >= 1 and all(_is_int(n) and n >= 0 for n in shape)
                and all(_is_int(s) for s in ss) and all(_is_int(s) for s in ds)):
            raise self.fail("plan-structure", f"{label}: a Transfer needs int addresses, an itemsize >= 1, and one "
                                              f"size >= 0 and two int strides per dimension, got {brief(t, 160)}")
        if 0 in shape:
            return  # moves nothing
        for side, writing in (("src", False), ("dst", True)):
            lo, hi = block_span(t.src if side == "src" else t.dst, shape, t.itemsize, ss if side == "src" else ds)
            key = (lo, hi, writing)
            if key in self._sides:
                verdict = self._sides[key]
            else:
                verdict = self._sides[key] = self._judge(lo, hi, writing)
            if verdict is not None:
                rule, text = verdict
                what = "reads" if side == "src" else "writes"
                raise self.fail(rule, f"{label} ({t.size_bytes} bytes) {what} {_span(lo, hi)}: {text}")

    def _judge(self, lo: int, hi: int, writing: bool) -> tuple[str, str] | None:
        """The rule a transfer's side ``[lo, hi)`` breaks (and why), or None."""
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
            return None
        for b in self.inputs:
            if b.addr < hi and lo < b.end:
                return "input-written", f"it overlaps input buffer '{b.name}' {_span(b.addr, b.end)}"
        if not self._covered_by_outputs(lo, hi):
            outs = ", ".join(f"'{b.name}' {_span(lo_, hi_)}" for lo_, hi_, b in self.outputs) or "none"
            levels = ", ".join(f"{a.name} {_span(a.base, a.end)}" for a in self.levels)
            return "write-outside-outputs", (f"in region {region.name}, neither a staging level ({levels}) nor "
                                             f"inside the call's output buffers ({outs})")
        return None

    def _covered_by_outputs(self, lo: int, hi: int) -> bool:
        cursor = lo
        for b_lo, b_hi, _ in self.outputs:  # sorted by start: sweep [lo, hi) across them
            if b_lo > cursor:
                break
            if b_hi > cursor:
                cursor = b_hi
                if cursor >= hi:
                    return True
        return cursor >= hi

    def compute(self, c: Any) -> None:
        if not isinstance(c, Compute):
            raise self.fail("plan-structure", f"Tile.compute must be a Compute or None, got {brief(c)}")
        if not callable(c.fn):
            raise self.fail("plan-structure", f"Compute.fn must be callable, got {brief(c.fn)}")
        for field in ("flops", "reductions", "extra_ops"):
            v = getattr(c, field)
            if not _is_int(v) or v < 0:
                raise self.fail("plan-structure", f"Compute.{field} must be an int >= 0, got {brief(v)}")
        if c.precision not in self.target.core.precisions:
            raise self.fail("plan-structure", f"the compute is in precision {brief(c.precision)}, which "
                                              f"{self.target.name} lacks (it has: {', '.join(self.target.precisions)})")
        if not isinstance(c.inputs, tuple) or not isinstance(c.outputs, tuple):
            raise self.fail("plan-structure", "Compute.inputs and Compute.outputs must be tuples of Operand")
        by_level: dict[str, dict[tuple[int, int], None]] = {}
        spans: list[tuple[int, int, str]] = []
        for role, ops in (("input", c.inputs), ("output", c.outputs)):
            for i, op in enumerate(ops):
                lo, hi, level = self.operand(op, f"{role} operand {i}")
                by_level.setdefault(level.name, {})[(lo, hi)] = None
                if role == "output":
                    spans.append((lo, hi, f"output operand {i}"))
        for level in self.operand_levels:
            distinct = by_level.get(level.name)
            if distinct:
                total = sum(hi - lo for lo, hi in distinct)
                if total > level.size_bytes:
                    raise self.fail("tile-size", f"the compute's {len(distinct)} distinct operands in staging level "
                                                 f"{level.name} take {total} bytes, more than the level's "
                                                 f"{level.size_bytes}")
        spans.sort()
        for (a_lo, a_hi, a), (b_lo, b_hi, b) in zip(spans, spans[1:]):
            if b_lo < a_hi and a_lo < a_hi and b_lo < b_hi:
                raise self.fail("output-overlap", f"{a} {_span(a_lo, a_hi)} and {b} {_span(b_lo, b_hi)} share "
                                                  f"bytes: the engine would write one over the other")

    def operand(self, op: Any, label: str) -> tuple[int, int, StagingArea]:
        """``(lo, hi, level)`` of a compute operand; PlanError when it is malformed or outside the levels."""
        try:
            ok = (isinstance(op, Operand) and _is_int(op.addr) and isinstance(op.shape, tuple)
                  and all(_is_int(n) and n >= 0 for n in op.shape))
            size = math.prod(int(n) for n in op.shape) * np.dtype(op.dtype).itemsize if ok else 0
        except TypeError:
            ok = False
        if not ok:
            raise self.fail("plan-structure", f"{label}: an Operand needs an int address, a tuple shape of sizes "
                                              f">= 0 and a numpy dtype, got {brief(op, 160)}")
        lo, hi = int(op.addr), int(op.addr) + size
        for level in self.operand_levels:
            if level.base <= lo and hi <= level.end:
                return lo, hi, level
        names = " or ".join(f"{a.name} {_span(a.base, a.end)}" for a in self.operand_levels)
        biggest = max(a.size_bytes for a in self.operand_levels)
        if size > biggest:
            raise self.fail("tile-size", f"{label} {_span(lo, hi)} takes {size} bytes, more than staging level "
                                         f"{names} holds")
        raise self.fail("operand-level", f"{label} {_span(lo, hi)} lies outside the staging level compute reads "
                                         f"and writes ({names}): DMA it there first")


def check_plan(plan: object, call: BoundCall, target: Target, levels: Sequence[StagingArea],
               operand_levels: Sequence[StagingArea], kernel: str) -> None:
    """Raise :class:`~sim.errors.PlanError` for the first rule ``plan`` breaks (see the module's rules).

    ``levels`` are the staging levels the plan may use (``PlanContext.levels``); ``operand_levels`` those
    compute operands may lie in (``PlanContext.vector_level`` and, if the chip has one, the scalar level beside
    it).  ``kernel`` names the kernel in the message.
    """
    _Checker(call, target, levels, operand_levels, kernel).plan(plan)

