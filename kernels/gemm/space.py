"""GEMM's tiling space: per key the published schedule's values first, then smaller blocks and the other splits."""

from __future__ import annotations

import math
from collections.abc import Mapping
from itertools import groupby
from typing import Any

from kernels.common.scratch import align_up
from kernels.common.shares import ceil_div
from kernels.common.tiling_space import ChoiceKey, IntKey, TilingSpace
from kernels.common.transfers import channel_grain
from kernels.gemm.constants import (
    A_LOADERS,
    A_STAGINGS,
    B_STAGINGS,
    C_HOMES,
    F32,
    K_BLOCKS,
    LONG_K,
    M_BLOCKS,
    MICRO_ROWS,
    N_BLOCK,
    NT_KERNELS,
    NT_REDUCTIONS,
    SPLITS,
    STREAMED_C_SLOTS,
    GemmTiling,
)
from kernels.gemm.layout import GemmLayouts
from kernels.gemm.state import tile_loops
from sim.errors import KernelArgError
from sim.model.plan import DoesNotFit, Plan
from sim.startup import startup


class GemmSpace(GemmLayouts):
    """The call's tiling space (:meth:`_space`), built with the layout's fit."""

    def _space(self) -> TilingSpace:
        """The call's tiling space: per key the published schedule's value first (a micro-kernel of 6 x 4
        vectors, 12-row panels, 512-deep blocks, 128-column B blocks, 576-row A blocks), then smaller blocks
        and the other splits; ``fit`` lays the staging levels out, ``tiles`` counts a tiling's tiles."""
        g = self.g
        cores = len(self.ctx.cores)
        n_micro = min(4 * self.lanes, align_up(g.n, self.lanes))
        staged = {"a_staging": "memory"} if self._a_staging_chosen() else {}  # (the split m starts' A panels)
        split = "n" if g.n >= 2 * n_micro * min(cores, 2) or cores == 1 else "m"
        if cores > 1 and g.k >= LONG_K * max(g.m, g.n):
            split = "k"  # small m x n, long k: the depth is the only dimension with work for every core
        # A TT call, planned as Cᵀ = B·A, transposes each finished tile into C's rows: it has no split k, whose
        # reduce phase sums rows of C from the cores' partial rows (they would be Cᵀ's).
        # Nor does a call that cannot split k (one core, an _p call, no shared level, k of 1).
        allowed = tuple(x for x in SPLITS if x != "k") if self.c_transposed or not self.split_k_possible() \
            else SPLITS
        if split not in allowed:
            split = "n"
        splits = (split,) + (tuple(x for x in allowed if x != split) if cores > 1 else ())

        def panels(t: Mapping[str, Any]) -> list[int]:
            if t.get("nt_kernel") in NT_REDUCTIONS:
                # The NT kernels read A's panel from AM (the layout checks it), C's rows live in SM: the
                # published 12 rows (four blocks of 3, or two of Yu et al.'s 6), then half as many.
                blocks = 4 if t["nt_kernel"] == "reduce" else 2
                return list(dict.fromkeys([min(blocks * t["m_micro"], g.m), min(blocks // 2 * t["m_micro"], g.m)]))
            # Two micro-kernels' rows; one when two such panels of this depth do not fit the scalar level.
            two, one = min(2 * t["m_micro"], g.m), min(t["m_micro"], g.m)
            slots = STREAMED_C_SLOTS if t["c_home"] == "ddr" else 2
            out = [two] if self._panels_fit(two, t["k_block"], slots) else [two, one]
            if g.trans_a:
                # A stored [k, m]: a panel is k_block runs of m_panel elements; runs of whole bursts of A's
                # region (and whole micro-kernels) waste none of them.  Read straight from memory (A not staged in
                # GSM: split k, one core's first choice) such panels are the one choice where they fit, so that a
                # step to a shallower k block that lets them fit takes them with it; from GSM one more choice.
                whole = min(g.m, channel_grain(self.ctx, self.a.addr, self.isz, t["m_micro"]))
                if self._panels_fit(whole, t["k_block"], slots):
                    if self._a_staging_of(t) != "gsm":
                        return [whole]
                    out.append(whole)
            return list(dict.fromkeys(out))

        def micro_width(t: Mapping[str, Any]) -> int:
            # The micro-kernel's columns: the published 4 vectors, no wider than the B block (whole vectors); the
            # NT kernel's block.
            if t.get("nt_kernel") in NT_REDUCTIONS:
                return min(self._nt_block(t["nt_kernel"])[1], g.n)
            return t.get("n_micro") or min(n_micro, align_up(t["n_block"], self.lanes))

        def micro_widths(t: Mapping[str, Any]) -> list[int]:
            # The published width (4 vectors, no wider than the B block) first, then narrower whole vectors: a
            # B block that is not a multiple of the widest leaves a last micro-kernel mostly idle.  The NT kernel:
            # its published block.
            if t.get("nt_kernel") in NT_REDUCTIONS:
                return [min(self._nt_block(t["nt_kernel"])[1], g.n)]
            first = micro_width(t)
            out = [first] + [v * self.lanes for v in range(first // self.lanes - 1, 0, -1)
                             if self._micro_registers(t["m_micro"], v * self.lanes) <= self.core.vector_registers]
            if t.get("n_micro") is None and t["n_block"] % first:
                # A block that is not a multiple of the widest: first the widest equal split of it into whole
                # vectors (192 columns as 2 x 96, not 128 + a 64-column kernel short of accumulators for the FMAC
                # latency).
                even = self._even_width(t["n_block"], first)
                if even in out:
                    out.remove(even)
                    out.insert(0, even)
            return out

        def micro_rows(t: Mapping[str, Any]) -> list[int]:
            # The published 6 rows; when the widest micro-kernel a core's columns allow leaves 6 rows fewer
            # accumulators than the FMAC units times their latency (thin columns per core), the taller blocks the
            # register file holds, which cover that latency with fewer vectors per row.
            if t.get("nt_kernel") in NT_REDUCTIONS:
                return [min(self._nt_block(t["nt_kernel"])[0], g.m)]
            per_core = g.n if t["split"] != "n" else ceil_div(g.n, cores)
            vectors = max(1, min(n_micro, align_up(per_core, self.lanes)) // self.lanes)
            rows = [min(MICRO_ROWS[0], g.m)]
            taller = [v for v in MICRO_ROWS[1:]
                      if self._micro_registers(v, vectors * self.lanes) <= self.core.vector_registers]
            if rows[0] * vectors < self._fmac_depth():
                rows += [min(v, g.m) for v in taller]
            else:
                # Rows of C a last, partial micro-kernel would compute for nothing: the taller blocks that pad
                # fewer (32 rows as 4 x 8, not 6 x 6 with 4 rows padded: 8.5 % of one core's 32 x 1024 x 16384).
                rows += [v for v in taller if align_up(g.m, v) < align_up(g.m, rows[0])]
            return list(dict.fromkeys(rows))

        def n_blocks(t: Mapping[str, Any]) -> list[int]:
            # The published 128 columns; when two B blocks of them do not fit AM with this depth and these rows,
            # the widest of their halvings (whole vectors) that does; split n with fewer column blocks than
            # cores, first the block that gives every core one (whole vectors).
            first = min(max(t.get("n_micro") or n_micro, N_BLOCK), g.n)
            out = [first]
            nt = t.get("nt_kernel") in NT_REDUCTIONS
            if nt:
                # The NT kernels' blocks are n_micro columns: also the widest block of whole blocks and whole
                # vectors (96 on FT78NE for reduce's 6), which computes no padding columns.
                whole = math.lcm(self._nt_block(t["nt_kernel"])[1], self.lanes)
                if whole < first and first % whole:
                    out.append(first // whole * whole)
            # An NT kernel's B block is rows of B (not vectors): deep blocks halve it down to one NT block, as the
            # published NT schedules do (N_A 64, 32, 16 for K_A 512, 1024, 2048); the NN kernel's stays whole
            # vectors.
            floor = self._nt_block(t["nt_kernel"])[1] if nt else self.lanes
            v = first
            while True:
                try:
                    self._fit({**t, "n_block": v, "n_micro": micro_width({**t, "n_block": v})})
                    out.append(v)
                    break
                except (DoesNotFit, KernelArgError):
                    if v <= floor:
                        break
                    v = max(floor, v // 2 if nt else align_up(v // 2, self.lanes))
            if t["split"] == "n" and ceil_div(g.n, min(out[-1], first)) < cores:
                out.insert(0, align_up(ceil_div(g.n, cores), self.lanes))  # preferred: no core idles
            out = [x for x in dict.fromkeys(out) if x <= first]
            if t["split"] == "n" and not nt:
                # Split n shares the columns out in micro-kernel widths: a width that does not divide a core's share
                # leaves some cores a block more than the others (2304 columns on 8 cores in 128s: 18 blocks, two
                # cores get 3, the busiest 384 columns where the mean is 288).  The widest equal split of a core's
                # columns into whole vectors, no wider than the published block, evens them (3 x 96).
                per_core = ceil_div(g.n, cores)
                even = align_up(ceil_div(per_core, ceil_div(per_core, first)), self.lanes)
                if even < first and even not in out:
                    try:
                        self._fit({**t, "n_block": even, "n_micro": micro_width({**t, "n_block": even})})
                        out.append(even)
                    except (DoesNotFit, KernelArgError):
                        pass
            # Then wider blocks, up to a core's whole columns, where they fit: each column block re-reads A (from
            # GSM, or from memory where A is not staged), so fewer of them read A fewer times.
            limit = g.n if t["split"] != "n" else min(g.n, align_up(ceil_div(g.n, cores), self.lanes))
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
            if t["split"] == "m" and cores > 1 and self._a_staging_of(t) == "memory":
                # A's panels straight from memory: an m block is no GSM block, only how many rows each B block
                # serves before the next is loaded, so the tallest re-reads B least (12288 rows in 576-row blocks
                # load each B block 22 times): the tallest of m and its halvings whose C block in AM fits beside
                # B's blocks at every column width (all of B's columns: the widest), alone.
                v = g.m
                while v > p:
                    try:
                        self._fit({**t, "m_block": v, "n_block": g.n, "n_micro": micro_width({**t, "n_block": g.n})})
                        return [v]
                    except (DoesNotFit, KernelArgError):
                        v = max(p, v // 2 // p * p)
            return list(dict.fromkeys(out))

        def k_blocks(t: Mapping[str, Any]) -> list[int]:
            out = [min(v, g.k) for v in K_BLOCKS] + [max(1, min(max(K_BLOCKS), g.k) // 2)]
            # (split k shares the k blocks among the cores: a block as deep as k leaves the others nothing)
            return [v for v in out if v < g.k] if t["split"] == "k" else out

        return TilingSpace(
            ChoiceKey("split", SPLITS, "n: each core its columns of C (A blocks shared in GSM); m: each core its "
                                       "micro-panels of each A block (every core loads the B block); k: each core "
                                       "a range of the depth, partial C blocks summed through GSM (small m x n, "
                                       "long k)", values=splits),
            ChoiceKey("nt_kernel", NT_KERNELS, "B stored transposed (trans_b = 1): reduce, the published merged "
                                               "NT micro-kernel (3 x 6 blocks of C, dot products of A's and B's rows "
                                               "read from AM as vectors, reduced across the lanes into C's rows "
                                               "in SM, each block's reduction overlapping the next block; fp32, A "
                                               "not transposed, C streamed); reduce_serial (asked for only), Yu et "
                                               "al.'s NT micro-kernel (6 x 8 blocks, each reduced before the next "
                                               "starts); transpose, each B block transposed in AM and the NN "
                                               "micro-kernel run on it (tried first, and the only choice for any "
                                               "other call)",
                      values=self._nt_kernels),
            ChoiceKey("c_home", C_HOMES, "am: a core's C block stays in AM over the k loop (one load and one store "
                                         "of C); ddr: C streamed per k block, the published library's loop order "
                                         "(k blocks outermost; each tile loads its C rows from memory, accumulates "
                                         "one k block and stores them back; C triple-buffered in AM): fp32 C only, "
                                         "not with split k", values=self._c_homes),
            # (on several cores a key of split m only: split n always stages A and split k never, and a key whose
            # one value changed with the split would keep the climb from stepping between splits)
            *((ChoiceKey("a_staging", A_STAGINGS, "_s calls: where A's panels come from. One core: memory, each "
                                                  "panel read straight from memory (tried first); gsm, A's blocks "
                                                  "staged in the shared level first, the published single-core "
                                                  "blocking. Several cores, split m only: gsm (tried first), or "
                                                  "memory, each core reading its own panels (its rows of A are no "
                                                  "other core's). Split n always stages A, split k and _p calls "
                                                  "never: no key there",
                         values=self._a_stagings, only=self._a_staging_only()),) if self._a_staging_chosen() else ()),
            ChoiceKey("a_loader", A_LOADERS, "cores: the cores of an _s call share each GSM block's loading; core0: "
                                             "the call's first core loads every GSM block of A (the published "
                                             "library), the others wait for it",
                      values=lambda t: A_LOADERS if self._may_share(t["split"]) and self._a_staging_of(t) == "gsm"
                      else A_LOADERS[:1]),
            IntKey("a_buffers", 1, 2, "GSM blocks of A in flight: 2, the next block streams in while the cores "
                                      "compute on this one; 1, one block as large as the staging window, loaded "
                                      "once every core has finished with the previous one (the published "
                                      "library's single GSM block behind a barrier)",
                   values=lambda t: (2, 1) if self._a_staging_of(t) == "gsm" else (2,)),
            ChoiceKey("b_staging", B_STAGINGS, "am: each core loads its B blocks from memory into AM; gsm: split m "
                                               "(every core uses the same B block), the cores share each B block's "
                                               "loading into GSM and each copies it from there into AM (B read "
                                               "from memory once instead of once per core); broadcast: split m, "
                                               "every core loads the block from memory into its AM as one "
                                               "synchronised transfer, which reads it once",
                      values=lambda t: B_STAGINGS if t["split"] == "m" and self._may_share("m")
                      else B_STAGINGS[:1]),
            IntKey("m_micro", 1, 64, "rows of the micro-kernel's C block in registers (with n_micro: accumulators, a "
                                     "row of B and the broadcast A values within the core's vector registers)",
                   values=micro_rows),
            IntKey("k_block", 1, g.k, "depth of a GSM block of A and of a B block (split k: at least two blocks)",
                   values=k_blocks),
            IntKey("m_panel", 1, g.m, "rows of an A micro-panel in SM (one tile)", values=panels),
            IntKey("m_block", 1, g.m, "rows of op(A) per GSM block (shared by the cores); A read from memory on "
                                      "split m: the rows each B block serves", values=m_blocks),
            IntKey("n_block", 1, g.n, "columns of op(B) per B block in AM (a core's C block width)",
                   values=n_blocks),
            IntKey("n_micro", 1, 4096, "columns of the micro-kernel's C block in registers (the NN kernels: in "
                                       "vectors, a part vector's lanes padded; the NT kernels: C's columns per block)",
                   values=micro_widths),
            fit=self._fit, tiles=self._tiles, bound=self._bound,
            # Priced once the climb ends, each the tiling nearest its end: the NT kernel (it streams C: two choices
            # from the NN schedule's tilings); on thin B, the published direct scheme (split m, B shared through
            # GSM, here each core's A panels read from memory, all of B's columns a block): three choices from the
            # preferred tiling, which the climb, its budget spent on the steps around it, often does not reach.
            starts=(*(({"nt_kernel": "reduce"},) if any(len(self._nt_kernels({"split": x})) > 1 for x in splits)
                      else ()),
                    # (B broadcast to every core on split m, all of B's columns a block or the nearest: keys away
                    # from a climb on split n, where a core left without a column block of its own idles: 384 x
                    # 512 x 512 on 7 of FT78NE's cores, 18 %)
                    *(({"split": "m", "b_staging": "broadcast", **staged, "n_block": g.n,
                        **({"n_micro": even} if (even := self._even_width(g.n, n_micro)) != n_micro else {})},
                       {"split": "m", "b_staging": "broadcast", **staged})
                      if "m" in splits and self._may_share("m") and len(splits) > 1 else ()),
                    *(({"split": "m", "a_staging": "memory", "b_staging": "gsm", "n_block": g.n,
                        **({"n_micro": even} if (even := self._even_width(g.n, n_micro)) != n_micro else {})},)
                      if split == "m" and self._a_staging_only() is not None and self._may_share("m") else ())))

    def _even_width(self, columns: int, widest: int) -> int:
        """The widest micro-kernel width (whole vectors) that splits ``columns`` into equal parts no wider than
        ``widest``."""
        return align_up(ceil_div(columns, ceil_div(columns, widest)), self.lanes)

    def _bound(self, tiling: Mapping[str, Any]) -> float:
        """The space's ``bound``: each core's tiles' computes one after another, summed over the steps and panels
        :meth:`build` would give it without building them (the reduce phase of split k left out: a lower bound
        still), after what must land before its first compute (:func:`sim.startup.startup` of the plan's first
        tiles, the only ones built)."""
        g, t = self.g, self.resolve(tiling)
        steps, chunks, _ = self._steps_and_shares(t)
        beta = g.beta and t.split != "k"  # (split k: the partials take no beta and are not rounded)
        rounded_c = t.split != "k" and self.dt != F32
        transposes_b = g.trans_b and not t.nt_reduces  # (the NT kernels read B's rows as they are)
        serial: dict[int, int] = {}
        for core in self.ctx.cores:
            n_kb = sum(1 for s in steps if s.mb == 0 and s.chunk == 0 and self._core_k(t, core, s))
            # The core's tiles of each GSM block (by its index) as runs of equal ones, (rows, B transposed first,
            # how many): they depend on the block alone, not on the step, and equal tiles cost the same.
            runs = [[(shape, len(list(same))) for shape, same in groupby(
                (p1 - p0, j == 0 and transposes_b) for j, (p0, p1) in enumerate(self._panels(t, core, s)))]
                for s in steps if s.chunk == s.kb == 0]
            total = 0
            for s in steps:
                col, kr = self._chunk(chunks, core, s), self._core_k(t, core, s)
                if col is None or kr is None:
                    continue
                load_c, rounded = s.kb != 0 or beta, rounded_c and s.kb == n_kb - 1
                # A TT call's C rows transposed in AM: in where they come from memory, out where they go to it.
                streamed = t.c_home == "ddr"
                c_in = self.c_transposed and (load_c if streamed else s.kb == 0 and beta)
                c_out = self.c_transposed and (streamed or s.kb == n_kb - 1)
                for (rows, transpose_b), n in runs[s.mb]:
                    # The loops and their price are remembered by value (tile_loops; sim.timing).
                    total += n * self.ctx.compute_cycles(tile_loops(
                        self.core, self.prec, self.isz, t.m_micro, t.n_micro, rows, col[1] - col[0], kr[1] - kr[0],
                        load_c, transpose_b, rounded, t.nt_kernel, c_in, c_out))
            serial[core] = total
        computes = self.ctx.target.launch_overhead_cycles + max(serial.values(), default=0)
        try:
            first = self.build(t, first_only=True)
        except (DoesNotFit, KernelArgError):  # (a tiling the search has not checked for fit: its computes only)
            return computes
        return max(computes, startup(first, self.ctx.target).bound_cycles(serial))

    def build(self, t: GemmTiling, first_only: bool = False) -> Plan:
        """The plan of tiling ``t`` (:class:`~kernels.gemm.build.GemmPlanner`'s)."""
        raise NotImplementedError
