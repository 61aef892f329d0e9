"""Argument types of the command line that refuse what is out of range as a usage error (exit 2, the option
named by argparse), rather than running with it or failing deep inside."""

from __future__ import annotations

import argparse
from collections.abc import Callable


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
