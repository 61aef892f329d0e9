"""GEMM test helpers: a plan's compute tiles, and the check that a plan's tiles are another's transposed into C."""

from __future__ import annotations

from sim.model.plan import Plan, Tile
from sim.model.target import Target
from sim.timing import compute_cycles


def compute_tiles(plan: Plan) -> list[Tile]:
    """The tiles of core 0 of the plan's first phase that compute."""
    return [t for t in plan.phases[0].tiles[0] if t.compute is not None]


def assert_tiles_transposed_into_c(plan: Plan, base: Plan, target: Target, c_addr: int, c_pitch_bytes: int,
                                   transpose_cycles: int) -> None:
    """Each compute tile of ``plan`` is ``base``'s with the same loads and loops, its finished tile of Cᵀ then
    transposed in AM (one more loop, ``transpose_cycles``) and stored as C's rows: the tile of Cᵀ rows
    [r0, r0 + rows), columns [0, cols) is C's [0, cols) x [r0, r0 + rows), ``c_pitch_bytes`` apart."""
    tiles, base_tiles = compute_tiles(plan), compute_tiles(base)
    assert len(tiles) == len(base_tiles) >= 1
    r0 = 0
    for tile, b in zip(tiles, base_tiles):
        assert tile.loads == b.loads
        labels = [loop.label for loop in tile.compute.loops]
        assert labels == [loop.label for loop in b.compute.loops] + ["C transposed in AM"]
        assert compute_cycles(tile.compute, target) == compute_cycles(b.compute, target) + transpose_cycles
        (store,) = tile.stores
        _, rows = store.shape
        itemsize = store.itemsize
        assert (store.dst, store.dst_strides) == (c_addr + r0 * itemsize, (c_pitch_bytes, itemsize))
        r0 += rows
