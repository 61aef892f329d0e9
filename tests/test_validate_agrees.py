"""``dspsim validate`` plans what ``dspsim run`` plans (issue 21, item 5): the same tiling choice (the tuning cache
honoured: a cached choice is planned without simulating), the plan check, no numerics; so it exits non-zero
exactly when run would refuse.  Checked on configs that fit, whose tiling cannot fit, and odd shapes."""

from __future__ import annotations

import json

import pytest
import yaml

from sim.cli import main
from sim.files import tuning_cache


def gemm_config(tmp_path, name: str, m: int, n: int, k: int, mask: int, tiling: dict | None = None) -> str:
    """A timing-only GEMM run-config (A, B, C in DDR)."""
    doc = {"target": "FT78NE", "symbol": "fp_gemm_s", "numerics": False,
           "args": {"a": 0x80000000, "b": 0x90000000, "c": 0xA0000000, "m": m, "n": n, "k": k, "core_mask": mask},
           "data": [{"name": "a", "addr": 0x80000000, "shape": [m, k], "dtype": "float32", "random": {"seed": 1}},
                    {"name": "b", "addr": 0x90000000, "shape": [k, n], "dtype": "float32", "random": {"seed": 2}}],
           "trace": f"{name}.json"}
    if tiling is not None:
        doc["tiling"] = tiling
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


#: The GEMM's algorithm keys at their defaults: with them, a tiling below names every key (a full tiling).
ALGORITHM = {"split": "n", "c_home": "am", "a_loader": "cores", "a_buffers": 2, "b_staging": "am"}
CASES = {
    "fits": (96, 128, 128, 0xFF, None),
    "aborted before": (144, 640, 512, 0xF, None),  # column blocks spread unevenly over the cores
    "odd shape": (7, 13, 5, 0b111, None),
    "partial tiling": (256, 512, 1024, 0xFF, {"k_block": 1024}),
    "tiling cannot fit": (256, 512, 1024, 0xFF, {**ALGORITHM, "m_micro": 6, "m_panel": 12, "k_block": 1024,
                                                 "m_block": 256, "n_block": 128, "n_micro": 128}),
    "tiling beyond the plan budget": (384, 512, 512, 0xFF, {**ALGORITHM, "m_block": 384, "n_block": 16, "k_block": 1,
                                                            "m_panel": 1, "m_micro": 1, "n_micro": 16}),
}


@pytest.mark.parametrize("name", list(CASES))
def test_validate_exits_non_zero_exactly_when_run_refuses(tmp_path, monkeypatch, capsys, name):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(tuning_cache.NO_CACHE_ENV_VAR, "1")  # what --no-cache sets: undone after the test
    m, n, k, mask, tiling = CASES[name]
    path = gemm_config(tmp_path, name.replace(" ", "_"), m, n, k, mask, tiling)
    validated = main(["validate", path, "--no-cache"])
    ran = main(["run", path, "--no-cache"])
    assert (validated == 0) == (ran == 0), (name, validated, ran)
    assert (ran == 0) == (name not in ("tiling cannot fit", "tiling beyond the plan budget"))


def test_validate_plans_the_cached_choice_without_simulating(tmp_path, monkeypatch, capsys):
    """After a run, validate reads the choice from the tuning cache and names it; the JSON report carries it."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(tuning_cache.ENV_VAR, str(tmp_path / "cache"))
    monkeypatch.delenv(tuning_cache.NO_CACHE_ENV_VAR, raising=False)
    path = gemm_config(tmp_path, "cached", 384, 512, 512, 0xFF)
    assert main(["run", path]) == 0
    capsys.readouterr()
    assert main(["validate", path]) == 0
    assert "from the tuning cache" in capsys.readouterr().out
    assert main(["validate", path, "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] and report["tiling"]["cached"] and report["tiling"]["source"] == "cost model"
