"""Wall time of one timing-only sweep (48 conv2d backprop filter points, the default mode of sweeps) on 1 and 2
local workers and on a Dask LocalCluster of 1 and 2 workers.

Run: python bench/sweep_speedup.py [ROUNDS]   (prints the four wall times, each the best of ROUNDS runs, default 2,
and the speedups; not part of the tests)
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from sim.sweep import load_sweep, run_sweep

ROOT = Path(__file__).resolve().parent.parent
GRID = {"target": ["FT78NE", "MT7004"], "args.core_mask": [1, 3, 15],
        "args.input_shape": [[16, 56, 56, 64], [32, 56, 56, 64]],
        "target.regions.ddr.bandwidth_bytes_per_cycle": [8, 12, 16, 24]}


def main(rounds: int = 2) -> None:
    times: dict[str, float] = {}

    def keep(label: str, seconds: float) -> None:
        times[label] = min(seconds, times.get(label, float("inf")))

    with tempfile.TemporaryDirectory() as tmp:
        spec_path = Path(tmp) / "sweep.yaml"
        spec_path.write_text(json.dumps({"configs": [str(ROOT / "configs" / "ft78ne_conv2d_backprop_filter_s.yaml")],
                                         "numerics": False, "grid": GRID}))
        spec = load_sweep(spec_path)
        from distributed import Client, LocalCluster
        for rnd in range(rounds):  # a fresh output folder each time: every point runs
            for workers in (1, 2):
                t0 = time.perf_counter()
                run_sweep(spec, Path(tmp) / f"local{workers}-{rnd}", workers=workers)
                keep(f"local pool, {workers} worker(s)", time.perf_counter() - t0)
            for workers in (1, 2):
                with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, Client(cluster) as client:
                    client.run(lambda: __import__("sim.simulator"))  # workers import dspsim before the clock starts
                    t0 = time.perf_counter()
                    run_sweep(spec, Path(tmp) / f"dask{workers}-{rnd}", scheduler=cluster.scheduler_address)
                    keep(f"dask, {workers} worker(s)", time.perf_counter() - t0)
    print(f"{len(spec.points())} points")
    for k, v in times.items():
        print(f"{k:<26} {v:7.2f} s")
    local = times["local pool, 1 worker(s)"] / times["local pool, 2 worker(s)"]
    dask = times["dask, 1 worker(s)"] / times["dask, 2 worker(s)"]
    print(f"speedup 1 -> 2 workers: local pool {local:.2f}x, dask {dask:.2f}x")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=(__doc__ or "").strip().splitlines()[0])
    ap.add_argument("rounds", nargs="?", type=int, default=2, help="rounds of every setup (default 2; the best kept)")
    main(ap.parse_args().rounds)
