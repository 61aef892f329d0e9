"""Where a GEMM tiling's buffers live in the staging levels (:class:`GemmLayout`), and whether it fits."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kernels.common.exchange import Exchange
from kernels.common.scratch import Scratch, align_up
from kernels.common.shares import ceil_div
from kernels.gemm.constants import F32, NT_A_PANELS, GemmTiling
from kernels.gemm.state import GemmCall
from sim.model.plan import DoesNotFit


@dataclass(frozen=True)
class GemmLayout:
    """Where a tiling's staged buffers live: AM's fixed area (the C block, two B blocks) and its C-tile slots, the
    A micro-panels' slots (SM, or beside the C tiles in AM), the GSM blocks of A and of B, split k's exchange."""

    acc_addr: int  # the core's C block (fp32) in AM
    b_addrs: tuple[int, int]  # the two B blocks in AM
    am: Scratch  # fixed area + the C-tile slots
    sm: Scratch  # the A micro-panels' slots (``am`` itself without a scalar level)
    panel_offset_bytes: int  # where a panel starts in its slot (after the C tile when it shares AM's slot)
    gsm_addrs: tuple[int, ...] = ()  # the GSM blocks of A (one or two; none unless staged)
    gsm_b_addrs: tuple[int, int] = (0, 0)  # the GSM blocks of B (b_staging gsm)
    exchange: Exchange | None = None  # split k: the cores' partial C blocks


class GemmLayouts(GemmCall):
    """The layout of a tiling's staging levels, and the space's ``fit`` and ``tiles`` that follow from it."""

    def _fit(self, tiling: Mapping[str, Any]) -> None:
        """The space's ``fit``: the keys go together and the staging levels take the tiling's buffers."""
        self.layout(self.resolve(tiling))

    def _tiles(self, tiling: Mapping[str, Any]) -> int:
        """The space's ``tiles``: at most the tiles the tiling plans on all cores, counted without building them
        (per core and step: its panels' tiles and as many staging pieces; split k: the reduce tiles too)."""
        g, t = self.g, self._tiling_of(tiling)
        cores = len(self.ctx.cores)
        n_mb, n_kb = -(-g.m // t.m_block), -(-g.k // t.k_block)
        panels = -(-min(t.m_block, g.m) // t.m_panel)
        if t.split == "n":
            width = ceil_div(ceil_div(g.n, t.n_micro), cores) * t.n_micro  # the widest core's share
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

    def layout(self, t: GemmTiling) -> GemmLayout:
        """Addresses of the staged buffers and slots; DoesNotFit naming the level that is too small."""
        self._a_staged = t.a_staging == "gsm"
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
        if t.nt_reduces:
            return self._nt_layout(t, fixed, slots, b_bytes)
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
        gsm, gsm_b = self._gsm_layout(t)
        return GemmLayout(am.fixed_base, (b0, b0 + b_bytes), am, sm, 0 if self.sm is not None else tile_c_bytes,
                          gsm, gsm_b, self._exchange_layout(t) if t.split == "k" else None)

    def _nt_layout(self, t: GemmTiling, fixed: int, slots: int, b_bytes: int) -> GemmLayout:
        """The NT reduction kernels' layout: AM holds the two B blocks and two A panels (one where a core has one
        tile in flight; both read as vectors;
        tile j's panel goes where tile j - 2's was: the walk issues tile j's loads once tile j - 2 has computed,
        and a tile's stores, in flight meanwhile, are of C: the published (2 x M_S + 2 x N_A) x K_A); SM holds,
        per slot, the tile's rows of C (the reduction adds into them from the scalar side; C triple-buffered)."""
        assert self.sm is not None  # (the kernel is offered only with a scalar level)
        pr, ncols, kdepth = min(t.m_panel, self.g.m), min(t.n_block, self.g.n), min(t.k_block, self.g.k)
        panel_bytes = align_up(pr * kdepth * self.isz, self.am.alignment_bytes)
        panels = min(NT_A_PANELS, slots)  # (one tile in flight: one panel, as before)
        if fixed + panels * panel_bytes > self.am.size_bytes:
            raise DoesNotFit(self.am.name, fixed + panels * panel_bytes, self.am.size_bytes,
                             f"{self.call.symbol}: two B blocks of {ncols}x{kdepth} and {panels} A panels of "
                             f"{pr}x{kdepth} do not fit the {self.am.size_bytes}-byte {self.am.name} level")
        c_bytes = align_up(pr * ncols * F32.itemsize, self.sm.alignment_bytes)
        if slots * c_bytes > self.sm.size_bytes:
            raise DoesNotFit(self.sm.name, slots * c_bytes, self.sm.size_bytes,
                             f"{self.call.symbol}: {slots} tiles' rows of C ({pr}x{ncols} fp32 each) do not fit the "
                             f"{self.sm.size_bytes}-byte {self.sm.name} level")
        am = Scratch(self.am, fixed, slots=panels, slot_bytes=panel_bytes)
        sm = Scratch(self.sm, 0, slots=slots, slot_bytes=c_bytes)
        gsm, gsm_b = self._gsm_layout(t)
        return GemmLayout(am.fixed_base, (am.fixed_base, am.fixed_base + b_bytes), am, sm, 0, gsm, gsm_b)

    def _gsm_layout(self, t: GemmTiling) -> tuple[tuple[int, ...], tuple[int, int]]:
        """The GSM blocks of A (one or two; none unless staged) and of B (b_staging gsm)."""
        kdepth, ncols = min(t.k_block, self.g.k), min(t.n_block, self.g.n)
        gsm: tuple[int, ...] = ()
        gsm_b = (0, 0)
        if self.shared or t.b_staging == "gsm":
            level = self.blocks_level
            block = align_up(min(t.m_block, self.g.m) * kdepth * self.isz, level.alignment_bytes) \
                if self.shared else 0
            count = t.a_buffers if self.shared else 0
            b_block = align_up(kdepth * ncols * self.isz, level.alignment_bytes) if t.b_staging == "gsm" else 0
            if count * block + 2 * b_block > level.size_bytes:
                with_b = f" and two B blocks of {kdepth}x{ncols}" if b_block else ""
                raise DoesNotFit(level.name, count * block + 2 * b_block, level.size_bytes,
                                 f"{self.call.symbol}: {count} A block(s) of {min(t.m_block, self.g.m)}x{kdepth} "
                                 f"({block} bytes each){with_b} do not fit the {level.size_bytes}-byte {level.name} "
                                 f"staging window")
            gsm = (level.base, level.base + block)[:count]
            b_base = level.base + count * block
            gsm_b = (b_base, b_base + b_block)
        return gsm, gsm_b

    def _exchange_layout(self, t: GemmTiling) -> Exchange:
        """Split k: the exchange of the cores' fp32 partial C blocks through the largest shared level, each core an
        aligned share of it; DoesNotFit when a core's partial does not fit its share."""
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
        return Exchange(level, parts, self.g.m * self.g.n, F32, stride, self.core)
