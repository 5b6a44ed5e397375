"""The shared vocabulary: analysing a trace needs no ``nvtx``, and the names cannot drift.

``specnsys.annotate`` needs ``nvtx`` (and a pinned release of it); the analysis must not, since a
trace is often analysed on another machine than the one that recorded it. The no-nvtx checks
run in a fresh interpreter in which importing ``nvtx`` fails as if it were not installed.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import textwrap

import pytest

from specnsys import annotate, vocabulary
from specnsys.attribution.rules import REQUEST, default_rules
from specnsys.render.palette import PHASE_COLORS, PHASE_ORDER
from tests.conftest import REPO, SAMPLE_TRACES

pytestmark = pytest.mark.usefixtures("shared_cache")  # the samples built once (conftest)

TRACE = SAMPLE_TRACES / "spec_chat_c4_k4.sqlite"

NO_NVTX = textwrap.dedent(
    """
    import sys

    class _NvtxNotInstalled:
        '''Import hook: ``nvtx`` and its submodules fail as on a machine without them.'''

        def find_spec(self, name, path=None, target=None):
            if name == "nvtx" or name.startswith("nvtx."):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, _NvtxNotInstalled())
    try:
        import specnsys.annotate
    except ModuleNotFoundError:
        pass
    else:
        raise SystemExit("the nvtx blocker did not block")
    """
)


def run_python(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True, text=True, timeout=300, cwd=REPO,
    )  # fmt: skip


def run_cli(*args: str, without_nvtx: bool) -> subprocess.CompletedProcess[str]:
    """``specnsys *args`` in a fresh interpreter, with ``nvtx`` importable or not."""
    main = (
        "import runpy, sys; sys.argv[0] = 'specnsys'; "
        "runpy.run_module('specnsys', run_name='__main__')"
    )
    return run_python((NO_NVTX if without_nvtx else "") + main, *args)


def test_analyze_without_nvtx_prints_what_it_prints_with_it() -> None:
    args = ("analyze", str(TRACE.relative_to(REPO)), "--json")
    blocked = run_cli(*args, without_nvtx=True)
    assert blocked.returncode == 0, blocked.stderr
    with_nvtx = run_cli(*args, without_nvtx=False)
    assert with_nvtx.returncode == 0, with_nvtx.stderr
    assert blocked.stdout == with_nvtx.stdout
    doc = json.loads(blocked.stdout)
    assert doc["mode"] == "spec" and doc["tokens"] == 256


def test_library_opens_and_every_analysis_module_imports_without_nvtx() -> None:
    code = NO_NVTX + textwrap.dedent(
        """
        import importlib, json, pkgutil
        import specnsys
        from specnsys.metrics import analyze_trace

        trace = specnsys.open(sys.argv[1])
        ranges = trace.sql(
            "SELECT count(*) FROM nvtx WHERE domain = 'specnsys' AND kind = 'push_pop'"
        ).fetchall()[0][0]
        analysis = analyze_trace(trace)
        # annotate and the injection that drives it run inside inference processes: nvtx
        skipped = {"specnsys.annotate", "specnsys.__main__"}
        imported = []
        for info in pkgutil.walk_packages(specnsys.__path__, "specnsys."):
            if info.name not in skipped and not info.name.startswith("specnsys.inject"):
                importlib.import_module(info.name)
                imported.append(info.name)
        print(json.dumps({"ranges": ranges, "mode": analysis.mode, "imported": imported}))
        """
    )
    done = run_python(code, str(TRACE))
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["ranges"] > 0 and result["mode"] == "spec"
    # the walk reached every layer, down to the figures
    for module in ("specnsys.ingest", "specnsys.attribution.lanes", "specnsys.metrics.comparison",
                   "specnsys.render.html", "specnsys.cli.main", "specnsys.vocabulary"):
        assert module in result["imported"]  # fmt: skip


def test_vocabulary_module_loads_only_the_standard_library() -> None:
    code = (
        "import sys; before = set(sys.modules); import specnsys.vocabulary; "
        "print(sorted(m for m in set(sys.modules) - before "
        "if m.split('.')[0] not in sys.stdlib_module_names))"
    )
    done = run_python(code)
    assert done.returncode == 0, done.stderr
    loaded = set(ast.literal_eval(done.stdout))
    assert "specnsys.vocabulary" in loaded
    # no polars, duckdb, nvtx...: inference processes load it through annotate
    assert {m.split(".")[0] for m in loaded} == {"specnsys"}, loaded


def test_annotate_accepts_exactly_the_vocabulary_phases() -> None:
    assert annotate.PHASES is vocabulary.PHASES
    assert annotate.DOMAIN == vocabulary.DOMAIN
    assert annotate.MARKS == vocabulary.ACCEPTANCE_MARKS
    assert annotate.VALUE_MARKS is vocabulary.VALUE_MARKS
    for name in vocabulary.PHASES:
        assert annotate.phase(name).name == name
    for name in ("Draft", "prefill ", "unannotated", "decode_step"):
        with pytest.raises(ValueError, match="unknown phase"):
            annotate.phase(name)


def test_the_analysis_reads_the_names_annotate_writes() -> None:
    rules = default_rules()
    assert rules.phases == tuple(p for p in vocabulary.PHASES if p != REQUEST)
    assert REQUEST == vocabulary.REQUEST_PHASE in vocabulary.PHASES
    assert {vocabulary.STEP_PHASE, vocabulary.SAMPLER_PHASE} <= set(vocabulary.PHASES)
    assert set(vocabulary.ACCELERABLE) <= set(vocabulary.PHASES)
    assert set(vocabulary.BASELINE_ACCELERABLE).isdisjoint(vocabulary.SPEC_ACCELERABLE)
    assert set(vocabulary.ACCEPTANCE_MARKS).isdisjoint(vocabulary.VALUE_MARKS)


def test_every_phase_has_one_colour_in_the_timeline_and_the_figures() -> None:
    assert set(vocabulary.PHASE_RGB) == set(vocabulary.PHASES)
    assert set(annotate._COLORS) == set(vocabulary.PHASES)
    assert set(vocabulary.PHASES) <= set(PHASE_ORDER)
    for phase, rgb in vocabulary.PHASE_RGB.items():
        assert annotate._COLORS[phase] == 0xFF000000 | rgb
        assert PHASE_COLORS[phase] == f"#{rgb:06X}"
