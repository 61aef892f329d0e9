"""Hostile target files, run-configs and YAML (issue 12, items 1, 3, 7, 8, 9, 11).

Alias bombs, 400-digit numbers, YAML 1.1 numbers, named pipes, devices and absurd shapes: each is refused
at once with a SimError naming the file and the key path, in bounded time and memory, and its message
stays one short line.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import hang
import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

import sim
from sim.calibrate import load_measurements, load_target_document
from sim.cli import main
from sim.config.run_config import load_config
from sim.errors import brief
from sim.files.yamlsafe import (
    MAX_ALIAS_NODES,
    MAX_NODES,
    MAX_YAML_BYTES,
    load_yaml,
    read_yaml_file,
)
from sim.model.target_schema import range_table
from sim.run.runner import prepare

ROOT = Path(__file__).resolve().parent.parent
FT78NE = (ROOT / "targets" / "FT78NE.yaml").read_text()
CONFIG_S = ROOT / "configs" / "ft78ne_batch_norm_grad_s.yaml"
#: The longest message a refusal of a hostile value may print (the file path included).
MESSAGE_CHARS = 600


def laughs(levels: int) -> str:
    """A "billion laughs" as one YAML flow value: a list of ``levels`` + 1 lists, each of nine aliases to the one
    before, the last standing for 9**(levels + 1) strings (387 million at nine levels) in a few hundred bytes."""
    items = ['&l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    items += [f"&l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]" for i in range(1, levels + 1)]
    return "[" + ", ".join(items) + "]"


def no_hang(seconds: float = 10) -> contextlib.AbstractContextManager[None]:
    """Fail instead of hanging the suite (see tests/hang.py)."""
    return hang.no_hang(seconds)


def bounded(code: str, seconds: float = 20, memory_bytes: int = 1 << 30) -> dict:
    """Run ``code`` in a child Python limited to ``memory_bytes`` of address space; its last stdout line is
    a JSON object (what it reports), or a failure is reported here (a crash, MemoryError, a timeout)."""
    import resource

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))

    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    try:
        proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                              timeout=seconds, preexec_fn=limit, env=env, cwd=ROOT, check=False)
    except subprocess.TimeoutExpired:
        pytest.fail(f"no answer within {seconds} s")
    assert proc.returncode == 0 and proc.stdout.strip(), proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


REFUSE_IN_CHILD = """
import json, sys, time
from pathlib import Path
import sim
from sim.config.run_config import load_config
path = Path({path!r})
t0 = time.perf_counter()
try:
    {call}
    print(json.dumps({{"error": None}}))
except sim.SimError as e:
    print(json.dumps({{"error": type(e).__name__, "message": str(e), "seconds": time.perf_counter() - t0}}))
"""


# --- item 1: alias bombs ----------------------------------------------------------------------------------

def test_billion_laughs_as_a_target_name_is_refused_in_a_second(tmp_path):
    p = tmp_path / "chip.yaml"
    p.write_text(FT78NE.replace("name: FT78NE", f"name: {laughs(9)}"))
    out = bounded(REFUSE_IN_CHILD.format(path=str(p), call="sim.load_target(path)"))
    assert out["error"] == "TargetError", out
    assert out["seconds"] < 1.0 and len(out["message"]) < MESSAGE_CHARS and "\n" not in out["message"]
    assert re.search(rf"line 3, column \d+: aliases repeat more than {MAX_ALIAS_NODES} values", out["message"])


def test_billion_laughs_as_a_run_config_description_is_refused_in_a_second(tmp_path):
    for levels in (8, 9):  # eight levels used to be accepted after 4.6 s and 680 MB, nine grew past 2 GB
        p = tmp_path / f"cfg{levels}.yaml"
        p.write_text(re.sub(r"^description: .*$", f"description: {laughs(levels)}", CONFIG_S.read_text(), flags=re.MULTILINE))
        out = bounded(REFUSE_IN_CHILD.format(path=str(p), call="load_config(path)"))
        assert out["error"] == "ConfigError", out
        assert out["seconds"] < 1.0 and len(out["message"]) < MESSAGE_CHARS
        assert "aliases repeat more than" in out["message"]


def test_billion_laughs_in_a_sweep_file_and_a_calibration_target_is_refused_in_a_second(tmp_path):
    sweep = tmp_path / "s.yaml"
    sweep.write_text(f"configs: [{CONFIG_S}]\ngrid: {{args.params.6: {laughs(9)}}}\n")
    out = bounded(REFUSE_IN_CHILD.format(path=str(sweep), call="__import__('sim.sweep').sweep.load_sweep(path)"))
    assert out["error"] == "ConfigError" and out["seconds"] < 1.0 and "aliases repeat more than" in out["message"]
    chip = tmp_path / "chip.yaml"
    chip.write_text(FT78NE.replace("name: FT78NE", f"name: {laughs(9)}"))
    out = bounded(REFUSE_IN_CHILD.format(path=str(chip),
                                         call="__import__('sim.calibrate').calibrate.load_target_document(path)"))
    assert out["error"] == "TargetError" and out["seconds"] < 1.0 and "aliases repeat more than" in out["message"]


def test_alias_budget_counts_what_aliases_repeat_not_the_text():
    # 40 aliases of a 300-value list: 400 bytes of text, 12000 values once expanded.
    text = "base: &b [" + ", ".join(["1"] * 299) + "]\n" + "copies: [" + ", ".join(["*b"] * 40) + "]\n"
    with pytest.raises(sim.ConfigError, match=rf"line 2, column \d+: aliases repeat more than {MAX_ALIAS_NODES}"):
        load_yaml(text, "s.yaml", sim.ConfigError)
    # A few merges of shared defaults, the reason aliases exist, still read.
    ok = "defaults: &d {latency_cycles: 4, ports: 2}\na: {<<: *d, name: a}\nb: {<<: *d, name: b, ports: 1}\n"
    assert load_yaml(ok, "s.yaml", sim.ConfigError)["b"] == {"latency_cycles": 4, "ports": 1, "name": "b"}


def test_recursive_alias_and_too_many_values_are_refused():
    with pytest.raises(sim.TargetError, match=r"line 1, column 11: alias \*a inside the value it names"):
        load_yaml("x: &a [1, *a]\n", "t.yaml", sim.TargetError)
    with pytest.raises(sim.TargetError, match=rf"more than {MAX_NODES} values"):
        load_yaml("x: [" + ",".join(["0"] * (MAX_NODES + 1)) + "]\n", "t.yaml", sim.TargetError)


def test_a_megabyte_name_is_refused_with_a_short_message(tmp_path):
    p = tmp_path / "chip.yaml"
    p.write_text(FT78NE.replace("name: FT78NE", "name: " + "x" * 1_000_000))
    with pytest.raises(sim.TargetError, match=r"<top>\.name: a name of at most 64 characters, got 1000000") as info:
        sim.load_target(p)
    assert len(str(info.value)) < MESSAGE_CHARS


@pytest.mark.parametrize("value,shown", [
    (10 ** 400, "1000000000...0000 (401 digits)"),
    (-(10 ** 30), "-100000000...0000 (31 digits)"),
    (1 << 40000, "<an integer of about 12042 digits>"),
    ("a\nb", "'a\\nb'"),
    (3.5, "3.5"),
    ([1, [2, [3, [4, [5]]]]], "[1, [2, [3, [...]]]]"),
], ids=["400 digits", "negative", "12042 digits", "newline", "float", "nested"])
def test_brief_shows_values_in_one_short_line(value, shown):
    assert brief(value) == shown


def test_brief_is_bounded_on_huge_and_shared_values():
    bomb: Any = ["lol"] * 9
    for _ in range(9):
        bomb = [bomb] * 9  # 9**10 strings if expanded
    t0 = time.perf_counter()
    for value in (bomb, "x" * 10 ** 7, {str(i): i for i in range(10 ** 5)}, set(range(10 ** 5)), 1 << 100000):
        text = brief(value, limit=80)
        assert len(text) <= 80 and "\n" not in text
    assert time.perf_counter() - t0 < 1.0


@settings(max_examples=200, deadline=None, derandomize=True, database=None)
@given(value=st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.integers(-3, 3).map(lambda k: k * 10 ** 400 + k * (1 << 20000)), st.floats(),
              st.text(), st.binary()),
    lambda inner: st.one_of(st.lists(inner), st.dictionaries(st.text(max_size=5), inner), st.tuples(inner, inner)),
    max_leaves=40), limit=st.integers(8, 200))
def test_brief_never_exceeds_its_limit(value, limit):
    text = brief(value, limit)
    assert len(text) <= limit and "\n" not in text and "\r" not in text


# --- item 3: every number of a target file has a range -----------------------------------------------------

def numeric_paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    """Key paths of every number in a parsed target (regions by name)."""
    if isinstance(node, bool):
        return []
    if isinstance(node, (int, float)):
        return [prefix]
    out: list[tuple] = []
    if isinstance(node, dict):
        for k, v in node.items():
            out += numeric_paths(v, prefix + (k,))
    elif isinstance(node, list):
        for v in node:
            out += numeric_paths(v, prefix + (v["name"],))
    return out


#: FT78NE's target document, parsed once (each case below changes a copy of it).
FT78NE_DOC = yaml.safe_load(FT78NE)
NUMERIC_PATHS = numeric_paths(FT78NE_DOC)
#: libyaml's dumper where PyYAML has it (the text is the same; the pure-Python one takes most of these tests' time).
DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def key_path_text(path: tuple, doc: dict) -> str:
    """How the loader names ``path`` in messages: ``<top>.clock_hz``, ``regions[4](ddr).ports``,
    ``staging.levels[0](gsm).size_bytes``."""
    if len(path) == 1:
        return f"<top>.{path[0]}"
    if path[0] == "regions":
        index = [r["name"] for r in doc["regions"]].index(path[1])
        return f"regions[{index}]({path[1]})." + ".".join(path[2:])
    if path[:2] == ("staging", "levels"):
        index = [lv["name"] for lv in doc["staging"]["levels"]].index(path[2])
        return f"staging.levels[{index}]({path[2]})." + ".".join(path[3:])
    return ".".join(path)


def with_value(path: tuple, value: Any) -> str:
    doc = copy.deepcopy(FT78NE_DOC)
    node = doc
    for k in path[:-1]:
        node = next(r for r in node if r["name"] == k) if isinstance(node, list) else node[k]
    node[path[-1]] = value
    return yaml.dump(doc, Dumper=DUMPER, sort_keys=False)


@pytest.mark.parametrize("chip", ["FT78NE", "MT7004"])
def test_every_number_of_the_shipped_targets_has_a_documented_range(chip):
    doc = yaml.safe_load((ROOT / "targets" / f"{chip}.yaml").read_text())
    declared = {key.rsplit(".", 1)[-1] for key in range_table()}  # the ranges the schema declares
    for path in numeric_paths(doc):
        assert path[-1] in declared, path
    sim.load_target(chip)  # the shipped numbers lie inside the ranges


@pytest.mark.parametrize("value", [10 ** 400, -(10 ** 400), 10 ** 20, 1e300, -1e20, 2 ** 64],
                         ids=["400 digits", "minus 400 digits", "1e20 int", "1e300", "-1e20", "2**64"])
@pytest.mark.parametrize("path", NUMERIC_PATHS, ids=[".".join(map(str, p)) for p in NUMERIC_PATHS])
def test_absurd_numbers_are_refused_naming_the_key(tmp_path, path, value):
    p = tmp_path / "chip.yaml"
    p.write_text(with_value(path, value))
    with pytest.raises(sim.TargetError) as info:  # never OverflowError
        sim.load_target(p)
    message = str(info.value)
    assert f": {key_path_text(path, FT78NE_DOC)}: " in message, message
    assert len(message) < MESSAGE_CHARS and "\n" not in message


@pytest.mark.parametrize("path,value,pattern", [
    (("sync", "launch_overhead_cycles"), 10 ** 20, r"sync\.launch_overhead_cycles: must be <= 10000000 cycles"),
    (("regions", "ddr", "latency_cycles"), 10 ** 8, r"\(ddr\)\.latency_cycles: must be <= 10000000 cycles \(10 ms at 1 GHz\)"),
    (("clock_hz",), 10, r"<top>\.clock_hz: must be >= 1000000"),
    (("regions", "ddr", "bandwidth_bytes_per_cycle"), 10 ** 400,
     r"bandwidth_bytes_per_cycle: must be <= 65536, got 1000000000\.\.\.0000 \(401 digits\) \(a typo"),
    (("core", "precisions", "fp32", "lanes"), 10 ** 400, r"core\.precisions\.fp32\.lanes: must be <= 4096"),
    (("core", "units", "fmac", "count"), 10 ** 400, r"core\.units\.fmac\.count: must be <= 64"),
    (("core", "units", "vls", "latency_cycles"), 10 ** 5, r"core\.units\.vls\.latency_cycles: must be <= 10000, "),
    (("core", "reduction_latency_cycles"), 10 ** 5, r"core\.reduction_latency_cycles: must be <= 10000, "),
    (("core", "issue_width", "vector"), 0, r"core\.issue_width\.vector: must be >= 1"),
    (("core", "vector_registers"), 10 ** 400, r"core\.vector_registers: must be <= 4096"),
    (("dma", "engine_bytes_per_cycle"), 10 ** 400, r"dma\.engine_bytes_per_cycle: must be <= 65536"),
    (("dma", "engine_bytes_per_cycle"), 0, r"dma\.engine_bytes_per_cycle: must be >= 0\.001"),
])
def test_range_messages_say_the_bound(tmp_path, path, value, pattern):
    p = tmp_path / "chip.yaml"
    p.write_text(with_value(path, value))
    with pytest.raises(sim.TargetError, match=pattern):
        sim.load_target(p)


def test_a_target_at_the_edges_of_every_range_still_loads(tmp_path):
    doc = yaml.safe_load(FT78NE)
    doc["clock_hz"] = 100_000_000_000
    doc["sync"]["launch_overhead_cycles"] = 10_000_000
    doc["core"]["units"]["fmac"].update(count=6, latency_cycles=10_000)
    doc["core"]["units"]["salu"]["latency_cycles"] = 0
    doc["core"]["issue_width"]["vector"] = 6  # the busiest vector class, fmac, has 6 units: just enough
    next(r for r in doc["regions"] if r["name"] == "ddr")["bandwidth_bytes_per_cycle"] = 65536
    p = tmp_path / "edge.yaml"
    p.write_text(yaml.safe_dump(doc))
    target = sim.load_target(p)
    assert target.clock_hz == 10 ** 11 and target.launch_overhead_cycles == 10 ** 7
    assert target.core.units["fmac"].latency_cycles == 10_000 and target.core.units["salu"].latency_cycles == 0


# --- item 7: one strict reader ------------------------------------------------------------------------------

@pytest.mark.parametrize("text,pattern", [
    ("description: 2020-13-45\n", r"s\.yaml: not valid YAML: a value cannot be built \(ValueError: month must"),
    ("grid: " + "[" * 100 + "]" * 100 + "\n", r"s\.yaml: line 1, column \d+: nesting deeper than 64 levels"),
    ("grid: {a: [1]}\nconfigs: []\ngrid: {b: [2]}\n", r"s\.yaml: not valid YAML: line 3, column 1: duplicate key 'grid'"),
    ("x: !!python/object/apply:os.system ['true']\n", r"refused YAML tag"),
    ("x: " + "9" * 5000 + "\n", r"line 1, column 4: an integer of 5000 digits"),
    ("x: &a\n" * 1 + "y: *b\n", r"not valid YAML: line 2, column 4: found undefined alias 'b'"),
    ("k" * 100_000 + ": *" + "a" * 100_000 + "\n", r"not valid YAML"),
    ("x: \x00\n", r"not valid YAML"),
])
def test_the_strict_reader_refuses_cleanly(text, pattern):
    with pytest.raises(sim.ConfigError, match=pattern) as info:
        load_yaml(text, "s.yaml", sim.ConfigError)
    assert str(info.value).startswith("s.yaml: ") and "\n" not in str(info.value)
    assert len(str(info.value)) < MESSAGE_CHARS


def test_the_strict_reader_reads_a_file_or_says_why_not(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text("configs: [a.yaml]\ngrid: {args.core_mask: [0x1, 0o17]}\n")
    assert read_yaml_file(p, str(p), sim.ConfigError, what="sweep file") == {"configs": ["a.yaml"],
                                                                            "grid": {"args.core_mask": [1, 15]}}
    with pytest.raises(sim.ConfigError, match=r"missing\.yaml: sweep file not found"):
        read_yaml_file(tmp_path / "missing.yaml", str(tmp_path / "missing.yaml"), sim.ConfigError, what="sweep file")
    big = tmp_path / "big.yaml"
    big.write_text("x: '" + "y" * MAX_YAML_BYTES + "'\n")
    with pytest.raises(sim.ConfigError, match=rf"larger than the {MAX_YAML_BYTES} bytes a dspsim YAML file may hold"):
        read_yaml_file(big, str(big), sim.ConfigError)


# --- item 8: only regular files are read --------------------------------------------------------------------

def fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")
def test_named_pipe_as_target_or_run_config_is_refused_at_once(tmp_path):
    with no_hang():
        with pytest.raises(sim.TargetError, match=r"chip\.yaml: is a named pipe, not a regular file: dspsim reads "
                                                  r"only regular files"):
            sim.load_target(fifo(tmp_path / "chip.yaml"))
        with pytest.raises(sim.ConfigError, match=r"cfg\.yaml: is a named pipe, not a regular file"):
            load_config(fifo(tmp_path / "cfg.yaml"))
        with pytest.raises(sim.ConfigError, match=r"--target: .*cal\.yaml: is a named pipe, not a regular file"):
            load_target_document(str(fifo(tmp_path / "cal.yaml")))
        with pytest.raises(sim.ConfigError, match=r"is a named pipe"):
            load_measurements(fifo(tmp_path / "m.csv"))


def data_file_config(tmp_path: Path, file: str) -> Path:
    doc = yaml.safe_load(CONFIG_S.read_text())
    doc["target"] = str(ROOT / "targets" / "FT78NE.yaml")
    doc["data"][0] = {"name": "x", "addr": 0xA0000000, "shape": [4, 64], "dtype": "float32", "file": file}
    p = tmp_path / "cfg.yaml"
    p.write_text(yaml.safe_dump(doc, sort_keys=False))
    return p


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")
def test_named_pipe_as_a_data_file_is_refused_by_run(tmp_path, capsys):
    fifo(tmp_path / "x.npy")
    cfg = data_file_config(tmp_path, "x.npy")
    with no_hang():
        with pytest.raises(sim.ConfigError, match=r"data\.x\.file: .*x\.npy is a named pipe, not a regular file: "
                                                  r"dspsim reads only regular files"):
            prepare(load_config(cfg))
        assert main(["run", str(cfg), "--out-dir", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dspsim: error: ") and err.count("\n") == 1 and "named pipe" in err


def test_devices_and_folders_are_refused(tmp_path):
    # Run in a child with a memory limit: reading /dev/zero to its end would never stop.
    out = bounded(f"""
        import json
        import sim
        from sim.config.run_config import load_config
        from sim.run.runner import prepare
        msgs = []
        for call in (lambda: sim.load_target("/dev/zero"), lambda: load_config("/dev/zero"),
                     lambda: prepare(load_config({str(data_file_config(tmp_path, "/dev/zero"))!r}))):
            try:
                call()
                msgs.append(None)
            except sim.SimError as e:
                msgs.append(str(e))
        print(json.dumps(msgs))
    """, seconds=20, memory_bytes=1 << 30)
    assert len(out) == 3 and all(m and "is a device, not a regular file: dspsim reads only regular files" in m
                                 for m in out), out
    (tmp_path / "folder.npy").mkdir()
    with pytest.raises(sim.ConfigError, match=r"folder\.npy is a folder, not a regular file"):
        prepare(load_config(data_file_config(tmp_path, "folder.npy")))
    with pytest.raises(sim.ConfigError, match=r"is a folder, not a regular file"):
        load_config(tmp_path)


# --- item 9: zero-size arrays with absurd dimensions ----------------------------------------------------------

def config_with_shape(tmp_path: Path, shape: list, source: dict) -> Path:
    doc = yaml.safe_load(CONFIG_S.read_text())
    doc["target"] = str(ROOT / "targets" / "FT78NE.yaml")
    doc["data"].append({"name": "z", "addr": 0xC3000000, "shape": shape, "dtype": "float32", **source})
    p = tmp_path / "cfg.yaml"
    p.write_text(yaml.safe_dump(doc, sort_keys=False))
    return p


@pytest.mark.parametrize("shape,pattern", [
    ([0, 2 ** 62, 2 ** 62], r"data\[\d\]\.shape\[1\]: must be <= 536870912 \(the elements of a float32 array"),
    ([2 ** 62, 0], r"data\[\d\]\.shape\[0\]: must be <= 536870912"),
    ([0, 2 ** 20, 2 ** 20], r"data\[\d\]\.shape: \[0, 1048576, 1048576\]: an empty array, but its other "
                            r"dimensions hold 1099511627776 elements"),
])
@pytest.mark.parametrize("source", [{"random": {"seed": 1}}, {"fill": 0.0}, {"values": []}], ids=str)
def test_empty_arrays_with_huge_dimensions_are_refused(tmp_path, shape, pattern, source, capsys):
    p = config_with_shape(tmp_path, shape, source)
    with pytest.raises(sim.ConfigError, match=pattern):
        load_config(p)
    assert main(["run", str(p), "--out-dir", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_empty_arrays_of_sane_dimensions_still_work(tmp_path):
    m = prepare(load_config(config_with_shape(tmp_path, [0, 64], {"random": {"seed": 1}})))
    assert m.read(0xC3000000, (0, 64), np.float32).shape == (0, 64)


# --- item 11: messages -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("offset,size,pattern", [
    (0x700000, 0x80000, r"staging\.levels\[0\]\(gsm\)\.offset_bytes: must be <= 0x5fffff \(inside region gsm of "
                        r"0x600000 bytes\), got 0x700000"),
    (0x5C0000, 0x80000, r"staging\.levels\[0\]\(gsm\)\.offset_bytes: window \[0x405c0000, 0x40640000\) \(offset_bytes "
                        r"0x5c0000 \+ size_bytes 0x80000\) runs past the end of region gsm at 0x40600000: at most "
                        r"0x580000"),
    (0x0, 0x700000, r"staging\.levels\[0\]\(gsm\)\.size_bytes: must be <= 0x600000 \(inside region gsm of 0x600000 "
                    r"bytes\)"),
])
def test_staging_window_messages_name_the_key_at_fault(tmp_path, offset, size, pattern):
    doc = yaml.safe_load(FT78NE)
    doc["staging"]["levels"][0].update(offset_bytes=offset, size_bytes=size)
    p = tmp_path / "chip.yaml"
    p.write_text(yaml.safe_dump(doc))
    with pytest.raises(sim.TargetError, match=pattern):
        sim.load_target(p)


#: FT78NE.yaml as it was written before staging levels: one staging region and one workspace window.
OLD_STAGING = """staging_region: am

workspace:
  source: "assumed: the top 512 KiB of GSM is reserved for the kernels' cross-core partial results"
  region: gsm
  offset_bytes: 0x580000
  size_bytes: 0x80000
"""


def test_a_file_with_the_old_staging_keys_is_refused_with_the_levels_to_write(tmp_path, capsys):
    """A target file still using staging_region/workspace is refused on one line that spells out the
    staging block to write from the file's own values; that block, pasted in, loads as the shipped chip."""
    text = FT78NE[:FT78NE.index("# Staging levels")] + OLD_STAGING + "\n" + FT78NE[FT78NE.index("regions:"):]
    p = tmp_path / "old.yaml"
    p.write_text(text)
    with pytest.raises(sim.TargetError) as info:
        sim.load_target(p)
    msg = str(info.value)
    assert msg.startswith(f"{p}: staging_region: staging_region and workspace were replaced by a list of staging "
                          f"levels, outermost first; write instead: staging: ")
    assert "\n" not in msg and "0x580000" in msg and "beside: am" in msg
    assert main(["targets", str(p)]) == 2 and capsys.readouterr().err.count("\n") == 1
    # The block the message spells out (with the scalar memory it suggests) is the shipped chip's staging.
    block = re.search(r"write instead: staging: (\{.*\]\})", msg).group(1)
    suggested = yaml.safe_load(block.replace('"..."', '"from the message"'))
    suggested["levels"].append(yaml.safe_load(re.search(r"adds (\{[^}]*\})", msg).group(1)))
    doc = yaml.safe_load(FT78NE)
    # The old keys knew nothing of GEMM's block window (gsm_blocks): the rest is the shipped chip's.
    assert suggested["levels"] == [lv for lv in doc["staging"]["levels"] if lv["name"] != "gsm_blocks"]
    # Only one of the two old keys left: still refused, naming the one there is.
    doc.pop("staging")
    doc["workspace"] = {"region": "gsm", "offset_bytes": 0x580000, "size_bytes": 0x80000}
    p.write_text(yaml.safe_dump(doc))
    with pytest.raises(sim.TargetError, match=r": workspace: workspace was replaced by a list of staging levels"):
        sim.load_target(p)


def test_a_file_written_for_memory_ports_is_refused_with_what_to_delete(tmp_path, capsys):
    """A target file of the port model (``ports`` per region, no engine rate) is refused on one line: the first
    region that gives ports, what replaced them (a region's bandwidth shared fluidly, each transfer capped by its
    engine), every region to delete them from and the DMA key to add; done so, it loads as the shipped chip."""
    doc = yaml.safe_load(FT78NE)
    engine_rate = doc["dma"].pop("engine_bytes_per_cycle")
    for r in doc["regions"]:
        if r["name"] in ("am", "gsm", "ddr"):
            r["ports"] = 4
    p = tmp_path / "ports.yaml"
    p.write_text(yaml.safe_dump(doc, sort_keys=False))
    with pytest.raises(sim.TargetError) as info:
        sim.load_target(p)
    msg = str(info.value)
    assert msg.startswith(f"{p}: regions[1](am).ports: ports are gone: a region's bandwidth_bytes_per_cycle is now "
                          f"shared fluidly among the transfers streaming through it")
    assert "delete ports: from every region (3 give it: am, gsm, ddr)" in msg
    assert msg.endswith("and give dma.engine_bytes_per_cycle (the most bytes per cycle one DMA engine streams, "
                        "e.g. 64)")
    assert "\n" not in msg and len(msg) < MESSAGE_CHARS
    assert main(["targets", str(p)]) == 2 and capsys.readouterr().err.count("\n") == 1
    # Without ports but still without the engine's rate: refused, naming the key.
    for r in doc["regions"]:
        r.pop("ports", None)
    p.write_text(yaml.safe_dump(doc, sort_keys=False))
    with pytest.raises(sim.TargetError, match=r": dma\.engine_bytes_per_cycle: required key is missing: the most "
                                              r"bytes per cycle one DMA engine streams"):
        sim.load_target(p)
    doc["dma"]["engine_bytes_per_cycle"] = engine_rate
    p.write_text(yaml.safe_dump(doc, sort_keys=False))
    assert sim.load_target(p).dma == sim.load_target("FT78NE").dma
    assert sim.load_target(p).regions == sim.load_target("FT78NE").regions


@pytest.mark.parametrize("old,new,pattern", [
    ("cores: 8", "cores: 010", r"line \d+, column 8: 010: a leading zero is octal in YAML 1\.1 \(8\) and decimal in "
                               r"YAML 1\.2 \(10\); write 0o10 for octal 8 or 10 for decimal"),
    ("latency_cycles: 200", "latency_cycles: 3:20", r"3:20 is a base-60 number in YAML 1\.1 \(200\) and text in "
                                                    r"YAML 1\.2: write 200 for the number, or quote it"),
    ("setup_cycles: 64", "setup_cycles: 064", r"064: a leading zero"),
    ("setup_cycles: 64", "setup_cycles: 09", r"09: a leading zero is octal in YAML 1\.1 \(not a number\).*write 9"),
])
def test_yaml_1_1_numbers_are_refused_in_targets(tmp_path, old, new, pattern):
    p = tmp_path / "chip.yaml"
    p.write_text(FT78NE.replace(old, new, 1))
    with pytest.raises(sim.TargetError, match=pattern):
        sim.load_target(p)


def test_yaml_1_2_numbers_read_as_written(tmp_path):
    text = (FT78NE.replace("cores: 8", "cores: 0o10").replace("clock_hz: 1800000000", "clock_hz: 1.8e9")
            .replace("setup_cycles: 64", "setup_cycles: 0b1000000").replace("latency_cycles: 200", "latency_cycles: 2_00"))
    p = tmp_path / "chip.yaml"
    p.write_text(text)
    with pytest.raises(sim.TargetError, match=r"clock_hz: expected an integer, got 1800000000\.0 \(a decimal point "
                                              r"or an exponent makes a float"):
        sim.load_target(p)  # 1.8e9 is a float in YAML 1.2 (a string in YAML 1.1): an integer field says so
    p.write_text(text.replace("clock_hz: 1.8e9", "clock_hz: 1_800_000_000"))
    target = sim.load_target(p)
    assert (target.cores, target.dma.setup_cycles, target.region("ddr").latency_cycles) == (8, 64, 200)
    p.write_text(FT78NE.replace("bandwidth_bytes_per_cycle: 20", "bandwidth_bytes_per_cycle: 2.0e1"))
    assert sim.load_target(p).region("ddr").bandwidth_bytes_per_cycle == 20.0


def test_yaml_1_1_octal_address_is_refused_in_a_run_config(tmp_path):
    text = CONFIG_S.read_text().replace("addr: 0xA0000000", "addr: 02400000000", 1)
    assert text != CONFIG_S.read_text()
    p = tmp_path / "cfg.yaml"
    p.write_text(text)
    with pytest.raises(sim.ConfigError, match=r"02400000000: a leading zero is octal in YAML 1\.1 \(335544320\).*"
                                              r"write 0o2400000000 for octal 335544320 or 2400000000 for decimal"):
        load_config(p)


@pytest.mark.parametrize("description", ["[a, b]", "{a: 1}", "12", "2020-01-02"])
def test_description_must_be_text(tmp_path, description):
    t = tmp_path / "chip.yaml"
    t.write_text(re.sub(r"^description: .*$", f"description: {description}", FT78NE, flags=re.MULTILINE))
    with pytest.raises(sim.TargetError, match=r"<top>\.description: expected text, got \w+.*put it in quotes"):
        sim.load_target(t)
    c = tmp_path / "cfg.yaml"
    c.write_text(re.sub(r"^description: .*$", f"description: {description}", CONFIG_S.read_text(), flags=re.MULTILINE))
    with pytest.raises(sim.ConfigError, match=r"description: expected text, got \w+.*put it in quotes"):
        load_config(c)
    c.write_text(re.sub(r"^description: .*$", f"description: '{description}'", CONFIG_S.read_text(), flags=re.MULTILINE))
    assert load_config(c).description == description
