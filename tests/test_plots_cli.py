"""``specnsys plot`` and ``specnsys report`` end to end on the bundled real captures."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib.image as mpimg
import pytest

from specnsys.cli.main import main
from tests.conftest import sha256

pytestmark = pytest.mark.usefixtures("shared_cache")  # the samples built once (conftest)

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"
BASE = str(SAMPLES / "baseline_chat_c4.sqlite")
SPEC = str(SAMPLES / "spec_chat_c4_k4.sqlite")
SWEEP = [BASE] + [str(SAMPLES / f"spec_chat_c4_k{k}.sqlite") for k in (2, 4, 6)]


@pytest.mark.parametrize(
    ("kind", "traces", "suffix"),
    [
        ("phases", [BASE, SPEC], "png"),
        ("amdahl", [SPEC, BASE], "svg"),  # two traces in either order
        ("acceptance", [SPEC], "png"),
        ("sweep", SWEEP, "png"),
        ("timeline", [SPEC], "svg"),
        ("steps", [BASE, SPEC], "png"),
    ],
)
def test_plot_every_kind_from_real_traces(
    kind: str, traces: list[str], suffix: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    before = {t: sha256(Path(t)) for t in traces}
    out = tmp_path / f"{kind}.{suffix}"
    data_out = tmp_path / f"{kind}.json"
    assert main(["plot", kind, *traces, "-o", str(out), "--data", str(data_out)]) == 0
    data = json.loads(data_out.read_text())
    assert data["kind"] == kind and not data.get("not_available")
    assert capsys.readouterr().out.strip() == f"{out}: {data['title']}"
    if suffix == "png":
        assert mpimg.imread(out).shape[1] >= 1000
    else:
        assert out.read_text().lstrip().startswith("<?xml")
    assert {t: sha256(Path(t)) for t in traces} == before  # inputs untouched


def test_sweep_over_k_reads_k_from_the_traces(tmp_path: Path) -> None:
    data_out = tmp_path / "sweep.json"
    assert main(["plot", "sweep", *SWEEP, "-o", str(tmp_path / "s.png"), "--data",
                 str(data_out)]) == 0  # fmt: skip
    data = json.loads(data_out.read_text())
    assert data["axis"] == "k" and data["x"] == [2, 4, 6]
    assert len(data["measured"]) == len(data["predicted"]) == 3


def test_acceptance_of_a_baseline_is_refused_not_drawn_blank(tmp_path: Path) -> None:
    # Issue 23: it used to exit 0 with a blank "not available" image (tests/test_plot_drawability.py
    # has every kind).
    data_out = tmp_path / "a.json"
    assert main(["plot", "acceptance", BASE, "-o", str(tmp_path / "a.png"), "--data",
                 str(data_out)]) == 2  # fmt: skip
    assert list(tmp_path.iterdir()) == []


def test_timeline_step_or_window_picks_what_to_draw(tmp_path: Path) -> None:
    data_out = tmp_path / "t.json"
    args = ["plot", "timeline", SPEC, "--step", "0", "-o", str(tmp_path / "t.png")]
    assert main([*args, "--data", str(data_out)]) == 0
    assert json.loads(data_out.read_text())["subtitle"].startswith("decode step 1 of ")
    args = ["plot", "timeline", SPEC, "--window", "10:12.5", "-o", str(tmp_path / "w.svg")]
    assert main([*args, "--data", str(data_out)]) == 0
    data = json.loads(data_out.read_text())
    assert data["subtitle"].startswith("2.500 ms window") and data["window_ms"] == 2.5


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["plot", "phases", BASE, "-o", "{tmp}/x.pdf"], "must end in .png or .svg"),
        (["plot", "phases", BASE, "-o", "{tmp}/no/x.png"], "does not exist"),
        (["plot", "timeline", BASE, SPEC, "-o", "{tmp}/x.png"], "give exactly one"),
        (
            ["plot", "phases", BASE, "--step", "2", "-o", "{tmp}/x.png"],
            "only apply to the timeline",
        ),
        (["plot", "timeline", SPEC, "--window", "5:1", "-o", "{tmp}/x.png"], "need 0 <= A < B"),
        (
            ["plot", "timeline", SPEC, "--step", "1", "--window", "1:2", "-o", "{tmp}/x.png"],
            "not both",
        ),
        (["plot", "timeline", SPEC, "--step", "999", "-o", "{tmp}/x.png"], "decode steps"),
        (["plot", "sweep", SPEC, "-o", "{tmp}/x.png"], "needs a baseline"),
        (["plot", "phases", "{tmp}/missing.sqlite", "-o", "{tmp}/x.png"], ""),
        (["report", SPEC, "-o", "{tmp}/r.txt"], "must end in .html or .htm"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    args: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    argv = [a.replace("{tmp}", str(tmp_path)) for a in args]
    code: int | str | None
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own checks exit from inside the parser
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("specnsys: error: ") and err.count("\n") == 1, err
    assert message in err
    assert not any(p.suffix in {".png", ".html"} for p in tmp_path.iterdir())


def test_report_writes_one_html_file(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    before = sha256(Path(SPEC)), sha256(Path(BASE))
    out = tmp_path / "report.html"
    assert main(["report", SPEC, BASE, "-o", str(out)]) == 0
    assert capsys.readouterr().out.startswith(f"{out}: ")
    text = out.read_text()
    assert (
        text.count("<svg") == 4 and "specnsys report: baseline_chat_c4 vs spec_chat_c4_k4" in text
    )
    assert (sha256(Path(SPEC)), sha256(Path(BASE))) == before
    assert [p.name for p in tmp_path.iterdir()] == ["report.html"]
