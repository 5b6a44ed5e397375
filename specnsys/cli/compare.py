"""``specnsys compare BASELINE SPEC [SPEC ...] [BASELINE SPEC ...]``: predicted vs measured.

Each speculative trace is compared with the nearest baseline before it on the command line,
so a k sweep is ``compare B S_k2 S_k4 S_k6`` and a concurrency sweep, where every level needs
its own baseline, is ``compare B1 S1 B4 S4 B8 S8``: one table of p, r, predicted and measured
speedup per run. Generic runs (neither baseline nor speculative), or runs all of one mode, are
compared as an A/B diff of each run from the first: ``compare A B``.
"""

from __future__ import annotations

import argparse

from specnsys import api
from specnsys.cli.common import (
    add_analysis_window_argument,
    add_rules_argument,
    add_same_output_argument,
    add_tokens_argument,
)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "compare",
        help="baseline vs speculative run(s): p, r, predicted and measured speedup, phase "
        "deltas; or an A/B diff per phase of any two runs of one kind",
    )
    p.add_argument(
        "traces",
        nargs="+",
        metavar="TRACE",
        help="a baseline trace, then the speculative trace(s) to compare with it "
        "(repeat for sweeps that need their own baseline); or runs A B... to diff from A",
    )
    add_rules_argument(p)
    add_tokens_argument(p, order="in the order of the traces")
    add_same_output_argument(p)
    add_analysis_window_argument(p)
    p.add_argument("--json", action="store_true", help="JSON, for scripts")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from specnsys.render.analyze_text import render_comparisons_text, render_json

    compared = api.compare(*args.traces, rules=args.rules, tokens=args.tokens,
                           same_output=args.same_output, use_cache=not args.no_cache,
                           window=args.window)  # fmt: skip
    if args.json:
        print(render_json(compared.to_dict()))
    else:
        print(render_comparisons_text([c.to_dict() for c in compared.comparisons]))
    api.warn(compared)
    return 0
