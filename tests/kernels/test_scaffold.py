"""The kernel scaffold (kernels/common/): binding, tiling spaces, scratch layouts, core streams, the exchange.

Every expected number is derived by hand in the test from the layout rules the module documents (a fixed
area, then slots rounded down to the alignment ...), on small staging levels where they are easy to follow.
"""

from __future__ import annotations

import numpy as np
import pytest

import sim
from kernels.base import PlanContext
from kernels.common.binding import (
    MAX_BUFFER_BYTES,
    attrs_of,
    bind_arguments,
    bound_call,
    check_buffer_size,
    pointer_names,
)
from kernels.common.exchange import Exchange, reducers, sum_partials
from kernels.common.scratch import Arena, Scratch, align_down, align_up, aligned_bytes, fits
from kernels.common.streams import FIXED_SLOT, CoreStream, phase_of, plan_of
from kernels.common.tiling_space import (
    MIN_TILES_PER_CORE,
    ChoiceKey,
    IntKey,
    TilingSpace,
    largest,
    padded_lanes,
    pipeline_tile,
    split_even,
    split_units,
    unique,
)
from kernels.common.transfers import block_in, block_out, operand_in, sub_operand
from sim.model.call import ArgSpec
from sim.model.plan import DoesNotFit, Operand, Transfer
from sim.model.target import StagingArea

AM = StagingArea("am", "am", 0x1000, 1000, False, 64)
GSM = StagingArea("gsm", "gsm", 0x40000000, 256, True, 64)
F32 = np.dtype(np.float32)


def ctx(levels=(GSM, AM), tiling=None) -> PlanContext:
    return PlanContext(sim.load_target("FT78NE"), (0, 1, 2), "fp32", "s", tuple(levels), tiling)


# --- scratch ------------------------------------------------------------------------------------------------

def test_alignment_helpers():
    assert (align_up(65, 64), align_up(64, 64), align_down(127, 64), align_down(-5, 64)) == (128, 64, 64, 0)
    assert aligned_bytes([1, 64, 65], 64) == 64 + 64 + 128
    assert fits([1, 64, 65], 256, 64) and not fits([1, 64, 65], 255, 64)


def test_arena_allocates_aligned_and_refuses_naming_its_level():
    arena = Arena.over(AM)
    assert (arena.operand((3,), F32).addr, arena.alloc(10)) == (0x1000, 0x1040)
    assert arena.free_bytes == 1000 - 128
    with pytest.raises(DoesNotFit) as info:
        arena.alloc(900)  # starts at 128: needs 1028 of 1000
    err = info.value
    assert (err.resource, err.needed_bytes, err.available_bytes) == ("am", 1028, 1000)
    assert isinstance(err, sim.LayoutError) and "needs 1028 bytes of 1000" in str(err)


def test_scratch_fixed_area_first_then_slots_then_spare():
    sc = Scratch(AM, fixed_bytes=100)  # fixed 128 (aligned up), free 872 -> two slots of 436 -> 384 each
    assert (sc.fixed_base, sc.fixed_bytes, sc.slot_bytes) == (0x1000, 128, 384)
    assert (sc.slot_addr(0), sc.slot_addr(1), sc.slot_addr(2)) == (0x1080, 0x1200, 0x1080)
    assert (sc.spare_base, sc.spare_bytes) == (0x1380, 1000 - 128 - 768)
    assert sc.slot(1).base == 0x1200 and sc.slot(1).size_bytes == 384
    assert sc.fixed().operand((2,), F32).addr == 0x1000
    # Three tensors of a slot, each aligned: (384 - 3 * 64) // (3 * 4) = 16 elements, in whole vectors of 8: 16.
    assert sc.elements_per_slot(3, 4) == 16 and sc.elements_per_slot(3, 4, unit=5) == 15
    with pytest.raises(DoesNotFit) as info:
        sc.slot(0).alloc(385)
    assert info.value.resource == "am" and info.value.available_bytes == 384


def test_scratch_given_slot_size_leaves_the_rest_spare():
    sc = Scratch(AM, fixed_bytes=64, slots=2, slot_bytes=128)
    assert (sc.slot_addr(1), sc.spare_base, sc.spare_bytes) == (0x1000 + 64 + 128, 0x1000 + 320, 1000 - 320)
    whole = Scratch(AM, fixed_bytes=64, slots=0)
    assert (whole.slot_bytes, whole.spare_base, whole.spare_bytes) == (0, 0x1040, 936)


def test_scratch_slots_first_puts_the_fixed_area_after_them():
    sc = Scratch(AM, fixed_bytes=200, fixed_last=True)  # fixed 256: free 744 -> slots of 372 -> 320
    assert (sc.slot_addr(0), sc.slot_addr(1), sc.fixed_base, sc.fixed_bytes) == (0x1000, 0x1140, 0x1280, 360)


def test_a_layout_over_the_level_is_refused_at_once():
    with pytest.raises(DoesNotFit) as info:
        Scratch(AM, fixed_bytes=900, slot_bytes=64)
    assert (info.value.resource, info.value.needed_bytes, info.value.available_bytes) == ("am", 960 + 128, 1000)
    assert "am staging level" in str(info.value)
    err = Scratch(AM).refuse(2000, 400, "tiling tile_elements=500 does not fit")
    assert (err.resource, err.needed_bytes, err.available_bytes, str(err)) == \
           ("am", 2000, 400, "tiling tile_elements=500 does not fit")


# --- transfers -----------------------------------------------------------------------------------------------

def test_block_descriptors_of_a_tensor():
    t = block_in(0x8000, (4, 10), 4, (1, 2), (2, 3), 0x1000)
    assert (t.src, t.dst, t.shape, t.src_strides, t.dst_strides) == (0x8000 + 4 * (10 + 2), 0x1000, (2, 3),
                                                                     (40, 4), (12, 4))
    o = block_out(0x1000, 0x8000, (4, 10), 4, (1, 2), (2, 3))
    assert (o.src, o.dst, o.src_strides, o.dst_strides) == (0x1000, 0x8000 + 48, (12, 4), (40, 4))
    op = Operand(0x1000, (2, 3), F32)
    assert operand_in(op, 0x8000, (4, 10), (1, 2)) == t
    assert sub_operand(Operand(0x1000, (10,), F32), 3, 4) == Operand(0x100C, (4,), F32)


# --- streams ---------------------------------------------------------------------------------------------------

def test_core_stream_numbers_tiles_and_alternates_slots():
    s = CoreStream(first_id=5)
    s.add((), None, (), slot=FIXED_SLOT)
    a, b, c = (s.add((), None, ()) for _ in range(3))
    assert [t.tile_id for t in s.tiles] == [5, 6, 7, 8] and s.next_id == 9 and len(s) == 4
    assert [t.slot for t in s.tiles] == [FIXED_SLOT, 1, 0, 1]  # by position: the fixed tile takes position 0


def test_phases_and_plans_of_streams():
    busy, idle = CoreStream(), CoreStream()
    busy.add((), None, ())
    assert set(phase_of("p", {0: busy, 1: idle}).tiles) == {0, 1}
    assert set(phase_of("p", {0: busy, 1: idle}, drop_empty=True).tiles) == {0}
    call = sim.Simulator("FT78NE").bind("fp_batch_norm_grad_s", x=0x80000000, dy=0x80100000, dx=0x80200000,
                                        params=[0x80300000 + i * 0x1000 for i in range(5)] + [4, 32, 1])
    plan = plan_of(call, [phase_of("a", {0: busy}), phase_of("b", {0: busy})])
    assert [p.barrier_after for p in plan.phases] == [True, False]
    assert plan.cores == call.cores and plan.precision == "fp32"


# --- the exchange ------------------------------------------------------------------------------------------------

def test_exchange_slots_descriptors_and_reduction():
    ex = Exchange.through(ctx(), parts=3, elements=10)  # 3 x 40 bytes packed in the 256-byte window
    assert (ex.stride_bytes, ex.addr(2, 1)) == (40, 0x40000000 + 80 + 4)
    st = ex.store(1, 0x1000)
    assert (st.src, st.dst, st.size_bytes) == (0x1000, 0x40000000 + 40, 40)
    part = ex.store(2, 0x1010, start=4, count=2)
    assert (part.dst, part.size_bytes) == (0x40000000 + 80 + 16, 8)
    g = ex.gather(0x2000, start=2, count=5)
    assert (g.src, g.dst, g.shape, g.src_strides, g.dst_strides) == (0x40000008, 0x2000, (3, 5), (40, 4), (20, 4))
    # Packed partials gathered whole are one contiguous run, like a plain copy of the three partials.
    assert ex.gather(0x2000).runs("src") == Transfer.contiguous(0x40000000, 0x2000, 120).runs("src") == (1, 120)
    assert ex.gather_into(Operand(0x2000, (3, 2, 5), F32)) == ex.gather(0x2000)
    comp = ex.reduce(Operand(0x2000, (3, 10), F32), Operand(0x3000, (10,), np.dtype(np.float16)), precision="fp32")
    assert comp.flops == 0  # adding the cores' partials is the split's work, not the math's
    # Its loop, on FT78NE (32 fp32 lanes, 256 B a load issue): 10 outputs are one vector; per vector the 3 parts
    # loaded (3 issues), 2 adds, the result narrowed to fp16 (one ALU conversion) and stored (1 issue; the chain
    # ends in a store, charged the store latency: vls.store).
    (loop,) = comp.loops
    assert (loop.trips, dict(loop.issues), loop.chain) == (1, {"vls": 4, "fmac": 2, "valu": 1},
                                                           ("vls", "fmac", "fmac", "valu", "vls.store"))
    parts = np.arange(30, dtype=np.float32).reshape(3, 10)
    (out,) = comp.fn(parts)
    assert out.dtype == np.float16 and out.tolist() == [30 + 3 * i for i in range(10)]
    assert sum_partials()(parts)[0].dtype == F32


def test_exchange_that_overflows_names_the_shared_level():
    with pytest.raises(DoesNotFit) as info:
        Exchange.through(ctx(), parts=8, elements=10, what="partial sums of 10 channels")
    err = info.value
    assert (err.resource, err.needed_bytes, err.available_bytes) == ("gsm", 320, 256)
    assert "gsm staging window [0x40000000, 0x40000100)" in str(err) and "partial sums of 10 channels" in str(err)
    with pytest.raises(DoesNotFit, match="no shared staging level"):
        Exchange.through(ctx(levels=(AM,)), parts=2, elements=1)


def test_exchange_in_rounds_through_each_cores_share():
    stride = Exchange.share_bytes(ctx(), 3, 64)  # 256 // 3 = 85 -> 64
    assert stride == 64
    ex = Exchange.through(ctx(), parts=3, elements=16, stride_bytes=stride)
    assert ex.addr(2) == 0x40000000 + 128
    assert Exchange.rounds(100, 16) == split_even(100, 7) and Exchange.rounds(5, 0) == []
    assert reducers((4, 5, 6), 5) == [4, 5, 6, 4, 5]


# --- tiling spaces ---------------------------------------------------------------------------------------------

SPACE = TilingSpace(ChoiceKey("split", ("channels", "rows"), "how the cores split the work"),
                    IntKey("channel_block", 1, 70, "channels per tile"))


def test_a_tiling_is_parsed_with_every_key():
    assert SPACE.parse(ctx()) == {"split": None, "channel_block": None}
    assert SPACE.parse(ctx(tiling={"channel_block": np.int64(3)})) == {"split": None, "channel_block": 3}
    assert SPACE.candidate(split="rows", channel_block=None) == {"split": "rows"}
    assert "channel_block: 1..70 -- channels per tile" in SPACE.describe()


@pytest.mark.parametrize("tiling,match", [
    ({"rows": 4}, r"argument 'tiling': unknown key 'rows' \(this kernel takes: split, channel_block\)"),
    ({"split": "batch"}, r"argument 'tiling.split': expected one of channels, rows, got 'batch'"),
    ({"channel_block": 0}, r"argument 'tiling.channel_block': expected an integer in 1..70, got 0"),
    ({"channel_block": 71}, r"tiling.channel_block"),
    ({"channel_block": 2.0}, r"tiling.channel_block"),
    ({"channel_block": True}, r"tiling.channel_block"),
])
def test_bad_tilings_name_the_key(tiling, match):
    with pytest.raises(sim.KernelArgError, match=match):
        SPACE.parse(ctx(tiling=tiling))


def test_a_key_that_applies_to_one_choice_chooses_it_or_is_refused():
    space = TilingSpace(ChoiceKey("split", ("channels", "rows")),
                        IntKey("channel_block", 1, 70, only=("split", "channels")),
                        IntKey("tile_elements", 1, 1000, only=("split", "rows")))
    assert space.check({"channel_block": 8}) == {"split": "channels", "channel_block": 8, "tile_elements": None}
    assert space.check({"split": "rows", "tile_elements": 9})["split"] == "rows"
    with pytest.raises(sim.KernelArgError, match=r"'tiling.channel_block': applies to split 'channels' only, not "
                                                 r"to 'rows'"):
        space.check({"split": "rows", "channel_block": 8})
    with pytest.raises(sim.KernelArgError, match=r"'tiling.tile_elements': applies to split 'rows' only"):
        space.check({"channel_block": 8, "tile_elements": 9})
    assert "channel_block: 1..70 (with split channels)" in space.describe()


def test_a_candidate_outside_the_space_is_the_kernels_bug_caught_at_once():
    with pytest.raises(sim.KernelArgError, match="tiling.channel_block"):
        SPACE.candidate(channel_block=71)


def test_candidate_helpers():
    assert MIN_TILES_PER_CORE == 4
    assert unique([{"a": 1}, None, {"a": 1}, {"a": 2}]) == [{"a": 1}, {"a": 2}]
    # A share of 100 in four tiles of whole vectors of 8: ceil(25 / 8) * 8 = 32; of 3: one unit.
    assert (pipeline_tile(100, 8), pipeline_tile(100), pipeline_tile(3, 8), pipeline_tile(100, 8, 1)) == \
           (32, 25, 8, 104)
    assert largest(100, lambda n: n * n <= 200) == 14 and largest(10, lambda n: False) == 0
    assert split_even(10, 4) == [(0, 3), (3, 6), (6, 8), (8, 10)] and split_even(2, 4) == [(0, 1), (1, 2)]
    assert split_units(70, 32, 8) == [(0, 32), (32, 64), (64, 70)]
    assert (padded_lanes(0, 16), padded_lanes(17, 16)) == (16, 32)


# --- binding ---------------------------------------------------------------------------------------------------

SPECS = (ArgSpec("x", "in_ptr", "address of x"), ArgSpec("y", "out_ptr", "address of y"),
         ArgSpec("n", "int", "elements"), ArgSpec("mode", "str", "a mode", "a", required=False))


def test_binding_checks_pointers_and_fills_defaults():
    a = bind_arguments("fp_k_s", "fp16", SPECS, {"x": np.int64(0x100), "y": 0x200, "n": 4})
    assert (a["mode"], dict(a.addresses), a.dtype) == ("a", {"x": 0x100, "y": 0x200}, np.dtype(np.float16))
    assert pointer_names(SPECS) == ("x", "y")
    x, y = a.buffer("x", (4,)), a.buffer("y", (4,), F32)
    assert (x.addr, x.role, x.dtype, y.role, y.dtype, y.size_bytes) == (0x100, "input", np.float16, "output",
                                                                       F32, 16)
    inner = a.buffer("mean", (4,), F32, addr=0x300, role="input", size_arg="params")
    assert (inner.name, inner.addr, inner.role) == ("mean", 0x300, "input")


@pytest.mark.parametrize("args,match", [
    ({"x": 1, "y": 2}, r"fp_k_s: missing argument 'n'"),
    ({"x": 1, "y": 2, "n": 1, "z": 0}, r"fp_k_s: unexpected argument 'z'"),
    ({"x": -1, "y": 2, "n": 1}, r"argument 'x': address -0x1 is outside the 64-bit address range"),
    ({"x": 1.0, "y": 2, "n": 1}, r"argument 'x': expected an address"),
])
def test_binding_refusals_name_the_argument(args, match):
    with pytest.raises(sim.KernelArgError, match=match):
        bind_arguments("fp_k_s", "fp32", SPECS, args)


def test_one_size_check_for_every_buffer():
    check_buffer_size("shape", "x", (MAX_BUFFER_BYTES // 4,), 4)  # exactly the limit passes
    with pytest.raises(sim.KernelArgError) as info:
        check_buffer_size("shape", "x", (1 << 20, 1 << 19), 4)
    assert str(info.value) == ("argument 'shape': x of shape [1048576, 524288] is 2199023255552 bytes, which "
                               "exceeds any chip's memory (at most 2**40 bytes)")
    a = bind_arguments("fp_k_s", "fp32", SPECS, {"x": 0x100, "y": 0x200, "n": 4})
    with pytest.raises(sim.KernelArgError, match="argument 'params': x of shape"):
        a.buffer("x", (1 << 40,), size_arg="params")


def test_typed_attributes_come_back_typed():
    from dataclasses import dataclass

    @dataclass(frozen=True)
    class Attrs:
        n: int

    a = bind_arguments("fp_k_s", "fp32", SPECS, {"x": 0x100, "y": 0x200, "n": 4})
    call = bound_call(a, "s", (0,), [a.buffer("x", (4,))], Attrs(4))
    assert attrs_of(call, Attrs).n == 4 and call.buffers[0].name == "x"
    with pytest.raises(TypeError, match="expected dict"):
        attrs_of(call, dict)


# --- the kernels on the scaffold: "does not fit" names the staging level --------------------------------------

def shrunk(ctx: PlanContext, name: str, size_bytes: int) -> PlanContext:
    """``ctx`` with staging level ``name`` cut to ``size_bytes``."""
    from dataclasses import replace
    return replace(ctx, levels=tuple(replace(a, size_bytes=size_bytes) if a.name == name else a
                                     for a in ctx.levels))


ON_THE_SCAFFOLD = ["batch_norm_grad", "fused_batch_norm_grad", "fake_quant_with_min_max_vars_gradient"]


@pytest.mark.parametrize("kernel", ON_THE_SCAFFOLD)
def test_a_tile_over_the_vector_level_is_a_does_not_fit_naming_it(kernel):
    import kernels
    from kernels.examples import example
    e = example(kernel, "small", "FT78NE")
    m = sim.Simulator(e.chip)
    call = m.bind(e.symbol, **e.args)
    ctx = m.context(call)
    vector = ctx.vector_level.name
    with pytest.raises(DoesNotFit) as info:
        kernels.lookup(e.symbol).kernel.plan(call, shrunk(ctx, vector, 512))
    assert info.value.resource == vector and info.value.needed_bytes > info.value.available_bytes


@pytest.mark.parametrize("kernel", ON_THE_SCAFFOLD)
def test_partial_sums_over_the_shared_level_are_a_does_not_fit_naming_it(kernel):
    """Eight cores exchange partial sums (the rows split of the batch norms; fake quant's min/max sums): a
    shared level of 8 bytes cannot hold them, and the refusal names that level, not the scratchpad."""
    import kernels
    from kernels.examples import example
    e = example(kernel, "small", "FT78NE")
    m = sim.Simulator(e.chip)
    call = m.bind(e.symbol, **e.args)
    tiling = {"split": "rows"} if "batch_norm" in kernel else {"cores": 8}
    ctx = replace_tiling(m.context(call), tiling)
    shared = ctx.shared_level
    assert shared is not None
    with pytest.raises(DoesNotFit) as info:
        kernels.lookup(e.symbol).kernel.plan(call, shrunk(ctx, shared.name, 8))
    assert (info.value.resource, info.value.available_bytes) == (shared.name, 8)
    assert shared.name in str(info.value)


def replace_tiling(ctx: PlanContext, tiling: dict) -> PlanContext:
    from dataclasses import replace
    return replace(ctx, tiling=tiling)
