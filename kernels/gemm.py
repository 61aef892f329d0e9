"""GEMM: ``{fp,hp}_gemm_{s,p}``, the library's matrix product C = op(A)·op(B) + beta·C (row-major, as in C).

op(A) is m×k: A stored [m, lda ≥ k] when ``trans_a`` = 0, [k, lda ≥ m] when 1; op(B) is k×n: B stored
[k, ldb ≥ n] when ``trans_b`` = 0, [n, ldb ≥ k] when 1; C stored [m, ldc ≥ n].  ``beta`` is 0 or 1 (then C is
an input and an output of the call, in place).  ``lda``/``ldb``/``ldc`` are row pitches in elements (default:
dense); the elements between a row's end and its pitch are never read or written (every descriptor moves whole
rows of the matrix only).  ``hp_gemm`` takes fp16 A, B, C, multiplies fp16 values (their products are exact in
fp32), accumulates in fp32 and rounds C to fp16 once, when it is stored.

Blocking (SPEC §2: DDR → GSM → AM/SM → registers):

* **GSM blocks of A** (``m_block`` rows × ``k_block`` of op(A)), shared by the cores of an ``_s`` call: the
  cores split each block's loading (one descriptor each, rows of A in its own orientation), and the next block
  streams into the other half of the GSM window while the cores compute on this one (staged buffers
  ``gsm.a0`` / ``gsm.a1``, :class:`~sim.model.plan.Tile` ``fills`` / ``uses``: no barrier).  A ``_p`` call
  (one core, private memory) and a one-core call read A's panels straight from memory (nothing to share).
* **B blocks in AM** (``k_block`` × ``n_block`` of op(B)) per core, double-buffered the same way (staged
  buffers ``am.b<core>.0`` / ``.1``).
* **A micro-panels in SM** (``m_panel`` rows × ``k_block``), one per tile, through the two SM slots: the
  scalar level, whose elements the micro-kernel loads and broadcasts.
* **C accumulated in registers and held in AM**: a core's C block (its rows of the GSM block × ``n_block``,
  fp32) stays in AM across the k blocks; each tile's micro-kernels (``m_micro`` × ``n_micro``,
  :func:`kernels.common.loops.gemm_micro_kernel`) load it, accumulate ``k_block`` steps in registers and
  store it back.  With ``beta`` = 1 the first k block adds the old C (loaded into the tile's AM slot); the
  last k block writes the tile's rows of C into its slot (rounded to fp16 for hp) and stores them from there.

Where C lives over the k loop is the ``c_home`` key: ``am`` as above, or ``ddr`` (the published library's loop
order: k blocks outermost, each tile loads its C rows, accumulates one k block into them and stores them back,
C triple-buffered); who loads a GSM block is ``a_loader`` (``cores``: a share each; ``core0``: the call's first
core, the others waiting for the block); how many GSM blocks are in flight is ``a_buffers`` (2: double-buffered;
1: one block the size of the staging window); with split m, ``b_staging`` ``gsm`` loads each B block into GSM
once for every core.  docs/gemm.md gives every algorithm's loop nest and memory traffic.

The cores split the work by ``split``: ``n`` (each core its columns of C, every core reading the shared GSM
block: square and wide shapes), ``m`` (each core its micro-panels of the GSM block, every core loading the
same B block: skinny n) or ``k`` (each core a range of the depth, storing its fp32 partial C block to the
``gsm_blocks`` level; after a barrier each core sums its rows of C over the partials: small m × n, long k).
Transposes cost no extra pass where a descriptor's strides can take them: the GSM
block and the SM panels keep A's own orientation (the micro-kernel's scalar loads take A's pairs along k or
along m alike), so op(A) = Aᵀ only changes the descriptors' strides (its SM panels are rows of ``m_panel``
elements: short runs, whole bursts).  A B stored transposed is staged as it is ([n_block, k_block] rows) and
transposed in AM once per B block, a vector loop of loads, shuffles and stores charged to the block's first
tile (loads and stores: the micro-kernel needs rows of op(B) as vectors).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from kernels.base import PlanContext
from kernels.common.args import require_int
from kernels.common.binding import attrs_of, bind_arguments, bound_call
from kernels.common.loops import elementwise, gemm_micro_kernel, lanes
from kernels.common.scratch import Scratch, align_up
from kernels.common.tiling_space import ChoiceKey, IntKey, TilingSpace, complete, split_even, split_units
from sim.errors import KernelArgError
from sim.model.call import ArgSpec, BoundCall, MemoryReader
from sim.model.plan import Compute, DoesNotFit, Loop, Operand, Phase, Plan, Tile, Transfer, buffer_ref

F32 = np.dtype(np.float32)
#: How the cores share the work (the ``split`` key of a tiling).
SPLITS = ("n", "m", "k")
#: Where C lives over the k loop (the ``c_home`` key): ``am``, a core's C block resident in AM for every k block
#: (loaded, when at all, and stored once); ``ddr``, C streamed per k block (the published library's loop order:
#: k blocks outermost, each tile loads its C rows, accumulates one k block into them and stores them back).
C_HOMES = ("am", "ddr")
#: Who loads a GSM block of A (the ``a_loader`` key): ``cores``, the call's cores a share each; ``core0``, the
#: first core of the call the whole block (the published library), the others waiting for it.
A_LOADERS = ("cores", "core0")
#: Where a core's B blocks come from (the ``b_staging`` key): ``am``, memory straight into AM; ``gsm``, split m
#: only, memory into GSM once (the cores a share each), then GSM into each core's AM.
B_STAGINGS = ("am", "gsm")
#: C tiles in flight per core when C is streamed: the library triple-buffers C (one loading, one computing, one
#: storing).
STREAMED_C_SLOTS = 3
#: The values of the blocking keys the search tries, the published schedule's first (SPEC §2): rows of op(A)
#: per GSM block, depth of a block, columns of a B block.
M_BLOCKS = (576, 288, 144, 48)
K_BLOCKS = (256, 512, 128)
N_BLOCK = 128
#: A depth this many times the larger side of C tries split k first (each core a range of the depth).
LONG_K = 8
#: Micro-kernel heights the search tries (rows of C in registers), the published 6 first: with n_micro vectors
#: per row, m_micro x n_micro / lanes accumulators, fewer than the FMAC units times their latency stall.
MICRO_ROWS = (6, 8, 12)
#: Precision a symbol computes in, by storage precision: hp products of fp16 values accumulated in fp32 (the
#: chip's mixed-precision rate where the target lists it, else its fp32 rate).
MIXED = "fp16_fp32acc"


def compute_precision(ctx: PlanContext) -> str:
    """The precision the chip computes this call's multiply-adds in."""
    if ctx.precision == "fp16":
        return MIXED if MIXED in ctx.target.core.precisions else "fp32"
    return "fp32"


# --- numerics ----------------------------------------------------------------------------------

def gemm_reference(a: np.ndarray, b: np.ndarray, c: np.ndarray | None, trans_a: bool, trans_b: bool) -> np.ndarray:
    """op(A)·op(B) (+ C) of dense matrices, accumulated in fp32 and returned in A's dtype."""
    oa = (a.T if trans_a else a).astype(F32)
    ob = (b.T if trans_b else b).astype(F32)
    acc = oa @ ob
    if c is not None:
        acc += c.astype(F32)
    return acc.astype(a.dtype)


class _TileFn:
    """Compute.fn of one tile: the panel's product with the B block, added to the accumulator (or to the old C
    when ``beta`` is 1 on the first k block), returned as fp32 accumulator rows or, on the last k block of an
    fp16 call, as fp16 C rows."""

    def __init__(self, trans_a: bool, trans_b: bool, ncols: int, first: bool, beta: bool, out_dtype: np.dtype | None):
        self.trans_a, self.trans_b, self.ncols = trans_a, trans_b, ncols
        self.first, self.beta, self.out_dtype = first, beta, out_dtype

    def __call__(self, panel: np.ndarray, bblock: np.ndarray, *rest: np.ndarray) -> tuple[np.ndarray]:
        oa = (panel.T if self.trans_a else panel).astype(F32)
        ob = (bblock.T if self.trans_b else bblock).astype(F32)
        acc = oa @ ob
        if not self.first or self.beta:
            acc += rest[0].astype(F32)  # the accumulator, or the old C on the first k block
        return (acc if self.out_dtype is None else acc.astype(self.out_dtype),)


class _SumPartials:
    """Compute.fn of a split-k reduction tile: the cores' fp32 partial rows summed (+ the old C), in C's dtype."""

    def __init__(self, n: int, dtype: np.dtype):
        self.n, self.dtype = n, dtype

    def __call__(self, stack: np.ndarray, *old: np.ndarray) -> tuple[np.ndarray]:
        acc = stack.sum(axis=0, dtype=F32).reshape(-1, self.n)
        if old:
            acc += old[0].astype(F32)
        return (acc.astype(self.dtype),)


# --- binding -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class GemmAttrs:
    """What binding found out about a call: sizes, transposes, beta and pitches (elements)."""

    m: int
    n: int
    k: int
    trans_a: bool
    trans_b: bool
    beta: bool
    lda: int
    ldb: int
    ldc: int


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
                   a.buffer("c", (m, attrs.ldc), size_arg="ldc"))
        return bound_call(a, variant, cores, buffers, attrs)

    def plan(self, call: BoundCall, ctx: PlanContext) -> Plan:
        """The plan of the tiling ``ctx.tiling`` (a full tiling of :meth:`tiling_space`)."""
        p = _Planner(call, ctx)
        return p.build(p.resolve(complete(p.space, ctx)))

    def tiling_space(self, call: BoundCall, ctx: PlanContext) -> TilingSpace:
        """The keys ``split``, ``m_micro``, ``n_micro``, ``m_panel``, ``k_block``, ``m_block``, ``n_block``: the
        published schedule's values first (SPEC §2), then smaller blocks and the other splits."""
        return _Planner(call, ctx).space


# --- planning ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Tiling:
    split: str
    m_block: int
    n_block: int
    k_block: int
    m_panel: int
    m_micro: int
    n_micro: int
    c_home: str = "am"
    a_loader: str = "cores"
    a_buffers: int = 2
    b_staging: str = "am"

    def as_dict(self) -> dict[str, Any]:
        return dict(split=self.split, c_home=self.c_home, a_loader=self.a_loader, a_buffers=self.a_buffers,
                    b_staging=self.b_staging, m_block=self.m_block,
                    n_block=self.n_block, k_block=self.k_block, m_panel=self.m_panel, m_micro=self.m_micro,
                    n_micro=self.n_micro)


@dataclass(frozen=True)
class _Step:
    """One step of the plan, the same on every core: GSM block ``block`` = (m block, k block), B block column
    chunk ``chunk`` (an index into the core's column chunks, or the global ones with split m)."""

    mb: int
    kb: int
    chunk: int


class _Planner:
    """The plans of one call."""

    def __init__(self, call: BoundCall, ctx: PlanContext):
        self.call, self.ctx = call, ctx
        self.g = attrs_of(call, GemmAttrs)
        self.a, self.b, self.c = (call.buffer(x) for x in ("a", "b", "c"))
        self.dt = self.c.dtype
        self.isz = self.dt.itemsize
        self.core = ctx.target.core
        self.prec = compute_precision(ctx)
        self.lanes = lanes(self.core, self.prec)
        self.am, self.sm = ctx.vector_level, ctx.scalar_level
        self._split = "n"  # the split of the tiling being laid out or built
        self.space = self._space()

    def _space(self) -> TilingSpace:
        """The call's tiling space: per key the published schedule's value first (a micro-kernel of 6 x 4
        vectors, 12-row panels, 512-deep blocks, 128-column B blocks, 576-row A blocks), then smaller blocks
        and the other splits; ``fit`` lays the staging levels out, ``tiles`` counts a tiling's tiles."""
        g = self.g
        cores = len(self.ctx.cores)
        n_micro = min(4 * self.lanes, _round_up(g.n, self.lanes))
        split = "n" if g.n >= 2 * n_micro * min(cores, 2) or cores == 1 else "m"
        if cores > 1 and g.k >= LONG_K * max(g.m, g.n):
            split = "k"  # small m x n, long k: the depth is the only dimension with work for every core
        splits = (split,) + (tuple(x for x in SPLITS if x != split) if cores > 1 else ())

        def panels(t: Mapping[str, Any]) -> list[int]:
            # Two micro-kernels' rows; one when two such panels of this depth do not fit the scalar level.
            two, one = min(2 * t["m_micro"], g.m), min(t["m_micro"], g.m)
            slots = STREAMED_C_SLOTS if t["c_home"] == "ddr" else 2
            out = [two] if self._panels_fit(two, t["k_block"], slots) else [two, one]
            if g.trans_a:
                # A stored [k, m]: a panel is k_block runs of m_panel elements; runs of whole bursts of A's
                # region (and whole micro-kernels) waste none of them.  Read straight from memory (A not staged in
                # GSM: split k, one core) such panels are the one choice where they fit, so that a step to a
                # shallower k block that lets them fit takes them with it; from GSM they are one more choice.
                whole = min(g.m, math.lcm(t["m_micro"], self.a_burst_elements))
                if self._panels_fit(whole, t["k_block"], slots):
                    if not self._may_share(t["split"]):
                        return [whole]
                    out.append(whole)
            return list(dict.fromkeys(out))

        def micro_width(t: Mapping[str, Any]) -> int:
            # The micro-kernel's columns: the published 4 vectors, no wider than the B block (whole vectors).
            return t.get("n_micro") or min(n_micro, _round_up(t["n_block"], self.lanes))

        def micro_widths(t: Mapping[str, Any]) -> list[int]:
            # The published width (4 vectors, no wider than the B block) first, then narrower whole vectors: a
            # B block that is not a multiple of the widest leaves a last micro-kernel mostly idle.
            first = micro_width(t)
            return [first] + [v * self.lanes for v in range(first // self.lanes - 1, 0, -1)
                              if self._micro_registers(t["m_micro"], v * self.lanes) <= self.core.vector_registers]

        def micro_rows(t: Mapping[str, Any]) -> list[int]:
            # The published 6 rows; when the widest micro-kernel a core's columns allow leaves 6 rows fewer
            # accumulators than the FMAC units times their latency (thin columns per core), the taller blocks the
            # register file holds, which cover that latency with fewer vectors per row.
            per_core = g.n if t["split"] != "n" else _ceil_div(g.n, cores)
            vectors = max(1, min(n_micro, _round_up(per_core, self.lanes)) // self.lanes)
            rows = [min(MICRO_ROWS[0], g.m)]
            if rows[0] * vectors < self._fmac_depth():
                rows += [min(v, g.m) for v in MICRO_ROWS[1:]
                         if self._micro_registers(v, vectors * self.lanes) <= self.core.vector_registers]
            return list(dict.fromkeys(rows))

        def n_blocks(t: Mapping[str, Any]) -> list[int]:
            # The published 128 columns; when two B blocks of them do not fit AM with this depth and these rows,
            # the widest of their halvings (whole vectors) that does; split n with fewer column blocks than
            # cores, first the block that gives every core one (whole vectors).
            first = min(max(t.get("n_micro") or n_micro, N_BLOCK), g.n)
            out = [first]
            v = first
            while True:
                try:
                    self._fit({**t, "n_block": v, "n_micro": micro_width({**t, "n_block": v})})
                    out.append(v)
                    break
                except (DoesNotFit, KernelArgError):
                    if v <= self.lanes:
                        break
                    v = max(self.lanes, _round_up(v // 2, self.lanes))
            if t["split"] == "n" and _ceil_div(g.n, min(out[-1], first)) < cores:
                out.insert(0, _round_up(_ceil_div(g.n, cores), self.lanes))  # preferred: no core idles
            out = [x for x in dict.fromkeys(out) if x <= first]
            # Then wider blocks, up to a core's whole columns, where they fit: each column block re-reads A (from
            # GSM, or from memory where A is not staged), so fewer of them read A fewer times.
            limit = g.n if t["split"] != "n" else min(g.n, _round_up(_ceil_div(g.n, cores), self.lanes))
            for w in dict.fromkeys(x for x in (2 * first, 4 * first, limit) if first < x <= limit):
                try:
                    self._fit({**t, "n_block": w, "n_micro": micro_width({**t, "n_block": w})})
                    out.append(w)
                except (DoesNotFit, KernelArgError):
                    pass
            return out

        def m_blocks(t: Mapping[str, Any]) -> list[int]:
            p = t["m_panel"]  # whole panels (or all of m)
            out = [min(g.m, max(p, v // p * p)) for v in M_BLOCKS]
            level = self.blocks_level
            if t["a_buffers"] == 1 and level is not None:
                # One block: the most rows of this depth the staging window holds (whole panels), first.
                row_bytes = min(t["k_block"], g.k) * self.isz
                rows = level.size_bytes // row_bytes // p * p
                while rows > p and align_up(rows * row_bytes, level.alignment_bytes) > level.size_bytes:
                    rows -= p
                out.insert(0, min(g.m, max(p, rows)))
            return list(dict.fromkeys(out))

        return TilingSpace(
            ChoiceKey("split", SPLITS, "n: each core its columns of C (A blocks shared in GSM); m: each core its "
                                       "micro-panels of each A block (every core loads the B block); k: each core "
                                       "a range of the depth, partial C blocks summed through GSM (small m x n, "
                                       "long k)", values=splits),
            ChoiceKey("c_home", C_HOMES, "am: a core's C block stays in AM over the k loop (one load and one store "
                                         "of C); ddr: C streamed per k block, the published library's loop order "
                                         "(k blocks outermost; each tile loads its C rows from memory, accumulates "
                                         "one k block and stores them back; C triple-buffered in AM): fp32 C only, "
                                         "not with split k", values=self._c_homes),
            ChoiceKey("a_loader", A_LOADERS, "cores: the cores of an _s call share each GSM block's loading; core0: "
                                             "the call's first core loads every GSM block of A (the published "
                                             "library), the others wait for it",
                      values=lambda t: A_LOADERS if self._may_share(t["split"]) else A_LOADERS[:1]),
            IntKey("a_buffers", 1, 2, "GSM blocks of A in flight: 2, the next block streams in while the cores "
                                      "compute on this one; 1, one block as large as the staging window, loaded "
                                      "once every core has finished with the previous one (the published "
                                      "library's single GSM block behind a barrier)",
                   values=lambda t: (2, 1) if self._may_share(t["split"]) else (2,)),
            ChoiceKey("b_staging", B_STAGINGS, "am: each core loads its B blocks from memory into AM; gsm: split m "
                                               "(every core uses the same B block), the cores share each B block's "
                                               "loading into GSM and each copies it from there into AM (B read "
                                               "from memory once instead of once per core)",
                      values=lambda t: B_STAGINGS if t["split"] == "m" and self._may_share("m") else B_STAGINGS[:1]),
            IntKey("m_micro", 1, 64, "rows of the micro-kernel's C block in registers (with n_micro: accumulators, a "
                                     "row of B and the broadcast A values within the core's vector registers)",
                   values=micro_rows),
            IntKey("k_block", 1, g.k, "depth of a GSM block of A and of a B block",
                   values=[min(v, g.k) for v in K_BLOCKS] + [max(1, min(max(K_BLOCKS), g.k) // 2)]),
            IntKey("m_panel", 1, g.m, "rows of an A micro-panel in SM (one tile)", values=panels),
            IntKey("m_block", 1, g.m, "rows of op(A) per GSM block (shared by the cores)", values=m_blocks),
            IntKey("n_block", 1, g.n, "columns of op(B) per B block in AM (a core's C block width)",
                   values=n_blocks),
            IntKey("n_micro", 1, 4096, "columns of the micro-kernel's C block in registers (whole vectors)",
                   values=micro_widths),
            fit=self._fit, tiles=self._tiles, bound=self._bound)

    @property
    def a_burst_elements(self) -> int:
        """Elements of A per memory burst of the region holding A (1 where the region states no burst)."""
        region = next((r for r in self.ctx.target.regions if r.contains(self.a.addr, 1)), None)
        return max(1, (region.burst_bytes if region is not None else 1) // self.isz)

    def _fmac_depth(self) -> int:
        """Independent accumulators that keep every FMAC unit busy: the units times their latency."""
        fmac = self.core.units["fmac"]
        return fmac.count * fmac.latency_cycles

    def _micro_registers(self, m_micro: int, n_micro: int) -> int:
        """Vector registers an ``m_micro`` x ``n_micro`` micro-kernel keeps live (its loop's count)."""
        nv = -(-n_micro // self.lanes)
        return m_micro * nv + nv + m_micro

    def _c_homes(self, t: Mapping[str, Any]) -> tuple[str, ...]:
        """Where C may live over the k loop: streamed only for an fp32 C (an fp16 C is rounded once, at the end)
        and not with split k (whose partials are summed once, at the end)."""
        return C_HOMES if self.dt == F32 and t["split"] != "k" else C_HOMES[:1]

    def _may_share(self, split: str) -> bool:
        """Whether a tiling of this split stages A's blocks in the shared level."""
        return (self.call.variant == "s" and len(self.ctx.cores) > 1 and self.blocks_level is not None
                and split != "k")

    # -- the GSM level: used by an _s call on several cores ----------------------------------------

    @property
    def shared(self) -> bool:
        """Whether A's blocks are staged in the shared level (an _s call on more than one core)."""
        return self._may_share(self._split)

    @property
    def blocks_level(self) -> Any:
        """The shared staging level A's blocks go through: the largest shared one (the targets' ``gsm_blocks``;
        a copy of a target with one shared level: that one), or None."""
        shared = [a for a in self.ctx.levels if a.shared]
        return max(shared, key=lambda a: a.size_bytes) if shared else None

    # -- a tiling's checks -------------------------------------------------------------------------

    def resolve(self, given: Mapping[str, Any]) -> _Tiling:
        """The full tiling ``given`` as the planner takes it; KernelArgError for keys that do not go together."""
        t = _Tiling(**{k: given[k] for k in _Tiling.__dataclass_fields__})
        if t.m_panel % t.m_micro and t.m_panel != self.g.m:
            raise KernelArgError(f"argument 'tiling.m_panel': {t.m_panel} is not a multiple of m_micro "
                                 f"({t.m_micro})")
        if t.m_block % t.m_panel and t.m_block != self.g.m:
            raise KernelArgError(f"argument 'tiling.m_block': {t.m_block} is not a multiple of m_panel "
                                 f"({t.m_panel})")
        regs = self._micro_registers(t.m_micro, t.n_micro)
        if regs > self.core.vector_registers:
            raise KernelArgError(f"argument 'tiling.m_micro': a {t.m_micro}x{t.n_micro} micro-kernel keeps {regs} "
                                 f"vector registers live, the core has {self.core.vector_registers}")
        if t.c_home == "ddr" and (self.dt != F32 or t.split == "k"):
            why = "an fp16 C is rounded once, after the last k block" if self.dt != F32 else \
                "split k sums fp32 partials once, after the last k block"
            raise KernelArgError(f"argument 'tiling.c_home': ddr (C streamed per k block) does not go with this "
                                 f"call: {why}")
        if t.a_loader == "core0" and not self._may_share(t.split):
            raise KernelArgError(f"argument 'tiling.a_loader': core0 loads the GSM blocks of A, which only an _s call "
                                 f"on several cores with split n or m stages (this call: {self.call.symbol} on "
                                 f"{len(self.ctx.cores)} core(s), split {t.split})")
        if t.b_staging == "gsm" and not (t.split == "m" and self._may_share(t.split)):
            raise KernelArgError(f"argument 'tiling.b_staging': gsm shares B blocks that every core uses, which only "
                                 f"split m of an _s call on several cores has (this call: {self.call.symbol} on "
                                 f"{len(self.ctx.cores)} core(s), split {t.split})")
        if t.a_buffers == 1 and not self._may_share(t.split):
            raise KernelArgError(f"argument 'tiling.a_buffers': 1 sizes the GSM block of A, which only an _s call "
                                 f"on several cores with split n or m stages (this call: {self.call.symbol} on "
                                 f"{len(self.ctx.cores)} core(s), split {t.split})")
        return t

    def _slots(self, t: _Tiling) -> int:
        """Tiles in flight per core: two with C's block in AM (double-buffered panels and C tiles); with C
        streamed, three (the library's triple-buffered C), or fewer when a core computes fewer tiles per k block:
        a core's slots order its tiles only that far, so a tile never loads C rows whose previous store has not
        landed."""
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
        per_pass = [len(chunks[c]) * panels[i] for i, c in enumerate(cores)]
        return max(1, min([STREAMED_C_SLOTS] + [v for v in per_pass if v]))

    def _panels_fit(self, m_panel: int, k_block: int, slots: int = 2) -> bool:
        """Whether ``slots`` A micro-panels of ``m_panel`` rows and ``k_block`` depth fit the scalar level (no
        scalar level: they go beside the C tiles, which the layout checks)."""
        if self.sm is None:
            return True
        panel = align_up(min(m_panel, self.g.m) * min(k_block, self.g.k) * self.isz, self.sm.alignment_bytes)
        return slots * panel <= self.sm.size_bytes

    def _fit(self, tiling: Mapping[str, Any]) -> None:
        """The space's ``fit``: the keys go together and the staging levels take the tiling's buffers."""
        self.layout(self.resolve(tiling))

    def _tiles(self, tiling: Mapping[str, Any]) -> int:
        """The space's ``tiles``: at most the tiles the tiling plans on all cores, counted without building them
        (per core and step: its panels' tiles and as many staging pieces; split k: the reduce tiles too)."""
        g, t = self.g, _Tiling(**{k: tiling[k] for k in _Tiling.__dataclass_fields__})
        cores = len(self.ctx.cores)
        n_mb, n_kb = -(-g.m // t.m_block), -(-g.k // t.k_block)
        panels = -(-min(t.m_block, g.m) // t.m_panel)
        if t.split == "n":
            width = _ceil_div(_ceil_div(g.n, t.n_micro), cores) * t.n_micro  # the widest core's share
            chunks = -(-min(width, g.n) // t.n_block)
        else:
            chunks = -(-g.n // t.n_block)
        if t.split == "m":
            panels = -(-panels // cores)
        if t.split == "k":
            n_kb = -(-n_kb // cores)
        reduce = g.m if t.split == "k" else 0  # at most a reduce tile per row of C
        # Per step a tile per panel, and the next step's blocks staged in at most as many pieces (B through GSM:
        # and the core's copy of the B block into AM).
        per_step = 2 * panels + 1 + int(t.b_staging == "gsm")
        return cores * n_mb * chunks * n_kb * per_step + reduce + cores

    # -- the layout of the staging levels ----------------------------------------------------------

    def _steps_and_shares(self, t: _Tiling) -> tuple[list[_Step], dict[int, list[tuple[int, int]]], int]:
        """The steps, each core's column chunks (split n: its own; split m: all of them), and the most rows of a
        GSM block one core accumulates."""
        g = self.g
        chunks, rows = self._shares(t)
        n_steps_chunks = max((len(v) for v in chunks.values()), default=0)
        n_kb = (max(-(-(b - a) // t.k_block) for a, b in self._k_shares(t)) if t.split == "k"
                else -(-g.k // t.k_block))
        n_mb = -(-g.m // t.m_block)
        if t.c_home == "ddr":  # the library's order: k blocks outermost, C streamed through each pass
            steps = [_Step(mb, kb, ch) for kb in range(n_kb) for mb in range(n_mb) for ch in range(n_steps_chunks)]
        else:  # a C block accumulates over the k blocks innermost
            steps = [_Step(mb, kb, ch) for mb in range(n_mb) for ch in range(n_steps_chunks) for kb in range(n_kb)]
        return steps, chunks, rows

    def _shares(self, t: _Tiling) -> tuple[dict[int, list[tuple[int, int]]], int]:
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

    def _k_shares(self, t: _Tiling) -> list[tuple[int, int]]:
        """Split k: each core's range of the depth, in whole k blocks (cores past the last block get none)."""
        return split_units(self.g.k, t.k_block, len(self.ctx.cores))

    def _core_k(self, t: _Tiling, core: int, s: _Step) -> tuple[int, int] | None:
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

    def layout(self, t: _Tiling) -> dict[str, Any]:
        """Addresses of the staged buffers and slots; DoesNotFit naming the level that is too small."""
        self._split = t.split
        _, rows = self._shares(t)
        am_align = self.am.alignment_bytes
        ncols = min(t.n_block, self.g.n)
        kdepth = min(t.k_block, self.g.k)
        # Streamed C has no C block in AM: each tile's C rows come and go through its slot.
        acc_bytes = align_up(rows * ncols * F32.itemsize, am_align) if t.c_home == "am" else 0
        b_bytes = align_up(kdepth * ncols * self.isz, am_align)
        # A C tile in its dtype, or an fp32 partial (split k).
        tile_c_bytes = align_up(min(t.m_panel, self.g.m) * ncols * F32.itemsize, am_align)
        fixed = acc_bytes + 2 * b_bytes
        slots = self._slots(t)
        if fixed + slots * tile_c_bytes > self.am.size_bytes:
            held = f"a C block of {rows}x{ncols} fp32, " if acc_bytes else ""
            raise DoesNotFit(self.am.name, fixed + slots * tile_c_bytes, self.am.size_bytes,
                             f"{self.call.symbol}: {held}two B blocks of {kdepth}x{ncols} and {slots} C tiles do not "
                             f"fit the {self.am.size_bytes}-byte {self.am.name} level")
        am = Scratch(self.am, fixed, slots=slots, slot_bytes=tile_c_bytes)
        panel_level = self.sm if self.sm is not None else self.am
        panel_bytes = align_up(min(t.m_panel, self.g.m) * kdepth * self.isz, panel_level.alignment_bytes)
        if self.sm is not None:
            sm = Scratch(self.sm, 0, slots=slots, slot_bytes=panel_bytes)
        else:  # no scalar level: the panels live in the vector level's slots beside the C tiles
            am = Scratch(self.am, fixed, slots=slots, slot_bytes=tile_c_bytes + panel_bytes)
            sm = am
        b0 = am.fixed_base + acc_bytes
        out: dict[str, Any] = dict(acc=am.fixed_base, b=(b0, b0 + b_bytes), am=am, sm=sm,
                                   panel_offset=0 if self.sm is not None else tile_c_bytes)
        if self.shared:
            level = self.blocks_level
            block = align_up(min(t.m_block, self.g.m) * kdepth * self.isz, level.alignment_bytes)
            count = t.a_buffers
            b_block = align_up(kdepth * ncols * self.isz, level.alignment_bytes) if t.b_staging == "gsm" else 0
            if count * block + 2 * b_block > level.size_bytes:
                with_b = f" and two B blocks of {kdepth}x{ncols}" if b_block else ""
                raise DoesNotFit(level.name, count * block + 2 * b_block, level.size_bytes,
                                 f"{self.call.symbol}: {count} A block(s) of {min(t.m_block, self.g.m)}x{kdepth} "
                                 f"({block} bytes each){with_b} do not fit the {level.size_bytes}-byte {level.name} "
                                 f"staging window")
            out["gsm"] = (level.base, level.base + block) if count == 2 else (level.base,)
            b_base = level.base + count * block
            out["gsm_b"] = (b_base, b_base + b_block)
        if t.split == "k":
            out["exchange"] = self._exchange_layout(t)
        return out

    def _exchange_layout(self, t: _Tiling) -> tuple[int, int, int]:
        """Split k: (base, bytes between two cores' partials, parts) in the largest shared level; DoesNotFit when a
        core's fp32 partial C does not fit its share."""
        level = self.blocks_level
        parts = len(self._k_shares(t))
        need = self.g.m * self.g.n * F32.itemsize
        if self.call.variant != "s" or len(self.ctx.cores) < 2 or level is None or parts < 2:
            raise DoesNotFit(level.name if level is not None else self.am.name, need, 0,
                             f"{self.call.symbol}: split k needs several cores of an _s call, at least two k blocks "
                             f"(k {self.g.k}, k_block {t.k_block}) and a shared level to sum their partials "
                             f"through")
        stride = level.size_bytes // parts // self.am.alignment_bytes * self.am.alignment_bytes
        if need > stride:
            raise DoesNotFit(level.name, need * parts, level.size_bytes,
                             f"{self.call.symbol}: {parts} partial C blocks of {self.g.m}x{self.g.n} fp32 do not fit "
                             f"the {level.size_bytes}-byte {level.name} staging window")
        return level.base, stride, parts

    # -- building ------------------------------------------------------------------------------------

    def build(self, t: _Tiling) -> Plan:
        """The plan of tiling ``t``: one phase, staged buffers instead of barriers."""
        g, ctx = self.g, self.ctx
        lay = self.layout(t)
        n_slots = lay["am"].slots
        steps, chunks, _ = self._steps_and_shares(t)
        cores = ctx.cores
        n_kb_of = {c: sum(1 for s in steps if s.mb == 0 and s.chunk == 0 and self._core_k(t, c, s)) for c in cores}
        tiles: dict[int, list[Tile]] = {c: [] for c in cores}
        ids = dict.fromkeys(cores, 0)
        computes = dict.fromkeys(cores, 0)

        def add(core: int, loads: Sequence[Transfer], compute: Compute | None, stores: Sequence[Transfer],
                fills: tuple[str, ...] = (), uses: tuple[str, ...] = ()) -> None:
            slot = 0
            if not fills:
                slot = computes[core] % n_slots
                computes[core] += 1
            tiles[core].append(Tile(ids[core], tuple(loads), compute, tuple(stores), slot, fills, uses))
            ids[core] += 1

        # The GSM blocks in step order, a new generation whenever the (m block, k block) changes; likewise each
        # core's B blocks whenever (k block, column chunk) changes.
        gsm_gen: list[int] = []
        for i, s in enumerate(steps):
            new = i == 0 or (s.mb, s.kb) != (steps[i - 1].mb, steps[i - 1].kb)
            gsm_gen.append((gsm_gen[-1] + 1 if i else 0) if new else gsm_gen[-1])
        # A core's B blocks are numbered over the steps it works in only: a core with fewer column chunks (or,
        # split k, fewer k blocks) than others idles in the others' steps, and a generation numbered over those
        # would never be filled.
        b_gen_of: dict[int, list[int]] = {}
        for core in cores:
            gens: list[int] = []
            last: tuple[int, int] | None = None
            for s in steps:
                works = self._chunk(chunks, core, s) is not None and self._core_k(t, core, s) is not None
                if works and (s.kb, s.chunk) != last:
                    gens.append(gens[-1] + 1 if gens and last is not None else 0)
                    last = (s.kb, s.chunk)
                else:
                    gens.append(gens[-1] if gens else 0)
            b_gen_of[core] = gens

        def gsm_ref(gen: int) -> str:
            return buffer_ref(f"gsm.a{gen % t.a_buffers}", gen // t.a_buffers)

        def b_ref(core: int, gen: int) -> str:
            return buffer_ref(f"am.b{core}.{gen % 2}", gen // 2)

        def gsm_b_ref(gen: int) -> str:
            return buffer_ref(f"gsm.b{gen % 2}", gen // 2)

        first_of_gsm = {gen: i for i, gen in reversed(list(enumerate(gsm_gen)))}
        # Where each core's B generation is first used (a step it works in).
        first_of_b = {core: {gen: i for i, gen in reversed(list(enumerate(b_gen_of[core])))
                             if self._chunk(chunks, core, steps[i]) is not None
                             and self._core_k(t, core, steps[i]) is not None} for core in cores}

        def staging(core: int, step_index: int, pieces: int) -> list[tuple[tuple[Transfer, ...], tuple[str, ...],
                                                                            tuple[str, ...]]]:
            """The staging tiles (loads, fills, uses) of step ``step_index``'s new blocks on ``core``, cut by rows
            into at most ``pieces`` tiles: spread over a step's compute tiles, each holds a DMA engine for a short
            while only, so the compute tiles' own loads never queue long behind the next blocks.  With B staged
            in GSM, the core's copy of the B block from GSM into AM comes last, once every core's share landed."""
            s = steps[step_index]
            transfers: list[Transfer] = []
            refs: list[str] = []
            if self.shared and first_of_gsm[gsm_gen[step_index]] == step_index:
                fill = self._gsm_fill(t, lay, s, core, gsm_gen[step_index] % t.a_buffers)
                if fill or t.a_loader == "cores":  # core0: the other cores take no part in the fill
                    transfers += fill
                    refs.append(gsm_ref(gsm_gen[step_index]))
            col = self._chunk(chunks, core, s)
            kr = self._core_k(t, core, s)
            b_gen = b_gen_of[core]
            copy: list[tuple[tuple[Transfer, ...], tuple[str, ...], tuple[str, ...]]] = []
            if col is not None and kr is not None and first_of_b[core].get(b_gen[step_index]) == step_index:
                gen = b_gen[step_index]
                if t.b_staging == "gsm":
                    share = self._b_share(t, lay, s, col, gen % 2, kr, core)
                    if share is not None:
                        transfers.append(share)
                        refs.append(gsm_b_ref(gen))
                    copy.append(((self._b_copy(t, lay, col, gen % 2, kr),), (b_ref(core, gen),), (gsm_b_ref(gen),)))
                else:
                    transfers.append(self._b_fill(t, lay, s, col, gen % 2, kr))
                    refs.append(b_ref(core, gen))
            if not refs:
                return copy
            cut = [_cut_rows(x, pieces) for x in transfers]
            count = max([len(c) for c in cut] + [1])
            return [(tuple(c[j] for c in cut if j < len(c)), tuple(refs), ()) for j in range(count)] + copy

        for core in cores:
            if steps:
                for staged, fills, uses in staging(core, 0, 1):
                    add(core, staged, None, (), fills=fills, uses=uses)
            for i, s in enumerate(steps):
                col = self._chunk(chunks, core, s)
                kr = self._core_k(t, core, s)
                panels = self._panels(t, core, s) if col is not None and kr is not None else []
                # The next blocks stream while this step computes: a piece after each of its tiles.
                ahead = staging(core, i + 1, max(1, len(panels))) if i + 1 < len(steps) else []
                if not panels:
                    for staged, fills, uses in ahead:
                        add(core, staged, None, (), fills=fills, uses=uses)
                    continue
                assert col is not None
                b_gen = b_gen_of[core]
                uses = (b_ref(core, b_gen[i]),) + ((gsm_ref(gsm_gen[i]),) if self.shared else ())
                for j, (p0, p1) in enumerate(panels):
                    partial_to = None
                    if t.split == "k":
                        base, stride, _ = lay["exchange"]
                        partial_to = (base + cores.index(core) * stride + (p0 * g.n + col[0]) * 4, g.n * 4)
                    loads, compute, stores = self._tile(t, lay, s, col, (p0, p1), p0 - panels[0][0],
                                                        computes[core] % n_slots, gsm_gen[i] % t.a_buffers,
                                                        b_gen[i] % 2,
                                                        first=s.kb == 0, last=s.kb == n_kb_of[core] - 1,
                                                        transpose_b=j == 0 and g.trans_b, k_range=kr,
                                                        partial_to=partial_to)
                    add(core, loads, compute, stores, uses=uses)
                    if j < len(ahead):
                        add(core, ahead[j][0], None, (), fills=ahead[j][1], uses=ahead[j][2])
                for staged, fills, b_uses in ahead[len(panels):]:  # the GSM -> AM copy of a B block, last
                    add(core, staged, None, (), fills=fills, uses=b_uses)
        if t.split != "k":
            phase = Phase("gemm", {c: tuple(ts) for c, ts in tiles.items()}, barrier_after=False)
            return Plan(cores=self.call.cores, phases=(phase,), precision=self.call.precision)
        partials = Phase("gemm:partials", {c: tuple(ts) for c, ts in tiles.items() if ts}, barrier_after=True)
        return Plan(cores=self.call.cores, phases=(partials, self._reduce_phase(lay, ids)),
                    precision=self.call.precision)

    def _reduce_phase(self, lay: Mapping[str, Any], ids: Mapping[int, int]) -> Phase:
        """Split k: each core sums its rows of C over every core's partial (+ the old C when beta = 1), rounds
        them to C's dtype and stores them."""
        g, isz = self.g, self.isz
        base, stride, parts = lay["exchange"]
        sc = Scratch(self.am, 0, slots=2)
        align = self.am.alignment_bytes
        row_bytes = align_up(parts * g.n * 4, align) + 2 * align_up(g.n * isz, align)
        per = max(1, min(g.m, (sc.slot_bytes - 3 * self.am.alignment_bytes) // max(1, parts * g.n * 4 + 2 * g.n * isz)))
        if parts * g.n * 4 + 2 * g.n * isz + 3 * self.am.alignment_bytes > sc.slot_bytes:
            raise DoesNotFit(self.am.name, 2 * row_bytes, self.am.size_bytes,
                             f"{self.call.symbol}: one row of {parts} partials does not fit a slot of the "
                             f"{self.am.name} level")
        tiles: dict[int, tuple[Tile, ...]] = {}
        for core, (r0, r1) in zip(self.ctx.cores, split_even(g.m, len(self.ctx.cores))):
            mine: list[Tile] = []
            for i, a in enumerate(range(r0, r1, per)):
                b = min(r1, a + per)
                arena = sc.slot(i % 2)
                stack = arena.operand((parts, (b - a) * g.n), F32)
                loads = [Transfer.block(base + a * g.n * 4, stack.addr, (parts, (b - a) * g.n), 4, (stride, 4))]
                inputs = [stack]
                c_rows = (g.ldc * isz, isz)
                c_at = self.c.addr + a * g.ldc * isz
                if g.beta:
                    old = arena.operand((b - a, g.n), self.dt)
                    loads.append(Transfer.block(c_at, old.addr, (b - a, g.n), isz, c_rows))
                    inputs.append(old)
                out = arena.operand((b - a, g.n), self.dt)
                loops = (
                    elementwise(self.core, "fp32", (b - a) * g.n, loads=parts + int(g.beta), stores=1,
                                fmac=parts - 1 + int(g.beta), valu=int(self.dt != F32), label="partials summed"),)
                compute = Compute(_SumPartials(g.n, self.dt), tuple(inputs), (out,), flops=0,
                                  precision="fp32", loops=loops)
                mine.append(Tile(ids[core] + i, tuple(loads), compute,
                                 (Transfer.block(out.addr, c_at, (b - a, g.n), isz, (g.n * isz, isz), c_rows),),
                                 slot=i % 2))
            if mine:
                tiles[core] = tuple(mine)
        return Phase("gemm:reduce", tiles, barrier_after=False)

    def _chunk(self, chunks: Mapping[int, list[tuple[int, int]]], core: int, s: _Step) -> tuple[int, int] | None:
        mine = chunks[core]
        return mine[s.chunk] if s.chunk < len(mine) else None

    def _block_rows(self, t: _Tiling, s: _Step) -> tuple[int, int]:
        r0 = s.mb * t.m_block
        return r0, min(r0 + t.m_block, self.g.m)

    def _k_range(self, t: _Tiling, s: _Step) -> tuple[int, int]:
        k0 = s.kb * t.k_block
        return k0, min(k0 + t.k_block, self.g.k)

    def _panels(self, t: _Tiling, core: int, s: _Step) -> list[tuple[int, int]]:
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

    def _gsm_fill(self, t: _Tiling, lay: Mapping[str, Any], s: _Step, core: int, parity: int) -> tuple[Transfer, ...]:
        """This core's share of the GSM block of step ``s``: rows of A in its own orientation (A's rows when
        trans_a = 0, the rows of k when 1), one descriptor."""
        g = self.g
        r0, r1 = self._block_rows(t, s)
        k0, k1 = self._k_range(t, s)
        base = lay["gsm"][parity]
        rows, cols = (k1 - k0, r1 - r0) if g.trans_a else (r1 - r0, k1 - k0)
        loaders = 1 if t.a_loader == "core0" else len(self.ctx.cores)
        share = split_even(rows, loaders)
        i = self.ctx.cores.index(core)
        if i >= len(share):
            return ()
        q0, q1 = share[i]
        first_row, first_col = (k0 + q0, r0) if g.trans_a else (r0 + q0, k0)
        src = self.a.addr + (first_row * g.lda + first_col) * self.isz
        return (Transfer.block(src, base + q0 * cols * self.isz, (q1 - q0, cols), self.isz,
                               (g.lda * self.isz, self.isz)),)

    def _b_share(self, t: _Tiling, lay: Mapping[str, Any], s: _Step, col: tuple[int, int], parity: int,
                 k_range: tuple[int, int], core: int) -> Transfer | None:
        """B staged in GSM: ``core``'s share of the rows of step ``s``'s B block (columns ``col``), from memory
        into GSM buffer ``parity`` (None when the block has fewer rows than cores and this one gets none)."""
        whole = self._b_fill(t, lay, s, col, parity, k_range)
        rows, cols = whole.shape
        share = split_even(rows, len(self.ctx.cores))
        i = self.ctx.cores.index(core)
        if i >= len(share):
            return None
        q0, q1 = share[i]
        dst = lay["gsm_b"][parity] + q0 * cols * self.isz
        return Transfer(whole.src + q0 * whole.src_strides[0], dst, (q1 - q0, cols), self.isz, whole.src_strides,
                        (cols * self.isz, self.isz))

    def _b_copy(self, t: _Tiling, lay: Mapping[str, Any], col: tuple[int, int], parity: int,
                k_range: tuple[int, int]) -> Transfer:
        """B staged in GSM: the whole B block from GSM buffer ``parity`` into the core's AM buffer ``parity``
        (dense rows in B's own orientation, as :meth:`_b_fill` leaves them)."""
        k0, k1 = k_range
        n0, n1 = col
        shape = (n1 - n0, k1 - k0) if self.g.trans_b else (k1 - k0, n1 - n0)
        return Transfer.contiguous(lay["gsm_b"][parity], lay["b"][parity], shape[0] * shape[1] * self.isz)

    def _b_fill(self, t: _Tiling, lay: Mapping[str, Any], s: _Step, col: tuple[int, int], parity: int,
                k_range: tuple[int, int] | None = None) -> Transfer:
        """The B block of step ``s`` (columns ``col`` of op(B)) into AM buffer ``parity``, in B's own orientation
        ([k, n] rows, or [n, k] rows when trans_b: transposed in AM by the block's first tile)."""
        g = self.g
        k0, k1 = self._k_range(t, s) if k_range is None else k_range
        n0, n1 = col
        first_row, first_col, shape = ((n0, k0, (n1 - n0, k1 - k0)) if g.trans_b else (k0, n0, (k1 - k0, n1 - n0)))
        src = self.b.addr + (first_row * g.ldb + first_col) * self.isz
        return Transfer.block(src, lay["b"][parity], shape, self.isz, (g.ldb * self.isz, self.isz))

    def _tile(self, t: _Tiling, lay: Mapping[str, Any], s: _Step, col: tuple[int, int], rows: tuple[int, int],
              acc_row: int, slot: int, gsm_parity: int, b_parity: int, *, first: bool, last: bool,
              transpose_b: bool, k_range: tuple[int, int] | None = None,
              partial_to: tuple[int, int] | None = None) -> tuple[list[Transfer], Compute, list[Transfer]]:
        """One tile: an A micro-panel into SM, the micro-kernels over the B block, C's rows in AM.  ``k_range``:
        the depth it covers (default: step ``s``'s k block); ``partial_to``: (address, row pitch in bytes) where
        the last k block stores its fp32 partial rows instead of C (split k: no beta, no rounding)."""
        g, isz = self.g, self.isz
        beta = g.beta and partial_to is None
        r0, r1 = rows
        n0, n1 = col
        k0, k1 = self._k_range(t, s) if k_range is None else k_range
        pr, nc, kd = r1 - r0, n1 - n0, k1 - k0
        panel_shape = (kd, pr) if g.trans_a else (pr, kd)
        panel = Operand(lay["sm"].slot_addr(slot) + lay["panel_offset"], panel_shape, self.dt)
        loads: list[Transfer] = []
        if self.shared:
            b_r0, _ = self._block_rows(t, s)
            gbase = lay["gsm"][gsm_parity]
            if g.trans_a:  # the block is [k, block rows]: the panel is a column band of it
                block_rows = self._block_rows(t, s)
                width = block_rows[1] - block_rows[0]
                src = gbase + (r0 - b_r0) * isz
                loads.append(Transfer.block(src, panel.addr, panel_shape, isz, (width * isz, isz)))
            else:
                loads.append(Transfer.contiguous(gbase + (r0 - b_r0) * kd * isz, panel.addr, pr * kd * isz))
        else:
            first_row, first_col = (k0, r0) if g.trans_a else (r0, k0)
            loads.append(Transfer.block(self.a.addr + (first_row * g.lda + first_col) * isz, panel.addr, panel_shape,
                                        isz, (g.lda * isz, isz)))
        b_shape = (nc, kd) if g.trans_b else (kd, nc)
        bblock = Operand(lay["b"][b_parity], b_shape, self.dt)
        # The core's C block: its rows of the GSM block, dense [rows, nc] fp32; this panel's rows of it.
        acc = Operand(lay["acc"] + acc_row * nc * F32.itemsize, (pr, nc), F32)
        inputs = [panel, bblock]
        c_slot = lay["am"].slot(slot)
        c_rows = (g.ldc * isz, isz)
        c_at = self.c.addr + (r0 * g.ldc + n0) * isz
        stores: list[Transfer] = []
        out_dtype = None
        if t.c_home == "ddr":
            # C streamed: the tile's rows of C come into its slot (unless this is the first k block and beta is
            # 0), take this k block and go back to memory, in place in the slot.
            rows_c = c_slot.operand((pr, nc), self.dt)
            if not first or beta:
                loads.append(Transfer.block(c_at, rows_c.addr, (pr, nc), isz, c_rows))
                inputs.append(rows_c)
            outputs: tuple[Operand, ...] = (rows_c,)
            stores.append(Transfer.block(rows_c.addr, c_at, (pr, nc), isz, (nc * isz, isz), c_rows))
            out_dtype = self.dt
            # The tile adds the rows it loaded, if any (the micro-kernel loads them first); none from an AM block.
            beta, first = not first or beta, True
        elif first and beta:
            old = c_slot.operand((pr, nc), self.dt)
            loads.append(Transfer.block(c_at, old.addr, (pr, nc), isz, c_rows))
            inputs.append(old)
        elif not first:
            inputs.append(acc)
        if t.c_home == "am" and last:
            # The finished rows of C go to the tile's slot (rounded to fp16 for hp), not the C block: the slot is
            # not reused before its stores have landed, while the C block's rows are the next step's to write.
            out_dtype = self.dt if partial_to is None else F32
            out = (c_slot.operand((pr, nc), out_dtype) if not (first and beta)
                   else Operand(inputs[-1].addr, (pr, nc), out_dtype))
            outputs = (out,)
            if partial_to is None:
                stores.append(Transfer.block(out.addr, c_at, (pr, nc), isz, (nc * isz, isz), c_rows))
            else:
                stores.append(Transfer.block(out.addr, partial_to[0], (pr, nc), 4, (nc * 4, 4), (partial_to[1], 4)))
        elif t.c_home == "am":
            outputs = (acc,)
        loops = self._tile_loops(t, pr, nc, kd, load_c=not first or beta, transpose_b=transpose_b,
                                 rounded=last and out_dtype != F32)
        flops = 2 * pr * nc * kd
        fn = _TileFn(g.trans_a, g.trans_b, nc, first, beta, out_dtype)
        compute = Compute(fn, tuple(inputs), outputs, flops=flops, precision=self.prec,
                          loops=loops)
        return loads, compute, stores

    def _tile_loops(self, t: _Tiling, pr: int, nc: int, kd: int, *, load_c: bool, transpose_b: bool,
                    rounded: bool) -> tuple[Loop, ...]:
        """The loops of a tile of ``pr`` rows, ``nc`` columns and depth ``kd``: its micro-kernels (C's rows loaded
        into the registers first when ``load_c``), B's transpose in AM first (``transpose_b``), C's rounding to
        fp16 last (``rounded``)."""
        entries = -(-pr // t.m_micro) * -(-nc // t.n_micro)
        loops = [gemm_micro_kernel(self.core, self.prec, t.m_micro, t.n_micro, kd, itemsize=self.isz,
                                   entries=entries, load_c=load_c)]
        if transpose_b:
            # Bᵀ staged as [n, k] rows: one pass of vector loads, shuffles and stores puts op(B)'s rows in place.
            loops.insert(0, elementwise(self.core, self.prec, nc * kd, loads=1, stores=1, valu=1,
                                        label="B block transpose in AM"))
        if rounded:
            loops.append(elementwise(self.core, self.prec, pr * nc, loads=1, stores=1, valu=1,
                                     label="C rounded to fp16"))
        return tuple(loops)

    def _bound(self, tiling: Mapping[str, Any]) -> float:
        """The space's ``bound``: the launch, then the busiest core's tiles' computes one after another, summed
        over the steps and panels :meth:`build` would give it without building them (the reduce phase of split
        k left out: a lower bound still)."""
        g, t = self.g, self.resolve(tiling)
        steps, chunks, _ = self._steps_and_shares(t)
        beta = g.beta and t.split != "k"  # (split k: the partials take no beta and are not rounded)
        rounded_c = t.split != "k" and self.dt != F32
        memo: dict[tuple[int, int, int, bool, bool, bool], int] = {}
        busiest = 0
        for core in self.ctx.cores:
            n_kb = sum(1 for s in steps if s.mb == 0 and s.chunk == 0 and self._core_k(t, core, s))
            total = 0
            for s in steps:
                col, kr = self._chunk(chunks, core, s), self._core_k(t, core, s)
                if col is None or kr is None:
                    continue
                load_c, rounded = s.kb != 0 or beta, rounded_c and s.kb == n_kb - 1
                for j, (p0, p1) in enumerate(self._panels(t, core, s)):
                    key = (p1 - p0, col[1] - col[0], kr[1] - kr[0], load_c, j == 0 and g.trans_b, rounded)
                    cycles = memo.get(key)
                    if cycles is None:
                        cycles = memo[key] = self.ctx.compute_cycles(self._tile_loops(
                            t, key[0], key[1], key[2], load_c=load_c, transpose_b=key[4], rounded=rounded))
                    total += cycles
            busiest = max(busiest, total)
        return self.ctx.target.launch_overhead_cycles + busiest


def _round_up(v: int, unit: int) -> int:
    return -(-v // unit) * unit


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _cut_rows(t: Transfer, pieces: int) -> list[Transfer]:
    """A 2-D descriptor cut into at most ``pieces`` descriptors of consecutive rows (dimension 0)."""
    if pieces <= 1 or len(t.shape) != 2 or t.shape[0] <= 1:
        return [t]
    out = []
    for a, b in split_even(t.shape[0], min(pieces, t.shape[0])):
        out.append(Transfer(t.src + a * t.src_strides[0], t.dst + a * t.dst_strides[0], (b - a, t.shape[1]),
                            t.itemsize, t.src_strides, t.dst_strides))
    return out


KERNEL = Gemm()
