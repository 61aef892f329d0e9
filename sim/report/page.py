"""``dspsim report CONFIG -o report.html``: one self-contained HTML page about a run.

The page holds an interactive per-core timeline (wheel to zoom, drag to pan,
hover a bar for its tile, bytes, addresses and cycles), the per-core summary
with the critical path and the top stalls, the run's point on the roofline,
and the memory-layout map of the call.  Scripts, styles and data are inline
and a Content-Security-Policy forbids any fetch, so it works offline and from
a mail attachment.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from sim.config.run_config import RunConfig, load_config
from sim.engine.events import KINDS, TraceEvent
from sim.files.atomic import atomic_write_text
from sim.files.jsonsafe import plain_scalar
from sim.inspect.dram_turns import turns_text
from sim.inspect.layout_map import layout_map, layout_rows
from sim.inspect.summary import limiting_resource, loop_summaries, resource_shares, rows_text, sync_text
from sim.inspect.trace import track_name, tracks
from sim.inspect.trace_tools import TraceSummary, critical_text, summarize, trace_of_run
from sim.run.preflight import check_before_run
from sim.run.progress import execute_with_progress
from sim.simulator import Run

_esc = html.escape

#: Colours of the event kinds (the same palette as the Gantt chart).
KIND_COLOURS = {"dma_in": "#0072B2", "compute": "#E69F00", "dma_out": "#009E73", "barrier_wait": "#CC79A7",
                "launch": "#BBBBBB"}
KIND_LABELS = {"dma_in": "DMA in", "compute": "compute", "dma_out": "DMA out", "barrier_wait": "barrier wait",
               "launch": "launch"}


def _human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.3g} {unit}"
        n /= 1024
    return f"{n:.3g} GiB"


# -- data for the timeline script ----------------------------------------------------------------


def timeline_data(run: Run) -> dict:
    """The run's tracks and events in the compact form the page's script reads."""
    return timeline_payload(run.events, run.cycles, run.target.clock_hz)


#: The kind, label and colour of a program call's span on the page's ``calls`` track.
CALL_KIND, CALL_LABEL, CALL_COLOUR = "call", "call", "#56B4E9"


def timeline_payload(events: Sequence[TraceEvent], cycles: int, clock_hz: int,
                     calls: Sequence[tuple[str, int, int]] = ()) -> dict:
    """Tracks and events (of a run, or of a program's calls on one timeline) in the form the page's script reads;
    ``calls`` (name, start cycle, end cycle) are a program's calls, drawn as spans on a track above the cores."""
    trs = tracks(events)
    first = 1 if calls else 0  # the calls' track comes first
    index = {cu: i + first for i, cu in enumerate(trs)}
    kinds = list(KINDS) + sorted({e.kind for e in events} - set(KINDS)) + ([CALL_KIND] if calls else [])
    kind_index = {k: i for i, k in enumerate(kinds)}
    rows: list[list] = [[0, kind_index[CALL_KIND], start, end, None, 0, None, None, None, None, 0, 0, name, None]
                        for name, start, end in calls]
    for e in sorted(events, key=lambda e: (index[(e.core, e.unit)], e.start, e.end)):
        rows.append([index[(e.core, e.unit)], kind_index[e.kind], e.start, e.end,
                     e.tile, e.bytes, None if e.src is None else f"{e.src:#x}",
                     None if e.dst is None else f"{e.dst:#x}", e.src_region, e.dst_region,
                     e.wait_cycles, e.flops, e.phase, e.wait_start])
    labels = {**KIND_LABELS, CALL_KIND: CALL_LABEL}
    colours = {**KIND_COLOURS, CALL_KIND: CALL_COLOUR}
    return {"cycles": cycles, "clock_hz": clock_hz,
            "tracks": ([{"core": "calls", "unit": "calls", "label": "calls"}] if calls else [])
            + [{"core": c, "unit": u, "label": track_name(c, u)} for c, u in trs],
            "kinds": kinds, "kind_labels": [labels.get(k, k) for k in kinds],
            "colours": [colours.get(k, "#777777") for k in kinds], "events": rows}


def _script_json(data: Any) -> str:
    # Inside <script>, "<" must never start a tag: escape it (JSON allows \u003c).
    return json.dumps(data, separators=(",", ":"), default=plain_scalar).replace("<", "\\u003c")


# -- static sections -------------------------------------------------------------------------------


def _facts(run: Run, cfg: RunConfig | None) -> str:
    rf = run.roofline
    summaries = run.summaries()
    shares = resource_shares(rf, summaries, run.cycles)
    limit = limiting_resource(rf, summaries, run.cycles)
    items = [("chip", f"{run.target.name} ({run.target.cores} cores at {run.target.clock_hz / 1e9:g} GHz)"),
             ("symbol", run.symbol), ("cores used", ", ".join(map(str, run.cores))),
             ("cycles", f"{run.cycles:,} ({run.microseconds:.3f} µs)"
                        + ("" if run.numerics else "; timing only (numerics: false): no values computed")),
             ("roofline bound", f"{rf.cycles:,.0f} cycles, set by {rf.bound_by} "
                                f"({100 * run.roofline_fraction:.1f}% of the bound achieved)"),
             ("limited by", f"{limit} (" + ", ".join(f"{k} {100 * v:.1f}%" for k, v in sorted(shares.items()))
                            + " of the run)"),
             ("throughput", f"{run.achieved_flops_per_second / 1e9:.2f} GFLOP/s of "
                            f"{run.peak_flops_per_second / 1e9:.1f} GFLOP/s peak"),
             ("precision", run.precision_note)]
    rows = rows_text(run.events, run.target, run.cycles)
    if rows is not None:
        items.append(("DRAM rows", rows.removeprefix("DRAM rows: ")))
    turns = turns_text(run.events, run.target)
    if turns is not None:
        items.append(("DRAM read/write turns", turns.removeprefix("DRAM read/write turns: ")))
    synced = sync_text(run.events, run.target.dma.setup_cycles)
    if synced is not None:
        items.append(("synchronised transfers", synced.removeprefix("synchronised transfers: ")))
    if run.user_kernel:
        items.append(("kernel", run.kernel_origin))
    if cfg is not None:
        items.append(("run-config", cfg.path.name))
    return "<dl class=\"facts\">" + "".join(f"<dt>{_esc(k)}</dt><dd>{_esc(v)}</dd>" for k, v in items) + "</dl>"


def _summary_section(s: TraceSummary) -> str:
    regions = sorted({r for c in s.cores for r in c.bytes_by_region})
    head = ["core", "end", "compute", "overlap", "DMA", "wait", "idle", "utilisation", "compute share", "flop"] + \
        [f"{r} bytes" for r in regions]
    rows = []
    for c in s.cores:
        util = f"<span class=\"meter\"><span style=\"width:{100 * c.utilisation:.1f}%\"></span></span>" \
               f"{100 * c.utilisation:.1f}%"
        cells = [str(c.core), f"{c.end_cycle:,}", f"{c.compute_only_cycles:,}", f"{c.overlap_cycles:,}",
                 f"{c.dma_only_cycles:,}", f"{c.wait_cycles:,}", f"{c.idle_cycles:,}", util,
                 f"{100 * c.compute_utilisation:.1f}%",
                 f"{c.flops:,}"] + [_human_bytes(c.bytes_by_region.get(r, 0)) for r in regions]
        rows.append("<tr>" + "".join(f"<td>{v}</td>" for v in cells) + "</tr>")
    table = ("<table class=\"num\" id=\"summary-table\"><thead><tr>" + "".join(f"<th>{_esc(h)}</th>" for h in head)
             + "</tr></thead><tbody>" + "".join(rows) + "</tbody></table>")
    crit = "<pre class=\"crit\">" + _esc("\n".join(critical_text(s.trace, s.critical))) + "</pre>"
    stall_rows = "".join(
        f"<tr><td>{st.cycles:,}</td><td>{st.start:,}</td><td>{_esc(st.kind)}</td><td class=\"l\">"
        f"{_esc(st.describe())}</td></tr>" for st in s.top_stalls)
    totals = ", ".join(f"{k}: {v:,} cycles" for k, v in sorted(s.stall_totals.items())) or "none"
    stalls = ("<h3>Top stalls</h3><p>Totals over all cores: " + _esc(totals) + "</p>"
              + ("<table class=\"num\" id=\"stalls-table\"><thead><tr><th>cycles</th><th>from cycle</th><th>kind</th>"
                 "<th class=\"l\">where</th></tr></thead><tbody>" + stall_rows + "</tbody></table>"
                 if stall_rows else "<p>No unit waited.</p>"))
    note = ("<p class=\"note\">Every cycle of the run is counted once per core: compute = the vector unit alone; "
            "overlap = the vector unit while a DMA moves data; DMA = a DMA moving data alone; wait = nothing but the "
            "cycles a DMA lost to sharing bandwidth with other streams, a barrier or the launch; idle = nothing. Utilisation = (compute + overlap + "
            "DMA) over the run's cycles; compute share = (compute + overlap) over them.</p>")
    return table + note + "<h3>Critical path</h3>" + crit + stalls


def roofline_svg(run: Run) -> str:
    """The run on a log-log roofline: the cores' peak, a roof per memory region, a point per region."""
    rf = run.roofline
    flops = rf.total_flops
    clock = run.target.clock_hz
    n = len(run.cores)
    peak = run.peak_flops_per_second
    if not flops or not run.cycles or not rf.region_bytes:
        return "<p>No arithmetic in this run: no roofline point.</p>"
    achieved = run.achieved_flops_per_second
    roofs = []
    for name, nbytes in sorted(rf.region_bytes.items()):
        r = run.target.region(name)
        bw = r.bandwidth_bytes_per_cycle * (1 if r.shared else n) * clock
        roofs.append((name, bw, flops / nbytes if nbytes else math.inf, r.role == "scratchpad"))
    ais = [ai for _, _, ai, _ in roofs if math.isfinite(ai)] + [peak / bw for _, bw, _, _ in roofs]
    x0 = 2.0 ** math.floor(math.log2(min(ais) / 4))
    x1 = 2.0 ** math.ceil(math.log2(max(ais) * 4))
    y1 = 10 ** math.ceil(math.log10(peak * 2))
    y0 = 10 ** math.floor(math.log10(max(min(achieved, min(bw * x0 for _, bw, _, _ in roofs)) / 3, 1.0)))
    W, H, L, R, T, B = 640, 380, 70, 20, 20, 50

    def px(ai: float) -> float:
        return L + (math.log(ai) - math.log(x0)) / (math.log(x1) - math.log(x0)) * (W - L - R)

    def py(f: float) -> float:
        f = min(max(f, y0), y1)
        return H - B - (math.log(f) - math.log(y0)) / (math.log(y1) - math.log(y0)) * (H - T - B)

    parts = [f"<svg id=\"roofline\" viewBox=\"0 0 {W} {H}\" width=\"{W}\" height=\"{H}\" role=\"img\" "
             f"aria-label=\"roofline\"><rect x=\"{L}\" y=\"{T}\" width=\"{W - L - R}\" height=\"{H - T - B}\" "
             f"fill=\"#fff\" stroke=\"#ccc\"/>"]
    k = math.floor(math.log2(x0))
    while 2.0 ** k <= x1:
        x = px(2.0 ** k)
        parts.append(f"<line x1=\"{x:.1f}\" y1=\"{T}\" x2=\"{x:.1f}\" y2=\"{H - B}\" class=\"grid\"/>"
                     f"<text x=\"{x:.1f}\" y=\"{H - B + 14}\" class=\"tick\" text-anchor=\"middle\">"
                     f"{2.0 ** k:g}</text>")
        k += 2 if (math.log2(x1) - math.log2(x0)) > 12 else 1
    e = math.floor(math.log10(y0))
    while 10.0 ** e <= y1:
        y = py(10.0 ** e)
        parts.append(f"<line x1=\"{L}\" y1=\"{y:.1f}\" x2=\"{W - R}\" y2=\"{y:.1f}\" class=\"grid\"/>"
                     f"<text x=\"{L - 6}\" y=\"{y + 4:.1f}\" class=\"tick\" text-anchor=\"end\">"
                     f"{10.0 ** e / 1e9:g}</text>")
        e += 1
    parts.append(f"<text x=\"{(L + W - R) / 2}\" y=\"{H - 12}\" text-anchor=\"middle\" class=\"axis\">"
                 f"arithmetic intensity (flop per byte of the region)</text>"
                 f"<text transform=\"translate(16 {(T + H - B) / 2}) rotate(-90)\" text-anchor=\"middle\" "
                 f"class=\"axis\">GFLOP/s</text>")
    palette = ("#D55E00", "#56B4E9", "#009E73", "#CC79A7", "#0072B2", "#F0E442")
    for i, (name, bw, ai, scratch) in enumerate(roofs):
        colour = palette[i % len(palette)]
        ridge = peak / bw
        xa, xb = x0, min(ridge, x1)
        dash = ' stroke-dasharray="5 3"' if scratch else ""
        parts.append(f"<line x1=\"{px(xa):.1f}\" y1=\"{py(bw * xa):.1f}\" x2=\"{px(xb):.1f}\" y2=\"{py(bw * xb):.1f}\" "
                     f"stroke=\"{colour}\" stroke-width=\"2\"{dash}/>"
                     f"<text x=\"{px(xa) + 4:.1f}\" y=\"{py(bw * xa) - 6:.1f}\" class=\"tick\" fill=\"{colour}\">"
                     f"{_esc(name)} {bw / 1e9:,.4g} GB/s</text>")
        if math.isfinite(ai):
            bound = name == rf.bound_by
            parts.append(f"<circle class=\"point\" cx=\"{px(ai):.1f}\" cy=\"{py(achieved):.1f}\" "
                         f"r=\"{6 if bound else 4}\" "
                         f"fill=\"{colour}\" stroke=\"#000\" stroke-width=\"{1.5 if bound else 0.5}\">"
                         f"<title>{_esc(name)}: {ai:.3g} flop/byte, {achieved / 1e9:.3g} GFLOP/s achieved</title>"
                         f"</circle>")
    parts.append(f"<line x1=\"{px(x0):.1f}\" y1=\"{py(peak):.1f}\" x2=\"{W - R}\" y2=\"{py(peak):.1f}\" "
                 f"stroke=\"#333\" stroke-width=\"2\"/><text x=\"{W - R - 4}\" y=\"{py(peak) - 6:.1f}\" "
                 f"text-anchor=\"end\" class=\"tick\">peak {peak / 1e9:.4g} GFLOP/s on {n} core"
                 f"{'s' if n != 1 else ''}</text></svg>")
    return "".join(parts)


def _roofline_section(run: Run) -> str:
    rf = run.roofline
    res = ", ".join(f"{k} {v:,.0f}" for k, v in sorted(rf.resource_cycles.items()))
    points = ", ".join(f"{name} {rf.total_flops / b:,.3g} flop/byte" for name, b in sorted(rf.region_bytes.items())
                       if b)
    text = (f"<p>The run did {rf.total_flops:,} flop in {run.cycles:,} cycles: "
            f"{run.achieved_flops_per_second / 1e9:,.1f} GFLOP/s of {run.peak_flops_per_second / 1e9:,.1f} peak. "
            f"No schedule of this plan can beat "
            f"{rf.cycles:,.0f} cycles, set by <b>{_esc(rf.bound_by)}</b> (cycles each resource needs alone: "
            f"{_esc(res)}); the run reached {100 * run.roofline_fraction:.1f}% of that bound. "
            f"A point per memory region: its arithmetic intensity and the achieved rate (the bounding region "
            f"drawn larger; dashed roofs are per-core scratchpads): {_esc(points)}.</p>")
    return text + roofline_svg(run) + _loops_table(run)


def _loops_table(run: Run) -> str:
    """The plan's inner loops, costliest first: what a kernel engineer compares micro-kernels by (the II, the
    unit or issue class that sets it, and their share of the compute cycles)."""
    rows, total = loop_summaries(run.plan, run.target)
    if not rows or not total:
        return ""
    body = "".join(f"<tr><td>{_esc(r.label)}</td><td>{r.ii}</td><td>{_esc(r.bound_by)}</td><td>{r.tiles:,}</td>"
                   f"<td>{r.trips:,}</td><td>{r.cycles:,}</td><td>{100 * r.cycles / total:.1f}%</td></tr>"
                   for r in rows)
    rest = total - sum(r.cycles for r in rows)
    note = f" The rest, {rest:,} cycles ({100 * rest / total:.1f}%), is tile overheads."
    return ("<p>Inner loops over all cores' tiles (each priced as loop overhead + fill + iterations x II + "
            f"epilogue):{_esc(note)}</p><table><tr><th>loop</th><th>II</th><th>II set by</th><th>tiles</th>"
            f"<th>iterations</th><th>cycles</th><th>of compute</th></tr>{body}</table>")


def _layout_section(run: Run) -> str:
    rows = layout_rows(run.call, run.target)
    by_region: dict[str | None, list[dict]] = {}
    for row in rows:
        by_region.setdefault(row["region"], []).append(row)
    strips = []
    for name, items in by_region.items():
        region = next((r for r in run.target.regions if r.name == name), None)
        head = (f"{_esc(name)} [{region.base:#x}, {region.end:#x}) {region.kind}" if region and name
                else "unmapped")
        blocks, cursor = [], None
        for row in items:
            if cursor is not None and row["start"] > cursor:
                blocks.append(f"<div class=\"gap\" title=\"gap of {row['start'] - cursor:,} bytes\">"
                              f"gap {_esc(_human_bytes(row['start'] - cursor))}</div>")
            elif cursor is not None and row["start"] < cursor:
                blocks.append(f"<div class=\"overlap\">overlap {_esc(_human_bytes(cursor - row['start']))}</div>")
            grow = max(1.0, math.log2(max(row["size_bytes"], 1)) - 5)
            tip = (f"{row['buffer']} ({row['role']}): [{row['start']:#x}, {row['end']:#x}) "
                   f"{row['size_bytes']:,} bytes, {row['dtype']}{row['shape']}")
            blocks.append(f"<div class=\"buf role-{_esc(row['role'])}\" style=\"flex-grow:{grow:.2f}\" "
                          f"title=\"{_esc(tip)}\"><b>{_esc(row['buffer'])}</b><span>{row['start']:#x}</span>"
                          f"<span>{_esc(_human_bytes(row['size_bytes']))}</span></div>")
            cursor = max(cursor or 0, row["end"])
        strips.append(f"<div class=\"region\"><div class=\"rname\">{head}</div><div class=\"strip\">"
                      + "".join(blocks) + "</div></div>")
    trs = "".join(
        f"<tr><td class=\"l\">{_esc(r['buffer'])}</td><td class=\"l\">{_esc(r['role'])}</td>"
        f"<td class=\"l\">{_esc(str(r['region']))}</td><td>{r['start']:#012x}</td><td>{r['end']:#012x}</td>"
        f"<td>{r['size_bytes']:,}</td><td class=\"l\">{_esc(r['dtype'])}{_esc(str(r['shape']))}</td></tr>"
        for r in rows)
    table = ("<table class=\"num\" id=\"layout-table\"><thead><tr><th class=\"l\">buffer</th><th class=\"l\">role</th>"
             "<th class=\"l\">region</th><th>start</th><th>end</th><th>bytes</th><th class=\"l\">type</th></tr>"
             "</thead><tbody>" + trs + "</tbody></table>")
    text = layout_map(run.call, run.target)
    return ("<p>The call's buffers in address order within each region (block width grows with the log of the "
            "size; gaps and overlaps shown between them).</p><div class=\"layout\">" + "".join(strips)
            + "</div>" + table + "<details><summary>text layout map</summary><pre>" + _esc(text)
            + "</pre></details>")


def _arg_text(value: Any) -> str:
    # Addresses read best in hex; small ints (sizes, flags) in decimal.
    if isinstance(value, bool) or not isinstance(value, (int, list, tuple)):
        return json.dumps(value, default=plain_scalar) if not isinstance(value, str) else value
    if isinstance(value, int):
        return f"{value:#x}" if value >= 0x10000 else str(value)
    return "[" + ", ".join(_arg_text(v) for v in value) + "]"


def _arg_value(name: str, value: Any) -> str:
    if name.endswith("mask") and isinstance(value, int) and not isinstance(value, bool):
        return f"{value:#x}"
    return _arg_text(value)


def _run_section(run: Run) -> str:
    rows = "".join(f"<tr><td class=\"l\">{_esc(k)}</td><td class=\"l\"><code>{_esc(_arg_value(k, v))}</code></td></tr>"
                   for k, v in run.args.items())
    return ("<p>The call as the run-config wrote it:</p><table class=\"num\" id=\"args-table\"><tbody>" + rows
            + "</tbody></table>")


# -- page ------------------------------------------------------------------------------------------

_CSS = """
:root{--fg:#1d1d1f;--muted:#666;--line:#ddd;--bg:#fff;--band:#f4f5f7}
*{box-sizing:border-box}
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;color:var(--fg);
 background:var(--bg);margin:0;padding:18px 24px 40px}
h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:28px 0 8px;border-bottom:1px solid var(--line);
 padding-bottom:4px}h3{font-size:14px;margin:16px 0 6px}
.sub{color:var(--muted);margin:0 0 10px}
dl.facts{display:grid;grid-template-columns:max-content 1fr;gap:2px 14px;margin:0}
dl.facts dt{color:var(--muted)}dl.facts dd{margin:0}
.toolbar{display:flex;gap:6px;align-items:center;flex-wrap:wrap;margin:4px 0 6px}
.toolbar button{font:inherit;padding:2px 10px;border:1px solid #bbb;background:#fafafa;border-radius:4px;cursor:pointer}
.toolbar button:hover{background:#eee}
.hint,#view-range{color:var(--muted);font-size:12px}
.legend{display:flex;gap:14px;flex-wrap:wrap;font-size:12px;margin-bottom:4px}
.legend i{display:inline-block;width:12px;height:12px;border-radius:2px;margin-right:4px;vertical-align:-2px}
.legend i.hatch{background:repeating-linear-gradient(135deg,#333 0 1.5px,#fff 1.5px 4px);border:1px solid #333}
.timeline{display:flex;border:1px solid var(--line);border-radius:4px;overflow:hidden;user-select:none}
.labels{flex:0 0 auto;background:#fafafa;border-right:1px solid var(--line)}
.axis-head{height:34px;font-size:10px;line-height:12px;color:var(--muted);text-align:right;padding:2px 8px 0}
.row-label{height:18px;line-height:18px;font-size:12px;padding:0 8px;white-space:nowrap}
.row-label.band{background:var(--band)}
.plot{flex:1 1 auto;min-width:0;position:relative;cursor:grab}
.plot.dragging{cursor:grabbing}
#tl-svg{display:block}
#tl-svg .bar{shape-rendering:crispEdges}
#tl-svg .bar:hover,#tl-svg .bar.hot{stroke:#000;stroke-width:1}
#tl-svg .tick{font-size:11px;fill:#444}#tl-svg .tick2{font-size:10px;fill:#888}
#tooltip{position:fixed;z-index:10;pointer-events:none;background:#fff;border:1px solid #999;border-radius:4px;
 box-shadow:0 2px 8px rgba(0,0,0,.18);padding:6px 8px;font-size:12px;max-width:420px}
#tooltip table{border-collapse:collapse}#tooltip td{padding:0 6px 0 0;vertical-align:top}
#tooltip td:first-child{color:var(--muted)}#tooltip .t{font-weight:600;margin-bottom:3px}
table.num{border-collapse:collapse;font-size:13px;margin:6px 0}
table.num th,table.num td{border-bottom:1px solid var(--line);padding:3px 8px;text-align:right;white-space:nowrap}
table.num th{background:#fafafa}table.num .l{text-align:left}
.meter{display:inline-block;width:60px;height:8px;background:#eee;margin-right:6px;vertical-align:0}
.meter span{display:block;height:100%;background:#0072B2}
.note{color:var(--muted);font-size:12px}
pre{background:#f7f7f7;padding:8px 10px;border-radius:4px;overflow:auto;font-size:12px}
pre.crit{white-space:pre-wrap}
#roofline .grid{stroke:#eee}#roofline .tick{font-size:11px;fill:#444}#roofline .axis{font-size:12px;fill:#222}
.layout .region{margin:8px 0}.layout .rname{font-size:12px;color:var(--muted);margin-bottom:2px}
.layout .strip{display:flex;gap:2px;align-items:stretch}
.layout .buf{flex-basis:0;min-width:70px;border-radius:3px;padding:3px 6px;font-size:11px;color:#fff;
 display:flex;flex-direction:column;overflow:hidden}
.layout .buf span{opacity:.9}
.layout .role-input{background:#0072B2}.layout .role-output{background:#009E73}
.layout .buf:not(.role-input):not(.role-output){background:#777}
.layout .gap{flex:0 0 auto;align-self:center;font-size:10px;color:#888;padding:0 4px;
 border-left:2px dotted #bbb;border-right:2px dotted #bbb}
.layout .overlap{flex:0 0 auto;align-self:center;font-size:10px;color:#fff;background:#c00;padding:2px 4px}
"""

_JS = r"""
(function () {
"use strict";
var D = JSON.parse(document.getElementById("run-data").textContent);
var ROW = 18, AXIS = 34, NS = "http://www.w3.org/2000/svg";
var svg = document.getElementById("tl-svg"), plot = document.getElementById("plot");
var labels = document.getElementById("labels"), tip = document.getElementById("tooltip");
var total = Math.max(D.cycles, 1), v0 = 0, v1 = total, MIN_SPAN = 8;
var tracks = D.tracks.map(function () { return []; });
D.events.forEach(function (e, i) { tracks[e[0]].push(i); });
var ends = tracks.map(function (ix) { return ix.map(function (i) { return D.events[i][3]; }); });
var coreBand = {}, cores = [];
D.tracks.forEach(function (t) { if (!(t.core in coreBand)) { coreBand[t.core] = cores.length % 2 === 0; cores.push(t.core); } });

D.tracks.forEach(function (t) {
  var d = document.createElement("div");
  d.className = "row-label" + (coreBand[t.core] ? " band" : "");
  d.textContent = t.label;
  labels.appendChild(d);
});
var legend = document.getElementById("legend");
var used = {};
D.events.forEach(function (e) { used[e[1]] = true; });
D.kinds.forEach(function (k, i) {
  if (!used[i]) return;
  var s = document.createElement("span"), sw = document.createElement("i");
  sw.style.background = D.colours[i]; s.appendChild(sw); s.appendChild(document.createTextNode(D.kind_labels[i]));
  legend.appendChild(s);
});
if (D.events.some(function (e) { return e[10] > 0 && (D.kinds[e[1]] === "dma_in" || D.kinds[e[1]] === "dma_out"); })) {
  var s2 = document.createElement("span"), h = document.createElement("i");
  h.className = "hatch"; s2.appendChild(h); s2.appendChild(document.createTextNode("slowed by sharing (DMA cycles lost) "));
  legend.appendChild(s2);
}

function el(name, attrs) {
  var n = document.createElementNS(NS, name);
  for (var k in attrs) n.setAttribute(k, attrs[k]);
  return n;
}
function us(c) { return c * 1e6 / D.clock_hz; }
function fmtInt(n) { return Math.round(n).toLocaleString("en-US"); }
function fmtUs(u) { return (Math.abs(u) >= 100 ? u.toFixed(1) : Math.abs(u) >= 1 ? u.toFixed(3) : u.toFixed(4)) + " \u00b5s"; }
function niceStep(raw) {
  var p = Math.pow(10, Math.floor(Math.log10(raw))), m = raw / p;
  return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * p;
}
function firstVisible(t, c) {  // first event of track t whose end >= c (events of a track never overlap)
  var a = ends[t], lo = 0, hi = a.length;
  while (lo < hi) { var mid = (lo + hi) >> 1; if (a[mid] < c) lo = mid + 1; else hi = mid; }
  return lo;
}

var defs = el("defs", {});
var pat = el("pattern", {id: "hatch", width: 5, height: 5, patternUnits: "userSpaceOnUse", patternTransform: "rotate(45)"});
pat.appendChild(el("line", {x1: 0, y1: 0, x2: 0, y2: 5, stroke: "#222", "stroke-width": 1.6}));
defs.appendChild(pat);

function render() {
  var W = Math.max(plot.clientWidth, 100), H = AXIS + D.tracks.length * ROW + 2;
  var span = v1 - v0, k = W / span;
  svg.setAttribute("width", W); svg.setAttribute("height", H);
  svg.setAttribute("data-view", v0.toFixed(3) + "," + v1.toFixed(3));
  var frag = document.createDocumentFragment();
  frag.appendChild(defs);
  D.tracks.forEach(function (t, r) {
    if (coreBand[t.core]) frag.appendChild(el("rect", {x: 0, y: AXIS + r * ROW, width: W, height: ROW, fill: "#f4f5f7"}));
  });
  var step = niceStep(span / Math.max(W / 120, 1));
  for (var c = Math.ceil(v0 / step) * step; c <= v1; c += step) {
    var x = (c - v0) * k;
    frag.appendChild(el("line", {x1: x, y1: AXIS - 4, x2: x, y2: H, stroke: "#e3e3e3"}));
    var t1 = el("text", {x: x + 2, y: 13, "class": "tick"}); t1.textContent = fmtInt(c); frag.appendChild(t1);
    var t2 = el("text", {x: x + 2, y: 26, "class": "tick2"}); t2.textContent = fmtUs(us(c)); frag.appendChild(t2);
  }
  tracks.forEach(function (ix, r) {
    var y = AXIS + r * ROW + 2, h = ROW - 4, last = null;
    for (var j = firstVisible(r, v0); j < ix.length; j++) {
      var i = ix[j], e = D.events[i];
      if (e[2] > v1) break;
      var x0 = (Math.max(e[2], v0) - v0) * k, x1 = (Math.min(e[3], v1) - v0) * k;
      if (last && last.kind === e[1] && x0 - last.x1 < 0.75 && x1 - x0 < 1.5) {
        last.x1 = Math.max(last.x1, x1); last.n += 1;  // merge sub-pixel neighbours of one kind
        last.node.setAttribute("width", Math.max(last.x1 - last.x0, 1));
        last.node.setAttribute("data-n", last.n);
        continue;
      }
      // A pixel of air between back-to-back bars wide enough to spare it.
      var node = el("rect", {x: x0, y: y, width: Math.max(x1 - x0 - (x1 - x0 > 4 ? 1 : 0), 1), height: h, fill: D.colours[e[1]],
                             "class": "bar k-" + D.kinds[e[1]], "data-e": i, "data-n": 1});
      frag.appendChild(node);
      last = {kind: e[1], x0: x0, x1: x1, n: 1, node: node};
      if (e[10] > 0 && e[13] !== null && (D.kinds[e[1]] === "dma_in" || D.kinds[e[1]] === "dma_out")) {
        // The cycles sharing bandwidth cost the transfer, from its stream's start, hatched over its bar.
        var wx0 = (Math.max(e[13], v0) - v0) * k, wx1 = (Math.min(e[13] + e[10], v1) - v0) * k;
        if (wx1 - wx0 >= 1) frag.appendChild(el("rect", {x: wx0, y: y, width: wx1 - wx0, height: h, fill: "url(#hatch)",
                                                          "pointer-events": "none", opacity: 0.55}));
      }
    }
  });
  while (svg.firstChild) svg.removeChild(svg.firstChild);
  svg.appendChild(frag);
  document.getElementById("view-range").textContent = "view: cycles " + fmtInt(v0) + " \u2013 " + fmtInt(v1) +
    " (" + fmtUs(us(v0)) + " \u2013 " + fmtUs(us(v1)) + ")";
}

function clampView(a, b) {
  var span = Math.min(Math.max(b - a, MIN_SPAN), total);
  a = Math.min(Math.max(a, 0), total - span);
  v0 = a; v1 = a + span;
}
function zoom(factor, frac) {
  var span = v1 - v0, c = v0 + frac * span, ns = span * factor;
  clampView(c - frac * ns, c - frac * ns + ns);
  render();
}
plot.addEventListener("wheel", function (ev) {
  ev.preventDefault();
  var r = plot.getBoundingClientRect();
  if (ev.shiftKey || Math.abs(ev.deltaX) > Math.abs(ev.deltaY)) {
    var d = (ev.deltaX || ev.deltaY) / r.width * (v1 - v0);
    clampView(v0 + d, v1 + d); render(); return;
  }
  zoom(Math.exp(ev.deltaY * 0.0015), (ev.clientX - r.left) / r.width);
}, {passive: false});
var drag = null;
plot.addEventListener("mousedown", function (ev) {
  if (ev.button !== 0) return;
  drag = {x: ev.clientX, v0: v0, v1: v1, moved: false};
  plot.classList.add("dragging"); ev.preventDefault();
});
window.addEventListener("mousemove", function (ev) {
  if (!drag) return;
  var dx = ev.clientX - drag.x;
  if (Math.abs(dx) > 2) drag.moved = true;
  var d = -dx / plot.clientWidth * (drag.v1 - drag.v0);
  clampView(drag.v0 + d, drag.v1 + d); hideTip(); render();
});
window.addEventListener("mouseup", function () { drag = null; plot.classList.remove("dragging"); });
plot.addEventListener("dblclick", function (ev) {
  var r = plot.getBoundingClientRect(); zoom(0.5, (ev.clientX - r.left) / r.width);
});
document.getElementById("zoom-in").addEventListener("click", function () { zoom(0.5, 0.5); });
document.getElementById("zoom-out").addEventListener("click", function () { zoom(2, 0.5); });
document.getElementById("zoom-reset").addEventListener("click", function () { clampView(0, total); render(); });
document.addEventListener("keydown", function (ev) {
  if (ev.target && /INPUT|TEXTAREA/.test(ev.target.tagName)) return;
  if (ev.key === "+" || ev.key === "=") zoom(0.5, 0.5);
  else if (ev.key === "-") zoom(2, 0.5);
  else if (ev.key === "0") { clampView(0, total); render(); }
  else if (ev.key === "ArrowLeft" || ev.key === "ArrowRight") {
    var d = (ev.key === "ArrowLeft" ? -0.2 : 0.2) * (v1 - v0); clampView(v0 + d, v1 + d); render();
  }
});

function row(tb, k, v) {
  var tr = document.createElement("tr"), a = document.createElement("td"), b = document.createElement("td");
  a.textContent = k; b.textContent = v; tr.appendChild(a); tr.appendChild(b); tb.appendChild(tr);
}
function showTip(node, ev) {
  var i = +node.getAttribute("data-e"), n = +node.getAttribute("data-n"), e = D.events[i], t = D.tracks[e[0]];
  while (tip.firstChild) tip.removeChild(tip.firstChild);
  var head = document.createElement("div"); head.className = "t";
  head.textContent = D.kind_labels[e[1]] + (e[4] !== null ? " \u00b7 tile " + e[4] : "") + " \u2014 " + t.label;
  tip.appendChild(head);
  var tb = document.createElement("table");
  if (e[4] !== null) row(tb, "tile", String(e[4]));
  if (e[12]) row(tb, "phase", e[12]);
  row(tb, "cycles", fmtInt(e[2]) + " \u2013 " + fmtInt(e[3]) + " (" + fmtInt(e[3] - e[2]) + " cycles, " + fmtUs(us(e[3] - e[2])) + ")");
  row(tb, "time", fmtUs(us(e[2])) + " \u2013 " + fmtUs(us(e[3])));
  if (e[5]) row(tb, "bytes", fmtInt(e[5]));
  if (e[6] !== null) row(tb, "source", e[6] + (e[8] ? " (" + e[8] + ")" : ""));
  if (e[7] !== null) row(tb, "destination", e[7] + (e[9] ? " (" + e[9] + ")" : ""));
  if (e[10]) row(tb, D.kinds[e[1]] === "barrier_wait" ? "waited" : "lost to sharing", fmtInt(e[10]) + " cycles");
  if (e[11]) row(tb, "flop", fmtInt(e[11]));
  if (n > 1) row(tb, "merged", n + " events at this zoom (zoom in to separate)");
  tip.appendChild(tb);
  tip.hidden = false;
  var x = ev.clientX + 14, y = ev.clientY + 14, r = tip.getBoundingClientRect();
  if (x + r.width > window.innerWidth - 4) x = ev.clientX - r.width - 10;
  if (y + r.height > window.innerHeight - 4) y = ev.clientY - r.height - 10;
  tip.style.left = Math.max(x, 2) + "px"; tip.style.top = Math.max(y, 2) + "px";
}
function hideTip() { tip.hidden = true; }
svg.addEventListener("mousemove", function (ev) {
  if (drag && drag.moved) return;
  var node = ev.target && ev.target.closest ? ev.target.closest("rect.bar") : null;
  if (node) showTip(node, ev); else hideTip();
});
svg.addEventListener("mouseleave", hideTip);
window.addEventListener("resize", render);
render();
window.dspsimTimeline = {view: function () { return [v0, v1]; }, setView: function (a, b) { clampView(a, b); render(); }};
})();
"""


def report_html(run: Run, cfg: RunConfig | None = None) -> str:
    """The whole report page of a run as one HTML string (deterministic: no wall-clock in it)."""
    summary = summarize(trace_of_run(run))
    desc = _esc(cfg.description) if cfg is not None and cfg.description else ""
    return page_html(f"{run.symbol} on {run.target.name}", desc, _facts(run, cfg), timeline_data(run), [
        ("summary-section", "Per-core summary", _summary_section(summary)),
        ("roofline-section", "Roofline", _roofline_section(run)),
        ("layout-section", "Memory layout of the call", _layout_section(run)),
        ("args-section", "Arguments", _run_section(run))])


def page_html(title: str, desc: str, facts: str, timeline: dict, sections: Sequence[tuple[str, str, str]]) -> str:
    """A report page: its title, the description and facts (HTML), the interactive timeline of ``timeline``
    (:func:`timeline_payload`), then ``sections`` (id, heading, HTML) in order."""
    data = _script_json(timeline)
    body = "".join(f"""<section id="{sid}">
<h2>{_esc(heading)}</h2>
{html_text}
</section>
""" for sid, heading, html_text in sections)
    csp = ("default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:; "
           "connect-src 'none'")
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{csp}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>dspsim report: {_esc(title)}</title>
<style>{_CSS}</style>
</head>
<body>
<header>
<h1>dspsim report: {_esc(title)}</h1>
<p class="sub">{desc}</p>
{facts}
</header>
<section id="timeline-section">
<h2>Per-core timeline</h2>
<div class="toolbar"><button id="zoom-in" title="zoom in (+)">+</button><button id="zoom-out" title="zoom out (-)">&minus;</button>
<button id="zoom-reset" title="whole run (0)">whole run</button><span id="view-range"></span>
<span class="hint">wheel: zoom at the pointer &middot; drag or shift+wheel: pan &middot; hover a bar: details</span></div>
<div class="legend" id="legend"></div>
<div class="timeline" id="timeline"><div class="labels" id="labels"><div class="axis-head">cycles<br>&micro;s</div></div><div class="plot" id="plot"><svg id="tl-svg" xmlns="http://www.w3.org/2000/svg"></svg></div></div>
<div id="tooltip" role="tooltip" hidden></div>
</section>
{body}<script type="application/json" id="run-data">{data}</script>
<script>{_JS}</script>
</body>
</html>
"""


def write_report(config: str | Path, out: str | Path, stream: IO[str] | None = None,
                 strict: bool = False, allow_kernels: bool | None = None) -> tuple[Path, Run]:
    """Check a run-config as ``dspsim run`` does (warnings to ``stream``), run it (with progress bars on a
    terminal) and write its report page atomically.  ``allow_kernels`` is
    :func:`~sim.config.run_config.load_config`'s (may the config's ``kernels:`` be imported)."""
    cfg = load_config(config, allow_kernels=allow_kernels)
    bound, _ = check_before_run(cfg, strict=strict, warn=stream)
    _, run = execute_with_progress(cfg, stream=stream, bound=bound)
    return atomic_write_text(out, report_html(run, cfg)), run
