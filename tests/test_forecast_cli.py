"""Bad input to ``specnsys forecast`` (issue 33): every one is one ``specnsys: error:`` line and
exit 2, nothing on stdout, the input unchanged -- workload files with bad lengths or columns,
a FIFO, a huge file; cuts of unknown phases or larger than the phase; sources of different
models or engines mixed."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.forecast_loop import build_run, iid, lengths

pytestmark = pytest.mark.usefixtures("shared_cache")  # the samples built once (conftest)

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"
DATASET = str(SAMPLES / "sweep")


def _batch(argvs: list[list[str]]) -> list[dict[str, object]]:
    done = subprocess.run(
        [sys.executable, "-m", "tests.cli_driver", json.dumps(argvs)],
        capture_output=True, text=True, timeout=600, cwd=Path(__file__).resolve().parents[1],
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    results: list[dict[str, object]] = json.loads(done.stdout)
    return results


def _assert_one_error(result: dict[str, object], *words: str) -> None:
    assert result["traceback"] is None, result["traceback"]
    assert result["status"] == 2, result
    assert result["stdout"] == ""
    err = str(result["stderr"])
    assert err.startswith("specnsys: error: ") and err.count("\n") == 1, err
    for w in words:
        assert w in err, (w, err)


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


WORKLOADS = {
    "zero.csv": ("input_tokens,output_tokens\n10,20\n12,0\n", ["row 2", "output_tokens", "below 1"]),
    "negative.csv": ("input_tokens,output_tokens\n-3,20\n", ["row 1", "input_tokens", "below 1"]),
    "nan.csv": ("input_tokens,output_tokens\n10,20\nnan,30\n", ["row 2", "not a finite number"]),
    "fraction.csv": ("input_tokens,output_tokens\n10,20.5\n", ["row 1", "not a whole number"]),
    "text.csv": ("input_tokens,output_tokens\n10,many\n", ["row 1", "not a number of tokens"]),
    "empty_cell.csv": ("input_tokens,output_tokens\n10,\n", ["row 1", "missing"]),
    "columns.csv": ("prompt,output_tokens\n10,20\n", ["needs the column input_tokens",
                                                       "it has prompt, output_tokens"]),
    "weights.csv": ("input_tokens,output_tokens,weight\n10,20,-1\n", ["row 1", "weight"]),
    "no_rows.csv": ("input_tokens,output_tokens\n", ["no rows"]),
    "binary.csv": ("\x00\xff\xfe garbage", ["not"]),
    # a request of a billion output tokens would draw a row of 8 GB in the simulation
    "long_output.csv": ("input_tokens,output_tokens\n10,20\n10,1000000000\n",
                        ["row 2", "output_tokens", "above 1,048,576"]),
    "long_input.csv": ("input_tokens,output_tokens\n1e300,20\n",
                       ["row 1", "input_tokens", "above 16,777,216"]),
}


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("workloads")
    for name, (text, _) in WORKLOADS.items():
        (folder / name).write_bytes(text.encode("latin-1"))
    os.mkfifo(folder / "fifo.csv")
    with open(folder / "huge.csv", "wb") as handle:  # sparse: 65 MiB of nothing
        handle.truncate(65 << 20)
    import polars as pl

    pl.DataFrame({"input_tokens": [10, 0], "output_tokens": [5, 5]}).write_parquet(
        folder / "zero.parquet")
    return folder


def test_bad_workload_files_are_one_line_each(files: Path) -> None:
    cases = [(name, words) for name, (_, words) in WORKLOADS.items()]
    cases += [("fifo.csv", ["not a regular file"]), ("huge.csv", ["too large", "64 MiB"]),
              ("zero.parquet", ["row 2", "input_tokens", "below 1"]),
              ("missing.csv", ["cannot read the workload"])]  # fmt: skip
    before = {p.name: _digest(p) for p in files.iterdir() if p.is_file()}
    results = _batch([["forecast", DATASET, "--workload", str(files / n), "--no-held-out"]
                      for n, _ in cases])  # fmt: skip
    for (name, words), result in zip(cases, results, strict=True):
        _assert_one_error(result, name, *words)
    assert {p.name: _digest(p) for p in files.iterdir() if p.is_file()} == before


def test_a_good_workload_file_and_numbers_are_forecast(files: Path) -> None:
    (files / "good.csv").write_text("input_tokens,output_tokens,weight\n20,64,3\n200,16,1\n")
    ok, numbers, both = _batch([
        ["forecast", DATASET, "--workload", str(files / "good.csv"), "--requests", "16",
         "--no-held-out", "--json"],
        ["forecast", DATASET, "--input-tokens", "20,200", "--output-tokens", "64",
         "--no-held-out", "--json"],
        ["forecast", DATASET, "--workload", str(files / "good.csv"), "--output-tokens", "5"],
    ])  # fmt: skip
    assert ok["status"] == 0, ok["stderr"]
    doc = json.loads(str(ok["stdout"]))
    assert doc["workload"]["weighted"] and doc["workload"]["requests"] == 16
    assert doc["workload"]["output_tokens_mean"] == pytest.approx((3 * 64 + 16) / 4)
    assert numbers["status"] == 0, numbers["stderr"]
    # an unweighted file serves its rows in order, --requests of them (it was ignored)
    (files / "rows.csv").write_text("input_tokens,output_tokens\n10,20\n10,30\n10,40\n")
    one, thirty = _batch([
        ["forecast", DATASET, "--workload", str(files / "rows.csv"), "--requests", str(n),
         "--concurrency", "1", "--k", "2", "--no-held-out", "--json"] for n in (1, 30)
    ])  # fmt: skip
    one_doc, thirty_doc = (json.loads(str(r["stdout"])) for r in (one, thirty))
    assert one_doc["workload"]["output_tokens_mean"] == 20
    assert thirty_doc["workload"]["output_tokens_mean"] == 30
    assert thirty_doc["workload"]["requests"] == thirty_doc["workload"]["rows"] == 30
    assert thirty_doc["cells"][0]["decode_steps"] > 10 * one_doc["cells"][0]["decode_steps"]
    assert json.loads(str(numbers["stdout"]))["workload"]["rows"] == 2
    _assert_one_error(both, "not both")


def test_bad_cuts_are_one_line_each() -> None:
    cases = [
        (["--cut", "nope=0"], ["unknown phase 'nope'", "the model predicts", "schedule"]),
        (["--cut", "kv=-500ms/step"], ["larger than the phase", "kv takes", "ms per step"]),
        (["--cut", "sample=-150%"], ["larger than the phase", "at most 100%"]),
        (["--cut", "schedule=+5ms/step"], ["takes time off"]),
        (["--cut", "sample"], ["PHASE=-17ms/step"]),
        (["--cut", "sample=-3 parsecs"], ["is not"]),
        (["--cut", "sample=0", "--cut", "sample=-5%"], ["cut twice"]),
    ]
    results = _batch([["forecast", DATASET, *args, "--no-held-out"] for args, _ in cases])
    for (_, words), result in zip(cases, results, strict=True):
        _assert_one_error(result, *words)


def test_bad_options_and_formula_inputs() -> None:
    cases = [
        (["forecast"], ["needs sources"]),
        (["forecast", "--alpha", "0.5", "--k", "4"], ["needs --c"]),
        (["forecast", "--p", "1.5", "--r", "2"], ["p must be a fraction"]),
        (["forecast", "--p", "0.5", "--r", "2", "--alpha", "0.5", "--k", "4", "--c", "0.1"],
         ["not both"]),
        (["forecast", DATASET, "--p", "0.5"], ["without sources"]),
        (["forecast", DATASET, "--alpha", "1.5"], ["--alpha must be"]),
        (["forecast", DATASET, "--k", "0"], ["needs a whole number >= 1"]),
        (["forecast", DATASET, "--seed", "-1"], ["--seed must be a whole number >= 0"]),
        (["forecast", DATASET, "--k", "1025"], ["--k must be a whole number in 1..1024"]),
        # 10**6 requests of 2**20 tokens: 10**12 tokens a run, hours of simulation
        (["forecast", DATASET, "--requests", "1000000", "--output-tokens", "1048576"],
         ["1,048,576,000,000 output tokens", "at most 67,108,864", "--requests"]),
        (["forecast", DATASET, "--output-tokens", "1000000000"],
         ["--output-tokens", "1000000000", "above 1,048,576"]),
        (["forecast", DATASET, "--input-tokens", "20000000", "--output-tokens", "5"],
         ["--input-tokens", "above 16,777,216"]),
        (["forecast", DATASET, "--sampling", "temperature=0"], ["no run has it"]),
        (["forecast", str(SAMPLES / "nope.sqlite")], ["nope.sqlite"]),
    ]
    results = _batch([argv for argv, _ in cases])
    for (_, words), result in zip(cases, results, strict=True):
        _assert_one_error(result, *words)


def test_formula_forecast_says_when_the_best_k_is_the_search_limit() -> None:
    """alpha = 1 and c = 0: every k is better than the one before, so the best k is wherever
    the search stopped. The formula forecast said "best k 12 (13.00x)" beside the given k =
    1024's 1025x, as if 12 were best; it now names the searched range and says a larger k may
    be better (as whatif does), in the text and in the JSON (``k_max``). Past the float's
    digits a speedup is written in exponent form (was: 309 digits), and a given -0 is 0."""
    results = _batch([
        ["forecast", "--alpha", "1", "--k", "1024", "--c", "0", "--p", "1"],
        ["forecast", "--alpha", "1", "--k", "1024", "--c", "0", "--p", "1", "--json"],
        ["forecast", "--alpha", "0.8", "--k", "4", "--c", "0.1", "--p", "0.5"],
        ["forecast", "--p", "1", "--r", "1e308"],
        ["forecast", "--p", "-0.0", "--r", "2", "--json"],
    ])  # fmt: skip
    assert all(r["status"] == 0 for r in results), results
    text, doc = str(results[0]["stdout"]), json.loads(str(results[1]["stdout"]))
    assert "best k 12 of 1..12 (13.00x; the search limit: a larger k may be better" in text
    assert doc["best_k"] == 12 and doc["k_max"] == 12 and doc["decode_speedup"] == 1025.0
    # an optimum inside the range is written as before, with the range searched
    assert "best k 6 of 1..12 (2.47x)" in str(results[2]["stdout"])
    assert "end to end 1.000e+308x" in str(results[3]["stdout"])
    zero = json.loads(str(results[4]["stdout"]))
    assert zero["p"] == 0.0 and str(zero["p"]) == "0.0" and zero["speedup"] == 1.0


def test_sources_of_different_models_or_engines_are_refused(tmp_path: Path) -> None:
    """A GPU-traced run beside CPU-only ones, and datasets labelled with two presets."""
    req = lengths(4, (8, 20), (10, 20), seed=3)
    cpu = build_run(tmp_path / "cpu.sqlite", req, concurrency=2)
    gpu = build_run(tmp_path / "gpu.sqlite", req, concurrency=2, k=2, accepted=iid(0.6, 2),
                    gpu=True)  # fmt: skip
    from specnsys.runset.collect import collect
    from specnsys.runset.labels import Labeler

    collect([cpu], tmp_path / "small", labeler=Labeler(options=["preset=small"]), workers=1)
    before = _digest(gpu)
    mixed_gpu, mixed_preset = _batch([
        ["forecast", str(cpu), str(gpu)],
        ["forecast", DATASET, str(tmp_path / "small")],
    ])  # fmt: skip
    _assert_one_error(mixed_gpu, "the sources mix gpu", "CPU only", "GPU", "one model and engine")
    _assert_one_error(mixed_preset, "the sources mix preset", "'tiny'", "'small'")
    assert _digest(gpu) == before


def test_a_long_request_does_not_refuse_a_short_workload(files: Path) -> None:
    """600 requests of 100 tokens and one of 131,072 take about 191,000 draws a run, not
    601 x 131,072 = 78.8M: the simulation draws each request's row as long as its own output
    (the first version refused this workload, as it would a production log with a few long
    answers). The long request alone sets the run's length: at k = 2 it needs at least
    131,071 / 3 decode steps."""
    rows = "\n".join(["10,100"] * 600 + ["10,131072"])
    (files / "tail.csv").write_text(f"input_tokens,output_tokens\n{rows}\n")
    (tail,) = _batch([["forecast", DATASET, "--workload", str(files / "tail.csv"),
                       "--concurrency", "8", "--k", "2", "--no-held-out", "--json"]])
    assert tail["status"] == 0 and tail["traceback"] is None, tail["stderr"]
    doc = json.loads(str(tail["stdout"]))
    assert doc["workload"]["requests"] == 601
    assert doc["workload"]["output_tokens_mean"] == pytest.approx((600 * 100 + 131072) / 601)
    assert doc["cells"][0]["decode_steps"] >= 131_071 / 3


def test_weights_near_the_float_maximum_are_weights(files: Path) -> None:
    """Weights are relative: two of 1e308 (their sum is past the float maximum) forecast as
    two of 1, and 3e307 against 1e307 as 3 against 1 (the first version exited 3: its
    probabilities were NaN)."""
    cases = {"huge.csv": "1e308\n10,30,1e308", "ones.csv": "1\n10,30,1",
             "big_ratio.csv": "3e307\n10,30,1e307", "ratio.csv": "3\n10,30,1"}  # fmt: skip
    for name, rows in cases.items():
        (files / name).write_text(f"input_tokens,output_tokens,weight\n10,20,{rows}\n")
    results = _batch([["forecast", DATASET, "--workload", str(files / name), "--k", "2",
                       "--concurrency", "2", "--no-held-out", "--json"] for name in cases])
    docs = []
    for result in results:
        assert result["status"] == 0 and result["traceback"] is None, result["stderr"]
        doc = json.loads(str(result["stdout"]))
        doc["workload"].pop("source")
        docs.append(doc)
    assert docs[0] == docs[1] and docs[2]["cells"] == docs[3]["cells"]
    assert docs[2]["workload"]["output_tokens_mean"] == pytest.approx(22.5)
