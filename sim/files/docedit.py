"""Dotted key paths into parsed YAML documents: read and set one value (shared by sweeps and calibration).

A path such as ``regions.ddr.bandwidth_bytes_per_cycle`` walks mappings by key
and lists by index (``params.5``) or by the ``name`` of an item
(``regions.ddr``), the way target files and run-configs are written.  It works
on plain dicts and lists and on ruamel.yaml's round-trip containers alike
(they subclass them), so calibration edits a commented copy with the same
code a sweep uses to edit a parsed one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sim.errors import ConfigError, SimError

#: Longest rendering of a key or value quoted in a message (user data must not blow up a message).
MAX_QUOTE_CHARS = 60


def quote(value: Any) -> str:
    """``repr(value)`` of a key or scalar, cut to about :data:`MAX_QUOTE_CHARS` characters."""
    if isinstance(value, str):
        value = value[:MAX_QUOTE_CHARS + 1]  # cut before repr: the string may be huge
    text = repr(value)
    return text if len(text) <= MAX_QUOTE_CHARS + 2 else text[:MAX_QUOTE_CHARS] + "..."


def split_path(path: str) -> list[str]:
    """The keys of a dotted path (``"a.b.0"`` -> ``["a", "b", "0"]``)."""
    return path.split(".")


def _child(node: Any, key: str, where: str, error: type[SimError]) -> tuple[Any, Any]:
    """The container ``node``'s slot for ``key``: (index or key, value); the error names ``where``."""
    if isinstance(node, list):
        if key.isdigit():
            idx = int(key)
        else:
            matches = [j for j, item in enumerate(node) if isinstance(item, dict) and item.get("name") == key]
            if not matches:
                raise error(f"{where}: no list item named {quote(key)}")
            idx = matches[0]
        if not 0 <= idx < len(node):
            raise error(f"{where}: index {idx} is outside the list of {len(node)}")
        return idx, node[idx]
    if isinstance(node, dict):
        if key not in node:
            raise error(f"{where}: no key {quote(key)}")
        return key, node[key]
    raise error(f"{where}: {quote(key)} descends into a scalar")


def get_path(doc: Any, keys: Sequence[str], where: str, error: type[SimError] = ConfigError) -> Any:
    """The value at ``keys`` in ``doc``; ``error`` (naming ``where``) when the path leads nowhere."""
    node = doc
    for k in keys:
        _, node = _child(node, k, where, error)
    return node


def set_path(doc: Any, keys: Sequence[str], value: Any, where: str, error: type[SimError] = ConfigError,
             create: bool = False) -> None:
    """Set the value at ``keys`` in ``doc`` (in place).

    ``create`` lets the last key be new when its parent is a mapping (an
    optional key the document leaves to its default); every other step must
    exist.
    """
    if not keys:
        raise error(f"{where}: empty key path")
    parent = get_path(doc, keys[:-1], where, error)
    last = keys[-1]
    if create and isinstance(parent, dict) and last not in parent:
        parent[last] = value
        return
    slot, _ = _child(parent, last, where, error)
    parent[slot] = value
