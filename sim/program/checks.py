"""What a program is refused for before anything runs: the rules that span its calls.

Each call's own layout is :mod:`sim.model.layout`'s; these rules follow the bytes from call to call, in the
program's order: the data entries place their bytes (step 0), each call reads its input buffers and then writes
its output buffers, the ``outputs`` entries read theirs at the end.  Each finding is a
:class:`~sim.model.layout.Violation` (its ``buffer`` the tensor, or the buffer when it lies in no tensor):

* ``unwritten-read``: a call (or an ``outputs`` entry) reads bytes that no data entry placed and no earlier call
  wrote, so it would read zeros, or another tensor's bytes where its own never were;
* ``overwrite``: a call's output, or a block its plan stages in a staging level (GEMM's blocks of A in the GSM
  it takes whole when its buffers lie elsewhere), overwrites bytes of a tensor that a later call (or an
  ``outputs`` entry) still reads (named at that read: the writer, the tensor it destroyed and the reader);
* ``other-core``: a ``_p`` call's buffer lies in a tensor of another core's copy of the private memory (the call
  would read, or write, its own core's copy at those addresses);
* ``tensor-bounds``: a buffer that starts in a tensor runs past its end (the tensor is too small for the call);
* ``tensor-dtype``: a buffer's element type is not its tensor's (float32 data for an ``hp_`` call's fp16 tensor).

An in-place buffer (GEMM's ``c`` with ``beta`` 1) is read, then written.  A matrix stored with a row pitch
(GEMM's ``lda``, ``ldb``, ``ldc``) is read and written in its rows' elements only, never in the bytes between a
row's end and its pitch (:meth:`~sim.model.call.Buffer.touched`).
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from sim.model.call import BoundCall, Buffer
from sim.model.layout import Violation
from sim.model.memory import MemoryMap
from sim.model.plan import Plan
from sim.model.plan_alias import merged
from sim.model.target import StagingArea, Target
from sim.program.planner import MemoryKey, MemoryPlan, Placement

#: Rule id -> the rule in words (docs/programs.md lists them).
RULES: dict[str, str] = {
    "unwritten-read": "a call reads only bytes that a data entry placed or an earlier call wrote",
    "overwrite": "no output overwrites a tensor a later call (or an outputs entry) still reads",
    "other-core": "a _p call's buffers lie in its own core's tensors, never another core's",
    "tensor-bounds": "a buffer that starts in a tensor lies wholly inside it",
    "tensor-dtype": "a buffer has its tensor's element type",
    "no-room": "every auto tensor finds room in its memory beside the tensors alive with it",
}


def _range(lo: int, hi: int) -> str:
    return f"[{lo:#x}, {hi:#x})"


@dataclass(frozen=True)
class Access:
    """One step's use of some bytes: a buffer a call reads or writes, or an entry placed or read back.
    ``runs``: the byte ranges it touches when not all of ``[start, end)`` (a matrix's rows short of its pitch)."""

    who: str  # "call 'bn3' (fp_fused_batch_norm_grad_s)", "data 'x'", "outputs 'dx'"
    buffer: str  # the buffer's (or entry's) own name
    key: MemoryKey
    start: int
    end: int
    tensor: str | None  # the tensor it lies in (None: a raw address)
    where: str  # "ddr", "core 2's l2"
    staging: bool = False  # bytes the call's plan stages in (a staging level), not a buffer of the call
    runs: tuple[tuple[int, int], ...] | None = None

    def ranges(self) -> tuple[tuple[int, int], ...]:
        """The byte ranges ``[lo, hi)`` the access touches, in address order."""
        return self.runs if self.runs is not None else ((self.start, self.end),)


@dataclass
class _Seg:
    start: int
    end: int
    by: Access  # the write that put these bytes there


@dataclass(frozen=True)
class _Clobber:
    key: MemoryKey
    start: int
    end: int
    victim: str  # the tensor whose bytes were overwritten
    by: Access


class _Bytes:
    """Who wrote each byte of each memory last, and whose tensors' bytes writes destroyed.  Each memory's segments
    are disjoint and kept sorted, with their ends beside them, so that a write or a read finds what it meets by
    bisection (a matrix written row by row is thousands of writes)."""

    def __init__(self) -> None:
        self.segs: dict[MemoryKey, list[_Seg]] = {}
        self.ends: dict[MemoryKey, list[int]] = {}
        self.clobbered: list[_Clobber] = []

    def write(self, a: Access) -> None:
        for lo, hi in a.ranges():
            self._write(a, lo, hi)

    def _write(self, a: Access, start: int, end: int) -> None:
        segs = self.segs.setdefault(a.key, [])
        ends = self.ends.setdefault(a.key, [])
        i = j = bisect.bisect_right(ends, start)  # the first segment ending past ``start``
        kept: list[_Seg] = []
        while j < len(segs) and segs[j].start < end:
            s = segs[j]
            lo, hi = max(s.start, start), min(s.end, end)
            if s.by.tensor is not None and s.by.tensor != a.tensor:
                self.clobbered.append(_Clobber(a.key, lo, hi, s.by.tensor, a))
            if s.start < start:
                kept.append(_Seg(s.start, start, s.by))
            j += 1
        tail = segs[j - 1] if j > i and segs[j - 1].end > end else None
        kept.append(_Seg(start, end, a))
        if tail is not None:
            kept.append(_Seg(end, tail.end, tail.by))
        segs[i:j] = kept
        ends[i:j] = [s.end for s in kept]

    def pieces(self, a: Access, start: int, end: int) -> list[tuple[int, int, _Seg | None]]:
        """``[start, end)`` of ``a``'s memory cut by who wrote it last (None: nobody)."""
        out: list[tuple[int, int, _Seg | None]] = []
        segs = self.segs.get(a.key, [])
        j = bisect.bisect_right(self.ends.get(a.key, []), start)
        cursor = start
        while j < len(segs) and segs[j].start < end:
            s = segs[j]
            if s.start > cursor:
                out.append((cursor, s.start, None))
            out.append((max(s.start, cursor), min(s.end, end), s))
            cursor = min(s.end, end)
            j += 1
        if cursor < end:
            out.append((cursor, end, None))
        return out

    def read(self, a: Access) -> list[Violation]:
        """The violations of reading ``a`` now (see the module's rules): the first one found."""
        for lo, hi in a.ranges():
            found = self._read(a, lo, hi)
            if found:
                return found
        return []

    def _read(self, a: Access, start: int, end: int) -> list[Violation]:
        out: list[Violation] = []
        what = f"tensor '{a.tensor}'" if a.tensor is not None else f"buffer '{a.buffer}'"
        reader = f"{a.who}" + (f" (its buffer '{a.buffer}')" if a.tensor is not None and a.buffer != a.tensor else "")
        for lo, hi, seg in self.pieces(a, start, end):
            if seg is not None and (a.tensor is None or seg.by.tensor == a.tensor):
                continue
            if a.tensor is not None:
                hit = next((c for c in reversed(self.clobbered) if c.key == a.key and c.victim == a.tensor
                            and c.start < hi and lo < c.end), None)
                if hit is not None:
                    lo, hi = max(lo, hit.start), min(hi, hit.end)
                    by = hit.by
                    written = (f"stages blocks in {by.where} {_range(by.start, by.end)} (staging level "
                               f"'{by.buffer}', which its plan owns during the call)" if by.staging else
                               f"writes its output '{by.buffer}'" + (f" (tensor '{by.tensor}')" if by.tensor else "")
                               + f" {_range(by.start, by.end)}")
                    rule = ("keep the tensor out of the staging levels of the calls it lives across (another "
                            "region)" if by.staging else "an output may not overwrite a tensor a later call reads")
                    out.append(Violation(a.tensor, "overwrite",
                                         f"{by.who} {written} over {hi - lo} bytes {_range(lo, hi)} of "
                                         f"tensor '{a.tensor}' in {a.where}, which {reader} still reads later: "
                                         f"{rule}", None, lo, hi, a.key[0]))
                    continue
            held = "" if seg is None else (f" (they hold {seg.by.who})" if seg.by.who.endswith(f"'{seg.by.buffer}'")
                                           else f" (they hold {seg.by.who}'s '{seg.by.buffer}')")  # (data 'x')
            out.append(Violation(a.tensor or a.buffer, "unwritten-read",
                                 f"{reader} reads {what} {_range(a.start, a.end)} in {a.where}, but its bytes "
                                 f"{_range(lo, hi)} were placed by no data entry and written by no earlier call"
                                 f"{held}: place them (data) or make an earlier call write them",
                                 None, lo, hi, a.key[0]))
        return out[:1]  # the first finding per access names the mistake


@dataclass(frozen=True)
class CallBuffers:
    """One call of a program, bound: what the checks see of it (``staged``: the bytes its plan writes in staging
    levels, as ``(memory, start, end, level)``, once its plan is known)."""

    name: str
    call: BoundCall
    named: tuple[str, ...]  # the tensors its arguments name
    by_arg: Mapping[str, str] = field(default_factory=dict)  # pointer argument -> the tensor it names
    staged: tuple[tuple[MemoryKey, int, int, str], ...] = ()


def staged_bytes(plan: Plan, levels: Sequence[StagingArea], mmap: MemoryMap
                 ) -> tuple[tuple[MemoryKey, int, int, str], ...]:
    """The bytes ``plan``'s transfers write in the staging ``levels`` (a call's plan as it runs), per memory and
    level, merged: what a program's tensor in such a level loses across the call."""
    spans: dict[tuple[MemoryKey, str], list[tuple[int, int]]] = {}
    for phase in plan.phases:
        for core, tiles in phase.tiles.items():
            for tile in tiles:
                for t in tile.loads + tile.stores:
                    lo, hi = t.span("dst")
                    level = next((a for a in levels if a.base <= lo and hi <= a.end), None)
                    if level is None or hi <= lo:
                        continue
                    region = mmap.region_of(lo, hi - lo)
                    if region is not None:
                        spans.setdefault(((region.name, None if region.shared else int(core)), level.name),
                                         []).append((lo, hi))
    out = []
    for (key, name), got in spans.items():
        for lo, hi in merged(got):
            out.append((key, lo, hi, name))
    return tuple(out)


def _where(key: MemoryKey) -> str:
    region, core = key
    return region if core is None else f"core {core}'s {region}"


def locate(mmap: MemoryMap, plan: MemoryPlan, b: Buffer, core: int | None, named: Sequence[str] = (),
           arg_tensor: str | None = None) -> tuple[MemoryKey | None, Placement | None, Placement | None]:
    """The memory a buffer lies in (None when unmapped), the tensor of that memory it starts in, and the tensor of
    *another* core's copy its own argument names instead (``arg_tensor``: it decides when it holds the buffer's
    start; else the tensors ``named`` by the call come first, then any of that memory).  A buffer at a raw address
    lies in the call's own copy of a private region, whatever another core's copy holds there."""
    region = mmap.region_of(b.addr, b.size_bytes)
    if region is None:
        return None, None, None
    key: MemoryKey = (region.name, None if region.shared else core)
    hits = [p for p in plan.placements if p.region.name == region.name and p.addr <= b.addr < p.end]
    mine = [p for p in hits if p.tensor.name == arg_tensor]
    if mine:
        return (key, mine[0], None) if mine[0].key == key else (key, None, mine[0])
    own = sorted((p for p in hits if p.key == key), key=lambda p: (p.tensor.name not in named, p.addr))
    return key, (own[0] if own else None), None


def check_calls(target: Target, plan: MemoryPlan, calls: Sequence[CallBuffers],
                data: Sequence[tuple[str, Access]], outputs: Sequence[tuple[str, Access]]) -> list[Violation]:
    """Every violation of the module's rules, in the program's order (data, calls, outputs).

    ``data`` and ``outputs`` are the entries as accesses (see :func:`entry_access`).
    """
    mmap = MemoryMap(target)
    out: list[Violation] = []
    state = _Bytes()
    for _, a in data:
        state.write(a)
    for c in calls:
        core = c.call.cores[0] if c.call.variant == "p" else None
        who = f"call '{c.name}' ({c.call.symbol})"
        reads: list[Access] = []
        writes: list[Access] = []
        for b in c.call.buffers:
            if not b.size_bytes:
                continue
            key, home, foreign = locate(mmap, plan, b, core, c.named, c.by_arg.get(b.name))
            if key is None:
                continue  # unmapped: the call's layout check says so
            if foreign is not None and core is not None:
                verb = "reads" if b.role == "input" else "writes"
                out.append(Violation(foreign.tensor.name, "other-core",
                                     f"{who} runs on core {core} and {verb} buffer '{b.name}' "
                                     f"{_range(b.addr, b.end)} in tensor '{foreign.tensor.name}' "
                                     f"{_range(foreign.addr, foreign.end)}, which lives in core {foreign.core}'s "
                                     f"{foreign.region.name}: a _p call sees only its own core's private memory "
                                     f"(give the tensor core: {core}, or run the call on core {foreign.core})",
                                     None, b.addr, b.end, foreign.region.name))
                continue
            touched = b.touched()
            if home is not None:
                t = home.tensor
                if touched[-1][1] > home.end:  # (a pitched view's last row ends at its elements, not its pitch)
                    out.append(Violation(t.name, "tensor-bounds",
                                         f"{who}'s buffer '{b.name}' {_range(b.addr, b.end)} ({b.size_bytes} bytes) "
                                         f"starts in tensor '{t.name}' {_range(home.addr, home.end)} "
                                         f"({t.size_bytes} bytes, {t.dtype.name}{list(t.shape)}) and runs "
                                         f"{touched[-1][1] - home.end} bytes past its end", None, b.addr, b.end,
                                         key[0]))
                    continue
                if b.dtype != t.dtype:
                    out.append(Violation(t.name, "tensor-dtype",
                                         f"{who} {'reads' if b.role == 'input' else 'writes'} buffer '{b.name}' "
                                         f"as {b.dtype}, but tensor '{t.name}' holds {t.dtype.name}: declare the "
                                         f"tensor as {b.dtype}", None, b.addr, b.end, key[0]))
                    continue
            a = Access(who, b.name, key, b.addr, b.end, None if home is None else home.tensor.name, _where(key),
                       runs=None if touched == [(b.addr, b.end)] else tuple(touched))
            if b.role == "input" or b.reads_too:  # an output updated in place reads what was there first
                reads.append(a)
            if b.role != "input":
                writes.append(a)
        for a in reads:
            out.extend(state.read(a))
        for a in writes:
            state.write(a)
        for key, lo, hi, level in c.staged:
            state.write(Access(who, level, key, lo, hi, None, _where(key), staging=True))
    for _, a in outputs:
        out.extend(state.read(a))
    return out


def entry_access(mmap: MemoryMap, plan: MemoryPlan, who: str, name: str, addr: int, size_bytes: int,
                 core: int | None, tensor: str | None) -> Access | None:
    """A data or outputs entry as an access (None when its address is illegal: the entry's own check says so)."""
    region = mmap.region_of(addr, size_bytes)
    if region is None or size_bytes == 0:
        return None
    key: MemoryKey = (region.name, None if region.shared else core)
    if tensor is None:  # a raw entry over a tensor's bytes places (or reads) that tensor
        hit = next((p for p in plan.placements if p.key == key and p.addr <= addr < p.end), None)
        tensor = None if hit is None else hit.tensor.name
    return Access(who, name, key, addr, addr + size_bytes, tensor, _where(key))


__all__ = ["RULES", "Access", "CallBuffers", "locate", "check_calls", "entry_access", "staged_bytes"]
