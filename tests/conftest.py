import os
import sys
from pathlib import Path

import pytest

# Bytecode is written and reused while the suite runs, whatever the environment says: with PYTHONDONTWRITEBYTECODE
# set, each of the hundred-odd `python` processes the tests start (the CLI, installs, a second process for the
# cache) compiles dspsim from source again, about half a second each.  __pycache__ is ignored by git.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False

# Let the tests import their helpers (tests/golden.py) and the project from a plain checkout.
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


@pytest.fixture(autouse=True)
def _kernel_registry_restored():
    """Each test starts from the registry as it was: kernels a test registers (directly, or through a run-config's
    ``kernels:`` list) do not leak into the next test's listings."""
    from kernels.registry import registry_restored
    with registry_restored():
        yield


@pytest.fixture(scope="session", autouse=True)
def _tuning_cache_of_the_session(tmp_path_factory):
    """Before any fixture of a wider scope runs (a module's measured runs): the on-disk tuning cache lies in a
    temporary folder, never the user's home; subprocesses the tests start inherit it."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DSPSIM_CACHE_DIR", str(tmp_path_factory.mktemp("dspsim-cache-session")))
        mp.delenv("DSPSIM_NO_CACHE", raising=False)
        yield


@pytest.fixture(autouse=True)
def _tuning_cache_in_tmp(tmp_path_factory, monkeypatch):
    """Every test has its own empty on-disk tuning cache: no test sees a choice another one stored."""
    monkeypatch.setenv("DSPSIM_CACHE_DIR", str(tmp_path_factory.mktemp("dspsim-cache")))
