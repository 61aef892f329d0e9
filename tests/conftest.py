import sys
from pathlib import Path

import pytest

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
