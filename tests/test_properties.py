"""SPEC section 6's timing properties across every kernel and both chips (timing-only runs).

Timing-only runs give the same cycles and trace as full runs (tests/test_timing_only.py), so the
properties are checked on them to keep this file fast.
"""

from pathlib import Path

import pytest
import yaml
from streams import assert_private_streams

import sim
from kernels.examples import KERNELS as EXAMPLE_KERNELS
from kernels.examples import scaled_args
from sim.model.target_loader import parse_target

ROOT = Path(__file__).resolve().parent.parent


def args_of(kernel: str, n: int, variant: str = "s", base: tuple | None = None) -> dict:
    """Arguments of ``kernel`` whose work grows linearly with ``n`` (the kernel's examples module says how)."""
    return scaled_args(kernel, n, variant, base)


KERNELS = list(EXAMPLE_KERNELS)
CHIPS = ["FT78NE", "MT7004"]


def timing(chip, kernel, n=1, variant="s", prefix="fp", **kw):
    where = {"core": 1} if variant == "p" else {}
    return sim.Simulator(chip).call(f"{prefix}_{kernel}_{variant}", numerics=False, **args_of(kernel, n, variant),
                                    **where, **kw)


def edited(chip: str, edit) -> sim.Target:
    doc = yaml.safe_load((ROOT / "targets" / f"{chip}.yaml").read_text())
    edit(doc)
    return parse_target(doc, f"{chip} (edited)")


def region_doc(doc: dict, name: str) -> dict:
    return next(r for r in doc["regions"] if r["name"] == name)


def test_the_property_table_covers_every_registered_kernel():
    import kernels
    assert {s.kernel.name for s in kernels.symbols()} == set(KERNELS)


@pytest.mark.parametrize("chip", CHIPS)
@pytest.mark.parametrize("kernel", KERNELS)
def test_deterministic_and_never_below_the_roofline(chip, kernel):
    a, b = timing(chip, kernel), timing(chip, kernel)
    assert a.cycles == b.cycles and a.events == b.events
    assert a.cycles >= a.roofline.cycles > 0
    p = timing(chip, kernel, variant="p")
    assert p.cycles >= p.roofline.cycles > 0


@pytest.mark.parametrize("kernel", KERNELS)
def test_hp_on_mt7004_is_never_below_its_roofline(kernel):
    run = timing("MT7004", kernel, prefix="hp")
    assert run.cycles >= run.roofline.cycles > 0


@pytest.mark.parametrize("chip", CHIPS)
@pytest.mark.parametrize("kernel", KERNELS)
def test_cycles_grow_about_linearly_with_the_work(chip, kernel):
    # Sizes past the point where a kernel's working set stops fitting its scratchpad (fused batch norm keeps
    # small tensors resident between its passes, and reads x and dy once while one channel of the whole batch
    # fits half the scratchpad: real steps in the cost, not a lack of linearity).
    n0 = 32 if kernel == "fused_batch_norm_grad" else 2
    one, two, four = (timing(chip, kernel, n).cycles for n in (n0, 2 * n0, 4 * n0))
    assert 1.6 < two / one < 2.4 and 1.6 < four / two < 2.4, (one, two, four)


def test_more_cores_help_compute_bound_kernels_far_more_than_bandwidth_bound_ones():
    def speedup(kernel):
        return timing("FT78NE", kernel, 4, core_mask=0x1).cycles / timing("FT78NE", kernel, 4, core_mask=0xFF).cycles
    conv = speedup("conv2d_backprop_filter")
    assert timing("FT78NE", "conv2d_backprop_filter", 4).roofline.bound_by == "compute"
    assert conv > 5
    for kernel in ("batch_norm_grad", "fused_batch_norm_grad", "fake_quant_with_min_max_vars_gradient"):
        run = timing("FT78NE", kernel, 4)
        assert run.roofline.bound_by == "ddr"
        # Eight cores share DDR's ports: they gain the ports one core's engines cannot hold (and, for fused
        # batch norm, shares small enough to stay in the scratchpad between passes), far less than compute.
        assert speedup(kernel) < 0.6 * conv


@pytest.mark.parametrize("chip", CHIPS)
@pytest.mark.parametrize("kernel", KERNELS)
def test_halving_ddr_bandwidth_slows_what_streams_from_ddr(chip, kernel):
    slow = edited(chip, lambda d: region_doc(d, "ddr").update(
        bandwidth_bytes_per_cycle=region_doc(d, "ddr")["bandwidth_bytes_per_cycle"] / 2))
    fast_run = timing(chip, kernel, 2)
    slow_run = sim.Simulator(slow).call(f"fp_{kernel}_s", numerics=False, **args_of(kernel, 2))
    assert slow_run.cycles > fast_run.cycles
    if fast_run.roofline.bound_by == "ddr":
        assert slow_run.cycles > 1.5 * fast_run.cycles


def test_gsm_bandwidth_matters_only_to_buffers_in_gsm():
    gsm = (0x40000000, 0x40040000, 0x40080000, 0x400C0000)  # below the staging windows (from 0x40280000)

    def run(target, base):
        return sim.Simulator(target).call("fp_batch_norm_grad_s", numerics=False,
                                          **args_of("batch_norm_grad", 1, base=base))
    half_gsm = edited("FT78NE", lambda d: region_doc(d, "gsm").update(
        bandwidth_bytes_per_cycle=region_doc(d, "gsm")["bandwidth_bytes_per_cycle"] / 2))
    half_ddr = edited("FT78NE", lambda d: region_doc(d, "ddr").update(
        bandwidth_bytes_per_cycle=region_doc(d, "ddr")["bandwidth_bytes_per_cycle"] / 2))
    base = run("FT78NE", gsm)
    assert run(half_gsm, gsm).cycles > 1.3 * base.cycles
    assert run(half_ddr, gsm).cycles == base.cycles  # nothing streams from DDR


@pytest.mark.parametrize("chip", CHIPS)
@pytest.mark.parametrize("kernel", KERNELS)
def test_private_runs_see_no_contention(chip, kernel):
    run = timing(chip, kernel, variant="p")
    assert_private_streams(run, 1)


@pytest.mark.parametrize("kernel", ["conv2d_backprop_filter", "fake_quant_with_min_max_vars_gradient"])
def test_a_barriers_cost_shows_in_the_trace_and_the_cycles(kernel):
    base = timing("FT78NE", kernel, 4)
    waits = [e for e in base.events if e.kind == "barrier_wait"]
    assert waits and all(e.end - e.start >= sim.load_target("FT78NE").barrier_latency_cycles for e in waits)
    phases = {e.phase for e in waits}
    extra = 5000
    slow = edited("FT78NE", lambda d: d["sync"].update(barrier_latency_cycles=d["sync"]["barrier_latency_cycles"]
                                                       + extra))
    slow_run = sim.Simulator(slow).call(f"fp_{kernel}_s", numerics=False, **args_of(kernel, 4))
    # Every barrier sits on the critical path once: each adds its extra latency.
    assert slow_run.cycles - base.cycles >= len(phases) * extra * 0.9
