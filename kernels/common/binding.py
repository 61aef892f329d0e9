"""Declarative argument binding: a kernel's ArgSpecs turn the caller's arguments into checked values and Buffers.

:func:`bind_arguments` refuses unknown and missing arguments, fills defaults and checks every pointer
argument (``in_ptr`` / ``out_ptr``) as an address; the kernel then checks its own scalars with the
validators of :mod:`kernels.common.args` and describes its buffers with :meth:`Arguments.buffer`, which
takes the address and the role from the spec and refuses a buffer larger than any chip's memory with
the one message of :func:`check_buffer_size`.  :func:`bound_call` wraps the result with the kernel's typed
attributes (a frozen dataclass per kernel), which planning gets back with :func:`attrs_of`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from kernels.base import PRECISION_DTYPES
from kernels.common.args import check_args, require_address
from sim.errors import KernelArgError
from sim.model.call import ArgSpec, BoundCall, Buffer

#: No chip has more memory than this: a buffer larger than it is an absurd argument, refused at bind time
#: (before any arithmetic on its size).
MAX_BUFFER_BYTES = 1 << 40

#: ArgSpec kind of a pointer argument -> the role of its buffer.
POINTER_ROLES = {"in_ptr": "input", "out_ptr": "output"}

A = TypeVar("A")


def check_buffer_size(arg: str, what: str, shape: Sequence[int], itemsize: int) -> None:
    """Refuse a buffer of ``shape`` (``itemsize`` bytes per element) larger than any chip's memory, naming the
    argument ``arg`` that sized it and the buffer ``what``."""
    size = math.prod(int(d) for d in shape) * int(itemsize)
    if size > MAX_BUFFER_BYTES:
        raise KernelArgError(f"argument '{arg}': {what} of shape {list(shape)} is {size} bytes, which exceeds any "
                             f"chip's memory (at most 2**40 bytes)")


@dataclass(frozen=True)
class Arguments:
    """A call's arguments after :func:`bind_arguments`: every one present, pointers checked as addresses."""

    symbol: str
    precision: str
    specs: tuple[ArgSpec, ...]
    values: Mapping[str, Any]
    addresses: Mapping[str, int]

    def __getitem__(self, name: str) -> Any:
        """The value of argument ``name`` (its default when the caller gave none)."""
        return self.values[name]

    @property
    def dtype(self) -> np.dtype:
        """The dtype of the call's big tensors (the symbol's precision)."""
        return PRECISION_DTYPES[self.precision]

    def buffer(self, name: str, shape: Sequence[int], dtype: np.dtype | None = None, *, addr: int | None = None,
               role: str | None = None, size_arg: str | None = None, reads_too: bool = False,
               row_elements: int | None = None) -> Buffer:
        """The Buffer of pointer argument ``name`` (its checked address and role from its spec), of ``shape`` in
        ``dtype`` (default: the precision's).  A buffer whose pointer is not an argument of its own (one inside
        ``params``) gives ``addr`` and ``role``.  ``size_arg`` names the argument that sized it (default:
        ``name``) when it is larger than any chip's memory; ``reads_too`` marks an output updated in place
        (:attr:`~sim.model.call.Buffer.reads_too`); ``row_elements``, the elements of each row the kernel touches
        when short of the last dimension (a row pitch: :attr:`~sim.model.call.Buffer.row_elements`)."""
        dt = self.dtype if dtype is None else np.dtype(dtype)
        shape = tuple(int(d) for d in shape)
        check_buffer_size(size_arg or name, name, shape, dt.itemsize)
        if addr is None:
            addr = self.addresses[name]
        if role is None:
            role = next(POINTER_ROLES[s.kind] for s in self.specs if s.name == name)
        return Buffer(name, addr, shape, dt, role, reads_too, row_elements)


def bind_arguments(symbol: str, precision: str, specs: Sequence[ArgSpec], args: Mapping[str, Any]) -> Arguments:
    """Refuse extra and missing arguments, fill defaults, check every pointer argument as an address."""
    values = check_args(symbol, specs, args)
    addresses = {s.name: require_address(s.name, values[s.name]) for s in specs if s.kind in POINTER_ROLES}
    return Arguments(symbol, precision, tuple(specs), values, addresses)


def bound_call(arguments: Arguments, variant: str, cores: tuple[int, ...], buffers: Sequence[Buffer],
               attrs: Any) -> BoundCall:
    """The BoundCall of checked ``arguments``: its ``buffers`` and the kernel's typed ``attrs``."""
    return BoundCall(arguments.symbol, arguments.precision, variant, cores, tuple(buffers), attrs)


def attrs_of(call: BoundCall, cls: type[A]) -> A:
    """The call's attributes as the kernel's own dataclass ``cls`` (TypeError when another kernel bound it)."""
    attrs = call.attrs
    if not isinstance(attrs, cls):
        raise TypeError(f"{call.symbol}: attributes of type {type(attrs).__name__}, expected {cls.__name__}")
    return attrs


def pointer_names(specs: Sequence[ArgSpec]) -> tuple[str, ...]:
    """The names of the pointer arguments of ``specs``, in order."""
    return tuple(s.name for s in specs if s.kind in POINTER_ROLES)
