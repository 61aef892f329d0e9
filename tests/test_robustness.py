"""Bad input everywhere gets a clear SimError and loses nothing (issue 4, item 4).

Target files, run-configs, API arguments and the CLI; output files written atomically.
"""

from __future__ import annotations

import copy
import io
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

import sim
from sim.cli import main
from sim.config.run_config import load_config
from sim.files.atomic import atomic_write, atomic_write_text
from sim.run.runner import prepare

ROOT = Path(__file__).resolve().parent.parent
FT78NE = (ROOT / "targets" / "FT78NE.yaml").read_text()
CONFIG_S = ROOT / "configs" / "ft78ne_batch_norm_grad_s.yaml"
S = dict(x=0xA0000000, dy=0xB0000000, dx=0xA1000000,
         params=[0xC0000000, 0xD0000000, 0xE0000000, 0xB1000000, 0xC1000000, 4, 64, 1])


# --- target files ---------------------------------------------------------------------------------

#: The shipped FT78NE file parsed once (the cases below edit copies of it while the tests are collected).
FT78NE_DOC = yaml.load(FT78NE, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
#: libyaml's dumper where PyYAML has it: the pure-Python one took seconds for the cases' few dozen dumps.
DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def edit(change) -> str:
    """The shipped FT78NE file with ``change(doc)`` applied to its parsed form, dumped back to YAML."""
    doc = copy.deepcopy(FT78NE_DOC)
    change(doc)
    return yaml.dump(doc, Dumper=DUMPER, sort_keys=False)


def region(doc: dict, name: str) -> dict:
    return next(r for r in doc["regions"] if r["name"] == name)


def level(name: str, key: str, value=None, delete=False):
    """A change that sets (or deletes) ``key`` of the staging level called ``name``."""
    def change(doc: dict) -> None:
        node = next(lv for lv in doc["staging"]["levels"] if lv["name"] == name)
        if delete:
            del node[key]
        else:
            node[key] = value
    return change


def setter(*path, value=None, delete=False):
    """A change that sets (or deletes) the key at ``path``; region names stand for their entries."""
    def change(doc: dict) -> None:
        node = doc
        for k in path[:-1]:
            node = region(doc, k) if k in {"l2", "am", "sm", "gsm", "ddr"} else node[k]
        if delete:
            del node[path[-1]]
        else:
            node[path[-1]] = value
    return change


TARGET_CASES = [
    ("unknown key", edit(setter("turbo", value=True)), r"<top>\.turbo: unknown key"),
    ("unknown nested key", edit(setter("gsm", "colour", value="red")), r"regions\[\d\]\(gsm\)\.colour: unknown key"),
    ("missing key", edit(setter("cores", delete=True)), r"<top>\.cores: required key is missing"),
    ("missing region key", edit(setter("l2", "latency_cycles", delete=True)),
     r"regions\[0\]\(l2\)\.latency_cycles: required"),
    ("wrong type", edit(setter("cores", value="eight")), r"<top>\.cores: expected an integer, got 'eight'"),
    ("float for int", edit(setter("cores", value=8.0)), r"<top>\.cores: expected an integer, got 8\.0"),
    ("bool for int", edit(setter("cores", value=True)), r"<top>\.cores: expected an integer, got True"),
    ("list for mapping", edit(setter("dma", value=[1, 2])), r"dma: expected a mapping, got list"),
    ("wrong kind", edit(setter("l2", "kind", value="secret")), r"kind: expected one of shared, private"),
    ("zero cores", edit(setter("cores", value=0)), r"<top>\.cores: must be >= 1, got 0"),
    ("negative size", edit(setter("sm", "size_bytes", value=-16)), r"\(sm\)\.size_bytes: must be >= 1"),
    ("overlapping regions", edit(setter("sm", "base", value=0x200A0000)),
     r"region sm \[0x200a0000, 0x200b0000\) overlaps region am \[0x20000000, 0x200c0000\)"),
    ("duplicate region", edit(setter("sm", "name", value="am")), r"duplicate region name 'am'"),
    ("past the address width", edit(setter("ddr", "size_bytes", value=0x80000001)),
     r"ends past the 32-bit address space"),
    ("base past the address width", edit(setter("ddr", "base", value=1 << 40)),
     r"\(ddr\)\.base: must be <= 0xffffffff \(the 32-bit address space\), got 0x10000000000"),
    ("address width absurd", edit(setter("address_bits", value=4096)), r"address_bits: must be <= 64"),
    ("python object tag", FT78NE + "\nhack: !!python/object/apply:os.system ['echo owned']\n",
     r"line \d+: refused YAML tag 'tag:yaml\.org,2002:python/object/apply:os\.system'"),
    ("python tag on a value", FT78NE.replace("cores: 8", "cores: !!python/name:os.getcwd ''"),
     r"refused YAML tag"),
    ("duplicate key", FT78NE + "\ncores: 4\n", r"line \d+, column 1: duplicate key 'cores' \(first on line \d+\)"),
    ("impossible date", FT78NE + "\nbuilt: 2024-13-45\n", r"month must be in 1\.\.12"),
    ("deep nesting", FT78NE + "\nx: " + "[" * 200 + "]" * 200 + "\n", r"nesting deeper than 64 levels"),
    ("quoted number", FT78NE.replace("bandwidth_bytes_per_cycle: 20", "bandwidth_bytes_per_cycle: '2e1'"),
     r"\(ddr\)\.bandwidth_bytes_per_cycle: .*got '2e1' \(YAML read it as text: write the number without quotes"),
    ("exponent for an integer", edit(setter("clock_hz", value=1e9)),
     r"<top>\.clock_hz: expected an integer, got 1000000000\.0 \(a decimal point or an exponent makes a float"),
    ("bandwidth absurdly small", edit(setter("ddr", "bandwidth_bytes_per_cycle", value=1e-300)),
     r"must be >= 0\.001"),
    ("bandwidth infinite", edit(setter("ddr", "bandwidth_bytes_per_cycle", value=float("inf"))),
     r"expected a positive finite number"),
    ("no precision", edit(setter("core", "precisions", value={})), r"at least one storage precision"),
    ("unknown precision", edit(setter("core", "precisions", "bf16", value={"lanes": 1, "fmac_units": 1})),
     r"core\.precisions\.bf16: unknown key"),
    ("not a mapping", "- just\n- a list\n", r"<top>: expected a mapping, got list"),
    ("empty file", "", r"<top>: expected a mapping, got NoneType"),
    ("not YAML", "name: [unclosed\n", r"not valid YAML"),
    ("NUL byte", "name: a\x00b\n", r"not valid YAML"),
    ("staging not a scratchpad", edit(level("am", "region", value="l2")),
     r"staging\.levels\[2\]\(am\)\.region: region l2 is private with role storage: a per-core level must be a "
     r"region with role scratchpad"),
    ("staging unknown", edit(level("am", "region", value="l9")),
     r"staging\.levels\[2\]\(am\)\.region: names no region \(l2, am, sm, gsm, ddr\)"),
    ("workspace past region", edit(level("gsm", "offset_bytes", value=0x5C0000)),
     r"staging\.levels\[0\]\(gsm\)\.offset_bytes: window .* runs past the end"),
    ("shared level not a window", edit(level("gsm", "size_bytes", delete=True)),
     r"staging\.levels\[0\]\(gsm\)\.size_bytes: required key is missing: a level in shared region gsm is a "
     r"window of it"),
    ("duplicate level", edit(level("sm", "name", value="am")), r"staging\.levels\[3\]\(am\)\.name: duplicate level "
     r"name 'am'"),
    ("beside unknown", edit(level("sm", "beside", value="l1")),
     r"staging\.levels\[3\]\(sm\)\.beside: must name an earlier per-core level that is beside no other \(here: "
     r"am\), got 'l1'"),
    ("beside a shared level", edit(level("sm", "beside", value="gsm")), r"\(sm\)\.beside: must name an earlier "
     r"per-core level"),
    ("beside on a shared level", edit(level("gsm", "beside", value="am")),
     r"\(gsm\)\.beside: a shared level sits beside no other"),
    ("no per-core level", edit(setter("staging", "levels", value=[{"name": "gsm", "region": "gsm",
                                                                   "offset_bytes": 0, "size_bytes": 4096}])),
     r"staging\.levels: at least one per-core level"),
    ("no level", edit(setter("staging", "levels", value=[])), r"staging\.levels: expected a non-empty list"),
    ("levels overlap", edit(setter("staging", "levels", value=[{"name": "am", "region": "am"},
                                                               {"name": "l1", "region": "am", "size_bytes": 64}])),
     r"staging\.levels\[1\]\(l1\): window \[0x20000000, 0x20000040\) of am overlaps level am"),
    ("shared after per-core", edit(setter("staging", "levels", value=[
        {"name": "am", "region": "am"}, {"name": "gsm", "region": "gsm", "offset_bytes": 0, "size_bytes": 64}])),
     r"staging\.levels\[1\]\(gsm\): shared level gsm comes after per-core level am: levels are listed outermost "
     r"first"),
    ("level offset past the region", edit(level("am", "offset_bytes", value=0xC0000)),
     r"\(am\)\.offset_bytes: must be <= 0xbffff \(inside region am of 0xc0000 bytes\), got 0xc0000"),
    ("level size as text", edit(level("am", "size_bytes", value="64K")), r"\(am\)\.size_bytes: expected an integer"),
    ("unknown level key", edit(level("am", "speed", value=1)), r"staging\.levels\[2\]\(am\)\.speed: unknown key"),
    ("too many levels", edit(setter("staging", "levels", value=[{"name": f"a{i}", "region": "am", "offset_bytes": i,
                                                                 "size_bytes": 1} for i in range(17)])),
     r"staging\.levels: at most 16 staging levels, got 17"),
    ("no staging source", edit(setter("staging", "source", delete=True)), r"staging\.source: required key"),
    ("no source", edit(setter("dma", "source", delete=True)), r"dma\.source: required key is missing"),
]


@pytest.mark.parametrize("text,pattern", [c[1:] for c in TARGET_CASES], ids=[c[0] for c in TARGET_CASES])
def test_bad_target_file_names_file_and_key(tmp_path, text, pattern):
    p = tmp_path / "chip.yaml"
    p.write_text(text, encoding="utf-8")
    with pytest.raises(sim.TargetError, match=pattern) as info:
        sim.load_target(p)
    assert str(p) in str(info.value) and "\n" not in str(info.value)


def test_python_tag_never_runs(tmp_path):
    marker = tmp_path / "owned"
    p = tmp_path / "chip.yaml"
    p.write_text(FT78NE + f"\nx: !!python/object/apply:os.system ['touch {marker}']\n")
    with pytest.raises(sim.TargetError):
        sim.load_target(p)
    assert not marker.exists()


@pytest.mark.parametrize("arg,pattern", [
    ("NoSuchChip", r"unknown target 'NoSuchChip' \(known: FT78NE, MT7004"),
    ("missing/chip.yaml", r"target file not found"),
    ("", r"expected a chip name"),
    (42, r"expected a chip name or a YAML path, got int"),
    (None, r"got NoneType"),
])
def test_bad_target_names(arg, pattern):
    with pytest.raises(sim.TargetError, match=pattern):
        sim.load_target(arg)


def test_target_folder_and_binary_file(tmp_path):
    (tmp_path / "dir.yaml").mkdir()
    with pytest.raises(sim.TargetError, match="is a folder, not a regular file: dspsim reads only regular files"):
        sim.load_target(tmp_path / "dir.yaml")
    b = tmp_path / "bin.yaml"
    b.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(sim.TargetError, match="cannot read"):
        sim.load_target(b)


def test_yaml_merge_keys_still_work(tmp_path):
    text = FT78NE.replace("regions:\n", "regions:\n  - &base_l2\n", 1) if False else FT78NE
    text = text.replace("dma:\n", "dma: &dma\n", 1) + "\nsecond_dma:\n  <<: *dma\n  setup_cycles: 1\n"
    p = tmp_path / "chip.yaml"
    p.write_text(text)
    with pytest.raises(sim.TargetError, match=r"<top>\.second_dma: unknown key"):  # parsed fine, then refused
        sim.load_target(p)


# --- run-configs -------------------------------------------------------------------------------------

BASE_CONFIG = yaml.safe_load(CONFIG_S.read_text())


def write_config(tmp_path: Path, doc: dict | str, name: str = "cfg.yaml") -> Path:
    p = tmp_path / name
    p.write_text(doc if isinstance(doc, str) else yaml.safe_dump(doc, sort_keys=False))
    return p


def config_with(**changes) -> dict:
    doc = copy.deepcopy(BASE_CONFIG)
    for path, value in changes.items():
        node = doc
        keys = path.split("__")
        for k in keys[:-1]:
            node = node[int(k)] if isinstance(node, list) else node[k]
        last = keys[-1]
        if value is DELETE:
            del node[last]
        elif isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value
    return doc


DELETE = object()

CONFIG_CASES = [
    ("missing symbol", config_with(symbol=DELETE), r"<top>\.symbol: required key is missing"),
    ("missing args", config_with(args=DELETE), r"<top>\.args: required key is missing"),
    ("unknown top key", config_with(colour="red"), r"<top>\.colour: unknown key"),
    ("data entry without addr", config_with(data__0__addr=DELETE), r"data\[0\]\.addr: required key is missing"),
    ("address as text", config_with(data__0__addr="0xZZ"), r"data\[0\]\.addr: expected an integer.*'0xZZ'"),
    ("negative address", config_with(data__0__addr=-4), r"data\[0\]\.addr: must be >= 0"),
    ("float address", config_with(data__1__addr=2.5e9), r"data\[1\]\.addr: expected an integer"),
    ("shape not a list", config_with(data__0__shape="4x64"), r"data\[0\]\.shape: expected a list"),
    ("negative dim", config_with(data__0__shape=[4, -64]), r"data\[0\]\.shape\[1\]: must be >= 0"),
    ("absurd size", config_with(data__0__shape=[1 << 20, 1 << 20]), r"more than the 2147483648 bytes"),
    ("unknown dtype", config_with(data__0__dtype="float128"), r"data\[0\]\.dtype: expected one of"),
    ("dtype not a string", config_with(data__0__dtype=["float32"]), r"data\[0\]\.dtype: expected one of"),
    ("two sources", config_with(data__0__fill=1.0), r"give exactly one of"),
    ("random low above high", config_with(data__0__random={"low": 2.0, "high": 1.0}), r"low \(2\.0\) is above"),
    ("random bound not finite", config_with(data__0__random={"low": float("nan")}), r"expected a finite number"),
    ("name with a path", config_with(outputs__0__name="../../escape"), r"outputs\[0\]\.name: expected a name"),
    ("hidden name", config_with(outputs__0__name=".bashrc"), r"outputs\[0\]\.name: expected a name"),
    ("duplicate output", config_with(outputs__1__name="dx"), r"outputs\[1\]\.name: duplicate name 'dx'"),
    ("trace with a path", config_with(trace="../x.json"), r"trace: expected a file name"),
    ("numerics not bool", config_with(numerics="yes please"), r"numerics: expected true or false"),
    ("args not a mapping", config_with(args=[1, 2]), r"args: expected a mapping"),
]


@pytest.mark.parametrize("doc,pattern", [c[1:] for c in CONFIG_CASES], ids=[c[0] for c in CONFIG_CASES])
def test_bad_run_config_names_file_and_key(tmp_path, doc, pattern):
    p = write_config(tmp_path, doc)
    with pytest.raises(sim.ConfigError, match=pattern) as info:
        load_config(p)
    assert str(p) in str(info.value)


@pytest.mark.parametrize("text,pattern", [
    ("target: FT78NE\nsymbol: s\nargs: {}\nargs: {}\n", r"duplicate key 'args'"),
    ("target: !!python/object/new:os.getcwd []\nsymbol: s\nargs: {}\n", r"refused YAML tag"),
    ("target: FT78NE\nsymbol: s\nargs: {x: 2021-02-30}\n", r"day is out of range"),
    ("[", r"not valid YAML"),
])
def test_bad_run_config_yaml(tmp_path, text, pattern):
    with pytest.raises(sim.ConfigError, match=pattern):
        load_config(write_config(tmp_path, text))


def test_missing_config_and_folder(tmp_path):
    with pytest.raises(sim.ConfigError, match="run-config not found"):
        load_config(tmp_path / "nope.yaml")
    with pytest.raises(sim.ConfigError, match="is a folder"):
        load_config(tmp_path)


def data_file_config(tmp_path: Path, file: str) -> Path:
    doc = config_with()
    doc["data"][0] = {"name": "x", "addr": 0xA0000000, "shape": [4, 64], "dtype": "float32", "file": file}
    return write_config(tmp_path, doc)


@pytest.mark.parametrize("make,pattern", [
    (None, r"data\.x\.file: .*x\.npy does not exist"),
    (lambda p: np.save(p, np.zeros((4, 32), np.float32)), r"has shape \[4, 32\], the config says \[4, 64\]"),
    (lambda p: np.save(p, np.zeros((4, 64), np.float64)), r"has dtype float64, the config says float32"),
    (lambda p: np.save(p, np.full((4, 64), None, dtype=object), allow_pickle=True), r"dtype object"),
    (lambda p: p.write_bytes(b"not an npy file at all"), r"is not a readable \.npy array"),
    (lambda p: p.write_bytes(_npy_bytes(np.zeros((4, 64), np.float32))[:-100]), r"not a readable|complete"),
    (lambda p: np.savez(p.with_suffix(""), a=np.zeros(3)) or os.replace(p.with_suffix(".npz"), p),
     r"not a readable \.npy"),
    (lambda p: p.mkdir(), r"is a folder"),
])
def test_bad_data_files(tmp_path, make, pattern):
    if make is not None:
        make(tmp_path / "x.npy")
    cfg = load_config(data_file_config(tmp_path, "x.npy"))
    with pytest.raises(sim.ConfigError, match=pattern):
        prepare(cfg)


def _npy_bytes(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr)
    return buf.getvalue()


def test_good_data_file_is_placed(tmp_path):
    x = np.arange(256, dtype=np.float32).reshape(4, 64)
    np.save(tmp_path / "x.npy", x)
    m = prepare(load_config(data_file_config(tmp_path, "x.npy")))
    assert (m.read(0xA0000000, (4, 64), np.float32) == x).all()


@pytest.mark.parametrize("entry,pattern", [
    ({"fill": 300}, r"fill: 300 is not a int8 value"),
    ({"fill": 0.5}, r"fill: 0\.5 is not a int8 value"),
    ({"fill": float("nan")}, r"fill: nan is not a int8"),
    ({"values": [[1, 2], [3]]}, r"values: not 2-d int8 numbers"),
    ({"values": [1000, 1, 1, 1]}, r"values: not 2-d int8 numbers"),
    ({"values": [1, 2, 3]}, r"values: not 2-d int8 numbers of shape \[2, 2\]: got shape \[3\]"),
    ({"values": [[1, 2], [3, 4.5]]}, r"values: not 2-d int8 numbers of shape \[2, 2\]: 4\.5 is not an integer"),
    ({"values": [[1, 2], [3, -129]]}, r"values: .*: a value leaves its range \[-128, 127\]"),
    ({"random": {"low": -1000, "high": 0}}, r"random: .* leaves its range \[-128, 127\]"),
    ({"random": {"low": 0.2, "high": 0.8}}, r"random: .* holds no int8 value"),
])
def test_bad_data_values_for_int8(tmp_path, entry, pattern):
    """Refused when the config is read (so `dspsim validate` refuses what `run` would), naming the entry's key."""
    doc = config_with()
    doc["data"].append({"name": "q", "addr": 0xC3000000, "shape": [2, 2], "dtype": "int8", **entry})
    with pytest.raises(sim.ConfigError, match=r"data\[\d+\]\." + pattern):
        load_config(write_config(tmp_path, doc))


@pytest.mark.parametrize("entry", [{"fill": 1e6}, {"values": [1.0, 70000.0]}, {"random": {"low": -1e5, "high": 1}}])
def test_float_fill_overflow_and_nan(tmp_path, capsys, entry):
    doc = config_with()
    doc["data"].append({"name": "h", "addr": 0xC3000000, "shape": [2], "dtype": "float16", **entry})
    path = write_config(tmp_path, doc)
    with pytest.raises(sim.ConfigError, match="overflows float16|does not fit float16"):
        load_config(path)
    assert main(["validate", str(path)]) == 2 and "float16" in capsys.readouterr().err
    doc["data"][-1] = {"name": "h", "addr": 0xC3000000, "shape": [2], "dtype": "float16",
                       "fill": float("nan")}  # legal: tests how kernels propagate NaN
    assert np.isnan(prepare(load_config(write_config(tmp_path, doc))).read(0xC3000000, 2, np.float16)).all()


@pytest.mark.parametrize("change,pattern", [
    (dict(data__0__addr=0x60000000), r"data 'x': write \[0x60000000, 0x60000400\): unmapped"),
    (dict(data__0__addr=0xFFFFFF00), r"data 'x': write .* runs past the end of region ddr"),
    (dict(data__0__addr=0x10000000), r"data 'x': write .* private region l2: pass core="),
    (dict(data__0__core=8), r"data 'x': write: core=8 is not a core of FT78NE"),
    (dict(outputs__0__addr=0x60000000), r"output 'dx': read \[0x60000000"),
])
def test_placements_checked_before_any_array_is_built(tmp_path, change, pattern):
    cfg = load_config(write_config(tmp_path, config_with(**change)))
    with pytest.raises(sim.MemoryFault, match=pattern):
        prepare(cfg)


# --- API arguments ------------------------------------------------------------------------------------

@pytest.fixture
def m() -> sim.Simulator:
    return sim.Simulator("FT78NE")


@pytest.mark.parametrize("call,pattern", [
    (lambda m: m.write("0xA0000000", np.zeros(4)), r"address must be an int"),
    (lambda m: m.write(0xA0000000, [[1, 2], [3]]), r"cannot make an array"),
    (lambda m: m.write(0xA0000000, np.array(["a"])), r"numeric array"),
    (lambda m: m.write(0xA0000000, {"a": 1}), r"numeric array"),
    (lambda m: m.write(0xA0000000, np.zeros(2, complex)), r"numeric array"),
    (lambda m: m.write(0xA0000000, np.zeros(4), core=99), r"core=99 is not a core of FT78NE"),
    (lambda m: m.write(0xA0000000, np.zeros(4), core="0"), r"core='0' is not a core"),
    (lambda m: m.write(0x10000000, np.zeros(4)), r"private region l2: pass core="),
    (lambda m: m.write(-8, np.zeros(4)), r"unmapped"),
    (lambda m: m.write(1 << 70, np.zeros(4)), r"unmapped"),
    (lambda m: m.read(0xA0000000, (-1,), np.float32), r"negative dimension"),
    (lambda m: m.read(0xA0000000, (2.5,), np.float32), r"holds 2\.5, not an int"),
    (lambda m: m.read(0xA0000000, (float("nan"),), np.float32), r"holds nan, not an int"),
    (lambda m: m.read(0xA0000000, "abc", np.float32), r"shape must be an int or a sequence"),
    (lambda m: m.read(0xA0000000, None, np.float32), r"shape must be an int or a sequence"),
    (lambda m: m.read(0xA0000000, (True,), np.float32), r"not an int"),
    (lambda m: m.read(0xA0000000, (1 << 40, 1 << 40), np.float32), r"runs past the end of region ddr"),
    (lambda m: m.read(0xA0000000, (1 << 62,) * 3, np.float32), r"runs past the end"),
    (lambda m: m.read(0xA0000000, 4, "not-a-dtype"), r"is not a dtype"),
    (lambda m: m.read(0xA0000000, 4, object), r"plain numeric dtype"),
    (lambda m: m.read(0xA0000000, 4, [("a", "f4")]), r"plain numeric dtype"),
    (lambda m: m.read(0xA0000000, 4, np.float32, core=-1), r"core=-1"),
])
def test_bad_memory_access_arguments(m, call, pattern):
    m.write(0xA0000000, np.arange(8, dtype=np.float32))
    before = m.memory.snapshot()
    with pytest.raises(sim.MemoryFault, match=pattern):
        call(m)
    assert m.memory.snapshot() == before


def test_absurd_access_size_refused_before_allocation(tmp_path):
    # A user chip with a huge region: the map allows the range, the per-access cap refuses it.
    doc = yaml.safe_load(FT78NE)
    doc["address_bits"] = 64
    next(r for r in doc["regions"] if r["name"] == "ddr")["size_bytes"] = 1 << 40
    p = tmp_path / "big.yaml"
    p.write_text(yaml.safe_dump(doc))
    big = sim.Simulator(p)
    with pytest.raises(sim.MemoryFault, match="larger than any single access"):
        big.read(0x80000000, (1 << 33,), np.uint8)


@pytest.mark.parametrize("args,err,pattern", [
    ({**S, "x": None}, sim.KernelArgError, r"'x': expected an address"),
    ({**S, "x": 0xA0000000 + 0.0}, sim.KernelArgError, r"'x': expected an address"),
    ({**S, "x": float("nan")}, sim.KernelArgError, r"'x': expected an address"),
    ({**S, "params": [*S["params"][:5], float("nan"), 64, 1]}, sim.KernelArgError, r"batch.*nan"),
    ({**S, "params": [*S["params"][:5], -4, 64, 1]}, sim.KernelArgError, r"positive batch"),
    ({**S, "params": [*S["params"][:5], 1 << 40, 1 << 40, 1]}, sim.KernelArgError, r"exceed"),
    ({**S, "params": [*S["params"][:5], 1 << 28, 1 << 8, 1]}, sim.LayoutError, r"runs past the end"),
    ({**S, "params": "params"}, sim.KernelArgError, r"'params'"),
    ({**S, "params": None}, sim.KernelArgError, r"'params'"),
    ({**S, "params": {"a": 1}}, sim.KernelArgError, r"'params'"),
    ({**S, "core_mask": float("nan")}, sim.KernelArgError, r"core_mask"),
    ({**S, "params": 0x60000000}, sim.LayoutError, r"buffer 'params'"),
])
def test_bad_kernel_arguments_leave_memory(m, args, err, pattern):
    m.write(0xA1000000, np.full((4, 64), 7.0, np.float32))
    before = m.memory.snapshot()
    with pytest.raises(err, match=pattern):
        m.call("fp_batch_norm_grad_s", **args)
    assert m.memory.snapshot() == before


@pytest.mark.parametrize("kw,pattern", [
    ({"numerics": "no"}, r"'numerics' must be True or False"),
    ({"progress": 5}, r"'progress' must be a callable"),
])
def test_bad_call_options(m, kw, pattern):
    with pytest.raises(sim.KernelArgError, match=pattern):
        m.call("fp_batch_norm_grad_s", **S, **kw)


@pytest.mark.parametrize("symbol", [None, 3, "", "fp_batch_norm_grad", "FP_BATCH_NORM_GRAD_S"])
def test_bad_symbols(m, symbol):
    with pytest.raises(sim.KernelArgError, match="symbol"):
        m.call(symbol, **S)


def test_bad_simulator_targets():
    for t in (None, 3.5, ["FT78NE"], "ft78ne.yml"):
        with pytest.raises(sim.TargetError):
            sim.Simulator(t)


# --- CLI: one line per error, non-zero, no traceback ----------------------------------------------------

@pytest.mark.parametrize("command", ["run", "validate"])
@pytest.mark.parametrize("doc,needle", [
    (config_with(symbol="fp_batch_norm_grad_q"), "unknown kernel symbol"),
    (config_with(args__x="0xA0000000"), "'x': expected an address"),
    (config_with(target="NoChip"), "unknown target"),
    ("target: [\n", "not valid YAML"),
])
def test_cli_errors_are_one_line(tmp_path, capsys, command, doc, needle):
    p = write_config(tmp_path, doc)
    argv = [command, str(p)] + (["--out-dir", str(tmp_path / "out")] if command == "run" else [])
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("dspsim: error: ") and err.count("\n") == 1 and needle in err, err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_unmapped_data_entry_fails_run_in_one_line_and_validate_reports_it(tmp_path, capsys):
    p = write_config(tmp_path, config_with(data__0__addr=0x60000000))
    assert main(["run", str(p), "--out-dir", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dspsim: error: entry-address: ") and err.count("\n") == 1 and "unmapped" in err
    assert not (tmp_path / "out").exists()
    # validate checks the whole config and reports the entry with the map (exit 1: a finding, not a crash).
    assert main(["validate", str(p)]) == 1
    out, err = capsys.readouterr()
    assert err == "" and re.search(r"^ERROR entry-address: .*data 'x': write \[0x60000000, 0x60000400\): unmapped",
                                   out, re.M)
    assert "unplaced-input" not in out  # the entry's own error says why x holds no data


def test_cli_layout_error_is_one_line_without_traceback(tmp_path):
    p = write_config(tmp_path, config_with(args__dx=0xA0000100, args__params__2=0xE0000002))
    proc = subprocess.run([sys.executable, "-m", "sim.cli", "run", str(p), "--out-dir", str(tmp_path)],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert "2 layout violations: (1) layout rule 'alignment': buffer 'scale'" in proc.stderr
    assert "| (2) layout rule 'no-overlap': output buffer 'dx'" in proc.stderr


# --- atomic outputs ---------------------------------------------------------------------------------------

def outputs_of(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_failed_run_leaves_previous_outputs_untouched(tmp_path, capsys):
    out = tmp_path / "out"
    good = write_config(tmp_path, config_with(), "job.yaml")
    assert main(["run", str(good), "--out-dir", str(out), "--trace", "job.json", "--csv"]) == 0
    first = outputs_of(out)
    assert {"job.json", "job.csv", "job.dx.npy", "job.dbias.npy", "job.dscale.npy"} <= set(first)
    # Same names, failing in three places: at layout, in a data placement, in an output read-back.
    for change in (dict(args__dx=0xA0000100), dict(data__0__addr=0x60000000), dict(outputs__0__core=99)):
        bad = write_config(tmp_path, config_with(**change), "job.yaml")
        assert main(["run", str(bad), "--out-dir", str(out), "--trace", "job.json", "--csv"]) == 2
        assert outputs_of(out) == first  # nothing clobbered, no temporary file left behind
    capsys.readouterr()


def test_atomic_write_failure_mid_file_keeps_old_file(tmp_path):
    target = tmp_path / "trace.json"
    atomic_write_text(target, "old complete content")

    def half_then_crash(tmp: Path) -> None:
        tmp.write_text("{\"traceEvents\": [")
        raise RuntimeError("disk full, say")

    with pytest.raises(RuntimeError):
        atomic_write(target, half_then_crash)
    assert target.read_text() == "old complete content"
    assert [p.name for p in tmp_path.iterdir()] == ["trace.json"]


def test_atomic_write_os_error_is_a_sim_error(tmp_path):
    (tmp_path / "blocker").write_text("a file where a folder should be")
    with pytest.raises(sim.SimError, match="cannot create"):
        atomic_write_text(tmp_path / "blocker" / "x.json", "data")


def test_failed_run_writes_no_trace(tmp_path, m):
    with pytest.raises(sim.LayoutError):
        m.call("fp_batch_norm_grad_s", **{**S, "dx": 0xA0000100})
    run = m.call("fp_batch_norm_grad_s", **S)
    path = run.write_trace(tmp_path / "t.json")
    assert path.read_text().strip().endswith("}")
    assert math.isfinite(run.cycles) and [p.name for p in tmp_path.iterdir()] == ["t.json"]


def test_atomic_output_has_ordinary_permissions(tmp_path):
    umask = os.umask(0o022)
    try:
        fresh = atomic_write_text(tmp_path / "fresh.json", "{}")
        assert fresh.stat().st_mode & 0o777 == 0o644  # not mkstemp's 0600
        kept = tmp_path / "kept.json"
        kept.write_text("old")
        kept.chmod(0o600)
        atomic_write_text(kept, "new")
        assert kept.stat().st_mode & 0o777 == 0o600 and kept.read_text() == "new"
    finally:
        os.umask(umask)


@pytest.mark.parametrize("change,pattern", [
    (setter("two\nlines", value=1), r"<top>\.'two\\nlines': unknown key"),
    (setter("l2", "name", value="l2\nx"), r"expected printable text without line breaks"),
    (setter("name", value="chip\n"), r"<top>\.name: expected printable text"),
])
def test_target_messages_stay_on_one_line(tmp_path, change, pattern):
    p = tmp_path / "chip.yaml"
    p.write_text(edit(change))
    with pytest.raises(sim.TargetError, match=pattern) as info:
        sim.load_target(p)
    assert "\n" not in str(info.value)


def test_config_and_api_argument_names_stay_on_one_line(tmp_path, m):
    doc = config_with()
    doc["args"]["x\ny"] = 1
    with pytest.raises(sim.ConfigError, match="argument name \\(an identifier\\)"):
        load_config(write_config(tmp_path, doc))
    with pytest.raises(sim.ConfigError, match=r"<top>\.'a b': unknown key"):
        load_config(write_config(tmp_path, config_with(**{"a b": 1})))
    with pytest.raises(sim.KernelArgError, match=r"argument name 'x\\ny' is not an identifier"):
        m.call("fp_batch_norm_grad_s", **S, **{"x\ny": 1})


def test_files_written_together_appear_together_or_not_at_all(tmp_path):
    """sim.files.atomic.written_together: inside the block nothing replaces the old files; at its end all the new
    ones are in place; an exception (Ctrl-C) inside leaves the old set whole and no temporary file behind."""
    from sim.files.atomic import atomic_write, written_together
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("old a")
    b.write_text("old b")
    with written_together():
        atomic_write(a, lambda p: p.write_text("new a"))
        assert a.read_text() == "old a"  # (held back until the block ends)
        atomic_write(b, lambda p: p.write_text("new b"))
    assert (a.read_text(), b.read_text()) == ("new a", "new b")
    with pytest.raises(KeyboardInterrupt), written_together():
        atomic_write(a, lambda p: p.write_text("newer a"))
        raise KeyboardInterrupt
    assert (a.read_text(), b.read_text()) == ("new a", "new b")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt", "b.txt"]


def test_a_run_stopped_while_writing_its_outputs_leaves_the_previous_set(tmp_path, monkeypatch):
    """`dspsim run` writes its trace and outputs together: stopped after the trace and some outputs are written
    (here the third output's write is interrupted), the folder still holds the previous run's set, untouched."""
    import sim.run.runner as runner
    from sim.cli import main
    config = Path(__file__).resolve().parent.parent / "configs" / "ft78ne_batch_norm_grad_s.yaml"
    out = tmp_path / "out"
    assert main(["run", str(config), "--out-dir", str(out)]) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    assert len(before) >= 3
    for p in out.iterdir():  # (mark the previous set, to tell it from a rewrite of the same bytes)
        p.write_bytes(p.read_bytes() + b" ")
    marked = {p.name: p.read_bytes() for p in out.iterdir()}
    real = runner._npy_writer
    calls = []

    def interrupted(arr):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(arr)
    monkeypatch.setattr(runner, "_npy_writer", interrupted)
    assert main(["run", str(config), "--out-dir", str(out)]) == 130  # (Ctrl-C's exit status)
    assert len(calls) == 3
    assert {p.name: p.read_bytes() for p in out.iterdir()} == marked
