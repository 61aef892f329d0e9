"""Random plans for property tests of the engine: one phase on a few cores, each tile loading a block from DDR or
GSM (dense or strided) into its AM slot, computing over it, and maybe storing it back; regular (every core the same
block tile after tile, a pipeline the steady state may skip) or drawn anew at each tile."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

import sim
from sim.model.plan import Compute, Operand, Phase, Plan, Tile, Transfer


@st.composite
def random_plans(draw: st.DrawFn, target: sim.Target) -> Plan:
    """One phase on a few cores: each tile loads a block from DDR or GSM (dense or strided) into its AM slot,
    computes over it for a random while, and may store it back to DDR."""
    from kernels.common.loops import elementwise
    ddr, gsm, am = target.region("ddr"), target.region("gsm"), target.region("am")
    cores = draw(st.lists(st.integers(0, target.cores - 1), min_size=1, max_size=target.cores, unique=True))
    per_core = {}
    # Regular: every core the same block tile after tile (a pipeline the steady state may skip); else drawn anew.
    regular = draw(st.booleans())
    count = draw(st.sampled_from([1, 3, 12, 40]))  # (40: long enough for the steady state)
    drawn = None
    for n, core in enumerate(sorted(cores)):
        tiles = []
        for i in range(count if regular else draw(st.sampled_from([1, 3, 12, 40]))):
            if drawn is None or not regular:
                drawn = (draw(st.sampled_from([1, 8, 32])), draw(st.sampled_from([16, 64, 256, 1024])),
                         draw(st.sampled_from([0, 0, 64, 4096])), draw(st.sampled_from([ddr, gsm])),
                         draw(st.integers(1, 8)), draw(st.booleans()))
            rows, cols, gap, src, work, store = drawn
            slot = i % 2
            at = am.base + slot * 131072
            base = src.base + ((n * 64 + i) << 17) % (src.size_bytes - (1 << 18))
            load = Transfer(base, at, (rows, cols), 4, ((cols * 4 + gap), 4), (cols * 4, 4))
            op = Operand(at, (rows * cols,), np.dtype(np.float32))
            loop = elementwise(target.core, "fp32", rows * cols * work, loads=1, stores=0, fmac=1)
            stores = ((Transfer.contiguous(at, ddr.base + (1 << 28) + ((n * 64 + i) << 17), rows * cols * 4),)
                      if store else ())
            tiles.append(Tile(i, (load,), Compute(lambda a: (a,), (op,), (op,), flops=rows * cols, precision="fp32",
                                                  loops=(loop,)), stores, slot=slot))
        per_core[core] = tuple(tiles)
    return Plan(tuple(sorted(cores)), (Phase("p", per_core, barrier_after=draw(st.booleans())),), "fp32")
