"""The spatial split: the (image, output row) space over the cores, each core's partial dW exchanged through the
shared staging level and reduced by slices of rows (in rounds when the partials exceed the level's window)."""

from __future__ import annotations

from kernels.common.exchange import Exchange
from kernels.common.scratch import Scratch, align_up
from kernels.common.shares import core_shares
from kernels.common.split_reduce import SplitReduce
from kernels.common.streams import CoreStream, phase_of, plan_of
from kernels.conv2d_backprop_filter.layout import _Group, _Layout
from kernels.conv2d_backprop_filter.numerics import COMPUTE_PRECISION, F32
from kernels.conv2d_backprop_filter.tiles import _Tiles
from sim.model.plan import Phase, Plan


def share_stride(lay: _Layout, ocg: int) -> int:
    """Bytes of each active core's aligned share of the shared level (the stride of the exchange), checked to hold
    one aligned row of its partial dW (``ocg`` fp32 values): DoesNotFit naming the level (or the lack of one)
    when it cannot (:meth:`Exchange.through` of one aligned row per core, which says how many bytes it needs)."""
    parts = len(lay.active)
    stride = Exchange.share_bytes(lay.ctx, parts, lay.align)
    # A share is a whole number of alignments, so it holds a row exactly when it holds the row aligned up.
    row = align_up(ocg * F32.itemsize, lay.align) // F32.itemsize
    Exchange.through(lay.ctx, parts, row, F32, stride_bytes=stride,
                     what="partial filter gradients (one aligned row of dW each)")
    return stride


def _rounds(lay: _Layout, grp: _Group) -> tuple[SplitReduce, list[tuple[int, int]]]:
    """The reduction of a slice's partials (each core's part its aligned share of the shared level) and the row
    ranges of dW it moves per round (every core's rows of a round must fit its share)."""
    stride = share_stride(lay, grp.ocg)
    rounds = Exchange.rounds(lay.taps * grp.icg, stride // (grp.ocg * F32.itemsize))
    rows = max(b - a for a, b in rounds)
    exchange = Exchange.through(lay.ctx, len(lay.active), rows * grp.ocg, F32, stride_bytes=stride,
                                what="partial filter gradients")
    return SplitReduce(exchange), rounds


def _reduce(tiles: _Tiles, streams: dict[int, CoreStream], reduce: SplitReduce, grp: _Group, sc: Scratch,
            ma: int, mb: int) -> None:
    """Each core sums its share of rows [ma, mb) over every core's partial and stores it to ``output``."""
    lay = tiles.lay
    n = reduce.exchange.parts
    per = lay.rows_per_tile([grp.ocg * F32.itemsize] * n + [grp.ocg * lay.isz], mb - ma, sc.slot_bytes)
    for core, s0, s1 in reduce.slices(lay.active, mb - ma):
        stream = streams[core]
        for a in range(s0, s1, per):
            b = min(s1, a + per)
            arena = sc.slot(stream.slot)
            parts = arena.operand((n, b - a, grp.ocg), F32)
            dst = arena.operand((b - a, grp.ocg), lay.dt)
            reduce.reduce_into(stream, parts, dst, a * grp.ocg, tiles.rows_out(dst.addr, ma + a, ma + b, grp),
                               COMPUTE_PRECISION)


def spatial_plan(tiles: _Tiles, icg: int, ocg: int) -> Plan:
    """(image, row) space over the cores; partial dW exchanged through the shared level, reduced by slices."""
    lay = tiles.lay
    g = lay.geo
    sc = lay.scratch(icg, ocg)
    active = lay.active
    blocks = {core: lay.blocks(a, b, icg, ocg, sc) for core, a, b in core_shares(active, g.batch * g.out_h)}
    phases: list[Phase] = []
    # Tile ids run on over a core's phases.
    next_id = dict.fromkeys(lay.ctx.cores, 0)

    def streams() -> dict[int, CoreStream]:
        return {c: CoreStream(next_id[c]) for c in active}

    def phase(name: str, of: dict[int, CoreStream], barrier: bool = True) -> None:
        next_id.update({c: s.next_id for c, s in of.items()})
        phases.append(phase_of(name, of, barrier))

    for gi, grp in enumerate(lay.groups(icg, ocg)):
        accumulating = streams()
        micros = tiles.micros(grp, [blocks[core] for core in active])
        for core, core_micros in zip(active, micros):
            tiles.accumulate(accumulating[core], blocks[core], grp, sc, core_micros)
        if len(active) == 1:
            tiles.drain(accumulating[active[0]], grp, sc)
            phase(f"slice{gi}:accumulate", accumulating, barrier=False)
            continue
        reduce, rounds = _rounds(lay, grp)
        row_bytes = grp.ocg * F32.itemsize
        for ri, (ma, mb) in enumerate(rounds):
            # Each core stores rows [ma, mb) of its partial (contiguous in the accumulator) to its share.
            storing = accumulating if ri == 0 else streams()
            for j, core in enumerate(active):
                publish = reduce.publish(j, sc.fixed_base + ma * row_bytes, 0, (mb - ma) * grp.ocg)
                storing[core].add((), None, (publish,))
            phase(f"slice{gi}:partials{ri}", storing)
            reducing = streams()
            _reduce(tiles, reducing, reduce, grp, sc, ma, mb)
            # A barrier after the reduction too: the next round's partials overwrite the shared level it reads.
            phase(f"slice{gi}:reduce{ri}", reducing)
    return plan_of(lay.call, phases)
