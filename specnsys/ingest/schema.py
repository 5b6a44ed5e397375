"""Which nsys wrote an export, and which of its tables are there.

Exports from nsys 2022.1 on carry their product and export-schema version in a name/value table
(``EXPORT_META_DATA`` up to 2023.2, ``META_DATA_EXPORT`` from 2023.3). Older exports carry no
version at all; for those the era is inferred from tables that came and went, and reported as an
estimate, never as a version. Everything downstream feature-detects tables and columns instead of
branching on a version.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from specnsys.errors import BadInputError
from specnsys.ingest.sqlite_reader import SqliteExport

META_TABLES = ("META_DATA_EXPORT", "EXPORT_META_DATA")

#: Tables every nsys export has; a file with none of these is not an nsys export.
NSYS_MARKER_TABLES = frozenset(
    {
        "StringIds",
        "ThreadNames",
        "NVTX_EVENTS",
        "CUPTI_ACTIVITY_KIND_KERNEL",
        "CUPTI_ACTIVITY_KIND_RUNTIME",
        "TARGET_INFO_GPU",
        "TARGET_INFO_SESSION_START_TIME",
        "META_DATA_EXPORT",
        "EXPORT_META_DATA",
        "OSRT_API",
    }
)

#: Tables that hold events (rows with timestamps); an export with rows in none of them is empty.
EVENT_TABLES = (
    "NVTX_EVENTS",
    "CUPTI_ACTIVITY_KIND_RUNTIME",
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_MEMCPY",
    "CUPTI_ACTIVITY_KIND_MEMSET",
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
    "GPU_METRICS",
    "OSRT_API",
    "COMPOSITE_EVENTS",
    "SCHED_EVENTS",
)


@dataclass(frozen=True)
class SchemaVersion:
    """Where the export came from. ``product_version`` is None for pre-2022.1 exports."""

    product_version: str | None
    schema_version: str | None
    meta_table: str | None
    era_estimate: str
    export_params: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, object]:
        return asdict(self)

    @property
    def label(self) -> str:
        """One short human label, e.g. ``nsys 2024.5.1.113 (schema 3.13.2)``."""
        if self.product_version:
            schema = f" (schema {self.schema_version})" if self.schema_version else ""
            return f"nsys {self.product_version}{schema}"
        return f"nsys {self.era_estimate} (no version recorded in the export)"


def detect_version(export: SqliteExport) -> SchemaVersion:
    """Read the product/schema version, or estimate the era from the tables present."""
    for meta in META_TABLES:
        if not export.has_table(meta):
            continue
        cols = set(export.columns(meta))
        if not {"name", "value"} <= cols:
            continue
        values = {
            str(name): "" if value is None else str(value)
            for name, value in export.query(f'SELECT name, value FROM "{meta}"')
        }
        params = {k: v for k, v in values.items() if k.startswith("EXPORT_PARAM_")}
        product = values.get("EXPORT_PRODUCT_VERSION") or None
        schema = values.get("EXPORT_SCHEMA_VERSION") or None
        era = product.rsplit(".", 1)[0] if product else "2022.1 or newer"
        return SchemaVersion(product, schema, meta, era, params)
    return SchemaVersion(None, None, None, _estimate_era(export))


def _estimate_era(export: SqliteExport) -> str:
    """An era for exports without metadata, from tables that appeared or were renamed."""
    gpu_cols = set(export.columns("TARGET_INFO_GPU"))
    if export.has_table("TARGET_INFO_CUDA_GPU") or "deviceId" in gpu_cols:
        return "2020.5 or older"
    if export.has_table("TARGET_INFO_SESSION_START_TIME"):
        return "2021.3 to 2021.x"
    return "before 2022.1"


def require_nsys_tables(export: SqliteExport) -> None:
    """Reject SQLite files that are not nsys exports, with the reason on one line."""
    present = NSYS_MARKER_TABLES.intersection(export.tables)
    if not present:
        shown = ", ".join(sorted(export.tables)[:5]) or "no tables at all"
        raise BadInputError(
            f"{export.path}: SQLite file without nsys tables (found: {shown}); "
            "expected the output of 'nsys export --type sqlite'"
        )
    if "StringIds" in export.tables and not {"id", "value"} <= set(export.columns("StringIds")):
        raise BadInputError(f"{export.path}: table StringIds lacks its id/value columns")


def require_events(export: SqliteExport) -> None:
    """Reject an export in which nsys recorded nothing at all (no events, no threads)."""
    for table in (*EVENT_TABLES, "ThreadNames", "TARGET_INFO_GPU"):
        if export.has_table(table) and export.query(f'SELECT 1 FROM "{table}" LIMIT 1'):
            return
    raise BadInputError(
        f"{export.path}: empty nsys export: no events, threads or GPUs were recorded"
    )
