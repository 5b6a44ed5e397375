"""Name-mapping rules: engines' own NVTX names onto the phase vocabulary (hand-checked traces)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import specnsys
from specnsys.attribution import (
    PhaseBreakdown,
    PhaseRule,
    PhaseRules,
    exclusive_phase_times,
    gpu_ops_with_phase,
    load_rules,
    resolve_rules,
)
from specnsys.errors import BadInputError
from specnsys.testing import NsysExportBuilder


def _engine_trace(tmp_path: Path) -> Path:
    """An 'engine' that names its phases itself, in domain 'eng', plus an unrelated range."""
    b = NsysExportBuilder()
    b.process(1, "python3")
    b.thread(1, 1, "main")
    b.domain(1, "eng", pid=1, tid=1)
    b.domain(2, "other", pid=1, tid=1)
    b.start_end(100, 1100, "req", pid=1, tid=1, domain_id=1)
    b.push_pop(100, 600, "engine_step", pid=1, tid=1, domain_id=1)
    b.push_pop(150, 400, "model_forward", pid=1, tid=1, domain_id=1)
    b.push_pop(400, 500, "sampler_step_7", pid=1, tid=1, domain_id=1)
    b.push_pop(500, 560, "model_forward", pid=1, tid=1, domain_id=2)  # other domain
    b.push_pop(700, 900, "logits_post", pid=1, tid=1, domain_id=1)
    b.runtime(160, 170, "cudaLaunchKernel", correlation_id=1, pid=1, tid=1)
    b.kernel(200, 700, "gemm", correlation_id=1, pid=1)
    b.runtime(410, 420, "cudaLaunchKernel", correlation_id=2, pid=1, tid=1)
    b.kernel(750, 800, "softmax", correlation_id=2, pid=1)
    return b.write(tmp_path / "engine.sqlite")


RULES_TOML = """
name = "eng"
[[rule]]
phase = "request"
name = "^req$"
domain = "^eng$"
[[rule]]
phase = "forward"
name = "^model_forward$"
domain = "^eng$"
[[rule]]
phase = "sample"
name = "^(sampler_step_[0-9]+|logits_post)$"
[[rule]]
phase = "decode"
name = "^engine_step$"
"""


def _rows(tmp_path: Path, rules: PhaseRules | str) -> tuple[dict[str, dict], PhaseBreakdown]:
    with specnsys.open(_engine_trace(tmp_path)) as t:
        pb = exclusive_phase_times(t, rules=rules)
    assert pb.frame["wall_ns"].sum() == pb.window_ns
    return {r["phase"]: r for r in pb.frame.iter_rows(named=True)}, pb


def test_toml_rules_map_engine_names_to_phases(tmp_path: Path) -> None:
    path = tmp_path / "eng.toml"
    path.write_text(RULES_TOML)
    rules = load_rules(path)
    assert rules.name == "eng" and rules.phases == ("decode", "forward", "sample")
    rows, pb = _rows(tmp_path, rules)
    # window from the mapped request range
    assert (pb.window_start_ns, pb.window_end_ns) == (100, 1100)
    assert pb.rules == "eng"
    # GPU: gemm [200,700) launched in forward, softmax [750,800) launched in sample
    assert rows["forward"]["gpu_busy_ns"] == 500 and rows["forward"]["kernels"] == 1
    assert rows["sample"]["gpu_busy_ns"] == 50
    # idle GPU time: [100,200) decode 50 + forward 50; [700,750) sample (logits_post);
    # [800,900) sample; [900,1100) nothing open -> unannotated
    assert rows["forward"]["wall_ns"] == 500 + 50
    assert rows["decode"]["wall_ns"] == 50
    assert rows["sample"]["wall_ns"] == 50 + 50 + 100
    assert rows["unannotated"]["wall_ns"] == 200
    # the other domain's 'model_forward' is not a phase (domain rule); the CPU lookup skips it
    assert rows["forward"]["cpu_inclusive_ns"] == 250


def test_first_matching_rule_wins_and_domain_is_optional(tmp_path: Path) -> None:
    rules = PhaseRules(
        "r",
        (PhaseRule("verify", "forward"), PhaseRule("forward", "model_forward")),
        ("verify", "forward"),
    )
    rows, _ = _rows(tmp_path, rules)
    assert rows["forward"]["cpu_inclusive_ns"] == 0
    assert rows["verify"]["cpu_inclusive_ns"] == 250 + 60  # both domains


def test_builtin_nvtx_rules_make_every_range_a_phase(tmp_path: Path) -> None:
    rows, pb = _rows(tmp_path, "nvtx")
    assert pb.rules == "nvtx"
    assert {"engine_step", "model_forward", "sampler_step_7", "logits_post"} <= set(rows)
    assert rows["model_forward"]["gpu_busy_ns"] == 500
    # no mapped request range: the window spans all ranges and GPU ops
    assert (pb.window_start_ns, pb.window_end_ns) == (100, 1100)
    assert "req" not in rows  # start/end ranges never become phases


def test_strip_merges_decorated_names(tmp_path: Path) -> None:
    b = NsysExportBuilder()
    b.process(1, "python3")
    b.thread(1, 1, "main")
    b.push_pop(0, 100, "aten::mm, op_id = 5", pid=1, tid=1)
    b.push_pop(100, 300, "aten::mm, seq = 2, op_id = 9", pid=1, tid=1)
    with specnsys.open(b.write(tmp_path / "torch.sqlite")) as t:
        pb = exclusive_phase_times(t, rules="nvtx")
    rows = {r["phase"]: r["wall_ns"] for r in pb.frame.iter_rows(named=True)}
    assert rows["aten::mm"] == 300


def test_many_phases_do_not_overflow_the_exact_split(tmp_path: Path) -> None:
    """100 distinct phases (lcm(1..100) would overflow a 128-bit integer), two overlapping."""
    b = NsysExportBuilder()
    b.process(1, "python3")
    b.thread(1, 1, "main")
    for i in range(100):
        b.push_pop(i * 10, i * 10 + 10, f"p{i}", pid=1, tid=1)
        b.runtime(i * 10 + 1, i * 10 + 2, "cudaLaunchKernel", correlation_id=i + 1, pid=1, tid=1)
        b.kernel(i * 10 + 3, i * 10 + 20, "k", correlation_id=i + 1, pid=1)  # overlaps the next
    with specnsys.open(b.write(tmp_path / "many.sqlite")) as t:
        pb = exclusive_phase_times(t, rules="nvtx")
    assert pb.frame["wall_ns"].sum() == pb.window_ns == 1010
    assert pb.frame["gpu_wall_ns"].sum() == pb.gpu_union_ns


def test_unclosed_range_is_clipped_to_the_window_and_reported(tmp_path: Path) -> None:
    b = NsysExportBuilder()
    b.process(1, "python3")
    b.thread(1, 1, "main")
    b.domain(1, "specnsys", pid=1, tid=1)
    b.start_end(0, 1000, "request", pid=1, tid=1, domain_id=1)
    b.push_pop(0, 300, "prefill", pid=1, tid=1, domain_id=1)
    b.push_pop(300, None, "decode", pid=1, tid=1, domain_id=1)  # the run crashed in decode
    path = b.write(tmp_path / "crash.sqlite")
    with specnsys.open(path) as t:
        pb = exclusive_phase_times(t)
    rows = {r["phase"]: r for r in pb.frame.iter_rows(named=True)}
    assert pb.unclosed_ranges == 1
    assert rows["decode"]["wall_ns"] == 700 and rows["decode"]["cpu_inclusive_ns"] == 700
    out = subprocess.run(
        [sys.executable, "-m", "specnsys", "phases", str(path)], capture_output=True, text=True
    )
    assert out.returncode == 0
    assert "1 phase range(s) on the driver thread never ended" in out.stdout
    doc = json.loads(
        subprocess.run(
            [sys.executable, "-m", "specnsys", "phases", "--json", str(path)],
            capture_output=True, text=True, check=True,
        ).stdout
    )  # fmt: skip
    assert doc["unclosed_ranges"] == 1 and doc["rules"] == "specnsys"


def test_gpu_ops_with_phase_accepts_rules(tmp_path: Path) -> None:
    path = tmp_path / "eng.toml"
    path.write_text(RULES_TOML)
    with specnsys.open(_engine_trace(tmp_path)) as t:
        ops = gpu_ops_with_phase(t, rules=str(path)).sort("correlation_id")
    assert ops["phase"].to_list() == ["forward", "sample"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("name = 3\n[[rule]]\nphase='forward'\n", "name must be a string"),
        ("[[rule]]\nphase = 'forwrd'\n", "'forwrd' is not a phase of the vocabulary"),
        ("[[rule]]\nphase = 'forward'\nname = '(unclosed'\n", "is not a valid regex"),
        ("[[rule]]\nphase = 'forward'\ncolour = 'red'\n", "unknown key(s) ['colour']"),
        ("[[rule]]\nphase = 'forward'\nstrip = 'x'\n", "'strip' only applies"),
        ("rules = 1\n", "unknown key(s) ['rules']"),
        ("name = 'x'\n", "no [[rule]] tables"),
        ("[[rule]\n", "not valid TOML"),
        ("extends = 'vllm-v0'\n", "unknown built-in rule set 'vllm-v0'"),
    ],
)
def test_bad_rules_files_give_one_clear_error(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(BadInputError, match=None) as info:
        load_rules(path)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_custom_phases_and_extends(tmp_path: Path) -> None:
    path = tmp_path / "custom.toml"
    path.write_text(
        "extends = 'specnsys'\ncustom_phases = true\n[[rule]]\nphase = 'tokenize'\nname = '^tok$'\n"
    )
    rules = load_rules(path)
    assert rules.phases[-1] == "tokenize"
    assert rules.phases[: len(rules.phases) - 1] == resolve_rules(None).phases


def test_cli_rules_file_and_errors(tmp_path: Path) -> None:
    trace = _engine_trace(tmp_path)
    rules = tmp_path / "eng.toml"
    rules.write_text(RULES_TOML)
    ok = subprocess.run(
        [sys.executable, "-m", "specnsys", "phases", "--rules", str(rules), "--json", str(trace)],
        capture_output=True, text=True,
    )  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    doc = json.loads(ok.stdout)
    assert doc["rules"] == "eng" and doc["phases"]["forward"]["wall_ns"] == 550
    for bad in ("nope", str(tmp_path / "missing.toml")):
        out = subprocess.run(
            [sys.executable, "-m", "specnsys", "phases", "--rules", bad, str(trace)],
            capture_output=True, text=True,
        )  # fmt: skip
        assert out.returncode == 2
        assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr


# Patterns that match fixed strings compile to ``IN``; every other one stays a regex. Texts
# chosen to catch a wrong rewrite: prefixes, suffixes, a trailing newline (``$`` in RE2 is the
# end of the text only), case, the escaped characters themselves, an empty text, NULL.
_TEXTS = [
    "decode", "decode\n", "Decode", " decode", "decodex", "xdecode", "kv", "a", "b", "ab", "a|b",
    "a.b", "axb", "a\\", "a$", "spec_decode.verify", "spec_decodeXverify", "", None,
]  # fmt: skip


@pytest.mark.parametrize(
    ("pattern", "exact"),
    [
        ("^(decode|kv)$", True),
        ("^decode$", True),
        (r"^spec_decode\.verify$", True),
        (r"^(a\.b|a\\)$", True),
        ("^(ab)$", True),
        ("^a|b$", False),  # "^a" or "b$": a rewrite to IN ('a', 'b') would be wrong
        (r"^(a\|b)$", False),
        (r"^a\$", False),
        ("^decode", False),
        ("decode$", False),
        ("^(a)(b)$", False),
        (r"^\w+$", False),
        ("^(?i)decode$", False),
    ],
)
def test_fixed_string_patterns_match_exactly_what_the_regex_matches(
    pattern: str, exact: bool
) -> None:
    import duckdb

    from specnsys.attribution.rules import _match_sql

    sql = _match_sql("t", pattern)
    assert sql.startswith("t IN (") == exact, sql
    con = duckdb.connect()
    con.execute("CREATE TABLE x (i INTEGER, t VARCHAR)")
    con.executemany("INSERT INTO x VALUES (?, ?)", list(enumerate(_TEXTS)))
    ours = con.execute(f"SELECT i, coalesce({sql}, false) FROM x ORDER BY i").fetchall()
    regex = con.execute(
        "SELECT i, coalesce(regexp_matches(t, ?), false) FROM x ORDER BY i", [pattern]
    ).fetchall()
    assert ours == regex
    assert any(hit for _, hit in regex)  # each pattern matches something: the check has teeth
