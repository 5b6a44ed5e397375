"""The one registry of renderers (:mod:`specnsys.render.registry`, issue 31 item 4).

``plot``, ``report`` and ``export``, on the command line and in the API, find their formats
there: the choices, the suffix checks and the "unknown kind" messages come from the entries.
The claim that a new renderer is its module, its entry and its test is checked by adding a
made-up plot kind and a made-up export format at run time (as if registered) and driving the
command line and the API with them, with nothing else changed.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import IO

import pytest
from matplotlib.figure import Figure

import specnsys
from specnsys.cli.main import build_parser, main
from specnsys.errors import UsageError
from specnsys.render import registry
from specnsys.render.perfetto import ExportSource
from specnsys.render.plots.common import FORMATS
from specnsys.render.renderer import FigureData, FigureRenderer, Renderer, RenderOptions
from specnsys.render.runs import Run
from tests.conftest import SAMPLE_TRACES

pytestmark = pytest.mark.usefixtures("shared_cache")  # the samples built once (conftest)

REPO = Path(__file__).resolve().parents[1]
SPEC = SAMPLE_TRACES / "spec_chat_c4_k4.sqlite"


def _choices(command: str, dest: str) -> list[str]:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    command_parser = sub.choices[command]  # type: ignore[index]
    action = next(a for a in command_parser._actions if a.dest == dest)
    return list(action.choices or ())


def test_the_commands_choices_come_from_the_registry() -> None:
    assert _choices("plot", "kind") == [f.kind for f in registry.FIGURES]
    assert _choices("export", "format") == [e.kind for e in registry.EXPORTS]
    assert registry.figure_kinds("traces", "lanes") == (
        "phases", "amdahl", "acceptance", "sweep", "timeline", "steps",
    )  # fmt: skip
    assert specnsys.api.TOKEN_FIGURES == ("phases", "amdahl", "sweep")
    assert specnsys.api.SAME_OUTPUT_FIGURES == ("amdahl", "sweep")
    assert registry.figure_kinds("dataset") == ("sweep", "verify-cost")
    assert FORMATS == registry.FIGURE_SUFFIXES  # the drawing's own check says the same


def test_every_entry_says_what_it_writes() -> None:
    for entry in (*registry.FIGURES, *registry.REPORTS, *registry.EXPORTS):
        assert isinstance(entry, Renderer), entry
        assert entry.kind and entry.suffixes and entry.renders and entry.help, entry
        assert entry.command in ("plot", "report", "export")
    assert {e.binary for e in registry.FIGURES} == {True}
    assert registry.report_renderer("html").binary is False
    perfetto = registry.export_renderer("perfetto")
    assert perfetto.binary and perfetto.suffixes == ("json", "json.gz")


def test_unknown_kinds_name_the_known_ones() -> None:
    with pytest.raises(UsageError, match=r"unknown figure kind 'pie' \(one of phases, amdahl, "
                       r"acceptance, sweep, timeline, steps\)"):  # fmt: skip
        specnsys.figure("pie", SPEC)
    with pytest.raises(UsageError, match=r"unknown export format 'svg' \(one of perfetto\)"):
        specnsys.export(SPEC, format="svg")
    with pytest.raises(UsageError, match=r"unknown report format 'pdf' \(one of html\)"):
        registry.report_renderer("pdf")


def test_reading_the_registry_loads_no_renderer() -> None:
    """The command line builds its parser from the entries: that must not import matplotlib
    or any renderer's module (they are loaded when one renders)."""
    code = (
        "import sys\n"
        "from specnsys.cli.main import build_parser\n"
        "build_parser()\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'matplotlib'\n"
        "             or m.startswith(('specnsys.render.plots', 'specnsys.render.perfetto',\n"
        "                              'specnsys.render.build', 'specnsys.render.html'))))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    assert done.stdout.strip() == "[]"


def test_the_perfetto_render_is_the_stream(tmp_path: Path) -> None:
    """One renderer, two ways out: whole in memory (``render``) or streamed (``write``)."""
    result = specnsys.export(SPEC)
    perfetto = registry.export_renderer("perfetto")
    whole = perfetto.render(result, RenderOptions())
    streamed = io.BytesIO()
    assert perfetto.stream is not None
    count = perfetto.stream()(result, RenderOptions(), streamed)
    assert whole == streamed.getvalue() and count == len(json.loads(whole)["traceEvents"])
    packed = perfetto.render(result, RenderOptions(compress=True))
    assert isinstance(packed, bytes) and gzip.decompress(packed) == whole


# ---------------------------------------------------------------- a renderer added at run time


def _labels_data(runs: Sequence[Run], options: RenderOptions) -> FigureData:
    return {"kind": "labels", "title": "labels", "labels": [r.label for r in runs]}


def _labels_figure(data: FigureData) -> Figure:
    fig = Figure(figsize=(2, 1))
    fig.text(0.1, 0.5, " ".join(map(str, data["labels"])))  # type: ignore[call-overload]
    return fig


LABELS = FigureRenderer(
    "plot", "labels", registry.FIGURE_SUFFIXES, True, "analyses", "the runs' labels",
    lambda: registry._render_figure, draws=lambda: {"labels": _labels_figure},
    from_runs=lambda: _labels_data,
)  # fmt: skip


def _phase_lines(source: ExportSource, options: RenderOptions) -> str:
    frame = source.data.breakdown.frame
    return "".join(f"{p} {w}\n" for p, w in zip(frame["phase"], frame["wall_ns"], strict=True))


def _phase_lines_stream(source: ExportSource, options: RenderOptions, handle: IO[bytes]) -> int:
    text = _phase_lines(source, options)
    handle.write(text.encode())
    return text.count("\n")


LINES = Renderer(
    "export", "lines", ("txt",), False, "a timeline export", "one line per phase",
    lambda: _phase_lines, lambda: _phase_lines_stream,
)  # fmt: skip


def test_a_new_plot_kind_is_its_module_and_its_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(registry, "FIGURES", (*registry.FIGURES, LABELS))
    out, data = tmp_path / "labels.svg", tmp_path / "labels.json"
    assert main(["plot", "labels", str(SPEC), "-o", str(out), "--data", str(data)]) == 0
    assert json.loads(data.read_text())["labels"] == ["spec_chat_c4_k4"]
    assert out.read_bytes().startswith(b"<?xml")
    assert specnsys.figure("labels", SPEC).data["labels"] == ["spec_chat_c4_k4"]


def test_a_new_export_format_is_its_module_and_its_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(registry, "EXPORTS", (*registry.EXPORTS, LINES))
    out = tmp_path / "phases.txt"
    assert main(["export", str(SPEC), "--format", "lines", "-o", str(out)]) == 0
    lines = out.read_text().splitlines()
    walls = specnsys.phases(SPEC).frame
    assert lines == [f"{p} {w}" for p, w in zip(walls["phase"], walls["wall_ns"], strict=True)]
    assert f"{out}: {len(lines)} events" in capsys.readouterr().out
    assert main(["export", str(SPEC), "--format", "lines", "-o", str(tmp_path / "x.json")]) == 2
    assert "the output must end in .txt" in capsys.readouterr().err
