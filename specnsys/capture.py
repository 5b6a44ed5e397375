"""Drive ``nsys profile`` to a finished SQLite export, whatever state nsys leaves behind.

nsys can stop at three points: a ``.qdstrm`` stream (its importer missing, as in Debian's split
package), an ``.nsys-rep`` report (export not requested or failed), or the ``.sqlite`` export.
This module finishes whichever step is missing and bounds every step with a timeout.

A capture owns exactly what it started, and nothing else. nsys 2022.4 daemonizes its agent
(parent 1, a session of its own) and its launcher starts the profiled program in yet another
session, so neither the process group nor the session of the nsys we start holds them; but every
one of them inherits the environment, so the capture marks it (``SPECNSYS_CAPTURE_ID``) and
finds its processes by that mark, their descendants and nsys's session, never by name. When a
capture fails, times out or is interrupted, those processes are ended, and the files nsys keeps
outside its temp folder (which is private to the capture) are removed. Output is written in a
staging folder beside the output and moved into place only on success, so that a failed capture
never destroys an earlier trace.

The profiled program's stdout and stderr (and nsys's own lines, which share them) pass through to
ours as with ``nsys profile``, and are also kept in ``OUT.log`` beside the export: a failing
program's traceback is the first thing its user needs. nsys writes them into files, not pipes,
because its daemonized agent may hold inherited descriptors open long after nsys has exited;
a relay thread copies what the files gain. Intermediate files (``.qdstrm``, ``.nsys-rep``) go
once the export exists, unless the report is asked for.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from specnsys.allocator import without_own_options
from specnsys.control_log import CONTROL_ENV, control_beside, read_run, summarize_runs
from specnsys.errors import SpecnsysError, UsageError
from specnsys.held_signals import signals_held
from specnsys.ingest.cache import sweep_stale, tmp_prefix
from specnsys.ingest.nsys_rep import export_report_to, find_nsys
from specnsys.small_files import write_files

if TYPE_CHECKING:
    from specnsys.results import JSONValue


class CaptureError(SpecnsysError):
    """nsys could not produce a trace of the command (exit status 1)."""

    exit_code = 1


# CPU sampling and context-switch tracing hang nsys 2022.4 at shutdown on these machines.
SAFE_FLAGS = ("--sample=none", "--cpuctxsw=none")
# Inherited by every process a capture starts; holds the ids of the captures it belongs to
# (colon-separated, so that a capture inside a profiled program still finds its own).
MARKER = "SPECNSYS_CAPTURE_ID"
_WATCH_S = 1.0  # how often a running capture notes its processes and nsys's files
_END_S = 10.0  # how long ending a capture's processes may take before giving up
_SHM = Path("/dev/shm")
# nsys 2022.4 writes these into /tmp whatever TMPDIR says; the profiled program's environment
# names them (QUADD_INJECTION_CONFIG, QUADD_OS_RUNTIME_CONFIG).
_INJECTION_CONFIG = re.compile(rb"/tmp/injection_config_[0-9a-f]+")
#: The pid of nsys's agent, as the profiled program's environment names it: its segment in
#: /dev/shm is named after it, and the agent may have exited before the capture saw it.
_AGENT_PID = re.compile(rb"(?:^|\0)QUADD_AGENT_PID=(\d+)")
_REPORT_SUFFIXES = (".sqlite", ".nsys-rep", ".qdstrm")
_TMPDIR_KIND = "specnsys-nsys-"  # + pid: the private TMPDIR of a capture
_RELAY_S = 0.05  # how often the program's output files are copied to our stdout/stderr
_FORWARD_S = 5.0  # how long the relay waits for nsys's agent to forward the program's output
_LOG_SUFFIX = ".log"


@dataclass(frozen=True)
class CaptureResult:
    sqlite: Path
    report: Path | None  # the .nsys-rep, kept only when asked for (keep_report)
    log: Path  # the profiled program's stdout and stderr (with nsys's own lines)
    command: tuple[str, ...]
    seconds: float
    control: Path | None = None  # OUT.control.json: the unprofiled runs (control > 0)


#: The most unprofiled control runs one capture makes.
CONTROL_LIMIT = 100


def control_runs(
    command: Sequence[str], trace: Path, env: Mapping[str, str], runs: int, timeout_s: float
) -> Path:
    """Run *command* *runs* times without nsys, each with :data:`~specnsys.control_log.
    CONTROL_ENV` naming a private file, and fold what the annotation layer noted into
    ``OUT.control.json`` beside the *trace* ``OUT.sqlite`` (written only when every run ended
    well); CaptureError otherwise (the trace is kept)."""
    done: list[dict[str, JSONValue]] = []
    with tempfile.TemporaryDirectory(prefix="specnsys-control-") as folder:
        for i in range(runs):
            note = Path(folder) / f"run-{i}.json"
            try:
                proc = subprocess.run(
                    list(command), env={**env, CONTROL_ENV: str(note)}, timeout=timeout_s,
                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                )  # fmt: skip
            except subprocess.TimeoutExpired:
                raise CaptureError(
                    f"control run {i + 1} of {runs} ran past {timeout_s:g} s; the trace is kept"
                ) from None
            if proc.returncode != 0:
                tail = proc.stderr.decode(errors="replace").strip().splitlines()[-1:] or [""]
                raise CaptureError(
                    f"control run {i + 1} of {runs} failed (exit status {proc.returncode}: "
                    f"{tail[0][:200]}); the trace is kept"
                )
            doc = read_run(note)
            if doc is None:
                raise CaptureError(
                    f"control run {i + 1} of {runs} noted no request (the program has no "
                    "specnsys request ranges, or --annotate none); the trace is kept"
                )
            done.append(doc)
    out = control_beside(trace)
    write_files({out: (json.dumps(summarize_runs(done, list(command)), indent=1) + "\n").encode()})
    return out


#: The switch each engine needs before it emits the NVTX scopes its rule pack maps, as its
#: source reads it (the packs' headers cite the files): vLLM's worker scopes
#: (vllm/v1/utils.py record_function_or_nullcontext), SGLang's scheduler stages
#: (python/sglang/srt/utils/nvtx_utils.py; the older name too), TensorRT-LLM's LLM-API ranges
#: (tensorrt_llm/_utils.py nvtx_range_debug; its executor ranges are always on).
ENGINE_NVTX_SWITCHES: dict[str, str] = {
    "VLLM_NVTX_SCOPES_FOR_PROFILING": "1",
    "SGLANG_ENABLE_NVTX_SCHEDULER": "1",
    "SGLANG_ENABLE_NVTX": "1",
    "TLLM_LLMAPI_ENABLE_NVTX": "1",
}
#: A command that runs one of these engines (a word of its command line) is told about them.
_ENGINE_WORDS = re.compile(r"(?i)(vllm|sglang|tensorrt_llm|trtllm|trt-llm)")


def engine_switches(
    env: Mapping[str, str], command: Sequence[str]
) -> tuple[dict[str, str], str | None]:
    """*env* with :data:`ENGINE_NVTX_SWITCHES` set where the user has not set them (their own
    value wins), and the one line that says so when *command* names an engine (else None:
    a program that is no engine ignores the variables)."""
    result = dict(env)
    added = [k for k in ENGINE_NVTX_SWITCHES if k not in result]
    result.update({k: ENGINE_NVTX_SWITCHES[k] for k in added})
    if not added or not any(_ENGINE_WORDS.search(word) for word in command):
        return result, None
    kept = [k for k in ENGINE_NVTX_SWITCHES if k not in added]
    own = f"; kept your {', '.join(kept)}" if kept else ""
    return result, (
        f"set {', '.join(f'{k}=1' for k in added)} for the capture (the engines' NVTX scopes "
        f"that the vllm/sglang/trtllm rule packs read){own}"
    )


def default_trace_kinds() -> str:
    """``cuda,nvtx,osrt`` where an NVIDIA device node exists, else ``nvtx,osrt``."""
    return "cuda,nvtx,osrt" if Path("/dev/nvidia0").exists() else "nvtx,osrt"


def profile(
    command: Sequence[str],
    output: str | Path,
    *,
    trace: str | None = None,
    timeout_s: float = 600,
    extra_args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    keep_report: bool = False,
    echo: bool = True,
) -> CaptureResult:
    """Run *command* under ``nsys profile`` and return the path of its SQLite export.

    *output* is the report's base name (``.nsys-rep``/``.sqlite`` are appended; a given
    suffix is dropped); files already there are replaced only when the capture succeeds.
    The program's output goes to ``<base>.log`` and, with *echo*, to our stdout and stderr; the
    ``.nsys-rep`` report is kept beside the export only with *keep_report*.
    Raises :class:`CaptureError` when no export can be produced, and when the profiled command
    fails (its trace is then kept at the base name if that is free, else at ``<base>.failed``).
    On a timeout or an interrupt (SIGINT, SIGTERM, SIGHUP: :class:`KeyboardInterrupt`), every
    process of the capture is ended and its temporary files are removed before raising.
    """
    if not command:
        raise UsageError("no command to profile (give it after --)")
    if not (isinstance(timeout_s, (int, float)) and math.isfinite(timeout_s) and timeout_s > 0):
        raise UsageError(f"the timeout must be a positive number of seconds, not {timeout_s!r}")
    nsys = find_nsys()
    if nsys is None:
        raise CaptureError("nsys not found on PATH (install Nsight Systems or set SPECNSYS_NSYS)")
    base = _base_name(Path(output))
    nsys_args = (nsys, trace or default_trace_kinds(), tuple(extra_args), tuple(command))
    started = time.perf_counter()
    env, engines = engine_switches(os.environ if env is None else env, command)
    if engines is not None and echo:
        print(f"specnsys: {engines}", file=sys.stderr, flush=True)
    capture = _Capture(base, env, echo)
    with _interrupts_on_termination():
        try:
            returncode = capture.run(_nsys_command(*nsys_args, capture.staged), timeout_s)
            capture.finish(nsys)
            kept = base if returncode == 0 or not _any_report(base) else _failed_name(base)
            sqlite, report, log = capture.publish(kept, keep_report)
        except BaseException:
            with signals_held():
                capture.abandon()
            raise
        finally:
            with signals_held():
                capture.close()
    if returncode != 0:
        raise CaptureError(
            f"the profiled command failed (exit status {returncode}); trace kept at {sqlite}"
        )
    return CaptureResult(
        sqlite, report, log, _nsys_command(*nsys_args, base), time.perf_counter() - started
    )


def _nsys_command(
    nsys: str, trace: str, extra_args: tuple[str, ...], command: tuple[str, ...], out: Path
) -> tuple[str, ...]:
    return (
        nsys, "profile", "-t", trace, *SAFE_FLAGS, "--force-overwrite=true", "--export=sqlite",
        "-o", str(out), *extra_args, *command,
    )


def _base_name(output: Path) -> Path:
    for suffix in (*_REPORT_SUFFIXES, ".qdrep"):
        if output.name.endswith(suffix):
            return output.with_name(output.name[: -len(suffix)])
    return output


def _with_suffix(base: Path, suffix: str) -> Path:
    return base.with_name(base.name + suffix)


def _any_report(base: Path) -> bool:
    return any(_with_suffix(base, s).exists() for s in (*_REPORT_SUFFIXES, _LOG_SUFFIX))


def _failed_name(base: Path) -> Path:
    """Where the trace of a failed program goes when an earlier trace holds the base name."""
    return _with_suffix(base, ".failed")


# --- the processes of a capture ----------------------------------------------------------------


@dataclass(frozen=True)
class _Proc:
    """A live process of this user, as /proc shows it."""

    pid: int
    ppid: int
    session: int
    start: int  # clock ticks after boot: with the pid, names one process across pid reuse
    environ: bytes


def _stat(pid: int) -> tuple[int, int, int] | None:
    """(ppid, session, start time) of a live process of this user; None when it is gone, a
    zombie, or another user's (which a capture never touches)."""
    try:
        if os.stat(f"/proc/{pid}").st_uid != os.getuid():
            return None
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    fields = stat[stat.rindex(b")") + 2 :].split()  # the name may hold spaces and parentheses
    if fields[0] in (b"Z", b"X"):
        return None
    return int(fields[1]), int(fields[3]), int(fields[19])


def _live_processes() -> list[_Proc]:
    procs = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        stat = _stat(pid)
        if stat is None:
            continue
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
        procs.append(_Proc(pid, *stat, environ))
    return procs


def _carries(environ: bytes, capture_id: str) -> bool:
    prefix = MARKER.encode() + b"="
    for item in environ.split(b"\0"):
        if item.startswith(prefix):
            return capture_id.encode() in item[len(prefix) :].split(b":")
    return False


def _members(procs: list[_Proc], capture_id: str, session: int | None) -> dict[int, _Proc]:
    """The processes of one capture: those carrying its mark, those in the session of its nsys
    (while that nsys is unreaped, so the session id cannot name anyone else), and their
    descendants (which catches a child that cleared its environment)."""
    children: dict[int, list[_Proc]] = defaultdict(list)
    for p in procs:
        children[p.ppid].append(p)
    found = {
        p.pid: p for p in procs if _carries(p.environ, capture_id) or p.session == session
    }
    todo = list(found.values())
    while todo:
        for child in children[todo.pop().pid]:
            if child.pid not in found:
                found[child.pid] = child
                todo.append(child)
    found.pop(os.getpid(), None)
    return found


def _kill(proc: _Proc) -> None:
    """SIGKILL *proc* if it is still the process that was seen, never one that reused its pid:
    the pid is pinned with a pidfd, then its start time checked."""
    try:
        pidfd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):  # already gone, or no pidfd (Linux < 5.3)
        pidfd = None
    try:
        now = _stat(proc.pid)
        if now is None or now[2] != proc.start:
            return
        if pidfd is None:
            os.kill(proc.pid, signal.SIGKILL)
        else:
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
    except OSError:
        pass
    finally:
        if pidfd is not None:
            os.close(pidfd)


# nsys's own progress bars ("[1/2] [==50%   ] out.nsys-rep", redrawn with carriage returns) and
# its "Generated:" heading: they name the capture's private folders, not the published files.
_NSYS_PROGRESS = re.compile(rb"^(\[\d+/\d+\] \[[^\]]*\] [^\[]*)+$")
_NSYS_GENERATED = b"Generated:"
# What nsys 2022.4 says when it cannot find its QdstrmImporter (Debian's split package, see
# :func:`_import_stream`): it leaves the .qdstrm stream, which specnsys imports itself, so
# these lines are about a step that is not skipped after all.
_NSYS_IMPORTER = re.compile(
    rb"^(Importer error (status|output): .*|Unable to retrieve the importer version: .*)$"
)


class _OutputRelay:
    """Copies what the program's stdout and stderr files gain to our own streams (when
    echoing) and to one combined log, line by line in the order it reads them, until stopped.

    nsys shares the program's stdout: its lines about the capture's private files (the
    progress of the import and export, the staged paths) are left out, since the published
    export's path is what ``profile`` reports, and so are its lines about an importer it could
    not find (specnsys imports the stream itself, or says in one line why it cannot)."""

    def __init__(self, folder: Path, echo: bool, private: Sequence[Path]) -> None:
        self.paths = (folder / "stdout.txt", folder / "stderr.txt")
        self.log_path = folder / "program.log"
        self.echo = echo
        self._private = tuple(str(p).encode() for p in private)
        self._offsets = [0, 0]
        self._partial = [b"", b""]
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        for path in (*self.paths, self.log_path):
            path.touch()
        self._thread = threading.Thread(target=self._loop, name="specnsys-relay", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(_RELAY_S):
            self.copy()

    def copy(self, final: bool = False) -> None:
        """Copy the whole lines each file gained since the last call (*final*: the rest too)."""
        sinks: tuple[BinaryIO | None, BinaryIO | None] = (
            (_binary(sys.stdout), _binary(sys.stderr)) if self.echo else (None, None)
        )
        with contextlib.suppress(OSError), self.log_path.open("ab") as log:
            for i, (path, sink) in enumerate(zip(self.paths, sinks, strict=True)):
                with path.open("rb") as src:
                    src.seek(self._offsets[i])
                    gained = src.read()
                self._offsets[i] += len(gained)
                text = self._partial[i] + gained
                cut = len(text) if final else text.rfind(b"\n") + 1
                self._partial[i] = text[cut:]
                data = b"".join(
                    line for line in text[:cut].splitlines(keepends=True) if not self._nsys(line)
                )
                if not data:
                    continue
                log.write(data)
                if sink is not None:
                    with contextlib.suppress(OSError, ValueError):
                        sink.write(data)
                        sink.flush()

    def stop(self) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
            self.copy(final=True)

    def _nsys(self, line: bytes) -> bool:
        """Whether *line* is nsys's own, about the capture's private files."""
        bare = line.rstrip(b"\n")
        redrawn = [part for part in bare.split(b"\r") if part]  # a progress bar's redraws
        if not redrawn:
            return b"\r" in bare
        return (
            bare == _NSYS_GENERATED
            or bool(_NSYS_IMPORTER.match(bare))
            or all(_NSYS_PROGRESS.match(part) for part in redrawn)
            or any(p in bare for p in self._private)
        )

    def last_line(self) -> str | None:
        with contextlib.suppress(OSError):
            text = self.log_path.read_text(errors="replace")
            lines = [line for line in text.splitlines() if line.strip()]
            if lines:
                return lines[-1]
        return None


def _binary(stream: object) -> BinaryIO | None:
    """The byte stream under a text stream (None where there is none, e.g. captured output)."""
    buffer = getattr(stream, "buffer", None)
    if buffer is not None and hasattr(stream, "flush"):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    return buffer


class _Capture:
    """One ``nsys profile`` run: the processes it started, the private temp folder given to
    nsys as TMPDIR, and the staging folder beside the output where nsys writes its report."""

    def __init__(self, base: Path, env: Mapping[str, str] | None, echo: bool = True) -> None:
        self.id = uuid.uuid4().hex
        self.base = base
        self.started = time.time()
        self.proc: subprocess.Popen[bytes] | None = None
        self.seen: dict[int, _Proc] = {}  # every process of the capture noticed so far
        self.configs: set[Path] = set()  # nsys's injection configs named in their environment
        self.agents: set[int] = set()  # the agent pids named in their environment
        temp_root = Path(tempfile.gettempdir())
        sweep_stale(temp_root, (_TMPDIR_KIND,))  # what a capture killed outright left
        try:
            self.tmpdir = Path(tempfile.mkdtemp(prefix=tmp_prefix(_TMPDIR_KIND), dir=temp_root))
        except OSError as exc:
            raise CaptureError(f"cannot make a temporary folder for nsys: {exc}") from None
        try:
            self.staging = _staging_folder(base)
        except BaseException:
            shutil.rmtree(self.tmpdir, ignore_errors=True)
            raise
        self.env = self._environment(env)
        self.output = _OutputRelay(self.tmpdir, echo, (self.tmpdir, self.staging))

    @property
    def staged(self) -> Path:
        return self.staging / self.base.name

    def _environment(self, env: Mapping[str, str] | None) -> dict[str, str]:
        """*env* (default: ours) plus the capture's mark and its private TMPDIR. The profiled
        program sees that TMPDIR too: nsys's injection library finds its session files there."""
        result = without_own_options(os.environ if env is None else env)
        marks = [m for m in result.get(MARKER, "").split(":") if m]
        result[MARKER] = ":".join([*marks, self.id])
        result["TMPDIR"] = str(self.tmpdir)
        return result

    def run(self, cmd: Sequence[str], timeout_s: float) -> int:
        """Run nsys to its end and return its exit status (the profiled command's)."""
        self.output.start()
        out_path, err_path = self.output.paths
        with out_path.open("ab") as out, err_path.open("ab") as err:
            self.proc = subprocess.Popen(
                cmd, stdout=out, stderr=err, start_new_session=True, env=self.env
            )
        deadline = time.monotonic() + timeout_s
        try:
            while True:
                remaining = max(0.0, min(_WATCH_S, deadline - time.monotonic()))
                try:
                    returncode = self.proc.wait(timeout=remaining)
                except subprocess.TimeoutExpired:
                    if time.monotonic() >= deadline:
                        raise CaptureError(
                            f"nsys profile did not finish in {timeout_s:g} s; capture abandoned"
                        ) from None
                    self._scan()
                    continue
                self._await_forwarding(deadline)
                return returncode
        finally:
            self.output.stop()

    def _await_forwarding(self, deadline: float) -> None:
        """Wait, at most :data:`_FORWARD_S` (and never past *deadline*), for the capture's
        processes that outlive nsys to end. nsys gives the program pipes, and its daemonized
        agent forwards what they carry into nsys's stdout, possibly after nsys has exited: the
        relay must still be copying then, or the program's last lines are lost."""
        end = min(time.monotonic() + _FORWARD_S, deadline)
        while self._scan() and time.monotonic() < end:
            time.sleep(_RELAY_S)

    def _output_tail(self) -> str:
        last = self.output.last_line()
        return last or f"exit status {self.proc.returncode if self.proc else None}"

    def finish(self, nsys: str) -> None:
        """Complete the staged export from whatever nsys left: stream, report or SQLite."""
        sqlite, report, stream = (_with_suffix(self.staged, s) for s in _REPORT_SUFFIXES)
        if not sqlite.is_file() and not report.is_file() and stream.is_file():
            _import_stream(nsys, stream, report, self.env)
        if not sqlite.is_file() and report.is_file():
            try:
                export_report_to(nsys, report, sqlite)
            except SpecnsysError as exc:  # the report was ours, not the user's input
                raise CaptureError(str(exc).replace(str(self.staging) + "/", "")) from None
        if not sqlite.is_file():
            raise CaptureError(f"nsys profile produced no report: {self._output_tail()}")

    def publish(self, base: Path, keep_report: bool) -> tuple[Path, Path | None, Path]:
        """Move the staged log, report (when kept) and export to *base* (the export last: it is
        what a reader waits for); an earlier file there that this capture did not produce goes,
        so that the files at *base* always belong together."""
        os.replace(self.output.log_path, _with_suffix(self.staged, _LOG_SUFFIX))
        moved: dict[str, Path] = {}
        kept = (_LOG_SUFFIX, ".nsys-rep", ".sqlite") if keep_report else (_LOG_SUFFIX, ".sqlite")
        for suffix in (_LOG_SUFFIX, ".nsys-rep", ".sqlite"):
            target = _with_suffix(base, suffix)
            staged = _with_suffix(self.staged, suffix)
            if suffix in kept and staged.is_file():
                os.replace(staged, target)
                moved[suffix] = target
            else:
                target.unlink(missing_ok=True)
        _with_suffix(base, ".qdstrm").unlink(missing_ok=True)
        return moved[".sqlite"], moved.get(".nsys-rep"), moved[_LOG_SUFFIX]

    def _scan(self) -> dict[int, _Proc]:
        """The capture's live processes; notes them and the nsys files their environment names."""
        unreaped = self.proc is not None and self.proc.returncode is None
        nsys_pid = self.proc.pid if unreaped and self.proc is not None else None
        members = _members(_live_processes(), self.id, nsys_pid)
        self.seen.update(members)
        for p in members.values():
            self.configs.update(Path(m.decode()) for m in _INJECTION_CONFIG.findall(p.environ))
            self.agents.update(int(m) for m in _AGENT_PID.findall(p.environ))
        return members

    def abandon(self) -> None:
        """End every process of the capture and remove the files nsys keeps outside TMPDIR."""
        self._end_processes()
        self._remove_nsys_files()

    def _end_processes(self) -> None:
        deadline = time.monotonic() + _END_S
        while time.monotonic() < deadline:
            members = self._scan()
            if not members:
                break
            for p in members.values():
                _kill(p)
            time.sleep(0.02)
            if self.proc is not None:  # reap our nsys, so it is not counted as running
                self.proc.poll()

    def _remove_nsys_files(self) -> None:
        """nsys's injection configs in /tmp and, per process, its semaphore and agent segment in
        /dev/shm: only this user's, and only ones made since the capture began (a pid of ours
        may since have been reused). The agent's segment goes by the pid its members'
        environment names too: an agent that ended before the first scan was never seen."""
        paths = set(self.configs)
        for pid in self.seen:
            paths.add(_SHM / f"sem.nsys_sem_{pid}")
        for pid in self.seen.keys() | self.agents:
            paths.add(_SHM / f"quadd-agent-instance-{pid}")
        for path in paths:
            with contextlib.suppress(OSError):
                st = path.lstat()
                if st.st_uid == os.getuid() and st.st_mtime >= self.started - 1:
                    path.unlink()

    def close(self) -> None:
        """Remove the private temp folder and the staging folder (a failed capture's files)."""
        if self.proc is not None and self.proc.returncode is None:
            self.proc.poll()
        shutil.rmtree(self.tmpdir, ignore_errors=True)
        shutil.rmtree(self.staging, ignore_errors=True)


def _staging_folder(base: Path) -> Path:
    """A private folder beside *base* (same file system, so that publishing is a rename)."""
    kind = f".{base.name[:80]}.specnsys-tmp-"
    try:
        base.parent.mkdir(parents=True, exist_ok=True)
        sweep_stale(base.parent, (kind,))  # staging of a capture killed outright (SIGKILL)
        return Path(tempfile.mkdtemp(prefix=tmp_prefix(kind), dir=base.parent))
    except OSError as exc:
        raise CaptureError(f"cannot write beside {base}: {exc.strerror or exc}") from None


# --- signals -----------------------------------------------------------------------------------


@contextlib.contextmanager
def _interrupts_on_termination() -> Iterator[None]:
    """SIGTERM and SIGHUP raise KeyboardInterrupt as SIGINT does, so that a capture ended by any
    of them cleans up the same way. Only where they would otherwise kill us outright (default
    action) and only in the main thread, where Python runs signal handlers."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = {}
    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) is signal.SIG_DFL:
            previous[sig] = signal.signal(sig, interrupt)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


#: Where Debian's ``nsight-systems`` package installs the host half of nsys (its importer among
#: it), apart from the ``target-linux-x64`` folder that holds the nsys binary.
DEBIAN_HOST_DIRS: tuple[Path, ...] = (Path("/usr/lib/nsight-systems/host-linux-x64"),)
_IMPORTER = "QdstrmImporter"
_HOST_DIR = "host-linux-x64"
_IMPORT_TIMEOUT_S = 900


def _hops(path: Path) -> Iterator[Path]:
    """*path*, then each path its chain of symbolic links leads to, in turn (at most 40, as
    the kernel follows), ending at the real file: ``/usr/bin/nsys`` -> ``../lib/nsight-systems/
    bin/nsys`` -> ``../target-linux-x64/nsys`` in Debian's layout."""
    seen: set[Path] = set()
    while path not in seen and len(seen) < 40:
        seen.add(path)
        yield path
        try:
            target = os.readlink(path)
        except OSError:
            break
        path = Path(os.path.normpath(path.parent / target))
    real = path.resolve()
    if real not in seen:
        yield real


def importer_candidates(nsys: str) -> list[Path]:
    """Where an nsys installation keeps its ``QdstrmImporter``: the ``host-linux-x64`` folder
    beside the ``target-linux-x64`` folder of the binary (NVIDIA's layout), at every step of
    the binary's chain of links (Debian's layout has it beside ``/usr/lib/nsight-systems/
    target-linux-x64``, a link to the folder that holds the binary), then the folder where
    Debian installs it."""
    found: list[Path] = []
    for hop in _hops(Path(nsys).absolute()):
        for folder in (hop.parent.parent / _HOST_DIR, hop.parent / _HOST_DIR, hop.parent):
            if folder / _IMPORTER not in found:
                found.append(folder / _IMPORTER)
    found.extend(d / _IMPORTER for d in DEBIAN_HOST_DIRS if d / _IMPORTER not in found)
    return found


def find_importer(nsys: str) -> Path | None:
    """The ``QdstrmImporter`` of the installation of *nsys* (see :func:`importer_candidates`)."""
    return next((c for c in importer_candidates(nsys) if c.is_file()), None)


def _no_importer(nsys: str) -> str:
    """What to do when nsys left its stream unimported and no importer is found: nsys looks for
    it beside its real binary only (no option or variable points it elsewhere), so either the
    host half of Nsight Systems is missing or it is not where nsys looks."""
    target = Path(nsys).resolve().parent
    return (
        f"nsys left its capture as a .qdstrm stream and no {_IMPORTER} was found to import it "
        f"(nsys looks in {target.parent / _HOST_DIR}; specnsys also in "
        f"{', '.join(str(d) for d in DEBIAN_HOST_DIRS)}): install Nsight Systems' host part "
        f"(Debian: apt install nsight-systems) or link its {_HOST_DIR} folder to "
        f"{target.parent / _HOST_DIR}"
    )


def _import_stream(
    nsys: str, stream: Path, report: Path, env: Mapping[str, str] | None = None
) -> None:
    """Turn a ``.qdstrm`` into ``.nsys-rep`` with the host importer nsys could not find.

    Debian's ``nsight-systems`` installs the importer in ``/usr/lib/nsight-systems/
    host-linux-x64`` and the nsys binary in ``/usr/lib/x86_64-linux-gnu/nsight-systems/
    target-linux-x64``; nsys 2022.4 looks for the importer only beside its real binary
    (measured with strace: ``<binary's folder>/../host-linux-x64``, ``<binary's folder>``), so
    it prints "Importer error status ..." and leaves the stream, which is imported here."""
    importer = find_importer(nsys)
    if importer is None:
        raise CaptureError(_no_importer(nsys))
    try:
        done = subprocess.run(
            [str(importer), "-i", str(stream)], capture_output=True, text=True,
            timeout=_IMPORT_TIMEOUT_S, env=None if env is None else dict(env),
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        raise CaptureError(
            f"importing the .qdstrm stream did not finish in {_IMPORT_TIMEOUT_S} s"
        ) from None
    except OSError as exc:
        raise CaptureError(f"cannot run {importer}: {exc.strerror or exc}") from None
    if done.returncode != 0 or not report.is_file():
        lines = (done.stderr or done.stdout or "").strip().splitlines()
        detail = f": {lines[-1]}" if lines else ""
        raise CaptureError(
            f"importing the .qdstrm stream with {importer} failed "
            f"(exit status {done.returncode}){detail}"
        )
