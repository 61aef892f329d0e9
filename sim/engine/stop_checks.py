"""The early stop's checks, and how far the steady state may skip under them.

A run given a cycle limit (:meth:`Engine.run <sim.engine.engine.Engine.run>`'s ``until_cycles``) stops as soon
as it cannot end by it: at each compute start it checks that the core's computes still to come end by the limit,
and that the bytes no transfer has started yet through each shared region can cross it by then.  A steady state
that skips periods must stop where the plain run would: at the first compute start, in a skipped period, whose
check fails.  Each passed check is logged (:class:`StopLog`); in a steady pipeline each check of a period is the
same check one period on, its core's compute left smaller by the period's computes and the bytes left smaller by
the period's bytes, both at a cycle one period later.  Both sides of each check move by a fixed amount per period,
so the first period where one fails follows from the logged ones by division (:func:`periods_within`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from fractions import Fraction


class StopLog:
    """The checks a run with a limit passed at its compute starts, in order: ``(cycle, core, its compute left,
    the bytes left per shared region in the order of ``names``)``."""

    __slots__ = ("entries", "names")

    def __init__(self, names: Sequence[str]) -> None:
        self.names = tuple(names)
        self.entries: list[tuple[int, int, int, tuple[int, ...]]] = []


def periods_within(log: StopLog, start: int, end: int, limit: int, period: int, compute_per_period: Mapping[int, int],
                   bytes_per_period: Mapping[str, int], bandwidths: Mapping[str, Fraction]) -> int | None:
    """The most periods of ``period`` cycles after the one whose checks are ``log.entries[start:end]`` in which
    every check still passes (None: no check fails however many), each period taking ``compute_per_period[core]``
    of a core's compute left and ``bytes_per_period[name]`` of a region's bytes left."""
    most: int | None = None
    for cycle, core, left, bytes_left in log.entries[start:end]:
        # now + left <= limit: now grows by the period, left shrinks by the core's computes in it.
        grow = period - compute_per_period.get(core, 0)
        if grow > 0:
            k = (limit - cycle - left) // grow
            most = k if most is None else min(most, k)
        # bytes left <= (limit - now) * bandwidth, for each shared region.
        for name, left_bytes in zip(log.names, bytes_left):
            bw = bandwidths[name]
            grow_b = period * bw - bytes_per_period.get(name, 0)
            if grow_b > 0:
                k = int(((limit - cycle) * bw - left_bytes) // grow_b)
                most = k if most is None else min(most, k)
    return most
