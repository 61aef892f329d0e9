"""The queues of the engine: identical units held one transfer at a time, groups, counters and gates.

Driven by SimPy timeouts and callbacks, not processes: a free unit is taken without an event, and a queue
whose holders have all said when they let go hands its first waiter a unit and the cycle of its turn at once.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable

import simpy
from simpy.events import Timeout

from sim.engine.clock import cycle_of


class Units:
    """Identical units (the DMA engines of a core), each held by one transfer at a time.

    A holder says when it will let go (:meth:`release_at`) as soon as it knows
    (when its stream ends: it lands one access latency later), so no event is spent at the end of every hold: a
    unit whose release cycle has passed is simply free, and a free unit is taken
    without an event.  Requests that find none free wait first come, first
    served.  While every held unit's release cycle is known, the first waiter's
    turn is known too (the earliest release; later requests queue behind it),
    so it is granted at once with that cycle and no event is spent on the
    hand-over; while some holder has not said yet, one timeout at the earliest
    known release hands units over (a later-said release may be earlier).

    ``ordered`` units serve their waiters by priority (:meth:`acquire`'s ``priority``, highest first; first come,
    first served among equals).  A request of a higher priority may still come before a unit's release, so a unit
    is handed over at its release cycle (a timeout), never granted ahead.
    """

    __slots__ = ("env", "units", "free", "busy", "waiters", "ranks", "ordered", "wakes", "next_wake", "serving")

    def __init__(self, env: simpy.Environment, units: int, ordered: bool = False):
        self.env = env
        self.units = units
        self.ordered = ordered
        self.free: deque[int] = deque(range(units))
        self.busy: list[tuple[int, int]] = []  # heap of (cycle it comes free, unit) of the held units
        self.waiters: deque[Callable[[int, int], None]] = deque()  # in the order they are served
        self.ranks: deque[int] = deque()  # ordered units: each waiter's priority, beside it
        self.wakes: list[int] = []  # cycles of the wake-ups already scheduled (one timeout each, never twice)
        self.next_wake: int | None = None  # the earliest of them
        self.serving = False  # a hand-over loop is running (a grant's callback may release a unit again)

    def _collect(self, now: int) -> None:
        busy, free = self.busy, self.free
        while busy and busy[0][0] <= now:
            free.append(heapq.heappop(busy)[1])

    def acquire(self, granted: Callable[[int, int], None], priority: int = 0) -> int | None:
        """A unit taken now; else None, and ``granted(unit, cycle)`` runs when its turn is known (the cycle it
        gets the unit, now or later; perhaps before this returns).  ``priority`` orders the waiters of ordered
        units."""
        busy = self.busy
        if busy:
            now = cycle_of(self.env)
            if busy[0][0] <= now:
                self._collect(now)
        if self.free and not self.waiters:
            return self.free.popleft()
        if self.ordered:
            ranks = self.ranks
            at = len(ranks)
            while at and ranks[at - 1] < priority:  # behind every waiter of its priority or higher
                at -= 1
            ranks.insert(at, priority)
            self.waiters.insert(at, granted)
        else:
            self.waiters.append(granted)
        if not self.serving:
            self._serve()
        return None

    def release_at(self, cycle: int, unit: int) -> None:
        """``unit`` is free from ``cycle`` on (now or later)."""
        heapq.heappush(self.busy, (cycle, unit))
        if self.waiters and not self.serving:
            self._serve()

    def _serve(self) -> None:
        """Hand units to waiters, first come first served: free ones now; while every held unit's release is
        known, the earliest at its release cycle; else wake at the earliest known release."""
        # An exception from a waiter's callback ends the whole run, so the flag needs no try/finally.
        self.serving = True
        busy, free, waiters, units = self.busy, self.free, self.waiters, self.units
        now = cycle_of(self.env)
        if busy and busy[0][0] <= now:
            self._collect(now)
        ranks = self.ranks if self.ordered else None
        while waiters:
            if free:
                if ranks is not None:
                    ranks.popleft()
                waiters.popleft()(free.popleft(), now)
            elif len(busy) == units and ranks is None:
                cycle, unit = heapq.heappop(busy)
                waiters.popleft()(unit, cycle if cycle > now else now)
            else:
                self._wake_later()
                break
        self.serving = False

    def _wake_later(self) -> None:
        if not self.busy:
            return  # every unit is held with no end known yet: the holder's release_at wakes the queue
        at = self.busy[0][0]
        if self.next_wake is not None and self.next_wake <= at:
            return  # a wake-up at or before ``at`` is coming and will look again
        self.wakes.append(at)
        self.next_wake = at
        Timeout(self.env, at - cycle_of(self.env)).callbacks.append(self._wake)

    def _wake(self, _: simpy.Event) -> None:
        wakes = self.wakes
        wakes.remove(cycle_of(self.env))
        self.next_wake = min(wakes) if wakes else None
        if self.waiters:
            self._serve()


class Group:
    """The transfers a tile starts together; ``done()`` runs when the last of them has landed.

    Each member reports its landing cycle as soon as its stream starts (it is
    known then), so the group needs one timeout, not one per member, and none when ``known(cycle)`` (if given)
    says, once the last landing cycle is known, that nothing can look at the group before that cycle and that it
    has taken the landing as done (a walk that will not reach the tile before it lands).
    """

    __slots__ = ("env", "left", "latest", "done", "known")

    def __init__(self, env: simpy.Environment, members: int, done: Callable[[], None],
                 known: Callable[[int], bool] | None = None):
        self.env = env
        self.left = members
        self.latest = 0
        self.done = done
        self.known = known

    def lands_at(self, cycle: int) -> None:
        """One member will have landed at ``cycle``."""
        self.left -= 1
        if cycle > self.latest:
            self.latest = cycle
        if not self.left:
            if self.known is not None and self.known(self.latest):
                return
            Timeout(self.env, self.latest - cycle_of(self.env)).callbacks.append(self._landed)

    def _landed(self, _: simpy.Event) -> None:
        self.done()


class Gate:
    """Opens once; callbacks registered before run when it opens, those registered after run at once."""

    __slots__ = ("is_open", "waiting", "tag")

    def __init__(self, tag: tuple = ()) -> None:
        self.is_open = False
        self.waiting: list[Callable[[], None]] = []
        self.tag = tag  # what it stands for (a tile's stores, a buffer generation's fill): the steady state reads it

    def then(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` when the gate is open."""
        if self.is_open:
            callback()
        else:
            self.waiting.append(callback)

    def open(self) -> None:
        """Open the gate and run what waited for it."""
        self.is_open = True
        waiting, self.waiting = self.waiting, []
        for callback in waiting:
            callback()
