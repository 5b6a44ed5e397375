"""``specnsys export --format perfetto``: the timeline as Chrome trace-event JSON.

On built exports with GPU work: the phase tracks add up, by the rounding rule the document
states, to exactly what ``phases`` reports (whole window and ``--window``); every track's
slices nest; GPU ops carry the phase that launched them; steps and counters match the steps.
On the real sample captures: the same totals, and the file opens in speedscope, a trace-event
viewer that is not ours, run in headless Chromium (its importer warns on the console about any
slice that crosses another on its track: the test proves it does). Bad input is one line,
exit 2; ``--max-events`` cuts with a warning.
"""

from __future__ import annotations

import base64
import errno
import gzip
import io
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

import specnsys
from specnsys.api import Export
from specnsys.cli.main import main
from specnsys.testing.builder import NsysExportBuilder
from tests.conftest import SAMPLE_TRACES, json_doc
from tests.test_attribution import _traces, spec_builder

pytestmark = pytest.mark.usefixtures("shared_cache")  # the samples built once (conftest)

GPU_PID = 1 << 30  # the export's GPU processes are numbered from here
STEPS = 4


def _gpu_trace(path: Path) -> Path:
    """A speculative loop with GPU work: a prefill, then STEPS decode steps of draft, verify
    (its kernel on another stream overlapping the draft's: shared time), sample (a copy), kv;
    acceptance and tokens marks; a default-domain range crossing draft and verify; a kernel
    whose launch is not in the trace."""
    b = NsysExportBuilder()
    b.process(1, "python3")
    b.thread(1, 1, "main")
    b.domain(1, "specnsys", pid=1, tid=1)

    def pp(s: int, e: int | None, text: str, domain: int = 1) -> None:
        b.push_pop(s, e, text, pid=1, tid=1, domain_id=domain)

    corr = iter(range(1, 1000))

    def kernel(launch: int, s: int, e: int, name: str, stream: int = 7) -> None:
        c = next(corr)
        b.runtime(launch, launch + 5, "cudaLaunchKernel", c, pid=1, tid=1)
        b.kernel(s, e, name, c, pid=1, stream=stream)

    b.start_end(0, 1000 + STEPS * 2000, "request", pid=1, tid=1, domain_id=1)
    pp(100, 1000, "prefill")
    kernel(200, 300, 900, "prefill_k")
    for i in range(STEPS):
        t = 1000 + i * 2000
        pp(t, t + 2000, "decode")
        pp(t, t + 800, "draft")
        kernel(t + 10, t + 50, t + 700, f"draft_k{i}")
        pp(t + 800, t + 1500, "verify")
        kernel(t + 810, t + 600, t + 1400, f"verify_k{i}", stream=8)
        pp(t + 700, t + 900, "crossing", domain=0)  # another domain: crosses draft's end
        pp(t + 1500, t + 1800, "sample")
        c = next(corr)
        b.runtime(t + 1510, t + 1520, "cudaMemcpyAsync", c, pid=1, tid=1)
        b.memcpy(t + 1550, t + 1600, 64, c, pid=1, stream=7)
        b.mark(t + 1700, "proposed", pid=1, tid=1, domain_id=1, payload_int=4)
        b.mark(t + 1701, "accepted", pid=1, tid=1, domain_id=1, payload_int=i)
        b.mark(t + 1790, "tokens", pid=1, tid=1, domain_id=1, payload_int=i + 1)
        pp(t + 1800, t + 1900, "kv")
    b.kernel(8500, 8600, "orphan_k", 999, pid=1, stream=9)  # no launching call
    return b.write(path)


def _export(path: Path, **kw: Any) -> dict[str, Any]:
    return json_doc(specnsys.export(path, **kw).to_dict())


def _tracks(doc: dict[str, Any]) -> dict[tuple[int, int], list[dict[str, Any]]]:
    """Per track, its slices (``name, cat, args, s, e``: ns from the window start) from its
    ``B``/``E`` events read in file order as a viewer does: every ``E`` must end the slice
    on top of the track's stack (same name and args: no slice crosses another), no event goes
    back in time, and every slice ends."""
    stacks: dict[tuple[int, int], list[dict[str, Any]]] = defaultdict(list)
    last: dict[tuple[int, int], float] = {}
    tracks: dict[tuple[int, int], list[dict[str, Any]]] = defaultdict(list)
    for e in doc["traceEvents"]:
        assert e["ph"] != "X", e  # slices are begin/end pairs
        if e["ph"] not in ("B", "E"):
            continue
        key = (e["pid"], e["tid"])
        assert e["ts"] >= last.get(key, 0.0), (key, e)
        last[key] = e["ts"]
        if e["ph"] == "B":
            stacks[key].append(e)
            continue
        assert stacks[key], (key, e)
        top = stacks[key].pop()
        assert (top["name"], top.get("args")) == (e["name"], e.get("args")), (key, top, e)
        tracks[key].append({"name": top["name"], "cat": top.get("cat"), "args": top.get("args"),
                            "cname": top.get("cname"), "pid": key[0], "tid": key[1],
                            "s": round(top["ts"] * 1000), "e": round(e["ts"] * 1000)})  # fmt: skip
    assert not any(stacks.values()), "a slice never ends"
    return tracks


def _all_slices(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return sorted((x for t in _tracks(doc).values() for x in t), key=lambda x: (x["s"], -x["e"]))


def _check_nesting(doc: dict[str, Any]) -> None:
    """No negative duration, nothing outside the exported span, and on every track each
    slice inside the one it starts in or after it (checked in :func:`_tracks`)."""
    span = doc["otherData"]["export_end_ns"] - doc["otherData"]["window_start_ns"]
    for e in doc["traceEvents"]:
        if "ts" in e:
            assert 0 <= round(e["ts"] * 1000) <= span, e
    for key, slices in _tracks(doc).items():
        for x in slices:
            assert 0 <= x["s"] < x["e"] <= span, (key, x)


def _phase_totals(doc: dict[str, Any]) -> dict[str, int]:
    """The document's own rounding rule, written out here: per phase sum(ns / sharing)
    exactly, then largest remainder (ties in the order of otherData.phase_wall_ns)."""
    order = list(doc["otherData"]["phase_wall_ns"])
    window = doc["otherData"]["export_end_ns"] - doc["otherData"]["window_start_ns"]
    exact = {p: Fraction(0) for p in order}
    for x in _all_slices(doc):
        if x["cat"] == "phase":
            exact[x["args"]["phase"]] += Fraction(x["e"] - x["s"], x["args"]["sharing"])
    floors = {p: int(v) for p, v in exact.items()}
    ranked = sorted(order, key=lambda p: (-(exact[p] - floors[p]), order.index(p)))
    for p in ranked[: window - sum(floors.values())]:
        floors[p] += 1
    return floors


def _phases_walls(path: Path, **kw: Any) -> dict[str, int]:
    doc = specnsys.phases(path, **kw).to_dict()
    return {name: row["wall_ns"] for name, row in doc["phases"].items()}


@pytest.fixture(scope="module")
def gpu_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _gpu_trace(tmp_path_factory.mktemp("gpu") / "spec_gpu.sqlite")


@pytest.mark.parametrize("window", [None, "steps:1-2", "0.0025:0.0062"])
def test_phase_totals_equal_phases_exactly_and_tracks_nest(gpu_trace: Path, window: str) -> None:
    doc = _export(gpu_trace, window=window)
    walls = _phases_walls(gpu_trace, window=window)
    assert doc["otherData"]["phase_wall_ns"] == walls
    assert _phase_totals(doc) == walls
    assert (
        sum(walls.values())
        == doc["otherData"]["window_end_ns"] - doc["otherData"]["window_start_ns"]
    )
    # the draft and verify kernels overlap on two streams: some time is shared by two phases
    assert {x["args"]["sharing"] for x in _all_slices(doc) if x["cat"] == "phase"} == {1, 2}
    _check_nesting(doc)


def test_gpu_ops_carry_their_launch_phase_on_a_track_per_stream(gpu_trace: Path) -> None:
    doc = _export(gpu_trace)
    ops = [x for x in _all_slices(doc) if x["pid"] >= GPU_PID]
    expected = {"prefill_k": "prefill", "orphan_k": "unattributed_gpu"}
    for i in range(STEPS):
        expected |= {f"draft_k{i}": "draft", f"verify_k{i}": "verify"}
    by_name = {e["name"]: e for e in ops if e["args"]["kind"] == "kernel"}
    assert {n: e["args"]["phase"] for n, e in by_name.items()} == expected
    assert all(e["cat"] == e["args"]["phase"] and e["cname"] for e in ops)
    copies = [e for e in ops if e["args"]["kind"] == "memcpy"]
    assert len(copies) == STEPS and {e["args"]["phase"] for e in copies} == {"sample"}
    names = {
        (e["pid"], e["tid"]): e["args"]["name"]
        for e in doc["traceEvents"]
        if e["ph"] == "M" and e["name"] == "thread_name"
    }
    assert {names[(e["pid"], e["tid"])] for e in ops} == {"stream 7", "stream 8", "stream 9"}
    assert {e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "process_name"} == {
        "python3 (pid 1)", "GPU 0",
    }  # fmt: skip


def test_driver_thread_ranges_steps_counters_and_track_order(gpu_trace: Path) -> None:
    doc = _export(gpu_trace)
    events = doc["traceEvents"]
    meta = {(e["name"], e["pid"], e["tid"]): e["args"] for e in events if e["ph"] == "M"}
    thread_names = {k[1:]: v["name"] for k, v in meta.items() if k[0] == "thread_name"}
    sort = {k[1:]: v["sort_index"] for k, v in meta.items() if k[0] == "thread_sort_index"}
    main_track = next(k for k, v in thread_names.items() if v == "main")
    phase_tracks = [k for k, v in thread_names.items() if v.startswith("phase: ")]
    assert all(sort[k] < sort[main_track] for k in phase_tracks)  # phases above the thread
    ranges = _tracks(doc)[main_track]
    assert sum(e["name"] == "decode" for e in ranges) == STEPS
    assert sum(e["name"] == "draft" for e in ranges) == STEPS
    # the range of another domain that crosses draft's end is on a lane of its own
    crossing = [x for x in _all_slices(doc) if x["name"] == "crossing"]
    assert len(crossing) == STEPS and all(e["tid"] != main_track[1] for e in crossing)
    assert thread_names[(1, crossing[0]["tid"])] == "main (NVTX lane 1)"
    marks = [e for e in events if e["ph"] == "i"]
    assert [e["name"] for e in marks] == [f"step {i}" for i in range(STEPS)]
    assert [round(e["ts"] * 1000) for e in marks] == [1000 + i * 2000 for i in range(STEPS)]
    accepted = [e["args"]["accepted"] for e in events if e.get("name") == "accepted drafts"]
    assert accepted == [*range(STEPS), 0]  # each step's, then 0 after the last
    tokens = [e["args"]["tokens"] for e in events if e.get("name") == "output tokens"]
    assert tokens == [*range(1, STEPS + 1), 0]
    busy = [e["args"]["busy"] for e in events if e.get("name") == "GPU busy"]
    # per step: draft kernel 50..700, verify 600..1400, copy 1550..1600 of 2000 ns
    # (the last step also runs the kernel whose launch is missing, 8500..8600)
    assert busy[:-1] == [pytest.approx(x / 2000) for x in [1400] * (STEPS - 1) + [1450]]


def test_max_events_cuts_a_prefix_and_warns_on_stderr(
    gpu_trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "cut.json"
    full = len(_export(gpu_trace)["traceEvents"])
    assert main(["export", str(gpu_trace), "-o", str(out), "--max-events", "60"]) == 0
    err = [line for line in capsys.readouterr().err.splitlines() if "--max-events" in line]
    assert (
        len(err) == 1 and err[0].startswith("specnsys: warning: ") and "--max-events 60" in err[0]
    )
    assert "dropped" in err[0] and "ms of" in err[0]
    doc = json.loads(out.read_text())
    assert full > 60 >= len(doc["traceEvents"])
    dropped = doc["otherData"]["dropped"]
    assert dropped["max_events"] < 60 and dropped["events"] + 0 > dropped["kept_events"]
    assert doc["otherData"]["export_end_ns"] < doc["otherData"]["window_end_ns"]
    _check_nesting(doc)
    # without a cut, no warning
    assert main(["export", str(gpu_trace), "-o", str(out)]) == 0
    assert "--max-events" not in capsys.readouterr().err
    assert json.loads(out.read_text())["otherData"]["dropped"] is None


def test_gzip_and_stdout_hold_the_same_document(
    gpu_trace: Path, tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    plain, packed = tmp_path / "t.json", tmp_path / "t.json.gz"
    assert main(["export", str(gpu_trace), "-o", str(plain)]) == 0
    assert main(["export", str(gpu_trace), "-o", str(packed)]) == 0
    capsysbinary.readouterr()
    assert main(["export", str(gpu_trace), "-o", "-"]) == 0
    stdout = capsysbinary.readouterr().out
    doc = json.loads(plain.read_bytes())
    assert json.loads(gzip.decompress(packed.read_bytes())) == doc
    assert json.loads(stdout) == doc


def test_bad_input_is_one_line_and_exit_2(
    gpu_trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = str(tmp_path / "x.json")
    cases = {
        "missing": ["export", str(tmp_path / "missing.sqlite"), "-o", out],
        "format": ["export", str(gpu_trace), "--format", "svg", "-o", out],
        "window": ["export", str(gpu_trace), "--window", "100000:200000", "-o", out],
        "steps": ["export", str(gpu_trace), "--window", "steps:7-9", "-o", out],
        "suffix": ["export", str(gpu_trace), "-o", str(tmp_path / "x.txt")],
        "gz": ["export", str(gpu_trace), "-o", str(tmp_path / "x.tar.gz")],
        "folder": ["export", str(gpu_trace), "-o", str(tmp_path / "no" / "x.json")],
        "events": ["export", str(gpu_trace), "-o", out, "--max-events", "0"],
        "pid": ["export", str(gpu_trace), "--pid", "424242", "-o", out],
    }
    for what, argv in cases.items():
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse's usage errors
            code = exc.code  # type: ignore[assignment]
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2, (what, err)
        assert len(err) == 1 and err[0].startswith("specnsys: error: "), (what, err)
        assert "Traceback" not in err[0]
    assert not Path(out).exists()


#: Two slices of one track that partially overlap: what neither check may let through.
CROSSING = {"traceEvents": [
    {"ph": "B", "name": "a", "pid": 1, "tid": 1, "ts": 0},
    {"ph": "B", "name": "b", "pid": 1, "tid": 1, "ts": 5},
    {"ph": "E", "name": "a", "pid": 1, "tid": 1, "ts": 10},
    {"ph": "E", "name": "b", "pid": 1, "tid": 1, "ts": 15},
]}  # fmt: skip


def test_the_nesting_check_can_fail() -> None:
    crossing = CROSSING
    with pytest.raises(AssertionError):
        _tracks(crossing)
    with pytest.raises(AssertionError):  # an end that goes back in time
        _tracks(
            {"traceEvents": [crossing["traceEvents"][1], {**crossing["traceEvents"][3], "ts": 4}]}
        )


@pytest.mark.slow
@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(spec=_traces())
def test_property_export_totals_are_the_breakdown_and_tracks_nest(
    tmp_path: Path, spec: dict
) -> None:
    path = spec_builder(spec).write(tmp_path / "p.sqlite")
    try:
        walls = _phases_walls(path, pid=1)
    except specnsys.BadInputError:  # nothing to attribute: nothing to export either
        with pytest.raises(specnsys.BadInputError):
            specnsys.export(path, pid=1)
        return
    doc = _export(path, pid=1)
    assert _phase_totals(doc) == walls
    _check_nesting(doc)


SAMPLES = sorted(SAMPLE_TRACES.glob("*.sqlite"))


def _encoded_by_event(export: Export) -> bytes:
    """The document as the dict of every event encodes it, one ``json`` call an event."""
    from specnsys.render.perfetto import _COMPACT, other_data, render_events

    events = ",".join(_COMPACT.encode(e) for e in render_events(export.data))
    head = _COMPACT.encode(other_data(export.data, export.path))
    return f'{{"displayTimeUnit":"ns","otherData":{head},"traceEvents":[{events}]}}\n'.encode()


@pytest.mark.parametrize("case", ["gpu", "names", "names_few_kept", "sample", "sample_window"])
def test_the_written_bytes_are_each_events_encoding(
    gpu_trace: Path, tmp_path: Path, case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer encodes a slice's fields once per key (name, phase, sharing, stream) and
    appends ``ph`` and ``ts``; the bytes must be those of encoding each event whole: shared
    slices, crossing lanes, a launch-less kernel, names that JSON escapes (with two encoded
    keys kept at a time too), a sample capture whole and cut to steps."""
    if case == "names_few_kept":
        from specnsys.render import perfetto

        monkeypatch.setattr(perfetto, "_KEYS_KEPT", 2)
    if case.startswith("names"):
        b = NsysExportBuilder()
        b.process(1, "python3")
        b.thread(1, 1, "main")
        b.domain(1, "specnsys", pid=1, tid=1)
        b.start_end(0, 5000, "request", pid=1, tid=1, domain_id=1)
        b.push_pop(0, 5000, "decode", pid=1, tid=1, domain_id=1)
        b.push_pop(100, 2000, 'draft "q"\\ \u00e9\u2603\n', pid=1, tid=1, domain_id=0)
        for c, name in enumerate(['k"1', "k\\2", "\u00fcber\t", "k\u0001"], start=1):
            b.runtime(100 * c, 100 * c + 5, "cudaLaunchKernel", c, pid=1, tid=1)
            b.kernel(100 * c + 10, 100 * c + 300, name, c, pid=1, stream=7)
        path = b.write(tmp_path / "names.sqlite")
    else:
        path = gpu_trace if case == "gpu" else SAMPLE_TRACES / "spec_chat_c4_k4.sqlite"
    export = specnsys.export(path, window="steps:2-5" if case == "sample_window" else None)
    handle = io.BytesIO()
    count = export.write(handle)
    expected = _encoded_by_event(export)
    assert handle.getvalue() == expected
    assert count == len(json.loads(expected)["traceEvents"]) > 10


def _writer_threads() -> list[str]:
    import threading

    return [t.name for t in threading.enumerate() if t.name == "specnsys-export-writer"]


def test_gzip_is_written_on_a_thread_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """With gzip the deflate runs on a writer thread: small chunks and a queue of one (the
    encoding always waiting on the writer) decompress to the plain document's bytes, and the
    thread is gone when the call returns."""
    from specnsys.render import perfetto

    export = specnsys.export(SAMPLE_TRACES / "spec_chat_c4_k4.sqlite")
    plain = io.BytesIO()
    export.write(plain)
    monkeypatch.setattr(perfetto, "_CHUNK_EVENTS", 7)
    monkeypatch.setattr(perfetto, "_QUEUED", 1)
    zipped = io.BytesIO()
    count = export.write(zipped, compress=True)
    assert gzip.decompress(zipped.getvalue()) == plain.getvalue()
    assert count == len(json.loads(plain.getvalue())["traceEvents"]) > 7 * 3
    assert _writer_threads() == []


class _FullAfter(io.BytesIO):
    """A file that takes *room* bytes, then fails as a full disk does."""

    def __init__(self, room: int) -> None:
        super().__init__()
        self.room = room

    def write(self, data: Any) -> int:
        if self.tell() + len(data) > self.room:
            raise OSError(errno.ENOSPC, "No space left on device")
        return super().write(data)


@pytest.mark.parametrize("failure", ["full_disk", "interrupt"])
def test_a_failed_gzip_write_is_raised_and_the_writer_stops(
    monkeypatch: pytest.MonkeyPatch, failure: str
) -> None:
    """A full disk under the writer thread is raised to the caller (the CLI's one line, exit
    2); a Ctrl-C while events are encoded stops the writer too: no thread is left writing to a
    file the caller then removes."""
    from specnsys.render import perfetto

    export = specnsys.export(SAMPLE_TRACES / "spec_chat_c4_k4.sqlite")
    monkeypatch.setattr(perfetto, "_CHUNK_EVENTS", 5)
    monkeypatch.setattr(perfetto, "_QUEUED", 1)
    if failure == "full_disk":
        with pytest.raises(OSError, match="No space left"):
            export.write(_FullAfter(200), compress=True)
    else:
        encoded = perfetto._encoded_events

        def interrupted(data: Any) -> Iterator[str]:
            for i, event in enumerate(encoded(data)):
                if i == 40:
                    raise KeyboardInterrupt
                yield event

        monkeypatch.setattr(perfetto, "_encoded_events", interrupted)
        with pytest.raises(KeyboardInterrupt):
            export.write(io.BytesIO(), compress=True)
    assert _writer_threads() == []


def test_export_to_a_full_disk_gzip_is_one_line_exit_2(tmp_path: Path) -> None:
    """``-o x.json.gz`` onto a full disk (a symlink to /dev/full): one line, exit 2."""
    (tmp_path / "full.json.gz").symlink_to("/dev/full")
    done = subprocess.run(
        [sys.executable, "-m", "specnsys", "--no-cache", "export", "--format", "perfetto",
         str(SAMPLE_TRACES / "spec_chat_c4_k4.sqlite"), "-o", str(tmp_path / "full.json.gz")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.splitlines()
    assert "cannot write to" in line and "No space left on device" in line


def test_a_sample_capture_exports_what_phases_reports() -> None:
    trace = SAMPLE_TRACES / "spec_chat_c4_k4.sqlite"
    doc = _export(trace)
    assert _phase_totals(doc) == _phases_walls(trace)
    _check_nesting(doc)
    assert sum(e["ph"] == "i" for e in doc["traceEvents"]) > 10


@pytest.mark.slow
@pytest.mark.parametrize("trace", SAMPLES, ids=[p.stem for p in SAMPLES])
def test_every_sample_capture_exports_what_phases_reports(trace: Path) -> None:
    for window in (None, "auto"):
        doc = _export(trace, window=window)
        assert _phase_totals(doc) == _phases_walls(trace, window=window)
        _check_nesting(doc)


# -- a consumer that is not ours: speedscope in headless Chromium ------------------------------

SPEEDSCOPE_VERSION = "1.25.0"


def find_speedscope() -> Path | None:
    """speedscope's offline page: ``$SPECNSYS_SPEEDSCOPE``, else the copy ``.ci/run`` unpacks
    from npm (``npm pack speedscope``) into ``.ci/speedscope``."""
    forced = os.environ.get("SPECNSYS_SPEEDSCOPE")
    page = (
        Path(forced)
        if forced
        else Path(__file__).resolve().parents[1] / ".ci/speedscope/package/dist/release/index.html"
    )
    return page if page.is_file() else None


@pytest.fixture(scope="module")
def viewer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from tests.test_html_report_browser import Chromium, find_chromium

    binary, page = find_chromium(), find_speedscope()
    if binary is None:
        pytest.skip("Chromium is not installed (apt-get install chromium); .ci/run installs it")
    if page is None:
        pytest.skip(f"speedscope {SPEEDSCOPE_VERSION} is not unpacked in .ci/speedscope (.ci/run)")
    browser = Chromium(binary, tmp_path_factory.mktemp("speedscope-profile"))
    try:
        yield browser, page
    finally:
        browser.close()


def _open_in_speedscope(viewer: Any, name: str, data: bytes) -> dict[str, Any]:
    """Load *data* as speedscope's command line does (a script that hands it the file),
    wait for it to be imported; its title, toolbar text and console problems."""
    browser, page = viewer
    script = Path(tempfile.mkdtemp()) / "load.js"
    b64 = base64.b64encode(data).decode()
    script.write_text(f"speedscope.loadFileFromBase64({json.dumps(name)}, {json.dumps(b64)})")
    browser.events.clear()
    browser.open(f"{page.as_uri()}?{name}#localProfilePath={script}")
    deadline = time.monotonic() + 30
    while browser.evaluate("document.title") == "speedscope" and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(0.3)  # the flame chart draws after the title changes
    problems = [
        p for p in browser.problems()
        if p.startswith(("console.", "exception:"))  # not the browser's own WebGL notes
    ]  # fmt: skip
    return {
        "title": browser.evaluate("document.title"),
        "toolbar": browser.evaluate("document.body.innerText"),
        "problems": problems,
    }


@pytest.mark.slow
def test_exports_load_in_speedscope_without_a_warning(viewer: Any, gpu_trace: Path) -> None:
    for trace in (SAMPLE_TRACES / "spec_chat_c4_k4.sqlite", gpu_trace):
        doc = _export(trace)
        seen = _open_in_speedscope(viewer, f"{trace.stem}.json", json.dumps(doc).encode())
        assert seen["title"] == f"{trace.stem}.json - speedscope", seen
        assert seen["problems"] == [], seen
        # one profile per track with slices: speedscope found every track
        assert f"(1/{len(_tracks(doc))})" in seen["toolbar"], seen


@pytest.mark.slow
def test_speedscope_warns_about_slices_that_cross(viewer: Any) -> None:
    """The check above has teeth: two slices that partially overlap on one track are warned
    about on the console."""
    crossing = CROSSING
    seen = _open_in_speedscope(viewer, "crossing.json", json.dumps(crossing).encode())
    assert seen["title"] == "crossing.json - speedscope"
    assert any("Tried to end" in p for p in seen["problems"]), seen


def test_stdout_without_a_binary_buffer_gets_the_same_document(tmp_path: Path) -> None:
    """``-o -`` into a text stream that has no ``.buffer`` (a notebook's or a test driver's
    captured stdout) used to end in an internal error (exit 3); it writes the same JSON."""
    import contextlib
    import io

    from specnsys.cli.main import main as cli_main

    trace = str(SAMPLE_TRACES / "spec_chat_c4_k4.sqlite")
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        status = cli_main(["export", trace, "--format", "perfetto", "-o", "-"])
    assert status == 0
    out = tmp_path / "e.json"
    assert cli_main(["export", trace, "--format", "perfetto", "-o", str(out)]) == 0
    assert json.loads(text.getvalue()) == json.loads(out.read_text())
