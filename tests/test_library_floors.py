"""The analysis libraries' floors: declared where pip enforces them, and said when not met.

Polars 1.25-1.31 and DuckDB 1.1-1.3 satisfied the floors pyproject.toml declared before
(``polars>=1.0``, ``duckdb>=1.1``), yet failed every trace with a Polars or DuckDB exception
that the command line printed as a specnsys bug (docs/performance.md#the-oldest-libraries-that-
work). The floors are now the oldest releases that give the same outputs; a command that fails
beside an older one says which library to upgrade, with exit status 2.
"""

from __future__ import annotations

import importlib.metadata
import tomllib
from pathlib import Path

import pytest

from specnsys import library_floors
from specnsys.cli.main import _exit_status

REPO = Path(__file__).resolve().parents[1]
FAILURE = RuntimeError("shapes don't match: expected 268 elements in 'is_in' comparison, got 1")


def _installed_as(monkeypatch: pytest.MonkeyPatch, **versions: str) -> None:
    """Make the installed metadata report *versions* (library -> version) for these libraries."""
    real = importlib.metadata.version

    def version(name: str) -> str:
        return versions.get(name, real(name))

    monkeypatch.setattr(importlib.metadata, "version", version)


def test_the_floors_are_the_ones_pyproject_declares() -> None:
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    floors = {d.split(">=")[0]: d.split(">=")[1] for d in declared
              if d.split(">=")[0] in library_floors.CHECKED}  # fmt: skip
    assert floors == {"duckdb": "1.4", "polars": "1.32", "pyarrow": "15"}
    # what the check reads: specnsys's installed metadata (this checkout, installed editable)
    assert library_floors.declared_floors() == floors


def test_a_failure_beside_an_old_polars_names_it_instead_of_a_bug(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _installed_as(monkeypatch, polars="1.25.2")
    assert _exit_status(FAILURE) == 2
    err = capsys.readouterr().err
    assert err == (
        "specnsys: error: polars 1.25.2 is older than the 1.32 specnsys needs: upgrade it with "
        "pip install 'polars>=1.32' (it failed with RuntimeError: shapes don't match: "
        "expected 268 elements in 'is_in' comparison, got 1)\n"
    )


def test_every_old_library_is_named_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _installed_as(monkeypatch, polars="1.31.0", duckdb="1.3.2")
    assert _exit_status(FAILURE) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert "duckdb 1.3.2 is older than the 1.4 specnsys needs" in line
    assert "polars 1.31.0 is older than the 1.32 specnsys needs" in line
    assert "pip install 'duckdb>=1.4' 'polars>=1.32'" in line


def test_with_current_libraries_a_failure_is_still_an_internal_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("SPECNSYS_DEBUG", raising=False)
    _installed_as(monkeypatch, polars="1.32.0", duckdb="2.0.1")  # the floor itself is enough
    assert _exit_status(FAILURE) == 3
    assert capsys.readouterr().err.startswith("specnsys: internal error: RuntimeError: ")


@pytest.mark.parametrize(
    ("version", "release"),
    [("1.32.0", (1, 32, 0)), ("1.32.0rc1", (1, 32, 0)), ("2.0.0.dev3", (2, 0, 0)), ("15", (15,))],
)
def test_a_release_is_its_leading_numbers(version: str, release: tuple[int, ...]) -> None:
    assert library_floors._release(version) == release


@pytest.mark.parametrize(("polars", "says"), [
    ("1.25.2", "polars 1.25.2 is older than the 1.32 specnsys needs: upgrade it with pip install "
               "'polars>=1.32' (it failed with RuntimeError: shapes don't match"),
    ("2.1.0", "internal error: RuntimeError: shapes don't match"),
])  # fmt: skip
def test_a_collect_trace_that_fails_beside_an_old_polars_says_so(
    monkeypatch: pytest.MonkeyPatch, polars: str, says: str
) -> None:
    """collect records one line per failed trace: the same as the command line's."""
    from specnsys.metrics import registry
    from specnsys.runset import collect

    def failing(*_: object) -> None:
        raise FAILURE

    monkeypatch.setattr(collect, "analyse_trace", failing)
    _installed_as(monkeypatch, polars=polars)
    outcome = collect._safe("run.sqlite", {}, {}, registry.registered())
    assert isinstance(outcome, str) and outcome.startswith(says), outcome
