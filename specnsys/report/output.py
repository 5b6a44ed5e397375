"""Writing result files so that a failed write changes nothing.

Every file of a command is first written whole to a temporary file beside its target, then all
are renamed into place: a full disk or a read-only folder fails before any target changes, and
an earlier result is replaced only by a complete new one. A target that exists and is not a
regular file (``/dev/null``, a device, a FIFO) is written in place, since renaming over it
would replace the special file itself.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Mapping
from pathlib import Path

from specnsys.errors import OutputError


def write_files(contents: Mapping[Path, bytes]) -> None:
    """Write each target's bytes, all or none; a one-line :class:`OutputError` names the first
    target that could not be written."""
    staged: list[tuple[str, Path]] = []
    try:
        for target, data in contents.items():
            real = Path(os.path.realpath(target))  # through a symlink to the file it names
            if _is_special(real):
                _write_in_place(target, real, data)
            else:
                staged.append((_stage(target, real, data), real))
        for tmp, real in staged:
            os.replace(tmp, real)
    finally:
        for tmp, _ in staged:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)


def _is_special(path: Path) -> bool:
    try:
        return not stat.S_ISREG(os.stat(path).st_mode)
    except FileNotFoundError:
        return False
    except OSError:
        return False  # then staging beside it fails with the reason


def _stage(target: Path, real: Path, data: bytes) -> str:
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{real.name}.", suffix=".tmp", dir=real.parent)
    except OSError as exc:
        raise _cannot_write(target, exc) from None
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # what a plain open() would have given the file
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise _cannot_write(target, exc) from None
    return tmp


def _write_in_place(target: Path, real: Path, data: bytes) -> None:
    try:
        fd = os.open(real, os.O_WRONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
    except OSError as exc:
        raise _cannot_write(target, exc) from None


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _cannot_write(target: Path, exc: OSError) -> OutputError:
    return OutputError(f"cannot write {target}: {exc.strerror or exc}")
