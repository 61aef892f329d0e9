"""Calibration against published figures: fit FT78NE's assumed parameters to some published GEMM runs of the
FT-M7032 cluster, then check the fitted chip on published runs left out of the fit.

    python3 bench/calibrate_published.py [-o bench/calibrate_published.md]

The published figures (Yu et al., IPDPS 2024: single-core NN with C streamed per k block; the BLAS-for-multi-core-
DSP reports: 8-core irregular GEMM) are efficiencies of the FMAC peak; each becomes a measurement of cycles,
``2 m n k / (efficiency x peak)``, with the published algorithm forced through tiling keys as in
bench/gemm_published.py (the best published kernel of the irregular shapes: dspsim's default plan stands for it).
``dspsim calibrate``'s fit (``sim.calibrate.calibrate``) then moves the parameters named in :data:`PARAMETERS`,
assumptions of targets/FT78NE.yaml, to match the rows marked ``fit``; the rows marked ``check`` are simulated on
the fitted chip.  Nothing here changes the shipped target: whether the fitted values are physical is for the
reader (a fit that matches the figures it saw but not the ones it did not says the model lacks something).
Timing only; about 35 minutes on 2 shared cores (each evaluation simulates every fitted row).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import sim  # noqa: E402
from sim.calibrate import Measurement, calibrate, load_target_document, simulate  # noqa: E402

A, B, C = 0x80000000, 0x90000000, 0xA0000000
#: The published library's NN blocking (as bench/gemm_published.py).
LIBRARY = {"split": "n", "c_home": "ddr", "a_loader": "core0", "a_buffers": 1, "k_block": 512, "n_block": 128}
#: (label, m, n, k, cores, tiling, published efficiency, role).
ROWS = [
    ("1 core NN, C streamed, KA = 128 (Yu et al., about 92 %)", 576, 1536, 2048, 1,
     {"c_home": "ddr", "k_block": 128, "m_micro": 6, "n_micro": 96, "n_block": 96}, 0.92, "fit"),
    ("1 core NN, C streamed, KA = 256 (about 94 %)", 576, 1536, 2048, 1,
     {"c_home": "ddr", "k_block": 256, "m_micro": 6, "n_micro": 96, "n_block": 96}, 0.94, "fit"),
    ("1 core NN, C streamed, KA = 512 (about 96 %)", 576, 1536, 2048, 1,
     {"c_home": "ddr", "k_block": 512, "m_micro": 6, "n_micro": 96, "n_block": 96}, 0.96, "fit"),
    ("8 cores, M = 144, K = 4096, N = 12288: the library (56.7 %)", 144, 12288, 4096, 8,
     {**LIBRARY, "m_block": 144}, 0.567, "fit"),
    ("8 cores, M = 144: the best published kernel (81 %; dspsim's default plan)", 144, 12288, 4096, 8, None, 0.81,
     "check"),
    ("8 cores, M = 192: the best published kernel (91.4 %; dspsim's default plan)", 192, 12288, 4096, 8, None, 0.914,
     "check"),
]
#: The assumed parameters fitted: the control cycles of each tile's compute call, and DDR's bandwidth (inferred
#: from DDR-bound published runs, not published itself).
PARAMETERS = ["core.tile_overhead_cycles", "regions.ddr.bandwidth_bytes_per_cycle"]


def measurement(m: int, n: int, k: int, cores: int, tiling: dict | None, efficiency: float,
                peak_per_core: int) -> Measurement:
    """The published run as a measurement: its cycles at that efficiency of the cores' FMAC peak."""
    args: dict = {"a": A, "b": B, "c": C, "m": m, "n": n, "k": k, "core_mask": (1 << cores) - 1}
    if tiling is not None:
        args["tiling"] = tiling
    return Measurement("fp_gemm_s", args, round(2 * m * n * k / (efficiency * peak_per_core * cores)))


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-o", "--output", type=Path, help="also write the table to this markdown file")
    args = p.parse_args(argv)
    doc, _ = load_target_document("FT78NE")
    core = sim.load_target("FT78NE").core
    peak = core.precisions["fp32"].lanes * core.units["fmac"].count * 2
    ms = [measurement(m, n, k, c, t, e, peak) for _, m, n, k, c, t, e, _ in ROWS]
    fit = [mm for mm, r in zip(ms, ROWS) if r[-1] == "fit"]
    t0 = time.perf_counter()
    cal = calibrate(doc, fit, PARAMETERS, progress=sys.stderr)
    before = simulate(doc, ms)
    after = simulate(cal.document, ms)
    seconds = time.perf_counter() - t0
    lines = ["| published run | role | published cycles | shipped FT78NE | error | fitted FT78NE | error |",
             "|---|---|---|---|---|---|---|"]
    for r, mm, b, a in zip(ROWS, ms, before, after):
        lines.append(f"| {r[0]} | {r[-1]} | {mm.cycles:,} | {int(b):,} | {100 * (b - mm.cycles) / mm.cycles:+.1f} % | "
                     f"{int(a):,} | {100 * (a - mm.cycles) / mm.cycles:+.1f} % |")
    values = ", ".join(f"{n}: {cal.before[n]:g} -> {cal.after[n]:g}" for n in PARAMETERS)
    lost = "; ".join(f"{n}: {why}" for n, why in cal.unidentified.items())
    text = "\n".join(lines) + f"\n\nFitted ({seconds:.0f} s): {values}" + (f"; not identified: {lost}" if lost else "")
    print(text)
    if args.output is not None:
        args.output.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
