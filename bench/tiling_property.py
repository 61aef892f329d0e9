"""The longer run of the tiling-space property (tests/test_tiling_spaces.py): many drawn calls per kernel,
larger shapes, more candidates checked per call.

    python3 bench/tiling_property.py [--examples N] [--scale S] [--kernel NAME ...] [--seed SEED]

Prints, per kernel, the calls drawn and the seconds taken; a failure prints hypothesis' smallest falsifying
call and exits 1.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The repository first: tests/ has a folder named kernels (its kernel tests) that must not shadow the package.
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from hypothesis import HealthCheck, given, seed, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from tiling_property import KERNELS, calls, check_space  # noqa: E402


def run(kernel: str, examples: int, scale: int, most: int, at: int) -> float:
    """Check ``examples`` drawn calls of ``kernel``; the seconds it took."""
    t0 = time.perf_counter()

    @seed(at)
    @settings(max_examples=examples, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(data=st.data())
    def check(data):
        chip, symbol, args = data.draw(calls(kernel, scale))
        check_space(chip, symbol, args, data, most)

    check()
    return time.perf_counter() - t0


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--examples", type=int, default=200, help="drawn calls per kernel (default 200)")
    p.add_argument("--scale", type=int, default=3, help="how much larger the largest sizes get (default 3)")
    p.add_argument("--candidates", type=int, default=10, help="candidates checked per call (default 10)")
    p.add_argument("--kernel", action="append", choices=KERNELS, help="only this kernel (repeatable)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    for kernel in args.kernel or KERNELS:
        seconds = run(kernel, args.examples, args.scale, args.candidates, args.seed)
        print(f"{kernel}: {args.examples} calls, {seconds:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
