"""Columnar cache of ingested traces: one folder of Parquet files per export, outside the export.

A cache entry is keyed on the export's resolved path, size, mtime and schema version plus the
model version, so a changed export (same path, new content) never reuses a stale entry. Entries
are written to a private temporary folder (``.tmp-<pid>-*``), synced to disk and renamed into
place, so a reader never sees half an entry and two processes ingesting the same trace at once
both succeed (the second rename loses and its copy is dropped). The manifest records each
file's size and a digest of its ends (the Parquet footer holds the schema and every row group's
offsets): an entry damaged since (truncated, emptied, replaced, manifest gone) is not read but
built again and replaced. Damage in the middle of a file shows only when a query reads it:
the command is then run once more on a rebuilt entry (:func:`unreadable_file`,
:func:`drop_entry`, :func:`specnsys.ingest.trace.rebuilt_once`). Temporary folders whose
process is gone (killed) are swept.

The cache root is created private (0700) and used only while it is owned by the user and not
writable by group or others (a shared root would let another user plant an entry); otherwise,
as when it cannot be written, the trace is still analyzed, from memory, with a warning.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import shutil
import stat
import tempfile
import time
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from specnsys.errors import SpecnsysWarning
from specnsys.model import MODEL_VERSION

MANIFEST = "manifest.json"


def cache_root() -> Path:
    """``$SPECNSYS_CACHE_DIR``, else ``$XDG_CACHE_HOME/specnsys``, else ``~/.cache/specnsys``."""
    explicit = os.environ.get("SPECNSYS_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "specnsys"


def cache_disabled() -> bool:
    return os.environ.get("SPECNSYS_NO_CACHE", "") not in ("", "0")


@dataclass(frozen=True)
class CacheKey:
    """Identity of one export's content as far as the cache is concerned."""

    path: str
    size: int
    mtime_ns: int
    fingerprint: str
    schema_version: str | None
    product_version: str | None

    def digest(self) -> str:
        payload = json.dumps({**self.__dict__, "model": MODEL_VERSION}, sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()[:20]

    def folder(self, root: Path) -> Path:
        stem = "".join(c if c.isalnum() or c in "-_." else "_" for c in Path(self.path).stem)
        return root / f"{stem[:60]}-{self.digest()}"


#: Bytes of each end of a cached file that its digest covers: the Parquet magic at the start,
#: the footer (schema, row-group offsets and statistics) at the end. Hashing whole files would
#: cost the warm path time in proportion to the cache's size (docs/performance.md#cache-checks).
CHECK_HEAD_BYTES = 4096
CHECK_TAIL_BYTES = 1 << 16

#: A temporary folder or file with no process id in its name is swept after this long.
STALE_AFTER_S = 3600


def _untrusted(st: os.stat_result) -> str | None:
    """Why a cache folder with this status must not be trusted, or None."""
    if st.st_uid != os.geteuid():
        return f"owned by user id {st.st_uid}, not by this user"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"writable by other users (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def usable_root() -> Path | None:
    """The cache root, created private (0700) when absent; None, with a warning, when it
    cannot be created or is not safe to read entries from (see :func:`_untrusted`)."""
    root = cache_root()
    try:
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = os.stat(root)
    except OSError as exc:
        _warn_unusable(root, exc)
        return None
    reason = _untrusted(st)
    if reason is not None:
        _warn_unusable(root, reason)
        return None
    return root


def _file_check(path: Path) -> dict[str, int | str]:
    """Size and digest of both ends of one cached file (see :data:`CHECK_TAIL_BYTES`)."""
    digest = hashlib.blake2b(digest_size=16)
    with path.open("rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        digest.update(handle.read(CHECK_HEAD_BYTES))
        handle.seek(max(0, size - CHECK_TAIL_BYTES))
        digest.update(handle.read(CHECK_TAIL_BYTES))
    return {"size": size, "ends": digest.hexdigest()}


def load_manifest(folder: Path, key: CacheKey) -> dict[str, object] | None:
    """The manifest of a complete, undamaged entry for *key*, or None when there is none to
    reuse (absent, stale, damaged, or not owned by this user)."""
    try:
        if _untrusted(os.stat(folder)) is not None:
            return None
        manifest = json.loads((folder / MANIFEST).read_text())
        if not isinstance(manifest, dict):
            return None
        if manifest.get("key") != key.__dict__ or manifest.get("model_version") != MODEL_VERSION:
            return None
        files = manifest.get("files") or {}
        tables = manifest.get("tables") or []
        if set(files) != {f"{t}.parquet" for t in tables}:
            return None
        for name, check in files.items():
            if _file_check(folder / name) != check:
                return None
    except (OSError, ValueError, TypeError, AttributeError):
        return None
    return manifest


def _warn_unusable(root: Path, exc: BaseException | str) -> None:
    if isinstance(exc, str):
        reason = exc
    else:
        reason = getattr(exc, "strerror", None) or str(exc).splitlines()[0]
    warnings.warn(
        f"cache folder {root} is not usable ({reason}); working without a cache",
        SpecnsysWarning,
        stacklevel=4,
    )


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: it exists, as another user's
        return True
    return True


def _stale(entry: os.DirEntry[str], prefix: str, now: float) -> bool:
    """Whether *entry* (named ``<prefix><pid>-...``) was left by a process that is gone; a
    name without a pid (older versions) counts as stale after :data:`STALE_AFTER_S`."""
    pid_text = entry.name[len(prefix):].split("-", 1)[0]
    try:
        st = entry.stat(follow_symlinks=False)
    except OSError:
        return False
    if st.st_uid != os.geteuid():
        return False  # another user's: not ours to judge
    if pid_text.isdigit():
        pid = int(pid_text)
        return pid != os.getpid() and not _pid_alive(pid)
    return now - st.st_mtime > STALE_AFTER_S


def sweep_stale(folder: Path, prefixes: tuple[str, ...]) -> None:
    """Remove the folders and files in *folder* named with one of *prefixes* whose creating
    process is gone: what a SIGKILL (or any hard death) left half-written. Best effort."""
    now = time.time()
    try:
        with os.scandir(folder) as entries:
            found = [e for e in entries for p in prefixes if e.name.startswith(p) and _stale(e, p, now)]
    except OSError:
        return
    for entry in found:
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                os.unlink(entry.path)


def tmp_prefix(kind: str) -> str:
    """The prefix of a private temporary name of this process: ``<kind><pid>-``, so that
    :func:`sweep_stale` can tell when its process is gone."""
    return f"{kind}{os.getpid()}-"


def begin(folder: Path) -> Path | None:
    """A private temporary folder beside *folder* to build an entry in, after sweeping the
    ones killed processes left; None (with a warning) when the cache root cannot be written."""
    sweep_stale(folder.parent, (".tmp-",))
    try:
        return Path(tempfile.mkdtemp(prefix=tmp_prefix(".tmp-"), dir=folder.parent))
    except OSError as exc:
        _warn_unusable(folder.parent, exc)
        return None


def abandon(tmp: Path, exc: BaseException) -> None:
    """Drop a half-built entry after a write failure (disk full, permissions), with a warning."""
    shutil.rmtree(tmp, ignore_errors=True)
    _warn_unusable(tmp.parent, exc)


def _fsync(path: Path, directory: bool = False) -> None:
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if directory else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def commit(
    tmp: Path, folder: Path, key: CacheKey, tables: list[str], summary: Mapping[str, object]
) -> Path:
    """Write the manifest, sync the entry to disk and rename it into place; returns the
    folder to read from.

    The files and the folder are synced before the rename, so a crash of the machine never
    leaves an entry whose manifest names data that is not on disk. When another process
    renamed its entry first, that entry is kept and this one dropped; a damaged entry in the
    way is replaced.
    """
    names = [f"{t}.parquet" for t in tables]
    manifest = {
        "key": key.__dict__,
        "model_version": MODEL_VERSION,
        "tables": tables,
        "files": {name: _file_check(tmp / name) for name in names},
        "summary": summary,
    }
    (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1, default=str))
    for name in [*names, MANIFEST]:
        _fsync(tmp / name)
    _fsync(tmp, directory=True)
    try:
        os.rename(tmp, folder)
    except OSError as exc:
        if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
            raise
        _replace_unless_valid(tmp, folder, key)
    _fsync(folder.parent, directory=True)
    return folder


def _replace_unless_valid(tmp: Path, folder: Path, key: CacheKey) -> None:
    """*folder* is taken: keep it when it is a valid entry (another process won the race),
    else (damaged) move it aside and rename *tmp* into its place.

    Under an exclusive lock on the cache root, so that two processes repairing one entry
    never move aside the entry the other just put in place (and a reader is using)."""
    with _root_lock(folder.parent):
        if load_manifest(folder, key) is not None:
            shutil.rmtree(tmp, ignore_errors=True)
            return
        aside = Path(tempfile.mkdtemp(prefix=tmp_prefix(".tmp-"), dir=folder.parent))
        with contextlib.suppress(FileNotFoundError):
            os.rename(folder, aside / "damaged")
        os.rename(tmp, folder)
    shutil.rmtree(aside, ignore_errors=True)


@contextlib.contextmanager
def _root_lock(root: Path) -> Iterator[None]:
    """An exclusive lock on the folder *root* itself (flock on its descriptor: no lock file)."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


#: The entries this process reused (folder -> the file they model) since the last
#: :func:`specnsys.ingest.trace.rebuilt_once` began: where a read failure may come from.
ENTRIES_READ: dict[Path, Path] = {}


def unreadable_file(folder: Path) -> tuple[str, str] | None:
    """``(file, why)`` for the first table file of the entry in *folder* that does not read
    to its end, or None when every one does.

    The manifest's check covers each file's size and ends (the footer), not its middle,
    where a damaged page shows only when a query decodes it; this reads every page (the
    data, batch by batch), so it is run only after a read failed (see
    :func:`specnsys.ingest.trace.rebuilt_once`), never on the warm path."""
    import pyarrow.parquet as pq

    try:
        manifest = json.loads((folder / MANIFEST).read_text())
        names = sorted(manifest.get("files") or {})
    except (OSError, ValueError, AttributeError) as exc:
        return MANIFEST, str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    for name in names:
        try:
            with pq.ParquetFile(folder / name) as parquet:
                for _ in parquet.iter_batches(batch_size=1 << 16):
                    pass
        except Exception as exc:  # noqa: BLE001 - whatever Arrow says, the file does not read
            return name, str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return None


def drop_entry(folder: Path) -> None:
    """Remove the entry in *folder*, moved aside first under the root's lock (as a repair
    does, see :func:`_replace_unless_valid`), so that no reader sees half of it and a
    process reading it keeps its open files."""
    aside: Path | None = None
    with contextlib.suppress(OSError), _root_lock(folder.parent):  # best effort: a rebuild
        aside = Path(tempfile.mkdtemp(prefix=tmp_prefix(".tmp-"), dir=folder.parent))
        os.rename(folder, aside / "damaged")
    if aside is not None:
        shutil.rmtree(aside, ignore_errors=True)


DERIVED = "derived"


def _derived_file(folder: Path, kind: str, key: Mapping[str, object]) -> Path:
    payload = json.dumps({"kind": kind, "model": MODEL_VERSION, **key}, sort_keys=True, default=str)
    return folder / DERIVED / f"{kind}-{hashlib.sha256(payload.encode()).hexdigest()[:24]}.json"


def read_derived(
    folder: Path, kind: str, key: Mapping[str, object]
) -> dict[str, object] | None:
    """A result derived from the entry in *folder* (see :func:`write_derived`), or None."""
    try:
        doc = json.loads(_derived_file(folder, kind, key).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict):
        return None
    value = doc.get("value")
    # the key is stored too: a hash collision can never hand back another result
    same_key = doc.get("key") == json.loads(json.dumps(key, default=str))
    return value if same_key and isinstance(value, dict) else None


def write_derived(
    folder: Path, kind: str, key: Mapping[str, object], value: Mapping[str, object]
) -> None:
    """Store a result computed from the entry in *folder* (an analysis of the same export), so
    a later run with the same *key* reads it instead of recomputing it. The file lives inside
    the entry, so it goes stale and is dropped with it. Best effort: a cache that cannot be
    written only costs the recomputation next time."""
    target = _derived_file(folder, kind, key)
    # dumps then one write: json.dump encodes chunk by chunk, several times slower on an
    # analysis with a row per request (docs/performance.md#cache-checks)
    text = json.dumps({"key": key, "value": value}, default=str)
    tmp: str | None = None
    try:
        target.parent.mkdir(exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=target.parent)
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.replace(tmp, target)  # atomic: readers see the old file or the whole new one
    except OSError:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
