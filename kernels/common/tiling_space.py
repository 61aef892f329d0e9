"""A kernel's tiling space (the plan IR's :mod:`sim.model.tiling`, re-exported) and the helpers kernels use to
say which values of a key are worth trying.

A kernel declares its space per call (ranges and values often depend on the call's sizes)::

    space = TilingSpace(ChoiceKey("split", ("channels", "rows"), "how the work is split over the cores"),
                        IntKey("channel_block", 1, channels, "channels per tile", values=(16, 32)))
    chosen = space.parse(ctx)          # {"split": "rows", "channel_block": None (split rows)}

Every refusal names ``tiling.<key>`` (or ``tiling`` for an unknown key) and what the key takes.  Whether a
valid tiling fits the staging memory is the space's ``fit`` and the plan's own question (a DoesNotFit naming
the level); the simulator's search (:mod:`sim.tuning`) chooses among the tilings that fit.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kernels.common.shares import split_even, split_units
from sim.errors import KernelArgError
from sim.model.plan import DoesNotFit
from sim.model.tiling import ChoiceKey, IntKey, Key, TilingSpace, union

__all__ = ["ChoiceKey", "IntKey", "Key", "TilingSpace", "union", "MIN_TILES_PER_CORE", "unique", "pipeline_tile",
           "largest", "split_even", "split_units", "padded_lanes", "complete"]

#: A core's share is cut into at least this many tiles when it is large enough: the pipeline depth that lets
#: loads overlap compute (every kernel's heuristics use this one number).
MIN_TILES_PER_CORE = 4
#: Most completions :func:`complete` goes through for a kernel planned outside the simulator's search.
COMPLETIONS_TRIED = 256


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


def padded_lanes(n: int, lanes: int) -> int:
    """``n`` rounded up to whole vectors of ``lanes``: the lanes a vector loop actually spends."""
    return -(-max(n, 1) // lanes) * lanes


def complete(space: TilingSpace, ctx: Any) -> dict[str, Any]:
    """The tiling a kernel plans: ``ctx.tiling`` when it sets every key of scope ``plan`` (the simulator's search
    always hands a kernel such a tiling); otherwise, for a kernel planned directly, the first completion of its
    keys in the space's order of preference that passes the space's ``fit`` (no cost compared: choosing by cost
    is the search's).  The DoesNotFit of the last completion tried when none fits."""
    fixed = space.fixed(ctx.tiling)
    if space.is_complete(fixed):
        return fixed
    pool, _ = space.completions(fixed, COMPLETIONS_TRIED)
    last: Exception | None = None
    for t in pool:
        if space.fit is not None:
            try:
                space.fit(t)
            except (DoesNotFit, KernelArgError) as e:
                last = e
                continue
        return t
    if last is not None:
        raise last
    raise KernelArgError(f"argument 'tiling': no tiling of the kernel's space completes {fixed}")
