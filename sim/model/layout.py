"""Static layout checks of a call's buffers against the chip's memory map (SPEC section 5).

The rules, each with the id a :class:`Violation` carries (see ``RULES``):

* ``mapped`` / ``inside-one-region``: a buffer lies wholly inside one mapped region;
* ``not-scratchpad``: never in the cores' tile-staging scratchpads (every region of a per-core staging
  level, and every region with role scratchpad), which kernels own during a call;
* ``shared-memory`` / ``private-memory``: ``_s`` buffers in shared memory, ``_p`` buffers in the
  calling core's private memory;
* ``workspace``: never in a window of shared memory the kernels own as a staging level (the first one
  holds their cross-core partial results);
* ``alignment``: the address is a multiple of the element size, and of the region's
  ``alignment_bytes`` where the target file sets one;
* ``no-overlap``: an output shares no byte with another buffer of the call (inputs may alias);
* ``scratchpad-fit``: the kernel's tiles fit the staging levels: the per-core scratchpad, and its
  cross-core partial results the shared workspace window (found when planning).

``core_mask`` inside the chip is an argument check (:class:`~sim.errors.KernelArgError`) made when the
call is bound.  Each violation names the buffer, its address range, the region and the rule, and
suggests the nearest address where the buffer would break no rule, when there is one.  The same
checks run before every call and in ``dspsim validate``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

from sim.errors import LayoutError
from sim.model.call import BoundCall, Buffer
from sim.model.memory import MemoryMap
from sim.model.plan import DoesNotFit
from sim.model.target import Region, StagingLevel, Target

#: Rule id -> the rule in words (for reports and the docs).
RULES: dict[str, str] = {
    "mapped": "a buffer lies wholly inside one mapped region (it starts in none)",
    "inside-one-region": "a buffer lies wholly inside one mapped region (it runs past its region's end)",
    "not-scratchpad": "call buffers never lie in the cores' tile-staging scratchpads",
    "shared-memory": "buffers of an _s call lie in shared memory",
    "private-memory": "buffers of a _p call lie in the calling core's private memory",
    "workspace": "buffers never lie in a shared window the kernels own as a staging level (cross-core partial "
                 "results)",
    "alignment": "a buffer's address is a multiple of its element size and of its region's alignment_bytes",
    "no-overlap": "an output shares no byte with another buffer of the call (inputs may alias one another)",
    "scratchpad-fit": "the kernel's tiles fit the staging levels: the per-core scratchpad, its partial results the "
                      "shared workspace window",
}


@dataclass(frozen=True)
class Violation:
    """One broken layout rule: which buffer, where, in which region, and a legal address to move it to."""

    buffer: str
    rule: str
    message: str
    suggestion: int | None = None
    start: int | None = None
    end: int | None = None
    region: str | None = None

    def __str__(self) -> str:
        tail = f"; nearest legal address: {self.suggestion:#x}" if self.suggestion is not None else ""
        return f"layout rule '{self.rule}': {self.message}{tail}"

    def as_dict(self) -> dict:
        """A JSON-ready dict (addresses as ints, plus the text)."""
        d = asdict(self)
        d["text"] = str(self)
        return d


def _range(b: Buffer) -> str:
    return f"[{b.addr:#x}, {b.end:#x})"


def required_alignment(b: Buffer, region: Region) -> int:
    """The alignment a buffer needs in ``region``: its element size, or the region's, whichever is larger."""
    return max(b.dtype.itemsize, region.alignment_bytes)


def _legal_regions(target: Target, variant: str) -> list[Region]:
    kind = "shared" if variant == "s" else "private"
    return [r for r in target.regions if r.kind == kind and r.role == "storage"]


def _where_words(target: Target, variant: str, core: int | None) -> str:
    names = " or ".join(r.name for r in _legal_regions(target, variant)) or "none on this chip"
    if variant == "s":
        return f"shared memory ({names})"
    return f"core {core}'s private memory ({names})"


def _single_rule(b: Buffer, variant: str, core: int | None, target: Target, mmap: MemoryMap) \
        -> tuple[str, str, Region | None] | None:
    """The first rule ``b`` alone breaks, as ``(rule, message, region)``; None when it breaks none."""
    region = mmap.region_of(b.addr, b.size_bytes)
    if region is None:
        start = mmap.region_at(b.addr)
        if start is not None:
            return ("inside-one-region",
                    f"buffer '{b.name}' {_range(b)} ({b.size_bytes} bytes) runs past the end of region "
                    f"{start.name} [{start.base:#x}, {start.end:#x}): a buffer must lie wholly inside one mapped "
                    f"region", start)
        return ("mapped", f"buffer '{b.name}' {_range(b)} is {mmap.describe(b.addr)}: a buffer must lie wholly "
                          f"inside one mapped region", None)
    where = f"buffer '{b.name}' {_range(b)} in region {region.name}"
    if region.role == "scratchpad" or any(level.region == region.name for level in target.private_levels):
        return ("not-scratchpad",
                f"{where}: {region.name} is the cores' tile-staging scratchpad, which kernels own during a "
                f"call; place call buffers in {_where_words(target, variant, core)}", region)
    want_kind = "shared" if variant == "s" else "private"
    if region.kind != want_kind:
        rule = "shared-memory" if variant == "s" else "private-memory"
        return (rule, f"{where} ({region.kind}): _{variant} symbols take their buffers in "
                      f"{_where_words(target, variant, core)}", region)
    for level in target.shared_levels:
        if level.region == region.name and b.addr < level.end and level.base < b.end:
            return ("workspace", f"{where} overlaps [{level.base:#x}, {level.end:#x}), the window of {region.name} "
                                 f"{_window_purpose(target, level)}", region)
    align = required_alignment(b, region)
    if b.addr % align:
        why = (f"the element size ({b.dtype.itemsize} bytes of {b.dtype.name})" if align == b.dtype.itemsize
               else f"region {region.name}'s alignment_bytes ({align}) in the target file")
        return ("alignment", f"{where} is misaligned: its address must be a multiple of {align} bytes, {why}",
                region)
    return None


def _window_purpose(target: Target, level: StagingLevel) -> str:
    """What a shared staging window is for, in a layout message: the first holds the kernels' cross-core
    partial results (the workspace); any further one is named as the level it is."""
    if level == target.shared_levels[0]:
        return "reserved for the kernels' cross-core partial results"
    return f"the kernels own as staging level {level.name} during a call"


def free_spans(region: Region, blocked: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """``region`` minus the ``blocked`` half-open spans, as sorted half-open spans."""
    spans, cursor = [], region.base
    for lo, hi in sorted((max(lo, region.base), min(hi, region.end)) for lo, hi in blocked):
        if hi <= lo:
            continue
        if lo > cursor:
            spans.append((cursor, lo))
        cursor = max(cursor, hi)
    if cursor < region.end:
        spans.append((cursor, region.end))
    return spans


def nearest_legal_address(b: Buffer, variant: str, target: Target, avoid: Sequence[Buffer] = ()) -> int | None:
    """The address closest to ``b.addr`` where ``b`` breaks no rule and overlaps none of ``avoid``.

    Ties go to the lower address; None when no region of the right kind can hold the buffer.
    """
    best: int | None = None
    for region in _legal_regions(target, variant):
        align = required_alignment(b, region)
        blocked = [(o.addr, o.end) for o in avoid if o.size_bytes]
        blocked += [(level.base, level.end) for level in target.shared_levels if level.region == region.name]
        for lo, hi in free_spans(region, blocked):
            first = -(-lo // align) * align
            last = (hi - b.size_bytes) // align * align
            if first > last:
                continue
            down = b.addr - b.addr % align
            for cand in (min(max(down, first), last), min(max(down + align, first), last)):
                if best is None or (abs(cand - b.addr), cand) < (abs(best - b.addr), best):
                    best = cand
    return best


def _conflicts(b: Buffer, buffers: Sequence[Buffer]) -> list[Buffer]:
    """Buffers ``b`` may not overlap: every other one for an output, the outputs for an input."""
    return [o for o in buffers if o is not b and (b.role == "output" or o.role == "output")]


def check_buffer(b: Buffer, variant: str, core: int | None, target: Target,
                 avoid: Sequence[Buffer] = ()) -> Violation | None:
    """The first rule the single buffer ``b`` breaks (overlap aside), or None.

    Used before a pointer is dereferenced at bind time (the ``params`` array), when the other
    buffers of the call are not known yet.
    """
    if b.size_bytes == 0:
        return None  # touches no byte
    found = _single_rule(b, variant, core, target, MemoryMap(target))
    if found is None:
        return None
    rule, message, region = found
    return Violation(b.name, rule, message, nearest_legal_address(b, variant, target, avoid), b.addr, b.end,
                     region.name if region else None)


def check_layout(call: BoundCall, target: Target) -> list[Violation]:
    """Every layout rule ``call`` breaks: per buffer the first single-buffer rule, then the overlaps."""
    mmap = MemoryMap(target)
    core = call.cores[0] if call.variant == "p" else None
    out: list[Violation] = []
    placed: list[tuple[Buffer, Region]] = []
    for b in call.buffers:
        if b.size_bytes == 0:
            continue
        found = _single_rule(b, call.variant, core, target, mmap)
        region = mmap.region_of(b.addr, b.size_bytes)
        if found is None and region is not None:  # (a buffer breaking no rule lies in a region)
            placed.append((b, region))
            continue
        if found is None:
            continue
        rule, message, region = found
        out.append(Violation(b.name, rule, message,
                             nearest_legal_address(b, call.variant, target, _conflicts(b, call.buffers)),
                             b.addr, b.end, region.name if region else None))
    for i, (a, ra) in enumerate(placed):
        for b, rb in placed[i + 1:]:
            if ra is not rb or not (a.addr < b.end and b.addr < a.end):
                continue
            if a.role != "output" and b.role != "output":
                continue  # inputs may alias one another
            if a.role == "output" and b.role == "output":
                # Two outputs: blame the one that lands on the other (the later start; ties: the later buffer).
                moved, other = (b, a) if b.addr >= a.addr else (a, b)
            else:
                moved, other = (a, b) if a.role == "output" else (b, a)
            out.append(Violation(
                moved.name, "no-overlap",
                f"output buffer '{moved.name}' {_range(moved)} overlaps {other.role} buffer '{other.name}' "
                f"{_range(other)} in region {ra.name}: an output may not share bytes with another buffer of "
                f"the call", nearest_legal_address(moved, call.variant, target, _conflicts(moved, call.buffers)),
                moved.addr, moved.end, ra.name))
    return out


def layout_error(violations: Sequence[Violation]) -> LayoutError:
    """One LayoutError listing ``violations`` on one line; ``.violations`` keeps them for tools."""
    if len(violations) == 1:
        err = LayoutError(str(violations[0]))
    else:
        err = LayoutError(f"{len(violations)} layout violations: "
                          + " | ".join(f"({i}) {v}" for i, v in enumerate(violations, 1)))
    err.violations = tuple(violations)
    return err


def enforce_layout(call: BoundCall, target: Target) -> None:
    """Raise LayoutError listing every violation of ``call``; return quietly when the layout is legal."""
    violations = check_layout(call, target)
    if violations:
        raise layout_error(violations)


def fit_violation(call: BoundCall, target: Target, err: DoesNotFit | LayoutError) -> Violation:
    """The ``scratchpad-fit`` violation of a call whose kernel could not tile it into the staging memory.

    The one place "does not fit" becomes a violation: a :class:`~sim.model.plan.DoesNotFit` names the staging
    level that overflowed (its ``resource``; None: the vector level, where compute operands live), and the
    violation carries that level's region and window.  A plain LayoutError from a kernel (not yet moved to
    DoesNotFit) counts against the vector level.  The message names the vector level and the shared
    workspace window (the first shared level), and the level that overflowed when it is another.
    """
    vector = target.vector_level
    shared = target.shared_levels[0] if target.shared_levels else None
    resource = err.resource if isinstance(err, DoesNotFit) else None
    named = next((level for level in target.staging if level.name == resource), vector)
    parts = [f"the {vector.name} scratchpad [{vector.base:#x}, {vector.end:#x}) ({vector.size_bytes} bytes per core)"]
    if shared is not None:
        parts.append(f"the {shared.name} workspace [{shared.base:#x}, {shared.end:#x}) ({shared.size_bytes} bytes)")
    if named not in (vector, shared):
        per = "" if named.shared else " per core"
        parts.append(f"the {named.name} level [{named.base:#x}, {named.end:#x}) ({named.size_bytes} bytes{per})")
    listed = parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
    return Violation("<tiles>", "scratchpad-fit",
                     f"{call.symbol}: the kernel cannot tile this call into the staging memory, {listed}: {err}",
                     None, named.base, named.end, named.region)
