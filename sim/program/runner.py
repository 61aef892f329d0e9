"""Running a program: checked first (:mod:`sim.program.pipeline`), its data placed, its calls run back to back.

The run-config pipeline does the placing and the saving (:mod:`sim.run.runner`): the program's data and
outputs become a run-config's at the tensors' planned addresses.  Each call runs as ``Simulator.run_bound``
runs a run-config's call, on the plan the checks chose, so nothing is bound, checked or searched twice.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from sim.errors import SimError, renamed
from sim.program.pipeline import CheckedProgram, check_program
from sim.program.result import CallRun, ProgramRun
from sim.program.schema import Program
from sim.run.runner import check_entries_map, place_data, save_outputs
from sim.simulator import Simulator


def simulator_for(program: Program) -> Simulator:
    """A fresh simulator of the program's chip, with its tiling tolerance."""
    tolerance = program.common.tiling_tolerance
    return Simulator(program.target) if tolerance is None else Simulator(program.target, tiling_tolerance=tolerance)


def run_program(program: Program, simulator: Simulator | None = None, *,
                progress: Callable[[str, int, int], None] | None = None) -> ProgramRun:
    """Check ``program`` (refused with a LayoutError listing every violation, memory untouched), place its data
    and run its calls back to back on ``simulator`` (default: a fresh one of the program's chip).

    ``progress(phase, done, total)`` hears ``placing data`` and ``running calls``.  A call that fails while it
    runs (a fault, its time limit) raises naming the call, and memory is rolled back to what it was before the
    program: the data it placed and the calls before the failing one are undone too (one journal around the
    program, each call's own nested in it).
    """
    t0 = time.perf_counter()
    m = simulator if simulator is not None else simulator_for(program)
    # The simulator's lock for the whole program: another thread's write between two calls would otherwise land
    # in the program's journal, and a failing call's rollback would undo it.
    with m.exclusive():
        checked = check_program(program, m)
        m.memory.begin()
        try:
            runs = _run_checked(program, checked, m, progress)
        except BaseException:
            m.memory.rollback()
            raise
        m.memory.commit()
    if progress is not None:
        progress("running calls", len(checked.calls), len(checked.calls))
    return ProgramRun(program.name, m.target, tuple(runs), checked.plan, numerics=checked.config.numerics,
                      wall_seconds=time.perf_counter() - t0)


def _run_checked(program: Program, checked: CheckedProgram, m: Simulator,
                 progress: Callable[[str, int, int], None] | None) -> list[CallRun]:
    """Place the data of a checked program and run its calls back to back; the runs."""
    cfg = checked.config
    check_entries_map(cfg, m)
    place_data(cfg, m, cfg.numerics, progress=progress)
    runs: list[CallRun] = []
    cursor = 0
    for i, c in enumerate(checked.calls):
        if progress is not None:
            progress("running calls", i, len(checked.calls))
        try:
            run = m.run_bound(c.call, c.args, numerics=cfg.numerics, tiling=c.spec.tiling,
                              time_limit_seconds=cfg.time_limit_seconds)
        except SimError as e:
            # (the same error, its attributes and cause kept: a KernelCodeError's cause is the kernel's exception)
            raise renamed(e, f"{program.path}: call '{c.spec.name}' ({c.call.symbol}), starting at cycle {cursor} "
                             f"of the program: {e}") from e.__cause__
        runs.append(CallRun(c.spec.name, cursor, run))
        cursor += run.cycles
    return runs


def save_program_outputs(program: Program, result: ProgramRun, m: Simulator, out_dir: Path) -> list[Path]:
    """Save the program's outputs (each as ``<out_dir>/<program stem>.<name>.npy``, as a run-config's)."""
    return save_outputs(program.as_run_config(result.plan.addrs), m, out_dir)


__all__ = ["run_program", "simulator_for", "save_program_outputs"]
