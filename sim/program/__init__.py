"""Programs: a chain of kernel calls over tensors that live in the chip's memory between them (docs/programs.md).

::

    import sim
    from sim.program import load_program

    program = load_program("configs/programs/ft78ne_resnet50_bottleneck_bwd.yaml", allow_kernels=True)
    m = sim.Simulator("FT78NE")
    result = m.run_program(program)        # or sim.program.run_program(program, m)
    result.cycles, result.table_text(), result.write_trace("traces/bottleneck.json")

Modules, one job each: :mod:`~sim.program.schema` (the file), :mod:`~sim.program.planner` (addresses from
lifetimes), :mod:`~sim.program.binding` (tensor names to addresses, calls bound),
:mod:`~sim.program.checks` (the rules across calls), :mod:`~sim.program.pipeline` (every check before anything
runs), :mod:`~sim.program.runner` (the run), :mod:`~sim.program.result` (the timeline, table and trace),
:mod:`~sim.program.report` (validate's map and the HTML report).
"""

from sim.program.pipeline import CheckedProgram, check_program, prepare_program
from sim.program.result import CallRow, CallRun, ProgramRun
from sim.program.runner import run_program, save_program_outputs, simulator_for
from sim.program.schema import Program, is_program_file, load_program

__all__ = ["Program", "load_program", "is_program_file", "CheckedProgram", "check_program", "prepare_program",
           "ProgramRun", "CallRun", "CallRow", "run_program", "save_program_outputs", "simulator_for"]
