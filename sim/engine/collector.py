"""Python's cyclic garbage collector paused while a call builds and simulates its plans, and the call's survivors
handed to its oldest generation afterwards.

A large plan is hundreds of thousands of small objects (tiles, transfers, operands) made in one go and kept;
the collector's full passes walk all of them again and again while they are made (half the build time of a
64x112x112x64 batch-norm plan), yet find nothing to free: plans and runs hold no reference cycles.  Pausing it
for the call, and letting it run again afterwards, changes no result.  The pause is process-wide, so it
nests and is shared by threads: the collector comes back when the last paused call ends, and only if it was
on before the first began.

Coming back, the collector would find every object the call made and kept (its plan, run and trace: a million
for an 8-core GEMM of 2048 a side) in its youngest generation, and walk them all at its next young pass and
again at the next middle one (a second on that GEMM, a quarter of its call), to free nothing.  So when the pause
ends the objects it tracks move to its oldest generation unwalked (``gc.freeze`` then ``gc.unfreeze``, two list
splices), unless something froze objects already (a user preparing a fork: unfreezing would undo it), or the call
made fewer than :data:`PROMOTE_FLOOR` (the collector's own young pass then walks them, and frees the caller's
dropped cycles on its way: promoted, those would wait for a full pass).  What a
call leaves for the cyclic collector is a few hundred to a few thousand objects (a run's engine graph, the
search's planners), now collected by a full pass only; the collector's own rule for full passes counts only
objects it promoted itself, so this module runs one when the objects it promoted since the last full pass
outnumber those alive after it (at least :data:`FULL_PASS_FLOOR`): each object is walked about once per
doubling of the heap, and a call's leftovers wait for at most that.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

#: Objects promoted since the last full pass below which no full pass is run whatever the heap (a fresh process
#: tracks about 150,000; an 8-core GEMM of 2048 a side keeps a million): the leftovers waiting for a full pass
#: are at most this many objects (a few hundred MB at worst), and a plan up to this size is never walked in its
#: own call.
FULL_PASS_FLOOR = 2_000_000

#: Objects a call made and kept below which nothing is promoted: the collector's next young pass walks them (a few
#: milliseconds at most) and frees, with them, whatever reference cycles the caller dropped meanwhile; promoted,
#: those would wait for a full pass (a loop of small calls, each dropping a simulator held in a cycle, would keep
#: every simulator's memory until then).
PROMOTE_FLOOR = 100_000

_lock = threading.Lock()
_depth = 0
_was_enabled = False
_promoted_since_full = 0
_alive_after_full = 0


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Run the block with the cyclic garbage collector off (as it was before, afterwards); what the block made
    and kept goes to the collector's oldest generation (the module's docstring)."""
    global _depth, _was_enabled
    with _lock:
        if _depth == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _was_enabled:
                try:
                    _promote_survivors()
                finally:  # (a Ctrl-C during its full pass must not leave the collector off for good)
                    gc.enable()


def _promote_survivors() -> None:
    """Move every tracked object to the oldest generation without a pass, and run a full pass once the objects
    moved so since the last one outnumber those alive after it."""
    global _promoted_since_full, _alive_after_full
    if gc.get_freeze_count():
        return  # someone froze objects on purpose: gc.unfreeze() would release theirs too
    # The youngest generation's count is the objects made and kept since its last pass: the call's, mostly.
    made = gc.get_count()[0]
    if made < PROMOTE_FLOOR:
        return  # a small call: the collector's own young pass walks it soon, and frees the caller's cycles with it
    _promoted_since_full += made
    gc.freeze()
    gc.unfreeze()
    if _promoted_since_full > max(FULL_PASS_FLOOR, _alive_after_full):
        gc.collect()
        _alive_after_full = len(gc.get_objects())
        _promoted_since_full = 0


def collect_now() -> None:
    """Run the full pass that :func:`collector_paused` would run once enough objects were promoted, now (a process
    about to time something pays the pass before rather than inside it); the count towards the next starts
    again."""
    global _promoted_since_full, _alive_after_full
    with _lock:
        gc.collect()
        _alive_after_full = len(gc.get_objects())
        _promoted_since_full = 0
