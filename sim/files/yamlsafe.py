"""The one strict YAML reader of dspsim: targets, run-configs, sweep files, calibration targets.

``yaml.safe_load`` already refuses tags that would build Python objects, but on its own it

* quietly keeps the last of two equal keys (so a pasted ``cores: 4`` below ``cores: 8`` wins unseen);
* raises ``ValueError`` for impossible timestamps (``2020-13-45``) and ``RecursionError`` for absurdly
  deep nesting;
* expands aliases without limit in whatever later walks the result: nine levels of nine aliases
  ("billion laughs") is a 400-byte file that stands for 387 million strings;
* reads numbers as YAML 1.1 does: ``012`` is octal 10, ``1:30`` is base-60 90, ``1e9`` is a string.

This module turns every one of those into the caller's :class:`~sim.errors.SimError` subclass with the
file name and, where YAML knows it, the line and column.  Its rules:

* **Size.**  A file holds at most :data:`MAX_YAML_BYTES`; a document at most :data:`MAX_NODES` values
  (scalars, lists and mappings), each alias counting the values it repeats; aliases together may repeat
  at most :data:`MAX_ALIAS_NODES`; an alias inside the very value it names (a recursive structure) is
  refused; nesting is at most :data:`MAX_DEPTH` levels.  All counted while the document is composed,
  before anything is built.
* **Numbers follow YAML 1.2.**  Integers are decimal without a leading zero (``12``), ``0x`` hex,
  ``0o`` octal or ``0b`` binary, with ``_`` allowed between digits and at most :data:`MAX_INT_DIGITS`
  digits; floats are ``1.5``, ``1e9``, ``1.0e-3``, ``.inf``, ``.nan``.  The YAML 1.1 forms that YAML 1.2
  reads differently are refused with the fix in the message: a decimal with a leading zero (``012``,
  octal 10 in YAML 1.1, 12 in YAML 1.2: write ``0o12`` or ``12``) and base-60 numbers (``1:30``, 90 in
  YAML 1.1, text in YAML 1.2: write ``90``, or quote it).  Quoted scalars are always text.
* Everything else is PyYAML's safe schema: ``true``/``false`` (and YAML 1.1's ``yes``/``no``/``on``/
  ``off``), ``null``/``~``, timestamps (an impossible date is refused), ``<<`` merge keys; no other tags.

Use :func:`read_yaml_file` for a file (it also refuses folders, named pipes and devices) and
:func:`load_yaml` for text already in memory.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from sim.errors import SimError, brief
from sim.files.regular_file import decode_utf8, read_file

#: Deeper nesting than this is refused before the recursive composer can overflow the stack.
MAX_DEPTH = 64
#: Largest YAML file dspsim reads (bytes): a target is a few KiB; arrays belong in .npy files.  PyYAML
#: reads about 3 MB a second, so this also bounds the time a file can take.
MAX_YAML_BYTES = 1 << 20
#: Most values one document may hold, each alias counting every value it repeats (PyYAML composes
#: about 30,000 a second: the bound keeps any document under a second; a target holds about 150).
MAX_NODES = 20_000
#: Most values aliases may repeat in one document: enough for ``<<: *defaults`` merges, not for a bomb.
MAX_ALIAS_NODES = 10_000
#: Most digits an integer may have (before any range check of the caller): far beyond any real value,
#: far below the 4300 digits Python refuses to print.
MAX_INT_DIGITS = 1000

_INT_TAG = "tag:yaml.org,2002:int"
_FLOAT_TAG = "tag:yaml.org,2002:float"
#: Plain scalars YAML 1.1 and YAML 1.2 read as different values (resolved here only to be refused).
_AMBIGUOUS_TAG = "tag:dspsim,2024:yaml-1.1-number"

_DIGITS = list("-+0123456789")
#: YAML 1.1 octal (a leading zero) and base-60 (colon-separated) numbers.
_AMBIGUOUS_RE = re.compile(r"""^(?:[-+]?0[0-9_]+
    |[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?)$""", re.VERBOSE)
#: YAML 1.2 integers (core schema), with '_' between digits as YAML 1.1 allowed.
_INT_RE = re.compile(r"""^(?:[-+]?(?:0|[1-9][0-9_]*)
    |[-+]?0[xX][0-9a-fA-F_]+
    |[-+]?0[oO][0-7_]+
    |[-+]?0[bB][01_]+)$""", re.VERBOSE)
#: YAML 1.2 floats (core schema): the exponent needs no decimal point and no sign.
_FLOAT_RE = re.compile(r"""^(?:[-+]?(?:\.[0-9][0-9_]*|[0-9][0-9_]*(?:\.[0-9_]*)?)(?:[eE][-+]?[0-9]+)?
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$""", re.VERBOSE)


class _Refused(yaml.MarkedYAMLError):
    """A document dspsim will not read, for a reason of its own (size, aliases, an ambiguous number)."""


def _refuse(problem: str, mark: Any) -> _Refused:
    return _Refused(problem=problem, problem_mark=mark)


class _Strict(yaml.composer.Composer, yaml.constructor.SafeConstructor):
    """What both loaders below add to PyYAML's composer and constructor: values and nesting counted as the
    document is composed, aliases by what they repeat, and duplicate keys refused."""

    def _start_counting(self) -> None:
        self._depth = 0
        self._nodes = 0  # values composed so far, aliases counting what they repeat
        self._alias_nodes = 0
        self._open_anchors: set[str] = set()
        self._anchor_sizes: dict[int, int] = {}  # id(anchored node) -> values it stands for

    def compose_node(self, parent: Any, index: Any) -> Any:
        """PyYAML's composer, counting values (aliases by what they repeat) and nesting as it goes."""
        event: Any = self.peek_event()  # type: ignore[attr-defined]  # (the parser's, later in the class order)
        if isinstance(event, yaml.AliasEvent):
            node = self.anchors.get(event.anchor or "")
            if node is not None:  # else PyYAML reports the undefined alias
                if event.anchor in self._open_anchors:
                    raise _refuse(f"alias *{brief(event.anchor, 40)[1:-1]} inside the value it names "
                                  f"(a recursive structure)", event.start_mark)
                size = self._anchor_sizes.get(id(node), 1)
                self._alias_nodes += size
                if self._alias_nodes > MAX_ALIAS_NODES:
                    raise _refuse(f"aliases repeat more than {MAX_ALIAS_NODES} values (an alias bomb?): "
                                  f"dspsim files never need that many", event.start_mark)
                self._count(size, event.start_mark)
            return super().compose_node(parent, index)
        self._depth += 1
        anchor = event.anchor if isinstance(event, yaml.NodeEvent) else None
        try:
            if self._depth > MAX_DEPTH:
                raise _refuse(f"nesting deeper than {MAX_DEPTH} levels", event.start_mark)
            before = self._nodes
            self._count(1, event.start_mark)
            if anchor is not None:
                self._open_anchors.add(anchor)
            node = super().compose_node(parent, index)
            if anchor is not None:
                self._anchor_sizes[id(node)] = self._nodes - before
            return node
        finally:
            self._depth -= 1
            if anchor is not None:
                self._open_anchors.discard(anchor)

    def _count(self, n: int, mark: Any) -> None:
        self._nodes += n
        if self._nodes > MAX_NODES:
            raise _refuse(f"more than {MAX_NODES} values (aliases counting what they repeat): too large for "
                          f"a dspsim file (place big arrays from a .npy file)", mark)

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        """PyYAML's mapping constructor, refusing a key given twice."""
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
                    None, None, f"duplicate key {brief(key, 60)} (first on line {seen[key]})", key_node.start_mark)
            seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)


class _StrictLoader(_Strict, yaml.SafeLoader):
    """SafeLoader with YAML 1.2 numbers that refuses duplicate keys, absurd nesting and alias bombs."""

    def __init__(self, stream: str):
        yaml.SafeLoader.__init__(self, stream)
        self._start_counting()


def _yaml11_value(text: str) -> str:
    """What YAML 1.1 would make of an ambiguous number, for the message ('' when it is no number there)."""
    s = text.replace("_", "")
    sign = -1 if s.startswith("-") else 1
    s = s.lstrip("+-")
    try:
        if ":" in s:
            value: float = 0
            for part in s.split(":"):
                value = value * 60 + (float(part) if "." in part else int(part))
            return str(sign * value)
        return str(sign * int(s, 8))
    except ValueError:
        return ""


def _construct_ambiguous(loader: _StrictLoader, node: yaml.ScalarNode) -> Any:
    text = loader.construct_scalar(node)
    shown = brief(text, 40)[1:-1]
    if len(text) > 40:
        raise _refuse(f"{shown}: a YAML 1.1 number that YAML 1.2 reads differently; write it plainly "
                      f"(or quote it if it is text)", node.start_mark)
    old = _yaml11_value(text)
    if ":" in text:
        as_number = f"write {old} for the number, or " if old else ""
        raise _refuse(f"{shown} is a base-60 number in YAML 1.1 ({old or 'not a number'}) and text in YAML 1.2: "
                      f"{as_number}quote it ('{shown}') if it is text", node.start_mark)
    s = text.replace("_", "")
    sign = "-" if s.startswith("-") else ""
    digits = s.lstrip("+-").lstrip("0") or "0"
    fix = f"write {sign}0o{digits} for octal {old} or {sign}{digits} for decimal" if old else f"write {sign}{digits}"
    raise _refuse(f"{shown}: a leading zero is octal in YAML 1.1 ({old or 'not a number'}) and decimal in YAML "
                  f"1.2 ({sign}{digits}); {fix}", node.start_mark)


def _construct_int(loader: _StrictLoader, node: yaml.ScalarNode) -> int:
    text = loader.construct_scalar(node)
    s = str(text).replace("_", "")
    sign = -1 if s.startswith("-") else 1
    body = s[1:] if s[:1] in ("-", "+") else s
    base = {"0x": 16, "0o": 8, "0b": 2}.get(body[:2].lower(), 10)
    digits = body[2:] if base != 10 else body
    if base == 10 and len(digits) > 1 and digits.startswith("0"):
        return _construct_ambiguous(loader, node)  # an explicit !!int 012: as ambiguous as a plain one
    if len(digits) > MAX_INT_DIGITS:
        raise _refuse(f"an integer of {len(digits)} digits: more than any value of a dspsim file "
                      f"(at most {MAX_INT_DIGITS})", node.start_mark)
    try:
        return sign * int(digits, base)
    except ValueError:
        raise _refuse(f"{brief(text, 40)} is not an integer", node.start_mark) from None


def _construct_float(loader: _StrictLoader, node: yaml.ScalarNode) -> float:
    text = str(loader.construct_scalar(node))
    s = text.replace("_", "").lower()
    if ":" in s:
        return _construct_ambiguous(loader, node)
    sign = -1.0 if s.startswith("-") else 1.0
    body = s.lstrip("+-")
    if body == ".inf":
        return sign * float("inf")
    if body == ".nan":
        return float("nan")
    try:
        return float(s)  # Python's float() of decimal text never raises OverflowError: 1e999 is inf
    except ValueError:
        raise _refuse(f"{brief(text, 40)} is not a number", node.start_mark) from None


# YAML 1.2 numbers: drop YAML 1.1's int and float resolvers, add ours (the ambiguous forms first).
_StrictLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag not in (_INT_TAG, _FLOAT_TAG)]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
_StrictLoader.add_implicit_resolver(_AMBIGUOUS_TAG, _AMBIGUOUS_RE, _DIGITS)
_StrictLoader.add_implicit_resolver(_INT_TAG, _INT_RE, _DIGITS)
_StrictLoader.add_implicit_resolver(_FLOAT_TAG, _FLOAT_RE, _DIGITS + ["."])
_StrictLoader.add_constructor(_AMBIGUOUS_TAG, _construct_ambiguous)
_StrictLoader.add_constructor(_INT_TAG, _construct_int)
_StrictLoader.add_constructor(_FLOAT_TAG, _construct_float)

#: libyaml's parser, where PyYAML was built with it: its scanning and parsing in C, the same events.
_CParser: Any
try:
    from yaml.cyaml import CParser as _CParser  # type: ignore[attr-defined]
except ImportError:  # a PyYAML without libyaml: the pure Python loader reads everything
    _CParser = None


class _FastStrictLoader(_Strict, _CParser or object, yaml.resolver.Resolver):  # type: ignore[misc]
    """:class:`_StrictLoader` on libyaml's parser (about four times as fast on a target file): the same composer,
    counts, resolvers and constructors, the events from C.  Only for documents it is known to read as the pure
    Python loader does (:func:`load_yaml`)."""

    def __init__(self, stream: str):
        assert _CParser is not None
        _CParser.__init__(self, stream)
        yaml.composer.Composer.__init__(self)
        yaml.constructor.SafeConstructor.__init__(self)
        yaml.resolver.Resolver.__init__(self)
        self._start_counting()


_FastStrictLoader.yaml_implicit_resolvers = _StrictLoader.yaml_implicit_resolvers
_FastStrictLoader.yaml_constructors = _StrictLoader.yaml_constructors
#: Characters PyYAML's reader refuses (yaml.reader.Reader.NON_PRINTABLE): a document with one is read by the
#: pure Python loader, for its message.
_NON_PRINTABLE = yaml.reader.Reader.NON_PRINTABLE


def _describe(e: yaml.YAMLError) -> str:
    """One short line: the problem and its line/column, without PyYAML's multi-line excerpt."""
    if isinstance(e, yaml.MarkedYAMLError) and e.problem:
        mark = e.problem_mark or e.context_mark
        at = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        ctx = f" ({e.context})" if e.context else ""
        text = f"{at}{e.problem}{ctx}"
    else:
        text = str(e)
    text = " ".join(text.split()) or type(e).__name__
    return text if len(text) <= 300 else text[:297] + "..."  # PyYAML quotes the offending token in full


def load_yaml(text: str, where: str, error: type[SimError]) -> Any:
    """Parse ``text`` (from ``where``, a file name for messages) strictly; any problem raises ``error``.

    Every message starts with ``where``, stays on one line and never quotes more than a few dozen
    characters of the document.  See the module docstring for what is refused.
    """
    if len(text) > MAX_YAML_BYTES:
        raise error(f"{where}: {len(text)} characters, more than the {MAX_YAML_BYTES} a dspsim YAML file "
                    f"may hold (place big arrays from a .npy file)")
    if _CParser is not None and not _NON_PRINTABLE.search(text):
        try:
            return yaml.load(text, Loader=_FastStrictLoader)  # SafeConstructor: never builds Python objects
        except Exception:  # noqa: BLE001  (refused: the pure Python loader below says why, in its words)
            pass
    try:
        return yaml.load(text, Loader=_StrictLoader)  # a SafeLoader subclass: never builds Python objects
    except _Refused as e:
        raise error(f"{where}: {_describe(e)}") from None
    except yaml.constructor.ConstructorError as e:
        if e.problem and "could not determine a constructor" in e.problem:
            mark = e.problem_mark
            at = f"line {mark.line + 1}: " if mark is not None else ""
            tag = brief(e.problem.split("tag", 1)[-1].strip(" '"), 100)
            raise error(f"{where}: {at}refused YAML tag {tag}: tags that would build Python objects "
                        f"are not allowed") from None
        raise error(f"{where}: not valid YAML: {_describe(e)}") from None
    except yaml.YAMLError as e:
        raise error(f"{where}: not valid YAML: {_describe(e)}") from None
    except (ValueError, OverflowError, RecursionError) as e:
        # Timestamps such as 2020-13-45 fail inside the datetime constructor.
        raise error(f"{where}: not valid YAML: a value cannot be built "
                    f"({type(e).__name__}: {brief(str(e), 120)[1:-1]})") from None


def read_yaml_file(path: str | Path, where: str, error: type[SimError], what: str = "file") -> Any:
    """Read and parse the YAML file ``path`` strictly (see :func:`load_yaml`); ``what`` names it in messages.

    Only a regular file is read: a folder, a named pipe or a device is refused at once (opening a pipe
    would wait for a writer forever); so is a file over :data:`MAX_YAML_BYTES` or one that is not UTF-8.
    """
    return load_yaml(read_yaml_text(path, where, error, what), where, error)


def read_yaml_bytes(path: str | Path, where: str, error: type[SimError], what: str = "file") -> bytes:
    """The bytes of the YAML file ``path`` (regular files only, at most :data:`MAX_YAML_BYTES`), for a caller
    that needs them as they are (a digest of the content); any problem raises ``error`` naming ``where``."""
    return read_file(path, where, error, MAX_YAML_BYTES, what,
                     too_large="a dspsim YAML file may hold (place big arrays from a .npy file)")


def decode_yaml_bytes(data: bytes, where: str, error: type[SimError], what: str = "file") -> str:
    """``data`` as UTF-8 text; ``error`` naming ``where`` when it is not."""
    return decode_utf8(data, where, error, what)


def read_yaml_text(path: str | Path, where: str, error: type[SimError], what: str = "file") -> str:
    """The text of the YAML file ``path``, read as :func:`read_yaml_file` reads it (regular files only, at
    most :data:`MAX_YAML_BYTES`, UTF-8), for a caller that also needs the text (a round-trip edit)."""
    return decode_yaml_bytes(read_yaml_bytes(path, where, error, what), where, error, what)
