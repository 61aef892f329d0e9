"""Quick look at the kernels' large shapes on FT78NE: simulator wall time against the same math once in numpy.

Run ``python3 bench/bench_kernels.py [name ...]`` from the repository root.  For each
kernel's large shape on FT78NE (``bench/cases.py``) it prints the simulator's wall time
(a warm call: the tiling is chosen by the first), numpy's wall time for the same math,
their ratio, the simulated cycles, the fraction of the roofline bound reached and the
resource that sets the bound.  In-process and quick; ``bench/run.py`` is the full
benchmark (every chip, precision and size, events, engine share, memory) that writes
``bench/results.md``.  Not part of the tests.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import cases as bench_cases  # noqa: E402

import sim  # noqa: E402


def _best(fn: Callable[[], object], repeat: int = 3) -> float:
    """Best wall time of ``repeat`` calls."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def line(kernel: str) -> str:
    """One kernel's large FT78NE fp32 case, measured and checked, as one line."""
    case = bench_cases.build(f"{kernel}/FT78NE/fp/large")
    m = sim.Simulator(case.chip)
    for addr, arr in case.inputs.items():
        m.write(addr, arr)
    run = m.call(case.symbol, **case.args)
    for out, want in zip(case.outputs, case.numpy_fn()):
        np.testing.assert_allclose(m.read(out.addr, out.shape, out.dtype), want, rtol=out.rtol, atol=out.atol)
    t_sim = _best(lambda: m.call(case.symbol, **case.args))
    t_np = _best(case.numpy_fn)
    return (f"{case.symbol:<44} {case.shape_text:<34} sim {t_sim:7.3f} s  numpy {t_np:7.3f} s  "
            f"ratio {t_sim / t_np:5.1f}  cycles {run.cycles:>10}  roofline {100 * run.roofline_fraction:5.1f}%  "
            f"bound by {run.roofline.bound_by}")


def main(argv: list[str]) -> int:
    """Run the named kernels (all by default) and print one line each."""
    if any(a in ("-h", "--help") for a in argv):
        print(f"usage: bench_kernels.py [NAME ...]  (default: all of {', '.join(bench_cases.BUILDERS)})")
        return 0
    names = argv or list(bench_cases.BUILDERS)
    unknown = [n for n in names if n not in bench_cases.BUILDERS]
    if unknown:
        print(f"unknown benchmark(s): {', '.join(unknown)}; known: {', '.join(bench_cases.BUILDERS)}",
              file=sys.stderr)
        return 2
    for name in names:
        print(line(name), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
