"""Every error raised while a tile runs names the kernel, the core, the tile and the phase.

A compute returning what its operand cannot hold (``ComputeOutputError``), a fault of the memory map found
while a tile runs (``MemoryFault``), and a kernel's own exception from its compute (kept as it is: a note on it
says where it came from).  The ReluGrad example's plan is the kernel; its first tile's compute is replaced.
"""

from __future__ import annotations

import dataclasses
import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import sim

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "relu_grad.py"
DY, X, DX = 0xA0000000, 0xA0100000, 0xA0200000


def _relu_grad_class() -> Any:
    spec = importlib.util.spec_from_file_location("relu_grad_for_tile_errors", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.ReluGrad


def _kernel_whose_first_compute_is(fn: Callable[..., Any]) -> Any:
    """ReluGrad, named ``broken_relu_grad``, whose first tile of core 0 runs ``fn``."""
    base = _relu_grad_class()

    class Broken(base):  # type: ignore[misc, valid-type]
        name = "broken_relu_grad"

        def plan(self, call: Any, ctx: Any) -> Any:
            plan = super().plan(call, ctx)
            phase = plan.phases[0]
            first, *rest = phase.tiles[0]
            broken = dataclasses.replace(first, compute=dataclasses.replace(first.compute, fn=fn))
            tiles = {**phase.tiles, 0: (broken, *rest)}
            return dataclasses.replace(plan, phases=(dataclasses.replace(phase, tiles=tiles),))
    return Broken()


def _call(kernel: Any) -> None:
    m = sim.Simulator("FT78NE")
    m.write(DY, np.ones(4096, np.float32))
    m.write(X, np.ones(4096, np.float32))
    with sim.registered_kernel(kernel):
        m.call("fp_broken_relu_grad_s", dy=DY, x=X, dx=DX, shape=[4096], core_mask=0x3,
               tiling={"tile_elements": 1024})


def test_a_compute_of_the_wrong_shape_names_kernel_core_tile_and_phase():
    with pytest.raises(sim.ComputeOutputError) as info:
        _call(_kernel_whose_first_compute_is(lambda dy, x: (dy[:3],)))
    err = info.value
    assert (err.kernel, err.core, err.tile, err.phase) == ("broken_relu_grad", 0, 0, "relu_grad")
    assert str(err).startswith("kernel 'broken_relu_grad', core 0, tile 0, phase 'relu_grad': breaks the plan "
                               "rule 'compute-output': output 0 of shape (3,) does not fill operand (1024,)"), err


def test_a_kernels_own_exception_stays_as_it_is_with_a_note_naming_where():
    def boom(dy: np.ndarray, x: np.ndarray) -> tuple[np.ndarray]:
        raise ZeroDivisionError("my bug")
    with pytest.raises(ZeroDivisionError) as info:
        _call(_kernel_whose_first_compute_is(boom))
    assert str(info.value) == "my bug"
    assert getattr(info.value, "__notes__", []) == [
        "raised by the compute of kernel 'broken_relu_grad', core 0, tile 0, phase 'relu_grad'"]


def test_a_memory_fault_in_a_tile_names_kernel_core_tile_phase_and_cycle():
    tile = sim.model.plan.Tile(7, (), None, ())
    fault = sim.MemoryFault.in_tile(sim.MemoryFault("DMA src [0x60000000, 0x60000100): unmapped"), 2, tile, 123)
    assert str(fault) == "core 2, tile 7, cycle 123: DMA src [0x60000000, 0x60000100): unmapped"
    located = fault.located("relu_grad", "relu_grad")
    assert str(located) == ("kernel 'relu_grad', core 2, tile 7, phase 'relu_grad', cycle 123: DMA src "
                            "[0x60000000, 0x60000100): unmapped")
    assert (located.core, located.tile, located.cycle, located.tile_object) == (2, 7, 123, tile)
