"""A kernel call as the simulator sees it once its arguments are checked: buffers, attributes, precision.

:class:`ArgSpec` declares one argument of a kernel; a kernel's ``bind`` turns the user's arguments into a
:class:`BoundCall` whose :class:`Buffer` list is what the layout check (:mod:`sim.model.layout`) sees.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np


@dataclass(frozen=True)
class Buffer:
    """One buffer of a call, as the layout check sees it."""

    name: str
    addr: int
    shape: tuple[int, ...]
    dtype: np.dtype
    role: str  # "input" or "output"
    #: An output whose bytes the kernel reads before it writes them (an in-place update: GEMM's C when beta is
    #: 1): the layout check treats it as the output it is; a program's checks count it as read too.
    reads_too: bool = False
    #: Elements of each row (the last dimension) the kernel reads or writes, from the row's start; None: all.  A
    #: matrix stored with a row pitch (GEMM's ``lda``) spans its whole rows, which the layout check reserves, while
    #: the elements between a row's end and its pitch are never touched: a program's checks follow only these.
    row_elements: int | None = None

    @property
    def size_bytes(self) -> int:
        """Bytes the buffer occupies."""
        return math.prod(int(d) for d in self.shape) * np.dtype(self.dtype).itemsize

    @property
    def end(self) -> int:
        """One past the buffer's last byte."""
        return self.addr + self.size_bytes

    def touched(self) -> list[tuple[int, int]]:
        """The byte ranges ``[lo, hi)`` the kernel reads or writes: the whole buffer, or the first
        :attr:`row_elements` of each row, in address order."""
        pitch = int(self.shape[-1]) if self.shape else 1
        if self.row_elements is None or self.row_elements >= pitch or not self.size_bytes:
            return [(self.addr, self.end)] if self.size_bytes else []
        item = np.dtype(self.dtype).itemsize
        run, step = self.row_elements * item, pitch * item
        return [(lo, lo + run) for lo in range(self.addr, self.end, step)]


@dataclass(frozen=True)
class BoundCall:
    """A kernel call with its arguments checked: buffers, attributes, precision.

    ``attrs`` is the kernel's own: the shipped kernels keep a frozen dataclass of typed attributes there (the
    simulator never reads it); a user kernel may keep any value, a dict for instance.
    """

    symbol: str
    precision: str
    variant: str  # "s" (shared memory) or "p" (private memory of one core)
    cores: tuple[int, ...]
    buffers: tuple[Buffer, ...]
    attrs: Any = field(default_factory=dict)

    def buffer(self, name: str) -> Buffer:
        """The buffer called ``name``."""
        for b in self.buffers:
            if b.name == name:
                return b
        raise KeyError(name)


#: The kinds of kernel arguments: a pointer to an input or output buffer, an int or a list of ints, a float, a
#: string, a boolean, or a list of pointers and sizes (BatchNormGrad's ``params``).  Traces and reports show
#: ``in_ptr``/``out_ptr``/``params`` values as addresses.
ARG_KINDS: tuple[str, ...] = ("in_ptr", "out_ptr", "ints", "int", "float", "str", "bool", "params")


@dataclass(frozen=True)
class ArgSpec:
    """One argument of a kernel symbol, for binding and for ``dspsim kernels``; ``kind`` is one of
    :data:`ARG_KINDS`."""

    name: str
    kind: str
    doc: str
    default: Any = None
    required: bool = True


class MemoryReader(Protocol):
    """Reads values a kernel needs at bind time (the ``params`` array of BatchNormGrad).

    ``name`` names the pointer in messages: the array is layout-checked as a buffer of that name before it
    is read, and a refusal names it.
    """

    def __call__(self, addr: int, shape: tuple[int, ...], dtype: np.dtype, name: str = "pointer") -> np.ndarray:
        """The array of ``shape`` and ``dtype`` at ``addr``, read from simulated memory."""
        ...
