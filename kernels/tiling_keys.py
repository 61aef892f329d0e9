"""Moved to :mod:`kernels.common.tiling_space` (``TilingSpace``, ``IntKey``, ``ChoiceKey``): the old function
names stay here, written on top of it, until the last kernel has moved to the scaffold."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kernels.base import PlanContext
from kernels.common.tiling_space import ChoiceKey, IntKey, TilingSpace, unique

__all__ = ["tiling_keys", "int_key", "choice_key", "unique"]


def tiling_keys(ctx: PlanContext, keys: Sequence[str]) -> dict[str, Any]:
    """The call's tiling (empty when none was given), unknown keys refused."""
    given = dict(ctx.tiling or {})
    TilingSpace(*(ChoiceKey(k, ()) for k in keys)).check_names(given)
    return given


def int_key(tiling: Mapping[str, Any], key: str, lo: int, hi: int) -> int | None:
    """``tiling[key]`` as an int in ``lo..hi``, None when absent; else KernelArgError naming ``tiling.<key>``."""
    return IntKey(key, lo, hi).check(tiling[key]) if key in tiling else None


def choice_key(tiling: Mapping[str, Any], key: str, choices: Sequence[str]) -> str | None:
    """``tiling[key]`` as one of ``choices``, None when absent; else KernelArgError naming ``tiling.<key>``."""
    return ChoiceKey(key, tuple(choices)).check(tiling[key]) if key in tiling else None
