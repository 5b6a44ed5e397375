"""The normalized model on small exports built in the test, with hand-checked answers."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pyarrow as pa
import pytest

import specnsys
from specnsys.ingest.arrow_values import to_arrow
from specnsys.ingest.model import MODEL_TABLES
from specnsys.testing import NsysExportBuilder, global_pid, global_tid


def _spec_trace(tmp_path: Path, **builder_kw: object) -> Path:
    b = NsysExportBuilder(**builder_kw)  # type: ignore[arg-type]
    b.process(4242, "python3")
    b.thread(4242, 4242, "python3")
    b.thread(4242, 4250, "pt_worker")
    b.domain(1, "specnsys", pid=4242, tid=4242)
    b.category(1, 1, "decode-loop", pid=4242, tid=4242)
    # decode [100, 1000] > draft [110, 400] > (zero-length kv at 200) ; verify [400, 900]
    b.push_pop(100, 1000, "decode", pid=4242, tid=4242, domain_id=1, category=1)
    b.push_pop(110, 400, "draft", pid=4242, tid=4242, domain_id=1)
    b.push_pop(200, 200, "kv", pid=4242, tid=4242, domain_id=1)
    b.push_pop(400, 900, "verify", pid=4242, tid=4242, domain_id=1)  # back-to-back sibling
    b.push_pop(450, 800, "sample", pid=4242, tid=4242, domain_id=1, registered=False)
    b.push_pop(1200, None, "decode", pid=4242, tid=4242, domain_id=1)  # never closed
    b.push_pop(50, 60, "other-domain", pid=4242, tid=4242)  # default domain, own stack
    b.start_end(90, 1500, "request", pid=4242, tid=4242, domain_id=1, end_tid=4250,
                payload_int=7)
    b.mark(950, "accepted", pid=4242, tid=4242, domain_id=1, payload_int=3)
    b.mark(951, "alpha", pid=4242, tid=4242, domain_id=1, payload_float=0.75)
    b.runtime(120, 130, "cudaLaunchKernel_v7000", 11, pid=4242, tid=4242)
    b.runtime(120, 130, "cudaLaunchKernel", 11, pid=4242, tid=4242, event_class=67)
    b.runtime(410, 420, "cudaGetDeviceProperties_v2_v12000", 12, pid=4242, tid=4242)
    b.kernel(150, 390, "draft_gemm", 11, pid=4242, grid=(4, 2, 1), demangled="void draft_gemm<float>(float*)")
    b.memcpy(500, 520, 4096, 12, pid=4242, copy_kind=2, src_kind=2, dst_kind=0)
    b.memset(530, 540, 1024, 12, pid=4242)
    b.sync(600, 700, 12, pid=4242)
    b.gpu(0)
    b.gpu_metric(1000, 0, 5, "DRAM Read Bandwidth [Throughput %]", 42)
    return b.write(tmp_path / "spec.sqlite")


@pytest.fixture
def trace(tmp_path: Path) -> Iterator[specnsys.Trace]:
    with specnsys.open(_spec_trace(tmp_path)) as t:
        yield t


def _rows(trace: specnsys.Trace, sql: str) -> list[tuple]:
    return trace.sql(sql).fetchall()


def test_ids_are_decoded_from_nsys_global_ids(trace: specnsys.Trace) -> None:
    assert _rows(trace, "SELECT pid, tid, global_tid, name FROM threads ORDER BY tid") == [
        (4242, 4242, global_tid(4242, 4242), "python3"),
        (4242, 4250, global_tid(4242, 4250), "pt_worker"),
    ]
    assert _rows(trace, "SELECT DISTINCT pid, global_pid FROM kernels") == [
        (4242, global_pid(4242))
    ]
    assert _rows(trace, "SELECT pid, name FROM processes") == [(4242, "python3")]


def test_nvtx_text_domain_category_and_payloads(trace: specnsys.Trace) -> None:
    rows = dict(
        (r[0], r[1:])
        for r in _rows(
            trace,
            "SELECT text, kind, domain, category, payload_int, payload_float, end_tid "
            "FROM nvtx WHERE kind IN ('start_end', 'mark')",
        )
    )
    assert rows["request"] == ("start_end", "specnsys", None, 7, None, 4250)
    assert rows["accepted"] == ("mark", "specnsys", None, 3, None, None)
    assert rows["alpha"] == ("mark", "specnsys", None, None, 0.75, None)
    decode = _rows(trace, "SELECT domain, category FROM nvtx WHERE text = 'decode' AND \"end\" = 1000")
    assert decode == [("specnsys", "decode-loop")]
    # inline (unregistered) text resolves like registered text
    assert _rows(trace, "SELECT count(*) FROM nvtx WHERE text = 'sample'") == [(1,)]
    # the default domain has no name
    assert _rows(trace, "SELECT domain_id, domain FROM nvtx WHERE text = 'other-domain'") == [(0, None)]


def test_nvtx_kinds_cover_every_row(trace: specnsys.Trace) -> None:
    kinds = dict(_rows(trace, "SELECT kind, count(*) FROM nvtx GROUP BY kind"))
    assert kinds == {
        "domain_create": 1, "category": 1, "push_pop": 7, "start_end": 1, "mark": 2,
    }


def test_push_pop_depth_and_parent(trace: specnsys.Trace) -> None:
    got = {
        (text, start): (depth, parent_text)
        for text, start, depth, parent_text in _rows(
            trace,
            "SELECT c.text, c.start, c.depth, p.text FROM nvtx c "
            "LEFT JOIN nvtx p ON p.id = c.parent WHERE c.kind = 'push_pop'",
        )
    }
    assert got == {
        ("decode", 100): (0, None),
        ("draft", 110): (1, "decode"),
        ("kv", 200): (2, "draft"),
        ("verify", 400): (1, "decode"),  # starts where draft ends: a sibling, not a child
        ("sample", 450): (2, "verify"),
        ("decode", 1200): (0, None),  # unclosed: end stays NULL, depth still known
        ("other-domain", 50): (0, None),
    }
    assert _rows(trace, "SELECT \"end\", duration FROM nvtx WHERE start = 1200") == [(None, None)]


def test_runtime_names_and_backtrace_rows(trace: specnsys.Trace) -> None:
    rows = _rows(
        trace,
        "SELECT name, raw_name, event_class, is_backtrace FROM runtime ORDER BY start, event_class",
    )
    assert rows == [
        ("cudaLaunchKernel", "cudaLaunchKernel_v7000", 0, False),
        ("cudaLaunchKernel", "cudaLaunchKernel", 67, True),
        ("cudaGetDeviceProperties", "cudaGetDeviceProperties_v2_v12000", 0, False),
    ]


@pytest.mark.parametrize("use_cache", [False, True], ids=["in-memory", "cached"])
def test_names_and_ids_that_resolve_to_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, use_cache: bool
) -> None:
    """Runtime calls, kernels and NVTX rows are normalized in Arrow (not SQL): a string id
    that is not in StringIds (a negative one too), a NULL string id and a NULL global id must
    give NULLs as the LEFT JOIN and the SQL arithmetic do, and each slice must strip version
    suffixes of its own names (slices of 2 rows here, so the names of one slice are not those
    of the next). Names are dictionary-coded per slice; the cached model (Parquet, where a
    dictionary may hold no NULL) and the in-memory one must read back the same."""
    import sqlite3

    import specnsys.ingest.sqlite_reader as reader

    monkeypatch.setattr(reader, "SLICE_ROWS", 2)
    b = NsysExportBuilder()
    b.thread(7, 7, "main")
    b.runtime(0, 5, "cudaLaunchKernel_v7000", 1, pid=7, tid=7)
    b.runtime(10, 15, "cudaMemcpyAsync_v3020_v2", 2, pid=7, tid=7)
    b.runtime(20, 25, "cudaStreamSynchronize", 3, pid=7, tid=7)
    b.runtime(30, 35, "cudaLaunchKernel_v7000", 4, pid=7, tid=7)
    b.runtime(40, 45, "lost", 5, pid=7, tid=7)
    for i in range(1, 5):
        b.kernel(100 * i, 100 * i + 50, f"k{i}", i, pid=7)
    for i, text in enumerate(["a", "b", "c", "d", "e"]):  # every text by id: coded slices
        b.push_pop(1000 + 10 * i, 1005 + 10 * i, text, pid=7, tid=7)
    path = b.write(tmp_path / "dangling.sqlite")
    with sqlite3.connect(path) as db:
        db.execute("UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET nameId = 999999 WHERE correlationId = 3")
        db.execute("UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET nameId = -7, globalTid = NULL "
                   "WHERE correlationId = 5")
        db.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET shortName = -1, demangledName = 123456, "
                   "globalPid = NULL WHERE correlationId = 2")
        db.execute("UPDATE NVTX_EVENTS SET textId = 999999 WHERE start = 1010")
        db.execute("UPDATE NVTX_EVENTS SET textId = NULL WHERE start = 1030")
        db.execute("UPDATE NVTX_EVENTS SET textId = -3 WHERE start IN (1020, 1040)")
    with specnsys.open(path, use_cache=use_cache) as t:
        texts = t.sql("SELECT start, text FROM nvtx WHERE start >= 1000 ORDER BY start").fetchall()
        polars_texts = t.table("nvtx").filter(pl.col("start") >= 1000).collect()
        runtime = t.sql(
            "SELECT correlation_id, name, raw_name, pid, tid, duration FROM runtime"
        ).fetchall()
        kernels = t.sql(
            "SELECT correlation_id, short_name, demangled_name, pid, duration FROM kernels"
        ).fetchall()
    assert runtime == [
        (1, "cudaLaunchKernel", "cudaLaunchKernel_v7000", 7, 7, 5),
        (2, "cudaMemcpyAsync", "cudaMemcpyAsync_v3020_v2", 7, 7, 5),
        (3, None, None, 7, 7, 5),
        (4, "cudaLaunchKernel", "cudaLaunchKernel_v7000", 7, 7, 5),
        (5, None, None, None, None, 5),
    ]
    assert [(k[0], k[1], k[3]) for k in kernels] == [(1, "k1", 7), (2, None, None), (3, "k3", 7),
                                                    (4, "k4", 7)]
    assert kernels[1][2] is None and {k[4] for k in kernels} == {50}
    assert texts == [(1000, "a"), (1010, None), (1020, None), (1030, None), (1040, None)]
    assert polars_texts.schema["text"] == pl.String
    assert polars_texts.sort("start")["text"].to_list() == [t for _, t in texts]


def test_gpu_activity_tables(trace: specnsys.Trace) -> None:
    assert _rows(
        trace,
        "SELECT short_name, demangled_name, duration, grid_x, grid_y, block_x, correlation_id, "
        "stream_id FROM kernels",
    ) == [("draft_gemm", "void draft_gemm<float>(float*)", 240, 4, 2, 128, 11, 7)]
    assert _rows(trace, "SELECT bytes, copy_kind, copy_kind_name, src_kind, dst_kind FROM memcpy") == [
        (4096, 2, "DtoH", "device", "pageable")
    ]
    assert _rows(trace, "SELECT bytes, mem_kind FROM memset") == [(1024, "device")]
    assert _rows(trace, "SELECT duration, sync_type, correlation_id FROM sync") == [(100, 3, 12)]
    assert _rows(trace, "SELECT device_id, metric_name, value FROM gpu_metrics") == [
        (0, "DRAM Read Bandwidth [Throughput %]", 42)
    ]
    assert _rows(trace, "SELECT device_id, name, sm_count, memory_bandwidth FROM gpus") == [
        (0, "NVIDIA H200", 132, 4_800_000_000_000)
    ]


def test_sql_and_polars_read_the_same_data(trace: specnsys.Trace) -> None:
    for name in MODEL_TABLES:
        via_sql = pl.from_arrow(to_arrow(trace.sql(f"SELECT * FROM {name}")))
        assert isinstance(via_sql, pl.DataFrame), name
        via_polars = trace.table(name).collect()
        assert via_sql.equals(via_polars), name


def test_summary_and_capabilities(trace: specnsys.Trace) -> None:
    s = trace.summary
    assert s.version.product_version == "2026.2.1.210"
    assert s.version.schema_version == "3.25.0"
    assert s.span_start_ns == 50 and s.span_end_ns == 1500
    caps = {k: c.available for k, c in s.capabilities.items()}
    assert caps["phase_attribution"] and caps["specnsys_phases"] and caps["gpu_metrics"]
    assert caps["acceptance_marks"] and caps["gpu_bandwidth_spec"]
    assert s.processes == [
        {"pid": 4242, "name": "python3", "threads": 2, "nvtx_events": 12,
         "runtime_calls": 3, "kernels": 1, "osrt_calls": 0, "cpu_samples": 0}
    ]
    assert not caps["os_runtime"] and not caps["cpu_samples"]


def test_summary_nvtx_facts_equal_one_query_each(tmp_path: Path, isolated_cache: Path) -> None:
    """The summary reads the NVTX kinds, domains and specnsys counts in one grouped query
    (summary._NvtxGroups): each equals its own query on the model, on a trace with several
    domains, rows without a domain or text, proposed/accepted marks in and out of the
    specnsys domain, and a second creation of the domain."""
    b = NsysExportBuilder()
    b.process(7, "python3")
    b.thread(7, 7, "python3")
    b.domain(1, "specnsys", pid=7, tid=7)
    b.domain(2, "other", pid=7, tid=7)
    b.domain(3, "specnsys", pid=7, tid=7)  # created twice
    b.push_pop(100, 200, "draft", pid=7, tid=7, domain_id=1)
    b.start_end(100, 300, "request", pid=7, tid=7, domain_id=1)
    b.push_pop(110, 120, "draft", pid=7, tid=7, domain_id=2)
    b.push_pop(130, 140, "unnamed-domain", pid=7, tid=7)
    b.mark(150, "accepted", pid=7, tid=7, domain_id=1, payload_int=2)
    b.mark(151, "proposed", pid=7, tid=7, domain_id=1, payload_int=4)
    b.mark(152, "accepted", pid=7, tid=7, domain_id=2, payload_int=1)
    b.mark(153, "tokens", pid=7, tid=7, domain_id=1, payload_int=1)
    with specnsys.open(b.write(tmp_path / "groups.sqlite")) as trace:
        con, s = trace.connection, trace.summary
        kinds = con.execute("SELECT kind, count(*) FROM nvtx GROUP BY kind ORDER BY kind")
        assert list(s.nvtx_kinds.items()) == [(str(k), n) for k, n in kinds.fetchall()]
        domains = con.execute(
            "SELECT DISTINCT domain FROM nvtx WHERE domain IS NOT NULL ORDER BY domain"
        ).fetchall()
        assert s.nvtx_domains == [d for (d,) in domains] and len(s.nvtx_domains) == 2
        ranges, marks = con.execute(
            "SELECT count(*) FILTER (WHERE kind IN ('push_pop', 'start_end') "
            "AND domain = 'specnsys'), count(*) FILTER (WHERE kind = 'mark' "
            "AND domain = 'specnsys' AND text IN ('proposed', 'accepted')) FROM nvtx"
        ).fetchall()[0]
    assert (ranges, marks) == (2, 2)
    assert s.capabilities["specnsys_phases"].reason == f"{ranges} ranges in the specnsys domain"
    assert s.capabilities["acceptance_marks"].reason == f"{marks} proposed/accepted marks"


@pytest.mark.parametrize("use_cache", [True, False])
def test_summary_row_counts_are_the_models_rows(
    tmp_path: Path, isolated_cache: Path, use_cache: bool
) -> None:
    """The build counts the rows it writes and the summary takes them (a statement fewer):
    each equals a count of the model table, built into the cache or in memory."""
    with specnsys.open(_spec_trace(tmp_path), use_cache=use_cache) as t:
        counted = {
            name: t.connection.execute(f"SELECT count(*) FROM {name}").fetchall()[0][0]
            for name in MODEL_TABLES
        }
        assert t.summary.row_counts == counted
        assert counted["nvtx"] > 0 and counted["kernels"] == 1


def test_missing_tables_give_typed_empty_tables(tmp_path: Path) -> None:
    b = NsysExportBuilder()
    b.thread(7, 7, "main")
    b.push_pop(0, 10, "only-nvtx", pid=7, tid=7)
    with specnsys.open(b.write(tmp_path / "nvtx_only.sqlite")) as t:
        assert t.summary.row_counts["kernels"] == 0
        schema = dict(t.table("kernels").collect_schema())
        assert schema["start"] == pl.Int64 and schema["short_name"] == pl.String
        assert not t.summary.capabilities["gpu_activity"].available
        assert "no GPU activity" in t.summary.capabilities["gpu_activity"].reason


def test_legacy_layout_without_metadata(tmp_path: Path) -> None:
    b = NsysExportBuilder(legacy=True)
    b.thread(3, 3, "main")
    b.gpu(1, "Quadro RTX 8000")
    b.runtime(0, 5, "cudaMalloc_v3020", 1, pid=3, tid=3)
    with specnsys.open(b.write(tmp_path / "old.sqlite")) as t:
        assert t.summary.version.product_version is None
        assert "no version recorded" in t.summary.version.label
        assert t.sql("SELECT device_id, name, memory_bandwidth FROM gpus").fetchall() == [
            (1, "Quadro RTX 8000", None)
        ]


def test_same_correlation_id_in_two_processes_stays_apart(tmp_path: Path) -> None:
    b = NsysExportBuilder()
    for pid in (100, 200):
        b.thread(pid, pid, "worker")
        b.runtime(10, 20, "cudaLaunchKernel_v7000", 1, pid=pid, tid=pid)
        b.kernel(30, 40, f"k{pid}", 1, pid=pid)
    with specnsys.open(b.write(tmp_path / "two.sqlite")) as t:
        joined = t.sql(
            "SELECT k.short_name, r.pid FROM kernels k JOIN runtime r "
            "ON r.correlation_id = k.correlation_id AND r.pid = k.pid ORDER BY 1"
        ).fetchall()
        assert joined == [("k100", 100), ("k200", 200)]


def test_invalid_utf8_text_is_replaced_with_a_warning(tmp_path: Path, isolated_cache: Path) -> None:
    """Replaced with U+FFFD and counted in the summary, so the data notes say it on every
    open, the cold one that read it and the warm ones after (only the cold one said it)."""
    import sqlite3

    from specnsys.ingest.quality import build_warnings

    b = NsysExportBuilder()
    b.thread(1, 1, "main")
    b.push_pop(0, 10, "fine")
    b.push_pop(20, 30, "broken")
    path = b.write(tmp_path / "utf8.sqlite")
    con = sqlite3.connect(path)
    con.execute("UPDATE StringIds SET value = CAST(X'66ff6f' AS TEXT) WHERE value = 'broken'")
    con.commit()
    con.close()
    for cold in (True, False):
        with specnsys.open(path) as trace:
            assert trace.from_cache is not cold
            assert trace.summary.invalid_utf8 == {"StringIds.value": 1}
            assert build_warnings(trace) == [
                "1 value(s) of StringIds.value are not valid UTF-8; invalid bytes shown as U+FFFD"
            ]
            texts = sorted(r[0] for r in trace.sql("SELECT text FROM nvtx").fetchall())
            assert texts == ["fine", "f\ufffdo"]


def _model_frames(path: Path, **open_kw: object) -> dict[str, pl.DataFrame]:
    with specnsys.open(path, **open_kw) as t:  # type: ignore[arg-type]
        return {name: t.table(name).collect() for name in MODEL_TABLES}


def test_sliced_streaming_build_equals_a_whole_table_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, isolated_cache: Path
) -> None:
    """Large exports are read in rowid slices, normalized per slice and written as they come;
    with slices of 3 rows every path of that (many slices, several in flight, out-of-order
    completion, the NVTX nesting across slice edges) must give the model of one whole read,
    in the same row order, through the cache and in memory alike."""
    import specnsys.ingest.sqlite_reader as reader

    path = _spec_trace(tmp_path)
    whole = _model_frames(path, use_cache=False)
    monkeypatch.setattr(reader, "SLICE_ROWS", 3)
    for name in ("threads", "nvtx", "runtime"):
        assert whole[name].height > 0, name
    for use_cache in (True, False):
        sliced = _model_frames(path, use_cache=use_cache)
        for name in MODEL_TABLES:
            assert sliced[name].equals(whole[name]), (name, use_cache)
    assert whole["nvtx"]["id"].is_sorted()


def test_nvtx_nesting_of_many_ranges_matches_a_stack_walk(tmp_path: Path) -> None:
    """Depth and parent (computed in Polars for speed) against a direct stack walk, on
    thousands of ranges with back-to-back siblings, zero-length and unclosed ranges, two
    threads and two domains."""
    import random

    rng = random.Random(7)
    b = NsysExportBuilder()
    b.thread(1, 1, "main")
    b.thread(1, 2, "worker")
    b.domain(1, "specnsys", pid=1, tid=1)
    expected: dict[tuple[int, int, int], tuple[int, int | None]] = {}

    def emit(tid: int, domain: int, start: int, end: int, depth: int, parent: int | None) -> None:
        b.push_pop(start, end, f"r{len(expected)}", pid=1, tid=tid, domain_id=domain)
        expected[(tid, domain, len(expected))] = (depth, parent)

    def nest(tid: int, domain: int, lo: int, hi: int, depth: int, parent: int | None) -> None:
        t = lo
        while t < hi and depth < 5:
            length = rng.choice([0, 1, 5, 40, 200])
            end = min(hi, t + length)
            me = len(expected)
            emit(tid, domain, t, end, depth, parent)
            if end - t > 2:
                nest(tid, domain, t, end, depth + 1, me)
            # back-to-back siblings share an instant; after a zero-length range a sibling
            # starting at the same instant would be its parent (outer = longer at one start)
            t = end + rng.choice([0, 0, 3]) + (1 if end == t else 0)

    for tid in (1, 2):
        for domain in (0, 1):
            nest(tid, domain, 0, 5_000, 0, None)
    b.push_pop(6_000, None, "open", pid=1, tid=1, domain_id=0)  # unclosed: depth 0
    path = b.write(tmp_path / "nest.sqlite")
    with specnsys.open(path) as t:
        rows = t.sql(
            "SELECT text, depth, parent FROM nvtx WHERE kind = 'push_pop' ORDER BY id"
        ).fetchall()
        ids = {text: i for i, (text, _, _) in enumerate(rows)}
        first_id = t.sql("SELECT min(id) FROM nvtx WHERE kind = 'push_pop'").fetchall()[0][0]
    assert len(rows) == len(expected) + 1 > 2000
    for (_, _, index), (depth, parent) in expected.items():
        text, got_depth, got_parent = rows[index]
        assert text == f"r{index}"
        assert got_depth == depth, text
        assert got_parent == (None if parent is None else first_id + ids[f"r{parent}"]), text
    assert rows[-1][1:] == (0, None)


def test_analysis_connection_is_quiet_and_bounded(
    trace: specnsys.Trace, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """No progress bar (it would land in --json output), spills never go to the working
    directory, and memory is limited (SPECNSYS_MEMORY_LIMIT overrides the default)."""
    con = trace.connection
    settings = dict(
        con.execute(
            "SELECT name, value FROM duckdb_settings() WHERE name IN "
            "('enable_progress_bar', 'temp_directory', 'memory_limit')"
        ).fetchall()
    )
    assert settings["enable_progress_bar"] == "false"
    assert settings["temp_directory"].startswith(tempfile.gettempdir())
    monkeypatch.setenv("SPECNSYS_MEMORY_LIMIT", "3GB")
    (tmp_path / "other").mkdir()
    with specnsys.open(_spec_trace(tmp_path / "other")) as t:
        limit = t.connection.execute("SELECT current_setting('memory_limit')").fetchall()[0][0]
    assert limit.startswith("2.7") and "GiB" in limit  # 3 GB = 2.79 GiB


def test_analysis_connection_hands_freed_memory_back(trace: specnsys.Trace) -> None:
    """DuckDB's allocator is flushed after every task past 4 MB, by background threads: with
    its default (128 MB) the phase ranges' query of the 2M-kernel bench export left 300 MB
    resident after its frame was dropped (the RSS itself is measured by bench/scale.py)."""
    settings = dict(
        trace.connection.execute(
            "SELECT name, value FROM duckdb_settings() WHERE name IN "
            "('allocator_flush_threshold', 'allocator_background_threads')"
        ).fetchall()
    )
    assert settings == {
        "allocator_flush_threshold": "4MB", "allocator_background_threads": "true"
    }, settings


def test_analysis_connection_runs_asof_joins_as_asof_joins(trace: specnsys.Trace) -> None:
    """An ASOF join with a left side DuckDB estimates small stays an ASOF join: as a nested
    loop over both sides (DuckDB's choice under ``asof_loop_join_threshold`` rows, and its
    estimate of a CTE over the phase ranges is often ~15 rows), the decode steps' ASOF join
    took 82 s on the 2M-kernel bench export's 219k ranges x 73k steps, against 0.7 s."""
    plan = "\n".join(
        str(row[1])
        for row in trace.connection.execute(
            "EXPLAIN SELECT count(*) FROM (SELECT range AS s FROM range(10)) a "
            "ASOF JOIN (SELECT range AS s FROM range(100000)) b ON a.s >= b.s"
        ).fetchall()
    )
    assert "ASOF_JOIN" in plan.upper().replace(" ", "_"), plan
    assert "NESTED_LOOP" not in plan.upper().replace(" ", "_"), plan


@pytest.mark.parametrize("slice_rows", [None, 700])
def test_model_rows_keep_the_export_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, isolated_cache: Path, slice_rows: int | None
) -> None:
    """Each model table lists its rows in the export's rowid order, whatever the slicing:
    start times are scrambled here so that any reordering by the per-slice joins (names,
    strings, nesting) shows. DuckDB running a slice's query on several threads moved rows
    of 17 real exports' runtime/kernel/NVTX tables, differently from run to run."""
    import random

    import specnsys.ingest.sqlite_reader as reader

    if slice_rows is not None:
        monkeypatch.setattr(reader, "SLICE_ROWS", slice_rows)
    rng = random.Random(3)
    b = NsysExportBuilder()
    b.thread(7, 7, "main")
    names = ["cudaLaunchKernel_v7000", "cudaMemcpyAsync_v3020", "cudaStreamSynchronize"]
    starts = rng.sample(range(0, 10_000_000, 7), 5000)
    for i, start in enumerate(starts):
        b.runtime(start, start + 5, rng.choice(names), i, pid=7, tid=7)
        b.kernel(start + 10, start + 20, f"k{i % 13}", i, pid=7)
        b.push_pop(start, start + 3, f"r{i % 5}", pid=7, tid=7)
    path = b.write(tmp_path / "scrambled.sqlite")
    with specnsys.open(path) as t:
        for name in ("runtime", "kernels"):
            got = t.table(name).select("correlation_id").collect().to_series().to_list()
            assert got == list(range(len(starts))), name
        nvtx = t.table("nvtx").filter(pl.col("kind") == "push_pop").collect()
        assert nvtx["start"].to_list() == starts


def test_column_types_never_depend_on_the_first_rows(tmp_path: Path) -> None:
    """connectorx infers each column's Arrow type from the first row it reads; the reader pins
    them with a typed first row instead. Thousands of NULLs before the first text, real or
    integer value (and values of the wrong storage class, as SQLite allows) must come back
    with the declared kind's type, NULLs as NULL and numbers as SQLite's CAST gives them; a
    text that holds no number and bytes in a numeric column are NULL, and counted (SQLite's
    CAST makes them 0: a mark payload 'lots' counted as 0 tokens, issue 30)."""
    import sqlite3

    from specnsys.ingest.sqlite_reader import RawColumn, SqliteExport

    path = tmp_path / "late.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE t (s TEXT, r REAL, i INTEGER, a INTEGER, b INTEGER)")
    rows: list[tuple[object, ...]] = [(None, None, None, None, None)] * 5000
    rows += [("x", 1.5, 3, None, 9), (7, 2, "zz", 4, None), (None, None, None, None, None)]
    rows += [(None, None, 2.5, b"\x01", None)]  # a real and a blob in integer columns
    con.executemany("INSERT INTO t VALUES (?, ?, ?, ?, ?)", rows)
    con.commit()
    con.close()
    columns = [
        RawColumn("s", "text"),
        RawColumn("r", "real"),
        RawColumn("i"),
        RawColumn("ab", "int", ("a", "b", "missing")),  # SQLite's COALESCE of those present
        RawColumn("absent", "real"),
    ]
    with SqliteExport(path) as export:
        (got,) = export.read_tables([("t", columns, True)])
        (few,) = export.read_tables([("t", columns, False)], where="i IS NOT NULL")
    assert got.schema.types == [pa.int64(), pa.string(), pa.float64(), pa.int64(), pa.int64(), pa.float64()]
    assert got.num_rows == 5004 and got.column("__rowid").to_pylist()[:2] == [1, 2]
    tail = got.slice(5000).to_pylist()
    assert [(r["s"], r["r"], r["i"], r["ab"], r["absent"]) for r in tail] == [
        ("x", 1.5, 3, 9, None), ("7", 2.0, None, 4, None), (None, None, None, None, None),
        (None, None, 2, None, None),
    ]
    # counted once per whole-table read (the filtered read of the same rows adds nothing)
    assert export.inexact_values() == {"t.i": 1, "t.a/b": 1}
    assert got.slice(0, 5000).column("s").null_count == 5000
    assert few.column("i").to_pylist() == [3, None, 2] and few.column_names[0] == "s"


def test_export_path_with_uri_characters_opens(tmp_path: Path) -> None:
    """The bulk reader gets the export as a percent-encoded read-only URI inside another
    connection string: spaces, %, ?, # and non-ASCII letters in the folder and file names must
    reach SQLite intact (a mangled name is a missing file, or a new empty one)."""
    import shutil

    sample = Path(__file__).resolve().parents[1] / "sample_traces" / "spec_chat_c4_k4.sqlite"
    odd = tmp_path / "we ird%25 dir?#ü" / "t %3F?#é.sqlite"
    odd.parent.mkdir()
    shutil.copyfile(sample, odd)
    before = sorted(p.name for p in odd.parent.iterdir())
    with specnsys.open(odd, use_cache=False) as got, specnsys.open(sample, use_cache=False) as ref:
        assert got.summary.row_counts == ref.summary.row_counts
        assert got.summary.row_counts["kernels"] + got.summary.row_counts["nvtx"] > 0
    assert sorted(p.name for p in odd.parent.iterdir()) == before


def test_multi_column_lookup_matches_sql_join_semantics() -> None:
    """NVTX domain and category names are looked up in Arrow on two and three key columns,
    as the SQL joins did: the pid by IS NOT DISTINCT FROM (a NULL pid finds the NULL-pid
    definition), the category id by = (a NULL matches nothing, not even a NULL-id row)."""
    from specnsys.ingest.arrow_values import arrow_values, lookup_by_keys

    def ints(*v: int | None) -> pa.Array:
        return arrow_values(list(v), pl.Int64)

    table_pid, table_dom, table_cat = ints(1, 1, None, 2), ints(0, 5, 0, 0), ints(3, None, 3, 3)
    names = arrow_values(["a", "b", "c", "d"], pl.String)
    pid, dom, cat = ints(1, 1, None, 2, 2, 9, 1), ints(0, 5, 0, 0, 7, 0, 5), ints(3, None, 3, 3, 3, 3, 4)
    keys = [(pid, table_pid, True), (dom, table_dom, True), (cat, table_cat, False)]
    got = lookup_by_keys(keys, names)
    assert got.to_pylist() == ["a", None, "c", "d", None, None, None]
    two = lookup_by_keys([(pid, table_pid, True), (dom, table_dom, True)], names)
    assert two.to_pylist()[:4] == ["a", "b", "c", "d"]
