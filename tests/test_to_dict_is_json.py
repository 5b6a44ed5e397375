"""Issue 31 item 5: a library result's ``to_dict()`` is exactly what its command prints with
``--json``, for every command that has both (the CLI is a thin layer over the library; a key
that only the CLI adds -- ``phases --by category``'s ``categories`` once -- is a fault).

Compared after one JSON round trip of ``to_dict()`` (tuples become lists, as the CLI's
``json.dumps`` makes them), on the bundled real captures and a real multi-GPU export.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import specnsys
from specnsys.cli.main import main
from tests.conftest import SAMPLE_TRACES, corpus_files

BASE = str(SAMPLE_TRACES / "baseline_chat_c4.sqlite")
SPEC = str(SAMPLE_TRACES / "spec_chat_c4_k4.sqlite")
SPEC_K2 = str(SAMPLE_TRACES / "spec_chat_c4_k2.sqlite")

CASES: dict[str, tuple[list[str], Callable[[], Any]]] = {
    "analyze": (["analyze", SPEC], lambda: specnsys.analyze(SPEC)),
    "analyze --window auto": (
        ["analyze", SPEC, "--window", "auto"], lambda: specnsys.analyze(SPEC, window="auto"),
    ),
    "compare": (["compare", BASE, SPEC], lambda: specnsys.compare(BASE, SPEC)),
    "compare sweep": (
        ["compare", BASE, SPEC_K2, SPEC], lambda: specnsys.compare(BASE, SPEC_K2, SPEC),
    ),
    "compare a/b": (["compare", SPEC_K2, SPEC], lambda: specnsys.compare(SPEC_K2, SPEC)),
    "phases": (["phases", SPEC], lambda: specnsys.phases(SPEC)),
    "phases --by category": (
        ["phases", SPEC, "--by", "category"], lambda: specnsys.phases(SPEC, by="category"),
    ),
    "kernels": (["kernels", SPEC], lambda: specnsys.kernels(SPEC)),
    "ranges": (["ranges", SPEC], lambda: specnsys.ranges(SPEC)),
    "ranges --group-by name": (
        ["ranges", SPEC, "--group-by", "name"], lambda: specnsys.ranges(SPEC, group_by="name"),
    ),
    "whatif": (["whatif", BASE, SPEC], lambda: specnsys.whatif(BASE, SPEC)),
    "whatif given": (
        ["whatif", "--alpha", "0.7", "--k", "4", "--c", "0.125"],
        lambda: specnsys.whatif(alpha=0.7, k=4, c=0.125),
    ),
    "forecast": (["forecast", BASE, SPEC], lambda: specnsys.forecast(BASE, SPEC)),
    "advise": (["advise", BASE, SPEC], lambda: specnsys.advise(BASE, SPEC)),
}  # fmt: skip


def _cli_json(argv: list[str], capsys: pytest.CaptureFixture[str]) -> Any:
    capsys.readouterr()
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("name", CASES)
def test_to_dict_equals_the_commands_json(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    argv, call = CASES[name]
    printed = _cli_json(argv, capsys)
    result = call()
    assert json.loads(json.dumps(result.to_dict())) == printed


@pytest.mark.skipif(not corpus_files(), reason="the real corpus is not here")
def test_to_dict_equals_the_json_on_a_real_two_gpu_export(
    capsys: pytest.CaptureFixture[str], corpus_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Several processes: ``phases --all-processes`` and ``analyze``'s ranks."""
    monkeypatch.setenv("SPECNSYS_CACHE_DIR", str(corpus_cache))
    (path,) = [str(p) for p in corpus_files() if p.stem == "2026.2.1_nsysai_mfu-2gpu-after"]
    printed = _cli_json(["phases", path, "--all-processes"], capsys)
    assert json.loads(json.dumps(specnsys.phases(path, all_processes=True).to_dict())) == printed
    printed = _cli_json(["phases", path, "--by", "category"], capsys)
    assert json.loads(json.dumps(specnsys.phases(path, by="category").to_dict())) == printed
    assert "categories" in printed
    printed = _cli_json(["analyze", path], capsys)
    assert json.loads(json.dumps(specnsys.analyze(path).to_dict())) == printed
