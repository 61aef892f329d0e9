"""How much the bench cases move when an assumption of the target files changes by a plausible factor.

    python3 bench/sensitivity.py [--size large] [-o bench/sensitivity.md]

The numbers of the shipped targets that no published figure fixes are stated as assumptions in the files; this
measures what the assumptions that matter most are worth.  Per case (timing only, the tuning search choosing
afresh on each variant, so a plan that would change with the chip does): the cycles on the shipped target and
on each variant, as a change.  Variants:

* MT7004's ``fp16_fp32acc`` at 16 lanes instead of 32: fp16 products accumulated in fp32 at the fp32 rate, should
  the FT-M7002's published "16-bit 200 GMACS" be fixed-point;
* DDR at 0.8 and 1.25 times its bandwidth (the DDR figure is inferred from DDR-bound published runs);
* GSM at half its bandwidth (its 64 B/cycle is an assumption sitting at what the 8-core GEMM needs);
* DMA setup at twice its cycles (assumed 64);
* the DDR's organisation (``regions.ddr.rows``: datasheet values, but how the chip's channels and banks are laid
  out is assumed): the activation window (tFAW) twice as long, and rows of a quarter the bytes;
* the DDR controller's write batch (``regions.ddr.rows.write_batch_bytes``, assumed 2 KiB: how many bytes of
  writes it drains per read/write turn of the data bus) at half and twice that.
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import cases  # noqa: E402

import sim  # noqa: E402
from sim.calibrate import load_target_document, parameter_values  # noqa: E402
from sim.files.docedit import set_path, split_path  # noqa: E402
from sim.model.target_loader import parse_target  # noqa: E402

#: (label, chips it applies to, key path, factor).
VARIANTS = [
    ("fp16_fp32acc at 16 lanes", ("MT7004",), "core.precisions.fp16_fp32acc.lanes", 0.5),
    ("DDR x 0.8", ("FT78NE", "MT7004"), "regions.ddr.bandwidth_bytes_per_cycle", 0.8),
    ("DDR x 1.25", ("FT78NE", "MT7004"), "regions.ddr.bandwidth_bytes_per_cycle", 1.25),
    ("GSM x 0.5", ("FT78NE", "MT7004"), "regions.gsm.bandwidth_bytes_per_cycle", 0.5),
    ("DMA setup x 2", ("FT78NE", "MT7004"), "dma.setup_cycles", 2.0),
    ("DDR tFAW x 2", ("FT78NE", "MT7004"), "regions.ddr.rows.window_cycles", 2.0),
    ("DDR rows x 0.25", ("FT78NE", "MT7004"), "regions.ddr.rows.row_bytes", 0.25),
    ("DDR write batch x 0.5", ("FT78NE", "MT7004"), "regions.ddr.rows.write_batch_bytes", 0.5),
    ("DDR write batch x 2", ("FT78NE", "MT7004"), "regions.ddr.rows.write_batch_bytes", 2.0),
    ("DMA engines x 2", ("FT78NE", "MT7004"), "dma.engines_per_core", 2.0),
]


def target(chip: str, key: str | None = None, factor: float = 1.0) -> sim.Target:
    """The shipped chip, or its variant with ``key`` scaled by ``factor``."""
    doc, path = load_target_document(chip)
    if key is not None:
        value = parameter_values(doc, [key])[key] * factor
        doc = copy.deepcopy(doc)
        whole = key.endswith(("lanes", "cycles", "bytes", "per_core"))  # (counts the loader takes as ints)
        set_path(doc, split_path(key), round(value) if whole else value, key)
    return parse_target(doc, f"{chip} ({key} x {factor:g})" if key else path)


def cycles(case_id: str, chip: sim.Target) -> int:
    """The timing-only cycles of a bench case on ``chip``."""
    case = cases.build(case_id)
    m = sim.Simulator(chip, tuning_cache=False)
    return m.call(case.symbol, numerics=False, **case.args).cycles


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", default="large", help="bench case size (default large)")
    p.add_argument("-o", "--output", type=Path, help="also write the table to this markdown file")
    args = p.parse_args(argv)
    head = ["case", "cycles"] + [v[0] for v in VARIANTS]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    t0 = time.perf_counter()
    for case_id in cases.case_ids(sizes=[args.size]):
        chip = case_id.split("/")[1]
        base = cycles(case_id, target(chip))
        cells = [case_id, f"{base:,}"]
        for _, chips, key, factor in VARIANTS:
            if chip not in chips or (key.startswith("core.precisions") and "/hp/" not in case_id):
                cells.append("-")
                continue
            got = cycles(case_id, target(chip, key, factor))
            cells.append(f"{100 * (got - base) / base:+.1f} %")
        lines.append("| " + " | ".join(cells) + " |")
        print(lines[-1], flush=True)
    table = "\n".join(lines)
    print(f"({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    if args.output is not None:
        args.output.write_text(table + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
