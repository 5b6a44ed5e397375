"""``specnsys advise`` (issue 33 item 4): the article's three next steps in its order --
non-accelerable items first with the forecast p after each cut, then k, then the draft size
-- each with the figure that backs it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from specnsys.forecasting.results import Advice
from specnsys.results import NotAvailable, to_dict
from specnsys.runset.forecast import advise
from tests.conftest import json_doc
from tests.forecast_loop import Costs, build_run, iid, lengths

pytestmark = pytest.mark.usefixtures("shared_cache")  # the samples built once (conftest)

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"
#: A loop whose sampler and schedule are slow (the article's situation): worth cutting first.
SLOW = Costs(sch_step=300_000, s0=400_000, s1=20_000, df=40_000, db=2_000)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "specnsys", *args], capture_output=True, text=True, timeout=600
    )


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    folder = tmp_path_factory.mktemp("advise")
    req = lengths(6, (10, 30), (30, 60), seed=4)
    paths = []
    for c in (1, 4):
        paths.append(build_run(folder / f"base_c{c}.sqlite", req, concurrency=c, costs=SLOW))
        for k in (2, 4):
            paths.append(build_run(folder / f"spec_c{c}_k{k}.sqlite", req, concurrency=c, k=k,
                                   accepted=iid(0.8, k), costs=SLOW))  # fmt: skip
    return paths


def test_three_steps_in_the_articles_order(sources: list[Path]) -> None:
    a = advise(*sources)
    assert isinstance(a, Advice)
    assert (a.concurrency, a.k) == (1, 2)  # the lowest concurrency run, its lowest k
    assert [s.what for s in a.steps] == [
        "cut the non-accelerable items first", "then set k", "then size the draft"]
    # 1: the slow sampler and schedule come first, and each cut raises p
    assert [c.phase for c in a.cuts[:2]] == ["sample", "schedule"]
    cell = a.forecast.cells[0]
    ps = [p for p in (cell.p, *(c.p_after for c in a.cuts)) if isinstance(p, float)]
    assert len(ps) == 1 + len(a.cuts) and ps == sorted(ps) and ps[-1] > ps[0]  # all floats
    assert f"p {cell.p:.2f} -> {a.cuts[0].p_after:.2f}" in a.steps[0].figure
    assert "--cut sample=0 --cut schedule=0" in a.steps[0].command
    # 2: the best k of the forecast's curve
    assert isinstance(cell.best_k, int)
    assert f"k = {cell.best_k}" in a.steps[1].figure and "plot forecast" in a.steps[1].command
    # 3: the draft against its break-even cost, and the forecast with a draft half as costly
    assert isinstance(cell.draft_cost_ratio, float)
    assert f"c {cell.draft_cost_ratio:.3f}" in a.steps[2].figure
    assert "--cut draft=-50%" in a.steps[2].command
    # the cumulative cuts are the cell's numbers: removing sample from both runs
    base = cell.baseline_phases_ns_per_token
    accel = base["forward"]
    assert a.cuts[0].p_after == pytest.approx(accel / (sum(base.values()) - base["sample"]))


def test_advise_cli_text_and_json(sources: list[Path]) -> None:
    done = _cli("advise", *map(str, sources), "--concurrency", "4", "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["concurrency"] == 4 and [s["order"] for s in doc["steps"]] == [1, 2, 3]
    assert doc["cuts"][0]["phase"] == "sample" and doc["forecast"]["cells"][0]["concurrency"] == 4
    text = _cli("advise", *map(str, sources))
    assert text.returncode == 0 and text.stderr == ""
    lines = text.stdout.splitlines()
    starts = [next(i for i, line in enumerate(lines) if line.startswith(f"{n}. ")) for n in (1, 2, 3)]
    assert starts == sorted(starts)
    assert all(lines[i + 1].lstrip().startswith("figure: ") for i in starts)


def test_advise_of_a_baseline_alone_says_what_it_cannot(sources: list[Path]) -> None:
    a = advise(*[p for p in sources if p.name.startswith("base")])
    assert a.cuts and a.cuts[0].phase == "sample"
    assert isinstance(a.cuts[0].speedup_after, NotAvailable)
    assert a.steps[1].advice.startswith("not available")
    assert a.steps[2].advice.startswith("not available")
    assert json_doc(to_dict(a))["steps"][2]["what"] == "then size the draft"


def test_advise_on_the_bundled_dataset() -> None:
    """Real captures (CPU, a draft as costly as the target): no k pays, and the draft step
    says so with the measured c."""
    a = advise(SAMPLES / "sweep")
    cell = a.forecast.cells[0]
    assert isinstance(cell.best_k_speedup, float) and cell.best_k_speedup < 1
    assert a.steps[1].advice.startswith("no k pays")
    assert isinstance(cell.draft_cost_ratio, float) and cell.draft_cost_ratio > 1
