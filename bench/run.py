"""Benchmark of the simulator against numpy, per kernel, shape, chip and precision.

Run from the repository root::

    python3 bench/run.py                       # every case, results in bench/results.md
    python3 bench/run.py --kernel conv2d_backprop_filter --size large --out -   # print only

Each case runs in a fresh Python subprocess (so its peak memory is its own), with an empty tuning cache
(``DSPSIM_CACHE_DIR`` a fresh folder), that:

* times ``import sim`` and ``Simulator(...)``, places the inputs and makes the first call (the tiling search
  runs here: candidates simulated timing-only, fewest tiles first, those that cannot win left out; the picked
  plan's simulation is kept, so the call itself only replays its effects on memory);
* checks the simulator's outputs against the same math once in numpy;
* times, best of ``--repeat``: a repeated full call (only the numerics replayed), a simulated full call and a
  timing-only call of a plan not simulated before (``clear_caches``, its tiling given: planning, plan check
  and simulation), the warm planning (bind, layout check, cached tiling and plan:
  ``Simulator.plan_with_choice``), the kernel's planning uncached (``kernel.plan``) and numpy's whole-tensor
  computation;
* counts the SimPy events of a call (``Run.sim_events``) and measures memory: the
  process's peak resident set (``ru_maxrss``, inputs and numpy's result included),
  what the first call added to it, and the peak of new allocations during one call (``tracemalloc``);
* with ``--tf``, then (same process, same run; after the memory is read, so
  TensorFlow's own pages are not in it) runs TensorFlow's CPU op for the same math
  (``bench/tf_ops.py``): its first call and its best warm call and the resident set
  its import and calls added, its outputs checked against the same numpy reference.
  ``--tf`` needs the ``bench`` extra (``pip install -e '.[bench]'``); without
  tensorflow it says so and measures the rest.

A second fresh process then makes only the first call again, with the tuning cache the first one filled.

A simulated full call splits into planning, the event engine (timing-only call minus planning: SimPy
scheduling, DMA engines and the shared bandwidth's recomputations, trace events, the roofline) and numerics
(simulated full minus timing-only: DMA byte moves, operand reads and writes, the tiles' numpy work).
``engine share`` is the event engine's part of it.

numpy's BLAS may run on several threads; the children inherit ``--blas-threads``
(through OPENBLAS_NUM_THREADS / OMP_NUM_THREADS) so that both sides of the ratio
get the same threads, and the table header states the count.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import platform
import resource
import shlex
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import cases as bench_cases  # noqa: E402
import numpy as np  # noqa: E402

#: Targets of issue 7 on large shapes.
#: Targets of issue 15 on large shapes, against TensorFlow's op for the same math: a repeated full call, the
#: first call in a fresh process with an empty and with a warm tuning cache (over TF's first call), the
#: timing-only speed-up over a simulated full call; memory of issue 7.
TARGET_REPEAT_OVER_TF = 3.0
TARGET_FIRST_EMPTY_OVER_TF = 10.0
TARGET_FIRST_WARM_OVER_TF = 4.0
TARGET_MEMORY_BYTES = 2 << 30
TARGET_TIMING_ONLY_SPEEDUP = 10.0
#: Measurements merged over rounds by their best (wall times) or worst (memory) value.
BEST_OF_ROUNDS = ("cold_s", "start_s", "first_s", "first_warm_s", "full_s", "full_sim_s", "timing_s", "lookup_s",
                  "plan_s", "numpy_s", "tf_s", "tf_first_s")
WORST_OF_ROUNDS = ("call_peak_bytes", "first_call_peak_bytes", "peak_rss_bytes", "tf_peak_bytes")


def _best(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    """Best wall time of ``repeat`` calls of ``fn``, and the last result."""
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def blas_threads() -> int | None:
    """The thread count numpy's OpenBLAS uses, when it can be asked (None otherwise)."""
    libs = Path(np.__file__).resolve().parent.parent / "numpy.libs"
    for lib in sorted(libs.glob("*openblas*")) if libs.is_dir() else []:
        dll = ctypes.CDLL(str(lib))
        for sym in ("scipy_openblas_get_num_threads64_", "openblas_get_num_threads64_", "openblas_get_num_threads"):
            fn = getattr(dll, sym, None)
            if fn is not None:
                fn.restype = ctypes.c_int
                return int(fn())
    return None


def _longest(m: Any, case: bench_cases.Case, choice: Any) -> dict | None:
    """The tiling the cost model priced (or used) that cuts the call into the fewest tiles."""
    listed = [c for c, _ in choice.candidates] or ([choice.tiling] if choice.tiling else [])
    if not listed:
        return None

    def tiles(tiling: dict) -> int:
        _, plan = m.plan(case.symbol, tiling=tiling, **case.args)
        return plan.tile_count

    return min(listed, key=tiles)


def measure(case_id: str, repeat: int, tiling_mode: str = "default", tf: bool = False,
            first_only: bool = False) -> dict[str, Any]:
    """Every measurement of one case (run in a fresh process), with the cost model's tiling or the longest;
    TensorFlow's op for the same math too when ``tf``; only the fresh process's first call when ``first_only``
    (run again with the tuning cache the first child filled)."""
    case = bench_cases.build(case_id)
    t0 = time.perf_counter()
    import sim
    m = sim.Simulator(case.chip)
    start_s = time.perf_counter() - t0  # import sim and Simulator(...): what a fresh process pays before calling
    for addr, arr in case.inputs.items():
        m.write(addr, arr)
    reset_peak_rss()
    rss_before = current_rss_bytes()
    t0 = time.perf_counter()
    run = m.call(case.symbol, **case.args)
    cold = time.perf_counter() - t0
    first_call_peak = peak_rss_since_reset() - rss_before
    first = {"case": case_id, "start_s": start_s, "cold_s": cold, "first_s": start_s + cold,
             "first_searched": run.tiling is not None and run.tiling.simulated > 0}
    if first_only:
        return first
    if tiling_mode == "longest":
        tiling = _longest(m, case, run.tiling)
        if tiling is not None:
            case.args = dict(case.args, tiling=tiling)
            run = m.call(case.symbol, **case.args)
    reference = case.numpy_fn()
    for out, want in zip(case.outputs, reference):
        got = m.read(out.addr, out.shape, out.dtype)
        np.testing.assert_allclose(got.astype(np.float64), np.asarray(want).astype(out.dtype).astype(np.float64),
                                   rtol=out.rtol, atol=out.atol, err_msg=f"{case_id}: {out.name}")
    # A repeated call: tiling, plan and the plan's simulated timing cached, only the numerics replayed.
    full, run = _best(lambda: m.call(case.symbol, **case.args), repeat)
    chosen = dict(run.tiling.tiling) if run.tiling and run.tiling.tiling else None

    def fresh(numerics: bool) -> Any:
        """A call of a plan not simulated before (what a new sweep point pays once its tiling is known)."""
        m.clear_caches()
        return m.call(case.symbol, numerics=numerics, **dict(case.args, tiling=chosen) if chosen else case.args)
    timing, trun = _best(lambda: fresh(False), repeat)
    full_sim, srun = _best(lambda: fresh(True), repeat)
    if (trun.cycles, trun.events) != (run.cycles, run.events) or (srun.cycles, srun.events) != (run.cycles,
                                                                                              run.events):
        raise AssertionError(f"{case_id}: timing-only, simulated and replayed runs differ")
    # A warm call finds its tiling and plan cached: what remains of planning is bind, layout check and lookup.
    lookup, (call, _, choice) = _best(lambda: m.plan_with_choice(case.symbol, **case.args), repeat)
    kernel, ctx = m.kernel_of(call), replace(m.context(call), tiling=choice.tiling)
    plan, _ = _best(lambda: kernel.plan(call, ctx), repeat)  # the planning a first call pays (uncached)
    numpy_s, _ = _best(case.numpy_fn, repeat)
    tracemalloc.start()
    m.call(case.symbol, **case.args)
    call_peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    tiles = run.plan.tile_count
    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # before TensorFlow loads
    tf_results: dict[str, Any] = {}
    if tf:
        import tf_ops
        reset_peak_rss()
        rss_before = current_rss_bytes()
        tf_results = tf_ops.measure_tf(case, reference, repeat)
        tf_results["tf_peak_bytes"] = peak_rss_since_reset() - rss_before
    return {
        **first, "kernel": case.kernel, "chip": case.chip, "symbol": case.symbol, "size": case.size,
        "shape": case.shape_text, "cycles": run.cycles, "roofline_fraction": run.roofline_fraction,
        "bound_by": run.roofline.bound_by, "tiles": tiles, "trace_events": len(run.events),
        "sim_events": run.sim_events, "full_s": full, "full_sim_s": full_sim, "timing_s": timing,
        "lookup_s": lookup, "plan_s": plan, "numpy_s": numpy_s, "call_peak_bytes": call_peak,
        "first_call_peak_bytes": first_call_peak, "peak_rss_bytes": peak_rss,
        "input_bytes": sum(a.nbytes for a in case.inputs.values()), "blas_threads": blas_threads(),
        "tiling": run.tiling.tiling if run.tiling else None, "tiling_mode": tiling_mode, **tf_results,
    }


def _proc_status_bytes(field: str) -> int:
    """A ``VmRSS``/``VmHWM`` line of /proc/self/status in bytes (0 where there is no /proc)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def current_rss_bytes() -> int:
    """The process's resident set now."""
    return _proc_status_bytes("VmRSS")


def reset_peak_rss() -> None:
    """Start the process's peak resident set (VmHWM) afresh from its current one (Linux: clear_refs 5)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass


def peak_rss_since_reset() -> int:
    """The process's peak resident set since :func:`reset_peak_rss`."""
    return _proc_status_bytes("VmHWM")


def run_case(case_id: str, repeat: int, threads: int | None, tiling_mode: str = "default",
             tf: bool = False) -> dict[str, Any]:
    """Measure one case in a fresh subprocess (its own peak memory, no state from other cases), with an empty
    tuning cache; then the first call again in another fresh process, whose tuning cache the first filled."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")  # TensorFlow's start-up log lines are not results
    if threads is not None:
        env.update(OPENBLAS_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads))
    with tempfile.TemporaryDirectory(prefix="dspsim-bench-cache-") as cache:
        env["DSPSIM_CACHE_DIR"] = cache
        env.pop("DSPSIM_NO_CACHE", None)
        out = _child(case_id, ["--repeat", str(repeat), "--tiling", tiling_mode, *(["--tf"] if tf else [])], env)
        if "error" in out or tiling_mode != "default":
            return dict(out, tiling_mode=tiling_mode)
        again = _child(case_id, ["--first-only"], env)
    if "error" in again:
        return dict(out, error=f"first call with a warm cache: {again['error']}")
    out.update(first_warm_s=again["first_s"], first_warm_searched=again["first_searched"])
    return out


def _child(case_id: str, args: list[str], env: dict[str, str]) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", case_id, *args],
                          capture_output=True, text=True, env=env, cwd=ROOT)
    if proc.returncode != 0:
        return {"case": case_id, "error": (proc.stderr.strip().splitlines() or ["failed"])[-1]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


# -- report -------------------------------------------------------------------------------------

def _mib(n: float) -> str:
    return f"{n / (1 << 20):.0f}"


def _tiling_text(tiling: dict | None) -> str:
    return "-" if not tiling else " ".join(f"{k}={v}" for k, v in tiling.items())


def derived(r: dict[str, Any]) -> dict[str, float]:
    """Ratio, engine/numerics shares, event rate and timing-only speed-up of one measured case."""
    simulated = r["full_sim_s"]
    engine = max(r["timing_s"] - r["plan_s"] - r["lookup_s"], 0.0)
    return {"ratio": r["full_s"] / r["numpy_s"], "engine_share": engine / simulated,
            "numerics_share": max(simulated - r["timing_s"], 0.0) / simulated,
            "events_per_s": r["sim_events"] / engine if engine > 0 else float("nan"),
            "speedup_timing_only": simulated / r["timing_s"]}


HEADER = ("| kernel | chip | symbol | size | shape | tiling | tiles | SimPy events | repeat call s | numpy s | ratio | "
          "simulated full s | timing-only s | x faster | engine share | numerics share | planning s (uncached) | "
          "events/s | call peak MiB | peak RSS MiB | cycles | roofline | bound |")


#: Columns the tables gain when TensorFlow was measured (``--tf``).
TF_HEADER = " TF s | repeat / TF |"


def _tf_cells(r: dict[str, Any]) -> str:
    """The TensorFlow cells of one row: TF's warm call, and the repeated call over it."""
    if "tf_s" not in r:
        return " - | - |"
    return f" {r['tf_s']:.4f} | {r['full_s'] / r['tf_s']:.1f} |"


def table(results: list[dict[str, Any]]) -> str:
    """The Markdown table of the results (with TensorFlow's columns when it was measured)."""
    with_tf = any("tf_s" in r for r in results)
    header = HEADER.replace(" ratio |", " ratio |" + TF_HEADER) if with_tf else HEADER
    lines = [header, "|" + "---|" * (header.count("|") - 1)]
    for r in results:
        if "error" in r:
            lines.append(f"| {r['case']} | error: {r['error']} |")
            continue
        d = derived(r)
        lines.append(
            f"| {r['kernel']} | {r['chip']} | {r['symbol'][:2]} | {r['size']} | {r['shape']} | "
            f"{_tiling_text(r.get('tiling'))} | {r['tiles']} | "
            f"{r['sim_events']} | {r['full_s']:.4f} | {r['numpy_s']:.4f} | {d['ratio']:.2f} |"
            + (_tf_cells(r) if with_tf else "") + f" {r['full_sim_s']:.4f} | {r['timing_s']:.4f} | "
            f"{d['speedup_timing_only']:.2f} | {100 * d['engine_share']:.0f}% | {100 * d['numerics_share']:.0f}% | "
            f"{r['plan_s']:.4f} | {d['events_per_s'] / 1e3:.0f}k | {_mib(r['call_peak_bytes'])} | "
            f"{_mib(r['peak_rss_bytes'])} | {r['cycles']} | {100 * r['roofline_fraction']:.0f}% | {r['bound_by']} |")
    return "\n".join(lines)


#: The lead table of a ``--tf`` run: dspsim's calls against TensorFlow's (the cost model's tilings).
TF_TABLE_HEADER = ("| kernel | chip | symbol | size | shape | TF op (dtype) | TF warm s | dspsim repeat s | "
                   "repeat / TF | TF first s | dspsim first, empty cache s | / TF first | "
                   "dspsim first, warm cache s | / TF first | "
                   "timing-only s | simulated full s | full / timing-only | dspsim first-call peak MiB | "
                   "TF peak MiB | TF against the reference |")


def tf_table(results: list[dict[str, Any]]) -> str:
    """dspsim against TensorFlow's CPU op for the same math, one row per case measured with ``--tf``."""
    lines = [TF_TABLE_HEADER, "|" + "---|" * (TF_TABLE_HEADER.count("|") - 1)]
    for r in results:
        if "tf_s" not in r or r.get("tiling_mode", "default") != "default":
            continue
        warm = r.get("first_warm_s")
        lines.append(
            f"| {r['kernel']} | {r['chip']} | {r['symbol'][:2]} | {r['size']} | {r['shape']} | "
            f"{r['tf_op']} ({r['tf_dtype']}) | {r['tf_s']:.4f} | {r['full_s']:.4f} | {r['full_s'] / r['tf_s']:.1f} | "
            f"{r['tf_first_s']:.4f} | {r['first_s']:.3f} | {r['first_s'] / r['tf_first_s']:.1f} | "
            + (f"{warm:.3f} | {warm / r['tf_first_s']:.1f} | " if warm is not None else "- | - | ")
            + f"{r['timing_s']:.4f} | {r['full_sim_s']:.4f} | {derived(r)['speedup_timing_only']:.2f} | "
            f"{_mib(r['first_call_peak_bytes'])} | {_mib(r.get('tf_peak_bytes', 0))} | {r.get('tf_check', '-')} |")
    return "\n".join(lines)


def verdict(results: list[dict[str, Any]]) -> list[str]:
    """The large shapes that miss a target of the issue, one line each."""
    out = []
    for r in results:
        if r.get("tiling_mode", "default") != "default":
            continue
        if "error" in r:
            out.append(f"- {r['case']}: failed ({r['error']})")
            continue
        if r["size"] != "large":
            continue
        d = derived(r)
        misses = []
        if "tf_s" in r:
            for value, limit, what in ((r["full_s"] / r["tf_s"], TARGET_REPEAT_OVER_TF, "repeat call"),
                                       (r["first_s"] / r["tf_first_s"], TARGET_FIRST_EMPTY_OVER_TF,
                                        "first call, empty cache"),
                                       (r.get("first_warm_s", float("nan")) / r["tf_first_s"],
                                        TARGET_FIRST_WARM_OVER_TF, "first call, warm cache")):
                if not value <= limit:
                    misses.append(f"{what} {value:.1f}x TF > {limit:.0f}x")
        if d["speedup_timing_only"] < TARGET_TIMING_ONLY_SPEEDUP:
            misses.append(f"timing-only {d['speedup_timing_only']:.1f}x < {TARGET_TIMING_ONLY_SPEEDUP:.0f}x")
        if r["peak_rss_bytes"] > TARGET_MEMORY_BYTES:
            misses.append(f"peak RSS {_mib(r['peak_rss_bytes'])} MiB > 2048 MiB")
        if misses:
            out.append(f"- {r['case']}: " + "; ".join(misses))
    return out


def machine_text(results: list[dict[str, Any]], threads: int | None) -> str:
    """Cores, CPU, Python/numpy/SimPy versions and BLAS threads of this machine."""
    import simpy
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    blas = next((r.get("blas_threads") for r in results if r.get("blas_threads") is not None), None)
    tf = next((r for r in results if "tf_version" in r), None)
    tf_text = ("" if tf is None else f"; TensorFlow {tf['tf_version']} (tensorflow-cpu), thread pools intra/inter-op "
               f"{'/'.join(str(n or 'default') for n in tf['tf_threads'])}")
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return (f"{os.cpu_count()} logical cores ({cpu}), load average {load} at the end; Python "
            f"{platform.python_version()}, numpy {np.__version__}, SimPy {simpy.__version__}; numpy BLAS threads "
            f"in the cases: {blas if blas is not None else 'unknown'}"
            + (f" (OPENBLAS_NUM_THREADS={threads})" if threads is not None else " (library default)") + tf_text)


def merge_rounds(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """One case measured in several rounds (fresh processes at different times): the best wall times and the
    worst memory; a round that failed is dropped unless all did."""
    ok = [r for r in rounds if "error" not in r]
    if not ok:
        return rounds[0]
    out = dict(ok[0])
    for key in BEST_OF_ROUNDS:
        if all(key in r for r in ok):
            out[key] = min(r[key] for r in ok)
    for key in WORST_OF_ROUNDS:
        if all(key in r for r in ok):
            out[key] = max(r[key] for r in ok)
    out["rounds"] = len(ok)
    return out


def report(results: list[dict[str, Any]], command: str, threads: int | None, repeat: int, rounds: int = 1) -> str:
    """The whole results.md text."""
    misses = verdict(results)
    return "\n".join([
        "# Simulator benchmark", "",
        f"Made by `{command}` (from the repository root), every case in a fresh subprocess, "
        f"times the best of {repeat}"
        + (f" within a round and of {rounds} rounds (all cases once per round, so a slow spell of this shared "
           f"machine does not decide a case; memory the worst round)" if rounds > 1 else "") + ".", "",
        f"Machine: {machine_text(results, threads)}.", "",
        "Columns: *tiles* and *SimPy events* of one call; *repeat call s* a warm full call (tiling choice, plan "
        "and the plan's simulated timing cached: only the numerics are replayed on the bytes in memory), "
        "*numpy s* the same math once on whole tensors in numpy with the same BLAS threads, *ratio* repeat call / "
        "numpy; *simulated full s* a full call of a plan not simulated before (its tiling given, so no search: "
        "planning, plan check, simulation with numerics), *timing-only s* the same with `numerics=False` (what "
        "a sweep point pays once its tiling is known), *x faster* simulated full / timing-only; shares of the "
        "simulated full call: *engine* = timing-only minus planning and lookups = SimPy scheduling, DMA engines "
        "and the shared bandwidth's recomputations, trace events; *numerics* = simulated full minus timing-only "
        "(DMA byte moves, operand reads/writes, the tiles' numpy work); *planning s (uncached)* the kernel's "
        "plan() alone; *events/s* SimPy events over engine time; *call peak MiB* new allocations during a "
        "repeat call (tracemalloc); *peak RSS MiB* the whole process's peak (inputs, numpy's result and the "
        "simulator's memory pages included).", "",
        *(["## dspsim against TensorFlow", "",
           "TensorFlow's CPU op for the same math (`bench/tf_ops.py`), measured in the same child process right "
           "after dspsim, inputs already TF tensors; its outputs are checked against the numpy reference with "
           "the tolerances dspsim's must meet (last column).  *TF warm s* its best call, *repeat / TF* dspsim's "
           "repeated full call over it; *first* calls: TF's first call of the op in the process (TF already "
           "imported), dspsim's `import sim`, `Simulator(...)` and first `call` in a fresh process, with an empty "
           "tuning cache (the tiling search included) and again in another fresh process whose tuning cache the "
           "first filled; *timing-only* and *simulated full* as below; *dspsim first-call peak MiB* the resident "
           "set the first call added (Linux VmHWM after resetting it), *TF peak MiB* the same for TensorFlow's "
           "import and calls (its libraries included).", "", tf_table(results), ""]
          if any("tf_s" in r for r in results) else []),
        "BLAS threads: the simulator's per-tile matrix products are small and run one after another, so the "
        "fair comparison gives numpy's whole-tensor product the same single thread (on this 2-core machine, "
        "shared with other jobs, a 2-thread OpenBLAS also spins against the other load).", "",
        *sections(results),
        f"Targets on large shapes (issue 15): repeated full call <= {TARGET_REPEAT_OVER_TF:.0f}x TF's warm call, "
        f"first call in a fresh process <= {TARGET_FIRST_EMPTY_OVER_TF:.0f}x TF's first call with an empty tuning "
        f"cache and <= {TARGET_FIRST_WARM_OVER_TF:.0f}x with a warm one (with --tf), timing-only >= "
        f"{TARGET_TIMING_ONLY_SPEEDUP:.0f}x faster than a simulated full call, memory < 2 GB.", "",
        "Large shapes missing a target (with the cost model's tilings):" if misses
        else ("Every large shape meets the targets (with the cost model's tilings)."
              if any(r.get("size") == "large" for r in results) else "No large shape was measured."),
        *misses, "",
    ])


SECTION_TITLES = {
    "default": "## With the tiling the cost model picks (what a call gets by default)",
    "longest": "## With the longest tiles the cost model priced (the candidate with fewest tiles, named as `tiling`)",
}


def sections(results: list[dict[str, Any]]) -> list[str]:
    """One titled table per tiling mode measured."""
    out = []
    for mode, title in SECTION_TITLES.items():
        rows = [r for r in results if r.get("tiling_mode", "default") == mode]
        if rows:
            out += [title, "", table(rows), ""]
    return out


def main(argv: list[str]) -> int:
    """Parse the command line; run the cases (or one, as a child) and write the report."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kernel", action="append", choices=list(bench_cases.BUILDERS), help="only these kernels")
    p.add_argument("--size", action="append", choices=list(bench_cases.SIZES), help="only these sizes")
    p.add_argument("--chip", action="append", choices=sorted({c for c, _ in bench_cases.CHIP_PRECISIONS}))
    p.add_argument("--repeat", type=int, default=3, help="timed repetitions per measurement (best is kept)")
    p.add_argument("--blas-threads", type=int, default=None, help="OPENBLAS_NUM_THREADS of the cases")
    p.add_argument("--out", default="bench/results.md", help="report path, or - for standard output only")
    p.add_argument("--rounds", type=int, default=1,
                   help="run every case this many times, round after round, keeping the best times")
    p.add_argument("--tiling", choices=("default", "longest", "both"), default="default",
                   help="the cost model's tiling, the priced candidate with fewest tiles, or both (two tables)")
    p.add_argument("--tf", action="store_true",
                   help="also time TensorFlow's CPU op for the same math (needs the bench extra: tensorflow-cpu)")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--first-only", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child:
        print(json.dumps(measure(a.child, a.repeat, a.tiling, a.tf, a.first_only)))
        return 0
    if a.tf:
        import tf_ops
        missing = tf_ops.available()
        if missing is not None:
            print(f"--tf: tensorflow is not importable ({missing}); install the bench extra "
                  f"(pip install -e '.[bench]'). Measuring without the TensorFlow columns.", file=sys.stderr)
            a.tf = False
    modes = ("default", "longest") if a.tiling == "both" else (a.tiling,)
    todo = [(mode, cid) for mode in modes for cid in bench_cases.case_ids(a.kernel, a.size, a.chip)]
    measured: dict[tuple[str, str], list[dict[str, Any]]] = {k: [] for k in todo}
    for rnd in range(max(1, a.rounds)):
        for mode, cid in todo:
            r = run_case(cid, a.repeat, a.blas_threads, mode, a.tf and mode == "default")  # TF has no tilings
            measured[(mode, cid)].append(r)
            label = f"{cid} ({mode})" + (f" round {rnd + 1}" if a.rounds > 1 else "")
            if "error" in r:
                print(f"{label}: ERROR {r['error']}", flush=True)
                continue
            d = derived(r)
            print(f"{label:<65} sim {r['full_s']:.3f} s numpy {r['numpy_s']:.3f} s "
                  f"ratio {d['ratio']:.2f} timing-only {r['timing_s']:.4f} s engine {100 * d['engine_share']:.0f}% "
                  f"events {r['sim_events']} rss {_mib(r['peak_rss_bytes'])} MiB"
                  + (f" TF {r['tf_s']:.4f} s sim/TF {r['full_s'] / r['tf_s']:.1f} TF check {r['tf_check']}"
                     if "tf_s" in r else ""), flush=True)
    results = [merge_rounds(measured[k]) for k in todo]
    command = "python3 bench/run.py" + ("" if not argv else " " + shlex.join(argv))
    text = report(results, command, a.blas_threads, a.repeat, max(1, a.rounds))
    if a.out == "-":
        print(text)
    else:
        Path(a.out).write_text(text)
        print(f"wrote {a.out}")
    return 0 if all("error" not in r for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
