"""What several commands share: the ``--rules``, ``--window``, ``--tokens`` and
``--same-output`` arguments, the bounds of every count argument, the output checks.

Commands import this module and :mod:`specnsys.api`, never each other.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from specnsys.errors import UsageError
from specnsys.metrics.amdahl import K_LIMIT as amdahl_k_limit

RULES_HELP = (
    "which NVTX ranges are phases: a built-in set (specnsys; nvtx: every range is its own "
    "phase; the engine packs vllm, sglang, trtllm, torch) or a TOML name-mapping file; "
    "default: specnsys when the trace has specnsys ranges, else the pack whose names the "
    "trace's ranges match, else nvtx (the choice said in a warning line)"
)


def add_rules_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rules", metavar="RULES", help=RULES_HELP)


#: The bounds of the count arguments: far past any real use, and small enough that no count
#: makes a command run for hours (``whatif --k 1000000000`` did) or overflow int64 in a query
#: (``sql --max-rows 1e20`` was reported as an SQL error).
K_LIMIT = amdahl_k_limit
"""--k, --k-max: drafts per step (the best-k search tries 1..64 by default); the library's
own bound (:data:`specnsys.metrics.amdahl.K_LIMIT`)."""
ROWS_LIMIT = 1_000_000
"""--max-rows of a text table (--format csv or --json give every row)."""
WORKERS_LIMIT = 256
"""collect --workers: parallel analyses, each a process of its own."""
TOKENS_LIMIT = 10**12
"""--tokens: output tokens of one run."""


def count_arg(what: str, low: int, high: int) -> Callable[[str], int]:
    """An argparse type: a whole number of *what* in ``low..high``, else one line naming the
    allowed range (exit 2)."""
    allowed = f"({low:,} to {high:,})"

    def parse(text: str) -> int:
        try:
            n = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not a whole number of {what} {allowed}"
            ) from None
        if n < low:
            raise argparse.ArgumentTypeError(f"{text!r}: {what} must be at least {low:,} {allowed}")
        if n > high:
            raise argparse.ArgumentTypeError(f"{text!r}: {what} must be at most {high:,} {allowed}")
        return n

    parse.__name__ = what  # argparse names the type in its own messages
    return parse


tokens_arg = count_arg("tokens", 1, TOKENS_LIMIT)
"""A positive whole number of output tokens."""
k_arg = count_arg("drafts per step", 1, K_LIMIT)
rows_arg = count_arg("rows", 0, ROWS_LIMIT)


def add_tokens_argument(
    p: argparse.ArgumentParser, *, order: str | None = None, applies_to: str = ""
) -> None:
    """``--tokens N``: once (one trace), or, with *order* (which trace each value is for),
    once per trace; *applies_to* prefixes the help (the figures it applies to)."""
    what = (
        f"{applies_to}output tokens of a run, overriding what its trace holds (tokens marks, "
        "or the count derived from acceptance marks or forward steps; tokens_source 'given')"
    )
    if order is None:
        p.add_argument("--tokens", type=tokens_arg, metavar="N", help=what)
    else:
        p.add_argument("--tokens", type=tokens_arg, action="append", metavar="N",
                       help=f"{what}; give it once per trace, {order}")  # fmt: skip


def add_same_output_argument(p: argparse.ArgumentParser, applies_to: str = "") -> None:
    p.add_argument("--same-output", action="store_true",
                   help=f"{applies_to}the runs produced the same output: where a run's output "
                   "tokens are not known, the measured speedup is the ratio of the windows and "
                   "r the ratio of the accelerable times (listed under assumptions)")  # fmt: skip


ANALYSIS_WINDOW_HELP = (
    "the analysis window: requests (default: first request start to last request end), "
    "auto (without the warm-up steps and compile/graph-capture spans before the step time "
    "settles), A:B (milliseconds from the default window's start) or steps:N-M (decode "
    "steps N to M, 0-based); every output says what it dropped"
)


def add_analysis_window_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--window", metavar="RULE", help=ANALYSIS_WINDOW_HELP)


def add_wide_argument(p: argparse.ArgumentParser, names: str) -> None:
    p.add_argument("--wide", action="store_true",
                   help=f"whole {names} in the table, never cut with '…' (the default when "
                   "stdout is not a terminal: piped or redirected, as nsys stats prints them)")  # fmt: skip


def name_width(args: argparse.Namespace, width: int) -> int | None:
    """The width names are cut to in a text table: *width* on a terminal, None (whole) with
    ``--wide`` or when stdout is a pipe or a file, where a cut name only loses information."""
    isatty = getattr(sys.stdout, "isatty", None)
    return width if not args.wide and isatty is not None and isatty() else None


def add_window_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--window", metavar="A:B", type=window_arg,
                   help="timeline: draw the milliseconds A to B of the analysis window instead "
                   "of a decode step (for traces without decode ranges)")  # fmt: skip


#: The largest window edge in milliseconds: 2^60 ns, the bound on the times an export may hold.
WINDOW_MAX_MS = (1 << 60) / 1e6


def window_arg(text: str) -> tuple[float, float]:
    """``A:B`` in milliseconds, 0 <= A < B <= 2^60 ns (beyond that no export has events, and
    nanosecond arithmetic on such an edge overflows)."""
    try:
        a, b = (float(x) for x in text.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not A:B in milliseconds") from None
    if not (0 <= a < b <= WINDOW_MAX_MS):  # also False for nan
        raise argparse.ArgumentTypeError(
            f"{text!r}: need 0 <= A < B <= {WINDOW_MAX_MS:.0f} (milliseconds)"
        )
    return a, b


def check_output(path: str, suffixes: tuple[str, ...], inputs: Sequence[str]) -> Path:
    """Fail fast (before any trace is read) on an output path that cannot be written or that
    is an input export (through a symlink or a hard link too) or inside the cache."""
    from specnsys.ingest import cache
    from specnsys.ingest.readonly_sql import check_output_path

    out = Path(path)
    if out.suffix.lower().lstrip(".") not in suffixes:
        raise UsageError(f"{out}: the output must end in {' or '.join('.' + s for s in suffixes)}")
    if not out.parent.is_dir():
        raise UsageError(f"{out}: the folder {out.parent} does not exist")
    if out.is_dir():
        raise UsageError(f"{out} is a folder")
    check_output_path(out, [*(Path(p) for p in inputs), cache.cache_root()])
    return out
