"""Python's cyclic garbage collector paused while a call builds and simulates its plans.

A large plan is hundreds of thousands of small objects (tiles, transfers, operands) made in one go and kept;
the collector's full passes walk all of them again and again while they are made (half the build time of a
64x112x112x64 batch-norm plan), yet find nothing to free: plans and runs hold no reference cycles.  Pausing it
for the call, and letting it run again afterwards, changes no result.  The pause is process-wide, so it
nests and is shared by threads: the collector comes back when the last paused call ends, and only if it was
on before the first began.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

_lock = threading.Lock()
_depth = 0
_was_enabled = False


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Run the block with the cyclic garbage collector off (as it was before, afterwards)."""
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
                gc.enable()
