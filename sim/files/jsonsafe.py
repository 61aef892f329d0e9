"""The one strict JSON reader of dspsim: traces read back, tuning-cache entries, the ``args`` of measurements.

``json.loads`` on its own

* raises ``RecursionError`` on a few thousand ``[`` (and takes any nesting below that);
* reads ``NaN``, ``Infinity`` and ``1e400`` (which becomes ``inf``) as numbers;
* spends quadratic time on an integer of thousands of digits, and refuses one of more than 4300 digits with a
  ``ValueError`` whose message quotes no position;
* keeps the last of two equal keys without a word.

This module turns each of those into the caller's :class:`~sim.errors.SimError` subclass on one short line
naming the file.  Its rules: nesting at most ``max_depth`` levels (the caller's, :data:`MAX_DEPTH` by default);
integers of at most :data:`MAX_INT_DIGITS` digits; floats finite (``NaN``, ``Infinity``, and literals beyond
the float range are refused); no key twice in one object (unless the caller lets the last win); strings valid
Unicode (an escaped lone surrogate such as ``"\\ud800"`` cannot be printed).  Ranges that depend on the
meaning of a value (a cycle count, a core) are the caller's to check (:mod:`sim.files.fields`).

The checks cost little beside ``json`` itself: the text is searched for digit runs and surrogate escapes (at
the speed of ``re``) before the hooks that need them are passed, and the nesting is measured level by level.

Use :func:`read_json_file` for a file (regular files only, at most the caller's number of bytes, UTF-8: see
:mod:`sim.files.regular_file`) and :func:`load_json` for text already in memory.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from sim.errors import SimError, brief
from sim.files.regular_file import read_text_file
from sim.files.yamlsafe import MAX_INT_DIGITS

#: Deepest nesting a JSON document may have unless its reader says otherwise (a trace needs 5 levels).
MAX_DEPTH = 32


class _Refused(Exception):
    """A value the strict reader refuses while ``json`` parses (raised from its hooks)."""


def _parse_int(text: str) -> int:
    digits = len(text) - text.startswith("-")
    if digits > MAX_INT_DIGITS:  # checked before int(): its time grows with the square of the digits
        raise _Refused(f"an integer of {digits} digits: more than any value of a dspsim file "
                       f"(at most {MAX_INT_DIGITS})")
    return int(text)


def _parse_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _Refused(f"the number {brief(text, 40)[1:-1]} is beyond the range of a float")
    return value


def _parse_constant(name: str) -> float:
    raise _Refused(f"{name} is not a number dspsim reads (JSON has no NaN or infinity)")


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _Refused(f"duplicate key {brief(key, 60)} in one object")
            seen.add(key)
    return out


#: A ``\\uD800``-``\\uDFFF`` escape: only these make strings that are not valid Unicode (text decoded from UTF-8
#: holds no surrogate otherwise), so the strings are checked only when the text has one.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
#: A run of more digits than an integer may have (found at the speed of ``re``, before parsing).
_LONG_DIGITS = re.compile(f"[0-9]{{{MAX_INT_DIGITS + 1}}}")


def _too_deep(doc: Any, max_depth: int) -> bool:
    """Whether ``doc`` nests deeper than ``max_depth``: walked level by level, containers only, no recursion
    (a trace of 100,000 events takes well under a second)."""
    level, depth = [doc], 1
    while level:
        if depth > max_depth:
            return True
        below: list[Any] = []
        for node in level:
            if type(node) is dict or type(node) is list:
                children = node.values() if type(node) is dict else node
                below += [v for v in children if type(v) is dict or type(v) is list]
        level, depth = below, depth + 1
    return False


def _invalid_text(doc: Any) -> str | None:
    """The first string (key or value) of ``doc`` that is not valid Unicode, or None."""
    stack = [doc]
    while stack:
        node = stack.pop()
        if isinstance(node, str):
            try:
                node.encode("utf-8")
            except UnicodeEncodeError:
                return node
        elif isinstance(node, dict):
            stack.extend(node)
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return None


def plain_scalar(value: Any) -> Any:
    """``json.dumps``'s ``default`` for the numbers a plan may state as numpy scalars (a user kernel's core numbers,
    tile ids and addresses may be numpy ints, which the plan check accepts): their Python value."""
    import numpy as np

    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    raise TypeError(f"{type(value).__name__} is not a JSON value")


def load_json(text: str, where: str, error: type[SimError], max_depth: int = MAX_DEPTH,
              non_finite: bool = False, unique_keys: bool = True) -> Any:
    """Parse the JSON document ``text`` strictly (see the module docstring); ``error`` naming ``where`` when it
    is refused.  For a file dspsim wrote itself: ``non_finite`` takes ``NaN`` and the infinities, as Python's
    ``json.dumps`` writes them (a sweep's journal); ``unique_keys=False`` lets the last of two equal keys win,
    as ``json`` does, and saves a call per object (a trace of a hundred thousand events)."""
    hooks: dict[str, Any] = {} if non_finite else {"parse_float": _parse_float, "parse_constant": _parse_constant}
    if unique_keys:
        hooks["object_pairs_hook"] = _object
    if _LONG_DIGITS.search(text):  # only then can an integer be too long: the hook costs a call per integer
        hooks["parse_int"] = _parse_int
    try:
        doc = json.loads(text, **hooks)
    except _Refused as e:
        raise error(f"{where}: {e}") from None
    except json.JSONDecodeError as e:
        raise error(f"{where}: not valid JSON: {e.msg} (line {e.lineno}, column {e.colno})") from None
    except RecursionError:  # far deeper than any cap: the parser's own stack ran out first
        raise error(f"{where}: nesting deeper than {max_depth} levels") from None
    if _too_deep(doc, max_depth):
        raise error(f"{where}: nesting deeper than {max_depth} levels")
    bad = _invalid_text(doc) if _SURROGATE_ESCAPE.search(text) else None
    if bad is not None:
        raise error(f"{where}: a string that is not valid Unicode ({brief(bad, 40)}: an escaped lone surrogate?)")
    return doc


def read_json_file(path: str | Path, where: str, error: type[SimError], max_bytes: int,
                   max_depth: int = MAX_DEPTH, what: str = "JSON file", unique_keys: bool = True) -> Any:
    """Read and parse the JSON file ``path`` strictly: a regular file of at most ``max_bytes`` bytes of UTF-8
    (:func:`sim.files.regular_file.read_text_file`), then :func:`load_json`; ``what`` names it in messages."""
    return load_json(read_text_file(path, where, error, max_bytes, what), where, error, max_depth,
                     unique_keys=unique_keys)
