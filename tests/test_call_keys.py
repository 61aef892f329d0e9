"""The caches of plans and tiling choices key a bound call by its exact text (sim/model/call_key.py), not its repr:
numpy's repr shortens long arrays and rounds floats, so two calls that differ in a table a user kernel reads at
bind time could share a plan."""

from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path

import numpy as np

import sim
from sim.model.call_key import exact_text

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "relu_grad.py"
DY, X, DX, TABLE = 0xA0000000, 0xA0100000, 0xA0200000, 0xA0300000


def test_the_exact_text_tells_apart_what_repr_does_not():
    a = np.zeros(2000, np.float32)
    b = a.copy()
    b[1000] = 1
    assert repr(a) == repr(b) and exact_text(a) != exact_text(b)
    c = np.full(3, 1.0)
    d = c.copy()
    d[1] = 1.0 + 2 ** -40  # (printed to 8 digits: the same repr)
    assert repr(c) == repr(d) and exact_text(c) != exact_text(d)
    assert exact_text(0.0) != exact_text(-0.0) and exact_text(1) != exact_text(True)
    assert exact_text({"b": 1, "a": (2.5, None)}) == exact_text({"a": (2.5, None), "b": 1})


def test_a_call_whose_bind_time_table_differs_in_the_middle_gets_its_own_plan():
    """A user kernel scales its result by the middle element of a 2,000-float table it reads at bind time and
    keeps in the call's attributes: the second call, its table changed only there, computes with the new value."""
    spec = importlib.util.spec_from_file_location("relu_grad_for_call_keys", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    class Scaled(module.ReluGrad):
        name = "scaled_relu_grad"

        def bind(self, symbol, precision, variant, cores, args, read):
            call = super().bind(symbol, precision, variant, cores, args, read)
            return dataclasses.replace(call, attrs={"table": read(TABLE, (2000,), np.dtype(np.float32), "table")})

        def plan(self, call, ctx):
            plan = super().plan(call, ctx)
            gain = float(call.attrs["table"][1000])

            def scaled(t):
                if t.compute is None:
                    return t
                fn = t.compute.fn
                return dataclasses.replace(t, compute=dataclasses.replace(
                    t.compute, fn=lambda dy, x: tuple(r * np.float32(gain) for r in fn(dy, x))))
            return dataclasses.replace(plan, phases=tuple(dataclasses.replace(
                p, tiles={c: tuple(map(scaled, ts)) for c, ts in p.tiles.items()}) for p in plan.phases))

    m = sim.Simulator("FT78NE", tuning_cache=False)
    m.write(DY, np.ones(4096, np.float32))
    m.write(X, np.ones(4096, np.float32))
    with sim.registered_kernel(Scaled()):
        for gain in (2.0, 5.0):
            table = np.zeros(2000, np.float32)
            table[1000] = gain
            m.write(TABLE, table)
            m.call("fp_scaled_relu_grad_s", dy=DY, x=X, dx=DX, shape=[4096])
            assert m.read(DX, (1,), np.float32)[0] == gain


def test_a_kernel_object_changed_between_two_calls_plans_again():
    """A kernel's plan may read the kernel object's own attributes: changed between two identical calls (not
    registered again), the second call runs the new plan, and a new plan that breaks a rule is checked and
    refused, memory untouched (the caches once kept the old plan and skipped both)."""
    spec = importlib.util.spec_from_file_location("relu_grad_for_kernel_state", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    class Gained(module.ReluGrad):
        name = "gained_relu_grad"
        gain = 2.0
        scribble = False

        def plan(self, call, ctx):
            plan = super().plan(call, ctx)
            gain, dy = np.float32(self.gain), call.buffers[0]

            def changed(t):
                if t.compute is not None:
                    fn = t.compute.fn
                    t = dataclasses.replace(t, compute=dataclasses.replace(
                        t.compute, fn=lambda dy, x: tuple(r * gain for r in fn(dy, x))))
                if self.scribble and t.stores:  # the result written over the input dy too
                    s = t.stores[0]
                    t = dataclasses.replace(t, stores=t.stores + (dataclasses.replace(s, dst=dy.addr),))
                return t
            return dataclasses.replace(plan, phases=tuple(dataclasses.replace(
                p, tiles={c: tuple(map(changed, ts)) for c, ts in p.tiles.items()}) for p in plan.phases))

    m = sim.Simulator("FT78NE", tuning_cache=False)
    m.write(DY, np.ones(4096, np.float32))
    m.write(X, np.ones(4096, np.float32))
    kernel = Gained()
    with sim.registered_kernel(kernel):
        for gain in (2.0, 5.0):
            kernel.gain = gain
            m.call("fp_gained_relu_grad_s", dy=DY, x=X, dx=DX, shape=[4096])
            assert m.read(DX, (1,), np.float32)[0] == gain
        kernel.scribble = True
        before = m.memory.snapshot()
        try:
            m.call("fp_gained_relu_grad_s", dy=DY, x=X, dx=DX, shape=[4096])
        except sim.PlanError as e:
            assert e.rule == "input-written", e
        else:
            raise AssertionError("a plan writing the input ran")
        assert m.memory.snapshot() == before


def test_a_repeated_call_takes_its_remembered_choice_without_building_the_space_again(monkeypatch):
    from kernels.registry import lookup
    kernel = lookup("fp_gemm_s").kernel
    built = []
    space = type(kernel).tiling_space
    monkeypatch.setattr(type(kernel), "tiling_space",
                        lambda self, call, ctx: (built.append(1), space(self, call, ctx))[1])
    m = sim.Simulator("FT78NE", tuning_cache=False)
    args = dict(a=0x80000000, b=0x90000000, c=0xA0000000, m=64, n=64, k=64, numerics=False)
    first = m.call("fp_gemm_s", **args)
    asked = len(built)
    again = m.call("fp_gemm_s", **args)
    assert asked >= 1 and len(built) == asked and again.cycles == first.cycles
    m.call("fp_gemm_s", **{**args, "k": 128})  # (another call: its own space)
    assert len(built) > asked


def test_a_kernel_attribute_named_by_its_address_keys_no_tuning_cache_entry():
    """An attribute with a default repr (its address) gives a state the same within a process, which the disk's
    tuning cache never keys by (another process would give another text)."""
    from sim.model.call_key import kernel_state

    class Kernel:
        pass

    k = Kernel()
    k.helper = object()  # type: ignore[attr-defined]
    state = kernel_state(k)
    assert state.startswith("addressed:") and kernel_state(k) == state
    k.helper = 3  # type: ignore[attr-defined]
    assert not kernel_state(k).startswith(("addressed:", "unkeyed:"))
