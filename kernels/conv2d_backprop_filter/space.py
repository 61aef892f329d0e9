"""The tiling space of a call (its keys, the values worth trying, its fit and tile count) and the plan of a tiling."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kernels.base import PlanContext
from kernels.common.tiling_space import ChoiceKey, IntKey, TilingSpace, complete, padded_lanes
from kernels.conv2d_backprop_filter.filter_split import filter_plan
from kernels.conv2d_backprop_filter.layout import _Group, _Layout
from kernels.conv2d_backprop_filter.micro import A_OPERANDS, MICRO_M_ROWS, MICRO_N_VECTORS, MicroAsk
from kernels.conv2d_backprop_filter.spatial import share_stride, spatial_plan
from kernels.conv2d_backprop_filter.tiles import _Tiles
from sim.model.call import BoundCall
from sim.model.plan import DoesNotFit, Plan

#: The two ways to use the cores (the ``split`` key of a tiling).
SPLITS = ("spatial", "filter")
#: Row tiles shorter than this (positions) make the kernel also price halved out_c slices, at most this often.
LONG_TILE_POSITIONS = 256
MORE_OUT_C_CUTS = 2
#: Halvings of the preferred in_c slice also offered (fewer drain tiles per slice: a slice's accumulator drains
#: tap by tap and input channel by input channel, so wide filters of small images plan far fewer tiles).
MORE_IN_C_CUTS = 2


@dataclass(frozen=True)
class _Choice:
    """A way to plan the call: ``spatial`` or ``filter`` split, with filter slices of icg x ocg channels."""

    kind: str
    icg: int
    ocg: int

    def as_tiling(self) -> dict[str, Any]:
        """The choice as a ``tiling`` mapping."""
        return {"split": self.kind, "in_c_slice": self.icg, "out_c_slice": self.ocg}


class _Planner:
    """The candidate plans of one call: which fit, and how each is built."""

    def __init__(self, call: BoundCall, ctx: PlanContext):
        self.call, self.ctx = call, ctx
        self.lay = lay = _Layout(call, ctx)
        self.space = TilingSpace(
            ChoiceKey("split", SPLITS, "spatial: the (image, row) space over the cores, partials exchanged; "
                                       "filter: filter slices over the cores"),
            IntKey("in_c_slice", 1, lay.in_c, "input channels of a filter slice", values=self._in_c_options),
            IntKey("out_c_slice", 1, lay.out_c, "output channels of a filter slice", values=self._out_c_options),
            ChoiceKey("a_operand", A_OPERANDS, "where the micro-kernel reads A: window (the input window, tap by "
                                               "tap) or im2col (rows gathered per tile)", scope="compute"),
            IntKey("m_micro", 1, lay.taps * lay.in_c, "micro-kernel rows of dW (clipped to a tap's channels "
                                                      "with a_operand window)", scope="compute",
                   values=range(1, MICRO_M_ROWS + 1)),
            IntKey("n_micro", 1, lay.out_c, "micro-kernel columns of dW (output channels)", scope="compute",
                   values=[j * lay.lanes for j in range(1, MICRO_N_VECTORS + 1)]),
            fit=self._fit, tiles=self._tiles, bound=self._bound)
        asked = self.space.parse(ctx)
        self.asked = MicroAsk(asked["a_operand"], asked["m_micro"], asked["n_micro"])

    def plan(self) -> Plan:
        """The plan of the tiling (the first that fits in the space's order when the kernel is planned directly
        with a partial one)."""
        t = complete(self.space, self.ctx)
        return self.build(_Choice(t["split"], t["in_c_slice"], t["out_c_slice"]))

    def build(self, choice: _Choice) -> Plan:
        """The plan of ``choice``."""
        tiles = _Tiles(self.lay, self.asked)
        if choice.kind == "spatial":
            return spatial_plan(tiles, choice.icg, choice.ocg)
        return filter_plan(tiles, choice.icg, choice.ocg)

    def _in_c_options(self, tiling: Mapping[str, Any]) -> list[int]:
        """Input channels of a slice worth trying: those of the largest slices whose accumulator takes half the
        scratchpad (both sides shrunk together; preferred), of the largest whose accumulator leaves two one-row
        slots, and, where the accumulator cut the output channels, halvings of the first."""
        lay = self.lay
        out: list[int] = []
        for half in (True, False):
            fit = lay.fitting_slices(lay.in_c, lay.out_c, half)
            if fit is not None and fit[0] not in out:
                out.append(fit[0])
        preferred = lay.fitting_slices(lay.in_c, lay.out_c)
        if out and preferred is not None and preferred[1] < lay.out_c:
            # (the accumulator cut the output channels: fewer input channels a slice buy more of them back)
            icg = out[0]
            for _ in range(MORE_IN_C_CUTS):
                if icg <= 1:
                    break
                icg = lay.shrink(icg)
                if icg < (self.asked.m_micro or 0):
                    break  # (a slice that would clip the caller's micro-kernel rows: not a way to plan them)
                if icg not in out:
                    out.append(icg)
        if tiling["split"] == "filter" and out and preferred is not None:
            out += [icg for icg in self._even_in_c(preferred) if icg not in out]
        return out

    def _even_in_c(self, preferred: tuple[int, int]) -> list[int]:
        """With the filter split, input channels of a slice that cut them evenly: into as many slices as the
        preferred ones (the accumulator's cut, 100 + 100 + 56 of 256 as 86 + 86 + 84: the busiest slice no
        larger than it must be), and, where the preferred slices are fewer than the cores, into enough for every
        core to get one with the preferred output channels (33 x 48 on four cores: 9 + 9 + 9 + 6 input channels,
        55,264 cycles, against 12 output channels a slice, 119,173, which fills 12 of 32 lanes, or the spatial
        split, 77,100)."""
        lay = self.lay
        icg, ocg = preferred
        n_ic, n_oc = -(-lay.in_c // icg), -(-lay.out_c // ocg)
        parts = [n_ic]
        n = len(self.ctx.cores)
        if n_ic * n_oc < n:
            parts.append(-(-n // n_oc))
        # (a slice that would clip the caller's micro-kernel rows is no way to plan them: as for the halvings)
        return [even for p in parts if (self.asked.m_micro or 0) <= (even := -(-lay.in_c // min(p, lay.in_c))) < icg]

    def _out_c_options(self, tiling: Mapping[str, Any]) -> list[int]:
        """Output channels of a slice worth trying with ``tiling``'s split and in_c_slice: the largest that fit;
        with the filter split, finer cuts so that every core gets a slice (evenly, or on whole vectors) and, when
        many output channels leave short row tiles, halved slices (longer tiles, the input re-read once per
        slice: the micro-kernels load and store the accumulator once per tile)."""
        lay = self.lay
        icg = tiling["in_c_slice"]
        joint = lay.fitting_slices(lay.in_c, lay.out_c)
        ocg = joint[1] if joint is not None and joint[0] == icg else lay.fitting_out_c(icg)
        wider = lay.fitting_out_c(icg, half=False)  # (an accumulator past half the scratchpad, shorter row tiles)
        if ocg is None:
            ocg = wider
            if ocg is None:
                return [1]  # not one output channel fits with these input channels: the space's fit says by how much
        out = [ocg] + ([wider] if wider is not None and wider > ocg else [])
        if tiling["split"] != "filter":
            return out
        n = len(self.ctx.cores)
        n_ic = -(-lay.in_c // icg)
        if n > 1 and n_ic * -(-lay.out_c // ocg) < n:
            even = -(-lay.out_c // -(-n // n_ic))
            out += [o for o in sorted({even, padded_lanes(even, lay.lanes)}) if o < ocg]
        o = ocg
        for _ in range(MORE_OUT_C_CUTS):
            if o <= lay.lanes or self._tile_positions(icg, o) >= LONG_TILE_POSITIONS:
                break
            o = padded_lanes(-(-o // 2), lay.lanes)
            out.append(o)
        return out

    def _fit(self, tiling: Mapping[str, Any]) -> None:
        """The space's ``fit``: the accumulator and a one-row tile fit the scratchpad, and with the spatial split
        each core's partial dW rows fit its share of the shared level."""
        lay = self.lay
        icg, ocg = tiling["in_c_slice"], tiling["out_c_slice"]
        if not lay.slices_fit(icg, ocg, half=False)[1]:
            raise DoesNotFit(lay.level.name, lay.needed_bytes(icg, ocg), lay.level.size_bytes,
                             f"{self.call.symbol}: tiling in_c_slice={icg}, out_c_slice={ocg} does not fit the "
                             f"{lay.level.size_bytes}-byte {lay.level.name} scratchpad (the fp32 accumulator, "
                             f"then a one-row tile in each of the two slots left)")
        if tiling["split"] == "spatial" and len(lay.active) > 1:
            share_stride(lay, ocg)  # DoesNotFit when a core's share of the shared level holds no row of dW
        asked = MicroAsk(tiling.get("a_operand"), tiling.get("m_micro"), tiling.get("n_micro"))
        if asked.m_micro or asked.n_micro:
            # The caller's micro-kernel keys (a slice's widest group: the others only clip them further) must
            # leave a shape within the vector registers, or the planned tiles refuse them (a KernelArgError
            # naming the key): refused here, so that no "nearest that fit" names such a slice.
            loops = _Tiles(lay, asked).tile_loops(_Group(0, min(icg, lay.in_c), 0, min(ocg, lay.out_c)))
            loops.micros(asked)

    def _bound(self, tiling: Mapping[str, Any]) -> float:
        """The space's ``bound``: the product's multiply-adds at the FMAC peak (of the call's precision: no slower
        than the one the micro-kernels accumulate in) of the cores that get work (the spatial
        split: cores with an output row; the filter split: at most one a slice), the work shared evenly among them
        (a lower bound whatever the shares: the busiest core has at least the mean)."""
        lay, g = self.lay, self.lay.geo
        icg, ocg = tiling["in_c_slice"], tiling["out_c_slice"]
        if tiling["split"] == "spatial":
            busy = len(lay.active)
        else:
            busy = min(len(self.ctx.cores), -(-lay.in_c // icg) * -(-lay.out_c // ocg))
        flops = 2 * g.batch * g.out_h * g.out_w * lay.taps * lay.in_c * lay.out_c
        return self.ctx.flops_at_peak_cycles(flops, busy)

    def _tiles(self, tiling: Mapping[str, Any]) -> int:
        """The space's ``tiles``: row tiles of every slice over the whole input (each at least one output row)
        plus the drain and, spatially, the exchange and the reduction (upper bounds)."""
        lay, g = self.lay, self.lay.geo
        icg, ocg = tiling["in_c_slice"], tiling["out_c_slice"]
        slices = -(-lay.in_c // icg) * -(-lay.out_c // ocg)
        rows = g.batch * g.out_h
        cores = len(self.ctx.cores)
        if tiling["split"] == "spatial":
            return slices * (rows + cores * 2 * (lay.taps * icg + 2))
        return slices * (rows + lay.taps * icg + 2)

    def candidates(self) -> list[_Choice]:
        """The slices the space offers by default, each split (for tests and tools that list them)."""
        return [_Choice(t["split"], t["in_c_slice"], t["out_c_slice"]) for t in self.space.completions({}, 64)[0]]

    def _tile_positions(self, icg: int, ocg: int) -> int:
        """Positions of the longest row tile with slices of icg x ocg channels."""
        lay, g = self.lay, self.lay.geo
        blocks = lay.blocks(0, g.batch * g.out_h, icg, ocg, lay.scratch(icg, ocg))
        return max((b.n1 - b.n0) * (b.r1 - b.r0) for b in blocks) * g.out_w
