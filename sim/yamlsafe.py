"""Strict YAML reading for target files and run-configs.

``yaml.safe_load`` already refuses tags that would build Python objects, but it
quietly keeps the last of two equal keys (so a pasted ``cores: 4`` below
``cores: 8`` wins unseen), raises ``ValueError`` for impossible timestamps
(``2020-13-45``) and ``RecursionError`` for absurdly deep nesting.  This module
turns every one of those into the caller's :class:`~sim.errors.SimError`
subclass with the file name and, where YAML knows it, the line.
"""

from __future__ import annotations

from typing import Any

import yaml

from sim.errors import SimError

#: Deeper nesting than this is refused before the recursive composer can overflow the stack.
MAX_DEPTH = 64


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate mapping keys and absurd nesting."""

    def __init__(self, stream: str):
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:  # noqa: D102 (PyYAML hook)
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                mark = self.peek_event().start_mark
                raise yaml.MarkedYAMLError(problem=f"nesting deeper than {MAX_DEPTH} levels", problem_mark=mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:  # noqa: D102
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # '<<' merges are flattened by SafeLoader; explicit keys may override them
            key = self.construct_object(key_node, deep=True)
            try:
                hash(key)
            except TypeError:
                raise yaml.constructor.ConstructorError(None, None, "unhashable mapping key",
                                                        key_node.start_mark) from None
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (first on line {seen[key]})", key_node.start_mark)
            seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)


def _describe(e: yaml.YAMLError) -> str:
    """One line: the problem and its line/column, without PyYAML's multi-line excerpt."""
    if isinstance(e, yaml.MarkedYAMLError) and e.problem:
        mark = e.problem_mark or e.context_mark
        at = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        ctx = f" ({e.context})" if e.context else ""
        return f"{at}{e.problem}{ctx}"
    return " ".join(str(e).split()) or type(e).__name__


def load_yaml(text: str, where: str, error: type[SimError]) -> Any:
    """Parse ``text`` (from ``where``) strictly; any problem becomes ``error`` naming ``where``."""
    try:
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 (a SafeLoader subclass)
    except yaml.constructor.ConstructorError as e:
        if e.problem and "could not determine a constructor" in e.problem:
            mark = e.problem_mark
            at = f"line {mark.line + 1}: " if mark is not None else ""
            tag = e.problem.split("tag", 1)[-1].strip(" '")
            raise error(f"{where}: {at}refused YAML tag {tag!r}: tags that would build Python objects "
                        f"are not allowed") from None
        raise error(f"{where}: not valid YAML: {_describe(e)}") from None
    except yaml.YAMLError as e:
        raise error(f"{where}: not valid YAML: {_describe(e)}") from None
    except (ValueError, OverflowError, RecursionError) as e:
        # Timestamps such as 2020-13-45 fail inside the datetime constructor.
        raise error(f"{where}: not valid YAML: a value cannot be built ({type(e).__name__}: {e})") from None
