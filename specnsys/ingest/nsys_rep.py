"""Turn an ``.nsys-rep`` (or older ``.qdrep``) report into an SQLite export with ``nsys export``.

With a cache, the export goes into its ``exports`` folder, keyed like the model cache on the
report's identity (path, size, mtime, and the digest of its device, inode, ctime and ends: see
:func:`~specnsys.ingest.input_file.file_identity`), so the report itself is never touched,
a second open reuses the export and a rewritten report (even one of the same size and mtime) is
exported afresh. Without one (``--no-cache``, or a cache folder that cannot be used), it goes
into a private temporary folder that the trace removes when it is closed; one left by a killed
process is swept by a later run (see :func:`specnsys.ingest.cache.sweep_stale`).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

from specnsys.errors import BadInputError
from specnsys.ingest.input_file import file_identity, require_unchanged, stat_input

REPORT_SUFFIXES = (".nsys-rep", ".qdrep")
EXPORT_TIMEOUT_S = 1800
#: Private export folders: ``specnsys-export-<pid>-...`` in the temporary folder.
EXPORT_PREFIX = "specnsys-export-"


def is_report(path: Path) -> bool:
    return path.suffix.lower() in REPORT_SUFFIXES


def find_nsys() -> str | None:
    """The nsys binary: ``$SPECNSYS_NSYS``, else ``nsys`` on PATH."""
    explicit = os.environ.get("SPECNSYS_NSYS")
    if explicit:
        return explicit if Path(explicit).is_file() else None
    return shutil.which("nsys")


def export_report_if_needed(path: Path, cache_root: Path | None) -> tuple[Path, Path | None]:
    """``(SQLite export to read, private folder to remove when done with it, or None)``.

    *path* itself for SQLite exports; for reports, their export: kept under *cache_root*
    when one is given and can be written, else in a private temporary folder (returned, for
    the caller to remove)."""
    if not is_report(path):
        return path, None
    st = stat_input(path)
    if not stat.S_ISREG(st.st_mode):
        kind = "is a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
        raise BadInputError(f"{path}: {kind}")
    nsys = find_nsys()
    if nsys is None:
        raise BadInputError(
            f"{path}: opening an {path.suffix} report needs nsys on PATH (not found); "
            "export it with 'nsys export --type sqlite' and open the .sqlite file instead"
        )
    identity = file_identity(path)
    shared = _shared_folder(cache_root)
    if shared is not None:
        digest = hashlib.sha256(f"{path.resolve()}|{identity}".encode()).hexdigest()[:20]
        target = shared / f"{path.stem}-{digest}.sqlite"
        if target.is_file():
            return target, None
        _export_unchanged(nsys, path, target, identity)
        return target, None
    private = Path(tempfile.mkdtemp(prefix=f"{EXPORT_PREFIX}{os.getpid()}-"))
    try:
        target = private / f"{path.stem}.sqlite"
        _export_unchanged(nsys, path, target, identity)
    except BaseException:
        shutil.rmtree(private, ignore_errors=True)
        raise
    return target, private


def _shared_folder(cache_root: Path | None) -> Path | None:
    """The cache's folder of exports (created private), or None when there is none to use."""
    if cache_root is None:
        return None
    folder = cache_root / "exports"
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
    except OSError:
        return None
    return folder


def _export_unchanged(nsys: str, report: Path, target: Path, identity: tuple[int, int, str]) -> None:
    """Export *report* into *target*; refuse (and drop the export) when the report changed
    while nsys read it."""
    export_report_to(nsys, report, target)
    try:
        require_unchanged(report, identity)
    except BadInputError:
        target.unlink(missing_ok=True)
        raise


def export_report_to(nsys: str, report: Path, target: Path) -> None:
    """``nsys export --type sqlite`` of *report* into *target*, written under a temporary name
    and renamed, so that a failed or concurrent export never leaves a half-written file."""
    partial = target.with_name(f".{target.name}.{os.getpid()}.partial.sqlite")
    cmd = [nsys, "export", "--type", "sqlite", "--force-overwrite", "true",
           "--output", str(partial), str(report)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=EXPORT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        partial.unlink(missing_ok=True)
        raise BadInputError(
            f"{report}: nsys export did not finish in {EXPORT_TIMEOUT_S} s"
        ) from None
    if done.returncode != 0 or not partial.is_file():
        partial.unlink(missing_ok=True)
        lines = (done.stderr or done.stdout or "").strip().splitlines()
        detail = lines[-1] if lines else f"exit status {done.returncode}"
        raise BadInputError(f"{report}: nsys export failed: {detail}")
    os.replace(partial, target)
