"""The plan check's ``store-race`` rule follows the walk's whole order (sim/model/plan_alias.py): a tile's loads
are issued while the walk is at the tile before it, whose own loads may still wait for its slot's earlier
stores, so a tile may not read bytes the latest tile of another slot up to two tiles before it stores.  GEMM
with C streamed reads C's rows back one k block later and picks its slots so that the walk orders every such
read (kernels/gemm/state.py, ``_slots``)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from gemm_tiles import compute_tiles
from tiny_kernels import Twice

import sim
from kernels.common.loops import elementwise
from sim.model.plan import Compute, Operand, Plan, Tile, Transfer

N = 1024  # elements of x and y: halves of 512
HALF = N // 2
X, Y = 0xA0000000, 0xA0100000  # in FT78NE's DDR
F32 = np.dtype(np.float32)


def _tile(ctx, tile_id: int, slot: int, src: int, dst: int | None, area: int) -> Tile:
    """Tile ``tile_id`` of ``slot``: 512 floats from ``src`` into AM at ``area``, doubled, stored to ``dst`` (None:
    kept in AM)."""
    loop = elementwise(ctx.target.core, "fp32", HALF, loads=1, stores=1, fmac=1, label="twice")
    base = ctx.vector_level.base + area
    a, b = Operand(base, (HALF,), F32), Operand(base + 0x8000, (HALF,), F32)
    return Tile(tile_id, (Transfer.contiguous(src, a.addr, 4 * HALF),),
                Compute(lambda v: (2 * v,), (a,), (b,), flops=HALF, precision="fp32", loops=(loop,)),
                () if dst is None else (Transfer.contiguous(b.addr, dst, 4 * HALF),), slot)


def _tiles(*specs: tuple[int, int, int | None]):
    """A breaker whose plan is the tiles ``(slot, source, destination)`` in walk order on the call's first core."""
    def breaker(plan: Plan, call, ctx) -> Plan:
        tiles = tuple(_tile(ctx, i, slot, src, dst, i * 0x10000) for i, (slot, src, dst) in enumerate(specs))
        phase = dataclasses.replace(plan.phases[0], tiles={call.cores[0]: tiles})
        return dataclasses.replace(plan, phases=(phase,))
    return breaker


def _machine() -> sim.Simulator:
    m = sim.Simulator("FT78NE")
    m.write(X, np.arange(N, dtype=F32))
    m.write(Y, np.full(N, 7.0, F32))
    return m


def test_a_load_two_tiles_after_another_slots_store_of_its_bytes_is_refused():
    """Tile 2 (slot 1) reads y[0:512], which tile 0 (slot 0) stores.  The latest tile of slot 0 before tile 2 is
    tile 1, which stores other bytes, so a rule looking only at each slot's latest tile passed it; but tile 2's loads
    are issued while the walk is at tile 1, whose loads wait for tile 0's stores: tile 0 may still be storing."""
    plan = _tiles((0, X, Y), (0, X + 4 * HALF, Y + 4 * HALF), (1, Y, Y))
    with sim.registered_kernel(Twice("reads_two_on", plan)):
        m = _machine()
        with pytest.raises(sim.PlanError) as e:
            m.call("fp_reads_two_on_s", x=X, y=Y, n=N, core_mask=1)
    assert e.value.rule == "store-race" and e.value.tile == 2
    assert "load 0 reads bytes of [0xa0100000, 0xa0100800) that tile 0 (slot 0) stores" in str(e.value)
    np.testing.assert_array_equal(m.read(Y, N, F32), np.full(N, 7.0, F32))  # refused before it ran


def test_the_same_read_after_a_tile_of_its_own_slot_passes_and_sees_the_stored_bytes():
    """Tile 3 (slot 1) reads y[0:512] after tile 2 of its slot (which stores nothing): tile 2 was issued once tile
    1 had computed, whose loads waited for tile 0's stores (slot 0).  The walk orders the read: it sees 2x stored,
    and doubles it."""
    plan = _tiles((0, X, Y), (0, X + 4 * HALF, Y + 4 * HALF), (1, X, None), (1, Y, Y))
    with sim.registered_kernel(Twice("reads_ordered", plan)):
        m = _machine()
        m.call("fp_reads_ordered_s", x=X, y=Y, n=N, core_mask=1)
    x = np.arange(N, dtype=F32)
    np.testing.assert_array_equal(m.read(Y, N, F32), np.concatenate([4 * x[:HALF], 2 * x[HALF:]]))


#: Tiles per k block (panels of 6 rows) -> the slots GEMM takes with C streamed: the most, up to three, for which
#: P is a multiple of them or at least two more (worked out from the rule by hand).
SLOTS = {1: 1, 2: 2, 3: 3, 4: 2, 5: 3, 6: 3, 7: 3, 8: 3}


@pytest.mark.parametrize("panels", sorted(SLOTS))
@pytest.mark.parametrize("nt", [False, True])
def test_gemm_with_c_streamed_orders_every_reload_of_c(panels, nt):
    """With C streamed on one core, each tile reads back the C rows it stored one k block (``panels`` tiles)
    before: the plan passes the plan check with the slots above, and the product is right."""
    m_rows, n, k = 6 * panels - 1, 8, 4  # (the last panel short)
    tiling = {"split": "n", "c_home": "ddr", "b_staging": "am", "m_micro": 6, "k_block": 1, "m_panel": min(6, m_rows),
              "m_block": m_rows, "n_block": n, "n_micro": 8}
    tiling.update({"nt_kernel": "reduce_serial", "a_staging": "memory", "a_loader": "cores", "a_buffers": 2}
                  if nt else {"a_staging": "memory", "a_loader": "cores", "a_buffers": 2})
    rng = np.random.default_rng(panels)
    a = rng.standard_normal((m_rows, k)).astype(F32)
    b = rng.standard_normal((n, k) if nt else (k, n)).astype(F32)
    machine = sim.Simulator("FT78NE", tuning_cache=False)
    A, B, C = 0x80000000, 0x84000000, 0x88000000
    machine.write(A, a)
    machine.write(B, b)
    args = {"a": A, "b": B, "c": C, "m": m_rows, "n": n, "k": k, "core_mask": 1, **({"trans_b": 1} if nt else {})}
    plan = machine.plan_bound(machine.bind("fp_gemm_s", **args), tiling)
    assert {t.slot for t in compute_tiles(plan)} == set(range(SLOTS[panels]))
    machine.call("fp_gemm_s", **args, tiling=tiling)
    want = a.astype(np.float64) @ (b.T if nt else b).astype(np.float64)
    np.testing.assert_allclose(machine.read(C, m_rows * n, F32).reshape(m_rows, n), want, rtol=1e-5, atol=1e-5)


def _refusal(name: str, breaker) -> sim.PlanError:
    with sim.registered_kernel(Twice(name, breaker)):
        m = _machine()
        with pytest.raises(sim.PlanError) as e:
            m.call(f"fp_{name}_s", x=X, y=Y, n=N, core_mask=1)
    np.testing.assert_array_equal(m.read(Y, N, F32), np.full(N, 7.0, F32))  # refused before it ran
    return e.value


def _with(specs, change):
    """The breaker of :func:`_tiles` with ``change(tiles, ctx)`` applied to its tiles."""
    base = _tiles(*specs)

    def breaker(plan, call, ctx):
        p = base(plan, call, ctx)
        tiles = change(list(p.phases[0].tiles[call.cores[0]]), ctx)
        return dataclasses.replace(p, phases=(dataclasses.replace(p.phases[0], tiles={call.cores[0]: tuple(tiles)}),))
    return breaker


def test_both_sides_of_every_transfer_count():
    """A store whose source lies in DDR reads bytes: tile 1 (slot 1) copies y[0:256] on to y[768:1024] while tile 0
    (slot 0) may still store y[0:512].  A load whose destination lies in DDR writes bytes: tile 1 (slot 1) also
    copies x[0:512] into y[0:512], which tile 0 stores.  Both are races the rule refuses."""
    def copy_store(tiles, ctx):  # (tile 1 stores the first half of its result, and copies y[0:256] after it)
        t1, quarter = tiles[1], HALF // 2
        return [tiles[0], dataclasses.replace(t1, stores=(
            Transfer.contiguous(t1.stores[0].src, Y + 4 * HALF, 4 * quarter),
            Transfer.contiguous(Y, Y + 4 * (HALF + quarter), 4 * quarter)))]
    e = _refusal("store_from_ddr", _with(((0, X, Y), (1, X + 4 * HALF, Y + 4 * HALF)), copy_store))
    assert e.rule == "store-race" and e.tile == 1
    assert "store 1 stores from bytes of [0xa0100000, 0xa0100400) that tile 0 (slot 0) stores while" in str(e)

    def copy_load(tiles, ctx):
        t1 = tiles[1]
        return [tiles[0], dataclasses.replace(t1, loads=t1.loads + (Transfer.contiguous(X, Y, 4 * HALF),))]
    e = _refusal("load_into_ddr", _with(((0, X, Y), (1, X + 4 * HALF, Y + 4 * HALF)), copy_load))
    assert e.rule == "store-race" and e.tile == 1
    assert "load 1 loads into bytes of [0xa0100000, 0xa0100800) that tile 0 (slot 0) stores while" in str(e)


def _staged(after: int):
    """Tiles 0 and 1 (slot 0) store y's halves, tile 2 (slot 1) computes x[0:512] without storing; a staging tile
    placed after tile ``after`` copies y[0:512] into GSM's window (buffer g), and tile 3 (slot 1) reads it from
    there and stores it doubled into y[0:512] again."""
    def change(tiles, ctx):
        g = ctx.level("gsm").base
        stage = Tile(9, (Transfer.contiguous(Y, g, 4 * HALF),), None, (), 0, fills=("g@0",))
        t3 = _tile(ctx, 3, 1, g, Y, 3 * 0x10000)
        t3 = dataclasses.replace(t3, uses=("g@0",))
        body = [tiles[0], tiles[1], tiles[2]]
        body.insert(after + 1, stage)
        return body + [t3]
    return _with(((0, X, Y), (0, X + 4 * HALF, Y + 4 * HALF), (1, X, None)), change)


def test_a_staging_tiles_loads_wait_only_for_its_buffers():
    """Placed right after tile 0, the staging tile is issued while tile 0 may still store y[0:512] it reads: a race.
    Placed after tile 2, it is issued once tile 1 has computed, whose loads waited for tile 0's stores (slot 0): the
    copy sees them, and tile 3 (its buffer's user) doubles them into y[0:512]; its own store comes after its compute,
    which waited for the copy."""
    e = _refusal("staged_early", _staged(0))
    assert e.rule == "store-race" and e.tile == 9
    assert ("load 0 reads bytes of [0xa0100000, 0xa0100800) that tile 0 (slot 0) stores while this tile (a "
            "staging tile) may run: a staging tile's loads wait only for the buffers they fill") in str(e)
    with sim.registered_kernel(Twice("staged_late", _staged(2))):
        m = _machine()
        m.call("fp_staged_late_s", x=X, y=Y, n=N, core_mask=1)
    x = np.arange(N, dtype=F32)
    np.testing.assert_array_equal(m.read(Y, N, F32), np.concatenate([4 * x[:HALF], 2 * x[HALF:]]))


def test_a_copy_within_ddr_races_the_other_transfers_of_its_own_tile():
    """A tile's stores stream together: tile 0 storing y[0:512] and copying y[0:256] on to y[768:1024] in the
    same tile is a race (the copy may read before or after the store lands); so is a load copying x[0:512] into
    y[512:1024] beside a load reading y[512:1024] into AM.  Copying bytes no other transfer of the tile writes
    passes."""
    quarter = HALF // 2

    def store_copy(tiles, ctx):
        t0 = tiles[0]
        return [dataclasses.replace(t0, stores=t0.stores + (
            Transfer.contiguous(Y, Y + 4 * (HALF + quarter), 4 * quarter),)), tiles[1]]
    e = _refusal("copy_own_store", _with(((0, X, Y), (0, X + 4 * HALF, None)), store_copy))
    assert e.rule == "transfer-overlap" and e.tile == 0
    assert ("store 1 reads bytes store 0 of the same tile writes (in [0xa0100000, 0xa0100400)): a tile's stores "
            "stream at the same time") in str(e) and "whether the read sees the write" in str(e)

    def load_copy(tiles, ctx):
        t1 = tiles[1]
        return [tiles[0], dataclasses.replace(t1, loads=(Transfer.contiguous(X, Y + 4 * HALF, 4 * HALF),)
                                              + t1.loads)]
    e = _refusal("copy_own_load", _with(((0, X, Y), (0, Y + 4 * HALF, None)), load_copy))
    assert e.rule == "transfer-overlap" and e.tile == 1
    assert "load 1 reads bytes load 0 of the same tile writes (in [0xa0100800, 0xa0101000))" in str(e)

    def apart(tiles, ctx):  # the copy reads x, which nothing writes
        t1 = tiles[1]
        return [tiles[0], dataclasses.replace(t1, loads=t1.loads + (
            Transfer.contiguous(X, Y + 4 * HALF, 4 * HALF),))]
    with sim.registered_kernel(Twice("copy_apart", _with(((0, X, Y), (0, X + 4 * HALF, None)), apart))):
        m = _machine()
        m.call("fp_copy_apart_s", x=X, y=Y, n=N, core_mask=1)
    x = np.arange(N, dtype=F32)
    np.testing.assert_array_equal(m.read(Y, N, F32), np.concatenate([2 * x[:HALF], x[:HALF]]))


def test_a_tile_whose_loads_wait_for_a_buffer_may_write_what_its_fill_read():
    """A staging tile copies y[0:512] into GSM (buffer g); tile 1 uses g, loading it from GSM, and copies
    x[512:1024] into y[0:512].  Tile 1's loads read g's bytes, so all of them wait for g's fill: the copy comes
    after the staging tile read y, and tile 1 doubles y's old values into y[512:1024]."""
    def change(tiles, ctx):
        stage, user = _stage_and_user(ctx)
        return [stage, dataclasses.replace(user, loads=user.loads + (_COPY,))]
    _copies_after_the_fill("waits_for_fill", change)


#: A load copying x[512:1024] into y[0:512], which the staging tile of :func:`_stage_and_user` reads.
_COPY = Transfer.contiguous(X + 4 * HALF, Y, 4 * HALF)


def _stage_and_user(ctx) -> tuple[Tile, Tile]:
    """A staging tile copying y[0:512] into GSM (buffer g), and tile 1 (slot 0) using g: it doubles g into
    y[512:1024]."""
    g = ctx.level("gsm").base
    stage = Tile(0, (Transfer.contiguous(Y, g, 4 * HALF),), None, (), 0, fills=("g@0",))
    return stage, dataclasses.replace(_tile(ctx, 1, 0, g, Y + 4 * HALF, 0x10000), uses=("g@0",))


def _copies_after_the_fill(name: str, change) -> None:
    """Run ``change``'s tiles: they pass, the copy landing after the fill read y (y[512:1024] = 2 x 7)."""
    with sim.registered_kernel(Twice(name, _with(((0, X, None),), change), updates_y=True)):  # (y's 7s read)
        m = _machine()
        m.call(f"fp_{name}_s", x=X, y=Y, n=N, core_mask=1)
    np.testing.assert_array_equal(m.read(Y, N, F32),
                                  np.concatenate([np.arange(HALF, N, dtype=F32), np.full(HALF, 14.0, F32)]))


def test_a_tile_after_the_first_user_in_its_slot_is_ordered_after_the_fill():
    """A staging tile copies y[0:512] into GSM (buffer g); tile 1 (slot 0) uses g; tile 2, also slot 0, copies
    x[512:1024] into y[0:512] among its loads.  Tile 2's loads wait for tile 1's stores, which follow its compute,
    which waited for the fill: ordered, so legal, and tile 1 doubles y's old values."""
    def change(tiles, ctx):
        after = _tile(ctx, 2, 0, X, None, 0x10000)
        return [*_stage_and_user(ctx), dataclasses.replace(after, loads=after.loads + (_COPY,))]
    _copies_after_the_fill("after_user", change)
