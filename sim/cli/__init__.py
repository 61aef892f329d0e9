"""The ``dspsim`` command: targets, kernels, run, validate, sweep, calibrate, cache."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from sim.cli.argtypes import file_name, flag_time_limit, int_in, seconds_or_none
from sim.cli.options import add_allow_kernels, allow_kernels
from sim.cli.output import print_written
from sim.cli.program import run_program_command, validate_program_command
from sim.cli.trace import add_trace_commands
from sim.config.run_config import RunConfig, kernel_source, load_config
from sim.config.user_kernels import ALLOW_ENV_VAR, ALLOW_FLAG, load_kernel, stdout_to_stderr
from sim.env_flags import check_switches
from sim.errors import ConfigError, LayoutError, SimError
from sim.files.atomic import written_together
from sim.inspect.layout_map import layout_map, layout_report
from sim.model.layout import Violation
from sim.model.target_loader import available_targets, load_target
from sim.program import is_program_file
from sim.run.preflight import EntryIssue, Preflight, check_before_run, preflight
from sim.run.progress import execute_with_progress, progress_phases
from sim.run.runner import check_trace_names, save_outputs
from sim.run.signals import signal_number, sigterm_raises
from sim.simulator import SHIPPED, Simulator, kernel_entry_point_errors, kernel_symbols
from sim.tuning import TilingChoice


def cmd_targets(args: argparse.Namespace) -> int:
    """Print each chip: cores, clock, precisions, memory map."""
    for name in (args.names or available_targets()):
        t = load_target(name)
        precs = ", ".join(f"{p} ({m.lanes} lanes x {m.fmac_units} FMAC = {m.peak_flops_per_cycle} flop/cycle/core)"
                          for p, m in t.core.precisions.items())
        print(f"{t.name}: {t.cores} cores at {t.clock_hz / 1e9:g} GHz; {precs}; "
              f"DMA {t.dma.engines_per_core} engines/core at {t.dma.engine_bytes_per_cycle:g} B/cycle each, "
              f"setup {t.dma.setup_cycles} cycles; "
              f"launch {t.launch_overhead_cycles} cycles, barrier {t.barrier_latency_cycles} cycles")
        core = t.core
        units = ", ".join(f"{u.name} {u.count} ({u.issue_class}, {u.latency_cycles} cycles"
                          + (f", {u.bytes_per_issue} B/issue" if u.bytes_per_issue else "") + ")"
                          for u in core.units.values())
        print(f"  core: issues {core.issue_width['scalar']} scalar + {core.issue_width['vector']} vector a cycle; "
              f"{units}; {core.vector_registers} vector registers; overheads {core.loop_overhead_cycles} cycles "
              f"per loop entry, {core.tile_overhead_cycles} per tile")
        for r in t.regions:
            role = f" {r.role}" if r.role != "storage" else ""
            print(f"  {r.name:<4} [{r.base:#012x}, {r.end:#012x}) {r.size_bytes:>11} B  {r.kind:<7}{role:<11} "
                  f"{r.bandwidth_bytes_per_cycle:g} B/cycle {'shared by all cores' if r.shared else 'per core'}, "
                  f"{r.latency_cycles} cycles latency")
            if r.rows is not None:
                rows = r.rows
                print(f"         rows of {rows.row_bytes} B over {rows.banks} banks, {rows.activations_per_window} "
                      f"activations per {rows.window_cycles} cycles (tFAW), {rows.bank_busy_cycles} cycles between "
                      f"two in one bank (tRC)")
        print("  staging levels, outermost first:")
        for lv in t.staging:
            where = "shared" if lv.shared else "per core"
            role = (" (the kernels' workspace)" if lv == t.shared_levels[0] else "") if lv.shared else \
                (f", beside {lv.beside}" if lv.beside else " (compute operands)" if lv == t.vector_level else "")
            print(f"    {lv.name:<4} in {lv.region:<4} [{lv.base:#012x}, {lv.end:#012x}) {lv.size_bytes:>11} B  "
                  f"{where}{role}")
    return 0


def cmd_kernels(args: argparse.Namespace) -> int:
    """Print every symbol with what it stores and computes in which precision, and its arguments; a user's
    kernel also says where it came from.  ``--load`` imports kernel files or modules first (as a run-config's
    ``kernels:`` does); a ``dspsim.kernels`` entry point that fails to load is a warning on stderr."""
    for text in args.load or []:
        try:
            source = kernel_source(text, Path.cwd())
        except ValueError as e:
            raise ConfigError(f"--load {text}: {e}") from None
        load_kernel(source, f"--load {text}")
    for line in kernel_entry_point_errors():
        print(f"dspsim: warning: {line}", file=sys.stderr)
    for sym in kernel_symbols():
        where = "core_mask (int bitmask, default all cores)" if sym.variant == "s" else "core (int, default 0)"
        print(f"{sym.name}  [{sym.precision}, {'shared' if sym.variant == 's' else 'private'} memory]")
        print(f"    precision: {sym.precision_note}")
        if sym.origin != SHIPPED:
            print(f"    kernel: {sym.origin}")
        for a in sym.kernel.args:
            opt = "" if a.required else f" = {a.default!r}"
            print(f"    {a.name}{opt}: {a.doc}")
        print(f"    {where}")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    """Run a run-config: write the trace and the outputs, then print the per-core summary and the files.

    The config is checked first like ``dspsim validate`` does (layout, then the data and outputs entries);
    warnings go to stderr, and ``--strict`` makes them errors.  Files are written before anything is printed,
    so a reader that goes away early (``dspsim run cfg | head -3``) loses no result.
    """
    if is_program_file(args.config):  # a chain of calls (docs/programs.md)
        return run_program_command(args)
    cfg = load_config(args.config, allow_kernels=allow_kernels(args))
    if args.time_limit is not None:  # the flag wins over the config's time_limit_seconds
        cfg = dataclasses.replace(cfg, time_limit_seconds=flag_time_limit(args.time_limit))
    trace_name = args.trace or cfg.trace
    check_trace_names(cfg.path, [o.name for o in cfg.outputs] if cfg.numerics else [],
                      [trace_name] + ([str(Path(trace_name).with_suffix(".csv"))] if args.csv else []))
    # One pipeline: bind and check once, place, choose the tiling, simulate (sim.run.runner).
    bound, _ = check_before_run(cfg, strict=args.strict)
    m, run = execute_with_progress(cfg, bound=bound)  # progress bars on a terminal once a phase passes a second
    out_dir = Path(args.out_dir)
    # The trace and the outputs appear together: a run stopped while writing them leaves the previous set.
    with progress_phases(sys.stderr) as phases, written_together():
        phases("writing the trace", 0, 1)
        trace = run.write_trace(out_dir / (args.trace or cfg.trace))
        csv = run.write_trace(trace.with_suffix(".csv")) if args.csv else None
        # A timing-only run computed no values: its outputs would be zeros, so none are saved.
        outputs = save_outputs(cfg, m, out_dir, progress=phases) if cfg.numerics else []
    print_written(run.summary_text(), trace, csv, outputs)
    if not cfg.numerics and cfg.outputs:
        print(f"outputs: none saved (timing only: the config sets numerics: false, so the "
              f"{len(cfg.outputs)} output(s) it names hold no computed values)")
    return 0


def _entry_lines(issues: Sequence[EntryIssue], strict: bool) -> list[str]:
    return [f"{'WARNING' if i.warning and not strict else 'ERROR'} {i}" for i in issues]


def _validated(args: argparse.Namespace) -> tuple[RunConfig, Simulator, Preflight, list[Violation],
                                                   TilingChoice | None]:
    """``validate``'s checks of ``args.config``: the config, its simulator, the preflight findings, the layout
    violations (the tiling's fit included) and the tiling chosen; a SimError when the config cannot be checked
    at all.

    The call is planned as ``run`` plans it: the config's tiling (a partial one completed by the search), or
    the search's choice (the tuning cache honoured: no simulation when the choice is cached), and the plan
    check; no numerics."""
    cfg = load_config(args.config, allow_kernels=allow_kernels(args))
    m, found = preflight(cfg)
    violations = list(found.violations)
    choice = None
    if not violations:
        if getattr(args, "no_cache", False):
            m.tuning_cache = False
        try:
            # Tiles that cannot fit the scratchpad fail here; a plan that breaks the IR's rules (a user's
            # kernel) cannot be checked further (PlanError propagates, as it would from run).
            _, choice = m.plan_bound_with_choice(found.call, cfg.tiling)
        except LayoutError as e:
            violations = list(e.violations)
    return cfg, m, found, violations, choice


def cmd_validate(args: argparse.Namespace) -> int:
    """Check a run-config without simulating: the call's layout first, then its data and outputs entries.

    Prints the layout map and every finding; exit 1 on a layout violation or an entry error (on a warning
    too with ``--strict``), 2 when the config cannot be checked at all (a bad key, symbol or argument).
    """
    if args.plot:  # the picture's format and its extra, before any work
        from sim.inspect.layout_plot import picture_format
        picture_format(args.plot)
    if is_program_file(args.config):  # a chain of calls (docs/programs.md)
        return validate_program_command(args)
    try:
        # What a user's kernel prints while it is imported, binds or plans goes to stderr: stdout is the report's.
        with stdout_to_stderr():
            cfg, m, found, violations, choice = _validated(args)
    except SimError as e:
        if args.format == "json":  # tools read stdout; the one-line error still goes to stderr
            print(json.dumps({"config": str(args.config), "ok": False, "errors": [str(e)], "violations": [],
                              "entries": [], "warnings": []}))
        raise
    call = found.call
    errors, warnings = found.errors(args.strict), found.warnings(args.strict)
    report = {"config": str(cfg.path), **layout_report(call, m.target, violations),
              "entries": [i.as_dict(args.strict) for i in found.issues],
              "errors": [str(i) for i in errors], "warnings": [str(i) for i in warnings]}
    report["ok"] = not violations and not errors
    report["tiling"] = None if choice is None else {"tiling": choice.tiling, "source": choice.source,
                                                    "cached": choice.cached}
    if args.format == "json":
        print(json.dumps(report, indent=1))
    else:
        print(layout_map(call, m.target, violations))
        if choice is not None:
            print(choice.describe())
        for line in _entry_lines(found.issues, args.strict):
            print(line)
        status = "layout OK" if not violations else f"{len(violations)} layout violation(s)"
        found_words = [f"{n} {w}(s)" for n, w in ((len(errors), "error"), (len(warnings), "warning")) if n]
        if found_words:
            status += f"; {' and '.join(found_words)} in the config's data and outputs"
        print(status)
    if args.plot:
        from sim.inspect.layout_plot import (
            plot_layout,  # matplotlib only when a picture is asked for
        )
        path = plot_layout(report, args.plot)
        print(f"plot: {path}", file=sys.stderr if args.format == "json" else sys.stdout)
    return 0 if report["ok"] else 1


def cmd_sweep(args: argparse.Namespace) -> int:
    """Run a sweep file's grid on a local process pool or a Dask cluster; write its table and plot.

    Exit 0 when every point ran (or was skipped), 1 when any point failed (after writing everything),
    130 on Ctrl-C (the finished points are kept; the same command resumes).
    """
    from sim.sweep import SweepInterrupted, load_sweep, run_sweep
    from sim.sweep.results import need_sweep_extra

    need_sweep_extra(args.scheduler)  # before the sweep file's configs import their kernels
    spec = load_sweep(args.sweep, allow_kernels=allow_kernels(args))
    try:
        res = run_sweep(spec, args.out_dir, workers=args.workers, scheduler=args.scheduler, progress=sys.stderr)
    except SweepInterrupted as e:
        again = " ".join(["dspsim", "sweep", str(args.sweep), "-o", str(args.out_dir)]
                         + (["--workers", str(args.workers)] if args.workers else [])
                         + (["--scheduler", args.scheduler] if args.scheduler else [])
                         + ([ALLOW_FLAG] if args.allow_kernels else []))
        print(f"dspsim: {_stopped(e.signum)}: {e.finished} of {e.total} points finished and are kept in "
              f"{e.journal}; run `{again}` to resume (finished points are not run again)", file=sys.stderr)
        return 128 + e.signum
    rows, failed, skipped = res.rows, res.failed, res.skipped
    reused = len(rows) - res.ran_now
    parts = [f"{len(res.succeeded)} ran"]
    if skipped:
        parts.append(f"{len(skipped)} skipped (the chip has fewer cores than the point asks for)")
    parts.append(f"{len(failed)} failed")
    files = f"table {res.csv}, {res.parquet}" + (f"; plot {res.plot}" if res.plot else "")
    source = f" ({reused} from {res.journal}, {res.ran_now} run now)" if reused else ""
    print(f"{len(rows)} points{source}: {', '.join(parts)}; {files}")
    for r in failed:
        print(f"  failed {r['id']}: {r['error'].splitlines()[0]}")
    return 1 if failed else 0


def cmd_calibrate(args: argparse.Namespace) -> int:
    """Fit a target's free parameters to measured cycles; write the fitted copy of the target file."""
    from sim.calibrate import (
        calibrate,
        fitted_yaml,
        load_measurements,
        read_target_document,
    )
    from sim.extras import need
    from sim.files.atomic import atomic_write_text

    need("calibrate", "dspsim calibrate")  # before any work: the fit and the file it writes need it
    measurements = load_measurements(args.measurements)
    target = read_target_document(args.target)
    names = [n.strip() for n in args.params.split(",")] if args.params else None
    cal = calibrate(target.doc, measurements, names, progress=sys.stderr)
    text = fitted_yaml(cal, target, args.measurements)  # checked to read back and load as a target
    print(cal.report(measurements))
    out = atomic_write_text(args.output, text)
    print(f"fitted target: {out}" + (f" ({len(cal.unidentified)} parameter(s) not identified, kept at "
                                     f"{target.path.name}'s values)" if cal.unidentified else ""))
    return 0


def cmd_cache(args: argparse.Namespace) -> int:
    """Show the on-disk tuning cache (location, entries, size), or clear it."""
    from sim.files import tuning_cache

    where = tuning_cache.tuning_dir()
    if args.action == "clear":
        n = tuning_cache.clear()
        print(f"tuning cache {where}: {n} item{'' if n == 1 else 's'} deleted")
        return 0
    n, size = len(tuning_cache.entries()), tuning_cache.size_bytes()
    print(f"tuning cache: {where}")
    print(f"entries: {n}")
    print(f"size: {size} bytes")
    others = tuning_cache.others()
    if others:  # (clear deletes them too: say so, so that its count is no surprise)
        print(f"other items: {len(others)} (not entries: leftover temporary files or anything put there)")
    print(f"(moved by ${tuning_cache.ENV_VAR}; bypassed by --no-cache; `dspsim cache clear` empties it)")
    return 0


def _no_cache(args: argparse.Namespace) -> None:
    """``--no-cache``: this process and the workers it starts neither read nor write the tuning cache."""
    if getattr(args, "no_cache", False):
        from sim.files import tuning_cache
        os.environ[tuning_cache.NO_CACHE_ENV_VAR] = "1"


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``dspsim``."""
    p = argparse.ArgumentParser(
        prog="dspsim", description="Cycle-approximate simulator of FT78NE and MT7004 DSPs",
        epilog=f"A run-config's kernels: list names Python code: run, validate, report and sweep import it (and so "
               f"run it) only with {ALLOW_FLAG} or {ALLOW_ENV_VAR}=1, and refuse such a config otherwise.")
    sub = p.add_subparsers(dest="command", required=True)
    t = sub.add_parser("targets", help="list the chips and their memory maps")
    t.add_argument("names", nargs="*", help="chip names or target YAML paths (default: all shipped chips)")
    t.set_defaults(func=cmd_targets)
    k = sub.add_parser("kernels", help="list kernel symbols and their arguments (and where users' kernels come from)")
    k.add_argument("--load", action="append", metavar="FILE_OR_MODULE",
                   help="import a Python file (.py) or module defining a kernel first, as a run-config's kernels: "
                        "does (repeatable); this runs its code: naming it here is the opt-in, no "
                        f"{ALLOW_FLAG} needed")
    k.set_defaults(func=cmd_kernels)
    r = sub.add_parser("run", help="run a run-config (or a program: a chain of calls) and write its trace")
    r.add_argument("config", help="run-config YAML, or a program YAML (docs/programs.md)")
    r.add_argument("--out-dir", default="traces", help="folder for the trace and outputs (default: traces)")
    r.add_argument("--trace", type=file_name,
                   help="trace file name, written under the out dir (default: the config's, or <config>.json)")
    r.add_argument("--csv", action="store_true", help="also write the trace as CSV")
    r.add_argument("--strict", action="store_true",
                   help="refuse to run when the config leaves an input buffer without data (else a warning)")
    r.add_argument("--no-cache", action="store_true",
                   help="neither read nor write the on-disk tuning cache (search the tiling afresh)")
    r.add_argument("--time-limit", type=seconds_or_none, metavar="SECONDS",
                   help="stop the call (its planning and simulation) after SECONDS of wall-clock time, memory "
                        "and files untouched, exit 2 (default: the config's time_limit_seconds, else no limit; "
                        "none: no limit, whatever the config says)")
    add_allow_kernels(r)
    r.set_defaults(func=cmd_run)
    v = sub.add_parser("validate", help="check a run-config as run would: layout, tiling choice, plan (no numerics; "
                                        "no simulation when the tiling choice is in the tuning cache)")
    v.add_argument("config", help="run-config YAML, or a program YAML (docs/programs.md)")
    v.add_argument("--no-cache", action="store_true",
                   help="neither read nor write the on-disk tuning cache (search the tiling afresh)")
    v.add_argument("--format", choices=("text", "json"), default="text", help="text map (default) or JSON for tools")
    v.add_argument("--plot", metavar="PICTURE", help="also draw the memory map to PICTURE (.png, .svg or .pdf)")
    v.add_argument("--strict", action="store_true",
                   help="count an input buffer the config places no data in as an error (else a warning; a "
                        "program's findings are all errors)")
    add_allow_kernels(v)
    v.set_defaults(func=cmd_validate)
    c = sub.add_parser("calibrate", help="fit a target's free parameters to measured cycle counts")
    c.add_argument("measurements", help="CSV: symbol, args (JSON), cycles[, core_mask | core]")
    c.add_argument("--target", required=True, help="chip name or target YAML to start from")
    c.add_argument("-o", "--output", required=True, help="fitted target YAML to write")
    from sim.calibrate import CHIP_PARAMETERS  # (light: the fit's own libraries load when it runs)
    c.add_argument("--params", help="comma-separated free parameters to fit, by key path in the target file "
                                    "(e.g. regions.ddr.bandwidth_bytes_per_cycle,dma.setup_cycles; default: "
                                    "regions.<region>.bandwidth_bytes_per_cycle of each shared region, "
                                    f"{', '.join(CHIP_PARAMETERS)}; at most as many as the measurements)")
    c.set_defaults(func=cmd_calibrate)
    w = sub.add_parser("sweep", help="run a grid of chips, shapes, core masks and target parameters")
    w.add_argument("sweep", help="sweep YAML")
    w.add_argument("-o", "--out-dir", default="traces/sweep", help="folder of the results (default traces/sweep)")
    w.add_argument("--workers", type=int_in(1), default=None, help="local worker processes (default: CPU count)")
    w.add_argument("--scheduler", help="address of a Dask distributed scheduler (tcp://host:8786)")
    w.add_argument("--no-cache", action="store_true",
                   help="neither read nor write the on-disk tuning cache (local workers inherit it)")
    add_allow_kernels(w, help="import the Python files and modules the kernels: lists of the sweep's run-configs "
                              f"name, in this process and every worker, which runs their code (refused without "
                              f"this flag or {ALLOW_ENV_VAR}=1): only for configs you trust")
    w.set_defaults(func=cmd_sweep)
    ca = sub.add_parser("cache", help="show the on-disk tuning cache (location, entries, size) or clear it")
    ca.add_argument("action", nargs="?", choices=("show", "clear"), default="show",
                    help="show (default) or clear")
    ca.set_defaults(func=cmd_cache)
    add_trace_commands(sub)
    return p


def _stopped(signum: int) -> str:
    """How the closing line names the signal that stopped a command."""
    return "interrupted" if signum == signal.SIGINT else f"terminated ({signal.Signals(signum).name})"


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: one line per error on stderr and a non-zero exit, never a traceback for bad input.

    Ctrl-C and SIGTERM stop a command alike (SIGTERM raises :class:`~sim.run.signals.Terminated`, a
    KeyboardInterrupt): its temporary files are removed, and the exit status is 128 + the signal's number.
    """
    args = build_parser().parse_args(argv)
    _no_cache(args)
    try:
        check_switches()  # a switch set to neither on nor off: refused before any work (in a sweep, not per point)
        with sigterm_raises():
            code = args.func(args)
            if sys.stdout is not None:  # (None: started with stdout closed, where print writes nothing)
                sys.stdout.flush()  # a short output meets a closed pipe here rather than in the interpreter's exit
        return code
    except SimError as e:
        print(f"dspsim: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:
        print(f"dspsim: {_stopped(signal_number(e))}", file=sys.stderr)
        return 128 + signal_number(e)
    except BrokenPipeError:
        # The reader went away (``dspsim kernels | head``): not an error of ours, and nothing left to say.
        _drop_stdout()
        return 141
    except OSError as e:
        if e.filename is not None:
            raise  # (a file of the command's own: its command names it)
        # Standard output cannot take what the command prints (``> /dev/full``): one line, as any error.
        _drop_stdout()
        print(f"dspsim: error: cannot write to standard output: {e.strerror or e}", file=sys.stderr)
        return 2


def _drop_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's final flush does not fail again on what refused it."""
    if sys.stdout is None:
        return
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        # (no descriptor to point anywhere: nothing more is printed)
        sys.stdout = None

