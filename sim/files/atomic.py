"""Atomic output files: a failed write (a crash, a power cut) never leaves half a file or clobbers the previous one.

The one writer of every file dspsim writes (traces, outputs, sweep tables and journals' rewrites, the tuning
cache, fitted targets)."""

from __future__ import annotations

import contextlib
import contextvars
import os
import stat
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from sim.errors import SimError, brief


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


def output_path(path: object) -> Path:
    """``path`` as a Path; SimError unless it is a non-empty str or path-like object (not bytes: a file name is
    text)."""
    if isinstance(path, os.PathLike):
        path = os.fspath(path)
    if not isinstance(path, str) or not path:
        raise SimError(f"output: expected the path of a file to write (a str or a Path), got {brief(path)}")
    return Path(path)


def atomic_write(path: str | Path, write: Callable[[Path], object], *, into_devices: bool = True) -> Path:
    """Call ``write(tmp_path)`` on a temporary file beside ``path``, flush it to the disk, then rename it into
    place (and flush the rename): whatever happens, ``path`` holds the old file or the whole new one.

    A path the caller named that is a character device or a pipe (``--trace /dev/null``, ``/dev/stdout``, a FIFO
    something reads) is written into as it is (``into_devices``): a rename would replace the device or the pipe
    by a file.  A pipe nothing reads, a folder, a block device or a socket is refused.  A file of dspsim's own
    (a tuning-cache entry: ``into_devices`` False) replaces whatever took its name."""
    p = output_path(path)
    if into_devices:
        try:
            mode = p.stat().st_mode
        except OSError:
            mode = None  # (a new file, or a name the writes below will say they cannot use)
        if mode is not None and not stat.S_ISREG(mode):
            return _write_into(p, mode, write)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
        os.close(fd)
    except OSError as e:
        raise SimError(f"output {p}: cannot create: {folder_trouble(p.parent) or e.strerror or e}") from None
    try:
        write(Path(tmp))
        os.chmod(tmp, _mode_for(p))  # mkstemp makes 0600; an output file gets the usual permissions
        _fsync(Path(tmp))  # its bytes on disk before the rename: a power cut cannot leave the new name empty
        batch = _together.get()
        if batch is not None:  # renamed with the others at the end of written_together()
            batch.append((Path(tmp), p))
            return p
        os.replace(tmp, p)
        _fsync_folder(p.parent)  # and the rename itself
    except OSError as e:
        Path(tmp).unlink(missing_ok=True)
        raise SimError(f"output {p}: cannot write: {e.strerror or e}") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return p


#: The files :func:`written_together` holds back: (temporary file, its name), in the order they were written.
_together: contextvars.ContextVar[list[tuple[Path, Path]] | None] = contextvars.ContextVar("together", default=None)


@contextlib.contextmanager
def written_together() -> Iterator[None]:
    """The files :func:`atomic_write` writes in the block appear together at its end: each is written whole to
    its temporary file, and all are renamed into place one after the other once the block ends, so a run stopped
    while writing (Ctrl-C, SIGTERM, a full disk) leaves the previous set of outputs, never half of a new one beside
    half of an old one (an exception in the block deletes the temporaries)."""
    pending: list[tuple[Path, Path]] = []
    token = _together.set(pending)
    done = False
    try:
        yield
        done = True
    finally:
        _together.reset(token)
        if not done:
            for tmp, _ in pending:
                tmp.unlink(missing_ok=True)
    for i, (tmp, p) in enumerate(pending):
        try:
            os.replace(tmp, p)
        except BaseException as e:
            for left, _ in pending[i:]:
                left.unlink(missing_ok=True)
            if isinstance(e, OSError):
                raise SimError(f"output {p}: cannot write: {e.strerror or e}") from None
            raise
    for folder in dict.fromkeys(p.parent for _, p in pending):
        _fsync_folder(folder)


def folder_trouble(folder: Path) -> str | None:
    """What keeps ``folder`` (or the first of its parents that exists) from holding files, if it is not a folder:
    "<path> is a file, not a folder"; None otherwise."""
    for f in (folder, *folder.parents):
        if f.exists() or f.is_symlink():
            return None if f.is_dir() else f"{f} is a file, not a folder"
    return None


def _write_into(p: Path, mode: int, write: Callable[[Path], object]) -> Path:
    """``write(p)`` straight into the character device or pipe ``p``; SimError for anything else that is not a
    file, and for a pipe no process reads (writing would wait for one for ever)."""
    if stat.S_ISFIFO(mode):
        try:
            os.close(os.open(p, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            raise SimError(f"output {p}: it is a named pipe that no process reads: start its reader first, or "
                           f"give the path of a file") from None
    elif not stat.S_ISCHR(mode):
        kind = "a folder" if stat.S_ISDIR(mode) else "a block device" if stat.S_ISBLK(mode) else "not a file"
        raise SimError(f"output {p}: it is {kind}: give the path of a file to write")
    try:
        write(p)
    except OSError as e:
        raise SimError(f"output {p}: cannot write: {e.strerror or e}") from None
    return p


def atomic_write_text(path: str | Path, text: str, *, into_devices: bool = True) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically (``into_devices``: :func:`atomic_write`'s)."""
    return atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"), into_devices=into_devices)


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically."""
    return atomic_write(path, lambda tmp: tmp.write_bytes(data))
