"""Reported numbers must not mislead (issue 11): the bound on a calibrated chip, timing-only runs, the
per-core table's columns, what an hp_ run computes in, trace diff's setup, trace metadata."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import yaml

import kernels
from sim.cli import main
from sim.config.run_config import load_config
from sim.engine.events import TraceEvent
from sim.inspect.summary import core_summaries, summary_table
from sim.inspect.trace_tools import diff_text, diff_traces, load_trace
from sim.model.target_loader import parse_target
from sim.run.runner import execute
from sim.timing import roofline

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "configs"
CONV = CONFIGS / "ft78ne_conv2d_backprop_filter_s.yaml"


# --- the roofline on a calibrated chip --------------------------------------------------------------

def calibrated_copy(tmp_path: Path, fmac_units: int, ddr_scale: float) -> Path:
    """FT78NE as a what-if would leave it: fewer FMAC units (slower inner loops) and a slower DDR, renamed."""
    doc = yaml.safe_load((ROOT / "targets" / "FT78NE.yaml").read_text())
    doc["name"] = "FT78NE-calibrated"
    doc["core"]["units"]["fmac"]["count"] = fmac_units
    ddr = next(r for r in doc["regions"] if r["name"] == "ddr")
    ddr["bandwidth_bytes_per_cycle"] *= ddr_scale
    p = tmp_path / "ft78ne_calibrated.yaml"
    p.write_text(yaml.safe_dump(doc, sort_keys=False))
    return p


@pytest.fixture(scope="module")
def calibrated_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cal")
    chip = calibrated_copy(tmp, fmac_units=1, ddr_scale=0.5)
    doc = yaml.safe_load(CONV.read_text())
    doc["target"] = str(chip)
    doc["numerics"] = False
    p = tmp / "conv.yaml"
    p.write_text(yaml.safe_dump(doc, sort_keys=False))
    return execute(load_config(p))[1]


def test_compute_bound_uses_the_targets_fmac_units(calibrated_run, tmp_path):
    run = calibrated_run
    # By hand: the copy has one FMAC unit, which issues one FMAC a cycle. A tile's loops need at least
    # trips x entries x (their bodies' FMAC issues) cycles on it, and a core runs its tiles one after another.
    # The flops are what the trace's compute events did.
    flops = sum(e.flops for e in run.events if e.kind == "compute")
    assert run.roofline.total_flops == flops
    fmac_cycles = {c: 0 for c in run.cores}
    for ph in run.plan.phases:
        for core, tiles in ph.tiles.items():
            for t in tiles:
                if t.compute is None:
                    continue
                fmac_cycles[core] += sum(lp.trips * lp.entries * lp.issues.get("fmac", 0) for lp in t.compute.loops)
    least = max(fmac_cycles.values())
    assert least > 0 and run.roofline.resource_cycles["compute"] >= least
    # With FT78NE's three FMAC units the same plan's compute bound is below DDR's (halved bandwidth); with one,
    # compute sets the bound, and the run cannot beat it.
    doc = yaml.safe_load(Path(run.target.path).read_text())
    doc["core"]["units"]["fmac"]["count"] = 3
    three = roofline(run.plan, parse_target(doc, "three.yaml"))
    assert three.resource_cycles["compute"] < run.roofline.resource_cycles["ddr"] < least
    assert run.roofline.bound_by == "compute"
    assert run.cycles >= run.roofline.cycles


def test_the_run_is_called_compute_limited_where_the_trace_shows_compute(calibrated_run):
    run = calibrated_run
    busiest = max(sum(e.end - e.start for e in run.events if e.kind == "compute" and e.core == c) for c in run.cores)
    ddr_share = run.roofline.resource_cycles["ddr"] / run.cycles
    assert busiest / run.cycles > ddr_share  # what the trace shows: the vector units are the busier resource
    meta = run.metadata()
    assert meta["bound_by"] == "compute" and meta["limited_by"] == "compute"
    assert meta["resource_shares"]["compute"] == pytest.approx(busiest / run.cycles, abs=1e-4)
    text = run.summary_text()
    assert "set by compute" in text and "limited by compute:" in text


# --- timing-only runs -------------------------------------------------------------------------------

def test_timing_only_run_saves_no_outputs_and_says_so(tmp_path, capsys):
    doc = yaml.safe_load((CONFIGS / "ft78ne_batch_norm_grad_s.yaml").read_text())
    doc["numerics"] = False
    doc["trace"] = "bn.json"
    cfg = tmp_path / "bn.yaml"
    cfg.write_text(yaml.safe_dump(doc, sort_keys=False))
    assert main(["run", str(cfg), "--out-dir", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["bn.json"]  # the trace, no .npy
    assert "timing only" in out.splitlines()[0]
    assert "output:" not in out and "outputs: none saved (timing only" in out
    assert json.loads((tmp_path / "out" / "bn.json").read_text())["metadata"]["numerics"] is False


# --- the per-core table -------------------------------------------------------------------------------

def test_columns_partition_the_run_by_hand():
    ev = [TraceEvent(0, "sync", "launch", 0, 5),
          # its stream (from wait_start 5) lost 3 cycles to sharing, counted from the stream's start: 5..8
          TraceEvent(0, "dma0", "dma_in", 5, 20, bytes=64, wait_cycles=3, wait_start=5),
          TraceEvent(0, "compute", "compute", 20, 40, flops=100),
          TraceEvent(0, "dma1", "dma_in", 25, 35, bytes=64),
          TraceEvent(0, "dma0", "dma_out", 40, 50, bytes=64),
          TraceEvent(0, "sync", "barrier_wait", 50, 60, wait_cycles=10)]
    (s,) = core_summaries(ev, [0], 70)
    # compute alone 20..25 and 35..40; overlap 25..35; DMA alone 8..20 and 40..50;
    # wait: launch 0..5, lost to sharing 5..8, barrier 50..60; idle 60..70 (the run ends at 70).
    assert (s.compute_only_cycles, s.overlap_cycles, s.dma_only_cycles, s.wait_cycles, s.idle_cycles) == \
        (10, 10, 22, 18, 10)
    assert s.busy_cycles == 42 and s.compute_cycles == 20 and s.dma_cycles == 32
    assert s.utilisation == pytest.approx(42 / 70)


@pytest.mark.parametrize("name", ["ft78ne_conv2d_backprop_filter_s", "mt7004_hp_fused_batch_norm_grad_s",
                                  "ft78ne_fake_quant_with_min_max_vars_gradient_s"])
def test_columns_add_up_to_the_run_on_shipped_configs(name):
    cfg = load_config(CONFIGS / f"{name}.yaml")
    run = execute(cfg)[1]
    for s in run.summaries():
        assert s.compute_only_cycles + s.overlap_cycles + s.dma_only_cycles + s.wait_cycles + s.idle_cycles \
            == run.cycles
        assert s.busy_cycles + s.wait_cycles + s.idle_cycles == run.cycles
        assert s.idle_cycles >= run.cycles - s.end_cycle  # after its last event a core is idle
    table = summary_table(run.summaries())
    head = table.splitlines()[3].split()
    assert head[:9] == ["core", "end", "compute", "overlap", "dma", "wait", "idle", "busy%", "compute%"]
    assert "counted once" in table and "= the run" in table


# --- what an hp_ run stores and computes ---------------------------------------------------------------

def test_summary_and_trace_say_what_is_fp16_and_what_fp32_in_the_registrys_words(tmp_path):
    """One precision note per symbol: the registry's (derived from the kernel's declared tensors), carried by
    the run into the summary and the trace metadata; never derived a second way."""
    run = execute(load_config(CONFIGS / "mt7004_hp_batch_norm_grad_s.yaml"))[1]
    line = next(ln for ln in run.summary_text().splitlines() if ln.startswith("precision: "))
    # The kernel's documentation: x, dy, dx are fp16 tensors; the statistics and their gradients fp32;
    # the arithmetic runs in fp32.
    assert line == f"precision: {kernels.lookup('hp_batch_norm_grad_s').precision_note}"
    assert line.startswith("precision: stored in fp16: x, dy, dx; stored in fp32: mean, invar, scale, dbias, dscale; "
                           "computed in fp32")
    assert run.metadata()["precision_note"] == run.precision_note
    fp = execute(load_config(CONFIGS / "ft78ne_batch_norm_grad_s.yaml"))[1]
    assert fp.precision_note == "fp32 storage and fp32 arithmetic throughout"


# --- trace diff: the setup first ----------------------------------------------------------------------

def test_trace_diff_shows_the_tiling_change_first(tmp_path, capsys):
    doc = yaml.safe_load(CONV.read_text())
    paths = []
    for split in ("spatial", "filter"):
        doc["tiling"] = {"split": split}
        doc["numerics"] = False
        doc["trace"] = f"{split}.json"
        doc["args"]["core_mask"] = 0xFF if split == "spatial" else 0x0F
        p = tmp_path / f"{split}.yaml"
        p.write_text(yaml.safe_dump(doc, sort_keys=False))
        assert main(["run", str(p), "--out-dir", str(tmp_path)]) == 0
        paths.append(tmp_path / f"{split}.json")
    capsys.readouterr()
    assert main(["trace", "diff", *map(str, paths)]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("setup differs: ")
    assert "args.core_mask 0xff -> 0xf" in first and "tiling.split spatial -> filter" in first
    assert "cores [0, 1, 2, 3, 4, 5, 6, 7] -> [0, 1, 2, 3]" in first
    same = diff_text(diff_traces(load_trace(paths[0]), load_trace(paths[0])))
    assert same.splitlines()[0] == "setup: the same chip, symbol, arguments and tiling"


# --- trace metadata ---------------------------------------------------------------------------------

def test_metadata_shows_booleans_as_booleans_and_only_pointers_in_hex(tmp_path):
    run = execute(load_config(CONFIGS / "mt7004_hp_fused_batch_norm_grad_s.yaml"))[1]
    path = run.write_trace(tmp_path / "t.json")
    args = json.loads(path.read_text())["metadata"]["args"]
    assert args["is_training"] is True
    assert args["epsilon"] == 0.0001 and args["data_format"] == "NCHW" and args["shape"] == [4, 128, 14, 14]
    assert args["x"] == "0xa1000000" and args["scale_backprop"] == "0xc1000000" and args["core_mask"] == "0xf"

    fq = execute(load_config(CONFIGS / "ft78ne_fake_quant_with_min_max_vars_gradient_s.yaml"))[1].metadata()
    assert isinstance(fq["args"]["num_bits"], int) and not isinstance(fq["args"]["num_bits"], bool)
    assert isinstance(fq["args"].get("narrow_range", False), bool)

    bn = execute(load_config(CONFIGS / "ft78ne_batch_norm_grad_s.yaml"))[1].metadata()["args"]
    # params: five pointers, then batch 4, channel 64, is_train 1 (a number in the C array, not a flag).
    assert bn["params"] == ["0xc0000000", "0xd0000000", "0xe0000000", "0xb1000000", "0xc1000000", 4, 64, 1]


def test_metadata_of_numpy_arguments_is_plain_json():
    import sim
    m = sim.Simulator("FT78NE")
    run = m.call("fp_batch_norm_grad_s", x=np.int64(0xA0000000), dy=0xB0000000, dx=0xA1000000,
                 params=np.array([0xC0000000, 0xD0000000, 0xE0000000, 0xB1000000, 0xC1000000, 4, 64, 1]),
                 core_mask=np.int32(0xFF), numerics=False)
    meta = json.loads(json.dumps(run.metadata()))
    assert meta["args"]["x"] == "0xa0000000" and meta["args"]["core_mask"] == "0xff"
    assert meta["args"]["params"][5:] == [4, 64, 1] and math.isclose(meta["roofline_cycles"], run.roofline.cycles,
                                                                     abs_tol=1e-3)


# --- a broadcast's source read once (an outside test's finding) ----------------------------------------------

def test_a_broadcasts_source_bytes_count_once_in_the_summaries_and_the_trace(tmp_path):
    """256 x 512 x 512 on eight FT78NE cores with B broadcast: each of a block's eight members carries its bytes,
    but DDR reads the block once (the engine and the roofline count it so). The per-core table charged every member
    its bytes at DDR: 4.5 times the run's DDR bytes over the cores. Now the first member (core order) reads, the
    table's DDR bytes add up to the roofline's, as they do from the trace file, and the Chrome trace's DDR counter
    never carries a block twice."""
    import sim
    from sim.engine.events import DMA_KINDS
    from sim.inspect.trace import bytes_in_flight, step_series
    m = sim.Simulator("FT78NE", tuning_cache=False)
    run = m.call("fp_gemm_s", a=0x80000000, b=0x90000000, c=0xA0000000, m=256, n=512, k=512, numerics=False,
                 tiling={"split": "m", "a_staging": "memory", "b_staging": "broadcast"})
    members = [e for e in run.events if e.sync is not None]
    assert len(members) >= 16 and {e.src_region for e in members} == {"ddr"}
    ddr = run.roofline.region_bytes["ddr"]
    assert sum(s.bytes_by_region.get("ddr", 0) for s in run.summaries()) == ddr
    run.write_trace(tmp_path / "t.json")
    loaded = load_trace(tmp_path / "t.json")
    summed = core_summaries(list(loaded.events), loaded.cores, loaded.cycles, loaded.metadata.get("regions"))
    assert sum(s.bytes_by_region.get("ddr", 0) for s in summed) == ddr
    # Every member's block at once is in flight on DDR once: at most the bytes of the group's one read, plus the
    # other transfers touching DDR then.
    peak = max(v for _, v in bytes_in_flight(run.events, "ddr", loaded.metadata.get("regions")))
    every_member = max(v for _, v in step_series((e.start, e.end, e.bytes) for e in run.events
                                                 if e.kind in DMA_KINDS and "ddr" in (e.src_region, e.dst_region)))
    block = max(e.bytes for e in members)
    assert peak <= every_member - 7 * block  # (the seven other members of a block in flight together, left out)
