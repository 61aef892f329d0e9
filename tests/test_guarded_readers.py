"""Every file dspsim reads goes through one guarded reader (issue 20, item 2).

Tuning-cache entries, trace files (``dspsim trace summary|plot|diff``), ``dspsim calibrate`` measurements and
sweep journals: named pipes, devices (``/dev/zero`` through a link), sparse 3 GB files, 100,000 ``[``, numbers of
5000 digits, ``1e38``, NaN and negative durations.  A trace or a measurement is refused with a named SimError on
one short line (CLI: exit 2) within a second; a tuning-cache entry is a miss, overwritten by the next search;
``dspsim cache clear`` removes whatever its folder holds, or says on one line why it cannot.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import hang
import pytest

import sim
from sim.calibrate import load_measurements
from sim.cli import main
from sim.config.run_config import load_config
from sim.files import tuning_cache
from sim.files.jsonsafe import MAX_DEPTH, load_json, read_json_file
from sim.files.regular_file import read_file
from sim.inspect.trace_tools import MAX_TRACE_BYTES, TraceFileError, load_trace
from sim.run.runner import prepare

ROOT = Path(__file__).resolve().parent.parent
#: A call of three cheap candidate tilings (the tuning cache's test call).
SMALL = ROOT / "configs" / "ft78ne_batch_norm_grad_p.yaml"
#: The longest one-line refusal (the file's path included).
MESSAGE_CHARS = 400
#: A refusal takes at most this long in the process (issue 20: "within a second").
REFUSE_SECONDS = 1.0

posix_only = pytest.mark.skipif(not hasattr(os, "mkfifo") or not os.path.exists("/dev/zero"),
                                reason="named pipes and /dev/zero are POSIX")


def no_hang(seconds: float = 10) -> contextlib.AbstractContextManager[None]:
    """Fail instead of hanging the suite (see tests/hang.py)."""
    return hang.no_hang(seconds)


def in_bounded_child(code: str, memory_bytes: int = 1 << 30, seconds: float = 30) -> dict:
    """Run ``code`` in a child Python limited to ``memory_bytes`` of address space (so that reading /dev/zero or
    a 3 GB file to its end fails there, not here); its last stdout line is a JSON object."""
    import resource

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))

    env = {**os.environ, "PYTHONPATH": str(ROOT), "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    try:
        proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                              timeout=seconds, preexec_fn=limit, env=env, cwd=ROOT, check=False)
    except subprocess.TimeoutExpired:
        pytest.fail(f"no answer within {seconds} s")
    assert proc.returncode == 0 and proc.stdout.strip(), proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def one_line_refusal(capsys: pytest.CaptureFixture[str], argv: list[str], path: Path) -> str:
    """Run the CLI: exit 2, within REFUSE_SECONDS, one short line on stderr naming ``path``; the line."""
    t0 = time.perf_counter()
    with no_hang():
        rc = main(argv)
    seconds = time.perf_counter() - t0
    err = capsys.readouterr().err
    assert rc == 2, err
    assert err.startswith("dspsim: error: ") and err.count("\n") == 1 and len(err) < MESSAGE_CHARS, err[:2000]
    assert str(path) in err
    assert seconds < REFUSE_SECONDS, seconds
    return err


def small_call(**kw) -> sim.Run:
    cfg = load_config(SMALL)
    return prepare(cfg, numerics=False).call(cfg.symbol, numerics=False, **cfg.args)


# --- the reader itself ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("text,pattern", [
    ("[" * 100_000, rf"nesting deeper than {MAX_DEPTH} levels"),
    ("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), rf"nesting deeper than {MAX_DEPTH} levels"),
    ("[" + "9" * 5000 + "]", r"an integer of 5000 digits"),
    ('{"x": 1e400}', r"the number 1e400 is beyond the range of a float"),
    ('{"x": NaN}', r"NaN is not a number dspsim reads"),
    ("[-Infinity]", r"-Infinity is not a number dspsim reads"),
    ('{"a": 1, "a": 2}', r"duplicate key 'a' in one object"),
    ('["\\ud800"]', r"a string that is not valid Unicode"),
    ("{nope", r"not valid JSON: Expecting property name enclosed in double quotes \(line 1, column 2\)"),
], ids=["100000 [", "one level too deep", "5000 digits", "1e400", "NaN", "-Infinity", "duplicate key",
        "lone surrogate", "syntax"])
def test_the_json_reader_refuses_on_one_line(text, pattern):
    t0 = time.perf_counter()
    with pytest.raises(sim.ConfigError, match=r"^x\.json: " + pattern) as info:
        load_json(text, "x.json", sim.ConfigError)
    assert time.perf_counter() - t0 < REFUSE_SECONDS
    assert "\n" not in str(info.value) and len(str(info.value)) < MESSAGE_CHARS
    assert load_json("[" * MAX_DEPTH + "]" * MAX_DEPTH, "x.json", sim.ConfigError) is not None  # at the cap: read


@posix_only
def test_the_reader_refuses_pipes_and_files_over_the_cap_before_reading(tmp_path):
    pipe = tmp_path / "pipe.json"
    os.mkfifo(pipe)
    with no_hang(), pytest.raises(sim.ConfigError, match=r"pipe\.json: is a named pipe, not a regular file"):
        read_json_file(pipe, str(pipe), sim.ConfigError, 1 << 20)
    huge = tmp_path / "huge.json"
    with huge.open("wb") as f:
        f.truncate(3 << 30)  # sparse: 3 GB that take no disk
    t0 = time.perf_counter()
    with pytest.raises(sim.ConfigError, match=r"huge\.json: larger than the 1048576 bytes a dspsim JSON file may"):
        read_json_file(huge, str(huge), sim.ConfigError, 1 << 20)
    assert time.perf_counter() - t0 < 0.1  # refused from its size: nothing was read
    link = tmp_path / "zero.json"
    link.symlink_to("/dev/zero")
    with pytest.raises(sim.ConfigError, match=r"zero\.json: is a device, not a regular file"):
        read_file(link, str(link), sim.ConfigError, 1 << 20)


# --- tuning-cache entries -------------------------------------------------------------------------------------

def _fifo(p: Path) -> None:
    os.mkfifo(p)


HOSTILE_ENTRIES = {
    "100000 [": lambda p: p.write_text("[" * 100_000),
    "named pipe": _fifo,
    "folder": lambda p: p.mkdir(),
    "5000-digit tolerance": lambda p: p.write_text('{"format": 1, "tolerance": ' + "9" * 5000 + "}"),
    "NaN tolerance": lambda p: p.write_text('{"format": 1, "tolerance": NaN}'),
    "duplicate keys": lambda p: p.write_text('{"format": 1, "format": 1}'),
}


@posix_only
@pytest.mark.parametrize("make", list(HOSTILE_ENTRIES.values()), ids=list(HOSTILE_ENTRIES))
def test_a_hostile_entry_is_a_miss_and_the_next_search_overwrites_it(make):
    fresh = small_call()
    [entry] = tuning_cache.entries()
    good = json.loads(entry.read_text())
    entry.unlink()
    make(entry)
    t0 = time.perf_counter()
    with no_hang():
        assert tuning_cache.load(entry.stem) is None
    assert time.perf_counter() - t0 < REFUSE_SECONDS
    with no_hang():
        run = small_call()
    assert not run.tiling.cached and (run.cycles, run.tiling.tiling) == (fresh.cycles, fresh.tiling.tiling)
    if entry.is_dir():  # nothing can replace a folder: every run searches until `dspsim cache clear`
        assert tuning_cache.load(entry.stem) is None
    else:
        assert json.loads(entry.read_text()) == good and small_call().tiling.cached


@posix_only
def test_entries_that_never_end_are_misses_in_bounded_memory():
    """A link to /dev/zero and a sparse 3 GB entry: each a miss at once, in a process of 1 GiB of address space
    (reading either to its end used to run out of memory), then overwritten by the search."""
    out = in_bounded_child(f"""
        import json, os, time
        from sim.files import tuning_cache
        from sim.config.run_config import load_config
        from sim.run.runner import prepare
        cfg = load_config({str(SMALL)!r})
        def call():
            return prepare(cfg, numerics=False).call(cfg.symbol, numerics=False, **cfg.args)
        fresh = call()
        [entry] = tuning_cache.entries()
        result = {{}}
        for kind in ("zero", "huge"):
            entry.unlink()
            if kind == "zero":
                entry.symlink_to("/dev/zero")
            else:
                with entry.open("wb") as f:
                    f.truncate(3 << 30)
            t0 = time.perf_counter()
            missed = tuning_cache.load(entry.stem) is None
            seconds = time.perf_counter() - t0
            run = call()
            result[kind] = [missed, seconds, run.tiling.cached, run.cycles == fresh.cycles,
                            entry.is_file() and not entry.is_symlink() and tuning_cache.load(entry.stem) is not None]
        print(json.dumps(result))
    """)
    for kind, (missed, seconds, cached, same_cycles, rebuilt) in out.items():
        assert missed and seconds < REFUSE_SECONDS and not cached and same_cycles and rebuilt, (kind, out)


@posix_only
def test_cache_clear_removes_whatever_is_in_its_folder(tmp_path, capsys):
    small_call()
    folder = tuning_cache.tuning_dir()
    os.mkfifo(folder / "pipe.json")
    (folder / "zero.json").symlink_to("/dev/zero")
    with (folder / "huge.json").open("wb") as f:
        f.truncate(3 << 30)
    (folder / "deep.json").write_text("[" * 100_000)
    (folder / "sub.json").mkdir()
    (folder / "sub.json" / "x").write_text("x")
    (folder / ".left.tmp").write_text("{")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("kept")
    (folder / "link.json").symlink_to(outside)
    with no_hang():
        assert main(["cache"]) == 0
    assert "entries: 7" in capsys.readouterr().out  # every *.json name, whatever it is
    with no_hang():
        assert main(["cache", "clear"]) == 0
    assert "tuning cache" in capsys.readouterr().out
    assert list(folder.iterdir()) == []
    assert (outside / "keep").read_text() == "kept"  # a link is removed, never followed


def test_cache_clear_of_a_read_only_cache_exits_2_on_one_line(monkeypatch, capsys):
    small_call()
    [entry] = tuning_cache.entries()
    folder = entry.parent
    if os.geteuid() != 0:
        folder.chmod(0o555)  # a read-only folder (root ignores the mode bits: then the OS's refusal is simulated)
    else:
        def read_only(path, *a, **k):
            raise OSError(errno.EROFS, "Read-only file system", str(path))
        monkeypatch.setattr(os, "unlink", read_only)
    try:
        assert main(["cache", "clear"]) == 2
    finally:
        folder.chmod(0o755)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and len(err) < MESSAGE_CHARS
    assert err.startswith(f"dspsim: error: tuning cache {folder}: cannot delete 1 of 1 entries ({entry.name}: ")
    assert err.endswith("); 0 deleted\n")
    assert entry.exists()


# --- trace files ----------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def small_trace(tmp_path_factory) -> tuple[dict, list[str]]:
    """The JSON document and CSV lines of a small run's trace."""
    folder = tmp_path_factory.mktemp("trace")
    run = small_call()
    doc = json.loads(run.write_trace(folder / "t.json").read_text())
    return doc, run.write_trace(folder / "t.csv").read_text().splitlines()


def _first_slice(doc: dict) -> dict:
    return next(e for e in doc["traceEvents"] if e.get("ph") == "X" and e["cat"] == "dma_in")


def _edit_json(doc: dict, edit) -> str:
    doc = json.loads(json.dumps(doc))
    edit(doc)
    return json.dumps(doc)


def _edit_csv(lines: list[str], column: str, value: str) -> str:
    head = lines[0].split(",")
    row = lines[2].split(",")
    row[head.index(column)] = value
    return "\n".join([lines[0], lines[1], ",".join(row), *lines[3:]]) + "\n"


def _set_args(**values):
    def edit(doc: dict) -> None:
        _first_slice(doc)["args"].update(values)
    return edit


def _negative(doc: dict) -> None:
    ev = _first_slice(doc)["args"]
    ev["end_cycle"] = ev["start_cycle"] - 1


def _meta(key: str, value):
    def edit(doc: dict) -> None:
        doc["metadata"][key] = value
    return edit


HOSTILE_JSON_TRACES = {
    "end 1e38": (_set_args(end_cycle=1e38), r"field 'end': must be <= 9007199254740992, got 1e\+38"),
    "negative duration": (_negative, r": ends at cycle \d+, before it starts \(\d+\): a negative duration"),
    "5000-digit bytes": (lambda d: None, r"an integer of 5000 digits"),
    "NaN start": (lambda d: None, r"NaN is not a number dspsim reads"),
    "bytes -1": (_set_args(bytes=-1), r"field 'bytes': must be >= 0, got -1"),
    "core 10**6": (_set_args(core=10 ** 6), r"field 'core': must be <= 63"),
    "address 2**70": (_set_args(src=hex(1 << 70)), r"field 'src': must be <= 18446744073709551615"),
    "wait beyond the event": (_set_args(wait_cycles=10 ** 9), r"field 'wait_cycles': 1000000000, more than"),
    "unit with other digits": (_set_args(unit="dma\u00b2"), r"field 'unit': expected compute, sync or dma<k>"),
    "unknown kind": (_set_args(kind="teleport"), r"field 'kind': expected one of launch, dma_in"),
    "unit a number": (_set_args(unit=5), r"field 'unit': expected text, got 5"),
    "args a list": (lambda d: _first_slice(d).update(args=[1, 2]), r"'args' is not an object: \[1, 2\]"),
    "cycles zz": (_meta("cycles", "zz"), r"metadata\.cycles: expected an integer, got 'zz'"),
    "clock 0": (_meta("clock_hz", 0), r"metadata\.clock_hz: must be >= 1, got 0"),
    "cores a number": (_meta("cores", 5), r"metadata\.cores: expected a list of at most 64 cores, got 5"),
    "roofline 1e300": (_meta("roofline_cycles", 1e300), r"metadata\.roofline_cycles: must be <= 9\.0072e\+15"),
    "regions a list": (_meta("regions", [1]), r"metadata\.regions: expected an object of regions by name"),
    "metadata a list": (lambda d: d.update(metadata=[1]), r"'metadata' is not an object"),
}


#: Every case by ``trace summary``; a few by ``diff`` and ``plot`` too (the three commands share the loader).
TRACE_COMMAND_CASES = [(case, "summary") for case in HOSTILE_JSON_TRACES] + [
    (case, command) for command in ("diff", "plot") for case in ("end 1e38", "negative duration", "cycles zz")]


@pytest.mark.parametrize("case,command", TRACE_COMMAND_CASES, ids=[f"{c}-{m}" for c, m in TRACE_COMMAND_CASES])
def test_a_hostile_json_trace_is_refused_on_one_line(small_trace, tmp_path, capsys, case, command):
    edit, pattern = HOSTILE_JSON_TRACES[case]
    text = _edit_json(small_trace[0], edit)
    if case == "5000-digit bytes":
        text = text.replace('"bytes":', '"bytes":' + "9" * 5000 + ',"_":', 1)
    if case == "NaN start":
        text = text.replace('"start_cycle":', '"start_cycle":NaN,"_":', 1)
    p = tmp_path / "t.json"
    p.write_text(text)
    argv = {"summary": ["trace", "summary", str(p)], "diff": ["trace", "diff", str(p), str(p)],
            "plot": ["trace", "plot", str(p), "-o", str(tmp_path / "g.png")]}[command]
    err = one_line_refusal(capsys, argv, p)
    with pytest.raises(TraceFileError) as info:
        load_trace(p)
    assert f"dspsim: error: {info.value}\n" == err
    assert re.search(pattern, str(info.value)), str(info.value)


@pytest.mark.parametrize("column,value,pattern", [
    ("end", "1e38", r"row 3 field 'end': expected an integer, got '1e38'"),
    ("end", "1" + "0" * 38, r"row 3 field 'end': must be <= 9007199254740992, got '1000000000"),
    ("end", "9" * 5000, r"row 3 field 'end': must be <= 9007199254740992, got a number of 5000 digits"),
    ("start", "999999", r"row 3: ends at cycle \d+, before it starts \(999999\): a negative duration"),
    ("core", "-1", r"row 3 field 'core': must be >= 0, got '-1'"),
    ("kind", "x" * 100_000, r"row 3 field 'kind': expected one of"),
])
def test_a_hostile_csv_trace_is_refused_on_one_line(small_trace, tmp_path, capsys, column, value, pattern):
    p = tmp_path / "t.csv"
    p.write_text(_edit_csv(small_trace[1], column, value))
    err = one_line_refusal(capsys, ["trace", "summary", str(p)], p)
    assert re.search(pattern, err), err


def test_a_deep_json_trace_is_refused_on_one_line(tmp_path, capsys):
    p = tmp_path / "deep.json"
    p.write_text("[" * 100_000)
    assert "nesting deeper than 16 levels" in one_line_refusal(capsys, ["trace", "summary", str(p)], p)


@posix_only
def test_a_pipe_as_trace_is_refused_at_once(tmp_path, capsys):
    p = tmp_path / "pipe.json"
    os.mkfifo(p)
    assert "is a named pipe, not a regular file" in one_line_refusal(capsys, ["trace", "summary", str(p)], p)
    c = tmp_path / "pipe.csv"
    os.mkfifo(c)
    assert "is a named pipe" in one_line_refusal(capsys, ["trace", "diff", str(p), str(c)], p)


@posix_only
def test_endless_and_huge_traces_are_refused_in_bounded_memory(tmp_path):
    (tmp_path / "zero.json").symlink_to("/dev/zero")
    (tmp_path / "zero.csv").symlink_to("/dev/zero")
    with (tmp_path / "huge.json").open("wb") as f:
        f.truncate(3 << 30)
    out = in_bounded_child(f"""
        import json, time
        from sim.inspect.trace_tools import TraceFileError, load_trace
        out = []
        for name in ("zero.json", "zero.csv", "huge.json"):
            t0 = time.perf_counter()
            try:
                load_trace({str(tmp_path)!r} + "/" + name)
                out.append(None)
            except TraceFileError as e:
                out.append([str(e), time.perf_counter() - t0])
        print(json.dumps(out))
    """)
    zero_json, zero_csv, huge = out
    assert "zero.json: is a device, not a regular file" in zero_json[0]
    assert "zero.csv: is a device, not a regular file" in zero_csv[0]
    assert f"huge.json: larger than the {MAX_TRACE_BYTES} bytes a dspsim trace file may hold" in huge[0]
    assert all(seconds < REFUSE_SECONDS for _, seconds in out)


# --- calibrate measurements -----------------------------------------------------------------------------------

@pytest.mark.parametrize("rows,pattern", [
    ("symbol,args,cycles,core_mask\nfp_batch_norm_grad_s,{},100,zz\n",
     r"line 2: column 'core_mask': expected an integer, got 'zz'"),
    ("symbol,args,cycles,core_mask\nfp_batch_norm_grad_s,{},100," + "9" * 5000 + "\n",
     r"line 2: column 'core_mask': must be <= \d+, got a number of 5000 digits"),
    ("symbol,args,cycles\nfp_batch_norm_grad_s,{}," + "9" * 5000 + "\n",
     r"line 2: column 'cycles': must be <= 1000000000000000, got a number of 5000 digits"),
    ("symbol,args,cycles\nfp_batch_norm_grad_s,{},1e38\n",
     r"line 2: column 'cycles': expected a whole number of cycles, got '1e38'"),
    ('symbol,args,cycles\nfp_batch_norm_grad_s,"' + "[" * 100_000 + '",100\n',
     r"line 2: column 'args': nesting deeper than 8 levels"),
    ('symbol,args,cycles\nfp_batch_norm_grad_s,"{""x"": NaN}",100\n', r"column 'args': NaN is not a number"),
    ('symbol,args,cycles\nfp_batch_norm_grad_s,"{""x"": ""0xzz""}",100\n',
     r"column 'args': x: expected an address, got '0xzz'"),
    ('symbol,args,cycles\nfp_batch_norm_grad_s,"{""numerics"": true}",100\n',
     r"column 'args': 'numerics' is not an argument of a measured call"),
    ('symbol,args,cycles\nfp_batch_norm_grad_s,{"x": 1, "y": 2},100\n',
     r"line 2: 4 fields, the header names 3 \(a field holding commas must be quoted\)"),
], ids=["core_mask zz", "5000-digit core_mask", "5000-digit cycles", "cycles 1e38", "deep args", "NaN arg",
        "bad address", "reserved argument", "unquoted commas"])
def test_a_hostile_measurement_is_refused_on_one_line(tmp_path, capsys, rows, pattern):
    p = tmp_path / "m.csv"
    p.write_text(rows)
    with pytest.raises(sim.ConfigError, match=pattern) as info:
        load_measurements(p)
    assert str(info.value).startswith(f"{p}: ") and len(str(info.value)) < MESSAGE_CHARS
    err = one_line_refusal(capsys, ["calibrate", str(p), "--target", "FT78NE", "-o", str(tmp_path / "o.yaml")], p)
    assert err == f"dspsim: error: {info.value}\n"


# --- the other readers: sweep journals, kernel files --------------------------------------------------------

def test_a_sweep_journal_skips_the_lines_the_reader_refuses(tmp_path):
    from sim.sweep.results import _read_jsonl
    journal = tmp_path / "points.jsonl"
    journal.write_text("\n".join(["[" * 100_000, '{"id": [1]}', '{"id": "a", "cycles": ' + "9" * 5000 + "}",
                                  '{"id": "b", "cycles": 5, "roofline_fraction": NaN}', '{"id": "c"']) + "\n")
    with no_hang():
        rows = _read_jsonl(journal)
    assert [r["id"] for r in rows] == ["b"]  # the others run again; NaN is what json.dumps writes itself


@posix_only
def test_a_pipe_as_sweep_journal_or_kernel_file_is_refused(tmp_path):
    from sim.config.run_config import KernelSource
    from sim.config.user_kernels import source_digest
    from sim.sweep.results import _read_jsonl
    os.mkfifo(tmp_path / "points.jsonl")
    os.mkfifo(tmp_path / "k.py")
    with no_hang():
        with pytest.raises(sim.ConfigError, match=r"points\.jsonl: is a named pipe"):
            _read_jsonl(tmp_path / "points.jsonl")
        with pytest.raises(sim.ConfigError, match=r"k\.py: is a named pipe"):
            source_digest(KernelSource(text="k.py", path=tmp_path / "k.py"))


def test_libyamls_events_read_every_shipped_file_as_the_pure_python_loader_does():
    """The strict reader's fast path (libyaml's parser under the same composer and constructors) gives the very
    document the pure Python loader gives, for every YAML file the project ships; and a refusal is the pure Python
    loader's, word for word."""
    import yaml

    from sim.errors import ConfigError
    from sim.files import yamlsafe

    if yamlsafe._CParser is None:
        pytest.skip("this PyYAML has no libyaml")
    root = Path(__file__).resolve().parent.parent
    files = [p for d in ("targets", "configs", "examples") for p in sorted((root / d).rglob("*.yaml"))]
    assert len(files) >= 20
    for path in files:
        text = path.read_text()
        assert yaml.load(text, Loader=yamlsafe._FastStrictLoader) == yaml.load(text, Loader=yamlsafe._StrictLoader)
    bad = "a: 1\na: 2\n"
    with pytest.raises(yaml.YAMLError):
        yaml.load(bad, Loader=yamlsafe._FastStrictLoader)
    with pytest.raises(ConfigError, match=r"^f\.yaml: not valid YAML: .*duplicate key 'a' \(first on line 1\)"):
        yamlsafe.load_yaml(bad, "f.yaml", ConfigError)
