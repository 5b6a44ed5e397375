"""A trace with only OS runtime calls or only CPU samples gets an answer (issue 19, item 2).

nsys captures of CPU-only programs (``-t osrt``, ``--sample=cpu``) hold no NVTX range, CUDA
API call or GPU op. Their OS runtime calls (``OSRT_API``) and CPU samples
(``COMPOSITE_EVENTS``) are ingested as the ``osrt`` and ``cpu_samples`` model tables; the
process with the most OS runtime calls (else CPU samples) is analysed over the span of its
calls (else first to last sample), all of it ``unannotated``, and ``analyze`` lists its OS
runtime functions with their summed, window-clipped time. A trace with none of these still
exits 2 with one line. The traces are built in the real schema (the columns nsys 2023-2026
write, with the start/finish markers nsys adds around OS runtime tracing), and checked against
the real corpus files of this kind with figures computed straight from SQLite.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

import specnsys
from specnsys.testing import NsysExportBuilder
from specnsys.testing.builder import OSRT_FINISHED, OSRT_STARTED
from tests.conftest import CORPUS, corpus_files, json_doc
from tests.test_generic_mode import run_cli

US = 1_000


def osrt_trace(path: Path, *, samples: bool = False) -> Path:
    """Process 1: two threads with overlapping OS runtime calls (1 to 20 us) inside the
    zero-length markers of OS runtime tracing (0.5 and 30 us); process 2: one long call, so
    fewer calls. With *samples*, CPU samples of process 1 outside its calls too (the calls
    still set the window)."""
    b = NsysExportBuilder()
    b.process(1, "python3")
    b.process(2, "helper")
    b.thread(1, 1, "main")
    b.thread(1, 2, "worker")
    b.thread(2, 1, "helper")
    b.osrt(500, 500, "OS runtime libraries profiling started", event_class=OSRT_STARTED)
    b.osrt(1 * US, 5 * US, "read", pid=1, tid=1)
    b.osrt(6 * US, 20 * US, "poll", pid=1, tid=1)
    b.osrt(3 * US, 15 * US, "pthread_cond_wait", pid=1, tid=2)
    b.osrt(10 * US, 10 * US, "sched_yield", pid=1, tid=2)
    b.osrt(16 * US, 18 * US, "read", pid=1, tid=2)
    b.osrt(0, 100 * US, "read", pid=2, tid=1)
    b.osrt(30 * US, 30 * US, "OS runtime libraries profiling finished", event_class=OSRT_FINISHED)
    if samples:
        for t in (0, 25 * US, 40 * US):
            b.cpu_sample(t, pid=1, tid=1)
    return b.write(path)


#: The calls of process 1 above, by hand: first start 1 us, last end 20 us.
OSRT_WINDOW = (1 * US, 20 * US)
OSRT_BY_FUNCTION = {  # name: (calls, summed ns)
    "poll": (1, 14 * US),
    "pthread_cond_wait": (1, 12 * US),
    "read": (2, 4 * US + 2 * US),
    "sched_yield": (1, 0),
}


def samples_trace(path: Path) -> Path:
    """CPU samples only: process 1 sampled five times on two threads (2 to 9 us), process 2
    twice (0 and 20 us)."""
    b = NsysExportBuilder()
    b.process(1, "julia")
    b.thread(1, 1, "main")
    b.thread(1, 2, "gc")
    for t, tid in ((2 * US, 1), (3 * US, 1), (4 * US, 2), (7 * US, 1), (9 * US, 2)):
        b.cpu_sample(t, pid=1, tid=tid, cpu=tid)
    b.cpu_sample(0, pid=2, tid=1)
    b.cpu_sample(20 * US, pid=2, tid=1)
    return b.write(path)


def nothing_trace(path: Path) -> Path:
    """No event at all: a process, a thread, an NVTX thread-name row and the two markers of
    OS runtime tracing (not calls)."""
    b = NsysExportBuilder()
    b.process(1, "python3")
    b.thread(1, 1, "main")
    b._nvtx(0, None, 39, "main")  # NvtxThread naming row, as in the corpus
    b.osrt(500, 500, "OS runtime libraries profiling started", event_class=OSRT_STARTED)
    b.osrt(900, 900, "OS runtime libraries profiling finished", event_class=OSRT_FINISHED)
    return b.write(path)


def test_osrt_and_samples_are_model_tables_with_every_row(tmp_path: Path) -> None:
    path = osrt_trace(tmp_path / "osrt.sqlite", samples=True)
    with specnsys.open(path, use_cache=False) as trace:
        s = trace.summary
        osrt = trace.sql(
            "SELECT name, kind, pid, tid, start, \"end\", duration FROM osrt ORDER BY start, name"
        ).fetchall()
        samples = trace.sql("SELECT timestamp, pid, tid FROM cpu_samples ORDER BY 1").fetchall()
    # every source row, markers included, with names resolved and ids decoded
    assert s.source_row_counts["OSRT_API"] == len(osrt) == 8
    assert s.source_row_counts["COMPOSITE_EVENTS"] == len(samples) == 3
    kinds = [k for _, k, *_ in osrt]
    assert kinds.count("call") == 6
    assert kinds.count("profiling_started") == kinds.count("profiling_finished") == 1
    assert ("poll", "call", 1, 1, 6 * US, 20 * US, 14 * US) in osrt
    assert samples[1] == (25 * US, 1, 1)
    procs = {p["pid"]: p for p in s.processes}
    assert procs[1]["osrt_calls"] == 5 and procs[2]["osrt_calls"] == 1  # markers are not calls
    assert procs[1]["cpu_samples"] == 3
    assert s.capabilities["os_runtime"].available and "6 OS runtime" in s.capabilities[
        "os_runtime"].reason  # fmt: skip
    assert s.capabilities["cpu_samples"].available
    assert s.span_start_ns == 0 and s.span_end_ns == 100 * US  # first to last event


def test_osrt_only_trace_is_analysed_over_its_calls(tmp_path: Path) -> None:
    path = osrt_trace(tmp_path / "osrt.sqlite", samples=True)
    d = json_doc(specnsys.analyze(path, use_cache=False).to_dict())
    # the process with the most calls, from its first call start to its last call end (the
    # markers and the samples outside the calls do not stretch it)
    assert d["pid"] == 1 and d["mode"] == "generic"
    assert (d["window_start_ns"], d["window_end_ns"]) == OSRT_WINDOW
    assert d["window_source"] == "os_runtime"
    assert d["phases"]["unannotated"]["share"] == 1.0
    assert sum(r["wall_ns"] for r in d["phases"].values()) == d["window_ns"]
    osrt = d["os_runtime"]
    got = {f["name"]: (f["calls"], f["ns"]) for f in osrt["top"]}
    assert got == OSRT_BY_FUNCTION
    assert [f["name"] for f in osrt["top"]] == ["poll", "pthread_cond_wait", "read", "sched_yield"]
    assert osrt["calls"] == 5 and osrt["functions"] == 4 and osrt["threads"] == 2
    total = sum(ns for _, ns in OSRT_BY_FUNCTION.values())
    assert osrt["ns"] == total == 32 * US > d["window_ns"]  # two threads: thread time
    assert "can exceed the window" in osrt["of"]
    assert "os_runtime" not in d["not_available"]
    for key in ("p", "acceptance", "whatif", "gpu_busy_ns", "tokens"):
        assert key in d["not_available"], key


def test_osrt_calls_are_clipped_to_a_window_set_by_cuda_api_calls(tmp_path: Path) -> None:
    """CUDA API calls come before OS runtime calls in setting the window: the calls that
    straddle it count their part inside it; one wholly outside does not count."""
    b = NsysExportBuilder()
    b.process(1, "python3")
    b.thread(1, 1, "main")
    b.runtime(10 * US, 12 * US, "cudaMalloc_v3020", 1)
    b.runtime(14 * US, 16 * US, "cudaFree_v2000", 2)
    b.osrt(6 * US, 20 * US, "poll")  # 10..16 inside: 6 us
    b.osrt(15 * US, 17 * US, "read")  # 15..16 inside: 1 us
    b.osrt(1 * US, 5 * US, "read")  # before the window
    b.osrt(12 * US, 12 * US, "sched_yield")  # an instant inside
    path = b.write(tmp_path / "api.sqlite")
    d = json_doc(specnsys.analyze(path, use_cache=False).to_dict())
    assert (d["window_start_ns"], d["window_end_ns"]) == (10 * US, 16 * US)
    assert d["window_source"] == "cuda_api"
    got = {f["name"]: (f["calls"], f["ns"]) for f in d["os_runtime"]["top"]}
    assert got == {"poll": (1, 6 * US), "read": (1, 1 * US), "sched_yield": (1, 0)}
    assert d["os_runtime"]["ns"] == 7 * US


def test_samples_only_trace_is_analysed_from_first_to_last_sample(tmp_path: Path) -> None:
    d = json_doc(specnsys.analyze(samples_trace(tmp_path / "s.sqlite"), use_cache=False).to_dict())
    assert d["pid"] == 1 and d["window_source"] == "cpu_samples"
    assert (d["window_start_ns"], d["window_end_ns"]) == (2 * US, 9 * US)
    assert d["phases"]["unannotated"] == {**d["phases"]["unannotated"], "wall_ns": 7 * US,
                                          "share": 1.0}  # fmt: skip
    assert d["os_runtime"] is None
    assert d["not_available"]["os_runtime"] == "no OS runtime calls (captured without -t osrt)"


def test_cpu_only_traces_answer_every_command_and_an_empty_one_exits_2(tmp_path: Path) -> None:
    osrt = str(osrt_trace(tmp_path / "osrt.sqlite"))
    samples = str(samples_trace(tmp_path / "samples.sqlite"))
    empty = str(nothing_trace(tmp_path / "empty.sqlite"))
    lines = []
    for name, t in (("osrt", osrt), ("samples", samples), ("empty", empty)):
        lines += [
            ["analyze", t], ["analyze", t, "--json"],
            ["report", t, "-o", str(tmp_path / f"{name}.html")],
            ["plot", "phases", t, "-o", str(tmp_path / f"{name}.svg")],
            ["compare", t, t], ["phases", t],
        ]  # fmt: skip
    results = run_cli(lines)
    by = {name: results[i * 6 : i * 6 + 6] for i, name in enumerate(("osrt", "samples", "empty"))}
    for name in ("osrt", "samples"):
        for r in by[name]:
            assert r["status"] == 0, (r["argv"], r["stderr"])
            assert "error" not in r["stderr"], r["stderr"]
        text = by[name][0]["stdout"]
        assert "unannotated" in text and "100.0%" in text
        svg = (tmp_path / f"{name}.svg").read_text()
        assert "unannotated" in svg
        html = (tmp_path / f"{name}.html").read_text()
        assert 'id="analyze"' in html and "unannotated" in html
        assert "no phase moved" in by[name][4]["stdout"]  # A vs A: nothing moved
    osrt_text = by["osrt"][0]["stdout"]
    assert "(no ranges, GPU work or CUDA API calls: the span of the process's OS runtime calls)" in (
        osrt_text)  # fmt: skip
    assert "OS runtime calls: 5 calls of 4 functions on 2 threads, 0.032 ms" in osrt_text
    assert "0.014 ms  x1       poll" in osrt_text
    assert "OS runtime calls of process 1" in (tmp_path / "osrt.html").read_text()
    samples_text = by["samples"][0]["stdout"]
    assert "the process's first to last CPU sample" in samples_text
    assert "os_runtime: no OS runtime calls (captured without -t osrt)" in samples_text
    assert json.loads(by["samples"][1]["stdout"])["window_ns"] == 7 * US
    # phases says what set the window too (it gave the bare ns range only)
    assert "on the session clock: the span of the process's OS runtime calls)" in (
        by["osrt"][5]["stdout"].splitlines()[0])  # fmt: skip
    assert by["samples"][5]["stdout"].splitlines()[0].endswith(
        "on the session clock: the process's first to last CPU sample); GPU busy n/a")
    for r in by["empty"]:  # nothing at all: exit 2, one line naming every kind looked for
        assert r["status"] == 2 and r["stdout"] == "", (r["argv"], r["stdout"])
        assert r["stderr"].count("\n") == 1 and r["stderr"].startswith("specnsys: error: ")
        assert "OS runtime calls or CPU samples" in r["stderr"], r["stderr"]


# -- the real corpus: the files of this kind, against SQLite ------------------------------------


def _sqlite(path: Path, sql: str) -> tuple:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return con.execute(sql).fetchone()
    finally:
        con.close()


@pytest.mark.skipif(not corpus_files(), reason="the real corpus is not here")
def test_real_cpu_only_exports_match_sqlite() -> None:
    osrt = CORPUS / "2023.4.1_pycnvidia_report1.sqlite"
    d = json_doc(specnsys.analyze(osrt).to_dict())
    # the busiest OS runtime process: its first call start to last call end, all its calls
    pid, lo, hi, calls, ns = _sqlite(
        osrt,
        """SELECT (globalTid >> 24) & 16777215 AS pid, min(start), max("end"), count(*),
                  sum("end" - start)
           FROM OSRT_API WHERE eventClass = 27 GROUP BY 1 ORDER BY count(*) DESC LIMIT 1""",
    )
    assert (d["pid"], d["window_start_ns"], d["window_end_ns"]) == (pid, lo, hi)
    assert d["window_source"] == "os_runtime" and d["phases"]["unannotated"]["share"] == 1.0
    assert (d["os_runtime"]["calls"], d["os_runtime"]["ns"]) == (calls, ns)
    top_name, top_ns = _sqlite(
        osrt,
        """SELECT s.value, sum(o."end" - o.start) FROM OSRT_API o JOIN StringIds s
           ON s.id = o.nameId WHERE o.eventClass = 27 GROUP BY 1 ORDER BY 2 DESC LIMIT 1""",
    )
    assert d["os_runtime"]["top"][0] == {**d["os_runtime"]["top"][0], "name": top_name,
                                         "ns": top_ns}  # fmt: skip
    sampled = CORPUS / "2026.2.1_jacc_cgtrace.sqlite"
    d = json_doc(specnsys.analyze(sampled).to_dict())
    pid, lo, hi = _sqlite(
        sampled,
        """SELECT (globalTid >> 24) & 16777215, min(start), max(start) FROM COMPOSITE_EVENTS
           GROUP BY 1 ORDER BY count(*) DESC LIMIT 1""",
    )
    assert (d["pid"], d["window_start_ns"], d["window_end_ns"]) == (pid, lo, hi)
    assert d["window_source"] == "cpu_samples"
    assert sum(r["wall_ns"] for r in d["phases"].values()) == d["window_ns"] == hi - lo
