"""Analysis.value: every number analyze reports is a value or NotAvailable with its reason.

``to_dict()`` says "not available" as null plus a reason under ``not_available``; the typed
accessor answers the same as one value. What must hold on every trace: no silent null -- each
null among :data:`~specnsys.metrics.analysis.REPORTED` has its reason."""

from __future__ import annotations

from pathlib import Path

import pytest

from specnsys import api
from specnsys.errors import BadInputError
from specnsys.metrics.analysis import REPORTED, Analysis
from specnsys.results import NotAvailable
from tests.conftest import corpus_files

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"


def _silent_nulls(analysis: Analysis) -> list[str]:
    return [
        key for key in REPORTED
        if isinstance(got := analysis.value(key), NotAvailable)  # type: ignore[call-overload]
        and got.reason.endswith("no reason was recorded")
    ]  # fmt: skip


def test_value_is_the_number_or_its_reason() -> None:
    spec = api.analyze(SAMPLES / "spec_chat_c4_k4.sqlite")
    base = api.analyze(SAMPLES / "baseline_chat_c4.sqlite")
    p = base.value("p")  # p is measured on the baseline; the speculative run says why not
    assert isinstance(p, float) and p == base.p
    not_p = spec.value("p")
    assert isinstance(not_p, NotAvailable) and not_p.reason == spec.not_available["p"]
    assert spec.value("acceptance") == spec.acceptance
    missing = base.value("acceptance")
    assert isinstance(missing, NotAvailable)
    assert missing.reason == base.not_available["acceptance"] and not missing
    no_gpu = base.value("gpu_time")  # a CPU capture: the reason is said once, for the GPU
    assert isinstance(no_gpu, NotAvailable)
    assert no_gpu.reason == base.not_available["gpu_busy_ns"]
    with pytest.raises(KeyError, match="not one of the analysis's numbers"):
        base.value("mode")  # type: ignore[call-overload]


@pytest.mark.parametrize("name", sorted(p.stem for p in SAMPLES.glob("*.sqlite")))
def test_no_silent_null_on_the_samples(name: str) -> None:
    assert _silent_nulls(api.analyze(SAMPLES / f"{name}.sqlite")) == []


@pytest.mark.usefixtures("corpus_cache")
@pytest.mark.parametrize("path", corpus_files(), ids=lambda p: p.stem)
def test_no_silent_null_on_the_corpus(path: Path) -> None:
    try:
        analysis = api.analyze(path)
    except BadInputError as e:  # several processes, nothing to analyze: said in one line
        assert "\n" not in str(e)
        return
    assert _silent_nulls(analysis) == []
