"""The race rules are sound: a plan the plan check accepts gives the same bytes whatever the timing.

Random plans of a user kernel (one or two cores, tiles in up to three slots, each loading a block of x or y into
its AM slot, scaling it and storing it into blocks of y, some also copying a block of y within DDR; on two cores
one phase, or two with or without a barrier between) are checked; each one accepted is run on FT78NE and on copies
of it whose DDR is 20 times slower or whose cores have one DMA engine that takes 3,000 cycles to program, each
with its tiles' computes of drawn lengths and its stores' priorities reversed, and must leave the same bytes in y
every time.  A race the rules let through shows as bytes that depend on the timing (so the attacks that found the
rules' holes worked): with any one of store-race, core-race or transfer-overlap switched off, this test fails."""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sim
from kernels.common.args import check_args, require_address
from kernels.common.loops import elementwise
from sim.model.call import ArgSpec, BoundCall, Buffer
from sim.model.plan import Compute, Operand, Phase, Plan, Tile, Transfer

F32 = np.dtype(np.float32)
X, Y = 0xA0000000, 0xA0100000  # FT78NE's DDR
ROWS, COLS = 16, 64  # y (and x): four matrices of 16 rows of 64 floats
MATRIX = ROWS * COLS * 4
N = 4 * ROWS * COLS
BLOCK = 256  # floats in a block: 4 whole rows, or 16 columns of every row


def _target(name: str, change) -> sim.Target:
    doc = yaml.safe_load(Path(sim.load_target("FT78NE").path).read_text())
    change(doc)
    path = Path(tempfile.mkdtemp()) / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return sim.load_target(path)


def _slow_ddr(doc: dict) -> None:
    ddr = next(r for r in doc["regions"] if r["name"] == "ddr")
    ddr["bandwidth_bytes_per_cycle"] = 1


def _one_slow_engine(doc: dict) -> None:
    doc["dma"]["engines_per_core"] = 1
    doc["dma"]["setup_cycles"] = 3000


TIMINGS = (sim.load_target("FT78NE"), _target("FT78NE_slow_ddr", _slow_ddr),
           _target("FT78NE_one_slow_engine", _one_slow_engine))

#: A block of a matrix: ``(offset bytes, shape, strides)``.
Block = tuple[int, tuple[int, int], tuple[int, int]]


@st.composite
def blocks(draw: st.DrawFn, rows: bool | None = None, matrices: tuple[int, ...] = (0, 1, 2, 3)) -> Block:
    """Four whole rows (one run) or 16 columns of every row (``rows``: which; None: drawn) of one of the
    ``matrices``."""
    matrix = draw(st.sampled_from(matrices)) * MATRIX
    if draw(st.booleans()) if rows is None else rows:
        return matrix + draw(st.sampled_from([0, 4, 8, 12])) * COLS * 4, (4, COLS), (COLS * 4, 4)
    return matrix + draw(st.sampled_from([0, 16, 32, 48])) * 4, (ROWS, 16), (COLS * 4, 4)


#: A tile: ``(slot, (source, block), the blocks of y it stores into, a copy within y or None)``; the source is
#: ``x`` or ``y``, or the staged buffer ``g`` in GSM (the block unused), named in the tile's uses (``g``) or not
#: (``g unused``).
TileSpec = tuple[int, tuple[str, Block], tuple[Block, ...], tuple[Block, Block] | None]
#: A plan: each core's tiles; how the cores' phases run (``one`` phase, or ``two`` with or without a ``barrier``);
#: and the staging tile filling ``g`` (its place among core 0's tiles and its source) or None.
PlanSpec = tuple[dict[int, list[TileSpec]], str, tuple[int, tuple[str, Block]] | None]


@st.composite
def tile_specs(draw: st.DrawFn, matrices: tuple[int, ...], sources: tuple[str, ...]) -> TileSpec:
    """A tile whose blocks of y lie in ``matrices``, loading from one of ``sources``."""
    stores = tuple(draw(st.lists(blocks(matrices=matrices), max_size=2, unique_by=lambda b: b[0] // MATRIX)))
    rows = draw(st.booleans())
    copy = (draw(blocks(rows, matrices)), draw(blocks(rows, matrices))) if draw(st.integers(0, 4)) == 0 else None
    source = (draw(st.sampled_from(sources)), draw(blocks(matrices=matrices)))
    return draw(st.integers(0, 2)), source, stores, copy


@st.composite
def plan_specs(draw: st.DrawFn, staged: bool) -> PlanSpec:
    """On two cores, each core's blocks of y in its own two matrices or anywhere; a staging tile if ``staged``
    (then mostly on two cores: a read of its buffer without naming it races the fill only when the fill may come
    later, and on one core the walk issues the fill before any tile after it; the model moves a transfer's bytes
    when its stream starts)."""
    cores = draw(st.sampled_from([(0,), (0, 1), (0, 1)] if staged else [(0,), (0, 1)]))
    apart = len(cores) > 1 and draw(st.booleans())
    sources = ("x", "y", "g", "g", "g unused") if staged else ("x", "y")
    tiles = {c: draw(st.lists(tile_specs((2 * c, 2 * c + 1) if apart else (0, 1, 2, 3), sources), min_size=1,
                              max_size=5)) for c in cores}
    phases = draw(st.sampled_from(["one", "two", "barrier"])) if len(cores) > 1 else "one"
    staging = (draw(st.integers(0, len(tiles[0]))), (draw(st.sampled_from("xy")), draw(blocks()))) if staged else None
    return tiles, phases, staging


class Racy:
    """y = random blocks of x and y scaled, as ``spec`` lays them out; tile ``i`` of core ``c`` computes over
    ``works[(c, i)]`` floats (default :data:`BLOCK`); its stores stream at rising priorities (``rising``) or
    falling ones, and the tiles' loads ahead of the staging tile's (``rising``) or behind."""

    args = (ArgSpec("x", "in_ptr", "input"), ArgSpec("y", "out_ptr", "output"))
    precisions = ("fp32",)

    def __init__(self, name: str, spec: PlanSpec, works: dict[tuple[int, int], int], rising: bool):
        self.name, self.spec, self.works, self.rising = name, spec, works, rising

    def bind(self, symbol, precision, variant, cores, args, read):
        a = check_args(symbol, self.args, args)
        return BoundCall(symbol, precision, variant, cores,
                         (Buffer("x", require_address("x", a["x"]), (N,), F32, "input"),
                          Buffer("y", require_address("y", a["y"]), (N,), F32, "output", reads_too=True)), {})

    def plan(self, call, ctx) -> Plan:
        tiles, phases, staging = self.spec
        x, y = call.buffer("x").addr, call.buffer("y").addr
        g = ctx.level("gsm").base
        per_core = {}
        for core, specs in tiles.items():
            built = []
            for i, (slot, (buffer, (off, shape, strides)), stores, copy) in enumerate(specs):
                base = ctx.vector_level.base + slot * 0x10000
                a, b = Operand(base, (BLOCK,), F32), Operand(base + 0x8000, (BLOCK,), F32)
                dense = (shape[1] * 4, 4)
                if buffer.startswith("g"):
                    load = Transfer.contiguous(g, a.addr, 4 * BLOCK, priority=int(self.rising))
                else:
                    load = Transfer((x if buffer == "x" else y) + off, a.addr, shape, 4, strides, dense,
                                    priority=int(self.rising))
                out = [Transfer(b.addr, y + o, sh, 4, (sh[1] * 4, 4), st) for o, sh, st in stores]
                if copy is not None:
                    (src, sh, st), (dst, _, _) = copy  # (blocks of one shape)
                    out.append(Transfer(y + src, y + dst, sh, 4, st, st))
                out = [dataclasses.replace(t, priority=k if self.rising else len(out) - k)
                       for k, t in enumerate(out)]
                work = self.works.get((core, i), BLOCK)  # (its cycles: what differs between the timings)
                loop = elementwise(ctx.target.core, "fp32", work, loads=1, stores=1, fmac=1, label="scale")
                scale = 1.0 + (8 * core + i + 1) / 16
                compute = Compute(lambda v, s=scale: (v * F32.type(s),), (a,), (b,), flops=min(BLOCK, work),
                                  precision="fp32", loops=(loop,))
                built.append(Tile(i, (load,), compute, tuple(out), slot, uses=("g@0",) if buffer == "g" else ()))
            if staging is not None and core == 0:
                at, (buffer, (off, shape, strides)) = staging
                fill = Transfer((x if buffer == "x" else y) + off, g, shape, 4, strides, (shape[1] * 4, 4),
                                priority=int(not self.rising))
                built.insert(at, Tile(len(specs), (fill,), None, (), 0, fills=("g@0",)))
            per_core[core] = tuple(built)
        if phases == "one":
            return Plan(call.cores, (Phase("one", per_core, barrier_after=False),), "fp32")
        return Plan(call.cores, (Phase("first", {0: per_core[0]}, barrier_after=phases == "barrier"),
                                 Phase("second", {1: per_core[1]}, barrier_after=False)), "fp32")


def _run(spec, target: sim.Target, works: dict[tuple[int, int], int] | None = None,
         rising: bool = True) -> np.ndarray | sim.PlanError:
    """y after the call (x = 0..N-1, y = -1 - (0..N-1) before), or the PlanError that refused it."""
    name = "racy"
    with sim.registered_kernel(Racy(name, spec, works or {}, rising)):
        m = sim.Simulator(target, tuning_cache=False)
        m.write(X, np.arange(N, dtype=F32))
        m.write(Y, -1 - np.arange(N, dtype=F32))
        cores = tuple(spec[0])
        try:
            m.call(f"fp_{name}_s", x=X, y=Y, core_mask=sum(1 << c for c in cores))
        except sim.PlanError as e:
            return e
        return m.read(Y, N, F32)


@pytest.mark.parametrize("staged", [False, True])
@settings(max_examples=150, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_plan_the_check_accepts_leaves_the_same_bytes_whatever_the_timing(staged, data):
    """Refused plans are refused for a race (or an alias of staging bytes, or a use of a buffer not filled in its
    phase); accepted ones leave the same y on
    every timing: each target, each with the tiles' computes drawn from 32 to 200,000 floats long (three draws,
    seeded), and with the stores' priorities reversed."""
    spec = data.draw(plan_specs(staged))
    first = _run(spec, TIMINGS[0])
    if isinstance(first, sim.PlanError):
        assert first.rule in {"store-race", "core-race", "transfer-overlap", "staging-alias", "buffers"}, str(first)
        return
    rng = np.random.default_rng(len(str(spec)))
    tiles = [(c, i) for c, specs in spec[0].items() for i in range(len(specs))]
    for target in TIMINGS:
        for draw in range(4):
            works = {key: int(rng.choice([32, 1024, 30000, 200000])) for key in tiles} if draw else None
            again = _run(spec, target, works, rising=draw != 1)
            assert not isinstance(again, sim.PlanError), str(again)
            np.testing.assert_array_equal(again, first, err_msg=f"{target.name}, computes {works}")
