"""The layout map of a call: its buffers per region in address order, the gaps, the reserved windows and the
violations, as text (``dspsim validate``) and as data (JSON, reports)."""

from __future__ import annotations

from collections.abc import Sequence

from sim.model.call import BoundCall
from sim.model.layout import Violation, free_spans
from sim.model.memory import MemoryMap
from sim.model.target import Target


def _human(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            v = n / (1 << shift)
            return f"{v:.0f} {unit}" if v == int(v) else f"{n} B, {v:.1f} {unit}"
    return f"{n} B"


def layout_rows(call: BoundCall, target: Target) -> list[dict]:
    """The call's buffers in address order with their region and owner core (None for shared memory)."""
    mmap = MemoryMap(target)
    rows = []
    for b in sorted(call.buffers, key=lambda b: (b.addr, b.name)):
        r = mmap.region_at(b.addr)
        rows.append({"buffer": b.name, "role": b.role, "start": b.addr, "end": b.end, "size_bytes": b.size_bytes,
                     "dtype": b.dtype.name, "shape": list(b.shape), "region": r.name if r else None,
                     # Only a _p call owns a core's private copy; an _s buffer there belongs to no core.
                     "core": (call.cores[0] if (r is not None and not r.shared and call.variant == "p")
                              else None)})
    return rows


def layout_report(call: BoundCall, target: Target, violations: Sequence[Violation] = ()) -> dict:
    """The layout as data: regions holding buffers (in address order, with the gaps), and the violations."""
    rows = layout_rows(call, target)
    regions = []
    for r in target.regions:
        items = [row for row in rows if row["region"] == r.name]
        if not items:
            continue
        # The shared staging windows: the first is the kernels' workspace (cross-core partial results).
        reserved = [{"name": "workspace" if i == 0 else level.name, "level": level.name, "start": level.base,
                     "end": level.end, "size_bytes": level.size_bytes}
                    for i, level in enumerate(target.shared_levels) if level.region == r.name]
        gaps = [{"start": lo, "end": hi, "size_bytes": hi - lo}
                for lo, hi in free_spans(r, [(row["start"], row["end"]) for row in items]
                                          + [(w["start"], w["end"]) for w in reserved])]
        entry = {"name": r.name, "base": r.base, "end": r.end, "size_bytes": r.size_bytes, "kind": r.kind,
                 "role": r.role, "alignment_bytes": r.alignment_bytes,
                 "core": items[0]["core"], "buffers": items, "gaps": gaps, "reserved": reserved}
        regions.append(entry)
    return {"target": target.name, "symbol": call.symbol, "variant": call.variant, "cores": list(call.cores),
            "regions": regions, "unmapped": [row for row in rows if row["region"] is None],
            "violations": [v.as_dict() for v in violations], "ok": not violations}


def layout_map(call: BoundCall, target: Target, violations: Sequence[Violation] = ()) -> str:
    """A text layout map: per region, buffers in address order with the gaps between them, then violations."""
    rep = layout_report(call, target, violations)
    bad = {v.buffer for v in violations}
    digits = (target.address_bits + 3) // 4

    def a(addr: int) -> str:
        return f"0x{addr:0{digits}x}"

    lines = [f"{call.symbol} on {target.name} (cores {', '.join(map(str, call.cores))})"]
    for reg in rep["regions"]:
        owner = f", core {reg['core']}'s copy" if reg["core"] is not None else ""
        lines.append(f"region {reg['name']} [{reg['base']:#x}, {reg['end']:#x}) {reg['kind']}{owner}, "
                     f"{_human(reg['size_bytes'])}")
        events = [("buf", row["start"], row) for row in reg["buffers"]]
        events += [("gap", g["start"], g) for g in reg["gaps"]]
        events += [("ws", w["start"], w) for w in reg["reserved"]]
        cursor = reg["base"]
        for kind, _, item in sorted(events, key=lambda e: (e[1], e[0] != "gap")):
            if kind == "gap":
                label = "free" if item["start"] == reg["base"] or item["end"] == reg["end"] else "gap"
                lines.append(f"  {a(item['start'])}-{a(item['end'])}  ({label} {_human(item['size_bytes'])})")
            elif kind == "ws":
                what = "workspace" if item["name"] == "workspace" else f"staging level {item['level']}"
                lines.append(f"  {a(item['start'])}-{a(item['end'])}  [reserved: kernels' {what}, "
                             f"{_human(item['size_bytes'])}]")
            else:
                if item["start"] < cursor:
                    lines.append(f"    ^ overlaps the buffer above by {cursor - item['start']} bytes")
                mark = "  !" if item["buffer"] in bad else ""
                lines.append(f"  {a(item['start'])}-{a(item['end'])}  {item['buffer']:<16} {item['role']:<6} "
                             f"{item['size_bytes']:>11} B  {item['dtype']}{item['shape']}{mark}")
                cursor = max(cursor, item["end"])
    for row in rep["unmapped"]:
        lines.append(f"unmapped: {row['buffer']} [{row['start']:#x}, {row['end']:#x}) {row['size_bytes']} B "
                     f"{row['dtype']}{row['shape']}  !")
    for v in violations:
        lines.append(f"VIOLATION {v}")
    return "\n".join(lines)
