"""Checking a kernel's C-style arguments: integers, sequences, floats, choices, booleans, addresses.

Each validator returns the value in its Python form or raises :class:`~sim.errors.KernelArgError` naming
the argument; :func:`check_args` refuses extra and missing arguments and fills defaults.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from sim.errors import KernelArgError, brief
from sim.model.call import ArgSpec

#: Integer arguments are C ``long long`` values: anything outside int64 is refused as absurd.
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
#: Most integers a sequence argument (a shape, strides, paddings) may hold.
MAX_SEQUENCE_LENGTH = 32
#: Largest magnitude of a float argument: a C double's (a larger int cannot even be converted).
FLOAT_MAX = float(np.finfo(np.float64).max)


def require_int(name: str, value: Any, *, minimum: int | None = None, maximum: int | None = None) -> int:
    """``value`` as an int (bools refused) within int64 and ``minimum``..``maximum``; else KernelArgError
    naming ``name``."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise KernelArgError(f"argument '{name}': expected an integer, got {brief(value)}")
    value = int(value)
    if not INT64_MIN <= value <= INT64_MAX:
        raise KernelArgError(f"argument '{name}': {brief(value)} is outside the int64 range the C library takes")
    if minimum is not None and value < minimum:
        raise KernelArgError(f"argument '{name}': expected an integer >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise KernelArgError(f"argument '{name}': expected an integer <= {maximum}, got {value}")
    return value


def require_ints(name: str, value: Any, length: int | None = None, *,
                 minimum: int | None = None) -> tuple[int, ...]:
    """A sequence of ints of ``length`` (if given; at most MAX_SEQUENCE_LENGTH), each at least ``minimum``."""
    if isinstance(value, (str, bytes)) or not isinstance(value, (Sequence, np.ndarray)):
        raise KernelArgError(f"argument '{name}': expected a sequence of integers, got {brief(value)}")
    if isinstance(value, np.ndarray) and value.ndim != 1:
        raise KernelArgError(f"argument '{name}': expected a sequence of integers, got an array of shape "
                             f"{value.shape}")
    n = len(value)  # before materialising it: a huge sequence is refused by its length alone
    if length is not None and n != length:
        raise KernelArgError(f"argument '{name}': expected {length} integers, got {n}")
    if n > MAX_SEQUENCE_LENGTH:
        raise KernelArgError(f"argument '{name}': expected at most {MAX_SEQUENCE_LENGTH} integers, got {n}")
    return tuple(require_int(f"{name}[{i}]", v, minimum=minimum) for i, v in enumerate(value))


def require_float(name: str, value: Any) -> float:
    """A finite real number (an int too large for a double is refused, never an OverflowError)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise KernelArgError(f"argument '{name}': expected a number, got {brief(value)}")
    if isinstance(value, (int, np.integer)) and abs(int(value)) > FLOAT_MAX:
        raise KernelArgError(f"argument '{name}': {brief(int(value))} is beyond any float (at most about 1.8e308)")
    value = float(value)
    if not np.isfinite(value):
        raise KernelArgError(f"argument '{name}': expected a finite number, got {value}")
    return value


def require_choice(name: str, value: Any, choices: Sequence[str]) -> str:
    """One of ``choices`` (exact string)."""
    if not isinstance(value, str) or value not in choices:
        raise KernelArgError(f"argument '{name}': expected one of {', '.join(choices)}, got {brief(value)}")
    return value


def require_bool(name: str, value: Any) -> bool:
    """A bool, or the ints 0/1 as C callers pass them."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)) and int(value) in (0, 1):
        return bool(value)
    raise KernelArgError(f"argument '{name}': expected a boolean (true/false or 0/1), got {brief(value)}")


def require_address(name: str, value: Any) -> int:
    """A pointer argument: a non-negative int address."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise KernelArgError(f"argument '{name}': expected an address (int), got {brief(value)}")
    value = int(value)
    if value < 0 or value >= 1 << 64:
        shown_value = f"address {value:#x}" if -(1 << 80) < value < 1 << 80 else brief(value)
        raise KernelArgError(f"argument '{name}': {shown_value} is outside the 64-bit address range")
    return value


def check_args(symbol: str, specs: Sequence[ArgSpec], args: Mapping[str, Any]) -> dict[str, Any]:
    """Refuse extra and missing arguments; fill defaults.  Returns the completed mapping."""
    known = {s.name for s in specs}
    extra = sorted(set(args) - known)
    if extra:
        raise KernelArgError(f"{symbol}: unexpected argument '{extra[0]}' "
                             f"(expected: {', '.join(s.name for s in specs)})")
    out: dict[str, Any] = {}
    for s in specs:
        if s.name in args:
            out[s.name] = args[s.name]
        elif s.required:
            raise KernelArgError(f"{symbol}: missing argument '{s.name}' ({s.doc})")
        else:
            out[s.name] = s.default
    return out
