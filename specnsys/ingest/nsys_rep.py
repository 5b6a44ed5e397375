"""Turn an ``.nsys-rep`` (or older ``.qdrep``) report into an SQLite export with ``nsys export``.

The export goes into the cache folder, keyed on the report's path, size and mtime, so the report
itself is never touched and a second open reuses the export.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from specnsys.errors import BadInputError

REPORT_SUFFIXES = (".nsys-rep", ".qdrep")
EXPORT_TIMEOUT_S = 1800


def is_report(path: Path) -> bool:
    return path.suffix.lower() in REPORT_SUFFIXES


def find_nsys() -> str | None:
    """The nsys binary: ``$SPECNSYS_NSYS``, else ``nsys`` on PATH."""
    explicit = os.environ.get("SPECNSYS_NSYS")
    if explicit:
        return explicit if Path(explicit).is_file() else None
    return shutil.which("nsys")


def export_report_if_needed(path: Path) -> Path:
    """*path* itself for SQLite exports; for reports, the path of a cached SQLite export."""
    if not is_report(path):
        return path
    if not path.is_file():
        kind = "is a directory" if path.is_dir() else "no such file"
        raise BadInputError(f"{path}: {kind}")
    nsys = find_nsys()
    if nsys is None:
        raise BadInputError(
            f"{path}: opening an {path.suffix} report needs nsys on PATH (not found); "
            "export it with 'nsys export --type sqlite' and open the .sqlite file instead"
        )
    from specnsys.ingest.cache import cache_root

    st = path.stat()
    digest = hashlib.sha256(
        f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}".encode()
    ).hexdigest()[:20]
    folder = cache_root() / "exports"
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        folder = Path(tempfile.mkdtemp(prefix="specnsys-export-"))
    target = folder / f"{path.stem}-{digest}.sqlite"
    if target.is_file():
        return target
    export_report_to(nsys, path, target)
    return target


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
