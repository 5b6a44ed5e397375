"""Real nsys captures of the instrument workload: phases, marks and nesting arrive in the export."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import specnsys
from specnsys.capture import CaptureError, profile
from specnsys.ingest.nsys_rep import find_nsys

pytestmark = [
    pytest.mark.nsys,
    pytest.mark.skipif(find_nsys() is None, reason="nsys is not on PATH"),
]

RUN = [sys.executable, "-m", "instrument.run", "--preset", "tiny", "--device", "cpu",
       "--threads", "1", "--requests", "4", "--max-new-tokens", "12", "--concurrency", "2",
       "--draft", "noised", "--noise", "0.1", "--seed", "1"]
SPEC_PHASES = {"request", "prefill", "draft_prefill", "decode", "draft", "verify", "sample",
               "kv", "sync", "schedule"}


@pytest.fixture(scope="module")
def spec_capture(tmp_path_factory: pytest.TempPathFactory):
    out = tmp_path_factory.mktemp("capture") / "spec"
    return profile([*RUN, "--mode", "spec", "--k", "3"], out, timeout_s=300, keep_report=True)


def test_spec_capture_has_every_phase_marks_and_nesting(spec_capture) -> None:
    assert spec_capture.sqlite.is_file() and spec_capture.report is not None
    with specnsys.open(spec_capture.sqlite) as t:
        names = {r[0] for r in t.sql(
            "SELECT DISTINCT text FROM nvtx WHERE domain = 'specnsys' "
            "AND kind IN ('push_pop', 'start_end')").fetchall()}
        assert names >= SPEC_PHASES
        # requests are start/end ranges carrying their id; phases are push/pop
        assert t.sql("SELECT DISTINCT kind FROM nvtx WHERE text = 'request'").fetchall() == [
            ("start_end",)]
        assert t.sql("SELECT count(*) FROM nvtx WHERE text = 'request'").fetchall() == [(4,)]
        marks = t.sql(
            "SELECT text, count(*), count(payload_int), min(payload_int), max(payload_int) "
            "FROM nvtx WHERE kind = 'mark' AND text IN ('proposed', 'accepted') GROUP BY 1"
        ).fetchall()
        by_name = {m[0]: m[1:] for m in marks}
        assert by_name["proposed"][0] == by_name["proposed"][1] > 0  # every mark has a payload
        assert by_name["proposed"][2] == by_name["proposed"][3] == 3  # k = 3
        assert 0 <= by_name["accepted"][2] <= by_name["accepted"][3] <= 3
        # draft and verify ranges sit inside a decode range on the same thread
        parents = t.sql(
            "SELECT c.text, p.text, count(*) FROM nvtx c JOIN nvtx p ON p.id = c.parent "
            "WHERE c.text IN ('draft', 'verify') GROUP BY ALL"
        ).fetchall()
        assert {(c, p) for c, p, _ in parents} == {("draft", "decode"), ("verify", "decode")}
        assert t.summary.capabilities["acceptance_marks"].available


def test_baseline_capture_has_forward(tmp_path: Path) -> None:
    result = profile([*RUN, "--mode", "baseline"], tmp_path / "base.sqlite", timeout_s=300)
    with specnsys.open(result.sqlite) as t:
        rows = t.sql("SELECT p.text, count(*) FROM nvtx c JOIN nvtx p ON p.id = c.parent "
                     "WHERE c.text = 'forward' GROUP BY 1").fetchall()
        assert rows and rows[0][0] == "decode"
        assert t.sql("SELECT count(*) FROM nvtx WHERE text IN ('draft', 'verify')"
                     ).fetchall() == [(0,)]


def test_open_nsys_rep_exports_into_the_cache(spec_capture, isolated_cache: Path) -> None:
    with specnsys.open(spec_capture.report) as from_report, \
            specnsys.open(spec_capture.sqlite) as from_sqlite:
        assert from_report.summary.row_counts == from_sqlite.summary.row_counts
        assert Path(from_report.path).is_relative_to(isolated_cache)


def test_profile_cli_prints_the_export_path(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "specnsys", "profile", "-o", str(tmp_path / "cli"), "--",
         sys.executable, "-c", "import nvtx; nvtx.mark('hello')"],
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(tmp_path / "cli.sqlite")
    # the intermediate report and stream are gone; the program's (empty) output is kept
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cli.log", "cli.sqlite"]


FAILING_PROGRAM = (
    "import sys; print('to stdout'); print('to stderr', file=sys.stderr); sys.stdout.flush(); "
    "1 / 0"
)


def test_profile_passes_the_program_output_through_and_keeps_it(tmp_path: Path) -> None:
    """The profiled program's stdout, stderr and traceback reach the user and OUT.log."""
    done = subprocess.run(
        [sys.executable, "-m", "specnsys", "profile", "-o", str(tmp_path / "run"), "--",
         sys.executable, "-c", FAILING_PROGRAM],
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 1, done.stderr
    assert done.stdout == "to stdout\n"  # nothing of nsys's own progress or private paths
    err = done.stderr.splitlines()
    assert err[0] == "to stderr" and "Traceback (most recent call last):" in err
    assert err[-2] == "ZeroDivisionError: division by zero"
    assert err[-1].startswith("specnsys: error: the profiled command failed (exit status 1)")
    log = (tmp_path / "run.log").read_text()
    assert "to stdout\n" in log and "to stderr\n" in log and "ZeroDivisionError" in log
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.log", "run.sqlite"]


def test_keep_report_keeps_the_nsys_rep_beside_the_export(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "specnsys", "profile", "--keep-report", "-o",
         str(tmp_path / "kept"), "--", sys.executable, "-c", "print('hi')"],
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["hi", str(tmp_path / "kept.sqlite")]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "kept.log", "kept.nsys-rep", "kept.sqlite"]
    with specnsys.open(tmp_path / "kept.nsys-rep") as t:
        assert t.summary.row_counts


def test_failing_command_is_a_capture_error(tmp_path: Path) -> None:
    with pytest.raises(CaptureError):
        profile([sys.executable, "-c", "import sys; sys.exit(3)"], tmp_path / "fail",
                timeout_s=300)


def test_missing_nsys_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECNSYS_NSYS", str(tmp_path / "missing-nsys"))
    with pytest.raises(CaptureError, match="nsys not found"):
        profile(["true"], tmp_path / "x")
    assert shutil.which("nsys")  # the real one is still there for the other tests


# nsys 2022.4 gives the program pipes, not our files, and its daemonized agent forwards what
# arrives on them into nsys's stdout, possibly after nsys itself has exited. This stand-in nsys
# does the same (a child in its own session writes the program's last line 1 s after the
# launcher exits), so that the relay's end is tested deterministically.
_LATE_FORWARDING_NSYS = """#!/bin/sh
if [ "$1" = "--version" ]; then echo "NVIDIA Nsight Systems version 2022.4.2.1-late"; exit 0; fi
setsid sh -c 'sleep 1; echo "the program, forwarded late"' &
echo "the program, forwarded at once"
exit 1
"""


def test_output_forwarded_after_nsys_exits_still_reaches_the_user(tmp_path: Path) -> None:
    """CI of 2026-12-02 lost the program's stdout once (nsys returned before its agent had
    forwarded the line): the relay now keeps copying until every process of the capture is
    gone (bounded), so a late line is in stdout and in OUT.log."""
    fake = tmp_path / "nsys"
    fake.write_text(_LATE_FORWARDING_NSYS)
    fake.chmod(0o755)
    done = subprocess.run(
        [sys.executable, "-m", "specnsys", "profile", "-o", str(tmp_path / "run"), "--", "true"],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "SPECNSYS_NSYS": str(fake)},
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert done.stdout.splitlines() == [
        "the program, forwarded at once", "the program, forwarded late"], done.stdout
    assert done.stderr.startswith("specnsys: error: nsys profile produced no report: "), done.stderr
