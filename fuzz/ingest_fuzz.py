"""Coverage-guided fuzzing (atheris/libFuzzer) of the ingest path: bytes -> file -> analysis.

Each input becomes a file that goes through what every command does with a trace: open it
(validation, schema detection, model build), read its summary, compute the exclusive phase
timeline, count its malformed rows and run a query. The target fails -- and libFuzzer saves the
input -- when anything but :class:`specnsys.SpecnsysError` escapes, when the timeline breaks its
invariants (phase times summing to the window, shares in [0, 1]), or when the file changed.

Two ways to turn bytes into a file (``--mode``):

* ``raw``: the bytes are the file. Seeds are real nsys-schema exports (the hostile corpus of
  the tests), so mutations hit the header checks, SQLite's own parser and the model queries.
  When the last byte is odd the header's page count is made to match the length, so that
  inserted or deleted bytes get past the truncation check and into SQLite's B-tree parser.
* ``structured``: the bytes drive :class:`specnsys.testing.NsysExportBuilder` (threads,
  ranges, marks, API calls, GPU ops with fuzzer-chosen times, names and correlation ids), which
  reaches the attribution logic far more often than random bytes do.

Run it for a bounded time, e.g.::

    python fuzz/ingest_fuzz.py -max_total_time=60
    python fuzz/ingest_fuzz.py --mode structured -max_total_time=60 -timeout=30

Options after the mode are libFuzzer's (``-runs``, ``-max_total_time``, ``-timeout``,
``-artifact_prefix``, corpus folders). Without a corpus folder a fresh one is seeded in a
temporary folder. Crashing inputs are written to ``fuzz/artifacts/`` unless
``-artifact_prefix`` says otherwise; replay one with ``python fuzz/ingest_fuzz.py FILE``.
"""

from __future__ import annotations

import os
import sys
import tempfile
import warnings
from pathlib import Path

import atheris

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

with atheris.instrument_imports(include=["specnsys"]):
    import specnsys
    from specnsys.attribution import exclusive_phase_times
    from specnsys.ingest import open_trace
    from specnsys.ingest.quality import data_warnings
    from specnsys.testing import NsysExportBuilder

WORK = Path(tempfile.mkdtemp(prefix="specnsys-fuzz-"))
TARGET = WORK / "input.sqlite"
PHASE_NAMES = [
    "request",
    "prefill",
    "decode",
    "forward",
    "draft",
    "verify",
    "sample",
    "kv",
    "sync",
    "schedule",
    "other",
]


def analyze(path: Path, data: bytes) -> None:
    """Everything a command does with a trace; raises only on a bug."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with open_trace(path, use_cache=False) as trace:
                summary = trace.summary
                assert summary.to_dict()["row_counts"] is not None
                breakdown = exclusive_phase_times(trace)
                frame = breakdown.frame
                assert int(frame["wall_ns"].sum()) == breakdown.window_ns >= 0, frame
                shares = frame["share"]
                assert bool(((shares >= 0) & (shares <= 1)).all()), frame
                data_warnings(trace)
                trace.sql("SELECT count(*) FROM nvtx").fetchall()
    except specnsys.SpecnsysError as exc:
        message = str(exc)
        assert message and "\n" not in message, repr(message)
    assert path.read_bytes() == data, "the input file was changed"


def _fix_page_count(data: bytes) -> bytes:
    """Make the header's database size (in pages) match the file's length."""
    if len(data) < 100 or not data.startswith(b"SQLite format 3\x00"):
        return data
    page_size = int.from_bytes(data[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    if page_size < 512:
        return data
    pages = max(1, len(data) // page_size).to_bytes(4, "big")
    return data[:28] + pages + data[32:92] + data[24:28] + data[96:]


def raw_input(data: bytes) -> bytes:
    return _fix_page_count(data) if data and data[-1] & 1 else data


def structured_input(data: bytes) -> bytes:
    """An export built from the fuzzer's choices, as bytes."""
    fdp = atheris.FuzzedDataProvider(data)
    legacy = fdp.ConsumeBool()
    b = NsysExportBuilder(legacy=legacy)
    pids = sorted({fdp.ConsumeIntInRange(1, 3) for _ in range(fdp.ConsumeIntInRange(1, 2))})
    threads = [(p, t) for p in pids for t in (1, 2)]
    for pid, tid in threads:
        b.thread(pid, tid, f"t{tid}")
    for pid in pids:
        b.process(pid, "proc")
        b.domain(1, "specnsys", pid=pid)

    def when() -> int:
        if fdp.ConsumeIntInRange(0, 7) == 0:
            return fdp.ConsumeIntInRange(-(2**63), 2**63 - 1)
        return fdp.ConsumeIntInRange(-100, 5000)

    def until(start: int) -> int | None:
        choice = fdp.ConsumeIntInRange(0, 9)
        if choice == 0:
            return None
        if choice == 1:
            return when()
        return max(-(2**63), min(2**63 - 1, start + fdp.ConsumeIntInRange(-50, 800)))

    for _ in range(fdp.ConsumeIntInRange(0, 40)):
        if fdp.remaining_bytes() == 0:
            break
        kind = fdp.ConsumeIntInRange(0, 6)
        pid, tid = threads[fdp.ConsumeIntInRange(0, len(threads) - 1)]
        start = when()
        name = PHASE_NAMES[fdp.ConsumeIntInRange(0, len(PHASE_NAMES) - 1)]
        corr = fdp.ConsumeIntInRange(0, 12)
        end = until(start)
        if kind in (0, 1):
            method = b.push_pop if kind == 0 else b.start_end
            method(start, end, name, pid=pid, tid=tid, domain_id=fdp.ConsumeIntInRange(0, 1))
        elif kind == 2:
            b.mark(
                start, name, pid=pid, tid=tid, domain_id=1, payload_int=fdp.ConsumeIntInRange(-3, 9)
            )
        elif kind == 3:
            b.runtime(
                start,
                start if end is None else end,
                "cudaLaunchKernel_v7000",
                corr,
                pid=pid,
                tid=tid,
            )
        else:
            end = start if end is None else end
            op = (b.kernel, b.memcpy, b.memset)[kind - 4]
            if op is b.kernel:
                b.kernel(start, end, name, corr, pid=pid)
            else:
                op(start, end, 64, corr, pid=pid)  # type: ignore[operator]
    path = WORK / "built.sqlite"
    b.write(path)
    return path.read_bytes()


MODE = "raw"


def test_one_input(data: bytes) -> None:
    content = structured_input(data) if MODE == "structured" else raw_input(data)
    TARGET.unlink(missing_ok=True)
    TARGET.write_bytes(content)
    analyze(TARGET, content)


def seed_corpus() -> Path:
    """A fresh corpus folder: the hostile corpus of the tests (raw) or short seeds."""
    folder = Path(tempfile.mkdtemp(prefix="specnsys-fuzz-corpus-"))
    if MODE == "structured":
        for i, seed in enumerate([b"", b"\x00" * 64, bytes(range(256)), b"\xff" * 128]):
            (folder / f"seed{i}").write_bytes(seed)
        return folder
    from tests.hostile_corpus import CASES

    made = WORK / "seeds"
    made.mkdir()
    for name, make in CASES.items():
        path = make(made)
        if path.is_file() and path.stat().st_size <= 256 * 1024:
            (folder / name).write_bytes(path.read_bytes())
    return folder


def main(argv: list[str]) -> None:
    global MODE
    args = list(argv[1:])
    if args[:1] == ["--mode"] and len(args) >= 2:
        MODE = args[1]
        del args[:2]
    if MODE not in ("raw", "structured"):
        raise SystemExit(f"unknown --mode {MODE!r} (raw or structured)")
    if not any(a.startswith("-artifact_prefix") for a in args):
        artifacts = REPO / "fuzz" / "artifacts"
        artifacts.mkdir(exist_ok=True)
        args.append(f"-artifact_prefix={artifacts}/{MODE}-")
    positional = [a for a in args if not a.startswith("-")]
    if not positional:
        args.append(str(seed_corpus()))
    os.environ.setdefault("SPECNSYS_NO_CACHE", "1")
    atheris.Setup([argv[0], *args], test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main(sys.argv)
