"""Hostile and broken exports through every single-trace command, in real subprocesses.

The contract (docs/promises.md): each command answers with exit status 0 (an
answer, plus ``specnsys: warning:`` lines for whatever it skipped) or 2 (exactly one
``specnsys: error:`` line); never 3, never a traceback, never a hang; the input file is
byte-identical afterwards and the cache holds no half-written entry.
"""

from __future__ import annotations

import ctypes
import json
import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Required, TypedDict

import pytest

from tests.conftest import sha256
from tests.hostile_corpus import CASES, good_loop, write_all

pytestmark = pytest.mark.slow

#: Commands that take one trace, with the extra arguments that make them run.
SINGLE_TRACE_COMMANDS = {
    "info": [],
    "sql": ["SELECT count(*) AS n FROM nvtx"],
    "phases": ["--json"],
    "analyze": ["--json"],
    "forecast": ["--json"],
    "advise": ["--json"],
    "kernels": [],
    "ranges": [],
    "export": ["--format", "perfetto", "-o", "-"],
}


def registered_commands() -> dict[str, list[str]]:
    """The single-trace commands this build registers (some are written in parallel)."""
    from specnsys.cli.main import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    assert sub.choices is not None  # the subcommands' parsers, by name
    return {c: a for c, a in SINGLE_TRACE_COMMANDS.items() if c in sub.choices}


COMMANDS = registered_commands()


def run_cli(
    *args: str,
    cache: Path | None = None,
    timeout: float = 180,
    preexec_fn: Callable[[], object] | None = None,
) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if cache is not None:
        env["SPECNSYS_CACHE_DIR"] = str(cache)
    return subprocess.run(
        [sys.executable, "-m", "specnsys", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        preexec_fn=preexec_fn,
    )


@dataclass
class Run:
    """One command line's outcome (a CompletedProcess look-alike)."""

    returncode: int
    stdout: str
    stderr: str


def run_batch(argvs: list[list[str]], cache: Path) -> list[Run]:
    """Run the command lines one after another in one fresh Python (see tests/cli_driver)."""
    env = {**os.environ, "SPECNSYS_CACHE_DIR": str(cache)}
    done = subprocess.run(
        [sys.executable, "-m", "tests.cli_driver", json.dumps(argvs)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=Path(__file__).resolve().parents[1],
    )
    assert done.returncode == 0, f"the driver itself failed: {done.stderr}"
    runs = []
    for item in json.loads(done.stdout):
        assert item["traceback"] is None, f"{item['argv']}: {item['traceback']}"
        runs.append(Run(item["status"], item["stdout"], item["stderr"]))
    return runs


def check_contract(done: subprocess.CompletedProcess[str] | Run, what: str) -> None:
    """Status 0 with only warning lines on stderr, or status 2 with exactly one error line."""
    err = done.stderr.strip().splitlines()
    assert "Traceback" not in done.stderr, f"{what}: {done.stderr}"
    assert done.returncode in (0, 2), f"{what}: status {done.returncode}: {done.stderr}"
    if done.returncode == 2:
        assert len(err) == 1 and err[0].startswith("specnsys: error: "), f"{what}: {err}"
        assert done.stdout == "", what
    else:
        assert all(line.startswith("specnsys: warning: ") for line in err), f"{what}: {err}"
        assert done.stdout.strip(), f"{what}: status 0 without an answer"


def check_phase_invariants(doc: dict, what: str) -> None:
    """Phase wall times sum to the window exactly; every share lies in [0, 1]."""
    phases = doc["phases"]
    assert sum(p["wall_ns"] for p in phases.values()) == doc["window_ns"], what
    assert all(0.0 <= p["share"] <= 1.0 for p in phases.values()), what
    assert doc["window_ns"] > 0, what


class Expect(TypedDict, total=False):
    """What must come out of one case (see :data:`EXPECT`)."""

    read: Required[int]  # the status of info and sql
    error: str  # in every command's error line, when read is 2
    phases: int  # the status of phases
    phases_error: str  # in its error line, when phases is 2
    phase_warnings: list[str]  # each in its warnings, when phases is 0


#: What must come out, beyond the contract: for each case, the status of the commands that
#: read the model (info, sql) and of phases, and phrases the warnings/error must contain.
EXPECT: dict[str, Expect] = {
    "good_loop": {"read": 0, "phases": 0, "phase_warnings": []},
    "wrong_columns": {"read": 0, "phases": 2, "phases_error": "nothing to attribute"},
    "stringids_wrong_columns": {"read": 2, "error": "lacks its id/value columns"},
    "wrong_types": {"read": 0, "phases": 0, "phase_warnings": ["no launching CUDA API call"]},
    "null_end": {
        "read": 0,
        "phases": 0,
        "phase_warnings": ["never closed", "no start or end time"],
    },
    "negative_durations": {"read": 0, "phases": 0, "phase_warnings": ["end before they start"]},
    "orphan_kernels": {"read": 0, "phases": 0, "phase_warnings": ["no launching CUDA API call"]},
    "duplicate_ids": {
        "read": 0,
        "phases": 0,
        "phase_warnings": ["shared by several CUDA API calls", "more than one value"],
    },
    "pop_without_push": {
        "read": 0,
        "phases": 0,
        "phase_warnings": ["no start time", "end before they start"],
    },
    "unclosed_ranges": {"read": 0, "phases": 0, "phase_warnings": ["never closed"]},
    "out_of_order": {"read": 0, "phases": 0, "phase_warnings": ["not properly nested"]},
    "zero_length": {"read": 0, "phases": 2, "phases_error": "nothing to attribute"},
    "only_marks": {"read": 0, "phases": 2, "phases_error": "nothing to attribute"},
    "domain_only": {"read": 0, "phases": 2, "phases_error": "nothing to attribute"},
    # said by every command, cold or warm (it was said once, by the cold ingest)
    "non_utf8": {"read": 0, "phases": 0, "phase_warnings": ["not valid UTF-8"]},
    "non_utf8_table_name": {"read": 0, "phases": 0, "phase_warnings": []},
    "huge_values": {"read": 2, "error": "out of range"},
    "huge_marks": {"read": 0, "phases": 0, "phase_warnings": []},
    "far_times": {"read": 2, "error": "event times out of range"},
    "corrupt_page": {"read": 2, "error": "malformed"},
    "zero_bytes": {"read": 2, "error": "empty file"},
    "header_only": {"read": 2, "error": "truncated"},
}
assert set(EXPECT) == set(CASES)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_all(tmp_path_factory.mktemp("hostile"))


@pytest.mark.parametrize("case", list(CASES))
def test_every_command_on_a_hostile_export(
    case: str, corpus: dict[str, Path], tmp_path: Path
) -> None:
    path = corpus[case]
    before = sha256(path)
    cache = tmp_path / "cache"
    expect = EXPECT[case]
    # info first: the cold ingest; then every command on the warm cache.
    argvs = [["info", str(path)]] + [[c, str(path), *extra] for c, extra in COMMANDS.items()]
    first, *rest = run_batch(argvs, cache)
    check_contract(first, f"{case}/info (cold)")
    done = dict(zip(COMMANDS, rest, strict=True))
    for command, result in done.items():
        check_contract(result, f"{case}/{command}")
    assert sha256(path) == before, f"{case}: the input changed"
    assert not list(cache.glob(".tmp-*")), f"{case}: half-written cache entries left behind"

    for command in ("info", "sql"):
        assert done[command].returncode == expect["read"], (case, command, done[command].stderr)
    if expect["read"] == 2:
        for command, result in done.items():
            assert result.returncode == 2 and str(path) in result.stderr, (case, command)
            assert expect["error"] in result.stderr, (case, command, result.stderr)
        return
    phases = done["phases"]
    assert phases.returncode == expect["phases"], (case, phases.stderr)
    if phases.returncode == 2:
        assert expect["phases_error"] in phases.stderr, (case, phases.stderr)
        return
    check_phase_invariants(json.loads(phases.stdout), case)
    wanted = expect["phase_warnings"]
    assert isinstance(wanted, list)
    for phrase in wanted:
        assert phrase in phases.stderr, (case, phrase, phases.stderr)
    if not wanted:
        assert "warning" not in phases.stderr, (case, phases.stderr)
    analyze = done.get("analyze")
    if analyze is not None and analyze.returncode == 0:  # analyze says the same of skipped rows
        for phrase in wanted:
            assert phrase in analyze.stderr, (case, phrase, analyze.stderr)


def test_collect_of_the_whole_corpus(corpus: dict[str, Path], tmp_path: Path) -> None:
    """``collect`` of every hostile export at once, each cold in a worker: the usable ones
    collected, the others named in one warning each, every line of stderr a specnsys warning
    naming its trace (a worker's ingest warnings came out as Python's, with a source line),
    and no internal error (a token count past 64 bits failed the dataset's Int64 column)."""
    folder = next(iter(corpus.values())).parent
    out = tmp_path / "dataset"
    done = run_cli("collect", str(folder), "-o", str(out), cache=tmp_path / "cache", timeout=600)
    assert done.returncode == 0, done.stderr
    lines = done.stderr.strip().splitlines()
    assert all(line.startswith("specnsys: warning: /") for line in lines), lines
    failed = [n for n, e in EXPECT.items() if e["read"] == 2 or e.get("phases") == 2]
    for name in failed:
        assert any(f"{name}.sqlite: not collected" in line for line in lines), name
    assert any("non_utf8.sqlite: " in line and "not valid UTF-8" in line for line in lines)
    assert f"{len(CASES) - len(failed)} analysed" in done.stdout, done.stdout
    import polars as pl

    runs = pl.read_parquet(out / "runs" / "*" / "*.parquet")
    huge = runs.filter(pl.col("trace").str.ends_with("huge_marks.sqlite"))
    assert huge.height == 1 and huge["tokens"][0] is None  # 4.15e19: not an Int64
    assert json.loads(huge["analysis_json"][0])["tokens"] > 2**64


def test_clean_export_gives_exact_numbers(corpus: dict[str, Path], tmp_path: Path) -> None:
    """The control case: every phase time is what the builder put there."""
    done = run_cli("phases", str(corpus["good_loop"]), "--json", cache=tmp_path)
    doc = json.loads(done.stdout)
    check_phase_invariants(doc, "good_loop")
    assert doc["window_ns"] == 2000  # request range [0, 2000)
    wall = {name: p["wall_ns"] for name, p in doc["phases"].items()}
    # per step of 100 ns: decode alone 0..5 and 80..90, forward 5..60 (its kernel 10..55
    # inside), sample 60..80, nothing open 90..100.
    assert wall["forward"] == 20 * 55 and wall["sample"] == 20 * 20
    assert wall["decode"] == 20 * 15 and wall["unannotated"] == 20 * 10


def test_negative_and_null_rows_are_skipped_not_counted(
    corpus: dict[str, Path], tmp_path: Path
) -> None:
    """A kernel with end < start or a NULL end adds nothing (no negative or NULL time)."""
    cases = {"negative_durations": 1, "null_end": 1}  # kernels that are well-formed
    runs = run_batch([["phases", str(corpus[c]), "--json"] for c in cases], tmp_path)
    for (case, kernels), done in zip(cases.items(), runs, strict=True):
        doc = json.loads(done.stdout)
        check_phase_invariants(doc, case)
        assert sum(p["kernels"] or 0 for p in doc["phases"].values()) == kernels, case
        assert all(p["gpu_busy_ns"] >= 0 for p in doc["phases"].values()), case


def test_invalid_utf8_is_replaced_with_a_warning(corpus: dict[str, Path], tmp_path: Path) -> None:
    done = run_cli(
        "--no-cache",
        "sql",
        str(corpus["non_utf8"]),
        "SELECT name FROM threads",
        "--format",
        "csv",
        cache=tmp_path,
    )
    check_contract(done, "non_utf8")
    assert "not valid UTF-8" in done.stderr and "\ufffd" in done.stdout


# -- files that are there but cannot be used ------------------------------------------------


def _drop_dac_capabilities() -> None:
    """In the child: drop CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH from the bounding set, so
    that root, after exec, is held to file modes like anyone else."""
    libc = ctypes.CDLL(None, use_errno=True)
    pr_capbset_drop = 24
    for cap in (1, 2):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH
        if libc.prctl(pr_capbset_drop, cap, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP) failed")


def test_unreadable_file(tmp_path: Path) -> None:
    """chmod 000: one line, status 2. Root ignores file modes, so as root the check runs with
    the two capabilities that let it do so dropped (honestly unreadable, not simulated)."""
    path = good_loop(tmp_path)
    before = sha256(path)
    path.chmod(0)
    try:
        drop = _drop_dac_capabilities if os.geteuid() == 0 else None
        try:
            done = run_cli("info", str(path), cache=tmp_path / "cache", preexec_fn=drop)
        except subprocess.SubprocessError as exc:  # prctl refused: no way to test it here
            pytest.skip(f"cannot drop DAC capabilities as root: {exc}")
        check_contract(done, "unreadable")
        assert done.returncode == 2
        assert "cannot read: Permission denied" in done.stderr
        assert (path.stat().st_mode & 0o777) == 0  # mode left as it was
    finally:
        path.chmod(0o644)
    assert sha256(path) == before


def test_unreadable_file_is_read_by_root_with_its_mode_kept(tmp_path: Path) -> None:
    """What really happens as root with all capabilities: the file is read (status 0), and
    neither its bytes nor its mode change."""
    if os.geteuid() != 0:
        pytest.skip("only root can read a mode-000 file")
    path = good_loop(tmp_path)
    before = sha256(path)
    path.chmod(0)
    try:
        done = run_cli(
            "sql",
            str(path),
            "SELECT count(*) FROM kernels",
            "--format",
            "csv",
            cache=tmp_path / "cache",
        )
        assert done.returncode == 0 and done.stdout.split() == ["count_star()", "20"]
        assert (path.stat().st_mode & 0o777) == 0
    finally:
        path.chmod(0o644)
    assert sha256(path) == before


_HOLD_LOCK = """
import sqlite3, sys
con = sqlite3.connect(sys.argv[1], isolation_level=None)
con.execute("BEGIN EXCLUSIVE")
con.execute("INSERT INTO StringIds VALUES (999999, 'uncommitted')")
print("locked", flush=True)
sys.stdin.read()
con.execute("ROLLBACK")
"""


def test_file_locked_by_another_process(tmp_path: Path) -> None:
    """Another process holds an exclusive SQLite lock with an uncommitted write: specnsys
    neither waits for the lock nor sees the uncommitted row; the file is unchanged."""
    path = good_loop(tmp_path)
    before = sha256(path)
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD_LOCK, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        # The lock is real: a normal SQLite reader is refused.
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            sqlite3.connect(path, timeout=0.1).execute("SELECT count(*) FROM StringIds").fetchall()
        started = time.monotonic()
        done = run_cli(
            "sql",
            str(path),
            "SELECT count(*) FROM kernels",
            "--format",
            "csv",
            cache=tmp_path / "cache",
            timeout=60,
        )
        check_contract(done, "locked")
        assert done.returncode == 0 and done.stdout.split() == ["count_star()", "20"]
        assert time.monotonic() - started < 60
    finally:
        holder.communicate("", timeout=30)
    assert holder.returncode == 0
    assert sha256(path) == before


_HOLD_WAL = """
import sqlite3, sys
con = sqlite3.connect(sys.argv[1])
con.execute("PRAGMA journal_mode=WAL")
con.execute("PRAGMA wal_autocheckpoint=0")
con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL SELECT * FROM CUPTI_ACTIVITY_KIND_KERNEL")
con.commit()
print("written", flush=True)
sys.stdin.read()
con.close()
"""


def test_export_with_unmerged_write_ahead_log(tmp_path: Path) -> None:
    """Committed rows still in a -wal file would be invisible to a read-only immutable open:
    refused with one line instead of a silently short count; fine once merged."""
    path = good_loop(tmp_path)
    writer = subprocess.Popen(
        [sys.executable, "-c", _HOLD_WAL, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert writer.stdout is not None and writer.stdout.readline().strip() == "written"
        assert Path(f"{path}-wal").stat().st_size > 0
        done = run_cli("sql", str(path), "SELECT count(*) FROM kernels", cache=tmp_path / "c")
        check_contract(done, "wal")
        assert done.returncode == 2 and "not yet in the file" in done.stderr
    finally:
        writer.communicate("", timeout=30)
    assert not Path(f"{path}-wal").exists()  # merged when the writer closed
    done = run_cli(
        "sql", str(path), "SELECT count(*) FROM kernels", "--format", "csv", cache=tmp_path / "c"
    )
    assert done.returncode == 0 and done.stdout.split() == ["count_star()", "40"]


def test_symlink_loop(tmp_path: Path) -> None:
    a, b = tmp_path / "a.sqlite", tmp_path / "b.sqlite"
    a.symlink_to(b)
    b.symlink_to(a)
    runs = run_batch([[c, str(a), *extra] for c, extra in COMMANDS.items()], tmp_path / "c")
    for command, done in zip(COMMANDS, runs, strict=True):
        check_contract(done, command)
        assert done.returncode == 2 and done.stderr.strip().endswith("symbolic link loop")


def test_dangling_symlink(tmp_path: Path) -> None:
    link = tmp_path / "gone.sqlite"
    link.symlink_to(tmp_path / "never-written.sqlite")
    done = run_cli("info", str(link), cache=tmp_path / "cache")
    assert done.returncode == 2 and done.stderr.strip().endswith("broken symbolic link")


def test_named_pipe_does_not_hang(tmp_path: Path) -> None:
    """A FIFO would block a reader forever; it is refused before anything opens it."""
    fifo = tmp_path / "pipe.sqlite"
    os.mkfifo(fifo)
    done = run_cli("info", str(fifo), cache=tmp_path / "cache", timeout=60)
    assert done.returncode == 2 and "not a regular file" in done.stderr


def test_symlink_to_a_good_export_is_followed(tmp_path: Path) -> None:
    target = good_loop(tmp_path)
    link = tmp_path / "link.sqlite"
    link.symlink_to(target)
    done = run_cli(
        "sql",
        str(link),
        "SELECT count(*) FROM kernels",
        "--format",
        "csv",
        cache=tmp_path / "cache",
    )
    assert done.returncode == 0 and done.stdout.split() == ["count_star()", "20"]
