"""``specnsys collect`` (issue 21 items 1-2): many traces into one dataset, incrementally, on a
local process pool or Dask, with nothing lost when a trace or a worker fails."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from specnsys import api
from specnsys.metrics.analysis import AnalysisDocument
from specnsys.runset.collect import IN_A_STARTING_WORKER, collect
from specnsys.runset.dataset import HEADLINE_TYPES, NESTED_COLUMNS, scalar_columns
from specnsys.runset.labels import Labeler
from tests.conftest import REPO

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"
CHAT = ["baseline_chat_c4", "spec_chat_c4_k2", "spec_chat_c4_k4"]


def _copies(folder: Path, names: list[str] = CHAT) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for name in names:
        target = folder / f"{name}.sqlite"
        shutil.copyfile(SAMPLES / f"{name}.sqlite", target)
        out.append(target)
    return out


def _cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "specnsys", *args], capture_output=True, text=True,
        timeout=timeout,
    )  # fmt: skip


def _table(dataset: Path, table: str) -> pl.DataFrame:
    return pl.scan_parquet(dataset / table).collect().sort(pl.all())


def test_every_runs_row_equals_analyze_json_of_its_trace(tmp_path: Path) -> None:
    traces = _copies(tmp_path / "t")
    done = _cli("collect", str(tmp_path / "t"), "-o", str(tmp_path / "ds"), "--json")
    assert done.returncode == 0, done.stderr
    assert sorted(json.loads(done.stdout)["analysed"]) == sorted(map(str, traces))
    runs = _table(tmp_path / "ds", "runs")
    assert runs.height == len(traces)
    for row in runs.iter_rows(named=True):
        doc = api.analyze(row["trace"]).to_dict()
        assert json.loads(row["analysis_json"]) == json.loads(json.dumps(doc))
        for key in HEADLINE_TYPES:
            assert row[key] == doc.get(key), key
        for (outer, inner), (column, _) in NESTED_COLUMNS.items():
            nested = doc.get(outer)
            assert row[column] == (nested.get(inner) if isinstance(nested, dict) else None)
    phases = _table(tmp_path / "ds", "phases")
    steps = _table(tmp_path / "ds", "steps")
    for row in runs.iter_rows(named=True):
        doc = json.loads(row["analysis_json"])
        mine = phases.filter(pl.col("run_id") == row["run_id"])
        assert dict(zip(mine["phase"], mine["wall_ns"], strict=True)) == {
            name: r["wall_ns"] for name, r in doc["phases"].items()}
        assert int(mine["wall_ns"].sum()) == row["window_ns"]  # phases sum to the window
        own = steps.filter(pl.col("run_id") == row["run_id"])
        assert own.height == row["steps"]
        for part in ("verify", "forward", "draft"):
            if part in doc["phases"]:
                assert int(own[f"{part}_ns"].sum()) == doc["phases"][part]["wall_ns"]
        if row["mode"] == "spec":
            acc = doc["acceptance"]
            assert int(own["accepted"].sum()) == acc["accepted_total"]
            assert int(own["sequences"].sum()) == acc["sequence_steps"]


def test_the_schema_names_every_scalar_that_analyze_reports() -> None:
    """A new headline number of analyze must get a typed column (else it would only be in
    analysis_json): the list of columns is checked against analyze's JSON on the samples."""
    docs = [api.analyze(SAMPLES / f"{n}.sqlite").to_dict()
            for n in ("baseline_chat_c4", "spec_chat_c4_k4")]
    nested = {k for doc in docs for k, v in doc.items() if isinstance(v, (dict, list))}
    scalars = {k for doc in docs for k in doc} - nested
    # dicts where measured, null on these CPU captures
    nested_when_measured = {
        "bandwidth", "device_memory", "gpu_time", "top_kernels", "ranks", "window_dropped",
        "findings", "profiler_overhead",
    }
    missing = scalars - set(HEADLINE_TYPES) - nested_when_measured
    assert not missing, f"analyze reports {sorted(missing)}: add them to HEADLINE_TYPES"


def test_the_typed_document_is_what_analyze_reports_and_its_scalars_are_the_columns() -> None:
    """The dataset's headline columns are derived from the typed ``analyze --json`` document:
    its keys are to_dict()'s, in order, on a baseline and a speculative sample; its scalar
    keys are the columns, with their types; a scalar key added to a document is a column."""
    for name in ("baseline_chat_c4", "spec_chat_c4_k4"):
        doc = api.analyze(SAMPLES / f"{name}.sqlite").to_dict()
        assert list(doc) == list(AnalysisDocument.__annotations__)
    assert HEADLINE_TYPES["p"] == pl.Float64() and HEADLINE_TYPES["pid"] == pl.Int64()
    assert HEADLINE_TYPES["gpu"] == pl.Boolean() and HEADLINE_TYPES["mode"] == pl.String()
    assert "phases" not in HEADLINE_TYPES and "acceptance" not in HEADLINE_TYPES

    class Wider(AnalysisDocument):
        queue_wait_ns: int | None

    assert scalar_columns(Wider) == {**HEADLINE_TYPES, "queue_wait_ns": pl.Int64()}


def test_a_second_collect_analyses_only_new_or_changed_traces(tmp_path: Path) -> None:
    traces = _copies(tmp_path / "t")
    first = collect([tmp_path / "t"], tmp_path / "ds")
    assert len(first.analysed) == 3 and not first.unchanged
    again = collect([tmp_path / "t"], tmp_path / "ds")
    assert (again.analysed, sorted(again.unchanged)) == ([], sorted(map(str, traces)))
    # one trace replaced by another capture, one new trace
    shutil.copyfile(SAMPLES / "spec_chat_c4_k6.sqlite", traces[1])
    _copies(tmp_path / "t", ["spec_chat_c1_k4"])
    third = collect([tmp_path / "t"], tmp_path / "ds")
    assert sorted(third.analysed) == sorted(
        [str(traces[1]), str(tmp_path / "t" / "spec_chat_c1_k4.sqlite")])
    runs = _table(tmp_path / "ds", "runs")
    assert runs.height == 4
    replaced = runs.filter(pl.col("trace") == str(traces[1]))
    assert replaced["k"].to_list() == [6]  # the replaced trace's numbers, not the old ones
    # new labels reach the earlier runs' rows too (one schema for every partition)
    collect([tmp_path / "t"], tmp_path / "ds", labeler=Labeler(options=["commit=abc"]))
    assert set(_table(tmp_path / "ds", "runs")["label_commit"]) == {"abc"}


def test_a_dataset_of_an_older_version_takes_new_runs_and_a_collect_writes_only_those(
    tmp_path: Path,
) -> None:
    """The bundled sweep dataset was collected before analyze reported ``window_source``. A
    trace collected into it by this version used to give a runs partition with one column
    more than the others, and every scan of the table failed (``sweep``: exit 3, a Polars
    SchemaError). Now every partition has the union of the columns (older runs null there),
    and a later collect with the same columns rewrites only its own runs' partitions."""
    ds = tmp_path / "sweep"
    shutil.copytree(SAMPLES / "sweep", ds)
    old_runs = pl.scan_parquet(ds / "runs").collect()
    assert "window_source" not in old_runs.columns  # written by the older version
    trace = _copies(tmp_path / "t", ["spec_chat_c4_k4"])[0]
    assert _cli("collect", str(trace), "-o", str(ds)).returncode == 0
    swept = _cli("sweep", str(ds))
    assert swept.returncode == 0, swept.stderr
    runs = pl.scan_parquet(ds / "runs").collect()
    assert runs.height == old_runs.height + 1
    assert runs["window_source"].to_list().count("requests") == 1
    assert runs["window_source"].null_count() == old_runs.height

    def inodes() -> dict[str, int]:
        return {p.parent.name: p.stat().st_ino for p in (ds / "runs").glob("*/part-0.parquet")}

    before = inodes()
    _copies(tmp_path / "t2", ["spec_chat_c1_k4"])
    assert _cli("collect", str(tmp_path / "t2"), "-o", str(ds)).returncode == 0
    after = inodes()
    assert len(after) == len(before) + 1
    assert {k: after[k] for k in before} == before  # earlier partitions left as they were


def test_a_failing_trace_is_listed_and_the_others_land(tmp_path: Path) -> None:
    _copies(tmp_path / "t", ["baseline_chat_c4", "spec_chat_c4_k4"])
    broken = tmp_path / "t" / "broken.sqlite"
    broken.write_bytes(b"this is not an export" * 100)
    done = _cli("collect", str(tmp_path / "t"), "-o", str(tmp_path / "ds"), "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert len(doc["analysed"]) == 2 and list(doc["failed"]) == [str(broken)]
    assert f"specnsys: warning: {broken}: not collected: " in done.stderr
    assert "\n" not in doc["failed"][str(broken)]
    manifest = json.loads((tmp_path / "ds" / "_specnsys.json").read_text())
    assert str(broken) in manifest["failed"]
    assert _table(tmp_path / "ds", "runs").height == 2


def test_only_failures_is_exit_2_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "a.sqlite").write_bytes(b"nope" * 10)
    done = _cli("collect", str(tmp_path / "t"), "-o", str(tmp_path / "ds"))
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.startswith("specnsys: error: every trace failed") and (
        done.stderr.count("\n") == 1)
    # several: how many, the first one's reason once (its path was said twice), and where
    # the others' reasons are (only the first was said, and nothing said where the rest were)
    (tmp_path / "t" / "b.sqlite").write_bytes(b"")
    done = _cli("collect", str(tmp_path / "t"), "-o", str(tmp_path / "ds"))
    assert (done.returncode, done.stdout, done.stderr.count("\n")) == (2, "", 1), done.stderr
    a = tmp_path / "t" / "a.sqlite"
    assert f"every trace failed (2 traces); first: {a}: " in done.stderr, done.stderr
    assert done.stderr.count(str(a)) == 1, done.stderr
    assert f"each reason in {tmp_path / 'ds' / '_specnsys.json'}" in done.stderr, done.stderr
    failed = json.loads((tmp_path / "ds" / "_specnsys.json").read_text())["failed"]
    assert set(failed) == {str(a), str(tmp_path / "t" / "b.sqlite")}
    assert all(not reason.startswith(trace) for trace, reason in failed.items()), failed


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--label", "k"], "write it as name=value"),
        (["--label", "1k=2"], "is not a label name"),
        (["--pattern", "run"], "no {name} placeholder"),
        (["--workers", "0"], "workers must be at least 1 (1 to 256)"),
        (["--workers", "100000"], "workers must be at most 256 (1 to 256)"),
    ],
)
def test_bad_options_are_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    _copies(tmp_path / "t", ["baseline_chat_c4"])
    done = _cli("collect", str(tmp_path / "t"), "-o", str(tmp_path / "ds"), *args)
    assert (done.returncode, done.stdout) == (2, "")
    assert message in done.stderr and done.stderr.count("\n") == 1
    assert not (tmp_path / "ds").exists()


def test_labels_from_patterns_csv_and_options(tmp_path: Path) -> None:
    _copies(tmp_path / "t", ["baseline_chat_c4", "spec_chat_c4_k4"])
    labels = tmp_path / "labels.csv"
    labels.write_text("trace,model,repeat\nspec_chat_c4_k4.sqlite,tiny,2\n")
    collect(
        [tmp_path / "t"], tmp_path / "ds",
        labeler=Labeler(
            csv_path=labels, options=["gpu=cpu"],
            patterns=["{mode}_{workload}_c{concurrency}_k{k}", "{mode}_{workload}_c{concurrency}"],
        ),
    )  # fmt: skip
    runs = _table(tmp_path / "ds", "runs").sort("label_mode")
    cols = ["label_mode", "label_workload", "label_concurrency", "label_k", "label_model",
            "label_repeat", "label_gpu"]
    assert runs.select(cols).rows() == [
        ("baseline", "chat", "4", None, None, None, "cpu"),
        ("spec", "chat", "4", "4", "tiny", "2", "cpu"),
    ]


def test_sql_reads_a_dataset_read_only(tmp_path: Path) -> None:
    _copies(tmp_path / "t", ["baseline_chat_c4", "spec_chat_c4_k4"])
    collect([tmp_path / "t"], tmp_path / "ds")
    done = _cli("sql", str(tmp_path / "ds"), "SELECT mode, count(*) AS n FROM runs JOIN steps "
                "USING (run_id) GROUP BY mode ORDER BY mode", "--format", "csv")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["mode,n", "baseline,62", "spec,25"]
    before = sorted((p, p.stat().st_mtime_ns) for p in (tmp_path / "ds").rglob("*"))
    refused = _cli("sql", str(tmp_path / "ds"), f"COPY runs TO '{tmp_path / 'x.csv'}'")
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1
    assert sorted((p, p.stat().st_mtime_ns) for p in (tmp_path / "ds").rglob("*")) == before
    assert not (tmp_path / "x.csv").exists()


def test_the_dask_path_gives_the_same_dataset_as_the_pool(tmp_path: Path) -> None:
    pytest.importorskip("distributed")
    _copies(tmp_path / "t")
    collect([tmp_path / "t"], tmp_path / "pool", workers=2, use_cache=False)
    collect([tmp_path / "t"], tmp_path / "dask", workers=2, dask="local", use_cache=False)
    for table in ("runs", "phases", "steps", "requests"):
        assert_frame_equal(_table(tmp_path / "pool", table), _table(tmp_path / "dask", table))


def test_dask_local_does_not_want_port_8787(tmp_path: Path) -> None:
    """Two ``collect --dask local`` at once (or a Dask dashboard already running): each
    LocalCluster's scheduler serves its HTTP routes on a free local port, not Dask's default
    8787, so the second says nothing ("Port 8787 is already in use", a UserWarning, was
    printed by the second of two such runs in the test suite)."""
    pytest.importorskip("distributed")
    import socket
    import warnings

    _copies(tmp_path / "t", CHAT[:1])
    with socket.socket() as taken:
        taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            taken.bind(("", 8787))
        except OSError:
            pytest.skip("port 8787 is in use by another program")
        taken.listen()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            collect([tmp_path / "t"], tmp_path / "ds", workers=1, dask="local", use_cache=False)


def test_a_tcp_scheduler_started_here_gives_the_same_dataset_as_the_pool(tmp_path: Path) -> None:
    """``collect --dask tcp://HOST:PORT`` as a user runs it: the CLI is a client of a
    scheduler it did not start (here, two worker processes behind a tcp:// scheduler)."""
    distributed = pytest.importorskip("distributed")
    traces = _copies(tmp_path / "t")
    collect([tmp_path / "t"], tmp_path / "pool", workers=2, use_cache=False)
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
        scheduler_kwargs={"dashboard_address": "127.0.0.1:0"},
    ) as cluster:
        address = cluster.scheduler_address
        assert address.startswith("tcp://")
        done = _cli("--no-cache", "collect", str(tmp_path / "t"), "-o", str(tmp_path / "tcp"),
                    "--dask", address, "--json")  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert len(cluster.workers) == 2  # the client left the scheduler and its workers up
    assert sorted(json.loads(done.stdout)["analysed"]) == sorted(map(str, traces))
    for table in ("runs", "phases", "steps", "requests"):
        assert_frame_equal(_table(tmp_path / "pool", table), _table(tmp_path / "tcp", table))


def _children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                out.append(int(entry.name))
    return out


def _is_pool_worker(pid: int) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"spawn_main" in cmdline and b"resource_tracker" not in cmdline


def test_a_worker_killed_mid_trace_is_retried_or_reported_never_dropped(tmp_path: Path) -> None:
    traces = _copies(tmp_path / "t", CHAT * 1)
    for i in range(3):  # more traces than workers: the pool is busy when a worker dies
        for src in list(traces[:3]):
            extra = tmp_path / "t" / f"{src.stem}_r{i}.sqlite"
            shutil.copyfile(src, extra)
    total = len(list((tmp_path / "t").glob("*.sqlite")))
    proc = subprocess.Popen(
        [sys.executable, "-m", "specnsys", "--no-cache", "collect", str(tmp_path / "t"), "-o",
         str(tmp_path / "ds"), "--workers", "2", "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    killed = None
    try:
        deadline = time.monotonic() + 120
        while killed is None and time.monotonic() < deadline and proc.poll() is None:
            workers = [p for p in _children(proc.pid) if _is_pool_worker(p)]
            if workers:
                time.sleep(1.0)  # let it import and start a trace
                os.kill(workers[0], signal.SIGKILL)
                killed = workers[0]
            time.sleep(0.05)
        stdout, stderr = proc.communicate(timeout=300)
    finally:
        proc.kill()
    assert killed is not None, "no pool worker seen"
    assert proc.returncode == 0, stderr
    doc = json.loads(stdout)
    accounted = set(doc["analysed"]) | set(doc["failed"])
    assert len(accounted) == total  # every trace analysed or reported, none dropped
    assert _table(tmp_path / "ds", "runs").height == len(doc["analysed"])


def test_ctrl_c_ends_the_workers_at_once_and_keeps_the_dataset_consistent(
    tmp_path: Path,
) -> None:
    """SIGINT to collect (as a terminal's Ctrl-C, or a CI runner's cancel, to the parent only):
    exit 130 within seconds, not once every queued trace is done; none of its workers is left;
    what landed is in the manifest, and every table holds only those runs."""
    folder = tmp_path / "t"
    for i in range(40):
        _copies(folder / f"c{i:02d}", ["baseline_chat_c4"])
    proc = subprocess.Popen(
        [sys.executable, "-m", "specnsys", "--no-cache", "collect", str(folder), "-o",
         str(tmp_path / "ds"), "--workers", "2"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    workers: list[int] = []
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None and not workers:
            workers = [p for p in _children(proc.pid) if _is_pool_worker(p)]
            time.sleep(0.05)
        assert workers, "no pool worker seen"
        while time.monotonic() < deadline and not list((tmp_path / "ds").glob("*/run_id=*")):
            time.sleep(0.05)  # until a first run has landed, the workers busy with the next
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=120)
        took = time.monotonic() - sent
    finally:
        proc.kill()
    assert (proc.returncode, stderr) == (130, "specnsys: interrupted\n")
    assert took < 10, f"collect took {took:.1f} s to stop (40 traces were queued)"
    assert [p for p in workers if Path(f"/proc/{p}").exists()] == []
    manifest = json.loads((tmp_path / "ds" / "_specnsys.json").read_text())
    for table in ("runs", "phases", "steps", "requests"):
        found = {p.name[len("run_id="):] for p in (tmp_path / "ds" / table).glob("run_id=*")}
        assert found == set(manifest["runs"]), table
    assert 0 < len(manifest["runs"]) < 40


def test_an_interrupt_while_a_run_is_written_takes_effect_once_it_is_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C between a run's partitions (the race the test above lost about one time in six
    on two busy cores: its phases written, steps and requests not yet) used to drop the
    analysed run; now the interrupt is held until the run is recorded, then raised."""
    from specnsys.runset.collect import _version, analyse_trace
    from specnsys.runset.dataset import Dataset, Settings

    trace = _copies(tmp_path / "t", ["baseline_chat_c4"])[0]
    settings: Settings = {"rules": None, "pid": None, "specnsys": _version(),
                                "labels": {}, "use_cache": False}  # fmt: skip
    record = analyse_trace(str(trace), settings, {})
    written: list[str] = []
    original = Dataset._replace_partition

    def replace_then_interrupt(self: Dataset, table: str, run_id: str, frame: pl.DataFrame) -> None:
        original(self, table, run_id, frame)
        written.append(table)
        if len(written) == 1:
            os.kill(os.getpid(), signal.SIGINT)  # after the first of three partitions
            time.sleep(0.05)  # long enough for the handler to have run, were it not held

    monkeypatch.setattr(Dataset, "_replace_partition", replace_then_interrupt)
    store = Dataset(tmp_path / "ds")
    with pytest.raises(KeyboardInterrupt):
        store.write_run("0123456789abcdef", record)  # a run id: 16 hex digits
    assert written == ["phases", "steps", "requests"]
    assert list(store.manifest["runs"]) == ["0123456789abcdef"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored


def test_a_dataset_that_cannot_be_written_is_one_line_exit_2(tmp_path: Path) -> None:
    """A file where the dataset's folder should be, and a read-only dataset folder (as root,
    with the capabilities that bypass file modes dropped): one line, exit 2, nothing changed."""
    from tests.test_reliability_cache import _drop_dac_capabilities

    trace = _copies(tmp_path / "t", ["baseline_chat_c4"])[0]
    blocker = tmp_path / "afile"
    blocker.write_text("x")
    in_the_way = _cli("collect", str(trace), "-o", str(blocker / "ds"))
    assert (in_the_way.returncode, in_the_way.stdout) == (2, ""), in_the_way.stderr
    assert in_the_way.stderr.count("\n") == 1 and "is not a folder" in in_the_way.stderr
    assert blocker.read_text() == "x"
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    kw: dict[str, object] = {"preexec_fn": _drop_dac_capabilities} if os.geteuid() == 0 else {}
    try:
        done = subprocess.run(
            [sys.executable, "-m", "specnsys", "collect", str(trace), "-o", str(locked)],
            capture_output=True, text=True, timeout=300, **kw,  # type: ignore[call-overload]
        )  # fmt: skip
    finally:
        locked.chmod(0o755)
    assert (done.returncode, done.stdout) == (2, ""), done.stderr
    assert done.stderr.startswith("specnsys: error: ") and done.stderr.count("\n") == 1
    assert "cannot write the dataset" in done.stderr and list(locked.iterdir()) == []


def test_the_largest_traces_go_to_the_workers_first(tmp_path: Path) -> None:
    """Issue 35 item 3: a pool fed the largest traces first does not end on one big trace
    while the other workers idle. One worker analyses in the order it is fed: largest first,
    whatever the names say (ties keep the name order)."""
    folder = tmp_path / "t"
    folder.mkdir()
    sizes = {}
    for name, sample in (("a", "baseline_chat_c4"), ("b", "spec_chat_c4_k6"),
                         ("c", "baseline_chat_c1")):  # fmt: skip
        target = folder / f"{name}.sqlite"
        shutil.copyfile(SAMPLES / f"{sample}.sqlite", target)
        sizes[str(target.resolve())] = target.stat().st_size
    order: list[str] = []
    collect([folder], tmp_path / "ds", workers=1, progress=order.append)
    assert order == sorted(sizes, key=lambda t: -sizes[t])
    assert [Path(t).stem for t in order] == ["c", "a", "b"]


def _collect_with_fault(metric: str, tmp_path: Path) -> list[str]:
    """The command line of a 2-worker ``collect --json`` of *tmp_path*/t into *tmp_path*/ds,
    with the fault *metric* of tests/collect_faults.py registered (it runs in the workers)."""
    code = (
        "import sys; from specnsys.metrics import registry; "
        f"from tests.collect_faults import {metric}; "
        f"registry.register({metric}); from specnsys.cli.main import main; "
        "sys.exit(main(sys.argv[1:]))"
    )
    return [sys.executable, "-c", code, "--no-cache", "collect", str(tmp_path / "t"), "-o",
            str(tmp_path / "ds"), "--workers", "2", "--json"]  # fmt: skip


def test_a_worker_killed_while_handing_its_result_back_does_not_hang_collect(
    tmp_path: Path,
) -> None:
    """A worker SIGKILLed in the middle of writing its result into the pool's pipe (armed by a
    registered metric inside the worker: tests/collect_faults.py) left part of a message
    there, and the pool's manager thread waited for the rest forever: ``collect`` hung (seen
    once in a full test run, in the test above). The results now come back through files,
    and only a file's name, written whole, crosses the pipe: every trace is analysed, within
    seconds."""
    _copies(tmp_path / "t")
    proc = subprocess.Popen(
        _collect_with_fault("DIES_HANDING_BACK", tmp_path),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
        start_new_session=True,  # its own group: a hung pool's workers end with it below
    )  # fmt: skip
    try:
        stdout, stderr = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail("collect hung after a worker died handing its result back")
    assert proc.returncode == 0, stderr
    doc = json.loads(stdout)
    assert sorted(Path(t).stem for t in doc["analysed"]) == sorted(CHAT), doc
    assert doc["failed"] == {}, doc


def test_a_trace_whose_worker_dies_twice_is_reported_with_the_signal(tmp_path: Path) -> None:
    """A trace that kills its worker on every try (armed by a registered metric,
    tests/collect_faults.py) fails with the signal that ended the retry; the others land."""
    _copies(tmp_path / "t")
    done = subprocess.run(
        _collect_with_fault("DIES_ON_ONE", tmp_path),
        capture_output=True, text=True, cwd=REPO, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert sorted(Path(t).stem for t in doc["analysed"]) == sorted(set(CHAT) - {"spec_chat_c4_k2"})
    (reason,) = doc["failed"].values()
    assert reason == "its worker died twice: killed by SIGKILL (out of memory, or killed)"


@pytest.mark.parametrize("dask", [None, "local"])
def test_a_script_that_calls_collect_without_a_main_guard_gets_one_clear_error(
    tmp_path: Path, dask: str | None
) -> None:
    """Each pool worker starts by importing the calling script: one that calls collect() at
    its top level (no ``if __name__ == "__main__":``) made every worker fail at its start,
    and collect reported every trace as "died twice (killed, or out of memory)", each
    retry starting another worker that failed the same way (with ``--dask local``:
    distributed's "Nanny failed to start"). Now each worker fails at once with the cause,
    the first that exits with an error status stops collect with one error that names it,
    and no trace is noted as failed."""
    for name in CHAT:  # six traces: a retry per trace would start six more failing workers
        _copies(tmp_path / "t" / name, [name, *(n for n in CHAT if n != name)][:2])
    script = tmp_path / "unguarded.py"
    script.write_text(
        "from specnsys.runset.collect import collect\n"
        f"collect([{str(tmp_path / 't')!r}], {str(tmp_path / 'ds')!r}, workers=2, dask={dask!r})\n"
    )
    if dask:
        pytest.importorskip("distributed")
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    start = "--dask local: its workers failed to start" if dask else "a collect worker exited with status 1"
    assert last.startswith(f"specnsys.errors.UsageError: {start}"), last
    assert 'if __name__ == "__main__":' in last
    assert "out of memory" not in done.stderr
    assert "During handling" not in done.stderr  # the pool's own exception is not chained
    # each failing worker says why (the parent's error is the last one); the pool's workers
    # and the one retry, not a retry per trace
    assert 1 <= done.stderr.count(f"UsageError: {IN_A_STARTING_WORKER}") <= 4, done.stderr
    manifest = tmp_path / "ds" / "_specnsys.json"
    assert not manifest.exists() or json.loads(manifest.read_text())["failed"] == {}


def test_a_fifo_named_as_a_trace_fails_in_one_line_and_does_not_hang(tmp_path: Path) -> None:
    """A trace path named directly was fingerprinted by reading its first 64 KiB: a FIFO
    (nothing writing to it) blocked that read, and collect hung. It is now no regular file,
    a failed trace; the real one beside it lands."""
    (trace,) = _copies(tmp_path / "t", ["spec_chat_c4_k4"])
    fifo = tmp_path / "t" / "pipe.sqlite"
    os.mkfifo(fifo)
    done = subprocess.run(
        [sys.executable, "-m", "specnsys", "--no-cache", "collect", str(trace), str(fifo),
         "-o", str(tmp_path / "ds"), "--json"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["analysed"] == [str(trace.resolve())]
    # the reason without the path again (it is the key)
    assert doc["failed"] == {str(fifo.resolve()): "not a regular file"}


def test_collect_runs_where_no_temporary_folder_can_be_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The workers hand their results back through files in a temporary folder; where none
    can be made (here the temporary directory is a path below a regular file), they come
    through the pool's pipe as before, and every trace still lands."""
    traces = _copies(tmp_path / "t")
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    monkeypatch.setattr(tempfile, "tempdir", str(blocker / "tmp"))
    with pytest.raises(OSError):
        tempfile.mkdtemp()
    result = collect([tmp_path / "t"], tmp_path / "ds", workers=2)
    assert sorted(result.analysed) == sorted(map(str, traces)) and not result.failed


def test_the_hand_back_folder_is_removed_and_one_a_killed_collect_left_is_swept(
    tmp_path: Path,
) -> None:
    """The records' folder (named after its collect's process) is gone when collect ends;
    one that a SIGKILLed collect left behind, records inside, is removed by the next run
    (the sweep of every analysis's scratch folders). Another user's, or a live process's,
    would be left alone (``cache.sweep_stale``)."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                           capture_output=True, text=True, check=True)  # fmt: skip
    stale = scratch / f"specnsys-collect-{int(ended.stdout)}-left"
    stale.mkdir()
    (stale / "record.pickle").write_bytes(b"\0" * 4096)
    _copies(tmp_path / "t")
    done = subprocess.run(
        [sys.executable, "-m", "specnsys", "--no-cache", "collect", str(tmp_path / "t"), "-o",
         str(tmp_path / "ds"), "--workers", "2", "--json"],
        capture_output=True, text=True, timeout=300, env={**os.environ, "TMPDIR": str(scratch)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert len(json.loads(done.stdout)["analysed"]) == len(CHAT)
    assert [p.name for p in scratch.iterdir() if p.name.startswith("specnsys-collect-")] == []


def test_a_folder_yields_its_traces_whatever_the_case_of_their_suffix(tmp_path: Path) -> None:
    """A copied or Windows-named ``Run.SQLITE`` in a folder is a trace, not silently passed
    over (it is read when named alone); a report and its export still count once."""
    from specnsys.runset.collect import find_traces

    for name in ("a.sqlite", "B.SQLITE", "c.Nsys-Rep", "c.SQLite", "d.NSYS-REP", "notes.txt"):
        (tmp_path / name).write_bytes(b"")
    found = find_traces([tmp_path])
    assert [p.name for p in found] == ["B.SQLITE", "a.sqlite", "c.SQLite", "d.NSYS-REP"]
