"""What the tiling tests of every kernel share: the candidate tilings of a call's space, what a plan does, the
blocks it loads, and the checks that the search's choice is never slower than the kernel's preferred tiling
and that a bad tiling is refused."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import kernels
import sim
import sim.tuning as sim_tuning

# Every test tensor lives in DDR, 64 MiB apart (room for large shapes).
ADDR = [0x80000000 + i * 0x4000000 for i in range(8)]


def space_of(m: sim.Simulator, symbol: str, **args):
    """The kernel's tiling space of a call."""
    call = m.bind(symbol, **args)
    return kernels.lookup(symbol).kernel.tiling_space(call, m.context(call))


def candidates(m: sim.Simulator, symbol: str, **args) -> list[dict]:
    """The tilings of a call's space the search may try (every completion of its keys that passes the space's
    checks), in the kernel's order of preference."""
    space = space_of(m, symbol, **args)
    pool, _ = space.completions({}, sim_tuning.MAX_COMPLETIONS)
    return [t for t in pool if sim_tuning.prefilter(space, t) is None]


def plan_signature(plan) -> list:
    """What a plan does, without its compute functions: phases, per core the tiles' DMA, operands, flops and
    loops."""
    return [(ph.name, ph.barrier_after, sorted(
        (core, [(t.tile_id, t.slot, t.loads, t.stores, t.compute and (t.compute.inputs, t.compute.outputs,
                                                                    t.compute.flops, t.compute.loops))
                for t in tiles]) for core, tiles in ph.tiles.items()))
            for ph in plan.phases]


def loaded_blocks(run, name: str) -> list[tuple[int, ...]]:
    """Shapes (elements per dimension) of the DMA loads that read buffer ``name``: the tensor's tile blocks."""
    buf = run.call.buffer(name)
    return [tr.shape for ph in run.plan.phases for tiles in ph.tiles.values() for t in tiles for tr in t.loads
            if buf.addr <= tr.src < buf.end]


def assert_first_candidate_is_the_kernels_own_plan(symbol: str, args: dict) -> None:
    """A kernel planned without a tiling plans its preferred tiling (the first candidate of its space that fits),
    and the search's choice is never slower than that one beyond the tolerance."""
    m = sim.Simulator("FT78NE", tuning_cache=False)
    call = m.bind(symbol, **args)
    kernel, ctx = kernels.lookup(symbol).kernel, m.context(call)
    first = candidates(m, symbol, **args)[0]
    assert plan_signature(kernel.plan(call, replace(ctx, tiling=first))) == plan_signature(kernel.plan(call, ctx))
    chosen = m.call(symbol, numerics=False, **args)
    preferred = m.call(symbol, numerics=False, tiling=first, **args)
    assert chosen.cycles <= preferred.cycles * (1 + sim.TILING_TOLERANCE), chosen.tiling.describe()


def assert_refused(symbol: str, args: dict, tiling: dict, error: type, match: str) -> None:
    """Planning the call with ``tiling`` on FT78NE raises ``error`` whose message matches ``match``."""
    with pytest.raises(error, match=match):
        sim.Simulator("FT78NE").plan(symbol, tiling=tiling, **args)


def batch_norm_honoured(run, tiling: dict) -> None:
    """A batch-norm gradient plan (FusedBatchNormGrad's, BatchNormGrad's too) follows ``tiling``: its [A, C, B]
    blocks are channel blocks of the given width (channels split) or tiles of at most the given elements (rows)."""
    first = run.plan.phases[0].name
    blocks = loaded_blocks(run, "x")
    if tiling["split"] == "channels":
        assert first == "channels"
        assert max(b[1] for b in blocks) == tiling["channel_block"]
    else:
        assert first.startswith("partial sums")
        assert max(int(np.prod(b)) for b in blocks) <= tiling["tile_elements"]
