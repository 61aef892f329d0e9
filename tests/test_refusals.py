"""Refusals of issue 2: each a SimError subclass naming the argument, with memory unchanged afterwards."""

from pathlib import Path

import numpy as np
import pytest
import yaml

import sim

GOOD = dict(x=0xA0000000, dy=0xB0000000, dx=0xA1000000,
            params=[0xC0000000, 0xD0000000, 0xE0000000, 0xB1000000, 0xC1000000, 4, 64, 1])


def with_params(**changes):
    p = list(GOOD["params"])
    for i, v in changes.items():
        p[int(i[1:])] = v
    return {**GOOD, "params": p}


CASES = [
    ("unknown symbol", "fp_batch_norm_gard_s", GOOD, sim.KernelArgError, "fp_batch_norm_grad_s"),
    ("missing argument", "fp_batch_norm_grad_s", {k: v for k, v in GOOD.items() if k != "dy"},
     sim.KernelArgError, "'dy'"),
    ("extra argument", "fp_batch_norm_grad_s", {**GOOD, "eps": 1e-3}, sim.KernelArgError, "'eps'"),
    ("batch zero", "fp_batch_norm_grad_s", with_params(p5=0), sim.KernelArgError, "batch"),
    ("channel negative", "fp_batch_norm_grad_s", with_params(p6=-3), sim.KernelArgError, "channel"),
    ("is_train 2", "fp_batch_norm_grad_s", with_params(p7=2), sim.KernelArgError, "is_train"),
    ("params too short", "fp_batch_norm_grad_s", {**GOOD, "params": GOOD["params"][:7]}, sim.KernelArgError,
     "params"),
    ("pointer not an int", "fp_batch_norm_grad_s", {**GOOD, "x": "0xA0000000"}, sim.KernelArgError, "'x'"),
    ("hp on FT78NE", "hp_batch_norm_grad_s", GOOD, sim.KernelArgError, "fp16"),
    ("core_mask 0", "fp_batch_norm_grad_s", {**GOOD, "core_mask": 0}, sim.KernelArgError, "core_mask"),
    ("core_mask beyond chip", "fp_batch_norm_grad_s", {**GOOD, "core_mask": 0x1FF}, sim.KernelArgError,
     "core_mask"),
    ("core on _s", "fp_batch_norm_grad_s", {**GOOD, "core": 1}, sim.KernelArgError, "'core'"),
    ("unmapped buffer", "fp_batch_norm_grad_s", {**GOOD, "x": 0x60000000}, sim.LayoutError, "'x'"),
    ("misaligned buffer", "fp_batch_norm_grad_s", {**GOOD, "dx": 0xA1000002}, sim.LayoutError, "'dx'"),
    ("wrong kind of memory", "fp_batch_norm_grad_s", {**GOOD, "x": 0x10000000}, sim.LayoutError, "'x'"),
    ("overlapping output", "fp_batch_norm_grad_s", {**GOOD, "dx": 0xA0000100}, sim.LayoutError, "'dx'"),
    ("output over params pointer", "fp_batch_norm_grad_s", with_params(p3=0xA0000000), sim.LayoutError,
     "'dbias'"),
    ("staging scratchpad", "fp_batch_norm_grad_s", {**GOOD, "x": 0x20000000}, sim.LayoutError, "'x'"),
    ("private buffer on _p elsewhere", "fp_batch_norm_grad_p", GOOD, sim.LayoutError, "private"),
    ("core_mask on _p", "fp_batch_norm_grad_p", {**GOOD, "core_mask": 1}, sim.KernelArgError, "core_mask"),
    ("core beyond chip on _p", "fp_batch_norm_grad_p", {**GOOD, "core": 8}, sim.KernelArgError, "'core'"),
    ("params address unmapped", "fp_batch_norm_grad_s", {**GOOD, "params": 0x70000000}, sim.LayoutError,
     "params"),
]


@pytest.mark.parametrize("what,symbol,args,err,needle", CASES, ids=[c[0] for c in CASES])
def test_refusal_names_argument_and_leaves_memory(what, symbol, args, err, needle):
    m = sim.Simulator("FT78NE")
    rng = np.random.default_rng(0)
    m.write(0xA0000000, rng.standard_normal((4, 64)).astype(np.float32))
    m.write(0xA1000000, np.full((4, 64), 7.0, np.float32))
    m.write(0xB1000000, np.full(64, 3.0, np.float32))
    before = m.memory.snapshot()
    with pytest.raises(err) as info:
        m.call(symbol, **args)
    assert isinstance(info.value, sim.SimError)
    assert needle in str(info.value), str(info.value)
    assert m.memory.snapshot() == before


def test_layout_message_names_range_region_and_rule():
    m = sim.Simulator("FT78NE")
    with pytest.raises(sim.LayoutError) as info:
        m.call("fp_batch_norm_grad_s", **{**GOOD, "dx": 0xA1000002})
    msg = str(info.value)
    assert "[0xa1000002, 0xa1000402)" in msg and "region ddr" in msg and "multiple of 4" in msg
    assert "nearest legal address: 0xa1000000" in msg


def test_fault_during_run_rolls_back_memory():
    """A plan whose DMA leaves the map faults mid-run; bytes written before the fault are undone."""
    from sim.engine.engine import Engine
    from sim.engine.events import Recorder
    from sim.model.plan import Phase, Plan, Tile, Transfer
    m = sim.Simulator("FT78NE")
    m.write(0x80000000, np.arange(64, dtype=np.float32))
    before = m.memory.snapshot()
    am = m.target.region("am").base
    plan = Plan((0,), (Phase("p", {0: (
        Tile(0, (Transfer.contiguous(0x80000000, am, 256),), None, (Transfer.contiguous(am, 0x90000000, 256),)),
        Tile(1, (Transfer.contiguous(0x7FFFFF00, am + 4096, 512),), None, ()),
    )}),), "fp32")
    m.memory.begin()
    with pytest.raises(sim.MemoryFault) as info:
        Engine(m.target, m.memory, Recorder()).run(plan)
    m.memory.rollback()
    msg = str(info.value)
    assert "core 0" in msg and "tile 1" in msg and "cycle" in msg and "0x7fffff00" in msg
    assert m.memory.snapshot() == before


def test_memory_faults_of_read_and_write():
    m = sim.Simulator("FT78NE")
    with pytest.raises(sim.MemoryFault, match="unmapped"):
        m.write(0x00001000, np.zeros(4, np.float32))
    with pytest.raises(sim.MemoryFault, match="core="):
        m.read(0x10000000, (4,), np.float32)
    with pytest.raises(sim.MemoryFault, match="past the end"):
        m.read(0xFFFFFFFC, (2,), np.float32)


def test_bad_target_files(tmp_path):
    src = yaml.safe_load((Path(sim.model.target_loader.TARGETS_DIR) / "FT78NE.yaml").read_text())

    def bad(mutate, needle):
        doc = yaml.safe_load(yaml.safe_dump(src))
        mutate(doc)
        p = tmp_path / "chip.yaml"
        p.write_text(yaml.safe_dump(doc))
        with pytest.raises(sim.TargetError) as info:
            sim.load_target(p)
        assert str(p) in str(info.value) and needle in str(info.value), str(info.value)

    bad(lambda d: d.update(cores=0), "cores")
    bad(lambda d: d.update(turbo=True), "turbo")
    bad(lambda d: d.pop("clock_hz"), "clock_hz")
    bad(lambda d: d["core"]["precisions"]["fp32"].update(lanes="32"), "core.precisions.fp32.lanes")
    bad(lambda d: d["regions"][1].update(base=0x10000000), "overlaps")
    bad(lambda d: d["regions"][4].update(size_bytes=0x90000000), "address space")
    bad(lambda d: d["dma"].pop("source"), "dma.source")
    p = tmp_path / "evil.yaml"
    p.write_text("name: !!python/object/apply:os.system ['true']\n")
    with pytest.raises(sim.TargetError):
        sim.load_target(p)
    with pytest.raises(sim.TargetError, match="unknown target"):
        sim.load_target("FT99")
