"""``specnsys phases TRACE``: the exclusive phase breakdown (docs/design.md#attribution)."""

from __future__ import annotations

import argparse

from specnsys import api
from specnsys.report.phases_text import render_phases_json, render_phases_text


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("phases", help="exclusive wall time per phase, summing to the window")
    p.add_argument("trace", help="nsys .sqlite export (or .nsys-rep with nsys on PATH)")
    p.add_argument("--pid", type=int, help="process to analyze (default: the annotated one)")
    p.add_argument(
        "--rules",
        metavar="RULES",
        help="which NVTX ranges are phases: a built-in set (specnsys; nvtx: every range is "
        "its own phase) or a TOML name-mapping file; default: specnsys when the trace has "
        "specnsys ranges, else nvtx (said in a warning line)",
    )
    p.add_argument("--json", action="store_true", help="one JSON object, for scripts")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    result = api.phases(
        args.trace, rules=args.rules or None, pid=args.pid, use_cache=not args.no_cache
    )
    render = render_phases_json if args.json else render_phases_text
    print(render(result.breakdown, result.not_available))
    api.warn(result)
    return 0
