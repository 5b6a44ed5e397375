"""``specnsys`` entry point: argument parsing, error-to-exit-code mapping, warning display.

Exit status: 0 success; 2 bad input or usage, an output that cannot be written, or a failure
beside an analysis library older than specnsys declares (one line on stderr); 3 an internal
error (a bug: one line, full traceback with ``SPECNSYS_DEBUG=1``);
4 out of memory (one line naming the limit that was hit); 130 interrupted (SIGINT, Ctrl-C);
143 terminated (SIGTERM, 128 + 15, the shell's convention). Both signals end a command the same
way: the interrupt is raised where the command is, its ``finally`` blocks clean up, and one
line says so. The analysis stack (DuckDB, Polars, Arrow) is imported inside :func:`main`'s
error handling, so even a Ctrl-C during those imports is one line, not a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import stat
import sys
import threading
import types
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import NoReturn, TextIO, cast

from specnsys.allocator import return_freed_memory, set_own_option
from specnsys.cores import THREADS_VARIABLE, hold_to_threads, usable_cores
from specnsys.errors import (
    EXIT_BAD_INPUT,
    EXIT_INTERNAL,
    OutOfMemoryError,
    OutputError,
    SpecnsysError,
    address_space_limit,
    is_out_of_memory,
    out_of_memory,
)
from specnsys.held_signals import signals_held

_PENDING_WARNINGS: list[str] = []


def _show_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,
    line: str | None = None,
) -> None:
    # Held until the command ends: printed after a result, dropped when the command fails, so
    # that a failure is always exactly one line on stderr.
    text = f"specnsys: warning: {message}"
    if text not in _PENDING_WARNINGS:
        _PENDING_WARNINGS.append(text)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line and status 2, like every bad input
        print(f"specnsys: error: {message} (see specnsys --help)", file=sys.stderr)
        raise SystemExit(EXIT_BAD_INPUT)


def build_parser() -> argparse.ArgumentParser:
    from specnsys import __version__
    from specnsys.cli import (
        advise,
        analyze,
        check,
        collect,
        compare,
        export,
        forecast,
        info,
        kernels,
        phases,
        plot,
        profile,
        ranges,
        report,
        schema,
        sql,
        sweep,
        whatif,
    )

    parser = _Parser(
        prog="specnsys",
        description="Analyze Nsight Systems traces of speculative decoding.",
    )
    parser.add_argument("--version", action="version", version=f"specnsys {__version__}")
    parser.add_argument(
        "--no-cache", action="store_true", help="do not read or write the columnar cache"
    )
    # The commands use only ArgumentParser's interface (the action is invariant in its class).
    sub = cast(
        "argparse._SubParsersAction[argparse.ArgumentParser]",
        parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser),
    )
    sub.required = True
    info.register(sub)
    sql.register(sub)
    phases.register(sub)
    ranges.register(sub)
    kernels.register(sub)
    profile.register(sub)
    analyze.register(sub)
    compare.register(sub)
    whatif.register(sub)
    plot.register(sub)
    report.register(sub)
    export.register(sub)
    collect.register(sub)
    check.register(sub)
    sweep.register(sub)
    forecast.register(sub)
    advise.register(sub)
    schema.register(sub)
    return parser


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the command is like Ctrl-C's KeyboardInterrupt, so that every
    clean-up written for an interrupt (``finally`` blocks, ``except KeyboardInterrupt`` around a
    capture) runs for it too."""


class StdoutError(OutputError):
    """Standard output could not take the result (a full disk, a closed terminal)."""


#: The signals received during the running command, newest last.
_SIGNALLED: list[int] = []
_HANDLED_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_WATCHER_STACK = 256 << 10  # bytes; the watcher only reads a pipe and calls interrupt()


def _raise_interrupt(signum: int, frame: object) -> None:
    _SIGNALLED.append(signum)
    raise Terminated if signum == signal.SIGTERM else KeyboardInterrupt


def _note_signal(signum: int, frame: object) -> None:
    _SIGNALLED.append(signum)  # the command is already ending: a second signal only counts


#: What ``signal.signal`` returns: a handler function, SIG_DFL/SIG_IGN, or None.
_Handler = Callable[[int, types.FrameType | None], object] | int | None


@contextlib.contextmanager
def _signals_interrupt() -> Iterator[None]:
    """SIGINT and SIGTERM raise an interrupt in the command for as long as it runs; signals the
    caller ignores (``nohup``, a background job) stay ignored; the caller's handlers return
    afterwards (the in-process test driver calls :func:`main` many times)."""
    _SIGNALLED.clear()
    previous: dict[signal.Signals, _Handler] = {}
    try:
        for signum in _HANDLED_SIGNALS:
            if signal.getsignal(signum) is not signal.SIG_IGN:
                previous[signum] = signal.signal(signum, _raise_interrupt)
    except ValueError:  # not the main thread: signals belong to whoever runs it
        pass
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@contextlib.contextmanager
def _queries_stopped_on_signal() -> Iterator[None]:
    """While the command runs, a thread wakes on SIGINT/SIGTERM (through Python's wakeup file
    descriptor, written by the C-level handler even while the main thread is inside DuckDB)
    and interrupts specnsys's running DuckDB queries, which otherwise run to their end before
    the handler's KeyboardInterrupt can surface (see :mod:`specnsys.ingest.interrupts`).
    Started after :func:`fit_to_address_space`: a thread that mallocs before the arena cap gets
    an arena of its own, 64 MiB of address space, which made ``ulimit -v 1G`` abort."""
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    try:
        previous = signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    except ValueError:  # not the main thread
        os.close(read_end)
        os.close(write_end)
        yield
        return
    watcher = threading.Thread(
        target=_stop_queries_on_signal, args=(read_end,), name="specnsys-signals", daemon=True
    )
    # a small stack: under ulimit -v every reserved MiB is one the analysis cannot have
    stack = threading.stack_size(_WATCHER_STACK)
    try:
        watcher.start()
    finally:
        threading.stack_size(stack)
    try:
        yield
    finally:
        signal.set_wakeup_fd(previous)
        os.close(write_end)  # the watcher reads end-of-file and returns
        watcher.join(timeout=1)
        os.close(read_end)


def _stop_queries_on_signal(read_end: int) -> None:
    wanted = {int(s) for s in _HANDLED_SIGNALS}
    while True:
        try:
            received = os.read(read_end, 64)
        except OSError:
            return
        if not received:
            return
        interrupts = sys.modules.get("specnsys.ingest.interrupts")  # loaded with DuckDB's use
        if interrupts is not None and wanted.intersection(received):
            interrupts.interrupt_queries()


def _set_signal_handlers(handler: Callable[[int, object], None]) -> None:
    with contextlib.suppress(ValueError):
        for signum in _HANDLED_SIGNALS:
            if signal.getsignal(signum) is not signal.SIG_IGN:
                signal.signal(signum, handler)


class _GuardedStdout:
    """``sys.stdout`` while a command runs: a write or flush that fails (a full disk, an I/O
    error) becomes one :class:`StdoutError` line instead of an internal error. A closed pipe
    stays a BrokenPipeError (the reader has all it wanted: not an error of ours)."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        with _stdout_errors():
            written: int = self._stream.write(text)
            return written

    def flush(self) -> None:
        with _stdout_errors():
            self._stream.flush()

    def __getattr__(self, name: str) -> object:
        return getattr(self._stream, name)


@contextlib.contextmanager
def _stdout_errors() -> Iterator[None]:
    try:
        yield
    except BrokenPipeError:
        raise
    except OSError as exc:
        raise StdoutError(f"cannot write to standard output: {exc.strerror or exc}") from exc


@contextlib.contextmanager
def _guarded_stdout() -> Iterator[None]:
    stream = sys.stdout
    sys.stdout = _GuardedStdout(stream)
    try:
        yield
    finally:
        sys.stdout = stream


def _silence_stdout() -> None:
    """Point file descriptor 1 at /dev/null, so that the exit-time flush of what a closed or
    full output could not take neither fails again nor prints "Exception ignored"."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


#: glibc's mallopt parameter for the number of malloc arenas.
_M_ARENA_MAX = -8

#: The address space the analysis stack needs to load and start its threads: Polars, Arrow and
#: DuckDB map 0.76 GB of libraries between them; under ``ulimit -v 768M`` a cold analysis of a
#: sample trace failed inside a Rust thread pool (a panic message on stderr), from 1 GiB on it
#: ran. Below this, the command is refused up front with one line.
ADDRESS_SPACE_MIN = 1 << 30


def fit_to_address_space() -> int | None:
    """Under an address-space limit (``ulimit -v``), shrink what the libraries reserve before
    they are imported, so that the work, not idle reservations, meets the limit.

    Every thread that calls malloc gets its own glibc arena, 64 MiB of address space each (a
    bare DuckDB connection reserved 670 MB of it on 2 cores, 80 MB with one arena), and every
    pool thread of Polars, Rayon and Arrow adds a stack and an arena. Arenas are capped through
    ``mallopt`` (``MALLOC_ARENA_MAX`` is read only at start-up) and the pools sized from the
    limit: one thread per GiB, at most one per core. Variables the user set are kept. Under
    ``ulimit -v 1G`` a cold ``analyze`` of a sample trace needs 1 thread; without the caps it
    failed to start threads at 1 GB (exit 3) and aborted at 1.5 GB. Returns the pools' thread
    count, for the allocators' options (:func:`specnsys.allocator.return_freed_memory`), or
    None when there is no limit.
    """
    limit = address_space_limit()
    if limit is None:
        return None
    if limit < ADDRESS_SPACE_MIN:
        raise OutOfMemoryError(
            f"out of memory: the address-space limit (ulimit -v {limit >> 10} KiB) is below the "
            f"{ADDRESS_SPACE_MIN >> 20} MiB that DuckDB, Polars and Arrow need to load: raise it "
            "or remove it"
        )
    threads = max(1, min(usable_cores(), limit >> 30))
    for variable in ("POLARS_MAX_THREADS", "RAYON_NUM_THREADS", "OMP_NUM_THREADS"):
        if variable not in os.environ:  # not handed on to a program that profile runs
            set_own_option(variable, str(threads))
    with contextlib.suppress(OSError, AttributeError):  # not glibc: nothing to cap
        import ctypes

        ctypes.CDLL(None).mallopt(_M_ARENA_MAX, max(1, threads // 2))
    return threads


def _print_error(message: str, code: int) -> int:
    print(f"specnsys: error: {message}", file=sys.stderr)
    return code


def _interrupted() -> int:
    """One line for SIGINT (status 130) or SIGTERM (143): the command's clean-up has run."""
    _set_signal_handlers(_note_signal)  # a second Ctrl-C now must not become a traceback
    signum = _SIGNALLED[-1] if _SIGNALLED else signal.SIGINT
    word = "terminated" if signum == signal.SIGTERM else "interrupted"
    print(f"specnsys: {word}", file=sys.stderr)
    return 128 + signum


def _is_interrupt(exc: BaseException) -> bool:
    """Ctrl-C or SIGTERM, whether it arrived as KeyboardInterrupt or as DuckDB's
    InterruptException (DuckDB turns the interrupt of a running query into its own error)."""
    duckdb = sys.modules.get("duckdb")
    duckdb_interrupt = duckdb is not None and isinstance(exc, duckdb.InterruptException)
    return isinstance(exc, KeyboardInterrupt) or duckdb_interrupt


def _exit_status(exc: BaseException) -> int:
    """The exit status for *exc*, after its one line on stderr. Whatever a command raises after
    a signal arrived is the signal's doing (DuckDB, for one, reports an interrupted Arrow fetch
    as a RuntimeError)."""
    if _SIGNALLED or _is_interrupt(exc):
        return _interrupted()
    if isinstance(exc, BrokenPipeError):
        _silence_stdout()  # output closed early (e.g. piped into head): not an error of ours
        return 0
    if isinstance(exc, StdoutError):
        _silence_stdout()
    if isinstance(exc, SpecnsysError):
        return _print_error(str(exc), exc.exit_code)
    if is_out_of_memory(exc):
        err = out_of_memory(exc)
        return _print_error(str(err), err.exit_code)
    if os.environ.get("SPECNSYS_DEBUG"):
        raise exc
    detail = " ".join(str(exc).split()) or "no message"
    from specnsys.library_floors import too_old_message

    # not a bug of ours when Polars, DuckDB or Arrow is older than specnsys declares it needs
    outdated = too_old_message(f"{type(exc).__name__}: {detail}")
    if outdated is not None:
        return _print_error(outdated, EXIT_BAD_INPUT)
    print(
        f"specnsys: internal error: {type(exc).__name__}: {detail} "
        "(a bug; rerun with SPECNSYS_DEBUG=1 for the traceback)",
        file=sys.stderr,
    )
    return EXIT_INTERNAL


def largest_named_file(argv: Sequence[str]) -> int:
    """The size of the largest regular file among *argv*'s words (0 without one): the export
    a command reads, known before the parser loads the analysis stack, whose allocator takes
    its options once (:func:`specnsys.allocator.return_freed_memory`). Anything else (an
    option, a folder, a FIFO, a name that cannot be looked up) counts nothing."""
    largest = 0
    for word in argv:
        try:
            found = os.stat(word)
        except (OSError, ValueError):  # ValueError: a NUL in the word
            continue
        if stat.S_ISREG(found.st_mode):
            largest = max(largest, found.st_size)
    return largest


def _run(argv: Sequence[str] | None) -> int:
    warnings.showwarning = _show_warning
    _PENDING_WARNINGS.clear()
    if os.environ.get(THREADS_VARIABLE):  # the user's cap: Polars's pool too, before it loads
        hold_to_threads(usable_cores())
    return_freed_memory(
        address_space_threads=fit_to_address_space(),
        largest_input_bytes=largest_named_file(sys.argv[1:] if argv is None else argv),
    )
    with _queries_stopped_on_signal():
        # Imports the commands, and with them the analysis stack, with Ctrl-C and SIGTERM held
        # until it is loaded: an interrupt inside Polars's start-up (it imports Python modules
        # from Rust and unwraps the result) made Polars panic, printing a Rust backtrace
        # before the one line (seen once in the suite, tests/test_reliability_exits.py).
        with signals_held():
            parser = build_parser()
        args = parser.parse_args(argv)
        from specnsys.ingest.trace import rebuilt_once

        # a cache file damaged in its middle fails a query: rebuilt, the command runs again
        code = rebuilt_once(lambda: int(args.run(args) or 0), _PENDING_WARNINGS.clear)
    if _SIGNALLED:  # a library swallowed the interrupt (DuckDB 2.0 finishes the query anyway)
        raise KeyboardInterrupt
    sys.stdout.flush()  # a full disk must fail here, not silently at exit
    print(*_PENDING_WARNINGS, sep="\n", file=sys.stderr, end="\n" if _PENDING_WARNINGS else "")
    return code


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command line; return its exit status (see the module docs). Run as the program
    (*argv* None), an interrupted command exits here: see :func:`_exit_interrupted`."""
    with _signals_interrupt(), _guarded_stdout():
        try:
            return _run(argv)
        except SystemExit:  # argparse: --help, --version, usage errors (already one line)
            raise
        except BaseException as exc:  # noqa: BLE001 - the last line of defence against tracebacks
            code = _exit_status(exc)
    if argv is None and code in (128 + signal.SIGINT, 128 + signal.SIGTERM):
        _exit_interrupted(code)
    return code


def _exit_interrupted(code: int) -> None:
    """Exit with *code* now. A Ctrl-C that lands inside an import run by an extension module
    (through ``PyRun_String``) marks the interpreter, which then ends itself by SIGINT at exit
    whatever status it was given: seen as -2 instead of 130 once in three Ctrl-Cs 0.3 s into
    the imports. Exiting here also spares waiting for reader threads still in a query. The
    command's ``finally`` blocks have run; ``atexit`` functions run here."""
    import atexit

    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    atexit._run_exitfuncs()
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
