"""One attribution context per (trace, rules): the phase index is built once and shared."""

from __future__ import annotations

from pathlib import Path

import pytest

from specnsys.attribution import default_rules
from specnsys.attribution.context import AttributionContext
from specnsys.attribution.lanes import timeline_lanes
from specnsys.ingest import open_trace
from specnsys.metrics import analyze_trace
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
