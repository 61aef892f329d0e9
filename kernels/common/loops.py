"""Inner loops as kernels state them: builders of :class:`~sim.model.plan.Loop` from the core's own numbers.

A kernel's compute is priced from the loops it states (SPEC §6): per iteration, the issues on each functional
unit class of the target's ``core.units`` (``fmac``, ``valu``, ``vls``, ``broadcast``, ``sload``, ``salu``).
These builders turn "what the loop does" (vectors loaded and stored, multiply-adds, other vector ops, a GEMM
micro-kernel's m_r x n_r block) into those issue counts, with the vector length and the bytes one load/store
issue moves taken from the target, so the same kernel code states the right loop on every chip.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from sim.model.memo import memoized_frozen
from sim.model.plan import REDUCE, Loop, stored, unit_class
from sim.model.target import CoreModel

#: Loop builders remember their loops by their arguments' values (sim.model.memo): a plan states the same loop for most
#: of its tiles (every full block of a stream), and a loop is plain frozen data, so the tiles share one object
#: (the plan check and the timing module judge a shared loop once).  Arguments equal but of another type (True
#: and 1) are other arguments: the Loop keeps what it was given.
_memoized = memoized_frozen


#: A vector store as a loop names it where its latency counts (a fill ending in one, an epilogue of stores): it issues
#: on ``vls`` and its data is in AM the unit's ``store_latency_cycles`` after issue (VSTDW: 4; a load's VLDDW: 9).
VSTORE = stored("vls")


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


@_memoized
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
    chain = tuple(u for u, n in (("vls", loads), ("fmac", fmac), ("valu", valu), (VSTORE, stores)) if n)
    return Loop(trips=trips, issues={u: n for u, n in issues.items() if n}, chain=chain, entries=entries,
                epilogue=dict(epilogue or {}), reductions=reductions,
                vector_registers=(loads + stores + fmac + valu) * unroll, label=label)


def tap_groups(taps: int, loop: Callable[[int, int], Loop], registers: int) -> list[Loop]:
    """A loop over a filter's ``taps`` cut into passes that each keep within ``registers`` vector registers:
    ``loop(k, j)`` is pass ``j``'s loop over ``k`` taps; as few passes as fit, their taps as even as can be (one
    pass when all of them fit; a tap a pass when even two do not)."""
    most = next((k for k in range(taps, 0, -1) if loop(k, 0).vector_registers <= registers), 1)
    passes = -(-taps // most)
    small, extra = divmod(taps, passes)
    return [loop(small + (1 if j < extra else 0), j) for j in range(passes)]


def element_bytes(core: CoreModel, precision: str) -> int:
    """Bytes one element of ``precision`` takes in a vector register (the vector's bytes over its lanes)."""
    return max(1, core.vector_width_bytes // lanes(core, precision))


def _tensor_issues(core: CoreModel, precision: str, vectors: int, itemsize: int) -> int:
    """Load/store issues that move ``vectors`` vectors' worth of elements of one tensor stored ``itemsize`` bytes
    each (an fp16 tensor computed in fp32 moves half the bytes of its fp32 vectors)."""
    per_issue = core.units["vls"].bytes_per_issue or core.vector_width_bytes
    return -(-vectors * lanes(core, precision) * itemsize // per_issue)


def _busiest(core: CoreModel, issues: Mapping[str, int]) -> int:
    """Cycles the busiest unit class needs for ``issues`` (what an unroll must reach to hide a carried chain)."""
    return max((-(-n // core.units[u].count) for u, n in issues.items() if n), default=0)


@_memoized
def streaming(core: CoreModel, precision: str, elements: int, *, loads: int = 0, stores: int = 0, fmac: int = 0,
              valu: int = 0, sums: int = 0, load_itemsize: int | None = None, store_itemsize: int | None = None,
              fmac_depth: int | None = None, valu_depth: int | None = None, const_registers: int = 0,
              const_loads: int = 0, chain: Sequence[str] | None = None, entries: int = 1, reductions: int = 0,
              epilogue: Mapping[str, int] | None = None, label: str = "stream") -> Loop:
    """A loop that streams ``elements`` elements (per entry) through the vector units, computing in ``precision``.

    Per vector of ``precision`` it loads ``loads`` tensors and stores ``stores`` from/to AM, issues ``fmac``
    multiply-adds (adds, multiplies) and ``valu`` other vector ops (compares, selects, rsqrt estimates), and
    adds into ``sums`` running sums.  Tensors stored narrower than the compute precision (``load_itemsize`` /
    ``store_itemsize`` in bytes: fp16 tensors computed in fp32) move fewer bytes per issue, and each costs one
    conversion (a ``valu`` issue) per vector: widened as loaded, narrowed as stored.

    The body is unrolled to whole load/store issues of the narrowest tensor (or to all the vectors, when fewer).
    Running sums are a carried chain
    (each accumulator's add waits for the previous one's, an FMAC latency): the loop keeps one accumulator per
    unrolled vector and unrolls further, as far as the registers and the elements allow, until its busiest unit
    takes at least that latency per iteration (the chain then costs nothing); the epilogue adds the
    accumulators of each sum together, a tree of dependent levels (:func:`tree_levels`,
    ``Loop.epilogue_chain``), before the ``reductions`` and the ``epilogue``.  ``fmac_depth`` / ``valu_depth``
    are the dependent FMAC / other vector ops on one element's path (the fill, in the order load, widen, FMAC,
    ALU, narrow, store; ``chain`` gives another path whole), ``const_registers`` the vector registers held for
    the whole loop (per-channel coefficients), ``const_loads`` vectors of such coefficients loaded again with
    every vector instead (when they are too many to hold), ``epilogue`` further issues once per entry (storing
    the sums, loading coefficients), ``reductions`` cross-lane reductions per entry.
    """
    lane, width = lanes(core, precision), element_bytes(core, precision)
    li, si = load_itemsize or width, store_itemsize or width
    vectors = -(-max(int(elements), 0) // lane)
    narrowest = min([li] * bool(loads) + [si] * bool(stores) + [width])
    per_issue = core.units["vls"].bytes_per_issue or core.vector_width_bytes
    step = max(1, per_issue // (lane * narrowest))
    converts = loads * (li != width) + stores * (si != width)

    def issues_for(unroll: int) -> dict[str, int]:
        out = {"vls": loads * _tensor_issues(core, precision, unroll, li)
                      + stores * _tensor_issues(core, precision, unroll, si)
                      + const_loads * _tensor_issues(core, precision, unroll, width),
               "fmac": fmac * unroll, "valu": (valu + converts) * unroll}
        return {u: n for u, n in out.items() if n}

    def registers(unroll: int) -> int:
        # Per unrolled vector: what it loads and one working register its chain of ops writes in turn, and an
        # accumulator per running sum; plus the registers held for the whole loop.
        return unroll * (loads + const_loads + 1 + sums) + const_registers

    unroll = max(1, min(step, vectors))  # a loop over fewer vectors than a load moves issues them all at once
    if sums:
        latency = core.units["fmac"].latency_cycles
        while (_busiest(core, issues_for(unroll)) < latency and unroll < vectors
               and registers(unroll + step) <= core.vector_registers):
            unroll += step
    if chain is None:
        fd = min(fmac, 1) if fmac_depth is None else fmac_depth
        vd = min(valu, 1) if valu_depth is None else valu_depth
        chain = (("vls",) * bool(loads) + ("valu",) * bool(loads and li != width) + ("fmac",) * fd + ("valu",) * vd
                 + ("valu",) * bool(stores and si != width) + (VSTORE,) * bool(stores))
    return Loop(trips=-(-vectors // unroll), issues=issues_for(unroll), chain=tuple(chain),
                carried=("fmac",) if sums else (), entries=entries, epilogue=dict(epilogue or {}),
                epilogue_chain=tuple({"fmac": sums * adds} for adds in tree_levels(unroll)) if sums else (),
                reductions=reductions, vector_registers=registers(unroll), label=label)


def tree_levels(accumulators: int) -> tuple[int, ...]:
    """The adds of each level of a tree that sums ``accumulators`` registers into one: pairs added at once, each
    level waiting for the one before (8 -> 4, 2, 1: three FMAC latencies where a chain would take seven)."""
    levels = []
    left = max(int(accumulators), 1)
    while left > 1:
        levels.append(left // 2)
        left -= left // 2
    return tuple(levels)


def reduce_broadcast(core: CoreModel, precision: str, rows: int, cols: int, *, loads: int, fmac: int, sums: int,
                     apply_loads: int, apply_fmac: int, apply_stores: int, apply_valu: int = 0,
                     prologue: Mapping[str, int] | None = None, load_itemsize: int | None = None,
                     store_itemsize: int | None = None, label: str = "rows") -> tuple[Loop, Loop]:
    """A column reduction with per-row broadcasts (a normalisation gradient over rows): two loops, each entered
    once per row of ``cols`` elements.

    The first streams the row's ``loads`` tensors into ``sums`` running sums (``fmac`` multiply-adds per vector,
    unrolled into independent accumulators as :func:`streaming` does) and folds each sum across the lanes (a
    reduction each).  The second starts each row with its prologue -- ``prologue`` issues (the scalar work that
    turns the sums into the row's coefficients) then one broadcast per sum into vector registers, held over the
    row -- and streams the row again: ``apply_loads`` tensors in, ``apply_fmac`` multiply-adds and
    ``apply_valu`` other ops per vector, ``apply_stores`` out.  A prologue is priced as a per-entry epilogue is
    (its issues' resource bound plus the latency of its last unit, the broadcast: the body waits for it).
    """
    head = dict(prologue or {})
    head["broadcast"] = head.pop("broadcast", 0) + sums  # last: the body waits for the broadcast coefficients
    reduce = streaming(core, precision, cols, loads=loads, fmac=fmac, sums=sums, load_itemsize=load_itemsize,
                       entries=rows, reductions=sums, label=f"{label}: sums")
    apply = streaming(core, precision, cols, loads=apply_loads, fmac=apply_fmac, valu=apply_valu,
                      stores=apply_stores, load_itemsize=load_itemsize, store_itemsize=store_itemsize,
                      const_registers=sums, entries=rows, epilogue=head, label=f"{label}: broadcast and apply")
    return reduce, apply


@_memoized
def sequence(ops: Sequence[str], *, entries: int = 1, label: str = "sequence") -> Loop:
    """Straight-line code run once per entry: ``ops`` issued one after the other, each waiting for the one before
    (a scalar computation on one lane, such as a quantisation range's nudge): its time is the chain's latencies."""
    counts: dict[str, int] = {}
    for u in ops:
        counts[u] = counts.get(u, 0) + 1
    return Loop(trips=1, issues=counts, chain=tuple(ops), entries=entries, vector_registers=2, label=label)


def sums_epilogue(core: CoreModel, loads: int, sums: int) -> dict[str, int]:
    """An epilogue that loads ``loads`` vectors (coefficients) and adds ``sums`` vectors of running sums into
    their partials in AM: each partial loaded, then stored (last: the loop is done their store latency after)."""
    both = vls_issues(core, loads + 2 * sums)  # in whole issues, the stores' share last
    stores = both - vls_issues(core, loads + sums)
    return {u: n for u, n in (("vls", both - stores), (VSTORE, stores)) if n}


def c_epilogue(core: CoreModel, vectors: int, load_c: bool) -> dict[str, int]:
    """A micro-kernel's epilogue: its block of C, ``vectors`` vectors, stored (and loaded first when ``load_c``):
    the loads and the stores share the vector load/store units, the stores last (the loop is done their store
    latency after the last)."""
    loads = vls_issues(core, vectors) if load_c else 0
    stores = vls_issues(core, vectors * (2 if load_c else 1)) - loads  # C's loads and stores in whole issues
    return {u: n for u, n in (("vls", loads), (VSTORE, stores)) if n}


@_memoized
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
    epilogue = c_epilogue(core, accumulators, load_c)
    return Loop(trips=int(k), issues=issues, chain=("sload", "broadcast", "fmac"), carried=("fmac",),
                entries=entries, epilogue=epilogue, vector_registers=accumulators + nv + m_r,
                label=label or f"gemm micro-kernel {m_r}x{n_r}")



def modulo_reduction(core: CoreModel, accumulators: int, *, group: int = 4) -> tuple[dict[str, int], ...]:
    """The published improved reduction (Yu et al., IPDPS 2024, Table III) of ``accumulators`` vector
    accumulators, one element of C each, added into C's old values in SM: as an epilogue chain, its steps in
    order.  Rounds of: the vectors stored into AM (VSTDW), read back in modulo-``group`` order (VLDDWM4) so that
    ``group`` vectors hold lanes of the same accumulators, and added as a tree (FMAC), ``group`` vectors into one,
    until at most ``group`` vectors are left (48 -> 12 -> 3); then those moved into the scalar-vector register
    (VMVCGC, ``valu``), read out one element a cycle (the core's cross-lane reduction), each added to C's old
    value (SFADDD, ``salu``) and stored into SM (SSTDW)."""
    steps: list[dict[str, int]] = []
    vectors = max(int(accumulators), 1)
    while vectors > group:
        groups = -(-vectors // group)
        steps += [{VSTORE: vls_issues(core, vectors)}, {"vls": vls_issues(core, vectors)}]
        steps += [{"fmac": groups * adds} for adds in tree_levels(group)]
        vectors = groups
    steps += [{"valu": vectors}, {REDUCE: vectors}, {"salu": accumulators}, {stored("sload"): accumulators}]
    return tuple(steps)


@_memoized
def gemm_nt_micro_kernel(core: CoreModel, precision: str, m_r: int, n_r: int, k: int, *, blocks: int = 1,
                         entries: int = 1, label: str | None = None) -> Loop:
    """The published NT micro-kernel, merged (BLAS-for-multi-core-DSP, 相关说明/NT模式下微内核的合并与重叠): C = A·Bᵀ
    over ``blocks`` blocks of ``m_r`` x ``n_r`` elements of C, each the dot products of ``m_r`` rows of A with
    ``n_r`` rows of B, both contiguous in k and read from AM as vectors: one vector accumulator per element of C
    (3 x 6 is the smallest block whose 18 accumulators keep the 3 FMAC units of latency 6 busy), reduced across
    its lanes at the end (:func:`modulo_reduction`).

    Merged, the blocks run as one software-pipelined loop, a block an iteration: a block's reduction issues while
    the next block computes (its stores, modulo loads, adds, SVR moves, scalar adds and stores take the units'
    spare issues; its adds share the FMAC units), so an iteration issues one block's k-steps -- per vector of k,
    the ``m_r`` + ``n_r`` row vectors (VLDDW) and ``m_r`` x ``n_r`` FMACs -- and one block's reduction; the last
    block's reduction is the epilogue.  Registers: two blocks' accumulators (the one computing, the one being
    reduced) and the row vectors."""
    steps_k = -(-int(k) // lanes(core, precision))
    acc = m_r * n_r
    reduction = modulo_reduction(core, acc)
    issues: dict[str, int] = {"vls": vls_issues(core, m_r + n_r) * steps_k, "fmac": acc * steps_k}
    for step in reduction:  # the block before's reduction, issued while this block computes
        for unit, n in step.items():
            # The SVR read-out (one element a cycle, on the scalar load unit, as gemm_micro_kernel_from_am reads
            # it) and every store issue on their unit classes.
            cls = "sload" if unit == REDUCE else unit_class(unit)[0]
            issues[cls] = issues.get(cls, 0) + (acc if unit == REDUCE else n)
    return Loop(trips=int(blocks), issues=issues, chain=("vls", "fmac"), entries=entries,
                epilogue_chain=reduction, vector_registers=2 * acc + m_r + n_r,
                label=label or f"gemm NT micro-kernel {blocks} x {m_r}x{n_r}")


@_memoized
def gemm_nt_serial_micro_kernel(core: CoreModel, precision: str, m_r: int, n_r: int, k: int, *, blocks: int = 1,
                                label: str | None = None) -> Loop:
    """The NT micro-kernel of Yu et al. (IPDPS 2024, "6 x KA x 8"): C = A·Bᵀ over ``blocks`` blocks of ``m_r`` x
    ``n_r`` elements of C, one after another, each its own loop entry: per vector of k, the ``m_r`` + ``n_r`` row
    vectors (VLDDW, both operands contiguous in k in AM) and ``m_r`` x ``n_r`` FMACs into one vector accumulator per
    element of C, carried from step to step; then the block's improved reduction (:func:`modulo_reduction`) into
    C's rows in SM as the entry's epilogue chain, before the next block starts (not overlapped: the paper's
    k/(k + 138) efficiency of the kernel).  Registers: one block's accumulators and its row vectors."""
    steps_k = -(-int(k) // lanes(core, precision))
    acc = m_r * n_r
    return Loop(trips=steps_k, issues={"vls": vls_issues(core, m_r + n_r), "fmac": acc}, chain=("vls", "fmac"),
                carried=("fmac",), entries=int(blocks), epilogue_chain=modulo_reduction(core, acc),
                vector_registers=acc + m_r + n_r,
                label=label or f"gemm NT micro-kernel (serial) {blocks} x {m_r}x{n_r}")


# --- builders for the convolution kernels (conv2d backprop filter, depthwise backprop input) -----------------


def registers_for(core: CoreModel, elements: int, itemsize: int) -> int:
    """Vector registers that hold ``elements`` values of ``itemsize`` bytes (an fp32 accumulator row of fp16
    lanes takes twice the registers of its fp16 operands)."""
    return -(-max(int(elements), 0) * itemsize // core.vector_width_bytes)


@_memoized
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
    epilogue = c_epilogue(core, acc_regs, load_c)
    return Loop(trips=int(k), issues=issues, chain=("vls", "valu", "sload", "broadcast", "fmac"),
                carried=("fmac",), entries=entries, epilogue=epilogue,
                vector_registers=acc_regs + registers_for(core, n_r, itemsize) + a_vectors + m_r,
                label=label or f"gemm micro-kernel {m_r}x{n_r} (A from AM)")


@_memoized
def gather_rows(core: CoreModel, rows: int, *, load_vectors: int, store_vectors: int, shuffles: int,
                entries: int = 1, label: str = "gather") -> Loop:
    """A gather (an im2col, a layout change): ``rows`` iterations, each loading ``load_vectors`` vectors from AM,
    realigning them with ``shuffles`` vector permutes (``valu``) and storing ``store_vectors`` vectors.  A row's
    vectors are adjacent, so a wide load/store issue moves several; rows are independent (no carried chain)."""
    issues = {"vls": vls_issues(core, load_vectors) + vls_issues(core, store_vectors), "valu": shuffles}
    chain = ("vls", "valu", VSTORE) if shuffles else ("vls", VSTORE)
    return Loop(trips=int(rows), issues={u: n for u, n in issues.items() if n}, chain=chain, entries=entries,
                vector_registers=max(load_vectors, store_vectors) + shuffles, label=label)


@_memoized
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
    epilogue = {"valu": epilogue_valu, VSTORE: vls_issues(core, epilogue_stores) if operand_pairs
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
