"""Why a tiling cannot plan, in words: a dropped candidate's reason, the plan-size budget, the checks a tiling
passes without being planned, the nearest values that fit, and the error of a search none of whose candidates
plans."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sim.errors import KernelArgError, LayoutError, PlanError, SimError, detached
from sim.model.plan import DoesNotFit
from sim.model.tiling import IntKey, TilingSpace
from sim.tuning.limits import LISTED_DROPS, MAX_COMPLETIONS, MAX_PLAN_TILES


def reason_of(e: SimError) -> str:
    """A dropped candidate's reason in one short line (a tiling that does not fit: the level and the bytes over
    first)."""
    if isinstance(e, DoesNotFit):
        level = e.resource or "vector level"
        return _short(f"{level}: {max(0, e.needed_bytes - e.available_bytes)} bytes over ({e})")
    return _short(str(e))


def _short(text: str, limit: int = 240) -> str:
    """``text`` on one line, at most ``limit`` characters."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def tiles_refusal(space: TilingSpace, tiling: Mapping[str, Any], *, hint: bool = True) -> str | None:
    """Why ``tiling`` plans too many tiles, or None: within the budget.  With ``hint``, naming the key to raise:
    the one whose value, among those the space offers that fit, cuts the most tiles (the search's prefilter asks
    without: it refuses thousands of tilings, and only the few its error lists need the key)."""
    if space.tiles is None:
        return None
    count = space.tiles(dict(tiling))
    if count <= MAX_PLAN_TILES:
        return None
    blame, fewest = None, count
    for key in space.keys.values() if hint else ():
        if not isinstance(key, IntKey) or key.name not in tiling:
            continue
        for v in (key.hi, *key.candidates(tiling)):
            try:
                n = space.tiles({**tiling, key.name: v})
                if n < fewest and space.fit is not None:
                    space.fit({**tiling, key.name: v})  # a value that does not fit is no way out
            except SimError:
                continue
            if n < fewest:
                blame, fewest = key.name, n
    raise_key = (f": raise tiling.{blame} (now {tiling[blame]})" if blame is not None
                 else ": no one key's value that fits plans fewer (leave keys out for the search to choose them)"
                 if hint else "")
    return (f"the tiling plans up to {count} tiles (the kernel's count without planning: an upper bound), more "
            f"than the {MAX_PLAN_TILES} a plan may have (sim.tuning.MAX_PLAN_TILES){raise_key}")


def prefilter(space: TilingSpace, tiling: dict) -> SimError | None:
    """Why a full ``tiling`` cannot plan, found without planning it (the space's ``tiles`` and ``fit``: a
    KernelArgError beyond the plan-size budget, the DoesNotFit of the level it overflows), or None."""
    try:
        too_many = tiles_refusal(space, tiling, hint=False)
    except KernelArgError as e:  # (a caller's value outside this completion's range: a formulation whose
        return detached(e)  # keys mean something else, say)
    if too_many is not None:
        return KernelArgError(f"argument 'tiling': {too_many}")
    if space.fit is not None:
        try:
            space.fit(dict(tiling))
        except (DoesNotFit, KernelArgError) as e:
            return detached(e)
    return None


def _reason_with_hint(space: TilingSpace, tiling: Mapping[str, Any], e: SimError) -> str:
    """A listed miss's reason: beyond the plan-size budget, with the key to raise (the prefilter's has none)."""
    too_many = tiles_refusal(space, tiling) if isinstance(e, KernelArgError) else None
    return _short(too_many) if too_many is not None else reason_of(e)


def _tiles_or_zero(space: TilingSpace, tiling: Mapping[str, Any]) -> int:
    """The tiles ``tiling`` plans by the space's count (0 when it has none or cannot count them)."""
    if space.tiles is None:
        return 0
    try:
        return space.tiles(dict(tiling))
    except SimError:
        return 0


def _over(e: SimError) -> int:
    """Bytes a tiling is over its staging level by (a large number for other reasons)."""
    if isinstance(e, DoesNotFit):
        return max(0, e.needed_bytes - e.available_bytes)
    return 1 << 62


def nearest_fitting(space: TilingSpace, tiling: Mapping[str, Any], key: str) -> Any | None:
    """The value of ``key`` nearest to ``tiling``'s that fits with the other keys as they are (by the space's
    ``fit``), or None."""
    k = space.keys.get(key)
    if space.fit is None or not isinstance(k, IntKey) or key not in tiling:
        return None  # a choice key's other choices bring other keys: no "nearest value" of it
    now = tiling[key]
    probes = set(k.candidates(tiling))
    v = now
    while v > k.lo:
        v = max(k.lo, v // 2)
        probes.add(v)
    v = now
    while v < k.hi:
        v = min(k.hi, v * 2)
        probes.add(v)
    for v in sorted(probes - {now}, key=lambda x: (abs(x - now), x)):
        try:
            space.fit({**tiling, key: v})
        except (DoesNotFit, KernelArgError):
            continue
        if tiles_refusal(space, {**tiling, key: v}, hint=False) is None:
            return v
    return None


def fit_hint(space: TilingSpace, tiling: Mapping[str, Any]) -> str:
    """For a tiling that does not fit: the keys to change and their nearest values that fit ("" if none)."""
    hints = []
    for key in tiling:
        v = nearest_fitting(space, tiling, key)
        if v is not None:
            hints.append(f"{key}={v}")
    return f"; the nearest that fit: {' or '.join(hints)}" if hints else ""


def _blocking_key(space: TilingSpace, fixed: Mapping[str, Any]) -> KernelArgError | None:
    """The refusal naming the first of the caller's keys (in the space's order) whose value leaves no tiling with
    the keys before it, and the values the space offers it there; None if each leaves some."""
    before: dict[str, Any] = {}
    for key, value in fixed.items():
        if space.completions({**before, key: value}, 1)[0]:
            before[key] = value
            continue
        offered = list(dict.fromkeys(t[key] for t in space.completions(before, MAX_COMPLETIONS)[0] if key in t))
        with_before = f" with {before} given" if before else ""
        return KernelArgError(
            f"argument 'tiling.{key}': the kernel's tiling space offers no tiling with {key} {value!r} for this "
            f"call{with_before} (its values here: {', '.join(repr(v) for v in offered) or 'none'}; with the keys "
            f"it leaves without a value given too, the tiling is planned as given and the plan says why it cannot)")
    return None


def no_candidate_error(space: TilingSpace, fixed: Mapping[str, Any],
                       errors: Sequence[tuple[dict, SimError]]) -> SimError:
    """The error of a search none of whose candidates plans: the nearest misses (fewest bytes over first), each
    with its reason, and the key to change."""
    # (a caller who gave no tiling asked for none: the call as a whole is what no tiling plans)
    blamed = "argument 'tiling'" if fixed else "the call (no tiling given)"
    if not errors:
        blocking = _blocking_key(space, fixed)
        if blocking is not None:
            return blocking
        given = f" with {dict(fixed)} given" if fixed else ""
        return KernelArgError(f"{blamed}: the kernel's tiling space has no tiling{given}")
    # Fewest bytes over first; among tilings refused for other reasons (the plan-size budget), fewest tiles first.
    ranked = sorted(errors, key=lambda te: (_over(te[1]), _tiles_or_zero(space, te[0])))
    first_t, first_e = ranked[0]
    if isinstance(first_e, PlanError):  # a kernel whose plans break the IR's rules: the rule, where, as it is
        return PlanError(first_e.rule, f"{first_e.detail} (with tiling {first_t}; every one of the {len(errors)} "
                                       f"tilings tried fails)", kernel=first_e.kernel, core=first_e.core,
                         tile=first_e.tile, phase=first_e.phase)
    misses = "; ".join(f"{t}: {_reason_with_hint(space, t, e)}" for t, e in ranked[:LISTED_DROPS])
    text = (f"no tiling{' with ' + str(dict(fixed)) + ' given' if fixed else ''} of the kernel's space plans "
            f"({len(errors)} tried); nearest misses: {misses}{fit_hint(space, first_t)}")
    if isinstance(first_e, DoesNotFit):
        return DoesNotFit(first_e.resource, first_e.needed_bytes, first_e.available_bytes, text)
    if isinstance(first_e, LayoutError) and getattr(first_e, "violations", None):
        return first_e
    return KernelArgError(f"{blamed}: {text}")
