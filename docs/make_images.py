"""Regenerate the README's images from the bundled real captures (needs Chromium).

    python docs/make_images.py

docs/report.png: the top of ``specnsys report`` for the k = 4 run against its baseline, as
headless Chromium renders it; docs/phases.png: ``specnsys plot phases`` over the k sweep.
"""

from __future__ import annotations

import io
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from PIL import Image  # noqa: E402  (matplotlib's own dependency)

from specnsys.cli.main import main  # noqa: E402
from tests.test_html_report_browser import Chromium, find_chromium  # noqa: E402

SAMPLES = ROOT / "sample_traces"
DOCS = ROOT / "docs"


def report_png() -> None:
    binary = find_chromium()
    if binary is None:
        raise SystemExit("Chromium is not installed (apt-get install chromium)")
    with tempfile.TemporaryDirectory() as tmp:
        page = Path(tmp) / "report.html"
        spec, base = SAMPLES / "spec_chat_c4_k4.sqlite", SAMPLES / "baseline_chat_c4.sqlite"
        assert main(["report", str(spec), str(base), "-o", str(page)]) == 0
        browser = Chromium(binary, Path(tmp) / "profile", width=1200)
        try:
            browser.open(page.as_uri())
            # The answer and the first figure: down to the end of the phases figure.
            height = browser.evaluate(
                "Math.ceil(document.querySelector('#fig-phases').getBoundingClientRect().bottom"
                " + scrollY + 28)"
            )
            shot = Image.open(io.BytesIO(browser.screenshot()))
        finally:
            browser.close()
    shot.crop((0, 0, shot.width, min(height, shot.height))).save(DOCS / "report.png", optimize=True)


def phases_png() -> None:
    traces = [str(SAMPLES / "baseline_chat_c4.sqlite")]
    traces += [str(SAMPLES / f"spec_chat_c4_k{k}.sqlite") for k in (2, 4, 6)]
    assert main(["plot", "phases", *traces, "-o", str(DOCS / "phases.png")]) == 0


if __name__ == "__main__":
    report_png()
    phases_png()
