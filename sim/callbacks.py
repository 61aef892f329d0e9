"""The callbacks a caller hands the simulator, checked before anything runs (a wrong one would otherwise fail
deep inside the engine or the search, with the caller's TypeError and no word of which argument it was)."""

from __future__ import annotations

import inspect
from typing import Any

from sim.errors import KernelArgError, brief


def check_callback(value: Any, where: str, name: str, params: str, count: int) -> None:
    """KernelArgError naming ``where`` and argument ``name`` unless ``value`` is None or a callable that takes
    ``count`` positional arguments (``params``: their names, for the message)."""
    if value is None:
        return
    if not callable(value):
        raise KernelArgError(f"{where}: '{name}' must be a callable or None, got {brief(value)}")
    try:
        signature = inspect.signature(value)
    except (TypeError, ValueError):
        return  # (a callable whose signature cannot be read, as some builtins': taken as it comes)
    try:
        signature.bind(*([None] * count))
    except TypeError:
        raise KernelArgError(f"{where}: '{name}' is called as {name}{params}, {count} positional arguments, which "
                             f"{brief(value)} (signature {brief(str(signature), 80)}) does not take") from None
