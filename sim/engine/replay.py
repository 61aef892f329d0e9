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

A compute's step holds its function's whole argument list (a :class:`~sim.model.plan.TileFn`'s parameters then
the input views), so a replay calls the module-level function at once, and what it returned, when it is what a
tile function usually returns (a list or tuple of plain arrays of the output operands' dtypes and shapes), is
assigned to the output views as it is; anything else goes through :func:`~sim.engine.results.tile_results`'s own
check and conversion, and an exception raised by the function becomes the same
:class:`~sim.errors.KernelCodeError`.

Run without a progress callback (nothing looks at memory between two steps), the program leaves out the loads
whose bytes only computes read before a later step overwrites them all, and those computes read the same bytes at
the load's source (:mod:`sim.engine.forwarding`): the same results, one pass over the bytes fewer.

The call's journal (:meth:`AddressSpace.touch <sim.model.memory.AddressSpace.touch>`) saves each chunk's bytes
before the call first changes them, so that a failing call leaves memory as it was.  The program journals every
chunk its steps write before its first step, all at once: the bytes saved are the same (nothing has changed them
yet), a rolled-back call restores the same chunks, and the steps pay no journal look each.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from sim.engine import forwarding
from sim.engine.results import tile_results
from sim.model.plan import TileFn

if TYPE_CHECKING:
    from sim.engine.engine import Effect, Engine
    from sim.model.plan import Compute, Tile

#: Program steps: a planned copy, a compute through kept views, an effect taken the engine's own way, a report.
_COPY, _COMPUTE, _SLOW, _TICK = 0, 1, 2, 3


def replay(eng: Engine, effects: Sequence[Effect]) -> None:
    """Carry out ``effects`` (a run of ``eng``'s kind recorded them) on ``eng``'s memory, in order."""
    memory = eng.memory
    # (the effects are kept beside their program: while it is kept, their id names no other list)
    kept = memory.kept(("replay", id(effects)), lambda: (effects, *_program(eng, effects)))
    assert kept[0] is effects
    touch, tick = memory.touch, eng.on_tile
    for key, lo, hi in kept[3]:
        touch(key, lo, hi)
    # (without a progress callback, the program without its reports: a third of the steps of a plan of small tiles)
    for step in kept[1] if tick is not None else kept[2]:
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
        else:
            assert tick is not None  # (reports are left out of the program run without a callback)
            tick(*step[1])


def _program(eng: Engine, effects: Sequence[Effect]) -> tuple[list[tuple], list[tuple], list[tuple[int, int, int]]]:
    """The steps that carry out ``effects`` on ``eng``'s memory (views resolved once), the same without the progress
    reports, and the spans ``(store key, lo, hi)`` their copies and computes write, merged (the engine's own way
    journals its own)."""
    memory = eng.memory
    out: list[tuple] = []
    written: list[tuple[int, int, int]] = []
    # Per step but the reports: its accesses, the copy it is if of one run a side, whether a compute (forwarding)
    accesses: list[forwarding.Accesses] = []
    copies: list[tuple[int, int, int, int, int] | None] = []
    for effect in effects:
        if len(effect) == 4:
            t, _, src_key, dst_key = effect
            planned = memory.kept_copy_plan(src_key, t.src, dst_key, t.dst, t.shape, t.itemsize, t.src_strides,
                                            t.dst_strides)
            if planned is None:
                out.append((_SLOW, effect))
                accesses.append(None)
                copies.append(None)
            else:
                out.append((_COPY, *planned[:2]))
                written.append(planned[2:])
                src = (src_key, *t.span("src"))
                dense_dst = t.runs("dst")[0] == 1  # (a strided destination writes its runs, not its span)
                accesses.append(([src], [(*planned[2:], dense_dst)]))
                copies.append((*src, dst_key, planned[3]) if dense_dst and t.runs("src")[0] == 1 else None)
        elif len(effect) == 3:
            step, spans, read = _compute_step(eng, *effect)
            out.append(step)
            written.extend(spans)
            accesses.append((read, [(*span, True) for span in spans]) if step[0] == _COMPUTE else None)
            copies.append(None)
        else:
            out.append((_TICK, effect))
    quiet = [step for step in out if step[0] != _TICK]
    left_out, instead = forwarding.forwarded(accesses, copies, [step[0] == _COMPUTE for step in quiet])
    if left_out:
        def view_at(key: int, addr: int, like: np.ndarray) -> np.ndarray | None:
            return memory.kept_dense_views(key, addr, like.shape, like.dtype)[1]
        quiet = forwarding.apply(quiet, left_out, instead, view_at, lambda step: len(step[3] or ())) or quiet
    return out, quiet, _merged(written)


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


def _compute_step(eng: Engine, tile: Tile, core: int, cycle: int
                  ) -> tuple[tuple, list[tuple[int, int, int]], list[tuple[int, int, int]]]:
    """A compute's step, the spans its outputs write and those its inputs read: the compute's function and, when
    it is a :class:`TileFn`, its parameters; its whole argument list (those parameters, then the inputs' read-only
    views); its outputs' views, dtypes and shapes.  The engine's own way (no spans: it journals its own) if one of
    its operands spans pages of several runs."""
    c = tile.compute
    assert c is not None  # (a run records computes of tiles that have one)
    inputs = []
    read = []
    for op in c.inputs:
        key, n, _, _, frozen = eng.operand_view(core, tile, op, "compute operand", "read", cycle)
        if frozen is None:
            return (_SLOW, (tile, core, cycle)), [], []
        inputs.append(frozen)
        read.append((key, op.addr, op.addr + n))
    outputs = []  # (view, little-endian dtype, shape)
    spans = []
    for op in c.outputs:
        key, n, dt, view, _ = eng.operand_view(core, tile, op, "compute output", "write", cycle)
        if view is None:
            return (_SLOW, (tile, core, cycle)), [], []
        outputs.append((view, dt, tuple(op.shape)))
        spans.append((key, op.addr, op.addr + n))
    stated = c.fn
    params = stated.params if type(stated) is TileFn else None
    return (_COMPUTE, c, stated, params, (*(params or ()), *inputs), tuple(outputs), core, tile), spans, read


def _compute(c: Compute, stated: Any, params: tuple | None, args: tuple, outputs: tuple, core: int,
             tile: Tile) -> None:
    """One compute through its kept views, as :meth:`Engine.compute_numerics` runs it (its outputs journaled).

    ``args`` is the ``stated`` function's whole argument list: a :class:`TileFn`'s ``params`` (its module-level
    function is called at once, without the TileFn's own call in between), then the inputs' views.  A compute whose
    function is no longer the one the program was made of (another function, or TileFn parameters) is called
    through :func:`tile_results` as the engine calls it."""
    fn = c.fn
    if fn is not stated or (params is not None and fn.params is not params):
        results = tile_results(c, args[len(args) - len(c.inputs):], core, tile)
    else:
        try:
            returned = fn.fn(*args) if params is not None else fn(*args)
        except Exception as e:  # noqa: BLE001 (named as the engine names it, below)
            returned = _Raised(e)
        if type(returned) in (list, tuple) and len(returned) == len(outputs):
            for (_, dt, shape), r in zip(outputs, returned):
                if type(r) is not np.ndarray or r.dtype != dt or r.shape != shape:
                    break
            else:
                # (what tile_results passes as it is; a read-only result, a view of an input, copied as it copies
                # one before an earlier output's write can change it)
                if len(outputs) == 1:
                    outputs[0][0][...] = returned[0]
                else:
                    for (view, _, _), r in zip(outputs, [r if r.flags.writeable else r.copy() for r in returned]):
                        view[...] = r
                return
        # (a stand-in with the compute's outputs and a function giving back what was returned: all tile_results reads)
        results = tile_results(cast("Compute", _Returned(c, returned)), (), core, tile)
    for (view, dt, shape), value in zip(outputs, results):
        view[...] = np.asarray(value, dtype=dt).reshape(shape)


class _Raised:
    """An exception a tile function raised, kept to be raised again where :func:`tile_results` names it."""

    __slots__ = ("error",)

    def __init__(self, error: Exception):
        self.error = error


class _Returned:
    """A compute whose function, called again, gives back what the real one already returned (or raises what it
    raised): :func:`tile_results` checks it and names a failure exactly as it does for a call it makes itself."""

    __slots__ = ("outputs", "value")

    def __init__(self, c: Compute, value: Any):
        self.outputs, self.value = c.outputs, value

    def fn(self) -> Any:
        """What the compute's function returned, or its exception raised again."""
        if type(self.value) is _Raised:
            raise self.value.error
        return self.value
