"""fp16 widened to fp32 by table look-up: numpy's own conversion of each of the 65536 fp16 bit patterns, done
once and looked up (numpy's astype converts fp16 element by element: about twice as slow as a gather)."""

from __future__ import annotations

import functools
import threading

import numpy as np

F16, F32 = np.dtype(np.float16), np.dtype(np.float32)


@functools.cache
def _fp32_of_every_fp16() -> np.ndarray:
    table = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(F16).astype(F32)
    table.flags.writeable = False
    return table


def widened(a: np.ndarray) -> np.ndarray:
    """``a``'s fp32 values, bit for bit as ``a.astype(np.float32)``: ``a`` itself when it is fp32, a new array
    otherwise (fp16 through the table)."""
    if a.dtype == F16:
        return _fp32_of_every_fp16().take(a.view(np.uint16), mode="clip")  # clip: no bounds check (none is out)
    return a.astype(F32, copy=False)


#: How many fp16 operands :func:`widened_again` remembers per thread, and the largest it remembers (bytes).
_KEPT_OPERANDS = 16
_KEPT_MAX_BYTES = 1 << 18
_kept = threading.local()


def widened_again(a: np.ndarray) -> np.ndarray:
    """:func:`widened`, for an operand that tiles read again unchanged (GEMM's B block, staged once for a row of
    panels): the fp32 values of the same array with the same bytes as the last few widened this way are those
    widened then, so they are looked up rather than widened again (a copy and a compare of the bytes instead of a
    gather per element).  What decides is the bytes the array holds now, compared whole: memory written in between
    (another transfer into the buffer, a layout that overlaps it) widens afresh.  The result is read-only (it may
    be shared): a caller that changes it in place takes :func:`widened`."""
    if a.dtype != F16 or a.nbytes > _KEPT_MAX_BYTES:
        return widened(a)
    kept: dict[int, tuple[tuple[int, ...], bytes, np.ndarray]] | None = getattr(_kept, "operands", None)
    if kept is None:
        kept = _kept.operands = {}
    raw = a.tobytes()
    # (keyed by the array object, which a replay passes again for the same buffer; the key only finds a candidate,
    # the shape and the bytes decide)
    got = kept.pop(id(a), None)
    if got is not None and got[0] == a.shape and got[1] == raw:
        kept[id(a)] = got  # (most recently used last)
        return got[2]
    wide = widened(a)
    wide.flags.writeable = False
    kept[id(a)] = (a.shape, raw, wide)
    if len(kept) > _KEPT_OPERANDS:
        del kept[next(iter(kept))]
    return wide
