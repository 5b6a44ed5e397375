"""Data-quality notes on GPU ops and their launching calls, on both counting paths."""

from __future__ import annotations

from pathlib import Path

import pytest

import specnsys
from specnsys.ingest.quality import _CHECKS, _launch_counts, data_warnings
from specnsys.testing import NsysExportBuilder


@pytest.mark.parametrize("big_id", [False, True])
def test_unlaunched_ops_and_shared_ids_are_counted_per_process(
    tmp_path: Path, big_id: bool
) -> None:
    """Ops match calls on (pid, correlation id), whatever the ids: an id of another process,
    one that would wrap onto another process's id if packed into 64 bits, one beyond 2**32.
    Counted on the packed key when every call packs, else in SQL; both agree with the SQL."""
    b = NsysExportBuilder()
    for pid in (1, 2):
        b.process(pid, f"p{pid}")
        b.thread(pid, 1, "main")
    b.runtime(10, 12, "cudaLaunchKernel", 1)
    b.runtime(20, 22, "cudaLaunchKernel", 2)
    b.runtime(30, 32, "cudaLaunchKernel", 2)  # id 2 shared by two calls of process 1
    for t in (33, 35, 37):  # and id 6 by three calls, written apart from each other
        b.runtime(t, t + 1, "cudaLaunchKernel", 6)
        b.runtime(t + 1, t + 2, "cudaLaunchKernel", t)
    b.runtime(40, 42, "cudaMemcpyAsync", 3, pid=2)
    b.runtime(45, 47, "cudaLaunchKernel", 4, event_class=67)  # a backtrace-class row: no call
    b.kernel(50, 60, "launched", 1)
    b.kernel(60, 70, "launched by a shared id", 2)
    b.kernel(70, 80, "id 3 is process 2's", 3)  # unlaunched
    b.kernel(80, 90, "no call at all", 9)  # unlaunched
    b.kernel(90, 95, "only a backtrace row", 4)  # unlaunched
    b.kernel(95, 99, "wraps onto id 1 when packed", 1 - (1 << 32), pid=2)  # unlaunched
    b.memcpy(100, 110, 64, 3, pid=2)
    b.memset(110, 120, 64, 2, pid=2)  # unlaunched: process 2 has no id 2
    if big_id:
        b.runtime(120, 122, "cudaLaunchKernel", (1 << 32) + 5)  # an id no packing holds
        b.kernel(130, 140, "big id", (1 << 32) + 5)
    with specnsys.open(b.write(tmp_path / "t.sqlite"), use_cache=False) as trace:
        packed = _launch_counts(trace)
        notes = data_warnings(trace)
        sql = {
            name: trace.connection.execute(_CHECKS[name][0]).fetchall()[0][0]
            for name in ("gpu_unlaunched", "shared_correlation")
        }
    assert sql == {"gpu_unlaunched": 5, "shared_correlation": 2}
    assert packed == (None if big_id else sql)
    assert any(n.startswith("5 GPU operation(s) have no launching CUDA API call") for n in notes)
    assert any(n.startswith("2 correlation id(s) are shared") for n in notes)


def test_no_launching_call_flags_no_op(tmp_path: Path) -> None:
    """A trace without runtime rows (CUDA API tracing off) says nothing about launches."""
    b = NsysExportBuilder()
    b.process(1, "p")
    b.thread(1, 1, "main")
    b.push_pop(0, 100, "x", pid=1, tid=1)
    b.kernel(10, 20, "k", 1)
    with specnsys.open(b.write(tmp_path / "t.sqlite"), use_cache=False) as trace:
        assert _launch_counts(trace) == {"gpu_unlaunched": 0, "shared_correlation": 0}
        assert not any("launch" in n for n in data_warnings(trace))


def _messy_loop(path: Path) -> Path:
    """A small annotated loop with a kernel nobody launched, an unclosed and a backwards
    range: three notes."""
    b = NsysExportBuilder()
    b.process(1, "p")
    b.thread(1, 1, "main")
    b.domain(1, "specnsys")
    for i in range(4):
        t = 100 * i
        b.push_pop(t, t + 90, "decode", domain_id=1)
        b.push_pop(t + 2, t + 80, "forward", domain_id=1)
        b.runtime(t + 5, t + 8, "cudaLaunchKernel", i)
        b.kernel(t + 10, t + 60, "step", i)
    b.kernel(500, 510, "orphan", 99)
    b.push_pop(600, None, "decode", domain_id=1)  # never closed
    b.push_pop(700, 650, "forward", domain_id=1)  # ends before it starts
    return b.write(path)


@pytest.mark.parametrize("use_cache", [True, False], ids=["cached", "in-memory"])
def test_checks_beside_an_analysis_equal_the_checks_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, use_cache: bool
) -> None:
    """``data_warnings_beside`` runs the checks on another thread (SQL on a cursor) while the
    block analyzes on the trace's own connection; with the model in memory (a cursor does
    not see its tables) they run as the block ends. Either way the notes are those of the
    checks run alone, and the block's error propagates once the checks are done."""
    import threading

    import specnsys.ingest.quality as quality
    from specnsys.metrics import analyze_trace

    path = _messy_loop(tmp_path / "messy.sqlite")
    with specnsys.open(path, use_cache=False) as alone:
        expected = data_warnings(alone)
    assert len(expected) == 3
    threads: list[str] = []

    def recorded(trace: specnsys.Trace, **kw: object) -> list[str]:
        threads.append(threading.current_thread().name)
        return data_warnings(trace, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(quality, "data_warnings", recorded)
    with specnsys.open(path, use_cache=use_cache) as trace:
        with quality.data_warnings_beside(trace) as notes:
            analysis = analyze_trace(trace)
        assert notes() == expected and analysis.to_dict()
    main = threading.current_thread().name
    assert threads == (["specnsys-checks_0"] if use_cache else [main])
    copy = tmp_path / "copy.sqlite"  # a second cache entry: nothing stored for it yet
    copy.write_bytes(path.read_bytes())
    with specnsys.open(copy, use_cache=use_cache) as trace:
        with pytest.raises(KeyError), quality.data_warnings_beside(trace):
            raise KeyError("the analysis failed")
        with quality.data_warnings_beside(trace) as notes:
            pass
        assert notes() == expected
