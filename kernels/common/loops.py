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

