"""One value of a file read as a bounded number: a cycle count, a core, an address, a core mask.

A file's text (a CSV field, a JSON value) may hold anything: ``zz``, a number of 5000 digits, ``1e38``, a
negative duration.  :func:`bounded_int` and :func:`bounded_float` give the number or raise the caller's
:class:`~sim.errors.SimError` subclass on one short line naming the field and the range, the value shown by
:func:`sim.errors.brief` however long it is.
"""

from __future__ import annotations

import math
import re
from typing import Any

from sim.errors import SimError, brief
from sim.files.yamlsafe import MAX_INT_DIGITS

#: An integer as text: decimal, or ``0x`` hex, ``0o`` octal, ``0b`` binary, with an optional sign.
_INT_TEXT = re.compile(r"[-+]?(?:[0-9]+|0[xX][0-9a-fA-F]+|0[oO][0-7]+|0[bB][01]+)", re.ASCII)


def _int_of_text(text: str, where: str, error: type[SimError], minimum: int, maximum: int) -> int | None:
    """The integer ``text`` spells (None when it spells none); ``error`` for one of more than MAX_INT_DIGITS
    digits, refused before ``int()`` (whose time grows with the square of the digits)."""
    s = text.strip()
    if not _INT_TEXT.fullmatch(s):
        return None
    if len(s) > MAX_INT_DIGITS:
        bound = f">= {minimum}" if s.startswith("-") else f"<= {maximum}"
        raise error(f"{where}: must be {bound}, got a number of {len(s.lstrip('+-'))} digits")
    body = s.lstrip("+-")
    if len(body) > 1 and body[0] == "0" and body[1].isdigit():
        body = body.lstrip("0") or "0"  # "007": a leading zero is decimal here, as in a CSV column
    value = int(body, 0)
    return -value if s.startswith("-") else value


def bounded_int(value: Any, where: str, error: type[SimError], minimum: int, maximum: int,
                what: str = "an integer") -> int:
    """``value`` (an int, a float with no fraction, or text spelling an integer) as an int in
    ``[minimum, maximum]``; ``error`` naming ``where`` otherwise (never OverflowError or ValueError)."""
    number: int | None = None
    if isinstance(value, bool):
        number = None
    elif isinstance(value, int):
        number = value
    elif isinstance(value, float) and math.isfinite(value) and value.is_integer():
        number = int(value)
    elif isinstance(value, str):
        number = _int_of_text(value, where, error, minimum, maximum)
    if number is None:
        raise error(f"{where}: expected {what}, got {brief(value, 60)}")
    if not minimum <= number <= maximum:
        bound = f">= {minimum}" if number < minimum else f"<= {maximum}"
        raise error(f"{where}: must be {bound}, got {brief(value, 60)}")
    return number


def bounded_float(value: Any, where: str, error: type[SimError], minimum: float, maximum: float,
                  what: str = "a number") -> float:
    """``value`` (an int or a float) as a finite float in ``[minimum, maximum]``; ``error`` naming ``where``
    otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or \
            (isinstance(value, float) and math.isnan(value)):
        raise error(f"{where}: expected {what}, got {brief(value, 60)}")
    # An int beyond the float range is as far out of range as an infinity (float() of it would raise).
    if isinstance(value, int) and abs(value) >= 10 ** 300:
        number = math.inf if value > 0 else -math.inf
    else:
        number = float(value)
    if not minimum <= number <= maximum:
        bound = f">= {minimum:g}" if number < minimum else f"<= {maximum:g}"
        raise error(f"{where}: must be {bound}, got {brief(value, 60)}")
    return number
