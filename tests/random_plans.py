"""Random plans for property tests of the engine: one or two phases, each on a few cores, each tile loading a
block from DDR or GSM (dense or strided, at a drawn ``Transfer.priority``) into its AM slot, computing over it, and
maybe storing it back; regular
(every core the same block tile after tile, a pipeline the steady state may skip) or drawn anew at each tile; or
blocks staged through two GSM buffers (staging tiles fill them, every core's tiles use them).  The phases' outputs
and staged buffers lie apart, so that whatever order two phases without a barrier run in, each tile's output is its
compute of bytes nothing writes during the run (outside its phase's own staging)."""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
from hypothesis import strategies as st

import sim
from sim.model.plan import Compute, Operand, Phase, Plan, Tile, Transfer, buffer_ref

#: Where each phase's outputs start (after DDR's first 256 MiB, which its inputs lie in), phase after phase.
OUT_BYTES, PHASE_OUT_BYTES = 1 << 28, 1 << 26
#: GSM: each staged phase's two buffers in its own MiB; the blocks streaming phases read, from 2 MiB on.
STAGED_GSM_BYTES, STREAMED_GSM_FROM = 1 << 20, 2 << 20


@st.composite
def random_plans(draw: st.DrawFn, target: sim.Target) -> Plan:
    """One or two phases, each on a few cores, streaming (:func:`streaming_phase`) or staged
    (:func:`staged_phase`); each phase ends in a barrier or not."""
    phases: list[Phase] = []
    cores: set[int] = set()
    for k in range(draw(st.sampled_from([1, 1, 2]))):
        on, phase = draw(staged_phase(target, k)) if draw(st.integers(0, 3)) == 0 else draw(streaming_phase(target, k))
        cores.update(on)
        phases.append(phase)
    gsm, ddr = target.region("gsm"), target.region("ddr")
    streamed = gsm.base + STREAMED_GSM_FROM
    if any(streamed <= t.src < gsm.end for p in phases for ts in p.tiles.values() for tile in ts for t in tile.loads):
        # The GSM blocks streaming tiles read are written first, from DDR's inputs, behind a barrier: a plan reads
        # only its inputs and what it wrote (the rule unwritten-read), and GSM is a staging level, not an input.
        first = min(cores)
        preload = Tile(0, (Transfer.contiguous(ddr.base, streamed, gsm.end - streamed),), None, ())
        phases.insert(0, Phase("preload", {first: (preload,)}, barrier_after=True))
    return Plan(tuple(sorted(cores)), tuple(phases), "fp32")


@st.composite
def staged_plans(draw: st.DrawFn, target: sim.Target) -> Plan:
    """A plan of one :func:`staged_phase`."""
    on, phase = draw(staged_phase(target, 0))
    return Plan(tuple(on), (phase,), "fp32")


@st.composite
def streaming_phase(draw: st.DrawFn, target: sim.Target, k: int) -> tuple[list[int], Phase]:
    """Phase ``k`` on a few cores (and the cores): each tile loads a block from DDR or GSM (dense or strided) into
    its AM slot, computes over it for a random while, and may store it to DDR; regular (every core the same block
    tile after tile, a pipeline the steady state may skip) or drawn anew at each tile."""
    from kernels.common.loops import elementwise
    ddr, gsm, am = target.region("ddr"), target.region("gsm"), target.region("am")
    cores = sorted(draw(st.lists(st.integers(0, target.cores - 1), min_size=1, max_size=target.cores, unique=True)))
    per_core = {}
    regular = draw(st.booleans())
    count = draw(st.sampled_from([1, 3, 12, 40]))  # (40: long enough for the steady state)
    drawn = None
    for n, core in enumerate(cores):
        tiles = []
        for i in range(count if regular else draw(st.sampled_from([1, 3, 12, 40]))):
            if drawn is None or not regular:
                drawn = (draw(st.sampled_from([1, 8, 32])), draw(st.sampled_from([16, 64, 256, 1024])),
                         draw(st.sampled_from([0, 0, 64, 4096])), draw(st.sampled_from(["ddr", "gsm"])),
                         draw(st.integers(1, 8)), draw(st.booleans()), draw(st.sampled_from([0, 0, 0, 1, 2])))
            rows, cols, gap, src, work, store, priority = drawn
            slot = i % 2
            at = am.base + slot * 131072
            if src == "ddr":
                base = ddr.base + ((n * 64 + i) << 17)
            else:
                base = gsm.base + STREAMED_GSM_FROM + ((n * 64 + i) << 17) % (gsm.size_bytes - STREAMED_GSM_FROM
                                                                               - (1 << 18))
            load = Transfer(base, at, (rows, cols), 4, ((cols * 4 + gap), 4), (cols * 4, 4), priority=priority)
            op = Operand(at, (rows * cols,), np.dtype(np.float32))
            loop = elementwise(target.core, "fp32", rows * cols * work, loads=1, stores=0, fmac=1)
            out = ddr.base + OUT_BYTES + k * PHASE_OUT_BYTES + ((n * 64 + i) << 17)
            stores = (Transfer.contiguous(at, out, rows * cols * 4),) if store else ()
            tiles.append(Tile(i, (load,), Compute(lambda a: (a,), (op,), (op,), flops=rows * cols, precision="fp32",
                                                  loops=(loop,)), stores, slot=slot))
        per_core[core] = tuple(tiles)
    return cores, Phase(f"streaming {k}", per_core, barrier_after=draw(st.booleans()))


@st.composite
def staged_phase(draw: st.DrawFn, target: sim.Target, k: int) -> tuple[list[int], Phase]:
    """Phase ``k`` on a few cores (and the cores): blocks staged through two GSM buffers (``gsm.s0``, ``gsm.s1``,
    alternately): a core's staging tile loads each block from DDR into its buffer, and every core then computes
    tiles that load their panels of the block into AM (and may store them to DDR); a block may be staged while the
    cores compute on the one before (its buffer waits for the block two before to be released), by one core, by
    the cores in turn, or by every core its share in one synchronised transfer."""
    from kernels.common.loops import elementwise
    ddr, gsm, am = target.region("ddr"), target.region("gsm"), target.region("am")
    cores = sorted(draw(st.lists(st.integers(0, target.cores - 1), min_size=1, max_size=target.cores, unique=True)))
    blocks, panels = draw(st.sampled_from([1, 2, 5, 12])), draw(st.sampled_from([1, 2, 4]))
    rows, cols = draw(st.sampled_from([4, 16])), draw(st.sampled_from([64, 256]))
    panel_bytes = rows * cols * 4
    block_bytes = panel_bytes * panels * len(cores)
    buffers = gsm.base + k * STAGED_GSM_BYTES
    ahead, in_turn, store = draw(st.booleans()), draw(st.booleans()), draw(st.booleans())
    priority = draw(st.sampled_from([0, 0, 1]))  # the staging loads' (the panels' stay at 0)
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
            load = Transfer(ddr.base + g * block_bytes + at, buffers + (g % 2) * block_bytes + at, (share,), 1,
                            (1,), (1,), sync=f"phase {k} block {g}", priority=priority)
        else:
            load = Transfer(ddr.base + g * block_bytes, buffers + (g % 2) * block_bytes, (block_bytes,), 1, (1,),
                            (1,), priority=priority)
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
                src = buffers + (g % 2) * block_bytes + (n * panels + j) * panel_bytes
                op = Operand(at, (rows * cols,), np.dtype(np.float32))
                out = ddr.base + OUT_BYTES + k * PHASE_OUT_BYTES + ((g * len(cores) + n) * panels + j) * panel_bytes
                walks[core].append(Tile(len(walks[core]), (Transfer.contiguous(src, at, panel_bytes),),
                                        Compute(lambda a: (a,), (op,), (op,), flops=rows * cols, precision="fp32",
                                                loops=(loop,)),
                                        (Transfer.contiguous(at, out, panel_bytes),) if store else (), slot, (),
                                        (buffer_ref(f"gsm.s{g % 2}", g // 2),)))
                if ahead and j == 0 and g + 1 < blocks and stages(g + 1, core):
                    stage(g + 1, core)
    return cores, Phase(f"staged {k}", {c: tuple(ts) for c, ts in walks.items()}, barrier_after=draw(st.booleans()))


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
    """A simulator of ``target`` whose DDR starts with 8 MiB of random fp32 and whose GSM is random fp32 (the
    blocks random plans load lie there or further on, in zeros; their outputs from DDR's 256 MiB on start at
    zero)."""
    m = sim.Simulator(target, tuning_cache=False)
    ddr, gsm = _random_fp32(1 << 21), _random_fp32(target.region("gsm").size_bytes // 4)  # (8 MiB; all of GSM)
    m.write(target.region("ddr").base, ddr)
    m.write(target.region("gsm").base, gsm)
    # The GSM blocks streaming tiles read hold what a plan's preload phase copies there (random_plans): DDR's first
    # bytes, so that a plan reads the same values with or without one.
    region = target.region("gsm")
    m.write(region.base + STREAMED_GSM_FROM, ddr[:(region.size_bytes - STREAMED_GSM_FROM) // 4])
    return m


@functools.cache
def _random_fp32(n: int) -> np.ndarray:
    """``n`` random fp32 values, drawn once per process (read-only; of another sequence for each ``n``)."""
    out = np.random.default_rng(n).standard_normal(n).astype(np.float32)  # (seeded by n: DDR and GSM differ)
    out.flags.writeable = False
    return out
