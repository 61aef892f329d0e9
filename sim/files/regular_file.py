"""The one guarded way dspsim opens the files it reads: regular files only, never more than a cap.

Targets, run-configs, sweep files, .npy data, measurements, traces and tuning-cache entries all come through
here (the format readers on top: :mod:`sim.files.yamlsafe`, :mod:`sim.files.jsonsafe`,
:mod:`sim.files.csvsafe`).

Opening a named pipe for reading blocks until some other process writes to it, and ``/dev/zero`` never
ends, so a FIFO or a device given where a file is expected would hang the simulator.  :func:`open_regular`
opens without blocking and checks what it opened before a byte is read; the check is made on the open
descriptor, so the file cannot be swapped between the check and the read (a symlink to ``/dev/zero`` is
refused as the device it opens).  :func:`read_regular` refuses a file larger than its caller's cap from its
size before reading, and never reads more than the cap plus one byte (a file growing while read).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO

from sim.errors import SimError

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

    A file whose size is over the limit is refused before a byte is read; at most ``limit + 1`` bytes are ever
    read, so a huge (or growing) file costs no more memory or time than the limit.
    """
    with open_regular(path) as f:
        if os.fstat(f.fileno()).st_size > limit:
            raise FileTooLarge(f"is larger than {limit} bytes, more than dspsim reads from such a file")
        data = f.read(limit + 1)
    if len(data) > limit:
        raise FileTooLarge(f"is larger than {limit} bytes, more than dspsim reads from such a file")
    return data


def read_file(path: str | Path, where: str, error: type[SimError], max_bytes: int, what: str = "file",
              too_large: str = "") -> bytes:
    """The bytes of the regular file ``path``, at most ``max_bytes`` of them; any problem raises ``error`` (a
    :class:`~sim.errors.SimError` subclass) on one line starting with ``where``.

    ``what`` names the file in messages (``trace file``); ``too_large`` ends the message of a file over the cap
    (default: ``a dspsim <what> may hold``).
    """
    try:
        return read_regular(path, max_bytes)
    except FileNotFoundError:
        raise error(f"{where}: {what} not found") from None
    except NotRegularFile as e:
        raise error(f"{where}: {e}") from None
    except FileTooLarge:
        raise error(f"{where}: larger than the {max_bytes} bytes {too_large or f'a dspsim {what} may hold'}") \
            from None
    except OSError as e:
        raise error(f"{where}: cannot read {what}: {e.strerror or e}") from None
    except ValueError as e:  # a path with a NUL byte
        raise error(f"{where}: cannot read {what}: {e}") from None


def decode_utf8(data: bytes, where: str, error: type[SimError], what: str = "file") -> str:
    """``data`` as UTF-8 text; ``error`` naming ``where`` when it is not."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise error(f"{where}: cannot read {what}: not UTF-8 text ({e.reason} at byte {e.start})") from None


def read_text_file(path: str | Path, where: str, error: type[SimError], max_bytes: int, what: str = "file",
                   too_large: str = "") -> str:
    """The UTF-8 text of the regular file ``path`` (:func:`read_file`, then :func:`decode_utf8`)."""
    return decode_utf8(read_file(path, where, error, max_bytes, what, too_large), where, error, what)
