"""Small user kernels the tests register: correct ones, and the base of the hostile ones of test_plan_check."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from kernels.base import PlanContext
from kernels.common.args import check_args, require_address, require_int
from kernels.common.loops import elementwise
from sim.model.call import ArgSpec, BoundCall, Buffer
from sim.model.plan import Compute, Operand, Phase, Plan, Tile, Transfer

F32 = np.dtype(np.float32)
#: Rewrites a good plan into a hostile one: (plan, call, ctx) -> what plan() returns.
Breaker = Callable[[Plan, BoundCall, PlanContext], object]


def _scaled(factor: float) -> Callable[[np.ndarray], tuple[np.ndarray]]:
    def fn(a: np.ndarray) -> tuple[np.ndarray]:
        return (a * F32.type(factor),)
    return fn


class Twice:
    """y = factor * x (default 2), two tiles on the call's first core; ``breaker`` rewrites the good plan into a
    hostile one."""

    args = (ArgSpec("x", "in_ptr", "input"), ArgSpec("y", "out_ptr", "output"), ArgSpec("n", "int", "elements"))
    precisions = ("fp32",)  # fp32 buffers and compute only: no hp_ symbols

    def __init__(self, name: str, breaker: Breaker | None = None, factor: float = 2.0, updates_y: bool = False):
        self.name = name
        self.breaker = breaker
        self.factor = factor
        self.updates_y = updates_y  # y read before it is written (an in-place output: Buffer.reads_too)

    def bind(self, symbol, precision, variant, cores, args, read):
        a = check_args(symbol, self.args, args)
        n = require_int("n", a["n"], minimum=2)
        return BoundCall(symbol, precision, variant, cores,
                         (Buffer("x", require_address("x", a["x"]), (n,), F32, "input"),
                          Buffer("y", require_address("y", a["y"]), (n,), F32, "output", self.updates_y)),
                         {"n": n})

    def plan(self, call, ctx):
        n, x, y = call.attrs["n"], call.buffer("x"), call.buffer("y")
        half = n // 2
        base = ctx.vector_level.base
        # Per vector: one load, one multiply, one store (the loop the core runs for each tile).
        loop = elementwise(ctx.target.core, "fp32", half, loads=1, stores=1, fmac=1, label="twice")
        tiles = []
        for i in range(2):
            slot = base + i * 0x10000
            src, dst = Operand(slot, (half,), F32), Operand(slot + 0x8000, (half,), F32)
            tiles.append(Tile(i, (Transfer.contiguous(x.addr + 4 * half * i, src.addr, 4 * half),),
                              Compute(_scaled(self.factor), (src,), (dst,), flops=half, precision="fp32",
                                      loops=(loop,)),
                              (Transfer.contiguous(dst.addr, y.addr + 4 * half * i, 4 * half),), slot=i))
        plan = Plan(call.cores, (Phase("twice", {call.cores[0]: tuple(tiles)}, barrier_after=False),), "fp32")
        return plan if self.breaker is None else self.breaker(plan, call, ctx)


