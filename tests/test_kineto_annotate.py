"""``specnsys.annotate`` under a real torch profiler: its ranges and marks are
``record_function`` scopes too, and the Kineto reader turns them back into phases and marks.

No mocks: torch's own profiler records, exports a Chrome trace, and specnsys reads it.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import specnsys
from specnsys import annotate
from tests.conftest import json_doc

torch = pytest.importorskip("torch")
from torch import Tensor  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402


@pytest.fixture(params=[False, True], ids=["no-collector", "nvtx-calls"])
def mode(request: pytest.FixtureRequest) -> Iterator[bool]:
    """Both annotation paths: the no-op NVTX path and the real NVTX calls (no collector is
    attached either way, so the NVTX calls themselves record nothing)."""
    before = annotate.enabled()
    annotate.set_enabled(request.param)
    yield request.param
    annotate.set_enabled(before)


def _profiled(path: Path) -> Iterator[None]:
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        yield
    prof.export_chrome_trace(str(path))


def _loop() -> None:
    """One request: a prefill, two decode steps of a baseline loop, marks of every kind."""
    handle = annotate.start_request(7)
    with annotate.phase("prefill"):
        torch.ones(8) + 1
    annotate.mark_first_token(7)
    annotate.mark_tokens(1)
    for _ in range(2):
        with annotate.phase("decode"):
            with annotate.phase("forward"):
                annotate.mark_value("target_bytes", 4096)
                torch.ones(64, 64) @ torch.ones(64, 64)
            with annotate.phase("sample"):
                time.sleep(0.001)
            with annotate.phase("engine_step", allow_custom=True):
                pass
        annotate.mark_tokens(1)
    annotate.mark_acceptance(proposed=4, accepted=2)
    annotate.end_request(handle, output_tokens=3)


def test_ranges_and_marks_become_scopes_the_reader_reads_back(tmp_path: Path, mode: bool) -> None:
    path = tmp_path / "annotated.json"
    gen = _profiled(path)
    next(gen)
    _loop()
    next(gen, None)
    with specnsys.open(path) as trace:
        rows = trace.sql(
            """SELECT kind, text, payload_int, count(*) FROM nvtx WHERE domain = 'specnsys'
               GROUP BY ALL ORDER BY kind, text, payload_int"""
        ).fetchall()
        assert rows == [
            ("mark", "accepted", 2, 1), ("mark", "first_token", 7, 1),
            ("mark", "output_tokens", 3, 1), ("mark", "proposed", 4, 1),
            ("mark", "target_bytes", 4096, 2), ("mark", "tokens", 1, 3),
            ("push_pop", "decode", None, 2), ("push_pop", "engine_step", None, 2),
            ("push_pop", "forward", None, 2), ("push_pop", "prefill", None, 1),
            ("push_pop", "sample", None, 2), ("start_end", "request", 7, 1),
        ]  # fmt: skip
        nested = trace.sql(
            """SELECT c.text, p.text FROM nvtx c JOIN nvtx p ON p.id = c.parent
               WHERE c.domain = 'specnsys' GROUP BY ALL ORDER BY 1"""
        ).fetchall()
        assert nested == [("engine_step", "decode"), ("forward", "decode"), ("sample", "decode")]
    run = specnsys.analyze(path)
    assert (run.mode, run.tokens, run.tokens_source, run.requests, run.steps) == (
        "baseline", 3, "tokens_marks", 1, 2,
    )  # fmt: skip
    latency = json_doc(run.to_dict())["latency"]
    assert latency["per_request"][0]["request_id"] == 7 and latency["ttft_ns"]["count"] == 1
    assert run.phases["forward"]["ranges"] == 2 and run.phases["sample"]["wall_ns"] >= 2_000_000


def test_no_scope_without_a_recording_profiler(tmp_path: Path, mode: bool) -> None:
    """A range entered before the profiler starts opens no scope (and closing it while the
    profiler records closes nothing of another range's); ranges and marks after it stops
    record nothing; the ones in between are read."""
    _loop()  # no profiler: nothing to record, nothing breaks
    path = tmp_path / "window.json"
    outer = annotate.phase("decode")
    outer.__enter__()
    gen = _profiled(path)
    next(gen)
    with annotate.phase("forward"):
        annotate.mark_tokens(5)
    outer.__exit__(None, None, None)  # entered before the profiler: no scope to close
    with annotate.phase("sample"):
        pass
    inner = annotate.phase("kv")
    inner.__enter__()
    next(gen, None)  # the profiler stops while kv is open
    inner.__exit__(None, None, None)
    annotate.mark_tokens(9)
    with specnsys.open(path) as trace:
        rows = trace.sql(
            """SELECT kind, text, payload_int FROM nvtx WHERE domain = 'specnsys'
               ORDER BY start"""
        ).fetchall()
    assert rows == [("push_pop", "forward", None), ("mark", "tokens", 5), ("push_pop", "sample", None),
                    ("push_pop", "kv", None)]  # fmt: skip
    assert annotate._open_scopes == 0


def test_decorated_functions_open_scopes_on_both_paths(tmp_path: Path, mode: bool) -> None:
    @annotate.phase("sample")
    def pick(x: Tensor) -> Tensor:
        return x.argmax()

    path = tmp_path / "decorated.json"
    gen = _profiled(path)
    next(gen)
    with annotate.phase("forward"):
        pass
    pick(torch.ones(4))
    pick(torch.ones(4))
    next(gen, None)
    with specnsys.open(path) as trace:
        assert trace.sql(
            "SELECT text, count(*) FROM nvtx WHERE domain = 'specnsys' GROUP BY 1 ORDER BY 1"
        ).fetchall() == [("forward", 1), ("sample", 2)]


def test_annotate_never_imports_torch() -> None:
    """The scopes are found through ``sys.modules``: a program without torch pays nothing and
    loads nothing."""
    code = (
        "import sys\n"
        "from specnsys import annotate as sa\n"
        "with sa.phase('decode'):\n"
        "    sa.mark_tokens(1)\n"
        "h = sa.start_request(1); sa.end_request(h, output_tokens=1)\n"
        "f = sa.phase('sample')(len)\n"
        "assert f is len, f\n"
        "assert 'torch' not in sys.modules, 'torch imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
