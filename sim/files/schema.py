"""File schemas declared once: each key's type, unit, allowed range and doc in one place, read with msgspec.

A schema is a tree of :class:`Spec` structs whose fields carry their constraints in ``Annotated[...,
param(...)]``: msgspec checks the types, ranges, choices and unknown keys of a parsed YAML document in one
pass (:func:`decode`), and the error it raises is turned here into dspsim's message, which names the file,
the key path (a list entry by its ``name`` when it has one: ``regions[2](gsm).base``), what is allowed (the
range with its reason, the choices, the allowed keys) and the value found.  The same declarations give the
reference tables of the docs (:func:`reference`).  Rules between fields stay as checks after the schema, in
each loader.

Why msgspec and not pydantic v2, measured on this machine (2 shared cores, Python 3.11, median of 10 fresh
processes, each importing the library, declaring the target schema and validating MT7004.yaml once):
msgspec 0.23 takes 60 ms (35 ms at best) where pydantic 2.14 takes 334 ms (225 ms at best), most of it
pydantic's own import (about 200 ms against msgspec's 30-55 ms); later validations take 0.03 ms against
0.1 ms.  The first call of a fresh process is what a ``dspsim`` command pays, so the difference is a
quarter of a second per command.  Error quality: pydantic reports every error with a structured location,
msgspec the first one as ``<what> - at `$.path```; both are turned into dspsim's own message from the
declared field (this module), so the user sees the same wording either way, and a file has its first
problem named, as dspsim's hand-written readers always did.  msgspec installs 0.7 MB, pydantic 10 MB.
"""

from __future__ import annotations

import math
import re
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Annotated, Any, Literal, TypeVar, Union, get_args, get_origin

import msgspec
from msgspec import Meta

from sim.errors import brief

S = TypeVar("S")

#: Longest name shown whole in a key path (a longer or unprintable key is shown cut and quoted).
KEY_CHARS = 64


class Spec(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """Base of every schema struct: unknown keys refused, fields by keyword.  A loader reads its values into
    the frozen data it returns; the structs themselves live only while a file is read."""


def param(doc: str, *, ge: int | float | None = None, le: int | float | None = None, lt: int | float | None = None,
          unit: str = "",
          why: str = "", note: str = "", hexa: bool = False, min_length: int | None = None,
          max_length: int | None = None, pattern: str | None = None, means: str = "", kind: str = "",
          items: str = "", absent: str = "") -> Meta:
    """The declaration of one key: ``doc`` (what it is), the range ``[ge, le]`` or ``[ge, lt)`` (``why``
    says what the bound stands for, ``note`` is appended to every range message, ``hexa`` shows bounds and
    values in hex), its ``unit``; for strings and lists ``min_length``/``max_length`` and a ``pattern``
    (``means`` says what is expected in words); ``kind`` ``text`` for free text, ``name`` for a one-line name;
    ``items`` names a list's entries; ``absent`` says what an optional key left out means (for the docs)."""
    given: dict[str, Any] = {"unit": unit, "why": why, "note": note, "hexa": hexa, "means": means, "kind": kind,
                             "items": items, "absent": absent}
    extra = {k: v for k, v in given.items() if v}
    constraints: dict[str, Any] = {"ge": ge, "le": le, "lt": lt, "min_length": min_length, "max_length": max_length,
                                   "pattern": pattern}
    return Meta(**{k: v for k, v in constraints.items() if v is not None}, description=doc, extra=extra)


def decode(doc: Any, schema: type[S], where: str, error: type[Exception], *, top: str = "<top>",
           top_scalars: bool = True, named: bool = True) -> S:
    """``doc`` (a parsed YAML document) checked against ``schema``; ``error`` naming ``where`` (the file), the
    key path and the rule otherwise.  ``top`` labels the document itself in key paths (``<top>.cores``);
    ``top_scalars`` False names top-level scalar keys bare (``numerics``) rather than under ``top``; ``named``
    False names list entries by index alone (``data[0]``, not ``data[0](x)``)."""
    try:
        return msgspec.convert(doc, schema, strict=True)
    except msgspec.ValidationError as e:
        key, message = explain(str(e), doc, schema, top=top, top_scalars=top_scalars, named=named)
        raise error(f"{where}: {key}: {message}") from None


@dataclass(frozen=True)
class _Field:
    """A key as the schema declares it: its name in the file, its type without metadata, its merged metadata
    and whether it is required."""

    name: str
    type: Any
    meta: dict
    required: bool


def _unwrap(t: Any) -> tuple[Any, dict]:
    """A type without ``Annotated`` and ``| None``, and its metadata merged (constraints and extra)."""
    meta: dict = {}
    while True:
        if get_origin(t) is Annotated:
            base, *metas = get_args(t)
            for m in metas:
                if isinstance(m, Meta):
                    meta.update({k: getattr(m, k) for k in ("ge", "le", "lt", "min_length", "max_length", "pattern",
                                                            "description") if getattr(m, k) is not None})
                    meta.update(m.extra or {})
            t = base
        elif get_origin(t) in (Union, types.UnionType):
            args = [a for a in get_args(t) if a is not type(None)]
            if len(args) != 1:
                return t, meta
            t = args[0]
        else:
            return t, meta


def fields(struct: type) -> list[_Field]:
    """The keys a schema struct declares, in declaration order."""
    hints = typing.get_type_hints(struct, include_extras=True)
    out = []
    info = msgspec.structs.fields(struct)
    for f in info:
        t, meta = _unwrap(hints[f.name])
        out.append(_Field(f.encode_name, t, meta, f.required))
    return out


def _field(struct: type, name: str) -> _Field | None:
    return next((f for f in fields(struct) if f.name == name), None)


def _is_struct(t: Any) -> bool:
    return isinstance(t, type) and issubclass(t, msgspec.Struct)


def _step(t: Any, part: str | int) -> tuple[Any, dict]:
    """The type (and metadata) one path step below ``t``."""
    if _is_struct(t) and isinstance(part, str):
        f = _field(t, part)
        return (f.type, f.meta) if f else (None, {})
    origin = get_origin(t)
    if origin in (list, tuple) and isinstance(part, int):
        return _unwrap(get_args(t)[0])
    if origin is dict:
        return _unwrap(get_args(t)[1])
    return None, {}


_PATH_PART = re.compile(r"\.([^.\[]+)|\[(\d+)\]")


def _parse_path(text: str) -> list[str | int]:
    return [m.group(1) if m.group(1) is not None else int(m.group(2)) for m in _PATH_PART.finditer(text)]


def key_text(key: str) -> str:
    """A key as it may appear in a one-line message: itself when a short identifier, else a cut repr."""
    return key if key.isidentifier() and len(key) <= KEY_CHARS else brief(key, 40)


def _named(value: Any) -> str:
    """``(name)`` for a list entry that is a mapping with a short printable name, else nothing."""
    name = value.get("name") if isinstance(value, dict) else None
    ok = isinstance(name, str) and name.isprintable() and 0 < len(name) <= KEY_CHARS
    return f"({name})" if ok else ""


def _key_path(doc: Any, schema: type, parts: list[str | int], top: str, top_scalars: bool, named: bool) -> str:
    """The key path as messages write it: ``core.units.fmac.count``, ``regions[2](gsm).base``, and a
    top-level scalar key under ``top`` (``<top>.cores``) when ``top_scalars``."""
    if not parts:
        return top
    text = ""
    value: Any = doc
    t: Any = schema
    for part in parts:
        t, _ = _step(t, part) if t is not None else (None, {})
        if isinstance(part, int):
            value = value[part] if isinstance(value, list) and part < len(value) else None
            text += f"[{part}]{_named(value) if named else ''}"
        else:
            value = value.get(part) if isinstance(value, dict) else None
            text += ("." if text else "") + key_text(part)
    first_type = _step(schema, parts[0])[0]
    if len(parts) == 1 and top_scalars and not (_is_struct(first_type) or get_origin(first_type) in (list, dict)):
        return f"{top}.{text}"
    return text


def _value(doc: Any, parts: list[str | int]) -> Any:
    v = doc
    for p in parts:
        v = v[p] if isinstance(p, int) else v[p]
    return v


def _hint(v: Any) -> str:
    """Why a value of the wrong type may have been meant right: a quoted number, or a float for an integer."""
    if isinstance(v, str):
        try:
            float(v)
        except ValueError:
            return ""
        return " (YAML read it as text: write the number without quotes)"
    if isinstance(v, float) and math.isfinite(v) and v.is_integer():
        return " (a decimal point or an exponent makes a float: write the whole number, e.g. 1000000000)"
    return ""


def _show(n: Any, meta: dict) -> str:
    if meta.get("hexa") and isinstance(n, int) and not isinstance(n, bool) and 0 <= n < 1 << 128:
        return f"{n:#x}"
    if isinstance(n, float):
        return f"{n:g}"
    return brief(n)


def _range(v: Any, meta: dict, is_float: bool) -> str:
    """The message of a number outside its declared range."""
    note = meta.get("note", "")
    if meta.get("means"):
        return f"expected {meta['means']}, got {brief(v)}"
    ge, le = meta.get("ge"), meta.get("le")
    below = ge is not None and (not isinstance(v, (int, float)) or v < ge)
    got = brief(v) if is_float else _show(v, meta)
    if below:
        return f"must be >= {brief(ge) if isinstance(ge, int) else _show(ge, meta)}, got {got}{note}"
    return f"must be <= {_show(le, meta)}{meta.get('why', '')}, got {got}{note}"


def _choices(t: Any) -> tuple | None:
    return get_args(t) if get_origin(t) is Literal else None


def explain(text: str, doc: Any, schema: type, *, top: str = "<top>", top_scalars: bool = True,
            named: bool = True) -> tuple[str, str]:
    """(key path, message) for msgspec's validation message ``text`` about ``doc`` against ``schema``."""
    m = re.fullmatch(r"(?s)(.*?)(?: - at `(key` in `)?(\$[^`]*)`)?", text)
    assert m is not None
    what, in_key, at = m.group(1), m.group(2), m.group(3) or "$"
    parts = _parse_path(at[1:])
    t: Any = schema
    meta: dict = {}
    for part in parts:
        t, meta = _step(t, part)
    try:
        value = _value(doc, parts)
    except (KeyError, IndexError, TypeError):
        value = None
    path = _key_path(doc, schema, parts, top, top_scalars, named)

    def sub(key: str) -> str:
        return _key_path(doc, schema, parts + [key], top, top_scalars, named) if parts else f"{top}.{key_text(key)}"

    if in_key:
        bad = next((k for k in value if not isinstance(k, str)), None) if isinstance(value, dict) else None
        return path, f"key {brief(bad, 40)} is not a string"
    unknown = re.fullmatch(r"Object contains unknown field `(.*)`", what, re.S)
    if unknown and _is_struct(t):
        allowed = ", ".join(sorted(f.name for f in fields(t)))
        return sub(unknown.group(1)), f"unknown key (allowed: {allowed})"
    missing = re.fullmatch(r"Object missing required field `(.*)`", what, re.S)
    if missing and _is_struct(t):
        f = _field(t, missing.group(1))
        doc_text = f.meta.get("description", "") if f else ""
        return sub(missing.group(1)), "required key is missing" + (f": {doc_text}" if doc_text else "")
    if what.startswith("Expected `object`"):
        return path, f"expected a mapping, got {type(value).__name__}"
    choices = _choices(t)
    if choices is not None:
        return path, f"expected one of {', '.join(map(str, choices))}, got {brief(value)}"
    if t is bool:
        return path, f"expected true or false, got {brief(value)}"
    if t is int:
        if isinstance(value, bool) or not isinstance(value, int):
            hexa = " (hex like 0xA0000000 is fine)" if meta.get("hexa") else ""
            return path, f"expected an integer{hexa}, got {brief(value)}{_hint(value)}"
        return path, _range(value, meta, False)
    if t is float or (get_origin(t) in (Union, types.UnionType) and set(get_args(t)) == {int, float}):
        unbounded = meta.get("ge") is None and meta.get("le") is None and meta.get("lt") is None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or unbounded or \
                (isinstance(value, float) and not math.isfinite(value)):
            positive = "positive " if (meta.get("ge") or 0) > 0 else ""
            expected = meta.get("means") or f"a {positive}finite number"
            return path, f"expected {expected}, got {brief(value)}{_hint(value)}"
        return path, _range(value, meta, True)
    if t is str:
        return path, _string(value, meta)
    if get_origin(t) in (list, tuple):
        items = meta.get("items", "entries")
        if not isinstance(value, list):
            return path, f"expected a list of {items}, got {brief(value)}"
        if meta.get("max_length") is not None and len(value) > meta["max_length"]:
            return path, f"at most {meta['max_length']} {items}, got {len(value)}"
        return path, f"expected a non-empty list of {items}"
    return path, what[:1].lower() + what[1:]


def _string(value: Any, meta: dict) -> str:
    """The message of a string key's value that its declaration refuses."""
    if meta.get("kind") == "text":
        if isinstance(value, str):
            return f"expected non-empty text, got {brief(value, 40)}"
        return f"expected text, got {type(value).__name__} {brief(value, 40)} (put it in quotes to make it text)"
    if not isinstance(value, str) or not value:
        return f"expected {meta.get('means') or 'a non-empty string'}, got {brief(value)}"
    most = meta.get("max_length")
    if most is not None and len(value) > most:
        return f"a name of at most {most} characters, got {len(value)}: {brief(value, 40)}"
    return f"expected {meta.get('means') or 'a string matching ' + str(meta.get('pattern'))}, got {brief(value)}"


@dataclass(frozen=True)
class Row:
    """One key of a schema as a reference table shows it."""

    key: str
    required: bool
    type: str
    unit: str
    allowed: str
    default: Any
    doc: str
    absent: str


def _type_name(t: Any) -> str:
    if _choices(t) is not None:
        return " | ".join(f"`{c}`" for c in _choices(t) or ())
    if get_origin(t) in (list, tuple):
        return "list"
    if get_origin(t) is dict or _is_struct(t):
        return "mapping"
    return {int: "integer", float: "number", str: "string", bool: "`true` / `false`"}.get(t, str(t))


def reference(struct: type, prefix: str = "") -> Iterator[Row]:
    """The rows of ``struct``'s keys, in declaration order (nested structs are not expanded)."""
    defaults = {f.encode_name: f.default for f in msgspec.structs.fields(struct)}
    for f in fields(struct):
        ge, le = f.meta.get("ge"), f.meta.get("le")
        allowed = "" if ge is None and le is None else \
            f"{_show(ge, f.meta) if ge is not None else ''} .. {_show(le, f.meta) if le is not None else ''}".strip()
        default = defaults.get(f.name)
        yield Row(key=prefix + f.name, required=f.required, type=_type_name(f.type), unit=f.meta.get("unit", ""),
                  allowed=allowed, default=None if default is msgspec.NODEFAULT else default,
                  doc=f.meta.get("description", ""), absent=f.meta.get("absent", ""))
