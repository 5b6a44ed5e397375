"""Users' SQL runs read-only: statements that could write the export, the cache or any file
are refused before DuckDB sees them.

Why a statement check and not only a sandbox: the model's views read the cache's Parquet files,
so DuckDB must be allowed to open that folder, and DuckDB's file-access switch
(``enable_external_access`` + ``allowed_directories``) then allows *writing* there too (measured:
``COPY (SELECT 1) TO '<cache>/kernels.parquet'`` still overwrote the entry with access
disabled). So every statement is classified by DuckDB's own parser
(:func:`duckdb.extract_statements`) and only an allow-list of reading statements passes:

* ``SELECT`` in all its forms (``WITH``, ``FROM``-first, ``DESCRIBE``, ``SHOW``, ``SUMMARIZE``,
  ``UNPIVOT``; a top-level ``PIVOT``, which DuckDB parses as a multi-statement);
* ``EXPLAIN`` of an allowed statement (``EXPLAIN ANALYZE`` runs it, so what it runs is checked);
* ``PRAGMA`` from a list of pragmas that only report (``table_info``, ``show_tables``, ...).

Everything else -- ``COPY``, ``EXPORT``, ``ATTACH``, ``INSTALL``/``LOAD``, ``SET``/``RESET``,
``CREATE``/``DROP``/``ALTER``, ``INSERT``/``UPDATE``/``DELETE``/``MERGE``, ``CALL``,
``IMPORT DATABASE``, transactions, ``PREPARE``/``EXECUTE`` -- and any text holding more than one
statement is refused with a one-line :class:`ReadOnlyQueryError` (exit status 2).

:func:`lock_down` is the second line, used by ``specnsys sql``: after the views exist, file
access is limited to the cache folder and the configuration is locked, so a query can neither
read other files nor switch access back on.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
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

_EXPLAIN_PREFIX = re.compile(
    r"^\s*EXPLAIN\s+(?:(?P<analyze>ANALY[SZ]E)\s+)?(?:\((?P<opts>[^()]*)\)\s*)?",
    re.IGNORECASE,
)
_PRAGMA_NAME = re.compile(r"^\s*PRAGMA\s+(?P<name>[A-Za-z_][A-Za-z0-9_]*)", re.IGNORECASE)
_PIVOT = re.compile(r"^\s*PIVOT(?:_WIDER)?\b", re.IGNORECASE)


class ReadOnlyQueryError(UsageError):
    """A query that could change the export, the cache or other files (exit status 2)."""


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
    if kind == "SELECT":
        return
    if kind == "MULTI" and _PIVOT.match(_strip_comments(text)):
        return
    if kind == "EXPLAIN":
        match = _EXPLAIN_PREFIX.match(_strip_comments(text))
        analyze = match is not None and (
            match.group("analyze") or "analyze" in (match.group("opts") or "").lower()
        )
        if match is not None and not analyze:
            return  # EXPLAIN only plans; it runs nothing
        if match is not None:
            check_read_only(_strip_comments(text)[match.end() :])
            return
    if kind == "PRAGMA":
        match = _PRAGMA_NAME.match(_strip_comments(text))
        if match is not None and match.group("name").lower() in READ_ONLY_PRAGMAS:
            return
    why = _WHY.get(kind, "it is not known to be read-only")
    words = _strip_comments(text).split(None, 1)
    keyword = words[0].upper() if words else kind
    shown = {"LOAD": "INSTALL/LOAD", "UNKNOWN": "unrecognized"}.get(kind, keyword)
    if kind == "PRAGMA" and keyword != "PRAGMA":  # IMPORT DATABASE, COPY FROM DATABASE
        why = "it reads or copies whole databases"
    raise ReadOnlyQueryError(
        f"refused {shown} statement: {why}; specnsys runs read-only queries "
        "(SELECT, DESCRIBE, SHOW, EXPLAIN) and never changes the export or its cache"
    )


_COMMENT = re.compile(r"^\s*(?:--[^\n]*(?:\n|$)|/\*.*?\*/)", re.DOTALL)


def _strip_comments(text: str) -> str:
    """*text* without leading SQL comments (so that a comment cannot hide the keyword)."""
    while True:
        match = _COMMENT.match(text)
        if match is None:
            return text.lstrip()
        text = text[match.end() :]


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
