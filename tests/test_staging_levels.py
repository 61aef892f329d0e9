"""Staging levels as a list in the target schema (issue 13, item 7): what the shipped chips list, what plans
see of them, the layout rules over every level, and a copy of FT78NE with a per-core L1 under AM running a
shipped config.  The loader's refusals of broken levels are in tests/test_robustness.py (TARGET_CASES) and
tests/test_hostile_files.py (key paths, ranges, the old keys)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml
from markdown_blocks import blocks

import sim
from sim.cli import main
from sim.config.run_config import load_config
from sim.model.call import Buffer
from sim.model.layout import check_buffer, fit_violation, nearest_legal_address
from sim.model.plan import DoesNotFit
from sim.run.runner import execute
from sim.simulator import staging_areas

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
F32 = np.dtype(np.float32)
S = dict(x=0xA0000000, dy=0xB0000000, dx=0xA1000000,
         params=[0xC0000000, 0xD0000000, 0xE0000000, 0xB1000000, 0xC1000000, 4, 64, 1])



def readme_staging_blocks() -> tuple[dict, dict]:
    """The two yaml blocks of the README's 'Staging levels' section: FT78NE's staging block, and what a copy
    adds for a per-core L1 under AM."""
    text = README.read_text()
    start = text.index("\n## Staging levels\n")
    end = text.index("\n## ", start + 1)
    found = [yaml.safe_load(b.code) for b in blocks(README) if b.lang == "yaml"
             and start < text.index(b.code) < end]
    assert len(found) == 2
    return found[0], found[1]


def chip_copy(tmp_path: Path, edit, name: str = "chip.yaml") -> Path:
    """A copy of FT78NE.yaml with ``edit(doc)`` applied, written to ``tmp_path / name``."""
    doc = yaml.safe_load((ROOT / "targets" / "FT78NE.yaml").read_text())
    edit(doc)
    p = tmp_path / name
    p.write_text(yaml.safe_dump(doc, sort_keys=False))
    return p


def add_l1(doc: dict) -> None:
    """The README's recipe for a per-core L1 under AM: its region added, its staging levels taken."""
    _, l1 = readme_staging_blocks()
    doc["regions"] += l1["regions"]
    doc["staging"]["levels"] = l1["staging"]["levels"]


# --- the shipped chips ------------------------------------------------------------------------------

@pytest.mark.parametrize("chip,gsm_lo,am_size,blocks", [("FT78NE", 0x40580000, 0xC0000, (0x40280000, 0x300000)),
                                                         ("MT7004", 0x40380000, 0x80000, (0x40180000, 0x200000))])
def test_shipped_chips_list_gsm_window_am_and_sm_beside_it(chip, gsm_lo, am_size, blocks):
    """The windows are the ones the old ``workspace`` and ``staging_region`` keys gave (the top 512 KiB of
    GSM, the whole AM), so nothing moved; below the partial-results window, GEMM's blocks of A (gsm_blocks);
    SM is a level beside AM."""
    t = sim.load_target(chip)
    got = [(lv.name, lv.region, lv.base, lv.size_bytes, lv.shared, lv.beside) for lv in t.staging]
    assert got == [("gsm", "gsm", gsm_lo, 0x80000, True, None), ("gsm_blocks", "gsm", *blocks, True, None),
                   ("am", "am", 0x20000000, am_size, False, None), ("sm", "sm", 0x30000000, 0x10000, False, "am")]
    assert t.staging_level("gsm").end == t.region("gsm").end  # the top of GSM
    assert t.staging_level("gsm_blocks").end == gsm_lo  # right below it
    assert t.vector_level.name == "am" and [lv.name for lv in t.shared_levels] == ["gsm", "gsm_blocks"]


def test_the_readme_shows_the_shipped_staging_block():
    shown, _ = readme_staging_blocks()
    assert shown == {"staging": yaml.safe_load((ROOT / "targets" / "FT78NE.yaml").read_text())["staging"]}


def test_plans_see_the_levels_from_the_schema_sm_as_the_scalar_level():
    m = sim.Simulator("FT78NE")
    ctx = m.context(m.bind("fp_batch_norm_grad_s", **S))
    assert [a.name for a in ctx.levels] == ["gsm", "gsm_blocks", "am", "sm"]
    assert ctx.shared_level is not None and ctx.shared_level.name == "gsm"
    assert ctx.vector_level.name == "am" and ctx.scalar_level is not None and ctx.scalar_level.name == "sm"
    # The single-level view the kernels still read, derived from the levels.
    assert (ctx.scratch_base, ctx.scratch_size_bytes, ctx.alignment_bytes) == (0x20000000, 0xC0000, 128)
    assert (ctx.workspace_base, ctx.workspace_size_bytes) == (0x40580000, 0x80000)
    assert ctx.level("sm").alignment_bytes == 128  # allocations keep the vector width in every level


def test_a_private_level_is_the_whole_region_unless_offset_or_size_are_given(tmp_path):
    def edit(doc: dict) -> None:
        doc["staging"]["levels"][2].update(offset_bytes=0x1000)  # am from 4 KiB on: the rest of the region
        doc["staging"]["levels"][3].update(size_bytes=0x400)  # sm's first KiB
    t = sim.load_target(chip_copy(tmp_path, edit))
    assert (t.staging_level("am").base, t.staging_level("am").end) == (0x20001000, 0x200C0000)
    assert (t.staging_level("sm").base, t.staging_level("sm").end) == (0x30000000, 0x30000400)
    # A call buffer stays out of the whole scratchpad region, not just the level's window.
    b = Buffer("dx", 0x20000000, (4,), F32, "output")
    v = check_buffer(b, "s", None, t)
    assert v is not None and v.rule == "not-scratchpad"


# --- layout rules over every level ----------------------------------------------------------------------

def test_workspace_rule_covers_every_shared_window_naming_the_level(tmp_path):
    """A second shared level (a window of DDR) is out of bounds for call buffers like the workspace, with a
    message naming it; the nearest legal address steps over it; the first window keeps its words."""
    def edit(doc: dict) -> None:
        doc["staging"]["levels"].insert(1, {"name": "blocks", "region": "ddr", "offset_bytes": 0x20000000,
                                            "size_bytes": 0x10000})
    t = sim.load_target(chip_copy(tmp_path, edit))
    b = Buffer("x", 0xA0000400, (256,), F32, "input")
    v = check_buffer(b, "s", None, t)
    assert v is not None and (v.rule, v.region) == ("workspace", "ddr")
    assert v.message == ("buffer 'x' [0xa0000400, 0xa0000800) in region ddr overlaps [0xa0000000, 0xa0010000), "
                         "the window of ddr the kernels own as staging level blocks during a call")
    assert v.suggestion == 0x9FFFFC00  # just below the window (1 KiB buffer)
    assert nearest_legal_address(Buffer("x", 0xA000F000, (256,), F32, "input"), "s", t) == 0xA0010000
    g = check_buffer(Buffer("x", 0x40580000, (256,), F32, "input"), "s", None, t)
    assert g is not None and g.message.endswith("the window of gsm reserved for the kernels' cross-core partial "
                                                "results")


def test_not_scratchpad_covers_a_per_core_l1(tmp_path):
    t = sim.load_target(chip_copy(tmp_path, add_l1))
    v = check_buffer(Buffer("dx", 0x38000000, (16,), F32, "output"), "s", None, t)
    assert v is not None and v.rule == "not-scratchpad" and "l1 is the cores' tile-staging scratchpad" in v.message


def test_fit_violation_names_the_level_the_signal_names():
    m = sim.Simulator("FT78NE")
    call = m.bind("fp_batch_norm_grad_s", **S)
    v = fit_violation(call, m.target, DoesNotFit("sm", 70000, 65536))
    assert (v.rule, v.region, v.start, v.end) == ("scratchpad-fit", "sm", 0x30000000, 0x30010000)
    assert v.message == ("fp_batch_norm_grad_s: the kernel cannot tile this call into the staging memory, the am "
                         "scratchpad [0x20000000, 0x20000000 + 0xc0000) (786432 bytes per core), the gsm workspace "
                         "[0x40580000, 0x40600000) (524288 bytes) and the sm level [0x30000000, 0x30010000) (65536 "
                         "bytes per core): does not fit staging level sm: needs 70000 bytes of 65536"
                         ).replace("0x20000000 + 0xc0000", "0x200c0000")
    v = fit_violation(call, m.target, DoesNotFit("gsm", 4096, 1024))
    assert (v.region, v.start, v.end) == ("gsm", 0x40580000, 0x40600000) and "the sm level" not in v.message


# --- a chip with a per-core L1 under AM ---------------------------------------------------------------

def test_a_copy_of_ft78ne_with_an_l1_under_am_runs_a_shipped_config(tmp_path):
    """The README's recipe: add a scratchpad region and a level; a shipped config then runs on the copy
    (by `dspsim run` too), its compute operands live in the innermost level (l1), the old vector level (am)
    is left alone by today's single-stage kernels, and the results are FT78NE's."""
    chip_copy(tmp_path, add_l1, "ft78ne_l1.yaml")
    shipped = ROOT / "configs" / "ft78ne_conv2d_backprop_filter_s.yaml"
    text = shipped.read_text()
    assert "target: FT78NE\n" in text
    config = tmp_path / shipped.name
    config.write_text(text.replace("target: FT78NE\n", "target: ft78ne_l1.yaml\n"))
    cfg = load_config(config)
    m, run = execute(cfg)
    t = run.target
    l1 = t.staging_level("l1")
    ctx = m.context(run.call)
    assert [a.name for a in ctx.levels] == ["gsm", "gsm_blocks", "am", "l1", "sm"]
    assert (ctx.vector_level.name, ctx.scalar_level.name if ctx.scalar_level else None) == ("l1", "sm")
    tiles = [tile for phase in run.plan.phases for ts in phase.tiles.values() for tile in ts]
    operands = [o for tile in tiles if tile.compute for o in tile.compute.inputs + tile.compute.outputs]
    assert operands and all(l1.base <= o.addr and o.addr + o.size_bytes <= l1.end for o in operands)
    am = t.region("am")
    spans = [tr.span(side) for tile in tiles for tr in tile.loads + tile.stores for side in ("src", "dst")]
    assert not any(am.base <= lo < am.end for lo, _ in spans)
    m0, run0 = execute(load_config(shipped))
    for spec in cfg.outputs:  # the same sums, in another order (another tiling): fp32 rounding apart
        want = m0.read(spec.addr, spec.shape, spec.dtype)
        np.testing.assert_allclose(m.read(spec.addr, spec.shape, spec.dtype), want,
                                   rtol=1e-4, atol=1e-6 * float(np.abs(want).max()))
    assert main(["run", str(config), "--out-dir", str(tmp_path / "out")]) == 0


def test_a_chip_without_a_shared_level_refuses_an_exchange_as_a_fit_violation(tmp_path, capsys):
    """No shared level: calls that need no exchange run (conv2d falls back to its filter split, which exchanges
    nothing); a tiling that must exchange partial results across cores is refused with the scratchpad-fit rule,
    on one line, not a traceback."""
    path = chip_copy(tmp_path, lambda doc: doc["staging"]["levels"].__delitem__(slice(0, 2)))  # gsm, gsm_blocks
    t = sim.load_target(path)
    assert t.shared_levels == () and staging_areas(t)[0].name == "am"
    assert sim.Simulator(path).call("fp_batch_norm_grad_s", numerics=False, **S).cycles > 0
    args = {"input": 0x80000000, "out_backprop": 0x90000000, "output": 0xA0000000, "input_shape": [8, 28, 28, 64],
            "filter_sizes": [3, 3, 64, 64], "strides": [1, 1, 1, 1], "padding": "SAME"}
    run = sim.Simulator(path).call("fp_conv2d_backprop_filter_s", numerics=False, **args)
    assert run.tiling is not None and run.tiling.tiling["split"] == "filter"
    with pytest.raises(sim.LayoutError) as info:
        sim.Simulator(path).call("fp_conv2d_backprop_filter_s", numerics=False, tiling={"split": "spatial"}, **args)
    assert str(info.value).startswith("layout rule 'scratchpad-fit': fp_conv2d_backprop_filter_s: the kernel "
                                      "cannot tile this call into the staging memory, the am scratchpad")
    assert "has no shared staging level" in str(info.value)


@pytest.mark.parametrize("level,value,message", [
    (1, "yes", r"staging\.levels\[1\]\(gsm_blocks\)\.takes_free_bytes: expected true or false, got 'yes'"),
    (2, True, r"staging\.levels\[2\]\(am\)\.takes_free_bytes: only a level of a shared region takes the free "
              r"bytes of its region; am is per-core"),
])
def test_takes_free_bytes_is_a_flag_of_shared_levels(tmp_path, level, value, message):
    path = chip_copy(tmp_path, lambda doc: doc["staging"]["levels"][level].__setitem__("takes_free_bytes", value))
    with pytest.raises(sim.TargetError, match=message):
        sim.load_target(str(path))
