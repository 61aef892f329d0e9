"""What ``dspsim validate`` and ``dspsim run`` check before simulating a run-config.

First the call's layout (:func:`sim.model.layout.check_layout`: the rules every call
obeys), then the config's own ``data`` and ``outputs`` entries against the call:

* ``entry-address``: an entry's range is unmapped, or private without a ``core`` (error);
* ``data-file``: a ``file:`` that is missing, not a .npy array, or of another shape or
  dtype than the entry says (error; only the header is read);
* ``data-dtype``: data placed over an input buffer in a dtype other than the one the
  kernel reads there (float32 data for an ``hp_`` call's fp16 tensor; error);
* ``unplaced-input``: an input buffer, or part of one, where the config places no data,
  so the kernel reads zeros (warning; an error with ``--strict``; not checked for a
  timing-only config, which reads no values);
* ``data-core``: the same for a ``_p`` call whose data sits in another core's copy of
  the private memory (warning; an error with ``--strict``);
* ``data-overlap``: two ``data`` entries sharing bytes of the same memory, so the later one
  overwrites part of the earlier (warning; an error with ``--strict``);
* ``output-not-a-buffer``: an ``outputs`` entry that lies in no buffer of the call, so it
  would save memory the call never wrote (error);
* ``output-dtype``: an ``outputs`` entry that reads a buffer in another dtype than the
  kernel writes (error).

An entry that touches a buffer with a layout violation is not judged on its own: the
violation names the real mistake, and advice about the entry (``pass core=``) would
mislead.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import IO, TYPE_CHECKING

from sim.config.run_config import ArraySpec, RunConfig, check_data_file
from sim.errors import ConfigError, SimError
from sim.model.call import BoundCall, Buffer
from sim.model.layout import Violation, check_layout, layout_error
from sim.model.memory import MemoryMap
from sim.model.target import Region, Target

if TYPE_CHECKING:
    from sim.run.runner import Bound
    from sim.simulator import Simulator

#: Rules whose findings are warnings unless ``strict``.
WARNING_RULES = ("unplaced-input", "data-core", "data-overlap")


@dataclass(frozen=True)
class EntryIssue:
    """A run-config ``data`` or ``outputs`` entry that does not fit the call (see the module's rules)."""

    entry: str  # "data 'x'", "outputs 'dx'", or "buffer 'x'" for an input nobody placed
    rule: str
    message: str
    buffer: str | None = None

    @property
    def warning(self) -> bool:
        """Whether the issue is a warning (an error under ``--strict``)."""
        return self.rule in WARNING_RULES

    def __str__(self) -> str:
        return f"{self.rule}: {self.message}"

    def as_dict(self, strict: bool = False) -> dict:
        """A JSON-ready dict with the text and the severity."""
        d = asdict(self)
        d["severity"] = "warning" if self.warning and not strict else "error"
        d["text"] = str(self)
        return d


@dataclass(frozen=True)
class Preflight:
    """The findings about a run-config's call: layout violations first, then its entries' issues."""

    call: BoundCall
    violations: tuple[Violation, ...]
    issues: tuple[EntryIssue, ...]

    def errors(self, strict: bool = False) -> list[EntryIssue]:
        """Entry issues that stop a run (warnings too when ``strict``)."""
        return [i for i in self.issues if strict or not i.warning]

    def warnings(self, strict: bool = False) -> list[EntryIssue]:
        """Entry issues that only warn (none when ``strict``)."""
        return [] if strict else [i for i in self.issues if i.warning]

    def raise_for_problems(self, strict: bool = False) -> None:
        """Raise what a run would trip over: LayoutError for the violations, else ConfigError for the entries."""
        if self.violations:
            raise layout_error(self.violations)
        errors = self.errors(strict)
        if len(errors) == 1:
            raise ConfigError(str(errors[0]))
        if errors:
            raise ConfigError(f"{len(errors)} problems: " + " | ".join(f"({i}) {e}" for i, e in enumerate(errors, 1)))


def _range(lo: int, hi: int) -> str:
    return f"[{lo:#x}, {hi:#x})"


@dataclass(frozen=True)
class _Placed:
    spec: ArraySpec
    region: Region
    core: int | None  # the core whose private copy holds it; None in shared memory

    @property
    def lo(self) -> int:
        return self.spec.addr

    @property
    def hi(self) -> int:
        return self.spec.addr + math.prod(self.spec.shape) * self.spec.dtype.itemsize

    def where(self) -> str:
        return f"core {self.core}'s {self.region.name}" if self.core is not None else self.region.name


def _overlaps(lo: int, hi: int, lo2: int, hi2: int) -> bool:
    return lo < hi2 and lo2 < hi


def _covered(lo: int, hi: int, spans: Sequence[tuple[int, int]]) -> int:
    """Bytes of ``[lo, hi)`` that ``spans`` cover."""
    total, cursor = 0, lo
    for s, e in sorted((max(s, lo), min(e, hi)) for s, e in spans):
        if e <= s or e <= cursor:
            continue
        total += e - max(s, cursor)
        cursor = e
    return total


def _nearest(b: Buffer, placed: Sequence[_Placed], region: Region, core: int | None) -> str:
    """Words naming the placed array nearest to ``b`` (in its own memory first)."""
    if not placed:
        return "the config places no data"
    own = [p for p in placed if p.region is region and p.core == core] or list(placed)

    def gap(p: _Placed) -> int:
        return max(p.lo - b.end, b.addr - p.hi, 0)

    p = min(own, key=lambda p: (gap(p), abs(p.lo - b.addr), p.spec.name))
    d = gap(p)
    side = "overlapping it" if not d else f"{d} bytes {'above' if p.lo >= b.end else 'below'} it"
    return f"nearest placed array: data '{p.spec.name}' {_range(p.lo, p.hi)} in {p.where()}, {side}"


def _overlapping_data(cfg: RunConfig, placed: Sequence[_Placed]) -> list[EntryIssue]:
    """A ``data-overlap`` issue for each data entry that shares bytes with an earlier one in the same memory."""
    issues = []
    for i, later in enumerate(placed):
        for earlier in placed[:i]:
            if earlier.region is not later.region or earlier.core != later.core \
                    or not _overlaps(earlier.lo, earlier.hi, later.lo, later.hi):
                continue
            shared = min(earlier.hi, later.hi) - max(earlier.lo, later.lo)
            issues.append(EntryIssue(
                f"data '{later.spec.name}'", "data-overlap",
                f"{cfg.path}: data '{later.spec.name}' {_range(later.lo, later.hi)} overlaps data "
                f"'{earlier.spec.name}' {_range(earlier.lo, earlier.hi)} in {later.where()} by {shared} bytes: "
                f"entries are placed in the listed order, so '{later.spec.name}' overwrites those bytes of "
                f"'{earlier.spec.name}'; move one of them"))
            break  # one finding per entry: the first array it overwrites names the mistake
    return issues


def check_entries(cfg: RunConfig, call: BoundCall, target: Target,
                  violations: Sequence[Violation] = ()) -> list[EntryIssue]:
    """The issues of ``cfg``'s data and outputs entries against ``call`` (see the module's rules)."""
    mmap = MemoryMap(target)
    owner = call.cores[0] if call.variant == "p" else None
    bad_spans = [(v.start, v.end) for v in violations if v.start is not None and v.end is not None
                 and v.rule != "scratchpad-fit"]
    issues: list[EntryIssue] = []

    def touches_violation(lo: int, hi: int) -> bool:
        return any(_overlaps(lo, hi, s, e) for s, e in bad_spans)

    placed: list[_Placed] = []
    unresolved: set[str] = set()  # data entries whose address is illegal
    for spec in cfg.data:
        nbytes = math.prod(spec.shape) * spec.dtype.itemsize
        if touches_violation(spec.addr, spec.addr + nbytes):
            continue
        try:
            region, _ = mmap.resolve(spec.addr, nbytes, spec.core, what="write")
        except SimError as e:
            issues.append(EntryIssue(f"data '{spec.name}'", "entry-address", f"{cfg.path}: data '{spec.name}': {e}"))
            unresolved.add(spec.name)
            continue
        if "file" in spec.source:
            try:
                check_data_file(cfg, spec)
            except ConfigError as e:
                issues.append(EntryIssue(f"data '{spec.name}'", "data-file", str(e)))
        placed.append(_Placed(spec, region, None if region.shared else spec.core))
    issues += _overlapping_data(cfg, placed)

    # The call's buffers in the memory the call sees them in; those with a layout violation are the
    # violation's business.
    seen: list[tuple[Buffer, Region, int | None]] = []
    for b in call.buffers:
        holder = mmap.region_of(b.addr, b.size_bytes)
        if b.size_bytes == 0 or holder is None or touches_violation(b.addr, b.end):
            continue
        seen.append((b, holder, None if holder.shared else owner))

    for b, region, core in seen:
        if b.role != "input":
            continue
        mine = [p for p in placed if p.region is region and p.core == core and _overlaps(p.lo, p.hi, b.addr, b.end)]
        for p in mine:
            if p.spec.dtype != b.dtype:
                issues.append(EntryIssue(
                    f"data '{p.spec.name}'", "data-dtype",
                    f"{cfg.path}: data '{p.spec.name}' {_range(p.lo, p.hi)} holds {p.spec.dtype}, but {call.symbol} "
                    f"reads buffer '{b.name}' {_range(b.addr, b.end)} as {b.dtype} ({call.precision} symbol): "
                    f"place it as dtype {b.dtype}", b.name))
        if not cfg.numerics or b.name in unresolved:
            continue  # a timing-only run reads no values; an entry that failed already says why b holds none
        got = _covered(b.addr, b.end, [(p.lo, p.hi) for p in mine])
        if got >= b.size_bytes:
            continue
        where = f"core {core}'s {region.name}" if core is not None else region.name
        elsewhere = [p for p in placed if p.region is region and p.core != core
                     and _overlaps(p.lo, p.hi, b.addr, b.end)]
        if elsewhere and core is not None:
            p = elsewhere[0]
            issues.append(EntryIssue(
                f"data '{p.spec.name}'", "data-core",
                f"{cfg.path}: {call.symbol} runs on core {core} and reads input buffer '{b.name}' "
                f"{_range(b.addr, b.end)} from core {core}'s copy of {region.name}, but data '{p.spec.name}' is "
                f"placed in core {p.core}'s copy (its core: {p.core}), so the kernel reads zeros (an unplaced input): "
                f"place the data with core: {core}, or call the symbol with core: {p.core}", b.name))
            continue
        part = "holds no data the config places" if got == 0 else \
            f"is only partly placed ({got} of {b.size_bytes} bytes)"
        issues.append(EntryIssue(
            f"buffer '{b.name}'", "unplaced-input",
            f"{cfg.path}: input buffer '{b.name}' {_range(b.addr, b.end)} ({b.size_bytes} bytes in {where}) {part}, "
            f"so the kernel reads zeros there; {_nearest(b, placed, region, core)}", b.name))

    for spec in cfg.outputs:
        lo, hi = spec.addr, spec.addr + math.prod(spec.shape) * spec.dtype.itemsize
        if touches_violation(lo, hi):
            continue
        name = f"outputs '{spec.name}'"
        out_region: Region | None = None
        err = ""
        try:
            out_region, _ = mmap.resolve(lo, hi - lo, spec.core, what="read")
        except SimError as e:
            err = str(e)
        core = None if out_region is None or out_region.shared else spec.core
        holders = [b for b, r, c in seen if r is out_region and c == core and b.addr <= lo and hi <= b.end]
        if holders:
            b = holders[0]
            if b.dtype != spec.dtype:
                issues.append(EntryIssue(name, "output-dtype",
                                         f"{cfg.path}: {name} {_range(lo, hi)} reads {spec.dtype}, but {call.symbol} "
                                         f"writes buffer '{b.name}' as {b.dtype}: read it as dtype {b.dtype}", b.name))
            continue
        outs = ", ".join(f"'{b.name}' {_range(b.addr, b.end)}" for b in call.buffers
                         if b.role == "output" and b.size_bytes)
        where = "" if out_region is None else (f" in core {core}'s {out_region.name}" if core is not None
                                               else f" in {out_region.name}")
        words = (f"{cfg.path}: {name} {_range(lo, hi)}{where} is not one of the call's buffers (it lies in none of "
                 f"them): {call.symbol} writes {outs or 'no buffer'}; move the entry onto one of "
                 f"them")
        if out_region is None:
            words += f" (besides, {err})"
        issues.append(EntryIssue(name, "output-not-a-buffer", words))
    return issues


def checked(cfg: RunConfig) -> tuple[Bound, Preflight]:
    """The run pipeline's first stages: bind ``cfg``'s call on a simulator holding only its literal ``values``
    data (:func:`sim.run.runner.bound_call`), check the call's layout, then the config's entries.  Returns the
    bound call (its simulator holds no tensors yet) and the findings.

    Errors that stop the check itself (an unknown symbol, a bad argument, a ``values`` entry that cannot
    be placed) propagate as they are.
    """
    from sim.run.runner import (
        bound_call,  # the runner imports the facade, which imports the kernels
    )

    b = bound_call(cfg)
    violations = tuple(check_layout(b.call, b.simulator.target))
    return b, Preflight(b.call, violations, tuple(check_entries(cfg, b.call, b.simulator.target, violations)))


def preflight(cfg: RunConfig) -> tuple[Simulator, Preflight]:
    """:func:`checked`'s simulator and findings (what ``dspsim validate`` reports)."""
    b, found = checked(cfg)
    return b.simulator, found


def check_before_run(cfg: RunConfig, strict: bool = False, warn: IO[str] | None = None) -> tuple[Bound, Preflight]:
    """What ``dspsim run`` checks first: raise on a layout violation or an entry error (on a warning too when
    ``strict``), print each warning to ``warn`` (default stderr) as ``dspsim: warning: ...``.  Returns the bound
    call the run goes on with (:func:`sim.run.runner.run_bound`: no second bind nor layout check) and the
    findings."""
    b, found = checked(cfg)
    found.raise_for_problems(strict)
    for w in found.warnings(strict):
        print(f"dspsim: warning: {w}", file=warn if warn is not None else sys.stderr)
    return b, found


__all__ = ["EntryIssue", "Preflight", "check_entries", "checked", "preflight", "check_before_run", "WARNING_RULES"]
