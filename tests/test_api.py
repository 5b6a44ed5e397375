"""The application layer (:mod:`specnsys.api`): one pipeline, the same data warnings from every
command, and a public API that ``help(specnsys)`` shows without loading the analysis stack."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from specnsys import api
from tests.cli_driver import run_one
from tests.test_quality import _messy_loop

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / "sample_traces"


def test_help_lists_the_public_functions_and_import_stays_light() -> None:
    code = (
        "import sys, specnsys\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('duckdb', 'polars'))\n"
        "print('heavy:', heavy)\n"
        "help(specnsys)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    assert "heavy: []" in done.stdout
    for name in ("analyze", "compare", "phases", "report", "figure", "open", "whatif"):
        assert f"    {name}(" in done.stdout, name


@pytest.fixture(scope="module")
def messy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _messy_loop(tmp_path_factory.mktemp("messy") / "messy.sqlite")


def test_the_result_carries_the_data_warnings_of_its_export(messy: Path) -> None:
    notes = api.phases(messy, use_cache=False).data_warnings
    assert len(notes) == 3 and all(n.startswith(f"{messy}: ") for n in notes)
    assert api.kernels(messy, use_cache=False).data_warnings == notes
    assert api.ranges(messy, use_cache=False).data_warnings == notes


def test_every_trace_command_prints_the_same_data_warnings(messy: Path, tmp_path: Path) -> None:
    t = str(messy)
    lines = [
        ["analyze", t], ["phases", t], ["kernels", t], ["ranges", t],
        ["plot", "timeline", t, "-o", str(tmp_path / "t.svg")],
        ["report", t, "-o", str(tmp_path / "r.html")],
    ]  # fmt: skip
    seen = {}
    for argv in lines:
        done = run_one(["--no-cache", *argv])
        assert done["status"] == 0, done
        seen[argv[0] if argv[0] != "plot" else "plot"] = [
            line for line in str(done["stderr"]).splitlines() if line.startswith("specnsys: warn")
        ]
    assert len(seen["analyze"]) == 3
    assert all(found == seen["analyze"] for found in seen.values()), seen


def test_the_report_function_survives_the_import_of_the_renderers() -> None:
    """``specnsys.report`` is a public function and was the name of the renderers'
    subpackage: importing the subpackage (which every figure and renderer does) bound the
    module over the function, so the second ``specnsys.report(...)`` raised "'module' object
    is not callable". The renderers are ``specnsys.render`` now. Fresh interpreter: the
    binding happened at the subpackage's first import."""
    code = (
        "import specnsys, specnsys.render.html, specnsys.render.plots\n"
        "from specnsys.render import plots\n"
        "assert callable(specnsys.report), specnsys.report\n"
        f"first = specnsys.report({str(SAMPLES / 'spec_chat_c4_k4.sqlite')!r})\n"
        f"second = specnsys.report({str(SAMPLES / 'spec_chat_c4_k4.sqlite')!r})\n"
        "assert first.html == second.html and callable(specnsys.report)\n"
        "assert plots.KINDS and specnsys.report.__module__ == 'specnsys.api'\n"
        "print('ok')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.stdout.strip() == "ok", done.stderr[-2000:]


@pytest.mark.slow
def test_a_users_strict_mypy_sees_every_public_name(tmp_path: Path) -> None:
    """A user's ``mypy --strict`` on code that calls ``specnsys.analyze`` and every other name
    in ``specnsys.__all__``: no "does not explicitly export" (``*PUBLIC_FUNCTIONS`` in
    ``__all__`` is invisible to mypy; the TYPE_CHECKING imports re-export each name), and
    ``@annotate.phase(...)`` is a typed decorator."""
    import specnsys

    user = tmp_path / "user.py"
    uses = "\n".join(f"print(specnsys.{name})" for name in specnsys.__all__)
    # and the annotation layer as a decorator: the function stays typed ("untyped decorator"
    # while phase() returned a union of its two implementations)
    annotated = (
        "from specnsys import annotate\n\n\n@annotate.phase(\"draft\")\n"
        "def step(x: int) -> int:\n    with annotate.phase(\"sample\"):\n        return x + 1\n"
    )
    user.write_text(f"import specnsys\n{annotated}\n{uses}\n")
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--follow-imports=silent",
         "--config-file", os.devnull, str(user)],
        capture_output=True, text=True, cwd=tmp_path, env={**os.environ, "MYPYPATH": str(root)},
        timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
