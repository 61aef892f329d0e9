"""The memory-map picture of ``dspsim validate --plot``: regions and buffers, zoomed to where they are.

Per region that holds buffers, two rows: an overview of the region's whole address range (to scale, the
zoomed spans shaded), and below it a broken axis that zooms on the buffers: the buffers are grouped into
clusters of nearby addresses (:func:`zoom_segments`), and each cluster gets a segment of the axis scaled to
its own span, so that a 768-byte overlap in a 2 GiB region is as visible as the buffers themselves.
Inputs are blue, outputs orange, buffers breaking a rule outlined red; overlapping buffers stack in lanes.
The shared staging windows the kernels own (the workspace) are hatched.  Buffer sizes span many decades,
so a last panel shows every buffer's size on a log axis.  Drawn with matplotlib's Agg backend (no display)
and written atomically.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sim.errors import SimError
from sim.extras import need
from sim.files.atomic import atomic_write
from sim.inspect.pictures import save_figure

#: Output formats by file suffix.
FORMATS = {".png": "png", ".svg": "svg", ".pdf": "pdf"}
#: A buffer narrower than this fraction of its region is widened to it so that it can be seen.
MIN_VISIBLE = 0.004
ROLE_COLOURS = {"input": "#4C78A8", "output": "#F58518"}


def _lanes(items: list[dict]) -> list[int]:
    """A lane per buffer so that overlapping buffers stack instead of hiding each other."""
    ends: list[int] = []
    lanes = []
    for it in items:
        for i, end in enumerate(ends):
            if it["start"] >= end:
                ends[i] = it["end"]
                lanes.append(i)
                break
        else:
            ends.append(it["end"])
            lanes.append(len(ends) - 1)
    return lanes


def _hex_ticks(ax: Any, base: int, end: int) -> None:
    ticks = [base + (end - base) * k // 4 for k in range(5)]
    ax.set_xticks(ticks)
    ax.set_xticklabels([f"{t:#x}" for t in ticks], fontsize=7)


#: At most this many segments in a region's zoomed row (the closest clusters merge beyond it).
MAX_SEGMENTS = 8
#: A buffer joins the cluster before it when the gap between them is at most this many times the larger of the
#: two spans (the cluster's and the buffer's).
JOIN_FACTOR = 4


def zoom_segments(reg: dict) -> list[tuple[int, int]]:
    """The address spans of a region's zoomed row: one per cluster of nearby buffers, from the first byte of
    its first buffer to the end of its last (drawn with a 5% margin on each side)."""
    items = sorted((b["start"], max(b["end"], b["start"] + 1)) for b in reg["buffers"])
    clusters: list[list[int]] = []
    for lo, hi in items:
        if clusters:
            c = clusters[-1]
            if lo - c[1] <= JOIN_FACTOR * max(c[1] - c[0], hi - lo):
                c[1] = max(c[1], hi)
                continue
        clusters.append([lo, hi])
    while len(clusters) > MAX_SEGMENTS:
        # Merge the two neighbours whose gap is smallest against their spans.
        k = min(range(len(clusters) - 1), key=lambda i: (clusters[i + 1][0] - clusters[i][1])
                / max(clusters[i + 1][1] - clusters[i][0], 1))
        clusters[k:k + 2] = [[clusters[k][0], max(clusters[k][1], clusters[k + 1][1])]]
    return [(lo, hi) for lo, hi in clusters]


def _span_words(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.3g} {unit}"
    return f"{n} B"


def _draw_buffers(ax: Any, reg: dict, bad: set[str], lo: int, hi: int, labels: bool) -> None:
    """The region's buffers (and shared staging windows) that fall in ``[lo, hi)``, each at least visible."""
    from matplotlib.patches import Rectangle

    span = hi - lo
    items = sorted(reg["buffers"], key=lambda r: (r["start"], r["buffer"]))
    lanes = _lanes(items)
    n_lanes = max(lanes, default=0) + 1
    ax.add_patch(Rectangle((max(reg["base"], lo), 0), min(reg["end"], hi) - max(reg["base"], lo), n_lanes,
                           facecolor="#EEEEEE", edgecolor="#888888"))
    for w in reg.get("reserved", []):
        if w["end"] > lo and w["start"] < hi:
            ax.add_patch(Rectangle((w["start"], 0), w["end"] - w["start"], n_lanes, facecolor="none",
                                   edgecolor="#999999", hatch="///", linewidth=0.5))
            ax.text(max(w["start"], lo), -0.05, w["name"], fontsize=6, color="#666666", va="top")
    last_x, bump = None, 0
    for it, lane in zip(items, lanes):
        if it["end"] <= lo or it["start"] >= hi:
            continue
        width = max(it["end"] - it["start"], span * MIN_VISIBLE)
        broken = it["buffer"] in bad
        ax.add_patch(Rectangle((it["start"], lane + 0.1), width, 0.8,
                               facecolor=ROLE_COLOURS.get(it["role"], "#54A24B"), alpha=0.85,
                               edgecolor="#D62728" if broken else "black", linewidth=2 if broken else 0.5))
        if labels:
            x = max(it["start"], lo)
            # Neighbours closer than 3% of the axis would print their names on top of each other.
            bump = (bump + 1) % 3 if last_x is not None and x - last_x < span * 0.03 else 0
            last_x = x
            # Labels sit above the bars: a buffer may be far too thin to hold its name.
            ax.text(x, n_lanes + 0.1 + 0.45 * bump, it["buffer"], fontsize=6, ha="left", va="bottom",
                    rotation=30, color="#D62728" if broken else "black")
    # The bytes an output shares with another buffer, across the lanes: what a no-overlap violation is about (not
    # in a region whose buffers may share bytes: a program's tensors of disjoint lifetimes).
    for i, a in enumerate([] if reg.get("shares_bytes") else items):
        for b in items[i + 1:]:
            if b["start"] >= a["end"]:
                break
            s0, s1 = max(a["start"], b["start"], lo), min(a["end"], b["end"], hi)
            if s1 > s0 and "output" in (a["role"], b["role"]):
                ax.add_patch(Rectangle((s0, 0), max(s1 - s0, span * MIN_VISIBLE), n_lanes, facecolor="#D62728",
                                       alpha=0.25, edgecolor="#D62728", hatch="xx", linewidth=0.5, zorder=3))
    ax.set_ylim(-0.4, n_lanes + (2.4 if labels else 0.4))
    ax.set_yticks([])


def _region_rows(fig: Any, spec: Any, reg: dict, bad: set[str]) -> list[Any]:
    """The overview and the zoomed (broken-axis) row of one region; returns the zoomed axes."""
    base, end = reg["base"], reg["end"]
    segments = zoom_segments(reg)
    sub = spec.subgridspec(2, len(segments), height_ratios=[0.55, 1.6], hspace=0.55, wspace=0.1)
    over = fig.add_subplot(sub[0, :])
    _draw_buffers(over, reg, bad, base, end, labels=False)
    for lo, hi in segments:
        over.axvspan(lo, max(hi, lo + (end - base) * MIN_VISIBLE), color="#FFD54F", alpha=0.6, zorder=0)
    over.set_xlim(base, end + (end - base) * MIN_VISIBLE)
    _hex_ticks(over, base, end)
    owner = f", core {reg['core']}" if reg.get("core") is not None else ""
    over.set_title(f"{reg['name']} ({reg['kind']}{owner}) [{base:#x}, {end:#x}): whole region (zoomed spans "
                   f"shaded), and below, each cluster of buffers at its own scale", fontsize=8, loc="left")
    zoomed = []
    for k, (first, last) in enumerate(segments):
        ax = fig.add_subplot(sub[1, k])
        pad = max((last - first) // 20, 1)
        lo, hi = first - pad, last + pad
        _draw_buffers(ax, reg, bad, lo, hi, labels=True)
        ax.set_xlim(lo, hi)
        ax.set_xticks([first, last])
        ax.set_xticklabels([])
        # One label per segment: neighbouring segments' end and start addresses would collide.
        ax.set_xlabel(f"{first:#x}\n+{_span_words(last - first)}", fontsize=6, labelpad=2)
        ax.set_label(f"{reg['name']} zoom {k}")
        for side in ("left", "right", "top"):
            ax.spines[side].set_visible(False)
        if k:  # the break mark between two segments of the axis
            ax.plot((-0.06, 0.0), (-0.04, 0.04), transform=ax.transAxes, color="black", clip_on=False, lw=0.8)
        zoomed.append(ax)
    return zoomed


def _sizes_panel(ax: Any, report: dict, bad: set[str]) -> None:
    rows = [b for reg in report["regions"] for b in reg["buffers"]] + list(report["unmapped"])
    rows = [r for r in rows if r["size_bytes"] > 0]
    names = [f"{r['buffer']} ({r['region'] or 'unmapped'})" for r in rows]
    sizes = [r["size_bytes"] for r in rows]
    colours = [ROLE_COLOURS.get(r["role"], "#54A24B") for r in rows]
    edges = ["#D62728" if r["buffer"] in bad else "black" for r in rows]
    ax.barh(range(len(rows)), sizes, color=colours, edgecolor=edges)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(names, fontsize=6)
    ax.invert_yaxis()
    ax.set_xscale("log")
    # Region sizes as reference lines: how much of each region a buffer takes, across decades.
    for reg in report["regions"]:
        ax.axvline(reg["size_bytes"], color="#888888", linestyle="--", linewidth=0.8)
        ax.text(reg["size_bytes"], -0.6, f" {reg['name']}", fontsize=6, color="#666666", va="bottom")
    top = max(sizes + [reg["size_bytes"] for reg in report["regions"]], default=2)
    ax.set_xlim(1, top * 4)
    ax.set_xlabel("size in bytes (log scale); dashed: region sizes", fontsize=7)
    ax.tick_params(axis="x", labelsize=7)


def layout_figure(report: dict) -> Any:
    """The matplotlib figure of ``report`` (from :func:`sim.model.layout.layout_report`): per region an overview and
    a zoomed broken-axis row, then the sizes panel."""
    need("plots", "a layout picture", ("matplotlib", "matplotlib.pyplot"))
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bad = {v["buffer"] for v in report["violations"]}
    regions = report["regions"]
    n_rows = len(report["unmapped"]) + sum(len(r["buffers"]) for r in regions)
    size_h = max(1.0, 0.25 * n_rows)
    fig = plt.figure(figsize=(10, 2.6 * len(regions) + size_h + 1.5))
    grid = fig.add_gridspec(len(regions) + 1, 1, height_ratios=[2.6] * len(regions) + [size_h], hspace=0.45)
    for i, reg in enumerate(regions):
        _region_rows(fig, grid[i], reg, bad)
    _sizes_panel(fig.add_subplot(grid[-1]), report, bad)
    status = "layout OK" if not report["violations"] else f"{len(report['violations'])} layout violation(s)"
    errors = len(report.get("errors", ()))
    if errors:
        status += f", {errors} error(s) in the config's entries"
    fig.suptitle(f"{report['symbol']} on {report['target']}: {status}", fontsize=9)
    fig.subplots_adjust(left=0.15, right=0.98, top=1 - 0.75 / fig.get_figheight(), bottom=0.6 / fig.get_figheight())
    return fig


def picture_format(path: str | Path) -> str:
    """The picture format ``path``'s suffix names, once the ``plots`` extra is known to be installed: what
    ``--plot`` checks before any work (a SimError naming the option for an unknown suffix, :class:`MissingExtra`
    without matplotlib)."""
    p = Path(path)
    fmt = FORMATS.get(p.suffix.lower())
    if fmt is None:
        raise SimError(f"--plot {p}: unknown picture format {p.suffix or '(none)'!r} "
                       f"(use {', '.join(FORMATS)})")
    need("plots", "--plot", ("matplotlib", "matplotlib.pyplot"))
    return fmt


def plot_layout(report: dict, path: str | Path) -> Path:
    """Draw ``report`` (from :func:`sim.model.layout.layout_report`) to ``path`` (.png, .svg or .pdf), atomically."""
    p = Path(path)
    fmt = picture_format(p)
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = layout_figure(report)
    try:
        atomic_write(p, lambda tmp: save_figure(fig, tmp, fmt, 120))
    finally:
        plt.close(fig)
    return p
