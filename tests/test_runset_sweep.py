"""``specnsys sweep`` and the cost model of a speculative step (issue 21 items 3-4): cells over
repeats, the same numbers as ``compare``, the crossover, the best k, noisy cells flagged, the
fitted costs of traces whose step costs are known, and the sweep / verify-cost figures."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import matplotlib.image as mpimg
import pytest

from specnsys.runset.collect import collect
from specnsys.runset.labels import Labeler
from specnsys.runset.sweep import NOISY_RELATIVE_MAD, sweep
from specnsys.testing import NsysExportBuilder
from tests.conftest import json_doc

pytestmark = pytest.mark.usefixtures("shared_cache")  # the samples built once (conftest)

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"
SAMPLE_PATTERNS = ("{mode}_{workload}_c{concurrency}_k{k}", "{mode}_{workload}_c{concurrency}")
BUILT_PATTERNS = ("{mode}_k{k}_c{concurrency}_r{repeat}", "{mode}_c{concurrency}_r{repeat}")

# Known costs of the built traces (ns): every decode step is schedule 100, then the
# accelerable part, then sample 100 and sync 100.
D0, D1 = 200, 50  # draft: D0 + D1 x proposed (k x batch)
V0, V1 = 1000, 100  # verify: V0 + V1 x (k + 1) x batch
F0, F1 = 1000, 100  # baseline forward: F0 + F1 x batch
REST = 300
STEPS = 20


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "specnsys", *args], capture_output=True, text=True, timeout=300
    )


def _trace(path: Path, *, batch: int, k: int = 0, accepted: int = 0, v0: int = V0) -> Path:
    """A run of STEPS decode steps over *batch* sequences (one request range each, open
    throughout); speculative with *k* drafts per sequence of which *accepted* are kept, else
    a baseline. Step costs are the module's known lines (*v0*: the verify intercept)."""
    b = NsysExportBuilder()
    b.process(1, "python3")
    b.thread(1, 1, "main")
    b.domain(1, "specnsys", pid=1, tid=1)
    kw = {"pid": 1, "tid": 1, "domain_id": 1}
    if k:
        parts = [("draft", D0 + D1 * k * batch), ("verify", v0 + V1 * (k + 1) * batch)]
        tokens = batch * (accepted + 1)
    else:
        parts = [("forward", F0 + F1 * batch)]
        tokens = batch
    step = 100 + sum(ns for _, ns in parts) + 200
    for _ in range(batch):
        b.start_end(0, STEPS * step, "request", **kw)
    for i in range(STEPS):
        t = i * step
        b.push_pop(t, t + step, "decode", **kw)
        b.push_pop(t, t + 100, "schedule", **kw)
        at = t + 100
        for name, ns in parts:
            b.push_pop(at, at + ns, name, **kw)
            at += ns
        b.push_pop(at, at + 100, "sample", **kw)
        b.push_pop(at + 100, at + 200, "sync", **kw)
        b.mark(at + 150, "tokens", payload_int=tokens, **kw)
        for _ in range(batch if k else 0):
            b.mark(at + 160, "proposed", payload_int=k, **kw)
            b.mark(at + 161, "accepted", payload_int=accepted, **kw)
    return b.write(path)


def _step_ns(k: int, batch: int) -> int:
    if k == 0:
        return 100 + F0 + F1 * batch + 200
    return 100 + D0 + D1 * k * batch + V0 + V1 * (k + 1) * batch + 200


def _speedup(k: int, accepted: int, c: int) -> float:
    """Baseline / speculative time per output token of the built runs."""
    return (_step_ns(0, c) / c) / (_step_ns(k, c) / (c * (accepted + 1)))


ACCEPTED = {2: 1, 4: 2}  # accepted drafts per sequence-step at each k
CONCURRENCY = (1, 4, 8)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A k 2/4 x concurrency 1/4/8 sweep with one baseline per concurrency, collected."""
    folder = tmp_path_factory.mktemp("built")
    for c in CONCURRENCY:
        _trace(folder / f"baseline_c{c}_r1.sqlite", batch=c)
        for k, a in ACCEPTED.items():
            _trace(folder / f"spec_k{k}_c{c}_r1.sqlite", batch=c, k=k, accepted=a)
    dataset = folder / "ds"
    collect([folder], dataset, labeler=Labeler(patterns=BUILT_PATTERNS), workers=1)
    return dataset


@pytest.fixture(scope="module")
def samples(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dataset = tmp_path_factory.mktemp("samples") / "ds"
    collect([SAMPLES], dataset, labeler=Labeler(patterns=SAMPLE_PATTERNS), workers=1)
    return dataset


def _cell(result: dict, **labels: str) -> dict:
    return next(c for c in result["cells"] if c["labels"] == labels)


def test_sweep_numbers_equal_compare_for_the_same_pairs(samples: Path) -> None:
    """Each pair of the sweep is what `specnsys compare BASELINE SPEC --json` says, to the bit;
    a cell of one pair carries those numbers as its medians."""
    result = json_doc(sweep(samples).to_dict())
    assert len(result["pairs"]) == 5 and not result["unpaired_spec_runs"]
    for pair in result["pairs"]:
        done = _cli("compare", pair["baseline"], pair["spec"], "--json")
        assert done.returncode == 0, done.stderr
        compared = json.loads(done.stdout)
        for key in ("p", "r", "predicted_speedup", "measured_speedup", "gap"):
            assert pair[key] == compared[key], key
        assert Path(pair["baseline"]).stem.split("_")[1:3] == Path(pair["spec"]).stem.split("_")[1:3]
        cell = _cell(result, **{"mode": "spec", **pair["labels"]})
        assert cell["pairs"] == 1 and cell["noisy"] is None  # one run: spread unknown
        assert cell["measured_speedup"] == {"median": compared["measured_speedup"], "mad": 0.0,
                                            "n": 1}  # fmt: skip


def test_sweep_cli_text_and_json_on_the_samples(samples: Path) -> None:
    done = _cli("sweep", str(samples), "--by", "k,concurrency,workload", "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["by"] == ["k", "concurrency", "workload"]
    spec = [c for c in doc["cells"] if c["role"] == "spec"]
    assert len(spec) == 5 and all(c["measured_speedup"]["median"] < 1 for c in spec)
    # CPU captures: speculation never pays, so no k beats the baseline anywhere
    assert {(x["labels"]["workload"], x["status"]) for x in doc["crossover"]} >= {
        ("chat", "never pays at the measured concurrencies")}
    best = {(b["labels"]["concurrency"], b["labels"]["workload"]): b for b in doc["best_k"]}
    assert best[("4", "chat")]["best_k"] == max(
        best[("4", "chat")]["candidates"], key=best[("4", "chat")]["candidates"].get)
    assert not best[("4", "chat")]["beats_baseline"]
    text = _cli("sweep", str(samples))
    assert text.returncode == 0 and text.stderr == ""
    assert "verify_ns =" in text.stdout and "fitted by least squares on" in text.stdout
    bad = _cli("sweep", str(samples), "--by", "nope")
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.count("\n") == 1 and "no such label" in bad.stderr
    missing = _cli("sweep", str(samples / "runs"))
    assert missing.returncode == 2 and "not a dataset" in missing.stderr


def test_crossover_and_best_k_on_runs_with_known_costs(built: Path) -> None:
    result = json_doc(sweep(built, by=["k", "concurrency"]).to_dict())
    for k, a in ACCEPTED.items():
        for c in CONCURRENCY:
            cell = _cell(result, k=str(k), concurrency=str(c))
            assert cell["measured_speedup"]["median"] == pytest.approx(_speedup(k, a, c), rel=1e-12)
            # Amdahl from the baseline's p and this r: the rest of the step (300 ns) is shared
            # by a + 1 times more tokens, which the prediction does not count (the gap)
            p = (F0 + F1 * c) / _step_ns(0, c)
            r = ((F0 + F1 * c) / c) / ((_step_ns(k, c) - REST) / (c * (a + 1)))
            predicted = 1 / ((1 - p) + p / r)
            assert cell["p"]["median"] == pytest.approx(p)
            assert cell["predicted_speedup"]["median"] == pytest.approx(predicted)
            assert cell["gap"]["median"] == pytest.approx(_speedup(k, a, c) / predicted - 1)
    # k=2: 1.47x, 1.10x, 0.89x; k=4: 1.91x, 1.19x, 0.89x -> both stop paying at 8
    cross = {x["labels"]["k"]: x for x in result["crossover"]}
    for k, a in ACCEPTED.items():
        assert cross[str(k)]["status"] == "stops paying"
        assert cross[str(k)]["stops_paying_at"] == "8"
        m4, m8 = _speedup(k, a, 4), _speedup(k, a, 8)
        assert cross[str(k)]["interpolated"] == pytest.approx(4 + (m4 - 1) * 4 / (m4 - m8))
    best = {b["labels"]["concurrency"]: b for b in result["best_k"]}
    assert (best["1"]["best_k"], best["4"]["best_k"], best["8"]["best_k"]) == ("4", "4", "2")
    assert best["1"]["beats_baseline"] and not best["8"]["beats_baseline"]
    assert best["8"]["measured_speedup"] == pytest.approx(_speedup(2, 1, 8))


def test_cost_model_recovers_the_known_step_costs(built: Path) -> None:
    model = json_doc(sweep(built).to_dict())["cost_model"]
    (family,) = model["families"]
    verify, draft, forward = family["verify_fit"], family["draft_fit"], family["baseline_forward_fit"]
    assert verify["slope"] == pytest.approx(V1) and verify["intercept"] == pytest.approx(V0)
    assert verify["steps"] == 6 * STEPS and verify["r2"] == pytest.approx(1.0)
    assert verify["x"] == "positions" and verify["fitted"] == "least squares"
    assert draft["slope"] == pytest.approx(D1) and draft["intercept"] == pytest.approx(D0)
    assert forward["slope"] == pytest.approx(F1) and forward["intercept"] == pytest.approx(F0)
    assert forward["steps"] == 3 * STEPS
    proposed = sum(k * c for k in ACCEPTED for c in CONCURRENCY) * STEPS
    drafted = sum(D0 + D1 * k * c for k in ACCEPTED for c in CONCURRENCY) * STEPS
    assert family["draft_ns_per_proposed"] == pytest.approx(drafted / proposed)
    cells = {(c["labels"]["k"], c["labels"]["concurrency"]): c for c in model["cells"]}
    assert len(cells) == 6
    for k, a in ACCEPTED.items():
        for c in CONCURRENCY:
            cell = cells[(str(k), str(c))]
            assert cell["steps"] == STEPS and cell["batch_mean"] == c
            assert cell["tokens_per_step"] == c * (a + 1)
            ratio = (V0 + V1 * (k + 1) * c) / (F0 + F1 * c)
            assert cell["verify_to_forward_same_batch"] == pytest.approx(ratio)
            assert cell["verify_ratio_warning"] == (ratio > 1.3)
            assert cell["verify_ns_per_position"] == pytest.approx(
                (V0 + V1 * (k + 1) * c) / ((k + 1) * c))
            # the fitted costs are exact and the rest of the step did not change
            assert cell["predicted_decode_speedup"] == pytest.approx(_speedup(k, a, c))
            assert cell["measured_decode_speedup"] == pytest.approx(_speedup(k, a, c))
            assert cell["decode_gap"] == pytest.approx(0.0, abs=1e-9)
            assert cell["rest_ns_per_step"]["baseline"] == pytest.approx(REST)
    assert cells[("4", "8")]["verify_ratio_warning"] and not cells[("2", "1")]["verify_ratio_warning"]


def test_a_noisy_cell_is_flagged_not_hidden(tmp_path: Path) -> None:
    """Two repeats of k=2, c=4 whose verify costs differ by 1,000 ns per step (about 14% of
    the step): the cell stays, with its median and MAD, flagged noisy; a cell of two identical
    repeats is not; each repeat is paired with the baseline of the same repeat."""
    folder = tmp_path / "t"
    folder.mkdir()
    for r in (1, 2):
        _trace(folder / f"baseline_c4_r{r}.sqlite", batch=4)
        _trace(folder / f"spec_k2_c4_r{r}.sqlite", batch=4, k=2, accepted=1,
               v0=V0 if r == 1 else V0 + 1000)  # fmt: skip
        _trace(folder / f"spec_k4_c4_r{r}.sqlite", batch=4, k=4, accepted=2)
    collect([folder], tmp_path / "ds", labeler=Labeler(patterns=BUILT_PATTERNS), workers=1)
    result = sweep(tmp_path / "ds", by=["k", "concurrency"])
    doc = result.to_dict()
    noisy = _cell(doc, k="2", concurrency="4")
    assert noisy["pairs"] == 2 and noisy["runs"] == 2  # repeat r with baseline r
    slow = (_step_ns(0, 4) / 4) / ((_step_ns(2, 4) + 1000) / 8)
    fast = _speedup(2, 1, 4)
    assert noisy["measured_speedup"]["median"] == pytest.approx((fast + slow) / 2)
    assert noisy["measured_speedup"]["mad"] == pytest.approx((fast - slow) / 2)
    assert noisy["relative_mad"]["measured_speedup"] > NOISY_RELATIVE_MAD
    assert noisy["noisy"] is True
    steady = _cell(doc, k="4", concurrency="4")
    assert steady["noisy"] is False and steady["measured_speedup"]["mad"] == 0.0
    from specnsys.runset.sweep import render_sweep_text

    text = render_sweep_text(result)
    row = next(line for line in text.splitlines() if line.startswith("2 "))
    assert "NOISY" in row and f"{noisy['measured_speedup']['median']:.2f}" in row
    assert sweep(tmp_path / "ds", by=["k", "concurrency"], threshold=0.5).cells[0]["noisy"] is False


@pytest.mark.parametrize("suffix", ["png", "svg"])
def test_sweep_and_verify_cost_figures_of_a_dataset(built: Path, tmp_path: Path,
                                                     suffix: str) -> None:  # fmt: skip
    for kind in ("sweep", "verify-cost"):
        out, data_out = tmp_path / f"{kind}.{suffix}", tmp_path / f"{kind}.json"
        done = _cli("plot", kind, str(built), "-o", str(out), "--data", str(data_out))
        assert done.returncode == 0, done.stderr
        data = json.loads(data_out.read_text())
        assert done.stdout.strip() == f"{out}: {data['title']}"
        if suffix == "png":
            assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
            assert mpimg.imread(out).shape[1] >= 800
        else:
            assert out.read_text().lstrip().startswith("<?xml") and "<svg" in out.read_text()
        if kind == "sweep":
            (panel,) = data["panels"]
            assert panel["style"] == "heatmap" and panel["k"] == ["2", "4"]
            assert panel["concurrency"] == ["1", "4", "8"]
            assert panel["measured"][1][0] == pytest.approx(_speedup(4, 2, 1))
        else:
            (family,) = data["families"]
            assert family["verify_fit"]["slope"] == pytest.approx(V1)
            assert len(family["verify"]["positions"]) == 6 * STEPS
            assert "100 ns per extra verified position" in data["title"]


def test_plot_sweep_of_traces_is_unchanged_and_datasets_only_where_they_fit(
    built: Path, tmp_path: Path
) -> None:
    traces = [str(SAMPLES / f"{n}.sqlite") for n in ("baseline_chat_c4", "spec_chat_c4_k4")]
    data_out = tmp_path / "s.json"
    done = _cli("plot", "sweep", *traces, "-o", str(tmp_path / "s.png"), "--data", str(data_out))
    assert done.returncode == 0, done.stderr
    assert json.loads(data_out.read_text())["kind"] == "sweep"  # the traces' figure 4
    for args, message in (
        (["plot", "verify-cost", *traces], "draws one dataset"),
        (["plot", "phases", str(built)],
         "draws traces; a dataset draws sweep, verify-cost, forecast"),
        (["plot", "sweep", str(built), "--tokens", "5"], "analysed at collect time"),
    ):
        bad = _cli(*args, "-o", str(tmp_path / "x.png"))
        assert bad.returncode == 2 and bad.stdout == "", bad.stderr
        assert bad.stderr.count("\n") == 1 and message in bad.stderr
    assert not (tmp_path / "x.png").exists()


def test_a_dataset_without_baselines_says_so(tmp_path: Path) -> None:
    folder = tmp_path / "t"
    folder.mkdir()
    shutil.copyfile(SAMPLES / "spec_chat_c4_k4.sqlite", folder / "spec_chat_c4_k4.sqlite")
    collect([folder], tmp_path / "ds", labeler=Labeler(patterns=SAMPLE_PATTERNS), workers=1)
    result = json_doc(sweep(tmp_path / "ds").to_dict())
    assert not result["pairs"]
    assert "no baseline run" in next(iter(result["unpaired_spec_runs"].values()))
    cell = result["cells"][0]
    assert cell["measured_speedup"]["median"] is None and cell["pairs"] == 0
    assert result["crossover"] == [] and result["best_k"] == []
