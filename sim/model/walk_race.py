"""Races within one core's walk: the plan check's rule ``store-race``.

The engine overlaps a core's tiles (:mod:`sim.model.plan_alias` states the order, :class:`sim.engine.walk.Walk`
keeps it).  Outside the per-core staging levels (whose races ``staging-alias`` judges), a transfer's source is
bytes it reads and its destination bytes it writes.  With tiles numbered in walk order (staging tiles left out) and
σ(j) the slot of tile j, on one core in one phase:

* tile j's loads are issued while the walk is at tile j - 1, once the previous tile of slot σ(j) has stored: they
  may run beside the loads and the stores of tile j - 1 when σ(j - 1) != σ(j), and beside the stores of the latest
  tile up to j - 2 of every other slot (that tile's stores have landed only once a later tile of its slot has
  started its loads, and the latest tile of σ(j - 1) before j - 1 may still hold up j - 1's);
* tile j's stores run after its compute and may run beside the stores of the latest tile of every other slot;
* a staging tile's loads (it fills staged buffers) wait only for those buffers' gates: issued with the tile after
  the compute tile before it, they may run beside whatever is in flight then and beside every later tile, up to
  the first tile that uses what they fill (its compute waits for them, so its stores and everything after come
  later; the loads of the tile after it are issued before that compute).  A tile whose loads read the bytes of a
  buffer it uses waits, loads and all, for that buffer's fills (:mod:`sim.model.buffer_reads`), and so does a
  tile whose slot's tile before it computed after that first user (its loads wait for that tile's stores).

Two such accesses to the same bytes, one of them writing, are a race: the rule refuses the first it finds, naming
both tiles.  Spans that overlap are judged by their bytes (:mod:`sim.model.block_overlap`).  A staging tile is
compared only where the bytes could meet: the hull of what it reads and writes is kept, and most tiles fall
outside it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from sim.model.plan import Tile, Transfer, parse_buffer_ref

#: One side of a transfer outside the per-core staging levels: ``(lo, hi, writes, transfer, side, kind, index)``.
Side = tuple[int, int, bool, Transfer, str, str, int]


@dataclass(frozen=True)
class WalkRace:
    """Tile ``tile``'s ``side`` meets ``other_tile``'s ``other`` in bytes ``shared`` (a span of them);
    ``staging``: the race is with a staging tile's loads."""

    tile: Tile
    side: Side
    other_tile: Tile
    other: Side
    shared: tuple[int, int]
    staging: bool


@dataclass
class _Open:
    """A staging tile whose loads may still run: its sides, their hull, the buffers it fills, and the first tile
    (walk position) that uses them, once met."""

    tile: Tile
    sides: list[Side]
    lo: int
    hi: int
    fills: frozenset[tuple[str, int]]
    user: int | None = None


#: No sides: a tile whose transfers all stay in the per-core staging levels or the staged buffers' bytes.
_NONE: tuple[list[Side], list[Side]] = ([], [])


class WalkRaces:
    """The rule over one plan's phases; ``meet(a, b)`` says whether two sides' bytes meet (their spans
    overlapping)."""

    def __init__(self, meet: Callable[[Side, Side], bool]):
        self.meet = meet

    def first(self, tiles: Sequence[Tile], sides: Mapping[int, tuple[list[Side], list[Side]]],
              keep: Callable[[Side], bool] | None = None,
              loads_wait: Callable[[Tile], frozenset[tuple[str, int]]] | None = None) -> WalkRace | None:
        """The first race among one core's ``tiles`` of a phase (checked already), in walk order, each tile's
        sides given by ``sides[id(tile)]`` (its loads', its stores'; absent: none), those ``keep`` refuses left
        out; ``loads_wait(tile)``: the buffers (name, generation) whose fills a tile's loads wait for.  None if
        none."""
        latest: dict[int, tuple[Tile, list[Side]]] = {}  # slot -> its latest tile and that tile's store sides
        before: tuple[int, Tile, list[Side]] | None = None  # the slot of the tile before, and that slot's latest
        # tile before it (with its store sides)
        prev: tuple[int, Tile, list[Side]] | None = None  # the tile before: its slot, and its load sides
        opened = _Opened()
        position = 0
        latest_at: dict[int, int] = {}  # slot -> the walk position of its latest tile
        for tile in tiles:
            loads, stores = sides.get(id(tile), _NONE)
            if keep is not None and (loads or stores):
                loads, stores = [x for x in loads if keep(x)], [x for x in stores if keep(x)]
            if tile.fills:
                found = self._staging(tile, loads, latest, before, prev, opened)
                if found is not None:
                    return found
                continue
            slot = tile.slot
            if loads or stores or opened.entries:  # (most tiles have nothing to compare: only the order to keep)
                against = [(t, s) for sl, (t, s) in latest.items() if sl != slot and s]
                load_against = list(against)
                if before is not None and before[0] != slot and before[2]:
                    load_against.append((before[1], before[2]))
                if prev is not None and prev[0] != slot and prev[2]:
                    load_against.append((prev[1], prev[2]))
                found = (self._pairs(tile, loads, load_against) or self._pairs(tile, stores, against)
                         or self._against_open(tile, position, loads, stores, opened, loads_wait,
                                               latest_at.get(slot)))
                if found is not None:
                    return found
            old = latest.get(slot)
            before = (slot, old[0], old[1]) if old is not None else None
            latest[slot] = (tile, stores)
            latest_at[slot] = position
            prev = (slot, tile, loads)
            position += 1
        return None

    def _pairs(self, tile: Tile, sides: list[Side], against: list[tuple[Tile, list[Side]]],
               staging: bool = False) -> WalkRace | None:
        """The first of ``sides`` (of ``tile``) that meets a side of ``against``'s tiles, one of the two writing."""
        for a in sides:
            for other_tile, others in against:
                for b in others:
                    if (a[2] or b[2]) and a[0] < b[1] and b[0] < a[1] and self.meet(a, b):
                        return WalkRace(tile, a, other_tile, b, (max(a[0], b[0]), min(a[1], b[1])), staging)
        return None

    def _staging(self, tile: Tile, sides: list[Side], latest: dict[int, tuple[Tile, list[Side]]],
                 before: tuple[int, Tile, list[Side]] | None, prev: tuple[int, Tile, list[Side]] | None,
                 opened: _Opened) -> WalkRace | None:
        """A staging tile (its loads' ``sides``): against what may be in flight when it is issued, then kept open
        against the tiles after it."""
        if not sides:
            return None
        against = [(t, s) for t, s in latest.values() if s]
        if before is not None and before[2]:
            against.append((before[1], before[2]))
        if prev is not None and prev[2]:
            against.append((prev[1], prev[2]))
        found = self._pairs(tile, sides, against, staging=True)
        if found is not None:
            return found
        fills = frozenset(parse_buffer_ref(r) for r in tile.fills)
        opened.add(_Open(tile, sides, min(s[0] for s in sides), max(s[1] for s in sides), fills))
        return None

    def _against_open(self, tile: Tile, position: int, loads: list[Side], stores: list[Side], opened: _Opened,
                      loads_wait: Callable[[Tile], frozenset[tuple[str, int]]] | None,
                      slot_before: int | None) -> WalkRace | None:
        """Tile ``tile`` (walk position ``position``; the latest tile of its slot before it at ``slot_before``)
        against the staging tiles whose loads may still run."""
        if not opened.entries or not (loads or stores or tile.uses):
            return None
        for ref in tile.uses:
            for o in opened.by_fill.get(parse_buffer_ref(ref), ()):
                if o.user is None:
                    o.user = position
        if position % 64 == 0:
            opened.compact(position)
        if not any(s[0] < opened.hi and opened.lo < s[1] for s in loads + stores):
            return None  # (the common case: what staging tiles read is not what later tiles write)
        waited = loads_wait(tile) if loads_wait is not None and tile.uses else frozenset()
        for o in opened.entries:
            if o.user is not None and position > o.user + 1:
                continue  # its first user has computed: every later access comes after its loads
            if o.fills & waited:
                continue  # this tile's loads wait for its loads to land
            if o.user is not None and slot_before is not None and slot_before >= o.user:
                continue  # this tile's loads wait for a tile of its slot that computed after the first user did
            mine = loads + stores if o.user is None else loads  # (from its first user on, stores follow a compute
            # that waited for it)
            near = [s for s in mine if s[0] < o.hi and o.lo < s[1]]
            hit = self._pairs(tile, near, [(o.tile, o.sides)]) if near else None
            if hit is not None:
                return WalkRace(hit.tile, hit.side, hit.other_tile, hit.other, hit.shared, True)
        return None


class _Opened:
    """The staging tiles of a walk whose loads may still run, by the buffers they fill, and their hull."""

    def __init__(self) -> None:
        self.entries: list[_Open] = []
        self.by_fill: dict[tuple[str, int], list[_Open]] = {}
        self.lo, self.hi = 0, 0

    def add(self, o: _Open) -> None:
        self.entries.append(o)
        for ref in o.fills:
            self.by_fill.setdefault(ref, []).append(o)
        self.lo, self.hi = (o.lo, o.hi) if len(self.entries) == 1 else (min(self.lo, o.lo), max(self.hi, o.hi))

    def compact(self, position: int) -> None:
        """Drop the entries whose first user computed before ``position`` - 1, and shrink the hull."""
        alive = [o for o in self.entries if o.user is None or position <= o.user + 1]
        if len(alive) == len(self.entries):
            return
        self.entries = alive
        self.by_fill = {}
        for o in alive:
            for ref in o.fills:
                self.by_fill.setdefault(ref, []).append(o)
        self.lo = min((o.lo for o in alive), default=0)
        self.hi = max((o.hi for o in alive), default=0)
