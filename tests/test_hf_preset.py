"""The built-in Hugging Face preset (``specnsys profile`` on an unedited transformers script).

Issue 32's what-must-hold, on a tiny random Llama (CPU, one thread, no download): two unedited
scripts (tests/fixtures/hf_generate.py calls generate(); tests/fixtures/hf_pipeline.py goes
through a text-generation pipeline), each captured by real nsys with no annotation file, in a
baseline run and with an assistant model, and hf_generate.py with prompt lookup. One capture
per run serves every assertion (module-scoped fixture). Without nsys or transformers the
captures are skipped; the bad-input cases need neither (a program without transformers, and a
``transformers`` package whose generation functions are not where the preset looks: a stand-in
package written here, since no real release lacks them).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from specnsys.ingest.nsys_rep import find_nsys
from specnsys.inject import AUTO_ENV, CONFIG_ENV, environment, load_config
from specnsys.inject.presets import PRESETS
from specnsys.inject.runtime import LOG_ENV

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"
GENERATE = FIXTURES / "hf_generate.py"
PIPELINE = FIXTURES / "hf_pipeline.py"
K = 4

needs_nsys = pytest.mark.skipif(find_nsys() is None, reason="nsys is not on PATH")


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in (CONFIG_ENV, AUTO_ENV, "PYTHONPATH")}
    return {**env, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", **extra}


def _specnsys(*argv: str, timeout: int = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "specnsys", *argv], env=_env(), cwd=REPO,
                          capture_output=True, text=True, timeout=timeout)


# --- the preset file ---------------------------------------------------------------------------


def test_the_preset_is_a_valid_annotation_file_for_transformers() -> None:
    config = load_config(PRESETS["hf"])
    assert config.requires == "transformers"
    phases = {h.phase for h in config.hooks} | {h.after for h in config.hooks}
    assert {"request", "prefill", "decode", "forward", "draft", "verify", "sample", "kv"} <= phases


def test_every_candidate_generator_class_the_installed_transformers_ships_is_hooked() -> None:
    """Found by class: the base's get_candidates and every subclass's own override, so a
    generator added in a new release is a draft without a preset change."""
    pytest.importorskip("transformers")
    code = textwrap.dedent("""
        import transformers.generation.candidate_generator as cg
        from transformers.generation import utils
        from specnsys.inject.runtime import _all_subclasses
        classes = [cg.CandidateGenerator, *_all_subclasses(cg.CandidateGenerator)]
        missing = [c.__name__ for c in classes if "get_candidates" in vars(c)
                   and not hasattr(vars(c)["get_candidates"], "__specnsys_hook__")]
        class Mine(cg.CandidateGenerator):  # defined after the hooks: still found
            def get_candidates(self, input_ids, **kwargs):
                return input_ids, None
        print(len(classes), missing, hasattr(vars(Mine)["get_candidates"], "__specnsys_hook__"),
              hasattr(utils.GenerationMixin._assisted_decoding, "__specnsys_hook__"))
    """)
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300,
        env={**_env(), **environment(PRESETS["hf"], {"PYTHONPATH": str(REPO)})},
    )
    assert done.returncode == 0, done.stderr
    count, rest = done.stdout.split(" ", 1)
    assert int(count) >= 5  # assistant, different tokenizers, universal, prompt lookup, early exit
    assert rest.strip() == "[] True True", done.stdout
    assert "specnsys: warning" not in done.stderr


# --- bad input: one line, the program's own output untouched ---------------------------------


def test_an_unknown_preset_is_one_line_and_nothing_runs(tmp_path: Path) -> None:
    done = _specnsys("profile", "--annotate", "hff", "-o", str(tmp_path / "run"), "--",
                     sys.executable, "-c", "print(1)")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == (
        "specnsys: error: --annotate hff: no such annotation file, and no built-in preset of "
        "that name (presets: hf; none turns annotation off)\n"
    )
    assert list(tmp_path.iterdir()) == []


def _bootstrap_run(tmp_path: Path, code: str, *, auto: bool, extra_path: str = "") -> \
        tuple[subprocess.CompletedProcess[str], list[str]]:
    """``python -c CODE`` with the environment ``profile`` gives it (no nsys: the events are
    read from the injection's log)."""
    log = tmp_path / "events.log"
    base = {"PYTHONPATH": os.pathsep.join(p for p in (extra_path, str(REPO)) if p)}
    env = {**_env(), **base, **environment(PRESETS["hf"], base, auto=auto), LOG_ENV: str(log)}
    done = subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    return done, log.read_text().splitlines() if log.exists() else []


def test_the_preset_on_a_program_without_transformers(tmp_path: Path) -> None:
    code = "import sys; print('hello'); print('err', file=sys.stderr)"
    asked, _ = _bootstrap_run(tmp_path, code, auto=False)  # --annotate hf
    assert asked.returncode == 0 and asked.stdout == "hello\n"
    assert asked.stderr == ("err\nspecnsys: warning: preset hf: transformers was never imported: "
                            "nothing annotated\n")
    chosen, _ = _bootstrap_run(tmp_path, code, auto=True)  # profile's default: silent
    assert chosen.returncode == 0 and (chosen.stdout, chosen.stderr) == ("hello\n", "err\n")
    assert "specnsys" not in subprocess.run(  # nothing of specnsys is even loaded
        [sys.executable, "-c", "import sys; print(sorted(m for m in sys.modules "
         "if m.startswith('specnsys')))"],
        env={**_env(), **environment(PRESETS["hf"], {"PYTHONPATH": str(REPO)}, auto=True)},
        capture_output=True, text=True, timeout=60).stdout.replace("[]", "")


def test_a_transformers_whose_functions_moved_gets_one_warning(tmp_path: Path) -> None:
    """A release that moved the decoding loop: one warning naming what was not hooked; the
    program runs and prints as without specnsys."""
    pkg = tmp_path / "fake" / "transformers"
    (pkg / "generation").mkdir(parents=True)
    (pkg / "__init__.py").write_text("__version__ = '99.0'\n")
    (pkg / "generation" / "__init__.py").write_text("")
    (pkg / "generation" / "utils.py").write_text(textwrap.dedent("""
        class GenerationMixin:
            def generate(self, ids):
                return self._decode(ids)
            def _decode(self, ids):  # the loop moved here
                return ids + [1]
    """))
    code = ("from transformers.generation.utils import GenerationMixin\n"
            "print(GenerationMixin().generate([0]))")
    done, events = _bootstrap_run(tmp_path, code, auto=True, extra_path=str(tmp_path / "fake"))
    assert done.returncode == 0 and done.stdout == "[0, 1]\n"
    (line,) = done.stderr.splitlines()
    assert line.startswith("specnsys: warning: preset hf: not applied in this process: ")
    for missing in ("GenerationMixin._sample", "GenerationMixin._assisted_decoding",
                    "GenerationMixin._has_unfinished_sequences"):
        assert f"has no {missing!r}" in line
    assert "_prefill" not in line  # optional: only 5.x has it
    assert events == ["start request 0", "end request 0 output_tokens 0"]  # what did apply


# --- real captures -----------------------------------------------------------------------------

RUNS = {
    "base": (GENERATE, "baseline"), "assisted": (GENERATE, "assisted"),
    "lookup": (GENERATE, "lookup"), "pipe_base": (PIPELINE, "baseline"),
    "pipe_assisted": (PIPELINE, "assisted"),
}


@pytest.fixture(scope="module")
def captures(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, object]]:
    """Each run captured once by ``specnsys profile`` with no annotation file: its export,
    the script's own output (tokens, wall time per token) and ``analyze --json``."""
    pytest.importorskip("transformers")
    if find_nsys() is None:
        pytest.skip("nsys is not on PATH")
    folder = tmp_path_factory.mktemp("hf")
    out: dict[str, dict[str, object]] = {}
    for name, (script, mode) in RUNS.items():
        done = _specnsys("profile", "-o", str(folder / name), "--", sys.executable, str(script),
                         "--mode", mode, "--k", str(K), "--requests", "2", "--max-new", "20")
        assert done.returncode == 0, done.stderr
        *program, sqlite = done.stdout.splitlines()
        tokens = int(re.search(r"(\d+) tokens", "\n".join(program)).group(1))  # type: ignore[union-attr]
        wall = float(re.search(r"wall per token: ([0-9.]+) ms", "\n".join(program))  # type: ignore[union-attr]
                     .group(1))
        assert "specnsys: warning" not in done.stderr, done.stderr
        analysis = _specnsys("analyze", sqlite, "--json")
        assert analysis.returncode == 0, analysis.stderr
        out[name] = {"sqlite": sqlite, "tokens": tokens, "wall_ms": wall,
                     "analysis": json.loads(analysis.stdout)}
    return out


def _phases(run: dict[str, object]) -> dict[str, int]:
    analysis = run["analysis"]
    assert isinstance(analysis, dict)
    return {name: row["ranges"] for name, row in analysis["phases"].items() if row["ranges"]}


@needs_nsys
@pytest.mark.nsys
@pytest.mark.slow
@pytest.mark.parametrize("name", ["assisted", "lookup", "pipe_assisted"])
def test_speculative_runs_find_draft_verify_sample_and_acceptance_by_position(
    captures: dict[str, dict[str, object]], name: str
) -> None:
    run = captures[name]
    analysis = run["analysis"]
    assert isinstance(analysis, dict)
    assert analysis["mode"] == "spec" and analysis["rules"] == "specnsys"
    phases = _phases(run)
    assert {"draft", "verify", "sample", "kv", "prefill", "decode"} <= set(phases), phases
    assert "forward" not in phases
    assert analysis["requests"] == 2 and phases["prefill"] == 2  # the first forward of each
    # one decode step per verify, and the first step's verify is the prefill
    assert analysis["steps"] == phases["verify"] + 2 == phases["kv"]
    # output tokens: what generate() (or the pipeline) returned, from specnsys's tokens marks
    assert analysis["tokens"] == run["tokens"] and analysis["tokens_source"] == "tokens_marks"
    acceptance = analysis["acceptance"]
    assert acceptance["sequence_steps"] > 0 and len(acceptance["by_position"]) == K
    assert all(0 <= a <= 1 for a in acceptance["by_position"])
    assert acceptance["invalid_pairs"] == 0
    # issue 29 on a loop we did not write: one pair per step (0/0 where nothing was
    # proposed), no structural warning, draft forwards from the finest ranges there are
    assert acceptance["sequence_steps"] == analysis["steps"]
    assert not [w for w in analysis["warnings"] if w.startswith("annotation structure")]
    assert analysis["draft_forwards_source"] == (
        "proposed_marks" if name == "lookup" else "nested_draft_ranges"
    )
    latency = analysis["latency"]
    assert latency["ttft_ns"]["count"] == latency["tpot_ns"]["count"] == 2  # first_token marks


@needs_nsys
@pytest.mark.nsys
@pytest.mark.slow
def test_prompt_lookup_counts_the_proposals_it_really_made(
    captures: dict[str, dict[str, object]],
) -> None:
    """Steps that propose fewer than k (or none) are counted with their own length."""
    acceptance = captures["lookup"]["analysis"]["acceptance"]  # type: ignore[index]
    assert acceptance["proposed_total"] < K * acceptance["sequence_steps"]
    assert min(acceptance["k_values"]) < K


@needs_nsys
@pytest.mark.nsys
@pytest.mark.slow
@pytest.mark.parametrize("name", ["base", "pipe_base"])
def test_the_baseline_run_gives_forward_and_sample(
    captures: dict[str, dict[str, object]], name: str
) -> None:
    run = captures[name]
    analysis = run["analysis"]
    assert isinstance(analysis, dict)
    phases = _phases(run)
    assert analysis["mode"] == "baseline" and {"forward", "sample", "prefill"} <= set(phases)
    assert not {"draft", "verify"} & set(phases)
    assert analysis["tokens"] == run["tokens"] == 40  # 2 requests x 20
    # one forward per token after each request's first; the prefill forwards are not p's
    assert phases["forward"] == 40 - 2 and phases["prefill"] == 2
    assert analysis["steps"] == 40 and 0 < analysis["p"] < 1


@needs_nsys
@pytest.mark.nsys
@pytest.mark.slow
@pytest.mark.parametrize(("base", "spec"), [("base", "assisted"), ("base", "lookup"),
                                            ("pipe_base", "pipe_assisted")])
def test_measured_speedup_matches_the_script_s_own_timing(
    captures: dict[str, dict[str, object]], base: str, spec: str
) -> None:
    done = _specnsys("compare", str(captures[base]["sqlite"]), str(captures[spec]["sqlite"]),
                     "--json")
    assert done.returncode == 0, done.stderr
    measured = json.loads(done.stdout)["measured_speedup"]
    own = float(captures[base]["wall_ms"]) / float(captures[spec]["wall_ms"])  # type: ignore[arg-type]
    assert measured == pytest.approx(own, rel=0.10)
