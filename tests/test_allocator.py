"""Polars's and DuckDB's allocators get their options before they load (specnsys/allocator.py):
set by the command line for itself and its workers, never over the user's own, and not handed
on to a program that ``profile`` runs. What it saves is measured by ``bench/scale.py`` (peak RSS),
not asserted here."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from specnsys.allocator import (
    DUCKDB_ALLOCATOR_OPTIONS,
    DUCKDB_ALLOCATOR_VARIABLE,
    LARGE_INPUT_BYTES,
    POLARS_ALLOCATOR_OPTIONS,
    POLARS_ALLOCATOR_VARIABLE,
    POLARS_LARGE_INPUT_OPTIONS,
    POLARS_OWN_OPTIONS,
)
from specnsys.cli.main import largest_named_file
from tests.conftest import SAMPLE_TRACES


def _python(code: str, **env: str) -> str:
    mine = (POLARS_ALLOCATOR_VARIABLE, DUCKDB_ALLOCATOR_VARIABLE)
    base = {k: v for k, v in os.environ.items() if k not in mine}
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True, text=True, timeout=120, env={**base, **env},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_the_command_line_sets_the_options_before_polars_loads() -> None:
    trace = sorted(SAMPLE_TRACES.glob("*.sqlite"))[0]
    out = _python(f"""
        import contextlib, io, os, sys
        from specnsys.cli.main import main
        assert "polars" not in sys.modules
        with contextlib.redirect_stdout(io.StringIO()):
            code = main(["--no-cache", "info", {str(trace)!r}])
        print(code, "polars" in sys.modules, os.environ.get({POLARS_ALLOCATOR_VARIABLE!r}))
    """)
    # Polars's import puts its own defaults first: the later options win
    assert out.startswith("0 True ") and out.endswith(f",{POLARS_ALLOCATOR_OPTIONS}"), out


@pytest.mark.parametrize("size", [LARGE_INPUT_BYTES - 1, LARGE_INPUT_BYTES])
def test_an_export_of_the_large_size_on_the_command_line_keeps_freed_pages_longer(
    tmp_path: Path, size: int
) -> None:
    """Below :data:`LARGE_INPUT_BYTES` the command line's usual options; from it, freed pages
    kept 1 s (the budget has room for their cost only at large sizes:
    docs/performance.md). The file is sparse: only its size counts, before anything reads it
    (a file of zeros is no export: exit 2)."""
    big = tmp_path / "big.sqlite"
    with big.open("wb") as handle:
        handle.truncate(size)
    out = _python(f"""
        import contextlib, io, os
        from specnsys.cli.main import main
        with contextlib.redirect_stderr(io.StringIO()):
            code = main(["--no-cache", "info", {str(big)!r}])
        print(code, os.environ.get({POLARS_ALLOCATOR_VARIABLE!r}))
    """)
    options = POLARS_LARGE_INPUT_OPTIONS if size >= LARGE_INPUT_BYTES else POLARS_ALLOCATOR_OPTIONS
    assert out.startswith("2 ") and out.endswith(f",{options}"), out


def test_a_large_export_leaves_the_users_own_options_and_the_address_space_ones() -> None:
    """The user's own value wins for a large export too, and so do the options of an
    address-space limit (its allocators must hold no idle memory)."""
    out = _python(
        f"""
        import os
        from specnsys.allocator import return_freed_memory
        return_freed_memory(largest_input_bytes={LARGE_INPUT_BYTES})
        print(os.environ[{POLARS_ALLOCATOR_VARIABLE!r}])
        """,
        **{POLARS_ALLOCATOR_VARIABLE: "narenas:1"},
    )
    assert out == "narenas:1"
    out = _python(f"""
        import os
        from specnsys.allocator import return_freed_memory
        return_freed_memory(address_space_threads=1, largest_input_bytes={LARGE_INPUT_BYTES})
        print(os.environ[{POLARS_ALLOCATOR_VARIABLE!r}])
    """)
    assert out == f"{POLARS_ALLOCATOR_OPTIONS},background_thread:false,narenas:1"


@pytest.mark.parametrize(
    ("given", "largest", "expected"),
    [
        (None, LARGE_INPUT_BYTES, POLARS_LARGE_INPUT_OPTIONS),
        (None, LARGE_INPUT_BYTES - 1, POLARS_ALLOCATOR_OPTIONS),
        ("narenas:1", LARGE_INPUT_BYTES, "narenas:1"),  # the user's own: kept
    ],
)
def test_collect_workers_get_the_options_of_the_largest_trace(
    given: str | None, largest: int, expected: str
) -> None:
    """collect's traces are in folders, which the command line's words do not size: its
    pool's workers get the allocator's options for the largest trace (set by the pool's
    initializer, before a worker loads Polars), unless the options are the user's."""
    out = _python(
        f"""
        import multiprocessing, os
        from specnsys.allocator import return_freed_memory
        return_freed_memory()
        from specnsys.runset.collect import _owned_pool
        if __name__ == "__main__":
            with _owned_pool(1, multiprocessing.get_context("spawn"), {largest}) as pool:
                print(pool.submit(os.getenv, {POLARS_ALLOCATOR_VARIABLE!r}).result(timeout=120))
        """,
        **({} if given is None else {POLARS_ALLOCATOR_VARIABLE: given}),
    )
    # a parent that loaded Polars hands on its variable with Polars's defaults put first
    assert out.endswith(expected), out


def test_the_largest_named_file_counts_regular_files_only(tmp_path: Path) -> None:
    """What sizes the allocator's options: regular files among the words; a folder, a FIFO,
    a missing path, a name too long to look up and a NUL count nothing (no error)."""
    small, bigger = tmp_path / "a.sqlite", tmp_path / "b.sqlite"
    small.write_bytes(b"x" * 10)
    bigger.write_bytes(b"x" * 20)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    words = ["analyze", str(small), "--rules", str(bigger), str(tmp_path), str(fifo),
             str(tmp_path / "missing"), "x" * 5000, "a\0b", "--json"]  # fmt: skip
    assert largest_named_file(words) == 20
    assert largest_named_file(["info", str(tmp_path), str(fifo)]) == 0


def test_the_users_own_options_are_kept() -> None:
    out = _python(
        f"""
        import os
        from specnsys.allocator import return_freed_memory, without_own_options
        return_freed_memory()
        print(os.environ[{POLARS_ALLOCATOR_VARIABLE!r}], len(without_own_options(os.environ)) == len(os.environ))
        """,
        **{POLARS_ALLOCATOR_VARIABLE: "narenas:1", DUCKDB_ALLOCATOR_VARIABLE: "narenas:1"},
    )
    assert out == "narenas:1 True"


def test_polars_s_own_default_inherited_from_a_parent_is_not_the_users() -> None:
    """A parent that imported Polars (a bench, a test) hands its children Polars's default in
    the variable: the command line still sets its options, and gives the default back to a
    program it runs. (bench/scale.py's cold runs had Polars's default until this.)"""
    out = _python(
        f"""
        import os
        from specnsys.allocator import return_freed_memory, without_own_options
        return_freed_memory()
        print(os.environ[{POLARS_ALLOCATOR_VARIABLE!r}], without_own_options(os.environ)[{POLARS_ALLOCATOR_VARIABLE!r}])
        """,
        **{POLARS_ALLOCATOR_VARIABLE: POLARS_OWN_OPTIONS},
    )
    assert out == f"{POLARS_ALLOCATOR_OPTIONS} {POLARS_OWN_OPTIONS}"


def test_a_profiled_program_gets_the_users_own_value_back_after_polars_rewrote_it() -> None:
    """Polars's import prepends its defaults to the variable in this process's environment;
    the program ``profile`` runs gets the user's value as given."""
    out = _python(
        f"""
        import os
        from specnsys.allocator import return_freed_memory, without_own_options
        return_freed_memory()
        import polars
        print(os.environ[{POLARS_ALLOCATOR_VARIABLE!r}] != "narenas:2", without_own_options(os.environ)[{POLARS_ALLOCATOR_VARIABLE!r}])
        """,
        **{POLARS_ALLOCATOR_VARIABLE: "narenas:2"},
    )
    assert out == "True narenas:2"


def test_too_late_once_polars_is_loaded() -> None:
    out = _python(f"""
        import os, polars
        from specnsys.allocator import return_freed_memory
        before = os.environ.get({POLARS_ALLOCATOR_VARIABLE!r})
        return_freed_memory()
        print(os.environ.get({POLARS_ALLOCATOR_VARIABLE!r}) == before, {POLARS_ALLOCATOR_OPTIONS!r} in before)
    """)
    assert out == "True False"


@pytest.mark.parametrize(
    ("variable", "options"),
    [(POLARS_ALLOCATOR_VARIABLE, POLARS_ALLOCATOR_OPTIONS),
     (DUCKDB_ALLOCATOR_VARIABLE, DUCKDB_ALLOCATOR_OPTIONS)],
    ids=["polars", "duckdb"],
)  # fmt: skip
def test_a_profiled_program_does_not_inherit_the_options(variable: str, options: str) -> None:
    out = _python(f"""
        import os
        from specnsys.allocator import return_freed_memory, without_own_options
        return_freed_memory()
        print(os.environ[{variable!r}], {variable!r} in without_own_options(os.environ))
    """)
    assert out == f"{options} False"


def test_under_an_address_space_limit_the_allocators_hold_no_idle_reservations() -> None:
    """``return_freed_memory(threads)`` (the command line under ``ulimit -v``): Arrow's pool is
    glibc's malloc and Polars's jemalloc has no background threads and one arena per thread;
    a profiled program gets neither. Their effect is tested under a real limit in
    test_reliability_exits (``test_a_cold_analysis_under_one_gib_leaves_room``)."""
    out = _python(f"""
        import os
        from specnsys.allocator import ARROW_POOL_VARIABLE, return_freed_memory, without_own_options
        return_freed_memory(address_space_threads=1)
        import pyarrow
        child = without_own_options(os.environ)
        print(os.environ[{POLARS_ALLOCATOR_VARIABLE!r}], pyarrow.default_memory_pool().backend_name,
              {POLARS_ALLOCATOR_VARIABLE!r} in child, repr(child[ARROW_POOL_VARIABLE]))
    """, ARROW_DEFAULT_MEMORY_POOL="")  # set but empty: Arrow's default, as given back
    assert out == (
        f"{POLARS_ALLOCATOR_OPTIONS},background_thread:false,narenas:1 system False ''"
    ), out


def test_under_an_address_space_limit_the_users_arrow_pool_is_kept() -> None:
    out = _python("""
        import os
        from specnsys.allocator import return_freed_memory, without_own_options
        return_freed_memory(address_space_threads=2)
        import pyarrow
        print(pyarrow.default_memory_pool().backend_name, without_own_options(os.environ)["ARROW_DEFAULT_MEMORY_POOL"])
    """, ARROW_DEFAULT_MEMORY_POOL="mimalloc")
    assert out == "mimalloc mimalloc", out


#: Reads an option of DuckDB's own jemalloc (its ``duckdb_je_`` symbols), as DuckDB's
#: allocator applied it, not as the environment says.
_DUCKDB_OPTION = """
    import ctypes, _duckdb
    mallctl = ctypes.CDLL(_duckdb.__file__).duckdb_je_mallctl
    value, size = ctypes.c_ssize_t(), ctypes.c_size_t(ctypes.sizeof(ctypes.c_ssize_t))
    assert mallctl(b"opt.dirty_decay_ms", ctypes.byref(value), ctypes.byref(size), None, 0) == 0
"""


def test_the_command_line_gives_duckdb_s_allocator_its_options_before_duckdb_loads() -> None:
    """DuckDB's jemalloc hands freed pages back after 1 s by default: the phase ranges'
    query left 280 MiB resident into the breakdown (docs/performance.md#issue-35-sixth-session-
    the-launched-ops-summed-in-smaller-slices). The command line sets 100 ms, and DuckDB's
    allocator took it."""
    trace = sorted(SAMPLE_TRACES.glob("*.sqlite"))[0]
    out = _python(f"""
        import contextlib, io, os, sys
        from specnsys.cli.main import main
        assert "duckdb" not in sys.modules
        with contextlib.redirect_stdout(io.StringIO()):
            code = main(["--no-cache", "info", {str(trace)!r}])
        {textwrap.indent(textwrap.dedent(_DUCKDB_OPTION), " " * 8).strip()}
        print(code, os.environ.get({DUCKDB_ALLOCATOR_VARIABLE!r}), value.value)
    """)
    assert out == f"0 {DUCKDB_ALLOCATOR_OPTIONS} 100", out


def test_the_users_own_duckdb_allocator_options_are_kept_and_handed_on() -> None:
    out = _python(
        f"""
        import os
        from specnsys.allocator import return_freed_memory, without_own_options
        return_freed_memory()
        import duckdb
        duckdb.sql("SELECT 1").fetchall()
        {textwrap.indent(textwrap.dedent(_DUCKDB_OPTION), " " * 8).strip()}
        print(value.value, without_own_options(os.environ)[{DUCKDB_ALLOCATOR_VARIABLE!r}])
        """,
        **{DUCKDB_ALLOCATOR_VARIABLE: "dirty_decay_ms:2500"},
    )
    assert out == "2500 dirty_decay_ms:2500"


def test_too_late_once_duckdb_is_loaded_but_polars_still_gets_its_options() -> None:
    out = _python(f"""
        import os, duckdb
        from specnsys.allocator import return_freed_memory
        return_freed_memory()
        print(os.environ.get({DUCKDB_ALLOCATOR_VARIABLE!r}), os.environ.get({POLARS_ALLOCATOR_VARIABLE!r}))
    """)
    assert out == f"None {POLARS_ALLOCATOR_OPTIONS}"
