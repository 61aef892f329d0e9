"""A DMA engine moves one contiguous run per beat (sim.timing.engine_bytes): costs derived by hand from
targets/FT78NE.yaml.

FT78NE: DMA setup 64 cycles, 64 B/cycle per engine; AM 128 B/cycle, latency 4, bursts of 1 byte; GSM 64 B/cycle,
latency 40, 32-byte bursts; the launch 1,800 cycles.
"""

from __future__ import annotations

import sim
from sim.engine.engine import simulate
from sim.model.memory import AddressSpace
from sim.model.plan import Phase, Plan, Tile, Transfer
from sim.timing import engine_bytes, stream_cycles, transfer_bytes

FT = sim.load_target("FT78NE")
AM, GSM = FT.region("am"), FT.region("gsm")


def test_the_numbers_used_here_are_the_target_files():
    assert (FT.dma.setup_cycles, FT.dma.engine_bytes_per_cycle, FT.launch_overhead_cycles) == (64, 64, 1800)
    assert (AM.bandwidth_bytes_per_cycle, AM.latency_cycles, AM.burst_bytes) == (128, 4, 1)
    assert (GSM.bandwidth_bytes_per_cycle, GSM.latency_cycles, GSM.burst_bytes) == (64, 40, 32)


def _gather(src: int, dst: int, elements: int, pitch_bytes: int) -> Transfer:
    """``elements`` fp32 values ``pitch_bytes`` apart at ``src``, packed at ``dst``."""
    return Transfer(src, dst, (elements,), 4, (pitch_bytes,), (4,))


def test_a_gather_of_single_elements_takes_a_beat_an_element():
    # 256 fp32 values 64 B apart in GSM, packed into AM: GSM moves 256 bursts of 32 B = 8,192 bytes (128 cycles at
    # 64 B/cycle), AM 1,024 bytes (8 cycles).  The engine moves 256 runs of 4 bytes: 256 beats = 256 cycles, where
    # counting its bytes alone (the larger end's, 8,192 / 64) gave 128.
    t = _gather(GSM.base, AM.base, 256, 64)
    sb, db = transfer_bytes(t, GSM, AM)
    assert (sb, db) == (256 * 32, 1024)
    assert engine_bytes(t, sb, db, FT.dma) == 256 * 64
    assert stream_cycles(t, GSM, AM, FT.dma) == 256
    plan = Plan((0,), (Phase("p", {0: (Tile(0, (t,), None, ()),)}, barrier_after=False),), "fp32")
    (e,) = [e for e in simulate(plan, FT, AddressSpace(FT), numerics=False).events if e.kind == "dma_in"]
    # Setup 64, 256 cycles of beats, GSM's latency 40 (the slower end's).
    assert (e.start, e.end) == (1800, 1800 + 64 + 256 + 40)


def test_runs_a_beat_or_longer_cost_their_bytes():
    # Runs of 128 bytes (two beats each) and a dense copy: the beats are the bytes over 64, so nothing changes.
    t = Transfer(GSM.base, AM.base, (16, 32), 4, (4096, 4), (128, 4))
    sb, db = transfer_bytes(t, GSM, AM)
    assert engine_bytes(t, sb, db, FT.dma) == max(sb, db) == 2048
    dense = Transfer.contiguous(GSM.base, AM.base, 6000)
    assert engine_bytes(dense, *transfer_bytes(dense, GSM, AM), FT.dma) == 6016  # (GSM's whole bursts)
    # A run of 65 bytes is two beats: 10 of them take 20 cycles of the engine, 1,280 bytes' worth.
    odd = Transfer(AM.base, AM.base + 0x10000, (10, 65), 1, (128, 1), (65, 1))
    assert engine_bytes(odd, *transfer_bytes(odd, AM, AM), FT.dma) == 10 * 2 * 64
