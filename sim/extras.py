"""The optional parts of the install and the one way code asks for one.

The core install (``pip install dspsim``: numpy, simpy, pyyaml, tqdm) simulates, validates, reports and
traces.  The rest comes with an extra: ``plots`` (matplotlib: trace and layout pictures), ``sweep`` (Dask,
pandas, pyarrow and matplotlib: sweep grids, their tables and plot), ``calibrate`` (scipy and ruamel.yaml),
``all`` (every one).  A command that needs a missing one stops before doing any work, naming the extra to
install (a :class:`MissingExtra`, which the command line turns into one line and exit status 2).
"""

from __future__ import annotations

import importlib
from types import ModuleType

from sim.errors import SimError

#: Each extra and the modules it brings (the import names, as ``pyproject.toml`` lists their packages).
EXTRAS: dict[str, tuple[str, ...]] = {
    "plots": ("matplotlib",),
    "sweep": ("distributed", "pandas", "pyarrow", "matplotlib"),
    "calibrate": ("scipy", "ruamel.yaml"),
}


class MissingExtra(SimError):
    """A feature whose extra is not installed."""


def need(extra: str, what: str, modules: tuple[str, ...] | None = None) -> list[ModuleType]:
    """The modules of ``extra`` (or those of them in ``modules``) imported, or :class:`MissingExtra` saying that
    ``what`` needs the extra and how to install it."""
    out = []
    for name in EXTRAS[extra] if modules is None else modules:
        try:
            out.append(importlib.import_module(name))
        except ImportError:
            raise MissingExtra(f"{what} needs the '{extra}' extra ({name} is not installed): "
                               f"pip install 'dspsim[{extra}]' (or, in a checkout, pip install -e '.[{extra}]')"
                               ) from None
    return out
