"""Which staging bytes two tiles may touch at the same time: the plan check's rule ``staging-alias``.

The engine overlaps a core's tiles (:class:`~sim.engine.walk.Walk`): tile j's loads are issued while the walk
is at tile j - 1 (so they may land while tile j - 1 is loading, computing or storing), and wait only for the
previous tile of their own slot to have stored; a tile's stores run in the background while later tiles
compute.  Computes run one at a time, in order.  So, on one core in one phase, with tiles numbered in walk
order (staging tiles, which fill named buffers, left out) and σ(i) the slot of tile i:

* tile j's loads may overlap tile j - 1's loads, compute and stores when σ(j - 1) != σ(j);
* tile j's loads may overlap tile i's stores (i < j - 1) when σ(i) != σ(j) and no tile of slot σ(i) comes
  after i up to j - 2 (such a tile's loads waited for i's stores, and landed before j was issued);
* tile j's compute and stores may overlap tile i's stores (i < j) when σ(i) != σ(j) and no tile of slot σ(i)
  comes after i up to j - 1.

Everything else is ordered.  Two such accesses to the same bytes of a per-core staging level, one of them a
write, are a race the numerics would lose (a slot whose buffers are another slot's: the next tile's loads
land on operands the current tile still computes on): the rule refuses them, naming both tiles and slots and
the bytes.  For staged buffers (``Tile.fills``/``uses``, whose own order the ``buffers`` rule checks): two
buffers of a phase may not fill the same bytes, no other tile may write a buffer's bytes, and only a tile that
uses the buffer (waits for its fill) may read them.

The work is about linear in the tiles: a tile is compared with the tile before it (and the one before that of
its slot) and, through an index of disjoint byte segments, with the stores still pending of every slot's
latest tile; tiles that reuse their slot's buffers give the same footprints, whose comparisons are
remembered, and a tile that repeats its footprint, slot and neighbours against an unchanged index passes
without a look.  A core's tiles in a phase may use any number of slots (a resident block may have its own).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from sim.model.block_overlap import Layout, covered, covered_offsets, layout_of
from sim.model.plan import AnyBufferRef, Compute, Phase, Tile, Transfer, parse_buffer_ref
from sim.model.target import StagingArea

#: A span of bytes ``(lo, hi)``; a sorted tuple of disjoint spans.
Span = tuple[int, int]
Spans = tuple[Span, ...]
#: What a tile writes of the per-core staging levels in its three stages, then what it reads (each Spans): the
#: load destinations, compute outputs and store destinations, then the load sources, compute inputs and store
#: sources.  Tiles that reuse their slot's buffers have equal footprints; each distinct one gets a number.
Footprint = tuple[Spans, Spans, Spans, Spans, Spans, Spans]
#: A store's staged-buffer bytes: the starts, and the disjoint ``(lo, hi, names)`` in address order.
_Owned = tuple[list[int], list[tuple[int, int, frozenset[str], tuple[tuple[int, int, frozenset[str]], ...]]]]

_EMPTY: Spans = ()

# The stages of a tile (a footprint's writes of stage s are at s, its reads at READS + s) and what each does to
# the bytes it writes and reads (for messages).
LOADS, COMPUTE, STORES = 0, 1, 2
READS = 3
_VERBS = {(LOADS, True): "loads into", (LOADS, False): "loads from", (COMPUTE, True): "computes into",
          (COMPUTE, False): "computes on", (STORES, True): "stores into", (STORES, False): "stores from"}


@dataclass(frozen=True)
class Finding:
    """A race the rule found: ``detail`` says it; ``index`` is the later tile's position in its core's tiles."""

    index: int
    detail: str


class _Walked:
    """A tile as the walk meets it: the tile, its slot and the number of its footprint."""

    __slots__ = ("tile", "slot", "fp")

    def __init__(self, tile: Tile, slot: int, fp: int):
        self.tile, self.slot, self.fp = tile, slot, fp


def merged(spans: Sequence[Span]) -> Spans:
    """``spans`` sorted, with overlapping and touching ones joined."""
    if len(spans) < 2:
        return tuple(spans)
    if len(spans) == 2:  # the common case (a tile's two operands): no loop
        (a_lo, a_hi), (b_lo, b_hi) = spans
        if a_hi < b_lo:
            return tuple(spans)
        if b_hi < a_lo:
            return spans[1], spans[0]
        return ((min(a_lo, b_lo), max(a_hi, b_hi)),)
    out: list[list[int]] = []
    for lo, hi in sorted(spans):
        if out and lo <= out[-1][1]:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return tuple((lo, hi) for lo, hi in out)


def meet(a: Spans, b: Spans) -> Span | None:
    """The first span of bytes ``a`` and ``b`` (each sorted and merged) share, or None."""
    i = j = 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if lo < hi:
            return lo, hi
        if a[i][1] <= b[j][1]:
            i += 1
        else:
            j += 1
    return None


class AliasCheck:
    """The rule on the phases of one plan: per core, the tiles' footprints in the per-core staging levels.

    ``transfer_spans(t)`` gives a transfer's ``(src lo, src hi, dst lo, dst hi)`` and ``compute_spans(c)`` a
    compute's output and input operands' bytes, merged (the plan check's, which it has worked out already; every
    operand lies in a per-core level, by the rule operand-level).
    """

    def __init__(self, levels: Sequence[StagingArea], transfer_spans: Callable[[Transfer], tuple[int, int, int, int]],
                 compute_spans: Callable[[Compute], tuple[Spans, Spans]]):
        self.levels = tuple(levels)
        self._bounds = tuple((a.base, a.end) for a in levels if not a.shared)
        self.transfer_spans, self.compute_spans = transfer_spans, compute_spans
        self.core: int | None = None  # the core of the last finding of :meth:`buffers`
        self._ids: dict[Footprint, int] = {}
        self._fps: list[Footprint] = []
        self._met: dict[tuple[int, int, int, int], tuple[Span, bool, bool] | None] = {}
        self._passed: set[tuple] = set()  # (footprint, slot, index state, neighbours) of tiles found clean
        # For the staged buffers' rule, per phase: how buffer references parse, and the buffers' bytes a span
        # meets ((store, span) -> its entries).
        self._parse: Callable[[AnyBufferRef], tuple[str, int]] = parse_buffer_ref
        self._found: dict[tuple[int | None, Span], list[tuple[Span, frozenset[str]]]] = {}

    # -- footprints ---------------------------------------------------------------------------------

    def _inside(self, lo: int, hi: int) -> bool:
        """Whether ``[lo, hi)`` is bytes of a per-core staging level."""
        if hi <= lo:
            return False
        for base, end in self._bounds:
            if base <= lo and hi <= end:
                return True
        return False

    def footprint(self, tile: Tile) -> int:
        """The number of ``tile``'s footprint (equal footprints, equal numbers)."""
        spans_of, bounds = self.transfer_spans, self._bounds
        sides: tuple[list[Span], ...] = ([], [], [], [])  # load and store destinations, load and store sources
        for w, transfers in ((0, tile.loads), (1, tile.stores)):
            for t in transfers:
                s_lo, s_hi, d_lo, d_hi = spans_of(t)
                for base, end in bounds:
                    if base <= d_lo and d_hi <= end:
                        sides[w].append((d_lo, d_hi))
                    if base <= s_lo and s_hi <= end:
                        sides[w + 2].append((s_lo, s_hi))
        return self.footprint_of(sides, tile.compute)

    def footprint_of(self, sides: Sequence[list[Span]], compute: Compute | None) -> int:
        """The number of the footprint of a tile whose transfers move ``sides`` of the per-core levels (load and
        store destinations, load and store sources) and whose compute is ``compute``."""
        lw, sw, lr, sr = sides
        cw, cr = self.compute_spans(compute) if compute is not None else (_EMPTY, _EMPTY)
        # (Most sides are empty or one span: no call for those.)
        fp = (tuple(lw) if len(lw) < 2 else merged(lw), cw, tuple(sw) if len(sw) < 2 else merged(sw),
              tuple(lr) if len(lr) < 2 else merged(lr), cr, tuple(sr) if len(sr) < 2 else merged(sr))
        fid = self._ids.get(fp)
        if fid is None:
            fid = self._ids[fp] = len(self._fps)
            self._fps.append(fp)
        return fid

    # -- two stages of two tiles -------------------------------------------------------------------

    def _clash(self, a: int, sa: int, b: int, sb: int) -> tuple[Span, bool, bool] | None:
        """Bytes stage ``sa`` of footprint ``a`` and stage ``sb`` of footprint ``b`` share with at least one of
        them writing, and whether each writes them; None if none (remembered per pair)."""
        key = (a, sa, b, sb)
        if key not in self._met:
            fa, fb = self._fps[a], self._fps[b]
            found = None
            for a_writes, b_writes in ((True, True), (True, False), (False, True)):
                span = meet(fa[sa if a_writes else READS + sa], fb[sb if b_writes else READS + sb])
                if span is not None:
                    found = (span, a_writes, b_writes)
                    break
            self._met[key] = found
        return self._met[key]

    def _level_of(self, lo: int) -> str:
        return next((a.name for a in self.levels if a.base <= lo < a.end), "staging memory")

    def _words(self, later: _Walked, sl: int, earlier: _Walked, se: int, clash: tuple[Span, bool, bool]) -> str:
        (lo, hi), later_writes, earlier_writes = clash
        t_l, slot_l, t_e, slot_e = later.tile, later.slot, earlier.tile, earlier.slot
        return (f"tile {t_l.tile_id} (slot {slot_l}) {_VERBS[(sl, later_writes)]} [{lo:#x}, {hi:#x}) of "
                f"{self._level_of(lo)}, which tile {t_e.tile_id} (slot {slot_e}) {_VERBS[(se, earlier_writes)]} "
                f"while both may be in flight (the engine starts a tile's loads while the tile before it computes "
                f"and stores, and waits only for the previous tile of the same slot): slots {slot_e} and {slot_l} "
                f"alias those bytes; give each slot its own bytes of the staging level")

    # -- the rule ----------------------------------------------------------------------------------------

    def slots(self, tiles: Sequence[Tile], footprints: Mapping[int, int] | None = None) -> Finding | None:
        """The first race between the slots of one core's tiles in one phase, or None.

        The latest tile of every slot (k < j) may still be storing while tile j computes and stores, and while
        tile j loads unless k = j - 1 (whose loads, compute and stores are all checked against j's loads
        directly; the tile of its slot before it takes its place for j's loads).  ``footprints`` maps a tile's id
        to its footprint number when the caller worked it out (:meth:`footprint_of`).  Those stores are an index of
        byte segments that changes only when a slot's latest footprint does; a tile whose footprint, slot and
        neighbours were judged against the same index before (in this phase or another, on this core or another:
        the cores' per-core levels have the same addresses) passes again without a look.
        """
        if not self._bounds:
            return None
        pending = _PendingStores()
        state: tuple = ()  # the index's content: (slot, footprint) of each slot's latest tile, in slot order
        latest: dict[int, _Walked] = {}
        before: dict[int, _Walked] = {}
        passed = self._passed
        prev: _Walked | None = None
        for index, tile in enumerate(tiles):
            if tile.fills:
                continue  # a staging tile: the buffers' own rules (buffers) cover it
            fid = footprints.get(id(tile)) if footprints is not None else None
            me = _Walked(tile, int(tile.slot), self.footprint(tile) if fid is None else fid)
            older = before.get(prev.slot) if prev is not None and prev.slot != me.slot else None
            key = (me.fp, me.slot, state) + ((prev.slot, prev.fp, older.fp if older else -1) if prev else ())
            if key not in passed:
                found = self._against_prev(me, prev, older) if prev is not None else None
                if found is None:
                    found = self._against_pending(me, prev, pending, latest)
                if found is not None:
                    return Finding(index, found)
                passed.add(key)
            old = latest.get(me.slot)
            if old is not None:
                before[me.slot] = old
            latest[me.slot] = me
            if old is None or old.fp != me.fp:
                if old is not None:
                    pending.remove(self._fps[old.fp], me.slot)
                pending.add(self._fps[me.fp], me.slot)
                # A phase of many slots (a block resident in its own) changes the index at every tile: its states
                # would not repeat, so they are not spelled out (an object of their own never equals another).
                state = tuple(sorted((w.slot, w.fp) for w in latest.values())) if len(latest) <= 8 else (object(),)
            prev = me
        return None

    def _against_prev(self, me: _Walked, prev: _Walked, older: _Walked | None) -> str | None:
        """Tile j's loads against tile j - 1 (its loads, compute and stores) and against ``older``, the tile of
        j - 1's slot before it (its stores), when j - 1 is of another slot."""
        if prev.slot == me.slot:
            return None
        for stage in (LOADS, COMPUTE, STORES):
            clash = self._clash(me.fp, LOADS, prev.fp, stage)
            if clash is not None:
                return self._words(me, LOADS, prev, stage, clash)
        if older is not None:
            clash = self._clash(me.fp, LOADS, older.fp, STORES)
            if clash is not None:
                return self._words(me, LOADS, older, STORES, clash)
        return None

    def _against_pending(self, me: _Walked, prev: _Walked | None, pending: _PendingStores,
                         latest: Mapping[int, _Walked]) -> str | None:
        """Tile j's compute and stores against the stores of every other slot's latest tile, and its loads against
        those of the slots other than j - 1's (checked by :meth:`_against_prev`)."""
        if not pending.spans:
            return None
        fp = self._fps[me.fp]
        mine = (me.slot,)
        for stage, skip in ((COMPUTE, mine), (STORES, mine),
                            (LOADS, mine + ((prev.slot,) if prev is not None else ()))):
            for writes in (True, False):
                spans = fp[stage if writes else READS + stage]
                if not spans:
                    continue
                hit = pending.first(spans, skip, reads_too=writes)
                if hit is not None:
                    span, slot, other_writes = hit
                    return self._words(me, stage, latest[slot], STORES, (span, writes, other_writes))
        return None

    def buffers(self, phase: Phase,
                parse: Callable[[AnyBufferRef], tuple[str, int]] = parse_buffer_ref) -> Finding | None:
        """The first pair of staged buffers of ``phase`` that fill the same bytes, or tile writing a buffer's
        bytes without being one of its fills; None if none (``Finding.index`` is the later tile's position in
        its core's tiles, the core is :attr:`core`)."""
        # Per store (a core's own copy of the per-core levels, None for the shared ones): (lo, hi, the buffers the
        # tile that loads them fills, their generations, core, its index).  A tile filling several buffers does not
        # say which of its loads fills which: its bytes belong to them together.
        filled: dict[int | None, list[tuple[int, int, frozenset[str], frozenset[tuple[str, int]], int, int]]] = {}
        for core, tiles in phase.tiles.items():
            for index, tile in enumerate(tiles):
                if not tile.fills:
                    continue
                gens = frozenset(parse(ref) for ref in tile.fills)
                names = frozenset(name for name, _ in gens)
                for t in tile.loads:
                    lo, hi = self.transfer_spans(t)[2:]
                    level = next((a for a in self.levels if a.base <= lo and hi <= a.end), None)
                    if level is not None and hi > lo:  # (its bytes, not its span: strided fills interleave)
                        filled.setdefault(None if level.shared else int(core), []).extend(
                            (p_lo, p_hi, names, gens, int(core), index)
                            for p_lo, p_hi in covered(layout_of(t, "dst")) or [(lo, hi)])
        owners: dict[int | None, _Owned] = {}
        for store, spans in filled.items():
            spans.sort(key=lambda e: (e[0], e[1]))
            found = _filled_twice(spans)
            if found is not None:
                (lo, hi, names, gens, core, index), other, shared = found
                self.core = core
                if not names & other[2]:  # bytes of other buffers altogether
                    return Finding(index, self._buffer_words(other[2], names, shared))
                name, gen = min(gens & other[3])
                return Finding(index, f"two staging tiles fill generation {name}@{gen} with the same bytes "
                                      f"[{shared[0]:#x}, {shared[1]:#x}) of {self._level_of(lo)}: they stream at "
                                      f"once, so which lands last would be a race; give each fill of a generation "
                                      f"its own bytes")
            joined: list[list] = []  # [lo, hi, names, {the fills' pieces}]: the buffers' bytes, in address order
            for lo, hi, names, _, _, _ in spans:
                if joined and lo < joined[-1][1]:
                    joined[-1][1] = max(joined[-1][1], hi)
                    joined[-1][2] = joined[-1][2] | names
                    joined[-1][3][lo, hi, names] = None  # (the generations of a buffer refill the same pieces)
                else:
                    joined.append([lo, hi, names, {(lo, hi, names): None}])
            owners[store] = ([e[0] for e in joined], [(e[0], e[1], e[2], tuple(e[3])) for e in joined])
        self._parse = parse
        self._found = {}
        return self._strangers(phase, owners)

    def _buffer_words(self, a: frozenset[str], b: frozenset[str], span: Span) -> str:
        lo, hi = span
        return (f"staged buffers {_names(a)} and {_names(b)} both fill [{lo:#x}, {hi:#x}) of {self._level_of(lo)} "
                f"in this phase: they alias those bytes; give each buffer its own bytes")

    def _strangers(self, phase: Phase, owners: Mapping[int | None, _Owned]) -> Finding | None:
        """A tile other than a buffer's fills that writes its bytes (a load, a compute output, a store), or a tile
        that reads them without using the buffer (nothing orders such a read after the fill, or before the next
        generation's)."""
        if not owners:
            return None
        for core, tiles in phase.tiles.items():
            stores = [(s, owners[s]) for s in (None, int(core)) if s in owners]
            if not stores:
                continue
            hull = (min(held[0][0] for _, held in stores), max(held[1][-1][1] for _, held in stores))
            for index, tile in enumerate(tiles):
                found = self._touches(tile, stores, hull)
                if found is not None:
                    self.core = int(core)
                    return Finding(index, found)
        return None

    def _touches(self, tile: Tile, owned: Sequence[tuple[int | None, _Owned]], hull: Span) -> str | None:
        """What ``tile`` does wrong to staged buffers' bytes (``owned``: those of its core's levels, by store;
        ``hull``: their span), or None."""
        lowest, highest = hull
        # (what, writes, span, the transfer and side: None for a compute's operand, its span its bytes), of the
        # spans that meet the hull (most miss it altogether)
        touched: list[tuple[str, bool, Span, tuple[Transfer, str] | None]] = []
        for kind, transfers in (("load", tile.loads), ("store", tile.stores)):
            for t in transfers:
                s_lo, s_hi, d_lo, d_hi = self.transfer_spans(t)
                if s_lo < highest and lowest < s_hi:
                    touched.append((f"{kind}s from", False, (s_lo, s_hi), (t, "src")))
                if not tile.fills and d_lo < highest and lowest < d_hi:
                    touched.append((f"{kind}s into", True, (d_lo, d_hi), (t, "dst")))
        if tile.compute is not None:
            outputs, inputs = self.compute_spans(tile.compute)
            touched += [("computes into", True, span, None) for span in outputs] + \
                       [("computes on", False, span, None) for span in inputs]
        used: set[str] | None = None
        found = self._found
        for verb, writes, span, side in touched:
            for store, held in owned:
                starts, entries = held
                if span[1] <= starts[0] or span[0] >= entries[-1][1]:
                    continue  # (most spans miss the buffers' bytes altogether)
                key = (store, span)
                hits = found.get(key)
                if hits is None:
                    hits = found[key] = _owners(held, span)  # (tiles reusing their slot's bytes ask again)
                if hits and side is not None and not (len(hits) == 1 and hits[0][0] == span):
                    layout = layout_of(*side)
                    if layout[2]:  # (its span has gaps: its bytes decide, against every piece)
                        hits = _met(_owners(held, span, every=True), layout)
                for (lo, hi), names in hits:
                    if writes:
                        return (f"tile {tile.tile_id} (slot {tile.slot}) {verb} [{lo:#x}, {hi:#x}) of "
                                f"{self._level_of(lo)}, bytes of staged buffer {_names(names)}: only the tiles "
                                f"that fill a buffer may write its bytes")
                    if verb == "stores from":
                        return (f"tile {tile.tile_id} (slot {tile.slot}) stores from [{lo:#x}, {hi:#x}) of "
                                f"{self._level_of(lo)}, bytes of staged buffer {_names(names)}: a tile releases "
                                f"the buffers it uses once its compute is done, before its stores run, so the next "
                                f"generation's fill may overwrite them as the store reads them; load them into the "
                                f"core's own level and store from there")
                    if used is None:
                        used = {self._parse(r)[0] for r in tile.uses}  # (a fill reading its own buffer's
                        # bytes races the buffer's other fills, and the generation before is not its to read)
                    if not names & used:
                        return (f"tile {tile.tile_id} (slot {tile.slot}) {verb} [{lo:#x}, {hi:#x}) of "
                                f"{self._level_of(lo)}, bytes of staged buffer {_names(names)}, which it does not "
                                f"use: only a tile naming a buffer in its uses waits for the buffer's fill (and "
                                f"holds off its next generation's), so what it reads would be a race; name the "
                                f"buffer in the tile's uses")
        return None


#: A fill's piece of bytes: ``(lo, hi, the buffers its tile fills, their generations, core, its index)``.
_Piece = tuple[int, int, frozenset[str], frozenset[tuple[str, int]], int, int]


def _filled_twice(pieces: Sequence[_Piece]) -> tuple[_Piece, _Piece, Span] | None:
    """Two of ``pieces`` (sorted by first byte) sharing bytes that no fill may share: of buffers with no name in
    common, or of one generation filled by two tiles; with the shared bytes (the later piece first)."""
    reach: dict[frozenset[str], _Piece] = {}  # per set of names, the piece reaching furthest so far
    by_gen: dict[tuple[str, int], _Piece] = {}  # per generation, the piece reaching furthest so far
    for piece in pieces:
        lo, hi, names, gens = piece[:4]
        for other in reach.values():
            if other[1] > lo and not names & other[2]:
                return piece, other, (lo, min(hi, other[1]))
        for gen in gens:
            prev = by_gen.get(gen)
            if prev is not None and prev[1] > lo and (piece[4], piece[5]) != (prev[4], prev[5]):
                return piece, prev, (lo, min(hi, prev[1]))
        for key in (names, *gens):
            table: dict = reach if key is names else by_gen
            if key not in table or table[key][1] < hi:
                table[key] = piece
    return None


def _met(hits: list[tuple[Span, frozenset[str]]], layout: Layout) -> list[tuple[Span, frozenset[str]]]:
    """Those of ``hits`` (bytes of fills within a block's span) that the block's own bytes meet: where they do."""
    got = covered_offsets(layout[1], layout[2])
    if got is None:
        return hits  # (a block of too many runs to list: judged by its span)
    starts, ends = got[0] + layout[0], got[1] + layout[0]
    met = []
    for (lo, hi), names in hits:
        k = int(np.searchsorted(ends, lo, side="right"))  # the first stretch of the block ending past lo
        if k < starts.size and starts[k] < hi:
            met.append(((max(lo, int(starts[k])), min(hi, int(ends[k]))), names))
    return met


def _names(names: frozenset[str]) -> str:
    """Buffer names for a message: ``'a'``, or ``'a' / 'b'`` for the buffers one tile fills together."""
    return " / ".join(repr(n) for n in sorted(names)[:4]) + (" ..." if len(names) > 4 else "")


def _owners(owned: _Owned, span: Span, every: bool = False) -> list[tuple[Span, frozenset[str]]]:
    """The fills' pieces of ``owned`` (disjoint stretches ``(lo, hi, names, pieces)`` in address order, after the
    list of their starts) that ``span`` shares bytes with: the shared bytes and the names of each; only the first
    of each set of names unless ``every`` (the rules judge names, when the span's bytes are all the block's)."""
    lo, hi = span
    starts, entries = owned
    if hi <= lo:
        return []
    got: list[tuple[Span, frozenset[str]]] = []
    seen: set[frozenset[str]] = set()
    for b_lo, b_hi, _, pieces in entries[max(bisect.bisect_right(starts, lo) - 1, 0):]:
        if b_lo >= hi:
            break
        if b_hi > lo:
            for p_lo, p_hi, names in pieces:
                if p_lo < hi and lo < p_hi and (every or names not in seen):
                    seen.add(names)
                    got.append(((max(lo, p_lo), min(hi, p_hi)), names))
    return got


class _PendingStores:
    """The staging bytes the stores of each slot's latest tile read and write, as disjoint segments in address
    order, each with the slots whose latest tile's stores touch it (and whether they write it)."""

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.spans: list[list] = []  # [lo, hi, {slot: writes}]

    def _split(self, at: int) -> int:
        """Make ``at`` a segment boundary; the index of the first segment starting at or after it."""
        i = bisect.bisect_left(self.starts, at)
        if i > 0 and self.spans[i - 1][1] > at:
            hi, who = self.spans[i - 1][1], self.spans[i - 1][2]
            self.spans[i - 1][1] = at
            self.spans.insert(i, [at, hi, dict(who)])
            self.starts.insert(i, at)
        return i

    def _cover(self, lo: int, hi: int) -> range:
        """Segments covering exactly ``[lo, hi)`` (made where none are), as a range of indices."""
        i = self._split(lo)
        self._split(hi)
        pos, j = lo, i
        while pos < hi:
            if j < len(self.spans) and self.spans[j][0] == pos:
                pos = self.spans[j][1]
            else:
                end = min(hi, self.spans[j][0]) if j < len(self.spans) else hi
                self.spans.insert(j, [pos, end, {}])
                self.starts.insert(j, pos)
                pos = end
            j += 1
        return range(i, j)

    def add(self, fp: Footprint, slot: int) -> None:
        """Record the store spans of ``fp`` as those of ``slot``'s latest tile."""
        for writes, spans in ((False, fp[READS + STORES]), (True, fp[STORES])):
            for lo, hi in spans:
                for k in self._cover(lo, hi):
                    who = self.spans[k][2]
                    who[slot] = writes or who.get(slot, False)

    def remove(self, fp: Footprint, slot: int) -> None:
        """Forget the store spans of ``fp`` as ``slot``'s (a later tile of the slot replaced it)."""
        for lo, hi in (*fp[READS + STORES], *fp[STORES]):
            i = max(bisect.bisect_right(self.starts, lo) - 1, 0)
            while i < len(self.spans) and self.spans[i][0] < hi:
                seg = self.spans[i]
                if seg[1] > lo:
                    seg[2].pop(slot, None)
                if not seg[2]:
                    del self.spans[i], self.starts[i]
                else:
                    i += 1

    def first(self, spans: Spans, skip: Sequence[int], reads_too: bool) -> tuple[Span, int, bool] | None:
        """The first bytes of ``spans`` that a pending store of a slot not in ``skip`` writes (or reads too, with
        ``reads_too``): the bytes, that slot and whether its store writes them; None if none."""
        for lo, hi in spans:
            i = max(bisect.bisect_right(self.starts, lo) - 1, 0)
            while i < len(self.spans) and self.spans[i][0] < hi:
                s_lo, s_hi, who = self.spans[i]
                if s_hi > lo:
                    for slot, writes in who.items():
                        if slot not in skip and (writes or reads_too):
                            return (max(lo, s_lo), min(hi, s_hi)), slot, writes
                i += 1
        return None
