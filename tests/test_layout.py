"""Layout rules (SPEC section 5, issue 4): one test per rule, messages, nearest legal addresses,
faults during a run and the rollback of memory after them."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import yaml

import sim
from kernels import batch_norm_grad
from kernels.common.loops import elementwise
from sim.engine.engine import Engine
from sim.engine.events import Recorder
from sim.inspect.layout_map import layout_map, layout_report
from sim.model.call import BoundCall, Buffer
from sim.model.layout import RULES, check_layout, nearest_legal_address
from sim.model.memory import AddressSpace
from sim.model.plan import Compute, Operand, Phase, Plan, Tile, Transfer

F32 = np.dtype(np.float32)
TARGETS = Path(__file__).resolve().parent.parent / "targets"

#: The library's shared example: batch 4, channel 64 (x, dy, dx 1 KiB each; vectors 256 bytes).
S = dict(x=0xA0000000, dy=0xB0000000, dx=0xA1000000,
         params=[0xC0000000, 0xD0000000, 0xE0000000, 0xB1000000, 0xC1000000, 4, 64, 1])
#: The library's private example on core 0: batch 4, channel 32.
P = dict(x=0x10000000, dy=0x10100000, dx=0x10200000,
         params=[0x10300000, 0x10400000, 0x10500000, 0x10600000, 0x10700000, 4, 32, 1])


def params(base: dict, **slots: int) -> dict:
    """``base`` with params slots replaced: params(S, p3=0xA0000000)."""
    p = list(base["params"])
    for k, v in slots.items():
        p[int(k[1:])] = v
    return {**base, "params": p}


def violations(symbol: str, args: dict, target: str | sim.Target = "FT78NE") -> list:
    m = sim.Simulator(target)
    return check_layout(m.bind(symbol, **args), m.target)


def only(vs: list, rule: str, buffer: str):
    assert [(v.rule, v.buffer) for v in vs] == [(rule, buffer)], [str(v) for v in vs]
    return vs[0]


def edited_target(tmp_path: Path, edit) -> sim.Target:
    """FT78NE with ``edit(doc)`` applied, loaded from a copy (the way a user makes a third chip)."""
    doc = yaml.safe_load((TARGETS / "FT78NE.yaml").read_text())
    edit(doc)
    p = tmp_path / "chip.yaml"
    p.write_text(yaml.safe_dump(doc))
    return sim.load_target(p)


def region_doc(doc: dict, name: str) -> dict:
    return next(r for r in doc["regions"] if r["name"] == name)


# --- one test per rule ----------------------------------------------------------------------------

def test_legal_examples_have_no_violation():
    assert violations("fp_batch_norm_grad_s", S) == []
    assert violations("fp_batch_norm_grad_p", {**P, "core": 3}) == []


def test_rule_mapped_unmapped_buffer():
    v = only(violations("fp_batch_norm_grad_s", {**S, "x": 0x60000000}), "mapped", "x")
    assert "[0x60000000, 0x60000400)" in str(v) and "unmapped (between gsm and ddr" in str(v)
    assert v.region is None and v.start == 0x60000000 and v.end == 0x60000400
    assert v.suggestion == 0x4027FC00  # gsm's last 1 KiB below the staging windows is nearer than ddr's base


def test_rule_inside_one_region_runs_past_the_end():
    v = only(violations("fp_batch_norm_grad_s", {**S, "x": 0xFFFFFF00}), "inside-one-region", "x")
    assert "runs past the end of region ddr [0x80000000, 0x100000000)" in str(v)
    assert v.suggestion == 0xFFFFFC00  # the last 1 KiB of ddr


def test_rule_not_scratchpad():
    v = only(violations("fp_batch_norm_grad_s", {**S, "dx": 0x20000000}), "not-scratchpad", "dx")
    assert "region am" in str(v) and "tile-staging scratchpad" in str(v)
    assert v.suggestion == 0x40000000  # gsm's base: the nearest shared storage


def test_rule_shared_memory_for_s_symbols():
    v = only(violations("fp_batch_norm_grad_s", params(S, p0=0x10000000)), "shared-memory", "mean")
    assert "region l2 (private)" in str(v) and "shared memory (gsm or ddr)" in str(v)


def test_rule_private_memory_for_p_symbols():
    v = only(violations("fp_batch_norm_grad_p", {**P, "dy": 0xB0000000, "core": 2}), "private-memory", "dy")
    assert "core 2's private memory (l2)" in str(v) and "region ddr (shared)" in str(v)
    assert v.suggestion is not None and 0x10000000 <= v.suggestion < 0x11000000


def test_rule_workspace_window_is_reserved():
    ws = sim.load_target("FT78NE").staging_level("gsm")
    lo, hi = ws.base, ws.end
    v = only(violations("fp_batch_norm_grad_s", {**S, "x": lo + 0x1000}), "workspace", "x")
    assert f"[{lo:#x}, {hi:#x})" in str(v)
    blocks = sim.load_target("FT78NE").staging_level("gsm_blocks")
    assert blocks.end == lo  # GEMM's block window sits right below it
    assert v.suggestion == blocks.base - 0x400  # just below both windows


def test_rule_alignment_element_size():
    v = only(violations("fp_batch_norm_grad_s", {**S, "dx": 0xA1000002}), "alignment", "dx")
    assert "multiple of 4 bytes, the element size (4 bytes of float32)" in str(v)
    assert v.suggestion == 0xA1000000


def test_rule_alignment_fp16_is_two_bytes():
    args = {**S, "x": 0xA0000002}
    assert violations("hp_batch_norm_grad_s", args, "MT7004") == []  # fp16 x: 2-byte aligned is enough
    assert violations("fp_batch_norm_grad_s", args, "MT7004")[0].rule == "alignment"


def test_rule_alignment_region_alignment_bytes(tmp_path):
    chip = edited_target(tmp_path, lambda d: region_doc(d, "ddr").update(alignment_bytes=128))
    assert violations("fp_batch_norm_grad_s", S, chip) == []
    v = only(violations("fp_batch_norm_grad_s", {**S, "x": 0xA0000040}, chip), "alignment", "x")
    assert "region ddr's alignment_bytes (128)" in str(v)
    assert v.suggestion == 0xA0000000  # 0x40 below beats 0x40 above: ties go down


def test_rule_no_overlap_output_over_input():
    v = only(violations("fp_batch_norm_grad_s", {**S, "dx": 0xA0000100}), "no-overlap", "dx")
    assert "output buffer 'dx' [0xa0000100, 0xa0000500) overlaps input buffer 'x' [0xa0000000, 0xa0000400)" \
        in str(v)
    assert v.suggestion == 0xA0000400  # right after x


def test_rule_no_overlap_output_over_output_via_params():
    vs = violations("fp_batch_norm_grad_s", params(S, p4=0xB1000080))  # dscale half over dbias
    v = only(vs, "no-overlap", "dscale")
    assert "'dbias' [0xb1000000, 0xb1000100)" in str(v) and v.suggestion == 0xB1000100


def test_inputs_may_alias():
    assert violations("fp_batch_norm_grad_s", {**S, "dy": S["x"]}) == []
    assert violations("fp_batch_norm_grad_s", params(S, p1=0xC0000000, p2=0xC0000000)) == []


def test_params_array_is_an_input_buffer():
    m = sim.Simulator("FT78NE")
    m.write(0xC2000000, np.array(S["params"] + [0] * 4, np.int64))
    call = m.bind("fp_batch_norm_grad_s", **{**S, "params": 0xC2000000})
    assert call.buffer("params").size_bytes == 96 and check_layout(call, m.target) == []
    # An output over the params array is refused like any other overlap.
    v = only(check_layout(m.bind("fp_batch_norm_grad_s", **{**S, "dx": 0xC1FFFF80, "params": 0xC2000000}),
                          m.target), "no-overlap", "dx")
    assert "'params' [0xc2000000, 0xc2000060)" in str(v)


def test_params_array_misaligned_refused_before_it_is_read():
    m = sim.Simulator("FT78NE")
    with pytest.raises(sim.LayoutError, match=r"layout rule 'alignment': buffer 'params' "
                                              r"\[0xc2000004, 0xc2000064\).*8 bytes.*nearest legal address: "
                                              r"0xc2000000"):
        m.call("fp_batch_norm_grad_s", **{**S, "params": 0xC2000004})


def test_params_array_of_p_call_must_be_private():
    m = sim.Simulator("FT78NE")
    m.write(0xC2000000, np.array(P["params"] + [0] * 4, np.int64))  # readable, but shared memory
    with pytest.raises(sim.LayoutError, match="layout rule 'private-memory': buffer 'params'"):
        m.call("fp_batch_norm_grad_p", **{**P, "params": 0xC2000000})


def test_pointers_inside_params_array_are_checked():
    m = sim.Simulator("FT78NE")
    m.write(0xC2000000, np.array(params(S, p0=0x60000000)["params"] + [0] * 4, np.int64))
    with pytest.raises(sim.LayoutError, match=r"rule 'mapped': buffer 'mean' \[0x60000000, 0x60000100\)"):
        m.call("fp_batch_norm_grad_s", **{**S, "params": 0xC2000000})


@pytest.mark.parametrize("mask", [0, 0x100, 0x1FF, -1, True, "0xff", 1.0])
def test_core_mask_inside_the_chip(mask):
    with pytest.raises(sim.KernelArgError, match="core_mask"):
        sim.Simulator("FT78NE").bind("fp_batch_norm_grad_s", **S, core_mask=mask)


def test_core_mask_subsets_are_fine():
    m = sim.Simulator("MT7004")
    assert m.bind("fp_batch_norm_grad_s", **S, core_mask=0b1010).cores == (1, 3)
    with pytest.raises(sim.KernelArgError, match=r"masks 0x1..0xf"):
        m.bind("fp_batch_norm_grad_s", **S, core_mask=0x10)


def test_rule_scratchpad_fit(tmp_path):
    # A 1 KiB staging scratchpad cannot hold even the per-channel vectors and sums of one vector of channels
    # (32 fp32 lanes) for the 4 cores sharing the batch: 4 bytes x (5 vectors + 2 sums x 4 cores) x 32 channels and
    # 8 alignments of 128 bytes, in the quarter of the level the rows plan gives them.
    chip = edited_target(tmp_path, lambda d: region_doc(d, "am").update(size_bytes=0x400))
    m = sim.Simulator(chip)
    before = m.memory.snapshot()
    with pytest.raises(sim.LayoutError) as info:
        m.call("fp_batch_norm_grad_s", **S)
    msg = str(info.value)
    assert "layout rule 'scratchpad-fit'" in msg and "am scratchpad [0x20000000, 0x20000400)" in msg
    assert "1024 bytes per core" in msg and "need 2688 bytes of 256" in msg
    assert info.value.violations[0].rule == "scratchpad-fit"
    assert m.memory.snapshot() == before


def test_every_rule_is_documented_and_exercised():
    # The rule ids the tests above use are exactly the documented ones.
    source = Path(__file__).read_text()
    for rule in RULES:
        assert f'"{rule}"' in source or f"'{rule}'" in source, rule


# --- messages and suggestions ------------------------------------------------------------------

BAD_CASES = [
    ("fp_batch_norm_grad_s", {**S, "x": 0x60000000}),
    ("fp_batch_norm_grad_s", {**S, "x": 0xFFFFFF00}),
    ("fp_batch_norm_grad_s", {**S, "dx": 0x20000000}),
    ("fp_batch_norm_grad_s", params(S, p0=0x10000000)),
    ("fp_batch_norm_grad_s", {**S, "x": 0x40590000}),
    ("fp_batch_norm_grad_s", {**S, "dx": 0xA1000002}),
    ("fp_batch_norm_grad_s", {**S, "dx": 0xA0000100}),
    ("fp_batch_norm_grad_s", params(S, p4=0xB1000080)),
    ("fp_batch_norm_grad_p", {**P, "dy": 0xB0000000}),
    ("fp_batch_norm_grad_p", {**P, "dx": 0x100FFFF0}),
]


@pytest.mark.parametrize("symbol,args", BAD_CASES)
def test_message_names_buffer_range_region_rule(symbol, args):
    vs = violations(symbol, args)
    assert vs
    for v in vs:
        text = str(v)
        assert f"'{v.buffer}'" in text
        assert f"[{v.start:#x}, {v.end:#x})" in text
        assert f"layout rule '{v.rule}'" in text and v.rule in RULES
        assert (f"region {v.region}" in text) if v.region else ("unmapped (between" in text)


@pytest.mark.parametrize("symbol,args", BAD_CASES)
def test_suggested_address_is_legal(symbol, args):
    m = sim.Simulator("FT78NE")
    call = m.bind(symbol, **args)
    for v in check_layout(call, m.target):
        assert v.suggestion is not None
        moved = tuple(Buffer(b.name, v.suggestion, b.shape, b.dtype, b.role) if b.name == v.buffer else b
                      for b in call.buffers)
        after = check_layout(BoundCall(call.symbol, call.precision, call.variant, call.cores, moved, call.attrs),
                             m.target)
        assert v.buffer not in {w.buffer for w in after}, [str(w) for w in after]


def test_no_suggestion_when_nothing_fits():
    t = sim.load_target("FT78NE")
    huge = Buffer("x", 0x80000000, (1 << 30,), np.dtype(np.float32), "input")  # 4 GiB: larger than any region
    assert nearest_legal_address(huge, "s", t) is None
    v = violations("fp_batch_norm_grad_p", params(P, p5=1 << 20))  # 4 MiB x, dy, dx in a 16 MiB l2 -> overlaps
    assert v and all(str(w).count("nearest legal address") <= 1 for w in v)


def test_nearest_legal_address_avoids_buffers_and_workspace():
    t = sim.load_target("FT78NE")
    b = Buffer("dx", 0xA0000000, (256,), F32, "output")
    other = Buffer("x", 0xA0000000, (256,), F32, "input")
    assert nearest_legal_address(b, "s", t, [other]) == 0x9FFFFC00  # 1 KiB below or above: ties go down
    assert nearest_legal_address(Buffer("dx", 0xA0000100, (256,), F32, "output"), "s", t, [other]) == 0xA0000400
    lo, hi = t.staging_level("gsm").base, t.staging_level("gsm").end
    below = t.staging_level("gsm_blocks").base  # GEMM's block window, right below the partial-results one
    inside = Buffer("w", lo + 16, (4,), F32, "input")
    assert nearest_legal_address(inside, "s", t) == below - 16
    near_top = Buffer("w", hi - 8, (4,), F32, "input")
    assert nearest_legal_address(near_top, "s", t) == below - 16  # above the windows gsm ends: only below is legal


# --- layout maps -------------------------------------------------------------------------------------

def test_layout_map_lists_buffers_in_address_order_with_gaps():
    m = sim.Simulator("FT78NE")
    call = m.bind("fp_batch_norm_grad_s", **S)
    text = layout_map(call, m.target)
    starts = [int(s, 16) for s in re.findall(r"^  (0x[0-9a-f]+)-0x[0-9a-f]+  [a-z]", text, re.M)]
    assert starts == sorted(starts) and len(starts) == 8
    assert "0xa0000000-0xa0000400  x                input         1024 B  float32[4, 64]" in text
    assert f"0xa0000400-0xa1000000  (gap {0xA1000000 - 0xA0000400} B, 16.0 MiB)" in text
    assert "(free 512 MiB)" in text


def test_layout_map_private_shows_owner_core():
    m = sim.Simulator("FT78NE")
    call = m.bind("fp_batch_norm_grad_p", **P, core=5)
    text = layout_map(call, m.target)
    assert "region l2 [0x10000000, 0x11000000) private, core 5's copy" in text
    rep = layout_report(call, m.target)
    assert {row["core"] for reg in rep["regions"] for row in reg["buffers"]} == {5}


def test_layout_report_marks_overlap_and_reserved_window():
    m = sim.Simulator("FT78NE")
    call = m.bind("fp_batch_norm_grad_s", **{**S, "x": 0x40000000, "dx": 0xA0000100})
    vs = check_layout(call, m.target)
    rep = layout_report(call, m.target, vs)
    gsm = next(r for r in rep["regions"] if r["name"] == "gsm")
    levels = [m.target.staging_level(n) for n in ("gsm", "gsm_blocks")]
    assert sorted(r["start"] for r in gsm["reserved"]) == sorted(lv.base for lv in levels)
    assert gsm["gaps"][-1]["end"] == levels[1].base  # free space stops at the windows
    assert rep["ok"] is True  # dx no longer overlaps x (moved to gsm)
    call = m.bind("fp_batch_norm_grad_s", **{**S, "dx": 0xA0000100})
    text = layout_map(call, m.target, check_layout(call, m.target))
    assert "^ overlaps the buffer above by 768 bytes" in text and "VIOLATION layout rule 'no-overlap'" in text


# --- faults during a run -------------------------------------------------------------------------------

def run_plan(tiles: tuple[Tile, ...], memory: AddressSpace | None = None, target: str = "FT78NE") -> int:
    t = sim.load_target(target)
    mem = memory or AddressSpace(t)
    plan = Plan(cores=(0,), phases=(Phase("hand-made", {0: tiles}, barrier_after=False),), precision="fp32")
    return Engine(t, mem, Recorder()).run(plan)


def test_dma_outside_the_map_faults_with_core_tile_cycle_address():
    good = Tile(0, (Transfer.contiguous(0xA0000000, 0x20000000, 256),), None, ())
    bad = Tile(1, (Transfer.contiguous(0x60000000, 0x20000100, 256),), None, ())
    assert run_plan((good,)) > 0
    with pytest.raises(sim.MemoryFault) as info:
        run_plan((good, bad))
    msg = str(info.value)
    assert re.search(r"core 0, tile 1, cycle \d+: DMA src \[0x60000000, 0x60000100\): unmapped", msg), msg


def test_dma_store_running_past_a_region_faults():
    t = Tile(7, (), None, (Transfer.contiguous(0x20000000, 0xFFFFFF80, 256),))
    with pytest.raises(sim.MemoryFault, match=r"core 0, tile 7, cycle \d+: DMA dst \[0xffffff80, 0x100000080\) "
                                              r"runs past the end of region ddr"):
        run_plan((t,))


def test_compute_operand_outside_the_map_faults():
    op_in = Operand(0x2FFFFF00, (64,), F32)  # between am and sm: unmapped
    c = Compute(lambda a: (a,), (op_in,), (Operand(0x20000000, (64,), F32),), flops=0, precision="fp32",
                loops=(elementwise(sim.load_target("FT78NE").core, "fp32", 64, loads=1, stores=1, label="copy"),))
    with pytest.raises(sim.MemoryFault, match=r"core 0, tile 3, cycle \d+: compute operand: read "
                                              r"\[0x2fffff00, 0x30000000\)"):
        run_plan((Tile(3, (), c, ()),))


def _faulting_plan(monkeypatch, fault: str):
    """Make batch_norm_grad's plan end with a phase that faults after its real tiles wrote memory."""
    real = type(batch_norm_grad.KERNEL).plan

    def plan(call, ctx):
        p = real(batch_norm_grad.KERNEL, call, ctx)
        core = call.cores[0]
        if fault == "dma":
            tile = Tile(999, (Transfer.contiguous(0x60000000, ctx.scratch_base, 64),), None, ())
        else:
            def boom(*_):
                raise ValueError("kernel bug")
            # No arithmetic and no outputs: a compute that needs no loop (the plan check lets it run; it raises).
            tile = Tile(999, (), Compute(boom, (), (), flops=0, precision="fp32"), ())
        return Plan(p.cores, p.phases + (Phase("boom", {core: (tile,)}, barrier_after=False),), p.precision)

    monkeypatch.setattr(batch_norm_grad.KERNEL, "plan", plan)


def _fill(m: sim.Simulator, args: dict, core: int | None) -> None:
    rng = np.random.default_rng(1)
    p = args["params"]
    batch, channel = p[5], p[6]
    m.write(args["x"], rng.standard_normal((batch, channel)).astype(np.float32), core=core)
    m.write(args["dy"], rng.standard_normal((batch, channel)).astype(np.float32), core=core)
    m.write(p[1], np.ones(channel, np.float32), core=core)
    m.write(p[2], np.ones(channel, np.float32), core=core)
    m.write(args["dx"], np.full((batch, channel), 7.0, np.float32), core=core)  # old output bytes to keep


# A DMA outside the map no longer runs at all: the plan check refuses the plan before the engine starts
# (sim/model/plan_check.py), so memory is untouched; a compute that raises still faults mid-run, after the real
# tiles wrote their outputs, and is rolled back.
@pytest.mark.parametrize("fault,err", [("dma", sim.PlanError), ("compute", sim.KernelCodeError)])
@pytest.mark.parametrize("symbol,args,core", [("fp_batch_norm_grad_s", S, None),
                                              ("fp_batch_norm_grad_p", {**P, "core": 2}, 2)])
def test_fault_mid_run_rolls_memory_back(monkeypatch, fault, err, symbol, args, core):
    # Without the fault the same call writes dx, dbias and dscale, so the rollback below undoes real writes.
    clean = sim.Simulator("FT78NE")
    _fill(clean, args, core)
    before_clean = clean.memory.snapshot()
    clean.call(symbol, **args)
    assert clean.memory.snapshot() != before_clean

    m = sim.Simulator("FT78NE")
    _fill(m, args, core)
    before = m.memory.snapshot()
    _faulting_plan(monkeypatch, fault)
    with pytest.raises(err) as info:
        m.call(symbol, **args)
    if fault == "dma":
        assert str(info.value).startswith(f"kernel 'batch_norm_grad', core {core or 0}, tile 999, phase 'boom': "
                                          f"breaks the plan rule 'transfer-unmapped': load 0 (64 bytes) reads "
                                          f"[0x60000000, 0x60000040): unmapped")
    else:  # the kernel's own exception, its cause
        assert isinstance(info.value.__cause__, ValueError) and "its compute raised ValueError: kernel bug" in \
            str(info.value)
    assert m.memory.snapshot() == before
    p = args["params"]
    assert (m.read(args["dx"], (p[5], p[6]), np.float32, core=core) == 7.0).all()
    # The simulator stays usable: the next (good) call runs and changes memory.
    monkeypatch.undo()
    m.clear_caches()  # the planner changed: plans of the old one must not be reused (documented way)
    m.call(symbol, **args)
    assert m.memory.snapshot() == clean.memory.snapshot()


def test_rollback_after_earlier_calls_restores_the_last_committed_bytes(monkeypatch):
    """The journal reuses its chunk buffers from call to call: a fault in the third call restores exactly
    what the second call left (not the first call's bytes, not zeros)."""
    m = sim.Simulator("FT78NE")
    _fill(m, S, None)
    m.call("fp_batch_norm_grad_s", **S)
    p = S["params"]
    x = m.read(S["x"], (p[5], p[6]), np.float32)
    m.write(S["x"], x * 2)  # the second call computes another dx
    m.call("fp_batch_norm_grad_s", **S)
    after_second = m.memory.snapshot()
    dx_second = m.read(S["dx"], (p[5], p[6]), np.float32)
    _faulting_plan(monkeypatch, "compute")
    m.clear_caches()  # the planner changed: plans of the old one must not be reused (documented way)
    with pytest.raises(sim.KernelCodeError, match="its compute raised ValueError: kernel bug"):
        m.call("fp_batch_norm_grad_s", **S)
    assert m.memory.snapshot() == after_second
    assert (m.read(S["dx"], (p[5], p[6]), np.float32) == dx_second).all()


# --- the README shows the real messages ---------------------------------------------------------

def _tiny_am(doc: dict) -> None:
    region_doc(doc, "am")["size_bytes"] = 0x400


def _aligned_ddr(doc: dict) -> None:
    region_doc(doc, "ddr")["alignment_bytes"] = 128


#: One example per refusal: (id, symbol, arguments, edit of FT78NE or None).  the README shows
#: each call and the message it gets; the test below re-runs them so the document cannot drift.
DOC_EXAMPLES = [
    ("mapped", "fp_batch_norm_grad_s", {**S, "x": 0x60000000}, None),
    ("inside-one-region", "fp_batch_norm_grad_s", {**S, "x": 0xFFFFFF00}, None),
    ("not-scratchpad", "fp_batch_norm_grad_s", {**S, "dx": 0x20000000}, None),
    ("shared-memory", "fp_batch_norm_grad_s", {**S, "x": 0x10000000}, None),
    ("private-memory", "fp_batch_norm_grad_p", {**P, "dy": 0xB0000000, "core": 2}, None),
    ("workspace", "fp_batch_norm_grad_s", {**S, "x": 0x40580000}, None),
    ("alignment", "fp_batch_norm_grad_s", {**S, "dx": 0xA1000002}, None),
    ("alignment-region", "fp_batch_norm_grad_s", {**S, "x": 0xA0000040}, _aligned_ddr),
    ("no-overlap", "fp_batch_norm_grad_s", {**S, "dx": 0xA0000100}, None),
    ("params-pointer", "fp_batch_norm_grad_s", params(S, p0=0x60000000), None),
    ("params-array", "fp_batch_norm_grad_s", {**S, "params": 0xC2000004}, None),
    ("core-mask", "fp_batch_norm_grad_s", {**S, "core_mask": 0x100}, None),
    ("scratchpad-fit", "fp_batch_norm_grad_s", S, _tiny_am),
]


def doc_example_message(tmp_path: Path, symbol: str, args: dict, edit) -> str:
    m = sim.Simulator(edited_target(tmp_path, edit) if edit else "FT78NE")
    with pytest.raises(sim.SimError) as info:
        m.call(symbol, **args)
    return f"{type(info.value).__name__}: {info.value}"


@pytest.mark.parametrize("rid,symbol,args,edit", DOC_EXAMPLES, ids=[e[0] for e in DOC_EXAMPLES])
def test_layout_rules_doc_shows_real_messages(tmp_path, rid, symbol, args, edit):
    doc = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    assert doc_example_message(tmp_path, symbol, args, edit) in doc


def test_layout_rules_doc_shows_real_fault_messages():
    doc = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    good = Tile(0, (Transfer.contiguous(0xA0000000, 0x20000000, 256),), None, ())
    bad = Tile(1, (Transfer.contiguous(0x60000000, 0x20000100, 256),), None, ())
    with pytest.raises(sim.MemoryFault) as info:
        run_plan((good, bad))
    shown = re.search(r"^MemoryFault: core 0, tile 1, cycle \d+: .*$", doc, re.M).group(0)
    assert re.sub(r"cycle \d+", "cycle N", shown) == re.sub(r"cycle \d+", "cycle N", f"MemoryFault: {info.value}")
    with pytest.raises(sim.MemoryFault) as info:
        sim.Simulator("FT78NE").read(0x10000000, 4, "float32")
    assert f"MemoryFault: {info.value}" in doc


def test_fit_violation_names_the_staging_level_the_signal_names_never_the_message():
    from sim.model.layout import fit_violation
    from sim.model.plan import DoesNotFit
    m = sim.Simulator("FT78NE")
    call = m.bind("fp_batch_norm_grad_s", **S)
    v = fit_violation(call, m.target, DoesNotFit("gsm", 4096, 1024, "the partial sums of 8 cores"))
    assert (v.rule, v.region, (v.start, v.end)) == ("scratchpad-fit", "gsm", (0x40580000, 0x40600000))
    v = fit_violation(call, m.target, DoesNotFit(None, 4096, 1024, "the workspace is not what overflowed"))
    assert (v.region, v.start) == ("am", 0x20000000)
    # A kernel's LayoutError counts against the per-core scratchpad, whatever its message says.
    v = fit_violation(call, m.target, sim.LayoutError("the workspace cannot hold the partial sums of 8 cores"))
    assert (v.region, v.start) == ("am", 0x20000000)


def test_a_tile_over_the_scratchpad_is_a_typed_does_not_fit():
    from kernels.common.scratch import Arena
    from sim.model.plan import DoesNotFit
    arena = Arena(0x20000000, 1024, 64)
    arena.alloc(1000)
    with pytest.raises(DoesNotFit) as info:
        arena.alloc(100)
    assert (info.value.resource, info.value.needed_bytes, info.value.available_bytes) == (None, 1124, 1024)
