"""The target's ``core:`` block (docs/timing-model.md, "The core"): functional units, issue widths, registers and
lanes, loaded as the shipped files say, and every broken or outdated core refused naming its key path."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

import kernels
import sim
from sim.model.target_loader import parse_target

ROOT = Path(__file__).resolve().parent.parent
FT78NE = yaml.safe_load((ROOT / "targets" / "FT78NE.yaml").read_text())
MT7004 = yaml.safe_load((ROOT / "targets" / "MT7004.yaml").read_text())


def test_the_shipped_cores_are_the_published_units():
    """FT78NE as chip-facts gives the FT-M7032 core: 5 scalar + 6 vector issues, 64 vector registers, 3 FMACs
    (latency 6), two vector load/store units moving two 128-byte vectors per issue (latency 9), one scalar load
    unit (8 B, latency 7), two broadcasts on the scalar side (latency 4)."""
    core = sim.load_target("FT78NE").core
    assert dict(core.issue_width) == {"scalar": 5, "vector": 6}
    assert core.vector_registers == 64 and core.vector_width_bytes == 128
    units = {n: (u.count, u.issue_class, u.latency_cycles, u.bytes_per_issue) for n, u in core.units.items()}
    assert units == {"fmac": (3, "vector", 6, 0), "valu": (1, "vector", 2, 0), "vls": (2, "vector", 9, 256),
                     "broadcast": (2, "scalar", 4, 0), "sload": (1, "scalar", 7, 8), "salu": (3, "scalar", 1, 0)}
    assert (core.loop_overhead_cycles, core.tile_overhead_cycles, core.reduction_latency_cycles) == (8, 24, 16)
    assert {p: m.lanes for p, m in core.precisions.items()} == {"fp32": 32}
    assert core.precisions["fp32"].peak_flops_per_cycle == 32 * 3 * 2


def test_mt7004_computes_fp16_at_twice_the_fp32_lanes_and_lists_mixed_precision_as_a_rate_only():
    t = sim.load_target("MT7004")
    assert {p: m.lanes for p, m in t.core.precisions.items()} == {"fp32": 16, "fp16": 32, "fp16_fp32acc": 32}
    assert t.core.units["vls"].bytes_per_issue == 2 * t.core.vector_width_bytes == 128
    # The storage precisions (what hp_/fp_ symbols exist for) are fp32 and fp16 only.
    assert t.precisions == ("fp32", "fp16")
    names = {s.name for s in kernels.symbols()}
    assert not any("fp16_fp32acc" in n for n in names)
    assert "assumed" in MT7004["core"]["source"] and "fp16_fp32acc" in MT7004["core"]["source"]


def core_edit(**changes):
    """A copy of FT78NE's document with ``core`` keys replaced (a value None deletes the key)."""
    doc = copy.deepcopy(FT78NE)
    for k, v in changes.items():
        if v is None:
            doc["core"].pop(k, None)
        else:
            doc["core"][k] = v
    return doc


def units_edit(**units):
    u = copy.deepcopy(FT78NE["core"]["units"])
    for k, v in units.items():
        if v is None:
            u.pop(k)
        else:
            u[k] = v
    return core_edit(units=u)


@pytest.mark.parametrize("doc,pattern", [
    (core_edit(vector_op_latency_cycles=6), r"core\.vector_op_latency_cycles: is gone: replaced by the latencies of "
                                            r"the core's functional units \(core\.units\.<unit>\.latency_cycles"),
    (core_edit(vector_efficiency=1.0), r"core\.vector_efficiency: is gone: a tile's compute is now priced from its "
                                       r"inner loops on the core's functional units"),
    (core_edit(precisions={"fp32": {"lanes": 32, "fmac_units": 3}}),
     r"core\.precisions\.fp32\.fmac_units: is gone: the FMAC count is the core's, core\.units\.fmac\.count"),
    (units_edit(fmac=None), r"core\.units\.fmac: required key is missing"),
    (units_edit(vls=None), r"core\.units\.vls: required key is missing"),
    (units_edit(tensor={"count": 1, "class": "vector", "latency_cycles": 4}),
     r"core\.units\.tensor: unknown key \(allowed: broadcast, fmac, salu, sload, valu, vls\)"),
    (units_edit(valu={"count": 1, "class": "matrix", "latency_cycles": 2}),
     r"core\.units\.valu\.class: expected one of scalar, vector, got 'matrix'"),
    (units_edit(fmac={"count": 0, "class": "vector", "latency_cycles": 6}),
     r"core\.units\.fmac\.count: must be >= 1"),
    (units_edit(fmac={"count": 65, "class": "vector", "latency_cycles": 6}),
     r"core\.units\.fmac\.count: must be <= 64"),
    (units_edit(fmac={"count": 3, "class": "vector", "latency_cycles": 10_001}),
     r"core\.units\.fmac\.latency_cycles: must be <= 10000"),
    (units_edit(vls={"count": 2, "class": "vector", "latency_cycles": 9}),
     r"core\.units\.vls\.bytes_per_issue: required key is missing"),
    (units_edit(vls={"count": 2, "class": "vector", "latency_cycles": 9, "bytes_per_issue": 192}),
     r"core\.units\.vls\.bytes_per_issue: a vector load or store moves whole vectors of core\.vector_width_bytes "
     r"128: a multiple of it, got 192"),
    (units_edit(fmac={"count": 3, "class": "vector", "latency_cycles": 6, "bytes_per_issue": 8}),
     r"core\.units\.fmac\.bytes_per_issue: unknown key"),
    (units_edit(fmac={"count": 8, "class": "vector", "latency_cycles": 6}),
     r"core\.issue_width\.vector: 6 vector instructions per cycle cannot keep the 8 fmac units of that class busy"),
    (core_edit(issue_width={"scalar": 5}), r"core\.issue_width\.vector: required key is missing"),
    (core_edit(issue_width={"scalar": 5, "vector": 6, "branch": 1}), r"core\.issue_width\.branch: unknown key"),
    (core_edit(precisions={"fp32": {"lanes": 24}}), r"core\.precisions\.fp32\.lanes: must be a power of two, got 24"),
    (core_edit(precisions={"fp16_fp32acc": {"lanes": 32}}),
     r"core\.precisions: at least one storage precision \(fp32, fp16\) is required"),
    (core_edit(precisions={"fp32": {"lanes": 32}, "fp16_fp32acc": {"lanes": 32}}),
     r"core\.precisions\.fp16_fp32acc: fp16 products accumulated in fp32 need fp16 storage"),
    (core_edit(vector_registers=0), r"core\.vector_registers: must be >= 1"),
    (core_edit(tile_overhead_cycles=None), r"core\.tile_overhead_cycles: required key is missing"),
    (core_edit(reduction_latency_cycles=10_001), r"core\.reduction_latency_cycles: must be <= 10000"),
])
def test_a_broken_or_outdated_core_is_refused_naming_its_key(doc, pattern):
    with pytest.raises(sim.TargetError, match=pattern) as info:
        parse_target(doc, "chip.yaml")
    assert str(info.value).startswith("chip.yaml: core") and "\n" not in str(info.value)


def test_a_core_without_optional_units_loads():
    """Only fmac and vls are required: a core with no scalar units at all still loads (its loops may not name
    them: the plan check refuses those, tests/test_plan_check.py)."""
    t = parse_target(units_edit(valu=None, broadcast=None, sload=None, salu=None), "chip.yaml")
    assert list(t.core.units) == ["fmac", "vls"]


def test_dspsim_targets_lists_the_core(capsys):
    from sim.cli import main
    assert main(["targets", "FT78NE"]) == 0
    out = capsys.readouterr().out
    assert ("core: issues 5 scalar + 6 vector a cycle; fmac 3 (vector, 6 cycles), valu 1 (vector, 2 cycles), "
            "vls 2 (vector, 9 cycles, 256 B/issue), broadcast 2 (scalar, 4 cycles), sload 1 (scalar, 7 cycles, "
            "8 B/issue), salu 3 (scalar, 1 cycles); 64 vector registers; overheads 8 cycles per loop entry, 24 per "
            "tile") in out
