"""Choosing a tiling: "the cost model" names this module and only this.

A kernel declares its tiling space (:class:`sim.model.tiling.TilingSpace`: keys, the values worth trying,
what must hold for a tiling to fit, how many tiles it plans); the search here owns every choice.  It completes
the keys the caller fixed (none, some, or all), drops what does not fit or breaks a plan rule (listed with
the reason), prices the rest with timing-only simulations (the engine moves no bytes and runs no numerics,
so memory is untouched) and picks: candidates within the tolerance of the cheapest tie, and the tie goes to
the fewest tiles.

How much it plans: a space of at most :data:`EXHAUSTIVE_CANDIDATES` fitting tilings is planned whole, and so is one
with a ``bound`` and at most :data:`EXHAUSTIVE_BOUNDED_CANDIDATES` (lowest bound first, the rest left unplanned once
the cheapest is out of their reach); a larger one is searched from the kernel's preferred tiling by steps of one key
(each round plans the best tiling's neighbours: the same tiling with another choice of one key, or the next smaller
or larger value of one integer key whose bound leaves it a chance), until the best is its own best neighbour or
:data:`MAX_PLANNED` tilings are planned (those left unplanned by their bound not counted; up to twice as many while
the plans made hold fewer than :data:`PLANNED_TILES_FLOOR` tiles in all); then, for each of the space's ``starts``
(an algorithm two choices away), the tiling of it nearest the climb's end is priced (even past the budget; where its
bound leaves it out, the algorithm's tiling of the lowest bound among the first few), and the climb goes on from it,
:data:`MAX_STARTED` tilings more at most, if it is the cheapest; and for each of its ``alternatives`` (a formulation
whose keys mean something else), a climb of its own among that formulation's tilings, from its tiling nearest the
first climb's end and from its preferred one (where its bound leaves both out, from its tiling of the lowest bound
among the first few), with a budget of its own.
Planned candidates are simulated fewest tiles first; one still running when it can no longer tie is stopped there,
and a round ends as soon as no candidate left can change the pick by a lower bound of any run of it
(:func:`sim.timing.run_lower_bound_cycles`): on a DDR-bound layer, a candidate with smaller tiles moves the same
bytes, cannot beat the first by more than the tolerance, and is never simulated. A space with a ``bound`` from the
tiling alone has each round planned lowest bound first, one candidate at a time, and a tiling whose bound cannot
come within the tolerance of the cheapest is not even planned. Tilings are checked for fit only when the search
looks at them (:class:`Pool`), and a shipped kernel's candidates are simulated unchecked (a user kernel's are
checked first: the planner's): the pick's plan is checked before the choice stands (one that breaks a rule is
dropped and the pick made again). A priced candidate whose run beats its ``bound`` is the kernel's error
(``tiling-space``: a bound must be a lower bound). :class:`TilingChoice` records what was chosen and how;
:class:`TilingCache` remembers choices per call (and :mod:`sim.files.tuning_cache` across processes).
"""

from sim.tuning.choice import TilingCache, TilingChoice
from sim.tuning.limits import (
    EXHAUSTIVE_BOUNDED_CANDIDATES,
    EXHAUSTIVE_CANDIDATES,
    EXHAUSTIVE_SMALL_CANDIDATES,
    LISTED_DROPS,
    MAX_COMPLETIONS,
    MAX_PLAN_TILES,
    MAX_PLANNED,
    MAX_STARTED,
    MAX_TILING_CANDIDATES,
    PLANNED_TILES_FLOOR,
    TILING_TOLERANCE,
)
from sim.tuning.misses import fit_hint, nearest_fitting, no_candidate_error, prefilter, reason_of, tiles_refusal
from sim.tuning.pool import Pool
from sim.tuning.pricing import Candidate, Planner, Progress, choose_tiling
from sim.tuning.search import SearchResult, neighbours, search

__all__ = ["TilingCache", "TilingChoice", "EXHAUSTIVE_BOUNDED_CANDIDATES", "EXHAUSTIVE_CANDIDATES",
           "EXHAUSTIVE_SMALL_CANDIDATES", "LISTED_DROPS",
           "MAX_COMPLETIONS", "MAX_PLAN_TILES", "MAX_PLANNED", "MAX_STARTED", "MAX_TILING_CANDIDATES",
           "PLANNED_TILES_FLOOR",
           "TILING_TOLERANCE", "fit_hint", "nearest_fitting", "no_candidate_error", "prefilter",
           "reason_of", "tiles_refusal", "Candidate", "Planner", "Progress", "choose_tiling", "Pool",
           "SearchResult", "neighbours", "search"]
