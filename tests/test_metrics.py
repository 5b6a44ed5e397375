"""Metrics on built traces with hand-computed answers, and pure formulas (docs/design.md#metrics).

Every expected value below is worked out from the event times in the test (comments show
the arithmetic), not read back from the code under test.
"""

from __future__ import annotations

import math
from fractions import Fraction
from pathlib import Path
from typing import cast

import polars as pl
import pytest

import specnsys
from specnsys.errors import BadInputError, UsageError
from specnsys.metrics import (
    Comparison,
    amdahl_ceiling,
    amdahl_speedup,
    analyze_trace,
    best_k,
    compare_many,
    compare_runs,
    compare_sweep,
    expected_speedup,
    tau,
    whatif,
)
from specnsys.metrics.acceptance import acceptance_from_pairs
from specnsys.metrics.analysis import analysis_steps
from specnsys.metrics.bandwidth import MarkedBandwidth, SampledBandwidth
from specnsys.testing import NsysExportBuilder

# --------------------------------------------------------------------------- builders


def number(value: object) -> float:
    """A number from a ``dict[str, object]`` document (``whatif``), checked to be one."""
    assert isinstance(value, (int, float)) and not isinstance(value, bool), value
    return value


class Loop:
    """A built trace of one process, one thread, domain ``specnsys`` (id 1)."""

    def __init__(self, pid: int = 1) -> None:
        self.b = NsysExportBuilder()
        self.pid = pid
        self.b.process(pid, "python3")
        self.b.thread(pid, 1, "main")
        self.b.domain(1, "specnsys", pid=pid, tid=1)

    def pp(self, start: int, end: int, text: str) -> None:
        self.b.push_pop(start, end, text, pid=self.pid, tid=1, domain_id=1)

    def request(self, start: int, end: int, rid: int) -> None:
        self.b.start_end(start, end, "request", pid=self.pid, tid=1, domain_id=1, payload_int=rid)

    def mark(self, t: int, text: str, value: int) -> None:
        self.b.mark(t, text, pid=self.pid, tid=1, domain_id=1, payload_int=value)

    def open(self, tmp_path: Path, name: str) -> specnsys.Trace:
        return specnsys.open(self.b.write(tmp_path / name))


def baseline_loop() -> Loop:
    """Two requests one after the other, 3 output tokens each, CPU only.

    exclusive ns: prefill 400+300 = 700; forward 4 x 300 = 1200; sample 100+50+50+100+50+50
    = 400; sync 50+40+40+50+40+40 = 260; decode (own time) 4 x 10 = 40; kv 20; unannotated
    50 + 80 + 50 = 180 (gaps 1550-1600, 2420-2500, 2950-3000). Window 1000..3800 = 2800.
    """
    lp = Loop()
    lp.request(1000, 2400, 0)
    lp.pp(1000, 1400, "prefill")
    lp.mark(1100, "target_bytes", 1000)
    lp.pp(1400, 1500, "sample")
    lp.pp(1500, 1550, "sync")
    lp.mark(1560, "first_token", 0)
    lp.mark(1560, "tokens", 1)
    for start in (1600, 2000):
        lp.pp(start, start + 400, "decode")
        lp.pp(start, start + 300, "forward")
        lp.mark(start + 50, "target_bytes", 2000)
        lp.pp(start + 300, start + 350, "sample")
        lp.pp(start + 350, start + 390, "sync")
        lp.mark(start + 395, "tokens", 1)
    lp.mark(2398, "output_tokens", 3)
    lp.pp(2400, 2420, "kv")
    lp.request(2500, 3800, 1)
    lp.pp(2500, 2800, "prefill")
    lp.pp(2800, 2900, "sample")
    lp.pp(2900, 2950, "sync")
    lp.mark(2960, "first_token", 1)
    lp.mark(2960, "tokens", 1)
    for start in (3000, 3400):
        lp.pp(start, start + 400, "decode")
        lp.pp(start, start + 300, "forward")
        lp.pp(start + 300, start + 350, "sample")
        lp.pp(start + 350, start + 390, "sync")
        lp.mark(start + 395, "tokens", 1)
    lp.mark(3798, "output_tokens", 3)
    return lp


ACCEPTED = (2, 0, 1, 2)


def spec_loop(token_marks: bool = True) -> Loop:
    """One request, k = 2, four speculative steps accepting 2, 0, 1, 2 drafts.

    exclusive ns: prefill 400; sample 50 + 4 x 50 = 250; sync 20 + 4 x 30 = 140;
    draft_prefill 100; draft 4 x 200 = 800; verify 4 x 200 = 800; kv 4 x 10 = 40; decode own
    4 x 10 = 40; unannotated 30 (470-500). Window 0..2600. Tokens 1 + 3 + 1 + 2 + 3 = 10.
    """
    lp = Loop()
    lp.request(0, 2600, 0)
    lp.pp(0, 400, "prefill")
    lp.pp(400, 450, "sample")
    lp.pp(450, 470, "sync")
    lp.mark(480, "first_token", 0)
    if token_marks:
        lp.mark(480, "tokens", 1)
    lp.pp(500, 600, "draft_prefill")
    for i, accepted in enumerate(ACCEPTED):
        s = 600 + 500 * i
        lp.pp(s, s + 500, "decode")
        lp.pp(s, s + 200, "draft")
        lp.pp(s + 200, s + 400, "verify")
        lp.mark(s + 250, "target_bytes", 3000)
        lp.pp(s + 400, s + 450, "sample")
        lp.pp(s + 450, s + 480, "sync")
        lp.pp(s + 480, s + 490, "kv")
        if token_marks:
            lp.mark(s + 491, "tokens", accepted + 1)
        lp.mark(s + 492, "proposed", 2)
        lp.mark(s + 493, "accepted", accepted)
    lp.mark(2598, "output_tokens", 10)
    return lp


@pytest.fixture
def baseline(tmp_path: Path):
    with baseline_loop().open(tmp_path, "base.sqlite") as t:
        yield analyze_trace(t)


@pytest.fixture
def spec(tmp_path: Path):
    with spec_loop().open(tmp_path, "spec.sqlite") as t:
        yield analyze_trace(t)


# --------------------------------------------------------------------------- analyze: baseline


def test_baseline_breakdown_and_p(baseline) -> None:
    a = baseline
    assert a.mode == "baseline" and a.pid == 1
    assert (a.window_start_ns, a.window_end_ns, a.window_ns) == (1000, 3800, 2800)
    walls = {name: row["wall_ns"] for name, row in a.phases.items() if row["wall_ns"]}
    assert walls == {
        "prefill": 700,
        "forward": 1200,
        "sample": 400,
        "sync": 260,
        "decode": 40,
        "kv": 20,
        "unannotated": 180,
    }
    assert sum(row["wall_ns"] for row in a.phases.values()) == a.window_ns
    assert a.accelerable_ns == 1200
    assert a.p == pytest.approx(1200 / 2800)
    assert a.amdahl_ceiling == pytest.approx(1 / (1 - 1200 / 2800))  # 1.75
    assert a.sampler_share == pytest.approx(400 / 2800)
    assert a.phases["forward"]["accelerable"] and not a.phases["prefill"]["accelerable"]
    assert a.phases["forward"]["ranges"] == 4 and a.phases["sample"]["ranges"] == 6
    assert a.per_range_ns["forward_ns"] == pytest.approx(300)


def test_baseline_tokens_steps_requests(baseline) -> None:
    a = baseline
    assert (a.tokens, a.steps, a.requests) == (6, 4, 2)
    assert a.per_token_ns == pytest.approx(2800 / 6)
    assert a.acceptance is None and a.draft_cost_ratio is None and a.k is None
    assert "acceptance" in a.not_available and "draft_cost_ratio" in a.not_available


def test_baseline_ttft_tpot_per_request(baseline) -> None:
    lat = baseline.latency
    rows = {r["request_id"]: r for r in lat["per_request"]}
    # TTFT: 1560 - 1000, 2960 - 2500; TPOT: (2400 - 1560) / 2, (3800 - 2960) / 2
    assert rows[0]["ttft_ns"] == 560 and rows[1]["ttft_ns"] == 460
    assert rows[0]["tpot_ns"] == pytest.approx(420) and rows[1]["tpot_ns"] == pytest.approx(420)
    assert rows[0]["output_tokens"] == 3 and rows[1]["latency_ns"] == 1300
    ttft = lat["ttft_ns"]
    assert ttft["count"] == 2 and ttft["mean"] == pytest.approx(510)
    assert ttft["min"] == 460 and ttft["max"] == 560
    assert ttft["p50"] == pytest.approx(510) and ttft["p90"] == pytest.approx(550)


def test_cpu_trace_says_bandwidth_and_memory_are_not_available(baseline) -> None:
    a = baseline
    assert a.bandwidth is None and a.device_memory is None
    assert "no GPU work" in a.not_available["bandwidth"]
    assert "no GPU work" in a.not_available["device_memory"]
    assert all(row["gpu_busy_ns"] is None for row in a.phases.values())


def test_to_dict_has_the_contract_keys_and_types(baseline, spec) -> None:
    for a in (baseline, spec):
        d = a.to_dict()
        assert d["mode"] in ("baseline", "spec")
        for key in ("window_ns", "tokens", "steps", "requests", "accelerable_ns"):
            assert type(d[key]) is int, key
        for key in ("per_token_ns", "sampler_share"):
            assert type(d[key]) is float, key
        for phase, row in d["phases"].items():
            assert type(row["wall_ns"]) is int and type(row["share"]) is float, phase
            assert "gpu_busy_ns" in row
        assert isinstance(d["not_available"], dict)
        assert all(isinstance(v, str) for v in d["not_available"].values())
    b, s = baseline.to_dict(), spec.to_dict()
    assert type(b["p"]) is float and type(b["amdahl_ceiling"]) is float
    assert b["acceptance"] is None and s["p"] is None and "p" in s["not_available"]
    acc = s["acceptance"]
    assert isinstance(acc["by_position"], list) and type(acc["alpha"]) is float
    assert type(acc["mean_accepted"]) is float and type(acc["tokens_per_step"]) is float
    assert type(s["draft_cost_ratio"]) is float


# --------------------------------------------------------------------------- analyze: spec


def test_spec_breakdown_acceptance_and_cost(spec) -> None:
    a = spec
    assert a.mode == "spec" and a.k == 2
    walls = {name: row["wall_ns"] for name, row in a.phases.items() if row["wall_ns"]}
    assert walls == {
        "prefill": 400,
        "draft_prefill": 100,
        "decode": 40,
        "draft": 800,
        "verify": 800,
        "sample": 250,
        "kv": 40,
        "sync": 140,
        "unannotated": 30,
    }
    assert a.accelerable_ns == 1600 and a.p is None and a.amdahl_ceiling is None
    assert (a.tokens, a.steps, a.requests) == (10, 4, 1)
    acc = a.acceptance
    assert acc is not None
    assert acc["sequence_steps"] == 4
    assert acc["mean_accepted"] == pytest.approx(5 / 4)
    assert acc["tokens_per_step"] == pytest.approx(9 / 4)
    assert acc["by_position"] == pytest.approx([3 / 4, 2 / 4])
    assert acc["accepted_histogram"] == [1, 1, 2]
    # judged drafts: min(accepted + 1, k) = 2 + 1 + 2 + 2 = 7, accepted 5
    assert acc["alpha"] == pytest.approx(5 / 7)
    assert acc["expected_tokens_per_step"] == pytest.approx(1 + 5 / 7 + (5 / 7) ** 2)
    # one draft forward = 800 / (4 ranges x k = 2) = 100; one verify = 800 / 4 = 200
    assert a.per_range_ns["draft_forward_ns"] == pytest.approx(100)
    assert a.draft_cost_ratio == pytest.approx(0.5)
    assert a.whatif is not None and a.whatif["k"] == 2
    assert a.whatif["expected_speedup"] == pytest.approx(expected_speedup(5 / 7, 2, 0.5))
    lat = {r["request_id"]: r for r in a.latency["per_request"]}
    assert lat[0]["ttft_ns"] == 480 and lat[0]["tpot_ns"] == pytest.approx((2600 - 480) / 9)


def test_tokens_fall_back_to_per_request_output_lengths(tmp_path: Path) -> None:
    with spec_loop(token_marks=False).open(tmp_path, "no_tokens.sqlite") as t:
        a = analyze_trace(t)
    assert a.tokens == 10 and a.per_token_ns == pytest.approx(260)
    assert any("output_tokens" in w for w in a.warnings)


def test_acceptance_with_mixed_k_and_invalid_pairs() -> None:
    pairs = pl.DataFrame({"proposed": [4, 4, 2, 2, 3], "accepted": [4, 1, 2, 0, 5]})
    acc = acceptance_from_pairs(pairs)
    assert acc is not None
    assert acc["invalid_pairs"] == 1 and acc["sequence_steps"] == 4
    assert acc["k"] == 4 and acc["k_values"] == [2, 4]
    # position 1: reached by 4 steps, kept by 3; 2: 4 / 3; 3 and 4: only the k=4 steps
    assert acc["by_position"] == pytest.approx([3 / 4, 2 / 4, 1 / 2, 1 / 2])
    # judged: min(5,4) + min(2,4) + min(3,2) + min(1,2) = 4 + 2 + 2 + 1 = 9; accepted 7
    assert acc["alpha"] == pytest.approx(7 / 9)
    assert acceptance_from_pairs(pl.DataFrame({"proposed": [0], "accepted": [0]})) is None


def test_a_pair_proposing_more_than_any_drafter_is_invalid_not_a_huge_list(tmp_path: Path) -> None:
    """A hostile export's ``proposed`` mark of 10**9 made the analysis build a list of that
    many positions: MemoryError under ``ulimit -v`` (exit 4), the machine's memory without.
    Such a pair is invalid, like accepted outside 0..proposed, and said so."""
    from specnsys.metrics.acceptance import MAX_PROPOSED

    pairs = pl.DataFrame(
        {"proposed": [4, 10**9, MAX_PROPOSED + 1, MAX_PROPOSED], "accepted": [2, 3, 1, 0]}
    )
    acc = acceptance_from_pairs(pairs)
    assert acc is not None and acc["invalid_pairs"] == 2 and acc["k"] == MAX_PROPOSED
    assert len(acc["by_position"]) == MAX_PROPOSED
    assert acc["by_position"][:3] == pytest.approx([1 / 2, 1 / 2, 0.0])
    lp = spec_loop()
    lp.mark(2550, "proposed", 10**9)
    lp.mark(2560, "accepted", 3)
    with lp.open(tmp_path, "hostile_k.sqlite") as t:
        a = analyze_trace(t)
    assert a.acceptance is not None and a.acceptance["invalid_pairs"] == 1
    assert any(f"proposed above {MAX_PROPOSED} ignored" in w for w in a.warnings)


# --------------------------------------------------------------------------- compare


def test_compare_exact_prediction_measurement_and_gap_decomposition(baseline, spec) -> None:
    c = compare_runs(baseline, spec)
    p = Fraction(1200, 2800)
    r = Fraction(1200, 6) / Fraction(1600, 10)  # 200 / 160 = 1.25
    predicted = 1 / ((1 - p) + p / r)
    measured = Fraction(2800, 6) / Fraction(2600, 10)
    assert c.p == pytest.approx(float(p))
    assert c.r == pytest.approx(float(r))
    assert c.predicted_speedup == pytest.approx(float(predicted))
    assert c.measured_speedup == pytest.approx(float(measured))
    assert c.gap == pytest.approx(float(measured / predicted - 1))
    contributions = [
        row["gap_contribution"] for row in c.phases.values() if row["gap_contribution"] is not None
    ]
    assert sum(contributions) == pytest.approx(c.gap)
    # prefill: 700/6 ns per token in the baseline, 400/10 in the spec run; S = 2600/10
    assert c.phases["prefill"]["delta_ns_per_token"] == pytest.approx(40 - 700 / 6)
    assert c.phases["prefill"]["gap_contribution"] == pytest.approx((700 / 6 - 40) / 260)
    assert c.moved_phase == "prefill" and c.prediction_holds is False
    assert c.phases["forward"]["gap_contribution"] is None
    # c against a baseline forward: 100 / 300; verify / forward = 200 / 300
    assert c.draft_cost_ratio == pytest.approx(1 / 3)
    assert c.verify_to_forward_ratio == pytest.approx(2 / 3)
    assert c.leviathan is not None and c.leviathan["p"] == pytest.approx(float(p))
    assert any("different token counts" in w for w in c.warnings)
    d = c.to_dict()
    for key in ("p", "r", "predicted_speedup", "measured_speedup", "gap"):
        assert type(d[key]) is float, key
    assert isinstance(d["phases"], dict) and d["moved_phase"] == "prefill"


def test_compare_holds_when_only_accelerable_time_changes(tmp_path: Path) -> None:
    """Same non-accelerable time per token in both runs: prediction == measurement."""
    base = baseline_loop()
    with base.open(tmp_path, "b.sqlite") as t:
        b = analyze_trace(t)
    # The "speculative" run replays the baseline's events with each 300 ns forward split into
    # draft (150) + verify (150): same tokens, same non-accelerable time, r = 1.
    fast = Loop()
    strings = {row[0]: row[1] for row in base.b.rows["StringIds"]}  # string id -> text
    for row in base.b.rows["NVTX_EVENTS"]:
        start, end, kind, payload = row[0], row[1], row[2], row[12]
        text = strings[row[9]] if row[9] else None
        assert isinstance(start, int) and (text is None or isinstance(text, str))
        if text == "forward":
            assert isinstance(end, int)
            fast.pp(start, start + 150, "draft")
            fast.pp(start + 150, end, "verify")
        elif kind == 59 and text:
            assert isinstance(end, int)
            fast.pp(start, end, text)
        elif kind == 60:
            assert isinstance(end, int) and isinstance(payload, int)
            fast.request(start, end, payload)
        elif kind == 34 and text:
            assert isinstance(payload, int)
            fast.mark(start, text, payload)
    with fast.open(tmp_path, "s.sqlite") as t:
        s = analyze_trace(t)
    c = compare_runs(b, s)
    assert c.r == pytest.approx(1.0)
    assert c.predicted_speedup == pytest.approx(1.0) and c.measured_speedup == pytest.approx(1.0)
    assert c.gap == pytest.approx(0.0, abs=1e-12) and c.prediction_holds
    assert c.moved_phases == []


def test_compare_refuses_two_speculative_runs(spec) -> None:
    """compare_runs still needs a baseline and a speculative run; compare_many now diffs two
    speculative runs A/B (issue 19 item 2: ``compare A A`` answers) instead of refusing."""
    with pytest.raises(BadInputError, match="baseline"):
        compare_runs(spec, spec)
    (ab,) = compare_many([spec, spec])
    assert ab.to_dict()["kind"] == "ab" and ab.to_dict()["moved"] == []


def test_compare_many_pairs_each_spec_with_the_baseline_before_it(baseline, spec) -> None:
    runs = compare_many([baseline, spec, spec, baseline, spec])
    assert len(runs) == 3
    assert all(isinstance(r, Comparison) and r.baseline is baseline for r in runs)
    assert [r.to_dict()["k"] for r in compare_sweep(baseline, [spec, spec])] == [2, 2]
    with pytest.raises(BadInputError, match="no speculative trace after it"):
        compare_many([baseline, spec, baseline])
    with pytest.raises(BadInputError, match="no speculative trace after it"):
        compare_many([baseline, baseline, spec])


# --------------------------------------------------------------------------- GPU traces


def gpu_baseline(with_metrics: bool) -> Loop:
    """A GPU baseline: async forward kernel runs on while the CPU samples and syncs.

    prefill: CPU 0-20 + kernel 20-90 + CPU 90-100 = 100; forward: CPU 100-150 + kernel
    150-650 = 550; sample: kernel 650-700 = 50; sync: CPU 700-800 = 100; decode own: 800-1000
    = 200. GPU busy: prefill 70, forward 500, sample 50. Bandwidth of the H200-like device:
    1e12 B/s; target bytes: prefill 70_000 (-> 1e12 B/s), forward 400_000 (-> 8e11 B/s).
    """
    lp = Loop()
    b = lp.b
    b.gpu(0, memory_bandwidth=10**12)
    lp.request(0, 1000, 0)
    lp.pp(0, 100, "prefill")
    b.runtime(10, 20, "cudaLaunchKernel", 1)
    lp.mark(15, "target_bytes", 70_000)
    b.kernel(20, 90, "prefill_gemm", 1)
    lp.pp(100, 1000, "decode")
    lp.pp(100, 200, "forward")
    lp.mark(105, "target_bytes", 400_000)
    b.runtime(110, 120, "cudaLaunchKernel", 2)
    b.kernel(150, 650, "forward_gemm", 2)
    lp.mark(190, "device_memory_peak", 5 * 2**30)
    lp.pp(200, 300, "sample")
    b.runtime(210, 220, "cudaLaunchKernel", 3)
    b.kernel(650, 700, "softmax", 3)
    lp.pp(300, 800, "sync")
    lp.mark(900, "tokens", 1)
    if with_metrics:
        for t in range(0, 1000, 50):
            if t in range(150, 650, 50):  # 10 forward samples: 5 at 90%, 5 at 50%
                read, write = (60, 30) if t < 400 else (40, 10)
            elif t == 50:  # prefill
                read, write = 20, 10
            elif t == 650:  # sample
                read, write = 50, 0
            else:  # GPU idle
                read, write = 1, 0
            b.gpu_metric(t, 0, 1, "DRAM Read Bandwidth [Throughput %]", read)
            b.gpu_metric(t, 0, 2, "DRAM Write Bandwidth [Throughput %]", write)
            b.gpu_metric(t, 0, 3, "SMs Active [Throughput %]", 99)
    return lp


def test_gpu_baseline_bandwidth_from_target_bytes(tmp_path: Path) -> None:
    with gpu_baseline(False).open(tmp_path, "gpu.sqlite") as t:
        a = analyze_trace(t)
    walls = {name: row["wall_ns"] for name, row in a.phases.items() if row["wall_ns"]}
    assert walls == {"prefill": 100, "forward": 550, "sample": 50, "sync": 100, "decode": 200}
    assert a.p == pytest.approx(0.55)
    assert a.phases["forward"]["gpu_busy_ns"] == 500 and a.phases["sync"]["gpu_busy_ns"] == 0
    assert a.bandwidth is not None and a.bandwidth["source"] == "target_bytes"
    bw = cast(MarkedBandwidth, a.bandwidth)  # the source says which of the two payloads it is
    assert bw["peak_bytes_per_s"] == pytest.approx(1e12)
    assert bw["by_phase"]["forward"]["bytes_per_s"] == pytest.approx(8e11)
    assert bw["by_phase"]["forward"]["fraction_of_peak"] == pytest.approx(0.8)
    assert bw["by_phase"]["prefill"]["fraction_of_peak"] == pytest.approx(1.0)
    mem = a.device_memory
    assert mem is not None and mem["by_phase"]["forward"]["peak_bytes"] == 5 * 2**30
    assert mem["total_memory_bytes"] == 143_771_336_704


def test_target_bytes_sum_without_wrapping(tmp_path: Path) -> None:
    """A hostile export's marks: two target_bytes of 2**62 in one phase are 2**63 bytes, not
    a wrapped 64-bit sum (-2**63)."""
    lp = Loop()
    lp.b.gpu(0, memory_bandwidth=10**12)
    lp.request(0, 1000, 0)
    lp.pp(0, 1000, "forward")
    lp.b.runtime(10, 20, "cudaLaunchKernel", 1)
    lp.b.kernel(20, 900, "gemm", 1)
    lp.mark(100, "target_bytes", 2**62)
    lp.mark(200, "target_bytes", 2**62)
    with lp.open(tmp_path, "huge_bytes.sqlite") as t:
        a = analyze_trace(t)
    bw = cast(MarkedBandwidth, a.bandwidth)
    assert bw["source"] == "target_bytes" and bw["by_phase"]["forward"]["bytes"] == 2**63
    assert bw["by_phase"]["forward"]["bytes_per_s"] == pytest.approx(2**63 / 880e-9)


def test_gpu_baseline_bandwidth_from_gpu_metrics(tmp_path: Path) -> None:
    with gpu_baseline(True).open(tmp_path, "gpu_metrics.sqlite") as t:
        a = analyze_trace(t, pid=1)
    assert a.bandwidth is not None and a.bandwidth["source"] == "gpu_metrics"
    bw = cast(SampledBandwidth, a.bandwidth)  # the source says which of the two payloads it is
    assert bw["metrics"] == [
        "DRAM Read Bandwidth [Throughput %]",
        "DRAM Write Bandwidth [Throughput %]",
    ]
    fwd = bw["by_phase"]["forward"]
    assert fwd["samples"] == pytest.approx(10)
    assert fwd["mean_pct"] == pytest.approx(70)  # (5 x 90 + 5 x 50) / 10
    assert fwd["fraction_above_threshold"] == pytest.approx(0.5)
    assert fwd["mean_bytes_per_s"] == pytest.approx(0.7e12)
    assert bw["by_phase"]["prefill"]["mean_pct"] == pytest.approx(30)
    assert bw["by_phase"]["sample"]["mean_pct"] == pytest.approx(50)
    assert set(bw["by_phase"]) == {"prefill", "forward", "sample"}
    assert bw["samples"] == 20 and bw["busy_samples"] == 12


def test_gpu_without_bytes_or_metrics_says_why(tmp_path: Path) -> None:
    lp = Loop()
    lp.b.gpu(0)
    lp.request(0, 1000, 0)
    lp.pp(0, 500, "forward")
    lp.b.runtime(10, 20, "cudaLaunchKernel", 1)
    lp.b.kernel(20, 400, "gemm", 1)
    with lp.open(tmp_path, "nobytes.sqlite") as t:
        a = analyze_trace(t)
    assert a.bandwidth is None and "target_bytes" in a.not_available["bandwidth"]
    assert a.device_memory is None
    assert "--cuda-memory-usage" in a.not_available["device_memory"]
    # no tokens marks: one token for the request open across the forward (no prefill ranges)
    assert a.tokens == 1 and a.tokens_source == "forward_steps"


# --------------------------------------------------------------------------- bad input


def test_trace_without_forward_or_draft_is_a_generic_run(tmp_path: Path) -> None:
    """Was BadInputError ("cannot tell a baseline run from a speculative one"); issue 19 item 2:
    it is analyzed in the generic mode, the speculative numbers not available with the reason."""
    lp = Loop()
    lp.request(0, 100, 0)
    lp.pp(0, 50, "prefill")
    with lp.open(tmp_path, "nophase.sqlite") as t:
        a = analyze_trace(t)
    assert a.mode == "generic" and a.p is None and "--rules" in a.not_available["p"]
    assert a.wall_ns("prefill") == 50 and sum(r["wall_ns"] for r in a.phases.values()) == 100


def test_dropped_nvtx_ranges_signature_is_explained(tmp_path: Path) -> None:
    b = NsysExportBuilder()
    b.process(1, "python3")
    b.thread(1, 1, "main")
    b.domain(1, "specnsys", pid=1, tid=1)
    b.mark(10, "other", pid=1, tid=1)
    path = b.write(tmp_path / "dropped.sqlite")
    with specnsys.open(path) as t, pytest.raises(BadInputError, match="0.2.12"):
        analyze_trace(t)


# --------------------------------------------------------------------------- formulas

LEVIATHAN_TABLE = {  # reference section 1.1: (c, alpha) -> (best k, speedup)
    (0.05, 0.5): (3, 1.63), (0.05, 0.6): (4, 1.92), (0.05, 0.7): (6, 2.35),
    (0.05, 0.8): (8, 3.09), (0.05, 0.9): (13, 4.67),
    (0.10, 0.5): (2, 1.46), (0.10, 0.6): (3, 1.67), (0.10, 0.7): (4, 1.98),
    (0.10, 0.8): (6, 2.47), (0.10, 0.9): (10, 3.43),
    (0.20, 0.5): (1, 1.25), (0.20, 0.6): (2, 1.40), (0.20, 0.7): (3, 1.58),
    (0.20, 0.8): (4, 1.87), (0.20, 0.9): (7, 2.37),
    (0.35, 0.5): (1, 1.11), (0.35, 0.6): (1, 1.19), (0.35, 0.7): (2, 1.29),
    (0.35, 0.8): (3, 1.44), (0.35, 0.9): (4, 1.71),
}  # fmt: skip


@pytest.mark.parametrize(("c", "alpha"), sorted(LEVIATHAN_TABLE))
def test_whatif_reproduces_leviathan_optimal_k_table(c: float, alpha: float) -> None:
    k, speedup = LEVIATHAN_TABLE[(c, alpha)]
    w = whatif(alpha, None, c)
    assert w["best_k"] == k
    assert round(number(w["best_speedup"]), 2) == speedup
    got_k, got_speedup = best_k(alpha, c)
    assert got_k == k and got_speedup == pytest.approx(w["best_speedup"])


def test_tau_and_expected_speedup_closed_forms() -> None:
    assert tau(0.8, 4) == pytest.approx(1 + 0.8 + 0.64 + 0.512 + 0.4096)
    assert tau(1.0, 4) == 5.0 and tau(0.0, 3) == 1.0
    assert expected_speedup(0.8, 4, 0.0) == pytest.approx(tau(0.8, 4))
    assert expected_speedup(0.5, 1, 0.2) == pytest.approx(1.5 / 1.2)
    # Leviathan's corollary: k = 1 gives (1 + alpha) / (1 + c)
    assert expected_speedup(0.6, 1, 0.1) == pytest.approx(1.6 / 1.1)


def test_amdahl_formulas_and_reference_quick_table() -> None:
    # reference section 5.1: p = 0.8 -> 1.36/1.67/1.92/2.14 for r = 1.5/2/2.5/3
    got = [round(amdahl_speedup(0.8, r), 2) for r in (1.5, 2, 2.5, 3)]
    assert got == [1.36, 1.67, 1.92, 2.14]
    assert amdahl_ceiling(0.75) == pytest.approx(4.0) and amdahl_ceiling(1.0) is None
    assert amdahl_speedup(0.0, 5) == 1.0 and amdahl_speedup(1.0, 2.0) == pytest.approx(2.0)


def test_whatif_end_to_end_and_limits() -> None:
    w = whatif(0.8, 4, 0.1, p=0.6)
    s = expected_speedup(0.8, 4, 0.1)
    assert w["expected_speedup"] == pytest.approx(s)
    assert w["e2e_speedup"] == pytest.approx(1 / (0.4 + 0.6 / s))
    assert w["amdahl_ceiling"] == pytest.approx(2.5) and number(w["e2e_speedup"]) < 2.5
    by_k = w["by_k"]
    assert isinstance(by_k, list) and [row["k"] for row in by_k] == list(range(1, 9))
    free = whatif(1.0, None, 0.0, k_max=16)
    assert free["best_k"] == 16 and free["best_k_at_search_limit"]
    hopeless = whatif(0.2, 2, 0.5)
    assert not hopeless["speculation_pays"] and hopeless["best_k"] == 1
    assert math.isclose(number(hopeless["best_speedup"]), 1.2 / 1.5)


@pytest.mark.parametrize("c", [1e308, 1.7976931348623157e308])
def test_whatif_of_a_cost_beyond_the_float_range_is_the_limit(c: float) -> None:
    """k x c past the largest float: the decode speedup is 0.0 (the limit, not a refusal), and
    the end-to-end speedup Amdahl gives for it is 0 too (was: "r must be a finite speedup >
    0, got 0.0", an r the user never gave); with p = 0 nothing is accelerable: 1."""
    from specnsys.forecasting.formula import formula_forecast

    w = whatif(0.7, 4, c, p=0.6)
    assert w["expected_speedup"] == 0.0 and w["e2e_speedup"] == 0.0
    # at the best k (1) the cost still fits: a speedup of about 1e-308, not 0
    assert 0.0 <= number(w["best_e2e_speedup"]) < 1e-300 and not w["speculation_pays"]
    assert whatif(0.7, 4, c, p=0.0)["e2e_speedup"] == 1.0
    f = formula_forecast(p=0.6, alpha=0.7, k=4, c=c)
    assert f.speedup == 0.0 and f.decode_speedup == 0.0
    with pytest.raises(UsageError, match="r must be"):  # a given r of 0 stays refused
        formula_forecast(p=0.6, r=0.0)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"alpha": 1.2, "k": 2, "c": 0.1},
        {"alpha": 0.5, "k": 0, "c": 0.1},
        {"alpha": 0.5, "k": 2, "c": -1.0},
        {"alpha": 0.5, "k": 2, "c": 0.1, "p": 1.5},
    ],
)
def test_whatif_rejects_impossible_inputs(kwargs: dict) -> None:
    with pytest.raises(UsageError):
        whatif(**kwargs)


def test_the_library_whatif_bounds_k_as_the_command_line_does() -> None:
    """Issue 30 (g): ``whatif(k=10**9)`` ran for hours through the library."""
    from specnsys.errors import UsageError
    from specnsys.metrics import amdahl

    with pytest.raises(UsageError, match="from 1 to 1,024"):
        amdahl.whatif(0.8, 10**9, 0.1)
    with pytest.raises(UsageError, match="from 1 to 1,024"):
        amdahl.whatif(0.8, 4, 0.1, k_max=10**9)
    assert amdahl.whatif(0.8, 1024, 0.1)["k"] == 1024


def test_mark_sums_past_64_bits_neither_wrap_nor_fail(tmp_path: Path) -> None:
    """A hostile export's payloads fit 64 bits one by one, not summed: two requests of 2**62
    output tokens are 2**63 tokens (an Int64 sum gave -2**63), and a step whose proposed
    marks add up past 64 bits has no proposed count (the cast of its sum failed the whole
    analysis), the other steps keep theirs."""
    lp = spec_loop()
    lp.mark(1000, "proposed", 2**62)  # in the first step (600-1100), beside its own mark
    lp.mark(1001, "proposed", 2**62)
    with lp.open(tmp_path, "huge_sums.sqlite") as t:
        a = analyze_trace(t)
        steps = analysis_steps(t, a, None)
    assert steps["proposed"].to_list() == [None, 2, 2, 2]
    assert steps["accepted"].to_list() == list(ACCEPTED)

    lp = Loop()
    for rid, s in enumerate((0, 2000)):
        lp.request(s, s + 1000, rid)
        lp.pp(s, s + 400, "prefill")
        lp.pp(s + 400, s + 900, "forward")
        lp.mark(s + 950, "output_tokens", 2**62)
    with lp.open(tmp_path, "huge_outputs.sqlite") as t:
        a = analyze_trace(t)
    assert a.tokens == 2**63 and a.to_dict()["tokens_source"] == "output_tokens_marks"
