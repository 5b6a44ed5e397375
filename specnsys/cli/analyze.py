"""``specnsys analyze TRACE``: p, the Amdahl ceiling and every metric of one trace (issue 5)."""

from __future__ import annotations

import argparse

from specnsys import api
from specnsys.cli.common import (
    add_analysis_window_argument,
    add_rules_argument,
    add_tokens_argument,
)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "analyze",
        help="bottleneck share p, Amdahl ceiling, acceptance, latency, bandwidth of one trace",
    )
    p.add_argument("trace", help="nsys .sqlite export (or .nsys-rep with nsys on PATH)")
    add_rules_argument(p)
    p.add_argument("--pid", type=int, help="process to analyze (default: the annotated one)")
    add_tokens_argument(p)
    add_analysis_window_argument(p)
    p.add_argument("--json", action="store_true", help="one JSON object, for scripts")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from specnsys.render.analyze_text import render_analysis_text, render_json

    analysis = api.analyze(args.trace, rules=args.rules, pid=args.pid, tokens=args.tokens,
                           use_cache=not args.no_cache, window=args.window)  # fmt: skip
    doc = analysis.to_dict()
    if args.json:
        print(render_json(doc))
    else:
        # the warnings that also go to stderr (the rules note among them) are said there only,
        # so that no line appears twice on one terminal; JSON keeps all of them
        said = analysis.data_warnings
        own = [w for w in analysis.warnings if not any(d.endswith(f": {w}") for d in said)]
        print(render_analysis_text({**doc, "warnings": own}))
    api.warn(analysis)
    return 0
