"""The suite's own scheduling on several workers (tests/conftest.py): each module on one worker,
the nsys modules first, an nsys test alone on the machine.

pytest 9.2 silently broke ``--dist loadgroup`` (pytest-xdist#1386): every test was dealt out
on its own, each module fixture (nsys captures among them) ran once per worker, and nothing
failed, the suite only got slower. This runs a small suite with the project's conftest under
two workers and reads where and when each test ran.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("xdist")

HERE = Path(__file__).resolve().parent

_RECORD = """
import json, os, time
import pytest

def _record(name, started):
    with open(os.environ["GROUPING_LOG"], "a") as out:
        row = [name, os.environ.get("PYTEST_XDIST_WORKER"), started, time.time()]
        out.write(json.dumps(row) + "\\n")
"""


def _module(name: str, marked: bool) -> str:
    tests = "\n".join(
        f"{'@pytest.mark.nsys' if marked and i % 2 else ''}\n"
        f"def test_{i}():\n    t = time.time()\n    time.sleep(0.2)\n    _record('{name}::{i}', t)\n"
        for i in range(4)
    )
    return _RECORD + tests


def test_each_module_runs_on_one_worker_and_the_nsys_modules_first(tmp_path: Path) -> None:
    shutil.copy(HERE / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    nsys: runs nsys\n")
    for name in ("test_a", "test_b", "test_c"):
        (tmp_path / f"{name}.py").write_text(_module(name, marked=False))
    (tmp_path / "test_z_capture.py").write_text(_module("test_z_capture", marked=True))
    log = tmp_path / "log.jsonl"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-q",
         "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
        env={**os.environ, "GROUPING_LOG": str(log)},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(rows) == 16
    workers: dict[str, set[str]] = {}
    for name, worker, *_ in rows:
        workers.setdefault(name.split("::")[0], set()).add(worker)
    assert all(len(w) == 1 for w in workers.values()), workers
    # the nsys module is handed out first: its worker ran nothing before it
    (nsys_worker,) = workers["test_z_capture"]
    first = min((t, name) for name, worker, t, _ in rows if worker == nsys_worker)
    assert first[1].startswith("test_z_capture::"), rows
    # a marked test (odd numbers) overlaps no test of the other worker
    for name, worker, start, end in rows:
        if name.startswith("test_z_capture::") and int(name[-1]) % 2:
            beside = [r for r in rows if r[1] != worker and r[2] < end and r[3] > start]
            assert not beside, (name, beside)
