"""``specnsys check BASELINE CANDIDATE [--max-regression 5%]``: a regression gate for CI."""

from __future__ import annotations

import argparse
import json

from specnsys import api
from specnsys.cli.common import add_rules_argument


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "check",
        help="exit 1 when CANDIDATE regressed against BASELINE (traces or collect datasets), "
        "naming the phases that moved",
        description="Time per output token, in total and per phase, median over repeats; a "
        "change counts as a regression only beyond --max-regression and beyond the repeats' "
        "own scatter. Exit 0: within tolerance; 1: a regression; 2: bad input.",
    )
    p.add_argument("baseline", metavar="BASELINE", help="trace or dataset of the reference")
    p.add_argument("candidate", metavar="CANDIDATE", help="trace or dataset to check")
    p.add_argument(
        "--max-regression", default="5%", metavar="TOL",
        help="largest tolerated slowdown, of the total per-token time (default 5%%)",
    )  # fmt: skip
    add_rules_argument(p)
    p.add_argument("--json", action="store_true", help="one JSON object, for CI")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from specnsys.runset.check import check, parse_tolerance, render_check_text

    tolerance = parse_tolerance(args.max_regression)
    result = check(
        args.baseline, args.candidate, max_regression=tolerance, rules=args.rules,
        use_cache=not args.no_cache,
    )  # fmt: skip
    print(json.dumps(result.to_dict(), indent=2) if args.json else render_check_text(result))
    api.warn(result)
    return 1 if result.regressed else 0
