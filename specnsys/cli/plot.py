"""``specnsys plot KIND TRACE... -o FILE``: one figure as PNG or SVG (issue 6)."""

from __future__ import annotations

import argparse
import json
import os

from specnsys import api
from specnsys.cli.common import (
    add_rules_argument,
    add_same_output_argument,
    add_tokens_argument,
    add_window_argument,
    check_output,
)
from specnsys.errors import UsageError

KINDS = ("phases", "amdahl", "acceptance", "sweep", "timeline")
FORMATS = ("png", "svg")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "plot",
        help="draw a figure (phases, amdahl, acceptance, sweep, timeline) as PNG or SVG",
        description=(
            "phases: one bar per trace; amdahl: speedup vs r for the baseline's p (with the "
            "operating point when a baseline and a speculative trace are given; for a generic "
            "run one curve per largest phase, p = its share); acceptance: "
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
    add_tokens_argument(p, order="in the order of the traces", applies_to="phases, amdahl, sweep: ")
    add_same_output_argument(p, applies_to="amdahl, sweep: ")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from specnsys.report.output import write_files

    out = check_output(args.output, FORMATS, args.traces)
    data_out = check_output(args.data, ("json",), args.traces) if args.data else None
    if data_out is not None and os.path.realpath(data_out) == os.path.realpath(out):
        raise UsageError(f"{out}: -o and --data name the same file")
    if (args.step is not None or args.window is not None) and args.kind != "timeline":
        raise UsageError("--step and --window only apply to the timeline")
    if args.step is not None and args.window is not None:
        raise UsageError("give --step or --window, not both")
    fig = api.figure(args.kind, *args.traces, rules=args.rules, pid=args.pid, step=args.step,
                     window_ms=args.window, tokens=args.tokens, same_output=args.same_output,
                     use_cache=not args.no_cache)  # fmt: skip
    # Everything is rendered before anything is written, and written all or none.
    contents = {out: fig.image(out)}
    if data_out is not None:
        contents[data_out] = (json.dumps(fig.data, indent=2) + "\n").encode()
    write_files(contents)
    print(f"{out}: {fig.title}")
    api.warn(fig)
    return 0
