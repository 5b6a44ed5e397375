"""The memory collect sizes its default pool by (specnsys/memory_room.py,
specnsys/runset/sizing.py): the machine's available memory lowered to its cgroups' room, and
no more workers than that holds analyses of the largest trace."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from specnsys.cores import usable_cores
from specnsys.memory_room import available_memory, cgroup_memory_room
from specnsys.runset.sizing import analysis_memory, pool_size
from tests.conftest import REPO, SAMPLE_TRACES

GIB = 1 << 30


def _files(folder: Path, **files: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text + "\n")


def _meminfo(tmp_path: Path, available_kib: int) -> Path:
    path = tmp_path / "meminfo"
    path.write_text(f"MemTotal: 99999999 kB\nMemFree: 1 kB\nMemAvailable: {available_kib} kB\n")
    return path


def test_cgroup_v2_room_is_the_least_over_the_cgroup_and_its_parents(tmp_path: Path) -> None:
    """The limit less the working set (usage less inactive file pages, which the kernel
    reclaims first); the tightest level wins; ``max`` is no limit."""
    root = tmp_path / "cgroup"
    _files(root, **{"memory.max": "max", "memory.current": str(50 * GIB)})
    _files(root / "slurm", **{"memory.max": str(16 * GIB), "memory.current": str(11 * GIB),
                              "memory.stat": f"anon 1\ninactive_file {4 * GIB}\nactive_file 5"})  # fmt: skip
    _files(root / "slurm/job", **{"memory.max": str(12 * GIB), "memory.current": str(2 * GIB)})
    membership = tmp_path / "membership"
    membership.write_text("0::/slurm/job\n")
    # the job: 12 - 2 = 10 GiB; above it, 16 - (11 - 4) = 9 GiB: the least
    assert cgroup_memory_room(root, membership) == 9 * GIB
    membership.write_text("0::/\n")
    assert cgroup_memory_room(root, membership) is None  # the root: no limit


def test_cgroup_v1_room_and_its_no_limit_value(tmp_path: Path) -> None:
    root = tmp_path / "cgroup"
    _files(root / "memory", **{"memory.limit_in_bytes": "9223372036854771712",
                               "memory.usage_in_bytes": str(5 * GIB)})  # fmt: skip
    _files(root / "memory/docker/abc", **{
        "memory.limit_in_bytes": str(8 * GIB), "memory.usage_in_bytes": str(6 * GIB),
        "memory.stat": f"cache 1\ntotal_inactive_file {GIB}\n"})  # fmt: skip
    membership = tmp_path / "membership"
    membership.write_text("9:name=systemd:/\n4:memory:/docker/abc\n2:cpu,cpuacct:/docker/abc\n")
    assert cgroup_memory_room(root, membership) == 3 * GIB  # 8 - (6 - 1)
    membership.write_text("4:memory:/\n")
    assert cgroup_memory_room(root, membership) is None  # 2**63 rounded to a page: none


@pytest.mark.parametrize(
    "files",
    [
        {},
        {"memory.max": "lots", "memory.current": "1"},
        {"memory.max": str(GIB)},  # no usage
        {"memory.max": "0", "memory.current": "0"},
        {"memory.max": str(GIB), "memory.current": "1", "memory.stat": "inactive_file x"},
    ],
)
def test_odd_or_missing_cgroup_memory_files(tmp_path: Path, files: dict[str, str]) -> None:
    """No room is made up: a file that cannot be read or understood is no limit, except a
    bad ``memory.stat``, which only counts no reclaimable pages."""
    root = tmp_path / "cgroup"
    _files(root, **files)
    membership = tmp_path / "membership"
    membership.write_text("0::/\n")
    expected = GIB - 1 if "memory.stat" in files else None
    assert cgroup_memory_room(root, membership) == expected


def test_available_memory_is_the_machine_s_lowered_to_the_cgroup_s(tmp_path: Path) -> None:
    root = tmp_path / "cgroup"
    _files(root, **{"memory.max": str(4 * GIB), "memory.current": str(GIB)})
    membership = tmp_path / "membership"
    membership.write_text("0::/\n")
    assert available_memory(_meminfo(tmp_path, 8 << 20), root, membership) == 3 * GIB
    assert available_memory(_meminfo(tmp_path, 2 << 20), root, membership) == 2 * GIB
    assert available_memory(tmp_path / "none", tmp_path / "no", tmp_path / "no") is None
    # this machine's own: some memory, no more than it has
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    mine = available_memory()
    assert mine is not None and 0 < mine <= total


def test_the_pool_is_no_wider_than_the_memory_holds_analyses_of_the_largest_trace() -> None:
    each = analysis_memory(int(2.7e9))
    assert each == (300 << 20) + int(1.5 * 2.7e9)
    size = pool_size(8, int(2.7e9), 2 * each + each // 2)
    assert size.workers == 2 and size.note is not None
    assert size.note.startswith("collect runs 2 workers, not 8 (one per usable core)"), size.note
    assert pool_size(8, int(2.7e9), None).workers == 8  # memory not known: the cores
    assert pool_size(8, int(2.7e9), 1).workers == 1  # never none
    assert pool_size(2, 10**6, 64 * GIB).note is None  # small traces: one per core
    # --workers: as asked, with a warning when more analyses run at once than the memory holds
    assert size.asked_note(2, jobs=10) is None
    assert size.asked_note(8, jobs=2) is None  # two traces: two analyses at once
    note = size.asked_note(3, jobs=10)
    assert note is not None and note.startswith(
        "--workers 3: more analyses at once than the memory holds, 2 ("
    ), note
    assert pool_size(2, 10**6, 64 * GIB).asked_note(16, jobs=40) is None
    assert pool_size(2, 10**6, None).asked_note(16, jobs=40) is None  # not known: no claim


def _collect_beside_a_huge_trace(
    tmp_path: Path, *options: str
) -> subprocess.CompletedProcess[str]:
    """``collect --json`` (with *options*) of a real sample trace beside a sparse file as
    large as the available memory (``huge.sqlite``: no export, it fails), after checking that
    the real one, and only it, landed."""
    room = available_memory()
    assert room is not None
    folder = tmp_path / "t"
    folder.mkdir()
    shutil.copyfile(SAMPLE_TRACES / "spec_chat_c4_k4.sqlite", folder / "real.sqlite")
    with (folder / "huge.sqlite").open("wb") as handle:
        handle.truncate(room)
    done = subprocess.run(
        [sys.executable, "-m", "specnsys", "--no-cache", "collect", str(folder), "-o",
         str(tmp_path / "ds"), *options, "--json"],
        capture_output=True, text=True, cwd=REPO, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert [Path(t).name for t in json.loads(done.stdout)["analysed"]] == ["real.sqlite"]
    return done


def test_collect_of_a_trace_too_big_for_two_workers_runs_one_and_says_why(
    tmp_path: Path,
) -> None:
    """By default (no --workers) a pool of one per core started two analyses of the largest
    trace at once whatever the memory. A sparse file as large as the available memory stands
    for such a trace (its analysis would need 1.5x its size): one worker, a warning naming
    the sizes; it fails as no export, and the real trace beside it lands."""
    if usable_cores() < 2:
        pytest.skip("one usable core: one worker anyway")
    done = _collect_beside_a_huge_trace(tmp_path)
    doc = json.loads(done.stdout)
    assert list(map(Path, doc["failed"])) == [(tmp_path / "t" / "huge.sqlite").resolve()]
    assert "specnsys: warning: collect runs 1 worker, not 2 (one per usable core)" in done.stderr


def test_workers_asked_for_run_as_asked_with_a_warning_when_memory_is_short(
    tmp_path: Path,
) -> None:
    done = _collect_beside_a_huge_trace(tmp_path, "--workers", "2")
    assert "specnsys: warning: --workers 2: more analyses at once than the memory holds, 1 (" in (
        done.stderr
    ), done.stderr
