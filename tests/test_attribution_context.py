"""One attribution context per (trace, rules): the phase index is built once and shared."""

from __future__ import annotations

from pathlib import Path

import pytest

from specnsys.attribution import default_rules
from specnsys.attribution.context import AttributionContext
from specnsys.attribution.lanes import timeline_lanes
from specnsys.ingest import open_trace
from specnsys.metrics import analyze_trace
from specnsys.testing.builder import gpu_loop
from specnsys.vocabulary import DOMAIN, PHASES

SPEC = Path(__file__).resolve().parent.parent / "sample_traces" / "spec_chat_c4_k4.sqlite"


def test_a_report_builds_the_phase_index_once_per_trace() -> None:
    # What specnsys.report() runs inside one opened trace: the analysis (breakdown, marks,
    # bandwidth) and the lanes, cold (no cached results), all sharing one context.
    rules = default_rules(PHASES, DOMAIN)
    with open_trace(SPEC, use_cache=False) as trace, AttributionContext(trace, rules) as context:
        analysis = analyze_trace(trace, context=context)
        lanes = timeline_lanes(trace, rules=rules, context=context)
        assert context.phase_index_builds == 1
        # asked for by the breakdown, the mark lookups, the bandwidth and the lanes
        assert context.phase_index_uses >= 3
        # the same numbers as each building its own index
        assert analyze_trace(trace).to_dict() == analysis.to_dict()
        assert timeline_lanes(trace, rules=rules).to_dict() == lanes.to_dict()
    assert context.phase_index_builds == 1


def test_a_context_refuses_other_rules() -> None:
    with open_trace(SPEC, use_cache=False) as trace:
        context = AttributionContext(trace, default_rules(PHASES, DOMAIN))
        with pytest.raises(ValueError, match="attribution context"):
            timeline_lanes(trace, rules="nvtx", context=context)


def _gpu_steps(path: Path) -> Path:
    """Four decode steps of draft, verify and sample, each phase launching one kernel."""
    b = gpu_loop(400_000)
    corr = 100
    for step in range(4):
        t0 = step * 100_000
        b.push_pop(t0, t0 + 90_000, "decode", pid=1, tid=1, domain_id=1)
        for i, phase in enumerate(("draft", "verify", "sample")):
            s = t0 + i * 30_000
            b.push_pop(s, s + 25_000, phase, pid=1, tid=1, domain_id=1)
            b.runtime(s + 1_000, s + 2_000, "cudaLaunchKernel", corr)
            b.kernel(s + 2_000, s + 20_000, f"{phase}_kernel", corr)
            corr += 1
    return b.write(path)


def test_an_analysis_without_a_context_reads_the_phase_ranges_once(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # A library caller of analyze_trace passes no context. The breakdown, the findings' index
    # and the decode-step tables all need the phase ranges: one read, not one per step (on a
    # 2M-kernel export each read costs 0.5-0.7 s).
    import specnsys.attribution.phase_map as phase_map
    import specnsys.attribution.timeline as timeline
    import specnsys.metrics.steps as steps

    reads: list[str] = []
    real_ranges, real_sql = phase_map.phase_ranges, phase_map.phase_ranges_sql

    def counted_ranges(*args: object, **kwargs: object) -> object:
        reads.append("phase_ranges")
        return real_ranges(*args, **kwargs)  # type: ignore[arg-type]

    def counted_sql(*args: object, **kwargs: object) -> object:
        reads.append("steps derived the ranges again")
        return real_sql(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(phase_map, "phase_ranges", counted_ranges)
    monkeypatch.setattr(timeline, "phase_ranges", counted_ranges)
    monkeypatch.setattr(steps, "phase_ranges_sql", counted_sql)
    path = _gpu_steps(tmp_path / "steps.sqlite")
    with open_trace(path, use_cache=False) as trace:
        alone = analyze_trace(trace)
    assert alone.findings is not None, "the findings ran (they build the phase index)"
    assert alone.step_distributions, "the step tables ran"
    assert reads == ["phase_ranges"]
    # the same numbers as the command line's path, which passes its own context
    with open_trace(path, use_cache=False) as trace:
        rules = default_rules(PHASES, DOMAIN)
        with AttributionContext(trace, rules) as context:
            shared = analyze_trace(trace, context=context)
    assert alone.to_dict() == shared.to_dict()


def test_an_analysis_lets_go_of_the_lean_launch_attribution(tmp_path: Path) -> None:
    # The lean frame of every runtime call with its phase serves the phase breakdown alone
    # (the lanes, the bandwidth and the exports ask for the detailed one). Held on, it sat
    # beside the findings' ops at the 20M-kernel analysis's peak (425 MiB of 4.0 GiB).
    path = _gpu_steps(tmp_path / "steps.sqlite")
    rules = default_rules(PHASES, DOMAIN)
    with open_trace(path, use_cache=False) as trace, AttributionContext(trace, rules) as context:
        analysis = analyze_trace(trace, context=context)
        assert context.lean_runtime_pids() == set()
        # a later breakdown on the same context builds it again, with the same numbers
        again = analyze_trace(trace, context=context)
        assert again.to_dict() == analysis.to_dict()
