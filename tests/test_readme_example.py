"""The notebook example of the README (docs/notebook_example.py) runs as it stands: a public
API that the README shows but that no longer works fails here."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "docs" / "notebook_example.py"


def test_notebook_example_runs_and_draws_its_figure(tmp_path: Path) -> None:
    (tmp_path / "sample_traces").symlink_to(REPO / "sample_traces")
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "SPECNSYS_CACHE_DIR": str(tmp_path / "cache"),
        "MPLBACKEND": "Agg",
    }
    done = subprocess.run(
        [sys.executable, str(EXAMPLE)], cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "baseline: p = " in done.stdout
    assert "predicted " in done.stdout and "x, measured " in done.stdout
    assert (tmp_path / "phases.png").stat().st_size > 0


def test_readme_shows_the_example_that_runs() -> None:
    """The README's notebook block is this file's code, so the tested example is the shown one."""
    code = EXAMPLE.read_text().split("\n", 2)[2]  # after the two comment lines
    assert f"```python\n{code}```\n" in (REPO / "README.md").read_text()
