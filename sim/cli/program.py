"""``dspsim run``, ``validate`` and ``report`` of a program file (docs/programs.md): the file is told from a
run-config by its top-level ``calls`` key (:func:`sim.program.is_program_file`)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from sim.cli.argtypes import flag_time_limit
from sim.cli.options import allow_kernels
from sim.cli.output import print_written
from sim.config.user_kernels import stdout_to_stderr
from sim.errors import SimError
from sim.files.atomic import written_together
from sim.program import load_program, prepare_program, run_program, save_program_outputs, simulator_for
from sim.program.report import program_layout, program_map, program_report, write_program_report
from sim.run.progress import progress_phases
from sim.run.runner import check_trace_names


def run_program_command(args: argparse.Namespace) -> int:
    """``dspsim run PROGRAM``: check it, run its calls back to back, write one trace and the outputs, print the
    per-call table and the per-core summary."""
    program = load_program(args.config, allow_kernels=allow_kernels(args))
    if args.time_limit is not None:  # the flag wins over the file's time_limit_seconds (each call's limit)
        limit = flag_time_limit(args.time_limit)
        program = dataclasses.replace(program, common=dataclasses.replace(program.common, time_limit_seconds=limit))
    trace_name = args.trace or program.common.trace
    check_trace_names(program.path, [o.spec.name for o in program.outputs] if program.numerics else [],
                      [trace_name] + ([str(Path(trace_name).with_suffix(".csv"))] if args.csv else []))
    m = simulator_for(program)
    with progress_phases(sys.stderr) as phases:
        result = run_program(program, m, progress=phases)
        out_dir = Path(args.out_dir)
        with written_together():  # (the trace and the outputs appear together)
            trace = result.write_trace(out_dir / (args.trace or program.common.trace))
            csv = result.write_trace(trace.with_suffix(".csv")) if args.csv else None
            outputs = save_program_outputs(program, result, m, out_dir) if program.numerics else []
    print_written(result.summary_text(), trace, csv, outputs)
    return 0


def validate_program_command(args: argparse.Namespace) -> int:
    """``dspsim validate PROGRAM``: plan its memory and check every call and the rules across calls, as ``run``
    would, without running; print the memory map (or JSON); exit 0, 1 on a violation, 2 when it cannot be
    checked at all."""
    try:
        with stdout_to_stderr():
            program = load_program(args.config, allow_kernels=allow_kernels(args))
            m = simulator_for(program)
            if getattr(args, "no_cache", False):
                m.tuning_cache = False
            checked = prepare_program(program, m)
    except SimError as e:
        if args.format == "json":
            print(json.dumps({"program": str(args.config), "ok": False, "errors": [str(e)], "violations": []}))
        raise
    if args.format == "json":
        print(json.dumps(program_report(checked), indent=1))
    else:
        print(program_map(checked))
    if args.plot:
        from sim.inspect.layout_plot import plot_layout  # (matplotlib only when a picture is asked for)
        path = plot_layout(program_layout(checked), args.plot)
        print(f"plot: {path}", file=sys.stderr if args.format == "json" else sys.stdout)
    return 0 if checked.ok else 1


def report_program_command(args: argparse.Namespace) -> int:
    """``dspsim report PROGRAM``: run it and write its HTML page."""
    out = Path(args.output) if args.output else Path("traces") / (Path(args.config).stem + ".html")
    path, result = write_program_report(args.config, out, stream=sys.stderr, allow_kernels=allow_kernels(args))
    print(f"program {result.name} on {result.target.name}: {result.cycles} cycles ({result.microseconds:.2f} us)")
    print(f"report: {path}")
    return 0
