"""The HTML report's structure: answer first, every section, inlined SVG, nothing external.

Built end to end from the bundled real captures (``sample_traces/``) through the real
metrics; the page is parsed with the standard library's HTML parser, not searched as text
only. The rendering in a real browser is in ``test_html_report_browser.py``.
"""

from __future__ import annotations

import re
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from specnsys import api
from specnsys.render.html import ReportFigure, inline_svg, render_report_html
from tests.test_plots import BASELINE, COMPARISON, SPEC
from tests.test_plots_lanes import build_gpu_trace

pytestmark = pytest.mark.usefixtures("shared_cache")  # the samples built once (conftest)

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"


class Page(HTMLParser):
    """Tags, ids, attributes and section order of a page."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.tags: Counter[str] = Counter()
        self.ids: list[str] = []
        self.sections: list[str] = []
        self.figures: list[str] = []
        self.attrs: list[tuple[str, str, str]] = []
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags[tag] += 1
        a = {k: v or "" for k, v in attrs}
        if "id" in a:
            self.ids.append(a["id"])
        if tag == "section":
            self.sections.append(a.get("id", ""))
        if tag == "figure":
            self.figures.append(a.get("data-kind", ""))
        self.attrs += [(tag, k, v) for k, v in a.items()]


@pytest.fixture(scope="module")
def sample_report() -> str:
    return api.report(SAMPLES / "spec_chat_c4_k4.sqlite", SAMPLES / "baseline_chat_c4.sqlite").html


def test_report_of_a_real_baseline_and_spec_pair_has_every_section(sample_report: str) -> None:
    page = Page(sample_report)
    assert sample_report.startswith("<!DOCTYPE html>")
    assert page.sections == [
        "answer", "figures", "what-to-cut", "compare", "analyze", "not-available",
    ]  # fmt: skip
    assert page.figures == ["phases", "amdahl", "acceptance", "timeline"]
    assert page.tags["svg"] == 4 and page.tags["figure"] == 4 and page.tags["figcaption"] == 4
    assert page.tags["table"] >= 6
    # The answer leads with the measured and predicted speedups, in words.
    answer = sample_report.split('<section id="answer">', 1)[1].split("</section>", 1)[0]
    assert "Speculative decoding ran at <b>" in answer and "Amdahl's law predicted" in answer
    assert "Cut first:" in answer


def test_report_is_self_contained(sample_report: str) -> None:
    assert re.search(r"https?://", sample_report) is None, "no URL at all, not even xmlns"
    page = Page(sample_report)
    assert page.tags["script"] == 0 and page.tags["link"] == 0 and page.tags["img"] == 0
    assert page.tags["iframe"] == 0 and page.tags["object"] == 0
    for tag, name, value in page.attrs:
        if name in {"src", "href"} or name.endswith(":href"):
            assert value.startswith("#"), (tag, name, value)  # in-page links only
    assert "@import" not in sample_report and "url(" not in sample_report.replace("url(#", "")


def test_ids_are_unique_across_the_inlined_figures(sample_report: str) -> None:
    page = Page(sample_report)
    duplicates = [i for i, n in Counter(page.ids).items() if n > 1]
    assert duplicates == []
    # Every in-page reference points at an id of the page.
    ids = set(page.ids)
    refs = [v[1:] for _tag, name, v in page.attrs if name.endswith("href") and v.startswith("#")]
    assert refs and all(r in ids for r in refs)
    assert all(r in ids for r in re.findall(r"url\(#([^)]+)\)", sample_report))


def test_what_to_cut_table_ranks_the_baselines_non_accelerable_phases(sample_report: str) -> None:
    section = sample_report.split('<section id="what-to-cut">', 1)[1].split("</section>", 1)[0]
    phases = re.findall(r'<span class="chip"[^>]*></span><span class="name">([a-z_]+)</span></td>', section)
    assert phases and "forward" not in phases and "draft" not in phases
    assert len(phases) == len(set(phases))


def test_report_of_one_baseline_trace_with_gpu_lanes(tmp_path: Path) -> None:
    page_text = api.report(build_gpu_trace(tmp_path / "gpu.sqlite")).html
    page = Page(page_text)
    assert page.sections == ["answer", "figures", "what-to-cut", "analyze", "not-available"]
    assert page.figures == ["phases", "amdahl", "timeline"]  # no acceptance in a baseline
    assert "GPU busy 54%" in page_text  # the timeline's finding, in its aria-label
    assert re.search(r"https?://", page_text) is None


def test_renderer_escapes_what_it_is_given() -> None:
    # A partial analyze --json document (Any, as BASELINE: only the keys the renderer reads).
    evil: Any = {**BASELINE, "path": "<script>alert(1)</script>.sqlite", "warnings": ["a < b & c"]}
    svg = '<svg xmlns="http://www.w3.org/2000/svg" width="10pt" height="5pt"><g id="a"/></svg>'
    page_text = render_report_html(
        runs=[("<b>run</b>", evil), ("spec", SPEC)],
        comparison=COMPARISON,
        whatcut={
            "mode": "baseline", "accelerable": ["forward"], "p": 0.55, "ceiling": 2.2,
            "non_accelerable_share": 0.45, "candidates": [], "not_available": None,
        },  # fmt: skip
        figures=[ReportFigure("phases", 'title "quoted" <x>', svg)],
    )
    page = Page(page_text)
    assert page.tags["script"] == 0 and page.tags["b"] >= 1  # only the renderer's own <b>
    assert "&lt;script&gt;" in page_text and "a &lt; b &amp; c" in page_text
    assert 'aria-label="title &quot;quoted&quot; &lt;x&gt;"' in page_text


def test_inline_svg_scopes_ids_and_drops_the_prolog() -> None:
    svg = (
        '<?xml version="1.0"?>\n<!DOCTYPE svg PUBLIC "-//W3C//DTD SVG 1.1//EN"\n "http://x">\n'
        '<svg xmlns:xlink="http://www.w3.org/1999/xlink" width="460pt" height="345pt" '
        'viewBox="0 0 460 345" xmlns="http://www.w3.org/2000/svg">'
        '<defs><path id="g1" d="M0 0"/><clipPath id="c1"><rect/></clipPath></defs>'
        '<use xlink:href="#g1"/><g clip-path="url(#c1)"/><a href="#elsewhere"/></svg>'
    )
    out = inline_svg(svg, "fig-", "a figure")
    assert out.startswith('<svg viewBox="0 0 460 345" role="img" aria-label="a figure">')
    assert 'id="fig-g1"' in out and 'xlink:href="#fig-g1"' in out and "url(#fig-c1)" in out
    assert 'href="#elsewhere"' in out  # not an id of this figure: left alone
    assert "http" not in out
    with pytest.raises(ValueError):
        inline_svg("<html/>", "x", "y")


def test_report_of_a_multi_process_run_lists_every_process_and_the_straggler(
    tmp_path: Path,
) -> None:
    """Issue 20's per-process view reaches the report, not only ``analyze``: one row per rank
    (pid, window, NCCL ms, median step lag) and the straggler sentence of the text output."""
    from tests.test_ranks import pid_of, tp_trace

    path, expected = tp_trace(tmp_path, 3, straggler=2, lags=(40, 120, 80, 400))
    result = api.report(path)
    page_text = result.html
    assert "<h4>3 processes</h4>" in page_text
    rows = re.findall(r"<tr><td class=\"l\">r(\d)( \(shown above\))?</td>"
                      r"<td class=\"l\">worker\d</td><td class=\"l\">.*?</td><td>(\d+)</td>",
                      page_text)  # fmt: skip
    assert [(int(r), int(pid)) for r, _, pid in rows] == [(r, pid_of(r)) for r in range(3)]
    shown_pid = api.analyze(path).pid  # the process the page's own figures are of
    assert [bool(shown) for _, shown, _ in rows] == [pid_of(r) == shown_pid for r in range(3)]
    window = expected[2]["window_end_ns"] - expected[2]["window_start_ns"]
    assert f"<td>{window / 1e6:,.3f}</td>" in page_text
    assert "straggler: rank 2 (pid" in page_text and "median 100 ns (max 400 ns)" in page_text
    one = api.report(path, pid=pid_of(1)).html
    assert "processes</h4>" not in one  # --pid: the single-process view, as in analyze
