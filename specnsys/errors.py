"""Error types whose message is what the user sees, on one line.

The CLI turns a :class:`SpecnsysError` into ``specnsys: error: <message>`` and its exit code;
anything else escaping the library is a bug.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_BAD_INPUT = 2


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
