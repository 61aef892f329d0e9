"""The on-disk tuning cache: the tiling the cost model chose, per call, kept across processes.

One JSON file per key under ``<cache dir>/tuning/``.  The cache dir is ``$DSPSIM_CACHE_DIR`` if set, else the
system's user cache folder (:func:`cache_dir`).  A key hashes everything the choice depends on: the
target's parsed content, the symbol, the bound call (shapes, attributes, precision, cores and buffer
addresses, since an address decides the region a buffer lies in and so its bandwidth), the tiling tolerance,
the kernel's planner and a version of the model (the hash of every source file of ``sim/`` and ``kernels/``,
so a changed timing model or kernel never reuses a stale choice).  A user kernel is keyed by its module and
the local modules they import, transitively (:mod:`sim.files.local_modules`): a changed helper module that
holds its ``tilings()`` misses too.

Writes go through the one atomic writer (:mod:`sim.files.atomic`: a temporary file beside the entry, flushed to the
disk, then ``os.replace``): processes writing the same entry at once leave one whole file. Entries are read through
the guarded JSON reader (:mod:`sim.files.jsonsafe`): regular files only (a named pipe, a device, a link to
``/dev/zero`` are refused before a byte is read), at most :data:`MAX_ENTRY_BYTES` bytes, nested at most
:data:`MAX_ENTRY_DEPTH` levels, numbers bounded. A file that is unreadable, corrupt, truncated, hostile or of
another format is ignored (a miss, overwritten by the next search), never an error; a cache dir that cannot be
written only costs the next process its search. ``dspsim cache clear`` deletes whatever lies in the folder, and says
so (:class:`CacheError`) when it cannot.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import types
from pathlib import Path
from typing import Any

import platformdirs

from sim.env_flags import env_flag
from sim.errors import SimError, brief
from sim.files.atomic import atomic_write_text
from sim.files.jsonsafe import read_json_file
from sim.files.local_modules import MAX_SOURCE_BYTES, local_source_digest
from sim.files.regular_file import read_regular

#: The layout of an entry; an entry of another format is ignored.
FORMAT = 1
#: The environment variable that moves the cache.
ENV_VAR = "DSPSIM_CACHE_DIR"
#: Set (to anything but empty or ``0``), simulators built without ``tuning_cache=`` use no tuning cache:
#: ``--no-cache`` sets it, so that the worker processes a run or sweep starts inherit it.
NO_CACHE_ENV_VAR = "DSPSIM_NO_CACHE"
#: Largest entry file read (bytes): an entry is a few hundred bytes, a GEMM's with its many candidates a few KiB.
MAX_ENTRY_BYTES = 1 << 20
#: Deepest nesting of an entry: the entry, its candidates, a candidate, its tiling, a value (five levels).
MAX_ENTRY_DEPTH = 8


class CacheError(SimError):
    """The tuning cache cannot be cleared (a read-only folder): the message names the folder and the entry."""


class _UnreadableEntry(SimError):
    """An entry the guarded reader refuses: never shown, the entry is a miss."""

_PACKAGE_ROOT = Path(__file__).resolve().parent.parent.parent
_model_version: str | None = None


def cache_dir() -> Path:
    """Where dspsim keeps its caches: ``$DSPSIM_CACHE_DIR``, else the system's user cache folder for dspsim
    (platformdirs: ``$XDG_CACHE_HOME/dspsim`` or ``~/.cache/dspsim`` on Linux, ``~/Library/Caches/dspsim`` on
    macOS, ``%LOCALAPPDATA%\\dspsim\\Cache`` on Windows)."""
    given = os.environ.get(ENV_VAR)
    if given:
        return Path(given).expanduser()
    return Path(platformdirs.user_cache_dir("dspsim", appauthor=False))


def enabled_by_default() -> bool:
    """Whether a simulator uses the tuning cache when not told (``$DSPSIM_NO_CACHE`` off:
    :func:`sim.env_flags.env_flag`)."""
    return not env_flag(NO_CACHE_ENV_VAR)


def tuning_dir() -> Path:
    """The folder of the tuning cache's entries."""
    return cache_dir() / "tuning"


def model_version() -> str:
    """A hash of the source files that plan and price (``sim/`` and ``kernels/``), computed once per process."""
    global _model_version
    if _model_version is None:
        h = hashlib.sha256()
        for package in ("sim", "kernels"):
            for p in sorted((_PACKAGE_ROOT / package).rglob("*.py")):
                h.update(str(p.relative_to(_PACKAGE_ROOT)).encode())
                try:
                    h.update(read_regular(p, MAX_SOURCE_BYTES))
                except OSError:
                    h.update(b"\0unreadable")  # still a version: it differs from the readable file's
        _model_version = h.hexdigest()[:16]
    return _model_version


def _code_digest(code: types.CodeType, h: Any) -> None:
    """Feed a code object's bytecode and constants to ``h``, nested code (comprehensions, closures) by content:
    a code object's repr names its address, which differs from process to process."""
    h.update(code.co_code)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            _code_digest(const, h)
        else:
            h.update(repr(const).encode())


def _function_id(fn: Any, modules: set[str] | None = None, depth: int = 0) -> str | None:
    """Where a planner function comes from and its bytecode, with what its closure holds: the functions it closes
    over, alike (their modules join ``modules``: a kernel a factory builds from a lambda of the kernel's own file
    is keyed by that file too), and plain values by their text; None for one without code (no stable identity)."""
    fn = getattr(fn, "__func__", fn)
    code = getattr(fn, "__code__", None)
    if not isinstance(code, types.CodeType):
        return None
    h = hashlib.sha256()
    _code_digest(code, h)
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            held = cell.cell_contents
        except ValueError:  # (an empty cell: a name bound later)
            continue
        if isinstance(held, (int, float, str, bytes, bool, type(None))):
            h.update(repr(held).encode("utf-8", "surrogatepass")[:4096])
        elif callable(held) and depth < 4:
            inner = _function_id(held, modules, depth + 1)
            if inner is not None:
                h.update(inner.encode())
                if modules is not None and getattr(getattr(held, "__func__", held), "__module__", None):
                    modules.add(getattr(held, "__func__", held).__module__)
    return f"{fn.__module__}.{fn.__qualname__}:{h.hexdigest()[:16]}"


def kernel_fingerprint(kernel: Any) -> str | None:
    """What identifies a kernel's planning: its ``plan`` and ``tiling_space`` (or ``tilings``) functions (and the
    functions and values their closures hold), and, for a kernel outside dspsim (a user's), the source of the
    modules they, those closures' functions and its class live in and of the local modules those import,
    transitively (:func:`sim.files.local_modules.local_source_digest`).  None when there is
    no stable identity (a kernel defined nowhere on disk)."""
    parts = []
    modules = {type(kernel).__module__}
    for name in ("plan", "tiling_space" if hasattr(kernel, "tiling_space") else "tilings"):
        fn = getattr(kernel, name, None)
        got = _function_id(fn, modules)
        if got is None:
            return None
        parts.append(got)
        modules.add(getattr(getattr(fn, "__func__", fn), "__module__", None) or type(kernel).__module__)
    source = local_source_digest(sorted(modules))
    if source is None:
        return None
    parts.append(source)
    return "|".join(parts)


def entry_key(target_text: str, symbol: str, call_text: str, tolerance: float, kernel_id: str) -> str | None:
    """The key of one choice, or None when a part has no stable text (an object's repr naming its address)."""
    if " at 0x" in call_text or " at 0x" in target_text or " at 0x" in kernel_id:
        return None
    text = "\n".join((str(FORMAT), model_version(), target_text, symbol, call_text, repr(float(tolerance)),
                      kernel_id))
    return hashlib.sha256(text.encode()).hexdigest()


def _entry_path(key: str) -> Path:
    return tuning_dir() / f"{key}.json"


def load(key: str) -> dict | None:
    """The stored entry of ``key`` (``tiling``, ``candidates``, ``tolerance``), or None if there is none or it
    cannot be read (corrupt, truncated, another format, not a regular file, too large or too deep: ignored,
    never an error, and overwritten by the next search)."""
    try:
        doc = read_json_file(_entry_path(key), "tuning-cache entry", _UnreadableEntry, MAX_ENTRY_BYTES,
                             MAX_ENTRY_DEPTH, what="tuning-cache entry")
    except _UnreadableEntry:
        return None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or doc.get("key") != key:
        return None
    tiling, candidates = doc.get("tiling"), doc.get("candidates")
    if not isinstance(tiling, dict) or not isinstance(candidates, list) or not isinstance(doc.get("tolerance"), float):
        return None
    for c in candidates:
        if not (isinstance(c, list) and len(c) == 2 and isinstance(c[0], dict)
                and (c[1] is None or (isinstance(c[1], int) and not isinstance(c[1], bool)))):
            return None
    return doc


def store(key: str, entry: dict) -> bool:
    """Write ``entry`` for ``key`` atomically; False (nothing written) if it is not plain JSON that reads back
    equal (a tiling of tuples would come back as lists) or the cache dir cannot be written."""
    doc = {"format": FORMAT, "key": key, **entry}
    try:
        text = json.dumps(doc, sort_keys=True)
        if json.loads(text) != doc:
            return False
    except (TypeError, ValueError):
        return False
    try:
        atomic_write_text(_entry_path(key), text, into_devices=False)  # (whatever took an entry's name goes)
    except SimError:  # a cache that cannot be written is no error: the choice is searched again next time
        return False
    return True


def _contents() -> list[Path]:
    """Everything in the tuning cache's folder, whatever it is (none when there is no such folder)."""
    try:
        return sorted(tuning_dir().iterdir())
    except OSError:
        return []


def entries() -> list[Path]:
    """The entries in the tuning cache: every ``*.json`` name in its folder, whatever the file is (an entry
    a reader refuses, such as a named pipe, is still there to show and to clear)."""
    return [p for p in _contents() if p.suffix == ".json"]


def others() -> list[Path]:
    """What else lies in the tuning cache's folder (leftover temporary files, anything put there): not entries,
    but ``clear`` deletes them too."""
    return [p for p in _contents() if p.suffix != ".json"]


def size_bytes() -> int:
    """The bytes the tuning cache's entries take (a link counted by itself, not by what it points at)."""
    total = 0
    for p in entries():
        try:
            total += p.lstat().st_size
        except OSError:
            continue
    return total


def _remove(p: Path) -> None:
    """Delete ``p``: a folder with what it holds, anything else (a link, a pipe) by its own name."""
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p)
    else:
        p.unlink()


def clear() -> int:
    """Delete everything in the tuning cache's folder (entries, leftover temporary files, and whatever else
    lies there: a named pipe, a link, a folder); the number of items deleted (0 when there is no folder).
    :class:`CacheError` naming the folder and the first file when some cannot be deleted (a read-only cache)."""
    folder = tuning_dir()
    try:
        items = sorted(folder.iterdir())
    except (FileNotFoundError, NotADirectoryError):
        return 0
    except OSError as e:
        raise CacheError(f"tuning cache {folder}: cannot list its entries: {e.strerror or e}") from None
    failed: list[tuple[Path, OSError]] = []
    deleted = 0
    for p in items:
        try:
            _remove(p)
            deleted += 1
        except FileNotFoundError:
            continue  # another process deleted it first
        except OSError as e:
            failed.append((p, e))
    if failed:
        first, why = failed[0]
        # An entry's name (64 hex digits) as it is; any other name cut to one short line.
        name = first.name if len(first.name) <= 80 and first.name.isprintable() else brief(first.name, 80)
        raise CacheError(f"tuning cache {folder}: cannot delete {len(failed)} of {len(items)} entries "
                         f"({name}: {why.strerror or why}); {deleted} deleted")
    return deleted
