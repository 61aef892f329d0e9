"""The fitted target file: a copy of the original, line for line, with the fitted values and source notes."""

from __future__ import annotations

import copy
import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sim.calibrate.fit import Calibration
from sim.calibrate.parameters import is_cycles, with_parameters
from sim.errors import ConfigError, TargetError
from sim.extras import need
from sim.files.docedit import get_path, set_path, split_path
from sim.files.yamlsafe import load_yaml, read_yaml_text
from sim.model.target_loader import parse_target, resolve_target_path


@dataclass(frozen=True)
class TargetDocument:
    """A target file as read for calibration: its parsed document, its text (for the commented copy), its path."""

    doc: dict
    text: str
    path: Path


def read_target_document(name_or_path: str | Path) -> TargetDocument:
    """A shipped chip (by name) or a target file, read with the project's strict YAML reader."""
    try:
        p = resolve_target_path(name_or_path)
        # Regular files only (a named pipe would block), at most 1 MiB, UTF-8: the strict reader's rules.
        text = read_yaml_text(p, str(p), TargetError, what="target file")
    except TargetError as e:
        raise ConfigError(f"--target: {e}") from None
    doc = load_yaml(text, str(p), TargetError)
    parse_target(copy.deepcopy(doc), str(p))  # a broken starting target is refused before any fitting
    return TargetDocument(doc=doc, text=text, path=p)


def load_target_document(name_or_path: str | Path) -> tuple[dict, str]:
    """The YAML document of a shipped chip (by name) or of a target file, and its path."""
    t = read_target_document(name_or_path)
    return t.doc, str(t.path)


def _guess_indent(text: str) -> tuple[int, int, int]:
    """The file's mapping indent, sequence indent and dash offset, so a round trip keeps its layout."""
    mapping = sequence = offset = None
    prev_key_indent = None
    parent_indent = 0
    for line in text.splitlines():
        stripped = line.lstrip(" ")
        if not stripped or stripped.startswith("#"):
            continue
        indent = len(line) - len(stripped)
        if stripped.startswith("- ") and sequence is None and prev_key_indent is not None:
            offset = indent - parent_indent
            sequence = offset + 2 + (len(stripped[2:]) - len(stripped[2:].lstrip(" ")))
        elif mapping is None and prev_key_indent is not None and indent > prev_key_indent:
            mapping = indent - prev_key_indent
        if stripped.rstrip().endswith(":"):
            prev_key_indent = parent_indent = indent
        else:
            prev_key_indent = None
        if mapping is not None and sequence is not None:
            break
    mapping = mapping or 2
    return mapping, sequence or mapping + 2, offset if offset is not None else 2


def _append_note(node: Any, note: str) -> None:
    """Append ``note`` to a mapping's ``source`` (the provenance every group of numbers in a target carries)."""
    if isinstance(node, dict) and isinstance(node.get("source"), str):
        node["source"] = type(node["source"])(f"{node['source']}; {note}") if node["source"] else note


def fitted_yaml(cal: Calibration, target: TargetDocument, measurements_path: str | Path) -> str:
    """The fitted target file: a copy of ``target`` that keeps its comments, hex numbers and key order, with
    only the fitted values changed, ``name`` marked calibrated, and notes of what was fitted from what."""
    need("calibrate", "writing a calibrated target file", ("ruamel.yaml",))
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError as RuamelError
    from ruamel.yaml.scalarint import ScalarInt

    rt = YAML()  # round trip: comments, key order, quoting and number formats survive
    rt.preserve_quotes = True
    rt.width = 1 << 16  # never fold a long line the file did not fold
    mapping, sequence, offset = _guess_indent(target.text)
    rt.indent(mapping=mapping, sequence=sequence, offset=offset)
    try:
        doc = rt.load(target.text)
    except RuamelError as e:
        raise ConfigError(f"{target.path}: cannot edit a copy of this file: {' '.join(str(e).split())[:200]}") \
            from None
    mname = Path(measurements_path).name
    for n in cal.fitted:
        keys = split_path(n)
        parent = get_path(doc, keys[:-1], n)
        old = parent.get(keys[-1]) if isinstance(parent, dict) else None
        new: Any = cal.after[n]
        if is_cycles(n) and isinstance(old, ScalarInt):
            new = type(old)(int(new))  # a hex or binary number stays hex or binary
        set_path(doc, keys, new, n, create=True)
        was = "absent" if old is None else f"{old}"
        _append_note(parent, f"{keys[-1]} fitted by dspsim calibrate to {mname} (was {was})")
    name = str(doc.get("name"))
    doc["name"] = name if name.endswith(" (calibrated)") else f"{name} (calibrated)"  # a recalibration says it once
    kept = f"; not identified, kept: {', '.join(cal.unidentified)}" if cal.unidentified else ""
    fitted = ", ".join(f"{n} {cal.before[n]:.4g} -> {cal.after[n]:.4g}" for n in cal.fitted) or "nothing"
    _append_note(doc, f"calibrated by dspsim calibrate from {target.path.name} and {len(cal.measured)} "
                      f"measurements in {mname}: fitted {fitted}{kept}")
    buf = io.StringIO()
    rt.dump(doc, buf)
    header = (f"# Calibrated: a copy of {target.path.name} with {', '.join(cal.fitted) or 'no parameter'} fitted "
              f"by dspsim calibrate to {mname}.\n")
    text = header + buf.getvalue()
    _check_copy(text, target, cal, f"calibrated copy of {target.path}")
    return text


def _check_copy(text: str, target: TargetDocument, cal: Calibration, where: str) -> None:
    """The written copy reads (with the strict reader) as the target with only the fitted values, the name and
    the source notes changed, and loads as a target."""
    got = load_yaml(text, where, TargetError)
    expected = with_parameters(target.doc, {n: cal.after[n] for n in cal.fitted})

    def without_notes(node: Any) -> Any:
        if isinstance(node, dict):
            return {k: without_notes(v) for k, v in node.items() if k not in ("source", "name")}
        if isinstance(node, list):
            return [without_notes(v) for v in node]
        return node

    if without_notes(got) != without_notes(expected) or not isinstance(got.get("name"), str):
        raise ConfigError(f"{where}: the edited copy does not read back as the fitted target (a YAML construct "
                          f"this editor cannot keep?); nothing written")
    parse_target(got, where)
