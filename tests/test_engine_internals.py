"""The SimPy internals the engine relies on for speed are what it expects."""

import simpy


def test_simpy_keeps_its_clock_in_underscore_now():
    env = simpy.Environment(initial_time=7)
    env.timeout(5)
    assert env._now == env.now == 7
    env.step()
    assert env._now == env.now == 12
