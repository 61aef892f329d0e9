"""``dspsim trace plot``: a Gantt chart of a run with matplotlib (Agg backend, no display needed).

A row per core unit (compute, each DMA engine, sync), a colour per kind (DMA
in, compute, DMA out, barrier wait, launch; the cycles a DMA lost to sharing
bandwidth with other streams hatched, from its stream's start), and below it a
panel of the bandwidth each shared region delivered over time against its
peak.  The x axis is in cycles, with
microseconds along the top.

Every event is drawn, at least a pixel wide.  Where a bar is narrower than
``DISTINCT_PX`` pixels and touches the one before it on its row, the two read
as one: the chart says so under its title, with how many events of each kind
are drawn merged at that scale (:func:`merged_events`), and ``--cycles``
zooms in until each is seen.
"""

from __future__ import annotations

import io
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from fractions import Fraction
from pathlib import Path

import numpy as np
import simpy
from simpy.events import Timeout

from sim.engine.events import DMA_KINDS, TraceEvent
from sim.engine.fluid import Flow, FlowNetwork, Link
from sim.errors import SimError
from sim.extras import need
from sim.files.atomic import atomic_write_bytes, output_path
from sim.inspect.pictures import save_figure
from sim.inspect.trace import shared_regions, track_name, tracks
from sim.inspect.trace_tools import Trace

#: Colour of each kind (Okabe-Ito palette: distinguishable with colour-blindness).
KIND_COLOURS = {"dma_in": "#0072B2", "compute": "#E69F00", "dma_out": "#009E73", "barrier_wait": "#CC79A7",
                "launch": "#BBBBBB"}
KIND_LABELS = {"dma_in": "DMA in", "compute": "compute", "dma_out": "DMA out", "barrier_wait": "barrier wait",
               "launch": "launch"}
REGION_COLOURS = ("#D55E00", "#56B4E9", "#009E73", "#F0E442", "#0072B2", "#CC79A7")
_BINS = 400
#: Width of the chart in inches, and the share of it the plotting area takes (see ``subplots_adjust``).
FIG_WIDTH_IN, PLOT_LEFT, PLOT_RIGHT = 13.0, 0.11, 0.985
#: A bar narrower than this many pixels cannot show its boundary with a neighbour it touches.
DISTINCT_PX = 3.0
#: A gap of at least this many pixels separates two bars visibly.
GAP_PX = 1.0


def plot_px_per_cycle(window: tuple[int, int], dpi: int) -> float:
    """Pixels per cycle of the plotting area for ``window`` at ``dpi``."""
    lo, hi = window
    return FIG_WIDTH_IN * (PLOT_RIGHT - PLOT_LEFT) * dpi / max(hi - lo, 1)


def merged_events(events: Sequence[TraceEvent], window: tuple[int, int], px_per_cycle: float) \
        -> dict[str, tuple[int, int]]:
    """Per kind, ``(drawn merged, drawn)``: events in ``window`` whose bar cannot be told from the one before
    it on its row (narrower than ``DISTINCT_PX`` pixels and less than ``GAP_PX`` pixels after it ends)."""
    lo, hi = window
    rows: dict[tuple[int, str], list[TraceEvent]] = defaultdict(list)
    for e in events:
        if e.end >= lo and e.start <= hi:
            rows[(e.core, e.unit)].append(e)
    out: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for evs in rows.values():
        prev_end: float | None = None
        for e in sorted(evs, key=lambda e: (e.start, e.end)):
            width = max(e.end - e.start, 0) * px_per_cycle
            counts = out[e.kind]
            counts[1] += 1
            if prev_end is not None and width < DISTINCT_PX and (e.start - prev_end) * px_per_cycle < GAP_PX:
                counts[0] += 1
            prev_end = e.end if prev_end is None else max(prev_end, e.end)
    return {k: (v[0], v[1]) for k, v in out.items()}


def merged_note(merged: Mapping[str, tuple[int, int]], px_per_cycle: float) -> str | None:
    """The line the chart prints when events are drawn merged (None when every one can be seen)."""
    parts = [f"{KIND_LABELS.get(k, k)} {m:,} of {n:,}" for k, (m, n) in
             sorted(merged.items(), key=lambda kv: list(KIND_COLOURS).index(kv[0]) if kv[0] in KIND_COLOURS else 99)
             if m]
    if not parts:
        return None
    return (f"ticks merged at this scale ({1 / px_per_cycle:,.0f} cycles per pixel): {', '.join(parts)} events "
            f"touch a neighbour and are drawn as one bar with it; narrow the window (--cycles START:END) to see each")


def stream_interval(e: TraceEvent, regions: Mapping[str, Mapping] | None) -> tuple[int, int]:
    """The cycles during which a DMA's bytes streamed: from its stream's start (``wait_start``, after its setup),
    before the access latency of the slower side (known from the trace's region facts; without them, up to its
    end)."""
    s0 = e.wait_start if e.wait_start is not None else e.start
    lat = 0
    if regions:
        lat = max((int(regions.get(r, {}).get("latency_cycles", 0)) for r in (e.src_region, e.dst_region) if r),
                  default=0)
    s1 = max(s0 + 1, e.end - lat)
    return s0, min(s1, max(e.end, s0 + 1))


def _replayed_rates(spans: Sequence[tuple[int, int, int, int]], capacity: float) -> tuple[np.ndarray, np.ndarray]:
    """The region's traffic as the engine shares it, replayed: ``spans`` are (stream start, stream end, bytes,
    cycles the stream takes alone); the streams share ``capacity`` max-min fairly, each at most its rate alone
    (its bytes over those cycles).  Returns the cycles at which the region's rate changes and the changes (each
    stream's rate counted until its last byte has moved, to the fraction of a cycle)."""
    env = simpy.Environment()
    net = FlowNetwork(env)
    link = net.add_link("region", capacity)
    segments: dict[int, list[tuple[int, float]]] = defaultdict(list)  # stream -> (cycle, rate from then on)
    ids: dict[Flow, int] = {}  # flow -> stream (the flows kept alive, so that none is mistaken for another)
    sizes: list[int] = []

    def observe(n: FlowNetwork) -> None:
        now = int(env.now)
        for f in n.active:
            k = ids.get(f)
            if f.end_cycle is None and k is not None:  # (a stream being started is observed once it has an id)
                seg = segments[k]
                rate = float(f.usage(link))
                if seg and seg[-1][0] == now:
                    seg[-1] = (now, rate)
                elif not seg or seg[-1][1] != rate:
                    seg.append((now, rate))

    net.observer = observe
    for k, (start, _, nbytes, alone) in enumerate(sorted(spans)):
        cap = net.add_link(f"cap{k}", Fraction(nbytes, alone))  # the stream's own rate alone
        sizes.append(nbytes)

        def begin(_: object, k: int = k, cap: Link = cap, nbytes: int = nbytes) -> None:
            ids[net.start(((link, nbytes), (cap, nbytes)), lambda _cycle: None)] = k
            observe(net)  # its first rate (a start observed before its id was known)
        Timeout(env, start).callbacks.append(begin)
    env.run()
    times: list[float] = []
    changes: list[float] = []
    for k, seg in segments.items():
        moved, need = 0.0, float(sizes[k])
        for i, (t, rate) in enumerate(seg):
            if rate <= 0:
                continue
            t_next = seg[i + 1][0] if i + 1 < len(seg) else math.inf
            stop = min(t_next, t + (need - moved) / rate)  # the last byte moves within the last segment
            times += [t, stop]
            changes += [rate, -rate]
            moved += rate * (stop - t)
            if stop < t_next:
                break
    return np.array(times, dtype=np.float64), np.array(changes, dtype=np.float64)


def bandwidth_series(events: Sequence[TraceEvent], region: str, horizon: int, bins: int = _BINS,
                     regions: Mapping[str, Mapping] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Bytes per cycle moved through ``region`` in each of ``bins`` equal spans of ``[0, horizon]``.

    Each transfer streamed over its :func:`stream_interval` and, alone, would have taken ``wait_cycles``
    fewer cycles (the cost of sharing).  Where the trace gives the region's bandwidth, its traffic is replayed
    as the engine shares it: the streams of a moment share the region's bandwidth max-min fairly (a private
    region's per core), each at most the rate it had alone, so the panel never shows more than the region
    delivers; without it, each transfer's bytes are spread evenly over its stream.  A copy within the region
    counts its read and its write.  Returns (bin edges, bytes per cycle), integrated exactly over the bins.
    """
    edges = np.linspace(0.0, float(max(horizon, 1)), bins + 1)
    facts = (regions or {}).get(region, {})
    groups: dict[int | None, list[tuple[int, int, int, int]]] = defaultdict(list)
    for e in events:
        if e.kind in DMA_KINDS and region in (e.src_region, e.dst_region) and e.bytes:
            s0, s1 = stream_interval(e, regions)
            nbytes = e.bytes * (2 if e.src_region == e.dst_region else 1)
            key = None if facts.get("kind", "shared") == "shared" else e.core
            groups[key].append((s0, s1, nbytes, max(s1 - s0 - e.wait_cycles, 1)))
    if not groups:
        return edges, np.zeros(bins)
    bw = facts.get("bandwidth_bytes_per_cycle")
    times_parts, rate_parts = [], []
    for spans in groups.values():
        if bw:
            t, dr = _replayed_rates(spans, bw)
        else:
            arr = np.array(spans, dtype=np.float64)
            rate = arr[:, 2] / (arr[:, 1] - arr[:, 0])
            t = np.concatenate([arr[:, 0], arr[:, 1]])
            dr = np.concatenate([rate, -rate])
        times_parts.append(t)
        rate_parts.append(dr)
    times, dr = np.concatenate(times_parts), np.concatenate(rate_parts)
    order = np.argsort(times, kind="stable")
    times, dr = times[order], dr[order]
    level = np.cumsum(dr)                                    # rate from times[i] on
    moved = np.concatenate([[0.0], np.cumsum(level[:-1] * np.diff(times))])  # bytes moved up to times[i]
    cum = np.interp(edges, times, moved, left=0.0, right=moved[-1])
    return edges, np.diff(cum) / np.diff(edges)


def _rows(trace: Trace) -> list[tuple[int, str]]:
    return tracks(trace.events)


def _draw_tracks(ax, trace: Trace, rows: list[tuple[int, str]], px_per_cycle: float) -> None:
    index = {cu: i for i, cu in enumerate(rows)}
    bars: dict[str, list[list[tuple[int, float]]]] = defaultdict(lambda: [[] for _ in rows])
    waits: list[list[tuple[int, int]]] = [[] for _ in rows]
    min_width = 1.0 / px_per_cycle  # every event at least a pixel wide, so that none vanishes
    for e in trace.events:
        i = index[(e.core, e.unit)]
        bars[e.kind][i].append((e.start, max(e.cycles, min_width)))
        if e.kind in DMA_KINDS and e.wait_cycles and e.wait_start is not None:
            waits[i].append((e.wait_start, e.wait_cycles))
    # Shade every other core's band so the rows of one core read as a group.
    cores = sorted({c for c, _ in rows})
    for k, core in enumerate(cores):
        ys = [i for i, (c, _) in enumerate(rows) if c == core]
        if k % 2 == 0:
            ax.axhspan(min(ys) - 0.5, max(ys) + 0.5, color="#F2F2F2", zorder=0, lw=0)
    for kind in [k for k in KIND_COLOURS if k in bars] + sorted(set(bars) - set(KIND_COLOURS)):
        colour = KIND_COLOURS.get(kind, "#777777")
        for i, spans in enumerate(bars[kind]):
            # Hairline gaps between back-to-back bars wide enough to spare them; a thin bar keeps all its
            # pixels (a white edge would paint over it).
            wide = [sp for sp in spans if sp[1] * px_per_cycle > 4]
            thin = [sp for sp in spans if sp[1] * px_per_cycle <= 4]
            for group, edge in ((wide, "white"), (thin, "none")):
                if group:
                    ax.broken_barh(group, (i - 0.38, 0.76), facecolors=colour, edgecolor=edge, linewidth=0.6,
                                   zorder=2)
    for i, held in enumerate(waits):
        if held:
            ax.broken_barh(held, (i - 0.38, 0.76), facecolors="none", edgecolor="#333333", hatch="////",
                           linewidth=0, zorder=3)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([track_name(c, u) for c, u in rows], fontsize=8)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.tick_params(axis="y", length=0)
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)


def _legend(fig, kinds: set[str], has_wait: bool, y: float) -> None:
    from matplotlib.patches import Patch
    handles = [Patch(facecolor=KIND_COLOURS[k], label=KIND_LABELS[k]) for k in KIND_COLOURS if k in kinds]
    if has_wait:
        handles.append(Patch(facecolor="white", edgecolor="#333333", hatch="////",
                             label="slowed by sharing (cycles lost)"))
    fig.legend(handles=handles, loc="upper left", bbox_to_anchor=(0.005, y), ncol=len(handles), frameon=False,
               fontsize=8, handlelength=1.6, columnspacing=1.4)


def _draw_bandwidth(ax, trace: Trace) -> None:
    regions = trace.metadata.get("regions")
    clock = trace.clock_hz
    names = shared_regions(trace.events, regions)
    heading = "shared regions:"
    if not names and regions:
        # A private-memory (_p) run touches no shared region: show the private memory it streams from.
        touched = {r for e in trace.events if e.kind in DMA_KINDS for r in (e.src_region, e.dst_region) if r}
        names = sorted(r for r in touched if regions.get(r, {}).get("role") != "scratchpad")
        heading = "private regions (per core):"
    scale = clock / 1e9 if clock else 1.0  # bytes/cycle -> GB/s
    unit = "GB/s" if clock else "bytes/cycle"
    peak_top = 0.0
    for k, name in enumerate(names):
        colour = REGION_COLOURS[k % len(REGION_COLOURS)]
        edges, rate = bandwidth_series(trace.events, name, trace.cycles, regions=regions)
        ax.stairs(rate * scale, edges, fill=True, alpha=0.35, color=colour, zorder=2)
        ax.stairs(rate * scale, edges, color=colour, lw=1.0, label=f"{name}", zorder=3)
        bw = (regions or {}).get(name, {}).get("bandwidth_bytes_per_cycle")
        if bw:
            peak = bw * scale
            peak_top = max(peak_top, peak)
            ax.axhline(peak, color=colour, ls="--", lw=0.9, zorder=1)
            ax.annotate(f"{name} peak {peak:.3g} {unit}", xy=(1.0, peak), xycoords=("axes fraction", "data"),
                        xytext=(-4, 3), textcoords="offset points", ha="right", va="bottom", fontsize=7,
                        color=colour, bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8, "pad": 0.8})
    if names:
        # One row above the peak lines, so that the legend never hides the traffic.
        ax.legend(loc="upper left", fontsize=8, frameon=False, ncol=len(names) + 1, borderaxespad=0.2,
                  handlelength=1.4, title=heading, title_fontsize=8, alignment="left")
    else:
        ax.text(0.5, 0.5, "no memory traffic", transform=ax.transAxes, ha="center", va="center",
                color="#777777")
    ax.set_ylabel(f"bandwidth\n({unit})", fontsize=9)
    top = ax.get_ylim()[1]
    ax.set_ylim(0, max(top, peak_top, 1e-9) * 1.32)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)


def gantt_figure(trace: Trace, title: str | None = None, window: tuple[int, int] | None = None,
                 dpi: int = 130):
    """The matplotlib figure of a trace's Gantt chart and bandwidth panel."""
    need("plots", "a Gantt chart", ("matplotlib", "matplotlib.pyplot"))
    import matplotlib
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    rows = _rows(trace)
    height = 1.9 + 0.21 * len(rows) + 1.9
    fig, (ax, bx) = plt.subplots(2, 1, sharex=True, figsize=(FIG_WIDTH_IN, height),
                                 gridspec_kw={"height_ratios": [0.21 * max(len(rows), 1), 1.9], "hspace": 0.08})
    lo, hi = window if window else (0, max(trace.cycles, 1))
    px_per_cycle = plot_px_per_cycle((lo, hi), dpi)
    _draw_tracks(ax, trace, rows, px_per_cycle=px_per_cycle)
    _legend(fig, {e.kind for e in trace.events},
            any(e.wait_cycles and e.kind in DMA_KINDS for e in trace.events), y=1 - 0.32 / height)
    _draw_bandwidth(bx, trace)
    bx.set_xlim(lo, hi)
    bx.set_xlabel("cycles from launch", fontsize=9)
    from matplotlib.ticker import FuncFormatter
    bx.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
    clock = trace.clock_hz
    if clock:
        top = ax.secondary_xaxis("top", functions=(lambda c: c * 1e6 / clock, lambda u: u * clock / 1e6))
        top.set_xlabel("microseconds", fontsize=9)
        top.tick_params(labelsize=8)
    for a in (ax, bx):
        a.tick_params(axis="x", labelsize=8)
        a.grid(axis="x", color="#DDDDDD", lw=0.6, zorder=0)
        a.set_axisbelow(True)
    if title is None:
        us = trace.us(trace.cycles)
        title = (f"{trace.title}: {trace.cycles:,} cycles"
                 + (f" ({us:.2f} µs at {clock / 1e9:g} GHz)" if us is not None and clock else "")
                 + f", {len(trace.cores)} core{'s' if len(trace.cores) != 1 else ''}")
    fig.suptitle(title, fontsize=11, x=0.01, ha="left", y=1 - 0.08 / height, va="top")
    note = merged_note(merged_events(trace.events, (lo, hi), px_per_cycle), px_per_cycle)
    if note:
        fig.text(0.01, 1 - 0.55 / height, note, fontsize=8, color="#8B0000", ha="left", va="top", gid="merged-note")
    fig.subplots_adjust(left=PLOT_LEFT, right=PLOT_RIGHT, top=1 - 1.3 / height, bottom=0.45 / height)
    return fig


def plot_gantt(trace: Trace, path: str | Path, title: str | None = None,
               window: tuple[int, int] | None = None, dpi: int = 130) -> Path:
    """Draw the Gantt chart of ``trace`` into a PNG (or any format matplotlib knows by suffix), atomically."""
    need("plots", "a Gantt chart", ("matplotlib", "matplotlib.pyplot"))
    import matplotlib.pyplot as plt
    from matplotlib.backend_bases import FigureCanvasBase

    fmt = output_path(path).suffix.lstrip(".").lower() or "png"
    formats = FigureCanvasBase.get_supported_filetypes()
    if fmt not in formats:
        raise SimError(f"output {path}: unknown picture format {fmt!r} (use one of: {', '.join(sorted(formats))})")
    fig = gantt_figure(trace, title=title, window=window, dpi=dpi)
    buf = io.BytesIO()
    try:
        save_figure(fig, buf, fmt, dpi)
    finally:
        plt.close(fig)
    return atomic_write_bytes(path, buf.getvalue())
