"""The cores specnsys sizes its pools by: the process's CPU affinity and its cgroup's quota,
not the host's core count (specnsys/cores.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from specnsys import cores
from specnsys.cores import cgroup_cpu_limit, usable_cores
from tests.conftest import SAMPLE_TRACES

pytestmark = pytest.mark.usefixtures("shared_cache")  # the samples built once (conftest)

SAMPLE = SAMPLE_TRACES / "spec_chat_c4_k4.sqlite"

needs_affinity = pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity"), reason="no CPU affinity on this platform"
)


def _pinned(code: str) -> str:
    """What *code* prints in a Python process pinned to one core (as ``taskset -c`` does)."""
    first = min(os.sched_getaffinity(0))
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True,
        preexec_fn=lambda: os.sched_setaffinity(0, {first}), timeout=120,
    )  # fmt: skip
    return done.stdout.strip()


@needs_affinity
def test_a_process_pinned_to_one_core_uses_one() -> None:
    assert _pinned("from specnsys.cores import usable_cores; print(usable_cores())") == "1"


@needs_affinity
def test_collect_starts_one_worker_per_usable_core_not_per_host_core() -> None:
    # Sized by os.cpu_count(), a pinned collect started a worker per core of the host.
    code = "from specnsys.runset.collect import default_workers; print(default_workers(8).workers)"
    assert _pinned(code) == "1"
    from specnsys.runset.collect import default_workers

    # small traces: the memory of this machine holds an analysis per core
    assert default_workers(8).workers == min(8, usable_cores())
    assert default_workers(1).workers == 1
    assert default_workers(0).workers == 1


@needs_affinity
def test_the_reader_reads_on_the_usable_cores() -> None:
    code = "from specnsys.ingest.sqlite_reader import read_workers; print(read_workers())"
    assert _pinned(code) == "1"


def test_usable_cores_is_the_affinity_lowered_to_the_quota(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    monkeypatch.setattr(cores, "cgroup_cpu_limit", lambda: None)
    if affinity is not None:
        assert usable_cores() == affinity
    monkeypatch.setattr(cores, "cgroup_cpu_limit", lambda: 0.25)
    assert usable_cores() == 1  # a quarter of a core still runs one thread
    monkeypatch.setattr(cores, "cgroup_cpu_limit", lambda: 1.5)
    assert usable_cores() == min(2, affinity or 2)  # rounded up: two threads, part time


def _cgroup(root: Path, relative: str, **files: str) -> None:
    folder = root / relative
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name.replace("_", ".", 1)).write_text(text + "\n")


def test_cgroup_v2_quota_is_the_least_of_the_cgroup_and_its_parents(tmp_path: Path) -> None:
    root = tmp_path / "cgroup"
    _cgroup(root, "", cpu_max="max 100000")
    _cgroup(root, "kubepods", cpu_max="300000 100000")
    _cgroup(root, "kubepods/pod1", cpu_max="150000 100000")
    _cgroup(root, "kubepods/pod1/app", cpu_max="max 100000")
    membership = tmp_path / "cgroup_membership"
    membership.write_text("0::/kubepods/pod1/app\n")
    assert cgroup_cpu_limit(root, membership) == 1.5
    membership.write_text("0::/kubepods\n")
    assert cgroup_cpu_limit(root, membership) == 3.0


def test_cgroup_v2_without_a_quota_and_a_containers_view(tmp_path: Path) -> None:
    root = tmp_path / "cgroup"
    _cgroup(root, "", cpu_max="max 100000")
    membership = tmp_path / "cgroup_membership"
    membership.write_text("0::/system.slice/job.scope\n")  # the host's path: not mounted here
    assert cgroup_cpu_limit(root, membership) is None
    _cgroup(root, "", cpu_max="200000 100000")  # the container's own cgroup is the root
    assert cgroup_cpu_limit(root, membership) == 2.0


def test_cgroup_v1_cpu_controller_quota(tmp_path: Path) -> None:
    root = tmp_path / "cgroup"
    _cgroup(root, "cpu,cpuacct/docker/abc", cpu_cfs_quota_us="50000", cpu_cfs_period_us="100000")
    _cgroup(root, "cpu,cpuacct", cpu_cfs_quota_us="-1", cpu_cfs_period_us="100000")
    membership = tmp_path / "cgroup_membership"
    membership.write_text("4:memory:/docker/abc\n2:cpu,cpuacct:/docker/abc\n1:name=systemd:/\n")
    assert cgroup_cpu_limit(root, membership) == 0.5
    (root / "cpu,cpuacct/docker/abc/cpu.cfs_quota_us").write_text("-1\n")
    assert cgroup_cpu_limit(root, membership) is None


@pytest.mark.parametrize(
    "membership_text, cpu_max",
    [
        (None, None),  # no membership file
        ("0::/\n", "garbage\n"),
        ("0::/\n", "0 100000\n"),
        ("0::/\n", "100000 0\n"),
        ("not a cgroup line\n", "100000 100000\n"),
    ],
)
def test_unreadable_or_odd_cgroup_files_mean_no_quota(
    tmp_path: Path, membership_text: str | None, cpu_max: str | None
) -> None:
    root = tmp_path / "cgroup"
    root.mkdir()
    if cpu_max is not None:
        (root / "cpu.max").write_text(cpu_max)
    membership = tmp_path / "cgroup_membership"
    if membership_text is not None:
        membership.write_text(membership_text)
    assert cgroup_cpu_limit(root, membership) is None


def test_the_threads_variable_caps_the_usable_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cores, "cgroup_cpu_limit", lambda: None)
    monkeypatch.delenv(cores.THREADS_VARIABLE, raising=False)
    every = usable_cores()
    monkeypatch.setenv(cores.THREADS_VARIABLE, "1")
    assert usable_cores() == 1
    monkeypatch.setenv(cores.THREADS_VARIABLE, str(every + 5))
    assert usable_cores() == every  # a cap, never more than the process may use
    # "²" is a digit to str.isdigit but no int; 5,000 digits exceed int()'s limit
    for odd in ("0", "-2", "two", "", "²", " 1", "1" * 5000):
        monkeypatch.setenv(cores.THREADS_VARIABLE, odd)
        assert usable_cores() == every


def test_share_of_cores_divides_the_usable_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cores, "usable_cores", lambda: 16)
    assert [cores.share_of_cores(n) for n in (1, 2, 3, 16, 40)] == [16, 8, 5, 1, 1]


def _worker_threads() -> tuple[str | None, int, int]:
    """In a pool worker: its POLARS_MAX_THREADS, Polars's pool size, and its usable cores."""
    import polars as pl

    return os.environ.get("POLARS_MAX_THREADS"), pl.thread_pool_size(), usable_cores()


def test_each_collect_worker_runs_its_share_of_the_cores(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Two workers on two cores each ran pools as wide as both: 10-13 % more CPU, 3-14 % slower.
    import multiprocessing

    from specnsys.runset.collect import _owned_pool

    monkeypatch.delenv("POLARS_MAX_THREADS", raising=False)
    monkeypatch.delenv(cores.THREADS_VARIABLE, raising=False)
    share = max(1, usable_cores() // 2)
    with _owned_pool(2, multiprocessing.get_context("spawn")) as pool:
        seen = {pool.submit(_worker_threads).result(timeout=120) for _ in range(4)}
    assert seen == {(str(share), share, share)}
    with _owned_pool(1, multiprocessing.get_context("spawn")) as alone:  # a retry: every core
        assert alone.submit(_worker_threads).result(timeout=120)[1:] == (
            usable_cores(), usable_cores()
        )


def test_a_polars_thread_count_the_user_set_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POLARS_MAX_THREADS", "3")
    assert "POLARS_MAX_THREADS" not in cores.worker_environment(1)
    monkeypatch.delenv("POLARS_MAX_THREADS")
    assert cores.worker_environment(1) == {cores.THREADS_VARIABLE: "1", "POLARS_MAX_THREADS": "1"}


def test_the_analysis_connection_runs_on_the_usable_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    from specnsys.ingest.connection import analysis_connection

    monkeypatch.setenv(cores.THREADS_VARIABLE, "1")
    con = analysis_connection()
    try:
        assert con.sql("SELECT current_setting('threads')").fetchall() == [(1,)]
    finally:
        con.close()


def test_each_local_dask_worker_runs_its_share_of_the_cores(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    distributed = pytest.importorskip("distributed")
    from specnsys.runset.collect import local_cluster

    monkeypatch.delenv("POLARS_MAX_THREADS", raising=False)
    monkeypatch.delenv(cores.THREADS_VARIABLE, raising=False)
    share = max(1, usable_cores() // 2)
    with local_cluster(distributed.LocalCluster, 2) as cluster, distributed.Client(cluster) as c:
        seen = set(c.run(_worker_threads).values())
    assert seen == {(str(share), share, share)}


def test_the_command_line_holds_polars_to_the_users_cap() -> None:
    code = (
        "from specnsys.cli.main import main; code = main(['schema', '--json']);"
        "import polars as pl, sys; print(pl.thread_pool_size(), file=sys.stderr)"
    )
    env = {k: v for k, v in os.environ.items() if k != "POLARS_MAX_THREADS"}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
        env={**env, cores.THREADS_VARIABLE: "1"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip().splitlines()[-1] == "1"


@pytest.mark.parametrize("given", [None, "1"], ids=["unset", "users"])
def test_a_profiled_program_does_not_inherit_the_thread_caps(given: str | None) -> None:
    """``profile`` hands the program it runs the environment specnsys was given: not the
    POLARS_MAX_THREADS the command line set from the user's SPECNSYS_THREADS."""
    code = (
        "import os; from specnsys.allocator import without_own_options;"
        "from specnsys.cores import hold_to_threads; hold_to_threads(1);"
        "e = without_own_options(os.environ);"
        "print(os.environ['POLARS_MAX_THREADS'], 'POLARS_MAX_THREADS' in e,"
        " e.get('SPECNSYS_THREADS'))"
    )
    env = {
        k: v for k, v in os.environ.items()
        if k not in ("POLARS_MAX_THREADS", cores.THREADS_VARIABLE)
    }  # fmt: skip
    if given is not None:
        env[cores.THREADS_VARIABLE] = given
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1", "False", str(given)]


def test_the_address_space_thread_caps_are_not_handed_to_a_profiled_program() -> None:
    """Under ``ulimit -v`` the command line caps the pools (one thread per GiB); a program
    that ``profile`` runs gets the environment specnsys was given, without those caps."""
    caps = ("POLARS_MAX_THREADS", "RAYON_NUM_THREADS", "OMP_NUM_THREADS")
    code = (
        "import os, resource; resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30));"
        "from specnsys.cli.main import fit_to_address_space;"
        "from specnsys.allocator import without_own_options;"
        "threads = fit_to_address_space(); child = without_own_options(os.environ);"
        f"print(threads, os.environ['POLARS_MAX_THREADS'], [v for v in {caps!r} if v in child])"
    )
    env = {k: v for k, v in os.environ.items() if k not in caps}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env
    )
    assert done.returncode == 0, done.stderr
    threads = min(usable_cores(), 4)
    assert done.stdout.split() == [str(threads), str(threads), "[]"]


def test_an_odd_threads_variable_is_ignored_by_the_command_line() -> None:
    """A value usable_cores() cannot read is ignored: the command answers, no internal error."""
    for odd in ("²", "1" * 5000):
        done = subprocess.run(
            [sys.executable, "-m", "specnsys", "phases", str(SAMPLE), "--json"],
            capture_output=True, text=True, timeout=300,
            env={**os.environ, cores.THREADS_VARIABLE: odd},
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert "internal error" not in done.stderr
