"""Random plans for property tests of the engine: one phase on a few cores, each tile loading a block from DDR or
GSM (dense or strided) into its AM slot, computing over it, and maybe storing it back; regular (every core the same
block tile after tile, a pipeline the steady state may skip) or drawn anew at each tile; or blocks staged through
two GSM buffers (one core's staging tiles fill them, every core's tiles use them)."""

from __future__ import annotations

import dataclasses

import numpy as np
from hypothesis import strategies as st

import sim
from sim.model.plan import Compute, Operand, Phase, Plan, Tile, Transfer, buffer_ref


@st.composite
def random_plans(draw: st.DrawFn, target: sim.Target) -> Plan:
    """One phase on a few cores: each tile loads a block from DDR or GSM (dense or strided) into its AM slot,
    computes over it for a random while, and may store it back to DDR."""
    from kernels.common.loops import elementwise
    if draw(st.integers(0, 3)) == 0:
        return draw(staged_plans(target))
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


@st.composite
def staged_plans(draw: st.DrawFn, target: sim.Target) -> Plan:
    """Blocks staged through two GSM buffers (``gsm.s0``, ``gsm.s1``, alternately): a core's staging tile loads each
    block from DDR into its buffer, and every core then computes tiles that load their panels of the block into
    AM (and may store them to DDR); a block may be staged while the cores compute on the one before (its buffer
    waits for the block two before to be released), by one core, by the cores in turn, or by every core its share
    in one synchronised transfer."""
    from kernels.common.loops import elementwise
    ddr, gsm, am = target.region("ddr"), target.region("gsm"), target.region("am")
    cores = sorted(draw(st.lists(st.integers(0, target.cores - 1), min_size=1, max_size=target.cores, unique=True)))
    blocks, panels = draw(st.sampled_from([1, 2, 5, 12])), draw(st.sampled_from([1, 2, 4]))
    rows, cols = draw(st.sampled_from([4, 16])), draw(st.sampled_from([64, 256]))
    panel_bytes = rows * cols * 4
    block_bytes = panel_bytes * panels * len(cores)
    ahead, in_turn, store = draw(st.booleans()), draw(st.booleans()), draw(st.booleans())
    # Or every core stages its own share of each block, the shares moving as one synchronised transfer.
    together = len(cores) > 1 and draw(st.booleans())
    loop = elementwise(target.core, "fp32", rows * cols * draw(st.integers(1, 6)), loads=1, stores=0, fmac=1)
    walks: dict[int, list[Tile]] = {c: [] for c in cores}
    computes = dict.fromkeys(cores, 0)

    def filler(g: int) -> int:
        return cores[g % len(cores)] if in_turn else cores[0]

    def stage(g: int, core: int) -> None:
        ref = (buffer_ref(f"gsm.s{g % 2}", g // 2),)
        if together:
            share = block_bytes // len(cores)
            at = cores.index(core) * share
            load = Transfer(ddr.base + g * block_bytes + at, gsm.base + (g % 2) * block_bytes + at, (share,), 1,
                            (1,), (1,), sync=f"block{g}")
        else:
            load = Transfer.contiguous(ddr.base + g * block_bytes, gsm.base + (g % 2) * block_bytes, block_bytes)
        walks[core].append(Tile(len(walks[core]), (load,), None, (), 0, ref))

    def stages(g: int, core: int) -> bool:
        return together or core == filler(g)

    for g in range(blocks):
        for n, core in enumerate(cores):
            if stages(g, core) and (g == 0 or not ahead):
                stage(g, core)
            for j in range(panels):
                slot = computes[core] % 2
                computes[core] += 1
                at = am.base + slot * 65536
                src = gsm.base + (g % 2) * block_bytes + (n * panels + j) * panel_bytes
                op = Operand(at, (rows * cols,), np.dtype(np.float32))
                out = ddr.base + (1 << 28) + ((g * len(cores) + n) * panels + j) * panel_bytes
                walks[core].append(Tile(len(walks[core]), (Transfer.contiguous(src, at, panel_bytes),),
                                        Compute(lambda a: (a,), (op,), (op,), flops=rows * cols, precision="fp32",
                                                loops=(loop,)),
                                        (Transfer.contiguous(at, out, panel_bytes),) if store else (), slot, (),
                                        (buffer_ref(f"gsm.s{g % 2}", g // 2),)))
                if ahead and j == 0 and g + 1 < blocks and stages(g + 1, core):
                    stage(g + 1, core)
    phase = Phase("staged", {c: tuple(ts) for c, ts in walks.items()}, barrier_after=draw(st.booleans()))
    return Plan(tuple(cores), (phase,), "fp32")


def doubled(a: np.ndarray) -> tuple[np.ndarray]:
    """A tile function: its block doubled, plus one (in fp32)."""
    return (a * np.float32(2) + np.float32(1),)


def with_fn(plan: Plan, fn) -> Plan:
    """``plan`` with ``fn`` as every compute's function."""
    def tile(t: Tile) -> Tile:
        if t.compute is None:
            return t
        c = t.compute
        return dataclasses.replace(t, compute=Compute(fn, c.inputs, c.outputs, c.flops, c.precision, c.loops))
    phases = tuple(dataclasses.replace(p, tiles={c: tuple(map(tile, ts)) for c, ts in p.tiles.items()})
                   for p in plan.phases)
    return dataclasses.replace(plan, phases=phases)


def filled(target: sim.Target) -> sim.Simulator:
    """A simulator of ``target`` whose DDR and GSM start with 2 MiB of random fp32 each (the blocks random plans
    load lie there or further on, in zeros; their outputs from DDR's 256 MiB on start at zero)."""
    m = sim.Simulator(target, tuning_cache=False)
    rng = np.random.default_rng(7)
    for name in ("ddr", "gsm"):
        m.write(target.region(name).base, rng.standard_normal(1 << 19).astype(np.float32))
    return m
