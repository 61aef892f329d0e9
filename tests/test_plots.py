"""The pictures say what they cannot show: the Gantt chart draws every tile or says how many merge, and the
layout picture zooms on the buffers so that an overlap in a 2 GiB region is visible (issue 11)."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib
import pytest
import yaml

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.collections import PolyCollection  # noqa: E402
from matplotlib.colors import to_rgba  # noqa: E402

from sim.cli import main  # noqa: E402
from sim.engine.events import TraceEvent
from sim.inspect.gantt import (  # noqa: E402
    KIND_COLOURS,
    gantt_figure,
    merged_events,
    plot_px_per_cycle,
)
from sim.inspect.layout_plot import layout_figure, zoom_segments  # noqa: E402
from sim.inspect.trace_tools import Trace  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def back_to_back(n: int, width: int, gap: int = 0, kind: str = "compute", unit: str = "compute") -> list[TraceEvent]:
    return [TraceEvent(0, unit, kind, i * (width + gap), i * (width + gap) + width, tile=i) for i in range(n)]


# --- Gantt chart ------------------------------------------------------------------------------------

def test_merged_events_by_hand():
    px = 0.1  # ten cycles per pixel
    # 1-pixel bars back to back: each after the first merges with the one before it.
    assert merged_events(back_to_back(100, 10), (0, 1000), px) == {"compute": (99, 100)}
    # 5-pixel bars show their boundaries; 1-pixel bars one pixel apart are seen apart.
    assert merged_events(back_to_back(100, 50), (0, 5000), px) == {"compute": (0, 100)}
    assert merged_events(back_to_back(100, 10, gap=10), (0, 2000), px) == {"compute": (0, 100)}
    # Only what lies in the window counts.
    assert merged_events(back_to_back(100, 10), (0, 195), px) == {"compute": (19, 20)}


def _note(fig) -> str | None:
    texts = [t.get_text() for t in fig.texts if t.get_gid() == "merged-note"]
    return texts[0] if texts else None


def test_gantt_says_how_many_ticks_merge_and_zooming_separates_them():
    events = back_to_back(2000, 10)
    trace = Trace(events=tuple(events), metadata={"cycles": 20000})
    fig = gantt_figure(trace, dpi=100)
    try:
        # 13 in x 0.875 x 100 dpi = 1137.5 pixels for 20000 cycles: 10-cycle tiles are 0.57 px wide.
        assert plot_px_per_cycle((0, 20000), 100) == pytest.approx(1137.5 / 20000)
        note = _note(fig)
        assert note is not None and "compute 1,999 of 2,000 events" in note and "--cycles" in note
    finally:
        plt.close(fig)
    fig = gantt_figure(trace, window=(0, 1000), dpi=100)  # 1.1 px per cycle: every tile 11 px wide
    try:
        assert _note(fig) is None
    finally:
        plt.close(fig)


def _bars(fig, colour: str) -> list[PolyCollection]:
    ax = fig.axes[0]
    return [c for c in ax.collections if isinstance(c, PolyCollection) and len(c.get_facecolor())
            and tuple(c.get_facecolor()[0]) == pytest.approx(to_rgba(colour))]


def test_every_tile_is_drawn_at_least_a_pixel_wide_and_not_painted_over():
    # Long DMAs (wide bars, drawn with white hairline edges) beside short computes on the same core.
    dmas = back_to_back(20, 1000, kind="dma_in", unit="dma0")
    computes = [TraceEvent(0, "compute", "compute", 1000 * i + 500, 1000 * i + 503, tile=i) for i in range(20)]
    trace = Trace(events=tuple(dmas + computes), metadata={"cycles": 20000})
    dpi = 100
    fig = gantt_figure(trace, dpi=dpi)
    try:
        px = plot_px_per_cycle((0, 20000), dpi)
        polys = _bars(fig, KIND_COLOURS["compute"])
        widths = [p.vertices[:, 0].max() - p.vertices[:, 0].min() for c in polys for p in c.get_paths()]
        assert len(widths) == 20  # every tile
        assert all(w * px >= 1 - 1e-9 for w in widths)  # 3 cycles = 0.17 px, drawn a pixel wide
        # A bar that thin gets no white edge: the edge would paint over all of it.
        assert all(c.get_edgecolor().size == 0 or c.get_edgecolor()[0][3] == 0 for c in polys)
    finally:
        plt.close(fig)


def test_gantt_of_a_fused_batch_norm_run_names_the_merged_ticks(tmp_path):
    doc = yaml.safe_load((ROOT / "configs" / "mt7004_hp_fused_batch_norm_grad_s.yaml").read_text())
    doc.update(numerics=False, data=[], outputs=[], trace="fbng.json")
    doc["args"]["shape"] = [8, 64, 28, 28]
    doc["args"]["x"] = 0xA4000000
    doc["tiling"] = {"split": "rows", "tile_elements": 256}  # about a thousand tiles per core
    cfg = tmp_path / "fbng.yaml"
    cfg.write_text(yaml.safe_dump(doc, sort_keys=False))
    assert main(["run", str(cfg), "--out-dir", str(tmp_path)]) == 0
    from sim.inspect.trace_tools import load_trace
    trace = load_trace(tmp_path / "fbng.json")
    fig = gantt_figure(trace)
    try:
        n_compute = sum(1 for e in trace.events if e.kind == "compute")
        drawn = sum(len(c.get_paths()) for c in _bars(fig, KIND_COLOURS["compute"]))
        assert drawn == n_compute  # every tile is drawn
        # Hundreds of tiles per core in 1478 pixels: some touch a neighbour, and the chart says how many.
        merged = merged_events(trace.events, (0, trace.cycles), plot_px_per_cycle((0, trace.cycles), 130))
        note = _note(fig)
        assert n_compute > 1000 and note is not None
        assert all(f"{m:,} of {n:,}" in note for m, n in merged.values() if m)
        assert sum(m for m, _ in merged.values()) > 0
    finally:
        plt.close(fig)


# --- layout picture ---------------------------------------------------------------------------------

def test_zoom_segments_group_nearby_buffers():
    reg = {"base": 0, "end": 1 << 31, "buffers": [
        {"start": 0x1000, "end": 0x1400}, {"start": 0x1100, "end": 0x1500},  # an overlap: one cluster
        {"start": 0x1600, "end": 0x1700},  # 0x100 after it: joins (gap below 4 x the cluster's span)
        {"start": 0x10000000, "end": 0x10000400},  # far away: its own segment
    ]}
    assert zoom_segments(reg) == [(0x1000, 0x1700), (0x10000000, 0x10000400)]


def test_an_overlap_in_a_2_gib_region_is_visible(tmp_path, capsys):
    doc = yaml.safe_load((ROOT / "configs" / "ft78ne_batch_norm_grad_s.yaml").read_text())
    doc["args"]["dx"] = 0xA0000100  # overlaps x [0xa0000000, 0xa0000400) by 0x300 bytes
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(yaml.safe_dump(doc))
    assert main(["validate", str(cfg), "--format", "json"]) == 1
    report = json.loads(capsys.readouterr().out)
    fig = layout_figure(report)
    try:
        ax = next(a for a in fig.axes if a.get_label() == "ddr zoom 0")
        lo, hi = ax.get_xlim()
        assert lo <= 0xA0000000 and 0xA0000500 <= hi
        assert 0x300 / (hi - lo) > 0.4  # the overlap takes a good part of the axis, not 1e-7 of 2 GiB
        red = [p for p in ax.patches if p.get_hatch() == "xx"]
        assert len(red) == 1 and red[0].get_x() == 0xA0000100 and red[0].get_width() == 0x300
    finally:
        plt.close(fig)
    pic = tmp_path / "map.png"
    assert main(["validate", str(cfg), "--plot", str(pic)]) == 1
    assert pic.read_bytes().startswith(b"\x89PNG")
