"""Bounded renderings of user data for messages: an error message never grows with the input it quotes."""

from __future__ import annotations

import math
import reprlib

#: Integers with more digits than this are described by their size instead of written out.
MAX_INT_DIGITS = 40


def _int_text(value: int) -> str:
    if abs(value) < 10 ** MAX_INT_DIGITS:
        return repr(value)
    # int -> str is quadratic and refused past 4300 digits: count the digits from the logarithm instead.
    digits = int(math.log10(abs(value))) + 1
    return f"{'-' if value < 0 else ''}an integer of {digits} digits"


class _Bounded(reprlib.Repr):
    """reprlib's bounded repr, with integers of any size rendered without converting them to decimal."""

    def __init__(self) -> None:
        super().__init__()
        self.maxstring = self.maxother = 60
        self.maxlist = self.maxtuple = self.maxset = self.maxdict = 8
        self.maxlevel = 3

    def repr_int(self, x: int, level: int) -> str:
        return _int_text(x)


_REPR = _Bounded()


def shown(value: object) -> str:
    """A repr of ``value`` for a message, at most about a hundred characters whatever ``value`` is."""
    try:
        if isinstance(value, int) and not isinstance(value, bool):
            return _int_text(value)
        return _REPR.repr(value).replace("\n", " ")  # numpy's repr of a large array spans lines
    except Exception:  # a value whose own repr fails: name its type only
        return f"<a {type(value).__name__}>"
