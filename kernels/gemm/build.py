"""A GEMM tiling's plan: the staging tiles of the GSM and B blocks, the compute tiles, split k's reduce phase."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from kernels.base import PlanContext
from kernels.common.loops import elementwise
from kernels.common.scratch import Scratch, align_up
from kernels.common.shares import split_even
from kernels.common.split_reduce import SplitReduce
from kernels.common.streams import CoreStream, phase_of
from kernels.common.tensor_view import TensorView
from kernels.gemm.constants import F32, GemmTiling, Step
from kernels.gemm.layout import GemmLayout
from kernels.gemm.numerics import sum_partial_rows, tile_product
from kernels.gemm.space import GemmSpace
from sim.model.call import BoundCall
from sim.model.plan import (
    AnyBufferRef,
    BufferRef,
    Compute,
    DoesNotFit,
    Operand,
    Phase,
    Plan,
    Tile,
    TileFn,
    Transfer,
    buffer_ref,
)


class GemmPlanner(GemmSpace):
    """The plans of one call: :meth:`build` of a tiling :meth:`resolve` took."""

    def __init__(self, call: BoundCall, ctx: PlanContext, formulation: str | None = None):
        super().__init__(call, ctx, formulation)
        self.space = self._space()

    def build(self, t: GemmTiling, first_only: bool = False) -> Plan:
        """The plan of tiling ``t``: one phase, staged buffers instead of barriers (split k: then the reduce
        phase).  ``first_only``: each core's tiles only up to its first compute tile, the first phase only (what
        :func:`sim.startup.startup` looks at: the tiling space's bound)."""
        g, ctx = self.g, self.ctx
        lay = self.layout(t)
        # (an NT reduction kernel's tiles take their slot in SM, C's rows; AM holds its two A panels)
        n_slots = lay.sm.slots if t.nt_reduces else lay.am.slots
        steps, chunks, _ = self._steps_and_shares(t)
        cores = ctx.cores
        n_kb_of = {c: sum(1 for s in steps if s.mb == 0 and s.chunk == 0 and self._core_k(t, c, s)) for c in cores}
        tiles: dict[int, list[Tile]] = {c: [] for c in cores}
        ids = dict.fromkeys(cores, 0)
        computes = dict.fromkeys(cores, 0)

        def add(core: int, loads: Sequence[Transfer], compute: Compute | None, stores: Sequence[Transfer],
                fills: tuple[AnyBufferRef, ...] = (), uses: tuple[AnyBufferRef, ...] = ()) -> None:
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
        # A core with no panel in a step (split m, a block of fewer panels than cores) takes no B block in it,
        # unless B is staged in GSM, where it loads its share of every core's block.  With B broadcast its member
        # would hold one of its engines while it waited for the others, and the walk of a core that computes
        # nothing passes through its staging tiles at once: two such members took both its engines while the
        # cores they waited for waited for the A blocks it still had to load (37 x 45 x 29 on two cores, 12-row
        # blocks: the run stalled).
        def works_in(core: int, s: Step) -> bool:
            return (self._chunk(chunks, core, s) is not None and self._core_k(t, core, s) is not None
                    and (t.b_staging == "gsm" or bool(self._panels(t, core, s))))

        b_gen_of: dict[int, list[int]] = {}
        for core in cores:
            gens: list[int] = []
            last: tuple[int, int] | None = None
            for s in steps:
                works = works_in(core, s)
                if works and (s.kb, s.chunk) != last:
                    gens.append(gens[-1] + 1 if gens and last is not None else 0)
                    last = (s.kb, s.chunk)
                else:
                    gens.append(gens[-1] if gens else 0)
            b_gen_of[core] = gens

        def gsm_ref(gen: int) -> BufferRef:
            return buffer_ref(f"gsm.a{gen % t.a_buffers}", gen // t.a_buffers)

        def b_ref(core: int, gen: int) -> BufferRef:
            return buffer_ref(f"am.b{core}.{gen % 2}", gen // 2)

        def gsm_b_ref(gen: int) -> BufferRef:
            return buffer_ref(f"gsm.b{gen % 2}", gen // 2)

        first_of_gsm = {gen: i for i, gen in reversed(list(enumerate(gsm_gen)))}
        # Where each core's B generation is first used (a step it works in).
        first_of_b = {core: {gen: i for i, gen in reversed(list(enumerate(b_gen_of[core]))) if works_in(core, steps[i])}
                      for core in cores}

        def staging(core: int, step_index: int, pieces: int) -> list[tuple[tuple[Transfer, ...], tuple[BufferRef, ...],
                                                                            tuple[BufferRef, ...]]]:
            """The staging tiles (loads, fills, uses) of step ``step_index``'s new blocks on ``core``, cut by rows
            into at most ``pieces`` tiles: spread over a step's compute tiles, each holds a DMA engine for a short
            while only, so the compute tiles' own loads never queue long behind the next blocks.  With B staged
            in GSM, the core's copy of the B block from GSM into AM comes last, once every core's share landed."""
            s = steps[step_index]
            transfers: list[Transfer] = []
            refs: list[BufferRef] = []
            if self.shared and first_of_gsm[gsm_gen[step_index]] == step_index:
                fill = self._gsm_fill(t, lay, s, core, gsm_gen[step_index] % t.a_buffers)
                if fill or t.a_loader == "cores":  # core0: the other cores take no part in the fill
                    transfers += fill
                    refs.append(gsm_ref(gsm_gen[step_index]))
            col = self._chunk(chunks, core, s)
            kr = self._core_k(t, core, s)
            b_gen = b_gen_of[core]
            copy: list[tuple[tuple[Transfer, ...], tuple[BufferRef, ...], tuple[BufferRef, ...]]] = []
            lead: list[tuple[tuple[Transfer, ...], tuple[BufferRef, ...], tuple[BufferRef, ...]]] = []
            if col is not None and kr is not None and first_of_b[core].get(b_gen[step_index]) == step_index:
                gen = b_gen[step_index]
                if t.b_staging == "gsm":
                    share = self._b_share(t, lay, s, col, gen % 2, kr, core)
                    if share is not None:
                        transfers.append(share)
                        refs.append(gsm_b_ref(gen))
                    copy.append(((self._b_copy(t, lay, col, gen % 2, kr),), (b_ref(core, gen),), (gsm_b_ref(gen),)))
                elif t.b_staging == "broadcast":
                    # One synchronised transfer per block, in a staging tile of its own ahead of the A block's
                    # pieces: a member holds one of its core's engines while it waits for the others, so a core
                    # holds at most one, and no member waits behind core 0's refill of a single A block (which
                    # waits for every core's last use of the block before).
                    member = replace(self._b_fill(t, lay, s, col, gen % 2, kr), sync=f"b.{step_index}")
                    lead.append(((member,), (b_ref(core, gen),), ()))
                else:
                    transfers.append(self._b_fill(t, lay, s, col, gen % 2, kr))
                    refs.append(b_ref(core, gen))
            if not refs:
                return lead + copy
            cut = [_cut_rows(x, pieces) for x in transfers]
            count = max([len(c) for c in cut] + [1])
            return lead + [(tuple(c[j] for c in cut if j < len(c)), tuple(refs), ()) for j in range(count)] + copy

        for core in cores:
            if steps:
                for staged, fills, uses in staging(core, 0, 1):
                    add(core, staged, None, (), fills=fills, uses=uses)
            for i, s in enumerate(steps):
                col = self._chunk(chunks, core, s)
                kr = self._core_k(t, core, s)
                panels = self._panels(t, core, s) if col is not None and kr is not None else []
                # The next blocks stream while this step computes: a piece after each of its tiles.
                # With B staged in GSM, the next blocks' pieces take the step's first third, so that the B block's
                # copy into AM (once every core's share landed) streams during the rest, not after the step:
                # 3072x192x4096 on 8 cores, A from memory, 7,194,103 cycles with it last, 5,136,882 so.
                pieces = (len(panels) + 2) // 3 if t.b_staging == "gsm" else len(panels)
                ahead = staging(core, i + 1, max(1, pieces)) if i + 1 < len(steps) and not (
                    first_only and panels) else []
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
                        assert lay.exchange is not None
                        partial_to = (lay.exchange.addr(cores.index(core), p0 * g.n + col[0]), g.n * 4)
                    loads, compute, stores = self._tile(t, lay, s, col, (p0, p1), p0 - panels[0][0],
                                                        computes[core] % n_slots, gsm_gen[i] % t.a_buffers,
                                                        b_gen[i] % 2, a_panel=computes[core] % lay.am.slots,
                                                        first=s.kb == 0, last=s.kb == n_kb_of[core] - 1,
                                                        transpose_b=j == 0 and g.trans_b and not t.nt_reduces,
                                                        k_range=kr,
                                                        partial_to=partial_to)
                    add(core, loads, compute, stores, uses=uses)
                    if first_only:
                        break
                    if j < len(ahead):
                        add(core, ahead[j][0], None, (), fills=ahead[j][1], uses=ahead[j][2])
                if first_only:
                    break
                for staged, fills, b_uses in ahead[len(panels):]:  # the GSM -> AM copy of a B block, last
                    add(core, staged, None, (), fills=fills, uses=b_uses)
        if t.split != "k" or first_only:
            phase = Phase("gemm", {c: tuple(ts) for c, ts in tiles.items()}, barrier_after=False)
            return Plan(cores=self.call.cores, phases=(phase,), precision=self.call.precision)
        partials = Phase("gemm:partials", {c: tuple(ts) for c, ts in tiles.items() if ts}, barrier_after=True)
        return Plan(cores=self.call.cores, phases=(partials, self._reduce_phase(lay, ids)),
                    precision=self.call.precision)

    def _reduce_phase(self, lay: GemmLayout, ids: Mapping[int, int]) -> Phase:
        """Split k: each core sums its rows of C over every core's partial (+ the old C when beta = 1), rounds
        them to C's dtype and stores them (the reduce phase of :class:`~kernels.common.split_reduce.SplitReduce`,
        with GEMM's own reduction: the old C added)."""
        g, isz = self.g, self.isz
        assert lay.exchange is not None  # split k lays its exchange out
        reduce = SplitReduce(lay.exchange, "gemm")
        parts = lay.exchange.parts
        sc = Scratch(self.am, 0, slots=2)
        align = self.am.alignment_bytes
        row_bytes = align_up(parts * g.n * 4, align) + 2 * align_up(g.n * isz, align)
        per = max(1, min(g.m, (sc.slot_bytes - 3 * self.am.alignment_bytes) // max(1, parts * g.n * 4 + 2 * g.n * isz)))
        if parts * g.n * 4 + 2 * g.n * isz + 3 * self.am.alignment_bytes > sc.slot_bytes:
            raise DoesNotFit(self.am.name, 2 * row_bytes, self.am.size_bytes,
                             f"{self.call.symbol}: one row of {parts} partials does not fit a slot of the "
                             f"{self.am.name} level")
        c = TensorView(self.c.addr, (g.m, g.ldc), isz)
        streams: dict[int, CoreStream] = {}
        for core, r0, r1 in reduce.slices(self.ctx.cores, g.m):
            stream = streams[core] = CoreStream(ids[core])
            for a in range(r0, r1, per):
                b = min(r1, a + per)
                arena = sc.slot(stream.slot)
                stack = arena.operand((parts, (b - a) * g.n), F32)
                loads = [reduce.gather(stack.addr, a * g.n, (b - a) * g.n)]
                inputs = [stack]
                if g.beta:
                    old = arena.operand((b - a, g.n), self.dt)
                    loads.append(c.load_block((a, 0), (b - a, g.n), old.addr))
                    inputs.append(old)
                out = arena.operand((b - a, g.n), self.dt)
                loops = (
                    elementwise(self.core, "fp32", (b - a) * g.n, loads=parts + int(g.beta), stores=1,
                                fmac=parts - 1 + int(g.beta), valu=int(self.dt != F32), label="partials summed"),)
                compute = Compute(TileFn(sum_partial_rows, (g.n, self.dt)), tuple(inputs), (out,), flops=0,
                                  precision="fp32", loops=loops)
                stream.add(loads, compute, (c.store_block(out.addr, (a, 0), (b - a, g.n)),))
        return phase_of("gemm:reduce", streams, barrier_after=False, drop_empty=True)

    def _gsm_fill(self, t: GemmTiling, lay: GemmLayout, s: Step, core: int, parity: int) -> tuple[Transfer, ...]:
        """This core's share of the GSM block of step ``s``: rows of A in its own orientation (A's rows when
        trans_a = 0, the rows of k when 1), one descriptor."""
        g = self.g
        r0, r1 = self._block_rows(t, s)
        k0, k1 = self._k_range(t, s)
        base = lay.gsm_addrs[parity]
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

    def _b_share(self, t: GemmTiling, lay: GemmLayout, s: Step, col: tuple[int, int], parity: int,
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
        dst = lay.gsm_b_addrs[parity] + q0 * cols * self.isz
        return Transfer(whole.src + q0 * whole.src_strides[0], dst, (q1 - q0, cols), self.isz, whole.src_strides,
                        (cols * self.isz, self.isz))

    def _b_copy(self, t: GemmTiling, lay: GemmLayout, col: tuple[int, int], parity: int,
                k_range: tuple[int, int]) -> Transfer:
        """B staged in GSM: the whole B block from GSM buffer ``parity`` into the core's AM buffer ``parity``
        (dense rows in B's own orientation, as :meth:`_b_fill` leaves them)."""
        k0, k1 = k_range
        n0, n1 = col
        shape = (n1 - n0, k1 - k0) if self.g.trans_b else (k1 - k0, n1 - n0)
        return Transfer.contiguous(lay.gsm_b_addrs[parity], lay.b_addrs[parity], shape[0] * shape[1] * self.isz)

    def _b_fill(self, t: GemmTiling, lay: GemmLayout, s: Step, col: tuple[int, int], parity: int,
                k_range: tuple[int, int] | None = None) -> Transfer:
        """The B block of step ``s`` (columns ``col`` of op(B)) into AM buffer ``parity``, in B's own orientation
        ([k, n] rows, or [n, k] rows when trans_b: transposed in AM by the block's first tile)."""
        g = self.g
        k0, k1 = self._k_range(t, s) if k_range is None else k_range
        n0, n1 = col
        first_row, first_col, shape = ((n0, k0, (n1 - n0, k1 - k0)) if g.trans_b else (k0, n0, (k1 - k0, n1 - n0)))
        src = self.b.addr + (first_row * g.ldb + first_col) * self.isz
        return Transfer.block(src, lay.b_addrs[parity], shape, self.isz, (g.ldb * self.isz, self.isz))

    def _tile(self, t: GemmTiling, lay: GemmLayout, s: Step, col: tuple[int, int], rows: tuple[int, int],
              acc_row: int, slot: int, gsm_parity: int, b_parity: int, *, a_panel: int = 0, first: bool, last: bool,
              transpose_b: bool, k_range: tuple[int, int] | None = None,
              partial_to: tuple[int, int] | None = None) -> tuple[list[Transfer], Compute, list[Transfer]]:
        """One tile: an A micro-panel into SM, the micro-kernels over the B block, C's rows in AM (the NT
        reduction kernels: the panel into AM, in A panel buffer ``a_panel``, C's rows in SM).  ``k_range``:
        the depth it covers (default: step ``s``'s k block); ``partial_to``: (address, row pitch in bytes) where
        the last k block stores its fp32 partial rows instead of C (split k: no beta, no rounding)."""
        g, isz = self.g, self.isz
        beta = g.beta and partial_to is None
        r0, r1 = rows
        n0, n1 = col
        k0, k1 = self._k_range(t, s) if k_range is None else k_range
        pr, nc, kd = r1 - r0, n1 - n0, k1 - k0
        panel_shape = (kd, pr) if g.trans_a else (pr, kd)
        # The NT reduction kernels read A's panel as vectors (from AM) and add into C's rows in SM.
        nt_reduce = t.nt_reduces
        panel_at = lay.am.slot_addr(a_panel) if nt_reduce else lay.sm.slot_addr(slot) + lay.panel_offset_bytes
        panel = Operand(panel_at, panel_shape, self.dt)
        loads: list[Transfer] = []
        if self.shared:
            b_r0, b_r1 = self._block_rows(t, s)
            gbase = lay.gsm_addrs[gsm_parity]
            if g.trans_a:  # the block is [k, block rows]: the panel is a column band of it
                src = gbase + (r0 - b_r0) * isz
                loads.append(Transfer(src, panel_at, panel_shape, isz, ((b_r1 - b_r0) * isz, isz), (pr * isz, isz)))
            else:
                loads.append(Transfer(gbase + (r0 - b_r0) * kd * isz, panel_at, (pr * kd * isz,), 1, (1,), (1,)))
        else:
            first_row, first_col = (k0, r0) if g.trans_a else (r0, k0)
            loads.append(_rows(self.a.addr + (first_row * g.lda + first_col) * isz, panel_at, panel_shape, isz,
                               g.lda * isz, panel_shape[1] * isz))
        b_shape = (nc, kd) if g.trans_b else (kd, nc)
        bblock = Operand(lay.b_addrs[b_parity], b_shape, self.dt)
        # The core's C block: its rows of the GSM block, dense [rows, nc] fp32; this panel's rows of it.
        acc = Operand(lay.acc_addr + acc_row * nc * F32.itemsize, (pr, nc), F32)
        inputs = [panel, bblock]
        # (a tile takes at most one operand of its slot, below: the slot's allocator is made where it does)
        c_pitch = g.ldc * isz
        c_t = self.c_transposed
        # The tile's rows of C in memory: [pr, nc] at (r0, n0); a TT call's tile of Cᵀ is C's [nc, pr] at (n0, r0).
        c_shape = (nc, pr) if c_t else (pr, nc)
        c_at = self.c.addr + ((n0 * g.ldc + r0) if c_t else (r0 * g.ldc + n0)) * isz
        c_run = c_shape[1] * isz
        stores: list[Transfer] = []
        out_dtype = None
        c_in = c_out = False  # (C's rows transposed in AM on their way in, on their way out: a TT call's)
        if t.c_home == "ddr":
            # C streamed: the tile's rows of C come into its slot (unless this is the first k block and beta is
            # 0), take this k block and go back to memory, in place in the slot.
            rows_c = (lay.sm if nt_reduce else lay.am).slot(slot).operand(c_shape, self.dt)
            if not first or beta:
                loads.append(_rows(c_at, rows_c.addr, c_shape, isz, c_pitch, c_run))
                inputs.append(rows_c)
                c_in = c_t
            outputs: tuple[Operand, ...] = (rows_c,)
            stores.append(_rows(rows_c.addr, c_at, c_shape, isz, c_run, c_pitch))
            out_dtype = self.dt
            c_out = c_t
            # The tile adds the rows it loaded, if any (the micro-kernel loads them first); none from an AM block.
            beta, first = not first or beta, True
        elif first and beta:
            old = lay.am.slot(slot).operand(c_shape, self.dt)
            loads.append(_rows(c_at, old.addr, c_shape, isz, c_pitch, c_run))
            inputs.append(old)
            c_in = c_t
        elif not first:
            inputs.append(acc)
        if t.c_home == "am" and last:
            # The finished rows of C go to the tile's slot (rounded to fp16 for hp), not the C block: the slot is
            # not reused before its stores have landed, while the C block's rows are the next step's to write.
            out_dtype = self.dt if partial_to is None else F32
            out = (lay.am.slot(slot).operand(c_shape, out_dtype) if not (first and beta)
                   else Operand(inputs[-1].addr, c_shape, out_dtype))
            outputs = (out,)
            c_out = c_t
            if partial_to is None:
                stores.append(_rows(out.addr, c_at, c_shape, isz, c_run, c_pitch))
            else:
                stores.append(_rows(out.addr, partial_to[0], (pr, nc), 4, nc * 4, partial_to[1]))
        elif t.c_home == "am":
            outputs = (acc,)
        loops = self._tile_loops(t, pr, nc, kd, load_c=not first or beta, transpose_b=transpose_b,
                                 rounded=last and out_dtype != F32, c_in=c_in, c_out=c_out)
        flops = 2 * pr * nc * kd
        fn = TileFn(tile_product, (g.trans_a, g.trans_b, nc, first, beta, out_dtype, c_t))
        compute = Compute(fn, tuple(inputs), outputs, flops=flops, precision=self.prec,
                          loops=loops)
        return loads, compute, stores


def _rows(src: int, dst: int, shape: tuple[int, int], itemsize: int, src_pitch: int, dst_pitch: int) -> Transfer:
    """A block of ``shape`` (rows, elements) of ``itemsize`` bytes, rows ``src_pitch`` / ``dst_pitch`` bytes apart
    (``Transfer.block`` without its conversions: the values are ints already, and a plan makes thousands)."""
    return Transfer(src, dst, shape, itemsize, (src_pitch, itemsize), (dst_pitch, itemsize))


def _cut_rows(t: Transfer, pieces: int) -> list[Transfer]:
    """A 2-D descriptor cut into at most ``pieces`` descriptors of consecutive rows (dimension 0)."""
    if pieces <= 1 or len(t.shape) != 2 or t.shape[0] <= 1:
        return [t]
    out = []
    for a, b in split_even(t.shape[0], min(pieces, t.shape[0])):
        out.append(Transfer(t.src + a * t.src_strides[0], t.dst + a * t.dst_strides[0], (b - a, t.shape[1]),
                            t.itemsize, t.src_strides, t.dst_strides))
    return out

