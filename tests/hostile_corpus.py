"""A corpus of hostile and broken nsys exports, generated (never stored) for the reliability tests.

Each maker writes one file into a folder and returns its path. They are built with
:class:`~specnsys.testing.NsysExportBuilder` where the shape is an nsys shape with bad values,
and with raw ``sqlite3`` where the shape itself is wrong (tables with nsys names and other
columns, NULLs in NOT NULL columns, text in integer columns). The fuzz target (``fuzz/``) uses
the same files as its seed corpus.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

from specnsys.testing import NsysExportBuilder
from specnsys.testing.builder import global_pid, global_tid

PHASE_DOMAIN = 1


def _builder() -> NsysExportBuilder:
    b = NsysExportBuilder()
    b.thread(1, 1, "main")
    b.process(1, "python")
    b.domain(PHASE_DOMAIN, "specnsys")
    return b


def _phase(b: NsysExportBuilder, start: int, end: int | None, name: str, **kw: object) -> None:
    b.push_pop(start, end, name, domain_id=PHASE_DOMAIN, **kw)


def _launch(b: NsysExportBuilder, t: int, corr: int, k_start: int, k_end: int) -> None:
    b.runtime(t, t + 2, "cudaLaunchKernel_v7000", corr)
    b.kernel(k_start, k_end, "gemm", corr)


def good_loop(folder: Path, steps: int = 20, name: str = "good_loop.sqlite") -> Path:
    """A well-formed decode loop (the control case, and a fuzz seed)."""
    b = _builder()
    b.gpu(0)
    b.start_end(0, steps * 100, "request", domain_id=PHASE_DOMAIN)
    for i in range(steps):
        t = i * 100
        _phase(b, t, t + 90, "decode")
        _phase(b, t + 5, t + 60, "forward")
        _launch(b, t + 6, i, t + 10, t + 55)
        _phase(b, t + 60, t + 80, "sample")
        b.mark(t + 85, "accepted", domain_id=PHASE_DOMAIN, payload_int=i % 4)
    return b.write(folder / name)


def _raw(path: Path, statements: list[str], rows: dict[str, list[tuple]]) -> Path:
    path.unlink(missing_ok=True)
    con = sqlite3.connect(path)
    try:
        for sql in statements:
            con.execute(sql)
        for table, table_rows in rows.items():
            marks = ", ".join("?" * len(table_rows[0]))
            con.executemany(f'INSERT INTO "{table}" VALUES ({marks})', table_rows)
        con.commit()
    finally:
        con.close()
    return path


def wrong_columns(folder: Path) -> Path:
    """nsys table names whose columns are not nsys's (an export of some other tool)."""
    return _raw(
        folder / "wrong_columns.sqlite",
        [
            "CREATE TABLE StringIds (id INTEGER, value TEXT)",
            "CREATE TABLE NVTX_EVENTS (a INTEGER, b TEXT)",
            "CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (foo TEXT, bar REAL)",
            "CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (x BLOB)",
            "CREATE TABLE ThreadNames (who TEXT)",
            "CREATE TABLE TARGET_INFO_GPU (name TEXT)",
        ],
        {
            "StringIds": [(1, "x")],
            "NVTX_EVENTS": [(1, "x"), (2, None)],
            "CUPTI_ACTIVITY_KIND_KERNEL": [("k", 1.5)],
            "CUPTI_ACTIVITY_KIND_RUNTIME": [(b"\x00\x01",)],
            "ThreadNames": [("main",)],
            "TARGET_INFO_GPU": [("H200",)],
        },
    )


def stringids_wrong_columns(folder: Path) -> Path:
    """StringIds without its id/value columns: names cannot be resolved at all."""
    return _raw(
        folder / "stringids_wrong_columns.sqlite",
        ["CREATE TABLE StringIds (a INTEGER, b TEXT)", "CREATE TABLE ThreadNames (nameId INT)"],
        {"StringIds": [(1, "x")], "ThreadNames": [(1,)]},
    )


def wrong_types(folder: Path) -> Path:
    """Right column names, wrong value types: text and blobs where nsys writes integers."""
    tid = global_tid(1, 1)
    return _raw(
        folder / "wrong_types.sqlite",
        [
            "CREATE TABLE StringIds (id INTEGER, value TEXT)",
            'CREATE TABLE NVTX_EVENTS (start, "end", eventType, text, globalTid, domainId, textId)',
            'CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start, "end", correlationId, globalPid, '
            "shortName, deviceId, streamId)",
            'CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start, "end", correlationId, globalTid, '
            "nameId, eventClass)",
        ],
        {
            "StringIds": [(1, "forward"), ("two", "decode"), (3.5, b"\xff\xfe")],
            "NVTX_EVENTS": [
                ("abc", "def", "push", b"\x00\xff", "tid", "d", 1),
                (10, 90.7, 59, None, tid, 0, "1"),
                (b"\x01\x02", 5, 59, "forward", tid, 0, None),
            ],
            "CUPTI_ACTIVITY_KIND_KERNEL": [
                (1.5, 2.5, "x", b"\x01", "k", 0, 0),
                (20, 30, 1, 7, 1, 0, 0),
            ],
            "CUPTI_ACTIVITY_KIND_RUNTIME": [(12, 13, "1", tid, 1, 0), ("now", None, 1, tid, 2, 0)],
        },
    )


def null_end(folder: Path) -> Path:
    """NULL ``end`` in NVTX (legal: an unclosed range) and in GPU tables (never legal)."""
    b = _builder()
    _phase(b, 0, None, "decode")
    _phase(b, 10, 20, "forward")
    _launch(b, 11, 1, 13, 30)
    _launch(b, 40, 2, 45, 60)
    path = b.write(folder / "null_end.sqlite")
    con = sqlite3.connect(path)
    # The builder's DDL says NOT NULL; a hostile file need not: rebuild the kernel table loose.
    con.execute("ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL RENAME TO k_old")
    con.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL AS SELECT * FROM k_old WHERE 0")
    con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL SELECT * FROM k_old")
    con.execute('UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET "end" = NULL WHERE correlationId = 2')
    con.execute(
        "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL (start, correlationId, globalPid) "
        "VALUES (NULL, 3, ?)",
        (global_pid(1),),
    )
    con.execute("DROP TABLE k_old")
    con.commit()
    con.close()
    return path


def negative_durations(folder: Path) -> Path:
    """Ranges, API calls and kernels that end before they start."""
    b = _builder()
    _phase(b, 100, 50, "decode")
    _phase(b, 10, 90, "forward")
    b.runtime(20, 10, "cudaLaunchKernel_v7000", 1)
    b.kernel(40, 30, "gemm", 1)
    _launch(b, 50, 2, 55, 70)
    return b.write(folder / "negative_durations.sqlite")


def orphan_kernels(folder: Path) -> Path:
    """Kernels whose correlation id matches no runtime call (and one call with no kernel)."""
    b = _builder()
    _phase(b, 0, 100, "forward")
    _launch(b, 1, 1, 3, 10)
    b.kernel(20, 40, "orphan", 999)
    b.kernel(50, 60, "orphan_null_corr", None)  # type: ignore[arg-type]
    b.runtime(70, 72, "cudaLaunchKernel_v7000", 555)
    return b.write(folder / "orphan_kernels.sqlite")


def duplicate_ids(folder: Path) -> Path:
    """Duplicate correlation ids, duplicate identical rows, a StringIds id given twice."""
    b = _builder()
    _phase(b, 0, 100, "forward")
    _phase(b, 0, 100, "forward")
    _phase(b, 100, 200, "sample")
    b.runtime(1, 2, "cudaLaunchKernel_v7000", 1)
    b.runtime(150, 152, "cudaLaunchKernel_v7000", 1)  # same id, launched from another phase
    b.kernel(3, 10, "gemm", 1)
    b.kernel(3, 10, "gemm", 1)
    b.kernel(160, 170, "gemm", 1)
    path = b.write(folder / "duplicate_ids.sqlite")
    con = sqlite3.connect(path)
    con.execute("ALTER TABLE StringIds RENAME TO s_old")
    con.execute("CREATE TABLE StringIds (id INTEGER, value TEXT)")
    con.execute("INSERT INTO StringIds SELECT * FROM s_old")
    con.execute("INSERT INTO StringIds SELECT id, value || '_again' FROM s_old")
    con.execute("DROP TABLE s_old")
    con.commit()
    con.close()
    return path


def pop_without_push(folder: Path) -> Path:
    """Push/pop rows with no start (a pop whose push was lost) and with start after end."""
    b = _builder()
    _phase(b, 50, 100, "forward")
    path = b.write(folder / "pop_without_push.sqlite")
    con = sqlite3.connect(path)
    con.execute("ALTER TABLE NVTX_EVENTS RENAME TO n_old")
    con.execute("CREATE TABLE NVTX_EVENTS AS SELECT * FROM n_old WHERE 0")
    con.execute("INSERT INTO NVTX_EVENTS SELECT * FROM n_old")
    text_id = con.execute("SELECT id FROM StringIds WHERE value = 'forward'").fetchone()[0]
    con.executemany(
        'INSERT INTO NVTX_EVENTS (start, "end", eventType, globalTid, textId, domainId) '
        "VALUES (?, ?, 59, ?, ?, ?)",
        [
            (None, 150, global_tid(1, 1), text_id, PHASE_DOMAIN),
            (300, 150, global_tid(1, 1), text_id, PHASE_DOMAIN),
            (None, None, global_tid(1, 1), text_id, PHASE_DOMAIN),
        ],
    )
    con.execute("DROP TABLE n_old")
    con.commit()
    con.close()
    return path


def unclosed_ranges(folder: Path) -> Path:
    """A crashed run: request, decode and forward ranges never closed; a kernel still running."""
    b = _builder()
    b.start_end(0, None, "request", domain_id=PHASE_DOMAIN)
    _phase(b, 0, None, "decode")
    _phase(b, 5, None, "forward")
    _launch(b, 6, 1, 10, 50)
    return b.write(folder / "unclosed_ranges.sqlite")


def out_of_order(folder: Path) -> Path:
    """Rows in reverse time order, plus crossing (not properly nested) ranges on one thread."""
    b = _builder()
    for i in reversed(range(30)):
        t = i * 100
        _phase(b, t, t + 50, "forward")
        _launch(b, t + 1, i, t + 3, t + 60)
    _phase(b, 5000, 5100, "draft")
    _phase(b, 5050, 5150, "verify")  # crosses draft: NVTX push/pop cannot produce this
    _launch(b, 5060, 100, 5070, 5080)
    return b.write(folder / "out_of_order.sqlite")


def zero_length(folder: Path) -> Path:
    """Every event at one instant: a window of 0 ns."""
    b = _builder()
    _phase(b, 100, 100, "forward")
    b.start_end(100, 100, "request", domain_id=PHASE_DOMAIN)
    _launch(b, 100, 1, 100, 100)
    return b.write(folder / "zero_length.sqlite")


def only_marks(folder: Path) -> Path:
    """NVTX marks and nothing else: no ranges, no GPU work."""
    b = _builder()
    for i in range(5):
        b.mark(i * 10, "proposed", domain_id=PHASE_DOMAIN, payload_int=4)
        b.mark(i * 10 + 1, "accepted", domain_id=PHASE_DOMAIN, payload_int=i % 5)
    return b.write(folder / "only_marks.sqlite")


def domain_only(folder: Path) -> Path:
    """The nvtx >= 0.2.12 with nsys 2022.4 signature: a domain row and no ranges at all."""
    b = _builder()
    return b.write(folder / "domain_only.sqlite")


def non_utf8(folder: Path) -> Path:
    """Strings that are not UTF-8: phase names, thread names, a registered-less NVTX text."""
    b = _builder()
    _phase(b, 0, 100, "forward")
    _launch(b, 1, 1, 5, 50)
    b.push_pop(10, 20, "unregistered", registered=False)
    path = b.write(folder / "non_utf8.sqlite")
    con = sqlite3.connect(path)
    con.execute(
        "UPDATE StringIds SET value = CAST(X'666f72ff77617264' AS TEXT) WHERE value = 'gemm'"
    )
    con.execute("UPDATE StringIds SET value = CAST(X'c0c1fe6d61696e' AS TEXT) WHERE value = 'main'")
    con.execute("UPDATE NVTX_EVENTS SET text = CAST(X'80818283' AS TEXT) WHERE text IS NOT NULL")
    con.commit()
    con.close()
    return path


def non_utf8_table_name(folder: Path) -> Path:
    """A consistent schema whose extra table's name is not UTF-8 (bytes patched in place)."""
    path = good_loop(folder, name="non_utf8_table_name.sqlite")
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE zzzzzzzz_extra (yyyyyyyy INTEGER)")
    con.execute("INSERT INTO zzzzzzzz_extra VALUES (1)")
    con.commit()
    con.close()
    data = path.read_bytes().replace(b"zzzzzzzz", b"\xfc" * 8).replace(b"yyyyyyyy", b"\xfe" * 8)
    path.write_bytes(data)
    return path


def huge_values(folder: Path) -> Path:
    """Timestamps near the int64 limits, whose differences overflow 64-bit arithmetic."""
    b = _builder()
    _phase(b, -(2**62), 2**62, "forward")
    b.runtime(0, 1, "cudaLaunchKernel_v7000", 1)
    b.kernel(-(2**63), 2**63 - 1, "gemm", 1)
    return b.write(folder / "huge_values.sqlite")


def huge_marks(folder: Path) -> Path:
    """A decode loop whose mark payloads fit int64 one by one but whose sums do not: in the
    first request's steps two ``proposed``, ``accepted``, ``tokens`` and ``target_bytes``
    marks of 2**62 each (the second request's steps have valid acceptance marks, so a
    forecast runs), two ``input_tokens`` marks of 2**62 in each prefill, two requests of
    2**62 ``output_tokens`` each."""
    b = _builder()
    b.gpu(0)
    for r in range(2):
        t0 = r * 1000
        b.start_end(t0, t0 + 900, "request", domain_id=PHASE_DOMAIN, payload_int=r)
        _phase(b, t0, t0 + 100, "prefill")
        b.mark(t0 + 10, "input_tokens", domain_id=PHASE_DOMAIN, payload_int=2**62)
        b.mark(t0 + 11, "input_tokens", domain_id=PHASE_DOMAIN, payload_int=2**62)
        for i in range(3):
            t = t0 + 100 + i * 250
            _phase(b, t, t + 240, "decode")
            _phase(b, t + 5, t + 100, "draft")
            _phase(b, t + 100, t + 200, "verify")
            _launch(b, t + 101, r * 10 + i, t + 110, t + 190)
            for at, name in ((t + 10, "target_bytes"), (t + 20, "proposed"), (t + 30, "tokens")):
                b.mark(at, name, domain_id=PHASE_DOMAIN, payload_int=2**62)
                b.mark(at + 1, name, domain_id=PHASE_DOMAIN, payload_int=2**62 if r == 0 else 1)
            b.mark(t + 210, "accepted", domain_id=PHASE_DOMAIN, payload_int=2**62 if r == 0 else 1)
            b.mark(t + 211, "accepted", domain_id=PHASE_DOMAIN, payload_int=2**62 if r == 0 else 0)
        b.mark(t0 + 899, "output_tokens", domain_id=PHASE_DOMAIN, payload_int=2**62)
    return b.write(folder / "huge_marks.sqlite")


def far_times(folder: Path) -> Path:
    """Times that fit int64 but lie 73 years from the session start (garbage, not a capture)."""
    b = _builder()
    _phase(b, 0, 100, "forward")
    _phase(b, 2**61, 2**61 + 10, "sample")
    _launch(b, 1, 1, 5, 50)
    return b.write(folder / "far_times.sqlite")


def corrupt_page(folder: Path) -> Path:
    """A whole-length file whose middle pages were overwritten (a bad disk, a bad copy)."""
    path = good_loop(folder, steps=400, name="corrupt_page.tmp")
    data = bytearray(path.read_bytes())
    mid = len(data) // 2
    data[mid : mid + 8192] = bytes((i * 37 + 11) % 256 for i in range(8192))
    out = folder / "corrupt_page.sqlite"
    out.write_bytes(bytes(data))
    path.unlink()
    return out


def zero_bytes(folder: Path) -> Path:
    path = folder / "zero_bytes.sqlite"
    path.write_bytes(b"")
    return path


def header_only(folder: Path) -> Path:
    """The 100-byte SQLite header and nothing else."""
    path = good_loop(folder, steps=2, name="header_only.tmp")
    out = folder / "header_only.sqlite"
    out.write_bytes(path.read_bytes()[:100])
    path.unlink()
    return out


#: name -> (maker, what it is). Every command must answer each of these with status 0 (and
#: warnings for what it skipped) or 2 (one line), never a traceback, never a changed input.
CASES: dict[str, Callable[[Path], Path]] = {
    "good_loop": good_loop,
    "wrong_columns": wrong_columns,
    "stringids_wrong_columns": stringids_wrong_columns,
    "wrong_types": wrong_types,
    "null_end": null_end,
    "negative_durations": negative_durations,
    "orphan_kernels": orphan_kernels,
    "duplicate_ids": duplicate_ids,
    "pop_without_push": pop_without_push,
    "unclosed_ranges": unclosed_ranges,
    "out_of_order": out_of_order,
    "zero_length": zero_length,
    "only_marks": only_marks,
    "domain_only": domain_only,
    "non_utf8": non_utf8,
    "non_utf8_table_name": non_utf8_table_name,
    "huge_values": huge_values,
    "huge_marks": huge_marks,
    "far_times": far_times,
    "corrupt_page": corrupt_page,
    "zero_bytes": zero_bytes,
    "header_only": header_only,
}


def write_all(folder: Path) -> dict[str, Path]:
    """Write every case into *folder*; returns name -> path."""
    folder.mkdir(parents=True, exist_ok=True)
    return {name: make(folder) for name, make in CASES.items()}
