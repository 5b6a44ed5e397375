"""PyTorch-profiler (Kineto) Chrome traces -> the trace model (docs/design.md#readers).

What ``torch.profiler`` writes (``export_chrome_trace``, ``tensorboard_trace_handler``, vLLM's
profiler: ``.json`` or ``.json.gz``) is read streaming (:mod:`.stream`), sorted into raw
columns in one pass (:mod:`.events`) and turned into the model's tables in Polars
(:mod:`.tables`); every command then answers on it as on an nsys export.
"""

from __future__ import annotations

import stat
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from specnsys.errors import BadInputError
from specnsys.ingest.cache import CacheKey
from specnsys.ingest.input_file import SQLITE_MAGIC
from specnsys.ingest.schema import SchemaVersion
from specnsys.readers.base import BuiltModel, OpenedModel
from specnsys.readers.kineto.events import (
    CPU_RANGE_CATEGORIES,
    GPU_CATEGORIES,
    RUNTIME_CATEGORIES,
    RawEvents,
)
from specnsys.readers.kineto.stream import BOM, GZIP_MAGIC, ChromeTraceStream, text_head
from specnsys.readers.kineto.tables import Model, model_tables
from specnsys.readers.opening import file_key, open_with

__all__ = ["KINETO", "KinetoReader", "KinetoVersion"]

#: The event tables a trace must have a row in to be analyzed.
_EVENT_TABLES = ("nvtx", "runtime", "kernels", "memcpy", "memset", "sync")
#: Event kinds the model holds (besides these, ``M process_name`` / ``M thread_name``).
_READ = {
    f"X {c}" for c in (*CPU_RANGE_CATEGORIES, *RUNTIME_CATEGORIES, *GPU_CATEGORIES)
} | {"M process_name", "M thread_name"}
_SHOWN_KINDS = 8


@dataclass(frozen=True)
class KinetoVersion(SchemaVersion):
    """Where a Chrome trace came from: its ``schemaVersion`` and top-level metadata (in
    ``export_params``), told apart from an nsys version in its label."""

    @property
    def label(self) -> str:
        schema = f", schemaVersion {self.schema_version}" if self.schema_version else ""
        return f"PyTorch profiler (Kineto) Chrome trace{schema}"


class KinetoReader:
    """The :class:`~specnsys.readers.Reader` of PyTorch-profiler Chrome traces."""

    name = "kineto"
    #: Bump when what the reader builds from a file changes, so old cache entries are not used.
    version = 1

    def recognizes(self, path: Path) -> bool:
        """A regular file whose text (gunzipped) starts like JSON, a gzip file, or one named
        ``.json``/``.json.gz`` that is no SQLite database (so that a trace file gets a
        JSON reader's message, even when it is empty or broken)."""
        try:
            if not stat.S_ISREG(path.stat().st_mode):
                return False
            with path.open("rb") as handle:
                magic = handle.read(len(SQLITE_MAGIC))
        except OSError:
            return False  # the nsys path says why in one line
        if magic.startswith(SQLITE_MAGIC):
            return False
        if magic.startswith(GZIP_MAGIC):
            return True
        head = text_head(path).removeprefix(BOM).lstrip(b" \t\r\n")
        if head[:1] in (b"{", b"["):
            return True
        return path.name.lower().endswith((".json", ".json.gz"))

    def cache_key(self, path: Path) -> CacheKey:
        """The file's identity and ``kineto-<version>``."""
        return file_key(path, f"{self.name}-{self.version}")

    def open(self, path: Path, root: Path | None) -> OpenedModel:
        return open_with(self, path, root)

    def build(self, path: Path) -> BuiltModel:
        events = RawEvents()
        add = events.add
        with ChromeTraceStream(path) as stream:
            for event in stream.events():
                add(event)
        if not events.events and not stream.cut_short:
            raise BadInputError(f"{path}: a Chrome trace without events (traceEvents is empty)")
        if stream.cut_short and not events.events:
            raise BadInputError(f"{path}: truncated Chrome trace: it ends before its first event")
        model = model_tables(events.tables(), stream.metadata)
        tables = model.tables
        if not any(tables[t].num_rows for t in _EVENT_TABLES):
            kinds = events.kinds() + Counter({"no JSON object": events.unusable["not a JSON object"]})
            raise BadInputError(
                f"{path}: a Chrome trace without host ranges, CUDA API calls or GPU work "
                f"({events.events} events: {_kinds(kinds)}): nothing to analyze"
            )
        return BuiltModel(
            tables, _version(stream.metadata, events, model.origin), _notes(events, stream, model)
        )

    def restore(self, version: SchemaVersion) -> SchemaVersion:
        return KinetoVersion(**version.to_dict())  # type: ignore[arg-type]


KINETO = KinetoReader()


def _kinds(counts: Counter[str], limit: int = _SHOWN_KINDS) -> str:
    """``X cpu_op 1,204, M thread_name 3, ...``: the most frequent kinds first."""
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    shown = ", ".join(f"{kind} {n:,}" for kind, n in ranked[:limit])
    more = f", {len(ranked) - limit} more kinds" if len(ranked) > limit else ""
    return (shown + more) or "none"


def _version(metadata: Mapping[str, object], events: RawEvents, origin: int) -> KinetoVersion:
    """The trace's provenance: its schema version and scalar top-level fields (trace name,
    base time, host), the event kinds seen and those the model does not hold."""
    params = {
        key: str(value)
        for key, value in metadata.items()
        if isinstance(value, (str, int, float)) and not isinstance(value, bool)
    }
    seen = events.kinds()
    not_read = Counter({k: n for k, n in seen.items() if k not in _READ})
    params["events"] = _kinds(seen, limit=len(seen))
    params["events_not_read"] = _kinds(not_read, limit=len(not_read))
    params["time_origin_ns"] = str(origin)
    schema = metadata.get("schemaVersion")
    return KinetoVersion(
        product_version=None,
        schema_version=None if schema is None else str(schema),
        meta_table=None,
        era_estimate="PyTorch profiler (Kineto) Chrome trace",
        export_params=params,
    )


def _notes(events: RawEvents, stream: ChromeTraceStream, model: Model) -> list[str]:
    """One sentence per kind of event the reader skipped or read as it was not meant."""
    notes = []
    if stream.cut_short:
        notes.append(
            f"the file ends inside its traceEvents array (cut short?); the {events.events:,} "
            "events before the cut were read"
        )
    unusable = sum(events.unusable.values())
    if unusable:
        notes.append(
            f"{unusable:,} trace event(s) lack a usable ts, dur, pid or tid, or are no JSON "
            f"object ({_kinds(events.unusable)}); skipped"
        )
    if model.shared_launches:
        notes.append(
            f"{model.shared_launches:,} GPU operation(s) have a correlation id that API calls "
            "of several processes carry (a merged trace?); their process is unknown, shown as "
            "unattributed_gpu"
        )
    runtime = model.tables["runtime"]
    if runtime.num_rows:
        import pyarrow.compute as pc

        backwards = pc.sum(pc.less(runtime.column("duration"), 0)).as_py() or 0
        if backwards:
            notes.append(
                f"{backwards:,} CUDA API call(s) have a negative duration; kept as they are "
                "(their launches are attributed by their start)"
            )
    return notes
