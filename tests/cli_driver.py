"""Run several ``specnsys`` command lines in one fresh process, as a user would run them.

``python -m tests.cli_driver '[["info", "t.sqlite"], ["phases", "t.sqlite"]]'`` prints one JSON
list with, per command line, its exit status, stdout, stderr and any traceback that escaped
``main``. Starting Python and importing DuckDB/Polars once per batch instead of once per command
makes the hostile-input matrix affordable, while a crash (even a segfault) still stays out of
the pytest process. Warning filters are reset before each command, so each one shows its
warnings as it would alone.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
import traceback
import warnings
from typing import TypedDict


class CommandRun(TypedDict):
    """One command line's outcome: its exit status, output, and any escaped traceback."""

    argv: list[str]
    status: int
    stdout: str
    stderr: str
    traceback: str | None


def run_one(argv: list[str]) -> CommandRun:
    from specnsys.cli.main import main

    warnings.resetwarnings()  # also invalidates the once-per-location registries
    out, err = io.StringIO(), io.StringIO()
    escaped = None
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = main(argv)
        except SystemExit as exc:  # argparse's usage errors exit this way
            status = exc.code if isinstance(exc.code, int) else 1
        except BaseException:  # noqa: BLE001 - exactly what the tests look for
            escaped = traceback.format_exc()
            status = -1
    return {
        "argv": argv,
        "status": status,
        "stdout": out.getvalue(),
        "stderr": err.getvalue(),
        "traceback": escaped,
    }


def main() -> None:
    batch = json.loads(sys.argv[1])
    json.dump([run_one(argv) for argv in batch], sys.stdout)


if __name__ == "__main__":
    main()
