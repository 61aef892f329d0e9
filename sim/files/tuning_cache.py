"""The on-disk tuning cache: the tiling the cost model chose, per call, kept across processes.

One JSON file per key under ``<cache dir>/tuning/``.  The cache dir is ``$DSPSIM_CACHE_DIR`` if set, else
``$XDG_CACHE_HOME/dspsim``, else ``~/.cache/dspsim``.  A key hashes everything the choice depends on: the
target's parsed content, the symbol, the bound call (shapes, attributes, precision, cores and buffer
addresses, since an address decides the region a buffer lies in and so its bandwidth), the tiling tolerance,
the kernel's planner and a version of the model (the hash of every source file of ``sim/`` and ``kernels/``,
so a changed timing model or kernel never reuses a stale choice).

Writes are atomic (a temporary file beside the entry, then ``os.replace``): processes writing the same entry
at once leave one whole file.  A file that is unreadable, corrupt, truncated or of another format is ignored
(and overwritten by the next search); a cache dir that cannot be written only costs the next process its search.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import tempfile
import types
from pathlib import Path
from typing import Any

#: The layout of an entry; an entry of another format is ignored.
FORMAT = 1
#: The environment variable that moves the cache.
ENV_VAR = "DSPSIM_CACHE_DIR"
#: Set (to anything but empty or ``0``), simulators built without ``tuning_cache=`` use no tuning cache:
#: ``--no-cache`` sets it, so that the worker processes a run or sweep starts inherit it.
NO_CACHE_ENV_VAR = "DSPSIM_NO_CACHE"

_PACKAGE_ROOT = Path(__file__).resolve().parent.parent.parent
_model_version: str | None = None


def cache_dir() -> Path:
    """Where dspsim keeps its caches (``$DSPSIM_CACHE_DIR``, ``$XDG_CACHE_HOME/dspsim`` or ``~/.cache/dspsim``)."""
    given = os.environ.get(ENV_VAR)
    if given:
        return Path(given).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "dspsim"


def enabled_by_default() -> bool:
    """Whether a simulator uses the tuning cache when not told (``$DSPSIM_NO_CACHE`` unset, empty or 0)."""
    return os.environ.get(NO_CACHE_ENV_VAR, "") in ("", "0")


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
                h.update(p.read_bytes())
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


def _function_id(fn: Any) -> str | None:
    """Where a planner function comes from and its bytecode; None for one without code (no stable identity)."""
    fn = getattr(fn, "__func__", fn)
    code = getattr(fn, "__code__", None)
    if not isinstance(code, types.CodeType):
        return None
    h = hashlib.sha256()
    _code_digest(code, h)
    return f"{fn.__module__}.{fn.__qualname__}:{h.hexdigest()[:16]}"


def kernel_fingerprint(kernel: Any) -> str | None:
    """What identifies a kernel's planning: its ``plan`` and ``tiling_space`` (or ``tilings``) functions, and the
    source file of a kernel outside the package (a user kernel).  None when there is no stable identity (no such
    file)."""
    parts = []
    for name in ("plan", "tiling_space" if hasattr(kernel, "tiling_space") else "tilings"):
        got = _function_id(getattr(kernel, name, None))
        if got is None:
            return None
        parts.append(got)
    try:
        source = inspect.getsourcefile(type(kernel))
    except TypeError:
        return None
    if source is None:
        return None
    path = Path(source).resolve()
    if _PACKAGE_ROOT not in path.parents:  # the package's files are in model_version already
        try:
            parts.append(hashlib.sha256(path.read_bytes()).hexdigest()[:16])
        except OSError:
            return None
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
    cannot be read (corrupt, truncated, another format: ignored, never an error)."""
    try:
        doc = json.loads(_entry_path(key).read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
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
    folder = tuning_dir()
    tmp = None
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{key[:16]}.", suffix=".tmp", dir=folder)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, _entry_path(key))
        return True
    except OSError:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        return False


def entries() -> list[Path]:
    """The entry files in the tuning cache."""
    try:
        return sorted(p for p in tuning_dir().glob("*.json") if p.is_file())
    except OSError:
        return []


def size_bytes() -> int:
    """The bytes the tuning cache's entries take."""
    total = 0
    for p in entries():
        try:
            total += p.stat().st_size
        except OSError:
            continue
    return total


def clear() -> int:
    """Delete every entry (and leftover temporary file); the number of entries deleted."""
    n = 0
    try:
        files = list(tuning_dir().iterdir())
    except OSError:
        return 0
    for p in files:
        if p.suffix in (".json", ".tmp") and p.is_file():
            try:
                p.unlink()
                n += p.suffix == ".json"
            except OSError:
                continue
    return n
