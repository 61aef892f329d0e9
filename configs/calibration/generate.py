"""Write configs/calibration/ft78ne_measurements.csv: an example measurements file for ``dspsim calibrate``.

No board measured these: they are the cycles dspsim gives on a copy of FT78NE whose DDR moves 16 bytes per cycle
instead of the shipped 20 (a board with slower memory), for five DDR-bound calls.  Calibrating FT78NE on them
with ``--params regions.ddr.bandwidth_bytes_per_cycle`` recovers the 16 (tests/test_calibrate.py checks it; the
README's command).  ``python configs/calibration/generate.py`` writes the file again after a timing-model change
(``--check`` compares instead: tests/test_calibrate.py runs it).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))

from sim.calibrate import Measurement, load_target_document, simulate, with_parameters  # noqa: E402

#: The DDR bandwidth of the "board" (bytes per cycle; the shipped FT78NE says 20).
BOARD_DDR_BYTES_PER_CYCLE = 16
OUT = HERE / "ft78ne_measurements.csv"


def batch_norm_grad(batch: int, channel: int, mask: int) -> dict:
    """BatchNormGrad's arguments, its buffers 16 MiB apart in DDR."""
    base, step = 0x80000000, 0x1000000
    return {"x": base, "dy": base + step, "dx": base + 2 * step,
            "params": [base + 3 * step, base + 3 * step + 0x10000, base + 3 * step + 0x20000,
                       base + 3 * step + 0x30000, base + 3 * step + 0x40000, batch, channel, 1], "core_mask": mask}


#: Calls of different sizes (the launch overhead and the bandwidth move them differently) on 8, 4 and 2 cores.
CALLS = [("fp_batch_norm_grad_s", batch_norm_grad(1024, 64, 0xFF)),
         ("fp_batch_norm_grad_s", batch_norm_grad(4096, 64, 0xFF)),
         ("fp_batch_norm_grad_s", batch_norm_grad(4096, 128, 0x0F)),
         ("fp_batch_norm_grad_s", batch_norm_grad(2048, 32, 0x03)),
         ("fp_batch_norm_grad_s", batch_norm_grad(16384, 32, 0xFF))]


def rows() -> list[list]:
    """The CSV's rows: header, then each call with its cycles on the board."""
    doc, _ = load_target_document("FT78NE")
    board = with_parameters(doc, {"regions.ddr.bandwidth_bytes_per_cycle": BOARD_DDR_BYTES_PER_CYCLE})
    cycles = simulate(board, [Measurement(s, a, 1) for s, a in CALLS])
    # The buffers' addresses in hex, as a user writes them (the reader takes "0x..." strings for pointers).
    shown = [{k: (f"{v:#x}" if k in ("x", "dy", "dx") else v) for k, v in a.items()} for _, a in CALLS]
    return [["symbol", "args", "cycles"]] + [[s, json.dumps(a), int(c)] for (s, _), a, c in zip(CALLS, shown, cycles)]


def text() -> str:
    """The CSV file's text, as this script writes it."""
    out = io.StringIO(newline="")
    csv.writer(out).writerows(rows())
    return out.getvalue()


def main(argv: list[str]) -> int:
    """Write the file (or with ``--check`` compare it); 1 when ``--check`` finds it differs."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare the file with what this script writes, write "
                                                         "nothing (exit 1 when it differs)")
    args = ap.parse_args(argv)
    wanted = text()
    name = OUT.relative_to(HERE.parent.parent)
    if args.check:
        same = OUT.exists() and OUT.read_bytes() == wanted.encode()
        print(f"{name}: {'up to date' if same else 'differs from what the timing model gives: run this script'}")
        return 0 if same else 1
    OUT.write_bytes(wanted.encode())
    print(f"wrote {name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
