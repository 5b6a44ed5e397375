"""Shared fixtures: an isolated cache per test, the real-export corpus, file hashing."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

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
