"""Whether two transfer sides share a byte (sim/model/block_overlap.py), derived by hand; and the plan check's race
rules (``transfer-overlap``, ``store-race``) judging bytes, not spans."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sim
from sim.model.block_overlap import layout_of, run_count, sides_meet
from sim.model.plan import Transfer

BASE = 0xA0000000
AM = 0x20000000


def _slice(first_channel: int, channels: int, rows: int = 4, all_channels: int = 12, item: int = 4) -> Transfer:
    """Channels [first, first + channels) of ``rows`` rows of an NHWC tensor of ``all_channels``, stored from AM."""
    return Transfer(AM, BASE + first_channel * item, (rows, channels), item, (channels * item, item),
                    (all_channels * item, item))


def _meet(a: Transfer, b: Transfer) -> bool:
    return sides_meet(layout_of(a, "dst"), layout_of(b, "dst"))


def test_interleaved_channel_slices_share_no_byte_though_their_spans_overlap():
    # Rows of 48 bytes: channels 0-2 are bytes 0-11 of each row, channels 3-5 bytes 12-23.  Spans [0, 156) and
    # [12, 168) overlap; the bytes do not.
    a, b = _slice(0, 3), _slice(3, 3)
    assert a.span("dst")[1] > b.span("dst")[0]
    assert not _meet(a, b)
    # Channels 2-4 share channel 2 (bytes 8-11 of every row) with channels 0-2.
    assert _meet(a, _slice(2, 3))
    # Channels 3-5 of the rows shifted by one: row i of one meets row i + 1 of the other only where channels do.
    assert not _meet(a, dataclasses.replace(_slice(3, 3), dst=BASE + 48 + 12))


def test_channel_slices_of_a_4d_tensor_are_judged_as_rows():
    """Channels of a 2 x 40 x 40 x 12 NHWC tensor: 3,200 rows of 48 bytes, more runs than are tried one by one; its
    dimensions step on evenly, so a slice is one dimension of 3,200 rows and slices are compared as rows."""
    def nhwc(first: int, channels: int) -> Transfer:
        return Transfer(AM, BASE + first * 4, (2, 40, 40, channels), 4, (6400 * channels, 160 * channels,
                                                                          4 * channels, 4), (76800, 1920, 48, 4))
    assert layout_of(nhwc(0, 3), "dst") == (BASE, 12, ((3200, 48),))
    assert not _meet(nhwc(0, 3), nhwc(3, 3))
    assert _meet(nhwc(0, 3), nhwc(2, 3))


def test_a_dense_run_against_a_strided_block():
    a = _slice(0, 3)  # bytes 0-11, 48-59, 96-107, 144-155
    assert _meet(a, Transfer.contiguous(AM, BASE + 50, 4))
    assert not _meet(a, Transfer.contiguous(AM, BASE + 12, 36))  # bytes 12-47: between rows 0 and 1
    assert _meet(a, Transfer.contiguous(AM, BASE + 12, 37))  # ... and byte 48
    assert not _meet(a, Transfer.contiguous(AM, BASE + 156, 100))  # past the last row


def test_blocks_of_different_layouts_are_tried_run_by_run():
    # Rows of 8 bytes every 40 against rows of 4 bytes every 48: a's runs [0, 8), [40, 48), [80, 88), [120, 128);
    # b's at 16 + 48 k: [16, 20), [64, 68), [112, 116) meet none; at 4 + 48 k: [4, 8) meets a's first.
    a = Transfer(AM, BASE, (4, 2), 4, (8, 4), (40, 4))
    assert not _meet(a, Transfer(AM, BASE + 16, (3, 1), 4, (4, 4), (48, 4)))
    assert _meet(a, Transfer(AM, BASE + 4, (3, 1), 4, (4, 4), (48, 4)))


def _bytes_of(t: Transfer) -> set[int]:
    out = set()
    for ks in itertools.product(*(range(n) for n in t.shape)):
        at = t.dst + sum(k * s for k, s in zip(ks, t.dst_strides))
        out.update(range(at, at + t.itemsize))
    return out


def _block(item: int, off: int, rows: int, run: int, gap: int) -> Transfer:
    return Transfer(AM, BASE + off * item, (rows, run), item, (run * item, item), ((run + gap) * item, item))


block_args = st.tuples(st.integers(0, 40), st.integers(1, 6), st.integers(1, 5), st.integers(0, 6))


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(st.sampled_from([1, 4]), block_args, block_args)
def test_random_blocks_meet_exactly_when_their_bytes_do(item, a_args, b_args):
    a, b = _block(item, *a_args), _block(item, *b_args)
    assert _meet(a, b) == bool(_bytes_of(a) & _bytes_of(b))


def test_a_transposed_block_is_the_dense_block_it_covers():
    """A 16 x 16 fp32 block stored transposed (element (i, j) to row j, column i: strides (4, 64)) covers the same
    1,024 bytes as the dense block; the same block stored backwards (strides (-64, -4) from its last element) too.
    Each meets whatever a dense store of any of those bytes writes, and nothing past them."""
    transposed = Transfer(AM, BASE, (16, 16), 4, (64, 4), (4, 64))
    backwards = Transfer(AM, BASE + 1020, (16, 16), 4, (64, 4), (-64, -4))
    for t in (transposed, backwards):
        assert layout_of(t, "dst") == (BASE, 1024, ())
        assert _meet(t, Transfer.contiguous(AM, BASE + 1020, 4))
        assert not _meet(t, Transfer.contiguous(AM, BASE + 1024, 64))
    # Half of the columns transposed: rows j of 8 elements at 64 j, i.e. bytes [64 j, 64 j + 32): a block of 16 runs.
    half = Transfer(AM, BASE, (8, 16), 4, (64, 4), (4, 64))
    assert layout_of(half, "dst") == (BASE, 32, ((16, 64),))
    assert not _meet(half, Transfer(AM, BASE + 32, (16, 8), 4, (32, 4), (64, 4)))  # the other half of each row
    assert _meet(half, Transfer(AM, BASE + 28, (16, 8), 4, (32, 4), (64, 4)))


def test_blocks_of_many_runs_in_different_layouts_are_listed():
    """Every 2nd float against every 3rd, 8,192 runs each (more than are tried one by one): they share every 6th;
    every 2nd against every 2nd from the next float (the same layout, shifted): none; every 4th (even floats)
    against every 6th from float 1 (odd floats): none; from float 2 they share float 8."""
    def every(k: int, first: int = 0, n: int = 8192) -> Transfer:
        return Transfer(AM, BASE + 4 * first, (n,), 4, (4,), (4 * k,))
    assert _meet(every(2), every(3))
    assert not _meet(every(2), every(2, 1))
    assert not _meet(every(4), every(6, 1))
    assert _meet(every(4), every(6, 2))


dims = st.lists(st.tuples(st.integers(1, 4), st.integers(-40, 40)), min_size=1, max_size=3)


@settings(max_examples=400, deadline=None, derandomize=True, database=None)
@given(st.sampled_from([1, 4]), st.integers(0, 200), dims, st.integers(0, 200), dims)
def test_random_blocks_of_any_strides_meet_exactly_when_their_bytes_do(item, a_at, a_dims, b_at, b_dims):
    """Blocks whose strides may run backwards, be 0, come in any order or overlap themselves (not nested): the
    answer is the byte sets' (the blocks start far enough into memory that a backward stride stays inside)."""
    def block(at: int, d: list[tuple[int, int]]) -> Transfer:
        shape = tuple(n for n, _ in d)
        return Transfer(AM, BASE + 1000 + at, shape, item, tuple(item for _ in d), tuple(s * item for _, s in d))
    a, b = block(a_at, a_dims), block(b_at, b_dims)
    assert _meet(a, b) == bool(_bytes_of(a) & _bytes_of(b))


def _random_block(rng: np.random.Generator, sizes: tuple[int, int], ndims: tuple[int, int]) -> Transfer:
    """A block of fp32 elements at a random place past BASE: ``ndims`` (low, high) dimensions of ``sizes`` (low,
    high) elements each, any strides from -40 to 40 elements (backwards, zero, overlapping)."""
    d = [(int(rng.integers(*sizes)), int(rng.integers(-40, 41))) for _ in range(int(rng.integers(*ndims)))]
    return Transfer(AM, BASE + 1000 + int(rng.integers(0, 200)), tuple(n for n, _ in d), 4, tuple(4 for _ in d),
                    tuple(4 * s for _, s in d))


def test_a_block_of_more_runs_than_are_listed_at_once_is_listed_a_part_at_a_time(monkeypatch):
    """With at most 4 runs listed at once, random blocks (any strides) whose smaller has at most 4 runs still meet
    exactly when their bytes do: the larger is looked up a part of 4 runs at a time."""
    import sim.model.block_overlap as block_overlap
    monkeypatch.setattr(block_overlap, "MAX_RUNS_LISTED", 4)
    monkeypatch.setattr(block_overlap, "MAX_RUNS_TRIED", 0)
    rng = np.random.default_rng(11)
    judged = 0
    for _ in range(600):
        blocks = [_random_block(rng, (1, 5), (1, 4)) for _ in range(2)]
        if min(int(np.prod(t.shape)) for t in blocks) > 4:
            continue
        judged += 1
        assert _meet(*blocks) == bool(_bytes_of(blocks[0]) & _bytes_of(blocks[1])), blocks
    assert judged > 200


def test_two_blocks_both_of_more_runs_than_are_listed_at_once_meet_exactly_when_their_bytes_do(monkeypatch):
    """With at most 4 runs listed at once and none tried one by one, random blocks (any strides, nested or not)
    of which both have more than 4 runs: the smaller is listed whole, the larger looked up 4 runs at a time, and
    the answer is still the byte sets' (it was "apart" before, whatever the bytes)."""
    import sim.model.block_overlap as block_overlap
    monkeypatch.setattr(block_overlap, "MAX_RUNS_LISTED", 4)
    monkeypatch.setattr(block_overlap, "MAX_RUNS_TRIED", 0)
    rng = np.random.default_rng(12)
    judged = meeting = 0
    for _ in range(600):
        blocks = [_random_block(rng, (2, 6), (2, 4)) for _ in range(2)]
        if min(run_count(layout_of(t, "dst")[2]) for t in blocks) <= 4:
            continue
        judged += 1
        truth = bool(_bytes_of(blocks[0]) & _bytes_of(blocks[1]))
        meeting += truth
        assert _meet(*blocks) == truth, blocks
    assert judged > 200 and 0 < meeting < judged


def test_two_non_nested_blocks_of_over_a_million_runs_each_meet_at_their_one_shared_byte():
    """Two writes of 2**20 + 2 overlapping 8-byte runs each (runs 4 bytes apart: not nested, more runs than are
    listed at once), the second starting where the first ends but for its last 4 bytes: they share those, and one
    float further on they share none."""
    from sim.model.block_overlap import MAX_RUNS_LISTED
    n = MAX_RUNS_LISTED + 2
    first = Transfer(AM, BASE, (n, 2), 4, (0, 4), (4, 4))  # bytes [BASE, BASE + 4 n + 4)
    assert _meet(first, Transfer(AM, BASE + 4 * n, (n, 2), 4, (0, 4), (4, 4)))
    assert not _meet(first, Transfer(AM, BASE + 4 * n + 4, (n, 2), 4, (0, 4), (4, 4)))


@pytest.mark.parametrize("second", [3, 2])
def test_a_tile_storing_interleaved_slices_passes_and_one_storing_shared_bytes_is_refused(second):
    """Through a user kernel: tile 1 stores two slices of three channels of y viewed as 64 rows of 12 fp32 channels,
    the first from channel 0, the second (from further in its slot) from channel ``second``.  Channels 0-2 and 3-5
    share no byte: the plan passes.  Channels 0-2 and 2-4 both write channel 2: ``transfer-overlap``."""
    from test_plan_check import _machine
    from tiny_kernels import Twice

    def breaker(p, c, x):
        core = p.cores[0]
        t0, t1 = p.phases[0].tiles[core]
        y = c.buffer("y").addr
        slot = t1.stores[0].src
        stores = (Transfer(slot, y, (64, 3), 4, (12, 4), (48, 4)),
                  Transfer(slot + 768, y + second * 4, (64, 3), 4, (12, 4), (48, 4)))
        return dataclasses.replace(p, phases=(dataclasses.replace(p.phases[0], tiles={
            core: (dataclasses.replace(t0, stores=()), dataclasses.replace(t1, stores=stores))}),))

    with sim.registered_kernel(Twice(f"slices{second}", breaker)):
        m, args, _ = _machine("s")
        if second == 3:
            m.call(f"fp_slices{second}_s", numerics=False, **args)
        else:
            with pytest.raises(sim.PlanError) as info:
                m.call(f"fp_slices{second}_s", numerics=False, **args)
            assert info.value.rule == "transfer-overlap" and "store 1 writes bytes store 0" in str(info.value)
