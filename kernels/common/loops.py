"""Inner loops as kernels state them: builders of :class:`~sim.model.plan.Loop` from the core's own numbers.

A kernel's compute is priced from the loops it states (SPEC §6): per iteration, the issues on each functional
unit class of the target's ``core.units`` (``fmac``, ``valu``, ``vls``, ``broadcast``, ``sload``, ``salu``).
These builders turn "what the loop does" (vectors loaded and stored, multiply-adds, other vector ops, a GEMM
micro-kernel's m_r x n_r block) into those issue counts, with the vector length and the bytes one load/store
issue moves taken from the target, so the same kernel code states the right loop on every chip.
"""

from __future__ import annotations

from collections.abc import Mapping

from sim.model.plan import Loop
from sim.model.target import CoreModel


def lanes(core: CoreModel, precision: str) -> int:
    """Elements of ``precision`` one vector instruction works on."""
    return core.precisions[precision].lanes


def vls_issues(core: CoreModel, vectors: int) -> int:
    """Vector load/store issues that move ``vectors`` whole vectors between AM and registers (a wide load
    such as VLDDW moves ``bytes_per_issue`` bytes: two vectors at once)."""
    per_issue = max(1, core.units["vls"].bytes_per_issue // core.vector_width_bytes)
    return -(-vectors // per_issue)


def sload_issues(core: CoreModel, elements: int, itemsize: int) -> int:
    """Scalar load issues that bring ``elements`` scalars of ``itemsize`` bytes from SM into registers."""
    per_issue = max(1, core.units["sload"].bytes_per_issue // itemsize)
    return -(-elements // per_issue)


def vectors_per_issue(core: CoreModel) -> int:
    """Whole vectors one vector load/store issue moves (the unroll an elementwise loop takes to use it)."""
    return max(1, core.units["vls"].bytes_per_issue // core.vector_width_bytes)


def elementwise(core: CoreModel, precision: str, elements: int, *, loads: int, stores: int, fmac: int = 0,
                valu: int = 0, entries: int = 1, reductions: int = 0, epilogue: Mapping[str, int] | None = None,
                label: str = "elementwise") -> Loop:
    """A streaming loop over ``elements`` elements of ``precision``: per vector of them, ``loads`` vectors loaded
    from AM, ``stores`` vectors stored, ``fmac`` multiply-adds (or multiplies, adds) and ``valu`` other vector ops
    (compares, selects, conversions).  The body is unrolled to the vectors one load issue moves, so an iteration
    issues whole load/store instructions; iterations are independent (no carried chain), so the interval is set
    by the busiest unit and the issue width, and one iteration's load, arithmetic and store are the fill."""
    vectors = -(-max(int(elements), 0) // lanes(core, precision))
    unroll = vectors_per_issue(core)
    trips = -(-vectors // unroll)
    issues = {"vls": vls_issues(core, (loads + stores) * unroll), "fmac": fmac * unroll, "valu": valu * unroll}
    chain = tuple(u for u, n in (("vls", loads), ("fmac", fmac), ("valu", valu), ("vls", stores)) if n)
    return Loop(trips=trips, issues={u: n for u, n in issues.items() if n}, chain=chain, entries=entries,
                epilogue=dict(epilogue or {}), reductions=reductions,
                vector_registers=(loads + stores + fmac + valu) * unroll, label=label)


def gemm_micro_kernel(core: CoreModel, precision: str, m_r: int, n_r: int, k: int, *, itemsize: int,
                      entries: int = 1, load_c: bool = False, label: str | None = None) -> Loop:
    """The GEMM micro-kernel: an ``m_r`` x ``n_r`` block of C accumulated in vector registers over ``k`` steps.

    Each k-step loads a row of ``n_r`` B elements from AM as vectors, ``m_r`` A elements from SM as scalars
    and broadcasts each into a vector register, and issues ``m_r`` x (``n_r`` / lanes) FMACs, each into its own
    accumulator: the carried chain is one FMAC's latency, so a block with fewer accumulators than the FMAC
    units times their latency stalls (the published rule m·n ≥ 18 on FT-M7032).  The epilogue stores the
    block of C (and loads it first when ``load_c``: beta = 1 or a later k-block).  Registers: the
    accumulators, one row of B and the broadcast A values.
    """
    nv = -(-n_r // lanes(core, precision))
    accumulators = m_r * nv
    issues = {"vls": vls_issues(core, nv), "sload": sload_issues(core, m_r, itemsize), "broadcast": m_r,
              "fmac": accumulators}
    epilogue = {"vls": vls_issues(core, accumulators * (2 if load_c else 1))}
    return Loop(trips=int(k), issues=issues, chain=("sload", "broadcast", "fmac"), carried=("fmac",),
                entries=entries, epilogue=epilogue, vector_registers=accumulators + nv + m_r,
                label=label or f"gemm micro-kernel {m_r}x{n_r}")



# --- builders for the convolution kernels (conv2d backprop filter, depthwise backprop input) -----------------


def registers_for(core: CoreModel, elements: int, itemsize: int) -> int:
    """Vector registers that hold ``elements`` values of ``itemsize`` bytes (an fp32 accumulator row of fp16
    lanes takes twice the registers of its fp16 operands)."""
    return -(-max(int(elements), 0) * itemsize // core.vector_width_bytes)


def gemm_micro_kernel_from_am(core: CoreModel, precision: str, m_r: int, n_r: int, k: int, *, itemsize: int,
                              entries: int = 1, load_c: bool = False, label: str | None = None) -> Loop:
    """The GEMM micro-kernel when A is not in SM but in AM, stored position-major (row k holds the k-step's A
    elements next to each other: the input window of a convolution read tap by tap, or its im2col rows).

    Scalar loads read SM only and a DMA cannot move AM to SM, so each k-step's ``m_r`` A elements reach the
    scalar registers the way the chip moves vector data to its scalar side: one vector load of them (``vls``),
    a move of that vector into the scalar-vector register (VMVCGC, on ``valu``), and one read per 8 bytes of
    it into scalar registers (SMVCCG: one element a cycle, as the published SVR reduction reads them, charged
    on the one scalar load unit, ``sload``, which has that rate); then, as in :func:`gemm_micro_kernel`,
    one broadcast per A element and ``m_r`` x ``n_r``/lanes FMACs on accumulators carried from step to step.
    B's row of ``n_r`` elements is loaded as vectors; C (fp32 accumulators: an fp16 row needs twice the
    registers) is stored in the epilogue, loaded first when ``load_c``.
    """
    nv = -(-n_r // lanes(core, precision))
    a_vectors = registers_for(core, m_r, itemsize)
    acc_regs = m_r * registers_for(core, n_r, 4)
    issues = {"vls": vls_issues(core, nv) + vls_issues(core, a_vectors), "valu": a_vectors,
              "sload": sload_issues(core, m_r, itemsize), "broadcast": m_r, "fmac": m_r * nv}
    epilogue = {"vls": vls_issues(core, acc_regs * (2 if load_c else 1))}
    return Loop(trips=int(k), issues=issues, chain=("vls", "valu", "sload", "broadcast", "fmac"),
                carried=("fmac",), entries=entries, epilogue=epilogue,
                vector_registers=acc_regs + registers_for(core, n_r, itemsize) + a_vectors + m_r,
                label=label or f"gemm micro-kernel {m_r}x{n_r} (A from AM)")


def gather_rows(core: CoreModel, rows: int, *, load_vectors: int, store_vectors: int, shuffles: int,
                entries: int = 1, label: str = "gather") -> Loop:
    """A gather (an im2col, a layout change): ``rows`` iterations, each loading ``load_vectors`` vectors from AM,
    realigning them with ``shuffles`` vector permutes (``valu``) and storing ``store_vectors`` vectors.  A row's
    vectors are adjacent, so a wide load/store issue moves several; rows are independent (no carried chain)."""
    issues = {"vls": vls_issues(core, load_vectors) + vls_issues(core, store_vectors), "valu": shuffles}
    chain = ("vls", "valu", "vls") if shuffles else ("vls", "vls")
    return Loop(trips=int(rows), issues={u: n for u, n in issues.items() if n}, chain=chain, entries=entries,
                vector_registers=max(load_vectors, store_vectors) + shuffles, label=label)


def tap_accumulate(core: CoreModel, *, block: int, taps: int, entries: int, operand_pairs: bool,
                   shuffles: int = 0, filter_loads: int = 0, epilogue_stores: int, epilogue_valu: int = 0,
                   registers: int = 0, label: str = "taps") -> Loop:
    """Register-blocked taps: ``block`` output vectors accumulate in registers over ``taps`` iterations (one filter
    tap each): per iteration ``block`` FMACs, each on its own freshly loaded input vector (adjacent vectors when
    ``operand_pairs``, so a wide load moves several; else one issue each: strided or dilated gathers),
    ``shuffles`` permutes and ``filter_loads`` filter vectors (0 when the taps' filter vectors stay in
    registers).  The accumulators carry from tap to tap (an FMAC's latency per iteration unless the block
    covers it); the epilogue stores the block (``epilogue_stores`` vectors, ``epilogue_valu`` conversions or
    lane folds first)."""
    loads = vls_issues(core, block) if operand_pairs else block
    issues = {"vls": loads + (vls_issues(core, filter_loads) if filter_loads else 0), "fmac": block,
              "valu": shuffles}
    epilogue = {"valu": epilogue_valu, "vls": vls_issues(core, epilogue_stores) if operand_pairs
                else epilogue_stores}
    chain = ("vls", "valu", "fmac") if shuffles else ("vls", "fmac")
    return Loop(trips=int(taps), issues={u: n for u, n in issues.items() if n}, chain=chain, carried=("fmac",),
                entries=int(entries), epilogue={u: n for u, n in epilogue.items() if n},
                vector_registers=registers, label=label)


def accumulate_precision(core: CoreModel, storage: str) -> str:
    """The precision a kernel that accumulates in fp32 computes in for tensors stored in ``storage``: fp32 for
    fp32 tensors; for fp16 ones ``fp16_fp32acc`` (fp16 products accumulated in fp32) where the core lists it,
    else fp32 (the fp16 operands converted first)."""
    if storage == "fp16" and "fp16_fp32acc" in core.precisions:
        return "fp16_fp32acc"
    return "fp32"
