"""``analyze``, ``compare`` and ``whatif`` end to end: JSON contract, text, exit codes.

The bundled sample traces are real nsys captures of the instrument workload on CPU; their
timings differ per capture, so these tests check structure and internal consistency (shares
sum to the window, predicted = Amdahl(p, r)), never exact timings.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from specnsys.cli.main import main
from specnsys.metrics import amdahl_speedup
from specnsys.testing import NsysExportBuilder
from tests.conftest import SAMPLE_TRACES, sha256

pytestmark = pytest.mark.usefixtures("shared_cache")  # the samples built once (conftest)

BASE = SAMPLE_TRACES / "baseline_chat_c4.sqlite"
SPEC = SAMPLE_TRACES / "spec_chat_c4_k4.sqlite"
SWEEP = [SAMPLE_TRACES / f"spec_chat_c4_k{k}.sqlite" for k in (2, 4, 6)]
ALL = sorted(SAMPLE_TRACES.glob("*.sqlite"))

ANALYZE_KEYS = {
    "mode": str,
    "window_ns": int,
    "tokens": int,
    "steps": int,
    "requests": int,
    "phases": dict,
    "accelerable_ns": int,
    "per_token_ns": float,
    "sampler_share": float,
    "not_available": dict,
}
NULLABLE = {
    "p": float,
    "amdahl_ceiling": float,
    "acceptance": dict,
    "draft_cost_ratio": float,
    "bandwidth": dict,
}
COMPARE_KEYS = ("p", "r", "predicted_speedup", "measured_speedup", "gap")


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def analyze_json(capsys: pytest.CaptureFixture[str], path: Path) -> dict:
    code, out, err = cli(capsys, "analyze", "--json", str(path))
    assert code == 0, err
    return json.loads(out)


@pytest.mark.parametrize("path", ALL, ids=lambda p: p.stem)
def test_analyze_json_contract_on_every_sample_trace(capsys, path: Path) -> None:
    doc = analyze_json(capsys, path)
    for key, kind in ANALYZE_KEYS.items():
        assert type(doc[key]) is kind, key
    for key, kind in NULLABLE.items():
        assert key in doc and (doc[key] is None or type(doc[key]) is kind), key
    for phase, row in doc["phases"].items():
        assert type(row["wall_ns"]) is int and type(row["share"]) is float, phase
        assert row["gpu_busy_ns"] is None  # CPU captures: not available, not zero
        assert 0.0 <= row["share"] <= 1.0
    assert sum(r["wall_ns"] for r in doc["phases"].values()) == doc["window_ns"]
    spec = path.name.startswith("spec")
    assert doc["mode"] == ("spec" if spec else "baseline")
    # 8 requests; tokens from the per-step marks equal the per-request output lengths
    assert doc["requests"] == 8
    per_request = doc["latency"]["per_request"]
    assert doc["tokens"] == sum(r["output_tokens"] for r in per_request)
    assert all(r["ttft_ns"] > 0 and r["tpot_ns"] > 0 for r in per_request)
    assert doc["latency"]["ttft_ns"]["count"] == 8
    assert doc["per_token_ns"] == pytest.approx(doc["window_ns"] / doc["tokens"])
    assert doc["bandwidth"] is None and "no GPU work" in doc["not_available"]["bandwidth"]
    if spec:
        k = int(path.stem.split("_k")[1])
        acc = doc["acceptance"]
        assert doc["k"] == k and len(acc["by_position"]) == k
        assert len(acc["accepted_histogram"]) == k + 1
        assert sum(acc["accepted_histogram"]) == acc["sequence_steps"]
        assert 0.0 < acc["alpha"] < 1.0
        assert acc["tokens_per_step"] == pytest.approx(acc["mean_accepted"] + 1)
        survival = acc["by_position"]
        assert all(a >= b for a, b in zip(survival, survival[1:], strict=False))
        assert doc["p"] is None and "p" in doc["not_available"]
        assert doc["draft_cost_ratio"] > 0
    else:
        assert 0.0 < doc["p"] < 1.0
        assert doc["p"] == pytest.approx(doc["accelerable_ns"] / doc["window_ns"])
        assert doc["amdahl_ceiling"] == pytest.approx(1 / (1 - doc["p"]))
        assert doc["acceptance"] is None and doc["steps"] > 0


def test_analyze_text_leads_with_the_answer(capsys) -> None:
    code, out, _ = cli(capsys, "analyze", str(BASE))
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("baseline_chat_c4.sqlite: baseline run")
    assert lines[3].startswith("bottleneck share p = ")
    assert lines[4].startswith("Amdahl ceiling ")
    assert lines[5].startswith("non-accelerable ") and "dominated by" in lines[5]
    assert "not available:" in out and "no GPU work" in out
    code, out, _ = cli(capsys, "analyze", str(SPEC))
    assert "speculative run (k = 4)" in out.splitlines()[0]
    assert "acceptance: alpha" in out and "draft cost ratio c = " in out


def test_compare_json_is_consistent(capsys) -> None:
    code, out, err = cli(capsys, "compare", "--json", str(BASE), str(SPEC))
    assert code == 0, err
    doc = json.loads(out)
    for key in COMPARE_KEYS:
        assert type(doc[key]) is float, key
    assert isinstance(doc["phases"], dict) and doc["k"] == 4
    assert doc["predicted_speedup"] == pytest.approx(amdahl_speedup(doc["p"], doc["r"]))
    assert doc["gap"] == pytest.approx(doc["measured_speedup"] / doc["predicted_speedup"] - 1)
    contributions = [
        r["gap_contribution"] for r in doc["phases"].values() if r["gap_contribution"] is not None
    ]
    assert sum(contributions) == pytest.approx(doc["gap"])
    assert doc["tokens"]["baseline"] == doc["tokens"]["spec"] == 256


def test_compare_sweep_gives_one_row_per_run(capsys) -> None:
    code, out, err = cli(capsys, "compare", "--json", str(BASE), *map(str, SWEEP))
    assert code == 0, err
    runs = json.loads(out)["runs"]
    assert [r["k"] for r in runs] == [2, 4, 6]
    assert len({r["p"] for r in runs}) == 1  # one baseline
    code, out, _ = cli(capsys, "compare", str(BASE), *map(str, SWEEP))
    table = out.splitlines()
    assert table[0].startswith("speculative run") and "predicted" in table[0]
    assert [line.split()[0] for line in table[1:4]] == [p.name for p in SWEEP]


def test_compare_names_the_phase_that_moved_on_the_rag_captures(capsys) -> None:
    """rag: long prompts, and the noised draft's prefill costs about as much as the target's,
    so non-accelerable time grows by draft_prefill; the report must say so."""
    code, out, err = cli(
        capsys,
        "compare",
        "--json",
        str(SAMPLE_TRACES / "baseline_rag_c4.sqlite"),
        str(SAMPLE_TRACES / "spec_rag_c4_k4.sqlite"),
    )
    assert code == 0, err
    doc = json.loads(out)
    assert doc["moved_phase"] == "draft_prefill"
    assert doc["phases"]["draft_prefill"]["gap_contribution"] < -0.05


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["compare", str(BASE)], "at least one speculative"),
        (["compare", str(BASE), str(BASE), str(SPEC)], "no speculative trace after it"),
        (["compare", str(SPEC), str(BASE)], "baseline trace (forward phases) before"),
        (["whatif", "--c", "0.1"], "alpha"),
        (["whatif", "--alpha", "1.5", "--c", "0.1"], "alpha"),
        (["whatif", str(SPEC), str(SPEC)], "one trace per mode"),
        (["analyze", "--rules", "/nonexistent/rules.toml", str(BASE)], "rules"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(capsys, args: list[str], needle: str) -> None:
    code, out, err = cli(capsys, *args)
    assert code == 2
    assert out == "" and len(err.strip().splitlines()) == 1 and needle in err


def test_analyze_trace_without_specnsys_phases_answers_as_a_generic_run_and_leaves_the_file_alone(
    tmp_path: Path,
) -> None:
    """Was exit 2 ("no ranges in the specnsys NVTX domain"); issue 19 item 2: the command
    applies the nvtx rules itself, says so in one warning line, and answers in generic mode."""
    b = NsysExportBuilder()
    b.process(1, "python3")
    b.thread(1, 1, "main")
    b.push_pop(0, 100, "some_range", pid=1, tid=1)
    path = b.write(tmp_path / "plain.sqlite")
    before = sha256(path)
    done = subprocess.run(
        [sys.executable, "-m", "specnsys", "analyze", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "generic run" in done.stdout and "some_range" in done.stdout
    err = done.stderr.strip().splitlines()
    assert len(err) == 1 and "--rules nvtx applied" in err[0] and "Traceback" not in done.stderr
    assert sha256(path) == before


@pytest.mark.parametrize("trace", [BASE, SPEC], ids=["baseline", "spec"])
def test_compare_of_two_runs_of_one_mode_is_an_ab_diff(capsys, trace: Path) -> None:
    """Was exit 2 (compare needed a baseline then a speculative run); issue 19: ``compare A A``
    answers for every trace, with an A/B diff in which nothing moved."""
    code, out, err = cli(capsys, "compare", str(trace), str(trace))
    assert code == 0, err
    assert "phase by phase" in out and "no phase moved" in out


def test_whatif_flags_reproduce_a_published_cell(capsys) -> None:
    code, out, err = cli(capsys, "whatif", "--alpha", "0.8", "--c", "0.1", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["best_k"] == 6 and round(doc["best_speedup"], 2) == 2.47
    assert doc["e2e_speedup"] is None and doc["p"] is None
    code, out, _ = cli(capsys, "whatif", "--alpha", "0.8", "--c", "0.1", "--k", "4", "--p", "0.5")
    assert "best k = 6" in out and "Amdahl ceiling at p = 50.0%: 2.00x" in out


def test_whatif_of_a_huge_cost_ratio_answers_in_short_lines(capsys) -> None:
    """``--c 1e308`` with ``--p``: the limit (0.00x end to end), c written in exponent form
    (was: exit 2, "r must be a finite speedup > 0, got 0.0", an r the user never gave; and
    without --p a c of 309 digits)."""
    code, out, err = cli(capsys, "whatif", "--alpha", "0.7", "--k", "4", "--c", "1e308",
                         "--p", "0.6")  # fmt: skip
    assert code == 0, err
    first = out.splitlines()[0]
    assert "c = 1.000e+308 (given)" in first and len(first) < 120
    assert "end to end 0.00x" in out
    code, out, err = cli(capsys, "whatif", "--alpha", "0.7", "--c", "0.05")
    assert code == 0 and "c = 0.050 (given)" in out  # an everyday ratio as before


def test_whatif_from_measured_traces(capsys) -> None:
    code, out, err = cli(capsys, "whatif", "--json", str(BASE), str(SPEC))
    assert code == 0, err
    doc = json.loads(out)
    base, spec = analyze_json(capsys, BASE), analyze_json(capsys, SPEC)
    assert doc["p"] == pytest.approx(base["p"])
    assert doc["alpha"] == pytest.approx(spec["acceptance"]["alpha"]) and doc["k"] == 4
    assert doc["sources"]["c"].startswith("measured: draft forward / baseline forward")
    assert doc["e2e_speedup"] == pytest.approx(amdahl_speedup(doc["p"], doc["expected_speedup"]))
    code, out, _ = cli(capsys, "whatif", "--json", "--alpha", "0.5", str(SPEC))
    assert json.loads(out)["alpha"] == 0.5  # a flag overrides the measured value


@pytest.mark.parametrize("path", ALL, ids=lambda p: p.stem)
def test_warm_analysis_reads_back_exactly_what_the_cold_one_computed(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second analysis of an unchanged export reads the stored result (computing nothing)
    and gives the very same JSON; other rules compute afresh."""
    import specnsys
    from specnsys.metrics import analysis, analyze_trace

    with specnsys.open(path) as trace:
        cold = analyze_trace(trace).to_dict()

    def fail(*args: object, **kw: object) -> None:
        raise AssertionError("recomputed although the analysis was stored")

    with specnsys.open(path) as trace, monkeypatch.context() as m:
        m.setattr(analysis, "_analyze", fail)
        assert json.dumps(analyze_trace(trace).to_dict()) == json.dumps(cold)
        with pytest.raises(AssertionError, match="recomputed"):
            analyze_trace(trace, rules="nvtx")


def test_json_output_is_the_document_with_long_row_lists_one_row_per_line() -> None:
    """render_json: the same document back from json.loads (strings that look like its own
    row placeholders included), long lists of objects one compact row per line, short ones
    and everything else indented, NaN refused."""
    import math

    from specnsys.render.analyze_text import ROWS_PER_LINE_FROM, render_json

    tricky = 'q"\n\x00rows-0123456789abcdef0123456789abcdef-0 \\ é'
    n = ROWS_PER_LINE_FROM + 1
    doc = {
        "latency": {
            "per_request": [{"request_id": i, "ttft_ns": None, "s": tricky} for i in range(n)]
        },
        "nested": [[{"k": i} for i in range(n)], [{"k": 0}]],
        "short": [{"a": 1.5}],
        "numbers": list(range(n)),
        "empty": [],
        "none": {},
    }
    text = render_json(doc)
    assert json.loads(text) == doc
    lines = text.splitlines()
    rows = [line for line in lines if line.lstrip().startswith('{"request_id"')]
    assert len(rows) == n and all(line.startswith("      {") for line in rows)
    assert '  "short": [\n    {\n      "a": 1.5\n    }\n  ]' in text  # indented as before
    assert sum(line.strip() == "1," for line in lines) == 1  # numbers: one per line
    with pytest.raises(ValueError):
        render_json({"rows": [{"v": math.nan}] * n})
