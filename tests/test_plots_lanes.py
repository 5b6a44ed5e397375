"""Timeline lanes (specnsys.attribution.lanes) on built traces with hand-computed answers."""

from __future__ import annotations

from pathlib import Path

import pytest

import specnsys
from specnsys.attribution.lanes import timeline_lanes
from specnsys.errors import BadInputError, UsageError
from specnsys.testing import NsysExportBuilder

pytestmark = pytest.mark.usefixtures("shared_cache")  # the samples built once (conftest)

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"

STEP = 1_000_000  # one decode step every 1 ms (ns)


def add_step(b: NsysExportBuilder, base: int, corr: int, *, slow: int = 0) -> int:
    """One baseline decode step at *base*: async forward kernels, sample, a host sync, kv.

    Times (ns from *base*): decode [0, 1e6 + slow); schedule [10k, 50k); forward [60k, 400k)
    launches kernels that run [90k, 300k), [300k, 550k) (past the end of forward: async),
    [550k, 600k); sample [400k, 700k) launches a kernel [600k, 650k) and a D2H copy
    [650k, 660k); sync [700k, 800k) blocks in cudaStreamSynchronize; kv [800k, 950k) is
    CPU-only. So the GPU is busy [90k, 660k) and idle [0, 90k) and [660k, end).
    Returns the next free correlation id.
    """

    def pp(s: int, e: int, text: str) -> None:
        b.push_pop(base + s, base + e, text, pid=1, tid=1, domain_id=1)

    def launch(t: int, k0: int, k1: int, name: str) -> None:
        nonlocal corr
        b.runtime(base + t, base + t + 8_000, "cudaLaunchKernel_v7000", corr, pid=1, tid=1)
        b.kernel(base + k0, base + k1, name, corr, pid=1)
        corr += 1

    pp(0, STEP + slow, "decode")
    pp(10_000, 50_000, "schedule")
    pp(60_000, 400_000, "forward")
    launch(70_000, 90_000, 300_000, "gemm_qkv")
    launch(100_000, 300_000, 550_000, "gemm_mlp")
    launch(130_000, 550_000, 600_000, "lm_head")
    pp(400_000, 700_000, "sample")
    launch(410_000, 600_000, 650_000, "softmax")
    b.runtime(base + 420_000, base + 430_000, "cudaMemcpyAsync_v3020", corr, pid=1, tid=1)
    b.memcpy(base + 650_000, base + 660_000, 4096, corr, copy_kind=2, pid=1)
    corr += 1
    pp(700_000, 800_000, "sync")
    b.runtime(base + 705_000, base + 795_000, "cudaStreamSynchronize_v3020", corr, pid=1, tid=1)
    corr += 1
    pp(800_000, 950_000, "kv")
    return corr


def build_gpu_trace(path: Path, slows: tuple[int, ...] = (200_000, 0, 50_000)) -> Path:
    """A baseline run of identical decode steps, 2 ms apart; step i lasts 1 ms + slows[i]."""
    b = NsysExportBuilder()
    b.process(1, "python3")
    b.thread(1, 1, "main")
    b.domain(1, "specnsys", pid=1, tid=1)
    b.gpu(0)
    b.start_end(0, len(slows) * 2 * STEP, "request", pid=1, tid=1, domain_id=1)
    corr = 1
    for i, slow in enumerate(slows):
        corr = add_step(b, i * 2 * STEP, corr, slow=slow)
    return b.write(path)


@pytest.fixture
def gpu_trace(tmp_path: Path) -> Path:
    return build_gpu_trace(tmp_path / "gpu_steps.sqlite")


def test_default_window_is_the_median_step_with_hand_computed_lanes(gpu_trace: Path) -> None:
    with specnsys.open(gpu_trace) as t:
        lanes = timeline_lanes(t)
    # Durations 1.2, 1.0, 1.05 ms: the median is the third step (index 2), 1.05 ms long.
    end = STEP + 50_000
    assert (lanes.window_start_ns, lanes.window_end_ns) == (4 * STEP, 4 * STEP + end)
    assert lanes.label == "decode step 3 of 3 (median duration)"
    assert lanes.steps == 3
    assert lanes.cpu.rows() == [
        ("decode", 0, end, 0),
        ("schedule", 10_000, 50_000, 1),
        ("forward", 60_000, 400_000, 1),
        ("sample", 400_000, 700_000, 1),
        ("sync", 700_000, 800_000, 1),
        ("kv", 800_000, 950_000, 1),
    ]
    assert lanes.cpu_exclusive_ns == {
        "forward": 340_000,
        "sample": 300_000,
        "decode": 10_000 + 10_000 + 100_000,
        "kv": 150_000,
        "sync": 100_000,
        "schedule": 40_000,
    }
    assert sum(lanes.cpu_exclusive_ns.values()) == lanes.window_ns == end
    assert lanes.gpu.select("lane", "op_kind", "phase", "start_ns", "end_ns").rows() == [
        ("GPU 0 · stream 7", "kernel", "forward", 90_000, 300_000),
        ("GPU 0 · stream 7", "kernel", "forward", 300_000, 550_000),
        ("GPU 0 · stream 7", "kernel", "forward", 550_000, 600_000),
        ("GPU 0 · stream 7", "kernel", "sample", 600_000, 650_000),
        ("GPU 0 · stream 7", "memcpy", "sample", 650_000, 660_000),
    ]
    assert lanes.gpu_busy_ns == 570_000
    assert lanes.gpu_busy_by_phase_ns == {"forward": 510_000, "sample": 60_000}
    # Idle gaps, each owned by the CPU phase that was innermost for most of it:
    # [0, 90k): schedule 40k > forward 30k > decode 20k;
    # [660k, end): kv 150k > decode 100k (950k to the step's end) = sync 100k > sample 40k.
    assert lanes.gpu_gaps.rows() == [(0, 90_000, "schedule"), (660_000, end, "kv")]
    api = lanes.api.select("name", "phase").rows()
    assert api == [
        ("cudaLaunchKernel", "forward"),
        ("cudaLaunchKernel", "forward"),
        ("cudaLaunchKernel", "forward"),
        ("cudaLaunchKernel", "sample"),
        ("cudaMemcpyAsync", "sample"),
        ("cudaStreamSynchronize", "sync"),
    ]
    assert lanes.not_available == {}


def test_step_window_extends_to_the_gpu_work_it_launched(tmp_path: Path) -> None:
    # One step whose last kernel outlives the decode range: the window follows the GPU.
    b = NsysExportBuilder()
    b.process(1, "python3")
    b.thread(1, 1, "main")
    b.domain(1, "specnsys", pid=1, tid=1)
    b.start_end(0, 5_000, "request", pid=1, tid=1, domain_id=1)
    b.push_pop(0, 1_000, "decode", pid=1, tid=1, domain_id=1)
    b.push_pop(100, 400, "verify", pid=1, tid=1, domain_id=1)
    b.runtime(200, 210, "cudaLaunchKernel", 1, pid=1, tid=1)
    b.kernel(300, 1_800, "verify_gemm", 1, pid=1)
    with specnsys.open(b.write(tmp_path / "t.sqlite")) as t:
        lanes = timeline_lanes(t, step=0)
    assert (lanes.window_start_ns, lanes.window_end_ns) == (0, 1_800)
    assert lanes.label == "decode step 1 of 1 (chosen), with the GPU work it launched"
    assert lanes.gpu.select("phase", "start_ns", "end_ns").rows() == [("verify", 300, 1_800)]
    assert lanes.gpu_gaps.rows() == [(0, 300, "verify")]
    # After 1000 no phase range is open: the CPU lane ends there, the rest is unannotated.
    assert lanes.cpu_exclusive_ns["unannotated"] == 800
    assert sum(lanes.cpu_exclusive_ns.values()) == 1_800


def test_explicit_window_and_bad_step(gpu_trace: Path) -> None:
    with specnsys.open(gpu_trace) as t:
        lanes = timeline_lanes(t, start_ns=2 * STEP + 500_000, end_ns=2 * STEP + 700_000)
        assert lanes.label == "0.200 ms window"
        # The window starts inside the second step's sample range and its gemm_mlp kernel.
        assert lanes.cpu.rows() == [("decode", 0, 200_000, 0), ("sample", 0, 200_000, 1)]
        assert lanes.gpu.select("name", "start_ns", "end_ns").rows() == [
            ("gemm_mlp", 0, 50_000),
            ("lm_head", 50_000, 100_000),
            ("softmax", 100_000, 150_000),
            ("DtoH", 150_000, 160_000),
        ]
        assert lanes.gpu_busy_ns == 160_000
        # The same window in milliseconds from the analysis window start (the request, at 0).
        same = timeline_lanes(t, window_ms=(2.5, 2.7))
        assert (same.window_start_ns, same.window_end_ns) == (2_500_000, 2_700_000)
        assert same.gpu.equals(lanes.gpu) and same.cpu.equals(lanes.cpu)
        with pytest.raises(UsageError, match="has 3 decode steps"):
            timeline_lanes(t, step=3)
        with pytest.raises(UsageError, match="empty timeline window"):
            timeline_lanes(t, start_ns=10, end_ns=10)


def test_cpu_only_capture_says_why_gpu_lanes_are_missing() -> None:
    with specnsys.open(SAMPLES / "spec_chat_c4_k4.sqlite") as t:
        lanes = timeline_lanes(t)
    assert lanes.label.startswith("decode step ")
    assert lanes.label.endswith("(median duration)")
    assert set(lanes.not_available) == {"api", "gpu"}
    assert "no GPU activity" in lanes.not_available["gpu"]
    assert lanes.gpu_busy_ns is None and lanes.gpu.height == 0
    assert sum(lanes.cpu_exclusive_ns.values()) == lanes.window_ns
    phases = set(lanes.cpu["phase"].to_list())
    assert {"decode", "draft", "verify"} <= phases
    assert lanes.cpu.filter(lanes.cpu["phase"] == "decode")["level"].to_list() == [0]
    d = lanes.to_dict()
    assert d["window_ns"] == lanes.window_ns and d["gpu"] == [] and d["cpu"]


def test_trace_without_phase_ranges_is_bad_input(tmp_path: Path) -> None:
    b = NsysExportBuilder()
    b.process(1, "python3")
    b.thread(1, 1, "main")
    b.push_pop(0, 100, "something_else", pid=1, tid=1)
    with specnsys.open(b.write(tmp_path / "t.sqlite")) as t, pytest.raises(BadInputError):
        timeline_lanes(t)
