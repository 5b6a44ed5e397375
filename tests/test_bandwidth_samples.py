"""GPU_METRICS samples against the GPU work running at their instants (metrics/bandwidth.py).

The placement is a sorted merge of each sample with its device's busy islands per phase; these
tests hold it to the definition, sample by sample: an op ``[start, end)`` of the sample's
device holds its instant. The interval join it replaced took 49 s on 100k samples and 200k
kernels (bench/gpu_metrics.py)."""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction
from pathlib import Path
from typing import cast

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import specnsys
from specnsys.attribution import exclusive_phase_times, gpu_ops_with_phase
from specnsys.metrics.analysis import analyze_trace, rules_in_force
from specnsys.metrics.bandwidth import SampledBandwidth, _per_phase, metric_ops, running_phases
from specnsys.metrics.events import Scope, resolve
from tests.conftest import CORPUS
from tests.test_metrics import Loop

_OPS = {"phase": pl.String, "start": pl.Int64, "end": pl.Int64, "device_id": pl.Int64}
_SAMPLES = {"t": pl.Int64, "device_id": pl.Int64, "pct": pl.Float64}


def _naive(
    samples: list[tuple[int, int, float]], ops: list[tuple[str | None, int, int, int | None]]
) -> set[tuple[int, int, float, str | None]]:
    """Each sample with each phase of an op of its device running at its instant."""
    return {
        (t, device, pct, phase)
        for t, device, pct in samples
        for phase, start, end, op_device in ops
        if op_device == device and start <= t < end
    }


op = st.tuples(
    st.sampled_from(["draft", "verify", "sample", None]),
    st.integers(0, 60),
    st.integers(0, 15),
    st.sampled_from([0, 1, None]),
).map(lambda o: (o[0], o[1], o[1] + o[2], o[3]))


@settings(max_examples=300, deadline=None)
@given(
    st.lists(op, max_size=25),
    st.lists(st.tuples(st.integers(-5, 80), st.sampled_from([0, 1, 2])), max_size=25, unique=True),
)
def test_each_sample_lands_on_the_phases_running_at_its_instant(
    ops: list[tuple[str | None, int, int, int | None]], instants: list[tuple[int, int]]
) -> None:
    samples = [(t, device, float((t * 7 + device) % 100)) for t, device in instants]
    got = running_phases(
        pl.DataFrame(samples, schema=_SAMPLES, orient="row"),
        pl.DataFrame(ops, schema=_OPS, orient="row"),
    )
    assert got.columns == ["t", "device_id", "pct", "phase"]
    rows = got.rows()
    assert len(rows) == len(set(rows))  # one row per sample and phase
    assert set(rows) == _naive(samples, ops)
    # the weights: a sample shared by n phases counts 1/n to each
    per_phase = {p: (n, pct, above) for p, n, pct, above in _per_phase(got, 50.0).rows()}
    shares: dict[str | None, list[tuple[Fraction, float]]] = {}
    for t, device, pct, phase in rows:
        n = sum(1 for r in rows if r[0] == t and r[1] == device)
        shares.setdefault(phase, []).append((Fraction(1, n), pct))
    assert set(per_phase) == set(shares)
    for phase, parts in shares.items():
        weight = sum(w for w, _ in parts)
        n, pct, above = per_phase[phase]
        assert n == pytest.approx(float(weight))
        assert pct == pytest.approx(float(sum(w * Fraction(p) for w, p in parts) / weight))
        assert above == pytest.approx(float(sum(w for w, p in parts if p >= 50.0) / weight))


def test_samples_at_op_bounds_and_on_touching_ops() -> None:
    ops = pl.DataFrame(
        [("a", 10, 20, 0), ("a", 20, 30, 0), ("b", 15, 25, 0), ("b", 40, 40, 0),
         ("a", 50, 60, None), ("b", 50, 60, 1)],
        schema=_OPS, orient="row",
    )  # fmt: skip
    samples = pl.DataFrame(
        [(9, 0, 1.0), (10, 0, 2.0), (20, 0, 3.0), (25, 0, 4.0), (30, 0, 5.0), (40, 0, 6.0),
         (55, 0, 7.0), (55, 1, 8.0)],
        schema=_SAMPLES, orient="row",
    )  # fmt: skip
    got = sorted(running_phases(samples, ops).rows())
    # 10 opens a; 20 is in a's second op (touching ops merge) and in b; 25 ends b; 30 ends a;
    # an empty op holds nothing; an op of no device holds nothing; device 1's op holds its own
    assert got == [
        (10, 0, 2.0, "a"), (20, 0, 3.0, "a"), (20, 0, 3.0, "b"), (25, 0, 4.0, "a"),
        (55, 1, 8.0, "b"),
    ]  # fmt: skip


def test_two_phases_at_once_split_a_sample(tmp_path: Path) -> None:
    """Through the analysis: a draft kernel and a verify kernel overlap on two streams; the
    samples in the overlap count half to each phase."""
    lp = Loop()
    b = lp.b
    b.gpu(0, memory_bandwidth=10**12)
    lp.request(0, 1000, 0)
    lp.pp(0, 1000, "decode")
    lp.pp(0, 400, "draft")
    b.runtime(10, 20, "cudaLaunchKernel", 1)
    b.kernel(100, 500, "draft_gemm", 1, stream=7)
    lp.pp(400, 1000, "verify")
    b.runtime(410, 420, "cudaLaunchKernel", 2)
    b.kernel(300, 700, "verify_gemm", 2, stream=8)
    # a sample every 100 ns: 100 and 200 in draft alone, 300 and 400 in both, 500 and 600 in
    # verify alone; its read throughput is t / 10 %
    for at in range(0, 1000, 100):
        b.gpu_metric(at, 0, 1, "DRAM Read Bandwidth [Throughput %]", at // 10)
        b.gpu_metric(at, 0, 2, "DRAM Write Bandwidth [Throughput %]", 0)
    with lp.open(tmp_path, "overlap.sqlite") as trace:
        a = analyze_trace(trace, pid=1)
    assert a.bandwidth is not None and a.bandwidth["source"] == "gpu_metrics"
    bw = cast(SampledBandwidth, a.bandwidth)  # the source says which payload it is
    by_phase = bw["by_phase"]
    assert set(by_phase) == {"draft", "verify"}
    draft, verify = by_phase["draft"], by_phase["verify"]
    # draft: 100, 200 whole and 300, 400 halves; verify: 300, 400 halves and 500, 600 whole
    assert draft["samples"] == pytest.approx(3.0) and verify["samples"] == pytest.approx(3.0)
    assert draft["mean_pct"] == pytest.approx((10 + 20 + 15 + 20) / 3)
    assert verify["mean_pct"] == pytest.approx((15 + 20 + 50 + 60) / 3)
    assert bw["samples"] == 10 and bw["busy_samples"] == 6


def _graph_trace(tmp_path: Path) -> Path:
    from tests.test_graph_nodes import _build

    return _build(tmp_path / "graph.sqlite")


@pytest.mark.parametrize(
    "source",
    [
        pytest.param(lambda _: CORPUS / "2020.3.2_quasiben_cudf.sqlite", id="nvtx-rules"),
        pytest.param(_graph_trace, id="graph-nodes"),
        pytest.param(lambda _: CORPUS / "2026.2.1_nsysai_mfu-2gpu-after.sqlite", id="two-gpus"),
    ],
)
def test_the_ops_samples_land_on_are_the_detailed_attributions(
    tmp_path: Path, corpus_cache: Path, source: Callable[[Path], Path]
) -> None:
    """The samples are placed on the lean launch attribution with the device; it holds the
    same ops, phases and devices as the detailed one (:func:`gpu_ops_with_phase`) they were
    placed on before, graph nodes and several GPUs included."""
    path = source(tmp_path)
    if not path.exists():
        pytest.skip(f"{path} is not here")
    columns = [pl.col("phase").cast(pl.String), "start", "end", "device_id"]
    with specnsys.open(path) as trace:
        rules = resolve(rules_in_force(trace, None)[0])
        breakdown = exclusive_phase_times(trace, rules=rules)
        scope = Scope.of(breakdown, rules)
        lean = metric_ops(trace, scope).select(columns).sort(pl.all())
        detailed = (
            gpu_ops_with_phase(
                trace, rules=rules, pid=scope.pid, window=(scope.start_ns, scope.end_ns)
            )
            .filter(pl.col("end") > pl.col("start"))
            .select(columns)
            .sort(pl.all())
        )
    assert lean.height > 0
    assert lean.equals(detailed)


def test_huge_metric_values_sum_without_wrapping(tmp_path: Path) -> None:
    """A hostile export's values: two DRAM metrics of 2**62 at one instant sum to 2**63, as
    the SQL the placement replaced gave it (a 64-bit integer sum would wrap to -2**63)."""
    lp = Loop()
    b = lp.b
    b.gpu(0, memory_bandwidth=10**12)
    lp.request(0, 1000, 0)
    lp.pp(0, 1000, "decode")
    b.runtime(10, 20, "cudaLaunchKernel", 1)
    b.kernel(100, 500, "gemm", 1)
    b.gpu_metric(200, 0, 1, "DRAM Read Bandwidth [Throughput %]", 2**62)
    b.gpu_metric(200, 0, 2, "DRAM Write Bandwidth [Throughput %]", 2**62)
    with lp.open(tmp_path, "huge.sqlite") as trace:
        a = analyze_trace(trace, pid=1)
    bw = cast(SampledBandwidth, a.bandwidth)
    assert bw["by_phase"]["decode"]["mean_pct"] == float(2**63)
