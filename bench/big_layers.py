"""Big layers through ``dspsim run``: wall time and peak memory of a fresh process, empty and warm tuning cache.

Run from the repository root::

    python3 bench/big_layers.py                 # results in bench/big_layers.md
    python3 bench/big_layers.py --out -         # print only

Each layer is a run-config made from a shipped one with a larger shape (written to a temporary folder with
its trace and outputs), run as ``dspsim run`` in a fresh process three ways: with an empty tuning cache (the
first call a user makes), again with the cache that run filled, and timing only (``numerics: false``).  Wall
time, CPU time (user + system) and the child's peak resident set (``ru_maxrss`` of the waited-for child) are
kept, the best times and the worst memory of ``--repeat`` runs.  On a virtual machine the first touch of fresh
memory can stall (the host hands pages back lazily: a 205 MB fill measured 0.05 s and 2.1 s minutes apart on
the machine the results come from): that is system time, so the table gives user and system time apart.
The issue's targets: the 64x112x112x64 FusedBatchNormGrad under 5 s and under 1 GB.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Layer:
    """A shipped run-config with its shapes replaced: ``shapes`` maps an argument or data name to its shape."""

    name: str
    config: str
    shapes: dict[str, list[int]]
    addresses: dict[str, int]


LAYERS = (
    Layer("FusedBatchNormGrad 64x112x112x64 NHWC training, FT78NE (3 x 205 MB tensors)",
          "ft78ne_fused_batch_norm_grad_s.yaml",
          {"shape": [64, 112, 112, 64], "y_backprop": [64, 112, 112, 64], "x": [64, 112, 112, 64],
           "x_backprop": [64, 112, 112, 64]},
          {"y_backprop": 0xA0000000, "x": 0x90000000, "x_backprop": 0xD0000000}),
    Layer("Conv2DBackpropFilter 32x56x56x64 -> 3x3x64x64 SAME (7.4 GFLOP), FT78NE",
          "ft78ne_conv2d_backprop_filter_s.yaml",
          {"input_shape": [32, 56, 56, 64], "input": [32, 56, 56, 64], "out_backprop": [32, 56, 56, 64]},
          {"input": 0xA0000000, "out_backprop": 0xA4000000, "output": 0xA8000000}),
)


def write_config(layer: Layer, folder: Path, numerics: bool) -> Path:
    """The layer's run-config in ``folder`` (its trace beside it)."""
    doc = yaml.safe_load((ROOT / "configs" / layer.config).read_text())
    for key, shape in layer.shapes.items():
        if key in doc["args"]:
            doc["args"][key] = shape
    for key, addr in layer.addresses.items():
        doc["args"][key] = addr
    for entry in doc["data"] + doc["outputs"]:
        if entry["name"] in layer.shapes:
            entry["shape"] = layer.shapes[entry["name"]]
        if entry["name"] in layer.addresses:
            entry["addr"] = layer.addresses[entry["name"]]
    doc["numerics"] = numerics
    doc["trace"] = "layer.json"
    path = folder / ("layer.yaml" if numerics else "layer_timing.yaml")
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def run_once(config: Path, cache: Path) -> tuple[float, float, float, int]:
    """Wall, user and system seconds and peak resident bytes of ``dspsim run config`` in a fresh process."""
    env = dict(os.environ, DSPSIM_CACHE_DIR=str(cache))
    env.pop("DSPSIM_NO_CACHE", None)
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "sim.cli", "run", str(config), "--out-dir", str(config.parent)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=ROOT)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    stderr = proc.stderr.read().decode() if proc.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"dspsim run {config.name} failed: {stderr.strip().splitlines()[-1:]}")
    return wall, usage.ru_utime, usage.ru_stime, usage.ru_maxrss * 1024  # ru_maxrss: kilobytes on Linux


def measure(layer: Layer, repeat: int) -> dict[str, tuple[float, float, float, int]]:
    """The layer's empty-cache, warm-cache and timing-only runs: the wall, user and system seconds of the run
    with the least wall time, and the worst peak bytes."""
    out: dict[str, list[tuple[float, float, float, int]]] = {"empty cache": [], "warm cache": [],
                                                              "timing only": []}
    with tempfile.TemporaryDirectory(prefix="dspsim-big-") as tmp:
        folder = Path(tmp)
        full, timing = write_config(layer, folder, True), write_config(layer, folder, False)
        for i in range(repeat):
            cache = folder / f"cache{i}"
            out["empty cache"].append(run_once(full, cache))
            out["warm cache"].append(run_once(full, cache))
            out["timing only"].append(run_once(timing, folder / f"cache-t{i}"))
    return {k: (*min(v)[:3], max(r[3] for r in v)) for k, v in out.items()}


def main(argv: list[str]) -> int:
    """Measure every layer and write the table."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeat", type=int, default=2, help="runs of each kind (best time, worst memory kept)")
    p.add_argument("--out", default="bench/big_layers.md", help="report path, or - for standard output only")
    a = p.parse_args(argv)
    lines = ["# Big layers through `dspsim run`", "",
             f"Made by `python3 bench/big_layers.py{' ' + shlex.join(argv) if argv else ''}` on "
             f"{os.cpu_count()} logical cores (load average at the start "
             f"{', '.join(f'{x:.2f}' for x in os.getloadavg())}); each run a fresh process (`python -m sim.cli run`: "
             "import, data generation, simulation, trace and outputs written); the run with the least wall time "
             f"(its user and system time) and the worst peak resident set of {a.repeat}.", "",
             "| layer | empty tuning cache: wall s | user s | sys s | MiB | warm tuning cache: wall s | user s | "
             "sys s | MiB | timing only: wall s | user s | sys s | MiB |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for layer in LAYERS:
        r = measure(layer, a.repeat)
        cells = " | ".join(f"{r[k][0]:.2f} | {r[k][1]:.2f} | {r[k][2]:.2f} | {r[k][3] / (1 << 20):.0f}"
                           for k in ("empty cache", "warm cache", "timing only"))
        lines.append(f"| {layer.name} | {cells} |")
        print(lines[-1], flush=True)
    lines.append("")
    text = "\n".join(lines)
    if a.out == "-":
        print(text)
    else:
        Path(a.out).write_text(text)
        print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
