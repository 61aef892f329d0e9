"""Copies a replay need not make: a load whose bytes only computes read, read straight from where it loads them.

A repeated call replays its plan's effects in order (:mod:`sim.engine.replay`).  Most of what it copies is loads
from DDR into a core's AM that one or two computes read and a later load of the same slot overwrites: the copy
itself decides nothing a later step or the caller sees, but costs a pass over the bytes.  This module finds, in a
replay program, each copy whose destination

* is read, between the copy and the step that overwrites the last of its bytes, only by computes, each input
  lying wholly within bytes the copy wrote and nothing overwrote since;
* is overwritten, every byte of it, before the program ends (so the bytes it leaves are the later writers');

and whose source no step writes while the copy's bytes are still read.  Such a copy is left out, and each of its
readers reads the same bytes at the copy's source instead: a view of the same dtype and shape, C-contiguous like
the one it replaces and at the same alignment (so numpy runs the same loops on it: bit-identical results).  Copies
of one contiguous run on each side only; a program with a step the engine takes its own way, or run with a progress
callback (which may read memory between tiles), keeps every copy.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence

import numpy as np


class _Followed:
    """A copy being followed: its source and destination spans, the destination bytes not yet overwritten, and the
    compute inputs that would read its source instead."""

    __slots__ = ("index", "src_key", "src_lo", "src_hi", "dst_lo", "left", "reads", "live")

    def __init__(self, index: int, src_key: int, src_lo: int, src_hi: int, dst_lo: int, dst_hi: int):
        self.index = index
        self.src_key, self.src_lo, self.src_hi = src_key, src_lo, src_hi
        self.dst_lo = dst_lo
        self.left: list[tuple[int, int]] = [(dst_lo, dst_hi)]
        self.reads: list[tuple[int, int, int]] = []  # (step, input number, destination address)
        self.live = True  # (False once left out or kept: the indexes drop it lazily)

    def holds(self, lo: int, hi: int) -> bool:
        """Whether ``[lo, hi)`` lies within bytes the copy wrote and nothing has overwritten since."""
        return any(a <= lo and hi <= b for a, b in self.left)

    def meets(self, lo: int, hi: int) -> bool:
        """Whether ``[lo, hi)`` meets bytes the copy wrote and nothing has overwritten since."""
        return any(lo < b and a < hi for a, b in self.left)

    def overwrite(self, lo: int, hi: int) -> None:
        """``[lo, hi)`` is written by a later step."""
        left: list[tuple[int, int]] = []
        for a, b in self.left:
            if hi <= a or b <= lo:
                left.append((a, b))
            else:
                if a < lo:
                    left.append((a, lo))
                if hi < b:
                    left.append((hi, b))
        self.left = left


class _Spans:
    """The live copies followed, by a span of theirs in one store (their sources, or their destinations): those
    whose span meets a range, found by bisection (a program moves thousands of blocks: a scan of every copy
    followed at every step would cost more than the copies left out save)."""

    __slots__ = ("starts", "items", "longest", "dead")

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.items: list[tuple[int, int, _Followed]] = []  # (lo, hi, copy) in order of lo
        self.longest = 0
        self.dead = 0

    def add(self, lo: int, hi: int, f: _Followed) -> None:
        """Follow ``f`` by its span ``[lo, hi)``."""
        i = bisect.bisect_right(self.starts, lo)
        self.starts.insert(i, lo)
        self.items.insert(i, (lo, hi, f))
        self.longest = max(self.longest, hi - lo)

    def meeting(self, lo: int, hi: int) -> list[_Followed]:
        """The live copies whose span meets ``[lo, hi)``."""
        i = bisect.bisect_left(self.starts, lo - self.longest)
        out = []
        items = self.items
        while i < len(items) and items[i][0] < hi:
            s_lo, s_hi, f = items[i]
            if s_hi > lo and f.live:
                out.append(f)
            i += 1
        return out

    def drop_dead(self) -> None:
        """Forget the copies no longer followed once they are most of the index."""
        self.dead += 1
        if self.dead > 64 and self.dead * 2 > len(self.items):
            self.items = [it for it in self.items if it[2].live]
            self.starts = [it[0] for it in self.items]
            self.dead = 0


#: A step's memory accesses: (reads, writes), reads a list of (store key, lo, hi) (for a compute its inputs in
#: order), writes of (store key, lo, hi, whole): ``whole`` False for the span of a strided destination, which
#: writes its runs only (the bytes between keep what they held).  None: a step whose accesses are not known (no
#: forwarding in its program).
Accesses = tuple[list[tuple[int, int, int]], list[tuple[int, int, int, bool]]] | None


def forwarded(accesses: Sequence[Accesses], copies: Sequence[tuple[int, int, int, int, int] | None],
              computes: Sequence[bool]) -> tuple[set[int], dict[tuple[int, int], tuple[int, int]]]:
    """The copies left out of a program and what their readers read instead.

    ``accesses[i]`` are step i's memory accesses; ``copies[i]`` is, for a copy of one contiguous run on each side,
    ``(source key, source lo, source hi, destination key, destination lo)`` (None for any other step);
    ``computes[i]`` whether step i is a compute.  Returns the steps left out, and for each substituted compute
    input ``(step, input number)`` its ``(source key, source address)``."""
    by_dst: dict[int, _Spans] = {}  # store key -> the copies followed into it, by destination
    by_src: dict[int, _Spans] = {}  # store key -> the copies followed from it, by source
    done: list[_Followed] = []

    def stop(f: _Followed) -> None:  # (f is kept, or left out if it is done)
        f.live = False
        by_dst[dst_key_of[f.index]].drop_dead()
        by_src[f.src_key].drop_dead()

    dst_key_of: dict[int, int] = {}
    for i, acc in enumerate(accesses):
        if acc is None:
            return set(), {}
        reads, writes = acc
        for n, (key, lo, hi) in enumerate(reads):
            spans = by_dst.get(key)
            for f in spans.meeting(lo, hi) if spans is not None else ():
                if not f.meets(lo, hi):
                    continue
                if computes[i] and f.holds(lo, hi):
                    f.reads.append((i, n, lo))
                else:
                    stop(f)  # (read otherwise: the copy stays)
        for key, lo, hi, whole in writes:
            spans = by_src.get(key)
            for f in spans.meeting(lo, hi) if spans is not None else ():
                stop(f)  # (its source changes while its bytes may still be read)
            spans = by_dst.get(key)
            for f in spans.meeting(lo, hi) if spans is not None else ():
                if not f.meets(lo, hi):
                    continue
                if not whole:
                    stop(f)  # (some of its bytes overwritten, some not, which ones the span does not say)
                    continue
                f.overwrite(lo, hi)
                if not f.left:
                    done.append(f)
                    stop(f)
        copy = copies[i]
        if copy is not None:
            src_key, src_lo, src_hi, dst_key, dst_lo = copy
            if src_key != dst_key:
                f = _Followed(i, src_key, src_lo, src_hi, dst_lo, dst_lo + src_hi - src_lo)
                dst_key_of[i] = dst_key
                by_dst.setdefault(dst_key, _Spans()).add(dst_lo, dst_lo + src_hi - src_lo, f)
                by_src.setdefault(src_key, _Spans()).add(src_lo, src_hi, f)
    left_out: set[int] = set()
    instead: dict[tuple[int, int], tuple[int, int]] = {}
    for f in done:
        left_out.add(f.index)
        for step, n, addr in f.reads:
            instead[step, n] = (f.src_key, f.src_lo + addr - f.dst_lo)
    return left_out, instead


def same_loops(view: np.ndarray, instead: np.ndarray) -> bool:
    """Whether numpy runs the same loops on ``instead`` as on ``view``: same dtype and shape, both C-contiguous,
    at the same address modulo 64 (a SIMD loop's peeled head depends on it)."""
    return (instead.dtype == view.dtype and instead.shape == view.shape and instead.flags.c_contiguous
            and view.flags.c_contiguous and instead.ctypes.data % 64 == view.ctypes.data % 64)


def apply(program: list[tuple], left_out: set[int], instead: dict[tuple[int, int], tuple[int, int]],
          view_at: Callable[[int, int, np.ndarray], np.ndarray | None], compute_inputs: Callable[[tuple], int]
          ) -> list[tuple] | None:
    """``program`` without the steps ``left_out``, its computes reading ``instead`` (through ``view_at(key,
    address, like)``, a read-only view of ``like``'s dtype and shape there, or None); None if a view cannot stand in
    for the one it replaces (the program is then kept whole).  ``compute_inputs(step)`` is where a compute step's
    inputs begin in its argument list."""
    steps = list(program)
    for (i, n), (key, addr) in instead.items():
        step = steps[i]
        first = compute_inputs(step)
        args = list(step[4])
        view = args[first + n]
        got = view_at(key, addr, view)
        if got is None or not same_loops(view, got):
            return None
        args[first + n] = got
        steps[i] = (*step[:4], tuple(args), *step[5:])
    return [step for i, step in enumerate(steps) if i not in left_out]
