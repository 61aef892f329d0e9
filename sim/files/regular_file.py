"""Opening the files dspsim reads (targets, run-configs, sweep files, .npy data, measurements): regular files only.

Opening a named pipe for reading blocks until some other process writes to it, and ``/dev/zero`` never
ends, so a FIFO or a device given where a file is expected would hang the simulator.  :func:`open_regular`
opens without blocking and checks what it opened before a byte is read; the check is made on the open
descriptor, so the file cannot be swapped between the check and the read.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO

#: ``os.O_NONBLOCK`` where the platform has it: opening a FIFO with it returns at once instead of waiting.
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)


class NotRegularFile(OSError):
    """The path exists but is not a regular file (a folder, a named pipe, a device, a socket)."""


class FileTooLarge(OSError):
    """The file holds more bytes than its reader takes."""


def _kind(mode: int) -> str:
    """What a non-regular file is, in words."""
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a named pipe"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def open_regular(path: str | Path) -> BinaryIO:
    """``path`` opened for binary reading; :class:`NotRegularFile` unless it is a regular file.

    Other ``OSError`` (``FileNotFoundError``, ``PermissionError``...) pass through for the caller to word.
    """
    fd = os.open(path, os.O_RDONLY | _NONBLOCK | getattr(os, "O_BINARY", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = _kind(mode)
            raise NotRegularFile(f"is {kind}, not a regular file: dspsim reads only regular files"
                                 if kind != "not a regular file" else
                                 "is not a regular file: dspsim reads only regular files")
        if _NONBLOCK:
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: str | Path, limit: int) -> bytes:
    """The bytes of the regular file ``path``; :class:`FileTooLarge` when it holds more than ``limit`` bytes.

    Reads at most ``limit + 1`` bytes, so a huge file costs no more memory than the limit.
    """
    with open_regular(path) as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise FileTooLarge(f"is larger than {limit} bytes, more than dspsim reads from such a file")
    return data
