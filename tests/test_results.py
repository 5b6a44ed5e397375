"""specnsys.results: typed results, their JSON and a save/load round trip."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from specnsys.results import (
    NotAvailable,
    ResultLoadError,
    load,
    result_kind,
    save,
    to_dict,
    value_or_none,
)
from tests.conftest import json_doc


@dataclass(frozen=True)
class _Term:
    name: str
    slope: float | NotAvailable
    points: tuple[int, ...] = ()


@result_kind("test-cell")
@dataclass(frozen=True)
class _Cell:
    k: int
    speedup: float | NotAvailable
    terms: tuple[_Term, ...]
    extra: dict[str, float] = field(default_factory=dict)
    scratch: object = field(default=None, metadata={"json": False})


def _cell() -> _Cell:
    return _Cell(
        k=4,
        speedup=NotAvailable("needs the verify cost at two k"),
        terms=(_Term("verify", 2.5, (1, 2)), _Term("draft", NotAvailable("no draft ranges"))),
        extra={"ceiling": float("inf"), "p": 0.5},
        scratch=object(),
    )


def test_a_missing_value_is_null_with_its_reason_beside_it() -> None:
    doc = json_doc(to_dict(_cell()))
    assert doc["speedup"] is None
    assert doc["not_available"] == {"speedup": "needs the verify cost at two k"}
    assert doc["terms"][1] == {
        "name": "draft", "slope": None, "points": [], "not_available": {"slope": "no draft ranges"}
    }  # fmt: skip
    assert doc["extra"] == {"ceiling": None, "p": 0.5}  # no Infinity in JSON
    assert "scratch" not in doc
    assert not NotAvailable("x") and value_or_none(NotAvailable("x")) is None
    assert value_or_none(2.0) == 2.0


def test_save_and_load_give_back_the_same_result(tmp_path: Path) -> None:
    cell = _cell()
    path = save(cell, tmp_path / "cell.json")
    back = load(path, _Cell)
    assert back.speedup == NotAvailable("needs the verify cost at two k")
    assert back.terms == cell.terms
    assert back.k == 4 and back.extra == {"ceiling": None, "p": 0.5}


def test_a_file_that_is_not_a_result_is_one_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ResultLoadError, match="not a saved specnsys result"):
        load(bad)
    bad.write_text('{"format": "specnsys-result", "kind": "nope", "result": {}}')
    with pytest.raises(ResultLoadError, match="unknown result kind"):
        load(bad)
