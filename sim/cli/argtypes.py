"""Argument types of the command line that refuse what is out of range as a usage error (exit 2, the option
named by argparse), rather than running with it or failing deep inside."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable

from sim.config.schema import NAME_PATTERN
from sim.time_limit import checked_time_limit


def int_in(low: int, high: int | None = None) -> Callable[[str], int]:
    """An int from ``low`` to ``high`` (no upper end when None)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < low or (high is not None and value > high):
            within = f"from {low} to {high}" if high is not None else f"of at least {low}"
            raise argparse.ArgumentTypeError(f"expected an integer {within}, got {value}")
        return value
    return parse


def file_name(text: str) -> str:
    """A file name written under the output folder, as a run-config's ``trace`` is: letters, digits, ``_``,
    ``.``, ``-`` (not starting with ``.`` or ``-``), no path."""
    if not re.match(NAME_PATTERN, text):
        raise argparse.ArgumentTypeError(f"expected a file name of letters, digits, '_', '.', '-' (written under "
                                         f"the output folder; not a path), got {text!r}")
    return text


#: What ``--time-limit none`` says: no limit (overriding a config's own).
NO_LIMIT = "none"


def seconds_or_none(text: str) -> float | str:
    """A number of seconds (checked by the time limit's own rule), or ``none``: no limit, overriding the config's."""
    if text.strip().lower() == NO_LIMIT:
        return NO_LIMIT
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds or {NO_LIMIT}, got {text!r}") from None


def flag_time_limit(value: float | str) -> float | None:
    """``--time-limit``'s value as a call's limit: None for ``none``, else the seconds checked (more than 0)."""
    return None if value == NO_LIMIT else checked_time_limit(value, "--time-limit: ")
