"""The Arrow normalizations of the three big tables: NVTX events, runtime calls and kernels.

Their rows only need arithmetic and name look-ups, which Arrow compute does slice by slice at a
fraction of the CPU time of a DuckDB query (each slice's round trip into DuckDB and back, and
its hash joins, are what the query pays for; see docs/performance.md#normalization). Each
function turns one raw slice, read by :mod:`specnsys.ingest.sqlite_reader`, into the model
table's columns (defined in :mod:`specnsys.ingest.model`), the slice's row order kept.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import polars as pl

from specnsys.ingest.arrow_values import StringLookup, arrow_values, coded, int64, lookup_by_keys

if TYPE_CHECKING:  # pyarrow loads when a model is built: a warm run skips it
    import pyarrow as pa

#: An nsys global id's pid (bits 24-47) and tid (the low 24 bits), in SQL for the tables
#: normalized by a query (``{g}`` is the column); :func:`_pid_of` and :func:`_tid_of` in Arrow.
PID = "((({g}) >> 24) & 16777215)"
TID = "(({g}) & 16777215)"

#: NVTX event types by what the row is (every other type, and a NULL one, is ``other``).
NVTX_KINDS = {
    59: "push_pop", 70: "push_pop", 60: "start_end", 71: "start_end", 34: "mark",
    75: "domain_create", 76: "domain_destroy", 33: "category", 39: "thread_name",
}  # fmt: skip


@dataclass(frozen=True)
class NormalizeContext:
    """What an Arrow normalization looks up besides its slice: the strings, and for NVTX
    rows what was gathered from the whole table first."""

    strings: StringLookup
    nvtx: NvtxContext | None = None


#: A model table's normalization in Arrow compute: (raw slice, context) -> model slice.
ArrowNormalize = Callable[["pa.Table", NormalizeContext], "pa.Table"]


class ValuesOutOfRange(ValueError):
    """Arithmetic of an Arrow normalization overflowed 64 bits (bad data, not a bug)."""


def _duration(raw: pa.Table, table: str) -> pa.ChunkedArray:
    """``end - start``, refusing to wrap around (as DuckDB's subtraction refuses)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    try:
        return pc.subtract_checked(raw.column("end"), raw.column("start"))
    except pa.ArrowInvalid:
        raise ValuesOutOfRange(f"{table}: end - start overflows a 64-bit integer") from None


def _pid_of(global_id: pa.ChunkedArray) -> pa.ChunkedArray:
    """:data:`PID` in Arrow (bits 24-47 of an nsys global id)."""
    import pyarrow.compute as pc

    return pc.bit_wise_and(pc.shift_right(global_id, int64(24)), int64(16777215))


def _tid_of(global_id: pa.ChunkedArray) -> pa.ChunkedArray:
    """:data:`TID` in Arrow (the low 24 bits of an nsys global id)."""
    import pyarrow.compute as pc

    return pc.bit_wise_and(global_id, int64(16777215))


@dataclass(frozen=True)
class NvtxContext:
    """What NVTX rows need from the whole table, gathered before the rows are built (see
    :func:`specnsys.ingest.build._prepare_nvtx`): domain and category names (``pid, domain_id[, category_id]``
    and the name), and ``id, depth, parent`` of every push/pop range, in id order."""

    domains: pa.Table
    categories: pa.Table
    nesting: pa.Table

    @functools.cached_property
    def _nesting_ids(self) -> pl.Series:
        """The nesting's ids (sorted), made a Series once for every slice's bisection."""
        return pl.Series(self.nesting.column("id"))

    def nesting_of(self, rowids: pa.ChunkedArray) -> pa.Table:
        """The nesting rows of the ranges whose ids lie in the sorted slice *rowids*."""
        if len(rowids) == 0:
            return self.nesting.slice(0, 0)
        lo = self._nesting_ids.search_sorted(rowids[0].as_py(), "left")
        hi = self._nesting_ids.search_sorted(rowids[-1].as_py(), "right")
        return self.nesting.slice(lo, hi - lo)


def nvtx_arrow(raw: pa.Table, context: NormalizeContext) -> pa.Table:
    """One slice of ``NVTX_EVENTS`` as model rows: kinds, texts, domain and category names,
    depth and parent looked up, the slice's row order kept."""
    import pyarrow as pa
    import pyarrow.compute as pc

    strings, nvtx = context.strings, context.nvtx
    if nvtx is None:
        raise ValueError("NVTX rows are built after _prepare_nvtx")
    col = raw.column
    gtid = col("globalTid")
    pid = _pid_of(gtid)
    domain_id = pc.coalesce(col("domainId"), int64(0))
    kind_at = pc.index_in(col("eventType"), arrow_values(list(NVTX_KINDS), pl.Int64))
    kinds = arrow_values([*NVTX_KINDS.values(), "other"], pl.String)
    nesting = nvtx.nesting_of(col("__rowid"))
    at = pc.index_in(col("__rowid"), nesting.column("id"))
    d, c = nvtx.domains, nvtx.categories
    return pa.table(
        {
            "id": col("__rowid"),
            "start": col("start"),
            "end": col("end"),
            "duration": _duration(raw, "NVTX_EVENTS"),
            "kind": pc.fill_null(pc.take(kinds, kind_at), kinds[-1]),
            "event_type": col("eventType"),
            "text": _text(col("text"), col("textId"), strings),
            "domain_id": domain_id,
            # pid IS NOT DISTINCT FROM, domain id (never NULL) =, category id =
            "domain": lookup_by_keys(
                [(pid, d.column("pid"), True), (domain_id, d.column("domain_id"), True)],
                d.column("domain"),
            ),
            "category_id": col("category"),
            "category": lookup_by_keys(
                [
                    (pid, c.column("pid"), True),
                    (domain_id, c.column("domain_id"), True),
                    (col("category"), c.column("category_id"), False),
                ],
                c.column("category"),
            ),
            "payload_int": col("payloadInt"),
            "payload_float": col("payloadFloat"),
            "json_text": _text(col("jsonText"), col("jsonTextId"), strings),
            "color": col("color"),
            "range_id": col("rangeId"),
            "pid": pid,
            "tid": _tid_of(gtid),
            "global_tid": gtid,
            "end_tid": _tid_of(col("endGlobalTid")),
            "end_global_tid": col("endGlobalTid"),
            "depth": pc.take(nesting.column("depth"), at),
            "parent": pc.take(nesting.column("parent"), at),
        }
    )  # fmt: skip


def _text(
    inline: pa.ChunkedArray, ids: pa.ChunkedArray, strings: StringLookup
) -> pa.ChunkedArray | pa.DictionaryArray:
    """An NVTX row's text: written inline, else by string id (registered strings), always
    dictionary-coded, so that every slice of a table has one type (a dense slice would have
    the writer decode the coded ones). A slice with every text by id resolves each distinct
    id once (:meth:`StringLookup.resolve_coded`); one with inline texts is hashed here rather
    than by Parquet's writer."""
    import pyarrow.compute as pc

    if inline.null_count == len(inline):
        return strings.resolve_coded(ids)
    return pc.dictionary_encode(pc.coalesce(inline, strings.resolve(ids))).combine_chunks()


def runtime_arrow(raw: pa.Table, context: NormalizeContext) -> pa.Table:
    """One slice of ``CUPTI_ACTIVITY_KIND_RUNTIME`` as model rows (names without the
    ``_v<N>`` version suffix in ``name``, as written in ``raw_name``)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    strings = context.strings
    col = raw.column
    # The version suffix is stripped once per distinct name of the slice, not once per call;
    # both names stay coded by the distinct ids (see StringLookup.resolve_coded).
    raw_names = strings.resolve_coded(col("nameId"))
    names = pc.replace_substring_regex(
        raw_names.dictionary, pattern="(_v[0-9]+)+$", replacement="", max_replacements=1
    )
    gtid = col("globalTid")
    return pa.table(
        {
            "start": col("start"),
            "end": col("end"),
            "duration": _duration(raw, "CUPTI_ACTIVITY_KIND_RUNTIME"),
            "name": coded(raw_names.indices, names),
            "raw_name": raw_names,
            "correlation_id": col("correlationId"),
            "event_class": col("eventClass"),
            "is_backtrace": pc.equal(col("eventClass"), int64(67)),
            "pid": _pid_of(gtid),
            "tid": _tid_of(gtid),
            "global_tid": gtid,
        }
    )


KERNEL_COLUMNS = {  # model name: source column, for the columns kernels keep as they are
    "device_id": "deviceId", "context_id": "contextId", "stream_id": "streamId",
    "correlation_id": "correlationId",
}
KERNEL_LAUNCH_COLUMNS = {
    "grid_x": "gridX", "grid_y": "gridY", "grid_z": "gridZ",
    "block_x": "blockX", "block_y": "blockY", "block_z": "blockZ",
    "graph_node_id": "graphNodeId", "graph_id": "graphId",
}


def kernels_arrow(raw: pa.Table, context: NormalizeContext) -> pa.Table:
    """One slice of ``CUPTI_ACTIVITY_KIND_KERNEL`` as model rows."""
    import pyarrow as pa

    strings = context.strings
    col = raw.column
    return pa.table(
        {
            "start": col("start"),
            "end": col("end"),
            "duration": _duration(raw, "CUPTI_ACTIVITY_KIND_KERNEL"),
            **{name: col(source) for name, source in KERNEL_COLUMNS.items()},
            "pid": _pid_of(col("globalPid")),
            "global_pid": col("globalPid"),
            "short_name": strings.resolve_coded(col("shortName")),
            "demangled_name": strings.resolve_coded(col("demangledName")),
            **{name: col(source) for name, source in KERNEL_LAUNCH_COLUMNS.items()},
        }
    )

