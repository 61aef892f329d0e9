"""The numbers that bound a tiling search: the tolerance of its choice, the plan-size budget, how much it plans."""

from __future__ import annotations

#: Candidate tilings whose cycles are within this fraction of the cheapest count as tied; a tie goes to the
#: candidate with the fewest tiles.  The model is cycle-approximate: a fraction of a percent separates
#: tilings that differ only in how long the first load and the last store stay exposed, while fewer tiles
#: mean fewer DMA descriptors on the chip and a several times faster simulation.  The one tolerance of every
#: choice the simulator makes between tilings (a compute's loops are picked strictly cheapest:
#: :func:`sim.timing.cheapest_loops`).
TILING_TOLERANCE = 0.01
#: Most tiles a plan may have: a tiling beyond it is refused before it is planned (a plan costs a few KB of
#: memory and a few microseconds of simulation per tile; the largest shipped and benchmark plans have a few
#: thousand).
MAX_PLAN_TILES = 100_000
#: Most tilings a search takes from a space (the kernel's order of preference decides which).
MAX_COMPLETIONS = 4096
#: A space with at most this many fitting tilings is planned whole; a larger one is searched key by key.
EXHAUSTIVE_CANDIDATES = 6
#: ... and a space with a ``bound`` (a lower bound of a tiling's cycles, known before planning it) with at most this
#: many: its tilings are planned lowest bound first and those the cheapest leaves behind never are, so the whole of
#: a small space costs about what a climb through it does, and finds what a climb's steps of one key miss (slices
#: whose input and output channels move together: Conv2DBackpropFilter on five FT78NE cores, up to 38 %).
EXHAUSTIVE_BOUNDED_CANDIDATES = 32
#: ... and a space without a bound whose tilings, at most this many, hold fewer than :data:`PLANNED_TILES_FLOOR`
#: tiles in all (BatchNormGrad's pools of 7 to 15 on small calls, whose climb's one step into the channel split
#: missed blocks up to 13.5 % faster); more of them would price every candidate of a tiny call (a depthwise
#: gradient's 24 tilings of 6 tiles each: 0.5 s where its climb takes 0.13).
EXHAUSTIVE_SMALL_CANDIDATES = 16
#: Most candidates one search plans (the kernel's preferred tiling and its neighbours, round after round); a tiling
#: left unplanned by its bound from the tiling alone costs that bound only and is not counted.
MAX_PLANNED = 20
#: Most candidates a climb from one of a space's ``starts`` plans beyond :data:`MAX_PLANNED` (when that start's
#: tiling nearest the first climb's end wins; each start's tiling is priced even past the budget).
MAX_STARTED = MAX_PLANNED // 2
#: ... unless its candidates are small: a budget (:data:`MAX_PLANNED`, a start's or a formulation's) goes on, up to
#: twice its candidates, while the tilings the search has planned hold fewer tiles than this in all.  A
#: candidate's cost grows with its tiles (a few tens of microseconds each in planning, the check and the
#: simulation), so twenty plans of a few hundred tiles cost a fraction of what one large search does, and their
#: climb is the one a budget cut short (256 x 256 x 1024 with A transposed on eight FT78NE cores: 20 plans of 120
#: to 818 tiles, 151,741 cycles; five more reach 136,856).
PLANNED_TILES_FLOOR = 10_000
#: Most dropped candidates a summary or an error lists by name (the others are counted).
LISTED_DROPS = 3
#: Candidate tilings taken from a kernel's older ``tilings()`` list at most (those it lists beyond are ignored),
#: so that a generator that never ends still ends the search.
MAX_TILING_CANDIDATES = 1024
