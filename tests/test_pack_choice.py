"""Issue 32, item 2: an engine trace needs no ``--rules``: the pack is chosen from its names.

Each pack's built trace (tests/test_rule_packs.py: the engine's real NVTX names in its real
nesting) analysed without ``--rules`` gives exactly the phases of ``--rules PACK`` and says,
in one line and in ``--json``, which pack it chose and on what evidence; a trace whose
ranges match no pack is read as before (every range its own phase, one note).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

import specnsys
from specnsys.api import Phases
from specnsys.attribution.rule_match import choose_pack
from specnsys.cli.main import main
from specnsys.testing import NsysExportBuilder
from tests.test_rule_packs import _sglang_trace, _torch_trace, _trtllm_trace, _vllm_trace

BUILT: dict[str, Callable[[Path], Path]] = {
    "vllm": _vllm_trace,
    "sglang": _sglang_trace,
    "trtllm": _trtllm_trace,
    "torch": _torch_trace,
}


def _walls(result: Phases) -> dict[str, int]:
    return {str(r["phase"]): int(r["wall_ns"]) for r in result.frame.iter_rows(named=True)}


@pytest.mark.parametrize("pack", sorted(BUILT))
def test_each_pack_is_chosen_from_the_trace_and_gives_its_phases(
    tmp_path: Path, pack: str
) -> None:
    path = BUILT[pack](tmp_path)
    chosen = specnsys.phases(path)
    explicit = specnsys.phases(path, rules=pack)
    assert chosen.breakdown.rules == pack
    assert _walls(chosen) == _walls(explicit)
    notes = [n for n in chosen.data_warnings if "rule pack was chosen" in n]
    assert len(notes) == 1 and f"the {pack} rule pack was chosen" in notes[0]
    assert "--rules overrides" in notes[0]
    with specnsys.open(path) as trace:
        choice = choose_pack(trace)
    assert choice is not None and choice.rules.name == pack and choice.matched > 0


@pytest.mark.parametrize("pack", ["vllm", "trtllm"])
def test_analyze_json_names_the_chosen_pack(
    tmp_path: Path, pack: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = BUILT[pack](tmp_path)
    assert main(["analyze", str(path), "--json"]) == 0
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert doc["rules"] == pack
    chosen = [w for w in doc["warnings"] if f"the {pack} rule pack was chosen" in w]
    assert len(chosen) == 1
    assert err.count(f"the {pack} rule pack was chosen") == 1  # and one line on stderr


def test_given_rules_win_over_the_choice(tmp_path: Path) -> None:
    path = _vllm_trace(tmp_path)
    result = specnsys.phases(path, rules="nvtx")
    assert result.breakdown.rules == "nvtx"
    assert not [n for n in result.data_warnings if "rule pack was chosen" in n]


def test_a_trace_that_matches_no_pack_is_read_as_before(tmp_path: Path) -> None:
    b = NsysExportBuilder()
    b.process(1, "app")
    b.thread(1, 1, "main")
    b.push_pop(0, 100, "load")
    b.push_pop(100, 300, "compute")
    path = b.write(tmp_path / "plain.sqlite")
    with specnsys.open(path) as trace:
        assert choose_pack(trace) is None
    result = specnsys.phases(path)
    assert result.breakdown.rules == "nvtx"
    assert _walls(result)["compute"] == 200
    notes = [n for n in result.data_warnings if "--rules nvtx applied" in n]
    assert len(notes) == 1 and "profile --annotate" in notes[0]
