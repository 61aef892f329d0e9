"""Numbered DMA channels (``Transfer.channel``, the target's ``dma.channels_per_core``): a channel carries one
transfer at a time, in issue order; a transfer naming none takes the core's next free engine, as before.  Costs
derived by hand from FT78NE's file: DDR 20 B/cycle, latency 200 (AM's is lower); DMA setup 64 cycles, 64 B/cycle
per engine, 2 engines per core; launch 1,800 cycles.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

import sim
from sim.engine.engine import simulate
from sim.model.memory import AddressSpace
from sim.model.plan import Phase, Plan, Tile, Transfer
from sim.timing import stream_cycles

FT = sim.load_target("FT78NE")
DDR, AM = FT.region("ddr"), FT.region("am")
LAUNCH, SETUP, LATENCY = FT.launch_overhead_cycles, FT.dma.setup_cycles, DDR.latency_cycles


def _loads(*channels: int | None) -> tuple[Transfer, ...]:
    """A 2 KiB load per channel given, each from its own DDR row into its own 4 KiB of AM."""
    return tuple(dataclasses.replace(Transfer.contiguous(DDR.base + i * 3 * 8192, AM.base + i * 4096, 2048),
                                     channel=ch) for i, ch in enumerate(channels))


def _events(*channels: int | None) -> list[tuple[int, int]]:
    plan = Plan((0,), (Phase("p", {0: (Tile(0, _loads(*channels), None, ()),)}, barrier_after=False),), "fp32")
    run = simulate(plan, FT, AddressSpace(FT), numerics=False)
    dmas = [e for e in run.events if e.kind == "dma_in"]
    assert sorted(e.channel for e in dmas if e.channel is not None) == sorted(c for c in channels if c is not None)
    return [(e.start, e.end) for e in dmas]


def test_transfers_on_one_channel_take_turns_and_on_two_share_ddr():
    """Alone, a 2 KiB load lasts setup + 2048 / 20 (103 cycles of DDR) + DDR's latency: 367 cycles.  Two loads
    on one channel: the second takes an engine when the first lands, and lasts as long.  On two channels (or none)
    they start together and share DDR: 2 x 2048 / 20 = 205 cycles of stream each."""
    stream = stream_cycles(_loads(None)[0], DDR, AM, FT.dma)
    assert stream == 103
    alone = SETUP + stream + LATENCY
    assert _events(0, 0) == [(LAUNCH, LAUNCH + alone), (LAUNCH + alone, LAUNCH + 2 * alone)]
    together = [(LAUNCH, LAUNCH + SETUP + 205 + LATENCY)] * 2
    assert _events(0, 1) == together
    assert _events(None, None) == together
    assert _events(3, None) == together


def test_three_transfers_on_one_channel_run_in_issue_order():
    alone = SETUP + 103 + LATENCY
    got = _events(5, 5, 5)
    assert got == [(LAUNCH + i * alone, LAUNCH + (i + 1) * alone) for i in range(3)]


class _OnChannels:
    """A user kernel copying x to y through AM, its load and store on the given channels."""

    precisions = ("fp32",)
    variants = ("s",)

    def __init__(self, name: str, load_channel, store_channel, sync: str | None = None):
        from sim.model.call import ArgSpec
        self.name = name
        self.args = (ArgSpec("x", "in_ptr", "input"), ArgSpec("y", "out_ptr", "output"))
        self.channels, self.sync = (load_channel, store_channel), sync

    def bind(self, symbol, precision, variant, cores, args, read):
        from kernels.common.binding import bind_arguments, bound_call
        a = bind_arguments(symbol, precision, self.args, args)
        return bound_call(a, variant, cores, [a.buffer("x", (512,)), a.buffer("y", (512,))], attrs=None)

    def plan(self, call, ctx):
        x, y, am = call.buffer("x").addr, call.buffer("y").addr, ctx.vector_level.base
        load = dataclasses.replace(Transfer.contiguous(x, am, 2048), channel=self.channels[0], sync=self.sync)
        store = dataclasses.replace(Transfer.contiguous(am, y, 2048), channel=self.channels[1])
        return Plan(call.cores, (Phase("p", {call.cores[0]: (Tile(0, (load,), None, (store,)),)},
                                       barrier_after=False),), "fp32")


def _call(kernel, target=FT):
    m = sim.Simulator(target, tuning_cache=False)
    x = np.arange(512, dtype=np.float32)
    m.write(0xA0000000, x)
    with sim.registered_kernel(kernel):
        run = m.call(f"fp_{kernel.name}_s", x=0xA0000000, y=0xA1000000, core_mask=1)
    return m, run, x


def test_a_kernel_names_channels_through_the_simulator(tmp_path):
    from sim.inspect.trace_tools import load_trace
    m, run, x = _call(_OnChannels("on_channels", 0, 19))
    assert np.array_equal(m.read(0xA1000000, (512,), np.float32), x)
    # The trace names each DMA's channel, and a written trace reads back with it.
    assert sorted((e.kind, e.channel) for e in run.events if e.kind in ("dma_in", "dma_out")) == [
        ("dma_in", 0), ("dma_out", 19)]
    for name in ("t.json", "t.csv"):
        back = load_trace(run.write_trace(tmp_path / name))
        assert sorted((e.kind, e.channel) for e in back.events if e.kind in ("dma_in", "dma_out")) == [
            ("dma_in", 0), ("dma_out", 19)]


@pytest.mark.parametrize("channel, why", [(20, "from 0 to 19 (FT78NE's dma.channels_per_core)"), (-1, "got -1"),
                                          (True, "got True"), ("0", "got '0'")])
def test_a_channel_the_core_lacks_is_refused_before_the_run(channel, why):
    with pytest.raises(sim.PlanError, match="plan-structure") as e:
        _call(_OnChannels("bad_channel", channel, None))
    assert "Transfer.channel must be None or an int" in str(e.value) and why in str(e.value)


def test_a_synchronised_transfer_names_no_channel():
    with pytest.raises(sim.PlanError, match=r"Transfer.channel .* with sync 'g'"):
        _call(_OnChannels("sync_channel", 0, None, sync="g"))


def test_the_channel_count_is_the_target_files(tmp_path):
    """A copy of FT78NE's file with two channels per core: channel 1 runs, channel 2 is refused naming the count."""
    text = (Path(__file__).resolve().parent.parent / "targets" / "FT78NE.yaml").read_text()
    path = tmp_path / "two_channels.yaml"
    path.write_text(text.replace("channels_per_core: 20", "channels_per_core: 2"))
    two = sim.load_target(str(path))
    assert two.dma.channels_per_core == 2 and FT.dma.channels_per_core == 20
    _call(_OnChannels("channel_one", 1, None), two)
    with pytest.raises(sim.PlanError, match=r"from 0 to 1 \(FT78NE's dma.channels_per_core\)"):
        _call(_OnChannels("channel_two", 2, None), two)


def test_a_long_walk_on_channels_gives_the_same_run_with_the_steady_state_on_or_off():
    """The steady state stands aside for a plan naming channels (a channel's queue is state it does not write
    down): the same cycles and trace either way."""
    from sim.engine.engine import Engine
    from sim.engine.events import Recorder
    tiles = tuple(Tile(i, (dataclasses.replace(Transfer.contiguous(DDR.base + i * 4096, AM.base + (i % 2) * 4096,
                                                                  4096), channel=i % 3),), None, (), slot=i % 2)
                  for i in range(64))
    plan = Plan((0,), (Phase("p", {0: tiles}, barrier_after=False),), "fp32")
    runs = []
    for on in (True, False):
        rec = Recorder()
        cycles = Engine(FT, AddressSpace(FT), rec, numerics=False, steady=on).run(plan)
        runs.append((cycles, [(e.start, e.end, e.unit) for e in rec.events]))
    assert runs[0] == runs[1]


def test_a_channel_can_shorten_a_run_by_landing_the_first_load_sooner():
    """Two tiles each load 4 KiB from DDR, then compute d cycles.  Without channels the loads share DDR and both
    land at 64 + ceil(8192 / 20) + 200 = 674 cycles after the launch, so the computes end at 674 + 2d.  On one
    channel the first lands alone at 64 + ceil(4096 / 20) + 200 = 469 and the second 469 later, while the first
    computes (d > 469): the run ends at 469 + 2d, sooner.  (A channel orders transfers: no bound moves.)"""
    from kernels.common.loops import elementwise
    from sim.model.plan import Compute, Operand

    def plan(channel):
        tiles = []
        for i in range(2):
            at = AM.base + i * 65536
            load = dataclasses.replace(Transfer.contiguous(DDR.base + i * 65536, at, 4096), channel=channel)
            op = Operand(at, (1024,), np.dtype(np.float32))
            loop = elementwise(FT.core, "fp32", 1024 * 32, loads=1, stores=0, fmac=1)
            tiles.append(Tile(i, (load,), Compute(lambda a: (a,), (op,), (op,), flops=1024, precision="fp32",
                                                  loops=(loop,)), (), slot=i))
        return Plan((0,), (Phase("p", {0: tuple(tiles)}, barrier_after=False),), "fp32")

    shared = simulate(plan(None), FT, AddressSpace(FT), numerics=False)
    ordered = simulate(plan(0), FT, AddressSpace(FT), numerics=False)
    d = next(e.end - e.start for e in shared.events if e.kind == "compute")
    assert d > SETUP + 205 + LATENCY
    assert shared.cycles == LAUNCH + SETUP + 410 + LATENCY + 2 * d
    assert ordered.cycles == LAUNCH + SETUP + 205 + LATENCY + 2 * d
