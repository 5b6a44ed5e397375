"""Issue 34, item 4: what is wrong inside a step (GPU idle by cause, expert-rule findings).

A built decode step holds one known cause per phase: a launch-bound draft (ten short
kernels, the GPU idle between them with nothing queued), a ``cudaStreamSynchronize`` in
sample that blocks the host while the GPU is idle, a pageable host copy in kv, and (in a
second loop) a storm of kernels shorter than their launches. Each finding is named with its
exact time; a trace without the causes has none.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import specnsys
from specnsys.metrics.analysis import Analysis
from specnsys.testing.builder import NsysExportBuilder, gpu_loop
from tests.conftest import json_doc

WINDOW = 100_000


def _loop(end: int, *, step: bool = True) -> NsysExportBuilder:
    """:func:`gpu_loop` over ``[0, end)``, with a decode step over it when *step*."""
    b = gpu_loop(end)
    if step:
        b.push_pop(0, end, "decode", pid=1, tid=1, domain_id=1)
    return b


def _step() -> NsysExportBuilder:
    b = _loop(WINDOW)
    pp = lambda s, e, name: b.push_pop(s, e, name, pid=1, tid=1, domain_id=1)  # noqa: E731
    pp(0, 40_000, "draft")  # ten launches of 1 us, each kernel 0.5 us, after the call
    for i in range(10):
        t = 2_000 + i * 3_800
        b.runtime(t, t + 1_000, "cudaLaunchKernel", 100 + i)
        b.kernel(t + 1_000, t + 1_500, "draft_gemv", 100 + i)
    pp(40_000, 60_000, "sample")
    b.runtime(40_000, 40_500, "cudaLaunchKernel", 200)
    b.kernel(40_500, 45_000, "topk", 200)
    b.runtime(40_600, 59_000, "cudaStreamSynchronize", 201)
    pp(60_000, 80_000, "kv")
    b.runtime(60_500, 61_000, "cudaMemcpyAsync", 300)
    b.memcpy(61_000, 72_000, 4 << 20, 300, src_kind=0, dst_kind=2)  # pageable -> device
    return b


def _analysis(b: NsysExportBuilder, tmp_path: Path) -> Analysis:
    return specnsys.analyze(b.write(tmp_path / "t.sqlite"))


def _by_kind(a: Analysis) -> dict[str, dict]:
    assert a.findings is not None
    return {f["kind"]: f for f in json_doc(a.findings)["findings"]}


def test_each_cause_is_one_finding_with_its_exact_time(tmp_path: Path) -> None:
    a = _analysis(_step(), tmp_path)
    found = _by_kind(a)
    assert set(found) == {"launch_bound", "sync_wait", "pageable_memcpy"}, found
    draft = found["launch_bound"]
    assert (draft["phase"], draft["time_ns"]) == ("draft", 40_000 - 10 * 500)
    assert draft["share_of_phase"] == pytest.approx(35_000 / 40_000)
    sync = found["sync_wait"]
    assert (sync["phase"], sync["what"], sync["time_ns"]) == (
        "sample", "cudaStreamSynchronize", 59_000 - 45_000
    )  # fmt: skip
    assert sync["speedup_if_removed"] == pytest.approx(WINDOW / (WINDOW - 14_000))
    copy = found["pageable_memcpy"]
    assert (copy["phase"], copy["time_ns"], copy["count"]) == ("kv", 11_000, 1)


def test_gpu_idle_is_split_by_what_the_host_did(tmp_path: Path) -> None:
    a = _analysis(_step(), tmp_path)
    assert a.findings is not None
    idle = json_doc(a.findings)["idle_by_phase"]
    assert idle["draft"] == {
        "idle_ns": 35_000, "host_wait_ns": 35_000, "sync_wait_ns": 0, "dependency_ns": 0,
        "sync_calls": {},
    }  # fmt: skip
    assert idle["sample"]["sync_wait_ns"] == 14_000
    assert idle["sample"]["host_wait_ns"] == 500 + 1_000  # the launch call, after the sync
    assert idle["sample"]["sync_calls"] == {"cudaStreamSynchronize": 14_000}
    assert idle["kv"]["idle_ns"] == 20_000 - 11_000
    # every idle nanosecond of the window is in one phase and one class
    total = sum(v["idle_ns"] for v in idle.values())
    assert a.gpu_time is not None and total == a.gpu_time["idle_ns"]
    assert all(
        v["idle_ns"] == v["host_wait_ns"] + v["sync_wait_ns"] + v["dependency_ns"]
        for v in idle.values()
    )


def test_work_queued_behind_another_is_a_dependency_gap(tmp_path: Path) -> None:
    b = _step()
    # a copy submitted at 81 us (its call returns at 82 us) that starts only at 90 us
    b.runtime(81_000, 82_000, "cudaMemcpyAsync", 400)
    b.memcpy(90_000, 91_000, 1024, 400, src_kind=2, dst_kind=2)
    a = _analysis(b, tmp_path)
    assert a.findings is not None
    assert json_doc(a.findings)["idle_by_phase"]["decode"]["dependency_ns"] == 8_000


def test_overlapping_work_and_overlapping_syncs_split_exactly(tmp_path: Path) -> None:
    """Overlapping kernels and overlapping queued work are merged before the sweep (one busy
    island, one waiting island): the split must stay what each instant's state gives, and a
    sync segment is named after the call in flight that started last."""
    b = _loop(100_000)
    # three launches whose kernels queue behind each other and overlap: busy [10, 40) us,
    # something queued from 2 us (the first call returns) until 25 us (the last one starts)
    for i, (k0, k1) in enumerate([(10_000, 20_000), (20_000, 30_000), (25_000, 40_000)]):
        b.runtime(1_000 * (i + 1), 1_000 * (i + 2), "cudaLaunchKernel", 10 + i)
        b.kernel(k0, k1, "gemm", 10 + i)
    b.runtime(45_000, 60_000, "cudaStreamSynchronize", 20)
    b.runtime(50_000, 70_000, "cudaDeviceSynchronize", 21)
    a = specnsys.analyze(b.write(tmp_path / "overlap.sqlite"))
    assert a.findings is not None
    idle = json_doc(a.findings)["idle_by_phase"]["decode"]
    assert idle == {
        "idle_ns": 100_000 - 30_000,
        "host_wait_ns": 2_000 + 5_000 + 30_000,  # [0, 2), [40, 45), [70, 100) us
        "dependency_ns": 8_000,  # [2, 10) us: queued, nothing running
        "sync_wait_ns": 25_000,  # [45, 70) us
        "sync_calls": {"cudaDeviceSynchronize": 20_000, "cudaStreamSynchronize": 5_000},
    }, idle


def test_a_launch_storm_and_a_synchronous_copy(tmp_path: Path) -> None:
    b = _loop(50_000)
    b.push_pop(0, 40_000, "forward", pid=1, tid=1, domain_id=1)
    for i in range(40):  # each launch 800 ns, its kernel 300 ns
        t = i * 1_000
        b.runtime(t, t + 800, "cudaLaunchKernel", 10 + i)
        b.kernel(t + 500, t + 800, "tiny_elementwise", 10 + i)
    b.push_pop(40_000, 50_000, "sync", pid=1, tid=1, domain_id=1)
    b.runtime(40_000, 49_000, "cudaMemcpy", 99)
    b.memcpy(41_000, 48_000, 64, 99, copy_kind=2, src_kind=2, dst_kind=1)  # DtoH, pinned
    a = specnsys.analyze(b.write(tmp_path / "storm.sqlite"))
    found = _by_kind(a)
    storm = found["launch_storm"]
    assert (storm["phase"], storm["count"], storm["time_ns"]) == ("forward", 40, 40 * 800)
    copy = found["sync_memcpy"]
    assert (copy["phase"], copy["what"], copy["time_ns"]) == ("sync", "cudaMemcpy", 9_000)
    assert "pageable_memcpy" not in found


def test_no_gpu_no_findings_and_the_samples_have_none(tmp_path: Path) -> None:
    from tests.conftest import SAMPLE_TRACES

    for path in sorted(SAMPLE_TRACES.glob("*.sqlite")):
        a = specnsys.analyze(path)
        assert a.findings is None and "findings" in a.not_available, path.name


# ------------------------------------------------------------------ the real corpus

CAUSES = {
    # each finding kind, and the SQL over the raw model that shows its cause is in the trace
    "sync_wait": "SELECT count(*) FROM runtime WHERE pid = $pid AND name ILIKE '%synchronize%'",
    "sync_memcpy": "SELECT count(*) FROM runtime WHERE pid = $pid AND name ILIKE '%memcpy%' "
    "AND name NOT ILIKE '%async%'",
    "pageable_memcpy": "SELECT count(*) FROM memcpy WHERE pid = $pid AND "
    "(src_kind = 'pageable' OR dst_kind = 'pageable')",
    "launch_storm": "SELECT count(*) FROM kernels k JOIN runtime r ON r.pid = k.pid AND "
    "r.correlation_id = k.correlation_id WHERE k.pid = $pid AND k.duration < r.duration",
    "launch_bound": "SELECT (SELECT count(*) FROM kernels WHERE pid = $pid) + (SELECT count(*) "
    "FROM memcpy WHERE pid = $pid) + (SELECT count(*) FROM memset WHERE pid = $pid)",
}


@pytest.mark.corpus
@pytest.mark.slow
@pytest.mark.usefixtures("corpus_cache")
def test_no_finding_on_a_corpus_export_that_does_not_hold_its_cause() -> None:
    from tests.conftest import corpus_files

    files = corpus_files()
    if not files:
        pytest.skip("the real corpus is not here")
    seen = {}
    for path in files:
        try:
            a = specnsys.analyze(path)
        except specnsys.BadInputError:
            continue  # the metadata-only export (tests/test_generic_mode.py)
        if a.findings is None:
            continue
        findings = json_doc(a.findings)
        with specnsys.open(path) as trace:
            for f in findings["findings"]:
                rows = trace.connection.execute(CAUSES[f["kind"]], {"pid": a.pid}).fetchall()
                assert rows[0][0] > 0, (path.name, f)
                assert 0 < f["time_ns"] <= a.window_ns, (path.name, f)
        seen[path.name] = [f["kind"] for f in findings["findings"]]
    assert seen  # the corpus has GPU exports


def test_a_run_without_phase_ranges_finds_its_idle_time_without_a_warning(tmp_path: Path) -> None:
    """Explicit specnsys rules on an engine trace claim no range, so the run has no driver
    thread: its GPU idle time is all unannotated, said without Polars' "comparisons with None"
    warning (which the filter on a None thread id raised)."""
    import warnings

    from tests.test_generic_mode import engine_trace

    path = engine_trace(tmp_path / "engine.sqlite")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        a = specnsys.analyze(path, rules="specnsys")
    assert a.findings is not None
    assert set(json_doc(a.findings)["idle_by_phase"]) <= {"unannotated"}


def _many_steps() -> NsysExportBuilder:
    """Eight steps of the causes above, shifted in time, with work queued across a step
    boundary and a sync call that spans two steps: what chunking must not split wrongly."""
    steps = 8
    b = _loop(steps * WINDOW, step=False)
    b.thread(1, 2, "loader")  # a second thread with phase ranges and launches of its own
    corr = 100
    for k in range(steps):
        t0 = k * WINDOW

        def pp(s: int, e: int, name: str, t0: int = t0) -> None:
            b.push_pop(t0 + s, t0 + e, name, pid=1, tid=1, domain_id=1)

        pp(0, WINDOW, "decode")
        pp(0, 40_000, "draft")
        for i in range(10):
            t = t0 + 2_000 + i * 3_800
            b.runtime(t, t + 1_000, "cudaLaunchKernel", corr)
            b.kernel(t + 1_000 + 300 * (i % 3), t + 2_500 + 300 * (i % 3), "draft_gemv", corr)
            corr += 1
        pp(40_000, 60_000, "sample")
        b.runtime(t0 + 40_000, t0 + 40_500, "cudaLaunchKernel", corr)
        b.kernel(t0 + 40_500, t0 + 45_000, "topk", corr)
        b.runtime(t0 + 40_600, t0 + 59_000, "cudaStreamSynchronize", corr + 1)
        b.runtime(t0 + 50_000, t0 + 55_000, "cudaDeviceSynchronize", corr + 2)
        corr += 3
        pp(60_000, 80_000, "kv")
        b.runtime(t0 + 60_500, t0 + 61_000, "cudaMemcpyAsync", corr)
        b.memcpy(t0 + 61_000, t0 + 72_000, 4 << 20, corr, src_kind=0, dst_kind=2)
        corr += 1
        b.push_pop(t0 + 62_000, t0 + 78_000, "kv", pid=1, tid=2, domain_id=1)
        b.runtime(t0 + 63_000, t0 + 63_500, "cudaMemcpy", corr, tid=2)
        b.memcpy(t0 + 64_000, t0 + 66_000, 1 << 20, corr, src_kind=0, dst_kind=2)
        corr += 1
        # launched at the end of kv, it runs only in the next step's draft: queued across
        b.runtime(t0 + 95_000, t0 + 96_000, "cudaLaunchKernel", corr)
        b.kernel(t0 + WINDOW + 500, t0 + WINDOW + 1_500, "late", corr)
        corr += 1
    # a sync call in flight across the boundary of steps 3 and 4
    b.runtime(3 * WINDOW + 85_000, 4 * WINDOW + 1_800, "cudaStreamSynchronize", corr)
    return b


def test_the_findings_are_the_same_in_chunks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The idle sweep runs chunk by chunk (cut at the driver's change points) and the
    launched ops are summed slice by slice, so that a large trace's findings need a chunk's
    memory; a chunk of a few islands must give exactly the findings of one chunk."""
    import specnsys.metrics.findings as findings

    path = _many_steps().write(tmp_path / "steps.sqlite")
    whole = json_doc(specnsys.analyze(path, use_cache=False).findings)
    monkeypatch.setattr(findings, "SWEEP_CHUNK", 3)
    monkeypatch.setattr(findings, "SUMMARY_CHUNK", 5)
    chunks = []
    real = findings._sweep

    def counted(*args: Any) -> Any:
        chunks.append(args[0])
        return real(*args)

    monkeypatch.setattr(findings, "_sweep", counted)
    chunked = json_doc(specnsys.analyze(path, use_cache=False).findings)
    assert len(chunks) > 8, chunks  # the sweep was cut, more than once per step
    assert chunked == whole
    idle = whole["idle_by_phase"]
    assert idle["sample"]["sync_calls"]["cudaDeviceSynchronize"] == 8 * 5_000
    # equal times come in the order of their names, on every run (they came in the order
    # a hash aggregation left them, and two analyses of one trace could differ)
    assert list(idle["sample"]["sync_calls"].items()) == [
        ("cudaDeviceSynchronize", 40_000), ("cudaStreamSynchronize", 40_000)
    ]  # fmt: skip
    ties = [(f["kind"], f["what"]) for f in whole["findings"] if f["time_ns"] == 40_000]
    assert ties == [
        ("sync_wait", "cudaDeviceSynchronize"), ("sync_wait", "cudaStreamSynchronize")
    ], whole["findings"]  # fmt: skip
    assert idle["draft"]["dependency_ns"] > 0  # the late kernels queued into the draft
    assert {f["kind"] for f in whole["findings"]} >= {"sync_wait", "pageable_memcpy"}
    # the loader thread's copies are found in its own kv ranges
    (loader,) = [f for f in whole["findings"] if f["kind"] == "sync_memcpy"]
    assert (loader["phase"], loader["what"], loader["count"]) == ("kv", "cudaMemcpy", 8)
