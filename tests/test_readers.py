"""The reader registry: opening a trace asks each registered reader, nsys's included.

Which reader a path gets (by content; nsys's also for what none recognizes, so that its
one-line checks say why), what each keys its cache entry on (the same key an open uses, so
that a cache written before stays valid), and the in-memory build against the opened model.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import specnsys
from specnsys.errors import BadInputError
from specnsys.model import MODEL_TABLES
from specnsys.readers import Reader, reader_for, readers
from specnsys.readers.kineto import KINETO
from specnsys.readers.nsys import NSYS
from tests.conftest import SAMPLE_TRACES
from tests.kineto_builder import ChromeTrace

SAMPLE = SAMPLE_TRACES / "spec_chat_c4_k4.sqlite"


def _chrome_trace(path: Path) -> Path:
    trace = ChromeTrace()
    trace.request(0, 1000, 1).range(10, 900, "decode").range(20, 400, "forward")
    trace.runtime(40, 50, "cudaLaunchKernel", 7).kernel(70, 90, "void gemm<float>(float*)", 7)
    return trace.write(path)


def test_every_reader_is_registered_with_nsys_last() -> None:
    registered = readers()
    assert registered == (KINETO, NSYS)
    assert len({r.name for r in registered}) == len(registered)


@pytest.mark.parametrize(
    ("name", "content", "expected"),
    [
        ("trace.sqlite", None, NSYS),
        ("renamed.json", None, NSYS),  # an export under another name: its content decides
        ("trace.json", "chrome", KINETO),
        ("trace.sqlite", "chrome", KINETO),
        ("run.nsys-rep", b"\x00binary report", NSYS),
        ("notes.txt", b"plain text", NSYS),  # none recognizes it: nsys's checks say why
        ("empty.sqlite", b"", NSYS),
    ],
)
def test_a_path_gets_the_reader_of_its_content(
    name: str, content: bytes | str | None, expected: Reader, tmp_path: Path
) -> None:
    path = tmp_path / name
    if content is None:
        path.write_bytes(SAMPLE.read_bytes())
    elif content == "chrome":
        _chrome_trace(path)
    else:
        assert isinstance(content, bytes)
        path.write_bytes(content)
    assert reader_for(path) is expected


def test_a_folder_and_a_missing_path_go_to_nsys_and_say_why(tmp_path: Path) -> None:
    for path, why in ((tmp_path, "is a directory"), (tmp_path / "gone.sqlite", "no such file")):
        assert reader_for(path) is NSYS
        with pytest.raises(BadInputError, match=why):
            specnsys.open(path)


@pytest.mark.parametrize("reader", [NSYS, KINETO], ids=lambda r: r.name)
def test_the_cache_key_is_the_one_an_open_uses(reader: Reader, tmp_path: Path) -> None:
    path = SAMPLE if reader is NSYS else _chrome_trace(tmp_path / "loop.json")
    key = reader.cache_key(path)
    assert key.path == str(path.resolve()) and key.size == path.stat().st_size
    with specnsys.open(path) as trace:
        assert trace.cache_folder is not None
        assert trace.cache_folder.name == key.folder(trace.cache_folder.parent).name
    with specnsys.open(path) as trace:
        assert trace.from_cache


def test_a_report_is_keyed_as_its_export(tmp_path: Path) -> None:
    report = tmp_path / "run.nsys-rep"
    report.write_bytes(b"report")
    with pytest.raises(BadInputError, match="keyed as its SQLite export"):
        NSYS.cache_key(report)


def test_the_nsys_build_in_memory_is_the_opened_model() -> None:
    built = NSYS.build(SAMPLE)
    with specnsys.open(SAMPLE, use_cache=False) as trace:
        for name in MODEL_TABLES:
            assert built.tables[name].equals(trace.arrow(name)), name
        assert built.version == trace.summary.version
        assert built.source_tables == trace.summary.source_tables
        assert built.dangling_string_ids == trace.summary.dangling_string_ids
    assert built.notes == []


def test_the_nsys_build_refuses_what_open_refuses(tmp_path: Path) -> None:
    text = tmp_path / "notes.sqlite"
    text.write_text("not a database")
    with pytest.raises(BadInputError, match="not an SQLite database"):
        NSYS.build(text)
    with pytest.raises(BadInputError, match="not an SQLite database"):
        NSYS.cache_key(text)
