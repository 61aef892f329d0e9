"""What a kernel author calls to check a kernel (docs/writing-a-kernel.md, "Testing a kernel").

* :func:`check_results`: the call run on a fresh simulator with its inputs placed, each output read back and
  compared with what a reference (numpy, TensorFlow's golden cases) gives; an AssertionError names the output,
  its worst element and the error there.
* :func:`check_tiling_space`: the property every kernel's tiling space has (the shipped kernels' own tests check
  it on drawn shapes): every candidate tiling the space offers plans legally (passes every rule of the plan
  check) or is refused as not fitting (a staging level it overflows, or the plan-size budget), never a
  ``PlanError`` or a foreign exception; a tiling's bound from the space never exceeds its plan's; and the search
  over the space chooses a plan or says that nothing fits.

Both go through the public API only, as a user's test does; hypothesis (or any generator) draws the shapes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from sim.errors import KernelArgError, LayoutError
from sim.inspect.run import Run
from sim.model.layout import enforce_layout
from sim.model.plan import DoesNotFit
from sim.model.target import Target
from sim.simulator import Simulator, find_symbol
from sim.startup import startup
from sim.timing import roofline, run_lower_bound_cycles, serial_compute_cycles
from sim.tuning import MAX_COMPLETIONS, MAX_PLAN_TILES, prefilter

#: ``pick(pool)``: the candidate tilings of a space to plan (the rest are only checked to be tilings of it).
Pick = Callable[[list[dict]], Sequence[dict]]


def spread(most: int = 6) -> Pick:
    """A pick of at most ``most`` candidates: the kernel's two preferred, its last, and others evenly between."""
    def pick(pool: list[dict]) -> list[dict]:
        if len(pool) <= most:
            return pool
        inner = pool[2:-1]
        step = max(1, len(inner) // max(1, most - 3))
        return pool[:2] + inner[::step][:most - 3] + [pool[-1]]
    return pick


def check_results(chip: str | Target, symbol: str, args: Mapping[str, Any], inputs: Sequence[tuple[int, np.ndarray]],
                  outputs: Mapping[str, tuple[int, tuple[int, ...], Any]], expected: Mapping[str, np.ndarray], *,
                  rtol: float = 1e-5, atol: float = 1e-6, tiling: Mapping[str, Any] | None = None) -> Run:
    """Run ``symbol`` with ``args`` on a fresh ``chip`` whose memory holds ``inputs`` (``(address, array)``: in the
    calling core's private memory for a ``_p`` symbol), read each of ``outputs`` (name -> ``(address, shape,
    dtype)``) and compare it with ``expected[name]`` (within ``rtol`` and ``atol``, as ``numpy.isclose``).

    Returns the run; raises AssertionError naming the output, the worst element and its error."""
    m = Simulator(chip, tuning_cache=False)
    core = int(args.get("core", 0)) if symbol.endswith("_p") else None
    for addr, array in inputs:
        m.write(addr, np.asarray(array), core=core)
    run = m.call(symbol, tiling=tiling, **args)
    for name, (addr, shape, dtype) in outputs.items():
        got = m.read(addr, shape, np.dtype(dtype), core=core).astype(np.float64)
        want = np.asarray(expected[name], dtype=np.float64)
        if got.shape != want.shape:
            raise AssertionError(f"{symbol} on {m.target.name}: output {name!r} has shape {got.shape}, the "
                                 f"reference {want.shape}")
        bad = ~np.isclose(got, want, rtol=rtol, atol=atol, equal_nan=True)
        if bad.any():
            err = np.where(bad, np.abs(got - want), 0)
            where = np.unravel_index(int(np.argmax(err)), got.shape)
            raise AssertionError(f"{symbol} on {m.target.name}: output {name!r} differs from the reference at "
                                 f"{int(bad.sum())} of {got.size} elements; worst at {tuple(int(i) for i in where)}: "
                                 f"{float(got[where])!r} against {float(want[where])!r} (rtol {rtol:g}, atol {atol:g})")
    return run


def check_tiling_space(chip: str | Target, symbol: str, args: Mapping[str, Any], pick: Pick | None = None) -> bool:
    """Assert the tiling-space property for one call (see the module's docstring); ``pick`` chooses which of the
    space's candidates are planned (default :func:`spread`).  Returns False, checking nothing, for a call the
    kernel or the memory map refuses (a bad shape or layout: no tiling to speak of), else True."""
    m = Simulator(chip, tuning_cache=False)
    try:
        call = m.bind(symbol, **args)
        enforce_layout(call, m.target)
    except (KernelArgError, LayoutError):
        return False
    kernel = find_symbol(symbol).kernel
    space = None
    if hasattr(kernel, "tiling_space"):
        try:
            space = kernel.tiling_space(call, m.context(call))
        except DoesNotFit:
            space = None  # nothing of the call fits at all: the search must say so below
    if space is not None:
        pool, _ = space.completions({}, MAX_COMPLETIONS)
        for t in pool:
            assert space.is_complete(t), (symbol, t)
            space.check(t)  # every candidate the space offers is a tiling the space itself accepts
        for t in (pick or spread())(pool):
            why = prefilter(space, t)
            if why is not None:
                assert isinstance(why, DoesNotFit) or "plans" in str(why) and "tiles" in str(why), (symbol, t, why)
                continue
            try:
                plan = m.plan_bound(call, t)  # planned as the search plans it, and checked by every plan rule
            except LayoutError as e:
                # The space's fit let it through; planning found the level it overflows.
                assert any(v.rule == "scratchpad-fit" for v in e.violations), (symbol, t, e)
                continue
            assert plan.tile_count <= MAX_PLAN_TILES, (symbol, t)
            if space.bound is not None:  # the bound from the tiling alone never exceeds the plan's own
                serial = serial_compute_cycles(plan, m.target)
                plan_bound = max(run_lower_bound_cycles(roofline(plan, m.target), m.target),
                                 m.target.launch_overhead_cycles + max(serial.values(), default=0),
                                 startup(plan, m.target).bound_cycles(serial))
                assert space.bound(t) <= plan_bound, (symbol, dict(args), t, space.bound(t), plan_bound)
    try:
        plan, choice = m.plan_bound_with_choice(call)
    except LayoutError as e:
        assert space is None or any(v.rule == "scratchpad-fit" for v in e.violations), (symbol, e)
        return True
    assert plan.tile_count >= 1 and (choice.tiling is None or choice.tiling in [c for c, _ in choice.candidates]
                                     or choice.source != "cost model")
    return True


__all__ = ["Pick", "spread", "check_results", "check_tiling_space"]
