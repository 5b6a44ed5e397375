"""``specnsys plot KIND TRACE... -o FILE``: one figure as PNG or SVG (issue 6)."""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Sequence
from pathlib import Path

from specnsys.cli.analyze import add_rules_argument, load_rules_arg
from specnsys.errors import UsageError

KINDS = ("phases", "amdahl", "acceptance", "sweep", "timeline")
FORMATS = ("png", "svg")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "plot",
        help="draw a figure (phases, amdahl, acceptance, sweep, timeline) as PNG or SVG",
        description=(
            "phases: one bar per trace; amdahl: speedup vs r for the baseline's p (with the "
            "operating point when a baseline and a speculative trace are given); acceptance: "
            "the first speculative trace; sweep: each speculative trace against the nearest "
            "baseline before it; timeline: one decode step of one trace."
        ),
    )
    p.add_argument("kind", choices=KINDS, help="which figure")
    p.add_argument("traces", nargs="+", metavar="TRACE", help="nsys .sqlite exports")
    p.add_argument("-o", "--output", required=True, metavar="FILE",
                   help="output file; .png or .svg picks the format")  # fmt: skip
    p.add_argument("--data", metavar="FILE.json",
                   help="also write the figure's data (titles, bar lengths, points) as JSON")  # fmt: skip
    p.add_argument("--step", type=int, metavar="N",
                   help="timeline: decode step to draw, from 0 (default: the median-length step)")  # fmt: skip
    add_window_argument(p)
    add_rules_argument(p)
    p.add_argument("--pid", type=int, help="process to analyze (default: the annotated one)")
    p.set_defaults(run=run)


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


def run(args: argparse.Namespace) -> int:
    from specnsys.report.build import plot_data
    from specnsys.report.output import write_files
    from specnsys.report.plots import draw, figure_bytes, require_drawable

    out = check_output(args.output, FORMATS, args.traces)
    data_out = check_output(args.data, ("json",), args.traces) if args.data else None
    if data_out is not None and os.path.realpath(data_out) == os.path.realpath(out):
        raise UsageError(f"{out}: -o and --data name the same file")
    if (args.step is not None or args.window is not None) and args.kind != "timeline":
        raise UsageError("--step and --window only apply to the timeline")
    if args.step is not None and args.window is not None:
        raise UsageError("give --step or --window, not both")
    rules = load_rules_arg(args.rules)
    data = plot_data(args.kind, args.traces, rules=rules, pid=args.pid, step=args.step,
                     window_ms=args.window, use_cache=not args.no_cache)  # fmt: skip
    require_drawable(data)
    # Everything is rendered before anything is written, and written all or none.
    contents = {out: figure_bytes(draw(data), out, salt=args.kind)}
    if data_out is not None:
        contents[data_out] = (json.dumps(data, indent=2) + "\n").encode()
    write_files(contents)
    print(f"{out}: {data['title']}")
    return 0
