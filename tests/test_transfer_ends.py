"""A transfer's ends are kept per shape and placement (sim/engine/ends.py): transfers that lie alike share one
answer, which is exactly what resolving each gives; those that do not (another region, another offset within a
DRAM row, another core's private memory) get their own; one outside the map is refused as before."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sim
from sim.engine.ends import EndsMemo, resolve_transfer_ends
from sim.errors import MemoryFault
from sim.model.plan import Transfer

FT78NE = sim.load_target("FT78NE")
DDR, AM, GSM = FT78NE.region("ddr"), FT78NE.region("am"), FT78NE.region("gsm")
ROW = DDR.rows.row_bytes


def _memo() -> tuple[EndsMemo, object]:
    mmap = sim.Simulator(FT78NE, tuning_cache=False).memory.map
    return EndsMemo(mmap), mmap


def test_transfers_a_whole_number_of_rows_apart_share_the_answer_resolving_gives():
    memo, mmap = _memo()
    block = dict(shape=(16, 96), itemsize=4, src_strides=(4096, 4), dst_strides=(384, 4))
    first = Transfer(DDR.base + 100, AM.base, **block)
    same = [Transfer(DDR.base + 100 + k * ROW, AM.base + 64 * k, **block) for k in (1, 7, 300)]
    got = memo(first, 3)
    assert got == resolve_transfer_ends(first, 3, mmap)
    for t in same:
        assert memo(t, 3) is got and resolve_transfer_ends(t, 3, mmap) == got


def test_another_offset_in_a_row_another_region_or_another_core_is_worked_out_anew():
    memo, mmap = _memo()
    # 8 KiB contiguous from the start of a row opens one row; from its middle, two.
    whole, split = (Transfer.contiguous(DDR.base + off, AM.base, ROW) for off in (ROW, ROW + ROW // 2))
    a, b = memo(whole, 0), memo(split, 0)
    assert a == resolve_transfer_ends(whole, 0, mmap) and b == resolve_transfer_ends(split, 0, mmap)
    assert a[-1][0][1] == 1 and b[-1][0][1] == 2  # (region, activations, least cycles) of DDR
    to_gsm = Transfer.contiguous(DDR.base + ROW, GSM.base, ROW)
    assert memo(to_gsm, 0) == resolve_transfer_ends(to_gsm, 0, mmap) != a
    # AM is each core's own: the same transfer issued by core 5 streams through core 5's AM.
    assert memo(whole, 5) == resolve_transfer_ends(whole, 5, mmap) and memo(whole, 5)[1][1] == 5 != a[1][1]


def test_a_transfer_outside_the_map_is_refused_as_resolving_refuses_it():
    memo, mmap = _memo()
    past = Transfer.contiguous(DDR.base + DDR.size_bytes - 64, AM.base, 128)
    with pytest.raises(MemoryFault) as direct:
        resolve_transfer_ends(past, 0, mmap)
    with pytest.raises(MemoryFault) as kept:
        memo(past, 0)
    assert str(kept.value) == str(direct.value)


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(sides=st.lists(st.tuples(st.sampled_from(["ddr", "gsm", "am"]), st.integers(0, 3 * ROW),
                                st.sampled_from(["ddr", "gsm", "am"]), st.integers(0, 1 << 14),
                                st.integers(1, 24), st.integers(1, 300), st.sampled_from([1, 2, 4]),
                                st.integers(0, 2)), min_size=1, max_size=40),
       core=st.integers(0, 7))
def test_the_kept_answer_is_what_resolving_each_transfer_gives(sides, core):
    """Random blocks (rows of a few hundred elements, strided or dense, at any offset) between DDR, GSM and AM, on
    one memo: each answer is exactly the transfer's own, whichever transfer made it."""
    memo, mmap = _memo()
    for src_name, src_off, dst_name, dst_off, rows, cols, item, gap in sides:
        src, dst = FT78NE.region(src_name), FT78NE.region(dst_name)
        t = Transfer(src.base + src_off, dst.base + dst_off, (rows, cols), item, ((cols + gap) * item, item),
                     (cols * item, item))
        assert memo(t, core) == resolve_transfer_ends(t, core, mmap)
