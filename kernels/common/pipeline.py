"""A pipeline of tiles through a staging level: a fixed area, N slots of named operands, and a resident area.

The engine double-buffers by slot (the next tile's loads start while this one computes, never before the last
tile of the same slot has stored), so a kernel streams its tiles through two (or more) slots, each holding the
same operands of one tile, beside a fixed area for what stays a whole phase (per-channel vectors, running sums)
and, after the slots, whatever stays resident between passes.  :class:`Pipeline` is that layout
(:class:`~kernels.common.scratch.Scratch`) with its slot operands named: a slot is cut into one equal aligned
part per operand (:meth:`Pipeline.tile_operands`), or allocated freely (:meth:`Scratch.slot`), and the fit
errors it writes name the operands (``a slot of the vector staging level holds 32768 elements of dy, x and
dx``).  A tile whose operands differ in size, allocated freely in a slot, is checked with :func:`slot_fits`
(cheap: no layout built) and laid out by :meth:`Pipeline.for_tile`, whose DoesNotFit names them too.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from kernels.common.scratch import Scratch, align_down, align_up, aligned_bytes, fits
from sim.model.plan import DoesNotFit, Operand
from sim.model.target import StagingArea


def names_of(names: Sequence[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``: operand names as a message lists them."""
    names = list(names)
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def slot_fits(area: StagingArea, fixed_bytes: int, sizes_bytes: Sequence[int], slots: int = 2) -> bool:
    """True when buffers of ``sizes_bytes`` (each aligned) fit one of ``slots`` slots of the default layout beside
    a fixed area of ``fixed_bytes``: the test :meth:`Pipeline.for_tile` makes, without building the layout."""
    slot = Scratch.slot_bytes_for(area, fixed_bytes, slots)
    return slot > 0 and fits(sizes_bytes, slot, area.alignment_bytes)


class Pipeline(Scratch):
    """A staging level cut into a fixed area and ``slots`` slots, each holding the tile operands ``operands``.

    ``what`` names the level in fit errors (default: ``<level> staging level``).  The other arguments are
    :class:`~kernels.common.scratch.Scratch`'s; a fixed area and slots that do not fit raise DoesNotFit at once.
    """

    def __init__(self, area: StagingArea, operands: Sequence[str], fixed_bytes: int = 0, slots: int = 2,
                 slot_bytes: int | None = None, *, fixed_last: bool = False, what: str | None = None):
        super().__init__(area, fixed_bytes, slots, slot_bytes, fixed_last=fixed_last)
        self.operands = tuple(operands)
        self.what = what or f"{area.name} staging level"

    @classmethod
    def for_tile(cls, area: StagingArea, operands: Sequence[str], sizes_bytes: Sequence[int], fixed_bytes: int = 0,
                 slots: int = 2, *, tile: str = "a tile", fixed: str = "a fixed area",
                 what: str | None = None) -> Pipeline:
        """The layout of tiles whose operands ``operands`` take ``sizes_bytes`` each, allocated freely in a slot
        (:meth:`~kernels.common.scratch.Scratch.slot`), beside ``fixed_bytes`` of ``fixed``.  When they do not
        fit a slot (:func:`slot_fits`), DoesNotFit written from the names, needing the fixed area and every
        slot's operands of the whole level (``tile`` says which tile it was)."""
        if not slot_fits(area, fixed_bytes, sizes_bytes, slots):
            align = area.alignment_bytes
            fixed_area = align_up(max(0, fixed_bytes), align)
            needed = fixed_area + slots * aligned_bytes(sizes_bytes, align)
            where = what or f"{area.name} staging level"
            raise DoesNotFit(area.name, needed, area.size_bytes,
                             f"{tile} does not fit the {area.size_bytes}-byte {where}: {slots} slots of "
                             f"{names_of(operands)} beside {fixed} ({fixed_area} bytes) need {needed} bytes")
        return cls(area, operands, fixed_bytes, slots, what=what)

    @property
    def part_bytes(self) -> int:
        """Bytes of each operand's equal part of a slot (each part starts aligned)."""
        return align_down(self.slot_bytes // len(self.operands), self.alignment)

    def part_elements(self, itemsize: int, unit: int = 1) -> int:
        """Most elements of ``itemsize`` bytes each operand's part holds, in whole ``unit``s (0: not one unit)."""
        return self.part_bytes // itemsize // unit * unit

    def tile_operands(self, slot: int, shape: Sequence[int], dtype: np.dtype) -> tuple[Operand, ...]:
        """One operand of ``shape`` per name, each at the start of its part of slot ``slot``."""
        base = self.slot_addr(slot)
        return tuple(Operand(base + k * self.part_bytes, tuple(shape), np.dtype(dtype))
                     for k in range(len(self.operands)))

    def too_big(self, key: str, value: int, holds: int, itemsize: int) -> DoesNotFit:
        """The DoesNotFit of a tiling whose key ``key`` = ``value`` elements exceeds the ``holds`` elements of each
        operand a slot takes, written from the operand names."""
        n = len(self.operands)
        return DoesNotFit(self.resource, n * value * itemsize, n * holds * itemsize,
                          f"tiling {key}={value} does not fit: a slot of the {self.what} holds {holds} elements of "
                          f"{names_of(self.operands)}")

    def require(self, itemsize: int, unit: int = 1) -> int:
        """:meth:`part_elements`, or DoesNotFit when a slot cannot hold one unit of every operand."""
        budget = self.part_elements(itemsize, unit)
        if budget < 1:
            raise DoesNotFit(self.resource, len(self.operands) * self.alignment, self.slot_bytes,
                             f"a tile of one element of each of {names_of(self.operands)} does not fit a slot of "
                             f"the {self.what}")
        return budget
