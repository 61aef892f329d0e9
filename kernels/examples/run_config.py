"""An example as the text of a run-config (``configs/<name>.yaml``), in the shipped configs' layout.

Addresses are written in hex (upper-case digits, ``core_mask`` in lower case), sizes in decimal; each
``data`` and ``outputs`` entry on one line, but a long list of literal values (a params array) as a block.
"""

from __future__ import annotations

from typing import Any

from kernels.examples import Data, Example, Output

#: Integers at least this large are addresses, written in hex.
ADDRESS_FLOOR = 0x10000


def _scalar(value: Any, key: str = "") -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        if key == "core_mask":
            return f"{value:#x}"
        return f"0x{value:X}" if value >= ADDRESS_FLOOR else str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_scalar(v) for v in value) + "]"
    text = str(value)
    if ": " in text or text.startswith(("#", "{", "[", "'", '"')) or " #" in text:
        raise ValueError(f"{text!r} needs quoting in YAML: reword it")
    return text


def _data(d: Data) -> str:
    fields = [("name", d.name), ("addr", f"0x{d.addr:X}")]
    if d.core is not None:
        fields.append(("core", str(d.core)))
    fields += [("shape", _scalar(list(d.shape))), ("dtype", d.dtype)]
    if d.random is not None:
        seed, low, high = d.random
        source = ("random", f"{{seed: {seed}, low: {_scalar(float(low))}, high: {_scalar(float(high))}}}")
    else:
        source = ("values", _scalar(d.values))
    if isinstance(d.values, (list, tuple)) and len(d.values) > 1:
        return "  - " + "\n    ".join(f"{k}: {v}" for k, v in [*fields, source])
    return "  - {" + ", ".join(f"{k}: {v}" for k, v in [*fields, source]) + "}"


def _output(o: Output) -> str:
    fields = [("name", o.name), ("addr", f"0x{o.addr:X}")]
    if o.core is not None:
        fields.append(("core", str(o.core)))
    fields += [("shape", _scalar(list(o.shape))), ("dtype", o.dtype)]
    return "  - {" + ", ".join(f"{k}: {v}" for k, v in fields) + "}"


def run_config_text(e: Example) -> str:
    """The run-config of example ``e`` (which must have a ``config`` name)."""
    if not e.config:
        raise ValueError(f"example {e.example_id} is not shipped as a run-config")
    lines = [f"# {line}" if line else "#" for line in e.comment.splitlines()]
    lines += [f"description: {_scalar(e.description)}", f"target: {e.chip}", f"symbol: {e.symbol}", "args:"]
    lines += [f"  {k}: {_scalar(v, k)}" for k, v in e.args.items()]
    lines += ["data:", *(_data(d) for d in e.data), "outputs:", *(_output(o) for o in e.outputs)]
    lines.append(f"trace: {e.config}.json")
    return "\n".join(lines) + "\n"
