"""Whether an analysis library installed beside specnsys is older than specnsys declares it needs.

pip enforces the floors of ``pyproject.toml`` when it installs specnsys, but an environment
assembled otherwise (``--no-deps``, a conda environment, a library downgraded later) can hold
an older release: Polars before 1.32 fails on every trace (``is_in`` and categorical changes),
DuckDB before 1.4 on its first query (settings and scoping the analysis uses). The failure is
then a Polars or DuckDB exception that reads like a specnsys bug. Looked up only after a
command, or one trace of ``collect``, failed unexpectedly (:func:`specnsys.cli.main._exit_status`,
:func:`specnsys.runset.collect._safe`), so that the answer costs nothing on a run that succeeds;
the floors are read from specnsys's own installed metadata, so they are the ones
``pyproject.toml`` declares, not a second copy. A base module: the command line and the run
sets both use it.
"""

from __future__ import annotations

import importlib.metadata
import re

#: The libraries whose age decides how an analysis runs (the others are not checked).
CHECKED = ("polars", "duckdb", "pyarrow")

_FLOOR = re.compile(r"^\s*([A-Za-z0-9_.-]+)\s*(?:\[[^\]]*\])?\s*[^;]*?>=\s*([0-9][0-9A-Za-z.]*)")


def _release(version: str) -> tuple[int, ...]:
    """The leading numeric release of *version* (``1.32.0rc1`` -> ``(1, 32, 0)``)."""
    parts = []
    for piece in version.split("."):
        digits = re.match(r"\d+", piece)
        if digits is None:
            break
        parts.append(int(digits.group()))
        if digits.group() != piece:
            break
    return tuple(parts)


def declared_floors() -> dict[str, str]:
    """``{library: floor}`` of the :data:`CHECKED` libraries, from specnsys's installed
    requirements (empty when specnsys is not installed, e.g. run from a source tree)."""
    try:
        requirements = importlib.metadata.requires("specnsys") or []
    except importlib.metadata.PackageNotFoundError:
        return {}
    floors = {}
    for requirement in requirements:
        if "extra ==" in requirement:
            continue
        match = _FLOOR.match(requirement)
        if match and match.group(1).lower() in CHECKED:
            floors[match.group(1).lower()] = match.group(2)
    return floors


def too_old() -> list[tuple[str, str, str]]:
    """``(library, installed, floor)`` for each checked library installed older than its
    declared floor."""
    found = []
    for library, floor in declared_floors().items():
        try:
            installed = importlib.metadata.version(library)
        except importlib.metadata.PackageNotFoundError:
            continue
        if _release(installed) < _release(floor):
            found.append((library, installed, floor))
    return found


def too_old_message(failure: str) -> str | None:
    """One line saying which libraries are older than specnsys needs and how to upgrade them,
    ending with *failure* (what the command raised); None when none is."""
    old = too_old()
    if not old:
        return None
    found = ", ".join(
        f"{lib} {have} is older than the {need} specnsys needs" for lib, have, need in old
    )
    upgrade = " ".join(f"'{lib}>={need}'" for lib, _, need in old)
    return f"{found}: upgrade it with pip install {upgrade} (it failed with {failure})"
