"""TensorFlow's golden cases (copied from the project's shared reference data into tests/golden/)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

GOLDEN_DIR = Path(__file__).resolve().parent / "golden"
_MANIFEST = json.loads((GOLDEN_DIR / "manifest.json").read_text())


def cases(kernel: str, precision: str | None = None) -> list[dict]:
    """Manifest entries of ``kernel`` (optionally of one precision)."""
    return [c for c in _MANIFEST["cases"]
            if c["kernel"] == kernel and (precision is None or c["precision"] == precision)]


def arrays(case: dict) -> dict[str, np.ndarray]:
    """The case's arrays by name (inputs and expected outputs)."""
    with np.load(GOLDEN_DIR / f"{case['id']}.npz") as data:
        return {k: data[k] for k in data.files}


def assert_matches(case: dict, name: str, actual: np.ndarray, expected: np.ndarray) -> None:
    """Compare one output with the case's tolerances; outputs listed in ``exact`` must be equal as values."""
    assert actual.shape == expected.shape, f"{case['id']} {name}: shape {actual.shape} != {expected.shape}"
    a, e = actual.astype(np.float64), expected.astype(np.float64)
    if name in case.get("exact", []):
        np.testing.assert_array_equal(a, e, err_msg=f"{case['id']} {name} must match exactly")
    else:
        np.testing.assert_allclose(a, e, rtol=case["rtol"], atol=case["atol"], err_msg=f"{case['id']} {name}")


def tolerances(case: dict, names: Sequence[str]) -> dict[str, float]:
    """``rtol`` and ``atol`` for :func:`sim.testing.check_results` comparing outputs ``names`` of the case: its own
    tolerances, or 0 (equal as values) when every one of them is listed in ``exact``.  A case with some outputs
    exact and some not is compared output by output (:func:`assert_matches`): ValueError."""
    exact = set(case.get("exact", []))
    if exact and not exact >= set(names):
        raise ValueError(f"{case['id']}: {sorted(exact)} exact, the others within tolerances: use assert_matches")
    return {"rtol": 0.0, "atol": 0.0} if exact else {"rtol": case["rtol"], "atol": case["atol"]}


def chips_for(case: dict) -> list[str]:
    """The chips that support the case's precision."""
    return ["MT7004"] if case["precision"] == "fp16" else ["FT78NE", "MT7004"]
