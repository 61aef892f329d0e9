"""What planning and the plan check remember between tiles never changes a plan or hides a violation.

Loop builders (kernels/common/loops.py) hand tiles one shared Loop per distinct set of arguments, block transfers
(kernels/common/transfers.py) work their strides out once per tensor and block shape, and the plan check
(sim/model/plan_check.py) remembers a transfer shape's span offsets and the Compute objects that passed.  Each memo
must give exactly what the work it saves gives (types included: a plan's content is what the engine and the trace
see), and a later tile that differs only where the memo does not look must still be judged.  The shipped plans
themselves stay unchanged: tests/test_frozen_cycles.py pins their cycles and traces.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import sim
from kernels.common import loops
from kernels.common.transfers import block_in, block_out
from sim.model.call import BoundCall, Buffer
from sim.model.plan import Compute, Loop, Operand, Phase, Plan, Tile, Transfer, c_strides
from sim.model.plan_check import check_plan

F32 = np.dtype(np.float32)
X, Y = 0xA0000000, 0xA0100000  # in FT78NE's DDR
N = 1024


@pytest.fixture(scope="module")
def machine():
    """FT78NE, a y = 2x call on core 0 and its planning context."""
    m = sim.Simulator("FT78NE")
    call = BoundCall("fp_twice_s", "fp32", "s", (0,), (Buffer("x", X, (N,), F32, "input"),
                                                        Buffer("y", Y, (N,), F32, "output")), {"n": N})
    return m, call, m.context(call)


def _check(machine, tiles: list[Tile]) -> None:
    m, call, ctx = machine
    plan = Plan((0,), (Phase("memo", {0: tuple(tiles)}, barrier_after=False),), "fp32")
    operand_levels = (ctx.vector_level,) + ((ctx.scalar_level,) if ctx.scalar_level is not None else ())
    check_plan(plan, call, m.target, ctx.levels, operand_levels, "twice")


def _tile(ctx, i: int, load: Transfer, src: Operand, dst: Operand) -> Tile:
    loop = loops.elementwise(ctx.target.core, "fp32", 256, loads=1, stores=1, fmac=1)
    return Tile(i, (load,), Compute(lambda a: (a * 2,), (src,), (dst,), flops=256, precision="fp32", loops=(loop,)),
                (Transfer.contiguous(dst.addr, Y + 1024 * i, 1024),), slot=i % 2)


def _refusal(machine, tiles: list[Tile]) -> sim.PlanError:
    with pytest.raises(sim.PlanError) as got:
        _check(machine, tiles)
    return got.value


def test_a_transfer_of_a_shape_seen_before_is_still_judged_by_its_addresses(machine):
    _, _, ctx = machine
    base = ctx.vector_level.base
    src, dst = Operand(base, (256,), F32), Operand(base + 0x8000, (256,), F32)
    good = Transfer.block(X, base, (4, 64), 4, (256, 4))
    bad = dataclasses.replace(good, src=0x60000000)  # the same shape and strides, from unmapped memory
    alone = _refusal(machine, [_tile(ctx, 1, bad, src, dst)])
    after = _refusal(machine, [_tile(ctx, 0, good, src, dst), _tile(ctx, 1, bad, src, dst)])
    assert after.rule == alone.rule == "transfer-unmapped"
    assert str(after) == str(alone) and after.tile == 1


def test_numpy_int_transfers_are_judged_like_int_ones(machine):
    _, _, ctx = machine
    base = ctx.vector_level.base
    src, dst = Operand(base, (256,), F32), Operand(base + 0x8000, (256,), F32)
    plain = Transfer(0x60000000, base, (4, 64), 4, (256, 4), (256, 4))
    numpy = Transfer(np.int64(0x60000000), np.int64(base), (np.int64(4), np.int64(64)), np.int64(4),
                     (np.int64(256), np.int64(4)), (np.int64(256), np.int64(4)))
    a = _refusal(machine, [_tile(ctx, 1, plain, src, dst)])
    b = _refusal(machine, [_tile(ctx, 0, Transfer.block(X, base, (4, 64), 4, (256, 4)), src, dst),
                           _tile(ctx, 1, numpy, src, dst)])
    assert str(a) == str(b)
    bools = dataclasses.replace(plain, src=X, shape=(True, 64))  # True == 1, but a bool is no size
    assert _refusal(machine, [_tile(ctx, 1, bools, src, dst)]).rule == "plan-structure"


def test_shared_operands_pass_and_a_changed_one_is_still_judged(machine):
    _, _, ctx = machine
    base = ctx.vector_level.base
    src, dst = Operand(base, (256,), F32), Operand(base + 0x8000, (256,), F32)
    load = Transfer.contiguous(X, base, 1024)
    # The very same operands in one slot (tiles of two slots may be in flight at once, so they could not share
    # their buffers: rule staging-alias): legal.
    _check(machine, [dataclasses.replace(_tile(ctx, i, load, src, dst), slot=0) for i in range(3)])
    outside = Operand(Y, (256,), F32)  # in DDR, not a staging level
    got = _refusal(machine, [_tile(ctx, 0, load, src, dst), _tile(ctx, 1, load, src, outside)])
    assert got.rule == "operand-level" and got.tile == 1
    overlap = Operand(base + 4, (256,), F32)  # overlapping src: legal as an input, not as a second output
    tiles = [_tile(ctx, 0, load, src, dst), _tile(ctx, 1, load, src, dst)]
    two_outputs = dataclasses.replace(tiles[1].compute, outputs=(src, overlap))
    got = _refusal(machine, [tiles[0], dataclasses.replace(tiles[1], compute=two_outputs)])
    assert got.rule == "output-overlap" and got.tile == 1


def test_a_remembered_loop_is_the_loop_built_afresh(machine):
    core = machine[0].target.core
    args = dict(loads=2, stores=1, fmac=4, sums=2, epilogue={"vls": 3}, label="sums")
    first = loops.streaming(core, "fp32", 4096, **args)
    assert loops.streaming(core, "fp32", 4096, **args) is first  # shared by every tile that states it
    assert first == loops.streaming.__wrapped__(core, "fp32", 4096, **args)
    # Arguments equal but of another type are not confused: the Loop keeps what it was given.
    as_int, as_bool = (loops.elementwise(core, "fp32", 64, loads=1, stores=1, entries=e) for e in (1, True))
    assert type(as_int.entries) is int and type(as_bool.entries) is bool
    wide = loops.elementwise(core, "fp32", 64, loads=1, stores=1, entries=np.int64(3))
    assert type(wide.entries) is np.int64 and wide == loops.elementwise.__wrapped__(
        core, "fp32", 64, loads=1, stores=1, entries=np.int64(3))
    # Another chip's core states its own loop.
    other = sim.Simulator("MT7004").target.core
    assert loops.streaming(other, "fp32", 4096, **args) == loops.streaming.__wrapped__(other, "fp32", 4096, **args)


@pytest.mark.parametrize("shape, itemsize, starts, block", [
    ((8, 28, 64), 4, (2, 3, 16), (2, 5, 16)),
    ([8, 28, 64], 2, [0, 1, 0], [1, 27, 64]),
    ((np.int64(8), 28, 64), 4, (np.int64(1), 0, 0), (np.int64(3), 28, 64)),
    ((8, 28, 64), np.int64(4), (1, 2, 3), (1, 2, 3)),
])
def test_block_transfers_are_what_transfer_block_makes(shape, itemsize, starts, block):
    strides = c_strides(shape, itemsize)
    offset = sum(s * st for s, st in zip(starts, strides))
    for _ in range(2):  # the second time from the remembered layout
        got_in = block_in(X, shape, itemsize, starts, block, 0x100)
        want_in = Transfer.block(X + offset, 0x100, block, itemsize, strides)
        got_out = block_out(0x100, Y, shape, itemsize, starts, block)
        want_out = Transfer.block(0x100, Y + offset, block, itemsize, c_strides(block, itemsize), strides)
        for got, want in ((got_in, want_in), (got_out, want_out)):
            assert got == want
            assert [type(v) for v in (got.src, got.dst, got.itemsize, *got.shape, *got.src_strides)] == \
                [type(v) for v in (want.src, want.dst, want.itemsize, *want.shape, *want.src_strides)]


# --- plan values are hashable and remembered by value (sim/model/memo.py) ------------------------------------------

def test_a_loop_written_with_dicts_is_a_hashable_value():
    from sim.model.memo import FrozenDict
    a = Loop(trips=4, issues={"fmac": 2, "vls": 1}, epilogue={"vls": 1})
    b = Loop(trips=4, issues={"vls": 1, "fmac": 2}, epilogue=FrozenDict({"vls": 1}))
    assert a == b and hash(a) == hash(b) and a.issues == {"fmac": 2, "vls": 1}
    assert type(a.issues) is FrozenDict and type(a.epilogue) is FrozenDict
    with pytest.raises(TypeError):
        a.issues["fmac"] = 3  # type: ignore[index]
    import pickle
    assert pickle.loads(pickle.dumps(a)) == a


def _scaled(k: float, x: np.ndarray) -> tuple[np.ndarray]:
    return (x * k,)


def test_a_tile_function_is_a_value_and_a_closure_still_runs():
    from sim.model.plan import TileFn
    f, g = TileFn(_scaled, (2.0,)), TileFn(_scaled, (2.0,))
    assert f == g and hash(f) == hash(g) and f != TileFn(_scaled, (3.0,))
    assert f(np.ones(2))[0].tolist() == [2.0, 2.0] and f.__name__ == "_scaled"
    op = Operand(0x100, (2,), F32)
    c1, c2 = (Compute(h, (op,), (op,), flops=2, precision="fp32") for h in (f, g))
    assert c1 == c2 and hash(c1) == hash(c2)
    closure = Compute(lambda x: (x,), (op,), (op,), flops=0, precision="fp32")
    assert hash(closure) == hash(closure)  # a plain closure: hashed by identity, accepted all the same


def test_buffer_references_are_typed_and_still_their_strings():
    from sim.model.plan import BufferRef, buffer_ref, parse_buffer_ref
    ref = buffer_ref("gsm.b", 2)
    assert isinstance(ref, BufferRef) and (ref.name, ref.generation) == ("gsm.b", 2)
    assert ref == "gsm.b@2" and hash(ref) == hash("gsm.b@2") and {ref: 1}["gsm.b@2"] == 1
    assert parse_buffer_ref(ref) == parse_buffer_ref("gsm.b@2") == ("gsm.b", 2)
    with pytest.raises(ValueError, match="is not 'name@generation'"):
        parse_buffer_ref(BufferRef("a", -1))


def test_equal_values_are_worked_out_once_whichever_object_brings_them(machine):
    from sim.engine.ends import transfer_ends
    from sim.timing import loop_cost
    m = machine[0]
    core = m.target.core
    a = Loop(trips=8, issues={"fmac": 3}, carried=("fmac",), label="once")
    b = dataclasses.replace(a)
    assert a is not b and loop_cost(a, core) is loop_cost(b, core)
    t = Transfer.contiguous(X, Y, 256)
    assert transfer_ends(t, 0, m.memory.map) is transfer_ends(dataclasses.replace(t), 0, m.memory.map)


def test_the_engine_memo_is_gone_with_a_warning(machine):
    import sim.engine.engine as engine_module
    from sim.timing import serial_compute_cycles
    m, _, _ = machine
    plan = Plan((0,), (Phase("p", {0: ()}, barrier_after=False),), "fp32")
    with pytest.warns(DeprecationWarning, match="sim.model.memo"):
        memo = engine_module.EngineMemo()
    with pytest.warns(DeprecationWarning, match="drop the argument"):
        engine_module.simulate(plan, m.target, m.memory, numerics=False, memo=memo)
    with pytest.warns(DeprecationWarning, match="drop the argument"):
        assert serial_compute_cycles(plan, m.target, {}) == {0: 0}
