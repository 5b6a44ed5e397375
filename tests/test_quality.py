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
