"""Timing-only runs (``numerics=False``): the same cycles and trace as full runs, memory untouched, much faster.

Every run-config of ``configs/`` (each kernel on both chips, shared and private
variants) is run with and without numerics on the same placed data and the
results compared exactly; a timing-only run must also not depend on the data
(the runner places only literal ``values`` then).  On one large shape per kernel
a warm timing-only call must be several times faster than a warm full call (see
SPEEDUP for how much, and why not 10x everywhere).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import sim
from kernels.examples import KERNELS as EXAMPLE_KERNELS
from kernels.examples import example
from sim.config.run_config import load_config
from sim.run import runner

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = sorted((ROOT / "configs").glob("*.yaml"))
KERNELS = EXAMPLE_KERNELS


def kernel_of(symbol: str) -> str:
    """``fp_conv2d_backprop_filter_s`` -> ``conv2d_backprop_filter``."""
    return symbol.split("_", 1)[1].rsplit("_", 1)[0]


def test_the_configs_cover_every_kernel_on_both_chips():
    covered = {(kernel_of(c.symbol), c.target) for c in map(load_config, CONFIGS)}
    assert covered >= {(k, chip) for k in KERNELS for chip in ("FT78NE", "MT7004")}


@pytest.mark.parametrize("path", CONFIGS, ids=[p.stem for p in CONFIGS])
def test_timing_only_gives_the_same_cycles_and_trace(path):
    cfg = replace(load_config(path), numerics=True)
    m = runner.prepare(cfg)
    full = m.call(cfg.symbol, tiling=cfg.tiling, **cfg.args)
    assert full.cycles > 0 and full.events

    # Same placed data, timing only: identical cycles and events, event for event; memory not touched.
    before = m.memory.snapshot()
    timing = m.call(cfg.symbol, numerics=False, tiling=cfg.tiling, **cfg.args)
    assert timing.cycles == full.cycles
    assert timing.events == full.events
    assert timing.tiling == full.tiling and timing.sim_events == full.sim_events
    assert m.memory.snapshot() == before

    # Without the tensors (as `numerics: false` configs run): the timing cannot depend on the data.
    bare = runner.prepare(cfg, numerics=False)
    bare_before = bare.memory.snapshot()
    alone = bare.call(cfg.symbol, numerics=False, tiling=cfg.tiling, **cfg.args)
    assert (alone.cycles, alone.events) == (full.cycles, full.events)
    assert bare.memory.snapshot() == bare_before


def test_numerics_false_config_runs_timing_only(tmp_path):
    """A run-config with ``numerics: false`` places no tensors and writes nothing, with the full run's cycles."""
    path = ROOT / "configs" / "ft78ne_fused_batch_norm_grad_s.yaml"
    text = path.read_text()
    assert "numerics:" not in text
    cfg_path = tmp_path / path.name
    cfg_path.write_text(text + "\nnumerics: false\n")
    cfg = load_config(cfg_path)
    assert cfg.numerics is False
    m, run = runner.execute(cfg)
    assert m.memory.snapshot() == {}  # no tensor placed, nothing written
    _, full = runner.execute(replace(cfg, numerics=True))
    assert (run.cycles, run.events) == (full.cycles, full.events)


# --- speed on large shapes ------------------------------------------------------------------------

def large(name: str, m: sim.Simulator) -> tuple[str, dict]:
    """The large example of kernel ``name`` on FT78NE (the benchmark's large shape), placed in ``m``."""
    e = example(name, "large", "FT78NE")
    e.place(m.write)
    return e.symbol, dict(e.args)


#: The kernels whose large example is timed.
LARGE = KERNELS


def _best_seconds(fn: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


#: Speed-up asked of timing-only runs on each large shape on FT78NE with the tiling the cost model picks (best
#: of a few warm calls).  Measured with the fluid bandwidth model on this 2-core machine (shared with other work):
#: conv2d ~7.5x, depthwise ~6x, batch norm ~4.5x, fake quant ~4.5x, fused batch norm ~2x.  Each stream's start and
#: end recomputes the max-min shares of every stream it shares a region with (sim/engine/fluid.py: ~20 us per
#: transfer with sixteen streams on DDR), so the DMA-heavy kernels' timing-only runs gain less over full runs
#: than under the old port model (9-12x; conv2d 10.8x measured the same way).  The floors sit well below the
#: figures (the machine is noisy) and catch a timing-only run that does numerics or data work again (which
#: brings it near 1x).
#: FusedBatchNormGrad's tiles are as long as its scratchpad allows (its plan keeps part of x and dy resident
#: between its two passes) and their numpy work is only about the event engine's work for their DMAs.
#: GEMM (~1.5x measured): a tile's numerics are one small matrix product (12 x 512 by 512 x 128), cheap beside
#: the event engine's work for the tile's DMAs and staged buffers.
SPEEDUP = {"batch_norm_grad": 1.4, "fused_batch_norm_grad": 1.4, "fake_quant_with_min_max_vars_gradient": 3,
           "conv2d_backprop_filter": 5, "depthwise_conv2d_backprop_input": 4, "gemm": 1.2}


@pytest.mark.parametrize("name", LARGE)
def test_timing_only_is_much_faster_on_a_large_shape(name):
    m = sim.Simulator("FT78NE")
    symbol, args = large(name, m)
    full = m.call(symbol, **args)  # the cold call: the cost model picks the tiling; later calls reuse it
    timing = m.call(symbol, numerics=False, **args)
    assert (timing.cycles, timing.events) == (full.cycles, full.events)
    t_full, t_timing = _speeds(m, symbol, args, None, SPEEDUP[name])
    assert t_full >= SPEEDUP[name] * t_timing, f"{symbol}: full {t_full:.4f} s, timing-only {t_timing:.4f} s"


def _speeds(m: sim.Simulator, symbol: str, args: dict, tiling: dict | None, want: float) -> tuple[float, float]:
    """Best wall times of warm full and timing-only calls; a noisy round (other processes share this machine)
    is measured again rather than failed."""
    for _ in range(3):
        t_full = _best_seconds(lambda: m.call(symbol, tiling=tiling, **args), 3)
        t_timing = _best_seconds(lambda: m.call(symbol, numerics=False, tiling=tiling, **args), 5)
        if t_full >= want * t_timing:
            break
    return t_full, t_timing


def test_timing_only_is_five_times_faster_with_long_tiles():
    """With the longest tiles its cost model priced, Conv2DBackpropFilter's large shape runs 5x faster timing
    only (8x measured; 19x before the fluid bandwidth model made each transfer's events costlier): where a tile
    carries real numerics, timing only costs a fifth of a run or less."""
    m = sim.Simulator("FT78NE")
    symbol, args = large("conv2d_backprop_filter", m)
    default = m.call(symbol, numerics=False, **args)

    def tiles(tiling: dict) -> int:
        return m.plan(symbol, tiling=tiling, **args)[1].tile_count

    tiling = min([c for c, _ in default.tiling.candidates] or [default.tiling.tiling], key=tiles)
    full = m.call(symbol, tiling=tiling, **args)
    assert (m.call(symbol, numerics=False, tiling=tiling, **args).events) == full.events
    t_full, t_timing = _speeds(m, symbol, args, tiling, 5)
    assert t_full >= 5 * t_timing, f"{symbol} {tiling}: full {t_full:.4f} s, timing-only {t_timing:.4f} s"


def test_event_count_grows_with_tiles_not_elements():
    """16x the elements in as many tiles: about the same SimPy events (Run.sim_events), only longer cycles.

    A transfer costs its setup's timeout and its share of the fluid network's wake-ups (one per cycle at which
    streams end, plus a superseded one whenever a stream's start or end moves the next completion), a tile's
    group one for its landing and one for its compute: a few events per transfer, whatever its bytes.  How
    often a start moves the next completion depends on how the streams overlap, so the counts differ by a few.
    """
    runs = []
    for elements in (1024, 16384):
        m = sim.Simulator("FT78NE")
        symbol, args = "fp_fake_quant_with_min_max_vars_gradient_s", dict(
            gradients=0x80000000, inputs=0x90000000, min=0xA0000000, max=0xA0000040,
            backprops_wrt_input=0xB0000000, backprop_wrt_min=0xA0000080, backprop_wrt_max=0xA00000C0,
            shape=[8 * 4 * elements])
        m.write(0xA0000000, np.float32(-6.0))
        m.write(0xA0000040, np.float32(6.0))
        runs.append(m.call(symbol, numerics=False, tiling={"cores": 8, "tile_elements": elements}, **args))
    small, big = runs
    tiles = [sum(len(ts) for phase in r.plan.phases for ts in phase.tiles.values()) for r in runs]
    assert tiles[0] == tiles[1] and small.sim_events > 0
    transfers = sum(len(t.loads) + len(t.stores) for phase in small.plan.phases for ts in phase.tiles.values()
                    for t in ts)
    assert abs(big.sim_events - small.sim_events) <= 0.02 * small.sim_events and big.cycles > 8 * small.cycles
    assert small.sim_events <= 3 * (transfers + tiles[0])
