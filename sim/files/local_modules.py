"""The digest of a user kernel's own source: its modules and the local modules they import, transitively.

A kernel's choice of tiling depends on every line its ``plan`` and ``tilings`` run, and those often live in
a helper module beside the kernel's file.  The tuning cache keys a user kernel by this digest
(:func:`sim.files.tuning_cache.kernel_fingerprint`), so editing the helper misses the cache.

*Local* modules are those whose file lies outside the standard library and every site-packages (or
dist-packages) folder, this environment's or another's on the path (the user's own project, an editable
install of it); dspsim's ``sim`` and ``kernels`` packages are left out too,
since the model version hashes them already.  The modules given as roots (the kernel's) are always hashed,
wherever they lie.  The imports of a module are found two ways, both without importing anything: its
``import`` statements (read from its source, those inside functions included) and the modules its globals
come from (an import done by ``importlib``).  A module not imported yet is located as the import system
would find it (``importlib.machinery.PathFinder``), never executed.

Bounded: at most :data:`MAX_LOCAL_MODULES` modules, each file read through the guarded reader
(:func:`sim.files.regular_file.read_regular`, at most :data:`MAX_SOURCE_BYTES`).  Past the bound, or when a
root has no file (a class defined at the prompt), there is no digest: such a kernel is not cached on disk,
since a stale choice is worse than a search.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.machinery
import importlib.util
import site
import sys
import sysconfig
import types
from collections.abc import Iterable
from importlib.machinery import ModuleSpec
from pathlib import Path

from sim.files.regular_file import read_regular

#: Most modules one kernel's digest may take in (its own and the local ones they import, transitively).
MAX_LOCAL_MODULES = 256
#: Largest source file read for a digest (bytes): a module of 16 MiB is generated data, not code.
MAX_SOURCE_BYTES = 16 << 20

_PACKAGE_ROOT = Path(__file__).resolve().parent.parent.parent

#: (content digest, module name) of a source file -> the modules its import statements name (parsing is the
#: cost; the name decides what its relative imports mean).
_IMPORTS_OF: dict[tuple[str, str], frozenset[str]] = {}


@functools.lru_cache(maxsize=1)
def _foreign_folders() -> tuple[Path, ...]:
    """Folders whose modules are not the user's: the standard library and site-packages."""
    paths = sysconfig.get_paths()
    folders = [paths.get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")]
    folders += list(getattr(site, "getsitepackages", lambda: [])())
    folders.append(site.getusersitepackages() if hasattr(site, "getusersitepackages") else None)
    return tuple(Path(f).resolve() for f in folders if f)


def _inside(path: Path, folders: Iterable[Path]) -> bool:
    try:
        real = path.resolve()
    except (OSError, RuntimeError):  # a loop of links: the path as it is
        real = path
    return any(real == f or f in real.parents for f in folders)


def in_dspsim(path: Path) -> bool:
    """Whether the module file ``path`` is one of dspsim's own (``sim`` and ``kernels``: the model version)."""
    return _inside(path, (_PACKAGE_ROOT / "sim", _PACKAGE_ROOT / "kernels"))


#: Folder names that hold installed packages wherever they lie (another environment's, added by a ``.pth``).
_INSTALLED = frozenset({"site-packages", "dist-packages"})


def is_local(path: Path) -> bool:
    """Whether the module file ``path`` is the user's own: outside the standard library, any site-packages or
    dist-packages folder and dspsim's packages."""
    if _INSTALLED.intersection(path.parts):
        return False
    return not in_dspsim(path) and not _inside(path, _foreign_folders())


def _spec(name: str) -> ModuleSpec | None:
    """Where the module ``name`` is or would be loaded from, without importing it (or its packages)."""
    module = sys.modules.get(name)
    if module is not None:
        return getattr(module, "__spec__", None)
    parent = name.rpartition(".")[0]
    search: list[str] | None = None
    if parent:
        parent_spec = _spec(parent)
        if parent_spec is None or parent_spec.submodule_search_locations is None:
            return None
        search = list(parent_spec.submodule_search_locations)
    try:
        return importlib.machinery.PathFinder.find_spec(name, search)
    except Exception:  # noqa: BLE001 (path hooks are third-party code; a namespace package's parent not
        return None  # imported yet is a KeyError): a module that cannot be located is not followed


def module_file(name: str) -> Path | None:
    """The file of the module ``name`` (loaded or not); None for a built-in, a namespace or an unknown one."""
    module = sys.modules.get(name)
    given = getattr(module, "__file__", None) if module is not None else None
    if isinstance(given, str):
        return Path(given)
    spec = _spec(name)
    if spec is not None and spec.has_location and isinstance(spec.origin, str):
        return Path(spec.origin)
    return None


def _statement_imports(source: bytes, name: str, is_package: bool) -> frozenset[str]:
    """The modules the import statements of ``source`` (the module ``name``) name, relative ones resolved."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return frozenset()  # the import would fail the same way: nothing else to follow
    package = name if is_package else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            try:
                base = importlib.util.resolve_name("." * node.level + (node.module or ""), package) \
                    if node.level else (node.module or "")
            except (ImportError, ValueError):
                continue
            if base:
                out.add(base)
            # ``from pkg import helper`` may name a submodule: followed if it is one.
            out.update(f"{base}.{alias.name}" if base else alias.name for alias in node.names if alias.name != "*")
    return frozenset(out)


def _global_imports(name: str) -> set[str]:
    """The modules the globals of the loaded module ``name`` come from (an import statement or importlib's)."""
    module = sys.modules.get(name)
    out: set[str] = set()
    try:
        values = list(vars(module).values()) if module is not None else []
    except TypeError:  # something other than a module put in sys.modules
        values = []
    for value in values:
        if isinstance(value, types.ModuleType):
            out.add(value.__name__)
        else:
            origin = getattr(value, "__module__", None) if isinstance(value, (type, types.FunctionType)) else None
            if isinstance(origin, str):
                out.add(origin)
    return out


def _imports(name: str, source: bytes, digest: str, path: Path) -> set[str]:
    """Every module the module ``name`` (its file ``path``, of content ``source``) imports."""
    statements = _IMPORTS_OF.get((digest, name))
    if statements is None:
        # Only Python source has import statements to read (a compiled extension is hashed, not followed).
        statements = _statement_imports(source, name, path.stem == "__init__") if path.suffix == ".py" \
            else frozenset()
        _IMPORTS_OF[(digest, name)] = statements
    return set(statements) | _global_imports(name)


def local_source_digest(roots: Iterable[str]) -> str | None:
    """A digest of the modules ``roots`` and of the local modules they import, transitively (module names and
    file contents); None when a root has no readable file or more than MAX_LOCAL_MODULES modules are reached."""
    pending = sorted(set(roots))
    root_names = set(pending)
    seen: set[str] = set(pending)
    digests: dict[str, str] = {}
    while pending:
        name = pending.pop()
        path = module_file(name)
        if path is None:
            if name in root_names:
                return None  # a kernel defined nowhere on disk has no stable identity
            continue
        if in_dspsim(path) or (name not in root_names and not is_local(path)):
            continue  # dspsim's own (in the model version), or the standard library's and installed packages'
        if len(digests) >= MAX_LOCAL_MODULES:
            return None
        try:
            source = read_regular(path, MAX_SOURCE_BYTES)
        except (OSError, ValueError):
            return None
        digests[name] = hashlib.sha256(source).hexdigest()
        for imported in sorted(_imports(name, source, digests[name], path) - seen):
            seen.add(imported)
            pending.append(imported)
    h = hashlib.sha256()
    for name in sorted(digests):
        h.update(f"{name}:{digests[name]}\n".encode())
    return h.hexdigest()[:16]
