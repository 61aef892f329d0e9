"""A recorded run's effects carried out again (a repeated call of a plan simulated before), through views prepared
once per memory.

A run records its effects on memory in order (:data:`sim.engine.engine.Effect`): each transfer's bytes moving, each
tile's compute, each progress report.  A repeated call of the same plan carries them out again on the bytes now in
memory.  Which bytes each copy and each compute operand moves through does not change between calls (the views a
memory keeps stay valid), so the first replay on a memory writes the effects down as a program of those views,
kept with the memory, and every replay runs the program: a copy journals its destination and assigns one view to
another; a compute calls its function on its inputs' read-only views, checks its results and writes each into its
output's view.  Exactly the operations, in exactly the order, of :meth:`Engine.copy_bytes
<sim.engine.engine.Engine.copy_bytes>` and :meth:`Engine.compute_numerics
<sim.engine.engine.Engine.compute_numerics>`, which an effect whose bytes span pages of several runs still takes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
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
    kept = memory.kept(("replay", id(effects)), lambda: (effects, _program(eng, effects)))
    assert kept[0] is effects
    touch, tick = memory.touch, eng.on_tile
    for step in kept[1]:
        kind = step[0]
        if kind == _COPY:
            _, src_view, dst_view, dst_key, lo, hi = step
            touch(dst_key, lo, hi)
            dst_view[...] = src_view  # numpy buffers the copy itself when source and destination overlap
        elif kind == _COMPUTE:
            _compute(touch, *step[1:])
        elif kind == _SLOW:
            effect = step[1]
            if len(effect) == 4:
                eng.copy_bytes(*effect)
            else:
                tile, core, cycle = effect
                eng.compute_numerics(core, tile, cycle)
        elif tick is not None:
            tick(*step[1])


def _program(eng: Engine, effects: Sequence[Effect]) -> list[tuple]:
    """The steps that carry out ``effects`` on ``eng``'s memory (views resolved once)."""
    memory = eng.memory
    out: list[tuple] = []
    for effect in effects:
        if len(effect) == 4:
            t, _, src_key, dst_key = effect
            planned = memory.kept_copy_plan(src_key, t.src, dst_key, t.dst, t.shape, t.itemsize, t.src_strides,
                                            t.dst_strides)
            out.append((_SLOW, effect) if planned is None else (_COPY, *planned))
        elif len(effect) == 3:
            out.append(_compute_step(eng, *effect))
        else:
            out.append((_TICK, effect))
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


def _compute(touch: Callable[[int, int, int], None], c: Any, inputs: tuple, outputs: tuple, core: int,
             tile: Any) -> None:
    """One compute through its kept views (as :meth:`Engine.compute_numerics` runs it)."""
    for (view, key, lo, hi, dt, shape), value in zip(outputs, tile_results(c, inputs, core, tile)):
        arr = np.asarray(value, dtype=dt)
        touch(key, lo, hi)
        view[...] = arr.reshape(shape)
