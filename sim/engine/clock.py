"""The one place that reaches into SimPy's private API.

The engine schedules whole cycles only and reads the clock on every event: ``Environment.now`` is a property
(a Python call per read), so the engine reads the attribute behind it through :data:`cycle_of` (a C-level getter),
and a run stopped before its end forgets its pending events through :func:`discard_pending`.  Both are SimPy
internals (``_now``, ``_queue``) of the 4.x series the project pins (``simpy>=4.0,<5``); a SimPy that renames
them breaks here, and only here.
"""

from __future__ import annotations

import operator
from collections.abc import Callable

import simpy

#: ``cycle_of(env)``: the current cycle of a SimPy environment (its private ``_now``: what ``env.now`` returns).
cycle_of: Callable[[simpy.Environment], int] = operator.attrgetter("_now")


def discard_pending(env: simpy.Environment) -> None:
    """Forget the events ``env`` has scheduled and not processed (a run stopped before its end).

    SimPy has no public way to empty its schedule; its queue is the list of the scheduled events (and each event
    holds the environment: a cycle, while any is pending)."""
    env._queue.clear()
