"""The plan IR's rules (sim/model/plan_check.py): one hostile user kernel per rule, refused before it runs.

Each hostile kernel is a correct two-tile kernel (y = 2x, the two halves of x through the vector staging
level) whose plan is then broken in one way on tile 1 of core 0.  The refusal must be a ``sim.PlanError``
naming the kernel, the core, the tile and the rule, and memory must be exactly as before: the good tile 0
never ran either (the output keeps its sentinel value).  A fault that only shows while the plan runs (a
compute that raises, or returns the wrong shape) rolls memory back.  The shipped kernels' plans pass the
check: every shipped config and bench case runs in tests/test_frozen_cycles.py and tests/test_cli.py.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from tiny_kernels import Breaker, Twice

import sim
from kernels.base import PlanContext
from kernels.common.loops import elementwise, gemm_micro_kernel
from sim.model import plan_check
from sim.model.plan import Loop, Operand, Phase, Plan, Tile, TileFn, Transfer
from sim.model.plan_check import RULES
from sim.timing import loop_cycles

REPO = Path(__file__).resolve().parent.parent
N = 1024  # elements of x and y (two tiles of 512)
X, Y = 0xA0000000, 0xA0100000  # in FT78NE's DDR
L2 = 0x10000000  # FT78NE's private per-core memory
GSM = 0x40000000  # FT78NE's shared GSM (its staging window is at +0x580000)
SENTINEL = 7.0
F32 = np.dtype(np.float32)


def tile1(plan: Plan, **changes) -> Plan:
    """``plan`` with tile 1 of its first core changed."""
    phase = plan.phases[0]
    core = plan.cores[0]
    t0, t1 = phase.tiles[core]
    return dataclasses.replace(plan, phases=(dataclasses.replace(
        phase, tiles={**phase.tiles, core: (t0, dataclasses.replace(t1, **changes))}),))


def load_from(addr: int) -> Breaker:
    return lambda p, c, x: tile1(p, loads=(Transfer.contiguous(addr, x.vector_level.base, 2048),))


def store_to(addr: int) -> Breaker:
    return lambda p, c, x: tile1(p, stores=(Transfer.contiguous(x.vector_level.base + 0x18000, addr, 2048),))


def compute_with(inputs=None, outputs=None, **fields) -> Breaker:
    def breaker(p, c, x):
        old = p.phases[0].tiles[p.cores[0]][1].compute
        new = dataclasses.replace(old, **({"inputs": inputs(x)} if inputs else {}),
                                  **({"outputs": outputs(x)} if outputs else {}), **fields)
        return tile1(p, compute=new)
    return breaker


def like_tile0(**fields) -> Breaker:
    """Tile 1 computes tile 0's very operands, its compute a copy of tile 0's with ``fields`` changed (a callable
    field: its value from tile 0's compute)."""
    def breaker(p, c, x):
        old = p.phases[0].tiles[p.cores[0]][0].compute
        assert old.flops  # (so that a float of them equals them: the check must tell them apart all the same)
        return tile1(p, compute=dataclasses.replace(
            old, **{k: v(old) if callable(v) else v for k, v in fields.items()}))
    return breaker


def _op(offset: int, n: int) -> Callable[[PlanContext], Operand]:
    return lambda x: Operand(x.vector_level.base + offset, (n,), F32)


def same_slot_bytes(p, c, x) -> Plan:
    """Tile 1 (slot 1) works in tile 0's bytes: a kernel whose two slots are one slot."""
    t1 = p.phases[0].tiles[p.cores[0]][1]
    back = -0x10000  # tile i's slot lies at base + i * 0x10000
    comp = t1.compute
    return tile1(p, loads=tuple(dataclasses.replace(t, dst=t.dst + back) for t in t1.loads),
                 compute=dataclasses.replace(comp, inputs=tuple(dataclasses.replace(o, addr=o.addr + back)
                                                                for o in comp.inputs),
                                             outputs=tuple(dataclasses.replace(o, addr=o.addr + back)
                                                           for o in comp.outputs)),
                 stores=tuple(dataclasses.replace(t, src=t.src + back) for t in t1.stores))


def loads_changed(change: Callable[[Transfer], Transfer]) -> Breaker:
    """Tile 1 with each of its loads changed by ``change``."""
    return lambda p, c, x: tile1(p, loads=tuple(change(t) for t in p.phases[0].tiles[p.cores[0]][1].loads))


def with_loop(**changes) -> Breaker:
    """Tile 1's compute with its loop changed."""
    def breaker(p, c, x):
        comp = p.phases[0].tiles[p.cores[0]][1].compute
        return tile1(p, compute=dataclasses.replace(comp, loops=(dataclasses.replace(comp.loops[0], **changes),)))
    return breaker


def claims_more_than_its_loops(p: Plan, x: PlanContext) -> Plan:
    """Tile 1's compute stating 16 flops per element over a loop of one vector ALU op per vector."""
    t1 = p.phases[0].tiles[p.cores[0]][1]
    half = t1.compute.flops  # one flop per element of its 512
    loop = elementwise(x.target.core, "fp32", half, loads=1, stores=1, valu=1, label="claims too much")
    return tile1(p, compute=dataclasses.replace(t1.compute, flops=16 * half, loops=(loop,)))


#: rule -> (how the plan is broken, variant, a phrase of the detail)
def _two_members_on_one_core(p: Plan, c, x) -> Plan:
    """Both tiles of core 0 load as members of one synchronised transfer."""
    phase = p.phases[0]
    core = p.cores[0]
    tiles = tuple(dataclasses.replace(t, loads=tuple(dataclasses.replace(ld, sync="g") for ld in t.loads))
                  for t in phase.tiles[core])
    return dataclasses.replace(p, phases=(dataclasses.replace(phase, tiles={**phase.tiles, core: tiles}),))


def _with_core1_tile(p: Plan, c, x: PlanContext, store_at: int) -> Plan:
    """``p`` with core 1 running a copy of core 0's tile 1 that stores to ``store_at`` (its own AM, a phase on
    both cores)."""
    t1 = p.phases[0].tiles[p.cores[0]][1]
    other = dataclasses.replace(t1, tile_id=0, slot=0, stores=(dataclasses.replace(t1.stores[0], dst=store_at),))
    phase = dataclasses.replace(p.phases[0], tiles={**p.phases[0].tiles, 1: (other,)})
    return dataclasses.replace(p, cores=(0, 1), phases=(phase,))


HOSTILE: dict[str, tuple[Breaker, str, str]] = {
    "transfer-unmapped": (load_from(0x60000000), "s", "load 0 (2048 bytes) reads [0x60000000, 0x60000800): "
                                                      "unmapped (between gsm and ddr of the map)"),
    "private-memory": (load_from(L2), "s", "load 0 (2048 bytes) reads [0x10000000, 0x10000800): region l2 is "
                                           "each core's private memory"),
    "input-written": (store_to(X + 2048), "s", "store 0 (2048 bytes) writes [0xa0000800, 0xa0001000): it overlaps "
                                               "input buffer 'x' [0xa0000000, 0xa0001000)"),
    "write-outside-outputs": (store_to(Y + 4 * N), "s", "writes [0xa0101000, 0xa0101800): in region ddr, neither "
                                                        "a staging level"),
    "read-outside-buffers": (load_from(Y + 4 * N), "s", "load 0 (2048 bytes) reads [0xa0101000, 0xa0101800): in "
                                                        "region ddr, neither a staging level"),
    "unwritten-read": (compute_with(inputs=lambda x: (Operand(x.vector_level.base + 0x30000, (512,), F32),)),
                       "s", "input operand 0 reads [0x20030000, 0x20030800), whose bytes [0x20030000, 0x20030800) "
                            "nothing in this call wrote before it"),
    "operand-level": (compute_with(outputs=lambda x: (Operand(Y, (512,), F32),)), "s",
                      "output operand 0 [0xa0100000, 0xa0100800) lies outside the staging levels compute operands "
                      "may lie in (am [0x20000000, 0x200c0000) or sm [0x30000000, 0x30010000)): DMA it there first"),
    "tile-size": (compute_with(inputs=lambda x: (Operand(x.vector_level.base, (0xC0000 // 4 + 32,), F32),)), "s",
                  "input operand 0 [0x20000000, 0x200c0080) takes 786560 bytes, more than the largest staging level "
                  "compute operands may lie in (am: 786432 bytes)"),
    "output-overlap": (compute_with(outputs=lambda x: (_op(0x8000, 512)(x), _op(0x8400, 512)(x)),
                                    fn=lambda a: (a, a)), "s",
                       "output operand 0 [0x20008000, 0x20008800) and output operand 1 [0x20008400, 0x20008c00) "
                       "share bytes"),
    "tile-ids": (lambda p, c, x: tile1(p, tile_id=0), "s", "tile id 0 is used twice on core 0 in this phase"),
    "cores": (lambda p, c, x: dataclasses.replace(p, phases=(dataclasses.replace(
        p.phases[0], tiles={**p.phases[0].tiles, 5: p.phases[0].tiles[p.cores[0]]}),)), "s",
        "the phase has tiles on core 5, which is not one of the plan's cores (0, 1)"),
    "plan-structure": (compute_with(precision="fp64"), "s", "the compute is in precision 'fp64', which FT78NE lacks"),
    "buffers": (lambda p, c, x: tile1(p, fills=("x@0",)), "s",
                "the tile fills x@0 and so is a staging tile, which the walk does not wait for: it may have loads "
                "only (no compute, no stores)"),
    # The kernel's loop taken away: its tile 1 multiplies 512 elements (half of N) into one output.
    # Tile 1 claims 16 flops per element over a loop of one load, one vector ALU op and one store per vector: at
    # most 2 operations per lane of each ALU issue, 2 x 512 elements = 1024.
    "compute-flops": (lambda p, c, x: claims_more_than_its_loops(p, x), "s",
                      "the compute states 8192 flops, but its loops issue at most 1024 element operations"),
    "compute-loops": (compute_with(loops=()), "s",
                      "the compute does 512 flops and writes 1 output operand but states no loops: a compute is "
                      "priced from its inner loops only (its flops are reported, never priced), so state the loop "
                      "that issues its work in Compute.loops (kernels/common/loops.py; see docs/writing-a-kernel.md)"),
    # Tile 1 loads x[0:512] and x[512:1024] into the same 2048 bytes of its slot.
    "transfer-overlap": (lambda p, c, x: tile1(p, loads=(
        Transfer.contiguous(X, p.phases[0].tiles[p.cores[0]][1].loads[0].dst, 2048),
        p.phases[0].tiles[p.cores[0]][1].loads[0])), "s",
        "load 1 writes bytes load 0 of the same tile writes too (in [0x20010000, 0x20010800)): a tile's loads "
        "stream at the same time, in an order the DMA engines' queues and priorities decide, so which bytes land "
        "last would be a race; give each its own bytes"),
    # Tile 1 (slot 1) loads back the 2048 bytes of y that tile 0 (slot 0) stores, while tile 0 may still store them.
    "store-race": (lambda p, c, x: tile1(p, loads=(Transfer.contiguous(
        p.phases[0].tiles[p.cores[0]][0].stores[0].dst, p.phases[0].tiles[p.cores[0]][1].loads[0].dst, 2048),)),
        "s", "load 0 reads bytes of [0xa0100000, 0xa0100800) that tile 0 (slot 0) stores while this tile (slot 1) "
             "may run: the engine waits only for the previous tile of a tile's own slot, so what it reads would be "
             "a race; put the two tiles in one slot, or the access in a later phase"),
    # Core 1 also writes y[512:1024], which core 0's tile 1 stores: nothing orders two cores in one phase.
    "core-race": (lambda p, c, x: _with_core1_tile(p, c, x, store_at=Y + 4 * (N // 2)), "s",
                  "store 0 writes bytes of [0xa0100800, 0xa0101000) that core 1's tile 0 (store 0) writes in the same "
                  "phase: cores run a phase side by side (only a barrier after it orders them), so which write "
                  "lands last would be a race; give each core its own bytes, or put the accesses in phases a barrier "
                  "separates"),
    "sync-transfers": (_two_members_on_one_core, "s", "load 0 is a second member of synchronised transfer 'g' "
                                                        "on core 0: each core issues one member of a group"),
    "staging-alias": (same_slot_bytes, "s",
                      "tile 1 (slot 1) loads into [0x20000000, 0x20000800) of am, which tile 0 (slot 0) loads into "
                      "while both may be in flight (the engine starts a tile's loads while the tile before it "
                      "computes and stores, and waits only for the previous tile of the same slot): slots 0 and 1 "
                      "alias those bytes; give each slot its own bytes of the staging level"),
    "bounds": (with_loop(trips=10 ** 40), "s", "loop 0 ('twice'): Loop.trips is 1000000000...0000 (41 digits), "
                                               "more than the 4294967296 (2**32) a loop's count may be"),
    "loop-units": (compute_with(loops=(Loop(trips=16, issues={"vls": 1, "tensor": 4}, label="mma"),)), "s",
                   "loop 0 ('mma') issues on unit class 'tensor', which FT78NE's core lacks (it has: fmac, valu, vls, "
                   "broadcast, sload, salu)"),
    # FT78NE has 64 vector registers (targets/FT78NE.yaml): a 12x160 micro-kernel needs 12 x 5 accumulators,
    # 5 B vectors and 12 broadcast registers.
    "loop-registers": (compute_with(loops=(gemm_micro_kernel(sim.load_target("FT78NE").core, "fp32", 12, 160, 64,
                                                             itemsize=4),)), "s",
                       "loop 0 ('gemm micro-kernel 12x160') keeps 77 vector registers live, more than FT78NE's "
                       "core has (64)"),
}


def _machine(variant: str) -> tuple[sim.Simulator, dict, int | None]:
    """A simulator with x placed and y holding the sentinel; the call's arguments; the private core or None."""
    m = sim.Simulator("FT78NE")
    core = 2 if variant == "p" else None
    x_addr, y_addr = (L2, L2 + 0x100000) if variant == "p" else (X, Y)
    m.write(x_addr, np.arange(N, dtype=F32), core=core)
    m.write(y_addr, np.full(N, SENTINEL, F32), core=core)
    args = {"x": x_addr, "y": y_addr, "n": N, **({"core": core} if variant == "p" else {"core_mask": 0x3})}
    return m, args, core


def test_the_unbroken_kernel_runs():
    """The base of the hostile kernels is a correct kernel: without a breaker its plan passes and computes 2x."""
    for variant in ("s", "p"):
        with sim.registered_kernel(Twice("twice_ok")):
            m, args, core = _machine(variant)
            m.call(f"fp_twice_ok_{variant}", **args)
            np.testing.assert_array_equal(m.read(args["y"], N, F32, core=core), 2 * np.arange(N, dtype=F32))


def test_every_rule_has_a_hostile_kernel():
    assert set(HOSTILE) == set(RULES)


@pytest.mark.parametrize("rule", sorted(HOSTILE))
def test_a_hostile_kernel_is_refused_before_it_runs(rule):
    breaker, variant, detail = HOSTILE[rule]
    name = f"hostile_{rule.replace('-', '_')}"
    with sim.registered_kernel(Twice(name, breaker)):
        m, args, core = _machine(variant)
        before = m.memory.snapshot()
        with pytest.raises(sim.PlanError) as info:
            m.call(f"fp_{name}_{variant}", **args)
    err = info.value
    assert isinstance(err, sim.SimError) and err.rule == rule and err.kernel == name
    text = str(err)
    # A tile on a core outside the plan is refused before any of its tiles is looked at; a duplicate id names
    # the tile by the id it has.
    tile = {"cores": None, "tile-ids": 0}.get(rule, 1)
    where = f"kernel '{name}'" + ("" if tile is None else f", core 0, tile {tile}") + ", phase 'twice'"
    assert text.startswith(f"{where}: breaks the plan rule '{rule}': "), text
    assert detail in text, text
    assert "\n" not in text
    assert m.memory.snapshot() == before  # the good tile 0 never ran either
    assert (m.read(args["y"], N, F32, core=core) == SENTINEL).all()


def test_a_compute_that_writes_must_state_its_loops_even_without_flops():
    """A copy (no flops) still issues its loads and stores: without loops it is refused like arithmetic is; a
    compute that neither computes nor writes needs none and runs (it costs the tile overhead)."""
    copy = compute_with(loops=(), flops=0)
    with sim.registered_kernel(Twice("copy_without_loops", copy)):
        m, args, core = _machine("s")
        before = m.memory.snapshot()
        with pytest.raises(sim.PlanError, match=r"core 0, tile 1, phase 'twice': breaks the plan rule "
                                                r"'compute-loops': the compute writes 1 output operand but states "
                                                r"no loops"):
            m.call("fp_copy_without_loops_s", **args)
        assert m.memory.snapshot() == before
    idle = compute_with(loops=(), flops=0, outputs=None, fn=lambda a: ())

    def no_outputs(p, c, x):
        q = idle(p, c, x)
        t1 = q.phases[0].tiles[q.cores[0]][1]
        return tile1(q, compute=dataclasses.replace(t1.compute, outputs=()), stores=())
    with sim.registered_kernel(Twice("nothing_issued", no_outputs)):
        m, args, core = _machine("s")
        run = m.call("fp_nothing_issued_s", **args)
        computes = [e for e in run.events if e.kind == "compute" and e.tile == 1]
        assert [e.end - e.start for e in computes] == [m.target.core.tile_overhead_cycles] == [24]


def test_a_p_call_may_not_run_on_another_core():
    """A _p call's plan with tiles on a core other than the call's: the other core's private memory is not the
    call's (its buffers are in the calling core's copy)."""
    def on_core_3(p, c, x):
        return Plan((3,), (Phase("twice", {3: p.phases[0].tiles[c.cores[0]]}, barrier_after=False),), "fp32")

    with sim.registered_kernel(Twice("elsewhere", on_core_3)):
        m, args, core = _machine("p")
        before = m.memory.snapshot()
        with pytest.raises(sim.PlanError, match=r"^kernel 'elsewhere': breaks the plan rule 'cores': the plan runs "
                                                r"on core 3, which the call does not \(it runs on cores 2\)"):
            m.call("fp_elsewhere_p", **args)
        assert m.memory.snapshot() == before


def test_a_write_into_a_p_calls_own_input_is_refused_in_private_memory():
    with sim.registered_kernel(Twice("scribble", store_to(L2))):
        m, args, core = _machine("p")
        with pytest.raises(sim.PlanError, match=r"core 2, tile 1, phase 'twice': breaks the plan rule "
                                                r"'input-written': store 0 \(2048 bytes\) writes \[0x10000000, "):
            m.call("fp_scribble_p", **args)


@pytest.mark.parametrize("what,breaker,rule", [
    ("a list instead of a Plan", lambda p, c, x: [p], "plan-structure"),
    ("float sizes", lambda p, c, x: tile1(p, loads=(Transfer(X, x.vector_level.base, (512.0,), 4, (4,), (4,)),)),
     "plan-structure"),
    ("a compute that is not callable", compute_with(fn="not a function"), "plan-structure"),
    # Tile 0's compute again but for one field: the check remembers the computes that passed by what its rules read
    # of them, and that must tell these apart.
    ("tile 0's compute with its flops as a float", like_tile0(flops=lambda old: float(old.flops)), "plan-structure"),
    ("tile 0's compute, not callable", like_tile0(fn="not a function"), "plan-structure"),
    ("tile 0's compute in fp64", like_tile0(precision="fp64"), "plan-structure"),
    # (GSM is all staging for a call with no buffer in it: gsm_blocks takes its free bytes.)
    ("a write into DDR past the call's output", store_to(Y + 0x100000), "write-outside-outputs"),
    ("operands that together overflow the level",
     compute_with(inputs=lambda x: (_op(0, 0x70000 // 4)(x), _op(0x40000, 0x70000 // 4)(x))), "tile-size"),
    # Numbers a run would trip over later (a trace, a summary, numpy's own limits): refused by the check.
    ("an int32 size in a transfer (it overflows on a chip address)",
     loads_changed(lambda t: dataclasses.replace(t, shape=(np.int32(t.shape[0]),))), "plan-structure"),
    ("a uint64 address (added to an int64 offset it turns into a float)",
     loads_changed(lambda t: dataclasses.replace(t, src=np.uint64(t.src))), "plan-structure"),
    ("a transfer of 33 dimensions", loads_changed(lambda t: Transfer(t.src, t.dst, (1,) * 32 + t.shape, 1,
                                                                     (1,) * 33, (1,) * 33)), "plan-structure"),
    ("tile 0's operands stated in int32 (equal to the Python ints that passed)",
     like_tile0(inputs=lambda old: tuple(dataclasses.replace(o, addr=np.int32(o.addr)) for o in old.inputs)),
     "plan-structure"),
    ("a barrier that is an array", lambda p, c, x: dataclasses.replace(p, phases=(dataclasses.replace(
        p.phases[0], barrier_after=np.array([1, 0])),)), "plan-structure"),
    ("a barrier that is a string", lambda p, c, x: dataclasses.replace(p, phases=(dataclasses.replace(
        p.phases[0], barrier_after="no"),)), "plan-structure"),
    ("a loop labelled in bytes", with_loop(label=b"twice"), "plan-structure"),
    ("a precision in a list", compute_with(precision=["fp32"]), "plan-structure"),
    ("a TileFn of a number", compute_with(fn=TileFn(5, ())), "plan-structure"),
    ("tile 0's compute with a TileFn of a number", like_tile0(fn=lambda old: TileFn(5, ())), "plan-structure"),
    ("a TileFn whose parameters are a list", like_tile0(fn=lambda old: TileFn(np.multiply, [2])), "plan-structure"),
    ("two stores of a tile writing the same bytes", lambda p, c, x: tile1(
        p, stores=p.phases[0].tiles[p.cores[0]][1].stores * 2), "transfer-overlap"),
    ("a priority above the highest", loads_changed(lambda t: dataclasses.replace(t, priority=8)), "plan-structure"),
    ("a negative priority", loads_changed(lambda t: dataclasses.replace(t, priority=-1)), "plan-structure"),
    ("a priority that is a bool", loads_changed(lambda t: dataclasses.replace(t, priority=True)), "plan-structure"),
    ("a priority that is text", loads_changed(lambda t: dataclasses.replace(t, priority="1")), "plan-structure"),
])
def test_more_hostile_plans(what, breaker, rule):
    with sim.registered_kernel(Twice("hostile", breaker)):
        m, args, _ = _machine("s")
        before = m.memory.snapshot()
        with pytest.raises(sim.PlanError) as info:
            m.call("fp_hostile_s", **args)
        assert info.value.rule == rule, (what, str(info.value))
        assert m.memory.snapshot() == before


def test_writes_into_the_staging_levels_and_across_adjacent_outputs_are_legal():
    """The shared staging window (GSM at +0x580000) and the vector level are the kernel's own; a store over two
    adjacent output buffers is inside the outputs."""
    def via_gsm(p, c, x):
        window = x.shared_level
        assert window is not None
        return tile1(p, stores=(Transfer.contiguous(x.vector_level.base + 0x18000, window.base, 2048),))

    with sim.registered_kernel(Twice("via_gsm", via_gsm)):
        m, args, _ = _machine("s")
        m.call("fp_via_gsm_s", **args)  # legal: tile 1's half goes to the window, not to y
        assert (m.read(Y + 2048, 512, F32) == SENTINEL).all()


def test_a_hostile_candidate_tiling_is_dropped_and_listed_with_its_rule():
    """The cost model prices candidate tilings by running them (timing only): each is checked first, and a
    candidate that breaks a rule never runs: it is dropped and listed in the choice with the rule it breaks, and
    the call runs the candidates that pass.  When every candidate breaks a rule, the call fails with the rule."""
    class Candidates(Twice):
        def tilings(self, call, ctx):
            return [{"hostile": False}, {"hostile": True}]

        def plan(self, call, ctx):
            self.breaker = load_from(0x60000000) if (ctx.tiling or {}).get("hostile") else None
            return super().plan(call, ctx)

    class AllHostile(Candidates):
        def tilings(self, call, ctx):
            return [{"hostile": True}, {"hostile": True, "again": 1}]

        def plan(self, call, ctx):
            self.breaker = load_from(0x60000000)
            return Twice.plan(self, call, ctx)

    with sim.registered_kernel(Candidates("candidates")):
        m, args, _ = _machine("s")
        run = m.call("fp_candidates_s", **args)
        assert run.tiling.tiling == {"hostile": False}
        ((dropped, why),) = run.tiling.dropped
        assert dropped == {"hostile": True} and "'transfer-unmapped'" in why
        assert "transfer-unmapped" in run.tiling.describe()
    with sim.registered_kernel(AllHostile("hostile")):
        m, args, _ = _machine("s")
        before = m.memory.snapshot()
        with pytest.raises(sim.PlanError, match="'transfer-unmapped'"):
            m.call("fp_hostile_s", **args)
        assert m.memory.snapshot() == before


@pytest.mark.parametrize("fault", ["raises", "wrong shape"])
def test_a_fault_while_the_plan_runs_rolls_memory_back(fault):
    """Tile 0 stores its half of y, then tile 1's compute fails: every byte goes back to before the call."""
    def bad(a):
        if fault == "raises":
            raise ValueError("kernel bug in tile 1")
        return (a[:10],)

    with sim.registered_kernel(Twice("faulty", compute_with(fn=bad))):
        m, args, core = _machine("s")
        before = m.memory.snapshot()
        with pytest.raises((ValueError, sim.SimError)) as info:
            m.call("fp_faulty_s", **args)
        assert ("kernel bug" if fault == "raises" else "does not fill operand") in str(info.value)
        assert m.memory.snapshot() == before
        assert (m.read(Y, N, F32) == SENTINEL).all()
    # Without the fault the same plan writes y: the rollback undid real writes.
    with sim.registered_kernel(Twice("faultless")):
        m, args, _ = _machine("s")
        m.call("fp_faultless_s", **args)
        assert not (m.read(Y, N, F32) == SENTINEL).any()


def test_the_cli_reports_a_hostile_kernel_in_one_line(tmp_path):
    """A hostile kernel named in a run-config's kernels: list: dspsim run and validate print one line, exit 2."""
    (tmp_path / "hostile.py").write_text(
        "import numpy as np\n"
        "from sim.model.call import ArgSpec, BoundCall, Buffer\n"
        "from sim.model.plan import Phase, Plan, Tile, Transfer\n"
        "class Hostile:\n"
        "    name = 'hostile_dma'\n"
        "    args = (ArgSpec('y', 'out_ptr', 'output'),)\n"
        "    def bind(self, symbol, precision, variant, cores, args, read):\n"
        "        return BoundCall(symbol, precision, variant, cores,\n"
        "                         (Buffer('y', args['y'], (256,), np.dtype(np.float32), 'output'),))\n"
        "    def plan(self, call, ctx):\n"
        "        t = Tile(0, (Transfer.contiguous(0x60000000, ctx.vector_level.base, 1024),), None, ())\n"
        "        return Plan(call.cores, (Phase('dma', {call.cores[0]: (t,)}),), call.precision)\n"
        "KERNEL = Hostile()\n")
    (tmp_path / "hostile.yaml").write_text("target: FT78NE\nsymbol: fp_hostile_dma_s\nkernels: [hostile.py]\n"
                                           "args: {y: 0xA0000000, core_mask: 1}\n")
    for command in ("run", "validate"):
        proc = subprocess.run([sys.executable, "-m", "sim.cli", command, "hostile.yaml", "--allow-kernels"],
                              cwd=tmp_path, capture_output=True, text=True, check=False)
        assert proc.returncode == 2, proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(
            "dspsim: error: kernel 'hostile_dma', core 0, tile 0, phase 'dma': breaks the plan rule "
            "'transfer-unmapped': load 0 (1024 bytes) reads [0x60000000, 0x60000400)"), proc.stderr
    # validate --format json: tools read the refusal from stdout too.
    proc = subprocess.run([sys.executable, "-m", "sim.cli", "validate", "--format", "json", "hostile.yaml",
                           "--allow-kernels"],
                          cwd=tmp_path, capture_output=True, text=True, check=False)
    report = json.loads(proc.stdout)
    assert proc.returncode == 2 and report["ok"] is False and "'transfer-unmapped'" in report["errors"][0]


#: What a hostile compute returns for tile 1 -> a phrase of the ComputeOutputError's detail.
BAD_RESULTS: dict[str, tuple[Callable, str]] = {
    "a masked array": (lambda a: (np.ma.masked_less(a * 2, 100.0),),
                       "output 0 is a masked array: its mask cannot be stored in memory"),
    "objects": (lambda a: (np.array([object()] * 512),), "output 0 has dtype object, which its operand's float32"),
    "text": (lambda a: (np.array(["abcd"] * 512),), "output 0 has dtype <U4, which its operand's float32"),
    "complex numbers": (lambda a: (a * 1j,), "output 0 has dtype complex"),
    "ints for a float operand": (lambda a: (a.astype(np.int32),), None),  # numbers of a kind floats hold: accepted
    "the wrong shape": (lambda a: (a[:3],), "output 0 of shape (3,) does not fill operand (512,)"),
    "a transposed shape of as many elements": (lambda a: (a.reshape(16, 32) * 2,),
                                               "output 0 of shape (16, 32) does not fill operand (512,) exactly"),
    "two arrays for one output": (lambda a: (a, a), "the compute returned 2 arrays for 1 output operands"),
    "a bare array": (lambda a: a * 2, "the compute returned array("),
    "None": (lambda a: None, "the compute returned None, not a sequence of one array per output operand (1)"),
    "a ragged list": (lambda a: ([[1.0], [1.0, 2.0]],), "output 0 ([[1.0], [1.0, 2.0]]) is not an array"),
}


@pytest.mark.parametrize("what", sorted(BAD_RESULTS))
def test_a_compute_returning_what_its_operands_cannot_hold_is_a_compute_output_error(what):
    """Refused as a PlanError of its own kind naming kernel, core, tile and phase (rule ``compute-output``), with
    memory rolled back: the good tile 0 had already stored its half of y."""
    fn, detail = BAD_RESULTS[what]
    with sim.registered_kernel(Twice("bad_result", compute_with(fn=fn))):
        m, args, core = _machine("s")
        before = m.memory.snapshot()
        if detail is None:  # ints convert to the float operand exactly as numbers: accepted
            m.call("fp_bad_result_s", **args)
            np.testing.assert_array_equal(m.read(Y + 2048, 512, F32), np.arange(512, 1024, dtype=F32))
            return
        with pytest.raises(sim.ComputeOutputError) as info:
            m.call("fp_bad_result_s", **args)
    err = info.value
    assert isinstance(err, sim.PlanError) and err.rule == "compute-output"
    assert (err.kernel, err.core, err.tile, err.phase) == ("bad_result", 0, 1, "twice")
    text = str(err)
    assert text.startswith("kernel 'bad_result', core 0, tile 1, phase 'twice': breaks the plan rule "
                           "'compute-output': "), text
    assert detail in text and "\n" not in text, text
    assert m.memory.snapshot() == before
    assert (m.read(Y, N, F32) == SENTINEL).all()


def _with_tiles_before(*extra: Tile) -> Breaker:
    """Twice's plan with ``extra`` tiles (staging tiles) before its two on core 0."""
    def breaker(p, c, x):
        phase, core = p.phases[0], p.cores[0]
        return dataclasses.replace(p, phases=(dataclasses.replace(
            phase, tiles={**phase.tiles, core: (*extra, *phase.tiles[core])}),))
    return breaker


def _fill(tile_id: int, src: int, dst: int, buffer: str) -> Tile:
    return Tile(tile_id, (Transfer.contiguous(src, dst, 2048),), None, (), fills=(f"{buffer}@0",))


AM = 0x20000000  # FT78NE's vector level (am): Twice's tile i works at AM + i * 0x10000 (x there, 2x at +0x8000)


def _tile1_into_tile0_output(p, c, x) -> Plan:
    """Tile 1 (slot 1) computes into (and stores from) tile 0's output bytes, which tile 0's stores may still read."""
    t1 = p.phases[0].tiles[p.cores[0]][1]
    out = dataclasses.replace(t1.compute.outputs[0], addr=AM + 0x8000)
    return tile1(p, compute=dataclasses.replace(t1.compute, outputs=(out,)),
                 stores=(dataclasses.replace(t1.stores[0], src=AM + 0x8000),))


def _reading_staged(p, c, x, uses: tuple[str, ...]) -> Plan:
    """A staging tile fills buffer 'a' (x[0:512] into AM at +0x20000) before Twice's tiles; tile 1 loads its input
    from those bytes, naming ``uses``."""
    p = _with_tiles_before(_fill(10, X, AM + 0x20000, "a"))(p, c, x)
    phase, core = p.phases[0], p.cores[0]
    *before, t1 = phase.tiles[core]
    t1 = dataclasses.replace(t1, uses=uses, loads=(dataclasses.replace(t1.loads[0], src=AM + 0x20000),))
    return dataclasses.replace(p, phases=(dataclasses.replace(phase, tiles={**phase.tiles, core: (*before, t1)}),))


def _refilled_beside(p, c, x) -> Plan:
    """One staging tile fills buffers g and h together (1 KiB); another refills h (generation 1, 2 KiB over the
    same bytes and on); tile 1 uses g and reads the 2 KiB: h's refill may land while it reads."""
    base = AM + 0x20000
    p = _with_tiles_before(
        Tile(10, (Transfer.contiguous(X, base, 1024),), None, (), fills=("g@0", "h@0")),
        Tile(11, (Transfer.contiguous(X + 2048, base, 2048),), None, (), fills=("h@1",)))(p, c, x)
    phase, core = p.phases[0], p.cores[0]
    *before, t1 = phase.tiles[core]
    t1 = dataclasses.replace(t1, uses=("g@0",), loads=(dataclasses.replace(t1.loads[0], src=base),))
    return dataclasses.replace(p, phases=(dataclasses.replace(phase, tiles={**phase.tiles, core: (*before, t1)}),))


def _fill_reading_its_buffer(p, c, x) -> Plan:
    """Buffer 'a' filled (generation 0), then generation 1 by two staging tiles: one copies a's first half into
    other bytes of 'a' while the other overwrites that half (the two stream together once a@0 is released)."""
    half = AM + 0x20000
    return _with_tiles_before(
        _fill(10, X, half, "a"),
        Tile(11, (Transfer.contiguous(X + 2048, half, 2048),), None, (), fills=("a@1",)),
        Tile(12, (Transfer.contiguous(half, half + 0x800, 2048),), None, (), fills=("a@1",)))(p, c, x)


@pytest.mark.parametrize("what,breaker,rule,detail", [
    ("flops of 10**400", compute_with(flops=10 ** 400), "bounds",
     "Compute.flops is 1000000000...0000 (401 digits), more than the 281474976710656 (2**48) a tile's compute may "
     "state"),
    ("a loop of 2**32 trips entered 2**32 times", with_loop(trips=2 ** 32, entries=2 ** 32), "bounds",
     "cycles (the tile overhead and its loops), more than the 1099511627776 (2**40) a tile's compute may: the "
     "run's cycles would overflow the 64-bit counts of summaries and traces"),
    ("an issue count of 2**33", with_loop(issues={"vls": 2 ** 33, "fmac": 1}), "bounds",
     "loop 0 ('twice'): Loop.issues['vls'] is 8589934592, more than the 4294967296 (2**32) a loop's count may be"),
    ("Plan.precision fp64", lambda p, c, x: dataclasses.replace(p, precision="fp64"), "plan-structure",
     "Plan.precision is 'fp64', which FT78NE lacks (it computes in: fp32)"),
    ("an operand of objects", compute_with(inputs=lambda x: (Operand(AM, (512,), np.dtype(object)),)),
     "plan-structure", "input operand 0: dtype object is not a number type (bool, int, uint or float)"),
    ("an operand of text", compute_with(outputs=lambda x: (Operand(AM + 0x18000, (512,), np.dtype("U4")),)),
     "plan-structure", "output operand 0: dtype <U4 is not a number type"),
    ("a compute into bytes an earlier tile of another slot still stores from", _tile1_into_tile0_output,
     "staging-alias", "tile 1 (slot 1) computes into [0x20008000, 0x20008800) of am, which tile 0 (slot 0) stores "
                      "from while both may be in flight"),
    ("two staged buffers filling the same bytes",
     _with_tiles_before(_fill(10, X, AM + 0x20000, "a"), _fill(11, X + 2048, AM + 0x20000, "b")), "staging-alias",
     "staged buffers 'a' and 'b' both fill [0x20020000, 0x20020800) of am in this phase: they alias those bytes"),
    ("a tile loading into a staged buffer's bytes", _with_tiles_before(_fill(10, X, AM, "a")), "staging-alias",
     "tile 0 (slot 0) loads into [0x20000000, 0x20000800) of am, bytes of staged buffer 'a': only the tiles that "
     "fill a buffer may write its bytes"),
    ("a broadcast store of 2**32 runs", lambda p, c, x: tile1(p, stores=(
        Transfer(AM + 0x18000, Y, (1 << 16, 1 << 16), 4, (0, 4), (0, 0)),)), "bounds",
     "store 0: its destination places 4294967296 contiguous runs, more than the 16777216 (2**24) a transfer may"),
    ("two fills of one generation writing the same bytes",
     _with_tiles_before(_fill(10, X, AM + 0x20000, "a"), _fill(11, X + 2048, AM + 0x20000, "a")), "staging-alias",
     "two staging tiles fill generation a@0 with the same bytes [0x20020000, 0x20020800) of am"),
    ("a tile using one of two buffers filled together reading bytes the other refills", _refilled_beside,
     "staging-alias", "tile 1 (slot 1) loads from [0x20020000, 0x20020800) of am, bytes of staged buffer 'h', "
                      "which it does not use"),
    ("a fill reading bytes of the buffer it fills", _fill_reading_its_buffer, "staging-alias",
     "tile 12 (slot 0) loads from [0x20020000, 0x20020800) of am, bytes of staged buffer 'a', which it does not "
     "use"),
    ("a tile reading a staged buffer's bytes without using it", lambda p, c, x: _reading_staged(p, c, x, ()),
     "staging-alias", "tile 1 (slot 1) loads from [0x20020000, 0x20020800) of am, bytes of staged buffer 'a', which "
                      "it does not use: only a tile naming a buffer in its uses waits for the buffer's fill"),
])
def test_plans_breaking_the_bounds_and_alias_rules_are_refused(what, breaker, rule, detail):
    with sim.registered_kernel(Twice("hostile", breaker)):
        m, args, _ = _machine("s")
        before = m.memory.snapshot()
        with pytest.raises(sim.PlanError) as info:
            m.call("fp_hostile_s", **args)
        assert info.value.rule == rule and info.value.kernel == "hostile", (what, str(info.value))
        assert detail in str(info.value), (what, str(info.value))
        assert m.memory.snapshot() == before
        assert (m.read(Y, N, F32) == SENTINEL).all()


def test_a_tile_using_a_staged_buffer_reads_its_bytes_once_filled():
    """The tile refused above for reading buffer 'a' without using it, naming it: its loads wait for the fill, and
    it doubles x[0:512] into y's second half."""
    with sim.registered_kernel(Twice("reads_staged", lambda p, c, x: _reading_staged(p, c, x, ("a@0",)))):
        m, args, _ = _machine("s")
        m.call("fp_reads_staged_s", **args)
    half = 2 * np.arange(N // 2, dtype=F32)
    np.testing.assert_array_equal(m.read(Y, N, F32), np.concatenate([half, half]))


def test_a_cores_computes_are_bounded_in_total(monkeypatch):
    """Each tile within its bound, the core's sum beyond the plan's (lowered here so that Twice's two tiles of 64
    cycles each pass it)."""
    monkeypatch.setattr(plan_check, "MAX_CORE_COMPUTE_CYCLES", 100)
    with sim.registered_kernel(Twice("busy")):
        m, args, _ = _machine("s")
        with pytest.raises(sim.PlanError, match=r"core 0, tile 1, phase 'twice': breaks the plan rule 'bounds': "
                                                r"the core's computes take \d+ cycles up to this tile, more than "
                                                r"the 100"):
            m.call("fp_busy_s", **args)


def test_tiles_sharing_bytes_in_one_slot_are_ordered_and_legal():
    """The same bytes for both tiles are legal in one slot (the engine runs them one after the other) and give
    the right answer; in two slots they are refused (the first hostile kernel above)."""
    def one_slot(p, c, x):
        return dataclasses.replace(same_slot_bytes(p, c, x), phases=(dataclasses.replace(
            p.phases[0], tiles={p.cores[0]: tuple(dataclasses.replace(t, slot=0) for t in
                                                  same_slot_bytes(p, c, x).phases[0].tiles[p.cores[0]])}),))

    with sim.registered_kernel(Twice("one_slot", one_slot)):
        m, args, _ = _machine("s")
        m.call("fp_one_slot_s", **args)
        np.testing.assert_array_equal(m.read(Y, N, F32), 2 * np.arange(N, dtype=F32))


def test_a_race_the_alias_rule_refuses_does_give_wrong_results():
    """Without the rule, the same plan as the hostile kernel's runs and its numerics are wrong: the race is real."""
    with sim.registered_kernel(Twice("racy", same_slot_bytes)):
        m, args, _ = _machine("s")
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(plan_check.AliasCheck, "slots", lambda self, tiles, footprints=None: None)
            m.call("fp_racy_s", **args)
        assert not np.array_equal(m.read(Y, N, F32), 2 * np.arange(N, dtype=F32))


def test_numpy_int_counts_are_bounded_and_priced_exactly_like_python_ints():
    """A loop stating its counts as numpy ints is refused by the same bounds (its cycles are worked out in Python
    ints: int64 arithmetic would wrap a hostile product around to a small, legal-looking count)."""
    core = sim.load_target("FT78NE").core
    big = dict(trips=2 ** 31, entries=2 ** 31, issues={"vls": 2 ** 20, "fmac": 1})
    as_numpy = {k: (np.int64(v) if isinstance(v, int) else {u: np.int64(n) for u, n in v.items()})
                for k, v in big.items()}
    with np.errstate(over="raise"):
        # (labels apart: the price memo keys a loop by its content, in which 3 and np.int64(3) are equal)
        assert loop_cycles(Loop(**as_numpy, label="numpy"), core) == loop_cycles(Loop(**big, label="int"), core) \
            > 2 ** 62
    with sim.registered_kernel(Twice("numpy_counts", with_loop(**as_numpy))):
        m, args, _ = _machine("s")
        with pytest.raises(sim.PlanError, match=r"'bounds': the compute takes .* cycles"):
            m.call("fp_numpy_counts_s", **args)



def test_the_transfer_helpers_take_a_numpy_priority_as_the_int_it_is():
    """``Transfer.block`` and ``Transfer.contiguous`` make their numbers Python ints; a numpy integer priority too (a
    float or a bool stays as given, for the plan check to refuse by name)."""
    t = Transfer.block(X, Y, np.array([4, 4]), np.int64(4), np.array([64, 4]), priority=np.int64(1))
    c = Transfer.contiguous(X, Y, np.int64(64), priority=np.int32(2))
    assert (type(t.priority), t.priority, type(c.priority), c.priority) == (int, 1, int, 2)
    assert Transfer.contiguous(X, Y, 64, priority=True).priority is True


def test_a_strided_store_is_judged_by_the_bytes_it_writes():
    """One store writing a row into each of two outputs, its stride their distance: its span takes in the bytes
    between them, which are no output's, but it writes none of them (legal); the same store with a row landing on
    an input is refused naming that row, not the span."""
    import numpy as np

    from kernels.common.binding import bind_arguments, bound_call
    from kernels.common.loops import elementwise
    from sim.model.call import ArgSpec
    from sim.model.plan import Compute, Operand, Phase, Plan, Tile, TileFn, Transfer

    n, x, y, z = 256, 0xA0000000, 0xA0100000, 0xA0200000
    f32 = np.dtype(np.float32)

    class TwoOut:
        name, precisions, variants = "two_out", ("fp32",), ("s",)
        args = (ArgSpec("x", "in_ptr", "input"), ArgSpec("y", "out_ptr", "output"), ArgSpec("z", "out_ptr", "output"))
        gap = z - y

        def bind(self, symbol, precision, variant, cores, args, read):
            a = bind_arguments(symbol, precision, self.args, args)
            return bound_call(a, variant, cores, [a.buffer(b, (n,)) for b in ("x", "y", "z")], attrs=None)

        def plan(self, call, ctx):
            am = ctx.vector_level.base
            double = Compute(TileFn(lambda a: (np.stack([a, a]),)), (Operand(am, (n,), f32),),
                             (Operand(am + 4 * n, (2, n), f32),), flops=0, precision="fp32",
                             loops=(elementwise(ctx.target.core, "fp32", 2 * n, loads=1, stores=1),))
            store = Transfer(am + 4 * n, y, (2, n), 4, (4 * n, 4), (self.gap, 4))
            return Plan((0,), (Phase("p", {0: (Tile(0, (Transfer.contiguous(x, am, 4 * n),), double, (store,)),)},
                                     False),), "fp32")

    k = TwoOut()
    m = sim.Simulator("FT78NE")
    m.write(x, np.arange(n, dtype=f32))
    with sim.registered_kernel(k):
        m.call("fp_two_out_s", x=x, y=y, z=z, core_mask=1)
        assert np.array_equal(m.read(z, (n,), f32), np.arange(n, dtype=f32))
        k.gap = x - y  # the second row onto the input
        before = m.memory.snapshot()
        with pytest.raises(sim.PlanError, match=r"'input-written': store 0 \(2048 bytes\) writes "
                                                r"\[0xa0000000, 0xa0000400\): it overlaps input buffer 'x'"):
            m.call("fp_two_out_s", x=x, y=y, z=z, core_mask=1)
        assert m.memory.snapshot() == before
