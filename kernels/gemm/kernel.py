"""The GEMM kernel's registry entry: its arguments, their binding, and its plan and tiling space (kernels.gemm)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from kernels.base import PlanContext
from kernels.common.args import require_int
from kernels.common.binding import bind_arguments, bound_call
from kernels.common.tiling_space import ChoiceKey, TilingSpace, complete, union
from kernels.gemm.build import GemmPlanner
from kernels.gemm.constants import FORMULATIONS, GemmAttrs
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
        # Each matrix as SPEC §4 stores it, [rows, pitch]: the layout check reserves its whole rows; the kernel
        # itself never touches the elements past a row's end (what a program's checks follow).
        buffers = (a.buffer("a", (a_rows, attrs.lda), size_arg="lda", row_elements=a_cols),
                   a.buffer("b", (b_rows, attrs.ldb), size_arg="ldb", row_elements=b_cols),
                   a.buffer("c", (m, attrs.ldc), size_arg="ldc", reads_too=bool(attrs.beta), row_elements=n))
        return bound_call(a, variant, cores, buffers, attrs)

    def plan(self, call: BoundCall, ctx: PlanContext) -> Plan:
        """The plan of the tiling ``ctx.tiling`` (a full tiling of :meth:`tiling_space`)."""
        planners, space = _formulations(call, ctx)
        t = complete(space, ctx)
        p = planners[t.get("formulation", next(iter(planners)))]
        return p.build(p.resolve(t))

    def tiling_space(self, call: BoundCall, ctx: PlanContext) -> TilingSpace:
        """The keys ``split``, ``m_micro``, ``n_micro``, ``m_panel``, ``k_block``, ``m_block``, ``n_block`` and the
        algorithm keys (docs/gemm.md): the published schedule's values first (SPEC §2), then smaller blocks and the
        other splits; and ``formulation`` where the call has a choice of it (:func:`_formulations`)."""
        return _formulations(call, ctx)[1]


#: The ``formulation`` key's doc.
FORMULATION_DOC = ("direct: C = op(A)·op(B), A's rows in the panels, B's columns in the blocks; transposed: "
                   "Cᵀ = op(B)ᵀ·op(A)ᵀ, A's and B's roles swapped and each finished tile transposed into C's rows "
                   "in AM (every other key then names the blocks of Cᵀ's product). A call of C = Aᵀ·Bᵀ, a thin C "
                   "(fewer columns than two vectors, at least that many rows), and B transposed with fewer rows of "
                   "C than columns search both, transposed first (for TT the published loop nest); any other call "
                   "searches direct and has the key only where a tiling names it. The transposed formulation has no "
                   "split k: a tiling asking for split k searches direct")


def _formulations(call: BoundCall, ctx: PlanContext) -> tuple[dict[str, GemmPlanner], TilingSpace]:
    """The call's planner per formulation it may take, and its tiling space: the direct planner's own when the
    call has no choice, else their union under the key ``formulation``.  C = Aᵀ·Bᵀ is searched both ways,
    transposed first (the published TT loop nest, 2 % or less below NN: BLAS-for-multi-core-DSP; direct, B's blocks
    transposed in AM, wins on small and odd shapes: 513 x 511 x 3 on MT7004 fp16, 2.5 times); a thin C (n below
    two vectors, m at least that) both, transposed first: a micro-kernel of one vector of columns issues an
    A broadcast per FMAC, so the broadcasts bound it (FT78NE fp32, 4096 x 32 x 4096 on one core: 65 % of the peak
    direct, 80 % transposed); B transposed with C's rows fewer than its columns both, transposed first (below).  Any
    other call has the key only where its tiling names it (``ctx.tiling`` when the simulator asks for the space:
    the caller's), the one named searched."""
    planner = GemmPlanner(call, ctx)
    asked, lanes = planner.asked, planner.lanes
    searched: tuple[str, ...]
    # B transposed, C with fewer rows than columns: the transposed formulation transposes A's blocks, the smaller
    # operand's, where the direct one transposes B's (or reduces its rows): MT7004 fp32 64 x 1024 x 256 on four
    # cores, 134,333 cycles direct, 108,859 transposed.
    nt_short = asked.trans_b and not asked.trans_a and asked.m < asked.n
    if ctx.tiling and ctx.tiling.get("split") == "k" and "formulation" not in ctx.tiling and (
            (asked.trans_a and asked.trans_b) or asked.n < 2 * lanes <= asked.m or nt_short):
        # split k asked for: the transposed formulation has none (GemmSpace.resolve), so the direct one is searched
        planners = {f: planner if planner.formulation == f else GemmPlanner(call, ctx, f) for f in FORMULATIONS}
        searched = ("direct",)
    elif asked.trans_a and asked.trans_b:
        planners, searched = {"transposed": planner, "direct": GemmPlanner(call, ctx, "direct")}, \
            ("transposed", "direct")
    elif asked.n < 2 * lanes <= asked.m:
        planners, searched = {"transposed": GemmPlanner(call, ctx, "transposed"), "direct": planner}, \
            ("transposed", "direct")
    elif nt_short and not (ctx.tiling and "formulation" in ctx.tiling):
        planners, searched = {"transposed": GemmPlanner(call, ctx, "transposed"), "direct": planner}, \
            ("transposed", "direct")
    elif ctx.tiling and "formulation" in ctx.tiling:  # asked for: the union, the asked-for one searched
        planners, searched = {"direct": planner, "transposed": GemmPlanner(call, ctx, "transposed")}, \
            (str(ctx.tiling["formulation"]),)
    else:
        refuse_what_no_completion_runs(ctx, [planner])
        return {"direct": planner}, planner.space
    refuse_what_no_completion_runs(ctx, [planners[f] for f in searched if f in planners])  # (an unknown one: the
    # union's check names it)
    key = ChoiceKey("formulation", FORMULATIONS, FORMULATION_DOC, values=searched)
    return planners, union(key, {f: planners[f].space for f in FORMULATIONS},
                           alternatives=[{"formulation": f} for f in searched[1:]])


def refuse_what_no_completion_runs(ctx: PlanContext, planners: list[GemmPlanner]) -> None:
    """Refuse a caller's partial tiling that asks for an NT reduction kernel none of the ``planners`` (the
    formulations searched) can run with the keys it gives: the space tells from the call alone, so the search
    does not complete it (hundreds of completions, each refused for the same reason) only to list the misses.
    The KernelArgError is the one a full tiling asking for it gets (:meth:`GemmPlanner.resolve`)."""
    t = ctx.tiling or {}
    refusals = [p.nt_refusal(t.get("nt_kernel"), t.get("split"), t.get("c_home")) for p in planners]
    first = refusals[0] if refusals else None
    if first is not None and all(r is not None for r in refusals):
        raise first


KERNEL = Gemm()
