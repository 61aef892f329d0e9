"""A recorded run's effects carried out again (a repeated call of a plan simulated before), through views prepared
once per memory.

A run records its effects on memory in order (:data:`sim.engine.engine.Effect`): each transfer's bytes moving, each
tile's compute, each progress report.  A repeated call of the same plan carries them out again on the bytes now in
memory.  Which bytes each copy and each compute operand moves through does not change between calls (the views a
memory keeps stay valid), so the first replay on a memory writes the effects down as a program of those views,
kept with the memory, and every replay runs the program: a copy assigns one view to another; a compute calls its
function on its inputs' read-only views, checks its results and writes each into its output's view.  Exactly the
operations, in exactly the order, of :meth:`Engine.copy_bytes <sim.engine.engine.Engine.copy_bytes>` and
:meth:`Engine.compute_numerics <sim.engine.engine.Engine.compute_numerics>`, which an effect whose bytes span pages
of several runs still takes.

The call's journal (:meth:`AddressSpace.touch <sim.model.memory.AddressSpace.touch>`) saves each chunk's bytes
before the call first changes them, so that a failing call leaves memory as it was.  The program journals every
chunk its steps write before its first step, all at once: the bytes saved are the same (nothing has changed them
yet), a rolled-back call restores the same chunks, and the steps pay no journal look each.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from sim.engine.results import tile_results

if TYPE_CHECKING:
    from sim.engine.engine import Effect, Engine

#: Program steps: a planned copy, a compute through kept views, an effect taken the engine's own way, a report.
_COPY, _COMPUTE, _SLOW, _TICK = 0, 1, 2, 3


def replay(eng: Engine, effects: Sequence[Effect]) -> None:
    """Carry out ``effects`` (a run of ``eng``'s kind recorded them) on ``eng``'s memory, in order."""
    memory = eng.memory
    # (the effects are kept beside their program: while it is kept, their id names no other list)
    kept = memory.kept(("replay", id(effects)), lambda: (effects, *_program(eng, effects)))
    assert kept[0] is effects
    touch, tick = memory.touch, eng.on_tile
    for key, lo, hi in kept[2]:
        touch(key, lo, hi)
    for step in kept[1]:
        kind = step[0]
        if kind == _COPY:
            step[2][...] = step[1]  # numpy buffers the copy itself when source and destination overlap
        elif kind == _COMPUTE:
            _compute(*step[1:])
        elif kind == _SLOW:
            effect = step[1]
            if len(effect) == 4:
                eng.copy_bytes(*effect)
            else:
                tile, core, cycle = effect
                eng.compute_numerics(core, tile, cycle)
        elif tick is not None:
            tick(*step[1])


def _program(eng: Engine, effects: Sequence[Effect]) -> tuple[list[tuple], list[tuple[int, int, int]]]:
    """The steps that carry out ``effects`` on ``eng``'s memory (views resolved once), and the spans ``(store key,
    lo, hi)`` their copies and computes write, merged (the engine's own way journals its own)."""
    memory = eng.memory
    out: list[tuple] = []
    written: list[tuple[int, int, int]] = []
    for effect in effects:
        if len(effect) == 4:
            t, _, src_key, dst_key = effect
            planned = memory.kept_copy_plan(src_key, t.src, dst_key, t.dst, t.shape, t.itemsize, t.src_strides,
                                            t.dst_strides)
            if planned is None:
                out.append((_SLOW, effect))
            else:
                out.append((_COPY, *planned[:2]))
                written.append(planned[2:])
        elif len(effect) == 3:
            step = _compute_step(eng, *effect)
            out.append(step)
            if step[0] == _COMPUTE:
                written.extend((key, lo, hi) for _, key, lo, hi, _, _ in step[3])
        else:
            out.append((_TICK, effect))
    return out, _merged(written)


def _merged(spans: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    """``spans`` of each store key merged where they overlap or meet."""
    out: list[tuple[int, int, int]] = []
    for key, lo, hi in sorted(spans):
        if out and out[-1][0] == key and lo <= out[-1][2]:
            if hi > out[-1][2]:
                out[-1] = (key, out[-1][1], hi)
        else:
            out.append((key, lo, hi))
    return out


def _compute_step(eng: Engine, tile: Any, core: int, cycle: int) -> tuple:
    """A compute's step: its inputs' read-only views and its outputs' views (the engine's own way if one of its
    operands spans pages of several runs)."""
    c = tile.compute
    inputs = []
    for op in c.inputs:
        _, _, _, _, frozen = eng.operand_view(core, tile, op, "compute operand", "read", cycle)
        if frozen is None:
            return _SLOW, (tile, core, cycle)
        inputs.append(frozen)
    outputs = []  # (view, store key, lo, hi, little-endian dtype, shape)
    for op in c.outputs:
        key, n, dt, view, _ = eng.operand_view(core, tile, op, "compute output", "write", cycle)
        if view is None:
            return _SLOW, (tile, core, cycle)
        outputs.append((view, key, op.addr, op.addr + n, dt, tuple(op.shape)))
    return _COMPUTE, c, tuple(inputs), tuple(outputs), core, tile


def _compute(c: Any, inputs: tuple, outputs: tuple, core: int, tile: Any) -> None:
    """One compute through its kept views (as :meth:`Engine.compute_numerics` runs it, its outputs journaled)."""
    for (view, _, _, _, dt, shape), value in zip(outputs, tile_results(c, inputs, core, tile)):
        view[...] = np.asarray(value, dtype=dt).reshape(shape)
