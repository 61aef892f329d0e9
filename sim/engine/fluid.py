"""Shared bandwidth as a fluid: streams divide the links they cross max-min fairly, in SimPy time.

A *link* is anything with a bandwidth in bytes per cycle that concurrent streams share: a shared memory
region, one core's private region, one DMA engine; or with a rate of other units, counted as a flow's "bytes"
through it (a DRAM's row activations per cycle, its tFAW: a flow asks it for the rows it opens).  A *flow* is
one transfer's stream: it crosses a few links and moves a given number of bytes through each (the two ends of
a copy may move different byte counts because each rounds its runs up to its own bursts; an engine link sees
the larger).  A flow's progress rate r
is the fraction of the transfer done per cycle; on link l it takes ``r * bytes_l`` of the capacity.

Rates are max-min fair, weighted so that fairness is in bytes per cycle of each flow's size (``size_bytes``,
the most bytes it moves through any one link that *weighs*, :attr:`Link.weighs`: a link one flow holds alone,
a DMA engine, or one whose units are not bytes, a DRAM's activations, caps the flow but does not weigh its share
elsewhere; so two flows moving the same bytes through a shared region split it equally, however many beats
either one's engine pads its runs to): progressive filling raises the *level* lambda of every
unfrozen flow together (each flow at r = lambda / size_bytes), and whenever a link saturates its flows freeze
at that level; repeat until every flow is frozen.  A flow alone gets the most all its links allow; two equal
flows on one link get half each; a flow capped elsewhere (by its engine, by a private region) leaves the
rest of a shared link to the others.  Rates are recomputed whenever a flow starts or ends, for the flows
connected to it through shared links (the others' rates cannot change).

Exactness and time.  Rates are exact rationals on Python integers (numerator and denominator pairs; no
floats), so the same inputs give the same cycles bit for bit.  Time is integer cycles: rates change only at
integer cycles (a flow's start, a flow's completion), each flow's remaining bytes are kept exactly, and a
flow whose bytes are all moved at the exact (rational) time t completes at ``ceil(t)``.  Until that cycle it
keeps its share of its links; the sub-cycle remainder of that share is idle, never lent to another flow (a
flow starting at that cycle, though, finds it free).  Hence:

- no flow finishes before its bytes could have moved: at every moment the flows' demands on a link add up to
  at most its capacity, so the bytes of the flows that started at or after cycle a and finished by cycle b
  never exceed ``capacity * (b - a)`` on any link;
- a lone flow of n bytes on a link of capacity c takes exactly ``ceil(n / c)`` cycles (in general a lone
  flow takes ``ceil(max over its links of bytes_l / capacity_l)`` cycles: :attr:`Flow.alone_cycles`), and a
  flow never ends before its alone time (:attr:`Flow.wait_cycles` >= 0).

One exception keeps the integers small: flows moving bytes in many different ratios through their links
give rates with large denominators, and a flow's exact remaining work would pile them up change after
change.  When its denominator passes 2**64, the remaining work is rounded up to a multiple of 2**-64 byte:
the flow ends at most that much later than exact, never earlier, and the guarantees above still hold.

Couplings.  What a flow asks of a link is fixed when it starts, except on a *coupled* link (:meth:`FlowNetwork.couple`):
there, whenever a flow starts on the link or leaves it, the coupling is called before that cycle's rates are worked
out and may change a flow's bytes through the link for the rest of its stream (:meth:`FlowNetwork.set_bytes`; a
DRAM whose bus turns between reads and writes charges its writers more while readers share it,
:mod:`sim.engine.turnaround`).  Between two such changes everything above holds as stated.

SimPy.  The network holds one pending timeout, at the next completion cycle; when a recomputation moves
that cycle, a new timeout is scheduled and the old one is left to fire as a no-op (its version is stale).
Each start and each end costs at most one timeout, so events per flow are O(1).  The work per start or end
is proportional to the flows in its connected group and the links they cross (progressive filling runs a
round per distinct saturation level, usually one or two).  Links that carry a single flow cost nothing in
the filling: each flow's own cap (the most its links allow it alone) stands for them.
"""

from __future__ import annotations

import heapq
import math
import operator
import weakref
from collections.abc import Callable, Iterable, Mapping
from fractions import Fraction
from math import gcd

import simpy
from simpy.events import Timeout

from sim.engine.clock import cycle_of
from sim.errors import SimError, brief

#: A capacity as given: bytes per cycle, a positive int, Fraction or finite float (taken as the decimal it
#: prints as, the number a target file wrote: 12.8 is 64/5, not the binary double nearest to it).
Capacity = int | Fraction | float


#: The finest fraction of a byte kept in a flow's remaining work: while its exact value has a denominator up
#: to this, it is kept exactly; beyond, it is rounded up to a multiple of 1 / _GRID byte (less than 2**-64 byte
#: more per rate change: the flow may end a negligible fraction of a cycle later, never earlier).
_GRID = 1 << 64

#: A flow's finish cycle (read for every active flow at every reschedule).
_FINISH = operator.attrgetter("_finish")
#: The finish cycle of a flow that has no rate yet: later than any cycle.
_UNRATED = 1 << 200


class FlowError(SimError):
    """A link or flow of a :class:`FlowNetwork` is described wrongly; the message names the argument."""


def _ratio(value: object, what: str) -> tuple[int, int]:
    """``value`` as a reduced positive (numerator, denominator) pair; FlowError naming ``what`` if not."""
    if isinstance(value, bool) or not isinstance(value, (int, Fraction, float)):
        raise FlowError(f"{what} must be a positive number of bytes per cycle (int, Fraction or float), "
                        f"got {brief(value)}")
    if isinstance(value, float):
        if not math.isfinite(value):
            raise FlowError(f"{what} must be a finite number of bytes per cycle, got {brief(value)}")
        value = Fraction(repr(value))
    if value <= 0:
        raise FlowError(f"{what} must be positive (bytes per cycle), got {brief(value)}")
    if isinstance(value, int):
        return value, 1
    return value.numerator, value.denominator


def exact_capacity(value: Capacity, what: str = "capacity") -> Fraction:
    """``value`` as the exact Fraction a link of that capacity has (FlowError naming ``what`` if it is none)."""
    return Fraction(*_ratio(value, what))


def _add(n: int, d: int, an: int, ad: int) -> tuple[int, int]:
    """n/d + an/ad, reduced (d, ad > 0)."""
    if d == 1 and ad == 1:
        return n + an, 1
    if d == ad:
        n += an
    else:
        g = gcd(d, ad)
        n, d = n * (ad // g) + an * (d // g), d // g * ad
    g = gcd(n, d)
    return n // g, d // g


def _sub(n: int, d: int, an: int, ad: int) -> tuple[int, int]:
    """n/d - an/ad, reduced (d, ad > 0)."""
    return _add(n, d, -an, ad)


class Link:
    """A resource with a bandwidth that the flows crossing it share (a region, a core's region, an engine).

    Made by :meth:`FlowNetwork.add_link`.  ``capacity`` is exact (bytes per cycle, a Fraction).
    """

    __slots__ = ("_cd", "_cn", "_coupling", "_free", "_members", "_net", "_stamp", "_sumd", "_sumn", "_ud", "_un",
                 "_wd", "_wn", "capacity", "name", "weighs")

    def __init__(self, net: FlowNetwork, name: str, cn: int, cd: int, weighs: bool = True):
        self.name = name
        self.capacity = Fraction(cn, cd)
        #: Whether a flow's bytes through the link count toward its fairness weight (its ``size_bytes``): False for
        #: a link only one flow can hold at a time (a DMA engine) or whose units are not bytes (row activations).
        self.weighs = weighs
        # A weak reference: the network holds its links, and a link that held its network would make each network
        # a reference cycle, freed only by the cyclic collector's passes.
        self._net = weakref.ref(net)
        self._cn, self._cd = cn, cd
        # The active flows on the link, each with its usage coefficient bytes_l / size_bytes (reduced pair).
        self._members: list[tuple[Flow, int, int]] = []
        self._sumn, self._sumd = 0, 1  # the sum of the members' coefficients, kept as they come and go
        self._stamp = 0
        # Scratch of one progressive filling: usage of the frozen flows (_un/_ud), sum of the unfrozen flows'
        # coefficients (_wn/_wd), how many are unfrozen.
        self._un = self._ud = self._wn = self._wd = self._free = 0
        # What the link's flows ask of it may depend on which flows share it (FlowNetwork.couple): None if not.
        self._coupling: Coupling | None = None

    @property
    def flows(self) -> tuple[Flow, ...]:
        """The flows streaming through the link now, in start order."""
        return tuple(m[0] for m in self._members)

    def __repr__(self) -> str:
        return f"Link({self.name!r}, {self.capacity} B/cycle)"


class FlowShape:
    """What a flow asks of the network, checked and worked out once (:meth:`FlowNetwork.shape`): the links it
    crosses with their bytes, each link's usage coefficient, its cap and its alone cycles.

    A caller that starts many flows with the same demands (the engine: the same transfer route, bytes and engine
    tile after tile) keeps the shape and starts each with :meth:`FlowNetwork.start_shape`, skipping the checks and
    the arithmetic that :meth:`FlowNetwork.start` does per flow.
    """

    __slots__ = ("_capd", "_capn", "_coefs", "_least", "_links", "_net", "alone_cycles", "demands", "priority",
                 "size_bytes", "written")

    def __init__(self, net: FlowNetwork, links: list[Link], nbytes: list[int], least_cycles: int = 0,
                 written: Mapping[Link, int] | None = None, priority: int = 0):
        self._net = weakref.ref(net)  # (weak, as a link's)
        #: The flow's class: flows of a higher priority take what they can of the links first (strict priority).
        self.priority = priority
        self.demands = tuple(zip(links, nbytes))
        self._links = tuple(links)
        #: Of the bytes through each link, those the flow writes (the rest it reads), where the caller said so: what
        #: a link's coupling reads (a DRAM's data bus turns around between reads and writes).
        self.written: Mapping[Link, int] = written or {}
        # The flow's weight: its most bytes through a link that weighs (through any link if none does).
        size = self.size_bytes = max((b for lk, b in zip(links, nbytes) if lk.weighs), default=0) \
            or max(nbytes, default=0)
        # Each link's usage per unit of level is bytes / size (a reduced pair; 1 on the flow's weighing link with the
        # most bytes, more than 1 on an engine moving more).
        coefs = []
        for b in nbytes:
            if b == size:
                coefs.append((1, 1))
            else:
                g = gcd(b, size)
                coefs.append((b // g, size // g))
        self._coefs = tuple(coefs)
        self._least = least_cycles
        self._capn, self._capd = _cap(self._links, self._coefs, size, least_cycles)
        capn, capd = self._capn, self._capd
        self.alone_cycles = -((-size * capd) // capn) if size else 0  # ceil(size / cap)


def _cap(links: tuple[Link, ...], coefs: tuple[tuple[int, int], ...], size: int, least_cycles: int) -> tuple[int, int]:
    """The most level a flow's links allow it alone: the smallest capacity * size / bytes over its links (capacity /
    coefficient), or its own pace, ``size`` per ``least_cycles``, if slower; a reduced pair (0, 0) for no links."""
    capn = capd = 0
    for link, (an, ad) in zip(links, coefs):
        n, d = link._cn * ad, link._cd * an  # capacity / coefficient
        if not capd or n * capd < capn * d:
            capn, capd = n, d
    if least_cycles and size and (not capd or size * capd < capn * least_cycles):
        # The flow's own pace (a DRAM bank's repeats): no faster than size_bytes per least_cycles, whatever its
        # links leave it, a cap as a link carrying it alone would be.
        capn, capd = size, least_cycles
    if capd:
        g = gcd(capn, capd)
        capn, capd = capn // g, capd // g
    return capn, capd


#: What a coupled link's flows ask of it, worked out again whenever its flows change (FlowNetwork.couple): called
#: with the network and the link, it may change a flow's bytes through the link (FlowNetwork.set_bytes).
Coupling = Callable[["FlowNetwork", Link], None]


class Flow:
    """One transfer's stream through its links: a handle :meth:`FlowNetwork.start` returns.

    ``demands`` pairs each link with the bytes the flow moves through it; ``size_bytes`` is the largest of
    them.  ``start_cycle`` is when the stream began, ``end_cycle`` when it finished (None until then; the
    ``on_done`` callback is called with it).  ``alone_cycles`` is what the stream would take with its links
    to itself; :attr:`stream_cycles` and :attr:`wait_cycles` (the cost of sharing) are known at the end.
    """

    __slots__ = ("_capd", "_capn", "_coefs", "_finish", "_frozen", "_least", "_links", "_newd", "_newn", "_rd",
                 "_remd", "_remn", "_rn", "_since", "_stamp", "alone_cycles", "demands", "end_cycle", "on_done",
                 "priority", "size_bytes", "start_cycle", "written")

    def __init__(self, start_cycle: int, on_done: Callable[[int], None], shape: FlowShape):
        self.start_cycle = start_cycle
        self.end_cycle: int | None = None
        self.on_done = on_done
        # The shape's worked-out parts, copied to the flow's own slots (the filling reads them in its loops).
        self.demands = shape.demands
        self._links = shape._links
        self._coefs = shape._coefs
        self._capn, self._capd = shape._capn, shape._capd
        self._least = shape._least
        self.written = shape.written
        self.alone_cycles = shape.alone_cycles
        self.priority = shape.priority
        size = self.size_bytes = shape.size_bytes
        self._remn, self._remd = size, 1  # remaining bytes of size_bytes, exact, as of cycle _since
        self._since = start_cycle
        self._rn = self._rd = 0  # the level (bytes of size_bytes per cycle); none yet
        # The cycle it ends at its current level: a flow of no bytes ends at its start; one with links has no level
        # until the rates of its cycle are worked out (none of that cycle's events may take it for ended).
        self._finish = _UNRATED if self._links else start_cycle
        # Scratch of one recomputation: the search's mark, frozen or not, the new level.
        self._stamp = 0
        self._frozen = False
        self._newn = self._newd = 0

    @property
    def stream_cycles(self) -> int | None:
        """Cycles from the stream's start to its end (None while it streams)."""
        return None if self.end_cycle is None else self.end_cycle - self.start_cycle

    @property
    def wait_cycles(self) -> int | None:
        """Cycles the stream lost to sharing: its stream cycles minus its alone cycles (None while it streams)."""
        return None if self.end_cycle is None else self.end_cycle - self.start_cycle - self.alone_cycles

    @property
    def rate(self) -> Fraction:
        """The current level: bytes per cycle of ``size_bytes`` (the rate at which it ended, once done)."""
        return Fraction(self._rn, self._rd) if self._rd else Fraction(0)

    @property
    def cap(self) -> Fraction:
        """The most level its links allow it alone: min over its links of capacity * size_bytes / bytes."""
        return Fraction(self._capn, self._capd) if self._capd else Fraction(0)

    def usage(self, link: Link) -> Fraction:
        """Bytes per cycle the flow takes of ``link`` now: rate * bytes through the link / size_bytes (0 for a flow
        whose rate its cycle has not worked out yet)."""
        if not self._rd:
            return Fraction(0)
        for lk, (an, ad) in zip(self._links, self._coefs):
            if lk is link:
                return Fraction(self._rn * an, self._rd * ad)
        return Fraction(0)

    def bytes_through(self, link: Link) -> Fraction:
        """Bytes the flow moves through ``link`` now, over its whole stream: what it asked for, or what the link's
        coupling made of that (0 for a link it does not cross)."""
        for lk, (an, ad) in zip(self._links, self._coefs):
            if lk is link:
                return Fraction(an * self.size_bytes, ad)
        return Fraction(0)

    def __repr__(self) -> str:
        links = ", ".join(f"{lk.name}:{b}" for lk, b in self.demands)
        return f"Flow([{links}], start {self.start_cycle}, end {self.end_cycle})"


#: Links with bytes as :meth:`FlowNetwork.start` takes them: a mapping or pairs, links by handle or name.
Demands = Mapping[Link | str, int] | Iterable[tuple[Link | str, int]]


class FlowNetwork:
    """Links with bandwidths and the flows streaming through them, max-min fair, in a SimPy environment.

    ``observer``, if given, is called with the network after every recomputation of rates (for tests).
    """

    def __init__(self, env: simpy.Environment, observer: Callable[[FlowNetwork], None] | None = None):
        self.env = env
        self.observer = observer
        self._links: dict[str, Link] = {}
        self._active: list[Flow] = []  # in start order: completions of one cycle are reported in that order
        self._version = 0  # of the one valid pending timeout
        self._wake_at: int | None = None  # its cycle
        self._stamp = 0  # marks of one connected-group search
        self._flows_scratch: list[Flow] = []
        self._links_scratch: list[Link] = []
        self._stack: list[Link] = []
        self._batch: list[Flow] = []  # flows frozen in one round of the filling
        self._capped: list[Flow] = []  # flows whose own cap is the round's level
        self._tight: list[Link] = []  # shared links saturating at the round's level
        self._shared: list[Link] = []  # the links more than one flow crosses now
        # Flows that ended at this cycle, their on_done still to call (from this cycle's wake).  A flow
        # starting at the cycle another ends takes it off its links first, so its bandwidth is free at once.
        self._done: list[Flow] = []
        # The links whose flows changed at this cycle (flows started or ended) and whether the recomputation of
        # their rates is scheduled: once per cycle, after that cycle's starts and ends (the rates of the flows
        # of one cycle do not depend on the order they came in: each recomputation starts from scratch).
        self._dirty: list[Link] = []
        self._settling = False
        self._prioritised = 0  # active flows of a priority other than 0 (none: every filling is one class)
        # Flows to start at a later cycle (start_shape_at): (cycle, sequence, shape, on_start, on_done), earliest
        # first, in the order they were asked for within a cycle.  They start at the network's own wake, so a
        # stream's start costs no SimPy event of its own.
        self._pending: list[tuple[int, int, FlowShape, Callable[[], None], Callable[[int], None]]] = []
        self._pending_seq = 0
        self._waking = False  # while a wake reports its completions
        #: How many times rates were recomputed (a start, or the completions of one cycle, with flows to rate).
        self.recomputations = 0

    # -- building ----------------------------------------------------------------------------------------

    def add_link(self, name: str, capacity: Capacity, *, weighs: bool = True) -> Link:
        """A new link ``name`` of ``capacity`` bytes per cycle; ``weighs`` False for a link whose bytes do not weigh
        its flows' fair shares (:attr:`Link.weighs`)."""
        if not isinstance(name, str) or not name:
            raise FlowError(f"add_link: name must be a non-empty string, got {brief(name)}")
        if name in self._links:
            raise FlowError(f"add_link: a link named {brief(name)} exists already")
        cn, cd = _ratio(capacity, f"add_link({name!r}): capacity")
        if type(weighs) is not bool:
            raise FlowError(f"add_link({name!r}): weighs must be a bool, got {brief(weighs)}")
        link = self._links[name] = Link(self, name, cn, cd, weighs)
        return link

    @property
    def links(self) -> Mapping[str, Link]:
        """The links by name."""
        return self._links

    @property
    def active(self) -> tuple[Flow, ...]:
        """The flows streaming now, in start order (a flow ending at this cycle may still be among them)."""
        return tuple(self._active)

    def couple(self, link: Link, coupling: Coupling) -> None:
        """Make what ``link``'s flows ask of it depend on which flows share it: whenever a flow starts on the link
        or leaves it, before the rates of that cycle are worked out, ``coupling(network, link)`` is called and may
        change a flow's bytes through the link for the rest of its stream (:meth:`set_bytes`)."""
        if type(link) is not Link or link._net() is not self:
            raise FlowError(f"couple: {brief(link)} is not a link of this network")
        if not callable(coupling):
            raise FlowError(f"couple: coupling must be callable, got {brief(coupling)}")
        link._coupling = coupling

    def set_bytes(self, flow: Flow, link: Link, nbytes: Fraction) -> None:
        """From now, ``flow`` moves ``nbytes`` through ``link`` over its whole stream (each unit of its progress takes
        ``nbytes / size_bytes`` of the link, as its shape's bytes did): for a link's coupling.  Its bytes through
        its other links, and so its progress, stay as they are; its cap follows."""
        i = flow._links.index(link)
        value = Fraction(nbytes) / flow.size_bytes
        if value <= 0:
            raise FlowError(f"set_bytes: bytes through {link.name!r} must be positive, got {brief(nbytes)}")
        self.set_coefficient(flow, i, value.numerator, value.denominator)

    def set_coefficient(self, flow: Flow, pos: int, an: int, ad: int) -> None:
        """:meth:`set_bytes` of the link at place ``pos`` of ``flow``'s demands, given as the reduced pair ``an / ad``
        of bytes through it per byte of the flow's ``size_bytes`` (positive): a coupling that works the pairs out
        once calls this on every change of the link's flows."""
        on, od = flow._coefs[pos]
        if an == on and ad == od:
            return
        coefs = list(flow._coefs)
        coefs[pos] = (an, ad)
        flow._coefs = tuple(coefs)
        link = flow._links[pos]
        members = link._members
        for j, m in enumerate(members):
            if m[0] is flow:
                members[j] = (flow, an, ad)
                break
        link._sumn, link._sumd = _add(*_sub(link._sumn, link._sumd, on, od), an, ad)
        flow._capn, flow._capd = _cap(flow._links, flow._coefs, flow.size_bytes, flow._least)

    # -- flows -------------------------------------------------------------------------------------------

    def start(self, links_with_bytes: Demands, on_done: Callable[[int], None]) -> Flow:
        """Start a flow now through ``links_with_bytes`` (link or link name -> bytes it moves through it).

        A link named twice carries the sum (a copy within one region reads and writes it).  Links with 0
        bytes are not crossed; a flow of no bytes at all ends at this cycle.  ``on_done(cycle)`` is called at
        the first integer cycle at or after the flow's last byte has moved.
        """
        return self.start_shape(self.shape(links_with_bytes), on_done)

    def shape(self, links_with_bytes: Demands, least_cycles: int = 0,
              written: Mapping[Link, int] | None = None, priority: int = 0) -> FlowShape:
        """The demands of a flow as :meth:`start` takes them, checked and worked out, for :meth:`start_shape`;
        ``least_cycles``, the flow's own pace: it streams for no fewer cycles, alone or not (0: its links decide);
        ``written``, of the bytes through a link, those the flow writes (for the link's coupling, :meth:`couple`);
        ``priority``, the flow's class (a non-negative int): the flows of the highest class present share the links
        max-min fairly as if the others were absent, the next class shares what they leave, and so on."""
        if type(least_cycles) is not int or least_cycles < 0:
            raise FlowError(f"shape: least_cycles must be a non-negative int, got {brief(least_cycles)}")
        if type(priority) is not int or priority < 0:
            raise FlowError(f"shape: priority must be a non-negative int, got {brief(priority)}")
        pairs = links_with_bytes
        if type(pairs) is not tuple and isinstance(pairs, Mapping):  # (a tuple, the engine's form, is no mapping)
            pairs = pairs.items()
        links: list[Link] = []
        nbytes: list[int] = []
        for pair in pairs:
            try:
                lk, b = pair
            except (TypeError, ValueError):
                raise FlowError(f"start: links_with_bytes must hold (link, bytes) pairs, got {brief(pair)}") \
                    from None
            if type(lk) is not Link or lk._net() is not self or type(b) is not int or b <= 0:
                lk, b = self._demand(lk, b)
                if not b:
                    continue
            if lk in links:
                nbytes[links.index(lk)] += b
            else:
                links.append(lk)
                nbytes.append(b)
        return FlowShape(self, links, nbytes, least_cycles, written, priority)

    def abandon(self) -> None:
        """Forget the flows streaming now (their run was stopped: nothing will complete them)."""
        for f in self._active:
            for link in f._links:
                link._members.clear()
                link._sumn, link._sumd = 0, 1
        for scratch in (self._active, self._shared, self._done, self._flows_scratch, self._links_scratch,
                        self._stack, self._batch, self._capped, self._tight, self._dirty, self._pending):
            scratch.clear()
        self._settling = False
        self._prioritised = 0

    def start_shape(self, shape: FlowShape, on_done: Callable[[int], None]) -> Flow:
        """Start a flow now with the demands of ``shape`` (made by this network's :meth:`shape`); as :meth:`start`."""
        self._check_start(shape, on_done)
        now = self.env.now
        if not isinstance(now, int):
            raise FlowError(f"start: the SimPy clock must be in integer cycles, it is {brief(now)}")
        retired = self._retire(now)
        f, joined = self._join(shape, on_done, now)
        retired.extend(joined)
        if retired:
            self._changed(retired)
        else:
            self._reschedule(now)  # (a flow of no bytes: it ends now)
        return f

    def start_shape_at(self, cycle: int, shape: FlowShape, on_start: Callable[[], None],
                       on_done: Callable[[int], None]) -> None:
        """Start a flow of ``shape`` at ``cycle`` (now or later): at that cycle ``on_start()`` is called, then the
        flow joins its links exactly as :meth:`start_shape` would have started it then (flows asked for the same
        cycle start in the order they were asked for).  A later start is the network's to make, at its own wake:
        no SimPy event of its own."""
        self._check_start(shape, on_done)
        now = cycle_of(self.env)
        if type(cycle) is not int or cycle < now:
            raise FlowError(f"start_shape_at: cycle must be an int cycle no earlier than now ({now}), "
                            f"got {brief(cycle)}")
        if cycle == now:
            on_start()
            self.start_shape(shape, on_done)
            return
        heapq.heappush(self._pending, (cycle, self._pending_seq, shape, on_start, on_done))
        self._pending_seq += 1
        if self._done or self._settling or self._waking:
            return  # this cycle's wake or rates are still to come, or the wake is reporting: they reschedule
        if self._wake_at is None or cycle < self._wake_at:
            self._wake_once_at(cycle, now)

    def _check_start(self, shape: FlowShape, on_done: Callable[[int], None]) -> None:
        if type(shape) is not FlowShape or shape._net() is not self:
            raise FlowError(f"start_shape: {brief(shape)} is not a flow shape of this network")
        if not callable(on_done):
            raise FlowError(f"start: on_done must be callable, got {brief(on_done)}")

    def _join(self, shape: FlowShape, on_done: Callable[[int], None], now: int) -> tuple[Flow, tuple[Link, ...]]:
        """A new flow of ``shape`` on its links from ``now`` (its rate still to work out); and those links."""
        f = Flow(now, on_done, shape)
        self._active.append(f)
        if f.priority:
            self._prioritised += 1
        shared = self._shared
        for link, (an, ad) in zip(shape._links, shape._coefs):
            members = link._members
            members.append((f, an, ad))
            if len(members) == 2:
                shared.append(link)
            link._sumn, link._sumd = _add(link._sumn, link._sumd, an, ad)
        return f, shape._links

    def _changed(self, links: list[Link]) -> None:
        """Flows started or ended on ``links`` at this cycle: their rates are worked out once the cycle's other
        starts and ends are in (one zero-delay timeout, scheduled after every event of this cycle so far)."""
        self._dirty.extend(links)
        if not self._settling:
            self._settling = True
            Timeout(self.env, 0).callbacks.append(self._rate)

    def _rate(self, _: simpy.Event) -> None:
        """The rates of this cycle's changed flows and their neighbours; the next completion's timeout."""
        self._settling = False
        now = cycle_of(self.env)
        seeds, self._dirty = self._dirty, []
        self._recompute(seeds, now)
        self._reschedule(now)

    def _demand(self, lk: object, b: object) -> tuple[Link, int]:
        """One (link, bytes) pair of :meth:`start` checked: a name looked up, bytes an int >= 0."""
        if isinstance(lk, str):
            link = self._links.get(lk)
            if link is None:
                raise FlowError(f"start: no link named {brief(lk)} (add it with add_link first)")
        elif isinstance(lk, Link) and lk._net() is self:
            link = lk
        else:
            raise FlowError(f"start: {brief(lk)} is not a link of this network")
        if isinstance(b, bool):
            raise FlowError(f"start: bytes through {link.name!r} must be an int >= 0, got {brief(b)}")
        try:
            n = operator.index(b)  # type: ignore[arg-type]
        except TypeError:
            raise FlowError(f"start: bytes through {link.name!r} must be an int >= 0, got {brief(b)}") from None
        if n < 0:
            raise FlowError(f"start: bytes through {link.name!r} must be >= 0, got {n}")
        return link, n

    # -- rates -------------------------------------------------------------------------------------------

    def _recompute(self, seeds: Iterable[Link], now: int) -> None:
        """Max-min fair rates for the flows connected to ``seeds`` through links; their finish cycles."""
        active = self._active
        if not active:
            return
        coupled = None
        for link in seeds:
            if link._coupling is not None and link._members:
                if coupled is None:
                    coupled = []
                if link not in coupled:
                    coupled.append(link)
                    link._coupling(self, link)
        for link in seeds:
            if len(link._members) == len(active):
                # A link every active flow crosses (DDR in a shared call): the group is everything.
                self._fill(active, self._shared, now)
                return
        self._stamp += 1
        stamp = self._stamp
        flows, multi, stack = self._flows_scratch, self._links_scratch, self._stack
        flows.clear()
        multi.clear()
        for link in seeds:
            if link._stamp != stamp:
                link._stamp = stamp
                stack.append(link)
                if len(link._members) > 1:
                    multi.append(link)
        while stack:  # the connected group: flows reachable through links they share
            members = stack.pop()._members
            for m in members:
                f = m[0]
                if f._stamp != stamp:
                    f._stamp = stamp
                    flows.append(f)
                    for link in f._links:
                        # a link of one flow leads nowhere and is stood for by the flow's cap
                        if link._stamp != stamp and len(link._members) > 1:
                            link._stamp = stamp
                            stack.append(link)
                            multi.append(link)
        if flows:
            self._fill(flows, multi, now)

    def _fill(self, flows: list[Flow], multi: list[Link], now: int) -> None:
        """Max-min fair rates of ``flows`` (a connected group; ``multi``: its links with more than one flow)
        by progressive filling, and the new finish cycles of those whose rate changed."""
        self.recomputations += 1
        if self._prioritised and any(f.priority != flows[0].priority for f in flows):
            self._fill_classes(flows, multi)
        else:
            # Progressive filling: every flow unfrozen, shared links with no frozen usage yet.
            for link in multi:
                link._un, link._ud, link._wn, link._wd, link._free = 0, 1, link._sumn, link._sumd, len(link._members)
            for f in flows:
                f._frozen = False
            self._fill_group(flows, multi, True)
        self._settle(flows, now)
        if self.observer is not None:
            self.observer(self)

    def _fill_classes(self, flows: list[Flow], multi: list[Link]) -> None:
        """Strict priority: the flows of each class, highest first, filled over what the classes above left of the
        links (a lower class absent, marked frozen, until its turn)."""
        for link in multi:
            link._un, link._ud, link._wn, link._wd, link._free = 0, 1, 0, 1, 0
        for f in flows:
            f._frozen = True
        classes = sorted({f.priority for f in flows}, reverse=True)
        for cls in classes:
            group = [f for f in flows if f.priority == cls]
            for f in group:
                f._frozen = False
                for link, (an, ad) in zip(f._links, f._coefs):
                    if len(link._members) > 1:
                        link._wn, link._wd = _add(link._wn, link._wd, an, ad)
                        link._free += 1
            self._fill_group(group, multi, cls == classes[-1])

    def _fill_group(self, flows: list[Flow], multi: list[Link], last: bool) -> None:
        """Progressive filling of the unfrozen ``flows`` over ``multi``'s capacity their links' frozen usage leaves;
        ``last``: no class is filled after them (the last round's usage is not booked on the links)."""
        left = len(flows)
        batch, capped, tight = self._batch, self._capped, self._tight
        while left:
            # The lowest level at which something binds: a shared link saturating, or a flow's own cap; the links
            # and flows binding at it.  Links first: there are few, and the level they give is usually below
            # every cap, so the loop over the flows then only compares (the sets found are the same either way).
            bn, bd = 0, 0
            capped.clear()
            tight.clear()
            for link in multi:
                if link._free:
                    ud = link._ud
                    ln = (link._cn * ud - link._un * link._cd) * link._wd
                    ld = link._cd * ud * link._wn
                    x, y = ln * bd, bn * ld
                    if x < y or not bd:
                        bn, bd = ln, ld
                        tight.clear()
                        tight.append(link)
                    elif x == y:
                        tight.append(link)
            for f in flows:
                if not f._frozen:
                    x, y = f._capn * bd, bn * f._capd
                    if x < y or not bd:
                        bn, bd = f._capn, f._capd
                        tight.clear()
                        capped.clear()
                        capped.append(f)
                    elif x == y:
                        capped.append(f)
            g = gcd(bn, bd)
            bn, bd = bn // g, bd // g
            # Freeze every flow at its cap, and every unfrozen flow of a link saturating, at this level.
            batch.clear()
            for f in capped:
                f._frozen = True
                f._newn, f._newd = bn, bd
                batch.append(f)
            for link in tight:
                for m in link._members:
                    f = m[0]
                    if not f._frozen:
                        f._frozen = True
                        f._newn, f._newd = bn, bd
                        batch.append(f)
            left -= len(batch)
            if not left and last:
                break  # the last round: the links' bookkeeping is not needed any more
            for f in batch:  # the frozen flows' usage becomes fixed on their shared links
                for link, (an, ad) in zip(f._links, f._coefs):
                    if len(link._members) > 1:
                        # usage += level * coefficient; unfrozen coefficients -= coefficient
                        n, d = bn * an, bd * ad
                        un, ud = link._un, link._ud
                        g = gcd(ud, d)
                        link._un, link._ud = un * (d // g) + n * (ud // g), ud // g * d
                        link._wn, link._wd = _sub(link._wn, link._wd, an, ad)
                        link._free -= 1

    @staticmethod
    def _settle(flows: list[Flow], now: int) -> None:
        """Flows whose new level differs move their remaining bytes on to ``now`` and get a new finish cycle."""
        for f in flows:
            rn, rd = f._newn, f._newd
            old_rn, old_rd = f._rn, f._rd
            if rn == old_rn and rd == old_rd:
                continue
            if old_rd:
                dt = now - f._since
                if dt:
                    remd = f._remd
                    remn = f._remn * old_rd - old_rn * dt * remd
                    remd *= old_rd
                    g = gcd(remn, remd)
                    remn, remd = remn // g, remd // g
                    if remd > _GRID:
                        # Rates of flows with many different byte ratios have large denominators and the
                        # remaining work would pile them up: round it up (later, never earlier) to the grid.
                        remn, remd = -((-remn * _GRID) // remd), _GRID
                    f._remn, f._remd = remn, remd
            f._rn, f._rd = rn, rd
            f._since = now
            # now + ceil(remaining / rate); a flow a higher class starves waits for the next recomputation
            f._finish = now - ((-f._remn * rd) // (f._remd * rn)) if rn else _UNRATED

    # -- time --------------------------------------------------------------------------------------------

    def _retire(self, now: int) -> list[Link]:
        """Take the flows due at ``now`` off their links (their on_done waits for the wake); their links."""
        active = self._active
        seeds: list[Link] = []
        if self._wake_at is None or self._wake_at > now:
            return seeds
        kept = 0
        for f in active:
            if f._finish > now:
                active[kept] = f
                kept += 1
                continue
            f.end_cycle = now
            self._done.append(f)
            if f.priority:
                self._prioritised -= 1
            for link in f._links:
                members = link._members
                for i, m in enumerate(members):
                    if m[0] is f:
                        del members[i]
                        if len(members) == 1:
                            self._shared.remove(link)
                        link._sumn, link._sumd = _sub(link._sumn, link._sumd, m[1], m[2])
                        break
                seeds.append(link)
        del active[kept:]  # the flows still streaming, in start order, compacted in place
        return seeds

    def _reschedule(self, now: int) -> None:
        """Keep the one pending timeout at the next completion cycle (a new version if that cycle moved)."""
        if self._done or self._settling:
            # The wake of this cycle is still to come (it reports them and looks again), or the rates of this
            # cycle are (their recomputation reschedules): a flow not rated yet has no finish cycle.
            return
        active = self._active
        nxt = min(map(_FINISH, active)) if active else None  # (in C: this runs at every start and end)
        pending = self._pending
        if pending and (nxt is None or pending[0][0] < nxt):
            nxt = pending[0][0]
        if nxt == self._wake_at:
            return
        if nxt is None:
            self._version += 1
            self._wake_at = None
        else:
            self._wake_once_at(nxt, now)

    def _wake_once_at(self, cycle: int, now: int) -> None:
        """Make the one valid pending timeout the one at ``cycle`` (any earlier one becomes stale)."""
        self._version += 1
        self._wake_at = cycle
        Timeout(self.env, cycle - now, value=self._version).callbacks.append(self._wake)

    def _wake(self, event: simpy.Event) -> None:
        """The next completion cycle: end the flows due now, recompute their neighbours, report them."""
        if event._value != self._version:
            return  # superseded by a later recomputation
        now = self._wake_at  # the valid timeout fires at the cycle it was scheduled for
        assert now is not None
        seeds = self._retire(now)
        done, self._done = self._done, []
        self._wake_at = None
        pending = self._pending
        while pending and pending[0][0] == now:  # the streams due to start now, in the order they were asked for
            _, _, shape, on_start, on_done = heapq.heappop(pending)
            on_start()
            seeds.extend(self._join(shape, on_done, now)[1])
        self._waking = True  # (a later start asked for by a callback waits for the reschedule below)
        try:
            for f in done:
                f.on_done(now)
        finally:
            self._waking = False
        if self._settling:
            self._dirty.extend(seeds)  # a flow started at once this cycle: its rating, still to come, takes these
        elif seeds:
            # Every start and end of this cycle so far is in: rate them now, not at an event of their own.  A flow
            # started at once later in the cycle has the rates worked out again after it (:meth:`_changed`).
            self._recompute(seeds, now)
            self._reschedule(now)
        else:
            self._reschedule(now)
