"""The GEMM kernel's registry entry: its arguments, their binding, and its plan and tiling space (kernels.gemm)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from kernels.base import PlanContext
from kernels.common.args import require_int
from kernels.common.binding import bind_arguments, bound_call
from kernels.common.tiling_space import TilingSpace, complete
from kernels.gemm.build import GemmPlanner
from kernels.gemm.constants import GemmAttrs
from sim.errors import KernelArgError
from sim.model.call import ArgSpec, BoundCall, MemoryReader
from sim.model.plan import Plan


def _flag(name: str, value: Any) -> bool:
    """0/1 (or a bool) as C callers pass a flag."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    return bool(require_int(name, value, minimum=0, maximum=1))


class Gemm:
    """The registry entry of gemm."""

    name = "gemm"
    tensors_in_precision = ("a", "b", "c")
    fp32_tensors = ()
    fp16_arithmetic = ("computed in fp32 accumulators from exact fp16 products (at the chip's fp16_fp32acc rate "
                       "where it has one); C is rounded to fp16 once, as it is stored: a vector ALU issue of the "
                       "loops per vector, not flops")
    args = (
        ArgSpec("a", "in_ptr", "address of A: [m, lda] when trans_a = 0, [k, lda] when 1"),
        ArgSpec("b", "in_ptr", "address of B: [k, ldb] when trans_b = 0, [n, ldb] when 1"),
        ArgSpec("c", "out_ptr", "address of C [m, ldc] (output; also an input when beta = 1)"),
        ArgSpec("m", "int", "rows of op(A) and C"),
        ArgSpec("n", "int", "columns of op(B) and C"),
        ArgSpec("k", "int", "columns of op(A), rows of op(B)"),
        ArgSpec("trans_a", "int", "1: A is stored transposed ([k, lda])", default=0, required=False),
        ArgSpec("trans_b", "int", "1: B is stored transposed ([n, ldb])", default=0, required=False),
        ArgSpec("beta", "int", "0: C = op(A)op(B); 1: C += op(A)op(B) (C in place)", default=0, required=False),
        ArgSpec("lda", "int", "row pitch of A in elements (default: dense)", default=None, required=False),
        ArgSpec("ldb", "int", "row pitch of B in elements (default: dense)", default=None, required=False),
        ArgSpec("ldc", "int", "row pitch of C in elements (default: n)", default=None, required=False),
    )

    def bind(self, symbol: str, precision: str, variant: str, cores: tuple[int, ...],
             args: Mapping[str, Any], read: MemoryReader) -> BoundCall:
        """Check the arguments (SPEC §4) and describe A, B and C as [rows, pitch] matrices."""
        a = bind_arguments(symbol, precision, self.args, args)
        m, n, k = (require_int(x, a[x], minimum=1) for x in ("m", "n", "k"))
        trans_a, trans_b = _flag("trans_a", a["trans_a"]), _flag("trans_b", a["trans_b"])
        beta = _flag("beta", a["beta"])
        a_rows, a_cols = (k, m) if trans_a else (m, k)
        b_rows, b_cols = (n, k) if trans_b else (k, n)
        pitches = {}
        for name, cols in (("lda", a_cols), ("ldb", b_cols), ("ldc", n)):
            given = a[name]
            pitch = cols if given is None else require_int(name, given, minimum=1)
            if pitch < cols:
                raise KernelArgError(f"argument '{name}': the row pitch ({pitch}) must be at least the row's "
                                     f"{cols} elements")
            pitches[name] = pitch
        attrs = GemmAttrs(m, n, k, trans_a, trans_b, beta, pitches["lda"], pitches["ldb"], pitches["ldc"])
        # Each matrix as SPEC §4 stores it, [rows, pitch]: the layout check reserves its whole rows (the kernel
        # itself never touches the elements past a row's end).
        buffers = (a.buffer("a", (a_rows, attrs.lda), size_arg="lda"),
                   a.buffer("b", (b_rows, attrs.ldb), size_arg="ldb"),
                   a.buffer("c", (m, attrs.ldc), size_arg="ldc", reads_too=bool(attrs.beta)))
        return bound_call(a, variant, cores, buffers, attrs)

    def plan(self, call: BoundCall, ctx: PlanContext) -> Plan:
        """The plan of the tiling ``ctx.tiling`` (a full tiling of :meth:`tiling_space`)."""
        p = GemmPlanner(call, ctx)
        return p.build(p.resolve(complete(p.space, ctx)))

    def tiling_space(self, call: BoundCall, ctx: PlanContext) -> TilingSpace:
        """The keys ``split``, ``m_micro``, ``n_micro``, ``m_panel``, ``k_block``, ``m_block``, ``n_block``: the
        published schedule's values first (SPEC §2), then smaller blocks and the other splits."""
        return GemmPlanner(call, ctx).space



KERNEL = Gemm()
