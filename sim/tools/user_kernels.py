"""Importing the kernels a run-config's ``kernels:`` list names (Python files or modules) and registering them.

A file is imported once per process (by its resolved path) under a private module name; a module by its
name.  If it defines ``KERNEL``, that kernel is registered with where it came from (a file may also call
``sim.register_kernel`` itself, for several kernels).  A file or module that does neither, fails to import, or
defines a kernel the registry refuses raises :class:`~sim.errors.ConfigError` naming the config and the
entry (``<config>: kernels[0]: ...``) on one line.  Runs, ``validate``, ``report`` and sweeps (in the parent
and in every worker) import a config's kernels through :func:`load_kernels` before binding its call.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import re
import sys
import threading
import traceback
import types
from collections.abc import Sequence
from pathlib import Path

from sim.errors import ConfigError, SimError, one_line
from sim.files.local_modules import MAX_SOURCE_BYTES
from sim.files.regular_file import read_file
from sim.simulator import register_kernel, registry_generation
from sim.tools.config import KernelSource, RunConfig

#: Files and modules imported so far: "file:<resolved path>" or "module:<name>" -> the module.
_IMPORTED: dict[str, types.ModuleType] = {}
_LOCK = threading.RLock()


def _failure(e: BaseException, path: Path | None) -> str:
    """One line for an exception raised while importing: its type, message and the line of the user's file."""
    line = None
    if isinstance(e, SyntaxError):
        line = e.lineno
    elif path is not None:
        frames = [f for f in traceback.extract_tb(e.__traceback__) if Path(f.filename) == path]
        line = frames[-1].lineno if frames else None
    at = f" (line {line})" if line else ""
    return f"importing it raised {type(e).__name__}{at}: {one_line(str(e), 240)}"


def _import_file(path: Path) -> tuple[types.ModuleType, bool]:
    """The module of a kernel file, and whether this call imported it (False: imported before)."""
    real = path.resolve()
    key = f"file:{real}"
    module = _IMPORTED.get(key)
    if module is not None:
        return module, False
    stem = re.sub(r"\W", "_", real.stem)
    name = f"_dspsim_kernel_{stem}_{hashlib.sha256(str(real).encode()).hexdigest()[:10]}"
    spec = importlib.util.spec_from_file_location(name, real)
    if spec is None or spec.loader is None:
        raise ValueError("not importable as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look their module up there
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    _IMPORTED[key] = module
    return module, True


def _import_module(name: str) -> tuple[types.ModuleType, bool]:
    key = f"module:{name}"
    module = _IMPORTED.get(key)
    if module is not None:
        return module, False
    module = importlib.import_module(name)
    _IMPORTED[key] = module
    return module, True


def load_kernel(source: KernelSource, where: str) -> None:
    """Import one ``kernels`` entry and register its ``KERNEL``; ConfigError prefixed with ``where`` (the config
    and key) when that fails."""
    with _LOCK:
        before = registry_generation()
        origin = f"file {source.path.resolve()}" if source.path is not None else f"module {source.module}"
        try:
            if source.path is not None:
                module, fresh = _import_file(source.path)
            else:
                assert source.module is not None
                module, fresh = _import_module(source.module)
        except ModuleNotFoundError as e:
            if source.module is not None and e.name is not None \
                    and (source.module == e.name or source.module.startswith(e.name + ".")):
                raise ConfigError(f"{where}: no module named {e.name!r} (a module name must be importable: "
                                  f"installed, or on PYTHONPATH; a file must end in .py)") from None
            raise ConfigError(f"{where}: {_failure(e, source.path and source.path.resolve())}") from e
        except (Exception, SystemExit) as e:  # noqa: BLE001 (the user's code: any failure is reported in one line)
            raise ConfigError(f"{where}: {_failure(e, source.path and source.path.resolve())}") from e
        kernel = getattr(module, "KERNEL", None)
        if kernel is not None:
            try:
                register_kernel(kernel, origin=origin)
            except SimError as e:
                raise ConfigError(f"{where}: {e}") from None
        elif fresh and registry_generation() == before:
            raise ConfigError(f"{where}: {source.text} defines no KERNEL and registered no kernel (define "
                              f"KERNEL = YourKernel(), or call sim.register_kernel)")


def load_kernel_sources(sources: Sequence[KernelSource], config_path: Path) -> None:
    """Import every entry of a config's ``kernels`` list, in order."""
    for i, source in enumerate(sources):
        load_kernel(source, f"{config_path}: kernels[{i}]")


def load_kernels(cfg: RunConfig) -> None:
    """Import the kernels ``cfg`` names (nothing when it names none): call before binding its call."""
    load_kernel_sources(cfg.kernels, cfg.path)


def source_digest(source: KernelSource) -> str:
    """The digest of a file entry's content (a sweep point's id names it: an edited kernel runs again); a module
    entry's name."""
    if source.path is None:
        return f"module:{source.module}"
    # The guarded reader: a named pipe or a device named as a kernel file must not hang the sweep.
    return hashlib.sha256(read_file(source.path, str(source.path), ConfigError, MAX_SOURCE_BYTES,
                                    what="kernel file")).hexdigest()
