"""A core's staging memory as a plan lays it out: a fixed area plus N equal slots (double buffering).

Every kernel keeps a few things at fixed addresses for a whole phase (per-channel vectors, running sums,
the partials it loads back) and streams its tiles through two (or more) slots, so that the engine can
load the next tile while the current one computes (a tile's ``slot`` names the buffer set it uses).
:class:`Scratch` is that layout over one :class:`~sim.model.target.StagingArea` of ``ctx.levels``;
:class:`Arena` is the bump allocator inside each part.  Whatever does not fit raises
:class:`~sim.model.plan.DoesNotFit` naming the staging level, never a LayoutError found by its message.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from sim.model.plan import DoesNotFit, Operand
from sim.model.target import StagingArea


def align_up(value: int, alignment: int) -> int:
    """``value`` rounded up to a multiple of ``alignment``."""
    return -(-value // alignment) * alignment


def align_down(value: int, alignment: int) -> int:
    """``value`` rounded down to a multiple of ``alignment`` (never below 0)."""
    return max(0, value // alignment * alignment)


def aligned_bytes(sizes_bytes: Sequence[int], alignment: int) -> int:
    """Bytes that buffers of ``sizes_bytes`` take when each starts aligned (what an :class:`Arena` spends)."""
    return sum(align_up(s, alignment) for s in sizes_bytes)


def fits(sizes_bytes: Sequence[int], capacity_bytes: int, alignment: int) -> bool:
    """True when buffers of ``sizes_bytes``, each aligned, fit in ``capacity_bytes``."""
    return aligned_bytes(sizes_bytes, alignment) <= capacity_bytes


class Arena:
    """A bump allocator over a window of a staging level (the same local addresses on every core).

    ``resource`` names the staging level it allocates in (None: the vector level) for the
    :class:`~sim.model.plan.DoesNotFit` it raises when full; ``what`` names the window in its message.
    """

    def __init__(self, base: int, size_bytes: int, alignment: int, what: str = "scratchpad",
                 resource: str | None = None):
        self.base = base
        self.size_bytes = size_bytes
        self.alignment = alignment
        self.what = what
        self.resource = resource
        self.used = 0

    @classmethod
    def over(cls, area: StagingArea, what: str | None = None) -> Arena:
        """An allocator over the whole of staging level ``area``."""
        return cls(area.base, area.size_bytes, area.alignment_bytes, what or f"{area.name} staging level",
                   area.name)

    @property
    def end(self) -> int:
        """One past the window's last byte."""
        return self.base + self.size_bytes

    @property
    def free_bytes(self) -> int:
        """Bytes left after the last allocation (from the next aligned address)."""
        return max(0, self.size_bytes - align_up(self.used, self.alignment))

    def alloc(self, size_bytes: int) -> int:
        """Reserve ``size_bytes`` (aligned); DoesNotFit when the window is full."""
        start = align_up(self.used, self.alignment)
        if start + size_bytes > self.size_bytes:
            raise DoesNotFit(self.resource, start + size_bytes, self.size_bytes,
                             f"tile does not fit the {self.what}: needs {start + size_bytes} bytes of "
                             f"{self.size_bytes} at [{self.base:#x}, {self.base + self.size_bytes:#x})")
        self.used = start + size_bytes
        return self.base + start

    def operand(self, shape: Sequence[int], dtype: np.dtype) -> Operand:
        """Reserve room for a dense array and describe it as a compute operand."""
        shape = tuple(map(int, shape))
        dtype = np.dtype(dtype)
        n = math.prod(shape) * dtype.itemsize  # Python ints: exact, and cheap per tile
        return Operand(self.alloc(n), shape, dtype)


class Scratch:
    """A staging level cut into a fixed area and ``slots`` equal slots, then a spare area.

    By default the fixed area comes first (``fixed_bytes`` of it, a multiple of the alignment when
    allocated with :func:`aligned_bytes`), then the slots, each ``slot_bytes`` (default: the rest split
    evenly, rounded down to the alignment), then whatever is left (:meth:`spare`: tiles that stay resident
    between passes).  ``fixed_last`` puts the slots first and the fixed area after them (the rest of the
    level).  A layout whose fixed area and slots do not fit the level raises DoesNotFit at once.
    """

    def __init__(self, area: StagingArea, fixed_bytes: int = 0, slots: int = 2, slot_bytes: int | None = None,
                 *, fixed_last: bool = False):
        self.area = area
        self.alignment = area.alignment_bytes
        self.slots = slots
        fixed_bytes = align_up(max(0, fixed_bytes), self.alignment)
        free = area.size_bytes - fixed_bytes
        if slot_bytes is None:
            slot_bytes = align_down(free // slots, self.alignment) if slots else 0
        self.slot_bytes = max(0, slot_bytes)
        if fixed_bytes + slots * self.slot_bytes > area.size_bytes:
            raise DoesNotFit(area.name, fixed_bytes + slots * self.slot_bytes, area.size_bytes,
                             f"the {area.name} staging level cannot hold a fixed area of {fixed_bytes} bytes "
                             f"and {slots} slots of {self.slot_bytes} bytes ({area.size_bytes} bytes per core)")
        if fixed_last:
            self.slot_base = area.base
            self.fixed_base = area.base + slots * self.slot_bytes
            self.fixed_bytes = area.size_bytes - slots * self.slot_bytes
            self.spare_base, self.spare_bytes = self.fixed_base + self.fixed_bytes, 0
        else:
            self.fixed_base, self.fixed_bytes = area.base, fixed_bytes
            self.slot_base = area.base + fixed_bytes
            self.spare_base = self.slot_base + slots * self.slot_bytes
            self.spare_bytes = area.end - self.spare_base

    @staticmethod
    def slot_bytes_for(area: StagingArea, fixed_bytes: int, slots: int = 2) -> int:
        """The size of each slot of the default layout (what is left beside the fixed area, split evenly and
        rounded down to the alignment; 0 when nothing is left), without building it (nor raising)."""
        free = area.size_bytes - align_up(max(0, fixed_bytes), area.alignment_bytes)
        return align_down(free // slots, area.alignment_bytes) if slots else 0

    @property
    def resource(self) -> str:
        """The staging level's name (what a DoesNotFit from this layout names)."""
        return self.area.name

    def fixed(self) -> Arena:
        """A fresh allocator over the fixed area."""
        return Arena(self.fixed_base, self.fixed_bytes, self.alignment, f"{self.area.name} fixed area",
                     self.area.name)

    def slot_addr(self, slot: int) -> int:
        """Base address of slot ``slot`` (taken modulo the number of slots)."""
        return self.slot_base + (slot % self.slots) * self.slot_bytes

    def slot(self, slot: int) -> Arena:
        """A fresh allocator over slot ``slot`` (taken modulo the number of slots)."""
        return Arena(self.slot_addr(slot), self.slot_bytes, self.alignment, f"{self.area.name} tile slot",
                     self.area.name)

    def spare(self) -> Arena:
        """A fresh allocator over what is left after the slots (tiles resident between passes)."""
        return Arena(self.spare_base, self.spare_bytes, self.alignment, f"{self.area.name} resident area",
                     self.area.name)

    def elements_per_slot(self, tensors: int, itemsize: int, unit: int = 1) -> int:
        """Most elements of each of ``tensors`` equal dense arrays that fit one slot together (each aligned),
        in whole ``unit``s (0: not even one unit)."""
        per = max(0, self.slot_bytes - tensors * self.alignment) // (tensors * itemsize)
        return per // unit * unit

    def refuse(self, needed_bytes: int, available_bytes: int, message: str) -> DoesNotFit:
        """The DoesNotFit a plan raises when a tile it was asked for needs more of this level than there is."""
        return DoesNotFit(self.area.name, needed_bytes, available_bytes, message)
