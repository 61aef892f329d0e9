"""Importing the kernels a run-config's ``kernels:`` list names (Python files or modules) and registering them.

A file is imported once per process (by its resolved path) under a private module name; a module by its
name.  If it defines ``KERNEL``, that kernel is registered with where it came from (a file may also call
``sim.register_kernel`` itself, for several kernels).  A file or module that does neither, fails to import, or
defines a kernel the registry refuses raises :class:`~sim.errors.ConfigError` naming the config and the
entry (``<config>: kernels[0]: ...``) on one line.  Runs, ``validate``, ``report`` and sweeps (in the parent
and in every worker) import a config's kernels through :func:`load_kernels` before binding its call.

Importing a file runs its code, and validating a config someone sent is exactly the workflow that would run
theirs: so a config's kernels are imported only when asked for (``--allow-kernels`` on the command line,
``$DSPSIM_ALLOW_KERNELS=1``, or ``load_config(..., allow_kernels=True)``), else refused with one line naming the
file (:class:`KernelsNotAllowed`).  A file named on the command line (``dspsim kernels --load FILE``) is its own
opt-in.  Whatever the imported code prints goes to stderr, so that machine-readable stdout (``validate --format
json``) stays clean.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.util
import os
import re
import sys
import threading
import traceback
import types
from collections.abc import Iterator, Sequence
from pathlib import Path

from sim.config.run_config import KernelSource, RunConfig
from sim.env_flags import env_flag
from sim.errors import ConfigError, SimError, one_line
from sim.files.local_modules import MAX_SOURCE_BYTES
from sim.files.regular_file import read_file
from sim.simulator import register_kernel, registry_generation

#: Files and modules imported so far: "file:<resolved path>" or "module:<name>" -> the module.
_IMPORTED: dict[str, types.ModuleType] = {}
#: The same keys -> the source files of the local modules the entry's import brought in (its helpers).
_HELPERS: dict[str, tuple[Path, ...]] = {}
#: dspsim's own sources (``sim/``, ``kernels/``): the simulator's source digest covers them, not a kernel's.
_DSPSIM_SOURCES = tuple(Path(__file__).resolve().parent.parent.parent / d for d in ("sim", "kernels"))
_LOCK = threading.RLock()
#: The command-line flag that lets a run-config's kernels be imported.
ALLOW_FLAG = "--allow-kernels"
#: The environment variable that does the same (``1``, ``true``, ``yes`` or ``on``: :mod:`sim.env_flags`); worker
#: processes inherit it.
ALLOW_ENV_VAR = "DSPSIM_ALLOW_KERNELS"


class KernelsNotAllowed(ConfigError):
    """A run-config names kernel code to import, and importing it was not asked for."""


def allowed_by_environment() -> bool:
    """Whether ``$DSPSIM_ALLOW_KERNELS`` lets a config's kernels be imported (:func:`sim.env_flags.env_flag`: a
    value that is neither on nor off is refused)."""
    return env_flag(ALLOW_ENV_VAR)


def _refusal(cfg: RunConfig) -> KernelsNotAllowed:
    """The one-line refusal of ``cfg``'s kernels, naming its first entry's file (or module) and the opt-in."""
    first = cfg.kernels[0]
    what = f"file {first.path.resolve()}" if first.path is not None else f"module {first.module}"
    more = f" (and {len(cfg.kernels) - 1} more)" if len(cfg.kernels) > 1 else ""
    return KernelsNotAllowed(
        f"{cfg.path}: kernels[0]: {what}{more} not imported: importing it would run its code, which dspsim does "
        f"only when asked; if you trust this config, pass {ALLOW_FLAG} (or set {ALLOW_ENV_VAR}=1; in Python, "
        f"allow_kernels=True)")


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """Send what is printed meanwhile, by Python (``print``) or below it (file descriptor 1), to stderr.

    A user's kernel may print while it is imported or run; stdout is kept for what dspsim prints (the JSON of
    ``validate --format json``).
    """
    if sys.stdout is not None:  # (None: the process started with stdout closed)
        sys.stdout.flush()
    saved = None
    try:
        saved = os.dup(1)
        os.dup2(2, 1)
    except OSError:  # no descriptor 1 or 2 (a daemon): Python's own stream is redirected all the same
        if saved is not None:
            os.close(saved)
            saved = None
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        sys.stderr.flush()
        if saved is not None:
            os.dup2(saved, 1)
            os.close(saved)


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


def _key(source: KernelSource) -> str:
    """The key of an entry in ``_IMPORTED`` and ``_HELPERS``."""
    return f"file:{source.path.resolve()}" if source.path is not None else f"module:{source.module}"


def _helpers(before: set[str], folder: Path, own: Path) -> tuple[Path, ...]:
    """Source files of the modules imported since ``before`` that lie under ``folder``: the helpers a kernel's
    file (or package) imported from beside it, which decide what it computes as much as the file itself."""
    found = set()
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None) if name not in before else None
        if not isinstance(file, str):
            continue
        p = Path(file).resolve()
        if p != own and folder in p.parents and not any(d in p.parents for d in _DSPSIM_SOURCES):
            found.add(p)
    return tuple(sorted(found))


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
    before = set(sys.modules)
    sys.modules[name] = module  # dataclasses and pickling look their module up there
    try:
        with stdout_to_stderr():
            spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    _IMPORTED[key] = module
    _HELPERS[key] = _helpers(before, real.parent, real)
    return module, True


def _import_module(name: str) -> tuple[types.ModuleType, bool]:
    key = f"module:{name}"
    module = _IMPORTED.get(key)
    if module is not None:
        return module, False
    before = set(sys.modules)
    with stdout_to_stderr():
        module = importlib.import_module(name)
    _IMPORTED[key] = module
    file = getattr(module, "__file__", None)
    if isinstance(file, str):
        own = Path(file).resolve()
        _HELPERS[key] = _helpers(before, own.parent, own)
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
    """Import the kernels ``cfg`` names (nothing when it names none): call before binding its call.

    :class:`KernelsNotAllowed` when it names some and importing them was not asked for (``cfg.allow_kernels``,
    or ``$DSPSIM_ALLOW_KERNELS`` when that is None).
    """
    if not cfg.kernels:
        return
    allowed = cfg.allow_kernels if cfg.allow_kernels is not None else allowed_by_environment()
    if not allowed:
        raise _refusal(cfg)
    load_kernel_sources(cfg.kernels, cfg.path)


def _file_digest(path: Path) -> str:
    # The guarded reader: a named pipe or a device named as a kernel file must not hang the sweep.
    return hashlib.sha256(read_file(path, str(path), ConfigError, MAX_SOURCE_BYTES, what="kernel file")).hexdigest()


def source_digest(source: KernelSource) -> str:
    """The digest of the code an entry runs (a sweep point's id names it: an edited kernel runs again): a file's
    content, or an imported module's file, with the local modules its import brought in (see :func:`_helpers`;
    known once the entry is imported in this process).  A module not imported here is named by its name."""
    key = _key(source)
    if source.path is not None:
        own = source.path.resolve()
    else:
        file = getattr(_IMPORTED.get(key), "__file__", None)
        if not isinstance(file, str):
            return f"module:{source.module}"
        own = Path(file).resolve()
    digest = _file_digest(own)
    helpers = _HELPERS.get(key, ())
    if not helpers:
        return digest  # a lone file: its content alone, wherever it lies
    h = hashlib.sha256(digest.encode())
    for p in helpers:  # by their place beside the entry: a copied folder keeps its digest
        h.update(f"\n{p.relative_to(own.parent)}:{_file_digest(p)}".encode())
    return h.hexdigest()
