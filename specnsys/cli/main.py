"""``specnsys`` entry point: argument parsing, error-to-exit-code mapping, warning display.

Exit status: 0 success; 2 bad input or usage (one line on stderr); 3 an internal error (a bug:
one line, full traceback with ``SPECNSYS_DEBUG=1``); 130 interrupted.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from collections.abc import Sequence

from specnsys.errors import EXIT_BAD_INPUT, EXIT_INTERNAL, SpecnsysError, out_of_memory

_PENDING_WARNINGS: list[str] = []


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:  # noqa: ANN001
    # Held until the command ends: printed after a result, dropped when the command fails, so
    # that a failure is always exactly one line on stderr.
    text = f"specnsys: warning: {message}"
    if text not in _PENDING_WARNINGS:
        _PENDING_WARNINGS.append(text)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line and status 2, like every bad input
        print(f"specnsys: error: {message} (see specnsys --help)", file=sys.stderr)
        raise SystemExit(EXIT_BAD_INPUT)


def build_parser() -> argparse.ArgumentParser:
    from specnsys import __version__
    from specnsys.cli import (
        analyze,
        compare,
        info,
        kernels,
        phases,
        plot,
        profile,
        ranges,
        report,
        sql,
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
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
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
    return parser


def _out_of_memory(exc: BaseException) -> int:
    err = out_of_memory(exc)
    print(f"specnsys: error: {err}", file=sys.stderr)
    return err.exit_code


def main(argv: Sequence[str] | None = None) -> int:
    warnings.showwarning = _show_warning
    _PENDING_WARNINGS.clear()
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code = int(args.run(args) or 0)
        print(*_PENDING_WARNINGS, sep="\n", file=sys.stderr, end="\n" if _PENDING_WARNINGS else "")
        return code
    except SpecnsysError as exc:
        print(f"specnsys: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except MemoryError as exc:
        return _out_of_memory(exc)
    except KeyboardInterrupt:
        print("specnsys: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # Output closed early (e.g. piped into head): not an error of ours.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as exc:  # noqa: BLE001 - the last line of defence against tracebacks
        duckdb = sys.modules.get("duckdb")  # imported by whatever ran a query, if anything did
        if duckdb is not None and isinstance(exc, duckdb.OutOfMemoryException):
            return _out_of_memory(exc)
        if os.environ.get("SPECNSYS_DEBUG"):
            raise
        detail = " ".join(str(exc).split()) or "no message"
        print(
            f"specnsys: internal error: {type(exc).__name__}: {detail} "
            "(a bug; rerun with SPECNSYS_DEBUG=1 for the traceback)",
            file=sys.stderr,
        )
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
