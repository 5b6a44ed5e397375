"""Shared fixtures: an isolated cache per test, the real-export corpus, file hashing, and
`json_doc` (a result's document as the tests index it)."""

from __future__ import annotations

import fcntl
import hashlib
import os
import tempfile
from collections.abc import Generator
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
# - "corpus": the modules that share the session's corpus cache (``corpus_cache``), so each real
#   export is built once, not once per worker. It goes first.
# - "nsys": every module with a test that runs nsys, on one worker, last, and each of its tests
#   alone on the machine: the other workers wait (a shared/exclusive file lock around every
#   test, fixtures included). Two nsys processes at once fail inside nsys (``sem_open``, "Local
#   Endpoint is not available"), and the capture tests check timings (the program's own clock
#   against the trace's, two profilers of one run) that a busy second core disturbs.
_FIRST, _LAST = "corpus", "nsys"
_GROUP = pytest.StashKey[str]()


def _group_of_module(items: list[pytest.Item]) -> str:
    if any(item.get_closest_marker("nsys") for item in items):
        return _LAST
    if any("corpus_cache" in getattr(item, "fixturenames", ()) for item in items):
        return _FIRST
    return items[0].nodeid.split("::")[0]


def pytest_configure(config: pytest.Config) -> None:
    """Hand out the groups in the order given below, not by their number of tests."""
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


@pytest.hookimpl(tryfirst=True)  # before xdist reads the xdist_group marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Give every test its module's xdist group (see above); corpus first, nsys last.

    Without ``--dist loadgroup`` the marks change nothing and the order is the collected one."""
    modules: dict[str, list[pytest.Item]] = {}
    for item in items:
        modules.setdefault(item.nodeid.split("::")[0], []).append(item)
    for members in modules.values():
        group = _group_of_module(members)
        for item in members:
            item.add_marker(pytest.mark.xdist_group(group))
            item.stash[_GROUP] = group

    def rank(item: pytest.Item) -> int:
        group = item.stash[_GROUP]
        return 0 if group == _FIRST else 2 if group == _LAST else 1

    if getattr(config.option, "dist", "no") != "no":
        items.sort(key=rank)  # stable: the order within a group is the collected one


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(
    item: pytest.Item, nextitem: pytest.Item | None
) -> Generator[None, object, object]:
    """On an xdist worker: an nsys test (its setup, call and teardown) holds the run's lock
    exclusively, every other test holds it shared, so no test runs beside an nsys one."""
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if run is None:
        return (yield)
    path = Path(tempfile.gettempdir()) / f"specnsys-tests-{run}.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        alone = item.stash.get(_GROUP, "") == _LAST
        fcntl.flock(fd, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        return (yield)
    finally:
        os.close(fd)


def json_doc(value: object) -> dict[str, Any]:
    """``value`` as the JSON object a test indexes freely (``doc["phases"]["draft"]["share"]``).

    The product types its documents precisely (``to_dict()`` returns ``dict[str, object]``, a
    partly typed payload ``dict[str, object]``), so mypy would refuse every nested index; a test
    checks exact values, not types, so it reads the document as ``dict[str, Any]``, after
    checking that it is one.
    """
    assert isinstance(value, dict), type(value)
    return value
