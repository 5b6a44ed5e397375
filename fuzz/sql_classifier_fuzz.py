"""Structured fuzzing of the read-only SQL check: no write may get through.

Statements are assembled from pieces an attacker would combine: comments (``--`` to the end
of the line, ``/* */``, nested), random casing, whitespace (spaces, tabs, newlines, none),
parentheses, EXPLAIN spellings (``ANALYZE``/``ANALYSE``, option lists), and bodies that write
-- ``COPY ... TO``, ``EXPORT DATABASE``, ``ATTACH``, ``INSTALL``/``LOAD``, ``SET``, ``CREATE``,
``PRAGMA``, ``CALL``, table functions with effects -- next to bodies that only read. Every
path they name lies in a scratch folder.

The oracle runs each statement for real: either :meth:`Trace.sql` refuses it, or running it on
the trace's connection (the model views over a small built trace, from its cache entry)
leaves the scratch folder empty, the cache entry and the export byte-identical, the settings
unchanged and the views answering as before. Anything else is a finding (AssertionError).

The generator takes a ``pick(n) -> int in [0, n)`` function, so the same pieces drive
hypothesis (tests/test_reliability_sql.py, a few hundred examples) and atheris/libFuzzer
(this script, coverage-guided, for as long as you like)::

    python fuzz/sql_classifier_fuzz.py -max_total_time=300
    python fuzz/sql_classifier_fuzz.py -runs=20000
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

Pick = Callable[[int], int]

COMMENTS = ["", "", "-- c\n", "--\n", "/* c */", "/**/", "/* a /* nested */ b */", "/*\n*/"]
SPACES = [" ", " ", "\t", "\n", "  ", "\r\n", ""]
EXPLAINS = [
    [],
    ["EXPLAIN"],
    ["EXPLAIN", "ANALYZE"],
    ["EXPLAIN", "ANALYSE"],
    ["EXPLAIN", "(", "ANALYZE", ")"],
    ["EXPLAIN", "(", "ANALYSE", ")"],
    ["EXPLAIN", "(", "ANALYZE", ",", "FORMAT", "JSON", ")"],
    ["EXPLAIN", "(", "FORMAT", "JSON", ")"],
    ["EXPLAIN", "ANALYZE", "(", "FORMAT", "JSON", ")"],
]


def bodies(folder: Path) -> list[list[str]]:
    """Statement bodies as word lists; ``{n}`` becomes a fresh number (a new file name)."""
    f = f"{folder}/f{{n}}"
    return [
        ["COPY", "(", "SELECT", "1", "AS", "x", ")", "TO", f"'{f}.csv'"],
        ["COPY", "kernels", "TO", f"'{f}.parquet'", "(", "FORMAT", "parquet", ")"],
        ["COPY", "(", "FROM", "nvtx", ")", "TO", f"'{f}.json'"],
        ["WITH", "a", "AS", "(", "SELECT", "1", ")", "COPY", "a", "TO", f"'{f}.csv'"],
        ["EXPORT", "DATABASE", f"'{f}'"],
        ["ATTACH", f"'{f}.db'", "AS", "d{n}"],
        ["ATTACH", "DATABASE", f"'{f}.db'"],
        ["INSTALL", "sqlite"],
        ["LOAD", "parquet"],
        ["SET", "profiling_output", "=", f"'{f}.txt'"],
        ["SET", "enable_profiling", "=", "'json'"],
        ["PRAGMA", "enable_profiling"],
        ["PRAGMA", "profiling_output", "=", f"'{f}.txt'"],
        ["PRAGMA", "show_tables"],
        ["PRAGMA", "table_info", "(", "'kernels'", ")"],
        ["CREATE", "TABLE", "t{n}", "AS", "SELECT", "1"],
        ["CREATE", "OR", "REPLACE", "VIEW", "kernels", "AS", "SELECT", "1", "AS", "x"],
        ["CALL", "enable_logging", "(", "storage", ":=", "'file'", ",", "storage_path", ":=",
         f"'{f}'", ")"],
        ["SELECT", "*", "FROM", "enable_logging", "(", "storage", "=", "'file'", ",",
         "storage_path", "=", f"'{f}'", ")"],
        ["SELECT", "*", "FROM", "enable_profiling", "(", "format", "=", "'json'", ",",
         "save_location", "=", f"'{f}.json'", ")"],
        ["FROM", "kernels", ",", "LATERAL", "(", "FROM", "enable_profiling", "(", ")", ")"],
        ["SELECT", "*", "FROM", "query", "(", "'SELECT 1'", ")"],
        ["SELECT", "count", "(", "*", ")", "FROM", "kernels"],
        ["FROM", "nvtx", "LIMIT", "2"],
        ["DESCRIBE", "kernels"],
        ["SUMMARIZE", "SELECT", "start", "FROM", "kernels"],
        ["SHOW", "TABLES"],
        ["PIVOT", "(", "SELECT", "'a'", "AS", "k", ",", "1", "AS", "v", ")", "ON", "k",
         "USING", "sum", "(", "v", ")"],
        ["SELECT", "*", "FROM", "read_csv", "(", f"'{f}.csv'", ")"],
        ["CHECKPOINT"],
        ["DETACH", "memory"],
        ["USE", "memory"],
    ]  # fmt: skip


def _case(word: str, pick: Pick) -> str:
    """*word* in upper, lower or mixed case (quoted text and paths kept as they are)."""
    if word.startswith("'"):
        return word
    how = pick(3)
    if how == 0:
        return word.upper()
    if how == 1:
        return word.lower()
    return "".join(c.upper() if pick(2) else c.lower() for c in word)


def _glue(words: list[str], pick: Pick) -> str:
    """*words* joined with comments and whitespace of every kind between them."""
    parts = [COMMENTS[pick(len(COMMENTS))]]
    for word in words:
        parts.append(word)
        comment = COMMENTS[pick(len(COMMENTS))]
        space = SPACES[pick(len(SPACES))]
        # no space at all only where the tokens still part (around punctuation or a comment)
        if not space and not comment and word.isalnum():
            space = " "
        parts.append(comment + space if pick(2) else space + comment)
    return "".join(parts)


def statement(pick: Pick, folder: Path, n: int = 0) -> str:
    """One generated statement; every path it names lies in *folder*."""
    body = list(bodies(folder)[pick(len(bodies(folder)))])
    if body[0] in ("SELECT", "FROM") and pick(3) == 0:
        body = ["(", *body, ")"]
    words = [*EXPLAINS[pick(len(EXPLAINS))], *body]
    if pick(6) == 0:
        words.append(";")
    if pick(8) == 0:
        words = ["SELECT", "1", ";", *words]
    words = [_case(w.replace("{n}", str(n)), pick) for w in words]
    return _glue(words, pick)


def _digest(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file()
        else "dir"
        for p in sorted(folder.rglob("*"))
    }  # fmt: skip


class Oracle:
    """Runs statements for real on a trace's connection and checks that nothing changed."""

    def __init__(self, export: Path, scratch: Path) -> None:
        import specnsys

        with specnsys.open(export):
            pass  # write the cache entry
        self.trace = specnsys.open(export)
        assert self.trace.from_cache and self.trace.cache_folder is not None
        self.export, self.scratch = export, scratch
        self.cache = self.trace.cache_folder
        self.before = self._state()

    def _state(self) -> tuple:
        con = self.trace.connection
        settings = con.execute("SELECT name, value FROM duckdb_settings() ORDER BY 1").fetchall()
        counts = con.execute("SELECT (FROM (SELECT count(*) FROM kernels)), "
                             "(FROM (SELECT count(*) FROM nvtx))").fetchall()  # fmt: skip
        return (
            hashlib.sha256(self.export.read_bytes()).hexdigest(),
            _digest(self.cache),
            _digest(self.scratch),
            settings,
            counts,
        )

    def check(self, text: str) -> bool:
        """True when the check refused *text*; raise AssertionError when a statement it let
        through changed anything."""
        import duckdb

        from specnsys.ingest.arrow_values import to_arrow
        from specnsys.ingest.readonly_sql import ReadOnlyQueryError

        try:
            relation = self.trace.sql(text)
        except ReadOnlyQueryError:
            return True
        except duckdb.Error:
            relation = None  # DuckDB's own parse or bind error: nothing ran
        if relation is not None:
            with contextlib.suppress(duckdb.Error):
                to_arrow(relation)
        after = self._state()
        assert after == self.before, f"a statement changed something: {text!r}"
        return False

    def close(self) -> None:
        self.trace.close()


def _atheris_main() -> None:
    import random

    import atheris

    with atheris.instrument_imports(include=["specnsys.ingest.readonly_sql"]):
        import specnsys.ingest.readonly_sql  # noqa: F401 - coverage feedback for libFuzzer
    from tests.hostile_corpus import good_loop

    work = Path(tempfile.mkdtemp(prefix="specnsys-sqlfuzz-"))
    os.environ.setdefault("SPECNSYS_CACHE_DIR", str(work / "cache"))
    scratch = work / "scratch"
    scratch.mkdir()
    oracle = Oracle(good_loop(work), scratch)
    counter = iter(range(1 << 62))

    def one(data: bytes) -> None:
        fdp = atheris.FuzzedDataProvider(data)
        rest = random.Random(data)  # when the input's bytes run out, its hash picks on

        def pick(n: int) -> int:
            if fdp.remaining_bytes():
                return fdp.ConsumeIntInRange(0, n - 1)
            return rest.randrange(n)

        oracle.check(statement(pick, scratch, next(counter)))

    atheris.Setup(sys.argv, one)
    atheris.Fuzz()


if __name__ == "__main__":
    _atheris_main()
