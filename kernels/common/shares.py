"""Per-core shares: a range of work cut over the call's cores, as evenly as whole units allow.

:func:`split_even` cuts ``range(total)`` into contiguous ranges whose sizes differ by one at most,
:func:`split_units` does it in whole units (vectors, blocks), :func:`core_shares` pairs the ranges with the
cores that get them (cores past the last range get no work: the run reports them idle).
"""

from __future__ import annotations

from collections.abc import Sequence


def ceil_div(a: int, b: int) -> int:
    """``a / b`` rounded up (ints)."""
    return -(-a // b)


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
    return [(u0 * unit, min(total, u1 * unit)) for u0, u1 in split_even(ceil_div(total, unit), parts)]


def core_shares(cores: Sequence[int], total: int, unit: int = 1) -> list[tuple[int, int, int]]:
    """``(core, start, stop)`` of each core that gets work: ``range(total)`` in whole ``unit``s over ``cores``."""
    return [(core, a, b) for core, (a, b) in zip(cores, split_units(total, unit, len(cores)))]
