"""How much memory this process can still take: the machine's available memory, lowered to
the room its cgroups leave (a container's or a Slurm job's memory limit). What ``collect``
sizes its default number of workers by: each worker holds an analysis of a whole trace, and
one worker per core on a machine with more cores than memory for that many analyses starts
the kernel's OOM killer, which may end another program than specnsys.

A base module: no analysis stack is needed to read it.
"""

from __future__ import annotations

from pathlib import Path

from specnsys.cgroups import CGROUP_ROOT, PROC_CGROUP, cgroup_values

__all__ = ["MEMINFO", "available_memory", "cgroup_memory_room"]

#: The kernel's memory figures, of which ``MemAvailable``: free memory plus what the kernel can
#: reclaim without swapping (page cache, reclaimable slabs).
MEMINFO = Path("/proc/meminfo")

#: cgroup v2 and v1 say "no limit" with these (v1: a page-rounded 2**63 - 1).
_NO_LIMIT = ("max", "")
_V1_NO_LIMIT_FROM = 1 << 62


def available_memory(
    meminfo: Path = MEMINFO, root: Path = CGROUP_ROOT, membership: Path = PROC_CGROUP
) -> int | None:
    """Bytes this process can still take: ``MemAvailable``, lowered to
    :func:`cgroup_memory_room`; None when neither can be read."""
    room = [value for value in (_mem_available(meminfo), cgroup_memory_room(root, membership))
            if value is not None]  # fmt: skip
    return min(room) if room else None


def cgroup_memory_room(root: Path = CGROUP_ROOT, membership: Path = PROC_CGROUP) -> int | None:
    """The least room under the memory limits of this process's cgroup and the cgroups above
    it: the limit (v2 ``memory.max``, v1 ``memory.limit_in_bytes``) less the cgroup's working
    set (its usage less its inactive file pages, which the kernel reclaims before it kills,
    as container runtimes count it); None without a limit (*root*, *membership*:
    :func:`specnsys.cgroups.cgroup_values`)."""
    rooms = cgroup_values("memory", _v2_room, _v1_room, root, membership)
    return int(max(min(rooms), 0)) if rooms else None


def _mem_available(meminfo: Path) -> int | None:
    """``MemAvailable`` of *meminfo*, in bytes (None where it cannot be read): free memory
    alone would count the page cache, which the kernel gives up, as taken."""
    try:
        for line in meminfo.read_text().splitlines():
            name, _, value = line.partition(":")
            if name == "MemAvailable":
                amount, _, unit = value.strip().partition(" ")
                return int(amount) * (1024 if unit.strip() == "kB" else 1)
    except (OSError, ValueError):
        return None
    return None


def _v2_room(folder: Path) -> float | None:
    """The room under a v2 cgroup's ``memory.max`` (``memory.stat`` counts its own and its
    descendants' pages)."""
    return _room(folder, "memory.max", "memory.current", "inactive_file")


def _v1_room(folder: Path) -> float | None:
    """The room under a v1 cgroup's limit (``total_``: the hierarchy's pages, as its usage)."""
    return _room(folder, "memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file")


def _room(folder: Path, limit_file: str, usage_file: str, inactive_key: str) -> float | None:
    """*limit_file* less the working set (*usage_file* less *inactive_key* of ``memory.stat``);
    None where there is no limit or a file cannot be read or understood."""
    try:
        limit_text = (folder / limit_file).read_text().strip()
        if limit_text in _NO_LIMIT:
            return None
        limit = int(limit_text)
        usage = int((folder / usage_file).read_text().strip())
    except (OSError, ValueError):
        return None
    if limit <= 0 or limit >= _V1_NO_LIMIT_FROM:
        return None
    return float(limit - max(usage - _stat_value(folder, inactive_key), 0))


def _stat_value(folder: Path, key: str) -> int:
    """One figure of the cgroup's ``memory.stat`` (0 where it is missing or unreadable)."""
    try:
        for line in (folder / "memory.stat").read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return max(int(value), 0)
    except (OSError, ValueError):
        return 0
    return 0
