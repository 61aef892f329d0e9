"""Checking a caller's ``tiling`` mapping: every refusal names ``tiling.<key>`` and what the key takes.

A kernel that honours ``PlanContext.tiling`` lists its keys with a short
description of each; :func:`tiling_keys` refuses keys it does not know and
:func:`int_key` / :func:`choice_key` check the values.  Whether a valid tiling
fits the scratchpad is the kernel's own question (a LayoutError naming it).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from kernels.base import PlanContext
from sim.errors import KernelArgError, brief


def tiling_keys(ctx: PlanContext, keys: Sequence[str]) -> dict[str, Any]:
    """The call's tiling (empty when none was given), unknown keys refused."""
    return tiling_options(ctx, {k: (lambda _v: True) for k in keys})


def int_key(tiling: Mapping[str, Any], key: str, lo: int, hi: int) -> int | None:
    """``tiling[key]`` as an int in ``lo..hi``, None when absent; else KernelArgError naming ``tiling.<key>``."""
    if key not in tiling:
        return None
    value = tiling[key]
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or not lo <= value <= hi:
        raise KernelArgError(f"argument 'tiling.{key}': expected an integer in {lo}..{hi}, got {brief(value)}")
    return int(value)


def choice_key(tiling: Mapping[str, Any], key: str, choices: Sequence[str]) -> str | None:
    """``tiling[key]`` as one of ``choices``, None when absent; else KernelArgError naming ``tiling.<key>``."""
    if key not in tiling:
        return None
    value = tiling[key]
    if not isinstance(value, str) or value not in choices:
        raise KernelArgError(f"argument 'tiling.{key}': expected one of {', '.join(choices)}, got {brief(value)}")
    return value


def unique(candidates: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``candidates`` in order with repeats dropped (the simulator prices each one it is given)."""
    out: list[dict[str, Any]] = []
    for c in candidates:
        if dict(c) not in out:
            out.append(dict(c))
    return out


def tiling_options(ctx: PlanContext, allowed: Mapping[str, Callable[[Any], bool]]) -> dict[str, Any]:
    """The call's ``tiling`` checked against the kernel's ``allowed`` keys (key -> validity test)."""
    given = dict(ctx.tiling or {})
    for key, value in given.items():
        if key not in allowed:
            raise KernelArgError(f"argument 'tiling': unknown key '{key}' (this kernel takes: "
                                 f"{', '.join(sorted(allowed))})")
        if not allowed[key](value):
            raise KernelArgError(f"argument 'tiling.{key}': invalid value {brief(value)}")
    return given
