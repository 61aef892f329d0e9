"""Property-based fuzzing (hypothesis) of target files, run-configs, sweep files, tuning-cache entries, trace
files, kernel arguments and memory access.

Target files and run-configs are fuzzed as documents (the shipped files with keys deleted or replaced by
junk: huge integers and floats, megabyte strings, lists, mappings, nested alias trees) and as text (YAML
fragments: anchors and aliases, recursive aliases, YAML 1.1 octal and base-60 numbers, deep nesting).

Tuning-cache entries and trace files are fuzzed the same way, as JSON documents (a real entry, a real trace
with values replaced by junk: numbers of a thousand digits, NaN, deep nesting, lone surrogates) and as text
(100,000 ``[``, NaN, cut documents; CSV rows of junk).  An entry is a miss or a choice the call can use,
never an error; a trace is refused with a TraceFileError or summarised and compared without one.

Properties: never an exception outside SimError; loading refuses within seconds, in a short one-line
message; never memory changed by a refused call; never a hang
(each example runs under a wall-clock alarm); a layout the checks accept never faults while running;
every suggested address is legal.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import math
import os
import time
from pathlib import Path
from typing import Any

import hang
import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kernels
import sim
from sim.cli import main
from sim.config.run_config import load_config
from sim.model.call import BoundCall, Buffer
from sim.model.layout import check_layout
from sim.run.runner import prepare

ROOT = Path(__file__).resolve().parent.parent
FT78NE_DOC = yaml.safe_load((ROOT / "targets" / "FT78NE.yaml").read_text())
CONFIG_DOC = yaml.safe_load((ROOT / "configs" / "ft78ne_batch_norm_grad_s.yaml").read_text())
TARGETS = {name: sim.load_target(name) for name in ("FT78NE", "MT7004")}
#: Seconds one example may take before it counts as a hang.
HANG_SECONDS = 20
#: Seconds loading one hostile target or run-config may take (issue 12: "within a second"; slack for a busy
#: machine).
LOAD_SECONDS = 3
#: Longest refusal message, beyond the file's path: user values in messages are cut (sim.errors.brief).
MESSAGE_CHARS = 600

#: DSPSIM_FUZZ_EXAMPLES=500 runs a deeper, randomised search (CI runs the small derandomised one).
DEEP = int(os.environ.get("DSPSIM_FUZZ_EXAMPLES", "0") or 0)
FUZZ = settings(max_examples=DEEP or 25, deadline=None, database=None, derandomize=not DEEP,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def no_hang(seconds: float = HANG_SECONDS) -> contextlib.AbstractContextManager[None]:
    """Fail instead of hanging the suite (see tests/hang.py)."""
    return hang.no_hang(seconds)


# --- strategies ----------------------------------------------------------------------------------------

def alias_bomb(levels: int, as_mapping: bool = False) -> Any:
    """A "billion laughs": ``levels`` nested lists (or mappings) of nine references to one shared value.

    Python shares the inner value, so it costs nothing here; ``yaml.safe_dump`` writes it as anchors and
    aliases (a few hundred bytes), which a naive reader expands to 9**levels strings.
    """
    node: Any = "lol"
    for _ in range(levels):
        node = {f"k{i}": node for i in range(9)} if as_mapping else [node] * 9
    return node


#: Values of every YAML type, sizes either small or absurd (mid-sized legal arrays would only be slow).
junk = st.one_of(
    st.none(), st.booleans(), st.integers(-8, 300), st.integers(1 << 31, 1 << 70), st.integers(-(1 << 70), -1),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
    st.lists(st.integers(-2, 5), max_size=4), st.dictionaries(st.text(max_size=4), st.integers(0, 3), max_size=2),
    st.sampled_from(["0xA0000000", "1e9", "NHWC", "SAME", "float32", "l2", "ddr", "am", "shared", "private"]),
    # Issue 12: huge numbers, long text, nested aliases.
    st.sampled_from([10 ** 400, -(10 ** 400), 10 ** 20, 2 ** 64, 1 << 3000, 1e20, 1e300, -1e300, 5e-324]),
    st.integers(2000, 100_000).map(lambda n: "x" * n),
    st.builds(alias_bomb, st.integers(2, 9), st.booleans()),
    st.lists(st.sampled_from(["a", "1", "0x10", "[", "lol"]), min_size=1, max_size=5),
)


def key_paths(node: Any, prefix: tuple = (), seen: set | None = None) -> list[tuple]:
    """Every key path of a parsed YAML document (list items by index); a shared value is walked only once,
    so an alias bomb put in by an earlier mutation is not expanded here."""
    seen = set() if seen is None else seen
    out = [prefix] if prefix else []
    if isinstance(node, (dict, list)):
        if id(node) in seen:
            return out
        seen.add(id(node))
    if isinstance(node, dict):
        for k, v in node.items():
            out += key_paths(v, prefix + (k,), seen)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += key_paths(v, prefix + (i,), seen)
    return out


@st.composite
def mutated(draw: st.DrawFn, doc: dict, values: st.SearchStrategy = junk, bombs: bool = True) -> dict:
    """``doc`` with one to three keys deleted, replaced by junk (drawn from ``values``), or joined by unknown
    keys; ``bombs`` puts alias bombs in too (a YAML document's: JSON would write them out in full)."""
    doc = copy.deepcopy(doc)
    actions = ["delete", "junk", "junk", "unknown", "scale", "huge"] + (["bomb"] if bombs else [])
    for _ in range(draw(st.integers(1, 3))):
        paths = key_paths(doc)
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent = doc
        try:
            for k in path[:-1]:
                parent = parent[k]
        except (KeyError, IndexError, TypeError):
            continue
        if not isinstance(parent, (dict, list)):
            continue
        action = draw(st.sampled_from(actions))
        last = path[-1]
        try:
            if action == "delete":
                del parent[last]
            elif action == "junk":
                parent[last] = draw(values)
            elif action == "unknown" and isinstance(parent, dict):
                parent[draw(st.text(min_size=1, max_size=6))] = draw(values)
            elif action == "scale" and isinstance(parent[last], int) and not isinstance(parent[last], bool):
                parent[last] = parent[last] * draw(st.sampled_from([0, -1, 2, 1 << 20])) + draw(st.integers(-2, 2))
            elif action == "huge":
                parent[last] = draw(st.sampled_from([10 ** 400, -(10 ** 400), 10 ** 20, 1e20, 1e300, 2 ** 64]))
            elif action == "bomb":
                parent[last] = alias_bomb(draw(st.integers(4, 9)), draw(st.booleans()))
        except (KeyError, IndexError, TypeError):
            continue
    return doc


# --- target files --------------------------------------------------------------------------------------

S_ARGS = dict(x=0xA0000000, dy=0xB0000000, dx=0xA1000000,
              params=[0xC0000000, 0xD0000000, 0xE0000000, 0xB1000000, 0xC1000000, 2, 8, 1])


@FUZZ
@given(doc=mutated(FT78NE_DOC))
def test_fuzz_target_documents(tmp_path_factory, doc):
    path = tmp_path_factory.mktemp("t") / "chip.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    with no_hang():
        t0 = time.perf_counter()
        try:
            target = sim.load_target(path)
        except sim.TargetError as e:
            assert str(path) in str(e) and "\n" not in str(e) and len(str(e)) < len(str(path)) + MESSAGE_CHARS
            return
        finally:
            assert time.perf_counter() - t0 < LOAD_SECONDS
        # A target that loads must run a small call, or refuse it with a SimError.
        m = sim.Simulator(target)
        m.write(0xA0000000, np.ones((2, 8), np.float32)) if _mapped(target, 0xA0000000) else None
        before = m.memory.snapshot()
        try:
            run = m.call("fp_batch_norm_grad_s", **S_ARGS)
        except sim.SimError:
            assert m.memory.snapshot() == before
        else:
            assert run.cycles > 0


def _mapped(target: sim.Target, addr: int) -> bool:
    return any(r.base <= addr < r.end and r.shared for r in target.regions)


@FUZZ
@given(text=st.one_of(st.text(max_size=200),
                      st.lists(st.sampled_from(["name: x\n", "cores: 8\n", "regions:\n", "  - name: a\n",
                                                "!!python/object:os.system\n", "[", "{", "&a x\n", "*a\n",
                                                "key: !!binary aGk=\n", "? [1]\n: 2\n", "cores: 8\n",
                                                "<<: {a: 1}\n", "\t", "\x00", "2020-13-45\n",
                                                "name: &n [x, x, x]\n", "cores: &c [*n, *n, *n]\n",
                                                "x: [*c, *c, *c, *c]\n", "y: &y [*y]\n", "cores: 010\n",
                                                "latency_cycles: 1:30\n", "cores: 0o10\n", "clock_hz: 1e9\n",
                                                "base: " + "9" * 400 + "\n", "x: " + "[" * 80 + "\n",
                                                "x: *undefined\n"]),
                               max_size=8).map("".join)))
def test_fuzz_target_text(tmp_path_factory, text):
    path = tmp_path_factory.mktemp("t") / "chip.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogateescape")
    with no_hang():
        t0 = time.perf_counter()
        with pytest.raises(sim.TargetError) as info:
            sim.load_target(path)
        assert time.perf_counter() - t0 < LOAD_SECONDS
    assert "\n" not in str(info.value) and len(str(info.value)) < len(str(path)) + MESSAGE_CHARS


# --- run-configs ---------------------------------------------------------------------------------------

@FUZZ
@given(doc=mutated(CONFIG_DOC), command=st.sampled_from(["validate", "validate-json", "run"]))
def test_fuzz_run_configs(tmp_path_factory, doc, command):
    folder = tmp_path_factory.mktemp("c")
    path = folder / "cfg.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    argv = {"validate": ["validate", str(path)], "validate-json": ["validate", str(path), "--format", "json"],
            "run": ["run", str(path), "--out-dir", str(folder / "out")]}[command]
    out, err = io.StringIO(), io.StringIO()
    with no_hang(), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    assert rc in (0, 1, 2)
    if rc == 2:
        assert err.getvalue().startswith("dspsim: error: ") and err.getvalue().count("\n") == 1
        if command == "run":
            assert not (folder / "out").exists() or not any((folder / "out").iterdir())
    if rc == 1:
        assert command != "run" and "layout rule" in out.getvalue()


def load_and_place(path: Path) -> None:
    """Load a run-config and place its data: only SimError, loading within LOAD_SECONDS, a short one-line
    message."""
    with no_hang():
        try:
            t0 = time.perf_counter()
            try:
                cfg = load_config(path)
            finally:
                assert time.perf_counter() - t0 < LOAD_SECONDS
            if sum(math.prod(d.shape) * d.dtype.itemsize for d in cfg.data) <= 1 << 24:
                prepare(cfg)  # (legal arrays of up to 2 GiB would only make the fuzzing slow)
        except sim.SimError as e:
            assert "\n" not in str(e) and len(str(e)) < len(str(path)) + MESSAGE_CHARS, str(e)[:1000]


@FUZZ
@given(doc=mutated(CONFIG_DOC))
def test_fuzz_run_config_loading(tmp_path_factory, doc):
    """Loading and placing a mutated run-config: only SimError, quickly, in a short one-line message."""
    folder = tmp_path_factory.mktemp("c")
    path = folder / "cfg.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    load_and_place(path)


@FUZZ
@given(text=st.lists(st.sampled_from(["target: FT78NE\n", "symbol: fp_batch_norm_grad_s\n", "args: {}\n",
                                      "args: {x: 012}\n", "description: &d [a, b, c]\n",
                                      "description: [*d, *d, *d]\n", "numerics: 1:30\n", "data:\n",
                                      ("  - {name: x, addr: 0xA0000000, shape: [0, 4611686018427387904], "
                                       "dtype: float32, fill: 0}\n"), "  - &e {name: y}\n", "  - *e\n",
                                      "outputs: &o [*o]\n", "trace: 2020-13-45\n", "tiling: {a: " + "9" * 1200 + "}\n",
                                      "data: [" + "[" * 70 + "\n", "\x00"]),
                     max_size=8).map("".join))
def test_fuzz_run_config_text(tmp_path_factory, text):
    path = tmp_path_factory.mktemp("c") / "cfg.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogateescape")
    load_and_place(path)


# --- sweep files ---------------------------------------------------------------------------------------

SWEEP_DOC = {"description": "fuzzed", "configs": ["cfg.yaml"], "numerics": False,
             "grid": {"target": ["FT78NE", "MT7004"], "cores": [1, 2], "args.params.5": [2, 4],
                      "target.regions.ddr.bandwidth_bytes_per_cycle": [12, 24], "tiling_tolerance": [0, 0.01]},
             "plot": {"x": "cores"}}
SMALL_CONFIG = dict(CONFIG_DOC, args=dict(CONFIG_DOC["args"], params=[0xC0000000, 0xD0000000, 0xE0000000,
                                                                        0xB1000000, 0xC1000000, 4, 64, 1]))


@FUZZ
@given(doc=mutated(SWEEP_DOC))
def test_fuzz_sweep_files(tmp_path_factory, doc):
    """A mutated sweep file: loading refuses with a ConfigError (one short line) within seconds, or the sweep's
    points each run or fail with a message of their own; never another exception."""
    from sim.sweep import load_sweep, run_sweep
    folder = tmp_path_factory.mktemp("s")
    (folder / "cfg.yaml").write_text(yaml.safe_dump(SMALL_CONFIG, sort_keys=False))
    path = folder / "sweep.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    with no_hang():
        t0 = time.perf_counter()
        try:
            spec = load_sweep(path)
        except sim.SimError as e:
            assert time.perf_counter() - t0 < LOAD_SECONDS
            assert "\n" not in str(e) and len(str(e)) < len(str(path)) + MESSAGE_CHARS, str(e)[:1000]
            return
        if len(spec.points()) > 16:
            return  # a legal but large grid would only make the fuzzing slow (each point behaves alike)
        result = run_sweep(spec, folder / "out", workers=1)
    assert len(result.rows) == len(spec.points())
    assert all(r.get("error") or r.get("skipped") or r.get("cycles") for r in result.rows)


# --- tuning-cache entries ------------------------------------------------------------------------------

def nested(depth: int) -> Any:
    """A list ``depth`` levels deep."""
    node: Any = 0
    for _ in range(depth):
        node = [node]
    return node


#: JSON values of every type, sizes either small or absurd (``json.dumps`` writes NaN and infinities as
#: ``NaN`` and ``Infinity``; a lone surrogate as its escape).
json_junk = st.one_of(
    st.none(), st.booleans(), st.integers(-8, 300), st.integers(1 << 31, 1 << 70), st.integers(-(1 << 70), -1),
    st.sampled_from([10 ** 400, -(10 ** 999), 10 ** 1200, 1 << 3000, 2 ** 64]),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
    st.integers(2000, 100_000).map(lambda n: "x" * n), st.sampled_from(["\ud800", "0xA0000000", "rows", "dma0"]),
    st.lists(st.integers(-2, 5), max_size=4), st.dictionaries(st.text(max_size=4), st.integers(0, 3), max_size=2),
    st.integers(2, 200).map(nested),
)

#: Pieces of JSON text the documents above cannot be (cut, doubled, nested past any parser's stack).
JSON_FRAGMENTS = ['{"format": 1, ', '"key": "', '"tiling": {"split": "rows"}, ', '"tolerance": 0.01', "}", "[",
                  "]", "NaN", "-Infinity", "1e400", "9" * 5000, '"\\ud800"', '"a": 1, "a": 2', "\x00", "\xff",
                  "[" * 100_000, "{" * 50, '"candidates": [[{}, null]]']

SMALL_P = ROOT / "configs" / "ft78ne_batch_norm_grad_p.yaml"


@pytest.fixture(scope="module")
def small_entry(tmp_path_factory) -> tuple[str, dict, int, dict]:
    """The SMALL_P call's tuning-cache key, the entry a search stores for it, its cycles and its tiling."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DSPSIM_CACHE_DIR", str(tmp_path_factory.mktemp("entry")))
        from sim.files import tuning_cache
        cfg = load_config(SMALL_P)
        run = prepare(cfg, numerics=False).call(cfg.symbol, numerics=False, **cfg.args)
        [entry] = tuning_cache.entries()
        return entry.stem, json.loads(entry.read_text()), run.cycles, run.tiling.tiling


def check_entry(text: str, key: str, cycles: int, tiling: dict) -> None:
    """Write ``text`` as the entry of ``key``: reading it is a miss or an entry, within LOAD_SECONDS; a call
    then runs (on the entry's tiling, or searching again and finding the fresh choice)."""
    from sim.files import tuning_cache
    path = tuning_cache.tuning_dir() / f"{key}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8", errors="surrogateescape")
    with no_hang():
        t0 = time.perf_counter()
        doc = tuning_cache.load(key)
        assert time.perf_counter() - t0 < LOAD_SECONDS
        assert doc is None or isinstance(doc, dict)
        if doc is None:
            return  # a miss: the call searches as a fresh one does (tests/test_guarded_readers.py runs it)
        cfg = load_config(SMALL_P)
        run = prepare(cfg, numerics=False).call(cfg.symbol, numerics=False, **cfg.args)
    assert run.cycles > 0
    if not run.tiling.cached:  # the entry's tiling did not plan: searched again, the fresh choice
        assert (run.cycles, run.tiling.tiling) == (cycles, tiling)


@settings(FUZZ, max_examples=DEEP or 15)
@given(data=st.data())
def test_fuzz_tuning_cache_entries(small_entry, data):
    """A real entry with keys deleted or replaced by junk: a miss or a usable choice, never an error."""
    key, entry, cycles, tiling = small_entry
    doc = data.draw(mutated(entry, json_junk, bombs=False))
    check_entry(json.dumps(doc), key, cycles, tiling)


@FUZZ
@given(text=st.lists(st.sampled_from(JSON_FRAGMENTS), max_size=8).map("".join))
def test_fuzz_tuning_cache_entry_text(small_entry, text):
    key, _, cycles, tiling = small_entry
    check_entry(text, key, cycles, tiling)


# --- trace files ---------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def small_trace(tmp_path_factory) -> tuple[dict, str]:
    """The SMALL_P run's trace: its JSON document and its CSV text."""
    folder = tmp_path_factory.mktemp("trace")
    cfg = load_config(SMALL_P)
    run = prepare(cfg, numerics=False).call(cfg.symbol, numerics=False, **cfg.args)
    return (json.loads(run.write_trace(folder / "t.json").read_text()),
            run.write_trace(folder / "t.csv").read_text())


def check_trace(path: Path) -> None:
    """Reading ``path`` back refuses within LOAD_SECONDS on one short line, or gives a trace that summarises
    and compares without an error."""
    from sim.inspect.trace_tools import TraceFileError, diff_text, diff_traces, load_trace, summarize, summary_text
    with no_hang():
        t0 = time.perf_counter()
        try:
            trace = load_trace(path)
        except TraceFileError as e:
            assert "\n" not in str(e) and len(str(e)) < len(str(path)) + MESSAGE_CHARS, str(e)[:1000]
            return
        finally:
            assert time.perf_counter() - t0 < LOAD_SECONDS
        assert summary_text(summarize(trace))
        assert diff_text(diff_traces(trace, trace))


@FUZZ
@given(data=st.data())
def test_fuzz_trace_documents(small_trace, tmp_path_factory, data):
    """A real trace with keys deleted or replaced by junk (events' cycles, units, args; the metadata)."""
    doc = data.draw(mutated(small_trace[0], json_junk, bombs=False))
    path = tmp_path_factory.mktemp("t") / "t.json"
    path.write_text(json.dumps(doc))
    check_trace(path)


#: Pieces of CSV rows: the header, fields of every kind, separators.
CSV_FRAGMENTS = ["core,unit,kind,start,end,bytes,src,dst,tile,phase,wait_cycles\n", "0,", "63,", "-1,", "dma0,",
                 "compute,", "sync,", "dma_in,", "barrier_wait,", "100,", "50,", "1e38,", "9" * 5000 + ",",
                 "0x10000000,", "0x" + "f" * 40 + ",", ",", '"a,b",', "\n", "\x00", "\r\n", "NaN,", "dma\u00b2,"]


@FUZZ
@given(head=st.booleans(), rows=st.lists(st.sampled_from(CSV_FRAGMENTS), max_size=30).map("".join))
def test_fuzz_trace_csv(small_trace, tmp_path_factory, head, rows):
    """CSV traces: the real one with rows of junk added, or junk alone."""
    path = tmp_path_factory.mktemp("t") / "t.csv"
    path.write_text((small_trace[1] if head else "") + rows, encoding="utf-8", errors="surrogateescape")
    check_trace(path)


# --- kernel arguments ----------------------------------------------------------------------------------

GOOD_PTRS = [0xA0000000 + k * 0x1000000 for k in range(12)] + [0x10000000 + k * 0x100000 for k in range(12)]
BAD_PTRS = [0x60000000, 0x20000000, 0x40580000, 0xA0000002, 0xFFFFFFF0, 0x10FFFFF0, -4, 1 << 64]
PARAMS_ADDR = {"s": 0xCF000000, "p": 0x10F00000}

pointer = st.one_of(st.sampled_from(GOOD_PTRS), st.sampled_from(GOOD_PTRS), st.sampled_from(BAD_PTRS), junk)
small_ints = st.lists(st.integers(-1, 5).map(lambda v: v if v else 1) | st.just(1), min_size=0, max_size=9)


def arg_value(kind: str, variant: str) -> st.SearchStrategy:
    """A plausible or junk value for an argument of ``kind`` (ArgSpec.kind)."""
    plausible = {
        "in_ptr": pointer, "out_ptr": pointer,
        "ints": st.one_of(st.lists(st.integers(1, 4), min_size=4, max_size=4), small_ints),
        "int": st.integers(-1, 9),
        "float": st.one_of(st.floats(-2, 2), st.sampled_from([1e-4, 0.0, -1.0, math.nan, math.inf])),
        "str": st.sampled_from(["SAME", "VALID", "EXPLICIT", "NHWC", "NCHW", "same", ""]),
        "bool": st.sampled_from([True, False, 0, 1, 2, "yes"]),
        "params": st.one_of(
            st.tuples(st.lists(st.sampled_from(GOOD_PTRS), min_size=5, max_size=5), st.integers(-1, 6),
                      st.integers(-1, 40), st.integers(-1, 2)).map(lambda t: [*t[0], t[1], t[2], t[3]]),
            st.just(PARAMS_ADDR[variant]), st.sampled_from(BAD_PTRS)),
    }[kind]
    return st.one_of(plausible, plausible, plausible, junk)


#: Plausible values by argument name where the kind alone says too little.
HINTS: dict[str, st.SearchStrategy] = {
    "strides": st.sampled_from([[1, 1, 1, 1], [1, 2, 2, 1], [1, 1, 2, 1]]),
    "dilations": st.sampled_from([[1, 1, 1, 1], [1, 2, 1, 1], [1, 1, 2, 1]]),
    "padding": st.sampled_from(["SAME", "VALID"]),
    "data_format": st.sampled_from(["NHWC", "NCHW"]),
    "num_bits": st.integers(2, 8),
    "epsilon": st.sampled_from([1e-4, 1e-3, 0.5]),
}


@st.composite
def call_args(draw: st.DrawFn, symbol: kernels.Symbol) -> dict:
    """Arguments of ``symbol``: half the time all plausible (so calls get through to the layout and the
    run), otherwise with junk, wrong pointers, missing and extra arguments mixed in."""
    chaos = draw(st.booleans())
    pool = GOOD_PTRS[:12] if symbol.variant == "s" else GOOD_PTRS[12:]
    ptrs = iter(draw(st.permutations(pool)))
    args: dict = {}
    for spec in symbol.kernel.args:
        if not spec.required and not (chaos and draw(st.booleans())) and spec.name not in HINTS:
            continue
        if chaos and not draw(st.integers(0, 20)):
            continue  # now and then an argument is missing
        if chaos and not draw(st.integers(0, 3)):
            args[spec.name] = draw(arg_value(spec.kind, symbol.variant))
        elif spec.name in HINTS:
            args[spec.name] = draw(HINTS[spec.name])
        elif spec.kind in ("in_ptr", "out_ptr"):
            args[spec.name] = next(ptrs)
        elif spec.kind == "params":
            args[spec.name] = [next(ptrs) for _ in range(5)] + [draw(st.integers(1, 6)), draw(st.integers(1, 40)),
                                                                draw(st.integers(0, 1))]
        elif spec.kind == "ints":
            args[spec.name] = draw(st.lists(st.integers(1, 3), min_size=4, max_size=4))
        elif spec.kind == "bool":
            args[spec.name] = draw(st.booleans())
        else:
            args[spec.name] = draw(arg_value(spec.kind, symbol.variant))
    pointer_args = [a.name for a in symbol.kernel.args if a.kind in ("in_ptr", "out_ptr") and a.name in args]
    if not chaos and pointer_args and not draw(st.integers(0, 2)):
        # Otherwise plausible arguments with one pointer gone wrong: reaches the layout checks.
        name = draw(st.sampled_from(pointer_args))
        args[name] = draw(st.sampled_from(BAD_PTRS + [args[n] + 16 for n in pointer_args if n != name]))
    if chaos and draw(st.integers(0, 5)) == 0:
        args[draw(st.sampled_from(["core", "core_mask", "bogus"]))] = draw(st.one_of(st.integers(-1, 300), junk))
    elif symbol.variant == "s" and draw(st.booleans()):
        args["core_mask"] = draw(st.integers(1, 15))
    return args


def fresh_simulator(chip: str, variant: str) -> sim.Simulator:
    """A simulator with data in memory (so a refused call has something to destroy) and a params array."""
    m = sim.Simulator(TARGETS[chip])
    core = 0 if variant == "p" else None
    rng = np.random.default_rng(0)
    for addr in GOOD_PTRS[:12] if variant == "s" else GOOD_PTRS[12:]:
        m.write(addr, rng.uniform(0.5, 1.5, 256).astype(np.float32), core=core)
    base = GOOD_PTRS[:5] if variant == "s" else GOOD_PTRS[12:17]
    m.write(PARAMS_ADDR[variant], np.array([*base, 3, 8, 1, 0, 0, 0, 0], np.int64), core=core)
    return m


SYMBOLS = [s for s in kernels.symbols()]


@pytest.mark.parametrize("symbol", SYMBOLS, ids=[s.name for s in SYMBOLS])
def test_fuzz_kernel_arguments(symbol):
    chip = "MT7004" if symbol.precision == "fp16" else "FT78NE"

    @settings(FUZZ, max_examples=DEEP or 15)
    @given(args=call_args(symbol))
    def check(args):
        m = fresh_simulator(chip, symbol.variant)
        before = m.memory.snapshot()
        with no_hang(), np.errstate(all="ignore"):  # garbage bytes read as floats may overflow: expected
            try:
                run = m.call(symbol.name, **args)
            except sim.SimError as e:
                assert m.memory.snapshot() == before, f"refused call changed memory: {e}"
                assert str(e) and "\n" not in str(e)
            else:
                assert run.cycles > 0 and run.cycles >= run.roofline.cycles

    check()


# --- layout: accepted layouts never fault, suggestions are legal --------------------------------------

ADDRS = st.one_of(
    st.sampled_from([0x40000000, 0x4057FF00, 0x40580000, 0x405FFFF0, 0x7FFFFF00, 0x80000000, 0xA0000000,
                     0xFFFFFC00, 0xFFFFFF00, 0x10000000, 0x20000000, 0x30000000, 0x0, 0x50000000]),
    st.integers(0x40000000, 0x40000800), st.integers(0xA0000000, 0xA0000800), st.integers(0, 1 << 33))


@FUZZ
@given(addrs=st.lists(ADDRS, min_size=8, max_size=8), batch=st.integers(1, 4), channel=st.integers(1, 40),
       variant=st.sampled_from(["s", "p"]))
def test_fuzz_layouts(addrs, batch, channel, variant):
    m = sim.Simulator(TARGETS["FT78NE"])
    if variant == "p":  # the same layouts, moved into l2
        addrs = [0x10000000 + (a % 0x1000000) if a >= 0x80000000 else a for a in addrs]
    x, dy, dx, *ptrs = addrs
    args = dict(x=x, dy=dy, dx=dx, params=[*ptrs, batch, channel, 1])
    args.update(core=1) if variant == "p" else args.update(core_mask=0b101)
    symbol = f"fp_batch_norm_grad_{variant}"
    call = m.bind(symbol, **args)
    violations = check_layout(call, m.target)
    for v in violations:
        if v.suggestion is None:
            continue
        moved = tuple(Buffer(b.name, v.suggestion, b.shape, b.dtype, b.role) if b.name == v.buffer else b
                      for b in call.buffers)
        again = check_layout(BoundCall(call.symbol, call.precision, call.variant, call.cores, moved, call.attrs),
                             m.target)
        assert v.buffer not in {w.buffer for w in again}, (str(v), [str(w) for w in again])
    before = m.memory.snapshot()
    with no_hang():
        if violations:
            with pytest.raises(sim.LayoutError):
                m.call(symbol, **args)
            assert m.memory.snapshot() == before
        else:
            assert m.call(symbol, **args).cycles > 0  # an accepted layout never faults while running


# --- memory access ---------------------------------------------------------------------------------------

@FUZZ
@given(addr=st.one_of(ADDRS, junk), shape=st.one_of(st.integers(-2, 64), st.lists(st.integers(-1, 9), max_size=3),
                                                     junk),
       dtype=st.one_of(st.sampled_from(["float32", "float16", "int64", "uint8", "bool", "complex64", "O",
                                        "V8", "U3", "f4,i4", np.float64]), junk),
       core=st.one_of(st.none(), st.integers(-1, 9), junk))
def test_fuzz_memory_access(addr, shape, dtype, core):
    m = sim.Simulator(TARGETS["MT7004"])
    m.write(0xA0000000, np.arange(64, dtype=np.float32))
    before = m.memory.snapshot()
    with no_hang():
        try:
            out = m.read(addr, shape, dtype, core=core)
        except sim.SimError:
            pass
        else:
            assert isinstance(out, np.ndarray)
        try:
            n = shape if type(shape) is int and 0 <= shape < 64 else 4
            data = np.zeros(n, np.float32)
            m.write(addr, data, core=core)
        except sim.SimError:
            assert m.memory.snapshot() == before
