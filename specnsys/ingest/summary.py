"""What a trace contains and what it can support, computed once at ingest and cached with it.

``info`` prints this; the analyses consult ``capabilities`` to say "not available, because ..."
instead of producing a number the trace cannot back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, TypeVar, cast

from specnsys.errors import BadInputError
from specnsys.ingest.schema import SchemaVersion
from specnsys.vocabulary import ACCEPTED_MARK, API_CALL_SQL, DOMAIN, PROPOSED_MARK

if TYPE_CHECKING:
    from pathlib import Path

    import duckdb

#: The OS runtime rows that are calls (not the markers of that tracing starting or finishing).
OSRT_CALL_SQL = "kind = 'call'"

#: Tables of events with a start (and an end); ``cpu_samples`` (instants) counts too.
SPAN_TABLES = ("nvtx", "runtime", "kernels", "memcpy", "memset", "graphs", "sync", "osrt")


@dataclass(frozen=True)
class Capability:
    """Whether one analysis can run on this trace, and why not when it cannot."""

    available: bool
    reason: str


@dataclass
class TraceSummary:
    """Versions, counts, time span, processes and capabilities of one ingested export."""

    version: SchemaVersion
    source_tables: list[str]
    row_counts: dict[str, int]
    source_row_counts: dict[str, int]
    span_start_ns: int | None
    span_end_ns: int | None
    nvtx_kinds: dict[str, int]
    nvtx_domains: list[str]
    processes: list[dict[str, object]]
    capabilities: dict[str, Capability] = field(default_factory=dict)
    #: Rows whose name's string id is not in ``StringIds``, per model ``table`` (rows with any)
    #: and per ``table.column``.
    dangling_string_ids: dict[str, int] = field(default_factory=dict)
    #: Values of numeric columns that are no number, read as NULL, per source ``TABLE.column``.
    inexact_values: dict[str, int] = field(default_factory=dict)
    #: Text values that were not valid UTF-8, read with U+FFFD, per source ``TABLE.column``.
    invalid_utf8: dict[str, int] = field(default_factory=dict)

    @property
    def span_ns(self) -> int | None:
        if self.span_start_ns is None or self.span_end_ns is None:
            return None
        return self.span_end_ns - self.span_start_ns

    def to_dict(self) -> dict[str, object]:
        out = asdict(self)
        out["version"] = self.version.to_dict()
        out["span_ns"] = self.span_ns
        return out

    @classmethod
    def from_dict(cls, data: object) -> TraceSummary:
        """The summary :meth:`to_dict` wrote (a cache manifest's JSON); a TypeError or
        KeyError for a document that is none (each field is checked to be of its type)."""
        doc = _of(dict, data)
        version = _of(dict, doc["version"])
        return cls(
            version=SchemaVersion(
                product_version=_optional(str, version["product_version"]),
                schema_version=_optional(str, version["schema_version"]),
                meta_table=_optional(str, version["meta_table"]),
                era_estimate=_of(str, version["era_estimate"]),
                export_params=_mapping(str, version["export_params"]),
            ),
            source_tables=_items(str, doc["source_tables"]),
            row_counts=_mapping(int, doc["row_counts"]),
            source_row_counts=_mapping(int, doc["source_row_counts"]),
            span_start_ns=_optional(int, doc["span_start_ns"]),
            span_end_ns=_optional(int, doc["span_end_ns"]),
            nvtx_kinds=_mapping(int, doc["nvtx_kinds"]),
            nvtx_domains=_items(str, doc["nvtx_domains"]),
            processes=_items(dict, doc["processes"]),
            capabilities={
                name: Capability(_of(bool, c["available"]), _of(str, c["reason"]))
                for name, c in _mapping(dict, doc["capabilities"]).items()
            },
            dangling_string_ids=_mapping(int, doc.get("dangling_string_ids", {})),
            inexact_values=_mapping(int, doc.get("inexact_values", {})),
            invalid_utf8=_mapping(int, doc.get("invalid_utf8", {})),
        )


_T = TypeVar("_T")


def _of(kind: type[_T], value: object) -> _T:
    """*value*, which JSON read back, checked to be a *kind* (a TypeError otherwise)."""
    if not isinstance(value, kind):
        raise TypeError(f"a trace summary holds a {type(value).__name__} for a {kind.__name__}")
    return value


def _optional(kind: type[_T], value: object) -> _T | None:
    return None if value is None else _of(kind, value)


def _items(kind: type[_T], value: object) -> list[_T]:
    """A JSON array whose items are each a *kind* (the list itself, not a copy)."""
    items = _of(list, value)
    for item in items:
        _of(kind, item)
    return cast("list[_T]", items)


def _mapping(kind: type[_T], value: object) -> dict[str, _T]:
    """A JSON object whose values are each a *kind* (the dict itself, not a copy)."""
    entries = _of(dict, value)
    for item in entries.values():
        _of(kind, item)
    return cast("dict[str, _T]", entries)


#: A time further than this from the session start (36.5 years) is garbage, not a measurement;
#: below it, differences and sums of a few durations stay within int64 nanoseconds.
MAX_ABS_TIME_NS = 1 << 60


def require_plausible_times(summary: TraceSummary, path: Path) -> None:
    """Refuse an export whose event times lie beyond +-2**60 ns (36.5 years) of the session
    start: no real capture has them, and 64-bit sums over them overflow (found by the
    property tests), so any number computed from them would be wrong."""
    lo, hi = summary.span_start_ns, summary.span_end_ns
    if (lo is not None and lo < -MAX_ABS_TIME_NS) or (hi is not None and hi > MAX_ABS_TIME_NS):
        raise BadInputError(
            f"{path}: event times out of range ({lo} to {hi} ns from the session start, "
            f"beyond +-2^60 ns = 36.5 years): a corrupt export"
        )


def summarize(
    con: duckdb.DuckDBPyConnection,
    version: SchemaVersion,
    source_tables: list[str],
    model_tables: list[str],
    row_counts: Mapping[str, int] | None = None,
) -> TraceSummary:
    """Summarize a trace whose model tables are visible in *con* under their model names.

    ``source_row_counts`` maps each source table read to its row count; the model keeps every
    source row, so these are the model's counts (the corpus tests check them against SQLite).
    *row_counts*: the model tables' rows as the build counted them (else counted here).
    """
    from specnsys.ingest.model import MODEL

    if row_counts is not None and set(model_tables) <= set(row_counts):
        counts = {t: int(row_counts[t]) for t in model_tables}
    else:
        # one statement for every table's count (and no result is left unfinished: the
        # connection goes on to serve the trace's analyses)
        each = " UNION ALL ".join(f"SELECT '{t}', count(*) FROM {t}" for t in model_tables)
        counts = {str(t): int(n) for t, n in con.execute(each).fetchall()}
    source_row_counts = {
        t.counts_source: counts[t.name]
        for t in MODEL
        if t.counts_source and t.counts_source in source_tables
    }
    # NVTX domain/category/thread-name rows are definitions, not events: they stay out.
    bounds = " UNION ALL ".join(
        [
            f'SELECT min(start) AS lo, max(COALESCE("end", start)) AS hi FROM {t}'
            + (" WHERE kind IN ('push_pop', 'start_end', 'mark')" if t == "nvtx" else "")
            for t in SPAN_TABLES
        ]
        + ["SELECT min(timestamp), max(timestamp) FROM cpu_samples"]
    )
    lo, hi = con.execute(f"SELECT min(lo), max(hi) FROM ({bounds})").fetchall()[0]
    nvtx = _NvtxGroups(con)
    processes = _processes(con)
    summary = TraceSummary(
        version=version,
        source_tables=source_tables,
        row_counts=counts,
        source_row_counts=source_row_counts,
        span_start_ns=None if lo is None else int(lo),
        span_end_ns=None if hi is None else int(hi),
        nvtx_kinds=nvtx.kinds(),
        nvtx_domains=nvtx.domains(),
        processes=processes,
    )
    summary.capabilities = _capabilities(con, summary, nvtx)
    return summary


class _NvtxGroups:
    """The NVTX rows counted by kind, domain and the two facts the capabilities need, in one
    query: each statement costs 1-3 ms of planning and scanning on a small trace, and the
    kinds, the domains and the specnsys counts were three (a cold open of a small trace
    spends about 170 ms in all)."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self.groups: list[tuple[str | None, str | None, bool, bool, int]] = [
            (kind, domain, bool(acceptance_mark), bool(specnsys_domain), int(n))
            for kind, domain, acceptance_mark, specnsys_domain, n in con.execute(
                f"""SELECT kind, domain,
                          kind = 'mark' AND text IN ('{PROPOSED_MARK}', '{ACCEPTED_MARK}'),
                          kind = 'domain_create' AND text = '{DOMAIN}',
                          count(*)
                   FROM nvtx GROUP BY ALL"""
            ).fetchall()
        ]

    def kinds(self) -> dict[str, int]:
        """Rows per kind, by kind (a NULL kind last, as SQL's ORDER BY puts it)."""
        per: dict[str | None, int] = {}
        for kind, _, _, _, n in self.groups:
            per[kind] = per.get(kind, 0) + n
        order = sorted(per, key=lambda k: (k is None, k or ""))
        return {str(k): per[k] for k in order}

    def domains(self) -> list[str]:
        """The distinct domains that rows name, in order."""
        return sorted({d for _, d, _, _, _ in self.groups if d is not None})

    def specnsys_counts(self) -> tuple[int, int, int]:
        """Ranges and proposed/accepted marks in the specnsys domain, and its creations."""
        ranges = sum(
            n for k, d, _, _, n in self.groups if k in ("push_pop", "start_end") and d == DOMAIN
        )
        marks = sum(n for k, d, mark, _, n in self.groups if mark and d == DOMAIN)
        created = sum(n for _, _, _, created, n in self.groups if created)
        return ranges, marks, created


def _counts(con: duckdb.DuckDBPyConnection, sql: str) -> tuple[int, ...]:
    """The counts in the single row of *sql*, fetched to the end (``fetchone`` would leave the
    result open, and DuckDB refuses the connection's next statement until it is finished)."""
    return tuple(int(n) for n in con.execute(sql).fetchall()[0])


def _processes(con: duckdb.DuckDBPyConnection) -> list[dict[str, object]]:
    """Processes that own events, with their name, thread count and event counts (OS runtime
    counts calls only, not the markers of its tracing starting and finishing)."""
    rows = con.execute(
        f"""
        WITH active AS (
            SELECT pid, 'nvtx' AS src, count(*) AS n FROM nvtx GROUP BY pid
            UNION ALL SELECT pid, 'runtime', count(*) FROM runtime GROUP BY pid
            UNION ALL SELECT pid, 'kernels', count(*) FROM kernels GROUP BY pid
            UNION ALL SELECT pid, 'osrt', count(*) FROM osrt WHERE {OSRT_CALL_SQL} GROUP BY pid
            UNION ALL SELECT pid, 'samples', count(*) FROM cpu_samples GROUP BY pid
        ),
        per_pid AS (
            SELECT pid, sum(n) FILTER (WHERE src = 'nvtx') AS nvtx,
                   sum(n) FILTER (WHERE src = 'runtime') AS runtime,
                   sum(n) FILTER (WHERE src = 'kernels') AS kernels,
                   sum(n) FILTER (WHERE src = 'osrt') AS osrt,
                   sum(n) FILTER (WHERE src = 'samples') AS samples
            FROM active WHERE pid IS NOT NULL GROUP BY pid
        ),
        names AS (SELECT pid, any_value(name) AS name FROM processes GROUP BY pid),
        threads AS (SELECT pid, count(*) AS threads FROM threads GROUP BY pid)
        SELECT p.pid, n.name, COALESCE(t.threads, 0), COALESCE(p.nvtx, 0),
               COALESCE(p.runtime, 0), COALESCE(p.kernels, 0), COALESCE(p.osrt, 0),
               COALESCE(p.samples, 0)
        FROM per_pid p LEFT JOIN names n USING (pid) LEFT JOIN threads t USING (pid)
        ORDER BY p.pid
        """
    ).fetchall()
    keys = (
        "pid", "name", "threads", "nvtx_events", "runtime_calls", "kernels", "osrt_calls",
        "cpu_samples",
    )
    return [dict(zip(keys, (int(r[0]), r[1], *map(int, r[2:])), strict=True)) for r in rows]


def _capabilities(
    con: duckdb.DuckDBPyConnection, s: TraceSummary, nvtx: _NvtxGroups
) -> dict[str, Capability]:
    ranges = s.nvtx_kinds.get("push_pop", 0) + s.nvtx_kinds.get("start_end", 0)
    gpu_ops = sum(s.row_counts.get(t, 0) for t in ("kernels", "memcpy", "memset", "graphs"))
    samples = s.row_counts.get("cpu_samples", 0)
    api, osrt, bandwidth = _counts(  # one statement: see _NvtxGroups
        con,
        f"""SELECT (SELECT count(*) FROM runtime WHERE {API_CALL_SQL}),
                  (SELECT count(*) FROM osrt WHERE {OSRT_CALL_SQL}),
                  (SELECT count(*) FROM gpus WHERE memory_bandwidth > 0)""",
    )
    specnsys_ranges, specnsys_marks, specnsys_domain = nvtx.specnsys_counts()

    def cap(ok: bool, yes: str, no: str) -> Capability:
        return Capability(bool(ok), yes if ok else no)

    caps = {
        "nvtx_ranges": cap(ranges > 0, f"{ranges} NVTX ranges", "no NVTX ranges in the export"),
        "gpu_activity": cap(
            gpu_ops > 0,
            f"{gpu_ops} kernels/memcpy/memset/graph launches",
            "no GPU activity (captured without -t cuda, or a CPU-only run)",
        ),
        "cuda_api": cap(api > 0, f"{api} CUDA API calls", "no CUDA runtime/driver API calls"),
        "phase_attribution": cap(
            ranges > 0 and api > 0 and gpu_ops > 0,
            "NVTX ranges, CUDA API calls and GPU work can be joined",
            "needs NVTX ranges, CUDA API calls and GPU work together",
        ),
        "cpu_phase_timeline": cap(
            ranges > 0, "NVTX ranges give a CPU timeline", "no NVTX ranges in the export"
        ),
        "specnsys_phases": cap(
            specnsys_ranges > 0,
            f"{specnsys_ranges} ranges in the specnsys domain",
            "the specnsys NVTX domain was created but none of its ranges were recorded "
            "(nsys 2022.4 and older drop ranges from the nvtx package >= 0.2.12)"
            if specnsys_domain
            else "no ranges in the specnsys NVTX domain (use --rules to map other names)",
        ),
        "acceptance_marks": cap(
            specnsys_marks > 0,
            f"{specnsys_marks} proposed/accepted marks",
            "no specnsys proposed/accepted marks",
        ),
        "gpu_metrics": cap(
            s.row_counts["gpu_metrics"] > 0,
            f"{s.row_counts['gpu_metrics']} GPU metric samples",
            "no GPU_METRICS rows (capture with --gpu-metrics-devices)",
        ),
        "os_runtime": cap(
            osrt > 0,
            f"{osrt} OS runtime calls (what the CPU threads waited on or did outside CUDA)",
            "no OS runtime calls (captured without -t osrt)",
        ),
        "cpu_samples": cap(
            samples > 0,
            f"{samples} CPU samples",
            "no CPU samples (captured without --sample=cpu)",
        ),
        "gpu_bandwidth_spec": cap(
            bandwidth > 0,
            "TARGET_INFO_GPU records memory bandwidth",
            "no GPU memory bandwidth recorded (TARGET_INFO_GPU absent or without it)",
        ),
    }
    return caps
