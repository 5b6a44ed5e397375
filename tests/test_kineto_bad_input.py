"""Bad Chrome traces: one line and exit 2, or an answer with a data-quality warning; never a
traceback, and the file unchanged.

Every file is built here (truncated, not JSON, JSON that is no trace, events missing fields,
negative durations, a million events of one name) and every command line runs in one fresh
process (tests/cli_driver.py), as a user would run it.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

import specnsys
from specnsys.errors import BadInputError
from tests.conftest import REPO, sha256
from tests.kineto_builder import ChromeTrace


def _loop() -> ChromeTrace:
    """A small baseline loop: a request, a prefill, forward/sample steps, tokens marks, with
    cpu ops, so that a cut anywhere lands among events."""
    trace = ChromeTrace().request(0, 100_000, 1).range(0, 10_000, "prefill")
    trace.mark(9_990, "tokens", 1)
    for i in range(1, 10):
        s = i * 10_000
        trace.range(s, s + 10_000, "decode").range(s + 100, s + 8_000, "forward")
        for j in range(5):
            trace.op(s + 200 + j * 1_000, s + 900 + j * 1_000, "aten::mm")
        trace.range(s + 8_000, s + 9_900, "sample").mark(s + 9_950, "tokens", 1)
    return trace


def _write(path: Path, data: bytes | str) -> Path:
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


def _cut(fraction: float, name: str) -> Callable[[Path], Path]:
    def make(folder: Path) -> Path:
        text = _loop().text()
        return _write(folder / name, text[: int(len(text) * fraction)])

    return make


def _cut_gzip(folder: Path) -> Path:
    data = gzip.compress(_loop().text().encode())
    return _write(folder / "cut.json.gz", data[: int(len(data) * 0.6)])


def _missing_fields(folder: Path) -> Path:
    trace = _loop()
    trace.raw('{"ph": "X", "cat": "cpu_op", "name": "no ts", "pid": 1, "tid": 1, "dur": 1.000}')
    trace.raw('{"ph": "X", "cat": "user_annotation", "name": "forward", "ts": 1.000, "dur": 1.000}')
    trace.raw('{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": "main", '
              '"tid": 1, "ts": 1.000, "dur": 1.000}')  # fmt: skip
    trace.raw('{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": "soon"}')
    trace.raw('{"ph": "X", "cat": ["not", "a", "string"], "ts": 1.0, "dur": 1.0}')
    trace.raw('"not an event"')
    trace.raw("17")
    return trace.write(folder / "missing.json")


def _negative(folder: Path) -> Path:
    trace = _loop()
    trace.range(95_000, 94_000, "sample")  # ends before it starts
    trace.runtime(50_000, 49_990, "cudaLaunchKernel", 1).kernel(50_100, 50_000, "k", 1)
    return trace.write(folder / "negative.json")


def _unfinished(folder: Path) -> Path:
    trace = _loop()
    trace.scope(95_000, None, "sample")
    return trace.write(folder / "unfinished.json")


def _million_of_one_name(folder: Path) -> Path:
    """10^6 operator events named ``aten::add`` inside one forward (as one ``json.load`` of
    100 MB would hold them all at once)."""
    n = 10**6
    head = ChromeTrace().request(0, 2 * n * 1000, 1).range(0, n * 1000, "forward")
    event = '{"ph":"X","cat":"cpu_op","name":"aten::add","pid":1,"tid":1,"ts":%d.000,"dur":1.000}'
    body = ",".join(event % (2 * i) for i in range(n))
    text = head.text().replace('"traceEvents": [\n', '"traceEvents": [\n' + body + ",\n", 1)
    return _write(folder / "million.json", text)


def _deep(folder: Path) -> Path:
    return _write(folder / "deep.json", '{"traceEvents": [' + "[" * 100_000)


#: name -> (how to make the file, expected exit status, what stderr must say)
CASES: dict[str, tuple[Callable[[Path], Path], int, str]] = {
    "empty": (lambda d: _write(d / "empty.json", b""), 2, "empty file"),
    "text": (lambda d: _write(d / "notes.json", "hello, world\n"), 2, "not JSON"),
    "binary": (lambda d: _write(d / "bin.json", bytes(range(256)) * 4), 2, "not a Chrome trace"),
    "not_utf8": (
        lambda d: _write(d / "latin1.json", '{"traceEvents": [{"name": "caf\xe9"}]}'.encode("latin-1")),
        2, "not UTF-8",
    ),
    "bad_gzip": (lambda d: _write(d / "bad.json.gz", b"\x1f\x8b\x08\x00garbage" * 10), 2, "gzip"),
    "gzip_text": (lambda d: _write(d / "text.json.gz", gzip.compress(b"hello")), 2, "not JSON"),
    "number": (lambda d: _write(d / "n.json", "42"), 2, "not a trace-event object"),
    "no_events_key": (
        lambda d: _write(d / "config.json", json.dumps({"model": "x", "layers": [1, 2]})),
        2, "without a traceEvents array",
    ),
    "events_not_array": (
        lambda d: _write(d / "five.json", '{"traceEvents": 5}'), 2, "not an array",
    ),
    "no_events": (lambda d: _write(d / "none.json", '{"traceEvents": []}'), 2, "without events"),
    "array_of_numbers": (lambda d: _write(d / "nums.json", "[1, 2, 3]"), 2, "nothing to analyze"),
    "only_python": (
        lambda d: ChromeTrace(process=None).complete(0, 10, "f", "python_function").write(d / "py.json"),
        2, "nothing to analyze",
    ),
    "cut_before_events": (_cut(0.0005, "head.json"), 2, "truncated"),
    "malformed_event": (
        lambda d: _write(d / "bad.json", _loop().text().replace('"dur": ', '"dur": :', 3)),
        2, "not valid JSON",
    ),
    "trailing_text": (
        lambda d: _write(d / "tail.json", _loop().text() + "\n{}"), 2, "text after the end",
    ),
    "deep": (_deep, 2, "nested too deeply"),
    "cut_in_events": (_cut(0.6, "cut.json"), 0, "cut short"),
    "cut_gzip": (_cut_gzip, 0, "cut short"),
    "missing_fields": (_missing_fields, 0, "lack a usable ts, dur, pid or tid"),
    "negative_range": (_negative, 0, "NVTX range(s) end before they start"),
    "negative_gpu": (_negative, 0, "GPU operation(s) end before they start"),
    "negative_call": (_negative, 0, "CUDA API call(s) have a negative duration"),
    "unfinished": (_unfinished, 0, "never closed"),
}  # fmt: skip


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[dict, str, str]]:
    """Every case's ``analyze`` run (one process for all), with the file's hash before and
    after."""
    folder = tmp_path_factory.mktemp("bad-kineto")
    made: dict[str, Path] = {}
    for name, (make, _, _) in CASES.items():
        sub = folder / name
        sub.mkdir()
        made[name] = make(sub)
    before = {name: sha256(path) for name, path in made.items()}
    runs = _run([["analyze", str(path)] for path in made.values()], folder)
    return {
        name: (run, before[name], sha256(made[name]))
        for name, run in zip(made, runs, strict=True)
    }


def _run(commands: list[list[str]], folder: Path) -> list[dict]:
    env_cache = {"SPECNSYS_CACHE_DIR": str(folder / "cache")}
    done = subprocess.run(
        [sys.executable, "-m", "tests.cli_driver", json.dumps(commands)],
        capture_output=True, text=True, timeout=600, cwd=REPO, check=True,
        env={**os.environ, **env_cache},
    )  # fmt: skip
    return json.loads(done.stdout)


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_chrome_traces(outcomes: dict[str, tuple[dict, str, str]], case: str) -> None:
    run, before, after = outcomes[case]
    _, status, says = CASES[case]
    assert run["traceback"] is None, run["traceback"]
    assert before == after, "the input file changed"
    lines = run["stderr"].splitlines()
    if status == 2:
        assert run["status"] == 2 and run["stdout"] == ""
        assert len(lines) == 1 and lines[0].startswith("specnsys: error: "), run["stderr"]
        assert says in lines[0]
    else:
        assert run["status"] == 0 and run["stdout"].strip()
        assert all(line.startswith("specnsys: warning: ") for line in lines), run["stderr"]
        assert any(says in line for line in lines), run["stderr"]


@pytest.mark.slow
def test_a_million_events_of_one_name(tmp_path: Path) -> None:
    """Read streaming and answered (exit 0), with every event in the model."""
    path = _million_of_one_name(tmp_path)
    before = sha256(path)
    analyze, count = _run(
        [["analyze", str(path)], ["sql", str(path), "SELECT count(*) FROM nvtx", "--format", "csv"]],
        tmp_path,
    )
    assert analyze["traceback"] is None and analyze["status"] == 0, analyze["stderr"]
    assert "bottleneck share p = 50.0%" in analyze["stdout"]
    assert count["status"] == 0 and count["stdout"].split() == ["count_star()", "1000002"]
    assert sha256(path) == before


def test_a_value_longer_than_any_event_is_refused_before_it_is_held(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One JSON value longer than :data:`MAX_VALUE_CHARS` (2^28; lowered here, with the
    chunk size, so the file stays small) is no event: refused, not read whole into memory."""
    from specnsys.readers.kineto import stream

    monkeypatch.setattr(stream, "MAX_VALUE_CHARS", 1 << 16)
    monkeypatch.setattr(stream, "CHUNK_CHARS", 1 << 12)
    path = _write(tmp_path / "long.json", '{"traceEvents": [{"name": "' + "x" * (1 << 18) + '"}]}')
    with pytest.raises(BadInputError, match="a JSON value of over 65,536 characters"):
        specnsys.open(path, use_cache=False)
