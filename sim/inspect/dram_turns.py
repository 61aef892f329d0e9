"""What a run's DRAM data buses spent turning between reads and writes, read back from its trace.

:mod:`sim.engine.turnaround` charges each byte written to a DRAM while something reads there; this module tells the
user how much of that there was, per region, from the trace's DMA events: each write's stream (from its
``wait_start`` to its last byte, one access latency before its end) overlapping the streams of the region's reads.
A stream is taken to move its bytes evenly over its interval, so the written bytes beside reads are an estimate;
the turns are those bytes over ``rows.write_batch_bytes``, each costing a channel ``write_to_read_cycles +
read_to_write_cycles`` of idle bus.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence

from sim.engine.events import DMA_KINDS, TraceEvent
from sim.model.target import Region, Target


def _merged(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Disjoint, sorted union of half-open intervals."""
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(intervals):
        if out and lo <= out[-1][1]:
            if hi > out[-1][1]:
                out[-1] = (out[-1][0], hi)
        else:
            out.append((lo, hi))
    return out


def _overlap(union: Sequence[tuple[int, int]], starts: Sequence[int], lo: int, hi: int) -> int:
    """Cycles of ``[lo, hi)`` inside the disjoint sorted ``union`` (``starts``: its intervals' starts)."""
    total = 0
    i = max(0, bisect.bisect_right(starts, lo) - 1)
    while i < len(union) and union[i][0] < hi:
        a, b = union[i]
        total += max(0, min(b, hi) - max(a, lo))
        i += 1
    return total


def _turning_regions(target: Target) -> dict[str, Region]:
    return {r.name: r for r in target.regions if r.rows is not None and r.rows.turns_around}


def written_beside_reads(events: Iterable[TraceEvent], target: Target) -> dict[str, tuple[int, float]]:
    """Per DRAM region whose bus turns around: (bytes written to it, of those the bytes written while a read of it
    streamed), from the trace (an estimate: each stream moving its bytes evenly)."""
    regions = _turning_regions(target)
    if not regions:
        return {}
    reads: dict[str, list[tuple[int, int]]] = {name: [] for name in regions}
    writes: dict[str, list[tuple[int, int, int, bool]]] = {name: [] for name in regions}
    for e in events:
        if e.kind not in DMA_KINDS or e.wait_start is None:
            continue
        src = regions.get(e.src_region or "")
        dst = regions.get(e.dst_region or "")
        if src is None and dst is None:
            continue
        latency = max(target.region(e.src_region).latency_cycles if e.src_region else 0,
                      target.region(e.dst_region).latency_cycles if e.dst_region else 0)
        lo, hi = e.wait_start, max(e.wait_start + 1, e.end - latency)
        if src is not None:
            reads[src.name].append((lo, hi))
        if dst is not None:
            writes[dst.name].append((lo, hi, e.bytes, src is dst))
    out: dict[str, tuple[int, float]] = {}
    for name in regions:
        if not writes[name]:
            continue
        union = _merged(reads[name])
        starts = [a for a, _ in union]
        total, beside = 0, 0.0
        for lo, hi, nbytes, copy in writes[name]:
            total += nbytes
            beside += nbytes if copy else nbytes * _overlap(union, starts, lo, hi) / (hi - lo)
        out[name] = (total, beside)
    return out


def turn_costs(events: Iterable[TraceEvent], target: Target) -> dict[str, tuple[float, int, float, float]]:
    """Per DRAM region some of whose writes met a read: (bytes written beside reads, bytes written, the turns those
    cost, the cycles of the region's whole bandwidth the turns idle), estimated from the trace as
    :func:`written_beside_reads` does."""
    out: dict[str, tuple[float, int, float, float]] = {}
    for name, (total, beside) in written_beside_reads(events, target).items():
        if beside <= 0:
            continue
        rows = target.region(name).rows
        assert rows is not None
        turns = beside / rows.write_batch_bytes
        # Each turn idles one channel's bus: 1 / channels of the region's bandwidth.
        out[name] = (beside, total, turns,
                     turns * (rows.write_to_read_cycles + rows.read_to_write_cycles) / rows.channels)
    return out


def turns_text(events: Iterable[TraceEvent], target: Target) -> str | None:
    """The summary's line on read/write turns: per DRAM region, the bytes written beside reads, the turns they
    cost and the cycles of the region's whole bandwidth they idle (None when no write met a read)."""
    parts = [f"{name}: {beside:,.0f} of {total:,} bytes written beside reads, about {turns:,.0f} turns, "
             f"{idle:,.0f} cycles of its whole bandwidth lost"
             for name, (beside, total, turns, idle) in turn_costs(events, target).items()]
    return "DRAM read/write turns: " + "; ".join(parts) if parts else None
