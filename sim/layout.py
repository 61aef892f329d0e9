"""Static layout checks of a call's buffers against the chip's memory map (SPEC section 5).

Each violation names the buffer, its address range, the region and the rule,
and suggests the nearest legal address where one exists.  The same checks run
before every call and in ``dspsim validate``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from kernels.base import Buffer, BoundCall
from sim.errors import LayoutError
from sim.memory import MemoryMap
from sim.target import Region, Target


@dataclass(frozen=True)
class Violation:
    """One broken layout rule."""

    buffer: str
    rule: str
    message: str
    suggestion: int | None = None

    def __str__(self) -> str:
        tail = f"; nearest legal address: {self.suggestion:#x}" if self.suggestion is not None else ""
        return f"{self.message}{tail}"


def _range(b: Buffer) -> str:
    return f"[{b.addr:#x}, {b.end:#x})"


def required_alignment(b: Buffer, region: Region) -> int:
    """The alignment a buffer needs in ``region``: its element size, or the region's, whichever is larger."""
    return max(b.dtype.itemsize, region.alignment_bytes)


def check_layout(call: BoundCall, target: Target) -> list[Violation]:
    """Every layout rule ``call`` breaks, in buffer order."""
    mmap = MemoryMap(target)
    out: list[Violation] = []
    placed: list[tuple[Buffer, Region]] = []
    ws_lo, ws_hi = target.workspace_range
    want_kind = "shared" if call.variant == "s" else "private"
    for b in call.buffers:
        if b.size_bytes == 0:
            continue
        region = mmap.region_of(b.addr, b.size_bytes)
        if region is None:
            start = mmap.region_at(b.addr)
            if start is not None:
                out.append(Violation(b.name, "inside-one-region",
                                     f"buffer '{b.name}' {_range(b)} ({b.size_bytes} bytes) runs past the end of "
                                     f"region {start.name} [{start.base:#x}, {start.end:#x}): a buffer must lie "
                                     f"wholly inside one mapped region",
                                     _fit_in(start, b)))
            else:
                out.append(Violation(b.name, "mapped",
                                     f"buffer '{b.name}' {_range(b)} is {mmap.describe(b.addr)}: "
                                     f"a buffer must lie wholly inside one mapped region",
                                     _nearest_region_start(target, b, want_kind)))
            continue
        where = f"buffer '{b.name}' {_range(b)} in region {region.name}"
        if region.role == "scratchpad":
            out.append(Violation(b.name, "not-scratchpad",
                                 f"{where}: {region.name} is the cores' tile-staging scratchpad, which kernels "
                                 f"own during a call; place call buffers in "
                                 f"{'ddr or gsm' if call.variant == 's' else 'l2'}",
                                 _nearest_region_start(target, b, want_kind)))
            continue
        if region.kind != want_kind:
            rule = "shared-memory" if call.variant == "s" else "private-memory"
            what = ("shared memory (DDR or GSM)" if call.variant == "s"
                    else f"core {call.cores[0]}'s private memory (l2)")
            out.append(Violation(b.name, rule,
                                 f"{where} ({region.kind}): the _{call.variant} variant {call.symbol} takes its "
                                 f"buffers in {what}",
                                 _nearest_region_start(target, b, want_kind)))
            continue
        if b.addr < ws_hi and ws_lo < b.end and region.name == target.workspace.region:
            out.append(Violation(b.name, "workspace",
                                 f"{where} overlaps [{ws_lo:#x}, {ws_hi:#x}), the window of {region.name} "
                                 f"reserved for the kernels' cross-core partial results",
                                 ws_lo - b.size_bytes if ws_lo - b.size_bytes >= region.base else ws_hi))
            continue
        align = required_alignment(b, region)
        if b.addr % align:
            down = b.addr - b.addr % align
            up = down + align
            best = down if (b.addr - down <= up - b.addr and down >= region.base) else up
            why = (f"the element size ({b.dtype.itemsize} bytes of {b.dtype.name})" if align == b.dtype.itemsize
                   else f"the {region.name} region's {align}-byte alignment")
            out.append(Violation(b.name, "alignment",
                                 f"{where} is misaligned: its address must be a multiple of {align} bytes, "
                                 f"{why}", best))
            continue
        placed.append((b, region))
    for i, (a, ra) in enumerate(placed):
        for b, rb in placed[i + 1:]:
            if ra is not rb or not (a.addr < b.end and b.addr < a.end):
                continue
            if a.role != "output" and b.role != "output":
                continue  # inputs may alias one another
            out_b, other = (a, b) if a.role == "output" else (b, a)
            align = required_alignment(out_b, ra)
            suggestion = -(-max(a.end, b.end) // align) * align
            out.append(Violation(out_b.name, "no-overlap",
                                 f"output buffer '{out_b.name}' {_range(out_b)} overlaps {other.role} buffer "
                                 f"'{other.name}' {_range(other)} in region {ra.name}: an output may not share "
                                 f"bytes with another buffer of the call",
                                 suggestion if suggestion + out_b.size_bytes <= ra.end else None))
    return out


def _fit_in(region: Region, b: Buffer) -> int | None:
    addr = region.end - b.size_bytes
    addr -= addr % max(b.dtype.itemsize, region.alignment_bytes)
    return addr if addr >= region.base else None


def _nearest_region_start(target: Target, b: Buffer, kind: str) -> int | None:
    candidates = [r for r in target.regions if r.kind == kind and r.role == "storage" and r.size_bytes >= b.size_bytes]
    if not candidates:
        return None
    r = min(candidates, key=lambda r: min(abs(r.base - b.addr), abs(r.end - b.addr)))
    if r.base <= b.addr < r.end:
        return _fit_in(r, b)
    return r.base if b.addr < r.base else _fit_in(r, b)


def enforce_layout(call: BoundCall, target: Target) -> None:
    """Raise LayoutError listing every violation of ``call``; return quietly when the layout is legal."""
    violations = check_layout(call, target)
    if violations:
        raise LayoutError("; ".join(str(v) for v in violations))


def layout_rows(call: BoundCall, target: Target) -> list[dict]:
    """The call's buffers in address order with their region, for layout maps."""
    mmap = MemoryMap(target)
    rows = []
    for b in sorted(call.buffers, key=lambda b: (b.addr, b.name)):
        r = mmap.region_at(b.addr)
        rows.append({"buffer": b.name, "role": b.role, "start": b.addr, "end": b.end, "size_bytes": b.size_bytes,
                     "dtype": b.dtype.name, "shape": list(b.shape), "region": r.name if r else None,
                     "core": (call.cores[0] if (r is not None and not r.shared) else None)})
    return rows


def layout_map(call: BoundCall, target: Target, violations: Sequence[Violation] = ()) -> str:
    """A text layout map: per region, buffers in address order with the gaps between them."""
    rows = layout_rows(call, target)
    lines = [f"{call.symbol} on {target.name} (cores {', '.join(map(str, call.cores))})"]
    by_region: dict[str | None, list[dict]] = {}
    for row in rows:
        by_region.setdefault(row["region"], []).append(row)
    for r in target.regions:
        items = by_region.get(r.name)
        if not items:
            continue
        lines.append(f"region {r.name} [{r.base:#x}, {r.end:#x}) {r.kind}")
        cursor = None
        for row in items:
            if cursor is not None and row["start"] > cursor:
                lines.append(f"    gap  {row['start'] - cursor} bytes")
            elif cursor is not None and row["start"] < cursor:
                lines.append(f"    OVERLAP {cursor - row['start']} bytes")
            owner = f" core {row['core']}" if row["core"] is not None else ""
            lines.append(f"  {row['start']:#012x}-{row['end']:#012x}  {row['buffer']:<24} {row['role']:<6} "
                         f"{row['size_bytes']:>12} B  {row['dtype']}{list(row['shape'])}{owner}")
            cursor = max(cursor or 0, row["end"])
    for row in by_region.get(None, []):
        lines.append(f"unmapped: {row['buffer']} [{row['start']:#x}, {row['end']:#x})")
    for v in violations:
        lines.append(f"VIOLATION [{v.rule}] {v}")
    return "\n".join(lines)
