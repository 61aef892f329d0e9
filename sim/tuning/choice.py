"""What a run's tiling choice says (:class:`TilingChoice`) and the choices a simulator remembers per call
(:class:`TilingCache`)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sim.model.call_key import call_key, exact_text, kernel_state
from sim.tuning.limits import LISTED_DROPS


@dataclass(frozen=True)
class TilingChoice:
    """The tiling a run used and how it was chosen.

    ``source`` is ``given`` (the caller named every key), ``cost model`` (the search chose, completing the
    keys in ``fixed`` when the caller named some) or ``kernel`` (the kernel offers one plan only).
    ``candidates`` are the tilings the search planned, each with its cycles (None for one stopped once it
    could no longer tie or left out since its lower bound could not change the pick), and ``notes`` say for
    each why it lost or was not simulated ("" when its cycles say it all); ``dropped`` lists the tilings that
    could not plan, with the reason.  ``simulated`` counts the candidates the search simulated in this
    process (0 for a choice read from the on-disk tuning cache, ``cached`` True then, ``searched`` the day it
    was searched).  ``budget_ended``: the search's plan budget ended its climb at this tiling while the climb was
    still finding cheaper neighbours, so a cheaper tiling may lie a few keys away (forcing keys with ``tiling=``
    looks there); also where the budget cut the climb's last round short.
    """

    tiling: dict | None
    source: str
    candidates: tuple[tuple[dict, int | None], ...] = ()
    tolerance: float = 0.0  # the simulator's tiling_tolerance when the cost model chose
    notes: tuple[str, ...] = ()
    dropped: tuple[tuple[dict, str], ...] = ()
    fixed: dict = field(default_factory=dict)
    # How the choice was reached, not what it is: choices compare equal whether searched or read from disk.
    simulated: int = field(default=0, compare=False)
    cached: bool = field(default=False, compare=False)
    searched: str | None = field(default=None, compare=False)
    budget_ended: bool = field(default=False, compare=False)

    def describe(self) -> str:
        """One line for summaries: the tiling, how it was chosen, and each other candidate by the keys it
        changes."""
        if self.source != "cost model":
            text = f"tiling {self.tiling if self.tiling else 'the kernel default'} ({self.source})"
            return text + self._dropped_text()
        chosen = self.tiling or {}
        priced = []
        for i, (c, cycles) in enumerate(self.candidates):
            note = self.notes[i] if i < len(self.notes) else ""
            if c == chosen:
                cheapest = min((x for _, x in self.candidates if x is not None), default=cycles)
                why = (f" (the fewest tiles within {self.tolerance:.0%} of the cheapest)"
                       if cycles is not None and cheapest is not None and cycles > cheapest else "")
                priced.append((f"this one {cycles}" if cycles is not None else "this one") + why)
                continue
            text = f"{_changes(c, chosen)} {cycles}" if cycles is not None else _changes(c, chosen)
            priced.append(f"{text} ({note})" if note else text)
        given = f" with {self.fixed} given" if self.fixed else ""
        among = f"the cost model{given} among {len(self.candidates)} candidates"
        how = (f"from the tuning cache (searched{' on ' + self.searched if self.searched else ''}: chosen by {among}"
               if self.cached else f"chosen by {among}")
        ended = ("; the search's budget ended its climb here, still descending: a cheaper tiling may lie a few keys "
                 "away" if self.budget_ended else "")
        return (f"tiling {chosen} {how} ({'; '.join(priced)}{self._dropped_text('; ')}{ended})"
                + (")" if self.cached else ""))

    def _dropped_text(self, sep: str = "; ") -> str:
        if not self.dropped:
            return ""
        shown = "; ".join(f"{_changes(c, self.tiling or {})}: {reason}" for c, reason in self.dropped[:LISTED_DROPS])
        more = f" and {len(self.dropped) - LISTED_DROPS} more" if len(self.dropped) > LISTED_DROPS else ""
        return f"{sep}{len(self.dropped)} dropped: {shown}{more}"


def _changes(tiling: Mapping[str, Any], base: Mapping[str, Any]) -> str:
    """``tiling`` by the keys in which it differs from ``base`` (all of it when ``base`` is empty)."""
    diff = {k: v for k, v in tiling.items() if base.get(k) != v} if base else dict(tiling)
    return "{" + ", ".join(f"{k}: {v}" for k, v in diff.items()) + "}"


#: Choices a simulator remembers (the least recently used forgotten first): a sweep of distinct calls keeps a
#: couple of kilobytes each, bounded.
MAX_CHOICES = 4096


class TilingCache:
    """The tilings already chosen, per (symbol, bound call, fixed keys, tolerance): a repeated call chooses
    without listing or pricing its candidates again (at most :data:`MAX_CHOICES`, the least recently used
    forgotten first)."""

    def __init__(self) -> None:
        self._choices: OrderedDict[tuple[str, str, str, float], TilingChoice] = OrderedDict()

    @staticmethod
    def _key(symbol: str, call: Any, fixed: Mapping[str, Any], tolerance: float,
             kernel: Any) -> tuple[str, str, str, float]:
        return symbol, call_key(call) + "|" + kernel_state(kernel), exact_text(sorted(fixed.items())), tolerance

    def get(self, symbol: str, call: Any, tolerance: float, fixed: Mapping[str, Any] | None = None, *,
            kernel: Any) -> TilingChoice | None:
        """The choice made for this call of ``kernel`` (as its attributes are now) before, or None."""
        key = self._key(symbol, call, fixed or {}, tolerance, kernel)
        got = self._choices.get(key)
        if got is not None:
            self._choices.move_to_end(key)
        return got

    def put(self, symbol: str, call: Any, tolerance: float, choice: TilingChoice,
            fixed: Mapping[str, Any] | None = None, *, kernel: Any) -> None:
        """Remember ``choice`` for this call of ``kernel``."""
        key = self._key(symbol, call, fixed or {}, tolerance, kernel)
        self._choices[key] = choice
        self._choices.move_to_end(key)
        while len(self._choices) > MAX_CHOICES:
            self._choices.popitem(last=False)

    def clear(self) -> None:
        """Forget every choice."""
        self._choices.clear()
