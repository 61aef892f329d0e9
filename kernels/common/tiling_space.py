"""A kernel's tiling space: the named keys a caller's ``tiling`` may set, their ranges, and candidate helpers.

A kernel declares its space per call (ranges often depend on the call's sizes)::

    space = TilingSpace(ChoiceKey("split", ("channels", "rows"), "how the work is split over the cores"),
                        IntKey("channel_block", 1, channels, "channels per tile"))
    chosen = space.parse(ctx)          # {"split": "rows" or None, "channel_block": 16 or None}

Every refusal names ``tiling.<key>`` (or ``tiling`` for an unknown key) and what the key takes.  Whether a
valid tiling fits the staging memory is the plan's own question (a DoesNotFit naming the level).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from kernels.base import PlanContext
from sim.errors import KernelArgError, brief

#: A core's share is cut into at least this many tiles when it is large enough: the pipeline depth that lets
#: loads overlap compute (every kernel's heuristics use this one number).
MIN_TILES_PER_CORE = 4


@dataclass(frozen=True)
class IntKey:
    """An integer key in ``lo..hi``."""

    name: str
    lo: int
    hi: int
    doc: str = ""

    def check(self, value: Any) -> int:
        """``value`` as an int in range; else KernelArgError naming ``tiling.<name>``."""
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) \
                or not self.lo <= value <= self.hi:
            raise KernelArgError(f"argument 'tiling.{self.name}': expected an integer in {self.lo}..{self.hi}, "
                                 f"got {brief(value)}")
        return int(value)


@dataclass(frozen=True)
class ChoiceKey:
    """A key taking one of ``choices`` (exact strings)."""

    name: str
    choices: tuple[str, ...]
    doc: str = ""

    def check(self, value: Any) -> str:
        """``value`` if it is one of the choices; else KernelArgError naming ``tiling.<name>``."""
        if not isinstance(value, str) or value not in self.choices:
            raise KernelArgError(f"argument 'tiling.{self.name}': expected one of {', '.join(self.choices)}, "
                                 f"got {brief(value)}")
        return value


Key = IntKey | ChoiceKey


class TilingSpace:
    """The keys of a kernel's tiling for one call."""

    def __init__(self, *keys: Key):
        self.keys: dict[str, Key] = {k.name: k for k in keys}

    def parse(self, ctx: PlanContext) -> dict[str, Any]:
        """The call's tiling (``ctx.tiling``) checked: every key of the space, None where the caller gave none."""
        return self.check(ctx.tiling or {})

    def check(self, tiling: Mapping[str, Any]) -> dict[str, Any]:
        """``tiling`` checked against the space: unknown keys and bad values refused naming the key."""
        self.check_names(tiling)
        return {name: (k.check(tiling[name]) if name in tiling else None) for name, k in self.keys.items()}

    def check_names(self, tiling: Mapping[str, Any]) -> None:
        """Refuse a key of ``tiling`` the space does not have, naming the keys it has."""
        for key in tiling:
            if key not in self.keys:
                raise KernelArgError(f"argument 'tiling': unknown key '{key}' (this kernel takes: "
                                     f"{', '.join(sorted(self.keys))})")

    def candidate(self, **values: Any) -> dict[str, Any]:
        """A candidate tiling of the given keys (None values left out), checked like a caller's: a kernel that
        lists a tiling it would refuse fails here, at once."""
        given = {k: v for k, v in values.items() if v is not None}
        self.check(given)
        return given

    def describe(self) -> str:
        """One line per key: its name, what it takes, and its doc."""
        lines = []
        for k in self.keys.values():
            takes = f"{k.lo}..{k.hi}" if isinstance(k, IntKey) else " | ".join(k.choices)
            lines.append(f"{k.name}: {takes}" + (f" -- {k.doc}" if k.doc else ""))
        return "\n".join(lines)


def unique(candidates: Sequence[Mapping[str, Any] | None]) -> list[dict[str, Any]]:
    """``candidates`` in order with repeats (and Nones) dropped (the simulator prices each one it is given)."""
    out: list[dict[str, Any]] = []
    for c in candidates:
        if c is not None and dict(c) not in out:
            out.append(dict(c))
    return out


def pipeline_tile(span: int, unit: int = 1, tiles: int = MIN_TILES_PER_CORE) -> int:
    """Size of a tile that cuts a share of ``span`` into ``tiles`` tiles, in whole ``unit``s (at least one unit;
    may exceed ``span``: callers clamp to what fits)."""
    per_tile = -(-span // tiles)
    return max(unit, -(-per_tile // unit) * unit)


def largest(hi: int, ok: Callable[[int], bool], lo: int = 0) -> int:
    """The largest n in ``lo..hi`` with ``ok(n)``, ``ok`` monotone (true up to a point); ``lo`` when none is."""
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid - 1)
    return lo


def split_even(total: int, parts: int) -> list[tuple[int, int]]:
    """Split ``range(total)`` into ``parts`` contiguous ``(start, stop)`` ranges, sizes differing by one at most.

    Empty ranges are dropped, so fewer than ``parts`` ranges come back when ``total < parts``.
    """
    base, extra = divmod(total, parts)
    out, start = [], 0
    for i in range(parts):
        n = base + (1 if i < extra else 0)
        if n:
            out.append((start, start + n))
        start += n
    return out


def split_units(total: int, unit: int, parts: int) -> list[tuple[int, int]]:
    """Split ``range(total)`` into at most ``parts`` ranges of whole ``unit``s (the last may be short)."""
    return [(u0 * unit, min(total, u1 * unit)) for u0, u1 in split_even(-(-total // unit), parts)]


def padded_lanes(n: int, lanes: int) -> int:
    """``n`` rounded up to whole vectors of ``lanes``: the lanes a vector loop actually spends."""
    return -(-max(n, 1) // lanes) * lanes
