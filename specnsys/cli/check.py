"""``specnsys check BASELINE CANDIDATE [--max-regression 5%] [--max-phase-regression 20%]``: a
regression gate for CI (see :mod:`specnsys.runset.check`)."""

from __future__ import annotations

import argparse
import json

from specnsys import api
from specnsys.cli.common import add_rules_argument


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "check",
        help="exit 1 when CANDIDATE regressed against BASELINE (traces or collect datasets), "
        "naming the phases that regressed or moved",
        description="Time per output token, in total and per phase, median over repeats; a "
        "change counts as a regression only beyond the repeats' own scatter and beyond a gate: "
        "the total's growth beyond --max-regression, or a phase's growth beyond "
        "--max-regression of the total or beyond --max-phase-regression of its own baseline "
        "time (phases of at least --phase-floor of the total). Time that moved to another "
        "phase with its ranges (a rename, a rule change) is reported as moved. Exit 0: within "
        "the gates; 1: a regression, or a baseline configuration without candidate runs "
        "(unless --allow-missing); 2: bad input.",
    )
    p.add_argument("baseline", metavar="BASELINE", help="trace or dataset of the reference")
    p.add_argument("candidate", metavar="CANDIDATE", help="trace or dataset to check")
    p.add_argument(
        "--max-regression", default="5%", metavar="TOL",
        help="largest tolerated slowdown, of the total per-token time (default 5%%)",
    )  # fmt: skip
    p.add_argument(
        "--max-phase-regression", default="20%", metavar="TOL",
        help="largest tolerated slowdown of a phase, of its own baseline time (default 20%%)",
    )  # fmt: skip
    p.add_argument(
        "--phase-floor", default="1%", metavar="SHARE",
        help="phases below this share of the baseline's total are not judged by "
        "--max-phase-regression (default 1%%)",
    )  # fmt: skip
    p.add_argument(
        "--allow-missing", action="store_true",
        help="pass when a baseline configuration has no candidate runs (still named)",
    )  # fmt: skip
    add_rules_argument(p)
    p.add_argument("--json", action="store_true", help="one JSON object, for CI")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from specnsys.runset.check import check, parse_tolerance, render_check_text

    result = check(
        args.baseline, args.candidate,
        max_regression=parse_tolerance(args.max_regression),
        max_phase_regression=parse_tolerance(args.max_phase_regression, "--max-phase-regression"),
        phase_floor=parse_tolerance(args.phase_floor, "--phase-floor"),
        allow_missing=args.allow_missing, rules=args.rules, use_cache=not args.no_cache,
    )  # fmt: skip
    print(json.dumps(result.to_dict(), indent=2) if args.json else render_check_text(result))
    api.warn(result)
    return 1 if result.failed else 0
