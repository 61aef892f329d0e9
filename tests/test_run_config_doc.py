"""docs/run-config.md cannot rot: its example runs as written, uses every key, and computes what it says.

The page's blocks run in order in a temporary folder, as a user would follow them: the python block
writes the ``.npy`` input, the yaml block is saved under the name on its first line, the shell block
runs ``dspsim validate`` and ``dspsim run`` through the CLI.  The page's key tables are generated from the
run-config's schema (``sim/config/schema.py``, by ``python -m sim.config.doc``) and must be what it
makes now; the keys ``load_config`` accepts are read from its own refusal of an unknown key and must be the
schema's, so a key added there fails here until it is documented.
The saved outputs are checked against BatchNormGrad computed with numpy from inputs rebuilt the way the
page says each data source builds them.
"""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import numpy as np
import pytest
import yaml
from markdown_blocks import REPO, blocks, dspsim_lines, run_dspsim, run_python

import sim.config.run_config
from sim.config.doc import render
from sim.config.run_config import load_config
from sim.config.schema import Data, Output, Random, RunConfigFile
from sim.errors import ConfigError
from sim.files.schema import fields

DOC = REPO / "docs" / "run-config.md"
DOC_TEXT = DOC.read_text(encoding="utf-8")
BLOCKS = blocks(DOC)


def _example() -> tuple[str, str]:
    """(file name, text) of the page's complete example: the yaml block whose first line names its file."""
    (block,) = [b for b in BLOCKS if b.lang == "yaml"]
    name = re.fullmatch(r"# (\S+\.yaml)", block.code.splitlines()[0])
    assert name, f"{block.where}: the example's first line must be '# <file name>.yaml'"
    return name.group(1), block.code + "\n"


@pytest.fixture(scope="module")
def followed(tmp_path_factory) -> tuple[Path, str]:
    """A folder where every block of the page was followed in order, and what the shell block printed."""
    folder = tmp_path_factory.mktemp("run-config-doc")
    name, text = _example()
    printed = []
    for b in BLOCKS:
        assert b.lang in ("python", "yaml", "sh", "text"), f"{b.where}: untagged or unknown block ```{b.lang}"
        if b.lang == "python":
            run_python(b, folder)
        elif b.lang == "yaml":
            (folder / name).write_text(text)
        elif b.lang == "sh":
            argvs = dspsim_lines(b.code)
            assert argvs, f"{b.where}: a shell block of something other than dspsim commands"
            for argv in argvs:
                out = io.StringIO()  # a module-scoped fixture cannot use capsys
                with contextlib.redirect_stdout(out):
                    rc = run_dspsim(argv[1:], folder)
                assert rc == 0, f"{b.where}: {' '.join(argv)} failed"
                printed.append(out.getvalue())
    return folder / name, "".join(printed)


def _allowed(path: Path, edit) -> set[str]:
    """The keys ``load_config`` allows where ``edit`` puts an unknown one, from its refusal message."""
    doc = yaml.safe_load(path.read_text())
    edit(doc)
    bad = path.with_name("bad.yaml")
    bad.write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError, match=r"unknown key \(allowed: ") as info:
        load_config(bad)
    return set(re.search(r"allowed: ([^)]*)\)", str(info.value)).group(1).split(", "))


def test_example_uses_every_key_config_py_accepts(followed):
    path, _ = followed
    doc = yaml.safe_load(path.read_text())
    top = _allowed(path, lambda d: d.update(unknown_key=1))
    data = _allowed(path, lambda d: d["data"][0].update(unknown_key=1))
    outputs = _allowed(path, lambda d: d["outputs"][0].update(unknown_key=1))
    random = _allowed(path, lambda d: next(e for e in d["data"] if "random" in e)["random"].update(unknown_key=1))
    assert {"target", "symbol", "args", "data", "outputs", "tiling", "numerics", "trace"} <= top
    assert top == set(doc), f"keys the example leaves out: {top - set(doc)}"
    assert data == set().union(*doc["data"]), f"data keys the example leaves out: {data - set().union(*doc['data'])}"
    assert outputs == set().union(*doc["outputs"])
    assert random == set().union(*(e["random"] for e in doc["data"] if "random" in e))
    # ... and the page describes each: a section per top-level key, every entry key named.
    for key in top:
        assert f"\n### `{key}`\n" in DOC_TEXT and f"[`{key}`](#{key})" in DOC_TEXT, key
    for key in data | outputs | random:
        assert f"`{key}" in DOC_TEXT, key
    # ... and the keys load_config accepts are the schema's.
    for keys, struct in ((top, RunConfigFile), (data, Data), (outputs, Output), (random, Random)):
        assert keys == {f.name for f in fields(struct)}, struct


def test_the_key_reference_is_the_one_the_schema_makes():
    assert DOC_TEXT.count("<!-- end keys -->") == 2, "the page's two generated tables (top-level keys, data entry)"
    assert render(DOC_TEXT) == DOC_TEXT, "docs/run-config.md's key tables are stale: run python -m sim.config.doc"


def test_example_validates_and_runs_as_the_page_says(followed):
    path, printed = followed
    assert "layout OK" in printed
    assert "tiling {'split': 'channels', 'channel_block': 32} (given)" in printed  # as the page says dspsim run prints
    cfg = load_config(path)
    out = path.parent / "traces"
    assert (out / cfg.trace).is_file()
    saved = {s.name: np.load(out / f"{path.stem}.{s.name}.npy") for s in cfg.outputs}
    assert sorted(saved) == ["dbias", "dscale", "dx"]

    # The inputs, rebuilt as the page describes each source.
    arrays = {}
    for s in cfg.data:
        kind, v = next(iter(s.source.items()))
        if kind == "file":
            arrays[s.name] = np.load(path.parent / v)
        elif kind == "fill":
            arrays[s.name] = np.full(s.shape, v, s.dtype)
        elif kind == "values":
            arrays[s.name] = np.asarray(v, s.dtype)
        else:
            r = {"seed": 0, "low": -1.0, "high": 1.0, **(v or {})}
            arrays[s.name] = np.random.default_rng(r["seed"]).uniform(r["low"], r["high"], s.shape).astype(s.dtype)
    mean_p, invar_p, scale_p, dbias_p, dscale_p, batch, channel, is_train = arrays["params"][:8]
    by_addr = {s.addr: arrays[s.name] for s in cfg.data}
    x, dy = (arrays[k].astype(np.float64) for k in ("x", "dy"))
    mean, invar, scale = (by_addr[a].astype(np.float64) for a in (mean_p, invar_p, scale_p))
    assert x.shape == (batch, channel) and is_train == 1

    # BatchNormGrad (training), the formula of kernels/batch_norm_grad.py's docstring.
    xh = (x - mean) * invar
    dbias, dscale = dy.sum(axis=0), (dy * xh).sum(axis=0)
    dx = scale * invar / batch * (batch * dy - dbias - xh * dscale)
    np.testing.assert_allclose(saved["dbias"], dbias, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(saved["dscale"], dscale, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(saved["dx"], dx, rtol=1e-4, atol=1e-5)
    out_addrs = {s.name: s.addr for s in cfg.outputs}
    assert (out_addrs["dbias"], out_addrs["dscale"]) == (dbias_p, dscale_p)


def test_without_tiling_the_cost_model_chooses(followed, tmp_path, capsys):
    path, _ = followed
    text = path.read_text()
    assert re.search(r"^tiling: .*\n", text, re.M), "the example has a one-line tiling to delete"
    edited = tmp_path / path.name
    edited.write_text(re.sub(r"^tiling: .*\n", "", text, flags=re.M))
    (tmp_path / "x.npy").write_bytes((path.parent / "x.npy").read_bytes())
    assert run_dspsim(["run", str(edited), "--out-dir", str(tmp_path / "out")], tmp_path) == 0
    assert re.search(r"chosen by the cost model among \d+ candidates", capsys.readouterr().out)


def test_the_format_is_linked_from_the_readme_and_config_py():
    assert "](docs/run-config.md)" in (REPO / "README.md").read_text()
    assert "docs/run-config.md" in (sim.config.run_config.__doc__ or "")
