"""Write the shipped run-configs (configs/*.yaml) from the kernels' examples (kernels/examples/).

Every file here but sweeps/ is generated: edit the example (its arguments, data, comment) and run
``python configs/generate.py``; ``--check`` only says which files differ (tests/test_examples.py checks it).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from kernels.examples import configs  # noqa: E402
from kernels.examples.run_config import run_config_text  # noqa: E402


def main(argv: list[str]) -> int:
    """Write (or with ``--check`` compare) every config; 1 when a file differs or is not generated."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--check", action="store_true", help="compare the configs with their examples, write nothing")
    check = ap.parse_args(argv).check
    wanted = {f"{e.config}.yaml": run_config_text(e) for e in configs()}
    differs = [name for name, text in wanted.items()
               if not (HERE / name).exists() or (HERE / name).read_text() != text]
    strays = sorted(p.name for p in HERE.glob("*.yaml") if p.name not in wanted)
    if not check:
        for name in differs:
            (HERE / name).write_text(wanted[name])
            print(f"wrote configs/{name}")
    for name in strays:
        print(f"configs/{name}: no example generates it (add one to kernels/examples/ or delete it)")
    if check and differs:
        print("differ from their examples: " + ", ".join(differs))
    return 1 if strays or (check and differs) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
