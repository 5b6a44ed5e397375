"""The limits of the cgroups this process runs in (v1 and v2): what a container, a Slurm job
or a systemd unit grants it, read from their files, for the pools and workers specnsys sizes
(:mod:`specnsys.cores`: CPU quota; :mod:`specnsys.memory_room`: memory).

A base module: the command line reads it before the analysis stack loads.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

__all__ = ["CGROUP_ROOT", "PROC_CGROUP", "Reader", "cgroup_values"]

#: Where the kernel mounts the cgroup hierarchies, and this process's cgroup membership.
CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_CGROUP = Path("/proc/self/cgroup")

#: Reads one limit from one cgroup folder (None: no limit there, or none readable).
Reader = Callable[[Path], "float | None"]


def cgroup_values(
    controller: str, v2: Reader, v1: Reader,
    root: Path = CGROUP_ROOT, membership: Path = PROC_CGROUP,
) -> list[float]:  # fmt: skip
    """The limits *v2* reads from this process's cgroup v2 and each cgroup above it, and
    those *v1* reads from its cgroup v1 of *controller* (``cpu``, ``memory``) and above; empty
    when there are none, or where the files cannot be read.

    *root* is where the hierarchies are mounted and *membership* the process's
    ``/proc/<pid>/cgroup``; a container sees its own cgroup at *root* itself while the
    membership names the host's path, so the named path is tried and then *root*'s own."""
    try:
        lines = membership.read_text().splitlines()
    except OSError:
        return []
    found: list[float] = []
    for line in lines:
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        relative = path.strip().lstrip("/")
        if hierarchy == "0" and not controllers:  # cgroup v2, the unified hierarchy
            found += _up_the_tree(root, relative, v2)
        elif controller in controllers.split(","):  # cgroup v1's controller
            for mount in (root / controllers, root / controller, root / f"{controller},cpuacct"):
                if mount.is_dir():
                    found += _up_the_tree(mount, relative, v1)
                    break
    return found


def _up_the_tree(mount: Path, relative: str, read: Reader) -> list[float]:
    """What *read* finds in the cgroup at *mount*/*relative* and in each one above it up to
    *mount* (only *mount*'s own when that path is not there: a container's view)."""
    folder = mount / relative
    if not folder.is_dir():
        folder = mount
    found = []
    while True:
        value = read(folder)
        if value is not None:
            found.append(value)
        if folder == mount or mount not in folder.parents:
            return found
        folder = folder.parent
