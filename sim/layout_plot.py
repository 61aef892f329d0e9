"""The memory-map picture of ``dspsim validate --plot``: regions and buffers to scale.

One row per region that holds buffers: the region's whole address range on a linear axis, its
buffers drawn at their true addresses (inputs blue, outputs orange, broken rules outlined red;
a buffer too small to see gets a minimum visible width and its label), the reserved workspace
hatched.  Buffer sizes span many decades (a 256-byte vector beside a 2 GiB region), so a last
panel shows every buffer's size on a log axis.  Drawn with matplotlib's Agg backend (no display)
and written atomically.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sim.atomic import atomic_write
from sim.errors import SimError

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


def _region_row(ax: Any, reg: dict, bad: set[str]) -> None:
    from matplotlib.patches import Rectangle

    base, end = reg["base"], reg["end"]
    span = end - base
    items = sorted(reg["buffers"], key=lambda r: (r["start"], r["buffer"]))
    lanes = _lanes(items)
    n_lanes = max(lanes, default=0) + 1
    ax.add_patch(Rectangle((base, 0), span, n_lanes, facecolor="#EEEEEE", edgecolor="#888888"))
    for w in reg.get("reserved", []):
        ax.add_patch(Rectangle((w["start"], 0), w["end"] - w["start"], n_lanes, facecolor="none",
                               edgecolor="#999999", hatch="///", linewidth=0.5))
        ax.text(w["start"], -0.05, "workspace", fontsize=6, color="#666666", va="top")
    last_x, bump = None, 0
    for it, lane in zip(items, lanes):
        width = max(it["end"] - it["start"], span * MIN_VISIBLE)
        x = it["start"] + width / 2
        # Neighbours closer than 3% of the region would print their names on top of each other.
        bump = (bump + 1) % 3 if last_x is not None and x - last_x < span * 0.03 else 0
        last_x = x
        broken = it["buffer"] in bad
        ax.add_patch(Rectangle((it["start"], lane + 0.1), width, 0.8,
                               facecolor=ROLE_COLOURS.get(it["role"], "#54A24B"),
                               edgecolor="#D62728" if broken else "black", linewidth=2 if broken else 0.5))
        # Labels sit above the bars: most buffers are far too thin to hold their name.
        ax.text(x, n_lanes + 0.1 + 0.45 * bump, it["buffer"], fontsize=6, ha="left", va="bottom",
                rotation=45, color="#D62728" if broken else "black")
    owner = f", core {reg['core']}" if reg.get("core") is not None else ""
    ax.set_title(f"{reg['name']} ({reg['kind']}{owner}) [{base:#x}, {end:#x})", fontsize=8, loc="left")
    ax.set_xlim(base, end + span * MIN_VISIBLE)
    ax.set_ylim(-0.4, n_lanes + 2.4)
    ax.set_yticks([])
    _hex_ticks(ax, base, end)


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


def plot_layout(report: dict, path: str | Path) -> Path:
    """Draw ``report`` (from :func:`sim.layout.layout_report`) to ``path`` (.png, .svg or .pdf), atomically."""
    p = Path(path)
    fmt = FORMATS.get(p.suffix.lower())
    if fmt is None:
        raise SimError(f"--plot {p}: unknown picture format {p.suffix or '(none)'!r} "
                       f"(use {', '.join(FORMATS)})")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise SimError("--plot needs matplotlib (pip install matplotlib)") from None

    bad = {v["buffer"] for v in report["violations"]}
    regions = report["regions"]
    n = len(regions) + 1
    n_rows = len(report["unmapped"]) + sum(len(r["buffers"]) for r in regions)
    fig, axes = plt.subplots(n, 1, figsize=(9, 1.8 * len(regions) + 0.25 * n_rows + 1.5), squeeze=False,
                             gridspec_kw={"height_ratios": [1.8] * len(regions) + [max(1.0, 0.25 * n_rows)]})
    try:
        for ax, reg in zip(axes[:, 0], regions):
            _region_row(ax, reg, bad)
        _sizes_panel(axes[-1, 0], report, bad)
        status = "layout OK" if report["ok"] else f"{len(report['violations'])} violation(s)"
        fig.suptitle(f"{report['symbol']} on {report['target']}: {status}", fontsize=9)
        fig.tight_layout()
        atomic_write(p, lambda tmp: fig.savefig(tmp, format=fmt, dpi=120))
    finally:
        plt.close(fig)
    return p
