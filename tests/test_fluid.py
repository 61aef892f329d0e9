"""The fluid bandwidth network (sim/engine/fluid.py): max-min fair shares of links, exact, in integer SimPy cycles.

Every expected cycle below is derived by hand in the comment next to it.  Rates are levels: bytes per cycle
of a flow's size (the most bytes it moves through one link); a flow moving b bytes through link l at level
lambda takes lambda * b / size of l's capacity.  A flow whose bytes are all moved at exact time t ends at the
cycle ceil(t) and holds its share until then.  The property test checks the invariants on random networks
and compares every end cycle with a slow, independent reference written here with fractions.Fraction.
"""

from __future__ import annotations

import random
import time
from fractions import Fraction
from unittest import mock

import pytest
import simpy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.engine import fluid
from sim.engine.fluid import FlowError, FlowNetwork
from sim.errors import SimError


class Counting(simpy.Environment):
    """An environment that counts the events scheduled on it."""

    scheduled = 0

    def schedule(self, event, priority=1, delay=0):
        self.scheduled += 1
        super().schedule(event, priority, delay)


def at(env: simpy.Environment, cycle: int, fn) -> None:
    """Call ``fn()`` at ``cycle`` (a timeout scheduled now, so it runs before events scheduled later)."""
    simpy.events.Timeout(env, cycle - env.now).callbacks.append(lambda _: fn())


def run(links: dict, flows: list, observer=None, unweighed=()) -> tuple[FlowNetwork, list]:
    """Run ``flows`` [(start cycle, {link name: bytes}[, priority])] on ``links`` {name: capacity}, the links named
    in ``unweighed`` not weighing their flows' shares; (network, handles)."""
    env = simpy.Environment()
    net = FlowNetwork(env, observer)
    for name, cap in links.items():
        net.add_link(name, cap, weighs=name not in unweighed)
    handles: list = [None] * len(flows)
    reported: list = [None] * len(flows)

    def starter(i, demands, priority):
        def go():
            def done(cycle):
                assert reported[i] is None, "on_done called twice"
                reported[i] = cycle
            handles[i] = net.start_shape(net.shape(demands, priority=priority), done)
        return go

    for i, (cycle, demands, *priority) in enumerate(flows):
        at(env, cycle, starter(i, demands, priority[0] if priority else 0))
    env.run()
    for h, cycle in zip(handles, reported):
        assert cycle is not None and h.end_cycle == cycle, "every flow ends and reports its end cycle"
    assert not net.active
    return net, handles


def ends(handles) -> list[int]:
    return [h.end_cycle for h in handles]


# -- hand-derived cases ------------------------------------------------------------------------------


@pytest.mark.parametrize("nbytes, capacity, cycles", [
    (1000, 24, 42),               # 1000 / 24 = 41.67 -> 42
    (960, 24, 40),                # 960 / 24 = 40 exactly: no extra cycle
    (1, 24, 1),                   # a byte takes a (whole) cycle
    (10, Fraction(3, 2), 7),      # 10 / 1.5 = 6.67 -> 7
    (128, 12.8, 10),              # 128 / 12.8 = 10 (the float taken as the decimal 64/5)
    (192, 19.2, 10),              # 192 / 19.2 = 10: the decimal 96/5, not the double just below it (-> 11)
    (100, 0.001, 100000),         # 100 / 0.001 = 100000 exactly, the smallest bandwidth a target may give
    (7, 7, 1),
])
def test_one_flow_alone_takes_ceil_bytes_over_capacity(nbytes, capacity, cycles):
    _, (f,) = run({"l": capacity}, [(5, {"l": nbytes})])
    assert f.start_cycle == 5 and f.end_cycle == 5 + cycles
    assert f.stream_cycles == f.alone_cycles == cycles and f.wait_cycles == 0


def test_a_lone_flow_is_held_by_its_slowest_link():
    # DDR 24 B/cycle reads 960 bytes, AM 128 B/cycle writes 1024 (its own bursts round up), the engine
    # (32 B/cycle) carries the larger, 1024.  Alone: 960/24 = 40, 1024/128 = 8, 1024/32 = 32 -> 40 cycles.
    _, (f,) = run({"ddr": 24, "am": 128, "eng": 32}, [(0, {"ddr": 960, "am": 1024, "eng": 1024})])
    assert f.end_cycle == 40 and f.alone_cycles == 40 and f.size_bytes == 1024
    # Two such flows sharing DDR (own AMs, own engines): each at level L uses L * 960/1024 of DDR, so
    # 2 * L * 15/16 = 24 -> L = 12.8, 1024 / 12.8 = 80 cycles (= 2 * 960 / 24: DDR exactly full).
    _, fs = run({"ddr": 24, "am0": 128, "am1": 128, "e0": 32, "e1": 32},
                  [(0, {"ddr": 960, "am0": 1024, "e0": 1024}), (0, {"ddr": 960, "am1": 1024, "e1": 1024})])
    assert ends(fs) == [80, 80] and [f.wait_cycles for f in fs] == [40, 40]


def test_two_equal_flows_on_one_link_get_half_each():
    # 16 B/cycle shared by two flows of 800 bytes: 8 B/cycle each, 800 / 8 = 100 cycles; alone 800 / 16 = 50,
    # so each waited 50 cycles for the other.
    _, fs = run({"ddr": 16}, [(0, {"ddr": 800}), (0, {"ddr": 800})])
    assert ends(fs) == [100, 100]
    assert [f.alone_cycles for f in fs] == [50, 50] and [f.wait_cycles for f in fs] == [50, 50]
    assert all(f.rate == 8 for f in fs)


def test_the_long_flow_speeds_up_when_the_short_one_ends():
    # 16 B/cycle, short 100 bytes and long 1000 bytes from cycle 0: 8 B/cycle each.  The short one's bytes
    # are all moved at 100 / 8 = 12.5 -> it ends at cycle 13 (holding its half until then).  By 13 the long
    # one moved 13 * 8 = 104 bytes; the 896 left go at the whole 16 B/cycle: 896 / 16 = 56 -> cycle 69.
    # Alone: short 100/16 = 6.25 -> 7, long 1000/16 = 62.5 -> 63; waits 13 - 7 = 6 and 69 - 63 = 6.
    _, (short, long) = run({"ddr": 16}, [(0, {"ddr": 100}), (0, {"ddr": 1000})])
    assert (short.end_cycle, long.end_cycle) == (13, 69)
    assert (short.wait_cycles, long.wait_cycles) == (6, 6)
    assert long.rate == 16  # its last rate: the whole link


def test_a_later_flow_slows_a_running_one_from_its_start():
    # 10 B/cycle: A 200 bytes from 0, B 50 bytes from 10.  A alone for 10 cycles: 100 bytes, 100 left.
    # From 10 both at 5: B's 50 bytes take 10 -> cycle 20; A moved 50 more, 50 left at 10 -> 5 -> cycle 25.
    _, (a, b) = run({"l": 10}, [(0, {"l": 200}), (10, {"l": 50})])
    assert (a.end_cycle, b.end_cycle) == (25, 20)
    assert (a.wait_cycles, b.wait_cycles) == (5, 5)  # alone 20 and 5


def test_eight_flows_on_a_shared_link_each_capped_by_its_own_private_link():
    # DDR 64 B/cycle, eight flows of 1100 bytes, each also through its own private link of 4, 4, 6, 6, 32,
    # 32, 32, 32 B/cycle.  Progressive filling: DDR would give 64/8 = 8 each, so the two at 4 freeze at their
    # private cap (DDR left: 56 for six); 56/6 = 9.33 > 6 so the two at 6 freeze too (DDR left: 44 for four);
    # 44/4 = 11 < 32: DDR saturates and the last four get 11 each.  Rates 4, 4, 6, 6, 11, 11, 11, 11.
    # Ends: 1100/11 = 100 -> 100;  1100/6 = 183.3 -> 184;  1100/4 = 275.  When the four end at 100 the others
    # are still held by their private links: unchanged.  Alone the four at 11 would take 1100/32 = 34.4 -> 35
    # (wait 65); the capped ones lose nothing to sharing (wait 0).
    caps = [4, 4, 6, 6, 32, 32, 32, 32]
    links = {"ddr": 64, **{f"p{i}": c for i, c in enumerate(caps)}}
    rates = []

    def observe(net):
        rates.append(tuple(f.rate for f in net.active))

    _, fs = run(links, [(0, {"ddr": 1100, f"p{i}": 1100}) for i in range(8)], observe)
    # The eight start at cycle 0: their rates are worked out once, after the eighth start.
    assert rates[0] == (4, 4, 6, 6, 11, 11, 11, 11)
    assert ends(fs) == [275, 275, 184, 184, 100, 100, 100, 100]
    assert [f.wait_cycles for f in fs] == [0, 0, 0, 0, 65, 65, 65, 65]


def test_a_flow_capped_by_its_engine_leaves_the_rest_of_the_shared_link_to_another():
    # DDR 24 B/cycle.  A: 800 bytes, its engine 8 B/cycle.  B: 3200 bytes, its engine 32 B/cycle.
    # Filling: A's engine binds first at 8; DDR's 24 - 8 = 16 go to B (under its engine's 32).
    # A: 800 / 8 = 100 -> cycle 100, exactly its alone time (wait 0).  B by cycle 100 moved 1600; alone on
    # DDR after that at min(24, 32) = 24: 1600 / 24 = 66.7 -> 166.7 -> cycle 167.  B alone: 3200/24 = 133.3
    # -> 134, so it waited 33.
    _, (a, b) = run({"ddr": 24, "ea": 8, "eb": 32},
                      [(0, {"ddr": 800, "ea": 800}), (0, {"ddr": 3200, "eb": 3200})])
    assert (a.end_cycle, b.end_cycle) == (100, 167)
    assert (a.wait_cycles, b.wait_cycles) == (0, 33)


def test_a_link_that_does_not_weigh_leaves_the_shares_of_the_shared_link_equal():
    # DDR 24 B/cycle; A and B each move 1,200 bytes through it, A's engine 1,200 bytes, B's 2,400 (its runs padded
    # to whole beats), both engines 96 B/cycle and not weighing.  Each flow's size is its DDR bytes, 1,200: they
    # split DDR 12 / 12 and both end at 1200 / 12 = 100 (B's engine then carries 24 B/cycle, under its 96).
    _, (a, b) = run({"ddr": 24, "ea": 96, "eb": 96},
                    [(0, {"ddr": 1200, "ea": 1200}), (0, {"ddr": 1200, "eb": 2400})], unweighed={"ea", "eb"})
    assert (a.end_cycle, b.end_cycle) == (100, 100) and (a.size_bytes, b.size_bytes) == (1200, 1200)
    # Were the engines weighing, B's size would be 2,400 and its DDR share half A's: levels 16 (24 = L + L / 2),
    # A done at 1200 / 16 = 75; B has moved 600 DDR bytes by then and the other 600 at 24 B/cycle take 25: 100.
    _, (a, b) = run({"ddr": 24, "ea": 96, "eb": 96},
                    [(0, {"ddr": 1200, "ea": 1200}), (0, {"ddr": 1200, "eb": 2400})])
    assert (a.end_cycle, b.end_cycle) == (75, 100)
    # A flow crossing no weighing link weighs by its largest bytes.
    _, (c,) = run({"e": 8}, [(0, {"e": 80})], unweighed={"e"})
    assert (c.size_bytes, c.end_cycle) == (80, 10)


def test_a_flow_of_a_higher_priority_takes_the_link_first():
    # DDR 24 B/cycle, A and B 1,200 bytes each from cycle 0, B of priority 1: B takes all 24 and ends at
    # 1200 / 24 = 50; A, starved until then, moves its 1,200 at 24 from 50: 100 (alone 50, so it waited 50).
    _, (a, b) = run({"ddr": 24}, [(0, {"ddr": 1200}, 0), (0, {"ddr": 1200}, 1)])
    assert (a.end_cycle, b.end_cycle) == (100, 50) and (a.wait_cycles, b.wait_cycles) == (50, 0)
    # B held to 8 B/cycle by its engine: it takes its 8 (1200 / 8 = 150), A the 16 left (1200 / 16 = 75).
    _, (a, b) = run({"ddr": 24, "eb": 8}, [(0, {"ddr": 1200}, 0), (0, {"ddr": 1200, "eb": 1200}, 1)])
    assert (a.end_cycle, b.end_cycle) == (75, 150)
    # Equal priorities other than 0 share as equals: 12 each, both at 100.
    _, fs = run({"ddr": 24}, [(0, {"ddr": 1200}, 2), (0, {"ddr": 1200}, 2)])
    assert ends(fs) == [100, 100]


def test_flows_on_disjoint_links_do_not_affect_each_other():
    # L1 10 B/cycle: A 100 bytes from 0 -> cycle 10, alone.  L2 5 B/cycle: B and C 55 bytes each from
    # cycle 3, 2.5 B/cycle each: 55 / 2.5 = 22 -> cycle 25.  A is untouched by them (wait 0).
    _, (a, b, c) = run({"l1": 10, "l2": 5}, [(0, {"l1": 100}), (3, {"l2": 55}), (3, {"l2": 55})])
    assert (a.end_cycle, b.end_cycle, c.end_cycle) == (10, 25, 25)
    assert a.wait_cycles == 0 and b.wait_cycles == c.wait_cycles == 11  # alone 55/5 = 11
    # Private regions of two cores (a `_p` call): each core's two engines share only its own region.
    # Core 0: two 320-byte flows on a 32 B/cycle region, 16 each: 20 cycles; core 1: one alone, 10 cycles.
    _, fs = run({"am0": 32, "am1": 32, "e00": 64, "e01": 64, "e10": 64},
                  [(0, {"am0": 320, "e00": 320}), (0, {"am0": 320, "e01": 320}), (0, {"am1": 320, "e10": 320})])
    assert ends(fs) == [20, 20, 10]


def test_a_flow_starting_at_the_cycle_another_ends_gets_the_bandwidth_at_once():
    # 10 B/cycle.  A: 95 bytes from 0, all moved at 9.5 -> ends at 10.  B: 100 bytes, started at cycle 10
    # by a timeout scheduled before A's completion event (so B's start runs first in that cycle): A is done
    # by then, so B has the whole link at once: 100 / 10 = 10 -> cycle 20, no wait.  C: 100 bytes, started
    # at 20 by a timeout A's on_done scheduled, when B has just ended: alone, 10 -> cycle 30.
    env = simpy.Environment()
    net = FlowNetwork(env)
    net.add_link("l", 10)
    got = {}
    at(env, 10, lambda: got.setdefault("b", net.start({"l": 100}, lambda c: None)))
    got["a"] = net.start({"l": 95}, lambda c: at(env, 20, lambda: got.setdefault("c", net.start(
        {"l": 100}, lambda c: None))))
    env.run()
    assert [got[k].end_cycle for k in "abc"] == [10, 20, 30]
    assert got["b"].wait_cycles == 0


def test_a_flow_started_from_on_done_shares_from_that_cycle():
    # 10 B/cycle.  A (100 bytes) and C (300 bytes) from 0 at 5 B/cycle each: A ends at 100 / 5 = 20, when C
    # has moved 100.  A's on_done starts B (100 bytes) at 20: B and C at 5 each, B ends at 20 + 100/5 = 40;
    # C moved 100 more by then, its last 100 bytes alone at 10: 40 + 10 = 50.  Alone: B 10, C 30 cycles.
    env = simpy.Environment()
    net = FlowNetwork(env)
    net.add_link("l", 10)
    got = {}
    got["a"] = net.start({"l": 100}, lambda c: got.setdefault("b", net.start({"l": 100}, lambda c: None)))
    got["c"] = net.start({"l": 300}, lambda c: None)
    env.run()
    assert [got[k].end_cycle for k in "abc"] == [20, 40, 50]
    assert got["b"].start_cycle == 20 and (got["b"].wait_cycles, got["c"].wait_cycles) == (10, 20)


def test_a_link_named_twice_carries_the_sum():
    # A copy within one region reads and writes it: 160 + 160 = 320 bytes on 16 B/cycle -> 20 cycles.
    _, (f,) = run({"ddr": 16}, [(0, [("ddr", 160), ("ddr", 160)])])
    assert f.end_cycle == 20 and f.size_bytes == 320


def test_a_flow_of_no_bytes_ends_at_its_start():
    _, fs = run({"l": 4}, [(7, {"l": 0}), (7, {}), (7, {"l": 8})])
    assert ends(fs) == [7, 7, 9]  # 8 / 4 = 2
    assert fs[0].alone_cycles == 0 and fs[0].demands == ()


def test_same_inputs_same_cycles():
    def scenario():
        rnd = random.Random(1234)
        links = {"ddr": 24, "gsm": Fraction(64, 3), **{f"am{c}": 128 for c in range(4)},
                 **{f"e{c}{e}": 32 for c in range(4) for e in range(2)}}
        flows = []
        for _i in range(200):
            c, e = rnd.randrange(4), rnd.randrange(2)
            n = 64 * rnd.randrange(1, 40)
            src = rnd.choice(["ddr", "gsm"])
            flows.append((rnd.randrange(0, 3000), {src: n, f"am{c}": n + 32 * rnd.randrange(2), f"e{c}{e}": n + 32}))
        rates = []
        net, fs = run(links, flows, lambda net: rates.append(tuple((f.start_cycle, f.rate) for f in net.active)))
        return ends(fs), [f.wait_cycles for f in fs], rates, net.recomputations

    first, second = scenario(), scenario()
    assert first == second
    assert len(set(first[0])) > 50  # the runs did overlap and end at many different cycles


def sixteen_streams(flows: int, shared: bool, burst_mismatch: bool, env: simpy.Environment) -> FlowNetwork:
    """8 cores x 2 DMA engines, each engine streaming flow after flow (16 at once): from DDR (24 B/cycle)
    if ``shared`` else from the core's own L2 (32), into the core's AM (64), through the engine (32).  With
    ``burst_mismatch`` the AM side moves more bytes than the source side (its bursts round up)."""
    net = FlowNetwork(env)
    net.add_link("ddr", 24)
    for c in range(8):
        net.add_link(f"l2.{c}", 32)
        net.add_link(f"am.{c}", 64)
        for e in range(2):
            net.add_link(f"dma{c}.{e}", 32)
    rnd = random.Random(5)
    count = {"started": 0}

    def launch(c: int, e: int) -> None:
        if count["started"] < flows:
            count["started"] += 1
            n = 64 * rnd.randrange(8, 264)
            m = n + 64 * rnd.randrange(3) if burst_mismatch else n
            net.start(((net.links["ddr" if shared else f"l2.{c}"], n), (net.links[f"am.{c}"], m),
                       (net.links[f"dma{c}.{e}"], max(n, m))), lambda cycle: launch(c, e))

    for c in range(8):
        for e in range(2):
            launch(c, e)
    return net


@pytest.mark.parametrize("shared, burst_mismatch", [(True, False), (True, True), (False, False)])
def test_events_per_flow_are_bounded(shared, burst_mismatch):
    # One pending timeout per network: each start and each completion cycle schedules at most one timeout
    # (the stale ones fire as no-ops), so the network's events are at most 2 per flow.  Run with -s to see
    # the cost of a start or an end with 16 flows streaming at once.
    env = Counting()
    flows = 2000
    net = sixteen_streams(flows, shared, burst_mismatch, env)
    began = time.perf_counter()
    env.run()
    took = time.perf_counter() - began
    assert not net.active and env.scheduled <= 2 * flows
    print(f"\n16 concurrent flows, shared={shared}, burst_mismatch={burst_mismatch}: "
          f"{took / (2 * flows) * 1e6:.1f} us per start or end, {env.scheduled / flows:.2f} events per flow, "
          f"{net.recomputations / flows:.2f} recomputations per flow")


# -- refusals ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("capacity, words", [
    (0, "positive"), (-3, "positive"), (Fraction(-1, 2), "positive"), (float("nan"), "finite"),
    (float("inf"), "finite"), (True, "positive number"), ("24", "positive number"), (None, "positive number"),
])
def test_a_bad_capacity_is_refused_naming_the_link(capacity, words):
    net = FlowNetwork(simpy.Environment())
    with pytest.raises(FlowError, match=rf"add_link\('ddr'\): capacity.*{words}"):
        net.add_link("ddr", capacity)
    assert not net.links


def test_bad_flows_are_refused_and_change_nothing():
    env = simpy.Environment()
    net = FlowNetwork(env)
    ddr = net.add_link("ddr", 24)
    other = FlowNetwork(env).add_link("x", 1)
    with pytest.raises(FlowError, match="a link named 'ddr' exists"):
        net.add_link("ddr", 1)
    with pytest.raises(FlowError, match="name must be a non-empty string"):
        net.add_link("", 1)
    cases = [
        ({"gsm": 10}, "no link named 'gsm'"),
        ({other: 10}, "not a link of this network"),
        ({ddr: -1}, "bytes through 'ddr' must be >= 0, got -1"),
        ({ddr: 1.5}, "bytes through 'ddr' must be an int >= 0, got 1.5"),
        ({ddr: True}, "must be an int >= 0, got True"),
        ([ddr], "must hold \\(link, bytes\\) pairs"),
    ]
    for demands, message in cases:
        with pytest.raises(FlowError, match=message):
            net.start(demands, lambda c: None)
    with pytest.raises(FlowError, match="on_done must be callable"):
        net.start({ddr: 1}, None)
    assert not net.active and not ddr.flows and net.recomputations == 0
    assert issubclass(FlowError, SimError)


# -- properties on random networks -------------------------------------------------------------------


def max_min_levels(cap: dict, demand: list, size: list, left, priority=None) -> dict:
    """Max-min fair levels of the flows ``left`` by progressive filling over links only: each round, every link
    with unfrozen flows saturates at level (capacity - frozen usage) / (sum of its unfrozen flows' bytes / size);
    the lowest binds and its flows freeze.  With ``priority`` (a class per flow), class by class, highest first,
    each over what the classes before it left."""
    rate: dict = {}
    for cls in sorted({priority[i] for i in left}, reverse=True) if priority else [None]:
        members = [i for i in left if priority is None or priority[i] == cls]
        _fill_class(cap, demand, size, left, members, rate)
    return rate


def _fill_class(cap: dict, demand: list, size: list, left, members: list, rate: dict) -> None:
    while not all(i in rate for i in members):
        best = None
        for k, capacity in cap.items():
            free = [i for i in members if k in demand[i] and i not in rate]
            if not free:
                continue
            used = sum((rate[i] * demand[i][k] / size[i] for i in left if k in demand[i] and i in rate),
                       Fraction(0))
            level = (capacity - used) / sum(Fraction(demand[i][k]) / size[i] for i in free)
            if best is None or level < best[0]:
                best = (level, free)
            elif level == best[0]:
                best = (level, best[1] + free)
        for i in best[1]:
            rate[i] = best[0]


def reference_ends(links: dict, flows: list, demands_at=None, unweighed=(), priority=None) -> list[int]:
    """End cycles by the textbook algorithm, in Fractions, every rate recomputed at every event cycle.

    Progressive filling over links only (no caps, :func:`max_min_levels`).  A flow ends at the first cycle at or
    after its exact finish, completions before starts.  ``demands_at(i, left, demand)``, if given, is flow ``i``'s
    bytes per link while the flows ``left`` stream (a coupled link's), recomputed at every event cycle; else what
    it asked.  A flow's size is its most bytes through a link not named in ``unweighed`` (through any link if it
    crosses only those).  ``priority``: each flow's class (strict priority), or None for one class.
    """
    cap = {k: Fraction(repr(v)) if isinstance(v, float) else Fraction(v) for k, v in links.items()}
    demand = []
    for _, d in flows:
        pairs = d.items() if isinstance(d, dict) else d
        acc: dict = {}
        for k, b in pairs:
            if b:
                acc[k] = acc.get(k, 0) + b
        demand.append(acc)
    size = [max((b for k, b in d.items() if k not in unweighed), default=0) or max(d.values(), default=0)
            for d in demand]
    out: list = [None] * len(flows)
    left: dict = {}  # flow -> remaining bytes of its size
    finish: dict = {}
    times = sorted({s for s, _ in flows})
    t = times[0]
    while True:
        for i in [i for i in left if finish[i] <= t]:
            out[i] = t
            del left[i]
        for i, (s, _) in enumerate(flows):
            if s == t:
                if size[i]:
                    left[i] = Fraction(size[i])
                else:
                    out[i] = t
        now = demand if demands_at is None else {i: demands_at(i, left, demand) for i in left}
        rate = max_min_levels(cap, now, size, left, priority)
        for i, remaining in left.items():
            if rate[i]:
                q = remaining / rate[i]
                finish[i] = t + -(-q.numerator // q.denominator)
            else:  # starved by a higher class until the next event
                finish[i] = float("inf")
        later = [s for s in times if s > t] + [finish[i] for i in left if finish[i] != float("inf")]
        if not later:
            return out
        nxt = min(later)
        for i in left:
            left[i] -= rate[i] * (nxt - t)
        t = nxt


capacities = st.one_of(st.integers(1, 64), st.builds(Fraction, st.integers(1, 200), st.integers(1, 7)),
                       st.sampled_from([12.8, 0.5, 2.25]))


@st.composite
def networks(draw):
    n_links = draw(st.integers(1, 4))
    links = {f"l{k}": draw(capacities) for k in range(n_links)}
    flows = []
    for _ in range(draw(st.integers(1, 8))):
        names = draw(st.lists(st.sampled_from(sorted(links)), min_size=1, max_size=3))  # repeats: summed
        flows.append((draw(st.integers(0, 40)), [(k, draw(st.integers(0, 400))) for k in names],
                      draw(st.sampled_from([0, 0, 0, 1, 2]))))
    return links, flows, draw(st.sets(st.sampled_from(sorted(links))))


def check_max_min(net: FlowNetwork) -> None:
    """Every flow's rate is feasible and max-min fair: each flow has a bottleneck, a saturated link on which
    no flow has a higher rate (so it cannot get more without taking from a flow with a rate <= its own)."""
    links = net.links.values()
    for link in links:
        assert sum((f.usage(link) for f in link.flows), Fraction(0)) <= link.capacity
    for f in net.active:
        if not f.size_bytes:
            continue
        assert 0 <= f.rate <= f.cap
        # (strict priority: a flow's bottleneck is full, and no flow of its class or below gets more of it)
        assert any(sum((g.usage(link) for g in link.flows), Fraction(0)) == link.capacity
                   and all(g.rate <= f.rate for g in link.flows if g.priority <= f.priority)
                   for link, _ in f.demands), f"{f} has no bottleneck"
        assert f.rate or any(g.priority > f.priority for link, _ in f.demands for g in link.flows), \
            f"{f} starves with no flow of a higher class beside it"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(networks())
def test_random_networks_are_fair_within_capacity_and_match_the_reference(case):
    links, flows, unweighed = case
    checks = []

    def observe(net):
        check_max_min(net)
        checks.append(1)

    with mock.patch.object(fluid, "_GRID", 1 << 100000):  # exact all the way: comparable with the reference
        net, fs = run(links, flows, observe, unweighed)
    assert ends(fs) == reference_ends(links, [(s, d) for s, d, _ in flows], unweighed=unweighed,
                                      priority=[p for _, _, p in flows])
    assert len(checks) == net.recomputations
    for f in fs:
        assert f.end_cycle >= f.start_cycle + f.alone_cycles
    # No run beats the bandwidth bound: the bytes of the flows that start at or after a and end by b fit in
    # capacity * (b - a) on every link.
    cycles = sorted({f.start_cycle for f in fs} | {f.end_cycle for f in fs})
    for name, link in net.links.items():
        for a in cycles:
            for b in cycles:
                if b > a:
                    moved = sum(n for f in fs if a <= f.start_cycle and f.end_cycle <= b
                                for lk, n in f.demands if lk is link)
                    assert moved <= link.capacity * (b - a), (name, a, b)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 10 ** 9), capacities)
def test_a_lone_flow_takes_exactly_ceil_of_bytes_over_capacity(nbytes, capacity):
    c = Fraction(repr(capacity)) if isinstance(capacity, float) else Fraction(capacity)
    expected = -(-nbytes * c.denominator // c.numerator)  # ceil(n / c) in integers
    _, (f,) = run({"l": capacity, "wide": 10 ** 6}, [(3, {"l": nbytes, "wide": nbytes})])
    assert f.end_cycle - 3 == f.alone_cycles == expected


def test_remaining_work_is_rounded_up_to_the_grid_when_ratios_pile_up():
    # Flows whose two sides move bytes in many different ratios give rates with large denominators, and a
    # flow's exact remaining work piles them up rate change after rate change.  Past 2**64 it is rounded up
    # to a multiple of 2**-64 byte, so the integers stay small; the invariants still hold.
    rnd = random.Random(7)
    links = {"ddr": 24, **{f"am{c}": 64 for c in range(8)}}
    flows = []
    for i in range(60):
        n = 64 * rnd.randrange(1, 200)
        flows.append((rnd.randrange(0, 2000), {"ddr": n, f"am{i % 8}": n + 64 * rnd.randrange(1, 50)}))
    largest = []

    def observe(net):
        largest.append(max(f._remd for f in net.active))

    with mock.patch.object(fluid, "_GRID", 1 << 100000):
        run(links, flows, observe)
    assert max(largest) > 1 << 64  # exact, the denominators do grow past the grid
    largest.clear()
    _, fs = run(links, flows, lambda net: (observe(net), check_max_min(net)))
    assert max(largest) <= 1 << 64
    assert all(f.end_cycle >= f.start_cycle + f.alone_cycles for f in fs)


def test_a_kept_shape_starts_flows_as_start_does_and_a_foreign_one_is_refused():
    # Two equal flows on a 24 B/cycle link: 960 bytes each at 12 B/cycle end at 80 (by start or by shape).
    env = simpy.Environment()
    net = FlowNetwork(env)
    ddr = net.add_link("ddr", 24)
    shape = net.shape(((ddr, 960),))
    assert shape.size_bytes == 960 and shape.alone_cycles == 40 and shape.demands == ((ddr, 960),)
    a = net.start_shape(shape, lambda c: None)
    b = net.start({ddr: 960}, lambda c: None)
    env.run()
    assert a.end_cycle == b.end_cycle == 80 and a.alone_cycles == b.alone_cycles == 40
    other = FlowNetwork(env)
    other.add_link("ddr", 24)
    with pytest.raises(FlowError, match="not a flow shape of this network"):
        other.start_shape(shape, lambda c: None)
    with pytest.raises(FlowError, match="not a flow shape of this network"):
        net.start_shape({ddr: 1}, lambda c: None)  # type: ignore[arg-type]
    with pytest.raises(FlowError, match="on_done must be callable"):
        net.start_shape(shape, None)  # type: ignore[arg-type]
    assert not other.active and not net.active


# --- starts asked for a later cycle (FlowNetwork.start_shape_at: the engine's streams after their DMA setup) ----

def test_later_starts_cost_only_the_networks_wakes_and_start_in_the_order_asked():
    """One link of 1 B/cycle.  Flows a and b (5 bytes each) asked for cycle 10, c (5 bytes) for cycle 20.  At 10
    a and b share the link, 1/2 B/cycle each: 5 bytes take 10 cycles, both end at 20, where c starts alone and ends
    at 25.  The network's wake-ups are the only events: at 10 (two starts), 20 (two ends, one start), 25 (one end)."""
    env = Counting()
    net = FlowNetwork(env)
    link = net.add_link("l", 1)
    shape = net.shape({link: 5})
    log: list = []
    for name, cycle in (("a", 10), ("b", 10), ("c", 20)):
        net.start_shape_at(cycle, shape, lambda n=name: log.append(("start", n, env.now)),
                           lambda end, n=name: log.append(("end", n, end)))
    env.run()
    assert log == [("start", "a", 10), ("start", "b", 10), ("start", "c", 20), ("end", "a", 20), ("end", "b", 20),
                   ("end", "c", 25)]
    assert env.scheduled == 3 and not net.active


def test_a_later_start_matches_a_start_made_at_that_cycle():
    """The same three flows, started by timeouts at their cycles with start_shape, end at the same cycles."""
    env = simpy.Environment()
    net = FlowNetwork(env)
    link = net.add_link("l", 1)
    shape = net.shape({link: 5})
    ends: dict = {}
    for name, cycle in (("a", 10), ("b", 10), ("c", 20)):
        at(env, cycle, lambda n=name: net.start_shape(shape, lambda end, n=n: ends.__setitem__(n, end)))
    env.run()
    assert ends == {"a": 20, "b": 20, "c": 25}


def test_a_start_asked_for_the_past_is_refused_naming_the_cycle():
    env = simpy.Environment()
    net = FlowNetwork(env)
    shape = net.shape({net.add_link("l", 1): 5})
    at(env, 7, lambda: None)
    env.run()
    with pytest.raises(FlowError, match=r"start_shape_at: cycle must be .*no earlier than now \(7\), got 3"):
        net.start_shape_at(3, shape, lambda: None, lambda end: None)
    started: list = []
    net.start_shape_at(7, shape, lambda: started.append(env.now), lambda end: started.append(end))  # now: at once
    env.run()
    assert started == [7, 12]
