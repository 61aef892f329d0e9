"""The on-disk tuning cache (sim/files/tuning_cache.py).

The conftest gives every test its own empty cache folder ($DSPSIM_CACHE_DIR), so nothing here touches the
user's home.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

import sim
from sim.cli import main
from sim.config.run_config import load_config
from sim.files import tuning_cache
from sim.run.runner import prepare

ROOT = Path(__file__).resolve().parent.parent
#: Three candidate tilings, cheap to price: the cache test's call.
SMALL = ROOT / "configs" / "ft78ne_batch_norm_grad_p.yaml"

#: One call in a fresh process: its cycles, tiling and how the tiling was found, as JSON on stdout.
CHILD = """
import json, sys
from sim.config.run_config import load_config
from sim.run.runner import prepare
cfg = load_config(sys.argv[1])
m = prepare(cfg, numerics=False)
run = m.call(cfg.symbol, numerics=False, **cfg.args)
print(json.dumps({"cycles": run.cycles, "tiling": run.tiling.tiling, "simulated": run.tiling.simulated,
                  "cached": run.tiling.cached, "source": run.tiling.source}))
"""


def _child(config: Path, env_extra: dict[str, str] | None = None) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT), **(env_extra or {}))
    out = subprocess.run([sys.executable, "-c", CHILD, str(config)], env=env, capture_output=True, text=True,
                         timeout=120, check=True)
    return json.loads(out.stdout)


def _call(config: Path = SMALL, **kw):
    cfg = load_config(config)
    m = prepare(cfg, numerics=False)
    if kw:
        m = sim.Simulator(m.target, **kw)
        m = _with_data(cfg, m)
    return m.call(cfg.symbol, numerics=False, **cfg.args)


def _with_data(cfg, m):
    placed = prepare(cfg, numerics=False)
    m.memory = placed.memory
    return m


def test_a_second_process_starts_warm_and_prices_no_candidate():
    first = _child(SMALL)
    assert (first["source"], first["cached"]) == ("cost model", False)
    assert first["simulated"] >= 1
    assert len(tuning_cache.entries()) == 1
    second = _child(SMALL)
    assert (second["cached"], second["simulated"]) == (True, 0)  # no candidate listed or simulated
    assert (second["cycles"], second["tiling"]) == (first["cycles"], first["tiling"])


def test_no_cache_neither_reads_nor_writes(tmp_path):
    run = _call(tuning_cache=False)
    assert run.tiling.simulated >= 1 and not tuning_cache.entries()
    _call()  # fills the cache
    assert len(tuning_cache.entries()) == 1
    again = _call(tuning_cache=False)
    assert (again.tiling.cached, again.tiling.simulated) == (False, run.tiling.simulated)
    # The environment variable --no-cache sets reaches a fresh process too.
    child = _child(SMALL, {"DSPSIM_NO_CACHE": "1"})
    assert (child["cached"], child["simulated"]) == (False, run.tiling.simulated)


@pytest.mark.parametrize("damage", ["garbage", "truncated", "empty", "other format", "other key", "bad tiling",
                                    "not a dict", "binary"])
def test_a_damaged_entry_is_ignored_and_rebuilt(damage):
    fresh = _call()
    [entry] = tuning_cache.entries()
    text = entry.read_text()
    doc = json.loads(text)
    bad = {"garbage": "{not json", "truncated": text[: len(text) // 2], "empty": "",
           "other format": json.dumps(dict(doc, format=999)), "other key": json.dumps(dict(doc, key="0" * 64)),
           "bad tiling": json.dumps(dict(doc, tiling={"no_such_key": 3})), "not a dict": "[1, 2]"}
    if damage == "binary":
        entry.write_bytes(b"\xff\xfe\x00garbage")
    else:
        entry.write_text(bad[damage])
    run = _call()
    assert not run.tiling.cached and run.tiling.simulated == fresh.tiling.simulated  # searched again
    assert (run.cycles, run.tiling.tiling) == (fresh.cycles, fresh.tiling.tiling)
    assert json.loads(entry.read_text()) == doc  # rebuilt whole
    assert _call().tiling.cached


def test_a_changed_model_target_or_tolerance_misses(monkeypatch, tmp_path):
    _call()
    assert _call().tiling.cached
    # Another tolerance is another choice.
    assert not _call(tiling_tolerance=0.02).tiling.cached
    # A changed timing model or kernel (another hash of the source files) never reuses a stale choice.
    monkeypatch.setattr(tuning_cache, "_model_version", "another-model")
    assert not _call().tiling.cached
    monkeypatch.undo()
    # Another target content (the same chip with slower DDR), even in a file of the same name: another choice.
    cfg = load_config(SMALL)
    slow = sim.Simulator(cfg.target)
    slow_target = replace(slow.target, regions=tuple(
        replace(r, bandwidth_bytes_per_cycle=r.bandwidth_bytes_per_cycle / 2) if r.name == "ddr" else r
        for r in slow.target.regions))
    m = _with_data(cfg, sim.Simulator(slow_target))
    assert not m.call(cfg.symbol, numerics=False, **cfg.args).tiling.cached


def test_the_key_names_what_the_choice_depends_on():
    cfg = load_config(SMALL)
    m = prepare(cfg, numerics=False)
    call = m.bind(cfg.symbol, **cfg.args)
    kernel = m.kernel_of(call)
    key = m._disk_key(kernel, call)
    assert key is not None and key == m._disk_key(kernel, call)  # stable
    moved = replace(call, buffers=(replace(call.buffers[0], addr=call.buffers[0].addr + 64),) + call.buffers[1:])
    assert m._disk_key(kernel, moved) != key  # an address decides a buffer's region: it is part of the key
    # A planner without a stable identity (defined nowhere on disk) is not cached on disk.
    assert tuning_cache.entry_key("t", "s", "<object at 0x7f00>", 0.01, "k") is None


def test_concurrent_processes_leave_one_whole_entry():
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    procs = [subprocess.Popen([sys.executable, "-c", CHILD, str(SMALL)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(4)]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=180)
        assert p.returncode == 0, err
        results.append(json.loads(out))
    assert len({(r["cycles"], json.dumps(r["tiling"], sort_keys=True)) for r in results}) == 1
    [entry] = tuning_cache.entries()
    assert tuning_cache.load(entry.stem) is not None
    assert not list(tuning_cache.tuning_dir().glob("*.tmp"))  # no temporary file left behind


def test_a_failed_write_leaves_no_file(monkeypatch):
    def fail(*_a, **_k):
        raise OSError("disk full")
    monkeypatch.setattr(tuning_cache.os, "replace", fail)
    run = _call()  # the run itself is not disturbed
    assert run.tiling.simulated >= 1
    assert not any(tuning_cache.tuning_dir().iterdir())


def test_an_unwritable_cache_dir_is_not_an_error(monkeypatch, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("DSPSIM_CACHE_DIR", str(blocker))
    assert _call().tiling.simulated >= 1
    assert tuning_cache.entries() == [] and tuning_cache.size_bytes() == 0 and tuning_cache.clear() == 0


def test_cache_dir_default_and_override(monkeypatch, tmp_path):
    monkeypatch.setenv("DSPSIM_CACHE_DIR", str(tmp_path / "x"))
    assert tuning_cache.tuning_dir() == tmp_path / "x" / "tuning"
    monkeypatch.delenv("DSPSIM_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert tuning_cache.cache_dir() == tmp_path / "xdg" / "dspsim"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert tuning_cache.cache_dir() == tmp_path / "home" / ".cache" / "dspsim"


def test_cli_cache_shows_and_clears(capsys, monkeypatch, tmp_path):
    assert main(["cache"]) == 0
    out = capsys.readouterr().out
    assert f"tuning cache: {tuning_cache.tuning_dir()}" in out and "entries: 0" in out and "size: 0 bytes" in out
    monkeypatch.setenv("DSPSIM_NO_CACHE", "")  # restored after the test: --no-cache sets it in this process
    assert main(["run", str(SMALL), "--out-dir", str(tmp_path), "--no-cache"]) == 0
    assert os.environ["DSPSIM_NO_CACHE"] == "1" and not tuning_cache.entries()
    monkeypatch.setenv("DSPSIM_NO_CACHE", "")
    assert main(["run", str(SMALL), "--out-dir", str(tmp_path)]) == 0
    capsys.readouterr()
    [entry] = tuning_cache.entries()
    assert main(["cache", "show"]) == 0
    out = capsys.readouterr().out
    assert "entries: 1" in out and f"size: {entry.stat().st_size} bytes" in out
    # A stray file and a folder in it: shown as other items, and counted by clear, which deletes them too.
    (tuning_cache.tuning_dir() / ".x.json.123.tmp").write_text("")
    (tuning_cache.tuning_dir() / "junk").mkdir()
    assert main(["cache"]) == 0
    out = capsys.readouterr().out
    assert "entries: 1" in out and "other items: 2" in out
    assert main(["cache", "clear"]) == 0
    assert "3 items deleted" in capsys.readouterr().out
    assert not tuning_cache.entries() and not tuning_cache.others()


KEYS = """
import json, sys
from pathlib import Path
from sim.config.run_config import load_config
from sim.run.runner import prepare
out = {}
for path in sorted(Path(sys.argv[1]).glob("*.yaml")):
    cfg = load_config(path)
    m = prepare(cfg, numerics=False)
    call = m.bind(cfg.symbol, **cfg.args)
    kernel = m.kernel_of(call)
    if hasattr(kernel, "tiling_space") or hasattr(kernel, "tilings"):
        out[path.name] = m._disk_key(kernel, call)
print(json.dumps(out))
"""


def test_every_shipped_kernel_has_a_key_stable_across_processes():
    """A planner whose code holds nested code (a comprehension, a closure) must still get a key, and the same
    one in another process (a code object's repr names its address)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    runs = [json.loads(subprocess.run([sys.executable, "-c", KEYS, str(ROOT / "configs")], env=env, check=True,
                                      capture_output=True, text=True, timeout=120).stdout) for _ in range(2)]
    assert len(runs[0]) >= 10
    assert all(key is not None for key in runs[0].values()), runs[0]
    assert runs[0] == runs[1]


HELPER_KERNEL = """
from relu_grad import ReluGrad
{module_import}

class HelperTiled(ReluGrad):
    name = "{name}"

    def tilings(self, call, ctx):
        {function_import}
        return {helper}.candidates(super().tilings(call, ctx))


KERNEL = HelperTiled()
"""


@pytest.mark.parametrize("where", ["module", "function"], ids=["imported by the module", "imported in tilings()"])
def test_a_user_kernel_misses_when_the_helper_holding_its_tilings_changes(tmp_path, monkeypatch, where):
    """Issue 20, item 9: the key covers a user kernel's module and the local modules it imports (here a helper
    beside it holding what ``tilings()`` returns, imported at the top or inside the method), not only the file
    of its class."""
    import importlib
    import uuid

    uid = uuid.uuid4().hex[:12]
    helper, kernel_module = f"tiling_helper_{uid}", f"helper_kernel_{uid}"
    (tmp_path / f"{helper}.py").write_text("def candidates(found):\n    return found\n")
    (tmp_path / f"{kernel_module}.py").write_text(HELPER_KERNEL.format(
        name=f"helper_tiled_{uid}", helper=helper,
        module_import=f"import {helper}" if where == "module" else "",
        function_import=f"import {helper}" if where == "function" else "pass"))
    monkeypatch.syspath_prepend(str(ROOT / "examples"))
    monkeypatch.syspath_prepend(str(tmp_path))
    kernel = importlib.import_module(kernel_module).KERNEL
    sim.register_kernel(kernel)

    def call() -> sim.Run:
        return sim.Simulator("FT78NE").call(f"fp_helper_tiled_{uid}_s", numerics=False, dy=0xA0000000,
                                             x=0xA0400000, dx=0xA0800000, shape=[4, 256])

    first = call()
    assert not first.tiling.cached and len(tuning_cache.entries()) == 1
    assert call().tiling.cached  # unchanged: the stored choice is reused
    (tmp_path / f"{helper}.py").write_text("def candidates(found):\n    return list(found)  # edited\n")
    again = call()
    assert not again.tiling.cached and len(tuning_cache.entries()) == 2  # the edited helper is another key
    assert tuning_cache.kernel_fingerprint(kernel) == tuning_cache.kernel_fingerprint(kernel)  # stable
    # A kernel defined nowhere on disk (its module has no file) has no stable identity: not cached on disk.
    namespace: dict = {"__name__": f"nowhere_{uid}"}
    exec("from relu_grad import ReluGrad\nclass K(ReluGrad):\n    name = 'k'\n", namespace)
    assert tuning_cache.kernel_fingerprint(namespace["K"]()) is None


def test_the_key_follows_local_modules_only(tmp_path, monkeypatch):
    """An imported module in a site-packages folder (any environment's, such as one a .pth adds) is not the
    user's: editing it leaves the key alone; editing a local module the kernel imports changes it."""
    import importlib
    import uuid

    uid = uuid.uuid4().hex[:12]
    installed = tmp_path / "site-packages"
    installed.mkdir()
    (installed / f"installed_{uid}.py").write_text("X = 1\n")
    (tmp_path / f"local_{uid}.py").write_text("Y = 1\n")
    (tmp_path / f"kernel_{uid}.py").write_text(HELPER_KERNEL.format(
        name=f"k_{uid}", helper=f"local_{uid}", module_import=f"import installed_{uid}, local_{uid}",
        function_import="pass"))
    for folder in (ROOT / "examples", installed, tmp_path):
        monkeypatch.syspath_prepend(str(folder))
    kernel = importlib.import_module(f"kernel_{uid}").KERNEL
    before = tuning_cache.kernel_fingerprint(kernel)
    (installed / f"installed_{uid}.py").write_text("X = 2\n")
    assert tuning_cache.kernel_fingerprint(kernel) == before
    (tmp_path / f"local_{uid}.py").write_text("Y = 2\n")
    assert tuning_cache.kernel_fingerprint(kernel) != before


def test_the_cache_folder_is_the_systems_user_cache_folder(monkeypatch, tmp_path):
    """Without DSPSIM_CACHE_DIR the cache lives where platformdirs says a user's caches go on this system (on
    Linux ``$XDG_CACHE_HOME/dspsim``)."""
    import platformdirs

    from sim.files import tuning_cache
    monkeypatch.delenv(tuning_cache.ENV_VAR, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert tuning_cache.cache_dir() == Path(platformdirs.user_cache_dir("dspsim", appauthor=False))
    if sys.platform.startswith("linux"):
        assert tuning_cache.cache_dir() == tmp_path / "xdg" / "dspsim"


def test_an_atomic_write_is_on_disk_before_its_rename(monkeypatch, tmp_path):
    """The temporary file is flushed (fsync) before it takes the name, and the folder after: a power cut leaves the
    old file or the whole new one, never an empty one under the new name.  The tuning cache writes through it."""
    import os

    from sim.files import atomic, tuning_cache
    calls: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(atomic.os, "fsync", lambda fd: (calls.append("fsync"), real_fsync(fd))[1])
    monkeypatch.setattr(atomic.os, "replace", lambda a, b: (calls.append("replace"), real_replace(a, b))[1])
    atomic.atomic_write_text(tmp_path / "out.txt", "whole")
    assert calls == ["fsync", "replace", "fsync"] and (tmp_path / "out.txt").read_text() == "whole"
    monkeypatch.setenv(tuning_cache.ENV_VAR, str(tmp_path / "cache"))
    calls.clear()
    assert tuning_cache.store("k" * 64, {"tiling": {"a": 1}})
    assert calls == ["fsync", "replace", "fsync"]


def test_no_cache_reads_its_value_as_a_switch(monkeypatch):
    """``DSPSIM_NO_CACHE`` is on for 1/true/yes/on, off for unset/empty/0/false/no/off, refused otherwise."""
    from sim.errors import ConfigError
    from sim.files.tuning_cache import enabled_by_default
    for value, enabled in (("", True), ("0", True), ("false", True), ("Off", True), ("1", False), ("true", False),
                           ("yes", False)):
        monkeypatch.setenv("DSPSIM_NO_CACHE", value)
        assert enabled_by_default() is enabled, value
    monkeypatch.setenv("DSPSIM_NO_CACHE", "2")
    with pytest.raises(ConfigError, match=r"DSPSIM_NO_CACHE='2': expected one of"):
        enabled_by_default()


def test_a_stored_choice_the_space_no_longer_offers_is_searched_again(tmp_path, monkeypatch):
    """A kernel's tiling space may depend on more than its source (here a module setting changed at run time, as an
    environment variable or a data file would): a stored choice the space no longer lists is a miss, and the call
    gets what a search of the current space picks."""
    import importlib
    import uuid

    uid = uuid.uuid4().hex[:12]
    module = f"settable_kernel_{uid}"
    (tmp_path / f"{module}.py").write_text(
        "import relu_grad\nclass Settable(relu_grad.ReluGrad):\n"
        f"    name = 'settable_{uid}'\nKERNEL = Settable()\n")
    monkeypatch.syspath_prepend(str(ROOT / "examples"))
    monkeypatch.syspath_prepend(str(tmp_path))
    kernel = importlib.import_module(module).KERNEL
    sim.register_kernel(kernel)
    relu_grad = sys.modules["relu_grad"]
    args = {"dy": 0xA0000000, "x": 0xA1000000, "dx": 0xA2000000, "shape": [256, 1024]}

    def call(**kw) -> sim.Run:
        return sim.Simulator("FT78NE", **kw).call(f"fp_settable_{uid}_s", numerics=False, **args)

    first = call()
    assert not first.tiling.cached and call().tiling.cached
    monkeypatch.setattr(relu_grad, "TILES_PER_CORE", 64)
    fresh = call(tuning_cache=False)
    assert fresh.tiling.tiling != first.tiling.tiling  # (the new space lists other tile sizes)
    again = call()
    assert not again.tiling.cached
    assert (again.tiling.tiling, again.cycles) == (fresh.tiling.tiling, fresh.cycles)


def test_an_edited_entrys_text_reaches_no_terminal_and_its_fixed_keys_are_not_taken():
    """An entry's search time and notes are shown in the run's summary: characters a terminal acts on (escapes,
    newlines) are left out; the keys the caller fixed are the call's own (they are part of the key), not what an
    edited entry says (it made a call that named no tiling read as one "with {'channel_block': 999} given")."""
    fresh = _call()
    [entry] = tuning_cache.entries()
    doc = json.loads(entry.read_text())
    doc["searched"] = "\x1b[2J\x1b[31mFAKE\x1b[0m\nsecond line"
    doc["notes"] = ["\x1b[31mred\nline"] * len(doc.get("notes", [1]))
    doc["fixed"] = {"channel_block": 999}
    entry.write_text(json.dumps(doc))
    run = _call()
    assert run.tiling.cached and (run.cycles, run.tiling.tiling) == (fresh.cycles, fresh.tiling.tiling)
    assert run.tiling.fixed == {} and "given" not in run.tiling.describe()
    text = run.summary_text()
    assert "\x1b" not in text and "second line" not in text.split("\n")[0]
    assert "[2J[31mFAKE[0msecond line" in text  # (what is left of it, on its own line of the summary)
    assert all(n.isprintable() for n in run.tiling.notes)
