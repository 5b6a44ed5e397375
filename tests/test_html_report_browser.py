"""The HTML report in real headless Chromium: it renders, shows its figures, logs no error.

Chromium is driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``: JSON
messages separated by NUL bytes on file descriptors 3 and 4), so the test needs nothing but
Debian's ``chromium`` package and the standard library -- no driver binary, no websocket
client, no port. It records every console message, uncaught exception, browser log entry
and network request while the page loads, takes a full-page screenshot and measures it.

Skipped, with the reason, only when no Chromium is installed (``.ci/run`` installs it).
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import io
import json
import os
import select
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from specnsys import api

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"


def find_chromium() -> str | None:
    """The Chromium binary: ``$SPECNSYS_CHROMIUM``, else the usual names on PATH."""
    forced = os.environ.get("SPECNSYS_CHROMIUM")
    if forced:
        return forced
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


class Chromium:
    """A headless Chromium with one page, spoken to over the DevTools pipe."""

    def __init__(self, binary: str, profile: Path, width: int = 1280, height: int = 900) -> None:
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()
        # Chromium reads commands on fd 3 and writes replies on fd 4: move the pipe ends above
        # the standard descriptors first, so the dup2 in the child cannot clobber one of them.
        hi_r = fcntl.fcntl(to_chrome_r, fcntl.F_DUPFD, 10)
        hi_w = fcntl.fcntl(from_chrome_w, fcntl.F_DUPFD, 10)
        for fd in (to_chrome_r, from_chrome_w):
            os.close(fd)

        def child_fds() -> None:
            os.dup2(hi_r, 3)
            os.dup2(hi_w, 4)

        args = [
            binary,
            "--headless",
            "--no-sandbox",  # CI runs as root, where Chromium's sandbox cannot start
            "--disable-gpu",
            "--remote-debugging-pipe",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-extensions",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            f"--user-data-dir={profile}",
            f"--window-size={width},{height}",
            "about:blank",
        ]
        self.proc = subprocess.Popen(
            args,
            preexec_fn=child_fds,  # noqa: PLW1509 - only dup2, before exec
            close_fds=False,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        os.close(hi_r)
        os.close(hi_w)
        self._buf = b""
        self._id = 0
        self.events: list[dict[str, Any]] = []
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})[
            "sessionId"
        ]
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.call(f"{domain}.enable", session=True)

    def call(self, method: str, params: dict | None = None, *, session: bool = False,
             timeout: float = 60.0) -> dict[str, Any]:  # fmt: skip
        """Send one command and wait for its reply; events seen meanwhile go to ``events``."""
        self._id += 1
        msg: dict[str, Any] = {"id": self._id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = self.session
        os.write(self._to_chrome, json.dumps(msg).encode() + b"\0")
        reply = self._read_until(lambda m: m.get("id") == self._id, timeout)
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        return reply.get("result", {})

    def wait_event(self, method: str, timeout: float = 60.0) -> dict[str, Any]:
        for i, event in enumerate(self.events):
            if event.get("method") == method:
                return self.events[i]
        return self._read_until(lambda m: m.get("method") == method, timeout, keep=True)

    def _read_until(self, done: Any, timeout: float, keep: bool = False) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            while b"\0" in self._buf:
                raw, self._buf = self._buf.split(b"\0", 1)
                message = json.loads(raw)
                if done(message):
                    if keep:
                        self.events.append(message)
                    return message
                self.events.append(message)
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self._from_chrome], [], [], max(left, 0))
            if not ready:
                raise TimeoutError("Chromium did not answer in time")
            chunk = os.read(self._from_chrome, 1 << 20)
            if not chunk:
                err = self.proc.stderr.read().decode(errors="replace") if self.proc.stderr else ""
                raise RuntimeError(f"Chromium closed the pipe: {err[-2000:]}")
            self._buf += chunk

    def open(self, url: str) -> None:
        self.call("Page.navigate", {"url": url}, session=True)
        self.wait_event("Page.loadEventFired")

    def evaluate(self, expression: str) -> Any:
        result = self.call(
            "Runtime.evaluate", {"expression": expression, "returnByValue": True}, session=True
        )
        return result["result"].get("value")

    def screenshot(self) -> bytes:
        """A PNG of the whole page, beyond the window's height."""
        size = self.call("Page.getLayoutMetrics", session=True)["cssContentSize"]
        clip = {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}
        shot = self.call(
            "Page.captureScreenshot",
            {"format": "png", "captureBeyondViewport": True, "clip": clip},
            session=True,
        )
        return base64.b64decode(shot["data"])

    def problems(self) -> list[str]:
        """Console errors/warnings, uncaught exceptions and browser log errors/warnings."""
        out = []
        for e in self.events:
            method, params = e.get("method"), e.get("params", {})
            if method == "Runtime.consoleAPICalled" and params.get("type") in {"error", "warning",
                                                                               "assert"}:  # fmt: skip
                args = " ".join(str(a.get("value", a.get("description"))) for a in params["args"])
                out.append(f"console.{params['type']}: {args}")
            elif method == "Runtime.exceptionThrown":
                details = params.get("exceptionDetails", {})
                out.append(f"exception: {details.get('text')} {details.get('exception', {})}")
            elif method == "Log.entryAdded" and params["entry"].get("level") in {"error",
                                                                                 "warning"}:  # fmt: skip
                entry = params["entry"]
                out.append(f"log {entry['level']}: {entry.get('text')} {entry.get('url', '')}")
        return out

    def requests(self) -> list[str]:
        return [
            e["params"]["request"]["url"]
            for e in self.events
            if e.get("method") == "Network.requestWillBeSent"
        ]

    def close(self) -> None:
        with contextlib.suppress(RuntimeError, TimeoutError, OSError):
            self.call("Browser.close", timeout=10)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()  # our own child, by its handle
            self.proc.wait(timeout=10)
        for fd in (self._to_chrome, self._from_chrome):
            with contextlib.suppress(OSError):
                os.close(fd)


@pytest.fixture(scope="module")
def chromium(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Chromium]:
    binary = find_chromium()
    if binary is None:
        pytest.skip("Chromium is not installed (apt-get install chromium); .ci/run installs it")
    browser = Chromium(binary, tmp_path_factory.mktemp("chromium-profile"))
    try:
        yield browser
    finally:
        browser.close()


def png_pixels(data: bytes) -> np.ndarray:
    """RGB floats in [0, 1], rows x columns x 3 (matplotlib's PNG reader)."""
    import matplotlib.image as mpimg

    return mpimg.imread(io.BytesIO(data), format="png")[..., :3]


def not_blank(pixels: np.ndarray) -> tuple[float, float]:
    """(variance of the grey levels, share of pixels that are not background-white)."""
    grey = pixels.mean(axis=2)
    return float(grey.var()), float((grey < 0.9).mean())


def page_facts(browser: Chromium) -> dict[str, Any]:
    return browser.evaluate(
        """JSON.parse(JSON.stringify({
            title: document.title,
            sections: [...document.querySelectorAll('section[id]')].map(s => s.id),
            figures: [...document.querySelectorAll('figure svg')].map(s => {
                const r = s.getBoundingClientRect();
                return {kind: s.closest('figure').dataset.kind, x: r.x + scrollX,
                        y: r.y + scrollY, w: r.width, h: r.height,
                        paths: s.querySelectorAll('path, use').length};
            }),
            answer: document.querySelector('#answer').innerText,
            tables: document.querySelectorAll('table').length,
            width: document.documentElement.scrollWidth,
            viewport: innerWidth,
        }))"""
    )


@pytest.fixture(scope="module")
def report_page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    page = api.report(SAMPLES / "spec_chat_c4_k4.sqlite", SAMPLES / "baseline_chat_c4.sqlite").html
    path = tmp_path_factory.mktemp("report") / "report.html"
    path.write_text(page, encoding="utf-8")
    return path


def test_report_renders_in_chromium_with_figures_and_no_console_errors(
    chromium: Chromium, report_page: Path, tmp_path: Path
) -> None:
    chromium.events.clear()
    chromium.open(report_page.as_uri())
    facts = page_facts(chromium)
    assert facts["title"] == "specnsys report: baseline_chat_c4 vs spec_chat_c4_k4"
    assert facts["sections"] == [
        "answer", "figures", "what-to-cut", "compare", "analyze", "not-available",
    ]  # fmt: skip
    kinds = [f["kind"] for f in facts["figures"]]
    assert kinds == ["phases", "amdahl", "acceptance", "timeline"]
    for fig in facts["figures"]:
        # Laid out at a readable size and drawn (glyphs and shapes are paths).
        assert fig["w"] > 600 and fig["h"] > 150, fig
        assert fig["paths"] > 50, fig
    assert facts["width"] <= facts["viewport"], "the page scrolls sideways"
    assert "Speculative decoding ran at" in facts["answer"]
    assert facts["tables"] >= 5

    png = chromium.screenshot()
    (tmp_path / "report.png").write_bytes(png)
    if os.environ.get("SPECNSYS_SCREENSHOT_DIR"):  # to look at it: keep a copy
        Path(os.environ["SPECNSYS_SCREENSHOT_DIR"], "report.png").write_bytes(png)
    pixels = png_pixels(png)
    variance, inked = not_blank(pixels)
    assert pixels.shape[0] > 2000, "the full page was captured"
    assert variance > 0.01 and inked > 0.03, (variance, inked)
    for fig in facts["figures"]:
        # Each figure's own area of the screenshot has content, not an empty box.
        y0, x0 = int(fig["y"]), int(fig["x"])
        area = pixels[y0 : y0 + int(fig["h"]), x0 : x0 + int(fig["w"])]
        v, ink = not_blank(area)
        assert v > 0.005 and ink > 0.02, (fig["kind"], v, ink)

    assert chromium.problems() == []
    outside = [u for u in chromium.requests() if not u.startswith(("file:", "data:", "about:"))]
    assert outside == [], "the report fetched something from the network"


def test_the_console_check_can_fail(chromium: Chromium, tmp_path: Path) -> None:
    # The same harness on a page with a script error and a missing image must see both:
    # otherwise an empty problems() list above would prove nothing.
    page = tmp_path / "broken.html"
    page.write_text(
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>x</title></head><body>"
        f"<img src='{(tmp_path / 'missing.png').as_uri()}'>"
        "<script>console.error('boom'); undefinedFunction();</script></body></html>"
    )
    chromium.events.clear()
    chromium.open(page.as_uri())
    time.sleep(0.2)  # let the failed image load report itself
    chromium.evaluate("1")
    problems = chromium.problems()
    assert any("console.error: boom" in p for p in problems), problems
    assert any(p.startswith("exception:") for p in problems), problems
    assert any("missing.png" in p or "ERR_FILE_NOT_FOUND" in p for p in problems), problems
    assert not_blank(png_pixels(chromium.screenshot()))[1] < 0.01  # and a blank page is blank


def test_multi_process_report_fits_the_page_in_chromium(chromium: Chromium, tmp_path: Path) -> None:
    """The per-process table of a real 2-GPU export (torch op ranges, ``--rules torch``): laid
    out without sideways scrolling at 1280 px, one row per process, the straggler sentence."""
    from tests.conftest import CORPUS

    trace = CORPUS / "2026.2.1_nsysai_mfu-2gpu-after.sqlite"
    if not trace.exists():
        pytest.skip(f"{trace} not present")
    path = tmp_path / "ranks.html"
    path.write_text(api.report(trace, rules="torch").html, encoding="utf-8")
    chromium.events.clear()
    chromium.open(path.as_uri())
    facts = page_facts(chromium)
    assert facts["width"] <= facts["viewport"], "the page scrolls sideways"
    text = chromium.evaluate(
        "JSON.parse(JSON.stringify({rows: [...document.querySelectorAll('h4 + p + table tbody tr')]"
        ".map(r => r.innerText), straggler: document.querySelector('p.straggler').innerText}))"
    )
    assert len(text["rows"]) == 2 and all("python3" in r for r in text["rows"]), text
    assert text["straggler"].startswith("straggler: none stands out"), text
    png = chromium.screenshot()
    if os.environ.get("SPECNSYS_SCREENSHOT_DIR"):
        Path(os.environ["SPECNSYS_SCREENSHOT_DIR"], "report_ranks.png").write_bytes(png)
    assert chromium.problems() == []
