"""Cache safety: never stale, safe under concurrent use, optional when it cannot be written.

Everything here uses real files, real subprocesses and real file-system conditions (a read-only
mount, a full tmpfs, a file-size limit); where the machine cannot create the condition the test
is skipped with the reason, never simulated.
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import shutil
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import specnsys
from specnsys.ingest.input_file import FINGERPRINT_BYTES
from specnsys.testing import NsysExportBuilder
from tests.conftest import sha256
from tests.hostile_corpus import good_loop


def _export(path: Path, extra_ns: int) -> Path:
    """3000 steps; kernels 1400..1599 last *extra_ns* longer. Rows are laid out so that those
    kernels sit in the middle of the file, far from its first and last 64 KiB."""
    b = NsysExportBuilder()
    b.thread(1, 1, "main")
    for i in range(3000):
        b.push_pop(i * 100, i * 100 + 50, "forward")
    for i in range(3000):
        b.kernel(i * 100 + 10, i * 100 + 20 + (extra_ns if 1400 <= i < 1600 else 0), "k", i)
    for i in range(3000):
        b.runtime(i * 100 + 1, i * 100 + 2, "cudaLaunchKernel", i)
    return b.write(path)


def _kernel_ns(path: Path) -> tuple[bool, int]:
    with specnsys.open(path) as t:
        return t.from_cache, t.sql("SELECT sum(duration)::BIGINT FROM kernels").fetchall()[0][0]


def test_rewrite_keeping_size_mtime_and_both_ends_is_not_stale(tmp_path: Path) -> None:
    """The hardest rewrite for a cheap key: same path, same size, mtime set back with
    os.utime, identical first and last 64 KiB, only middle bytes differ."""
    old = _export(tmp_path / "old.sqlite", 0).read_bytes()
    new = _export(tmp_path / "new.sqlite", 7).read_bytes()
    k = FINGERPRINT_BYTES
    assert len(old) == len(new) > 2 * k and old != new
    assert old[:k] == new[:k] and old[-k:] == new[-k:]  # the case is really the hard one

    path = tmp_path / "trace.sqlite"
    path.write_bytes(old)
    assert _kernel_ns(path) == (False, 30_000)
    assert _kernel_ns(path) == (True, 30_000)
    st = path.stat()
    with path.open("r+b") as handle:  # in place: same inode
        handle.write(new)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (path.stat().st_size, path.stat().st_mtime_ns) == (st.st_size, st.st_mtime_ns)
    assert _kernel_ns(path) == (False, 30_000 + 200 * 7)


def test_replacement_by_rename_with_restored_mtime_is_not_stale(tmp_path: Path) -> None:
    path = _export(tmp_path / "trace.sqlite", 0)
    assert _kernel_ns(path)[1] == 30_000
    st = path.stat()
    fresh = _export(tmp_path / "fresh.sqlite", 3)
    os.utime(fresh, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(fresh, path)
    assert _kernel_ns(path) == (False, 30_000 + 200 * 3)


def test_untouched_export_reuses_its_entry(tmp_path: Path) -> None:
    """The key is not so strict that it never hits: reading the file keeps it valid."""
    path = good_loop(tmp_path)
    assert not _kernel_ns(path)[0]
    path.read_bytes()
    assert _kernel_ns(path)[0]


_BARRIER_RUN = """
import json, sys, time
from pathlib import Path
from specnsys.cli.main import main
go = Path(sys.argv[1])
Path(sys.argv[3]).touch()  # imported: ready at the barrier
while not go.exists():
    time.sleep(0.005)
started = time.time()
status = main(["sql", sys.argv[2], "SELECT count(*) AS n FROM kernels", "--format", "json"])
print(json.dumps({"started": started, "ended": time.time(), "status": status}))
"""


def test_processes_opening_one_trace_at_once_all_succeed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three real processes ingest one cold trace at the same instant: all succeed with the
    same answer, exactly one entry remains, no temporary folder is left behind."""
    path = good_loop(tmp_path, steps=3000)
    cache = tmp_path / "cache"
    go = tmp_path / "go"
    env = {**os.environ, "SPECNSYS_CACHE_DIR": str(cache)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _BARRIER_RUN, str(go), str(path), str(tmp_path / f"ready{i}")],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=Path(__file__).resolve().parents[1],
        )
        for i in range(3)
    ]
    # all three imported and waiting at the barrier (a fixed sleep lost the race when the
    # imports took longer than it on a busy machine), then released at once
    deadline = time.monotonic() + 120
    while not all((tmp_path / f"ready{i}").exists() for i in range(3)):
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs)
        time.sleep(0.01)
    go.touch()
    outs = [p.communicate(timeout=300) for p in procs]
    runs = []
    for (out, err), proc in zip(outs, procs, strict=True):
        assert proc.returncode == 0, err
        lines = out.strip().splitlines()
        assert json.loads(lines[0]) == [{"n": 3000}], out
        runs.append(json.loads(lines[-1]))
    assert all(r["status"] == 0 for r in runs)
    assert max(r["started"] for r in runs) < min(r["ended"] for r in runs)  # they overlapped
    entries = [p.name for p in cache.iterdir()]
    assert len(entries) == 1 and not entries[0].startswith(".tmp-"), entries
    monkeypatch.setenv("SPECNSYS_CACHE_DIR", str(cache))
    with specnsys.open(path) as t:  # the surviving entry is complete and reused
        assert t.from_cache and t.sql("SELECT count(*) FROM kernels").fetchall() == [(3000,)]


# -- a cache that cannot be written ----------------------------------------------------------


def _drop_dac_capabilities() -> None:
    """Drop CAP_DAC_OVERRIDE/CAP_DAC_READ_SEARCH, so root obeys file modes after exec."""
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (1, 2):
        if libc.prctl(24, cap, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP) failed")


def _run(
    argv: list[str],
    cache: Path,
    env: dict[str, str] | None = None,
    preexec_fn: Callable[[], object] | None = None,
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "SPECNSYS_CACHE_DIR": str(cache), **(env or {})},
        cwd=Path(__file__).resolve().parents[1],
        preexec_fn=preexec_fn,
    )


QUERY = ["sql", "SELECT count(*) AS n FROM kernels", "--format", "csv"]


def _specnsys(path: Path) -> list[str]:
    return [sys.executable, "-m", "specnsys", QUERY[0], str(path), *QUERY[1:]]


def _degraded(done: subprocess.CompletedProcess[str], rows: int) -> None:
    """Status 0, the right answer, and one warning that says the cache was not used."""
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["n", str(rows)]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "working without a cache" in lines[0], lines


def _unshare_available() -> str | None:
    if shutil.which("unshare") is None or shutil.which("mount") is None:
        return "unshare/mount not installed"
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"cannot create a mount namespace: {probe.stderr.strip()}"
    return None


def test_read_only_mount_as_cache(tmp_path: Path) -> None:
    """A cache folder on a read-only mount (EROFS even for root), in a private namespace."""
    reason = _unshare_available()
    if reason:
        pytest.skip(reason)
    path = good_loop(tmp_path)
    cache = tmp_path / "ro-cache"
    cache.mkdir()
    before = sha256(path)
    script = (
        f"mount --bind {cache} {cache} && mount -o remount,ro,bind {cache} {cache} && "
        f'touch {cache}/probe 2>/dev/null && exit 97; exec "$@"'
    )
    done = _run(["unshare", "-m", "sh", "-c", script, "sh", *_specnsys(path)], cache)
    if done.returncode == 97 or "mount" in done.stderr and done.returncode != 0:
        pytest.skip(f"could not make a read-only mount: {done.stderr.strip()}")
    _degraded(done, 20)
    assert list(cache.iterdir()) == [] and sha256(path) == before


def test_read_only_folder_as_cache(tmp_path: Path) -> None:
    """chmod 555 on the cache folder; as root, with the capabilities that bypass modes
    dropped, so the folder is really read-only for the process."""
    path = good_loop(tmp_path)
    cache = tmp_path / "ro-cache"
    cache.mkdir()
    cache.chmod(0o555)
    drop = _drop_dac_capabilities if os.geteuid() == 0 else None
    try:
        done = _run(_specnsys(path), cache, preexec_fn=drop)
    except subprocess.SubprocessError as exc:
        pytest.skip(f"cannot drop DAC capabilities as root: {exc}")
    finally:
        cache.chmod(0o755)
    _degraded(done, 20)
    assert list(cache.iterdir()) == []


def test_full_file_system_as_cache(tmp_path: Path) -> None:
    """A 16 KiB tmpfs as the cache (ENOSPC half-way through an entry), in a namespace."""
    reason = _unshare_available()
    if reason:
        pytest.skip(reason)
    path = good_loop(tmp_path, steps=2000)
    cache = tmp_path / "tiny"
    cache.mkdir()
    script = (
        f'mount -t tmpfs -o size=16k,mode=0700 tmpfs {cache} || exit 97; "$@"; s=$?; ls -A {cache}; exit $s'
    )
    done = _run(["unshare", "-m", "sh", "-c", script, "sh", *_specnsys(path)], cache)
    if done.returncode == 97:
        pytest.skip(f"cannot mount a tmpfs: {done.stderr.strip()}")
    listing = done.stdout.split()[2:]  # after "n 2000": what the tmpfs held at the end
    done.stdout = "\n".join(done.stdout.split()[:2])
    _degraded(done, 2000)
    assert "No space left on device" in done.stderr
    assert listing == [], f"half-written entry left on the full file system: {listing}"


def test_file_size_limit_everywhere(tmp_path: Path) -> None:
    """RLIMIT_FSIZE of 1 KiB: the process cannot write a file beyond it (cache and scratch
    space alike, EFBIG; the cache's first file, the runtime calls, takes 2 KiB for this
    loop); the answer still comes, from memory, with one warning."""
    path = good_loop(tmp_path, steps=2000)
    cache = tmp_path / "cache"

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (1024, 1024))

    done = _run(_specnsys(path), cache, preexec_fn=limit)
    _degraded(done, 2000)
    assert "File too large" in done.stderr
    assert not list(cache.glob(".tmp-*")) if cache.exists() else True
    phases = _run(
        [sys.executable, "-m", "specnsys", "phases", str(path), "--json"], cache, preexec_fn=limit
    )
    assert phases.returncode == 0, phases.stderr
    assert json.loads(phases.stdout)["window_ns"] == 2000 * 100


# -- issue 22: inputs that change or cannot be reached while read ------------------------------


def _batch(
    argvs: list[list[str]],
    cache: Path,
    env: dict[str, str] | None = None,
    preexec_fn: Callable[[], object] | None = None,
) -> list[dict]:
    """Run the command lines in one fresh Python (see tests/cli_driver); their results."""
    argv = [sys.executable, "-m", "tests.cli_driver", json.dumps(argvs)]
    done = _run(argv, cache, env, preexec_fn)
    assert done.returncode == 0, f"the driver itself failed: {done.stderr}"
    runs = json.loads(done.stdout)
    for run in runs:
        assert run["traceback"] is None, run["traceback"]
    return runs


def _one_error_line(run: dict, status: int = 2) -> str:
    """The run's only stderr line (``specnsys: error: ...``), after checking the contract."""
    assert run["status"] == status, run
    assert run["stdout"] == "", run
    lines = run["stderr"].strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("specnsys: error: "), run
    return lines[0]


def test_export_in_a_folder_without_search_permission(tmp_path: Path) -> None:
    """Issue 22 #14: the folder holding the export has no search (x) permission for the
    user (as root, the capabilities that bypass modes are dropped, so the mode bites): every
    command says so in one line, exit 2, for a .sqlite export and a .nsys-rep report alike."""
    locked = tmp_path / "locked"
    locked.mkdir()
    path = good_loop(locked)
    (locked / "run.nsys-rep").write_bytes(b"x" * 100)
    locked.chmod(0o600)  # read and write, but no search
    drop = _drop_dac_capabilities if os.geteuid() == 0 else None
    try:
        runs = _batch(
            [
                ["info", str(path)],
                ["sql", str(path), "SELECT 1"],
                ["analyze", str(path)],
                ["info", str(locked / "run.nsys-rep")],
            ],
            tmp_path / "cache",
            preexec_fn=drop,
        )
    finally:
        locked.chmod(0o755)
    for run in runs:
        line = _one_error_line(run)
        assert "permission denied" in line.lower() and str(locked) in line, line


_SWAP_RUN = """
import os, sys
from specnsys.ingest import sqlite_reader
from specnsys.cli.main import main

path, other = sys.argv[1], sys.argv[2]
plan = sqlite_reader.SqliteExport._plan

def replacing_plan(self, table, *args, **kwargs):
    # the synchronization point: the runtime calls are read, the kernels not yet
    if table == "CUPTI_ACTIVITY_KIND_KERNEL" and os.path.exists(other):
        os.replace(other, path)  # another program replaces the export by rename
    return plan(self, table, *args, **kwargs)

sqlite_reader.SqliteExport._plan = replacing_plan
sys.exit(main(sys.argv[3:]))
"""


@pytest.mark.parametrize("no_cache", [False, True], ids=["cache", "no-cache"])
def test_export_replaced_during_a_cold_ingest_is_refused(tmp_path: Path, no_cache: bool) -> None:
    """Issue 22 #5: the export is replaced (os.replace with another export) after its runtime
    calls are read and before its kernels are: the run refuses in one line (exit 2) instead
    of answering, and caching, a model made of both files; the next run reads the new file."""
    path = _export(tmp_path / "trace.sqlite", 0)
    other = _export(tmp_path / "other.sqlite", 7)
    cache = tmp_path / "cache"
    query = ["sql", str(path), "SELECT sum(duration)::BIGINT AS ns FROM kernels", "--format", "csv"]
    flags = ["--no-cache"] if no_cache else []
    done = _run([sys.executable, "-c", _SWAP_RUN, str(path), str(other), *flags, *query], cache)
    assert not other.exists()  # the swap really happened during the run
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert done.stdout == ""
    assert done.stderr.strip() == f"specnsys: error: {path} changed while it was read; run again"
    entries = [p.name for p in cache.iterdir()] if cache.exists() else []
    assert entries == [], f"an entry was kept from the mixed read: {entries}"
    again = _run([sys.executable, "-m", "specnsys", *flags, *query], cache)
    assert again.returncode == 0 and again.stdout.split() == ["ns", str(30_000 + 200 * 7)]


# -- issue 22 #10: damaged cache entries are rebuilt once ----------------------------------------


def _entry_of(cache: Path, stem: str) -> Path:
    (entry,) = [p for p in cache.iterdir() if p.name.startswith(f"{stem}-")]
    return entry


def _truncate(entry: Path) -> None:
    data = (entry / "kernels.parquet").read_bytes()
    (entry / "kernels.parquet").write_bytes(data[: len(data) // 2])


DAMAGES = {
    "truncated": _truncate,
    "zero_length": lambda entry: (entry / "kernels.parquet").write_bytes(b""),
    "other_schema": lambda entry: shutil.copyfile(entry / "nvtx.parquet", entry / "kernels.parquet"),
    "no_manifest": lambda entry: (entry / "manifest.json").unlink(),
}


def test_damaged_cache_entries_are_rebuilt_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Parquet file of an entry cut in half, emptied or replaced by another table's, or the
    manifest gone: the next command answers (exit 0, no warning) and replaces the entry, so
    the one after reads it from the cache (before: exit 3 or 2 on every command, or a build
    into a folder that could never be renamed into place, then a second one in memory)."""
    cache = tmp_path / "cache"
    query = "SELECT count(*) AS n, sum(duration)::BIGINT AS ns FROM kernels"
    paths = {name: good_loop(tmp_path, name=f"{name}.sqlite") for name in DAMAGES}
    argvs = [["sql", str(p), query, "--format", "csv"] for p in paths.values()]
    expected = [run["stdout"] for run in _batch(argvs, cache)]
    assert all(out.split()[1].startswith("20,") for out in expected), expected
    for name, damage in DAMAGES.items():
        damage(_entry_of(cache, name))
    for name, run in zip(DAMAGES, _batch(argvs, cache), strict=True):
        assert (run["status"], run["stderr"]) == (0, ""), (name, run)
    assert not [p.name for p in cache.iterdir() if p.name.startswith(".")]
    monkeypatch.setenv("SPECNSYS_CACHE_DIR", str(cache))
    for name, path in paths.items():
        with specnsys.open(path) as t:
            assert t.from_cache, f"{name}: the entry was not repaired"
            assert t.cache_folder == _entry_of(cache, name)
    assert [run["stdout"] for run in _batch(argvs, cache)] == expected


# -- issue 22 #15: .nsys-rep exports ------------------------------------------------------------


@pytest.fixture(scope="module")
def nsys_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real .nsys-rep from a short capture of a Python start (about 200 KB, 4 s)."""
    nsys = shutil.which("nsys")
    if nsys is None:
        pytest.skip("nsys is not installed")
    folder = tmp_path_factory.mktemp("report")
    cmd = [nsys, "profile", "-t", "nvtx,osrt", "--sample=none", "--cpuctxsw=none",
           "-o", str(folder / "run"), sys.executable, "-c", "pass"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=180, cwd=folder)
    report = folder / "run.nsys-rep"
    if not report.is_file():
        stream = folder / "run.qdstrm"
        if stream.is_file():
            from specnsys.capture import _import_stream

            _import_stream(nsys, stream, report)
    if not report.is_file():
        pytest.skip(f"nsys could not capture here: {done.stdout[-300:]} {done.stderr[-300:]}")
    return report


@pytest.mark.nsys  # captures with nsys (its fixture): one capture at a time
def test_rewritten_report_is_exported_again(tmp_path: Path, nsys_report: Path) -> None:
    """A report rewritten in place keeping its size and mtime (its last byte changed) is not
    answered from the export of its former content, with or without the cache: nsys reads it
    again (and refuses the damaged trailer, in one line)."""
    path = tmp_path / "run.nsys-rep"
    shutil.copyfile(nsys_report, path)
    cache = tmp_path / "cache"
    query = ["sql", str(path), "SELECT count(*) AS n FROM threads", "--format", "csv"]
    runs = _batch([query, ["--no-cache", *query]], cache)
    assert [run["status"] for run in runs] == [0, 0], runs
    assert runs[0]["stdout"] == runs[1]["stdout"] and int(runs[0]["stdout"].split()[1]) > 0
    st = path.stat()
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (path.stat().st_size, path.stat().st_mtime_ns) == (st.st_size, st.st_mtime_ns)
    for run in _batch([query, ["--no-cache", *query]], cache):
        assert "nsys export failed" in _one_error_line(run), run


@pytest.mark.nsys  # captures with nsys (its fixture): one capture at a time
def test_report_without_a_cache_leaves_no_export(tmp_path: Path, nsys_report: Path) -> None:
    """``--no-cache`` exports into a private folder removed at the end (before: into the
    cache); a cache that cannot be used likewise (before: a full export left in the temporary
    folder by every run)."""
    cache = tmp_path / "cache"
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    query = ["sql", str(nsys_report), "SELECT count(*) AS n FROM threads", "--format", "csv"]
    (run,) = _batch([["--no-cache", *query]], cache, env={"TMPDIR": str(scratch)})
    assert run["status"] == 0 and run["stderr"] == "", run
    assert not cache.exists() or list(cache.iterdir()) == []
    unusable = {"TMPDIR": str(scratch), "SPECNSYS_CACHE_DIR": "/proc/specnsys-cache"}
    (run,) = _batch([query], cache, env=unusable)
    assert run["status"] == 0 and "working without a cache" in run["stderr"], run
    assert list(scratch.iterdir()) == []


# -- issue 22, weaknesses: leftovers of killed processes, a shared cache root ---------------------


def _killed_during_build(argv: list[str], cache: Path, env: dict[str, str], watch: Path,
                         prefix: str) -> int:
    """Start *argv*, SIGKILL it as soon as a ``<prefix>*`` entry appears in *watch*; its pid."""
    proc = subprocess.Popen(
        argv, env={**os.environ, "SPECNSYS_CACHE_DIR": str(cache), **env},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        cwd=Path(__file__).resolve().parents[1],
    )
    deadline = time.monotonic() + 120
    while not list(watch.glob(f"{prefix}*")) if watch.exists() else True:
        assert proc.poll() is None and time.monotonic() < deadline, "it ended before the kill"
        time.sleep(0.002)
    proc.kill()
    proc.wait()
    return proc.pid


def test_leftovers_of_killed_runs_are_swept(tmp_path: Path) -> None:
    """A run SIGKILLed while it builds a cache entry leaves its ``.tmp-*`` folder, one without
    a cache its scratch folder; the next run removes them (and a dead process' spill and
    export folders), but leaves alone the folders of a live process."""
    path = good_loop(tmp_path, steps=20_000)
    cache = tmp_path / "cache"
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {"TMPDIR": str(scratch)}
    _killed_during_build(_specnsys(path), cache, env, cache, ".tmp-")
    no_cache = [sys.executable, "-m", "specnsys", "--no-cache", *QUERY[:1], str(path), *QUERY[1:]]
    dead = _killed_during_build(no_cache, cache, env, scratch, "specnsys-scratch-")
    for kind in ("specnsys-spill-", "specnsys-export-"):
        (scratch / f"{kind}{dead}-x").mkdir()
        (scratch / f"{kind}{dead}-x" / "data").write_bytes(b"x" * 1000)
    live = [cache / f".tmp-{os.getpid()}-live", scratch / f"specnsys-spill-{os.getpid()}-live"]
    for folder in live:
        folder.mkdir()
    assert len(list(cache.glob(".tmp-*"))) == 2 and len(list(scratch.iterdir())) == 4
    done = _run(_specnsys(path), cache, env)
    assert done.returncode == 0 and done.stdout.split() == ["n", "20000"], done.stderr
    assert sorted(cache.glob(".tmp-*")) == [live[0]]
    assert list(scratch.iterdir()) == [live[1]]


def test_cache_root_open_to_other_users_is_not_trusted(tmp_path: Path) -> None:
    """The cache root is created private (0700). Another user who can write into it (a root
    made group/world-writable) could plant an entry: here a copy of another trace's entry
    under this trace's name. Such a root is not used (one warning, the answer from memory);
    an entry owned by another user is not read but replaced."""
    path = good_loop(tmp_path, steps=20)
    planted = good_loop(tmp_path, steps=5, name="planted.sqlite")
    cache = tmp_path / "cache"
    runs = _batch([QUERY[:1] + [str(p)] + QUERY[1:] for p in (path, planted)], cache)
    assert [r["stdout"].split() for r in runs] == [["n", "20"], ["n", "5"]]
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700
    entry, source = _entry_of(cache, "good_loop"), _entry_of(cache, "planted")
    manifest = json.loads((entry / "manifest.json").read_text())
    manifest["files"] = json.loads((source / "manifest.json").read_text())["files"]
    for name in manifest["files"]:
        shutil.copyfile(source / name, entry / name)
    (entry / "manifest.json").write_text(json.dumps(manifest))
    cache.chmod(0o777)
    done = _run(_specnsys(path), cache)
    _degraded(done, 20)
    assert "writable by other users" in done.stderr
    cache.chmod(0o700)
    if os.geteuid() == 0:
        os.chown(entry, 65534, 65534)  # the entry of another user (nobody)
        done = _run(_specnsys(path), cache)
        assert done.returncode == 0 and done.stdout.split() == ["n", "20"], done.stderr
        assert done.stderr == "" and entry.stat().st_uid == 0
