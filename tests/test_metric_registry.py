"""The one registry of extra metrics (:mod:`specnsys.metrics.registry`, issue 31).

The claim that a new metric is its module, its entry and its test is checked by registering
two made-up metrics at run time (one every trace supports, one only a speculative run does)
and reading them back from ``analyze --json``, ``analyze``'s text, ``specnsys.analyze(...)
.to_dict()``, a collected dataset's ``runs`` table and the analysis a sweep reads back from
it, with nothing else changed; then unregistering them.
"""

from __future__ import annotations

import importlib.util
import json
import re
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest

import specnsys
from specnsys.cli.main import main
from specnsys.errors import UsageError
from specnsys.metrics import registry
from specnsys.metrics.registry import Metric, MetricContext
from specnsys.results import JSONValue, NotAvailable
from specnsys.runset.collect import analyse_trace
from specnsys.runset.dataset import Dataset, Settings, run_id_of
from specnsys.runset.sweep import analysis_from_doc
from tests.conftest import SAMPLE_TRACES

pytestmark = pytest.mark.usefixtures("shared_cache")  # the samples built once (conftest)

SPEC = SAMPLE_TRACES / "spec_chat_c4_k4.sqlite"
BASELINE = SAMPLE_TRACES / "baseline_chat_c4.sqlite"


def _busiest(ctx: MetricContext) -> JSONValue:
    """The phase with the most wall time and how many phases had any."""
    timed = {name: row["wall_ns"] for name, row in ctx.phases.items() if row["wall_ns"] > 0}
    top = max(timed, key=lambda name: timed[name])
    return {"phase": top, "wall_ns": timed[top], "phases": len(timed), "mode": ctx.mode}


def _busiest_text(payload: JSONValue) -> str | None:
    assert isinstance(payload, dict)
    return f"busiest phase: {payload['phase']} ({payload['phases']} phases with time)"


def _verify_steps(ctx: MetricContext) -> JSONValue | NotAvailable:
    """The verify ranges per decode step: a speculative run's only."""
    if ctx.mode != "spec":
        return NotAvailable("a made-up metric of speculative runs only")
    return ctx.phases["verify"]["ranges"] / max(1, ctx.breakdown.range_counts[ctx.step_phase])


BUSIEST = Metric(
    "busiest_phase", _busiest, _busiest_text,
    columns={"phase": "str", "phases": "int"},
)  # fmt: skip
VERIFY_STEPS = Metric(
    "verify_per_step", _verify_steps, lambda v: f"verify ranges per step: {v}",
    columns={"verify_per_step": "float"},
)  # fmt: skip


@pytest.fixture
def made_up() -> Iterator[None]:
    registry.register(BUSIEST)
    registry.register(VERIFY_STEPS)
    try:
        yield
    finally:
        registry.unregister(BUSIEST.key)
        registry.unregister(VERIFY_STEPS.key)
    assert registry.registered() == ()


def _json(capsys: pytest.CaptureFixture[str], path: Path) -> dict[str, JSONValue]:
    assert main(["analyze", str(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert isinstance(doc, dict)
    return doc


def _walls(doc: dict[str, JSONValue]) -> dict[str, int]:
    phases = doc["phases"]
    assert isinstance(phases, dict)
    out = {}
    for name, row in phases.items():
        assert isinstance(row, dict) and isinstance(row["wall_ns"], int)
        out[name] = row["wall_ns"]
    return out


def _reasons(doc: dict[str, JSONValue]) -> dict[str, JSONValue]:
    na = doc["not_available"]
    assert isinstance(na, dict)
    return na


def _without(doc: dict[str, JSONValue], *keys: str) -> dict[str, JSONValue]:
    out = {k: v for k, v in doc.items() if k not in keys}
    out["not_available"] = {k: v for k, v in _reasons(doc).items() if k not in keys}
    return out


def test_no_metric_is_registered_by_default() -> None:
    assert registry.registered() == ()
    assert specnsys.analyze(SPEC).metrics == {}


def test_a_made_up_metric_is_in_analyze_json_and_nothing_else_changes(
    capsys: pytest.CaptureFixture[str], made_up: None
) -> None:
    keys = ("busiest_phase", "verify_per_step")
    spec = _json(capsys, SPEC)
    walls = _walls(spec)
    top = max(walls, key=lambda name: walls[name])
    assert top == "draft"
    assert spec["busiest_phase"] == {
        "phase": top, "wall_ns": walls[top], "phases": sum(1 for w in walls.values() if w > 0),
        "mode": "spec",
    }  # fmt: skip
    assert isinstance(spec["verify_per_step"], float) and spec["verify_per_step"] > 0
    base = _json(capsys, BASELINE)
    assert base["verify_per_step"] is None
    assert _reasons(base)["verify_per_step"] == "a made-up metric of speculative runs only"
    registry.unregister(BUSIEST.key)
    registry.unregister(VERIFY_STEPS.key)
    assert _without(spec, *keys) == _json(capsys, SPEC)  # the rest is what it was
    assert _without(base, *keys) == _json(capsys, BASELINE)


def _text(capsys: pytest.CaptureFixture[str], path: Path) -> str:
    assert main(["analyze", str(path)]) == 0
    return capsys.readouterr().out


def test_a_made_up_metric_has_its_line_in_analyze_text(
    capsys: pytest.CaptureFixture[str], made_up: None
) -> None:
    spec, base = _text(capsys, SPEC), _text(capsys, BASELINE)
    block = re.search(r"\n\nbusiest phase: draft \(\d+ phases with time\)\n"
                      r"verify ranges per step: [0-9.]+\n", spec)  # fmt: skip
    assert block is not None, spec
    assert "verify ranges per step" not in base  # not available: listed with its reason
    reason = "\n  verify_per_step: a made-up metric of speculative runs only"
    assert reason in base
    base_block = re.search(r"\n\nbusiest phase: forward \(\d+ phases with time\)\n", base)
    assert base_block is not None, base
    registry.unregister(BUSIEST.key)
    registry.unregister(VERIFY_STEPS.key)
    # the rest is what it was: the block is one place, the reason one line
    assert spec.replace(block.group(0), "\n", 1) == _text(capsys, SPEC)
    assert base.replace(base_block.group(0), "\n", 1).replace(reason, "") == _text(
        capsys, BASELINE
    )


def test_a_made_up_metric_is_in_the_html_report(tmp_path: Path, made_up: None) -> None:
    """Each run's summary table in the report has a row per registered metric with a value,
    its line as the metric writes it; a null one is under "Not available" with its reason."""
    out = tmp_path / "report.html"
    assert main(["report", str(SPEC), str(BASELINE), "-o", str(out)]) == 0
    page = out.read_text()
    analyze = page[page.index('<section id="analyze">'):page.index('<section id="not-available">')]
    cell = '<td class="l">'
    busiest = rf"{cell}busiest_phase</td><td>busiest phase: \w+ \(\d+ phases with time\)</td>"
    assert len(re.findall(busiest, analyze)) == 2, analyze
    steps = rf"{cell}verify_per_step</td><td>verify ranges per step: [0-9.]+</td>"
    assert len(re.findall(steps, analyze)) == 1
    missing = page[page.index('<section id="not-available">'):]
    assert "a made-up metric of speculative runs only" in missing


def test_a_made_up_metric_is_in_the_api_result(made_up: None) -> None:
    analysis = specnsys.analyze(SPEC)
    assert set(analysis.metrics) == {"busiest_phase", "verify_per_step"}
    doc = analysis.to_dict()
    assert doc["busiest_phase"] == analysis.metrics["busiest_phase"]
    json.dumps(doc, allow_nan=False)
    # kept in the trace cache under a key of its own: read back, it is the same
    assert specnsys.analyze(SPEC).to_dict() == doc


def test_a_made_up_metric_is_in_the_collected_dataset(tmp_path: Path, made_up: None) -> None:
    """The record a worker builds, written as the parent does: the columns' types and the
    null of a metric that is not available (a real collect: the test below)."""
    settings: Settings = {"rules": None, "pid": None, "specnsys": specnsys.__version__}
    store = Dataset(tmp_path / "ds")
    for trace in (SPEC, BASELINE):
        store.write_run(run_id_of(trace), analyse_trace(str(trace), settings, {}))
    store.finish()
    runs = pl.scan_parquet(tmp_path / "ds" / "runs").collect().sort("mode", descending=True)
    assert runs.schema["phase"] == pl.String() and runs.schema["phases"] == pl.Int64()
    assert runs.schema["verify_per_step"] == pl.Float64()
    assert runs["phase"].to_list() == ["draft", "forward"]
    assert runs["verify_per_step"][1] is None and runs["verify_per_step"][0] > 0
    doc = json.loads(runs["analysis_json"][0])
    assert analysis_from_doc(doc).metrics["busiest_phase"] == doc["busiest_phase"]


def test_collect_workers_run_the_metrics_registered_at_run_time(tmp_path: Path) -> None:
    """A real collect (spawned pool workers, and Dask) with a metric registered at run time
    in this process: the workers get it from the parent, so the dataset's columns hold its
    values, not nulls; a metric whose functions cannot reach another process (a lambda) is
    one clear error before any trace is analysed."""
    from specnsys.runset.collect import collect

    folder = tmp_path / "t"
    folder.mkdir()
    for trace in (SPEC, BASELINE):
        (folder / trace.name).write_bytes(trace.read_bytes())
    registry.register(BUSIEST)
    try:
        for how, extra in (("pool", {}), ("dask", {"dask": "local"})):
            if how == "dask" and importlib.util.find_spec("distributed") is None:
                continue
            collect([folder], tmp_path / how, workers=2, use_cache=False, **extra)  # type: ignore[arg-type]
            runs = pl.scan_parquet(tmp_path / how / "runs").collect().sort("mode", descending=True)
            assert runs["phase"].to_list() == ["draft", "forward"], how
            assert runs["phases"].null_count() == 0, how
        registry.register(VERIFY_STEPS)  # its text is a lambda
        with pytest.raises(UsageError, match="verify_per_step.*cannot be sent to collect's "
                           "worker processes") as caught:  # fmt: skip
            collect([folder], tmp_path / "lambda", workers=2, use_cache=False)
        assert "\n" not in str(caught.value)
        assert not (tmp_path / "lambda").exists()
    finally:
        registry.unregister(BUSIEST.key)
        registry.unregister(VERIFY_STEPS.key)


def test_a_key_of_analyze_or_of_another_metric_is_refused(made_up: None) -> None:
    with pytest.raises(ValueError, match="must be new"):
        registry.register(Metric("busiest_phase", _busiest, _busiest_text))
    registry.register(Metric("tokens", lambda ctx: 1, str))
    try:
        with pytest.raises(ValueError, match=r"reuse analyze's own keys: \['tokens'\]"):
            specnsys.analyze(SPEC).to_dict()
    finally:
        registry.unregister("tokens")
