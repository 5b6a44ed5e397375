"""Shared fixtures: an isolated cache per test, the real-export corpus, file hashing, and
`json_doc` (a result's document as the tests index it)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
CORPUS = Path(os.environ.get("SPECNSYS_CORPUS", REPO.parent / "shared" / "traces" / "real"))
SAMPLE_TRACES = REPO / "sample_traces"


def corpus_files() -> list[Path]:
    """The real nsys exports (empty when the corpus folder is absent)."""
    return sorted(CORPUS.glob("*.sqlite")) if CORPUS.is_dir() else []


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own cache folder, so no test sees another's cache entries."""
    folder = tmp_path_factory.mktemp("cache")
    monkeypatch.setenv("SPECNSYS_CACHE_DIR", str(folder))
    return folder


@pytest.fixture(scope="session")
def corpus_cache_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("corpus-cache")


@pytest.fixture
def corpus_cache(corpus_cache_root: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """One cache folder for the real corpus, shared by the tests that sweep it: each export is
    built once per session (by the first such test, cold) instead of once per test. A test
    that must see a cold build keeps its own folder (``isolated_cache``)."""
    monkeypatch.setenv("SPECNSYS_CACHE_DIR", str(corpus_cache_root))
    return corpus_cache_root


def json_doc(value: object) -> dict[str, Any]:
    """``value`` as the JSON object a test indexes freely (``doc["phases"]["draft"]["share"]``).

    The product types its documents precisely (``to_dict()`` returns ``dict[str, object]``, a
    partly typed payload ``dict[str, object]``), so mypy would refuse every nested index; a test
    checks exact values, not types, so it reads the document as ``dict[str, Any]``, after
    checking that it is one.
    """
    assert isinstance(value, dict), type(value)
    return value
