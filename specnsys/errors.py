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


class SpecnsysWarning(UserWarning):
    """Something was skipped or degraded; the answer is still given (the CLI prints
    ``specnsys: warning: <message>``)."""


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


class OutputError(SpecnsysError):
    """A result that could not be written (full disk, read-only folder, closed output): exit
    status 2, since the user picks where results go."""

    exit_code = EXIT_BAD_INPUT


#: Words in an exception's message that mean an allocation failed: pyo3 turns a Rust panic
#: ("capacity overflow", "memory allocation of N bytes failed") into a PanicException, the
#: dynamic loader says "failed to map segment" when it cannot map a library's pages, DuckDB
#: says "Could not allocate" / "failed to allocate", C++ says "std::bad_alloc".
_ALLOCATION_WORDS = (
    "memory allocation",
    "capacity overflow",
    "failed to map segment",
    "cannot allocate memory",
    "could not allocate",
    "failed to allocate",
    "bad_alloc",
    "out of memory",
)


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether *exc* (or an exception it was raised from) is an allocation that failed.

    Python's MemoryError (pyarrow's ArrowMemoryError is one), DuckDB's OutOfMemoryException,
    ENOMEM, a thread that could not get its stack under an address-space limit, and the
    messages of :data:`_ALLOCATION_WORDS` from Polars, Rust panics, DuckDB and the loader.
    """
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if _is_allocation_failure(current):
            return True
        current = current.__cause__ or current.__context__
    return False


def _is_allocation_failure(exc: BaseException) -> bool:
    import errno
    import sys

    if isinstance(exc, MemoryError):
        return True
    duckdb = sys.modules.get("duckdb")
    if duckdb is not None and isinstance(exc, duckdb.OutOfMemoryException):
        return True
    if isinstance(exc, OSError) and exc.errno == errno.ENOMEM:
        return True
    text = str(exc).lower()
    # A thread that could not get its stack: Python's words, or a Rust pool's panic on
    # pthread_create's EAGAIN ("WouldBlock"). Under ulimit -v that is memory; else a thread limit.
    no_thread = (isinstance(exc, RuntimeError) and "can't start new thread" in text) or (
        "wouldblock" in text and "panicked" in text
    )
    if no_thread:
        return address_space_limit() is not None
    return any(word in text for word in _ALLOCATION_WORDS)


def address_space_limit() -> int | None:
    """The soft RLIMIT_AS (``ulimit -v``) in bytes, or None when there is none."""
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    return None if soft == resource.RLIM_INFINITY else soft


def out_of_memory(exc: BaseException) -> OutOfMemoryError:
    """The one-line error for an allocation that failed, naming the limit that was hit (the
    address-space limit when one is set, else DuckDB's memory limit when DuckDB said so, else
    the machine's memory) and what raises it."""
    import os
    import sys

    # DuckDB appends a list of settings to try; the first sentence is the news
    detail = " ".join(str(exc).split("Possible solutions")[0].split()) or type(exc).__name__
    address_space = address_space_limit()
    duckdb = sys.modules.get("duckdb")
    if address_space is not None:
        where = (
            f"the address-space limit (ulimit -v {address_space >> 10} KiB) was hit: raise it "
            "or remove it"
        )
    elif duckdb is not None and isinstance(exc, duckdb.OutOfMemoryException):
        limit = os.environ.get("SPECNSYS_MEMORY_LIMIT", "").strip()
        current = f"SPECNSYS_MEMORY_LIMIT={limit}" if limit else "the default limit"
        where = (
            f"DuckDB's memory limit ({current}) was hit: raise SPECNSYS_MEMORY_LIMIT (DuckDB "
            "syntax, e.g. 8GB)"
        )
    else:
        where = "the machine's memory ran out: free memory"
    return OutOfMemoryError(f"out of memory ({detail}); {where}, or analyze a shorter capture")
