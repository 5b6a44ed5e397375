"""The atheris fuzz target (fuzz/ingest_fuzz.py), run briefly in both modes.

A full campaign is ``python fuzz/ingest_fuzz.py -max_total_time=600``; here each mode gets a
bounded slice of time (``SPECNSYS_FUZZ_SECONDS``, default 25) so the suite stays affordable
while every run still explores new inputs (libFuzzer picks a new seed each time).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TARGET = REPO / "fuzz" / "ingest_fuzz.py"
SECONDS = int(os.environ.get("SPECNSYS_FUZZ_SECONDS", "25"))

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("atheris") is None,
        reason="atheris is not installed (pip install atheris; it needs a CPython with "
        "libFuzzer support, i.e. Linux x86-64 wheels)",
    ),
]


@pytest.mark.parametrize("mode", ["raw", "structured"])
def test_fuzz_target_runs_without_a_crash(mode: str, tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            str(TARGET),
            "--mode",
            mode,
            f"-max_total_time={SECONDS}",
            "-timeout=60",
            "-rss_limit_mb=4096",
            f"-artifact_prefix={tmp_path}/",
        ],
        capture_output=True,
        text=True,
        timeout=SECONDS + 300,
        cwd=tmp_path,
        env={**os.environ, "SPECNSYS_CACHE_DIR": str(tmp_path / "cache")},
    )
    log = done.stdout + done.stderr
    crashes = sorted(
        p.name for p in tmp_path.iterdir() if p.name.startswith(("crash-", "timeout-", "oom-"))
    )
    assert done.returncode == 0 and not crashes, f"{crashes}\n{log[-6000:]}"
    assert "Done" in log and "INITED" in log, log[-3000:]


REGRESSIONS = sorted((REPO / "fuzz" / "regressions").glob("raw-*"))


@pytest.mark.skipif(not REGRESSIONS, reason="no stored fuzz findings")
def test_stored_fuzz_findings_stay_fixed(tmp_path: Path) -> None:
    """Inputs that once crashed the target (fuzz/regressions/) are replayed, not fuzzed."""
    done = subprocess.run(
        [
            sys.executable,
            str(TARGET),
            "--mode",
            "raw",
            f"-artifact_prefix={tmp_path}/",
            *map(str, REGRESSIONS),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]
    assert done.stderr.count("Executed ") == len(REGRESSIONS), done.stderr[-3000:]
