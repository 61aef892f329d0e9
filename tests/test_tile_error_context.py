"""Every error raised while a tile runs names the kernel, the core, the tile and the phase.

A compute returning what its operand cannot hold (``ComputeOutputError``), a fault of the memory map found
while a tile runs (``MemoryFault``), and a kernel's own exception from its compute (a ``KernelCodeError`` whose
cause it is).  The ReluGrad example's plan is the kernel; its first tile's compute is replaced.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import re
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


def test_a_kernels_own_exception_is_a_kernel_code_error_naming_where_with_it_as_its_cause():
    """SPEC section 3: errors derive from sim.SimError.  A compute's own exception becomes a KernelCodeError naming
    the kernel, core, tile and phase and the line that raised it; the exception itself is its cause, traceback and
    all; memory is as it was."""
    def boom(dy: np.ndarray, x: np.ndarray) -> tuple[np.ndarray]:
        raise ZeroDivisionError("my bug")
    m = sim.Simulator("FT78NE")
    m.write(DY, np.ones(4096, np.float32))
    m.write(X, np.ones(4096, np.float32))
    before = m.read(DX, (4096,), np.float32).copy()
    with sim.registered_kernel(_kernel_whose_first_compute_is(boom)), pytest.raises(sim.KernelCodeError) as info:
        m.call("fp_broken_relu_grad_s", dy=DY, x=X, dx=DX, shape=[4096], core_mask=0x3,
               tiling={"tile_elements": 1024})
    err = info.value
    assert isinstance(err, sim.SimError) and isinstance(err.__cause__, ZeroDivisionError)
    assert (err.kernel, err.stage, err.core, err.tile, err.phase) == ("broken_relu_grad", "compute", 0, 0, "relu_grad")
    assert re.fullmatch(r"kernel 'broken_relu_grad', core 0, tile 0, phase 'relu_grad': its compute raised "
                        r"ZeroDivisionError: my bug at .*test_tile_error_context\.py:\d+ in boom", str(err)), str(err)
    assert np.array_equal(m.read(DX, (4096,), np.float32), before)


@pytest.mark.parametrize("stage", ["bind", "tiling_space", "plan"])
def test_an_exception_from_a_kernels_bind_space_or_plan_is_a_kernel_code_error(stage):
    """The kernel's other methods too: a bug in its bind, tiling_space or plan is a KernelCodeError naming the
    stage (never the search dropping the tilings that raise: the error surfaces)."""
    base = _kernel_whose_first_compute_is(lambda dy, x: (dy * x,))

    class Raising(type(base)):  # type: ignore[misc]
        pass

    def broken(self, *args, **kwargs):
        raise KeyError("oops")
    setattr(Raising, stage, broken)
    kernel = Raising()
    kernel.__dict__.update(base.__dict__)
    m = sim.Simulator("FT78NE")
    with sim.registered_kernel(kernel), pytest.raises(sim.KernelCodeError) as info:
        m.call("fp_broken_relu_grad_s", dy=DY, x=X, dx=DX, shape=[4096], core_mask=0x3)
    assert info.value.stage == stage and isinstance(info.value.__cause__, KeyError)
    assert str(info.value).startswith(f"kernel 'broken_relu_grad': its {stage} raised KeyError: 'oops' at ")


def test_a_memory_fault_in_a_tile_names_kernel_core_tile_phase_and_cycle():
    tile = sim.model.plan.Tile(7, (), None, ())
    fault = sim.MemoryFault.in_tile(sim.MemoryFault("DMA src [0x60000000, 0x60000100): unmapped"), 2, tile, 123)
    assert str(fault) == "core 2, tile 7, cycle 123: DMA src [0x60000000, 0x60000100): unmapped"
    located = fault.located("relu_grad", "relu_grad")
    assert str(located) == ("kernel 'relu_grad', core 2, tile 7, phase 'relu_grad', cycle 123: DMA src "
                            "[0x60000000, 0x60000100): unmapped")
    assert (located.core, located.tile, located.cycle, located.tile_object) == (2, 7, 123, tile)


RAISING_KERNEL = '''
import importlib.util, dataclasses
spec = importlib.util.spec_from_file_location("relu_grad_for_cli_errors", {example!r})
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)

def boom(dy, x):
    raise RuntimeError("boom from tile")

class Raising(module.ReluGrad):
    name = "raising_relu_grad"

    def plan(self, call, ctx):
        plan = super().plan(call, ctx)
        phase = plan.phases[0]
        first, *rest = phase.tiles[0]
        broken = dataclasses.replace(first, compute=dataclasses.replace(first.compute, fn=boom))
        tiles = {{**phase.tiles, 0: (broken, *rest)}}
        return dataclasses.replace(plan, phases=(dataclasses.replace(phase, tiles=tiles),))

KERNEL = Raising()
'''


def test_the_command_line_says_a_kernels_exception_in_one_line_naming_the_call(tmp_path, capsys):
    """`dspsim run` of a config, and of a program, whose kernel's compute raises: one line on stderr naming the
    kernel, the tile and the exception (and in a program the call and its starting cycle), exit 2."""
    from sim.cli import main
    (tmp_path / "raising.py").write_text(RAISING_KERNEL.format(example=str(EXAMPLE)))
    args = "{dy: 0xA0000000, x: 0xA1000000, dx: 0xA2000000, shape: [64, 256]}"
    (tmp_path / "rc.yaml").write_text(f"target: FT78NE\nsymbol: fp_raising_relu_grad_s\nkernels: [raising.py]\n"
                                      f"numerics: true\nargs: {args}\n")
    assert main(["run", str(tmp_path / "rc.yaml"), "--allow-kernels", "--out-dir", str(tmp_path / "o")]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert len(err) == 1 and "Traceback" not in err[0]
    assert re.search(r"dspsim: error: kernel 'raising_relu_grad', core 0, tile 0, phase '\w+': its compute raised "
                     r"RuntimeError: boom from tile at .*raising\.py:\d+ in boom$", err[0]), err[0]
    (tmp_path / "prog.yaml").write_text(
        "target: FT78NE\nkernels: [raising.py]\ntensors:\n"
        "  - {name: dy, shape: [64, 256], dtype: float32}\n  - {name: x, shape: [64, 256], dtype: float32}\n"
        "  - {name: g, shape: [64, 256], dtype: float32}\n"
        "data:\n  - {tensor: dy, random: {seed: 1}}\n  - {tensor: x, random: {seed: 2}}\n"
        "calls:\n  - {name: boom, symbol: fp_raising_relu_grad_s, args: {dy: dy, x: x, dx: g, shape: [64, 256]}}\n"
        "outputs: [{tensor: g}]\n")
    assert main(["run", str(tmp_path / "prog.yaml"), "--allow-kernels", "--out-dir", str(tmp_path / "p")]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert len(err) == 1 and re.search(r"prog\.yaml: call 'boom' \(fp_raising_relu_grad_s\), starting at cycle 0 of "
                                       r"the program: kernel 'raising_relu_grad', core 0, tile 0", err[0]), err


class _BadLen(list):
    def __len__(self):
        raise RuntimeError("len boom")


class _BadArray:
    def __array__(self, *args, **kwargs):
        raise RuntimeError("array boom")


class _NoSet(Exception):
    def __setattr__(self, name, value):
        raise AttributeError("read-only")


def _raise_no_set(dy, x):
    raise _NoSet("mine")


@pytest.mark.parametrize("fn, kind, words", [
    (lambda dy, x: _BadLen([dy]), RuntimeError, "len boom"),
    (lambda dy, x: [_BadArray()], RuntimeError, "array boom"),
    (_raise_no_set, _NoSet, "mine"),
])
def test_what_a_compute_returns_failing_is_the_kernels_code_too(fn, kind, words):
    """A result whose own methods raise (a sequence's length, an object's array conversion), or an exception that
    refuses new attributes: each a KernelCodeError naming the tile, the exception its cause, memory as before."""
    m = sim.Simulator("FT78NE")
    m.write(DY, np.ones(4096, np.float32))
    m.write(X, np.ones(4096, np.float32))
    before = m.memory.snapshot()
    with sim.registered_kernel(_kernel_whose_first_compute_is(fn)), pytest.raises(sim.KernelCodeError) as info:
        m.call("fp_broken_relu_grad_s", dy=DY, x=X, dx=DX, shape=[4096], core_mask=0x3,
               tiling={"tile_elements": 1024})
    assert isinstance(info.value.__cause__, kind) and words in str(info.value)
    assert (info.value.core, info.value.tile, info.value.phase) == (0, 0, "relu_grad")
    assert m.memory.snapshot() == before
