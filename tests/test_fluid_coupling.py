"""Coupled links of the fluid network (FlowNetwork.couple / set_bytes, sim/engine/fluid.py): what a flow asks of a
link follows which flows share it.  Random networks are compared with a slow reference written here in fractions
that recomputes every flow's demands at every event cycle; the coupling is a DRAM bus's turns
(sim/engine/turnaround.py): a writer pays ``alpha`` more per written byte while another flow reads the link.
"""

from __future__ import annotations

from fractions import Fraction
from unittest import mock

import pytest
import simpy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.engine import fluid
from sim.engine.fluid import FlowError, FlowNetwork
from sim.engine.turnaround import Turnaround
from tests.test_fluid import reference_ends

ALPHA = Fraction(165, 1024)


def run_coupled(links: dict, flows: list) -> list:
    """``flows``: [(start, {link: bytes}, written bytes on "bus")]; "bus" is coupled.  The flows' end cycles."""
    env = simpy.Environment()
    net = FlowNetwork(env)
    made = {name: net.add_link(name, cap) for name, cap in links.items()}
    net.couple(made["bus"], Turnaround(ALPHA))
    ends: list = [None] * len(flows)

    def starter(i, demands, written):
        def go(_event):
            shape = net.shape([(made[k], b) for k, b in demands.items()], 0,
                              {made["bus"]: written} if written else None)
            net.start_shape(shape, lambda cycle: ends.__setitem__(i, cycle))
        return go

    for i, (cycle, demands, written) in enumerate(flows):
        simpy.events.Timeout(env, cycle).callbacks.append(starter(i, demands, written))
    env.run()
    return ends


def reference(links: dict, flows: list) -> list:
    """The end cycles by the reference of tests/test_fluid.py, each flow's bytes on "bus" recomputed at every event
    cycle: its asked bytes, plus ALPHA times its written bytes while another flow on "bus" reads it (asks more
    than it writes); a flow that reads and writes "bus" itself is left as it asked."""
    def demands_at(i: int, left: dict, demand: list) -> dict:
        d = {k: Fraction(b) for k, b in demand[i].items()}
        written = flows[i][2]
        readers = [j for j in left if demand[j].get("bus", 0) > flows[j][2]]
        if written and written == demand[i]["bus"] and any(j != i for j in readers):
            d["bus"] += ALPHA * written
        return d

    return reference_ends(links, [(s, d) for s, d, _ in flows], demands_at)


@st.composite
def coupled_networks(draw):
    links = {"bus": draw(st.integers(8, 40)), "a": draw(st.integers(4, 64)), "b": draw(st.integers(4, 64))}
    flows = []
    for _ in range(draw(st.integers(1, 6))):
        role = draw(st.sampled_from(["read", "write", "copy"]))
        nbytes = draw(st.integers(1, 600))
        other = draw(st.sampled_from(["a", "b"]))
        if role == "read":
            flows.append((draw(st.integers(0, 30)), {"bus": nbytes, other: nbytes}, 0))
        elif role == "write":
            flows.append((draw(st.integers(0, 30)), {"bus": nbytes, other: nbytes}, nbytes))
        else:  # reads and writes the bus itself
            flows.append((draw(st.integers(0, 30)), {"bus": 2 * nbytes}, nbytes))
    return links, flows


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(coupled_networks())
def test_random_coupled_networks_match_the_reference(case):
    links, flows = case
    with mock.patch.object(fluid, "_GRID", 1 << 100000):  # exact all the way: comparable with the reference
        assert run_coupled(links, flows) == reference(links, flows)


def test_set_bytes_refuses_what_a_coupling_cannot_mean():
    env = simpy.Environment()
    net = FlowNetwork(env)
    bus = net.add_link("bus", 10)
    other = FlowNetwork(simpy.Environment()).add_link("x", 1)
    with pytest.raises(FlowError, match="couple: .* is not a link of this network"):
        net.couple(other, Turnaround(ALPHA))
    with pytest.raises(FlowError, match="couple: coupling must be callable"):
        net.couple(bus, 3)  # type: ignore[arg-type]
    flow = net.start({bus: 100}, lambda cycle: None)
    with pytest.raises(FlowError, match="set_bytes: bytes through 'bus' must be positive"):
        net.set_bytes(flow, bus, Fraction(0))
