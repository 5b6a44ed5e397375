"""Issue 32, item 2: ``specnsys profile`` sets the switches that make engines emit their NVTX
scopes (a user's own value wins) and says so when the command runs an engine."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from specnsys.capture import ENGINE_NVTX_SWITCHES, engine_switches
from specnsys.ingest.nsys_rep import find_nsys

REPO = Path(__file__).resolve().parents[1]


def test_switches_are_set_unless_the_user_set_them() -> None:
    env, line = engine_switches({"VLLM_NVTX_SCOPES_FOR_PROFILING": "0"}, ["vllm", "serve"])
    assert env["VLLM_NVTX_SCOPES_FOR_PROFILING"] == "0"  # the user's value wins
    assert all(env[k] == "1" for k in ENGINE_NVTX_SWITCHES if k != "VLLM_NVTX_SCOPES_FOR_PROFILING")
    assert line is not None and "SGLANG_ENABLE_NVTX_SCHEDULER=1" in line
    assert "kept your VLLM_NVTX_SCOPES_FOR_PROFILING" in line
    quiet_env, quiet = engine_switches({}, ["python", "train.py"])
    assert quiet is None and quiet_env["VLLM_NVTX_SCOPES_FOR_PROFILING"] == "1"


@pytest.mark.nsys
@pytest.mark.skipif(find_nsys() is None, reason="nsys is not on PATH")
def test_profile_gives_the_program_the_switches_and_says_so(tmp_path: Path) -> None:
    code = "import os; print(os.environ.get('VLLM_NVTX_SCOPES_FOR_PROFILING'))"
    done = subprocess.run(
        [sys.executable, "-m", "specnsys", "profile", "-o", str(tmp_path / "run"), "--",
         sys.executable, "-c", code, "--as-vllm"],
        capture_output=True, text=True, cwd=REPO, timeout=300,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == "1"
    said = [line for line in done.stderr.splitlines() if "VLLM_NVTX_SCOPES_FOR_PROFILING=1" in line]
    assert len(said) == 1 and said[0].startswith("specnsys: set ")
