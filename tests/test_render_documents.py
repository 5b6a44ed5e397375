"""The documents the renderers read (:mod:`specnsys.render.documents`) describe what the metrics
really build: every key a TypedDict declares is in the document, with a value of the declared
type, on real captures and built traces that fill the optional parts (GPU work and findings,
several processes and a straggler, generic runs and their A/B diff and cuts).

The renderers rely on these types (strict mypy checks each key they read against them); this
test is what keeps the types honest about the data.
"""

from __future__ import annotations

import json
import types
import typing
from collections.abc import Mapping
from pathlib import Path

import pytest

import specnsys
from specnsys.metrics.whatcut import what_to_cut
from specnsys.render import documents as d
from tests.conftest import SAMPLE_TRACES

pytestmark = pytest.mark.usefixtures("shared_cache")  # the samples built once (conftest)

BASE = SAMPLE_TRACES / "baseline_chat_c4.sqlite"
SPEC = SAMPLE_TRACES / "spec_chat_c4_k4.sqlite"
SPEC_K2 = SAMPLE_TRACES / "spec_chat_c4_k2.sqlite"


def conformance(value: object, tp: object, where: str = "doc") -> list[str]:
    """Where *value* is not of the type *tp* (TypedDicts, unions, lists, dicts, literals)."""
    origin = typing.get_origin(tp)
    if tp is object:
        return []
    if tp is type(None):
        return [] if value is None else [f"{where}: {value!r} is not None"]
    if origin in (typing.Union, types.UnionType):
        found = [conformance(value, o, where) for o in typing.get_args(tp)]
        return [] if any(not f for f in found) else min(found, key=len)
    if origin is typing.Literal:
        return [] if value in typing.get_args(tp) else [f"{where}: {value!r} not in {tp}"]
    if typing.is_typeddict(tp):
        if not isinstance(value, dict):
            return [f"{where}: {type(value).__name__} is not an object"]
        hints = typing.get_type_hints(tp)
        required = d.required_keys(tp)
        problems = [f"{where}.{k}: missing" for k in sorted(required - value.keys())]
        for key, hint in hints.items():
            if key in value:
                problems += conformance(value[key], hint, f"{where}.{key}")
        return problems
    if origin is list:
        (item,) = typing.get_args(tp)
        if not isinstance(value, list):
            return [f"{where}: {type(value).__name__} is not a list"]
        return [p for i, v in enumerate(value) for p in conformance(v, item, f"{where}[{i}]")]
    if origin in (dict, Mapping):
        _key, item = typing.get_args(tp)
        if not isinstance(value, dict):
            return [f"{where}: {type(value).__name__} is not an object"]
        return [p for k, v in value.items() for p in conformance(v, item, f"{where}[{k!r}]")]
    if tp is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
    elif tp is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    else:
        ok = isinstance(value, tp)  # type: ignore[arg-type]
    return [] if ok else [f"{where}: {value!r} is not {getattr(tp, '__name__', tp)}"]


def _json(doc: object) -> object:
    return json.loads(json.dumps(doc))  # what --json prints: tuples are lists


def _check(doc: object, shape: object) -> None:
    problems = conformance(_json(doc), shape)
    assert not problems, "\n".join(problems[:20])


@pytest.mark.parametrize("path", [BASE, SPEC, SPEC_K2], ids=lambda p: p.stem)
def test_the_sample_analyses_whatcuts_are_what_the_renderers_read(path: Path) -> None:
    doc = specnsys.analyze(path).to_dict()
    _check(doc, d.AnalysisDoc)
    _check(what_to_cut(doc).to_dict(), d.WhatCutDoc)


def test_comparisons_ab_diffs_and_whatifs_are_what_the_renderers_read() -> None:
    (comparison,) = specnsys.compare(BASE, SPEC).comparisons
    _check(comparison.to_dict(), d.ComparisonDoc)
    (ab,) = specnsys.compare(SPEC_K2, SPEC).comparisons
    _check(ab.to_dict(), d.ABDoc)
    _check(specnsys.whatif(BASE, SPEC).to_dict(), d.LeviathanDoc)
    _check(specnsys.whatif(alpha=0.7, k=4, c=0.125).to_dict(), d.LeviathanDoc)
    _check(specnsys.timeline(SPEC).to_dict(), d.LanesDoc)


def test_a_gpu_trace_with_findings_and_kernels(tmp_path: Path) -> None:
    from tests.test_plots_lanes import build_gpu_trace

    path = build_gpu_trace(tmp_path / "gpu.sqlite")
    doc = specnsys.analyze(path).to_dict()
    assert doc["gpu"] and doc["top_kernels"] and doc["gpu_time"]
    _check(doc, d.AnalysisDoc)
    lanes = specnsys.timeline(path).to_dict()
    assert lanes["gpu"] and lanes["api"] and lanes["gpu_gaps"]
    _check(lanes, d.LanesDoc)


def test_several_processes_and_their_straggler(tmp_path: Path) -> None:
    from tests.test_ranks import tp_trace

    path, _ = tp_trace(tmp_path, 3, straggler=2, lags=(40, 120, 80, 400))
    doc = d.analysis_doc(specnsys.analyze(path).to_dict())
    assert doc["ranks"] and doc["ranks"]["straggler"]
    _check(doc, d.AnalysisDoc)


def test_generic_runs_their_ab_diff_and_their_cuts(tmp_path: Path) -> None:
    from tests.test_generic_mode import engine_trace

    a = engine_trace(tmp_path / "a.sqlite")
    b = engine_trace(tmp_path / "b.sqlite", sample_factor=3)
    doc = specnsys.analyze(a).to_dict()
    assert doc["mode"] == "generic"
    _check(doc, d.AnalysisDoc)
    (ab,) = specnsys.compare(a, b).comparisons
    _check(ab.to_dict(), d.ABDoc)
    _check(specnsys.whatif(a).to_dict(), d.CutWhatIfDoc)
    _check(what_to_cut(doc).to_dict(), d.WhatCutDoc)


def test_a_document_without_a_declared_key_is_refused() -> None:
    doc = specnsys.analyze(SPEC).to_dict()
    assert d.analysis_doc(doc) is doc
    malformed = dict(doc)  # the document without one key it declares
    del malformed["latency"]
    with pytest.raises(TypeError, match="not an analyze --json document: no latency"):
        d.analysis_doc(malformed)


def test_the_checker_finds_a_wrong_type() -> None:
    assert conformance({"count": "3"}, d.Spread) != []
    assert conformance(1.5, int) and not conformance(2, float) and conformance(True, int)


FIGURES = {
    "phases": ("specnsys.render.plots.phases", "PhasesFigure", (BASE, SPEC)),
    "amdahl": ("specnsys.render.plots.amdahl", "AmdahlFigure", (BASE, SPEC)),
    "acceptance": ("specnsys.render.plots.acceptance", "AcceptanceFigure", (SPEC,)),
    "sweep": ("specnsys.render.plots.sweep", "SweepFigure", (BASE, SPEC_K2, SPEC)),
    "timeline": ("specnsys.render.plots.timeline", "TimelineFigure", (SPEC,)),
    "steps": ("specnsys.render.plots.steps", "StepsFigure", (BASE, SPEC)),
}


@pytest.mark.parametrize("kind", FIGURES)
def test_each_figures_data_is_its_typed_dict(kind: str) -> None:
    """What ``plot --data`` writes is what the figure's TypedDict says, drawn or not."""
    import importlib

    module, name, paths = FIGURES[kind]
    shape = getattr(importlib.import_module(module), name)
    _check(specnsys.figure(kind, *paths).data, shape)
    if kind == "acceptance":  # a baseline has none: the "not available" form
        data = importlib.import_module(module).acceptance_data(specnsys.analyze(BASE).to_dict())
        assert data["not_available"]
        _check(data, shape)
