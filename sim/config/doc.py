"""The key reference of docs/run-config.md, generated from the run-config's schema (:mod:`sim.config.schema`).

``python -m sim.config.doc`` rewrites the tables between the page's ``<!-- keys: ... -->`` markers;
tests/test_run_config_doc.py checks that the page holds what :func:`tables` makes from the schema now.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from sim.config import schema as cs
from sim.files.schema import reference

DOC = Path(__file__).resolve().parents[2] / "docs" / "run-config.md"
_SOURCES = ("file", "fill", "random", "values")


def top_table() -> str:
    """The table of the top-level keys: key (linked to its section), required or optional, type, default."""
    lines = ["| key | | type | default |", "|---|---|---|---|"]
    rows = sorted(reference(cs.RunConfigFile), key=lambda r: not r.required)  # the required keys first
    for r in rows:
        lines.append(f"| [`{r.key}`](#{r.key}) | {'required' if r.required else 'optional'} | {r.doc} | "
                     f"{r.absent} |")
    return "\n".join(lines)


def entry_table() -> str:
    """The table of a ``data`` entry's keys (an ``outputs`` entry has the same ones but the four sources)."""
    lines = ["| key | | what |", "|---|---|---|"]
    rows = list(reference(cs.Data))
    for r in rows:
        if r.key in _SOURCES:
            continue
        what = r.doc
        if r.key == "dtype":
            what = "one of " + ", ".join(f"`{d}`" for d in cs.DTYPES)
        when = "required" if r.required else ("for private memory" if r.key == "core" else "optional")
        lines.append(f"| `{r.key}` | {when} | {what} |")
    lines.append(f"| {' / '.join(f'`{k}`' for k in _SOURCES)} | exactly one | where the array's values come from "
                 f"(below) |")
    return "\n".join(lines)


TABLES = {"top": top_table, "data": entry_table}
_BLOCK = re.compile(r"(<!-- keys: (\w+) \(generated from sim/config/schema\.py by python -m "
                    r"sim\.tools\.config_doc\) -->\n)(.*?)(\n<!-- end keys -->)", re.S)


def render(text: str) -> str:
    """``text`` (the page) with each generated table made anew from the schema."""
    return _BLOCK.sub(lambda m: m.group(1) + TABLES[m.group(2)]() + m.group(4), text)


def main() -> int:
    """Rewrite docs/run-config.md's generated tables; 0 when the page was up to date, 1 when it changed."""
    text = DOC.read_text(encoding="utf-8")
    new = render(text)
    if new != text:
        DOC.write_text(new, encoding="utf-8")
    return int(new != text)


if __name__ == "__main__":
    sys.exit(main())
