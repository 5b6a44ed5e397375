"""``specnsys sql TRACE "SELECT ..."``: DuckDB SQL over the model tables.

Output: a text table on the terminal, or ``--format csv|json|parquet`` (to stdout, or
``-o FILE``; parquet needs ``-o``). Every result DuckDB gives prints in every format: DuckDB
renders what the writers cannot represent, never Python row by row:

* ``table``: every value as DuckDB's own text (``CAST(... AS VARCHAR)``), aligned in columns two
  spaces apart, numbers right-aligned, never wrapped; the first ``--max-rows`` rows.
* ``csv``: numbers, booleans and text as they are; every other type (dates and timestamps of
  any range, INTERVAL, BLOB, BIT, UUID, LIST, STRUCT, MAP, UNION, HUGEINT, ...) as DuckDB's text.
* ``json``: one object per row, made by DuckDB's ``to_json`` (nested types stay nested).
* ``parquet``: through Arrow; types Parquet cannot hold (INTERVAL, UNION, BIT, HUGEINT, ...) as
  DuckDB's text.

Duplicate column names (``SELECT * FROM kernels JOIN runtime USING (...)``) are made unique with
a suffix (``start``, ``start_1``), as pandas and Polars readers expect, with a warning naming
them. ``--timeout`` interrupts a query that runs longer; Ctrl-C interrupts it as any command.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import re
import sys
import threading
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, cast

import polars as pl

from specnsys.cli.common import ROWS_LIMIT, rows_arg
from specnsys.errors import UsageError
from specnsys.ingest import cache, open_trace
from specnsys.ingest.arrow_values import to_arrow
from specnsys.ingest.quality import build_warnings, warn_skipped
from specnsys.ingest.readonly_sql import check_output_path, lock_down
from specnsys.ingest.sqlite_reader import quote_identifier
from specnsys.small_files import write_files

if TYPE_CHECKING:
    import duckdb
    import pyarrow as pa
    from duckdb.sqltypes import DuckDBPyType

#: DuckDB types that Polars reads and writes as CSV without loss or panic.
_PLAIN = frozenset(
    {"boolean", "tinyint", "smallint", "integer", "bigint", "utinyint", "usmallint",
     "uinteger", "ubigint", "float", "double", "decimal", "varchar"}
)  # fmt: skip
#: DuckDB types shown right-aligned in the text table.
_NUMERIC = (_PLAIN - {"boolean", "varchar"}) | {"hugeint", "uhugeint", "bignum"}
#: DuckDB types that Arrow's Parquet writer refuses or stores wrongly (HUGEINT overflows
#: Arrow's decimal128(38), BIT and BIGNUM arrive as opaque bytes, TIMETZ loses its offset).
_NOT_PARQUET = frozenset(
    {"interval", "union", "bit", "bignum", "hugeint", "uhugeint", "time with time zone"}
)
_CELL_CHARS = 60  # longer table cells are cut (the other formats give the whole value)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "sql",
        help="run DuckDB SQL over the model tables",
        description="Tables: threads, processes, nvtx, runtime, kernels, memcpy, memset, "
        "sync, gpu_metrics, gpus; on a dataset of specnsys collect: runs, phases, steps, "
        "requests.",
    )
    p.add_argument(
        "trace", help="nsys .sqlite export (or .nsys-rep with nsys on PATH), or a collect dataset"
    )
    p.add_argument("query", help='a DuckDB query, e.g. "SELECT count(*) FROM kernels"')
    p.add_argument("--format", choices=("table", "csv", "json", "parquet"), default="table")
    p.add_argument("-o", "--output", type=Path, help="write the result to this file")
    p.add_argument(
        "--max-rows", type=rows_arg, default=50,
        help=f"rows shown in table format (default 50, at most {ROWS_LIMIT:,}; --format csv "
        "gives every row)",
    )  # fmt: skip
    p.add_argument(
        "--timeout",
        type=_seconds,
        metavar="SECONDS",
        help="stop the query after this many seconds (exit status 2)",
    )
    p.set_defaults(run=run)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (0 < value < 1e9):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds above 0")
    return value


def run(args: argparse.Namespace) -> int:
    if args.format == "parquet" and args.output is None:
        raise UsageError("--format parquet needs -o FILE")
    if _is_folder(Path(args.trace)):
        return _run_on_dataset(args)
    with open_trace(args.trace, use_cache=not args.no_cache) as trace:
        # the rows' values the model could not keep as the file has them (no checks run)
        warn_skipped(build_warnings(trace), args.trace)
        # Second line behind Trace.sql's statement check: no file outside the cache folder.
        readable = [trace.cache_folder] if trace.cache_folder else []
        protected = [Path(args.trace), trace.path, cache.cache_root()]
        result = _answer(args, trace.connection, trace.sql, readable, protected)
    _write(result, args.output)
    return 0


def _is_folder(path: Path) -> bool:
    """Whether *path* is a folder (a dataset); one that cannot be looked at is left to the
    trace path, which says why in one line."""
    try:
        return path.is_dir()
    except OSError:
        return False


def _run_on_dataset(args: argparse.Namespace) -> int:
    """``sql DATASET``: the same answer path over a ``collect`` dataset's tables."""
    from specnsys.runset.reader import DatasetReader

    with DatasetReader(args.trace) as dataset:
        result = _answer(
            args, dataset.connection, dataset.sql, [dataset.root], [dataset.root]
        )
    _write(result, args.output)
    return 0


def _answer(
    args: argparse.Namespace,
    con: duckdb.DuckDBPyConnection,
    query: Callable[[str], duckdb.DuckDBPyRelation | None],
    readable: list[Path],
    protected: list[Path],
) -> str | pa.Table:
    """Lock *con* to the *readable* folders, refuse an ``-o`` over a *protected* path, run
    the query (through *query*, which checks it is read-only) and render it."""
    lock_down(con, readable)
    if args.output is not None:
        check_output_path(args.output, protected)
    with _answering(con, args.timeout):
        relation = query(args.query)
        if relation is None:
            raise UsageError("the query holds no statement (only comments or blanks); give a SELECT")
        return _render(_unique_columns(relation), args.format, args.max_rows)


def _write(result: str | pa.Table, output: Path | None) -> None:
    if isinstance(result, str):
        _write_text(result, output)
    else:
        _write_parquet(result, output)


@contextlib.contextmanager
def _answering(con: duckdb.DuckDBPyConnection, timeout: float | None) -> Iterator[None]:
    """Run the block's DuckDB work under *timeout* and turn DuckDB's errors into exit codes:
    an SQL error and a stopped query are bad input (2), Ctrl-C is an interrupt (130), running
    out of memory stays what it is (4)."""
    import duckdb

    fired = threading.Event()

    def stop() -> None:
        fired.set()
        con.interrupt()

    timer = threading.Timer(timeout, stop) if timeout else None
    if timer is not None:
        timer.daemon = True
        timer.start()
    try:
        yield  # Ctrl-C reaches a running query through the CLI's signal watcher (cli/main.py)
    except duckdb.InterruptException:
        if fired.is_set():
            raise UsageError(f"query stopped after {timeout:g} s (--timeout)") from None
        raise KeyboardInterrupt from None  # Ctrl-C: DuckDB stopped the query for Python
    except duckdb.OutOfMemoryException:
        raise
    except duckdb.Error as exc:
        raise UsageError(f"SQL error: {one_line(str(exc))}") from None
    finally:
        if timer is not None:
            timer.cancel()


_LINE = re.compile(r"^LINE (\d+): ?(.*)$")


def one_line(message: str) -> str:
    """DuckDB's whole error *message* as one line: its lines joined, the hint ("Candidate
    bindings: ...", "Did you mean ...?") kept, and the ``LINE n: <query line>`` with the caret
    line under it said as ``(at line n, column c: <query line>)``, since a caret means nothing
    once the lines are joined."""
    lines = [line.rstrip() for line in message.splitlines()]
    parts: list[str] = []
    where = ""
    for i, line in enumerate(lines):
        m = _LINE.match(line)
        if m is None:
            if line.strip() and not set(line.strip()) <= {"^"}:
                parts.append(" ".join(line.split()))
            continue
        below = lines[i + 1] if i + 1 < len(lines) else ""
        column = below.find("^") - (len(line) - len(m.group(2))) + 1 if "^" in below else 0
        at = f", column {column}" if column > 0 else ""
        where = f" (at line {m.group(1)}{at}: {' '.join(m.group(2).split())})"
    return " ".join(parts) + where


def unique_names(names: list[str]) -> list[str]:
    """*names* with each repeat given the first free suffix ``_1``, ``_2``, ... (DuckDB's
    names are case-insensitive, so ``a`` and ``A`` are repeats too)."""
    taken = {name.lower() for name in names}
    seen: set[str] = set()
    unique = []
    for name in names:
        candidate, n = name, 0
        while candidate.lower() in seen or (n and candidate.lower() in taken):
            n += 1
            candidate = f"{name}_{n}"
        seen.add(candidate.lower())
        unique.append(candidate)
    return unique


def _unique_columns(relation: duckdb.DuckDBPyRelation) -> duckdb.DuckDBPyRelation:
    names = list(relation.columns)
    unique = unique_names(names)
    renamed = [f"{old} -> {new}" for old, new in zip(names, unique, strict=True) if old != new]
    if not renamed:
        return relation
    warnings.warn(f"duplicate column names made unique: {', '.join(renamed)}", stacklevel=2)
    return _project(relation, lambda _: False, unique)




def _project(
    relation: duckdb.DuckDBPyRelation,
    as_text: Callable[[DuckDBPyType], bool],
    names: list[str] | None = None,
) -> duckdb.DuckDBPyRelation:
    """*relation*'s columns by position, those *as_text* picks cast to VARCHAR."""
    names = names or list(relation.columns)
    columns = [
        f"#{i}{'::VARCHAR' if as_text(kind) else ''} AS {quote_identifier(name)}"
        for i, (kind, name) in enumerate(zip(relation.types, names, strict=True), start=1)
    ]
    return relation.project(", ".join(columns))


def _type_ids(kind: DuckDBPyType) -> Iterator[str]:
    """The ids of *kind* and of every type nested in it."""
    yield str(kind.id)
    if kind.id in ("list", "array", "struct", "map", "union"):
        for _, child in kind.children:
            if not isinstance(child, int):
                # the stubs allow a list of names too, which only an enum's children are
                yield from _type_ids(cast("DuckDBPyType", child))


def _render(relation: duckdb.DuckDBPyRelation, fmt: str, max_rows: int) -> str | pa.Table:
    """The result in *fmt*: text for table, csv and json; an Arrow table for parquet."""
    if fmt == "parquet":
        return to_arrow(_project(relation, lambda t: not _NOT_PARQUET.isdisjoint(_type_ids(t))))
    if fmt == "json":
        fields = ", ".join(
            f"'{name.replace(chr(39), chr(39) * 2)}': #{i}"
            for i, name in enumerate(relation.columns, start=1)
        )
        rows = pl.from_arrow(to_arrow(relation.project(f"to_json({{{fields}}})::VARCHAR AS j")))
        assert isinstance(rows, pl.DataFrame)
        return "[" + ",".join(rows["j"].to_list()) + "]\n"
    if fmt == "csv":
        frame = pl.from_arrow(to_arrow(_project(relation, lambda t: t.id not in _PLAIN)))
        assert isinstance(frame, pl.DataFrame)
        return frame.write_csv()
    numeric = [kind.id in _NUMERIC for kind in relation.types]
    shown = _project(relation, lambda _: True).limit(max_rows + 1)
    frame = pl.from_arrow(to_arrow(shown))
    assert isinstance(frame, pl.DataFrame)
    return text_table(frame.head(max_rows), numeric, more=frame.height > max_rows)


def text_table(frame: pl.DataFrame, right: list[bool], more: bool) -> str:
    """*frame* (text columns) as aligned columns two spaces apart, a header and a rule; the
    columns *right* marks right-aligned; NULL for a missing value; long cells cut."""
    cells = frame.select(
        pl.col(name)
        .fill_null("NULL")
        .str.replace_all(r"[\r\n\t]", " ")
        .pipe(_cut)
        for name in frame.columns
    )
    header = [" ".join(name.split()) for name in frame.columns]
    widths = [
        # a length column's max: an int, None when there are no rows
        max(len(title), int(cast(int | None, cells[name].str.len_chars().max()) or 0))
        for title, name in zip(header, cells.columns, strict=True)
    ]
    padded = [
        pl.col(name).str.pad_start(width) if r else pl.col(name).str.pad_end(width)
        for name, width, r in zip(cells.columns, widths, right, strict=True)
    ]
    lines = [
        "  ".join(
            t.rjust(w) if r else t.ljust(w) for t, w, r in zip(header, widths, right, strict=True)
        ),
        "  ".join("-" * w for w in widths),
    ]
    if cells.height:
        body = cells.select(pl.concat_str(padded, separator="  ").str.strip_chars_end())
        lines += body.to_series().to_list()
    rows = f"{frame.height} row{'s' if frame.height != 1 else ''}"
    lines.append(
        f"({rows} shown; more follow: raise --max-rows or use --format csv)" if more else f"({rows})"
    )
    return "\n".join(line.rstrip() for line in lines) + "\n"


def _cut(cell: pl.Expr) -> pl.Expr:
    return (
        pl.when(cell.str.len_chars() > _CELL_CHARS)
        .then(cell.str.slice(0, _CELL_CHARS - 1) + "…")
        .otherwise(cell)
    )


def _write_text(text: str, output: Path | None) -> None:
    """Write *text* to *output* (whole or not at all: :func:`write_files`) or stdout; a
    failure is one line naming the target (exit 2).

    A closed pipe (``| head``) is not a failure: it goes up to ``main`` as BrokenPipeError.
    """
    if output is not None:
        write_files({output: text.encode("utf-8")})
        return
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        raise
    except OSError as exc:
        _drop_stdout()
        raise UsageError(f"cannot write to standard output: {exc.strerror or exc}") from None


def _write_parquet(table: pa.Table, output: Path | None) -> None:
    """Write *table* to *output* through :func:`write_files` (a temporary file beside it,
    renamed when whole), streamed through a file we open: given a path, pyarrow removes it
    when the write fails (measured: ``-o /dev/full`` as root deleted the device node)."""
    import pyarrow.parquet as pq

    assert output is not None  # checked before the query ran
    write_files({output: lambda sink: pq.write_table(table, sink)})


def _drop_stdout() -> None:
    """Point stdout at /dev/null so that the text still buffered is not written (and does not
    fail again) when Python flushes it at exit."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        fd = sys.stdout.fileno()
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, fd)
        os.close(null)
