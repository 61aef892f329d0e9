"""Trace inspection: the Chrome/Perfetto trace JSON, reading it back, summary (critical path, stalls), diff,
the Gantt chart, the progress bar, the HTML report (static checks; the browser test is test_report_browser.py)
and their dspsim subcommands."""

from __future__ import annotations

import io
import json
import re
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

import sim
from sim.cli import main
from sim.config.run_config import load_config
from sim.engine.events import TraceEvent
from sim.errors import SimError
from sim.inspect.gantt import bandwidth_series, plot_gantt, stream_interval
from sim.inspect.summary import _union
from sim.inspect.trace import (
    busy_units,
    bytes_in_flight,
    chrome_trace,
    flows,
    track_name,
    tracks,
)
from sim.inspect.trace_tools import (
    Trace,
    TraceFileError,
    critical_path,
    diff_text,
    diff_traces,
    load_trace,
    stalls,
    summarize,
    summary_text,
    trace_of_run,
    unit_busy,
)
from sim.program import load_program
from sim.report.page import report_html, timeline_data
from sim.run.progress import (
    RunProgress,
    execute_with_progress,
    is_terminal,
)
from sim.run.runner import execute

ROOT = Path(__file__).resolve().parent.parent
BN_CONFIG = ROOT / "configs" / "ft78ne_batch_norm_grad_s.yaml"
BATCH, CHANNEL = 64, 1024
X, DY, DX, MEAN, INVAR, SCALE, DBIAS, DSCALE = (0xA0000000, 0xA8000000, 0xB0000000, 0xC0000000, 0xC0100000,
                                                 0xC0200000, 0xC0300000, 0xC0400000)


def bn_run(core_mask: int = 0xFF) -> sim.Run:
    """A BatchNormGrad run with several tiles per core, on FT78NE, DDR-bound enough to queue for ports."""
    m = sim.Simulator("FT78NE")
    rng = np.random.default_rng(7)
    m.write(X, rng.standard_normal((BATCH, CHANNEL)).astype(np.float32))
    m.write(DY, rng.standard_normal((BATCH, CHANNEL)).astype(np.float32))
    for a in (MEAN, INVAR, SCALE):
        m.write(a, rng.uniform(0.5, 1.5, CHANNEL).astype(np.float32))
    return m.call("fp_batch_norm_grad_s", x=X, dy=DY, dx=DX,
                  params=[MEAN, INVAR, SCALE, DBIAS, DSCALE, BATCH, CHANNEL, 1], core_mask=core_mask)


@pytest.fixture(scope="module")
def run8() -> sim.Run:
    return bn_run(0xFF)


@pytest.fixture(scope="module")
def run4() -> sim.Run:
    return bn_run(0x0F)


@pytest.fixture(scope="module")
def trace_file(run8, tmp_path_factory) -> Path:
    return run8.write_trace(tmp_path_factory.mktemp("trace") / "bn.json")


@pytest.fixture(scope="module")
def doc(trace_file) -> dict:
    return json.loads(trace_file.read_text())


def _slices(doc: dict) -> list[dict]:
    return [e for e in doc["traceEvents"] if e["ph"] == "X"]


# -- the trace JSON --------------------------------------------------------------------------------


def test_process_and_tracks_are_named(doc, run8):
    meta = [e for e in doc["traceEvents"] if e["ph"] == "M"]
    procs = [e["args"]["name"] for e in meta if e["name"] == "process_name"]
    assert procs == ["FT78NE · fp_batch_norm_grad_s"]
    threads = {e["tid"]: e["args"]["name"] for e in meta if e["name"] == "thread_name"}
    expected = {f"core {c} · {'DMA ' + u[3:] if u.startswith('dma') else u}" for c, u in
                {(e.core, e.unit) for e in run8.events}}
    assert set(threads.values()) == expected
    assert "core 3 · compute" in expected and "core 3 · DMA 0" in expected and "core 3 · DMA 1" in expected
    for name in threads.values():
        assert re.fullmatch(r"core \d+ · (compute|DMA \d+|sync)", name), name
    for s in _slices(doc):
        assert s["tid"] in threads
        core, unit = s["args"]["core"], s["args"]["unit"]
        assert threads[s["tid"]] == track_name(core, unit)


def test_metadata_carries_the_run(doc, run8):
    md = doc["metadata"]
    assert md["target"] == "FT78NE" and md["symbol"] == "fp_batch_norm_grad_s"
    assert md["cycles"] == run8.cycles and md["clock_hz"] == 1_800_000_000
    assert md["args"]["x"] == f"{X:#x}" and md["args"]["params"][5:] == [BATCH, CHANNEL, 1]
    assert md["regions"]["ddr"]["kind"] == "shared" and md["regions"]["am"]["kind"] == "private"
    run_event = [e for e in doc["traceEvents"] if e["ph"] == "i" and e["name"] == "run"]
    assert len(run_event) == 1 and run_event[0]["args"]["cycles"] == run8.cycles


def test_timestamps_are_exact_and_raw_cycles_are_in_args(doc, run8):
    slices = _slices(doc)
    assert len(slices) == len(run8.events)
    for s in slices:
        a = s["args"]
        assert a["end_cycle"] - a["start_cycle"] == a["cycles"]
        # Microseconds from cycles at 1.8 GHz, to the picosecond.
        assert abs(s["ts"] - a["start_cycle"] / 1800.0) <= 1e-6
        assert abs(s["ts"] + s["dur"] - a["end_cycle"] / 1800.0) <= 2e-6
    by_track = defaultdict(list)
    for s in slices:
        by_track[s["tid"]].append(s)
    for ss in by_track.values():  # back-to-back slices never overlap after rounding
        ss.sort(key=lambda s: s["ts"])
        for p, q in zip(ss, ss[1:]):
            assert p["ts"] + p["dur"] <= q["ts"] + 1e-9


def _enclosing(slices_by_tid: dict, tid: int, ts: float) -> dict:
    inside = [s for s in slices_by_tid[tid] if s["ts"] < ts < s["ts"] + s["dur"]]
    assert len(inside) == 1, (tid, ts, inside)
    return inside[0]


def test_flow_arrows_link_dma_in_compute_dma_out(doc, run8):
    slices_by_tid = defaultdict(list)
    for s in _slices(doc):
        slices_by_tid[s["tid"]].append(s)
    starts = {e["id"]: e for e in doc["traceEvents"] if e["ph"] == "s"}
    finishes = {e["id"]: e for e in doc["traceEvents"] if e["ph"] == "f"}
    assert starts and set(starts) == set(finishes)
    pairs = set()
    for fid, s in starts.items():
        f = finishes[fid]
        assert f["bp"] == "e"
        a = _enclosing(slices_by_tid, s["tid"], s["ts"])
        b = _enclosing(slices_by_tid, f["tid"], f["ts"])
        assert (a["cat"], b["cat"]) in {("dma_in", "compute"), ("compute", "dma_out")}
        assert a["args"]["tile"] == b["args"]["tile"] and a["args"]["core"] == b["args"]["core"]
        assert a["args"]["end_cycle"] <= b["args"]["start_cycle"]
        pairs.add((a["cat"], b["cat"], a["args"]["core"], a["args"]["tile"]))
    # Every compute of a tile with loads gets its arrow in, and one out per DMA-out of its tile.
    computes = [e for e in run8.events if e.kind == "compute"]
    for c in computes:
        assert ("dma_in", "compute", c.core, c.tile) in pairs
    n_out = sum(1 for e in run8.events if e.kind == "dma_out")
    assert sum(1 for s in starts.values() if s["name"] == "result") == n_out


def test_the_arrow_into_a_compute_comes_from_the_dma_in_that_released_it(run8):
    for a, b in flows(run8.events):
        if b.kind == "compute":
            loads = [e for e in run8.events if e.kind == "dma_in" and e.core == b.core and e.tile == b.tile
                     and e.phase == b.phase]
            assert a in loads and a.end == max(e.end for e in loads) <= b.start


def test_counters_bytes_in_flight_and_busy_units(doc, run8):
    counters = defaultdict(list)
    for e in doc["traceEvents"]:
        if e["ph"] == "C":
            counters[e["name"]].append(e)
    assert "ddr" in counters and "am" not in counters  # only shared regions get a bytes-in-flight track
    for core in run8.cores:
        assert f"core {core}" in counters
    dmas = [e for e in run8.events if e.kind in ("dma_in", "dma_out")]
    for c in counters["ddr"]:
        t = round(c["ts"] * 1800)
        truth = sum(e.bytes for e in dmas if e.start <= t < e.end and "ddr" in (e.src_region, e.dst_region))
        assert c["args"]["bytes in flight"] == truth
    assert counters["ddr"][-1]["args"]["bytes in flight"] == 0
    for core in run8.cores:
        for c in counters[f"core {core}"]:
            t = round(c["ts"] * 1800)
            truth = sum(1 for e in run8.events if e.core == core and e.kind in ("compute", "dma_in", "dma_out")
                        and e.start <= t < e.end)
            assert c["args"]["busy units"] == truth
        assert counters[f"core {core}"][-1]["args"]["busy units"] == 0


def test_step_series_by_hand():
    ev = [TraceEvent(0, "dma0", "dma_in", 10, 30, bytes=100, src_region="ddr", dst_region="am"),
          TraceEvent(0, "dma1", "dma_in", 20, 40, bytes=50, src_region="ddr", dst_region="am"),
          TraceEvent(0, "compute", "compute", 40, 50)]
    assert bytes_in_flight(ev, "ddr") == [(10, 100), (20, 150), (30, 50), (40, 0)]
    assert busy_units(ev, 0) == [(10, 1), (20, 2), (30, 1), (50, 0)]


def test_trace_is_deterministic(run8):
    again = bn_run(0xFF)
    md = run8.metadata()
    assert chrome_trace(run8.events, 1_800_000_000, md) == chrome_trace(again.events, 1_800_000_000, again.metadata())


# -- reading traces back -----------------------------------------------------------------------------


def _key(e: TraceEvent):
    return (e.core, e.unit, e.start, e.kind, e.tile if e.tile is not None else -1, e.end)


def test_load_trace_round_trips_every_field(trace_file, run8, tmp_path):
    t = load_trace(trace_file)
    assert sorted(t.events, key=_key) == sorted(run8.events, key=_key)
    assert t.cycles == run8.cycles and t.clock_hz == 1_800_000_000 and t.cores == run8.cores
    csv_path = run8.write_trace(tmp_path / "bn.csv")
    c = load_trace(csv_path)
    assert sorted(c.events, key=_key) == sorted(run8.events, key=_key)
    assert c.clock_hz is None and c.cycles == run8.cycles


def test_load_trace_of_older_traces_uses_thread_names(doc, run8, tmp_path):
    old = json.loads(json.dumps(doc))
    for e in old["traceEvents"]:
        if e["ph"] == "X":
            e["args"].pop("core"), e["args"].pop("unit")
    p = tmp_path / "old.json"
    p.write_text(json.dumps(old))
    assert sorted(load_trace(p).events, key=_key) == sorted(run8.events, key=_key)


@pytest.mark.parametrize("content,msg", [(None, "not found"), ("{nope", "not valid JSON"),
                                         ('{"a": 1}', "not a Chrome trace"),
                                         ('{"traceEvents": []}', "no events"),
                                         ('{"traceEvents": [{"ph": "X", "cat": "compute", "args": {"core": 0}}]}',
                                          "missing 'unit'")])
def test_load_trace_refuses_bad_files(tmp_path, content, msg):
    p = tmp_path / "t.json"
    if content is not None:
        p.write_text(content)
    with pytest.raises(TraceFileError, match=msg) as ei:
        load_trace(p)
    assert str(p) in str(ei.value) and isinstance(ei.value, SimError)


# -- summary: critical path and stalls, by hand ---------------------------------------------------------

# Two cores.  Core 1's DMA-in loses 200 cycles to sharing DDR, so it reaches the barrier last (800);
# the barrier opens 100 cycles later (900); core 0's phase-2 compute then ends the run at 1000.
HAND = [
    TraceEvent(0, "sync", "launch", 0, 100), TraceEvent(1, "sync", "launch", 0, 100),
    TraceEvent(0, "dma0", "dma_in", 100, 300, bytes=4096, src=0xA0000000, dst=0x20000000, src_region="ddr",
               dst_region="am", tile=0, phase="p1", wait_start=164, wait_cycles=0),
    TraceEvent(0, "compute", "compute", 300, 400, tile=0, phase="p1", flops=1000),
    TraceEvent(0, "dma1", "dma_out", 400, 500, bytes=4096, src=0x20000000, dst=0xA1000000, src_region="am",
               dst_region="ddr", tile=0, phase="p1"),
    TraceEvent(0, "sync", "barrier_wait", 500, 900, phase="p1", wait_cycles=400, wait_start=500),
    TraceEvent(1, "dma0", "dma_in", 100, 700, bytes=4096, src=0xA0001000, dst=0x20000000, src_region="ddr",
               dst_region="am", tile=0, phase="p1", wait_start=164, wait_cycles=200),
    TraceEvent(1, "compute", "compute", 700, 800, tile=0, phase="p1", flops=1000),
    TraceEvent(1, "sync", "barrier_wait", 800, 900, phase="p1", wait_cycles=100, wait_start=800),
    TraceEvent(0, "compute", "compute", 900, 1000, tile=0, phase="p2", flops=500),
    TraceEvent(1, "compute", "compute", 900, 950, tile=0, phase="p2", flops=250),
]
HAND_META = {"target": "TOY", "symbol": "fp_toy_s", "cycles": 1000, "clock_hz": 1_000_000_000, "cores": [0, 1],
             "regions": {"ddr": {"kind": "shared", "latency_cycles": 50, "bandwidth_bytes_per_cycle": 32},
                         "am": {"kind": "private", "latency_cycles": 4, "bandwidth_bytes_per_cycle": 128}}}


def test_critical_path_by_hand():
    cp = critical_path(HAND)
    assert cp.core == 0 and cp.end_cycle == 1000
    assert [(s.core, s.kind, s.phase) for s in cp.steps] == [
        (1, "launch", None), (1, "dma_in", "p1"), (1, "compute", "p1"), (1, "barrier_wait", "p1"),
        (0, "compute", "p2")]
    assert cp.idle == 0
    assert cp.cycles_by_kind() == {"launch": 100, "dma_in": 400, "sharing": 200, "compute": 200,
                                   "barrier_wait": 100}
    assert sum(cp.cycles_by_kind().values()) == cp.end_cycle


# A program of two calls, back to back: call "a" ends when core 1's compute does (400); call "b" launches at 420
# (a 20-cycle gap) and ends with core 0's compute at 670.
TWO_CALLS = [
    TraceEvent(0, "sync", "launch", 0, 100, phase="a"), TraceEvent(1, "sync", "launch", 0, 100, phase="a"),
    TraceEvent(0, "compute", "compute", 100, 300, tile=0, phase="a"),
    TraceEvent(1, "compute", "compute", 100, 400, tile=0, phase="a"),
    TraceEvent(0, "sync", "launch", 420, 520, phase="b"), TraceEvent(1, "sync", "launch", 420, 520, phase="b"),
    TraceEvent(0, "compute", "compute", 520, 670, tile=0, phase="b"),
    TraceEvent(1, "compute", "compute", 520, 600, tile=0, phase="b"),
]


def test_critical_path_of_two_calls_by_hand():
    """The walk from call b's last compute reaches b's launch, then goes on from call a's end (core 1's compute)
    back to a's launch: 100 + 300 + 100 + 150 cycles of steps and the 20-cycle gap make the 670."""
    cp = critical_path(TWO_CALLS)
    assert cp.core == 0 and cp.end_cycle == 670
    assert [(s.core, s.kind, s.phase, s.start) for s in cp.steps] == [
        (1, "launch", "a", 0), (1, "compute", "a", 100), (0, "launch", "b", 420), (0, "compute", "b", 520)]
    assert cp.idle == 20
    assert sum(s.cycles for s in cp.steps) + cp.idle == cp.end_cycle
    assert cp.cycles_by_kind() == {"launch": 200, "compute": 450, "idle": 20}


def test_critical_path_of_a_program_trace_covers_every_call(tmp_path, capsys):
    """The shipped ResNet-50 program (14 calls): its trace's critical path adds up to the program's cycles and
    passes every call's launch, at the call's start."""
    program = load_program(ROOT / "configs" / "programs" / "ft78ne_resnet50_bottleneck_bwd.yaml", allow_kernels=True)
    result = sim.Simulator(program.target).run_program(program)
    path = result.write_trace(tmp_path / "p.json")
    cp = critical_path(load_trace(path).events)
    assert cp.end_cycle == result.cycles
    assert sum(s.cycles for s in cp.steps) + cp.idle == cp.end_cycle
    for p, q in zip(cp.steps, cp.steps[1:]):
        assert p.end <= q.start
    launches = [(s.phase, s.start) for s in cp.steps if s.kind == "launch"]
    assert launches == [(c.name, c.start_cycle) for c in result.calls] and len(launches) == 14
    assert main(["trace", "summary", str(path)]) == 0
    assert "events, through its 14 calls back to the first, took:" in capsys.readouterr().out


def test_stalls_by_hand():
    got = [(s.kind, s.core, s.unit, s.start, s.cycles, s.region) for s in stalls(HAND, HAND_META["regions"])]
    assert got == [("data wait", 1, "compute", 100, 600, None),
                   ("barrier", 0, "sync", 500, 400, None),
                   ("data wait", 0, "compute", 100, 200, None),
                   ("sharing", 1, "dma0", 164, 200, "ddr"),
                   ("barrier", 1, "sync", 800, 100, None)]


def test_summary_text_by_hand():
    s = summarize(Trace(events=tuple(HAND), metadata=HAND_META), top=3)
    assert [c.core for c in s.cores] == [0, 1] and len(s.top_stalls) == 3
    assert s.stall_totals == {"data wait": 800, "barrier": 500, "sharing": 200}
    text = summary_text(s)
    assert "TOY · fp_toy_s: 1000 cycles (1.000 us)" in text
    assert "critical path: core 0 finished last, at cycle 1000" in text
    assert "passes through core(s) 1" in text
    assert "core 1 · DMA 0 tile 0: slowed by sharing ddr bandwidth" not in text  # 4th stall, beyond top 3
    assert "core 1 · compute tile 0: idle until its DMA-in landed" in text


def test_critical_path_of_a_real_run_accounts_for_every_cycle(run8):
    cp = critical_path(run8.events)
    last_work = max(e.end for e in run8.events if e.kind in ("dma_in", "compute", "dma_out"))
    assert cp.end_cycle == last_work == run8.cycles
    assert cp.steps[0].kind == "launch" and cp.steps[0].start == 0
    for p, q in zip(cp.steps, cp.steps[1:]):
        assert p.end <= q.start
    assert sum(cp.cycles_by_kind().values()) == cp.end_cycle


def test_summary_of_a_trace_file_matches_the_run(trace_file, run8):
    s = summarize(load_trace(trace_file), top=1000)
    assert list(s.cores) == run8.summaries()
    text = summary_text(s)
    for needle in ("busy%", "ddr bytes", "critical path", "stalls", "slowed by sharing ddr bandwidth"):
        assert needle in text


# -- diff ----------------------------------------------------------------------------------------------


def test_diff_of_8_and_4_cores(run8, run4):
    d = diff_traces(trace_of_run(run8), trace_of_run(run4))
    assert d.total.a == run8.cycles and d.total.b == run4.cycles and d.total.delta == run4.cycles - run8.cycles
    cores = dict(d.cores)
    assert set(cores) == set(range(8))
    for core in range(4, 8):
        assert cores[core][0].b is None and cores[core][0].delta is None
    ends4 = {s.core: s.end_cycle for s in run4.summaries()}
    assert {c: rows[0].b for c, rows in cores.items() if c < 4} == ends4
    ua = {}
    for e in run8.events:
        ua.setdefault(track_name(e.core, e.unit), []).append((e.start, e.end))
    assert {r.label: r.a for r in d.units} == {k: _union(v) for k, v in ua.items()}
    text = diff_text(d)
    assert "cores [0, 1, 2, 3, 4, 5, 6, 7] -> [0, 1, 2, 3]" in text and "args.core_mask 0xff -> 0xf" in text
    assert f"run cycles: A {run8.cycles}, B {run4.cycles}" in text
    assert "per unit (busy cycles):" in text and "core 7 · DMA 0" in text


def test_diff_speed_compares_time_when_clocks_differ():
    """A: 1800 cycles at 1.8 GHz = 1 us; B: 1500 cycles at 1 GHz = 1.5 us.  B has fewer cycles but takes 1.5x as
    long; at the same clock the 1500 cycles make B 1800 / 1500 = 1.2x as fast; with one clock unknown no claim."""
    ev = (TraceEvent(0, "core", "compute", 0, 10),)

    def trace(cycles, clock):
        meta = {"cycles": cycles, "cores": [0], **({"clock_hz": clock} if clock else {})}
        return Trace(events=ev, metadata=meta, source=f"{cycles}@{clock}")

    text = diff_text(diff_traces(trace(1800, 1_800_000_000), trace(1500, 1_000_000_000)))
    assert "run cycles: A 1800, B 1500, change -300 (-16.7%)\n" in text
    assert "as fast" not in text
    assert ("run time (the clocks differ, 1.8 GHz -> 1 GHz, so time, not cycles, compares the speed): "
            "A 1.000 us, B 1.500 us, B takes 1.50x as long") in text
    same = diff_text(diff_traces(trace(1800, 1_000_000_000), trace(1500, 1_000_000_000)))
    assert "run cycles: A 1800, B 1500, change -300 (-16.7%), B is 1.20x as fast" in same and "run time" not in same
    one = diff_text(diff_traces(trace(1800, 1_800_000_000), trace(1500, None)))
    assert "no speed comparison (B's clock is unknown)" in one and "as fast" not in one and "as long" not in one


def test_unit_busy_unions_overlaps():
    ev = [TraceEvent(0, "dma0", "dma_in", 0, 10), TraceEvent(0, "dma0", "dma_in", 5, 20),
          TraceEvent(0, "dma0", "dma_in", 30, 31)]
    assert unit_busy(ev) == {(0, "dma0"): 21}


# -- Gantt chart -----------------------------------------------------------------------------------------


def test_bandwidth_series_by_hand():
    """One transfer: its stream runs from its start (after the setup) to DDR's latency before its end, 80..200;
    without DDR's bandwidth its 1000 bytes spread evenly (8.33 B/cycle, 20 cycles of them in the first bin); with
    it, replayed alone at the rate it had alone (1000 bytes in 120 - 20 = 100 cycles), 80..180."""
    ev = [TraceEvent(0, "dma0", "dma_in", 60, 250, bytes=1000, src_region="ddr", dst_region="am",
                     wait_start=80, wait_cycles=20)]
    regions = {"ddr": {"latency_cycles": 50}, "am": {"latency_cycles": 4}}
    assert stream_interval(ev[0], regions) == (80, 200)
    edges, rate = bandwidth_series(ev, "ddr", 400, bins=4, regions=regions)
    np.testing.assert_allclose(edges, [0, 100, 200, 300, 400])
    np.testing.assert_allclose(rate, [1000 / 120 * 20 / 100, 1000 / 120 * 100 / 100, 0, 0])
    regions["ddr"].update(kind="shared", bandwidth_bytes_per_cycle=32)
    _, rate = bandwidth_series(ev, "ddr", 400, bins=4, regions=regions)
    np.testing.assert_allclose(rate, [2, 8, 0, 0])


def test_bandwidth_series_replays_the_sharing():
    """Two streams from cycle 0 on a 20 B/cycle region, each alone at 20 B/cycle: A (1000 bytes) shares it, 10
    B/cycle, until 100; B (3000 bytes) has moved 1000 by then and its 2000 left go at 20 B/cycle until 200.  The
    trace says so (streams 0..100 and 0..200, each 50 cycles lost to sharing); the panel shows the region at
    20 B/cycle throughout, where spreading each transfer evenly would show 25 then 15."""
    ev = [TraceEvent(0, "dma0", "dma_in", 0, 100, bytes=1000, src_region="ddr", dst_region="am", wait_start=0,
                     wait_cycles=50),
          TraceEvent(1, "dma0", "dma_in", 0, 200, bytes=3000, src_region="ddr", dst_region="am", wait_start=0,
                     wait_cycles=50)]
    regions = {"ddr": {"kind": "shared", "latency_cycles": 0, "bandwidth_bytes_per_cycle": 20},
               "am": {"kind": "private", "latency_cycles": 0, "bandwidth_bytes_per_cycle": 128}}
    _, rate = bandwidth_series(ev, "ddr", 200, bins=2, regions=regions)
    np.testing.assert_allclose(rate, [20, 20])
    _, rate = bandwidth_series(ev, "ddr", 200, bins=2, regions={k: {"latency_cycles": 0} for k in regions})
    np.testing.assert_allclose(rate, [25, 15])


def test_bandwidth_series_conserves_bytes(run8):
    regions = run8.metadata()["regions"]
    edges, rate = bandwidth_series(run8.events, "ddr", run8.cycles, regions=regions)
    total = sum(e.bytes for e in run8.events if e.kind in ("dma_in", "dma_out") and "ddr" in
                (e.src_region, e.dst_region))
    assert float(np.sum(rate * np.diff(edges))) == pytest.approx(total, rel=1e-9)
    # Replayed as the engine shares it, DDR never delivers more than its bandwidth.
    assert rate.max() <= regions["ddr"]["bandwidth_bytes_per_cycle"] * (1 + 1e-9)


def _png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")


def test_plot_gantt_writes_a_png(trace_file, tmp_path):
    out = plot_gantt(load_trace(trace_file), tmp_path / "g.png")
    w, h = _png_size(out)
    assert w > 1000 and h > 600
    assert [p.name for p in tmp_path.iterdir()] == ["g.png"]  # written atomically: no temporary left


def test_plot_gantt_hand_trace_and_window(tmp_path):
    t = Trace(events=tuple(HAND), metadata=HAND_META)
    w, h = _png_size(plot_gantt(t, tmp_path / "hand.png", window=(0, 500)))
    assert w > 1000 and h > 300


def test_plot_gantt_into_an_impossible_place_fails_cleanly(trace_file, tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(SimError, match="cannot create"):
        plot_gantt(load_trace(trace_file), tmp_path / "file" / "g.png")


# -- progress ------------------------------------------------------------------------------------------


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bar_shows_tiles_and_cycles_on_a_terminal():
    out = _Tty()
    with RunProgress(total=5, stream=out, delay=0, mininterval=0) as bar:
        for i in range(5):
            bar(1, 1000 * (i + 1))
    text = out.getvalue()
    assert "5/5" in text and "cycle 5,000" in text and "tile" in text


def test_progress_is_silent_off_a_terminal_and_before_a_second():
    assert not is_terminal(io.StringIO()) and is_terminal(_Tty())
    out = _Tty()
    with RunProgress(total=3, stream=out) as bar:  # the default delay: a quick run shows nothing
        bar(3, 10)
    assert out.getvalue() == ""
    quiet = io.StringIO()
    cfg = load_config(BN_CONFIG)
    _, run = execute_with_progress(cfg, stream=quiet, delay=0)
    assert quiet.getvalue() == ""
    assert run.cycles == execute(cfg)[1].cycles


def test_progress_of_a_run_counts_every_tile():
    cfg = load_config(BN_CONFIG)
    out = _Tty()
    _, run = execute_with_progress(cfg, stream=out, delay=0, mininterval=0)
    n = run.plan.tile_count
    last = max(e.end for e in run.events if e.kind == "compute")
    assert n > 0 and f"{n}/{n}" in out.getvalue() and f"cycle {last:,}" in out.getvalue()


# -- report (static) -------------------------------------------------------------------------------------


def test_report_is_self_contained_and_deterministic(run8):
    page = report_html(run8)
    assert page == report_html(run8)
    assert "Content-Security-Policy" in page and "default-src 'none'" in page
    for bad in re.findall(r"""(?:src|href)\s*=\s*["']?([^"' >]+)""", page):
        assert not re.match(r"(https?:)?//", bad), bad
    assert "<link" not in page and "@import" not in page
    data = json.loads(re.search(r'<script type="application/json" id="run-data">(.*?)</script>', page,
                                re.S).group(1))
    assert [t["label"] for t in data["tracks"]] == [track_name(c, u) for c, u in tracks(run8.events)]
    assert len(data["events"]) == len(run8.events) and data["cycles"] == run8.cycles
    for section in ("summary-table", "stalls-table", "roofline", "layout-table", "Critical path"):
        assert section in page
    assert timeline_data(run8)["clock_hz"] == 1_800_000_000


# -- the dspsim subcommands -------------------------------------------------------------------------------


def test_cli_trace_commands(trace_file, run4, tmp_path, capsys):
    b = run4.write_trace(tmp_path / "b.json")
    assert main(["trace", "summary", str(trace_file), "--top", "2"]) == 0
    out = capsys.readouterr().out
    assert "critical path: core" in out and "top 2 stalls" in out
    assert main(["trace", "diff", str(trace_file), str(b)]) == 0
    assert "per core (cycles):" in capsys.readouterr().out
    png = tmp_path / "g.png"
    assert main(["trace", "plot", str(trace_file), "-o", str(png), "--cycles", "0:20000", "--dpi", "60"]) == 0
    assert png.exists() and _png_size(png)[0] > 500
    assert main(["trace", "plot", str(trace_file), "--cycles", "9:3"]) == 2
    assert "--cycles" in capsys.readouterr().err
    assert main(["trace", "summary", str(tmp_path / "missing.json")]) == 2
    assert "trace file not found" in capsys.readouterr().err


@pytest.mark.parametrize("argv,option", [
    (["trace", "plot", "{trace}", "--dpi", "0"], "--dpi"),
    (["trace", "plot", "{trace}", "--dpi", "100000"], "--dpi"),
    (["trace", "summary", "{trace}", "--top", "-1"], "--top"),
    (["sweep", "{trace}", "--workers", "0"], "--workers"),
])
def test_counts_out_of_range_are_usage_errors_naming_the_option(trace_file, argv, option, capsys):
    """A resolution of 0 failed deep inside matplotlib (one of 100,000 ran out of memory); a negative count of
    stalls or workers ran as something else: each is refused before anything runs, naming the option (exit 2)."""
    with pytest.raises(SystemExit) as e:
        main([a.replace("{trace}", str(trace_file)) for a in argv])
    assert e.value.code == 2 and f"argument {option}: expected an integer" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["../escape.json", "/tmp/abs.json", "sub/g.json", ".hidden.json"])
def test_run_trace_is_a_file_name_under_the_out_dir(tmp_path, name, capsys):
    """`dspsim run --trace` takes a file name, as a run-config's trace key does (docs/run-config.md): a path that
    would put the trace elsewhere than the out dir is a usage error naming the option, and nothing is written."""
    config = Path(__file__).resolve().parent.parent / "configs" / "ft78ne_batch_norm_grad_s.yaml"
    with pytest.raises(SystemExit) as e:
        main(["run", str(config), "--out-dir", str(tmp_path / "o"), "--trace", name])
    assert e.value.code == 2 and "argument --trace: expected a file name" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_running_a_sweep_file_as_a_config_says_to_sweep_it(tmp_path, capsys):
    sweep = sorted((Path(__file__).resolve().parent.parent / "configs" / "sweeps").glob("*.yaml"))[0]
    assert main(["run", str(sweep), "--out-dir", str(tmp_path / "o")]) == 2
    assert "a sweep file (it has configs and grid), not a run-config: run it with dspsim sweep" in \
        capsys.readouterr().err


def test_a_trace_named_as_an_output_is_refused_before_the_run(tmp_path, capsys):
    """The trace would be written over the output's .npy (or the other way round): refused, nothing written."""
    config = Path(__file__).resolve().parent.parent / "configs" / "ft78ne_batch_norm_grad_s.yaml"
    for argv in (["--trace", "ft78ne_batch_norm_grad_s.dx.npy"], ["--trace", "ft78ne_batch_norm_grad_s.dx.npy",
                                                                  "--csv"]):
        assert main(["run", str(config), "--out-dir", str(tmp_path / "o"), *argv]) == 2
        assert "would be written over output 'dx'" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_a_switch_set_to_neither_on_nor_off_stops_every_command(tmp_path, capsys, monkeypatch):
    """Checked before any work, once: a sweep's points would each fail on it."""
    from sim.sweep import load_sweep
    config = Path(__file__).resolve().parent.parent / "configs" / "ft78ne_batch_norm_grad_s.yaml"
    for name in ("DSPSIM_NO_CACHE", "DSPSIM_NO_STEADY", "DSPSIM_ALLOW_KERNELS"):
        monkeypatch.setenv(name, "garbage")
        assert main(["run", str(config), "--out-dir", str(tmp_path / "o")]) == 2
        assert f"environment variable {name}='garbage'" in capsys.readouterr().err
        monkeypatch.delenv(name)
    monkeypatch.setenv("DSPSIM_NO_CACHE", "garbage")
    sweep = sorted((Path(__file__).resolve().parent.parent / "configs" / "sweeps").glob("*.yaml"))[0]
    with pytest.raises(sim.ConfigError, match="DSPSIM_NO_CACHE='garbage'"):
        load_sweep(sweep)
    assert not (tmp_path / "o").exists()


def test_an_out_dir_that_is_a_file_is_named_so(tmp_path, capsys):
    config = Path(__file__).resolve().parent.parent / "configs" / "ft78ne_batch_norm_grad_s.yaml"
    (tmp_path / "afile").write_text("")
    assert main(["run", str(config), "--out-dir", str(tmp_path / "afile" / "sub")]) == 2
    assert f"cannot create: {tmp_path / 'afile'} is a file, not a folder" in capsys.readouterr().err


@pytest.mark.parametrize("suffix", [".svg", ".pdf"])
def test_a_chart_drawn_twice_is_the_same_file(trace_file, tmp_path, suffix):
    """SVG and PDF charts carry no date and no random ids: the same trace drawn twice gives the same bytes."""
    a, b = tmp_path / f"a{suffix}", tmp_path / f"b{suffix}"
    assert main(["trace", "plot", str(trace_file), "-o", str(a)]) == 0
    assert main(["trace", "plot", str(trace_file), "-o", str(b)]) == 0
    assert a.read_bytes() == b.read_bytes()


def test_cli_report(tmp_path, capsys):
    out = tmp_path / "r.html"
    assert main(["report", str(BN_CONFIG), "-o", str(out)]) == 0
    assert f"report: {out}" in capsys.readouterr().out
    assert out.read_text().startswith("<!DOCTYPE html>")


def test_plot_of_a_private_run_shows_its_private_memory(tmp_path):
    ev = (TraceEvent(0, "sync", "launch", 0, 100),
          TraceEvent(0, "dma0", "dma_in", 100, 400, bytes=4096, src_region="l2", dst_region="am", tile=0,
                     wait_start=164, wait_cycles=0),
          TraceEvent(0, "compute", "compute", 400, 500, tile=0))
    meta = {"target": "TOY", "symbol": "fp_toy_p", "cycles": 500, "clock_hz": 10**9, "cores": [0],
            "regions": {"l2": {"kind": "private", "role": "storage", "latency_cycles": 24,
                               "bandwidth_bytes_per_cycle": 32},
                        "am": {"kind": "private", "role": "scratchpad", "latency_cycles": 4,
                               "bandwidth_bytes_per_cycle": 128}}}
    assert _png_size(plot_gantt(Trace(events=ev, metadata=meta), tmp_path / "p.png"))[0] > 1000


def test_no_barrier_after_the_last_phase_with_work():
    """BatchNormGrad of one row of 605 channels (inference) on MT7004 cores 0, 1 and 3, forced to split rows: core
    0 gets every tile, the reduce phase after them is empty, and the cores met at a barrier before it: the run ended
    a barrier's latency (the target's 120 cycles) after its last store, and the critical path (which ends at the
    last work) did not add up to the run's cycles (an outside test's finding). No barrier follows the last phase
    with work now: the run ends when its last store lands."""
    from sim.inspect import trace_tools
    m = sim.Simulator("MT7004", tuning_cache=False)
    a = [0x80000000 + k * (64 << 20) for k in range(8)]
    run = m.call("fp_batch_norm_grad_s", numerics=False, x=a[0], dy=a[1], dx=a[2],
                 params=[a[3], a[4], a[5], a[6], a[7], 1, 605, 0], core_mask=0b1011,
                 tiling={"split": "rows", "tile_elements": 38})
    assert [any(p.tiles.values()) for p in run.plan.phases] == [True, False] and run.plan.phases[0].barrier_after
    assert run.plan.barriers() == (False, False)
    assert not any(e.kind == "barrier_wait" for e in run.events)
    assert run.cycles == max(e.end for e in run.events if e.kind in ("compute", "dma_in", "dma_out"))
    critical = trace_tools.summarize(trace_tools.trace_of_run(run)).critical
    assert critical.end_cycle == run.cycles == sum(s.end - s.start for s in critical.steps) + critical.idle
