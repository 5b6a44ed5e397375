"""Reading the small text files a command is given (rules, annotation files, labels CSVs),
and writing every result file so that a failed write changes nothing.

A path on the command line can name anything: a FIFO, which would block the reader until some
writer appears (a hang), ``/dev/zero``, which would be read until memory runs out, or a trace
given in the wrong place. :func:`read_small_text` opens the path non-blocking, refuses anything
but a regular file before reading a byte, and bounds the read, so each of those is a one-line
error. It imports nothing beyond the standard library and :mod:`specnsys.errors`, so the
annotation bootstrap inside a profiled program can use it too.

:func:`write_files` is the one writer of the CLI's output files (``sql -o``, ``plot -o
--data``, ``report -o``, a dataset's manifest): every file is first written whole to a
temporary file beside its target, synced, then all are renamed into place, so a full disk or a
read-only folder fails before any target changes and an earlier result is replaced only by a
complete new one (a truncated fragment or an empty file is never left in its place). A target
that exists and is not a regular file (``/dev/null``, ``/dev/full``, a FIFO) is written in
place, since renaming over it would replace the special file itself.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import BinaryIO

from specnsys.errors import BadInputError, OutputError, SpecnsysError

__all__ = ["Content", "WriteError", "read_small_text", "write_files"]

Content = bytes | Callable[[BinaryIO], None]
"""What :func:`write_files` writes to a target: its bytes, or a function that writes them to
the open file it is given (a Parquet writer streaming a large table)."""


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
    return read_small_bytes(path, what=what, max_bytes=max_bytes, error=error).decode("utf-8")


def write_files(contents: Mapping[Path, Content]) -> None:
    """Write each target's content, all or none (see the module docs); a one-line
    :class:`OutputError` (exit 2) names the first target that could not be written."""
    staged: list[tuple[str, Path]] = []
    try:
        for target, content in contents.items():
            real = Path(os.path.realpath(target))  # through a symlink to the file it names
            if _is_special(real):
                _write_in_place(target, real, content)
            else:
                staged.append((_stage(target, real, content), real))
        for tmp, real in staged:
            os.replace(tmp, real)
    finally:
        for tmp, _ in staged:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)


def _is_special(path: Path) -> bool:
    try:
        return not stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False  # missing: a new file; unreachable: staging beside it says why


def _put(handle: BinaryIO, content: Content) -> None:
    if isinstance(content, bytes):
        handle.write(content)
    else:
        content(handle)


def _stage(target: Path, real: Path, content: Content) -> str:
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{real.name}.", suffix=".tmp", dir=real.parent)
    except OSError as exc:
        raise _cannot_write(target, exc) from None
    try:
        with os.fdopen(fd, "wb") as handle:
            _put(handle, content)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # what a plain open() would have given the file
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise _cannot_write(target, exc) from None
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return tmp


def _write_in_place(target: Path, real: Path, content: Content) -> None:
    try:
        fd = os.open(real, os.O_WRONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        with os.fdopen(fd, "wb") as handle:
            _put(handle, content)
    except OSError as exc:
        raise _cannot_write(target, exc) from None


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


class WriteError(OutputError):
    """A target of :func:`write_files` could not be written; *reason* is the system's word
    for why (a caller that words its own line, like a dataset's, uses it)."""

    def __init__(self, target: Path, reason: str) -> None:
        super().__init__(f"cannot write to {target}: {reason}")
        self.reason = reason


def _cannot_write(target: Path, exc: OSError) -> WriteError:
    return WriteError(target, str(exc.strerror or exc))


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
