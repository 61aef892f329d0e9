"""A user kernel of one input x and one output y (N floats) on FT78NE whose plan a test writes out, and the
addresses such plans use (tests/test_unwritten_read.py, tests/test_replay_program.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from kernels.common.binding import bind_arguments, bound_call
from kernels.common.loops import elementwise
from sim.model.call import ArgSpec
from sim.model.plan import Compute, Operand, Phase, Plan, Tile, TileFn

F32 = np.dtype(np.float32)
N = 256
X, Y = 0xA0000000, 0xA0100000
AM = 0x20000000  # FT78NE's vector level
SM = 0x30000000  # its scalar level
WINDOW = 0x40580000  # its shared window in GSM


def copy(a: np.ndarray) -> tuple[np.ndarray]:
    """A tile function: its input, copied."""
    return (np.array(a, copy=True),)


class OnePlan:
    """A kernel whose plan is ``make(call, ctx)``."""

    precisions = ("fp32",)
    variants = ("s",)
    args = (ArgSpec("x", "in_ptr", "input"), ArgSpec("y", "out_ptr", "output"))

    def __init__(self, name: str, make: Callable[[Any, Any], Plan]):
        self.name, self.make = name, make

    def bind(self, symbol, precision, variant, cores, args, read):
        a = bind_arguments(symbol, precision, self.args, args)
        return bound_call(a, variant, cores, [a.buffer("x", (N,)), a.buffer("y", (N,))], attrs=None)

    def plan(self, call, ctx):
        return self.make(call, ctx)


def copy_compute(ctx: Any, src: int, dst: int) -> Compute:
    """A compute copying N floats at ``src`` to ``dst`` (both in the core's levels)."""
    return Compute(TileFn(copy), (Operand(src, (N,), F32),), (Operand(dst, (N,), F32),), flops=0, precision="fp32",
                   loops=(elementwise(ctx.target.core, "fp32", N, loads=1, stores=1),))


def plan_of(*phases: dict[int, tuple[Tile, ...]]) -> Plan:
    """A plan of ``phases`` (core -> tiles), each followed by a barrier."""
    cores = tuple(sorted({c for p in phases for c in p}))
    return Plan(cores, tuple(Phase(f"p{i}", p, barrier_after=True) for i, p in enumerate(phases)), "fp32")
