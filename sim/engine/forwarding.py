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

from collections.abc import Callable, Sequence

import numpy as np

#: Copies followed at once per destination store (a destination written once and never again is followed to the
#: program's end: beyond this many, the oldest is given up).
MAX_FOLLOWED = 64


class _Followed:
    """A copy being followed: its source and destination spans, the destination bytes not yet overwritten, and the
    compute inputs that would read its source instead."""

    __slots__ = ("index", "src_key", "src_lo", "src_hi", "dst_lo", "left", "reads")

    def __init__(self, index: int, src_key: int, src_lo: int, src_hi: int, dst_lo: int, dst_hi: int):
        self.index = index
        self.src_key, self.src_lo, self.src_hi = src_key, src_lo, src_hi
        self.dst_lo = dst_lo
        self.left: list[tuple[int, int]] = [(dst_lo, dst_hi)]
        self.reads: list[tuple[int, int, int]] = []  # (step, input number, destination address)

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


#: A step's memory accesses: (reads, writes), each a list of (store key, lo, hi); for a compute the reads are its
#: inputs in order.  None: a step whose accesses are not known (no forwarding in its program).
Accesses = tuple[list[tuple[int, int, int]], list[tuple[int, int, int]]] | None


def forwarded(accesses: Sequence[Accesses], copies: Sequence[tuple[int, int, int, int, int] | None],
              computes: Sequence[bool]) -> tuple[set[int], dict[tuple[int, int], tuple[int, int]]]:
    """The copies left out of a program and what their readers read instead.

    ``accesses[i]`` are step i's memory accesses; ``copies[i]`` is, for a copy of one contiguous run on each side,
    ``(source key, source lo, source hi, destination key, destination lo)`` (None for any other step);
    ``computes[i]`` whether step i is a compute.  Returns the steps left out, and for each substituted compute
    input ``(step, input number)`` its ``(source key, source address)``."""
    followed: dict[int, list[_Followed]] = {}  # destination store key -> copies followed into it
    done: list[_Followed] = []
    for i, acc in enumerate(accesses):
        if acc is None:
            return set(), {}
        reads, writes = acc
        for n, (key, lo, hi) in enumerate(reads):
            for f in followed.get(key, ()):
                if f.meets(lo, hi):
                    if computes[i] and f.holds(lo, hi):
                        f.reads.append((i, n, lo))
                    else:
                        f.left = []  # (read otherwise: the copy stays; dropped below)
            _drop_given_up(followed, key)
        for key, lo, hi in writes:
            for fs in followed.values():
                for f in fs:
                    if f.src_key == key and lo < f.src_hi and f.src_lo < hi:
                        f.left, f.reads = [], []  # (its source changes while its bytes may still be read)
            for f in followed.get(key, ()):
                if f.left and f.meets(lo, hi):
                    f.overwrite(lo, hi)
                    if not f.left:
                        done.append(f)
            _drop_given_up(followed, key)
        copy = copies[i]
        if copy is not None:
            src_key, src_lo, src_hi, dst_key, dst_lo = copy
            if src_key != dst_key:
                fs = followed.setdefault(dst_key, [])
                fs.append(_Followed(i, src_key, src_lo, src_hi, dst_lo, dst_lo + src_hi - src_lo))
                if len(fs) > MAX_FOLLOWED:
                    del fs[0]
    left_out: set[int] = set()
    instead: dict[tuple[int, int], tuple[int, int]] = {}
    for f in done:
        left_out.add(f.index)
        for step, n, addr in f.reads:
            instead[step, n] = (f.src_key, f.src_lo + addr - f.dst_lo)
    return left_out, instead


def _drop_given_up(followed: dict[int, list[_Followed]], key: int) -> None:
    """Stop following the copies into ``key`` that can no longer be left out (read otherwise, or wholly
    overwritten: those are kept in the done list)."""
    fs = followed.get(key)
    if fs:
        followed[key] = [f for f in fs if f.left]


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
