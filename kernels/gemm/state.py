"""A GEMM call's state for planning: its sizes and buffers, the checks of a tiling, each core's shares and steps."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kernels.base import PlanContext
from kernels.common.binding import attrs_of
from kernels.common.loops import (
    elementwise,
    gemm_micro_kernel,
    gemm_nt_micro_kernel,
    gemm_nt_serial_micro_kernel,
    lanes,
)
from kernels.common.scratch import align_up
from kernels.common.shares import split_even, split_units
from kernels.gemm.constants import (
    A_STAGINGS,
    C_HOMES,
    F32,
    MICRO_ROWS,
    NT_KERNELS,
    NT_REDUCTIONS,
    STREAMED_C_SLOTS,
    GemmAttrs,
    GemmTiling,
    Step,
    compute_precision,
)
from sim.errors import KernelArgError
from sim.model.call import BoundCall
from sim.model.memo import memoized
from sim.model.plan import Loop
from sim.model.target import CoreModel


class GemmCall:
    """A GEMM call as its planner sees it: sizes, buffers, the core, the staging levels, and the shares and steps
    of a tiling (what the layout, the tiling space and the build all read)."""

    def __init__(self, call: BoundCall, ctx: PlanContext, formulation: str | None = None):
        self.call, self.ctx = call, ctx
        #: The call's attributes as given; :attr:`g` those of the product planned.
        self.asked = asked = attrs_of(call, GemmAttrs)
        #: The product planned (:data:`~kernels.gemm.constants.FORMULATIONS`; by default ``transposed`` for C = Aᵀ·Bᵀ,
        #: as the published library computes it, else ``direct``).  Transposed, C = op(A)·op(B) is planned as
        #: Cᵀ = op(B)ᵀ·op(A)ᵀ: B's rows in A's role, A's in B's (an op(B)ᵀ of B stored [k, n] is B stored transposed,
        #: and so on), each finished tile of Cᵀ transposed in AM into C's rows on its way out (and C's old rows,
        #: beta = 1, transposed on their way in).  Every tiling key then names the blocks of that product.
        self.formulation = formulation or ("transposed" if asked.trans_a and asked.trans_b else "direct")
        self.c_transposed = self.formulation == "transposed"
        if self.c_transposed:
            self.g = GemmAttrs(asked.n, asked.m, asked.k, not asked.trans_b, not asked.trans_a, asked.beta,
                               asked.ldb, asked.lda, asked.ldc)
            self.a, self.b = call.buffer("b"), call.buffer("a")
        else:
            self.g = asked
            self.a, self.b = call.buffer("a"), call.buffer("b")
        self.c = call.buffer("c")
        self.dt = self.c.dtype
        self.isz = self.dt.itemsize
        self.core = ctx.target.core
        self.prec = compute_precision(ctx)
        self.lanes = lanes(self.core, self.prec)
        self.am, self.sm = ctx.vector_level, ctx.scalar_level
        self._a_staged = False  # whether the tiling being laid out or built stages A's blocks in GSM
        shared = [a for a in ctx.levels if a.shared]
        self._blocks_level = max(shared, key=lambda a: a.size_bytes) if shared else None  # (asked for per tile)

    def _fmac_depth(self) -> int:
        """Independent accumulators that keep every FMAC unit busy: the units times their latency."""
        fmac = self.core.units["fmac"]
        return fmac.count * fmac.latency_cycles

    def _micro_registers(self, m_micro: int, n_micro: int, nt_kernel: str = "transpose") -> int:
        """Vector registers an ``m_micro`` x ``n_micro`` micro-kernel keeps live (its loop's count; the NT
        reduction kernels: one vector accumulator per element of C, two blocks' of them where a block's reduction
        overlaps the next block (``reduce``), and a row vector of each row)."""
        if nt_kernel in NT_REDUCTIONS:
            blocks = 2 if nt_kernel == "reduce" else 1
            return blocks * m_micro * n_micro + m_micro + n_micro
        nv = -(-n_micro // self.lanes)
        return m_micro * nv + nv + m_micro

    def _nt_block(self, nt_kernel: str = "reduce") -> tuple[int, int]:
        """An NT reduction kernel's block of C (rows, columns).  ``reduce``: as many rows as FMAC units and columns
        as their latency, the fewest accumulators that keep every unit busy (on FT78NE the published 3 x 6).
        ``reduce_serial``: the NN micro-kernel's published rows (6) and as many columns as the vector registers
        hold with one accumulator per element of C and a row vector of each row (Yu et al.'s 6 x 8 on FT78NE)."""
        if nt_kernel == "reduce_serial":
            rows = MICRO_ROWS[0]
            return rows, (self.core.vector_registers - rows) // (rows + 1)
        fmac = self.core.units["fmac"]
        return fmac.count, fmac.latency_cycles

    def _nt_allowed(self, split: str) -> bool:
        """Whether this call may multiply a transposed B by an NT reduction kernel: B transposed and A not, fp32
        operands and C, a scalar level to hold C's rows, not split k."""
        g = self.g
        return (g.trans_b and not g.trans_a and self.prec == "fp32" and self.dt == F32 and self.sm is not None
                and split != "k")

    def nt_refusal(self, nt_kernel: str | None, split: str | None, c_home: str | None) -> KernelArgError | None:
        """Why an NT reduction kernel cannot multiply this call with ``split`` and ``c_home`` (None: either not
        given, any the call may take), or None.  A caller's partial tiling asking for one is refused with it before
        the search completes it (:func:`kernels.gemm.kernel.refuse_what_no_completion_runs`): no completion could
        change the answer."""
        if nt_kernel not in NT_REDUCTIONS:
            return None
        # (_nt_allowed depends on the split only by refusing split k: with the split not given, split n is one the
        # call may take)
        if not self._nt_allowed(split or "n"):
            return KernelArgError(f"argument 'tiling.nt_kernel': {nt_kernel} (an NT micro-kernel) multiplies a "
                                  f"B stored transposed by an A that is not, in fp32, with C's rows in the scalar "
                                  f"level, and not with split k (this call: trans_a {int(self.asked.trans_a)}, "
                                  f"trans_b {int(self.asked.trans_b)}, {self.prec}, split {split or 'any'})")
        if c_home is not None and c_home != "ddr":
            return KernelArgError(f"argument 'tiling.nt_kernel': {nt_kernel} adds each dot product into C's "
                                  f"rows in SM, which come from memory per k block: it goes with c_home ddr only")
        return None

    def _nt_kernels(self, t: Mapping[str, Any]) -> tuple[str, ...]:
        """How the search may multiply a transposed B: B transposed in AM, then the published merged NT kernel
        where the call allows it (``reduce_serial`` only when asked for: the merged kernel does the same work in
        fewer cycles); B transposed in AM only for any other call."""
        return NT_KERNELS[:2] if self._nt_allowed(t["split"]) else NT_KERNELS[:1]

    def _c_homes(self, t: Mapping[str, Any]) -> tuple[str, ...]:
        """Where C may live over the k loop: streamed only for an fp32 C (an fp16 C is rounded once, at the end)
        and not with split k (whose partials are summed once, at the end); streamed only with the NT reduction
        kernels (they add into C's rows in SM)."""
        if t.get("nt_kernel") in NT_REDUCTIONS:
            return C_HOMES[1:]
        return C_HOMES if self.dt == F32 and t["split"] != "k" else C_HOMES[:1]

    def split_k_possible(self) -> bool:
        """Whether the call may split k at all: several cores of an _s call, a shared level to sum their partials
        through, and a depth of at least two (each core a k block of its own)."""
        return (self.call.variant == "s" and len(self.ctx.cores) > 1 and self.blocks_level is not None
                and self.g.k > 1)

    def _check_split_k(self, t: GemmTiling) -> None:
        """Split k's preconditions, as KernelArgErrors naming the key at fault (the call: ``split``; a k block
        as deep as k, which leaves one core all the depth: ``k_block``)."""
        if not self.split_k_possible():
            cores = len(self.ctx.cores)
            this = (f"an _{self.call.variant} call on {cores} core{'s' if cores > 1 else ''}, k {self.g.k}"
                    + ("" if self.blocks_level is not None else ", no shared level"))
            raise KernelArgError(f"argument 'tiling.split': k needs several cores of an _s call, a depth of at "
                                 f"least 2 and a shared level to sum the cores' partial C blocks through (this "
                                 f"call: {this}; use split n or m)")
        if t.k_block >= self.g.k:
            raise KernelArgError(f"argument 'tiling.k_block': split k shares k blocks among the cores and needs at "
                                 f"least two (k {self.g.k}, k_block {t.k_block}): at most {self.g.k - 1}")

    def _may_share(self, split: str) -> bool:
        """Whether a tiling of this split shares A's blocks among several cores through the shared level."""
        return (self.call.variant == "s" and len(self.ctx.cores) > 1 and self.blocks_level is not None
                and split != "k")

    def _a_staging_chosen(self) -> bool:
        """Whether the call chooses where A's panels come from (the ``a_staging`` key): one core of an _s call
        with a shared level (every split), or several (split m only: :meth:`_a_staging_only`)."""
        return self.call.variant == "s" and self.blocks_level is not None

    def _a_staging_only(self) -> tuple[str, str] | None:
        """The ``only`` of the ``a_staging`` key: ``("split", "m")`` on several cores (split n always stages A,
        every core reading all of it, and split k never does), None on one core (every split chooses)."""
        return ("split", "m") if len(self.ctx.cores) > 1 else None

    def _a_stagings(self, t: Mapping[str, Any]) -> tuple[str, ...]:
        """Where this call's A panels may come from: on several cores, the shared level (split n), or the shared
        level then memory (split m: each core's rows of A are its own, so each core may read its panels straight
        from memory); on one core of an _s call with a shared level, memory first (each panel read straight from
        it), then the published single-core blocking's GSM block; memory only for split k, a _p call or no
        shared level."""
        if self._may_share(t["split"]):
            return A_STAGINGS if t["split"] == "m" else A_STAGINGS[:1]
        if self._a_staging_chosen() and len(self.ctx.cores) == 1:
            return A_STAGINGS[::-1]
        return A_STAGINGS[1:]

    def _a_staging_of(self, t: Mapping[str, Any]) -> str:
        """A tiling's ``a_staging``: its key where the call chooses it, else what its split decides."""
        return t.get("a_staging") or self._a_stagings(t)[0]

    # -- the GSM level: used by an _s call on several cores, or asked for on one ------------------------

    @property
    def shared(self) -> bool:
        """Whether the tiling being laid out or built stages A's blocks in the shared level."""
        return self._a_staged

    @property
    def blocks_level(self) -> Any:
        """The shared staging level A's blocks go through: the largest shared one (the targets' ``gsm_blocks``;
        a copy of a target with one shared level: that one), or None."""
        return self._blocks_level

    # -- a tiling's checks -------------------------------------------------------------------------

    def _tiling_of(self, given: Mapping[str, Any]) -> GemmTiling:
        """The full tiling ``given`` as a GemmTiling, unchecked (``a_staging`` where the split decides it)."""
        return GemmTiling(**{k: given[k] for k in GemmTiling.__dataclass_fields__ if k != "a_staging"},
                          a_staging=self._a_staging_of(given))

    def resolve(self, given: Mapping[str, Any]) -> GemmTiling:
        """The full tiling ``given`` as the planner takes it; KernelArgError for keys that do not go together."""
        t = self._tiling_of(given)
        if t.m_panel % t.m_micro and t.m_panel != self.g.m:
            raise KernelArgError(f"argument 'tiling.m_panel': {t.m_panel} is not a multiple of m_micro "
                                 f"({t.m_micro})")
        if t.m_block % t.m_panel and t.m_block != self.g.m:
            raise KernelArgError(f"argument 'tiling.m_block': {t.m_block} is not a multiple of m_panel "
                                 f"({t.m_panel})")
        refusal = self.nt_refusal(t.nt_kernel, t.split, t.c_home)
        if refusal is not None:
            raise refusal
        if self.c_transposed and t.split == "k":
            # (the reduce phase sums rows of C from the cores' partial rows; this formulation's partials are rows
            # of Cᵀ, and its tiles reach C's rows only through their transpose on the way out)
            raise KernelArgError("argument 'tiling.split': k does not go with formulation transposed: split k "
                                 "sums the cores' partial rows of C, and the transposed formulation computes rows "
                                 "of Cᵀ (use formulation direct, or split n or m)")
        if t.split == "k":
            self._check_split_k(t)
        regs = self._micro_registers(t.m_micro, t.n_micro, t.nt_kernel)
        if regs > self.core.vector_registers:
            raise KernelArgError(f"argument 'tiling.m_micro' x 'tiling.n_micro': a {t.m_micro}x{t.n_micro} "
                                 f"micro-kernel keeps {regs} vector registers live, the core has "
                                 f"{self.core.vector_registers}")
        if t.c_home == "ddr" and (self.dt != F32 or t.split == "k"):
            why = "an fp16 C is rounded once, after the last k block" if self.dt != F32 else \
                "split k sums fp32 partials once, after the last k block"
            raise KernelArgError(f"argument 'tiling.c_home': ddr (C streamed per k block) does not go with this "
                                 f"call: {why}")
        if t.a_loader == "core0" and not (self._may_share(t.split) and t.a_staging == "gsm"):
            raise KernelArgError(f"argument 'tiling.a_loader': core0 loads the GSM blocks of A, which only an _s call "
                                 f"on several cores with split n or m stages (this call: {self.call.symbol} on "
                                 f"{len(self.ctx.cores)} core(s), split {t.split}, a_staging {t.a_staging})")
        if t.b_staging != "am" and not (t.split == "m" and self._may_share(t.split)):
            raise KernelArgError(f"argument 'tiling.b_staging': {t.b_staging} shares B blocks that every core uses, "
                                 f"which only "
                                 f"split m of an _s call on several cores has (this call: {self.call.symbol} on "
                                 f"{len(self.ctx.cores)} core(s), split {t.split})")
        if t.a_staging not in self._a_stagings({"split": t.split}):
            raise KernelArgError(f"argument 'tiling.a_staging': {t.a_staging} does not go with this call: A's "
                                 f"panels come from {' or '.join(self._a_stagings({'split': t.split}))} here (GSM "
                                 f"always on several cores with split n, GSM or memory with split m, asked for on "
                                 f"one core of an _s call; memory for split k and _p calls; this call: "
                                 f"{self.call.symbol} on "
                                 f"{len(self.ctx.cores)} core(s), split {t.split})")
        if t.a_buffers == 1 and t.a_staging != "gsm":
            raise KernelArgError(f"argument 'tiling.a_buffers': 1 sizes the GSM block of A, which this tiling does "
                                 f"not stage (a_staging {t.a_staging}; this call: {self.call.symbol} on "
                                 f"{len(self.ctx.cores)} core(s), split {t.split})")
        return t

    def _slots(self, t: GemmTiling) -> int:
        """Tiles in flight per core: two with C's block in AM (double-buffered panels and C tiles); with C
        streamed, three (the library's triple-buffered C), or fewer where the walk would not order a tile's load
        of C rows after the store of them one k block before.

        With C streamed, a core's tile j loads the rows its tile i = j - P stored (P: its tiles per k block; slots
        round-robin).  The walk issues tile j's loads once the tile before it in its slot has stored and the walk
        is at tile j - 1, whose own loads may still wait for the stores of its slot's tile before it
        (:mod:`sim.model.plan_alias`, the plan check's rule ``store-race``).  So tile i's stores have landed when
        tile j's loads go out if j is of i's slot (P a multiple of the slots S) or a later tile of i's slot comes
        by j - 2 (P >= S + 2); the most slots, up to three, for which every core's P is one or the other."""
        if t.c_home == "am":
            return 2
        g, cores = self.g, self.ctx.cores
        chunks, _ = self._shares(t)
        # A core's tiles per k block: its column chunks times its panels of every GSM block (split m: its share).
        panels = [0] * len(cores)
        for r0 in range(0, g.m, t.m_block):
            n_p = -(-min(t.m_block, g.m - r0) // t.m_panel)
            if t.split == "m":
                for i, (a, b) in enumerate(split_even(n_p, len(cores))):
                    panels[i] += b - a
            else:
                panels = [p + n_p for p in panels]
        per_pass = [v for v in (len(chunks[c]) * panels[i] for i, c in enumerate(cores)) if v]
        return next(s for s in range(STREAMED_C_SLOTS, 0, -1) if all(p % s == 0 or p >= s + 2 for p in per_pass))

    def _panels_fit(self, m_panel: int, k_block: int, slots: int = 2) -> bool:
        """Whether ``slots`` A micro-panels of ``m_panel`` rows and ``k_block`` depth fit the scalar level (no
        scalar level: they go beside the C tiles, which the layout checks)."""
        if self.sm is None:
            return True
        panel = align_up(min(m_panel, self.g.m) * min(k_block, self.g.k) * self.isz, self.sm.alignment_bytes)
        return slots * panel <= self.sm.size_bytes

    def _steps_and_shares(self, t: GemmTiling) -> tuple[list[Step], dict[int, list[tuple[int, int]]], int]:
        """The steps, each core's column chunks (split n: its own; split m: all of them), and the most rows of a
        GSM block one core accumulates."""
        g = self.g
        chunks, rows = self._shares(t)
        n_steps_chunks = max((len(v) for v in chunks.values()), default=0)
        n_kb = (max(-(-(b - a) // t.k_block) for a, b in self._k_shares(t)) if t.split == "k"
                else -(-g.k // t.k_block))
        n_mb = -(-g.m // t.m_block)
        if t.c_home == "ddr":  # the library's order: k blocks outermost, C streamed through each pass
            steps = [Step(mb, kb, ch) for kb in range(n_kb) for mb in range(n_mb) for ch in range(n_steps_chunks)]
        else:  # a C block accumulates over the k blocks innermost
            steps = [Step(mb, kb, ch) for mb in range(n_mb) for ch in range(n_steps_chunks) for kb in range(n_kb)]
        return steps, chunks, rows

    def _shares(self, t: GemmTiling) -> tuple[dict[int, list[tuple[int, int]]], int]:
        """Each core's column chunks (split n: its own; split m and k: all of them) and the most rows of a GSM
        block one core accumulates (no steps built: the layout needs only these)."""
        g, cores = self.g, self.ctx.cores
        n_chunks_all = [(a, min(a + t.n_block, g.n)) for a in range(0, g.n, t.n_block)]
        if t.split == "n":
            # Whole micro-kernel widths per core, then each core's share cut into B blocks.
            shares = split_units(g.n, t.n_micro, len(cores))
            chunks = {c: [(a, min(a + t.n_block, b)) for a, b in [s] for a in range(a, b, t.n_block)]
                      for c, s in zip(cores, shares)}
            for c in cores:
                chunks.setdefault(c, [])
            rows = min(t.m_block, g.m)
        elif t.split == "k":
            chunks = {c: n_chunks_all for c in cores}
            rows = min(t.m_block, g.m)
        else:
            chunks = {c: n_chunks_all for c in cores}
            panels = -(-min(t.m_block, g.m) // t.m_panel)
            rows = -(-panels // len(cores)) * t.m_panel
        return chunks, rows

    def _k_shares(self, t: GemmTiling) -> list[tuple[int, int]]:
        """Split k: each core's range of the depth, in whole k blocks (cores past the last block get none)."""
        return split_units(self.g.k, t.k_block, len(self.ctx.cores))

    def _core_k(self, t: GemmTiling, core: int, s: Step) -> tuple[int, int] | None:
        """The depth ``core`` covers in step ``s``: the step's k block (split k: of the core's own range; None
        when its range has fewer blocks)."""
        if t.split != "k":
            return self._k_range(t, s)
        i = self.ctx.cores.index(core)
        shares = self._k_shares(t)
        if i >= len(shares):
            return None
        a, b = shares[i]
        k0 = a + s.kb * t.k_block
        return (k0, min(k0 + t.k_block, b)) if k0 < b else None

    def _chunk(self, chunks: Mapping[int, list[tuple[int, int]]], core: int, s: Step) -> tuple[int, int] | None:
        mine = chunks[core]
        return mine[s.chunk] if s.chunk < len(mine) else None

    def _block_rows(self, t: GemmTiling, s: Step) -> tuple[int, int]:
        r0 = s.mb * t.m_block
        return r0, min(r0 + t.m_block, self.g.m)

    def _k_range(self, t: GemmTiling, s: Step) -> tuple[int, int]:
        k0 = s.kb * t.k_block
        return k0, min(k0 + t.k_block, self.g.k)

    def _panels(self, t: GemmTiling, core: int, s: Step) -> list[tuple[int, int]]:
        """The rows (global) of each micro-panel ``core`` computes in step ``s``."""
        r0, r1 = self._block_rows(t, s)
        panels = [(a, min(a + t.m_panel, r1)) for a in range(r0, r1, t.m_panel)]
        if t.split in ("n", "k"):
            return panels
        share = split_even(len(panels), len(self.ctx.cores))
        i = self.ctx.cores.index(core)
        if i >= len(share):
            return []
        return panels[share[i][0]:share[i][1]]

    def _tile_loops(self, t: GemmTiling, pr: int, nc: int, kd: int, *, load_c: bool, transpose_b: bool,
                    rounded: bool, c_in: bool = False, c_out: bool = False) -> tuple[Loop, ...]:
        """The loops of a tile of ``pr`` rows, ``nc`` columns and depth ``kd`` (:func:`tile_loops` on this call's
        core, precision and itemsize); ``c_in`` / ``c_out``: C's rows transposed in AM on their way in / out."""
        return tile_loops(self.core, self.prec, self.isz, t.m_micro, t.n_micro, pr, nc, kd, load_c, transpose_b,
                          rounded, t.nt_kernel, c_in, c_out)


@memoized
def tile_loops(core: CoreModel, precision: str, itemsize: int, m_micro: int, n_micro: int, rows: int, cols: int,
               depth: int, load_c: bool, transpose_b: bool, rounded: bool, nt_kernel: str = "transpose",
               c_in: bool = False, c_out: bool = False) -> tuple[Loop, ...]:
    """The loops of a tile of ``rows`` x ``cols`` of C and depth ``depth``: its ``m_micro`` x ``n_micro``
    micro-kernels (C's rows loaded into the registers first when ``load_c``), B's transpose in AM first
    (``transpose_b``), C's rounding to fp16 last (``rounded``); a TT call's C (planned as Cᵀ): its old rows
    transposed in AM first (``c_in``), its finished rows transposed last (``c_out``, with the rounding).
    ``nt_kernel`` ``reduce``: the published NT micro-kernel instead, its ``m_micro`` x ``n_micro`` blocks merged
    into one loop over the tile (each block's dot products reduced into C's rows in SM, added to their old values:
    no C load into registers, no transpose); ``reduce_serial``: Yu et al.'s NT micro-kernel, each block's dot
    products then its reduction, block after block.

    Remembered by value (sim.model.memo): the tiling space's ``bound`` asks for the same few tile shapes for every
    panel of every step, and the build once per tile."""
    entries = -(-rows // m_micro) * -(-cols // n_micro)
    if nt_kernel == "reduce":
        return (gemm_nt_micro_kernel(core, precision, m_micro, n_micro, depth, blocks=entries),)
    if nt_kernel == "reduce_serial":
        return (gemm_nt_serial_micro_kernel(core, precision, m_micro, n_micro, depth, blocks=entries),)
    loops = [gemm_micro_kernel(core, precision, m_micro, n_micro, depth, itemsize=itemsize, entries=entries,
                               load_c=load_c)]
    if transpose_b:
        # Bᵀ staged as [n, k] rows: one pass of vector loads, shuffles and stores puts op(B)'s rows in place.
        loops.insert(0, elementwise(core, precision, cols * depth, loads=1, stores=1, valu=1,
                                    label="B block transpose in AM"))
    if c_in:
        # C's old rows came in as C's (Cᵀ's columns): one such pass puts them in the micro-kernel's order.
        loops.insert(0, elementwise(core, precision, rows * cols, loads=1, stores=1, valu=1,
                                    label="old C transposed in AM"))
    if c_out:
        # The same pass back, the rounding to fp16 fused into it (the library transposes each C tile in AM).
        loops.append(elementwise(core, precision, rows * cols, loads=1, stores=1, valu=1 + int(rounded),
                                 label="C rounded to fp16 and transposed in AM" if rounded else "C transposed in AM"))
    elif rounded:
        loops.append(elementwise(core, precision, rows * cols, loads=1, stores=1, valu=1, label="C rounded to fp16"))
    return tuple(loops)
