"""A program shown: the memory map ``dspsim validate`` prints (text or JSON), and the HTML page ``dspsim report``
writes (the timeline of every call, the per-call table, the per-core summary, the memory plan)."""

from __future__ import annotations

import html
from pathlib import Path
from typing import IO

from sim.files.atomic import atomic_write_text
from sim.inspect.trace_tools import Trace, summarize
from sim.model.memory import MemoryMap
from sim.program.checks import locate
from sim.program.pipeline import CheckedCall, CheckedProgram
from sim.program.planner import Placement
from sim.program.result import ProgramRun
from sim.program.runner import run_program
from sim.program.schema import load_program
from sim.report.page import _summary_section, page_html, timeline_payload
from sim.run.progress import progress_phases

_esc = html.escape


def _reads_writes(checked: CheckedProgram, c: CheckedCall) -> tuple[list[str], list[str]]:
    """The tensors (or, at raw addresses, the buffers) call ``c`` reads and writes."""
    mmap = MemoryMap(checked.target)
    core = c.call.cores[0] if c.call.variant == "p" else None
    out: tuple[list[str], list[str]] = ([], [])
    for b in c.call.buffers:
        _, home, _ = locate(mmap, checked.plan, b, core, c.named, c.by_arg.get(b.name))
        name = home.tensor.name if home is not None else f"{b.name}@{b.addr:#x}"
        for bucket, yes in ((out[0], b.role == "input" or b.reads_too), (out[1], b.role != "input")):
            if yes and name not in bucket:
                bucket.append(name)
    return out


def _sharers(checked: CheckedProgram, p: Placement) -> list[str]:
    return [q.tensor.name for q in checked.plan.placements if q is not p and q.shares_bytes(p)]


def program_report(checked: CheckedProgram) -> dict:
    """``dspsim validate --format json`` of a program: its tensors (address, lifetime, the tensors it shares
    bytes with), its calls (what each reads and writes, its tiling) and the violations; addresses as integers."""
    prog = checked.program
    tensors = [{"name": p.tensor.name, "region": p.region.name, "core": p.core, "addr": p.addr, "end": p.end,
                "size_bytes": p.tensor.size_bytes, "dtype": p.tensor.dtype.name, "shape": list(p.tensor.shape),
                "first_step": p.lifetime.first, "last_step": p.lifetime.last, "auto": p.auto,
                "shares_with": _sharers(checked, p)} for p in checked.plan.placements]
    calls = []
    for i, c in enumerate(checked.calls):
        reads, writes = _reads_writes(checked, c)
        calls.append({"step": i + 1, "name": c.spec.name, "symbol": c.call.symbol, "cores": list(c.call.cores),
                      "reads": reads, "writes": writes,
                      "tiling": None if c.choice is None else {"tiling": c.choice.tiling, "source": c.choice.source}})
    return {"program": str(prog.path), "target": checked.target.name, "ok": checked.ok, "tensors": tensors,
            "calls": calls, "violations": [v.as_dict() for v in checked.violations]}


def program_layout(checked: CheckedProgram) -> dict:
    """The program's memory plan in the shape of :func:`sim.inspect.layout_map.layout_report` (what ``dspsim
    validate --plot`` draws): per memory its tensors as buffers, inputs those the data places, outputs those read
    back, the rest (made and used by the calls) drawn as neither; the violations by tensor."""
    prog = checked.program
    placed = {e.tensor for e in prog.data if e.tensor is not None}
    read_back = {e.tensor for e in prog.outputs if e.tensor is not None}
    by_key: dict[tuple, list[Placement]] = {}
    for p in checked.plan.placements:
        by_key.setdefault(p.key, []).append(p)
    regions = []
    for (name, core), ps in sorted(by_key.items(), key=lambda kv: (kv[0][0], kv[0][1] if kv[0][1] is not None
                                                                    else -1)):
        r = ps[0].region
        buffers = [{"buffer": p.tensor.name, "start": p.addr, "end": p.end, "size_bytes": p.tensor.size_bytes,
                    "region": name, "core": core,
                    "role": "output" if p.tensor.name in read_back else "input" if p.tensor.name in placed
                    else "tensor"} for p in sorted(ps, key=lambda p: (p.addr, p.tensor.name))]
        reserved = [{"name": "workspace" if i == 0 else level.name, "start": level.base, "end": level.end}
                    for i, level in enumerate(checked.target.shared_levels) if level.region == name]
        regions.append({"name": name, "kind": r.kind, "base": r.base, "end": r.end, "size_bytes": r.size_bytes,
                        "core": core, "buffers": buffers, "reserved": reserved,
                        "shares_bytes": True})  # (tensors of disjoint lifetimes share bytes: no overlap is drawn)
    return {"target": checked.target.name, "symbol": f"program {prog.name}", "regions": regions, "unmapped": [],
            "violations": [v.as_dict() for v in checked.violations], "ok": checked.ok}


def program_map(checked: CheckedProgram) -> str:
    """The text ``dspsim validate`` prints for a program: per memory its tensors in address order with their
    lifetimes, then each call, then one line per violation."""
    prog = checked.program
    n = len(prog.calls)
    lines = [f"program {prog.name} on {checked.target.name}: {n} calls, {len(prog.tensors)} tensors "
             f"(steps: 0 places the data, 1..{n} are the calls, {n + 1} reads the outputs back)"]
    by_key: dict[tuple, list[Placement]] = {}
    for p in checked.plan.placements:
        by_key.setdefault(p.key, []).append(p)
    for (region, core), ps in sorted(by_key.items(), key=lambda kv: (kv[0][0], kv[0][1] or -1)):
        r = ps[0].region
        where = f"core {core}'s {region}" if core is not None else region
        used = max(p.end for p in ps) - min(p.addr for p in ps)
        total = sum(p.tensor.size_bytes for p in ps)
        lines.append(f"{where} [{r.base:#x}, {r.end:#x}): {len(ps)} tensors, {total} bytes in {used} bytes of "
                     f"address space (tensors with disjoint lifetimes share bytes)")
        for p in sorted(ps, key=lambda p: (p.addr, p.tensor.name)):
            t = p.tensor
            share = _sharers(checked, p)
            lines.append(f"  {p.addr:#x}-{p.end:#x}  {t.name:<14} {t.dtype.name}{list(t.shape)}  {t.size_bytes} B  "
                         f"steps {p.lifetime.first}..{p.lifetime.last}  {'auto' if p.auto else 'fixed'}"
                         + (f"  shares bytes with {', '.join(share)}" if share else ""))
    lines.append("calls:")
    for i, c in enumerate(checked.calls):
        reads, writes = _reads_writes(checked, c)
        tiling = "" if c.choice is None else f"  tiling {c.choice.tiling} ({c.choice.source})"
        lines.append(f"  {i + 1:>3} {c.spec.name:<16} {c.call.symbol}: reads {', '.join(reads) or 'nothing'}; "
                     f"writes {', '.join(writes) or 'nothing'}{tiling}")
    lines += [f"VIOLATION {v}" for v in checked.violations]
    lines.append("program OK" if checked.ok else f"{len(checked.violations)} violation(s)")
    return "\n".join(lines)


def _facts(result: ProgramRun, description: str, path: Path) -> str:
    t = result.target
    items = [("chip", f"{t.name} ({t.cores} cores at {t.clock_hz / 1e9:g} GHz)"), ("program", path.name),
             ("calls", str(len(result.calls))),
             ("cycles", f"{result.cycles:,} ({result.microseconds:.3f} µs), the calls back to back"),
             ("roofline bound", f"{result.roofline_cycles:,.0f} cycles (the calls' bounds summed)"),
             ("limited by", result.limited_by())]
    if description:
        items.append(("description", description))
    return "<dl class=\"facts\">" + "".join(f"<dt>{_esc(k)}</dt><dd>{_esc(v)}</dd>" for k, v in items) + "</dl>"


def _calls_table(result: ProgramRun) -> str:
    rows = "".join(f"<tr><td class=\"l\">{_esc(r.name)}</td><td class=\"l\">{_esc(r.symbol)}</td>"
                   f"<td>{r.start_cycle:,}</td><td>{r.cycles:,}</td><td>{100 * r.share:.1f}%</td>"
                   f"<td>{r.bound_cycles:,.0f}</td><td class=\"l\">{_esc(r.bound_by)}</td>"
                   f"<td class=\"l\">{_esc(r.limited_by)}</td></tr>" for r in result.rows())
    total = (f"<tr><td class=\"l\"><b>total</b></td><td class=\"l\">{len(result.calls)} calls</td><td>0</td>"
             f"<td>{result.cycles:,}</td><td>100%</td><td>{result.roofline_cycles:,.0f}</td><td></td>"
             f"<td class=\"l\">{_esc(result.limited_by())}</td></tr>")
    return ("<p>The calls run back to back, each from its own launch; share = its cycles over the program's.</p>"
            "<table class=\"num\" id=\"calls-table\"><thead><tr><th class=\"l\">call</th><th class=\"l\">symbol</th>"
            "<th>start</th><th>cycles</th><th>share</th><th>bound</th><th class=\"l\">bound by</th>"
            "<th class=\"l\">limited by</th></tr></thead><tbody>" + rows + total + "</tbody></table>")


def _plan_table(result: ProgramRun) -> str:
    rows = "".join(f"<tr><td class=\"l\">{_esc(p.tensor.name)}</td><td class=\"l\">{_esc(p.region.name)}</td>"
                   f"<td>{p.addr:#012x}</td><td>{p.end:#012x}</td><td>{p.tensor.size_bytes:,}</td>"
                   f"<td>{p.lifetime.first}..{p.lifetime.last}</td><td class=\"l\">{'auto' if p.auto else 'fixed'}</td>"
                   f"</tr>" for p in sorted(result.plan.placements, key=lambda p: (p.key, p.addr)))
    return ("<p>Every tensor's bytes and lifetime (step 0 places the data, step i is call i, the last step reads "
            "the outputs); tensors whose lifetimes do not overlap may share bytes.</p><table class=\"num\" "
            "id=\"plan-table\"><thead><tr><th class=\"l\">tensor</th><th class=\"l\">region</th><th>start</th>"
            "<th>end</th><th>bytes</th><th>steps</th><th class=\"l\">placed</th></tr></thead><tbody>" + rows
            + "</tbody></table>")


def program_report_html(result: ProgramRun, description: str, path: Path) -> str:
    """The report page of a program run (deterministic: no wall-clock in it)."""
    trace = Trace(events=tuple(result.events), metadata=result.metadata(), source=path.name)
    return page_html(f"program {result.name} on {result.target.name}", _esc(description),
                     _facts(result, description, path),
                     timeline_payload(result.events, result.cycles, result.target.clock_hz,
                                      [(c.name, c.start_cycle, c.end_cycle) for c in result.calls]), [
                         ("calls-section", "Calls", _calls_table(result)),
                         ("summary-section", "Per-core summary", _summary_section(summarize(trace))),
                         ("plan-section", "Memory plan", _plan_table(result))])


def write_program_report(path: str | Path, out: str | Path, stream: IO[str] | None = None,
                         allow_kernels: bool | None = None) -> tuple[Path, ProgramRun]:
    """Run a program file and write its report page atomically (``dspsim report PROGRAM``)."""
    program = load_program(path, allow_kernels=allow_kernels)
    with progress_phases(stream) as phases:
        result = run_program(program, progress=phases)
    return atomic_write_text(out, program_report_html(result, program.common.description, program.path)), result


__all__ = ["program_report", "program_layout", "program_map", "program_report_html", "write_program_report"]
