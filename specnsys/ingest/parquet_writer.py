"""Writing a model table to the cache as one Parquet file, a row group per slice as it comes.

The cache favours write speed (a cold open writes it) over size, and warm reads (every later
command reads it): the choices below and their measurements are in
docs/performance.md#cache-format.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pyarrow loads when a model is built: a warm run skips it
    import pyarrow as pa
    import pyarrow.parquet as pq

#: LZ4: of Parquet with Snappy or LZ4 and Arrow IPC plain or LZ4, LZ4 Parquet wrote fast
#: enough at a small size and read back fastest with the least memory (IPC must be mapped or
#: decompressed whole); see docs/performance.md#cache-format. Integer columns are
#: delta-coded (see :func:`write_parquet`).
PARQUET_COMPRESSION = "lz4"


def write_parquet(slices: Iterable[pa.Table], target: Path) -> int:
    """Write *slices* (same columns) to one Parquet file, a row group per slice, as they come;
    the number of rows written."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    writer: pq.ParquetWriter | None = None
    rows = 0
    try:
        for part in slices:
            if writer is None:
                # Dictionary pages only for text: trying them on timestamps and ids costs a
                # large share of the write and gains nothing (they do not repeat). Min/max
                # statistics only for the others: no query prunes row groups by a kernel name,
                # and comparing every string costs time on every write.
                # A dictionary-coded column is written with its own dictionary; no Arrow
                # schema is stored, so every reader sees text columns as plain strings.
                # Integers are delta-coded: times and ids mostly grow row by row, so their
                # bit-packed differences are small, which made the write, the cache and
                # the analysis of it cheaper (docs/performance.md#cache-format).
                text = [
                    f.name
                    for f in part.schema
                    if pa.types.is_string(f.type) or pa.types.is_dictionary(f.type)
                ]
                others = [f.name for f in part.schema if f.name not in text]
                ints = [f.name for f in part.schema if pa.types.is_integer(f.type)]
                writer = pq.ParquetWriter(
                    target,
                    part.schema,
                    compression=PARQUET_COMPRESSION,
                    use_dictionary=text,
                    column_encoding=dict.fromkeys(ints, "DELTA_BINARY_PACKED"),
                    write_statistics=others,
                    store_schema=False,
                )
            elif part.schema != writer.schema:
                part = part.cast(writer.schema)
            writer.write_table(part)
            rows += part.num_rows
    finally:
        if writer is not None:
            writer.close()
    return rows
