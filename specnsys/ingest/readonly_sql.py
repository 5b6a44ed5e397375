"""Users' SQL runs read-only: statements that could write the export, the cache or any file
are refused before DuckDB sees them.

Why a statement check and not only a sandbox: the model's views read the cache's Parquet files,
so DuckDB must be allowed to open that folder, and DuckDB's file-access switch
(``enable_external_access`` + ``allowed_directories``) then allows *writing* there too (measured:
``COPY (SELECT 1) TO '<cache>/kernels.parquet'`` still overwrote the entry with access
disabled). So every statement is classified by DuckDB's own parser -- never by text patterns,
which comments, casing and spellings defeat (``EXPLAIN /**/ ANALYZE COPY ...`` once ran the
COPY) -- and only what is positively recognized as reading passes:

* one statement (:func:`duckdb.extract_statements`) whose type is ``SELECT`` -- ``WITH``,
  ``FROM``-first, ``DESCRIBE``, ``SHOW``, ``SUMMARIZE``, ``UNPIVOT`` are SELECTs to DuckDB;
* a top-level ``PIVOT`` (DuckDB parses one without an ``IN`` list as a multi-statement);
* ``EXPLAIN [ANALYZE] [(options)]`` of a SELECT (``EXPLAIN ANALYZE`` runs what it explains,
  so EXPLAIN of anything else is refused, ``ANALYZE`` or not);
* ``PRAGMA`` from a list of pragmas that only report (``table_info``, ``show_tables``, ...).

A SELECT is not read-only by its type alone: DuckDB has table functions with effects
(``enable_logging(storage_path=...)`` and ``enable_profiling(save_location=...)`` write files,
``query(...)`` runs SQL text, ``checkpoint()``, ``add_grammar_extension(...)``). Every table
function a SELECT calls is read from DuckDB's own syntax tree (``json_serialize_sql``) and must
be on :data:`READ_ONLY_TABLE_FUNCTIONS`; a table function that is not known (say, one of an
extension that DuckDB would autoload) is refused. Where DuckDB cannot serialize the statement
(a PIVOT without ``IN`` list) its tokens are checked instead: every ``name(`` must be a known
function that is not a table function with effects (:func:`_check_calls_by_tokens`).

Everything else -- ``COPY``, ``EXPORT``, ``ATTACH``, ``INSTALL``/``LOAD``, ``SET``/``RESET``,
``CREATE``/``DROP``/``ALTER``, ``INSERT``/``UPDATE``/``DELETE``/``MERGE``, ``CALL``,
``IMPORT DATABASE``, transactions, ``PREPARE``/``EXECUTE`` -- and any text holding more than one
statement is refused with a one-line :class:`ReadOnlyQueryError` (exit status 2).

Where the statement's words are needed (EXPLAIN's inner statement, the PRAGMA's name, PIVOT)
they come from DuckDB's tokenizer (:func:`duckdb.tokenize`), to which comments are tokens of
their own, so a comment cannot hide or fake a keyword.

:func:`lock_down` is the second line, used by ``specnsys sql``: after the views exist, file
access is limited to the cache folder and the configuration is locked, so a query can neither
read other files nor switch access back on.
"""

from __future__ import annotations

import functools
import json
import os
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from specnsys.errors import UsageError

if TYPE_CHECKING:
    import duckdb

#: PRAGMAs that only report on the in-memory catalog or the engine; all others are refused.
READ_ONLY_PRAGMAS = frozenset(
    {
        "table_info",
        "show_tables",
        "show_tables_expanded",
        "show",
        "database_list",
        "database_size",
        "version",
        "platform",
        "functions",
        "collations",
        "storage_info",
        "metadata_info",
        "user_agent",
    }
)

#: Table functions (and table macros) of DuckDB 2.0 that only read: catalog listings, series,
#: file readers. Every other table function in a query is refused; DuckDB 2.0's others
#: (``enable_logging``, ``enable_profiling``, ``disable_*``, ``checkpoint``,
#: ``force_checkpoint``, ``truncate_duckdb_logs``, ``query``, ``json_execute_serialized_sql``,
#: ``*_grammar_extension``, ``*_external_resource*``, the ``*arrow_scan``/``pandas_scan``/
#: ``python_map_function`` pointer scans) write files, run SQL text or change the session.
READ_ONLY_TABLE_FUNCTIONS = frozenset(
    {f"duckdb_{name}" for name in (
        "approx_database_count", "available_metrics", "columns", "connection_count",
        "constraints", "coordinate_systems", "databases", "dependencies", "dialects",
        "eviction_queues", "extension_repositories", "extensions", "external_file_cache",
        "external_resource_types", "external_resources", "functions", "grammar_extensions",
        "indexes", "keywords", "live_query_metrics", "log_contexts", "logs", "logs_parsed",
        "memory", "optimizers", "prepared_statements", "profiling_settings", "schemas",
        "secret_type_parameters", "secret_types", "secrets", "sequences", "settings",
        "table_sample", "tables", "temporary_files", "triggers", "types", "variables", "views",
    )}
    | {f"pragma_{name}" for name in (
        "collations", "database_size", "metadata_info", "platform", "show", "storage_info",
        "table_info", "user_agent", "version",
    )}
    | {f"parquet_{name}" for name in (
        "bloom_probe", "file_metadata", "full_metadata", "kv_metadata", "metadata",
        "page_index", "scan", "schema",
    )}
    | {f"read_{name}" for name in (
        "blob", "csv", "csv_auto", "duckdb", "json", "json_auto", "json_objects",
        "json_objects_auto", "ndjson", "ndjson_auto", "ndjson_objects", "parquet", "text",
    )}
    | {
        "generate_series", "glob", "histogram_values", "icu_calendar_names", "json_each",
        "json_tree", "pg_timezone_names", "query_table", "range", "repeat", "repeat_row",
        "sniff_csv", "summary", "test_all_types", "test_vector_types", "unnest", "which_secret",
    }
)  # fmt: skip

#: Scalar functions with an effect beyond their result.
_DENIED_SCALARS = frozenset({"write_log"})


def _creates_tables(parameter: str) -> bool:
    """Whether a table function's named *parameter* makes it create tables: the CSV readers'
    ``store_rejects`` and ``rejects_*`` (``rejects_table``, ``rejects_scan``, ...) write the
    rows they reject into temporary tables, named as the query says (``rejects_table='nvtx'``
    shadowed the model's ``nvtx`` for the rest of the session)."""
    name = parameter.lower()
    return name == "store_rejects" or name.startswith("rejects_")

#: Why a refused statement type is dangerous, for the error message.
_WHY = {
    "COPY": "it writes or reads files",
    "EXPORT": "it writes files",
    "ATTACH": "it opens (and can create or write) a database file",
    "DETACH": "it changes the attached databases",
    "LOAD": "it installs or loads extension code",
    "SET": "it changes settings, some of which write files or enable file access",
    "CREATE": "it creates objects",
    "DROP": "it removes objects",
    "ALTER": "it changes objects",
    "INSERT": "it writes rows",
    "UPDATE": "it writes rows",
    "DELETE": "it deletes rows",
    "MERGE_INTO": "it writes rows",
    "CALL": "it calls a procedure (use SELECT * FROM function(...) instead)",
    "PRAGMA": "this PRAGMA is not known to be read-only",
    "TRANSACTION": "transactions are not needed for reading",
    "PREPARE": "prepared statements are not supported here",
    "EXECUTE": "prepared statements are not supported here",
    "VACUUM": "it rewrites storage",
}
_RULE = "specnsys runs read-only queries (SELECT, DESCRIBE, SHOW, EXPLAIN) and never changes "
_RULE += "the export or its cache"


class ReadOnlyQueryError(UsageError):
    """A query that could change the export, the cache or other files (exit status 2)."""


@dataclass(frozen=True)
class _Token:
    """One DuckDB token of a statement: where it starts, its text and DuckDB's kind for it."""

    offset: int
    text: str
    kind: str  # "keyword", "identifier", "operator", "string_const", "numeric_const"

    @property
    def word(self) -> str:
        """The token as a case-folded name (a quoted identifier unquoted)."""
        text = self.text
        if self.kind == "identifier" and len(text) >= 2 and text[0] == text[-1] == '"':
            text = text[1:-1].replace('""', '"')
        return text.lower()


def _tokens(text: str) -> list[_Token]:
    """DuckDB's tokens of *text*, comments left out (so a comment can hide or fake nothing)."""
    import duckdb

    found = duckdb.tokenize(text)
    ends = [offset for offset, _ in found[1:]] + [len(text)]
    tokens = []
    for (offset, kind), end in zip(found, ends, strict=True):
        name = str(kind).rsplit(".", 1)[-1]
        if name != "comment":
            tokens.append(_Token(offset, text[offset:end].strip(), name))
    return tokens


def _type_name(statement: object) -> str:
    try:
        return str(statement.type).rsplit(".", 1)[-1].upper()  # type: ignore[attr-defined]
    except ValueError:
        # A type the Python enum does not know (e.g. UPDATE EXTENSIONS in DuckDB 2.0).
        return "UNKNOWN"


def check_read_only(query: str) -> None:
    """Raise :class:`ReadOnlyQueryError` unless *query* is one statement that only reads.

    A query DuckDB cannot parse raises DuckDB's own parser error (the caller reports SQL
    errors); text without any statement passes (there is nothing to run).
    """
    import duckdb

    statements = duckdb.extract_statements(query)
    if len(statements) > 1:
        raise ReadOnlyQueryError(
            f"refused: the query holds {len(statements)} statements; give one read-only "
            "statement (SELECT, DESCRIBE, SHOW, EXPLAIN)"
        )
    for statement in statements:
        _check_statement(_type_name(statement), statement.query)


def _check_statement(kind: str, text: str) -> None:
    tokens = _tokens(text)
    first = tokens[0].word if tokens else ""
    if kind == "SELECT":
        _check_select(text, tokens)
        return
    if kind == "MULTI" and first in ("pivot", "pivot_wider"):
        _check_calls_by_tokens(tokens)
        return
    if kind == "EXPLAIN" and first == "explain":
        _check_explain(text, tokens)
        return
    if kind == "PRAGMA" and first == "pragma" and _pragma_name(tokens) in READ_ONLY_PRAGMAS:
        return
    why = _WHY.get(kind, "it is not known to be read-only")
    keyword = first.upper() or kind
    shown = {"LOAD": "INSTALL/LOAD", "UNKNOWN": "unrecognized"}.get(kind, keyword)
    if kind == "PRAGMA" and first != "pragma":  # IMPORT DATABASE, COPY FROM DATABASE
        why = "it reads or copies whole databases"
    raise ReadOnlyQueryError(f"refused {shown} statement: {why}; {_RULE}")


def _pragma_name(tokens: list[_Token]) -> str:
    """The name after ``PRAGMA`` (empty when the second token is not a name)."""
    if len(tokens) > 1 and tokens[1].kind in ("identifier", "keyword"):
        return tokens[1].word
    return ""


def _check_explain(text: str, tokens: list[_Token]) -> None:
    """EXPLAIN [ANALYZE | ANALYSE] [(options)] <statement>: allowed when <statement> is an
    allowed SELECT (EXPLAIN ANALYZE runs it; plain EXPLAIN of anything else is no use here).

    The explained statement is the text from the token after the prefix on; that text must
    itself parse as exactly one SELECT, so a prefix read differently from DuckDB can only make
    the check refuse, never let another statement through.
    """
    import duckdb

    at = 1
    if at < len(tokens) and tokens[at].word in ("analyze", "analyse"):
        at += 1
    if at < len(tokens) and tokens[at].text == "(":
        close = next((i for i in range(at, len(tokens)) if tokens[i].text == ")"), len(tokens))
        at = close + 1
    inner_text = text[tokens[at].offset :] if at < len(tokens) else ""
    try:
        inner = duckdb.extract_statements(inner_text)
    except duckdb.Error:
        inner = []
    if len(inner) == 1 and _type_name(inner[0]) == "SELECT":
        _check_select(inner[0].query, _tokens(inner[0].query))
        return
    word = tokens[at].text.upper() if at < len(tokens) else "an unrecognized"
    raise ReadOnlyQueryError(
        f"refused EXPLAIN of a {word} statement: EXPLAIN is allowed for SELECT only "
        f"(EXPLAIN ANALYZE runs the statement); {_RULE}"
    )


def _check_select(text: str, tokens: list[_Token]) -> None:
    """Refuse a SELECT that calls a table function with effects (see the module doc)."""
    tree = _syntax_tree(text)
    if tree is None:
        _check_calls_by_tokens(tokens)
        return
    for node in _nodes(tree):
        if node.get("type") == "TABLE_FUNCTION":
            function = node.get("function")
            name = function.get("function_name") if isinstance(function, dict) else None
            if not isinstance(name, str) or name.lower() not in READ_ONLY_TABLE_FUNCTIONS:
                _refuse_call(str(name))
            for parameter in _named_parameters(function):
                if _creates_tables(parameter):
                    _refuse_parameter(str(name), parameter)
        elif node.get("class") == "FUNCTION":
            name = node.get("function_name")
            if not isinstance(name, str) or name.lower() in _DENIED_SCALARS:
                _refuse_call(str(name))


def _named_parameters(function: object) -> Iterator[str]:
    """The names of a table function call's named parameters in DuckDB's syntax tree:
    ``name := value`` carries its name, ``name = value`` is an equality whose left side is
    a bare column reference to the name."""
    arguments = function.get("arguments") if isinstance(function, dict) else None
    for argument in arguments if isinstance(arguments, list) else []:
        if not isinstance(argument, dict):
            continue
        if isinstance(argument.get("name"), str) and argument["name"]:
            yield argument["name"]
            continue
        expression = argument.get("expression")
        if not isinstance(expression, dict) or expression.get("type") != "COMPARE_EQUAL":
            continue
        left = expression.get("left")
        if isinstance(left, dict) and left.get("class") == "COLUMN_REF":
            names = left.get("column_names")
            if isinstance(names, list) and len(names) == 1:
                yield str(names[0])


def _refuse_parameter(function: str, parameter: str) -> None:
    raise ReadOnlyQueryError(
        f"refused {function}(..., {parameter}=...): it stores the rows it rejects in new "
        f"tables, which would shadow the model's tables; {_RULE}"
    )


def _check_calls_by_tokens(tokens: list[_Token]) -> None:
    """The check for a statement DuckDB will not serialize (a PIVOT without IN list).

    Without a syntax tree every ``name (`` is taken as a call: a table function that is not
    read-only, a denied scalar, and an identifier that names no function DuckDB knows (which
    could be an extension's, autoloaded) are refused. A table alias with a column list
    (``t(a, b)``) in such a statement is refused too: the price of not knowing.
    """
    catalog = _catalog()
    for token in tokens:
        if token.kind in ("identifier", "keyword") and _creates_tables(token.word):
            _refuse_parameter("a table function", token.word)
    for token, following in zip(tokens, tokens[1:], strict=False):
        if following.text != "(" or token.kind not in ("identifier", "keyword"):
            continue
        name = token.word
        if name in READ_ONLY_TABLE_FUNCTIONS:
            continue
        if name in catalog.table_functions or name in _DENIED_SCALARS:
            _refuse_call(name)
        if token.kind == "identifier" and name not in catalog.functions:
            _refuse_call(name)


def _refuse_call(name: str) -> None:
    raise ReadOnlyQueryError(
        f"refused call of {name}(): it is not known to be read-only (it can write files, run "
        f"SQL text or change the session); {_RULE}"
    )


def _nodes(tree: object) -> Iterator[dict[str, object]]:
    """Every JSON object in *tree* (iteratively: a deep query must not hit the recursion
    limit)."""
    stack = [tree]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            yield item
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


@dataclass(frozen=True)
class _Catalog:
    """Function names of a fresh DuckDB: table functions, and every other kind."""

    table_functions: frozenset[str]
    functions: frozenset[str]


_PARSER_LOCK = threading.Lock()


@functools.cache
def _parser() -> duckdb.DuckDBPyConnection:
    """A private in-memory connection for parsing (never the user's, never the default)."""
    import duckdb

    return duckdb.connect(":memory:")


@functools.cache
def _catalog() -> _Catalog:
    with _PARSER_LOCK:
        rows = (
            _parser()
            .execute(
                "SELECT DISTINCT function_name, function_type IN ('table', 'table_macro') "
                "FROM duckdb_functions()"
            )
            .fetchall()
        )
    return _Catalog(
        frozenset(name.lower() for name, table in rows if table),
        frozenset(name.lower() for name, table in rows if not table),
    )


def _syntax_tree(text: str) -> dict[str, object] | None:
    """DuckDB's syntax tree of the SELECT *text* as JSON, or None where DuckDB cannot
    serialize it."""
    import duckdb

    try:
        with _PARSER_LOCK:
            rows = _parser().execute("SELECT json_serialize_sql($1)", [text]).fetchall()
        tree = json.loads(rows[0][0], parse_constant=str)
    except (duckdb.Error, ValueError, RecursionError):
        return None
    if not isinstance(tree, dict) or tree.get("error") is not False:
        return None
    return tree


def lock_down(con: duckdb.DuckDBPyConnection, readable: Sequence[Path] = ()) -> None:
    """Limit *con*'s file access to the *readable* folders and lock its configuration.

    Call after the views exist. Views over Parquet files in *readable* keep working (measured
    with DuckDB 2.0); reading any other file fails, and no ``SET`` can undo this. Python
    replacement scans (querying a local DataFrame by name) stop working, which is why only
    the CLI uses this and the library's ``Trace.sql`` relies on :func:`check_read_only`.
    """
    folders = [str(Path(p).resolve()) + "/" for p in readable]
    con.execute("SET allowed_directories = $dirs", {"dirs": folders})
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")


def check_output_path(output: Path, protected: Sequence[Path]) -> None:
    """Refuse to write a result over the export or into its cache folder (``sql -o``)."""
    target = Path(output).resolve()
    for item in protected:
        item = Path(item).resolve()
        same = target.exists() and item.exists() and os.path.samefile(target, item)  # hard links
        if same or target == item or item in target.parents:
            raise ReadOnlyQueryError(
                f"refused to write the result to {output}: it is the input export or inside "
                "its cache; choose another file"
            )
