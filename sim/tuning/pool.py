"""The completions of a caller's keys in a tiling space, each checked for fit (:func:`prefilter`) only when the
search first looks at it: a climb looks at a few of thousands."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from sim.errors import SimError
from sim.model.tiling import TilingSpace
from sim.tuning.limits import MAX_COMPLETIONS
from sim.tuning.misses import prefilter, reason_of


class Pool:
    """The completions of ``fixed`` in ``space`` (the kernel's order of preference; at most
    :data:`~sim.tuning.limits.MAX_COMPLETIONS` of each formulation the search climbs through), the verdict of each
    one looked at, and those that cannot plan with the reason (``dropped``) and the error (``errors``)."""

    def __init__(self, space: TilingSpace, fixed: Mapping[str, Any]):
        self.space = space
        self.tilings, _ = space.completions(fixed, MAX_COMPLETIONS)
        # A space of several formulations lists the first's completions first: past the limit, the others' would
        # be missing, and their climbs (sim.tuning.search) would have nowhere to go.  Each has a limit of its own.
        # So has each of the space's starts: a start is a few keys' values the enumeration may reach only past the
        # limit (512 x 512 x 1024 on eight FT78NE cores: with 8-row micro-kernels among the values, B broadcast on
        # split m with A from memory came after the 4,096th, and the start the pick of the shape had been was
        # never priced).
        seen = {repr(t) for t in self.tilings}
        starts = [(start, True) for start in space.starts]
        for alternative, offered in [(a, False) for a in space.alternatives] + starts:
            if any(k in fixed and fixed[k] != v for k, v in alternative.items()):
                continue
            for t in space.completions({**fixed, **alternative}, MAX_COMPLETIONS)[0]:
                # (a start's values given to the completions are taken as a caller's would be: only the tilings
                # the space offers with them, as the search's own enumeration would reach them; and no tiling with
                # a key that does not apply to its choices, a start or formulation's key of another one's `only`)
                if (offered and not space.offers(t, fixed)) or any(not space.applies(space.keys[k], t) for k in t):
                    continue
                if repr(t) not in seen:
                    seen.add(repr(t))
                    self.tilings.append(t)
        self.dropped: list[tuple[dict, str]] = []
        self.errors: list[tuple[dict, SimError]] = []
        self._fits: dict[int, bool] = {}  # index into tilings -> whether it passed the prefilter
        self._by_value: dict[str, dict[Any, list[int]]] = {}  # key -> its values -> the tilings having each

    def fits(self, i: int) -> bool:
        """Whether tiling ``i`` passes the prefilter (checked once; a misfit is dropped with its reason)."""
        got = self._fits.get(i)
        if got is None:
            why = prefilter(self.space, self.tilings[i])
            got = self._fits[i] = why is None
            if why is not None:
                self.dropped.append((self.tilings[i], reason_of(why)))
                self.errors.append((self.tilings[i], why))
        return got

    def by_value(self, key: str) -> dict[Any, list[int]]:
        """The values of ``key`` among the tilings that set it, in order of first appearance, each with the
        indices of those tilings in order (worked out once per key: a climb asks at every step)."""
        got = self._by_value.get(key)
        if got is None:
            got = self._by_value[key] = {}
            for i, t in enumerate(self.tilings):
                if key in t:
                    got.setdefault(t[key], []).append(i)
        return got

    def fitting(self) -> Iterator[dict]:
        """The tilings that pass the prefilter, in order, each checked as the iteration reaches it."""
        return (t for i, t in enumerate(self.tilings) if self.fits(i))

    def at_most(self, n: int) -> list[dict] | None:
        """All the fitting tilings if there are at most ``n`` of them, else None (checked until the n+1-th)."""
        out: list[dict] = []
        for t in self.fitting():
            if len(out) == n:
                return None
            out.append(t)
        return out
