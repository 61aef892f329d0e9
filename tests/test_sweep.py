"""dspsim sweep: grid expansion, local pool and Dask runs, failed points kept, resumption, progress, Ctrl-C."""

import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
import yaml

import sim
import sim.run.progress
from sim.cli import main
from sim.errors import ConfigError
from sim.sweep import load_sweep, run_point, run_sweep

ROOT = Path(__file__).resolve().parent.parent
BASE = ROOT / "configs" / "ft78ne_batch_norm_grad_s.yaml"
BN_ARGS = {"x": 0xA0000000, "dy": 0xB0000000, "dx": 0xA1000000}


def write_sweep(tmp_path, grid, configs=None, name="sweep.yaml", **extra):
    doc = {"configs": [str(c) for c in (configs or [BASE])], "numerics": False, "grid": grid, **extra}
    p = tmp_path / name
    p.write_text(json.dumps(doc))  # JSON is YAML
    return p


def write_config(path, batch=4, channel=64, core_mask=0xFF, target="FT78NE"):
    """A copy of the shipped BatchNormGrad config with its sizes (and core mask, None: left out) changed."""
    doc = yaml.safe_load(BASE.read_text())
    doc["target"] = target
    doc["args"]["params"][5:7] = [batch, channel]
    if core_mask is None:
        del doc["args"]["core_mask"]
    else:
        doc["args"]["core_mask"] = core_mask
    doc.pop("data"), doc.pop("outputs")
    doc["data"] = [{"name": "params", "addr": 0x90000000, "shape": [1], "dtype": "float32", "fill": 0}]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(doc))
    return path


def bn_params(batch, channel):
    return [0xC0000000, 0xD0000000, 0xE0000000, 0xB1000000, 0xC1000000, batch, channel, 1]


GRID = {"target": ["FT78NE", "MT7004"], "args.core_mask": [1, 3, 255], "args.params.5": [64],
        "args.params.6": [512], "target.regions.ddr.bandwidth_bytes_per_cycle": [8, 16]}


def direct_cycles(chip, mask, ddr_bw=None, batch=64, channel=512, target_doc=None):
    """The same point run by hand through the public API, with the target copy edited by hand."""
    doc = target_doc or yaml.safe_load((ROOT / "targets" / f"{chip}.yaml").read_text())
    if ddr_bw is not None:
        next(r for r in doc["regions"] if r["name"] == "ddr")["bandwidth_bytes_per_cycle"] = ddr_bw
    m = sim.Simulator(sim.model.target_loader.parse_target(doc, "edited"))
    kw = {} if mask is None else {"core_mask": mask}
    return m.call("fp_batch_norm_grad_s", numerics=False, params=bn_params(batch, channel), **BN_ARGS, **kw).cycles


def test_local_pool_sweep_table_plot_and_failed_points(tmp_path):
    spec = load_sweep(write_sweep(tmp_path, GRID, plot={"x": "cores"}))
    assert len(spec.points()) == 12
    res = run_sweep(spec, tmp_path / "out", workers=2)
    rows = res.rows
    assert len(rows) == 12
    failed = [r for r in rows if r["error"]]
    # 0xff on the 4-core MT7004 fails, and is recorded rather than lost.
    assert len(failed) == 2 and all("core_mask" in r["error"] and r["chip"] == "MT7004" for r in failed)
    assert res.failed == failed
    ok = {(r["chip"], r["args.core_mask"], r["target.regions.ddr.bandwidth_bytes_per_cycle"]): r for r in rows
          if not r["error"]}
    assert ok[("FT78NE", 3, 8)]["cycles"] == direct_cycles("FT78NE", 3, 8)
    assert ok[("MT7004", 1, 16)]["cycles"] == direct_cycles("MT7004", 1, 16)
    # Halving DDR bandwidth slows the bandwidth-bound kernel, and the rows say what each run was limited by.
    assert ok[("FT78NE", 255, 8)]["cycles"] > ok[("FT78NE", 255, 16)]["cycles"]
    assert ok[("FT78NE", 255, 8)]["limited_by"] == "ddr"
    assert all(r["idle_cores"] == 0 for k, r in ok.items() if k[1] == 255)
    table = pd.read_parquet(tmp_path / "out" / "sweep.parquet")
    assert len(table) == 12 and {"cycles", "roofline_fraction", "bound_by", "limited_by", "idle_cores",
                                 "load_imbalance", "wall_seconds", "error"} <= set(table)
    assert len(pd.read_csv(tmp_path / "out" / "sweep.csv")) == 12
    assert res.plot == tmp_path / "out" / "sweep.png" and res.plot.stat().st_size > 10_000


def test_interrupted_sweep_skips_points_already_done(tmp_path):
    spec = load_sweep(write_sweep(tmp_path, {"args.core_mask": [1, 3, 15], "args.params.6": [128]}))
    out = tmp_path / "out"
    out.mkdir()
    first = run_point(spec.points()[0])
    # (cycles of 1, a count no run of it gives: the recorded row, if kept, shows)
    (out / "points.jsonl").write_text(json.dumps({**first, "cycles": 1}) + "\n" + '{"id": "cut-mid-li')
    ran = []
    rows = run_sweep(spec, out, workers=1, on_point=ran.append).rows
    assert len(ran) == 2 and first["id"] not in {r["id"] for r in ran}
    assert rows[0]["cycles"] == 1  # the recorded point was kept, not rerun
    # The cut line stays alone on its line: every point recorded after it reads back whole.
    lines = (out / "points.jsonl").read_text().splitlines()
    assert lines[1] == '{"id": "cut-mid-li' and [json.loads(x)["id"] for x in lines[2:]] == [r["id"] for r in ran]


def test_failed_points_run_again_on_resume_and_the_cache_names_the_inputs(tmp_path):
    """A point is reused only when it succeeded with the same inputs: the config's content, the target file's
    content, the grid values.  A point that failed runs again."""
    cfg = write_config(tmp_path / "bn.yaml", batch=16, channel=64)
    target = tmp_path / "chip.yaml"
    target.write_text((ROOT / "targets" / "FT78NE.yaml").read_text())
    sweep = write_sweep(tmp_path, {"target": ["chip.yaml"], "args.core_mask": [0x1, 0x3]}, configs=[cfg])
    out = tmp_path / "out"
    res = run_sweep(load_sweep(sweep), out, workers=1)
    assert not res.failed and [r["cycles"] for r in res.rows] == [direct_cycles("FT78NE", m, batch=16, channel=64)
                                                                   for m in (1, 3)]
    # The target file changes (one core left): every point runs again, and the 2-core mask now fails.
    target.write_text((ROOT / "targets" / "FT78NE.yaml").read_text().replace("cores: 8", "cores: 1"))
    res = run_sweep(load_sweep(sweep), out, workers=1)
    assert len(res.failed) == 1 and "0x3" in res.failed[0]["error"] and res.ran_now == 2
    target.write_text((ROOT / "targets" / "FT78NE.yaml").read_text())
    ran = []
    res = run_sweep(load_sweep(sweep), out, workers=1, on_point=ran.append)
    # Both points are back to the first target's content: the successes recorded then are reused.
    assert not res.failed and ran == [] and res.ran_now == 0
    # The config's content is part of the key: a different batch reruns and gives its own cycles.
    write_config(cfg, batch=32, channel=64)
    res = run_sweep(load_sweep(sweep), out, workers=1, on_point=ran.append)
    assert len(ran) == 2 and [r["cycles"] for r in res.rows] == [direct_cycles("FT78NE", m, batch=32, channel=64)
                                                                  for m in (1, 3)]
    # A failure of a point is never reused, even with unchanged inputs (its cause may be outside them).
    bad = write_sweep(tmp_path, {"args.core_mask": [0x100]}, configs=[cfg], name="bad.yaml")
    first = run_sweep(load_sweep(bad), out, workers=1)
    again = []
    run_sweep(load_sweep(bad), out, workers=1, on_point=again.append)
    assert first.failed and [r["id"] for r in again] == [r["id"] for r in first.failed]


def test_exit_status_closing_line_and_plot_only_when_written(tmp_path, capsys):
    out = tmp_path / "out"
    ok = write_sweep(tmp_path, {"args.core_mask": [1, 3]}, name="ok.yaml")
    assert main(["sweep", str(ok), "-o", str(out), "--workers", "1"]) == 0
    line = capsys.readouterr().out.splitlines()[0]
    assert line.startswith("2 points: 2 ran, 0 failed") and f"plot {out / 'sweep.png'}" in line
    # Every point fails: exit 1 after writing the table; no plot, and the closing line names none.
    bad = write_sweep(tmp_path, {"args.core_mask": [0x100, 0x200]}, name="bad.yaml")
    assert main(["sweep", str(bad), "-o", str(out), "--workers", "1"]) == 1
    text = capsys.readouterr().out
    assert text.startswith("2 points: 0 ran, 2 failed") and "sweep.png" not in text and "plot" not in text
    assert text.count("  failed ") == 2
    assert len(pd.read_csv(out / "sweep.csv")) == 2
    assert not (out / "sweep.png").exists()  # the earlier sweep's plot would not match this table
    # Some points fail: still exit 1.
    mixed = write_sweep(tmp_path, {"args.core_mask": [0x1, 0x100]}, name="mixed.yaml")
    assert main(["sweep", str(mixed), "-o", str(tmp_path / "m"), "--workers", "2"]) == 1
    assert "1 ran, 1 failed" in capsys.readouterr().out


def test_an_axis_may_set_an_argument_the_config_leaves_to_its_default(tmp_path):
    cfg = write_config(tmp_path / "no_mask.yaml", batch=16, channel=128, core_mask=None)
    rows = run_sweep(load_sweep(write_sweep(tmp_path, {"args.core_mask": [0x1, 0xF]}, configs=[cfg])),
                     tmp_path / "o", workers=1).rows
    assert not any(r["error"] for r in rows)
    assert [r["cycles"] for r in rows] == [direct_cycles("FT78NE", m, batch=16, channel=128) for m in (0x1, 0xF)]
    assert [r["cores"] for r in rows] == [1, 4]
    # A name the symbol does not take, or an index into an argument the config does not give, is the sweep
    # file's error, named on load.
    with pytest.raises(ConfigError, match=r"grid\.args\.core_maks: fp_batch_norm_grad_s takes no argument "
                                          r"'core_maks' \(it takes: core_mask, dx, dy, params, x\)"):
        load_sweep(write_sweep(tmp_path, {"args.core_maks": [1]}, configs=[cfg]))
    with pytest.raises(ConfigError, match=r"grid\.args\.core_mask\.0: .*gives no core_mask to index into"):
        load_sweep(write_sweep(tmp_path, {"args.core_mask.0": [1]}, configs=[cfg]))
    # An index past the end of the config's list (or not an index), likewise: every point would have failed.
    for bad in ("99", "-1", "x"):
        with pytest.raises(ConfigError, match=rf"grid\.args\.params\.{bad}: .* gives args\.params as a list of "
                                              rf"\d+ elements: it has no element {bad}"):
            load_sweep(write_sweep(tmp_path, {f"args.params.{bad}": [1]}, configs=[cfg]))


def test_cores_axis_is_chip_relative_and_skips_what_a_chip_lacks(tmp_path):
    cfg = write_config(tmp_path / "bn.yaml", batch=16, channel=128)
    spec = load_sweep(write_sweep(tmp_path, {"target": ["FT78NE", "MT7004"], "cores": [1, 2, 8]},
                                  configs=[cfg], plot={"x": "cores"}))
    res = run_sweep(spec, tmp_path / "o", workers=2)
    assert not res.failed
    by = {(r["chip"], r["cores"]): r for r in res.rows}
    for chip, n in [("FT78NE", 1), ("FT78NE", 2), ("FT78NE", 8), ("MT7004", 1), ("MT7004", 2)]:
        assert by[(chip, n)]["cycles"] == direct_cycles(chip, (1 << n) - 1, batch=16, channel=128)
    assert [r["skipped"] for r in res.skipped] == ["MT7004 has 4 cores, fewer than 8"]
    assert pd.isna(by[("MT7004", 8)].get("cycles")) and res.plot is not None
    # A _p symbol runs on one core; a mask axis beside cores would fight over the mask.
    with pytest.raises(ConfigError, match=r"grid\.cores: fp_batch_norm_grad_p runs on one core"):
        load_sweep(write_sweep(tmp_path, {"cores": [1], "symbol": ["fp_batch_norm_grad_p"]}, configs=[cfg]))
    with pytest.raises(ConfigError, match=r"grid\.cores: both cores and args\.core_mask"):
        load_sweep(write_sweep(tmp_path, {"cores": [1], "args.core_mask": [1]}, configs=[cfg]))
    with pytest.raises(ConfigError, match=r"grid\.cores\[1\]: expected a number of cores"):
        load_sweep(write_sweep(tmp_path, {"cores": [1, 0]}, configs=[cfg]))


@pytest.mark.parametrize("values,bad", [("[0, 0.5, 1.0]", "[2]: expected a fraction in [0, 1), got 1.0"),
                                        ("[0.5, -0.1]", "[1]: expected a fraction in [0, 1), got -0.1"),
                                        ("[.nan]", "[0]: expected a fraction in [0, 1), got nan"),
                                        ("[true]", "[0]: expected a fraction in [0, 1), got True"),
                                        ("['0.1']", "[0]: expected a fraction in [0, 1), got '0.1'")],
                         ids=["1.0", "negative", "NaN", "a boolean", "text"])
def test_a_tiling_tolerance_out_of_range_is_refused_on_load(tmp_path, values, bad):
    """As a run-config's tiling_tolerance, a value must be a fraction in [0, 1): the sweep file is refused when it
    loads, naming the value, not each point when it runs (as ``cores: [0]`` is)."""
    p = tmp_path / "sweep.yaml"
    p.write_text(f"configs: [{BASE}]\nnumerics: false\ngrid:\n  tiling_tolerance: {values}\n")
    with pytest.raises(ConfigError, match=re.escape(f"{p}: grid.tiling_tolerance{bad}")) as info:
        load_sweep(p)
    assert "\n" not in str(info.value)
    assert [pt["settings"] for pt in load_sweep(write_sweep(tmp_path, {"tiling_tolerance": [0, 0.99]})).points()] \
        == [{"tiling_tolerance": 0}, {"tiling_tolerance": 0.99}]


@pytest.mark.parametrize("path", sorted((ROOT / "configs" / "sweeps").glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_sweep_runs_clean(path, tmp_path, capsys):
    spec = replace(load_sweep(path), numerics=False)
    res = run_sweep(spec, tmp_path / "o", workers=2)
    assert len(res.rows) == len(spec.points()) and res.failed == []
    assert all("fewer than" in r["skipped"] for r in res.skipped)  # only points a chip is too small for
    assert res.succeeded and res.plot is not None


def test_two_configs_sharing_a_file_name_are_two_sets_of_points(tmp_path):
    write_config(tmp_path / "a" / "c.yaml", batch=8, channel=64)
    write_config(tmp_path / "b" / "c.yaml", batch=64, channel=256)
    sweep = tmp_path / "s.yaml"
    sweep.write_text("configs: [a/c.yaml, b/c.yaml]\ngrid:\n  args.core_mask: [0x1, 0x3]\n")
    res = run_sweep(load_sweep(sweep), tmp_path / "o", workers=2)
    assert len({r["id"] for r in res.rows}) == 4
    got = {(r["config"], r["args.core_mask"]): r["cycles"] for r in res.rows}
    assert got == {("a/c.yaml", m): direct_cycles("FT78NE", m, batch=8, channel=64) for m in (1, 3)} | \
        {("b/c.yaml", m): direct_cycles("FT78NE", m, batch=64, channel=256) for m in (1, 3)}
    table = pd.read_csv(tmp_path / "o" / "sweep.csv")
    assert sorted(table["config"]) == ["a/c.yaml", "a/c.yaml", "b/c.yaml", "b/c.yaml"]
    # A file listed twice (however spelled) would be the same points twice.
    sweep.write_text("configs: [a/c.yaml, ./a/../a/c.yaml]\ngrid:\n  args.core_mask: [0x1]\n")
    with pytest.raises(ConfigError, match=r"configs\[1\]: .* is the same file as configs\[0\]"):
        load_sweep(sweep)


@pytest.mark.parametrize("text, match", [
    ("description: 2020-13-45\nconfigs: [c.yaml]\ngrid: {args.core_mask: [1]}\n", "not valid YAML"),
    ("configs: [c.yaml]\ngrid: {args.core_mask: [1]}\ngrid: {args.core_mask: [3]}\n", "duplicate key 'grid'"),
    ("configs: [c.yaml]\ngrid: {args.core_mask: [1]}\ndescription: " + "[" * 5000 + "]" * 5000 + "\n",
     "nesting deeper"),
    ("configs: [c.yaml]\ngrid: {args.core_mask: [1]}\ndescription: [a, b]\n", "description: expected text, got list"),
    ("configs: [c.yaml]\ngrid: {args.core_mask: [1, 1]}\n", r"grid\.args\.core_mask\[1\]: 1 is listed twice"),
    # (the same value spelled two ways: one number, one chip)
    ("configs: [c.yaml]\ngrid: {target.regions.ddr.bandwidth_bytes_per_cycle: [12, 12.0]}\n",
     r"grid\.target\.regions\.ddr\.bandwidth_bytes_per_cycle\[1\]: 12\.0 is listed twice"),
    ("configs: [c.yaml]\ngrid: {target: [ft78ne, FT78NE]}\n", r"grid\.target\[1\]: 'FT78NE' is listed twice"),
    ("configs: [c.yaml]\ngrid: {target: [FT78NE, nochip.yaml]}\n", r"grid\.target\[1\]: .*nochip\.yaml"),
])
def test_sweep_files_are_read_strictly(tmp_path, capsys, text, match):
    write_config(tmp_path / "c.yaml")
    p = tmp_path / "bad.yaml"
    p.write_text(text)
    with pytest.raises(ConfigError, match=match) as e:
        load_sweep(p)
    assert str(p) in str(e.value)
    assert main(["sweep", str(p), "-o", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("dspsim: error: ") and "Traceback" not in err


def test_a_program_as_a_sweeps_base_config_is_refused_as_such(tmp_path, capsys):
    program = ROOT / "configs" / "programs" / "ft78ne_resnet50_bottleneck_bwd.yaml"
    p = tmp_path / "s.yaml"
    p.write_text(f"configs: [{program}]\ngrid: {{cores: [1, 2]}}\n")
    with pytest.raises(ConfigError, match=r"configs\[0\]: .* is a program \(it has calls\): a sweep's points are "
                                          r"run-configs"):
        load_sweep(p)


def test_sweep_file_errors(tmp_path):
    with pytest.raises(ConfigError, match="grid.bogus"):
        load_sweep(write_sweep(tmp_path, {"bogus": [1]}))
    with pytest.raises(ConfigError, match="tiling.<key>"):
        load_sweep(write_sweep(tmp_path, {"tiling.a.b": [1]}))
    with pytest.raises(ConfigError, match="plot.x"):
        load_sweep(write_sweep(tmp_path, {"args.core_mask": [1]}, plot={"x": "args.nope"}))
    # Target edits are judged on load against every target file the sweep runs, by the target's own checks.
    with pytest.raises(ConfigError, match=r"grid\.target\.regions\.hbm\.size_bytes: no list item named 'hbm'"):
        load_sweep(write_sweep(tmp_path, {"target.regions.hbm.size_bytes": [1]}))
    with pytest.raises(ConfigError, match=r"grid: the target file refuses target\.nope=1: .*nope"):
        load_sweep(write_sweep(tmp_path, {"target.nope": [1]}))
    # A value out of the format's range, on one of two listed: the file and the key named.
    with pytest.raises(ConfigError, match=r"refuses target\.regions\.ddr\.bandwidth_bytes_per_cycle=0: "
                                          r".*bandwidth_bytes_per_cycle") as e:
        load_sweep(write_sweep(tmp_path, {"target.regions.ddr.bandwidth_bytes_per_cycle": [12, 0]}))
    assert "FT78NE.yaml" in str(e.value)
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    # A reader of the pipe would block until a writer comes: this one comes after 3 s, so a regression fails
    # the test instead of hanging it.
    writer = threading.Timer(3.0, lambda: os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
                             if fifo.exists() else None)
    writer.start()
    t0 = time.monotonic()
    try:
        with pytest.raises(ConfigError, match="not a regular file"):
            load_sweep(fifo)
    finally:
        writer.cancel()
    assert time.monotonic() - t0 < 2


def test_many_target_edit_combinations_check_each_value_once(tmp_path, monkeypatch):
    """Past MAX_CHECKED_TARGET_EDITS combinations each value is checked beside the other axes' first values: a
    bad value on any axis is still refused on load, and a good grid still loads."""
    import sim.sweep.spec as spec_module
    monkeypatch.setattr(spec_module, "MAX_CHECKED_TARGET_EDITS", 1)
    grid = {"target.regions.ddr.bandwidth_bytes_per_cycle": [12, 16], "target.regions.ddr.latency_cycles": [100, 200]}
    assert len(load_sweep(write_sweep(tmp_path, grid)).points()) == 4
    grid["target.regions.ddr.latency_cycles"] = [100, -1]
    with pytest.raises(ConfigError, match=r"refuses target\.regions\.ddr\.bandwidth_bytes_per_cycle=12, "
                                          r"target\.regions\.ddr\.latency_cycles=-1"):
        load_sweep(write_sweep(tmp_path, grid))


def test_dask_local_cluster_of_two_workers(tmp_path):
    distributed = pytest.importorskip("distributed")
    spec = load_sweep(write_sweep(tmp_path, {"target": ["FT78NE", "MT7004"], "args.core_mask": [1, 15],
                                             "args.params.6": [256]}))
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as client:
        assert len(client.scheduler_info()["workers"]) == 2
        rows = run_sweep(spec, tmp_path / "dask", scheduler=cluster.scheduler_address).rows
    local = run_sweep(spec, tmp_path / "local", workers=1).rows
    assert [(r["id"], r["cycles"]) for r in rows] == [(r["id"], r["cycles"]) for r in local]
    assert not any(r["error"] for r in rows)


def test_tiling_axes(tmp_path):
    """``tiling.<key>`` merges into the config's tiling (a given tiling each point honours, as run by hand);
    ``tiling_tolerance`` reaches the cost model; each row names the tiling it ran with."""
    spec = load_sweep(write_sweep(tmp_path, {"args.params.5": [4096], "args.params.6": [64],
                                             "tiling.split": ["rows"], "tiling.tile_elements": [128 * 64, 512 * 64]},
                                  plot={"x": "tiling.tile_elements"}))
    rows = run_sweep(spec, tmp_path / "t", workers=1).rows
    assert not any(r["error"] for r in rows)
    by_rows = {r["tiling.tile_elements"] // 64: r for r in rows}
    for rb, r in by_rows.items():
        tiling = {"split": "rows", "tile_elements": rb * 64}
        run = sim.Simulator("FT78NE").call(
            "fp_batch_norm_grad_s", numerics=False, tiling=tiling, x=0xA0000000, dy=0xB0000000, dx=0xA1000000,
            params=[0xC0000000, 0xD0000000, 0xE0000000, 0xB1000000, 0xC1000000, 4096, 64, 1], core_mask=0xFF)
        assert r["cycles"] == run.cycles and r["tiles"] == run.plan.tile_count
        assert json.loads(r["tiling"])["tile_elements"] == rb * 64 and r["tiling_source"] == "given"
    assert by_rows[128]["tiles"] > by_rows[512]["tiles"]
    assert (tmp_path / "t" / "sweep.png").exists()
    # The cost model's tie tolerance as an axis: 0 keeps the cheapest, 0.01 the fewest tiles within 1 %.
    fused = ROOT / "configs" / "ft78ne_fused_batch_norm_grad_s.yaml"
    doc = {"configs": [str(fused)], "numerics": False,
           "grid": {"args.shape": [[8, 56, 56, 64]], "tiling_tolerance": [0, 0.01]}}
    sp = tmp_path / "tol.yaml"
    sp.write_text(json.dumps(doc))
    rows = run_sweep(load_sweep(sp), tmp_path / "tol", workers=1).rows
    assert all(r["tiling_source"] == "cost model" and not r["error"] for r in rows)
    strict, tied = sorted(rows, key=lambda r: r["tiling_tolerance"])
    assert strict["cycles"] <= tied["cycles"] <= strict["cycles"] * 1.01 and strict["tiles"] > tied["tiles"]


class FakeTerminal(io.StringIO):
    """A stream that says it is a terminal (what tqdm draws on)."""

    def isatty(self):
        return True


def test_progress_names_the_phase_on_a_terminal_only(tmp_path, monkeypatch):
    monkeypatch.setattr(sim.run.progress, "DELAY_SECONDS", 0.0)
    spec = load_sweep(write_sweep(tmp_path, {"args.core_mask": [1, 3]}))
    tty = FakeTerminal()
    run_sweep(spec, tmp_path / "a", workers=2, progress=tty)
    assert "sweep: running 2 points" in tty.getvalue()
    assert "sweep: writing the table and the plot" in tty.getvalue()
    pipe = io.StringIO()
    run_sweep(spec, tmp_path / "b", workers=1, progress=pipe)
    assert pipe.getvalue() == ""


def test_cli_sweep(tmp_path, capsys):
    p = write_sweep(tmp_path, {"args.core_mask": [1, 255]})
    assert main(["sweep", str(p), "-o", str(tmp_path / "cli"), "--workers", "1"]) == 0
    assert "2 points" in capsys.readouterr().out
    assert (tmp_path / "cli" / "sweep.csv").exists()
    assert main(["sweep", str(p), "-o", str(tmp_path / "cli"), "--workers", "1"]) == 0
    assert capsys.readouterr().out.startswith(f"2 points (2 from {tmp_path / 'cli' / 'points.jsonl'}, 0 run now)")


def test_ctrl_c_stops_at_once_and_keeps_every_finished_point(tmp_path):
    """Ctrl-C (SIGINT to the whole process group, as a terminal sends it) ends a sweep within a second or two:
    pending points are cancelled, running workers stopped, every finished point is in the journal, and the
    message says how to resume."""
    fused = ROOT / "configs" / "ft78ne_fused_batch_norm_grad_s.yaml"
    # Sixteen points of about a second each: far longer in all than the interrupt may take.
    sweep = write_sweep(tmp_path, {"args.shape": [[32, 56, 56, 64]],
                                   "args.epsilon": [round(0.001 * (i + 1), 3) for i in range(16)]},
                        configs=[fused])
    out = tmp_path / "out"
    journal = out / "points.jsonl"
    # (SIGINT at its default in the child, as in a terminal's foreground job: a suite started in the background
    # inherits it ignored, and Python then leaves it ignored)
    proc = subprocess.Popen([sys.executable, "-m", "sim.cli", "sweep", str(sweep), "-o", str(out), "--workers", "2"],
                            cwd=ROOT, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 120
        while not (journal.exists() and journal.read_text().count("\n") >= 1):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGINT)
        t0 = time.monotonic()
        _, err = proc.communicate(timeout=30)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130 and took < 3.0, (proc.returncode, took, err)
    assert "Traceback" not in err and err.count("\n") == 1
    assert f"dspsim sweep {sweep} -o {out} --workers 2" in err and "resume" in err
    rows = [json.loads(line) for line in journal.read_text().splitlines()]
    ids = {p["id"] for p in load_sweep(sweep).points()}
    assert rows and all(r["id"] in ids and not r["error"] and r["cycles"] > 0 for r in rows)
    assert f"{len(rows)} of 16 points finished" in err
    # No worker outlives the sweep.
    for _ in range(40):
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        pytest.fail("worker processes still running after the sweep exited")


def test_dotted_paths_one_helper_for_sweeps_and_calibration():
    import sim.calibrate
    import sim.sweep
    from sim.files.docedit import get_path, set_path

    doc = {"regions": [{"name": "gsm", "bw": 1}, {"name": "ddr", "bw": 2}], "args": {"params": [1, 2, 3]}}
    assert get_path(doc, ["regions", "ddr", "bw"], "w") == 2 and get_path(doc, ["regions", "0", "bw"], "w") == 1
    set_path(doc, ["args", "params", "2"], 9, "w")
    set_path(doc, ["args", "core_mask"], 3, "w", create=True)
    assert doc["args"] == {"params": [1, 2, 9], "core_mask": 3}
    with pytest.raises(ConfigError, match=r"w: no key 'nope'"):
        set_path(doc, ["args", "nope", "x"], 1, "w", create=True)  # only the last key may be new
    with pytest.raises(ConfigError, match=r"w: index 5 is outside the list of 3"):
        set_path(doc, ["args", "params", "5"], 1, "w")
    with pytest.raises(ConfigError, match=r"w: no list item named 'hbm'"):
        get_path(doc, ["regions", "hbm"], "w")
    # Neither tool keeps a walker of its own.
    for mod in (sim.sweep, sim.calibrate):
        assert not {"_set_path", "_set", "_get"} & set(vars(mod)), mod.__name__


def test_the_documented_example_sweep_runs_clean(tmp_path):
    """docs/sweeps.md's example, saved where it says (configs/sweeps/), runs with no failed point; the 4-core
    MT7004 skips the 8-core points."""
    from markdown_blocks import blocks

    (example,) = [b for b in blocks(ROOT / "docs" / "sweeps.md") if b.lang == "yaml"]
    first, *_ = example.code.splitlines()
    assert first == "# configs/sweeps/example.yaml"
    shutil.copytree(ROOT / "configs", tmp_path / "configs")
    path = tmp_path / "configs" / "sweeps" / "example.yaml"
    path.write_text(example.code)
    res = run_sweep(load_sweep(path), tmp_path / "o", workers=2)
    assert not res.failed and len(res.rows) == 32 and len(res.skipped) == 4
    assert {r["chip"] for r in res.skipped} == {"MT7004"} and res.plot is not None


def test_a_config_argument_named_like_a_call_parameter_is_a_clear_point_error(tmp_path):
    """A base config whose args use one of call()'s own names fails its points naming the key, not with a
    TypeError from Python's call machinery (the axis form is refused when the sweep file loads)."""
    import yaml
    doc = yaml.safe_load((ROOT / "configs" / "ft78ne_batch_norm_grad_s.yaml").read_text())
    doc["args"]["numerics"] = True
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(doc))
    sweep = tmp_path / "s.yaml"
    sweep.write_text("configs: [c.yaml]\ngrid:\n  tiling_tolerance: [0, 0.01]\n")
    from sim.sweep import load_sweep, run_sweep
    result = run_sweep(load_sweep(sweep), tmp_path / "out", workers=1)
    assert len(result.failed) == 2
    assert all("'numerics'" in r["error"] and "TypeError" not in r["error"] for r in result.rows)


def test_a_point_makes_one_simulator_binds_once_and_checks_the_layout_once(tmp_path, monkeypatch):
    # A sweep point goes through the run pipeline's stages as `dspsim run` does (tests/test_cli.py counts those).
    from pipeline_counts import count_stages

    spec = load_sweep(write_sweep(tmp_path, {"args.core_mask": [3], "target.regions.ddr.bandwidth_bytes_per_cycle":
                                             [8]}))
    (point,) = spec.points()
    counts = count_stages(monkeypatch)
    row = run_point(point)
    assert row["error"] == "" and counts == {"simulators": 1, "binds": 1, "layout checks": 1}
    assert row["cycles"] == direct_cycles("FT78NE", 3, ddr_bw=8, batch=4, channel=64)
