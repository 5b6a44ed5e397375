"""The hostile pass of issue 30 on the run-set commands and the CLI's writers: real
subprocesses, real exports, real file-size limits and real SIGKILLs.

* (a) a manifest's run id is a folder name: ``../`` in it made the next collect replace a folder
  outside the dataset (a file there was deleted);
* (b) ``sql -o FILE`` on a full disk left a fragment (or an empty file) in place of the earlier
  result;
* (d) a collect that failed (full disk, SIGKILL) left a folder every later collect refused;
* (g) ``whatif --k 1000000000`` ran for hours: every count argument is bounded;
* (j) a malformed manifest (``runs`` a list, an entry an int) was exit 3;
* (m) a labels CSV with a UTF-8 BOM was refused, duplicate rows for a trace passed silently, and
  a huge ``--max-rows`` was reported as an SQL error.

A full disk is a file-size limit (``RLIMIT_FSIZE``, as tests/test_reliability_cache.py does): a
write past it fails with EFBIG after the bytes that fit, exactly as ENOSPC leaves them.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import SAMPLE_TRACES

pytestmark = pytest.mark.usefixtures("shared_cache")  # the samples built once (conftest)

SPECNSYS = [sys.executable, "-m", "specnsys"]
CHAT = ["baseline_chat_c4", "spec_chat_c4_k2", "spec_chat_c4_k4"]


def _cli(*args: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
    kwargs.setdefault("timeout", 300)
    return subprocess.run([*SPECNSYS, *args], capture_output=True, text=True,
                          **kwargs)  # type: ignore[call-overload]  # fmt: skip


def _one_line_error(done: subprocess.CompletedProcess[str], status: int = 2) -> str:
    assert done.returncode == status, (done.returncode, done.stdout, done.stderr)
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("specnsys: error: "), done.stderr
    return lines[0]


def _copies(folder: Path, names: list[str] = CHAT) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for name in names:
        shutil.copyfile(SAMPLE_TRACES / f"{name}.sqlite", folder / f"{name}.sqlite")
        out.append(folder / f"{name}.sqlite")
    return out


def _file_size_limit(limit: int) -> Callable[[], None]:
    def apply() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


# ------------------------------------------------------- (a) run ids that leave the dataset


def _collected(tmp_path: Path) -> tuple[Path, Path, dict]:
    traces = tmp_path / "t"
    _copies(traces, ["baseline_chat_c4"])
    dataset = tmp_path / "ds"
    done = _cli("collect", str(traces), "-o", str(dataset))
    assert done.returncode == 0, done.stderr
    return traces, dataset, json.loads((dataset / "_specnsys.json").read_text())


def test_a_manifest_run_id_with_dot_dot_cannot_replace_a_folder_outside(tmp_path: Path) -> None:
    """The run id ``x/../../../victim`` names ``tmp_path/victim``: a collect that rewrites the
    runs partitions (here: their recorded columns changed) replaced it, deleting the file in it.
    Now the manifest is refused in one line and the folder outside is untouched."""
    traces, dataset, doc = _collected(tmp_path)
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "thesis.tex").write_text("years of work")
    (entry,) = doc["runs"].values()
    doc["runs"]["x/../../../victim"] = entry
    doc.pop("runs_columns")
    (dataset / "_specnsys.json").write_text(json.dumps(doc))
    line = _one_line_error(_cli("collect", str(traces), "-o", str(dataset)))
    assert "run id 'x/../../../victim' is not 16 hex digits" in line
    assert (victim / "thesis.tex").read_text() == "years of work"
    assert sorted(p.name for p in victim.iterdir()) == ["thesis.tex"]
    # check and sql read the same manifest: the same line
    assert "is not 16 hex digits" in _one_line_error(_cli("check", str(dataset), str(dataset)))


def test_a_table_folder_linked_outside_the_dataset_is_not_written(tmp_path: Path) -> None:
    """``DATASET/runs`` a link to a folder elsewhere: collect would replace the partitions
    there; every folder it replaces must resolve inside the dataset."""
    traces, dataset, doc = _collected(tmp_path)
    (run_id,) = doc["runs"]
    elsewhere = tmp_path / "elsewhere"
    shutil.move(dataset / "runs", elsewhere)
    (dataset / "runs").symlink_to(elsewhere)
    before = (elsewhere / f"run_id={run_id}" / "part-0.parquet").read_bytes()
    doc.pop("runs_columns")
    (dataset / "_specnsys.json").write_text(json.dumps(doc))
    line = _one_line_error(_cli("collect", str(traces), "-o", str(dataset)))
    assert "outside the dataset" in line
    assert (elsewhere / f"run_id={run_id}" / "part-0.parquet").read_bytes() == before
    assert sorted(p.name for p in elsewhere.iterdir()) == [f"run_id={run_id}"]


def test_stale_partitions_are_not_cleaned_through_a_link_out_of_the_dataset(
    tmp_path: Path,
) -> None:
    """``DATASET/phases`` a link to a folder of someone else's holding a ``run_id=...`` folder
    the manifest does not list: the clean-up of stale partitions removed it (here: a collect
    whose only trace fails, so no partition of that table is written first)."""
    _, dataset, _ = _collected(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    shutil.move(dataset / "phases", elsewhere)
    (dataset / "phases").symlink_to(elsewhere)
    theirs = elsewhere / "run_id=0123456789abcdef"
    theirs.mkdir()
    (theirs / "results.parquet").write_bytes(b"theirs")
    broken = tmp_path / "broken.sqlite"
    broken.write_bytes(b"not an export")
    line = _one_line_error(_cli("collect", str(broken), "-o", str(dataset)))
    assert "outside the dataset" in line and "not cleaned" in line, line
    assert (theirs / "results.parquet").read_bytes() == b"theirs"


# ---------------------------------------------------------------- (j) malformed manifests


@pytest.mark.parametrize(
    ("edit", "says"),
    [
        (lambda d: d.update(runs=[1, 2]), "runs is a list, expected an object"),
        (lambda d: d.update(failed=7), "failed is a number, expected an object"),
        (lambda d: d["runs"].update({"0123456789abcdef": 3}),
         "runs[0123456789abcdef] is a number, expected an object"),
        (lambda d: next(iter(d["runs"].values())).update(labels=["k"]),
         ".labels is a list, expected an object"),
        (lambda d: next(iter(d["runs"].values())).pop("headline"),
         ".headline is null, expected an object"),
        (lambda d: next(iter(d["runs"].values())).update(labels={"k": 4}),
         "labels holds 'k': 4"),
        (lambda d: d.update(runs_columns="x"), "runs_columns is a string"),
    ],
)  # fmt: skip
def test_a_malformed_manifest_is_one_line_exit_2(
    tmp_path: Path, edit: Callable[[dict], None], says: str
) -> None:
    traces, dataset, doc = _collected(tmp_path)
    edit(doc)
    (dataset / "_specnsys.json").write_text(json.dumps(doc))
    line = _one_line_error(_cli("collect", str(traces), "-o", str(dataset)))
    assert "not a valid dataset manifest" in line and says in line, line
    assert json.loads((dataset / "_specnsys.json").read_text()) == doc  # not rewritten


# ---------------------------------------------------- (b) a full disk never costs a result


@pytest.mark.parametrize("limit", [16, 4096])
@pytest.mark.parametrize("fmt", ["csv", "json", "parquet"])
def test_sql_output_on_a_full_disk_keeps_the_earlier_result(
    tmp_path: Path, limit: int, fmt: str
) -> None:
    """``sql -o FILE`` whose result does not fit (16 bytes, 4 KiB): exit 2 in one line, the
    earlier FILE byte-identical and no temporary file beside it (was: a fragment of the size
    that fit in its place). (A limit of 0 bytes fails earlier, in Python's own search for a
    temporary folder at the first query: not a writer's matter.)"""
    trace = _copies(tmp_path / "t", ["spec_chat_c4_k4"])[0]
    out = tmp_path / "out" / f"result.{fmt}"
    out.parent.mkdir()
    query = "SELECT i, repeat('x', 40) AS pad FROM range(20000) t(i)"
    assert _cli("sql", str(trace), query, "--format", fmt, "-o", str(out)).returncode == 0
    earlier = out.read_bytes()
    assert len(earlier) > 4096
    # the same query's result again, now past the limit (the cache is warm: nothing else writes)
    done = _cli("sql", str(trace), query.replace("i,", "i + 1 AS i,"), "--format", fmt,
                "-o", str(out), preexec_fn=_file_size_limit(limit))  # fmt: skip
    line = _one_line_error(done)
    assert line.startswith(f"specnsys: error: cannot write to {out}: "), line
    assert out.read_bytes() == earlier
    assert sorted(p.name for p in out.parent.iterdir()) == [out.name]


def test_plot_and_report_on_a_full_disk_keep_the_earlier_result(tmp_path: Path) -> None:
    """The other writers of the CLI, through the same helper."""
    trace = _copies(tmp_path / "t", ["spec_chat_c4_k4"])[0]
    out = tmp_path / "out"
    out.mkdir()
    for args in (["plot", "phases", str(trace), "-o", str(out / "f.png"),
                  "--data", str(out / "f.json")],
                 ["report", str(trace), "-o", str(out / "r.html")]):  # fmt: skip
        assert _cli(*args).returncode == 0
        before = {p.name: p.read_bytes() for p in out.iterdir()}
        line = _one_line_error(_cli(*args, preexec_fn=_file_size_limit(1024)))
        assert "cannot write to" in line and "File too large" in line, line
        assert {p.name: p.read_bytes() for p in out.iterdir()} == before


# ------------------------------------------- (d) what a failed collect leaves is no obstacle


def test_a_collect_killed_before_its_manifest_leaves_a_folder_the_next_collect_takes(
    tmp_path: Path,
) -> None:
    """SIGKILL once the first run's partitions are on disk, before any manifest: the next
    collect (was: "a folder that is not a specnsys dataset") writes the whole dataset."""
    traces = tmp_path / "t"
    _copies(traces)
    dataset = tmp_path / "ds"
    proc = subprocess.Popen([*SPECNSYS, "collect", str(traces), "-o", str(dataset),
                             "--workers", "1"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not (dataset / "requests").is_dir() and time.monotonic() < deadline:
            assert proc.poll() is None, "collect ended before it was killed"
            time.sleep(0.01)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the collect and the pool workers it started
        proc.wait()
    assert not (dataset / "_specnsys.json").exists(), "killed too late to test anything"
    done = _cli("collect", str(traces), "-o", str(dataset), "--json")
    assert done.returncode == 0, done.stderr
    assert len(json.loads(done.stdout)["analysed"]) == len(CHAT)
    sql = _cli("sql", str(dataset), "SELECT count(*) AS n FROM runs", "--format", "csv")
    assert sql.stdout == f"n\n{len(CHAT)}\n"


def test_a_collect_on_a_full_disk_leaves_a_folder_the_next_collect_takes(
    tmp_path: Path,
) -> None:
    """The first collect runs out of space (exit 2, one line) after partitions landed but
    before its manifest (8 KiB: the partitions of these runs fit, the manifest of three does
    not); the next one, with space, collects every trace (was: refused, "not a specnsys
    dataset")."""
    traces = tmp_path / "t"
    _copies(traces)
    dataset = tmp_path / "ds"
    warm = _cli("collect", str(traces), "-o", str(tmp_path / "warm"))  # the cache is written
    assert warm.returncode == 0, warm.stderr
    full = _cli("collect", str(traces), "-o", str(dataset), "--workers", "1",
                preexec_fn=_file_size_limit(8192))  # fmt: skip
    assert "cannot write the dataset" in _one_line_error(full)
    assert dataset.is_dir() and not (dataset / "_specnsys.json").exists()
    done = _cli("collect", str(traces), "-o", str(dataset), "--json")
    assert done.returncode == 0, done.stderr
    assert len(json.loads(done.stdout)["analysed"]) == len(CHAT)


def test_a_folder_with_anything_else_is_still_refused(tmp_path: Path) -> None:
    """Accepting partial state is not writing into someone's folder: a table folder beside
    a file of theirs is refused as before, and their file stays."""
    trace = _copies(tmp_path / "t", ["baseline_chat_c4"])[0]
    dataset = tmp_path / "ds"
    (dataset / "runs").mkdir(parents=True)
    (dataset / "notes.txt").write_text("mine")
    line = _one_line_error(_cli("collect", str(trace), "-o", str(dataset)))
    assert "not a specnsys dataset" in line and "'notes.txt'" in line
    assert (dataset / "notes.txt").read_text() == "mine"


def test_a_manifest_that_is_no_regular_file_is_said_so(tmp_path: Path) -> None:
    """A ``_specnsys.json`` that is a FIFO: the folder was refused as holding
    '_specnsys.json' while "no _specnsys.json" (a contradiction); it now says the manifest
    is not a regular file, nothing reads the FIFO, and it stays."""
    trace = _copies(tmp_path / "t", ["baseline_chat_c4"])[0]
    dataset = tmp_path / "ds"
    dataset.mkdir()
    os.mkfifo(dataset / "_specnsys.json")
    line = _one_line_error(_cli("collect", str(trace), "-o", str(dataset)))
    assert line.endswith(
        f"{dataset}: a folder that is not a specnsys dataset (its _specnsys.json is not a "
        "regular file); give an empty or new folder"
    ), line
    assert stat.S_ISFIFO((dataset / "_specnsys.json").lstat().st_mode)


# ------------------------------------------------------------- (g) every count is bounded


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["whatif", "--alpha", "0.7", "--c", "0.1", "--k", "1000000000"],
         "argument --k: '1000000000': drafts per step must be at most 1,024 (1 to 1,024)"),
        (["whatif", "--alpha", "0.7", "--c", "0.1", "--k", "2", "--k-max", "99999999"],
         "drafts per step must be at most 1,024"),
        (["whatif", "--alpha", "0.7", "--c", "0.1", "--k", "0"], "must be at least 1"),
        (["sql", "{trace}", "SELECT 1", "--max-rows", "99999999999999999999"],
         "argument --max-rows: '99999999999999999999': rows must be at most 1,000,000"),
        (["kernels", "{trace}", "--max-rows", "-1"], "rows must be at least 0 (0 to 1,000,000)"),
        (["ranges", "{trace}", "--max-rows", "10000000"], "rows must be at most 1,000,000"),
        (["collect", "{trace}", "-o", "{ds}", "--workers", "100000"],
         "workers must be at most 256 (1 to 256)"),
        (["analyze", "{trace}", "--tokens", "99999999999999999999"], "tokens must be at most"),
    ],
)  # fmt: skip
def test_every_count_argument_is_bounded(tmp_path: Path, args: list[str], says: str) -> None:
    names = {"trace": str(SAMPLE_TRACES / "spec_chat_c4_k4.sqlite"), "ds": str(tmp_path / "ds")}
    started = time.monotonic()
    line = _one_line_error(_cli(*(a.format(**names) for a in args), timeout=60))
    assert says in line, line
    assert time.monotonic() - started < 30
    assert not (tmp_path / "ds").exists()


# ---------------------------------------------------------------------- (m) labels CSVs


def test_a_labels_csv_with_a_byte_order_mark_is_read(tmp_path: Path) -> None:
    """Excel's "CSV UTF-8" starts with a BOM: the first column is still ``trace``."""
    trace = _copies(tmp_path / "t", ["baseline_chat_c4"])[0]
    labels = tmp_path / "labels.csv"
    labels.write_bytes("trace,k\n".encode("utf-8-sig") + f"{trace},4\n".encode())
    done = _cli("collect", str(trace), "-o", str(tmp_path / "ds"), "--labels", str(labels))
    assert done.returncode == 0, done.stderr
    sql = _cli("sql", str(tmp_path / "ds"), "SELECT label_k FROM runs", "--format", "csv")
    assert sql.stdout == "label_k\n4\n"


@pytest.mark.parametrize("spelling", ["the same", "another"])
def test_two_rows_for_one_trace_are_refused_naming_both(tmp_path: Path, spelling: str) -> None:
    """Which row would win was the order of the file's lines: now one line names both."""
    trace = _copies(tmp_path / "t", ["baseline_chat_c4"])[0]
    other = trace if spelling == "the same" else tmp_path / "t" / "." / trace.name
    labels = tmp_path / "labels.csv"
    labels.write_text(f"trace,k\n{trace},4\n{tmp_path / 'x.sqlite'},1\n{other},2\n")
    line = _one_line_error(_cli("collect", str(trace), "-o", str(tmp_path / "ds"),
                                "--labels", str(labels)))  # fmt: skip
    assert f"{labels}: lines 2 and 4 both label {trace}" in line, line
    assert not (tmp_path / "ds").exists()


def test_a_trace_found_only_by_a_file_name_two_rows_share_is_refused(tmp_path: Path) -> None:
    """Rows for a/run.sqlite and b/run.sqlite are two traces; a collect of a third run.sqlite
    that neither path names would take one of them by its file name: which one is a guess."""
    trace = _copies(tmp_path / "t", ["baseline_chat_c4"])[0]
    labels = tmp_path / "labels.csv"
    labels.write_text(f"trace,k\na/{trace.name},4\nb/{trace.name},2\n")
    line = _one_line_error(_cli("collect", str(trace), "-o", str(tmp_path / "ds"),
                                "--labels", str(labels)))  # fmt: skip
    assert f"{trace}: no row of {labels} names its path, and lines 2 and 3 both name" in line


# --------------------------------------------------------- item 8: DuckDB's whole message


@pytest.mark.parametrize(
    ("query", "says"),
    [
        ("SELECT strt FROM kernels",
         'SQL error: Binder Error: Referenced column "strt" not found in FROM clause! '
         'Candidate bindings: "start"'),
        ("SELECT * FROM kernel",
         'Catalog Error: Table with name kernel does not exist! Did you mean "kernels"?'),
        ("SELECT 1 +",
         'Parser Error: syntax error at or near "+" (at line 1, column 10: SELECT 1 +)'),
    ],
)  # fmt: skip
def test_an_sql_error_keeps_duckdbs_whole_message_on_one_line(query: str, says: str) -> None:
    """Was cut at DuckDB's first line, before its "Candidate bindings" / "Did you mean" hint;
    the caret under the query means nothing on one line: it becomes a column number."""
    line = _one_line_error(_cli("sql", str(SAMPLE_TRACES / "spec_chat_c4_k4.sqlite"), query))
    assert says in line, line
