"""Reading the small text files a command is given: rules, annotation files, labels CSVs.

A path on the command line can name anything: a FIFO, which would block the reader until some
writer appears (a hang), ``/dev/zero``, which would be read until memory runs out, or a trace
given in the wrong place. :func:`read_small_text` opens the path non-blocking, refuses anything
but a regular file before reading a byte, and bounds the read, so each of those is a one-line
error. It imports nothing beyond the standard library and :mod:`specnsys.errors`, so the
annotation bootstrap inside a profiled program can use it too.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from specnsys.errors import BadInputError, SpecnsysError


def read_small_text(
    path: Path,
    *,
    what: str,
    max_bytes: int,
    error: type[SpecnsysError] = BadInputError,
) -> str:
    """The UTF-8 text of *path*, a regular file of at most *max_bytes*.

    A FIFO, device or socket, or a larger file, raises *error* with a message naming *path* and
    *what* the file should be (``"a rules file is a TOML file"``). The size is checked on the open
    descriptor (not the path, which could change in between) and again while reading. Errors of
    the file system (missing, a directory, no permission) and of decoding propagate as
    :class:`OSError` and :class:`UnicodeDecodeError` for the caller to word.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if stat.S_ISDIR(info.st_mode):
            raise IsADirectoryError(errno.EISDIR, "is a directory", str(path))
        if not stat.S_ISREG(info.st_mode):
            raise error(f"{path}: not a regular file ({what})")
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes or info.st_size > max_bytes:
        size = max(len(data), info.st_size)
        limit = f"{max_bytes >> 20} MiB" if max_bytes >= 1 << 20 else f"{max_bytes >> 10} KiB"
        raise error(f"{path}: {size} bytes is too large ({what}; at most {limit})")
    return data.decode("utf-8")


def read_small_bytes(
    path: Path,
    *,
    what: str,
    max_bytes: int,
    error: type[SpecnsysError] = BadInputError,
) -> bytes:
    """The bytes of *path*, a regular file of at most *max_bytes*: :func:`read_small_text`'s
    checks (no FIFO, device or socket; the size bounded on the open descriptor and while
    reading) for a file that is not text, such as a Parquet workload."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if stat.S_ISDIR(info.st_mode):
            raise IsADirectoryError(errno.EISDIR, "is a directory", str(path))
        if not stat.S_ISREG(info.st_mode):
            raise error(f"{path}: not a regular file ({what})")
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes or info.st_size > max_bytes:
        size = max(len(data), info.st_size)
        limit = f"{max_bytes >> 20} MiB" if max_bytes >= 1 << 20 else f"{max_bytes >> 10} KiB"
        raise error(f"{path}: {size} bytes is too large ({what}; at most {limit})")
    return data
