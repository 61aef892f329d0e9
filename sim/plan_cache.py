"""The plans a simulator keeps (:class:`PlanCache`): per (bound call, tiling), each with what runs of it remember
(:class:`CachedPlan`: its roofline, its simulated timing, whether it passed the plan check)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sim.engine.engine import SimulatedTiming
from sim.model.call import BoundCall
from sim.model.call_key import call_key, exact_text, kernel_state
from sim.model.plan import Plan
from sim.model.target import Target
from sim.timing import Roofline, roofline

#: Plans a simulator keeps for calls it may see again (least recently used dropped first).
PLAN_CACHE_SIZE = 16


@dataclass
class CachedPlan:
    """A plan the simulator keeps, with what runs of it remember: its roofline once computed, its timing once
    simulated.  (What is worked out per transfer, loop and compute is remembered by value, :mod:`sim.model.memo`.)"""

    plan: Plan
    _roofline: Roofline | None = None
    # The plan's timing once simulated (timing never depends on the bytes): a later call of the same plan
    # reuses it, and a full one only replays its effects on memory.
    timing: SimulatedTiming | None = None
    checked: bool = False  # passed the plan check (sim.model.plan_check)

    def roofline(self, target: Target) -> Roofline:
        """The plan's roofline on ``target``, computed once."""
        if self._roofline is None:
            self._roofline = roofline(self.plan, target)
        return self._roofline


class PlanCache:
    """The plans of recent calls by (bound call, tiling), least recently used dropped first: a repeated call,
    or a sweep point, skips planning."""

    def __init__(self, size: int = PLAN_CACHE_SIZE):
        self.size = size
        self._plans: OrderedDict[str, CachedPlan] = OrderedDict()

    @staticmethod
    def key(call: BoundCall, tiling: Mapping[str, Any] | None, kernel: Any) -> str:
        """A plan is a function of the bound call (its buffers, attributes, cores), the tiling and the kernel
        object's own attributes only (:func:`~sim.model.call_key.kernel_state`)."""
        return call_key(call) + "|" + exact_text(sorted((tiling or {}).items())) + "|" + kernel_state(kernel)

    def get(self, key: str) -> CachedPlan | None:
        """The entry under ``key`` (now the most recently used), or None."""
        entry = self._plans.get(key)
        if entry is not None:
            self._plans.move_to_end(key)
        return entry

    def put(self, key: str, plan: Plan) -> CachedPlan:
        """Keep ``plan`` under ``key``; returns its entry."""
        entry = self._plans[key] = CachedPlan(plan)
        if len(self._plans) > self.size:
            self._plans.popitem(last=False)
        return entry

    def discard(self, key: str) -> None:
        """Forget the entry under ``key``, if any."""
        self._plans.pop(key, None)

    def clear(self) -> None:
        """Forget every plan."""
        self._plans.clear()
