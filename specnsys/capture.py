"""Drive ``nsys profile`` to a finished SQLite export, whatever state nsys leaves behind.

nsys can stop at three points: a ``.qdstrm`` stream (its importer missing, as in Debian's split
package), an ``.nsys-rep`` report (export not requested or failed), or the ``.sqlite`` export.
This module finishes whichever step is missing, bounds every step with a timeout, and, when a
capture fails, ends the nsys agent processes that this capture started (seen here: an agent left
behind by a hung capture burned a core for half an hour).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from specnsys.errors import SpecnsysError, UsageError
from specnsys.ingest.nsys_rep import export_report_to, find_nsys


class CaptureError(SpecnsysError):
    """nsys could not produce a trace of the command (exit status 1)."""

    exit_code = 1


# CPU sampling and context-switch tracing hang nsys 2022.4 at shutdown on these machines.
SAFE_FLAGS = ("--sample=none", "--cpuctxsw=none")


@dataclass(frozen=True)
class CaptureResult:
    sqlite: Path
    report: Path | None
    command: tuple[str, ...]
    seconds: float


def default_trace_kinds() -> str:
    """``cuda,nvtx,osrt`` where an NVIDIA device node exists, else ``nvtx,osrt``."""
    return "cuda,nvtx,osrt" if Path("/dev/nvidia0").exists() else "nvtx,osrt"


def _nsys_processes() -> set[int]:
    """pids of running processes whose command line mentions nsys (agents included)."""
    pids: set[int] = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if b"nsys" in cmdline.split(b"\0", 1)[0] or b"--start-agent" in cmdline:
            pids.add(int(entry.name))
    return pids


def _end_processes(pids: set[int]) -> None:
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def profile(
    command: Sequence[str],
    output: str | Path,
    *,
    trace: str | None = None,
    timeout_s: float = 600,
    extra_args: Sequence[str] = (),
    env: dict[str, str] | None = None,
) -> CaptureResult:
    """Run *command* under ``nsys profile`` and return the path of its SQLite export.

    *output* is the report's base name (``.nsys-rep``/``.sqlite`` are appended; a given
    suffix is dropped). Raises :class:`CaptureError` when no export can be produced.
    """
    if not command:
        raise UsageError("no command to profile (give it after --)")
    nsys = find_nsys()
    if nsys is None:
        raise CaptureError("nsys not found on PATH (install Nsight Systems or set SPECNSYS_NSYS)")
    base = Path(output)
    for suffix in (".sqlite", ".nsys-rep", ".qdrep", ".qdstrm"):
        if base.name.endswith(suffix):
            base = base.with_name(base.name[: -len(suffix)])
    base.parent.mkdir(parents=True, exist_ok=True)
    for suffix in (".sqlite", ".nsys-rep", ".qdstrm"):
        base.with_name(base.name + suffix).unlink(missing_ok=True)
    cmd = [
        nsys, "profile", "-t", trace or default_trace_kinds(), *SAFE_FLAGS,
        "--force-overwrite=true", "--export=sqlite", "-o", str(base), *extra_args,
        *command,
    ]
    before = _nsys_processes()
    started = time.perf_counter()
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True, env=env,
    )
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        _end_processes(_nsys_processes() - before)
        raise CaptureError(f"nsys profile did not finish in {timeout_s:g} s; capture abandoned") from None
    sqlite = base.with_name(base.name + ".sqlite")
    report = base.with_name(base.name + ".nsys-rep")
    stream = base.with_name(base.name + ".qdstrm")
    try:
        if not sqlite.is_file() and not report.is_file() and stream.is_file():
            _import_stream(nsys, stream, report)
        if not sqlite.is_file() and report.is_file():
            export_report_to(nsys, report, sqlite)
    except SpecnsysError:
        _end_processes(_nsys_processes() - before)
        raise
    if not sqlite.is_file():
        _end_processes(_nsys_processes() - before)
        tail = [line for line in (out or "").strip().splitlines() if line.strip()]
        detail = tail[-1] if tail else f"exit status {proc.returncode}"
        raise CaptureError(f"nsys profile produced no report: {detail}")
    if proc.returncode not in (0, None):
        raise CaptureError(
            f"the profiled command failed (exit status {proc.returncode}); trace kept at {sqlite}"
        )
    return CaptureResult(
        sqlite, report if report.is_file() else None, tuple(cmd), time.perf_counter() - started
    )


def _kill_group(proc: subprocess.Popen) -> None:
    with contextlib.suppress(OSError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)


def _import_stream(nsys: str, stream: Path, report: Path) -> None:
    """Turn a ``.qdstrm`` into ``.nsys-rep`` with the host importer nsys could not find."""
    nsys_real = Path(nsys).resolve()
    candidates = [
        nsys_real.parent.parent / "host-linux-x64" / "QdstrmImporter",
        Path("/usr/lib/nsight-systems/host-linux-x64/QdstrmImporter"),
    ]
    importer = next((c for c in candidates if c.is_file()), None)
    if importer is None:
        raise CaptureError(f"nsys left {stream} and no QdstrmImporter was found to import it")
    done = subprocess.run(
        [str(importer), "-i", str(stream)], capture_output=True, text=True, timeout=900
    )
    if done.returncode != 0 or not report.is_file():
        raise CaptureError(f"importing {stream} failed (exit status {done.returncode})")
