"""The trace-inspection commands of ``dspsim``: ``trace summary``, ``trace diff``, ``trace plot`` and ``report``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from sim.cli.argtypes import int_in
from sim.cli.options import add_allow_kernels, allow_kernels
from sim.errors import SimError

#: The finest resolution ``trace plot`` draws at: a chart's raster at more would take gigabytes.
MAX_DPI = 600


def cmd_trace_summary(args: argparse.Namespace) -> int:
    """Print a trace's per-core table, critical path and top stalls."""
    from sim.inspect.trace_tools import load_trace, summarize, summary_text
    print(summary_text(summarize(load_trace(args.trace), top=args.top)))
    return 0


def cmd_trace_diff(args: argparse.Namespace) -> int:
    """Print two runs side by side: cycles per core and per unit, and the change."""
    from sim.inspect.trace_tools import diff_text, diff_traces, load_trace
    print(diff_text(diff_traces(load_trace(args.a), load_trace(args.b))))
    return 0


def _window(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    try:
        lo, hi = (int(x, 0) for x in text.split(":"))
    except ValueError:
        raise SimError(f"--cycles: expected START:END in cycles (e.g. 0:20000), got {text!r}") from None
    if not 0 <= lo < hi:
        raise SimError(f"--cycles: expected 0 <= START < END, got {text!r}")
    return lo, hi


def cmd_trace_plot(args: argparse.Namespace) -> int:
    """Draw a trace's Gantt chart (a row per core unit, shared-region bandwidth below) into an image."""
    from sim.inspect.gantt import plot_gantt
    from sim.inspect.trace_tools import load_trace
    trace = load_trace(args.trace)
    out = Path(args.output) if args.output else Path(args.trace).with_suffix(".png")
    print(f"gantt: {plot_gantt(trace, out, title=args.title, window=_window(args.cycles), dpi=args.dpi)}")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    """Run a run-config (or a program) and write its self-contained HTML report."""
    from sim.program import is_program_file
    if is_program_file(args.config):
        from sim.cli.program import report_program_command
        return report_program_command(args)
    from sim.report.page import write_report
    out = Path(args.output) if args.output else Path("traces") / (Path(args.config).stem + ".html")
    path, run = write_report(args.config, out, stream=sys.stderr, strict=args.strict,
                             allow_kernels=allow_kernels(args))
    print(f"{run.symbol} on {run.target.name}: {run.cycles} cycles ({run.microseconds:.2f} us)")
    print(f"report: {path}")
    return 0


def add_trace_commands(sub: argparse._SubParsersAction) -> None:
    """Add ``trace summary|diff|plot`` and ``report`` to the ``dspsim`` subcommands."""
    t = sub.add_parser("trace", help="inspect trace files: summary, diff, plot")
    tsub = t.add_subparsers(dest="trace_command", required=True)
    s = tsub.add_parser("summary", help="per-core table, critical path and top stalls of a trace")
    s.add_argument("trace", help="trace JSON (or CSV) written by 'dspsim run'")
    s.add_argument("--top", type=int_in(0), default=10, help="how many stalls to list (default: 10)")
    s.set_defaults(func=cmd_trace_summary)
    d = tsub.add_parser("diff", help="compare two traces: cycles per core and per unit, and the change")
    d.add_argument("a", help="trace A (the baseline)")
    d.add_argument("b", help="trace B")
    d.set_defaults(func=cmd_trace_diff)
    p = tsub.add_parser("plot", help="Gantt chart of a trace (PNG, SVG or PDF by the output's suffix)")
    p.add_argument("trace", help="trace JSON (or CSV) written by 'dspsim run'")
    p.add_argument("-o", "--output", help="image file (default: the trace's name with .png)")
    p.add_argument("--cycles", metavar="START:END", help="plot only this window of cycles")
    p.add_argument("--title", help="title of the chart (default: chip, symbol, cycles)")
    p.add_argument("--dpi", type=int_in(1, MAX_DPI), default=130,
                   help=f"resolution of raster images, 1 to {MAX_DPI} (default: 130)")
    p.set_defaults(func=cmd_trace_plot)
    r = sub.add_parser("report", help="run a run-config and write an interactive HTML report")
    r.add_argument("config", help="run-config YAML, or a program YAML (docs/programs.md)")
    r.add_argument("-o", "--output", help="HTML file (default: traces/<config>.html)")
    r.add_argument("--strict", action="store_true",
                   help="refuse to run when the config leaves an input buffer without data (else a warning)")
    add_allow_kernels(r)
    r.set_defaults(func=cmd_report)
