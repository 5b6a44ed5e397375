"""``specnsys sql TRACE "SELECT ..."``: DuckDB SQL over the model tables.

Output: a table on the terminal, or ``--format csv|json|parquet`` (to stdout, or ``-o FILE``;
parquet needs ``-o``). The query result goes DuckDB -> Arrow -> writer, never through Python rows.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import polars as pl

from specnsys.errors import UsageError
from specnsys.ingest import cache, open_trace
from specnsys.ingest.model import to_arrow
from specnsys.ingest.readonly_sql import check_output_path, lock_down


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "sql",
        help="run DuckDB SQL over the model tables",
        description="Tables: threads, processes, nvtx, runtime, kernels, memcpy, memset, "
        "sync, gpu_metrics, gpus.",
    )
    p.add_argument("trace", help="nsys .sqlite export (or .nsys-rep with nsys on PATH)")
    p.add_argument("query", help='a DuckDB query, e.g. "SELECT count(*) FROM kernels"')
    p.add_argument("--format", choices=("table", "csv", "json", "parquet"), default="table")
    p.add_argument("-o", "--output", type=Path, help="write the result to this file")
    p.add_argument(
        "--max-rows", type=int, default=50, help="rows shown in table format (default 50)"
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    import duckdb

    if args.format == "parquet" and args.output is None:
        raise UsageError("--format parquet needs -o FILE")
    with open_trace(args.trace, use_cache=not args.no_cache) as trace:
        # Second line behind Trace.sql's statement check: no file outside the cache folder.
        lock_down(trace.connection, [trace.cache_folder] if trace.cache_folder else [])
        if args.output is not None:
            check_output_path(args.output, [Path(args.trace), trace.path, cache.cache_root()])
        try:
            result = to_arrow(trace.sql(args.query)) if args.query.strip() else None
        except duckdb.Error as exc:
            raise UsageError(f"SQL error: {str(exc).splitlines()[0]}") from None
        if result is None:
            raise UsageError("the query returned no result set (give a SELECT)")
    frame = pl.from_arrow(result)
    assert isinstance(frame, pl.DataFrame)
    write_result(frame, args.format, args.output, args.max_rows)
    return 0


def write_result(frame: pl.DataFrame, fmt: str, output: Path | None, max_rows: int) -> None:
    """Write *frame* in *fmt* to *output* (a file) or stdout."""
    try:
        if fmt == "parquet":
            frame.write_parquet(output)
        elif fmt == "csv":
            text = frame.write_csv()
            _emit(text, output)
        elif fmt == "json":
            _emit(frame.write_json() + "\n", output)
        else:
            with pl.Config(
                tbl_rows=max_rows, tbl_cols=-1, tbl_width_chars=200, fmt_str_lengths=60,
                tbl_hide_dataframe_shape=False,
            ):
                _emit(f"{frame}\n", output)
    except OSError as exc:
        raise UsageError(f"cannot write {output}: {exc.strerror or exc}") from None


def _emit(text: str, output: Path | None) -> None:
    if output is None:
        sys.stdout.write(text)
    else:
        output.write_text(text)
