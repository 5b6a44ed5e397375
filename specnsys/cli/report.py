"""``specnsys report TRACE [BASELINE] -o report.html``: one self-contained HTML report."""

from __future__ import annotations

import argparse

from specnsys import api
from specnsys.cli.common import (
    add_analysis_window_argument,
    add_rules_argument,
    add_same_output_argument,
    add_tokens_argument,
    check_output,
    window_arg,
)
from specnsys.errors import UsageError
from specnsys.render import registry


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "report",
        help=registry.report_renderer("html").help,
    )
    p.add_argument("trace", help="nsys .sqlite export (the speculative run, or any run)")
    p.add_argument("baseline", nargs="?", help="the baseline run to compare it with (or, for "
                   "a generic run or two of one mode, run A of an A/B diff)")
    p.add_argument("-o", "--output", required=True, metavar="FILE.html", help="report file")
    p.add_argument("--step", type=int, metavar="N",
                   help="decode step the timeline shows, from 0 (default: the median-length one)")  # fmt: skip
    p.add_argument("--timeline", metavar="A:B", type=window_arg,
                   help="timeline: draw the milliseconds A to B of the analysis window instead "
                   "of a decode step")  # fmt: skip
    add_analysis_window_argument(p)
    add_rules_argument(p)
    p.add_argument("--pid", type=int, help="process to analyze (default: the annotated one)")
    add_tokens_argument(p, order="TRACE's first, then BASELINE's")
    add_same_output_argument(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from specnsys.small_files import write_files

    inputs = [args.trace] + ([args.baseline] if args.baseline else [])
    out = check_output(args.output, registry.report_renderer("html").suffixes, inputs)
    if args.step is not None and args.timeline is not None:
        raise UsageError("give --step or --timeline, not both")
    result = api.report(args.trace, args.baseline, rules=args.rules, pid=args.pid,
                        step=args.step, window_ms=args.timeline, tokens=args.tokens,
                        same_output=args.same_output, use_cache=not args.no_cache,
                        window=args.window)  # fmt: skip
    page = result.html
    # The page is built whole in memory first: a failed analysis never touches the output,
    # and a failed write leaves an earlier report as it was.
    write_files({out: page.encode("utf-8")})
    print(f"{out}: {len(page) / 1024:.0f} KiB")
    api.warn(result)
    return 0
