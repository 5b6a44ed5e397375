"""The input file itself, before and while SQLite reads it: is it a whole SQLite file, and is it
still the same file.

:func:`validate_sqlite_file` checks the header before SQLite sees the file, so that a truncated
copy, a folder or a file of another kind gets a one-line error instead of a malformed-image
error half-way through a read. :func:`file_identity` and :func:`require_unchanged` notice an
export replaced or rewritten while it is read (the reads open it by name, once per slice).
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from specnsys.errors import BadInputError

SQLITE_MAGIC = b"SQLite format 3\x00"
SQLITE_HEADER_SIZE = 100


def validate_sqlite_file(path: Path) -> None:
    """Fail with a one-line :class:`BadInputError` unless *path* looks like a whole SQLite file.

    Checks the 100-byte header: the magic string, the page size and the database size it
    records, so a copy cut short is reported as truncated instead of as a malformed-image error
    half-way through a read.
    """
    st = stat_input(path)
    if stat.S_ISDIR(st.st_mode):
        raise BadInputError(f"{path}: is a directory, expected an nsys .sqlite export")
    if not stat.S_ISREG(st.st_mode):
        raise BadInputError(f"{path}: not a regular file")
    size = st.st_size
    try:
        with path.open("rb") as handle:
            header = handle.read(SQLITE_HEADER_SIZE)
    except OSError as exc:
        raise BadInputError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if size == 0:
        raise BadInputError(f"{path}: empty file (0 bytes), not an nsys export")
    if not header.startswith(SQLITE_MAGIC):
        raise BadInputError(
            f"{path}: not an SQLite database (expected an nsys .sqlite export or .nsys-rep report)"
        )
    if len(header) < SQLITE_HEADER_SIZE:
        raise BadInputError(f"{path}: truncated SQLite file ({size} bytes, header incomplete)")
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    page_count = int.from_bytes(header[28:32], "big")
    change_counter = header[24:28]
    version_valid_for = header[92:96]
    # The in-header size is only authoritative when the two counters agree (SQLite docs §1.3.7).
    if page_count and change_counter == version_valid_for and size < page_size * page_count:
        raise BadInputError(
            f"{path}: truncated SQLite file ({size} bytes, header says "
            f"{page_size * page_count} bytes)"
        )
    # immutable=1 reads ignore a write-ahead log: committed rows still in it would be missed.
    wal = path.resolve().with_name(path.resolve().name + "-wal")
    if header[18] == 2 and wal.is_file() and wal.stat().st_size > 0:
        raise BadInputError(
            f"{path}: has committed changes not yet in the file (in {wal.name}); close the "
            "program writing it, or run sqlite3 on it with 'PRAGMA wal_checkpoint', and retry"
        )


def stat_input(path: Path) -> os.stat_result:
    """``os.stat`` of an input path, every failure a one-line :class:`BadInputError`.

    A folder on the path without search permission makes ``stat`` itself fail (EACCES),
    before any open: it is said so, not left to escape as an internal error.
    """
    try:
        return os.stat(path)
    except FileNotFoundError:
        if os.path.islink(path):
            raise BadInputError(f"{path}: broken symbolic link") from None
        raise BadInputError(f"{path}: no such file") from None
    except PermissionError:
        raise BadInputError(
            f"{path}: permission denied (a folder on its path cannot be searched)"
        ) from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise BadInputError(f"{path}: symbolic link loop") from None
        raise BadInputError(f"{path}: cannot read: {exc.strerror or exc}") from None


FINGERPRINT_BYTES = 1 << 16


def file_identity(path: Path) -> tuple[int, int, str]:
    """(size, mtime in ns, digest of device, inode, ctime and the first and last 64 KiB) of
    *path*.

    Size and mtime catch ordinary rewrites; the digest (which covers SQLite's header, with its
    change counter, and the last pages written) catches a rewrite that kept both, at the cost
    of two small reads instead of hashing a multi-GB file. A failure to stat or read is a
    one-line :class:`BadInputError` (the file vanished or its folder was locked meanwhile).
    """
    import hashlib

    st = stat_input(path)
    if not stat.S_ISREG(st.st_mode):  # a FIFO's read would block; a device's never ends
        raise BadInputError(f"{path}: not a regular file")
    digest = hashlib.blake2b(digest_size=16)
    # ctime cannot be set back from user space (os.utime sets only atime/mtime), and any write
    # to the file moves it: a rewrite that kept size, mtime and both ends is still caught.
    digest.update(f"{st.st_dev}:{st.st_ino}:{st.st_ctime_ns}:".encode())
    try:
        with path.open("rb") as handle:
            digest.update(handle.read(FINGERPRINT_BYTES))
            if st.st_size > FINGERPRINT_BYTES:
                handle.seek(max(FINGERPRINT_BYTES, st.st_size - FINGERPRINT_BYTES))
                digest.update(handle.read(FINGERPRINT_BYTES))
    except OSError as exc:
        raise BadInputError(f"{path}: cannot read: {exc.strerror or exc}") from None
    return st.st_size, st.st_mtime_ns, digest.hexdigest()


def require_unchanged(path: Path, identity: tuple[int, int, str]) -> None:
    """Raise a one-line :class:`BadInputError` unless *path* still has *identity* (taken by
    :func:`file_identity` before the first read).

    The reads open the file by name, one connection per slice: an export replaced by rename
    or rewritten in place while they run would give a model made of both files. The same
    identity after the last read (same inode on the same device, same ctime, which any write
    or rename moves, same ends) means every read saw the one file.
    """
    try:
        now = file_identity(path)
    except BadInputError:
        now = None
    if now != identity:
        raise BadInputError(f"{path} changed while it was read; run again")
