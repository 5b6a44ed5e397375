"""The run-set dataset on disk: four hive-partitioned Parquet tables and a manifest.

::

    DATASET/
      _specnsys.json                 what was collected: per run its trace, identity, settings;
                                     the traces that failed, with their one-line reason
      runs/run_id=<id>/part-0.parquet       one row: labels + every analyze headline number
      phases/run_id=<id>/part-0.parquet     one row per phase (analyze's phase table)
      steps/run_id=<id>/part-0.parquet      one row per decode step (metrics.steps)
      requests/run_id=<id>/part-0.parquet   one row per request (TTFT, TPOT, latency)

Every partition of a table has the same columns and types, so ``pl.scan_parquet(DATASET /
"runs")`` and DuckDB's ``read_parquet('DATASET/runs/*/*.parquet', hive_partitioning=true)``
read it as one table (``run_id`` comes from the folder name). The ``runs`` partitions are
rewritten at each collect with the union of the label names (one row each: cheap); the other
tables are written once per analysed run. A run's folder is replaced by a rename, and the
manifest last, so an interrupted collect leaves the previous dataset readable and the next
collect redoes what is missing.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import NotRequired, TypedDict, cast

import polars as pl

from specnsys.errors import BadInputError, OutputError
from specnsys.held_signals import signals_held
from specnsys.metrics import registry
from specnsys.metrics.analysis import AnalysisDocument
from specnsys.results import JSONValue
from specnsys.runset.labels import LABEL_NAME
from specnsys.small_files import WriteError, write_files

__all__ = [
    "MANIFEST",
    "TABLES",
    "Dataset",
    "RunRecord",
    "is_dataset",
    "table_glob",
]

MANIFEST = "_specnsys.json"
FORMAT = 1


class Settings(TypedDict, total=False):
    """What a run was analysed with (a manifest entry's ``settings``: a run is analysed again
    when they change); a job also carries ``use_cache``, which is not kept."""

    rules: str | None
    pid: int | None
    specnsys: str
    window: str
    labels: dict[str, str]
    use_cache: bool


class RunEntry(TypedDict):
    """A manifest's entry of one run (:func:`read_manifest` checks each key's JSON type)."""

    trace: str
    identity: list[int | str]
    settings: Mapping[str, object]
    labels: dict[str, str]
    headline: dict[str, object]


class Manifest(TypedDict):
    """The dataset's manifest (``_specnsys.json``): its runs, the traces that failed, and the
    columns the ``runs`` partitions were written with."""

    format: int
    runs: dict[str, RunEntry]
    failed: dict[str, str]
    runs_columns: NotRequired[list[str]]
TABLES = ("runs", "phases", "steps", "requests")
LABEL_PREFIX = "label_"

#: Polars types of the scalar annotations a headline column can have.
_SCALAR_TYPES: dict[str, pl.DataType] = {
    "bool": pl.Boolean(),
    "int": pl.Int64(),
    "float": pl.Float64(),
    "str": pl.String(),
}


def scalar_columns(document: type) -> dict[str, pl.DataType]:
    """The keys of the typed document *document* whose value is a scalar (or null), in its
    order, with their column types: the annotations are read as written (``int | None``),
    so a type named only for type checkers does not need importing."""
    out: dict[str, pl.DataType] = {}
    for key, hint in document.__annotations__.items():
        text = getattr(hint, "__forward_arg__", hint)  # a TypedDict keeps them as ForwardRefs
        text = text if isinstance(text, str) else getattr(text, "__name__", "")
        parts = {part.strip() for part in text.split("|")} - {"None"}
        if len(parts) == 1 and (scalar := _SCALAR_TYPES.get(parts.pop())) is not None:
            out[key] = scalar
    return out


#: The columns of analyze's top-level scalar keys, with their types, derived from the typed
#: document (:class:`~specnsys.metrics.analysis.AnalysisDocument`): every run has all of them
#: (null where its analysis has no value), so every partition has the same columns and types.
#: Everything else analyze says is in the ``analysis_json`` column.
HEADLINE_TYPES: dict[str, pl.DataType] = scalar_columns(AnalysisDocument)
#: Nested numbers promoted to columns: (key in analyze's JSON, sub-key) -> column, type.
NESTED_COLUMNS: dict[tuple[str, str], tuple[str, pl.DataType]] = {
    ("acceptance", "alpha"): ("alpha", pl.Float64()),
    ("acceptance", "mean_accepted"): ("mean_accepted", pl.Float64()),
    ("acceptance", "tokens_per_step"): ("tokens_per_step", pl.Float64()),
    ("acceptance", "sequence_steps"): ("sequence_steps", pl.Int64()),
    ("acceptance", "accepted_total"): ("accepted_total", pl.Int64()),
    ("per_range_ns", "forward_ns"): ("forward_range_ns", pl.Float64()),
    ("per_range_ns", "verify_ns"): ("verify_range_ns", pl.Float64()),
    ("per_range_ns", "draft_step_ns"): ("draft_step_ns", pl.Float64()),
    ("per_range_ns", "draft_forward_ns"): ("draft_forward_ns", pl.Float64()),
    ("gpu_time", "busy_ns"): ("gpu_busy_ns", pl.Int64()),
    ("gpu_time", "idle_ns"): ("gpu_idle_ns", pl.Int64()),
}

PHASE_COLUMNS: dict[str, pl.DataType] = {
    "phase": pl.String(),
    "wall_ns": pl.Int64(),
    "share": pl.Float64(),
    "gpu_busy_ns": pl.Int64(),
    "kernels": pl.Int64(),
    "cpu_inclusive_ns": pl.Int64(),
    "ranges": pl.Int64(),
    "accelerable": pl.Boolean(),
}
REQUEST_COLUMNS: dict[str, pl.DataType] = {
    "request_id": pl.Int64(),
    "output_tokens": pl.Int64(),
    "ttft_ns": pl.Float64(),
    "tpot_ns": pl.Float64(),
    "latency_ns": pl.Float64(),
}


#: Polars' type of a registered metric's column (:data:`specnsys.metrics.registry.ColumnType`).
METRIC_COLUMN_TYPES: dict[str, pl.DataType] = {
    "int": pl.Int64(), "float": pl.Float64(), "str": pl.String(), "bool": pl.Boolean(),
}  # fmt: skip


def _metric_columns() -> dict[str, pl.DataType]:
    """The headline columns the registered metrics declare, with their types."""
    return {
        name: METRIC_COLUMN_TYPES[kind]
        for metric in registry.registered()
        for name, kind in metric.columns.items()
    }


def headline_row(doc: Mapping[str, object]) -> dict[str, object]:
    """analyze's JSON *doc* as one flat row: its scalar keys, the nested numbers of
    :data:`NESTED_COLUMNS`, the columns registered metrics declare
    (:mod:`specnsys.metrics.registry`), and the whole document as ``analysis_json``. A number
    an Int64 column cannot hold (a hostile export's marks may sum past 64 bits) is null there;
    ``analysis_json`` keeps it."""
    row: dict[str, object] = {key: doc.get(key) for key in HEADLINE_TYPES}
    for (outer, inner), (column, _) in NESTED_COLUMNS.items():
        nested = doc.get(outer)
        row[column] = nested.get(inner) if isinstance(nested, dict) else None
    for metric in registry.registered():
        payload = doc.get(metric.key)
        for name, value in registry.column_values(metric, cast(JSONValue, payload)).items():
            if name in row:
                raise ValueError(f"metric {metric.key!r}: column {name!r} is already taken")
            row[name] = value
    types = _headline_schema(row)
    for key, cell in row.items():  # a count past 64 bits (a hostile export's marks summed)
        if types[key] == pl.Int64() and isinstance(cell, int) and not _INT64[0] <= cell <= _INT64[1]:
            row[key] = None  # not available in the column; analysis_json keeps it exact
    row["analysis_json"] = json.dumps(doc, sort_keys=True)
    return row


#: The range of an Int64 column.
_INT64 = (-(2**63), 2**63 - 1)


def _headline_schema(row: Mapping[str, object]) -> dict[str, pl.DataType]:
    known = {**_metric_columns(), **dict(NESTED_COLUMNS.values()), **HEADLINE_TYPES}
    return {key: known.get(key) or pl.String() for key in row}


@dataclass
class RunRecord:
    """What one analysed trace adds to the dataset (built in a worker, written by the parent)."""

    trace: str
    identity: list[int | str]
    settings: Settings
    labels: dict[str, str]
    headline: dict[str, object]
    phases: pl.DataFrame
    steps: pl.DataFrame
    requests: pl.DataFrame
    warnings: list[str] = field(default_factory=list)


def run_id_of(trace: Path) -> str:
    """A run's id: a short digest of the trace's absolute path (stable across collects, so a
    changed trace replaces its own run)."""
    import hashlib

    return hashlib.blake2b(str(trace.resolve()).encode(), digest_size=8).hexdigest()


def is_dataset(path: Path) -> bool:
    """Whether *path* is a folder written by ``specnsys collect``."""
    return path.is_dir() and (path / MANIFEST).is_file()


def table_glob(root: Path, table: str) -> str:
    """The glob of *table*'s files (for DuckDB's ``read_parquet``)."""
    return str(root / table / "*" / "*.parquet")


class Dataset:
    """A dataset folder: its manifest and partitions (see the module docs)."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.manifest = self._read_manifest()
        self._written: set[str] = set()  # runs whose partitions this collect wrote

    def _read_manifest(self) -> Manifest:
        if not self.root.exists():
            _check_creatable(self.root)
            return _empty_manifest()
        if not self.root.is_dir():
            raise BadInputError(f"{self.root}: not a folder (a dataset is a folder)")
        if not (self.root / MANIFEST).is_file():
            _check_only_partial_state(self.root)
            return _empty_manifest()
        return read_manifest(self.root)

    def unchanged(self, run_id: str, identity: list[int | str], settings: Settings) -> bool:
        """Whether the dataset already holds *run_id* from this very trace and settings."""
        entry = self.manifest["runs"].get(run_id)
        return (
            entry is not None
            and entry.get("identity") == identity
            and entry.get("settings") == settings
            and all(self.partition(t, run_id).is_dir() for t in TABLES)
        )

    def write_run(self, run_id: str, record: RunRecord) -> None:
        """:meth:`_write_run`, a failure to write being the user's (exit 2, one line). A Ctrl-C
        or SIGTERM that arrives while the run is written takes effect once it is recorded: an
        analysed run is never lost to an interrupt between its partitions."""
        with _writing(self.root), signals_held():
            self._write_run(run_id, record)

    def _write_run(self, run_id: str, record: RunRecord) -> None:
        """Write *record*'s phases, steps and requests partitions (the runs row is written by
        :meth:`finish`) and note the run in the manifest."""
        frames = {
            "phases": _typed(record.phases, PHASE_COLUMNS),
            "steps": record.steps,
            "requests": _typed(record.requests, REQUEST_COLUMNS),
        }
        for table, frame in frames.items():
            self._replace_partition(table, run_id, frame)
        self.manifest["runs"][run_id] = {
            "trace": record.trace,
            "identity": record.identity,
            "settings": record.settings,
            "labels": record.labels,
            "headline": record.headline,
        }
        self.manifest["failed"].pop(record.trace, None)
        self._written.add(run_id)

    def note_failure(self, trace: str, reason: str) -> None:
        self.manifest["failed"][trace] = reason

    def finish(self) -> None:
        """:meth:`_finish`, a failure to write being the user's (exit 2, one line)."""
        with _writing(self.root):
            self._finish()

    def _finish(self) -> None:
        """Write the ``runs`` partitions, then the manifest (last: until it is written, the
        previous manifest describes the dataset).

        Every ``runs`` partition has the same columns: the union of the label names and of the
        headline keys over all runs (a run analysed by an older specnsys gets nulls for a key
        it did not report), so that one scan reads them all. When that union is the one the
        manifest recorded, only the runs this collect wrote are written (a nightly's collect
        costs its new runs, not the dataset's size); when it changed, every partition is."""
        runs = self.manifest["runs"]
        label_names = sorted({name for entry in runs.values() for name in entry["labels"]})
        # the headline keys of every run, in one order whatever the runs' order: the schema's
        # own keys first, then any other sorted
        order = {k: i for i, k in enumerate([*HEADLINE_TYPES, *dict(NESTED_COLUMNS.values())])}
        found = {k for entry in runs.values() for k in entry["headline"]}
        keys = sorted(found, key=lambda k: (order.get(k, len(order)), k))
        schema = {
            "trace": pl.String(),
            **{LABEL_PREFIX + n: pl.String() for n in label_names},
            **_headline_schema(dict.fromkeys(keys)),
        }
        columns = [f"{c}:{t}" for c, t in schema.items()]
        same = self.manifest.get("runs_columns") == columns
        for run_id, entry in runs.items():
            folder = self.partition("runs", run_id)
            if same and run_id not in self._written and folder.is_dir():
                continue
            row = {
                "trace": entry["trace"],
                **{LABEL_PREFIX + n: entry["labels"].get(n) for n in label_names},
                **{k: entry["headline"].get(k) for k in keys},
            }
            self._replace_partition("runs", run_id, pl.DataFrame([row], schema=schema))
        self._remove_stale_partitions(set(runs))
        self.manifest["runs_columns"] = columns
        self.manifest["format"] = FORMAT
        self.root.mkdir(parents=True, exist_ok=True)
        text = json.dumps(self.manifest, indent=1, sort_keys=True)
        write_files({self.root / MANIFEST: text.encode("utf-8")})
        for left in self.root.iterdir():  # what a collect killed while writing it left
            if _is_manifest_leftover(left):
                left.unlink(missing_ok=True)

    def partition(self, table: str, run_id: str) -> Path:
        """The folder of *run_id*'s partition of *table*, checked to be a run id (16 hex
        digits) whose folder resolves inside the dataset's table folder (no ``..``, no link
        out of the dataset): every folder collect replaces or removes is one of these."""
        if table not in TABLES or not RUN_ID.match(run_id):
            raise BadInputError(f"{self.root}: {run_id!r} is not a run id (16 hex digits)")
        folder = self.root / table / f"run_id={run_id}"
        root = self.root.resolve()
        where = folder.resolve()
        if where.parent != root / table or not where.is_relative_to(root):
            raise BadInputError(
                f"{folder}: resolves to {where}, outside the dataset {root}; not written"
            )
        return folder

    def _replace_partition(self, table: str, run_id: str, frame: pl.DataFrame) -> None:
        folder = self.partition(table, run_id)
        folder.parent.mkdir(parents=True, exist_ok=True)
        tmp = folder.parent / f".tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        tmp.mkdir()
        try:
            _write_parquet(frame, tmp / "part-0.parquet")
            if folder.exists():
                old = folder.parent / f".old-{os.getpid()}-{uuid.uuid4().hex[:8]}"
                os.replace(folder, old)
                os.replace(tmp, folder)
                shutil.rmtree(old, ignore_errors=True)
            else:
                os.replace(tmp, folder)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)

    def _remove_stale_partitions(self, keep: set[str]) -> None:
        """Partitions of runs the manifest no longer has, and leftovers of a killed collect."""
        root = self.root.resolve()
        for table in TABLES:
            folder = self.root / table
            if not folder.is_dir():
                continue
            if folder.resolve() != root / table:  # a link out of the dataset: not ours to clean
                raise BadInputError(
                    f"{folder}: resolves to {folder.resolve()}, outside the dataset {root}; "
                    "not cleaned"
                )
            for entry in folder.iterdir():
                stale = entry.name.startswith((".tmp-", ".old-")) or (
                    entry.name.startswith("run_id=") and entry.name[7:] not in keep
                )
                if stale:
                    shutil.rmtree(entry, ignore_errors=True)


def _write_parquet(frame: pl.DataFrame, path: Path) -> None:
    """*frame* as Parquet at *path*, encoded in memory and written by Python, so that a full
    disk is the OSError it is: Polars writing a file itself reports it as a ComputeError
    whose words depend on where the write stopped ("underlying IO error: File too large",
    "Invalid thrift: transport error"), which was an internal error (exit 3). A partition is
    one run's rows: small."""
    buffer = io.BytesIO()
    frame.write_parquet(buffer)
    path.write_bytes(buffer.getbuffer())


def _empty_manifest() -> Manifest:
    return {"format": FORMAT, "runs": {}, "failed": {}}


#: A run id: 16 hex digits (:func:`run_id_of`). Nothing else read from a manifest may name a
#: partition folder: ``../x`` would make a collect replace a folder outside the dataset.
RUN_ID = re.compile(r"^[0-9a-f]{16}$")
#: The shape of a manifest's run entry: key -> (type, what it is called in a message).
_RUN_ENTRY: dict[str, tuple[type, str]] = {
    "trace": (str, "a string"), "identity": (list, "a list"), "settings": (dict, "an object"),
    "labels": (dict, "an object"), "headline": (dict, "an object"),
}  # fmt: skip


def _json_type(value: object) -> str:
    return {str: "a string", list: "a list", dict: "an object", bool: "a boolean",
            int: "a number", float: "a number", type(None): "null"}.get(type(value), "a value")  # fmt: skip


def read_manifest(root: Path) -> Manifest:
    """The manifest of the dataset at *root*, its shape checked (the format, every run id and
    entry, the failed list): a manifest is edited by hand or damaged, and its run ids name
    folders that a collect replaces. One line (exit 2) names the first thing wrong."""
    path = root / MANIFEST
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadInputError(f"{path}: unreadable dataset manifest ({exc})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise BadInputError(f"{path}: not a dataset manifest of format {FORMAT}")
    doc.setdefault("runs", {})
    doc.setdefault("failed", {})

    def bad(where: str, what: str, value: object) -> BadInputError:
        return BadInputError(
            f"{path}: not a valid dataset manifest: {where} is {_json_type(value)}, expected "
            f"{what} (remove the dataset folder and collect again)"
        )

    for key in ("runs", "failed"):
        if not isinstance(doc[key], dict):
            raise bad(key, "an object", doc[key])
    for run_id, entry in doc["runs"].items():
        if not RUN_ID.match(run_id):
            raise BadInputError(
                f"{path}: not a valid dataset manifest: run id {run_id!r} is not 16 hex digits"
            )
        if not isinstance(entry, dict):
            raise bad(f"runs[{run_id}]", "an object", entry)
        for key, (kind, called) in _RUN_ENTRY.items():
            if not isinstance(entry.get(key), kind):
                raise bad(f"runs[{run_id}].{key}", called, entry.get(key))
        for name, value in entry["labels"].items():
            if not LABEL_NAME.match(name) or not isinstance(value, str):
                raise BadInputError(
                    f"{path}: not a valid dataset manifest: runs[{run_id}].labels holds "
                    f"{name!r}: {value!r} (label names are identifiers, values strings)"
                )
    for trace, reason in doc["failed"].items():
        if not isinstance(reason, str):
            raise bad(f"failed[{trace!r}]", "a string", reason)
    columns = doc.get("runs_columns")
    if columns is not None and not (
        isinstance(columns, list) and all(isinstance(c, str) for c in columns)
    ):
        raise bad("runs_columns", "a list of strings", columns)
    # every key checked above (other keys, from a later version, are kept as they are)
    return cast("Manifest", doc)


def _check_only_partial_state(root: Path) -> None:
    """Accept a folder without a manifest only when everything in it is specnsys's own partial
    state: what a first collect that was killed or ran out of disk leaves (table folders of
    run partitions, temporary partitions and a temporary manifest). Anything else is not a
    dataset, and collect does not write into someone's folder."""
    for entry in root.iterdir():
        own = (entry.name in TABLES and entry.is_dir() and not entry.is_symlink()
               and _only_partitions(entry)) or (
            _is_manifest_leftover(entry)
        )  # fmt: skip
        if not own:
            held = (
                f"its {MANIFEST} is not a regular file" if entry.name == MANIFEST
                else f"no {MANIFEST}; it holds {entry.name!r}"
            )  # fmt: skip
            raise BadInputError(
                f"{root}: a folder that is not a specnsys dataset ({held}); give an empty or "
                "new folder"
            )


def _is_manifest_leftover(entry: Path) -> bool:
    """A temporary manifest of :func:`write_files` a killed collect left (``._specnsys.json.*.tmp``)."""
    return entry.name.startswith(f".{MANIFEST}.") and entry.name.endswith(".tmp") and entry.is_file()


def _only_partitions(table: Path) -> bool:
    """Whether *table* holds only partition folders (``run_id=<id>``, ``.tmp-*``, ``.old-*``)
    of Parquet files."""
    for folder in table.iterdir():
        name = folder.name
        partition = (name.startswith("run_id=") and RUN_ID.match(name[7:])) or name.startswith(
            (".tmp-", ".old-"))  # fmt: skip
        if not partition or folder.is_symlink() or not folder.is_dir():
            return False
        if any(f.suffix != ".parquet" or not f.is_file() for f in folder.iterdir()):
            return False
    return True


def _typed(frame: pl.DataFrame, schema: dict[str, pl.DataType]) -> pl.DataFrame:
    """*frame* with exactly *schema*'s columns and types (missing ones null)."""
    return frame.select(
        (pl.col(c) if c in frame.columns else pl.lit(None)).cast(t).alias(c)
        for c, t in schema.items()
    )




@contextlib.contextmanager
def _writing(root: Path) -> Iterator[None]:
    """Turn an OSError while writing the dataset (full disk, read-only or not a folder) into
    the one-line error of an output that cannot be written."""
    try:
        yield
    except OSError as exc:
        raise OutputError(f"{root}: cannot write the dataset: {exc.strerror or exc}") from None
    except WriteError as exc:  # the manifest, through write_files
        raise OutputError(f"{root}: cannot write the dataset: {exc.reason}") from None


def _check_creatable(root: Path) -> None:
    """Refuse, before any trace is analysed, a dataset path under something that is not a
    folder (a file in the way)."""
    for parent in root.parents:
        if parent.exists():
            if not parent.is_dir():
                raise OutputError(f"{root}: cannot write the dataset: {parent} is not a folder")
            return
