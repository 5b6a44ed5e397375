"""Every reader builds exactly the declared model (specnsys/model/): the same tables, column
names, Arrow types and order, and no NULL in a column declared NOT NULL.

The nsys path on every sample capture, on every real corpus export (2020.3 to 2026.2), on a
built export with a row in every source table and on a built pre-2022 export;
the Kineto reader on built Chrome traces. Each is checked as built in memory and as read back
from its cache entry (the Parquet files every later run reads).
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import specnsys
from specnsys.ingest.model import MODEL, NAME_REFERENCES
from specnsys.model import MODEL_SCHEMA, MODEL_TABLES, ColumnType, table_schema
from specnsys.readers.kineto import KINETO
from specnsys.testing.builder import NsysExportBuilder
from tests.conftest import SAMPLE_TRACES, corpus_files
from tests.kineto_builder import ChromeTrace
from tests.test_schema_command import _legacy_export  # the same pre-2022 export


def _mismatches(tables: dict[str, pa.Table]) -> list[str]:
    """How *tables* differ from the declaration (nothing when they match)."""
    wrong = []
    if list(tables) != list(MODEL_TABLES):
        wrong.append(f"tables {list(tables)} != {list(MODEL_TABLES)}")
    for name, table in tables.items():
        declared = table_schema(name)
        if not table.schema.equals(declared.stored_schema(), check_metadata=False):
            wrong.append(f"{name}: built {table.schema} != declared {declared.stored_schema()}")
            continue
        for column in declared.columns:
            if not column.nullable and table.column(column.name).null_count:
                wrong.append(f"{name}.{column.name} is declared NOT NULL and holds NULL")
    return wrong


def _opened_tables(path: Path, *, use_cache: bool) -> dict[str, pa.Table]:
    with specnsys.open(path, use_cache=use_cache) as trace:
        assert (trace.cache_folder is not None) == use_cache
        return {name: trace.arrow(name) for name in trace.tables}


def _every_source_export(folder: Path) -> Path:
    """An export with one row in every table the model reads (built as nsys lays it out)."""
    b = NsysExportBuilder()
    b.process(1, "python")
    b.thread(1, 1, "main")
    b.domain(1, "specnsys")
    b.category(1, 1, "phases")
    b.push_pop(100, 900, "decode", domain_id=1, category=1, payload_int=1)
    b.start_end(100, 900, "request", domain_id=1, payload_float=0.5)
    b.mark(500, "tokens", domain_id=1, payload_int=4)
    b.runtime(200, 300, "cudaLaunchKernel_v7000", 1)
    b.kernel(310, 400, "gemm", 1)
    b.memcpy(410, 420, 64, 2)
    b.memset(430, 440, 64, 3)
    b.graph(450, 460, 4)
    b.graph_node(150, 160, 11)
    b.sync(470, 480, 5)
    b.gpu(0)
    b.gpu_metric(400, 0, 1, "DRAM Read Bandwidth [Throughput %]", 50)
    b.osrt(120, 140, "pthread_cond_wait")
    b.cpu_sample(130)
    return b.write(folder / "every_source.sqlite")


def _chrome_trace(folder: Path, name: str = "loop.json") -> Path:
    """A torch-profiler trace with every kind of event the Kineto reader reads."""
    trace = ChromeTrace()
    trace.request(0, 1000, 1).range(10, 900, "decode").range(20, 400, "forward")
    trace.mark(450, "tokens", 4).op(30, 60, "aten::mm").scope(500, None, "never finished")
    trace.runtime(40, 50, "cudaLaunchKernel", 7).kernel(70, 90, "void gemm<float>(float*)", 7)
    trace.runtime(100, 110, "cudaMemcpyAsync", 8).memcpy(120, 130, 64, 8)
    trace.runtime(140, 150, "cudaMemsetAsync", 9, driver=True).memset(160, 170, 64, 9)
    trace.device(0)
    return trace.write(folder / name)


@pytest.mark.parametrize("use_cache", [False, True], ids=["in-memory", "cached"])
@pytest.mark.parametrize("name", sorted(p.name for p in SAMPLE_TRACES.glob("*.sqlite")))
def test_the_nsys_path_builds_the_declared_model_on_the_samples(name: str, use_cache: bool) -> None:
    assert _mismatches(_opened_tables(SAMPLE_TRACES / name, use_cache=use_cache)) == []


@pytest.mark.parametrize("path", corpus_files(), ids=lambda p: p.name)
def test_the_nsys_path_builds_the_declared_model_on_real_exports(
    path: Path, corpus_cache: Path
) -> None:
    """Every version's layout (the cached model shared with the other corpus tests)."""
    for use_cache in (False, True):
        assert _mismatches(_opened_tables(path, use_cache=use_cache)) == [], use_cache


@pytest.mark.parametrize("build", [_every_source_export, _legacy_export])
def test_the_nsys_path_builds_the_declared_model_on_built_exports(
    build: object, tmp_path: Path
) -> None:
    path = build(tmp_path)  # type: ignore[operator]
    for use_cache in (False, True):
        tables = _opened_tables(path, use_cache=use_cache)
        assert _mismatches(tables) == [], use_cache
    if build is _every_source_export:  # every table has its row: no table passes empty
        assert all(table.num_rows for table in tables.values())


@pytest.mark.parametrize("gzipped", [False, True], ids=["json", "json.gz"])
def test_the_kineto_reader_builds_the_declared_model(gzipped: bool, tmp_path: Path) -> None:
    path = _chrome_trace(tmp_path, "loop.json.gz" if gzipped else "loop.json")
    built = KINETO.build(path)
    assert _mismatches(built.tables) == []
    for table in ("nvtx", "runtime", "kernels", "memcpy", "memset", "threads", "processes", "gpus"):
        assert built.tables[table].num_rows, table
    for use_cache in (False, True):
        assert _mismatches(_opened_tables(path, use_cache=use_cache)) == [], use_cache


def test_a_mismatch_is_found() -> None:
    """The check itself: a wrong type, a missing column and a NULL where none may be."""
    good = {t.name: t.stored_schema().empty_table() for t in MODEL_SCHEMA}
    assert _mismatches(good) == []
    nvtx = table_schema("nvtx").stored_schema()
    int64_depth = pa.schema([f.with_type(pa.int64()) if f.name == "depth" else f for f in nvtx])
    wrong_type = dict(good, nvtx=int64_depth.empty_table())
    assert len(_mismatches(wrong_type)) == 1
    missing = dict(good, nvtx=good["nvtx"].drop_columns(["parent"]))
    assert len(_mismatches(missing)) == 1
    nulls = {n: pa.nulls(1, f.type) for n, f in zip(nvtx.names, nvtx, strict=True)}
    assert _mismatches(dict(good, nvtx=pa.table(nulls, schema=nvtx))) == [
        f"nvtx.{c.name} is declared NOT NULL and holds NULL"
        for c in table_schema("nvtx").columns
        if not c.nullable
    ]


def test_the_declaration_covers_what_the_nsys_definitions_name() -> None:
    """Every nsys table definition is of a declared table, in order; every column it resolves
    from StringIds is a declared text column; every column has a meaning."""
    assert tuple(t.name for t in MODEL) == MODEL_TABLES
    for table, references in NAME_REFERENCES.items():
        for _raw, column in references:
            declared = {c.name: c.type for c in table_schema(table).columns}
            assert declared[column] is ColumnType.STRING, (table, column)
    for declared_table in MODEL_SCHEMA:
        assert declared_table.meaning and all(c.meaning for c in declared_table.columns), (
            declared_table.name
        )
