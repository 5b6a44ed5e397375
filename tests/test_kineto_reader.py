"""The PyTorch-profiler (Kineto) reader: built Chrome traces, the same numbers as nsys.

Each loop is written twice, as nsys records it (NVTX ranges of the ``specnsys`` domain, in an
nsys-schema SQLite export) and as the torch profiler records it (``record_function`` scopes,
marks as ``specnsys.mark:<name>=<value>``, in a Chrome trace), and both are analysed: the
phase times are hand-computed sums (CPU-only loops: every instant belongs to the innermost
phase range of the driver thread, as in tests/test_nesting_by_role.py), and every number the
two readers give must agree. Then what only a Chrome trace has: GPU work under a device's
pseudo-process joined to its launch by correlation id, several processes, the model's types,
content sniffing, the cache.
"""

from __future__ import annotations

import gzip
import warnings
from pathlib import Path
from typing import Any

import pytest

import specnsys
from specnsys.errors import SpecnsysWarning
from specnsys.ingest.reference import model_reference
from specnsys.metrics.analysis import Analysis
from specnsys.readers.kineto import KinetoVersion
from specnsys.readers.kineto.tables import short_kernel_name
from specnsys.testing.builder import NsysExportBuilder
from tests.conftest import json_doc
from tests.kineto_builder import ChromeTrace

KERNEL = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
    "at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, "
    "at::detail::Array<char*, 1>)"
)


class Both:
    """One thread's loop as nsys and as the torch profiler record it."""

    def __init__(self, pid: int = 1, tid: int = 1) -> None:
        self.pid, self.tid = pid, tid
        self.nsys = NsysExportBuilder()
        self.nsys.process(pid, "python3")
        self.nsys.thread(pid, tid, "main")
        self.nsys.domain(1, "specnsys", pid=pid, tid=tid)
        self.torch = ChromeTrace(pid=pid, tid=tid)

    def range(self, s: int, e: int, phase: str) -> Both:
        self.nsys.push_pop(s, e, phase, pid=self.pid, tid=self.tid, domain_id=1)
        self.torch.range(s, e, phase)
        return self

    def request(self, s: int, e: int, request_id: int = 1) -> Both:
        self.nsys.start_end(s, e, "request", pid=self.pid, tid=self.tid, domain_id=1,
                            payload_int=request_id)  # fmt: skip
        self.torch.request(s, e, request_id)
        return self

    def mark(self, t: int, name: str, value: int) -> Both:
        self.nsys.mark(t, name, pid=self.pid, tid=self.tid, domain_id=1, payload_int=value)
        self.torch.mark(t, name, value)
        return self

    def launch(self, s: int, e: int, correlation: int, kernel: tuple[int, int]) -> Both:
        """A cudaLaunchKernel call [s, e) and its kernel on the GPU."""
        self.nsys.runtime(s, e, "cudaLaunchKernel_v7000", correlation, pid=self.pid, tid=self.tid)
        self.nsys.kernel(*kernel, "vectorized_elementwise_kernel", correlation, pid=self.pid,
                         demangled=KERNEL)  # fmt: skip
        self.torch.runtime(s, e, "cudaLaunchKernel", correlation)
        self.torch.kernel(*kernel, KERNEL, correlation)
        return self

    def paths(self, tmp_path: Path) -> tuple[Path, Path]:
        return (
            self.nsys.write(tmp_path / "loop.sqlite"),
            self.torch.write(tmp_path / "loop.json"),
        )

    def analyze(self, tmp_path: Path, **kw: Any) -> tuple[Analysis, Analysis]:
        nsys, torch = self.paths(tmp_path)
        return specnsys.analyze(nsys, **kw), specnsys.analyze(torch, **kw)


def _walls(a: Analysis) -> dict[str, int]:
    return {name: row["wall_ns"] for name, row in a.phases.items() if row["wall_ns"]}


#: What must be equal between the two readers' analyses of one loop.
SAME = (
    "mode", "window_ns", "phases", "p", "amdahl_ceiling", "tokens", "tokens_source", "steps",
    "requests", "acceptance", "nesting", "draft_forwards_per_step", "draft_forwards_source",
    "gpu_time", "latency", "draft_cost_ratio", "per_range_ns", "warnings",
)  # fmt: skip


def _same(a: Analysis, b: Analysis) -> None:
    da, db = a.to_dict(), b.to_dict()
    for key in SAME:
        assert da.get(key) == db.get(key), key


def _baseline_with_prefill_forward() -> Both:
    """tests/test_nesting_by_role.py's loop: the prefill [0, 200) runs a forward [10, 190)."""
    loop = Both().request(0, 1000)
    loop.range(0, 200, "prefill").range(10, 190, "forward").mark(195, "tokens", 1)
    for s in (200, 500):
        loop.range(s, s + 300, "decode").range(s + 10, s + 250, "forward")
        loop.range(s + 250, s + 290, "sample").mark(s + 295, "tokens", 1)
    return loop


def test_record_function_phases_are_phases_with_the_same_exclusive_times(tmp_path: Path) -> None:
    nsys, torch = _baseline_with_prefill_forward().analyze(tmp_path)
    for a in (nsys, torch):
        assert a.mode == "baseline"
        assert _walls(a) == {
            "prefill": 200, "forward": 480, "decode": 40, "sample": 80, "unannotated": 200,
        }  # fmt: skip
        assert a.p == pytest.approx(0.48)
        assert a.phases["forward"]["ranges"] == 2 and a.phases["prefill"]["ranges"] == 1
        assert a.nesting is not None and a.nesting["reassigned"] == {"forward->prefill": 1}
        assert a.steps == 2 and a.tokens == 3
    _same(nsys, torch)


def _speculative() -> Both:
    """Two speculative steps with a draft step hooked around its four draft forwards and a
    sample of its own inside; acceptance, first-token and output-token marks."""
    loop = Both().request(0, 700, request_id=7)
    loop.range(0, 100, "prefill").mark(98, "first_token", 7).mark(99, "tokens", 1)
    for s in (100, 400):
        loop.range(s, s + 300, "decode").range(s + 10, s + 150, "draft")
        for fs in (s + 15, s + 50, s + 85, s + 120):
            loop.range(fs, fs + 25, "draft")
        loop.range(s + 146, s + 149, "sample")  # the draft's own, inside its range
        loop.range(s + 150, s + 280, "verify").range(s + 280, s + 295, "sample")
        loop.mark(s + 296, "proposed", 4).mark(s + 297, "accepted", 2).mark(s + 298, "tokens", 3)
    loop.mark(699, "output_tokens", 7)
    return loop


def test_a_speculative_loop_gives_every_number_nsys_gives(tmp_path: Path) -> None:
    nsys, torch = _speculative().analyze(tmp_path)
    assert torch.mode == "spec"
    # draft: its step ranges [s+10, s+150) with the forwards and its sample inside: 2 x 140
    assert _walls(torch) == {
        "prefill": 100, "decode": 2 * (10 + 5), "draft": 280, "verify": 260, "sample": 30,
    }  # fmt: skip
    assert torch.acceptance is not None and torch.acceptance["mean_accepted"] == 2
    assert torch.draft_forwards_per_step == 4
    latency = json_doc(torch.to_dict())["latency"]
    assert latency["ttft_ns"]["mean"] == 98 and latency["tpot_ns"]["mean"] == (700 - 98) / 6
    assert latency["per_request"][0]["request_id"] == 7
    assert torch.tokens == 7 and torch.requests == 1
    _same(nsys, torch)


def test_gpu_work_joins_its_launch_by_correlation_id(tmp_path: Path) -> None:
    """Kernels under the device's pseudo-process (pid 0, tid = stream) take the launching
    process and its phase; GPU busy and launches per phase as nsys gives them."""
    loop = Both().request(0, 1000)
    loop.range(0, 400, "prefill").launch(10, 20, 101, (30, 300))
    loop.range(400, 900, "decode").range(410, 800, "forward").launch(420, 430, 102, (440, 780))
    loop.range(800, 900, "sample").launch(810, 815, 103, (820, 950))
    loop.torch.memcpy(960, 970, 4096, 104).memset(972, 975, 64, 105)
    loop.torch.runtime(955, 958, "cudaMemcpyAsync", 104).runtime(971, 972, "cudaMemsetAsync", 105)
    loop.torch.gpu_annotation(30, 300, "prefill")
    loop.nsys.runtime(955, 958, "cudaMemcpyAsync", 104)
    loop.nsys.runtime(971, 972, "cudaMemsetAsync", 105)
    loop.nsys.memcpy(960, 970, 4096, 104)
    loop.nsys.memset(972, 975, 64, 105)
    nsys, torch = loop.analyze(tmp_path)
    _same(nsys, torch)
    assert torch.phases["forward"]["gpu_busy_ns"] == 340 and torch.phases["sample"]["kernels"] == 1
    by_phase = [specnsys.phases(p).to_dict() for p in (tmp_path / "loop.sqlite", tmp_path / "loop.json")]
    assert by_phase[0]["phases"] == by_phase[1]["phases"]
    assert by_phase[1]["phases"]["sample"]["launches"] == 1
    with specnsys.open(tmp_path / "loop.json") as trace:
        kernel = trace.table("kernels").collect().row(0, named=True)
        assert (kernel["pid"], kernel["device_id"], kernel["stream_id"]) == (1, 0, 7)
        assert kernel["global_pid"] == 1 << 24 and kernel["correlation_id"] == 101
        assert kernel["short_name"] == "vectorized_elementwise_kernel"
        assert kernel["demangled_name"] == KERNEL
        assert (kernel["grid_x"], kernel["block_x"]) == (1, 128)
        copy = trace.table("memcpy").collect().row(0, named=True)
        assert (copy["copy_kind"], copy["copy_kind_name"]) == (1, "HtoD")
        assert (copy["src_kind"], copy["dst_kind"], copy["bytes"]) == ("pageable", "device", 4096)
        assert trace.table("memset").collect()["mem_kind"].to_list() == ["device"]
        # GPU-side annotations are Kineto's own projection of the scopes: not a host range
        annotations = "SELECT count(*) FROM nvtx WHERE category = 'gpu_user_annotation'"
        assert trace.sql(annotations).fetchall() == [(0,)]


def test_short_kernel_names_are_the_function_names() -> None:
    assert short_kernel_name(KERNEL) == "vectorized_elementwise_kernel"
    assert short_kernel_name("ampere_sgemm_128x64_nn") == "ampere_sgemm_128x64_nn"
    assert short_kernel_name(
        "void (anonymous namespace)::softmax_warp_forward<float, float, float, 10, false>"
        "(float*, float const*, int, int, int)"
    ) == "softmax_warp_forward"
    assert short_kernel_name("void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_64x64_tn>"
                             "(cutlass_80_tensorop_s1688gemm_64x64_tn::Params)") == "Kernel2"


def test_several_processes_each_with_its_own_threads_and_gpu_work(tmp_path: Path) -> None:
    """Two processes in one trace (a merged trace): the analysis picks the one with the most
    phase ranges, ``pid=`` the other; each kernel goes to the process whose call carries its
    correlation id, and one whose id both processes' calls carry to neither (said)."""
    trace = ChromeTrace(pid=10, tid=11, process="worker-a")
    trace.process(20, "worker-b").thread(20, 21, "thread 21 (worker-b)").thread(20, 22, "io")
    trace.request(0, 1000, 1).range(0, 1000, "forward")
    trace.runtime(10, 20, "cudaLaunchKernel", 1).kernel(30, 100, KERNEL, 1)
    trace.runtime(30, 40, "cudaLaunchKernel", 7)
    b: dict[str, Any] = dict(pid=20, tid=21)
    trace.request(0, 1000, 2, **b).range(0, 600, "forward", **b).range(600, 1000, "sample", **b)
    trace.runtime(10, 20, "cudaLaunchKernel", 2, **b).kernel(40, 500, KERNEL, 2, device=1)
    trace.runtime(50, 60, "cudaLaunchKernel", 7, **b).kernel(600, 700, KERNEL, 7, device=1)
    path = trace.write(tmp_path / "two.json")
    with pytest.warns(SpecnsysWarning, match="1 GPU operation.*several processes"):
        opened = specnsys.open(path)
    with opened:
        kernels = opened.sql("SELECT correlation_id, pid FROM kernels ORDER BY 1").fetchall()
        assert kernels == [(1, 10), (2, 20), (7, None)]
        threads = opened.sql("SELECT pid, tid, global_tid, name FROM threads ORDER BY 1, 2").fetchall()
        assert threads == [
            (10, 11, (10 << 24) + 11, "thread 11 (python3)"),
            (20, 21, (20 << 24) + 21, "thread 21 (worker-b)"),
            (20, 22, (20 << 24) + 22, "io"),
        ]
        assert opened.sql("SELECT pid, name FROM processes ORDER BY 1").fetchall() == [
            (10, "worker-a"), (20, "worker-b"),
        ]  # fmt: skip
    with pytest.warns(SpecnsysWarning, match="several processes"):
        b_run = specnsys.analyze(path)
    assert b_run.pid == 20 and _walls(b_run) == {"forward": 600, "sample": 400}
    assert b_run.phases["forward"]["gpu_busy_ns"] == 460
    with pytest.warns(SpecnsysWarning, match="several processes"):
        a_run = specnsys.analyze(path, pid=10)
    assert a_run.pid == 10 and _walls(a_run) == {"forward": 1000}
    assert a_run.phases["forward"]["gpu_busy_ns"] == 70


def test_global_ids_decode_as_nsys_global_ids(tmp_path: Path) -> None:
    loop = _baseline_with_prefill_forward()
    loop.torch = ChromeTrace(pid=4_000_000, tid=4_100_000)
    loop.torch.range(0, 10, "forward")
    with specnsys.open(loop.torch.write(tmp_path / "ids.json")) as trace:
        rows = trace.sql(
            "SELECT pid, tid, (global_tid >> 24) & 16777215, global_tid & 16777215 FROM nvtx"
        ).fetchall()
    assert rows == [(4_000_000, 4_100_000, 4_000_000, 4_100_000)]


def test_the_model_has_the_types_the_nsys_reader_gives(tmp_path: Path) -> None:
    """Every table and column, with the same DuckDB and Polars types (docs/model.md)."""
    loop = Both().request(0, 100).range(0, 100, "forward").launch(1, 2, 1, (3, 4))
    loop.torch.memcpy(5, 6, 8, 2).memset(7, 8, 8, 3).device(0)
    _, path = loop.paths(tmp_path)
    reference = {t.name: [(c.name, c.type, c.polars_type) for c in t.columns] for t in model_reference()}
    with specnsys.open(path) as trace:
        for table, columns in reference.items():
            described = trace.sql(f'DESCRIBE "{table}"').fetchall()
            polars = trace.table(table).collect_schema()
            got = [(name, str(kind), str(polars[name])) for name, kind, *_ in described]
            assert got == columns, table
        assert trace.sql("SELECT device_id, name, sm_count FROM gpus").fetchall() == [
            (0, "NVIDIA H100", 132)
        ]


def test_times_are_exact_integer_nanoseconds(tmp_path: Path) -> None:
    """Kineto's microseconds with three decimals are nanoseconds exactly (a double would lose
    the last digits of a 16-digit time); a time written with more decimals rounds half to
    even; absolute epoch times (old torch versions) are shifted back by a whole second."""
    trace = ChromeTrace()
    start = 5_444_713_137_854_499
    trace.range(start, start + 42_980_588, "forward")
    trace.raw('{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, '
              f'"ts": {start // 1000}.4995, "dur": 1e-3}}')  # fmt: skip
    with specnsys.open(trace.write(tmp_path / "exact.json")) as t:
        rows = t.sql('SELECT text, start, "end" FROM nvtx ORDER BY start, text').fetchall()
        assert ("forward", start, start + 42_980_588) in rows
        assert ("aten::mm", start + 1, start + 2) in rows  # 854.4995 us: 854_499.5 -> 854_500 ns
    epoch = ChromeTrace()
    t0 = 1_700_000_000_123_456_789
    epoch.range(t0, t0 + 1000, "forward")
    with specnsys.open(epoch.write(tmp_path / "epoch.json")) as t:
        assert t.sql('SELECT start, "end" FROM nvtx').fetchall() == [(123_456_789, 123_457_789)]
        assert t.summary.version.export_params["time_origin_ns"] == str(1_700_000_000 * 10**9)


def test_engine_scopes_are_read_under_their_rule_pack(tmp_path: Path) -> None:
    """vLLM's ``VLLM_CUSTOM_SCOPES_FOR_PROFILING`` scopes carry its NVTX scopes' names: in the
    default domain, the vllm pack is chosen for them as for an nsys trace."""
    trace = ChromeTrace()
    for s in (0, 1000):
        trace.range(s, s + 100, "gpu_model_runner: preprocess")
        trace.range(s + 100, s + 800, "gpu_model_runner: forward")
        trace.op(s + 110, s + 700, "aten::linear")
        trace.range(s + 800, s + 1000, "gpu_model_runner: sample")
    run = specnsys.analyze(trace.write(tmp_path / "vllm.json"))
    assert run.rules == "vllm" and run.mode == "baseline"
    assert _walls(run) == {"schedule": 200, "forward": 1400, "sample": 400}


def test_content_decides_not_the_name(tmp_path: Path) -> None:
    """A gzip file, a bare event array and a name without ``.json`` are read alike; an nsys
    export is still an nsys export."""
    loop = _baseline_with_prefill_forward()
    nsys_path, json_path = loop.paths(tmp_path)
    text = loop.torch.text()
    gz = tmp_path / "trace.pt.trace.json.gz"
    gz.write_bytes(gzip.compress(text.encode()))
    plain = tmp_path / "trace.kineto"
    plain.write_text(text)
    array = tmp_path / "events.data"
    array.write_text(loop.torch.text(layout="array"))
    walls = [_walls(specnsys.analyze(p)) for p in (json_path, gz, plain, array)]
    assert walls[0] == walls[1] == walls[2] == walls[3] == _walls(specnsys.analyze(nsys_path))
    with specnsys.open(gz) as trace:
        assert isinstance(trace.summary.version, KinetoVersion)
        assert trace.summary.version.label == "PyTorch profiler (Kineto) Chrome trace, schemaVersion 1"
    with specnsys.open(nsys_path) as trace:
        assert trace.summary.version.label.startswith("nsys ")


def test_the_model_is_cached_on_the_file_identity(tmp_path: Path) -> None:
    """The second open reads the cache entry (the reader's notes said again); a rewritten
    file is read again."""
    trace = ChromeTrace().request(0, 100, 1).range(0, 100, "forward")
    trace.raw('{"ph": "X", "cat": "cpu_op", "name": "no times", "pid": 1, "tid": 1}')
    path = trace.write(tmp_path / "cached.json")
    for from_cache in (False, True):
        with pytest.warns(SpecnsysWarning, match="1 trace event.* lack a usable ts"):
            opened = specnsys.open(path)
        with opened:
            assert opened.from_cache is from_cache and opened.cache_folder is not None
            assert isinstance(opened.summary.version, KinetoVersion)
    ChromeTrace().request(0, 300, 1).range(0, 300, "forward").write(path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with specnsys.open(path) as again:
            assert not again.from_cache
            assert again.sql('SELECT max("end") FROM nvtx').fetchall() == [(300,)]
    with specnsys.open(path, use_cache=False) as memory:
        assert memory.cache_folder is None and memory.summary.row_counts["nvtx"] == 2
