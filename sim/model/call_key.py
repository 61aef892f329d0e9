"""An exact text of a bound call, for the caches that key on it (plans, tiling choices, the tuning cache).

``repr`` is not one: numpy shortens an array of more than a thousand elements to its ends and prints floats to 8
digits, so two calls whose attributes (a table a user kernel reads at bind time) differ in the middle, or in the
ninth digit, would share a plan.  Here an array is its dtype, shape and a digest of its bytes; a float its exact
hexadecimal form (``-0.0`` is not ``0.0``); a dataclass its type and fields; containers their items; anything else
its ``repr``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
from collections.abc import Mapping
from typing import Any

import numpy as np

#: Deepest nesting followed (a value nested deeper is refused: no attribute of a real call is).
MAX_DEPTH = 64


def exact_text(value: Any, depth: int = 0) -> str:
    """A text that two values share only when they are equal, element by element and bit by bit (see the module's
    doc); ValueError for a value nested deeper than :data:`MAX_DEPTH`."""
    if depth > MAX_DEPTH:
        raise ValueError(f"a value nested more than {MAX_DEPTH} levels deep")
    if value is None or isinstance(value, (bool, int, str, bytes)):
        return f"{type(value).__name__}:{value!r}"
    if isinstance(value, float):
        return f"float:{value.hex()}"
    if isinstance(value, np.ndarray):
        data = np.ascontiguousarray(value)
        return f"ndarray:{data.dtype.str}:{data.shape}:{hashlib.sha256(data.tobytes()).hexdigest()}"
    if isinstance(value, np.generic):
        return f"{type(value).__name__}:{value.tobytes().hex()}"
    if isinstance(value, np.dtype):
        return f"dtype:{value.str}"
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        inner = ",".join(f"{f.name}={exact_text(getattr(value, f.name), depth + 1)}" for f in dataclasses.fields(value))
        return f"{type(value).__qualname__}({inner})"
    if isinstance(value, Mapping):
        items = sorted((exact_text(k, depth + 1), exact_text(v, depth + 1)) for k, v in value.items())
        return "{" + ",".join(f"{k}:{v}" for k, v in items) + "}"
    if isinstance(value, (tuple, list, set, frozenset)):
        parts = [exact_text(v, depth + 1) for v in value]
        if isinstance(value, (set, frozenset)):
            parts.sort()
        return f"{type(value).__name__}[" + ",".join(parts) + "]"
    return f"{type(value).__qualname__}:{value!r}"


def call_key(call: Any) -> str:
    """The exact text of a bound call (its symbol, cores, buffers and attributes) as a short digest."""
    return hashlib.sha256(exact_text(call).encode("utf-8", "surrogatepass")).hexdigest()


#: Numbers kernel states that have no exact text (each such call plans anew).
_UNKEYED = itertools.count()


def kernel_state(kernel: Any) -> str:
    """A digest of a kernel object's own attributes, exact as :func:`exact_text` makes them: a plan may read them,
    so a kernel whose attributes changed between two calls plans again rather than reuse the plan of the old ones.
    A kernel whose attributes have no exact text (nested too deep, or a ``repr`` that raises) gets a text of its
    own each time: never a plan that was not made for it.  One whose text names an object's address (a default
    ``repr``) is marked ``addressed:``: the same within a process, never across processes (the disk's tuning
    cache keys none by it)."""
    try:
        attrs = dict(vars(kernel))
    except TypeError:  # (a class with __slots__)
        attrs = {name: getattr(kernel, name) for name in getattr(type(kernel), "__slots__", ())
                 if isinstance(name, str) and hasattr(kernel, name)}
    try:
        text = type(kernel).__qualname__ + exact_text(attrs)
    except Exception:  # noqa: BLE001 (a user kernel's attribute whose repr raises, or one nested too deep)
        return f"unkeyed:{next(_UNKEYED)}"
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    return f"addressed:{digest}" if " at 0x" in text else digest
