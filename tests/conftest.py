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
    """Every test gets its own cache folder, so no test sees another's cache entries; a module
    that only reads traces may share one instead (``shared_cache``, ``corpus_cache``, below)."""
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


@pytest.fixture(scope="session")
def shared_cache_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("shared-cache")


@pytest.fixture
def shared_cache(shared_cache_root: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """One cache folder per worker, shared by the modules that only read the committed sample
    traces and the traces they build themselves (``pytestmark = pytest.mark.usefixtures(
    "shared_cache")``): each sample is built once per worker instead of once per test (302
    cold builds of the eight samples in one run of the suite; none of those modules checks the
    cache itself). Entries are keyed on the file's identity, so a trace a test writes gets its
    own. Unlike ``corpus_cache`` it does not group its modules on one worker."""
    monkeypatch.setenv("SPECNSYS_CACHE_DIR", str(shared_cache_root))
    return shared_cache_root


# -- running on several workers (pytest-xdist, `-n 2 --dist loadgroup`) ------------------------
#
# Each test module is one unit of work, so a module-scoped fixture (a capture, a built corpus
# cache) is made once, on one worker. Two units are larger:
# - "nsys": every module with a test that runs nsys, on one worker, first, so that the other
#   worker runs the rest of the suite beside it. Each test marked ``nsys`` (its setup, call and
#   teardown) runs alone on the machine: the other workers wait (a shared/exclusive file lock
#   around every test). Two nsys processes at once fail inside nsys (``sem_open``, "Local
#   Endpoint is not available"), the capture tests check timings (the program's own clock
#   against the trace's, two profilers of one run) that a busy second core disturbs, and nsys
#   itself fails beside one: issue 35's fifth session let the nsys tests that time nothing run
#   beside the suite (779 s became 748 s), and in the two full runs that followed a capture
#   ended at once with nsys's "End of file" and a capture of ``python -c pass`` left no report
#   (a failure and a skip that no run with this lock has shown). The unmarked tests of those
#   modules hold the lock shared, as every other test does.
# - "corpus": the modules that share the session's corpus cache (``corpus_cache``), so each real
#   export is built once, not once per worker. It goes second.
#
# pytest 9.2 broke xdist's grouping (pytest-xdist#1386: ``--dist loadgroup`` writes the group
# into ``item._nodeid``, which pytest 9.2 no longer reads): every test was then dealt out on
# its own, the module fixtures (nsys captures among them) ran once per worker and the workers
# spent a third of the run waiting on each other's locks. pyproject.toml keeps pytest below
# 9.2, and :func:`pytest_xdist_node_collection_finished` stops a run whose groups are lost.
_FIRST, _SECOND = "nsys", "corpus"
_GROUP = pytest.StashKey[str]()


def _group_of_module(items: list[pytest.Item]) -> str:
    if any(item.get_closest_marker("nsys") for item in items):
        return _FIRST
    if any("corpus_cache" in getattr(item, "fixturenames", ()) for item in items):
        return _SECOND
    return items[0].nodeid.split("::")[0]


def pytest_configure(config: pytest.Config) -> None:
    """Hand out the groups in the order given below, not by their number of tests."""
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


@pytest.hookimpl(tryfirst=True)  # before xdist reads the xdist_group marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Give every test its module's xdist group (see above); nsys first, corpus second.

    The order matters on an xdist worker only (whose ``dist`` option xdist sets to "no", so
    the worker is recognised by ``loadgroup``): the controller hands out the groups in the
    order the workers collected them. Without ``--dist loadgroup`` nothing changes."""
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
        return 0 if group == _FIRST else 1 if group == _SECOND else 2

    if getattr(config.option, "loadgroup", False):
        items.sort(key=rank)  # stable: the order within a group is the collected one


@pytest.hookimpl(optionalhook=True)  # an xdist hook: absent without pytest-xdist
def pytest_xdist_node_collection_finished(node: Any, ids: list[str]) -> None:
    """On the controller: stop a ``--dist loadgroup`` run whose workers sent no groups (the
    nodeids carry none: pytest-xdist#1386), rather than run every module fixture once per
    worker, silently twice as slow."""
    if node.config.getvalue("dist") == "loadgroup" and ids and not any("@" in i for i in ids):
        pytest.exit(
            "pytest-xdist lost the test groups (--dist loadgroup under pytest 9.2, "
            "pytest-xdist#1386): install the project's dev extra (pytest<9.2)",
            returncode=pytest.ExitCode.USAGE_ERROR,
        )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(
    item: pytest.Item, nextitem: pytest.Item | None
) -> Generator[None, object, object]:
    """On an xdist worker: a test marked ``nsys`` (its setup, call and teardown) holds the
    run's lock exclusively, every other test holds it shared, so no test runs beside an nsys
    one."""
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if run is None:
        return (yield)
    path = Path(tempfile.gettempdir()) / f"specnsys-tests-{run}.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        alone = item.get_closest_marker("nsys") is not None
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
