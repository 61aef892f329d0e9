"""DDR rows and banks (sim/model/dram.py, the activation link of sim/engine): activations counted from the addresses,
and their cost derived by hand from the target file's numbers.

FT78NE's DDR (targets/FT78NE.yaml): 20 B/cycle, 64-byte bursts, latency 200; rows of 8 KiB over 32 banks, 8
activations per 38-cycle window (tFAW), 84 cycles between two activations of one bank (tRC).  Its DMA: setup 64,
64 B/cycle per engine; the launch 1,800 cycles.
"""

from __future__ import annotations

import dataclasses
import math
import random
from pathlib import Path

import numpy as np
import pytest

import sim
from sim.engine.engine import simulate
from sim.model.dram import row_use, run_row_use
from sim.model.memory import AddressSpace
from sim.model.plan import Phase, Plan, Tile, Transfer
from sim.model.target import DramRows
from sim.timing import stream_cycles

FT = sim.load_target("FT78NE")
DDR, AM = FT.region("ddr"), FT.region("am")
ROWS = DDR.rows
assert ROWS is not None


def _column(src: int, runs: int, run_bytes: int, pitch_bytes: int, dst: int) -> Transfer:
    """``runs`` runs of ``run_bytes`` fp32 bytes ``pitch_bytes`` apart in DDR, packed into AM."""
    n = run_bytes // 4
    return Transfer(src, dst, (runs, n), 4, (pitch_bytes, 4), (run_bytes, 4))


# --- counting -------------------------------------------------------------------------------------


def test_the_shipped_ddr_states_its_rows():
    assert (ROWS.row_bytes, ROWS.banks, ROWS.activations_per_window, ROWS.window_cycles,
            ROWS.bank_busy_cycles) == (8192, 32, 8, 38, 84)
    mt = sim.load_target("MT7004").region("ddr").rows
    assert mt is not None and (mt.row_bytes, mt.banks, mt.activations_per_window, mt.window_cycles) == (8192, 16, 4, 21)
    assert FT.region("gsm").rows is None and AM.rows is None  # SRAM opens no rows


def test_hand_counted_activations():
    # 64 KiB from the base: rows 0..7, each in its own bank.
    assert row_use(ROWS, 0, (65536,), 1, (1,)) == (8, 1)
    # 64 runs of 64 B, 16 KiB apart: every run opens a row (rows 0, 2, ..., 126), in banks 0, 2, ..., 30, four
    # rows each.
    assert row_use(ROWS, 0, (64, 16), 4, (16384, 4)) == (64, 4)
    # The same 64 runs 128 B apart stay in row 0: one activation.
    assert row_use(ROWS, 0, (64, 16), 4, (128, 4)) == (1, 1)
    # 256 KiB apart (32 rows of 8 KiB): every run in bank 0, each a new row.
    assert row_use(ROWS, 0, (10, 16), 4, (262144, 4)) == (10, 10)
    # A run that crosses a row boundary opens both rows; the banks repeat every 256 KiB of offset.
    assert row_use(ROWS, 8192 - 32, (16,), 4, (4,)) == (2, 1)
    assert row_use(ROWS, 8192 - 32 + 262144 * 3, (16,), 4, (4,)) == (2, 1)
    assert row_use(ROWS, 0, (0, 16), 4, (64, 4)) == (0, 0)


def test_counts_match_an_element_by_element_walk():
    """The run-level count (Python for a few runs, numpy for many) equals opening rows byte by byte in the
    descriptor's order, each bank keeping its last row open."""
    rows = DramRows(row_bytes=256, banks=4, activations_per_window=4, window_cycles=21, bank_busy_cycles=47)
    rng = random.Random(7)
    for _ in range(400):
        nd = rng.randint(1, 3)
        shape = tuple(rng.randint(1, 20) for _ in range(nd))
        itemsize = rng.choice([1, 2, 4])
        strides = tuple(rng.choice([itemsize, itemsize * rng.randint(1, 9), rng.randint(1, 3000)]) for _ in range(nd))
        offset = rng.randint(0, 5000)
        open_row: dict[int, int] = {}
        per_bank: dict[int, int] = {}
        for index in np.ndindex(*shape):
            start = offset + sum(i * s for i, s in zip(index, strides))
            for byte in range(start, start + itemsize):
                r = byte // rows.row_bytes
                b = r % rows.banks
                if open_row.get(b) != r:
                    open_row[b] = r
                    per_bank[b] = per_bank.get(b, 0) + 1
        assert row_use(rows, offset, shape, itemsize, strides) == (sum(per_bank.values()), max(per_bank.values()))



def test_one_run_is_counted_without_the_walk():
    """:func:`run_row_use` (the shortcut the engine and the roofline take for a one-run side) answers what the walk
    answers, rows crossed and banks wrapped included."""
    rows = DramRows(row_bytes=256, banks=4, activations_per_window=4, window_cycles=21, bank_busy_cycles=47)
    for offset in (0, 1, 255, 256, 1000, 4095):
        for nbytes in (1, 2, 255, 256, 257, 1024, 1025, 5000):
            assert run_row_use(rows, offset, nbytes) == row_use(rows, offset, (nbytes,), 1, (1,))
    # Ten rows over four banks: three in the busiest.
    assert run_row_use(rows, 0, 2560) == (10, 3)

# --- cost ------------------------------------------------------------------------------------------


def _plan(transfers_by_core: dict[int, Transfer]) -> Plan:
    tiles = {core: (Tile(0, (t,), None, ()),) for core, t in transfers_by_core.items()}
    return Plan(tuple(sorted(tiles)), (Phase("p", tiles, barrier_after=False),), "fp32")


def _run(target, transfers_by_core: dict[int, Transfer]):
    return simulate(_plan(transfers_by_core), target, AddressSpace(target), numerics=False)


def _dma(run, core: int):
    (e,) = [e for e in run.events if e.kind == "dma_in" and e.core == core]
    return e


def test_distant_short_runs_are_paced_by_the_activation_rate():
    # 64 runs of 64 B, 16 KiB apart: 4,096 bytes (whole bursts) take 4096 / 20 = 204.8 cycles of DDR and
    # 4096 / 64 = 64 of the engine, but 64 activations at 8 per 38 cycles take 64 * 38 / 8 = 304 cycles, and bank
    # 0's four rows (3 repeats at tRC 84) 252: the activations set the pace.
    t = _column(DDR.base, 64, 64, 16384, AM.base)
    assert stream_cycles(t, DDR, AM, FT.dma) == 304
    e = _dma(_run(FT, {0: t}), 0)
    latency = max(DDR.latency_cycles, AM.latency_cycles)
    assert (e.start, e.end - e.start) == (FT.launch_overhead_cycles, FT.dma.setup_cycles + 304 + latency)
    assert e.row_activations == 64 and e.wait_cycles == 0
    # The same bytes as one long run open one row: ceil(4096 / 20) = 205 cycles.
    long = Transfer.contiguous(DDR.base, AM.base, 4096)
    assert stream_cycles(long, DDR, AM, FT.dma) == 205
    assert _dma(_run(FT, {0: long}), 0).row_activations == 1


def test_camping_on_one_bank_pays_trc():
    # 10 runs 256 KiB apart all fall in bank 0: 9 repeats at 84 cycles = 756, against 10 * 38 / 8 = 47.5.
    t = _column(DDR.base, 10, 64, 262144, AM.base)
    assert stream_cycles(t, DDR, AM, FT.dma) == 9 * 84


def test_two_cores_share_the_activation_rate_and_neighbouring_runs_recover_it():
    """Two cores streaming short runs from distant rows at once share the device's activations: 128 at 8 per 38
    cycles end both streams at 608 cycles, where one long run each (8,192 bytes over 20 B/cycle) ends at 410.
    Runs of the two cores that interleave within the same rows (what a synchronised transfer reads) open one row
    each and cost what the long runs cost."""
    distant = _run(FT, {0: _column(DDR.base, 64, 64, 16384, AM.base),
                        1: _column(DDR.base + 8192, 64, 64, 16384, AM.base)})
    long = _run(FT, {0: Transfer.contiguous(DDR.base, AM.base, 4096),
                     1: Transfer.contiguous(DDR.base + 4096, AM.base, 4096)})
    neighbours = _run(FT, {0: _column(DDR.base, 64, 64, 128, AM.base),
                           1: _column(DDR.base + 64, 64, 64, 128, AM.base)})
    stream = FT.dma.setup_cycles + max(DDR.latency_cycles, AM.latency_cycles)
    for core in (0, 1):
        assert _dma(distant, core).end - _dma(distant, core).start == stream + 128 * 38 // 8
        assert _dma(long, core).end - _dma(long, core).start == stream + math.ceil(8192 / 20)
        assert _dma(neighbours, core).end - _dma(neighbours, core).start == stream + math.ceil(8192 / 20)
        assert _dma(neighbours, core).row_activations == 1
    # What the sharing cost each distant stream beyond its alone time (304), as the trace says.
    assert _dma(distant, 0).wait_cycles == 608 - 304


def test_a_ddr_without_rows_is_the_uniform_pipe_it_was():
    plain = dataclasses.replace(FT, regions=tuple(dataclasses.replace(r, rows=None) for r in FT.regions))
    t = _column(DDR.base, 64, 64, 16384, AM.base)
    assert stream_cycles(t, plain.region("ddr"), AM, FT.dma) == math.ceil(4096 / 20)
    assert _dma(_run(plain, {0: t}), 0).row_activations == 0


@pytest.mark.parametrize("key, value, words", [
    ("row_bytes", 6000, "must be a power of two"),
    ("row_bytes", 32, "whole number of the region's 64-byte bursts"),
    ("banks", 0, "banks"),
    ("window_cycles", 0, "window_cycles"),
])
def test_a_bad_rows_block_is_refused_naming_its_key(tmp_path, key, value, words):
    import yaml
    doc = yaml.safe_load((Path(__file__).resolve().parent.parent / "targets" / "FT78NE.yaml").read_text())
    ddr = next(r for r in doc["regions"] if r["name"] == "ddr")
    ddr["rows"][key] = value
    path = tmp_path / "chip.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(sim.TargetError) as err:
        sim.load_target(str(path))
    assert "rows" in str(err.value) and key in str(err.value) and words in str(err.value)


def test_traces_and_the_summary_carry_the_rows(tmp_path):
    """Each DMA event says how many rows it opened, a written trace (JSON and CSV) reads back with them, and the
    summary's rows line counts them per region: the two distant streams above open 64 rows each, 8,192 bytes in
    all, and the activation rate is busy 128 x 38 / 8 = 608 cycles of the run."""
    from sim.inspect.summary import row_activations, rows_text
    from sim.inspect.trace import write_trace
    from sim.inspect.trace_tools import load_trace
    run = _run(FT, {0: _column(DDR.base, 64, 64, 16384, AM.base), 1: _column(DDR.base + 8192, 64, 64, 16384, AM.base)})
    assert row_activations(run.events, FT) == {"ddr": (128, 2, 8192)}
    text = rows_text(run.events, FT, run.cycles)
    assert text is not None and text.startswith("DRAM rows: ddr: 128 row activations in 2 transfers (one per 64 bytes)")
    assert f"busy {100 * 608 / run.cycles:.1f}% of the run" in text
    for suffix in (".json", ".csv"):
        path = write_trace(tmp_path / f"t{suffix}", run.events, FT.clock_hz, {})
        back = [e for e in load_trace(path).events if e.kind == "dma_in"]
        assert sorted(e.row_activations for e in back) == [64, 64]


def test_the_roofline_counts_the_rows_and_no_run_beats_it():
    """The two distant streams' 128 activations need 128 x 38 / 8 = 608 cycles of DDR's activation rate: the
    roofline's ``ddr rows`` resource, above their 8,192 bytes over 20 B/cycle, and the run lower bound adds the
    launch, the setup and DDR's latency (the run takes exactly that: nothing else shares the rate)."""
    from sim.timing import roofline, run_lower_bound_cycles
    transfers = {0: _column(DDR.base, 64, 64, 16384, AM.base), 1: _column(DDR.base + 8192, 64, 64, 16384, AM.base)}
    rf = roofline(_plan(transfers), FT)
    assert rf.resource_cycles["ddr rows"] == pytest.approx(608) and rf.bound_by == "ddr rows"
    assert rf.resource_cycles["ddr"] == pytest.approx(8192 / 20)
    bound = run_lower_bound_cycles(rf, FT)
    assert bound == pytest.approx(FT.launch_overhead_cycles + FT.dma.setup_cycles + 608 + DDR.latency_cycles)
    assert _run(FT, transfers).cycles >= bound


def test_a_tiling_of_short_runs_a_row_apart_reads_as_limited_by_the_rows():
    """BatchNormGrad on 64 x 4096 fp32 channels cut into 8-channel slices (32 bytes, 16 KiB apart: each opens a
    row) is paced by DDR's activations, and its summary says so; the search's own tiling reads long runs."""
    from sim.inspect.summary import limiting_resource, resource_shares
    args = {"x": 0x80000000, "dy": 0x80100000, "dx": 0x80200000,
            "params": [0x80300000 + i * 0x10000 for i in range(5)] + [64, 4096, 1]}
    m = sim.Simulator(FT)
    slices = m.call("fp_batch_norm_grad_s", numerics=False, tiling={"split": "channels", "channel_block": 8}, **args)
    summaries = slices.summaries()
    assert limiting_resource(slices.roofline, summaries, slices.cycles) == "ddr rows"
    assert resource_shares(slices.roofline, summaries, slices.cycles)["ddr rows"] > 0.9
    assert "DRAM rows: ddr:" in slices.summary_text() and "limited by ddr rows" in slices.summary_text()
    best = m.call("fp_batch_norm_grad_s", numerics=False, **args)
    assert best.cycles < slices.cycles / 2 and best.roofline.bound_by == "ddr"


def test_the_html_report_lists_the_rows():
    from sim.report.page import report_html
    run = sim.Simulator(FT).call("fp_batch_norm_grad_s", numerics=False,
                                 tiling={"split": "channels", "channel_block": 8},
                                 x=0x80000000, dy=0x80100000, dx=0x80200000,
                                 params=[0x80300000 + i * 0x10000 for i in range(5)] + [8, 4096, 1])
    html = report_html(run)
    assert "<dt>DRAM rows</dt><dd>ddr: " in html and "row activations in" in html
    assert "set by ddr rows" in html


# --- a copy within DDR: its reads and writes walk the rows as one stream ----------------------------------------

def _copy_walk(rows: DramRows, src: int, dst: int, shape: tuple[int, ...], item: int, ss: tuple[int, ...],
               ds: tuple[int, ...]) -> tuple[int, int]:
    """(activations, busiest bank's) by hand: the copy's bytes in element order, a batch of write_batch_bytes
    read, then written, byte by byte, one open row per bank."""
    import itertools
    order = []
    for ks in itertools.product(*(range(n) for n in shape)):
        s = src + sum(k * st for k, st in zip(ks, ss))
        d = dst + sum(k * st for k, st in zip(ks, ds))
        order += [(s + i, d + i) for i in range(item)]
    open_row: dict[int, int] = {}
    per_bank: dict[int, int] = {}
    batch = rows.write_batch_bytes
    for k in range(0, len(order), batch):
        for side in (0, 1):
            for pair in order[k:k + batch]:
                r = pair[side] // rows.row_bytes
                b = r % rows.banks
                if open_row.get(b) != r:
                    open_row[b] = r
                    per_bank[b] = per_bank.get(b, 0) + 1
    return sum(per_bank.values()), max(per_bank.values())


def test_a_copys_rows_are_its_reads_and_writes_walked_batch_by_batch():
    """Random small copies within FT78NE's DDR (a 64-byte row and a 96-byte write batch, so that runs cross rows
    and batches), against the walk by hand: the reads of each batch of the controller's write queue, then its
    writes, one open row per bank shared by both."""
    from sim.model.dram import copy_row_use
    rows = dataclasses.replace(ROWS, row_bytes=64, banks=4, write_batch_bytes=96)
    rng = random.Random(5)
    for _ in range(300):
        nd = rng.randint(1, 2)
        shape = tuple(rng.randint(1, 5) for _ in range(nd))
        item = rng.choice([1, 4])
        ss = tuple(rng.choice([item, 2 * item, 24, 64, 100]) for _ in range(nd))
        ds = tuple(rng.choice([item, 3 * item, 32, 64, 256]) for _ in range(nd))
        if nd == 2:
            ss, ds = (ss[0] * shape[1], item), (ds[0] * shape[1] + rng.choice([0, 8]), item)
        src, dst = rng.randint(0, 600), rng.randint(0, 600)
        got = copy_row_use(rows, src, dst, shape, item, ss, ds)
        assert (got.activations, got.busiest_bank) == _copy_walk(rows, src, dst, shape, item, ss, ds), \
            (src, dst, shape, item, ss, ds)


def test_a_copy_between_two_rows_of_one_bank_pays_trc_and_one_within_a_row_opens_it_once():
    """FT78NE (8 KiB rows, 32 banks, tRC 84, a write batch of 2 KiB). 64 bytes from row 0 to row 32, both in bank 0:
    the read opens row 0 and the write row 32 in the same bank, so the stream lasts at least tRC (84 cycles, where
    its 128 bytes over DDR's 20 B/cycle and two activations at 8 per 38 cycles take 8 and 10): the DMA event spans
    the setup, 84 and DDR's latency.  To row 33 (bank 1) the two activations take 10.  Within row 0 (to byte 4096)
    the row opens once."""
    latency = DDR.latency_cycles
    for dst_row, stream, opened in ((32, 84, 2), (33, 10, 2)):
        t = Transfer.contiguous(DDR.base, DDR.base + dst_row * 8192, 64)
        assert stream_cycles(t, DDR, DDR, FT.dma) == stream
        run = _run(FT, {0: t})
        (e,) = [e for e in run.events if e.kind == "dma_in"]
        assert (e.start, e.end - e.start) == (FT.launch_overhead_cycles, FT.dma.setup_cycles + stream + latency)
        assert e.row_activations == opened
    within = Transfer.contiguous(DDR.base, DDR.base + 4096, 64)
    (e,) = [e for e in _run(FT, {0: within}).events if e.kind == "dma_in"]
    assert e.row_activations == 1


def test_copies_within_ddr_never_beat_the_roofline():
    """The roofline counts a copy's rows as the engine charges them (one walk of reads and writes): random copies
    within DDR on two cores never run faster than the run's lower bound."""
    from sim.timing import roofline, run_lower_bound_cycles
    rng = random.Random(8)
    for _ in range(40):
        transfers = {}
        for core in (0, 1):
            runs, run = rng.randint(1, 16), rng.choice([64, 128, 4096])
            src = DDR.base + rng.randrange(0, 64) * 8192 + rng.choice([0, 64])
            dst = DDR.base + (64 + rng.randrange(0, 64)) * 8192
            transfers[core] = Transfer(src, dst, (runs, run), 1, (rng.choice([run, 8192, 262144]), 1),
                                       (rng.choice([run, 8192, 262144]), 1))
        plan = _plan(transfers)
        assert simulate(plan, FT, AddressSpace(FT), numerics=False).cycles >= run_lower_bound_cycles(
            roofline(plan, FT), FT)


def test_copies_alike_but_for_whether_their_sides_share_a_row_are_told_apart_in_one_run():
    """Two 64-byte copies in one run on one core (the engine keeps one answer per shape and placement): A within
    one row (to byte 4096 of it: the row opens once), B a period of the banks further on (to byte 4096 of row 32,
    the same bank: two rows open).  Both offsets within their rows and the distance modulo the period agree;
    each keeps its own count in either order (B's was A's when A came first)."""
    period = ROWS.period_bytes
    a = Transfer.contiguous(DDR.base + 2 * period, DDR.base + 2 * period + 4096, 64)
    b = Transfer.contiguous(DDR.base, DDR.base + period + 4096, 64)
    for order in ((a, b), (b, a)):
        tiles = {0: tuple(Tile(i, (t,), None, ()) for i, t in enumerate(order))}
        run = simulate(Plan((0,), (Phase("p", tiles, barrier_after=False),), "fp32"), FT, AddressSpace(FT),
                       numerics=False)
        got = [e.row_activations for e in run.events if e.kind == "dma_in"]
        assert got == [1 if t is a else 2 for t in order]


@pytest.mark.parametrize("window", [1, 3, 16, 1 << 20])
def test_the_walk_fed_a_window_at_a_time_counts_as_one_walk(window, monkeypatch):
    """The open-page walk keeps each bank's open row from one window of runs to the next: random runs (some in
    row order, some not), fed a few at a time, open the rows a walk of them all at once by hand opens."""
    from sim.model import dram
    monkeypatch.setattr(dram, "WINDOW", window)
    rows = dataclasses.replace(ROWS, row_bytes=64, banks=4, write_batch_bytes=96)
    rng = np.random.default_rng(7)
    for case in range(300):
        n = int(rng.integers(1, 40))
        first = np.sort(rng.integers(0, 30, n)) if case % 3 == 0 else rng.integers(0, 30, n)
        last = first + (0 if case % 2 else rng.integers(0, 3, n))
        open_row: dict[int, int] = {}
        per_bank = [0] * 4
        for f, la in zip(first.tolist(), last.tolist()):
            for r in range(f, la + 1):
                if open_row.get(r % 4) != r:
                    open_row[r % 4] = r
                    per_bank[r % 4] += 1
        got = dram._counted_rows(rows, first.astype(np.int64), last.astype(np.int64))
        assert (got.activations, got.busiest_bank) == (sum(per_bank), max(per_bank)), (first, last)
    # A copy's batches walked a window at a time (its pieces cut by _cut), against the walk by hand.
    for _ in range(100):
        shape = (int(rng.integers(1, 9)), int(rng.integers(1, 5)))
        ss, ds = (int(rng.choice([16, 64, 100])), 4), (int(rng.choice([16, 32, 256])), 4)
        src, dst = int(rng.integers(0, 600)), int(rng.integers(0, 600))
        run, outer = dram._runs(shape, 4, ss)
        reads = dram._cut(rows, dram._starts_np(src, outer), run)
        run, outer = dram._runs(shape, 4, ds)
        got = dram._batch_walk(rows, reads, dram._cut(rows, dram._starts_np(dst, outer), run))
        assert (got.activations, got.busiest_bank) == _copy_walk(rows, src, dst, shape, 4, ss, ds)
