"""The memory planner of programs: an address for every ``auto`` tensor, from the tensors' lifetimes.

A tensor's lifetime is the span of *steps* from its first use to its last: step 0 places the program's data, step
``i + 1`` is call ``i``, the last step (``len(calls) + 1``) reads the outputs back. Two tensors whose lifetimes do
not overlap may share bytes (the later one overwrites a tensor nothing reads any more); two whose lifetimes overlap
never do. The placement is greedy by size, as TFLite's arena planner and XLA's heap simulator do: per memory (a
shared region, or one core's copy of a private region), the largest ``auto`` tensor first, each at the lowest
address, aligned as the layout rules want it (the element size and the region's ``alignment_bytes``) and to the
region's bursts, that overlaps no tensor alive at the same time (a fixed-address one included), no byte a
``reserved`` span holds (raw-address data and buffers; the bytes a call's plan stages, for the tensors alive at its
step), and no shared window the kernels own as a staging level. Deterministic: ties go to the earlier first use,
then the name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from sim.errors import ConfigError
from sim.model.call import Buffer
from sim.model.layout import Violation, free_spans, layout_error, required_alignment
from sim.model.memory import MemoryMap
from sim.model.target import Region, Target
from sim.program.schema import TensorSpec

#: A memory: a region's name and the core whose copy of it (None for shared memory).
MemoryKey = tuple[str, "int | None"]


@dataclass(frozen=True)
class Lifetime:
    """The steps a tensor is alive, ``first`` to ``last`` inclusive (see the module docstring)."""

    first: int
    last: int

    def overlaps(self, other: Lifetime) -> bool:
        """Whether the two are alive at one step."""
        return self.first <= other.last and other.first <= self.last


@dataclass(frozen=True)
class Reserved:
    """Bytes of one memory the planner leaves alone: the whole program (raw-address data and call buffers), or, with
    ``steps``, to the tensors alive at one of those steps (the bytes a call's chosen plan stages in a staging level:
    a tensor alive across the call would lose them)."""

    key: MemoryKey
    start: int
    end: int
    what: str
    steps: Lifetime | None = None


@dataclass(frozen=True)
class Placement:
    """Where a tensor lives: its memory, its address, its lifetime, and whether the planner chose it."""

    tensor: TensorSpec
    region: Region
    addr: int
    lifetime: Lifetime
    auto: bool

    @property
    def core(self) -> int | None:
        """The core whose copy of a private region holds the tensor (None in shared memory)."""
        return None if self.region.shared else self.tensor.core

    @property
    def key(self) -> MemoryKey:
        """The memory the tensor lives in."""
        return (self.region.name, self.core)

    @property
    def end(self) -> int:
        """One past the tensor's last byte."""
        return self.addr + self.tensor.size_bytes

    def shares_bytes(self, other: Placement) -> bool:
        """Whether the two tensors hold bytes of one memory in common (whatever their lifetimes)."""
        return self.key == other.key and self.addr < other.end and other.addr < self.end


@dataclass(frozen=True)
class MemoryPlan:
    """Every tensor's placement, in the program's order of tensors."""

    placements: tuple[Placement, ...]

    def __getitem__(self, name: str) -> Placement:
        for p in self.placements:
            if p.tensor.name == name:
                return p
        raise KeyError(name)

    @property
    def addrs(self) -> dict[str, int]:
        """Tensor name -> address."""
        return {p.tensor.name: p.addr for p in self.placements}

    def sharing(self) -> list[tuple[Placement, Placement]]:
        """The pairs of tensors that share bytes (which the planner allows only for disjoint lifetimes)."""
        ps = self.placements
        return [(a, b) for i, a in enumerate(ps) for b in ps[i + 1:] if a.shares_bytes(b)]


def _region_of(target: Target, t: TensorSpec, key: str) -> Region:
    """The region a tensor lives in: the one it names, the one its fixed address lies in, or the largest shared
    storage region; ConfigError naming ``key`` when that is no place for a tensor."""
    storage = [r for r in target.regions if r.role == "storage"]
    if t.region is not None:
        region = next((r for r in target.regions if r.name == t.region), None)
        if region is None or region.role != "storage":
            raise ConfigError(f"{key}.region: {t.region!r} is not a storage region of {target.name} (storage "
                              f"regions: {', '.join(r.name for r in storage)})")
    elif t.addr is not None:
        found = MemoryMap(target).region_of(t.addr, t.size_bytes)
        if found is None or found.role != "storage":
            raise ConfigError(f"{key}.addr: [{t.addr:#x}, {t.addr + t.size_bytes:#x}) lies in no storage region of "
                              f"{target.name} (storage regions: {', '.join(r.name for r in storage)})")
        region = found
    else:
        region = max((r for r in storage if r.shared), key=lambda r: (r.size_bytes, -r.base))
    if not region.shared and t.core is None:
        raise ConfigError(f"{key}.core: tensor '{t.name}' lives in private region {region.name}: say which core's "
                          f"copy (core: 0..{target.cores - 1})")
    if t.core is not None and not 0 <= t.core < target.cores:
        raise ConfigError(f"{key}.core: {t.core} is not a core of {target.name} (0..{target.cores - 1})")
    return region


def _alignment(t: TensorSpec, region: Region) -> int:
    """What the layout rules want (the element size, the region's ``alignment_bytes``), and whole bursts of the
    region: a tensor then starts where a DMA burst does."""
    return max(required_alignment(Buffer(t.name, 0, t.shape, np.dtype(t.dtype), "input"), region),
               region.burst_bytes)


def _lowest_fit(region: Region, blocked: list[tuple[int, int]], size: int, align: int) -> int | None:
    for lo, hi in free_spans(region, blocked):
        addr = -(-lo // align) * align
        if addr + size <= hi:
            return addr
    return None


def plan_memory(target: Target, tensors: Sequence[TensorSpec], lifetimes: Mapping[str, Lifetime],
                reserved: Sequence[Reserved] = ()) -> MemoryPlan:
    """Place every tensor (see the module docstring); ``lifetimes`` has one per tensor.

    A fixed-address tensor stays where it is (the checks judge it); an ``auto`` tensor that fits nowhere is a
    LayoutError (rule ``no-room``) naming it, its size, the memory and the tensors alive with it.
    """
    regions = {t.name: _region_of(target, t, f"tensors[{i}]") for i, t in enumerate(tensors)}
    for i, t in enumerate(tensors):
        r = regions[t.name]
        if t.addr is not None and not r.contains(t.addr, t.size_bytes):
            raise ConfigError(f"tensors[{i}].addr: tensor '{t.name}' [{t.addr:#x}, {t.addr + t.size_bytes:#x}) does "
                              f"not lie in region {r.name} [{r.base:#x}, {r.end:#x})")
    placed: dict[str, Placement] = {t.name: Placement(t, regions[t.name], t.addr, lifetimes[t.name], False)
                                    for t in tensors if t.addr is not None}
    windows = [(lv.region, lv.base, lv.end) for lv in target.shared_levels]
    order = sorted((t for t in tensors if t.addr is None),
                   key=lambda t: (-t.size_bytes, lifetimes[t.name].first, t.name))
    for t in order:
        region, life = regions[t.name], lifetimes[t.name]
        key: MemoryKey = (region.name, None if region.shared else t.core)
        alive = [p for p in placed.values() if p.key == key and p.lifetime.overlaps(life)]
        blocked = [(p.addr, p.end) for p in alive]
        blocked += [(r.start, r.end) for r in reserved if r.key == key and (r.steps is None or r.steps.overlaps(life))]
        blocked += [(lo, hi) for name, lo, hi in windows if name == region.name]
        addr = _lowest_fit(region, blocked, t.size_bytes, _alignment(t, region))
        if addr is None:
            where = f"core {t.core}'s {region.name}" if not region.shared else region.name
            others = ", ".join(f"'{p.tensor.name}' ({p.tensor.size_bytes} B)" for p in alive) or "none"
            raise layout_error([Violation(
                t.name, "no-room",
                f"tensor '{t.name}' ({t.size_bytes} bytes, {t.dtype.name}{list(t.shape)}) fits nowhere in "
                f"{where} [{region.base:#x}, {region.end:#x}) beside the tensors alive with it at steps "
                f"{life.first}..{life.last} ({others}): give it another region, or shrink the program",
                None, None, None, region.name)])
        placed[t.name] = Placement(t, region, addr, life, True)
    return MemoryPlan(tuple(placed[t.name] for t in tensors))


__all__ = ["Lifetime", "Reserved", "Placement", "MemoryPlan", "MemoryKey", "plan_memory"]
