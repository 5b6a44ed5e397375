"""Exit statuses under hostile conditions (issue 22, items 7, 8, 9, 11, 12, 13): real
subprocesses, real signals, real ``ulimit -v``, real special files.

Each case is what a user can do to the CLI: Ctrl-C or SIGTERM at any moment, an address-space
limit, a rules file that is a FIFO or ``/dev/zero``, a full disk or an unwritable folder as the
output, an output that is the input itself, absurd ``--window`` edges and memory limits. The
promise: exit 0 with an answer, or one ``specnsys:`` line and the documented status (2 bad
input, 4 out of memory, 130 interrupted, 143 terminated), never a traceback or a changed file.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import SAMPLE_TRACES, sha256

TRACE = SAMPLE_TRACES / "spec_chat_c4_k4.sqlite"
SPECNSYS = [sys.executable, "-m", "specnsys"]
#: Shared objects mapped only once main() imports the analysis stack (inside its try).
HEAVY_LIBRARIES = ("_duckdb", "polars", "libarrow")


def _foreground() -> None:
    # A terminal's foreground job gets Ctrl-C; a job started from a background shell inherits
    # SIGINT ignored (and a process that ignores SIGINT rightly keeps ignoring it).
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _start(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*SPECNSYS, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=_foreground,
    )  # fmt: skip


def _maps(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return ""


def _wait_for_heavy_import(proc: subprocess.Popen[str]) -> None:
    """Until the first of DuckDB/Polars/Arrow is being loaded (the process is inside main)."""
    deadline = time.monotonic() + 60
    while proc.poll() is None and time.monotonic() < deadline:
        if any(lib in _maps(proc.pid) for lib in HEAVY_LIBRARIES):
            return
        time.sleep(0.002)


def _finish(proc: subprocess.Popen[str], timeout: float = 120) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"still running {timeout} s after the signal; stderr: {err[-500:]}")
    return proc.returncode, out, err


@pytest.mark.parametrize(("signum", "status", "line"), [
    (signal.SIGINT, 130, "specnsys: interrupted"),
    (signal.SIGTERM, 143, "specnsys: terminated"),
])  # fmt: skip
def test_signal_during_imports_is_one_line(signum: int, status: int, line: str) -> None:
    """Ctrl-C (or SIGTERM) while DuckDB/Polars/Arrow are being imported, and a little later
    (argument parsing, opening the trace): one line and 128 + the signal, no traceback."""
    # 0.0-0.03 s: inside Polars's start-up, where an interrupt once made it panic (a Rust
    # backtrace before the line; 1 in 75 here before the imports held the signal)
    for delay in (0.0, 0.01, 0.03, 0.05, 0.3):
        proc = _start("analyze", str(TRACE))
        _wait_for_heavy_import(proc)
        time.sleep(delay)
        proc.send_signal(signum)
        code, out, err = _finish(proc)
        assert (code, out, err) == (status, "", line + "\n"), f"signal {delay} s into imports"


def test_interrupt_during_a_duckdb_query_is_one_line_130() -> None:
    """Ctrl-C while DuckDB runs a long query: exit 130 and one line (was: exit 3, "Query
    interrupted"), and at once. DuckDB 2.0.1 does not look at Python's signal flag while a
    query runs, so before the signal watcher the query (minutes here) ran to its end."""
    subprocess.run([*SPECNSYS, "info", str(TRACE)], check=True, capture_output=True)  # warm
    query = "SELECT count(*) FROM range(100000000000) t(a) WHERE a % 7 = 3"  # minutes
    proc = _start("sql", str(TRACE), query)
    _wait_for_heavy_import(proc)
    time.sleep(2.0)  # imports and the warm open take about 1.5 s
    proc.send_signal(signal.SIGINT)
    signalled = time.monotonic()
    assert _finish(proc, timeout=30) == (130, "", "specnsys: interrupted\n")
    assert time.monotonic() - signalled < 10, "the query was not stopped by the signal"


def _limit_address_space(limit: int):  # noqa: ANN202
    def apply() -> None:
        _foreground()
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    return apply


@pytest.mark.parametrize("gib", [0.75, 1, 2, 3, 4])
def test_address_space_limit_is_an_answer_or_exit_4(gib: float, tmp_path: Path) -> None:
    """``ulimit -v`` 0.75-4 GiB, cold cache: exit 0 or 4 with one line; never 1 (a Rust panic),
    3 or SIGABRT (was: exit 3 "can't start new thread" at 1 GiB, exit 1 with ImportError or
    SIGABRT from nanobind at 512-768 MiB)."""
    for command in ("analyze", "phases"):
        env = {**os.environ, "SPECNSYS_CACHE_DIR": str(tmp_path / command)}
        done = subprocess.run(
            [*SPECNSYS, command, str(TRACE)], capture_output=True, text=True, timeout=300,
            env=env, preexec_fn=_limit_address_space(int(gib * (1 << 30))),
        )  # fmt: skip
        assert done.returncode in (0, 4), (command, done.returncode, done.stderr[-800:])
        if done.returncode == 4:
            (line,) = done.stderr.splitlines()
            assert line.startswith("specnsys: error: out of memory") and "ulimit -v" in line
            assert done.stdout == ""
        else:
            assert done.stdout and "Traceback" not in done.stderr
    if gib >= 1:  # measured: a cold analysis of a sample trace runs from 1 GiB on
        assert done.returncode == 0, done.stderr


#: Runs the CLI in this interpreter and reports the process's peak address space (VmPeak, KiB)
#: on stderr as it exits, after the command's own output.
_PEAK_REPORTER = """
import atexit, runpy, sys
def report():
    peak = next(l for l in open('/proc/self/status') if l.startswith('VmPeak:'))
    print('vmpeak', peak.split()[1], file=sys.stderr)
atexit.register(report)
sys.argv = ['specnsys', *sys.argv[1:]]
runpy.run_module('specnsys', run_name='__main__')
"""


def test_a_cold_analysis_under_one_gib_leaves_room(tmp_path: Path) -> None:
    """Under ``ulimit -v 1G`` a cold analysis of a sample trace peaks at most 7/8 of the limit
    (was: 1,036-1,048 MB of 1,074, so that one CI run in three crashed with SIGSEGV, SIGABRT or
    exit 4 as the allocators' idle reservations met the limit; see ``fit_to_address_space``)."""
    limit = 1 << 30
    done = subprocess.run(
        [sys.executable, "-c", _PEAK_REPORTER, "analyze", str(TRACE)], capture_output=True,
        text=True, timeout=300, env={**os.environ, "SPECNSYS_CACHE_DIR": str(tmp_path)},
        preexec_fn=_limit_address_space(limit),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-800:]
    peak_kib = int(done.stderr.split("vmpeak")[-1])
    assert peak_kib << 10 <= limit * 7 // 8, f"peak {peak_kib} KiB of {limit >> 10} KiB"


def _driver(batch: list[list[str]], timeout: float = 120) -> list[dict]:
    done = subprocess.run(
        [sys.executable, "-m", "tests.cli_driver", json.dumps(batch)], capture_output=True,
        text=True, timeout=timeout, cwd=Path(__file__).resolve().parents[1],
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def _one_line_error(result: dict, status: int = 2) -> str:
    assert result["traceback"] is None, result["traceback"]
    assert result["status"] == status, (result["argv"], result["status"], result["stderr"])
    assert result["stdout"] == ""
    (line,) = result["stderr"].splitlines()
    assert line.startswith("specnsys: error: ")
    return line


def test_rules_must_be_a_small_regular_file(tmp_path: Path) -> None:
    """``--rules`` on a FIFO (no writer: was a hang), ``/dev/zero`` (was: unbounded growth) and
    a 2 MB file: exit 2 with one line, in a few seconds."""
    fifo = tmp_path / "rules.toml"
    os.mkfifo(fifo)
    big = tmp_path / "big.toml"
    big.write_text("# padding\n" * 200_000)
    results = _driver([["phases", str(TRACE), "--rules", str(path)]
                       for path in (fifo, "/dev/zero", big)], timeout=60)  # fmt: skip
    lines = [_one_line_error(r) for r in results]
    assert "not a regular file" in lines[0] and "not a regular file" in lines[1]
    assert "too large" in lines[2]


@pytest.mark.parametrize("value", ["lots", "-1GB", "1e400"])
def test_invalid_memory_limit_variable_is_exit_2(value: str) -> None:
    """An invalid ``SPECNSYS_MEMORY_LIMIT``: exit 2 naming the variable and an example (was:
    exit 3 with DuckDB's parser error, or "-1GB" silently taken as no limit)."""
    env = {**os.environ, "SPECNSYS_MEMORY_LIMIT": value}
    done = subprocess.run([*SPECNSYS, "--no-cache", "phases", str(TRACE)], capture_output=True,
                          text=True, timeout=120, env=env)  # fmt: skip
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.splitlines()
    assert "SPECNSYS_MEMORY_LIMIT" in line and "8GB" in line and done.stdout == ""


@pytest.mark.parametrize("args", [["analyze", "--json"], ["info"]])
def test_full_disk_on_stdout_is_one_line_exit_2(args: list[str]) -> None:
    """Standard output on a full disk (``> /dev/full``), a long and a short result: exit 2 and
    "cannot write to standard output" (was: exit 3, or exit 120 from the flush at exit)."""
    with open("/dev/full", "w") as full:
        done = subprocess.run([*SPECNSYS, *args, str(TRACE)], stdout=full,
                              stderr=subprocess.PIPE, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.splitlines()
    assert line == "specnsys: error: cannot write to standard output: No space left on device"


def test_outputs_are_written_whole_or_not_at_all(tmp_path: Path) -> None:
    """Unwritable outputs exit 2 and change nothing: a folder no one may create files in
    (/proc), a symlink to /dev/full, ``--data`` unwritable after a good ``-o`` (was: the PNG
    written, then exit 3), an earlier result kept; ``-o`` naming the input export through a
    symlink or a hard link is refused; ``--window 0:1e300`` is exit 2 (was: exit 3)."""
    trace = tmp_path / "t.sqlite"
    trace.write_bytes(TRACE.read_bytes())
    before = sha256(trace)
    earlier = tmp_path / "earlier.png"
    earlier.write_bytes(b"an earlier result")
    (tmp_path / "full.png").symlink_to("/dev/full")
    (tmp_path / "input.png").symlink_to(trace)
    os.link(trace, tmp_path / "input.html")
    t = str(trace)
    results = _driver([
        ["plot", "phases", t, "-o", "/proc/self/x.png"],
        ["plot", "phases", t, "-o", str(tmp_path / "full.png")],
        ["plot", "phases", t, "-o", str(tmp_path / "new.png"), "--data", "/proc/self/d.json"],
        ["plot", "phases", t, "-o", str(earlier), "--data", "/proc/self/d.json"],
        ["report", t, "-o", "/proc/self/r.html"],
        ["plot", "phases", t, "-o", str(tmp_path / "input.png")],
        ["report", t, "-o", str(tmp_path / "input.html")],
        ["plot", "timeline", t, "--window", "0:1e300", "-o", str(tmp_path / "w.png")],
        ["plot", "timeline", t, "--window", "0:nan", "-o", str(tmp_path / "w.png")],
    ])  # fmt: skip
    lines = [_one_line_error(r) for r in results]
    assert all("cannot write" in line for line in lines[:5]), lines[:5]
    assert "No space left on device" in lines[1]
    assert all("refused to write" in line for line in lines[5:7]), lines[5:7]
    assert all("--window" in line for line in lines[7:]), lines[7:]
    assert earlier.read_bytes() == b"an earlier result"
    assert sha256(trace) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "earlier.png", "full.png", "input.html", "input.png", "t.sqlite"
    ]  # no new.png, no temporary files left beside the targets


@pytest.mark.parametrize("option", ["collect --labels", "profile --annotate"])
def test_labels_and_annotation_files_must_be_small_regular_files(
    tmp_path: Path, option: str
) -> None:
    """The other small files a command reads, like ``--rules``: a FIFO (was a hang until the
    driver's timeout), ``/dev/zero`` (was: read until memory ran out) and an oversized file give
    exit 2 with one line, before any trace is analysed or any capture started."""
    fifo = tmp_path / "input.fifo"
    os.mkfifo(fifo)
    big = tmp_path / "big.txt"
    big.write_text("# padding\n" * 1_700_000)  # 17 MB: past the limit of every small file

    def argv(path: Path | str) -> list[str]:
        if option == "collect --labels":
            return ["collect", str(TRACE), "-o", str(tmp_path / "ds"), "--labels", str(path)]
        return ["profile", "--annotate", str(path), "-o", str(tmp_path / "run"), "--", "true"]

    results = _driver([argv(path) for path in (fifo, "/dev/zero", big)], timeout=60)
    lines = [_one_line_error(r) for r in results]
    assert "not a regular file" in lines[0] and "not a regular file" in lines[1], lines
    assert "too large" in lines[2], lines
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.txt", "input.fifo"]
