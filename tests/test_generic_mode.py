"""Every command answers on every trace (issue 19, item 2).

A trace that is neither a baseline (``forward``) nor a speculative run (``draft``/``verify``),
here built with an engine's own NVTX names and no specnsys vocabulary, is analyzed in the
``generic`` mode under the ``nvtx`` rules the commands apply themselves (with a note): its
phases sum to the window, its GPU busy and idle time sum to the window, its top kernels per
phase are the kernels launched in each phase, and two such runs compare as an A/B diff that
names the phase that was made slower. The real corpus exports answer ``analyze`` and
``compare A B`` too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import specnsys
from specnsys.metrics.structure import STRUCTURE_PREFIX
from specnsys.testing import NsysExportBuilder
from tests.conftest import CORPUS, REPO, SAMPLE_TRACES, corpus_files, json_doc, sha256

US = 1_000
STEPS = 4
SCHEDULE, EXECUTE, SAMPLE, DETOK = 300 * US, 2_000 * US, 500 * US, 200 * US
GEMM, SOFTMAX = 400 * US, 100 * US
NOTE = "--rules nvtx applied"


def engine_trace(path: Path, *, sample_factor: int = 1) -> Path:
    """An engine-like loop: schedule, execute the model (three GEMM kernels), sample (one
    softmax kernel, *sample_factor* times longer on CPU and GPU), detokenize; no specnsys
    ranges, so only the ``nvtx`` rules give it phases."""
    b = NsysExportBuilder()
    b.process(1, "python3")
    b.thread(1, 1, "EngineCore")
    b.gpu(0)
    corr, t = 1, 1_000 * US

    def launch(at: int, dur: int, name: str) -> None:
        nonlocal corr
        b.runtime(at, at + 10 * US, "cudaLaunchKernel_v7000", corr, pid=1, tid=1)
        b.kernel(at + 20 * US, at + 20 * US + dur, name, corr, pid=1)
        corr += 1

    for _ in range(STEPS):
        b.push_pop(t, t + SCHEDULE, "Scheduler.schedule", pid=1, tid=1)
        t += SCHEDULE
        b.push_pop(t, t + EXECUTE, "GPUModelRunner.execute_model", pid=1, tid=1)
        for k in range(3):
            launch(t + k * 500 * US, GEMM, f"sm90_gemm_{k}")
        t += EXECUTE
        sample = SAMPLE * sample_factor
        b.push_pop(t, t + sample, "Sampler.forward_sample", pid=1, tid=1)
        launch(t, SOFTMAX * sample_factor, "softmax_kernel")
        t += sample
        b.push_pop(t, t + DETOK, "Detokenizer.decode", pid=1, tid=1)
        t += DETOK
    return b.write(path)


def window_of(sample_factor: int = 1) -> int:
    """The built window: the first range start to the last range end (the GPU work ends inside
    the ranges that launch it)."""
    return STEPS * (SCHEDULE + EXECUTE + SAMPLE * sample_factor + DETOK)


def run_cli(lines: list[list[str]]) -> list[dict]:
    """The command lines run in one real ``specnsys`` process (tests/cli_driver.py)."""
    done = subprocess.run(
        [sys.executable, "-m", "tests.cli_driver", json.dumps(lines)],
        capture_output=True, text=True, cwd=REPO, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    results: list[dict] = json.loads(done.stdout)
    for r in results:
        assert r["traceback"] is None, (r["argv"], r["traceback"])
    return results


@pytest.fixture
def runs(tmp_path: Path) -> tuple[Path, Path]:
    """Run A, and run B with sampling three times slower."""
    return engine_trace(tmp_path / "a.sqlite"), engine_trace(tmp_path / "b.sqlite", sample_factor=3)


def test_generic_analysis_sums_to_the_window_and_names_its_kernels(runs) -> None:
    a = specnsys.analyze(runs[0])
    d = json_doc(a.to_dict())
    assert d["mode"] == "generic" and d["rules"] == "nvtx"
    assert d["window_ns"] == window_of()
    assert sum(row["wall_ns"] for row in d["phases"].values()) == d["window_ns"]
    assert d["phases"]["GPUModelRunner.execute_model"]["wall_ns"] == STEPS * EXECUTE
    assert d["phases"]["Detokenizer.decode"]["wall_ns"] == STEPS * DETOK
    # GPU busy: the kernels never overlap, so the union is their summed time
    gt = d["gpu_time"]
    assert gt["busy_ns"] == STEPS * (3 * GEMM + SOFTMAX)
    assert gt["busy_ns"] + gt["idle_ns"] == d["window_ns"]
    assert gt["busy_share"] + gt["idle_share"] == pytest.approx(1.0)
    # top kernels: the attribution layer's launch phases, with counts and times
    by_phase = d["top_kernels"]["by_phase"]
    execute = by_phase["GPUModelRunner.execute_model"]
    assert execute["kernel_ns"] == STEPS * 3 * GEMM and execute["kernels"] == STEPS * 3
    assert [k["name"] for k in execute["top"]] == ["sm90_gemm_0", "sm90_gemm_1", "sm90_gemm_2"]
    assert all(k["count"] == STEPS and k["time_ns"] == STEPS * GEMM for k in execute["top"])
    assert sum(k["share"] for k in execute["top"]) == pytest.approx(1.0)
    assert by_phase["Sampler.forward_sample"]["top"][0]["name"] == "softmax_kernel"
    assert "kernel_ns" in d["top_kernels"]["share_of"]
    # the speculative-decoding numbers are null, with the reason
    for key in ("p", "amdahl_ceiling", "acceptance", "draft_cost_ratio", "whatif"):
        assert d[key] is None and "generic run" in d["not_available"][key], key
    assert any(NOTE in w for w in d["warnings"])
    assert NOTE in " ".join(a.data_warnings)


def test_what_to_cut_ranks_a_generic_run_by_the_speedup_without_each_phase(runs) -> None:
    from specnsys.metrics.whatcut import what_to_cut

    d = specnsys.analyze(runs[0]).to_dict()
    cut = what_to_cut(d)
    assert cut.mode == "generic" and cut.p is None and cut.not_available is None
    assert [c.phase for c in cut.candidates][0] == "GPUModelRunner.execute_model"
    top = cut.candidates[0]
    window = window_of()
    assert top.speedup_if_removed == pytest.approx(window / (window - STEPS * EXECUTE))
    assert sum(c.wall_ns for c in cut.candidates) == window  # every phase with time is listed


def test_every_command_answers_on_generic_runs_through_the_cli(runs, tmp_path: Path) -> None:
    a, b = (str(p) for p in runs)
    before = sha256(runs[0]), sha256(runs[1])
    out = str(tmp_path)
    ok = [
        ["analyze", a], ["analyze", a, "--json"], ["phases", a], ["phases", a, "--json"],
        ["compare", a, b], ["compare", a, b, "--json"], ["whatif", a], ["whatif", a, "--json"],
        ["report", a, "-o", f"{out}/one.html"], ["report", b, a, "-o", f"{out}/ab.html"],
        ["plot", "phases", a, b, "-o", f"{out}/phases.svg"],
        ["plot", "amdahl", a, "-o", f"{out}/amdahl.svg", "--data", f"{out}/amdahl.json"],
        ["plot", "timeline", a, "-o", f"{out}/timeline.svg"],
    ]  # fmt: skip
    refused = [
        (["plot", "acceptance", a, "-o", f"{out}/acc.svg"], "proposed/accepted marks"),
        (["plot", "sweep", a, b, "-o", f"{out}/sweep.svg"], "generic runs have none"),
    ]
    results = run_cli(ok + [argv for argv, _ in refused])
    for r in results[: len(ok)]:
        assert r["status"] == 0, (r["argv"], r["stderr"])
        assert r["stdout"].strip(), r["argv"]
        err = r["stderr"].strip().splitlines()
        assert err and all(line.startswith("specnsys: warning: ") for line in err), r
        assert NOTE in r["stderr"], r["argv"]  # the rules chosen are said, on every command
    for r, (_argv, needle) in zip(results[len(ok) :], refused, strict=True):
        assert r["status"] == 2 and r["stdout"] == "", r
        assert r["stderr"].count("\n") == 1 and needle in r["stderr"], r["stderr"]
    assert (sha256(runs[0]), sha256(runs[1])) == before
    text = results[0]["stdout"]
    assert (text + results[0]["stderr"]).count(NOTE) == 1  # said once (was: on both streams)
    assert "generic run" in text and "top kernels per phase" in text and "sm90_gemm_0" in text
    assert "what to cut first" in text
    assert "GPUModelRunner.execute_model" in results[2]["stdout"]
    whatif = json.loads(results[7]["stdout"])
    assert whatif["kind"] == "cut" and whatif["cuts"][0]["phase"] == "GPUModelRunner.execute_model"
    amdahl = json.loads(Path(f"{out}/amdahl.json").read_text())
    assert amdahl["curves"][0]["phase"] == "GPUModelRunner.execute_model"
    assert amdahl["curves"][0]["p"] == pytest.approx(STEPS * EXECUTE / window_of())
    page = Path(f"{out}/ab.html").read_text()
    assert "Compare: A/B, phase by phase" in page and "Sampler.forward_sample" in page


def test_ab_compare_names_the_phase_that_was_made_slower(runs) -> None:
    compared = specnsys.compare(*runs)
    doc = json_doc(compared.to_dict())
    assert doc["kind"] == "ab" and doc["modes"] == {"a": "generic", "b": "generic"}
    slower = STEPS * SAMPLE * 2  # sampling took three times as long in B
    assert doc["window_ns"]["delta_ns"] == window_of(3) - window_of() == slower
    assert doc["moved_phase"] == "Sampler.forward_sample"
    assert [m["phase"] for m in doc["moved"]] == ["Sampler.forward_sample"]
    row = doc["phases"]["Sampler.forward_sample"]
    assert row["delta_ns"] == slower and row["delta_pct"] == pytest.approx(2.0)
    assert row["gpu_busy_delta_ns"] == STEPS * SOFTMAX * 2
    assert doc["gpu_busy_ns"]["delta_ns"] == STEPS * SOFTMAX * 2
    others = [r for name, r in doc["phases"].items() if name != "Sampler.forward_sample"]
    assert all(r["delta_ns"] == 0 for r in others)
    for side in ("a", "b"):
        assert sum(r[f"{side}_share"] for r in doc["phases"].values()) == pytest.approx(1.0)


def test_same_mode_pairs_are_ab_and_baseline_then_spec_keeps_its_comparison() -> None:
    base = SAMPLE_TRACES / "baseline_chat_c4.sqlite"
    spec = SAMPLE_TRACES / "spec_chat_c4_k4.sqlite"
    same = json_doc(specnsys.compare(base, base).to_dict())
    assert same["kind"] == "ab" and same["moved"] == [] and same["window_ns"]["delta_ns"] == 0
    assert all(r["delta_ns"] == 0 for r in same["phases"].values())
    specs = specnsys.compare(spec, spec).to_dict()
    assert specs["kind"] == "ab" and specs["modes"] == {"a": "spec", "b": "spec"}
    pair = specnsys.compare(base, spec).to_dict()
    assert "kind" not in pair and pair["predicted_speedup"] is not None


def test_a_trace_without_nvtx_ranges_answers_with_a_hint(tmp_path: Path) -> None:
    b = NsysExportBuilder()
    b.process(1, "python3")
    b.thread(1, 1, "main")
    b.gpu(0)
    for i in range(3):
        b.runtime(i * 1_000 * US, i * 1_000 * US + 10 * US, "cudaLaunchKernel_v7000", i + 1)
        b.kernel(i * 1_000 * US + 20 * US, i * 1_000 * US + 500 * US, "k", i + 1)
    path = b.write(tmp_path / "bare.sqlite")
    api_only = NsysExportBuilder()  # CUDA API calls only: no range, no GPU work
    api_only.process(1, "python3")
    api_only.thread(1, 1, "main")
    api_only.runtime(0, 10 * US, "cudaMalloc_v3020", 1)
    api_only.runtime(30 * US, 40 * US, "cudaFree_v2000", 2)
    calls = api_only.write(tmp_path / "api_only.sqlite")
    bare = NsysExportBuilder()  # a process and a thread: not one event
    bare.process(1, "python3")
    bare.thread(1, 1, "main")
    nothing = bare.write(tmp_path / "nothing.sqlite")
    text, js, report, analyze, api_run, empty = run_cli([
        ["phases", str(path)], ["phases", str(path), "--json"],
        ["report", str(path), "-o", str(tmp_path / "bare.html")],
        ["analyze", str(path), "--json"], ["analyze", str(calls)], ["analyze", str(nothing)],
    ])  # fmt: skip
    # CUDA API calls alone: a generic run over their span, all of it unannotated
    assert api_run["status"] == 0, api_run["stderr"]
    assert "window 0.040 ms (no ranges and no GPU work: the span of the process's CUDA API " in (
        api_run["stdout"])
    assert "unannotated           0.040  100.0%" in api_run["stdout"]
    assert text["status"] == 0 and js["status"] == 0, (text["stderr"], js["stderr"])
    assert "hint: the trace has no NVTX ranges" in text["stdout"]
    assert "specnsys profile --annotate" in text["stdout"]
    assert "specnsys.annotate" in json.loads(js["stdout"])["not_available"]["phase_ranges"]
    # the report draws what there is: no phase range, so no timeline, said in its panel
    assert report["status"] == 0, report["stderr"]
    assert "no phase ranges on any thread" in (tmp_path / "bare.html").read_text()
    doc = json.loads(analyze["stdout"])
    assert doc["mode"] == "generic" and doc["gpu_time"]["busy_ns"] == 3 * 480 * US
    assert doc["top_kernels"]["by_phase"]["unannotated"]["top"][0]["count"] == 3
    # nothing to analyze at all: exit 2, one line saying what to add
    assert empty["status"] == 2 and empty["stderr"].count("\n") == 1, empty["stderr"]
    assert "annotate the program" in empty["stderr"] and "-t cuda" in empty["stderr"]


def test_explicit_rules_are_kept_and_the_specnsys_vocabulary_stays_the_default(runs) -> None:
    # explicit specnsys rules on an engine trace: no phase is claimed, nothing is switched
    d = json_doc(specnsys.analyze(runs[0], rules="specnsys").to_dict())
    assert d["rules"] == "specnsys" and not any(NOTE in w for w in d["warnings"])
    assert d["phases"]["unannotated"]["wall_ns"] == d["window_ns"]
    sample = specnsys.analyze(SAMPLE_TRACES / "baseline_chat_c4.sqlite")
    assert sample.rules == "specnsys" and sample.mode == "baseline"
    assert not any(NOTE in w for w in sample.warnings)


#: Real exports with NVTX ranges and kernels: two pairs of before/after captures of one program.
CORPUS_PAIRS = [
    ("2022.1.3_dlprof_norelu", "2022.1.3_dlprof_wrelu"),
    ("2026.2.1_nsysai_mfu-2gpu-before", "2026.2.1_nsysai_mfu-2gpu-after"),
    ("2020.3.2_quasiben_cupy", "2020.3.2_quasiben_cudf"),
]


@pytest.mark.skipif(not corpus_files(), reason="the real corpus is not here")
@pytest.mark.usefixtures("corpus_cache")
def test_real_exports_answer_analyze_and_compare() -> None:
    lines: list[list[str]] = []
    for a, b in CORPUS_PAIRS:
        pa, pb = (str(CORPUS / f"{x}.sqlite") for x in (a, b))
        lines += [["analyze", pa, "--json"], ["analyze", pb, "--json"], ["compare", pa, pb, "--json"]]
    results = run_cli(lines)
    for r in results:
        assert r["status"] == 0, (r["argv"], r["stderr"])
    for i in range(0, len(results), 3):
        docs = [json.loads(results[i + j]["stdout"]) for j in (0, 1)]
        for d in docs:
            # PyTorch's operator ranges call for the torch pack (issue 32), the rest for nvtx
            assert d["mode"] == "generic" and d["rules"] in ("nvtx", "torch"), d["path"]
            said = "the torch rule pack was chosen" if d["rules"] == "torch" else NOTE
            assert any(said in w for w in d["warnings"]), (d["path"], d["warnings"])
            assert sum(r["wall_ns"] for r in d["phases"].values()) == d["window_ns"], d["path"]
            if d["gpu"]:
                assert d["gpu_time"]["busy_ns"] + d["gpu_time"]["idle_ns"] == d["window_ns"]
                assert d["top_kernels"] is not None or "top_kernels" in d["not_available"]
        ab = json.loads(results[i + 2]["stdout"])
        assert ab["kind"] == "ab"
        assert ab["window_ns"]["delta_ns"] == docs[1]["window_ns"] - docs[0]["window_ns"]
        assert sum(r["delta_ns"] for r in ab["phases"].values()) == ab["window_ns"]["delta_ns"]


#: Corpus exports with no event at all (metadata only: strings, thread names, target info), so
#: there is no window. Those with only OS runtime calls or CPU samples answer
#: (tests/test_cpu_only_traces.py).
NOTHING_MODELLED = {"2021.3.2_dynamicvit"}


@pytest.mark.slow
@pytest.mark.skipif(not corpus_files(), reason="the real corpus is not here")
def test_every_corpus_export_and_sample_answers_the_four_commands(
    tmp_path: Path, corpus_cache: Path
) -> None:
    """Issue 19: analyze, report, plot phases and compare A A exit 0 on every real export and
    sample, or 2 with one line only where the file holds no events at all."""
    paths = [*corpus_files(), *sorted(SAMPLE_TRACES.glob("*.sqlite"))]
    batch = []
    for i, path in enumerate(paths):
        batch += [
            ["analyze", str(path)],
            ["report", str(path), "-o", str(tmp_path / f"r{i}.html")],
            ["plot", "phases", str(path), "-o", str(tmp_path / f"p{i}.png")],
            ["compare", str(path), str(path)],
        ]
    done = subprocess.run(
        [sys.executable, "-m", "tests.cli_driver", json.dumps(batch)],
        capture_output=True, text=True, cwd=REPO, timeout=1500,
        env={**os.environ, "SPECNSYS_CACHE_DIR": str(corpus_cache)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    failures = []
    for run in json.loads(done.stdout):
        name = Path(run["argv"][2 if run["argv"][0] == "plot" else 1]).stem
        expected = 2 if name in NOTHING_MODELLED else 0
        errors = [line for line in run["stderr"].splitlines() if "error" in line]
        if run["traceback"] or run["status"] != expected:
            failures.append((run["argv"][:2], name, run["status"], run["stderr"][-300:]))
        elif expected == 2 and not (len(errors) == 1 and "nothing to" in errors[0]):
            failures.append((run["argv"][:2], name, "message", run["stderr"][-300:]))
        elif STRUCTURE_PREFIX in run["stderr"]:  # issue 29: no structural check on a clean run
            failures.append((run["argv"][:2], name, "structure", run["stderr"][-300:]))
    assert not failures, failures
