"""dspsim sweep: grid expansion, local pool and Dask runs, failed points kept, resumption."""

import json
from pathlib import Path

import pandas as pd
import pytest

import sim
from sim.cli import main
from sim.errors import ConfigError
from sim.sweep import load_sweep, run_point, run_sweep

ROOT = Path(__file__).resolve().parent.parent
BASE = ROOT / "configs" / "ft78ne_batch_norm_grad_s.yaml"


def write_sweep(tmp_path, grid, **extra):
    doc = {"configs": [str(BASE)], "numerics": False, "grid": grid, **extra}
    p = tmp_path / "sweep.yaml"
    p.write_text(json.dumps(doc))  # JSON is YAML
    return p


GRID = {"target": ["FT78NE", "MT7004"], "args.core_mask": [1, 3, 255], "args.params.5": [64],
        "args.params.6": [512], "target.regions.ddr.bandwidth_bytes_per_cycle": [8, 16]}


def direct_cycles(chip, mask, ddr_bw):
    """The same point run by hand through the public API, with the target copy edited by hand."""
    import yaml
    doc = yaml.safe_load((ROOT / "targets" / f"{chip}.yaml").read_text())
    next(r for r in doc["regions"] if r["name"] == "ddr")["bandwidth_bytes_per_cycle"] = ddr_bw
    m = sim.Simulator(sim.target.parse_target(doc, "edited"))
    run = m.call("fp_batch_norm_grad_s", numerics=False, x=0xA0000000, dy=0xB0000000, dx=0xA1000000,
                 params=[0xC0000000, 0xD0000000, 0xE0000000, 0xB1000000, 0xC1000000, 64, 512, 1], core_mask=mask)
    return run.cycles


def test_local_pool_sweep_table_plot_and_failed_points(tmp_path):
    spec = load_sweep(write_sweep(tmp_path, GRID, plot={"x": "cores"}))
    assert len(spec.points()) == 12
    rows = run_sweep(spec, tmp_path / "out", workers=2)
    assert len(rows) == 12
    failed = [r for r in rows if r["error"]]
    # 0xff on the 4-core MT7004 fails, and is recorded rather than lost.
    assert len(failed) == 2 and all("core_mask" in r["error"] and r["chip"] == "MT7004" for r in failed)
    ok = {(r["chip"], r["args.core_mask"], r["target.regions.ddr.bandwidth_bytes_per_cycle"]): r for r in rows
          if not r["error"]}
    assert ok[("FT78NE", 3, 8)]["cycles"] == direct_cycles("FT78NE", 3, 8)
    assert ok[("MT7004", 1, 16)]["cycles"] == direct_cycles("MT7004", 1, 16)
    # Halving DDR bandwidth slows the bandwidth-bound kernel.
    assert ok[("FT78NE", 255, 8)]["cycles"] > ok[("FT78NE", 255, 16)]["cycles"]
    table = pd.read_parquet(tmp_path / "out" / "sweep.parquet")
    assert len(table) == 12 and {"cycles", "roofline_fraction", "bound_by", "wall_seconds", "error"} <= set(table)
    assert len(pd.read_csv(tmp_path / "out" / "sweep.csv")) == 12
    assert (tmp_path / "out" / "sweep.png").stat().st_size > 10_000


def test_interrupted_sweep_skips_points_already_done(tmp_path):
    spec = load_sweep(write_sweep(tmp_path, {"args.core_mask": [1, 3, 15], "args.params.6": [128]}))
    out = tmp_path / "out"
    out.mkdir()
    first = run_point(spec.points()[0])
    (out / "points.jsonl").write_text(json.dumps({**first, "cycles": -1}) + "\n" + '{"id": "cut-mid-li')
    ran = []
    rows = run_sweep(spec, out, workers=1, on_point=ran.append)
    assert len(ran) == 2 and first["id"] not in {r["id"] for r in ran}
    assert [r["cycles"] for r in rows][0] == -1  # the recorded point was kept, not rerun


def test_dask_local_cluster_of_two_workers(tmp_path):
    distributed = pytest.importorskip("distributed")
    spec = load_sweep(write_sweep(tmp_path, {"target": ["FT78NE", "MT7004"], "args.core_mask": [1, 15],
                                             "args.params.6": [256]}))
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as client:
        assert len(client.scheduler_info()["workers"]) == 2
        rows = run_sweep(spec, tmp_path / "dask", scheduler=cluster.scheduler_address)
    local = run_sweep(spec, tmp_path / "local", workers=1)
    assert [(r["id"], r["cycles"]) for r in rows] == [(r["id"], r["cycles"]) for r in local]
    assert not any(r["error"] for r in rows)


def test_tiling_axes(tmp_path):
    """``tiling.<key>`` merges into the config's tiling (a given tiling each point honours, as run by hand);
    ``tiling_tolerance`` reaches the cost model; each row names the tiling it ran with."""
    spec = load_sweep(write_sweep(tmp_path, {"args.params.5": [4096], "args.params.6": [64],
                                             "tiling.split": ["rows"], "tiling.row_block": [128, 512]},
                                  plot={"x": "tiling.row_block"}))
    rows = run_sweep(spec, tmp_path / "t", workers=1)
    assert not any(r["error"] for r in rows)
    by_rows = {r["tiling.row_block"]: r for r in rows}
    for rb, r in by_rows.items():
        tiling = {"split": "rows", "row_block": rb}
        run = sim.Simulator("FT78NE").call(
            "fp_batch_norm_grad_s", numerics=False, tiling=tiling, x=0xA0000000, dy=0xB0000000, dx=0xA1000000,
            params=[0xC0000000, 0xD0000000, 0xE0000000, 0xB1000000, 0xC1000000, 4096, 64, 1], core_mask=0xFF)
        assert r["cycles"] == run.cycles and r["tiles"] == run.plan.tile_count
        assert json.loads(r["tiling"])["row_block"] == rb and r["tiling_source"] == "given"
    assert by_rows[128]["tiles"] > by_rows[512]["tiles"]
    assert (tmp_path / "t" / "sweep.png").exists()
    # The cost model's tie tolerance as an axis: 0 keeps the cheapest, 0.01 the fewest tiles within 1 %.
    fused = ROOT / "configs" / "ft78ne_fused_batch_norm_grad_s.yaml"
    doc = {"configs": [str(fused)], "numerics": False,
           "grid": {"args.shape": [[8, 56, 56, 64]], "tiling_tolerance": [0, 0.01]}}
    sp = tmp_path / "tol.yaml"
    sp.write_text(json.dumps(doc))
    rows = run_sweep(load_sweep(sp), tmp_path / "tol", workers=1)
    assert all(r["tiling_source"] == "cost model" and not r["error"] for r in rows)
    strict, tied = sorted(rows, key=lambda r: r["tiling_tolerance"])
    assert strict["cycles"] <= tied["cycles"] <= strict["cycles"] * 1.01 and strict["tiles"] > tied["tiles"]


def test_sweep_file_errors(tmp_path):
    with pytest.raises(ConfigError, match="grid.bogus"):
        load_sweep(write_sweep(tmp_path, {"bogus": [1]}))
    with pytest.raises(ConfigError, match="tiling.<key>"):
        load_sweep(write_sweep(tmp_path, {"tiling.a.b": [1]}))
    with pytest.raises(ConfigError, match="plot.x"):
        load_sweep(write_sweep(tmp_path, {"args.core_mask": [1]}, plot={"x": "args.nope"}))
    rows = run_sweep(load_sweep(write_sweep(tmp_path, {"target.regions.hbm.size_bytes": [1]})), tmp_path / "o",
                     workers=1)
    assert "hbm" in rows[0]["error"]


def test_cli_sweep(tmp_path, capsys):
    p = write_sweep(tmp_path, {"args.core_mask": [1, 255]})
    assert main(["sweep", str(p), "-o", str(tmp_path / "cli"), "--workers", "1"]) == 0
    assert "2 points" in capsys.readouterr().out
    assert (tmp_path / "cli" / "sweep.csv").exists()
