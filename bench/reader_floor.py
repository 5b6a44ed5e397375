"""The reader's floor: specnsys's own SQLite reader over every source column a cold open reads,
with nothing done to the rows.

Each raw source the model is built from (the string table, then every table's reads, resolved
as the build resolves them) is read slice by slice through
:meth:`specnsys.ingest.sqlite_reader.SqliteExport.iter_reads`, on its thread pool (one thread
per core), and every slice is dropped as it arrives: no normalization, no DuckDB, no Parquet,
no analysis. What a cold ``analyze`` spends beyond this is the build's and the analysis's own
work; what this spends beyond the bare ``sqlite3`` scan is the cost of turning SQLite's values
into Arrow arrays (``bench/scale.py`` prints both).

Usage: python bench/reader_floor.py EXPORT.sqlite   (prints the rows and slices read)
"""

from __future__ import annotations

import sys
from pathlib import Path

from specnsys.ingest.model import MODEL, STRINGS
from specnsys.ingest.sqlite_reader import SliceRead, SqliteExport


def read_everything(path: Path) -> tuple[int, int]:
    """(rows, slices) read from *path*: every raw source of the model, dropped as read."""
    export = SqliteExport(path)
    sources = [STRINGS.resolve(export)] + [s.resolve(export) for t in MODEL for s in t.sources]
    reads = [SliceRead(s.table, s.columns, s.with_rowid) for s in sources]
    rows = slices = 0
    for _, part in export.iter_reads(reads):
        rows += part.num_rows
        slices += 1
    return rows, slices


def main() -> int:
    rows, slices = read_everything(Path(sys.argv[1]))
    print(f"{rows} rows in {slices} slices")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
