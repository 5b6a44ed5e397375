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


# -- running on several workers (pytest-xdist, `-n 2 --dist loadgroup`) ------------------------
#
# Each test module is one unit of work, so a module-scoped fixture (a capture, a built corpus
# cache) is made once, on one worker. Two units are larger:
# - "nsys": every module with a test that runs nsys. Two nsys captures at the same moment on one
#   machine can fail inside nsys ("Local Endpoint is not available"), so they run one at a time,
#   on one worker;
# - "corpus": the modules that share the session's corpus cache (``corpus_cache``), so each real
#   export is built once, not once per worker.
# Both go first, so that the short modules fill the other worker around them.
_FIRST_GROUPS = ("nsys", "corpus")


def _group_of_module(items: list[pytest.Item]) -> str:
    if any(item.get_closest_marker("nsys") for item in items):
        return "nsys"
    if any("corpus_cache" in getattr(item, "fixturenames", ()) for item in items):
        return "corpus"
    return items[0].nodeid.split("::")[0]


@pytest.hookimpl(tryfirst=True)  # before xdist reads the xdist_group marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Give every test its module's xdist group (see above) and put the large groups first.

    Without ``--dist loadgroup`` the marks change nothing and the order is the collected one."""
    modules: dict[str, list[pytest.Item]] = {}
    for item in items:
        modules.setdefault(item.nodeid.split("::")[0], []).append(item)
    group: dict[str, str] = {}
    for module, members in modules.items():
        group[module] = _group_of_module(members)
        for item in members:
            item.add_marker(pytest.mark.xdist_group(group[module]))

    def rank(item: pytest.Item) -> int:
        name = group[item.nodeid.split("::")[0]]
        return _FIRST_GROUPS.index(name) if name in _FIRST_GROUPS else len(_FIRST_GROUPS)

    if getattr(config.option, "dist", "no") != "no":
        items.sort(key=rank)  # stable: the order within a group is the collected one


def json_doc(value: object) -> dict[str, Any]:
    """``value`` as the JSON object a test indexes freely (``doc["phases"]["draft"]["share"]``).

    The product types its documents precisely (``to_dict()`` returns ``dict[str, object]``, a
    partly typed payload ``dict[str, object]``), so mypy would refuse every nested index; a test
    checks exact values, not types, so it reads the document as ``dict[str, Any]``, after
    checking that it is one.
    """
    assert isinstance(value, dict), type(value)
    return value
