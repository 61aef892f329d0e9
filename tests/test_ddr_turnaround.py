"""DDR's data bus turning around between reads and writes (sim/engine/turnaround.py), derived by hand from
targets/FT78NE.yaml.

FT78NE's DDR: 20 B/cycle over 2 channels, latency 200, 64-byte bursts; after a write the bus idles 30 cycles before
a read's data (tWTR_S + CL), after a read 3 before a write's; writes drained in batches of 2,048 bytes.  So a byte
written while something reads costs alpha = (30 + 3) x 20 / (2 x 2048) = 165 / 1024 bytes of bus on top of itself.
DMA: setup 64, 64 B/cycle per engine; launch 1,800: every stream below starts at 1,864.
"""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction
from pathlib import Path

import pytest
import yaml

import sim
from sim.engine.engine import simulate
from sim.inspect.dram_turns import turns_text, written_beside_reads
from sim.model.memory import AddressSpace
from sim.model.plan import Phase, Plan, Tile, Transfer
from sim.model.target_loader import parse_target
from sim.timing import bus_cost_per_written_byte, copy_turn_bytes, stream_cycles

FT = sim.load_target("FT78NE")
DDR, AM = FT.region("ddr"), FT.region("am")
START = 1864


def test_the_numbers_used_here_are_the_target_files():
    rows = DDR.rows
    assert rows is not None
    assert (rows.channels, rows.write_to_read_cycles, rows.read_to_write_cycles, rows.write_batch_bytes) == \
        (2, 30, 3, 2048)
    assert (DDR.bandwidth_bytes_per_cycle, DDR.latency_cycles, FT.dma.setup_cycles) == (20, 200, 64)
    assert FT.launch_overhead_cycles + FT.dma.setup_cycles == START
    assert bus_cost_per_written_byte(DDR) == Fraction(165, 1024)


def _events(target, transfers: dict[int, Transfer]):
    tiles = {core: (Tile(0, (t,), None, ()),) for core, t in transfers.items()}
    plan = Plan(tuple(sorted(tiles)), (Phase("p", tiles, barrier_after=False),), "fp32")
    return simulate(plan, target, AddressSpace(target), numerics=False).events


def _streams(target, transfers: dict[int, Transfer]) -> dict[int, tuple[int, int]]:
    """Each core's one transfer: (its stream's end, its landing)."""
    return {e.core: (e.end - DDR.latency_cycles, e.end) for e in _events(target, transfers) if e.kind == "dma_in"}


def _load(nbytes: int) -> Transfer:
    return Transfer.contiguous(DDR.base, AM.base, nbytes)


def _store(nbytes: int) -> Transfer:
    return Transfer.contiguous(AM.base, DDR.base + 0x100000, nbytes)


def test_a_read_and_a_write_at_once_pay_the_turns():
    # Equal levels: 20 = L (the read) + L * (1 + 165/1024) (the write), L = 20480 / 2213 bytes a cycle each; both
    # 8,192-byte streams end at 1864 + 8192 / L = 1864 + 885.2 -> 2750, where without turns (10 B/cycle each) they
    # end at 1864 + 819.2 -> 2684.
    level = Fraction(20480, 2213)
    end = math.ceil(START + 8192 / level)
    assert end == 2750
    got = _streams(FT, {0: _load(8192), 1: _store(8192)})
    assert got == {0: (end, end + 200), 1: (end, end + 200)}
    no_turns = dataclasses.replace(FT, regions=tuple(
        dataclasses.replace(r, rows=dataclasses.replace(r.rows, write_to_read_cycles=0, read_to_write_cycles=0,
                                                            write_batch_bytes=0)) if r.name == "ddr" else r
        for r in FT.regions))
    assert _streams(no_turns, {0: _load(8192), 1: _store(8192)}) == {0: (2684, 2884), 1: (2684, 2884)}


def test_only_reads_or_only_writes_pay_nothing():
    assert _streams(FT, {0: _load(8192), 1: _load(8192)}) == {0: (2684, 2884), 1: (2684, 2884)}
    assert _streams(FT, {0: _store(8192), 1: _store(8192)}) == {0: (2684, 2884), 1: (2684, 2884)}


def test_the_write_runs_at_full_speed_once_the_read_is_done():
    # The 4,096-byte read ends at ceil(1864 + 4096 / L) = ceil(2306.6) = 2307; by then the write has moved
    # 443 L bytes of its 8,192; alone, without turns, it moves the rest at 20 B/cycle.
    level = Fraction(20480, 2213)
    read_end = math.ceil(START + 4096 / level)
    assert read_end == 2307
    write_end = math.ceil(read_end + (8192 - (read_end - START) * level) / 20)
    assert write_end == 2512
    assert _streams(FT, {0: _load(4096), 1: _store(8192)}) == {0: (read_end, read_end + 200),
                                                              1: (write_end, write_end + 200)}


def test_a_writer_turns_the_bus_only_for_readers_of_its_priority_or_higher():
    # A store of priority 1 beside a load of priority 0: the store shares DDR as if the load were absent, all 20
    # B/cycle and no turns, 8192 / 20 = 409.6 -> 2274; the load, starved until then, streams alone after it:
    # ceil(2274 + 409.6) = 2684.  (Were the starved load counted as reading beside it, the store would pay turns
    # on every byte: ceil(1864 + 8192 x (1 + 165/1024) / 20) = 2340.)
    store = dataclasses.replace(_store(8192), priority=1)
    assert _streams(FT, {0: _load(8192), 1: store}) == {0: (2684, 2884), 1: (2274, 2474)}
    # A load of priority 1 beside a store of priority 0: the store turns the bus for it while it waits (a reader of a
    # higher priority), but gets no bandwidth until the load is done: the load ends at 2274, the store at 2684.
    load = dataclasses.replace(_load(8192), priority=1)
    assert _streams(FT, {0: load, 1: _store(8192)}) == {0: (2274, 2474), 1: (2684, 2884)}


def test_the_summary_counts_the_turns_from_the_trace():
    # Both 8,192-byte streams over [1864, 2750): every written byte beside a read, 8192 / 2048 = 4 turns, each
    # idling one of the two channels 33 cycles: 66 cycles of DDR's whole bandwidth, the 2750 - 2684 they cost.
    events = _events(FT, {0: _load(8192), 1: _store(8192)})
    assert written_beside_reads(events, FT) == {"ddr": (8192, 8192.0)}
    assert turns_text(events, FT) == ("DRAM read/write turns: ddr: 8,192 of 8,192 bytes written beside reads, "
                                      "about 4 turns, 66 cycles of its whole bandwidth lost")
    # The read of 4,096 bytes streams over [1864, 2307), the write over [1864, 2512): 443 of its 648 cycles.
    events = _events(FT, {0: _load(4096), 1: _store(8192)})
    assert written_beside_reads(events, FT) == {"ddr": (8192, 8192 * 443 / 648)}
    # Writes alone meet no read.
    events = _events(FT, {0: _store(8192), 1: _store(8192)})
    assert written_beside_reads(events, FT) == {"ddr": (16384, 0.0)} and turns_text(events, FT) is None


def test_a_copy_within_ddr_turns_its_own_bus():
    # 8,192 bytes from DDR to DDR: DDR carries both ends' 16,384 bytes and the turns of its 8,192 written,
    # ceil(8192 * 165 / 1024) = 1,320: 17,704 bytes over 20 B/cycle, 885.2 -> 886 cycles, alone as beside others.
    t = Transfer.contiguous(DDR.base, DDR.base + 0x100000, 8192)
    assert copy_turn_bytes(DDR, 8192) == 1320
    assert stream_cycles(t, DDR, DDR, FT.dma) == 886
    (e,) = [e for e in _events(FT, {0: t}) if e.kind == "dma_in"]
    assert (e.end - DDR.latency_cycles, e.wait_cycles) == (START + 886, 0)


def test_a_write_batch_must_be_whole_bursts():
    doc = yaml.safe_load(Path(FT.path).read_text())
    next(r for r in doc["regions"] if r["name"] == "ddr")["rows"]["write_batch_bytes"] = 1000
    with pytest.raises(sim.TargetError, match=r"regions\[4\]\(ddr\)\.rows\.write_batch_bytes: must be a whole "
                                              r"number of the region's 64-byte bursts, got 1000"):
        parse_target(doc, "FT78NE (odd batch)")


def test_the_summary_and_the_html_report_list_the_turns():
    from sim.report.page import report_html
    # BatchNormGrad on 16384 x 64 (the medium bench case): its x_backprop phase reads x and dy while it writes dx.
    run = sim.Simulator(FT).call("fp_batch_norm_grad_s", numerics=False, x=0x80000000, dy=0x81000000,
                                 dx=0x82000000, params=[0x83000000 + i * 0x10000 for i in range(5)] + [16384, 64, 1])
    total, beside = written_beside_reads(run.events, FT)["ddr"]
    # dx, and the two per-channel gradients (64 fp32 each)
    assert total == 16384 * 64 * 4 + 2 * 64 * 4 and 0 < beside < total
    line = turns_text(run.events, FT)
    assert line is not None and line in run.summary_text()
    assert f"<dt>DRAM read/write turns</dt><dd>{line.removeprefix('DRAM read/write turns: ')}</dd>" in \
        report_html(run)


def test_turn_cycles_without_a_write_batch_are_refused():
    doc = yaml.safe_load(Path(FT.path).read_text())
    del next(r for r in doc["regions"] if r["name"] == "ddr")["rows"]["write_batch_bytes"]
    with pytest.raises(sim.TargetError, match=r"regions\[4\]\(ddr\)\.rows\.write_batch_bytes: is needed with "
                                              r"write_to_read_cycles"):
        parse_target(doc, "FT78NE (no batch)")
