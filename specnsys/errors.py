"""Error types whose message is what the user sees, on one line.

The CLI turns a :class:`SpecnsysError` into ``specnsys: error: <message>`` and its exit code;
anything else escaping the library is a bug.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_BAD_INPUT = 2
EXIT_INTERNAL = 3
EXIT_RESOURCES = 4


class SpecnsysError(Exception):
    """A problem the user can act on; ``str(err)`` is a complete one-line explanation."""

    exit_code: int = 1

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(message.split()))


class BadInputError(SpecnsysError):
    """The input path or file cannot be used as an nsys export (exit status 2)."""

    exit_code = EXIT_BAD_INPUT


class UsageError(SpecnsysError):
    """The command line or an API argument is wrong (exit status 2)."""

    exit_code = EXIT_BAD_INPUT


class OutOfMemoryError(SpecnsysError):
    """The analysis needed more memory than it may use (exit status 4)."""

    exit_code = EXIT_RESOURCES


def out_of_memory(exc: BaseException) -> OutOfMemoryError:
    """The one-line error for an allocation that failed (Python's or DuckDB's), naming the
    limit in force and the variable that raises it."""
    import os

    limit = os.environ.get("SPECNSYS_MEMORY_LIMIT", "").strip()
    # DuckDB appends a list of settings to try; the first sentence is the news
    detail = " ".join(str(exc).split("Possible solutions")[0].split()) or type(exc).__name__
    current = f"SPECNSYS_MEMORY_LIMIT={limit}" if limit else "the default limit"
    return OutOfMemoryError(
        f"out of memory ({detail}); with {current}: raise SPECNSYS_MEMORY_LIMIT (DuckDB syntax, "
        "e.g. 8GB), free memory, or analyze a shorter capture"
    )
