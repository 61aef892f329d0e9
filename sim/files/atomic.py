"""Atomic output files: a failed write (a crash, a power cut) never leaves half a file or clobbers the previous one.

The one writer of every file dspsim writes (traces, outputs, sweep tables and journals' rewrites, the tuning
cache, fitted targets)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from sim.errors import SimError


def _mode_for(p: Path) -> int:
    """The mode a replaced file had, or what a fresh file gets under the process umask."""
    try:
        return p.stat().st_mode & 0o7777
    except OSError:
        return 0o666 & ~_umask()


def _umask() -> int:
    # Linux reports the umask without changing it; elsewhere set-and-restore (briefly process-wide).
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    umask = os.umask(0o022)
    os.umask(umask)
    return umask


def _fsync(path: Path) -> None:
    """Flush ``path``'s bytes to the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_folder(folder: Path) -> None:
    """Flush a folder's entries (a rename into it) to the disk, where the system lets a folder be opened."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # Windows opens no folder this way; its rename is durable once it returns
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems refuse to sync a folder: the file itself is on disk already
    finally:
        os.close(fd)


def atomic_write(path: str | Path, write: Callable[[Path], object]) -> Path:
    """Call ``write(tmp_path)`` on a temporary file beside ``path``, flush it to the disk, then rename it into
    place (and flush the rename): whatever happens, ``path`` holds the old file or the whole new one."""
    p = Path(path)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
        os.close(fd)
    except OSError as e:
        raise SimError(f"output {p}: cannot create: {e.strerror or e}") from None
    try:
        write(Path(tmp))
        os.chmod(tmp, _mode_for(p))  # mkstemp makes 0600; an output file gets the usual permissions
        _fsync(Path(tmp))  # its bytes on disk before the rename: a power cut cannot leave the new name empty
        os.replace(tmp, p)
        _fsync_folder(p.parent)  # and the rename itself
    except OSError as e:
        Path(tmp).unlink(missing_ok=True)
        raise SimError(f"output {p}: cannot write: {e.strerror or e}") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return p


def atomic_write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    return atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically."""
    return atomic_write(path, lambda tmp: tmp.write_bytes(data))
