"""A program checked before anything runs: its tensors placed, its calls bound, every rule judged.

The stages, on the simulator the program will run on: the file's kernels imported; each call's tensors found in
its arguments (their lifetimes); the memory planned (:mod:`sim.program.planner`); the calls bound at the planned
addresses (a buffer at a raw address that lands on an ``auto`` tensor makes the planner keep clear of it, and
plan again); each call's own layout checked (:mod:`sim.model.layout`, each violation naming its call); the rules
across calls (:mod:`sim.program.checks`); then each call's tiling chosen (a tiling that cannot fit is the
``scratchpad-fit`` violation): where a call's plan stages blocks over an ``auto`` tensor alive at its step (a
tensor in GSM across a GEMM that stages its blocks of A there), the planner keeps that tensor clear of those bytes
and plans again; and the rules across calls are judged again with what each call's plan writes in the staging
levels (a fixed-address tensor there is refused).  What
binding needs in memory (a pointer table placed by a ``values`` entry) is written under the memory's journal and
rolled back at the end, so that checking leaves memory exactly as it was, refused or not.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sim.config.run_config import RunConfig, check_data_file
from sim.config.user_kernels import load_kernels
from sim.errors import ConfigError, KernelArgError, LayoutError
from sim.model.call import BoundCall
from sim.model.layout import Violation, check_layout, layout_error
from sim.model.memory import MemoryMap
from sim.model.target import Target
from sim.model.target_loader import load_target
from sim.planning import staging_areas
from sim.program.binding import (
    arg_kinds,
    bind_call,
    lifetimes,
    named_tensors,
    params_tensors,
    resolved_args,
    tensor_args,
)
from sim.program.checks import Access, CallBuffers, check_calls, entry_access, locate, staged_bytes
from sim.program.planner import Lifetime, MemoryPlan, Reserved, plan_memory
from sim.program.schema import CallSpec, Program
from sim.run.runner import check_entries_map, place_literals
from sim.simulator import Simulator
from sim.tuning import TilingChoice

#: Times the planner plans again around raw-address buffers before giving up (each round keeps clear of more).
MAX_PLANNING_ROUNDS = 4


@dataclass(frozen=True)
class CheckedCall:
    """A call of a checked program: its spec, its arguments with addresses, the bound call, the tensors it names
    and the tiling chosen for it (None when a violation stopped the checks first)."""

    spec: CallSpec
    args: Mapping[str, Any]
    call: BoundCall
    named: tuple[str, ...]
    by_arg: Mapping[str, str] = field(default_factory=dict)
    choice: TilingChoice | None = None
    #: The bytes the chosen plan writes in staging levels (:func:`~sim.program.checks.staged_bytes`).
    staged: tuple[tuple[tuple[str, int | None], int, int, str], ...] = ()


@dataclass(frozen=True)
class CheckedProgram:
    """A program as the checks left it: the memory plan, the calls bound on it, the data and outputs at their
    addresses (as a run-config: ``config``), and every violation found."""

    program: Program
    target: Target
    plan: MemoryPlan
    calls: tuple[CheckedCall, ...]
    config: RunConfig
    violations: tuple[Violation, ...] = field(default=())

    @property
    def ok(self) -> bool:
        """Whether nothing was found."""
        return not self.violations

    def raise_for_violations(self) -> None:
        """A LayoutError listing every violation (``.violations`` holds them), when there are any."""
        if self.violations:
            raise layout_error(self.violations)


def _in_call(spec: CallSpec, call: BoundCall, v: Violation) -> Violation:
    return Violation(v.buffer, v.rule, f"call '{spec.name}' ({call.symbol}): {v.message}", v.suggestion, v.start,
                     v.end, v.region)


def _raw_entries(program: Program, cfg: RunConfig, mmap: MemoryMap) -> list[Reserved]:
    """The bytes the program's raw-address data entries hold and its raw-address outputs entries read back: the
    planner keeps clear of them (an auto tensor there would overwrite what the entry places, or what it reads)."""
    out = []
    for kind, entries, specs in (("data", program.data, cfg.data), ("outputs", program.outputs, cfg.outputs)):
        for e, spec in zip(entries, specs):
            size = math.prod(spec.shape) * spec.dtype.itemsize
            region = mmap.region_of(spec.addr, size)
            if e.tensor is None and region is not None:
                out.append(Reserved((region.name, None if region.shared else spec.core), spec.addr,
                                    spec.addr + size, f"{kind} '{spec.name}'"))
    return out


def _stray_buffers(mmap: MemoryMap, plan: MemoryPlan, calls: list[CheckedCall]) -> list[Reserved]:
    """Buffers at raw addresses (in no tensor their call names) that land on an ``auto`` tensor's bytes."""
    out = []
    for c in calls:
        core = c.call.cores[0] if c.call.variant == "p" else None
        for b in c.call.buffers:
            arg_tensor = c.by_arg.get(b.name)
            key, home, _ = locate(mmap, plan, b, core, c.named, arg_tensor)
            # (a buffer whose own argument names the tensor it lies in is that tensor's; any other one is raw,
            # even where it lands on a tensor the call names for another argument)
            if key is None or not b.size_bytes or (home is not None and home.tensor.name == arg_tensor):
                continue
            if any(p.auto and p.key == key and p.addr < b.end and b.addr < p.end for p in plan.placements):
                out.append(Reserved(key, b.addr, b.end, f"call '{c.spec.name}' buffer '{b.name}'"))
    return out


def _bind_all(m: Simulator, program: Program, cfg: RunConfig, addrs: Mapping[str, int],
              kinds: list[dict[str, str]], named: list[list[str]]) -> list[CheckedCall]:
    """Every call bound at ``addrs``, the pointer tables its binding reads placed first (journaled)."""
    place_literals(cfg, m)
    try:
        out = []
        for i, call in enumerate(program.calls):
            args = resolved_args(program, i, kinds[i], addrs)
            bound = bind_call(m, program, i, args)
            by_arg = {**params_tensors(program, i, kinds[i], addrs, bound), **tensor_args(program, i, kinds[i])}
            out.append(CheckedCall(call, args, bound, tuple(named[i]), by_arg))
        return out
    finally:
        m.before_bind_read = None


def _entry_accesses(cfg: RunConfig, program: Program, mmap: MemoryMap, plan: MemoryPlan
                    ) -> tuple[list[tuple[str, Access]], list[tuple[str, Access]]]:
    out: tuple[list[tuple[str, Access]], list[tuple[str, Access]]] = ([], [])
    for kind, entries, specs, bucket in (("data", program.data, cfg.data, out[0]),
                                         ("outputs", program.outputs, cfg.outputs, out[1])):
        for e, spec in zip(entries, specs):
            a = entry_access(mmap, plan, f"{kind} '{spec.name}'", spec.name, spec.addr,
                             math.prod(spec.shape) * spec.dtype.itemsize, spec.core, e.tensor)
            if a is not None:
                bucket.append((spec.name, a))
    return out


def prepare_program(program: Program, m: Simulator, *, choose_tilings: bool = True) -> CheckedProgram:
    """Check ``program`` for running on ``m`` (see the module docstring) without raising on the violations it
    finds (``dspsim validate`` reports them); memory is left exactly as it was.  ``choose_tilings`` False stops
    before the tiling search.  Errors that stop the checks themselves (an unknown symbol, a bad argument, a
    tensor in no region) propagate."""
    cfg0 = program.as_run_config({t.name: 0 for t in program.tensors})
    load_kernels(cfg0)
    if load_target(program.target) != m.target:
        raise ConfigError(f"{program.path}: target: the program is for {program.target}, the simulator runs "
                          f"{m.target.name}")
    mmap = MemoryMap(m.target)
    kinds = [arg_kinds(program, i) for i in range(len(program.calls))]
    named = [named_tensors(program, i, kinds[i]) for i in range(len(program.calls))]
    lives: dict[str, Lifetime] = lifetimes(program, named)
    m.memory.begin()
    try:
        reserved = _raw_entries(program, cfg0, mmap)
        for _ in range(MAX_PLANNING_ROUNDS):
            try:
                plan = plan_memory(m.target, program.tensors, lives, reserved)
            except ConfigError as e:  # (a tensor's region, core or address: name the file)
                raise ConfigError(f"{program.path}: {e}") from None
            cfg = program.as_run_config(plan.addrs)
            calls = _bind_all(m, program, cfg, plan.addrs, kinds, named)
            clear = _stray_buffers(mmap, plan, calls)
            if clear:
                reserved = reserved + clear
                continue
            check_entries_map(cfg, m)
            for spec in cfg.data:  # (as placing the data would: validate refuses what run refuses)
                if "file" in spec.source:
                    check_data_file(cfg, spec)
            violations = [_in_call(c.spec, c.call, v) for c in calls for v in check_layout(c.call, m.target)]
            data, outputs = _entry_accesses(cfg, program, mmap, plan)
            violations += check_calls(m.target, plan, [CallBuffers(c.spec.name, c.call, c.named, c.by_arg)
                                                       for c in calls], data, outputs)
            if choose_tilings and not violations:
                calls = [_with_choice(m, program, c, violations) for c in calls]
                clear = [] if violations else _staged_over_auto(plan, calls)
                if clear:  # the tilings known: keep the auto tensors alive across a call clear of what it stages
                    reserved = reserved + clear
                    continue
                if not violations:  # what each plan stages in the staging levels counts as written too
                    violations += check_calls(m.target, plan, [CallBuffers(c.spec.name, c.call, c.named, c.by_arg,
                                                                            c.staged) for c in calls], data, outputs)
            break
        else:
            raise ConfigError(f"{program.path}: the planner could not keep the auto tensors clear of the calls' "
                              f"raw-address buffers and staged blocks in {MAX_PLANNING_ROUNDS} rounds (last: "
                              f"{clear[0].what}): give those tensors fixed addresses")
    finally:
        m.memory.rollback()
    return CheckedProgram(program, m.target, plan, tuple(calls), cfg, tuple(violations))


def _staged_over_auto(plan: MemoryPlan, calls: list[CheckedCall]) -> list[Reserved]:
    """The bytes a call's chosen plan stages in a staging level that land on an ``auto`` tensor alive at the call's
    step (call ``i`` is step ``i + 1``: :mod:`sim.program.planner`): reserved, at that step, for the next round."""
    out = []
    for i, c in enumerate(calls):
        step = Lifetime(i + 1, i + 1)
        for key, lo, hi, level in c.staged:
            if any(p.auto and p.key == key and p.addr < hi and lo < p.end and p.lifetime.overlaps(step)
                   for p in plan.placements):
                out.append(Reserved(key, lo, hi, f"call '{c.spec.name}' stages {level} blocks", step))
    return out


def _with_choice(m: Simulator, program: Program, c: CheckedCall, violations: list[Violation]) -> CheckedCall:
    """``c`` with its tiling chosen (the plan the run will use); a tiling that cannot fit joins ``violations``, one
    the kernel refuses names the file and the call."""
    try:
        plan, choice = m.plan_bound_with_choice(c.call, c.spec.tiling)
    except KernelArgError as e:
        raise KernelArgError(f"{program.path}: call '{c.spec.name}' ({c.call.symbol}): {e}") from None
    except LayoutError as e:
        if not e.violations:
            raise
        violations.extend(_in_call(c.spec, c.call, v) for v in e.violations)
        return c
    staged = staged_bytes(plan, staging_areas(m.target, c.call.buffers), MemoryMap(m.target))
    return dataclasses.replace(c, choice=choice, staged=staged)


def check_program(program: Program, m: Simulator) -> CheckedProgram:
    """:func:`prepare_program`, raising a LayoutError listing the violations when there are any (memory as it
    was: nothing has run)."""
    checked = prepare_program(program, m)
    checked.raise_for_violations()
    return checked


__all__ = ["CheckedCall", "CheckedProgram", "prepare_program", "check_program", "MAX_PLANNING_ROUNDS"]
