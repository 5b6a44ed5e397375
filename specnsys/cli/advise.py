"""``specnsys advise TRACE|DATASET``: the article's three next steps -- cut the non-accelerable
items first, then set k, then size the draft -- each with the figure that backs it."""

from __future__ import annotations

import argparse

from specnsys.cli.common import add_rules_argument


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "advise",
        help="what to do next, in order: cut the non-accelerable items (with the forecast p "
        "after each cut), then set k, then size the draft",
        description="Fits the forecast's cost model on the SOURCEs and advises, for the "
        "configuration they ran (the first speculative run's concurrency and k), the three "
        "next steps of the article in its order, each with the number that backs it and the "
        "command that shows it.",
    )
    p.add_argument("sources", nargs="+", metavar="SOURCE",
                   help="nsys .sqlite exports (a baseline and a speculative run) or a dataset")  # fmt: skip
    p.add_argument("--concurrency", type=int, metavar="N",
                   help="advise for this concurrency (default: the lowest a speculative source ran)")  # fmt: skip
    p.add_argument("--k", type=int, metavar="K",
                   help="advise from this k (default: the lowest k run at that concurrency)")  # fmt: skip
    add_rules_argument(p)
    p.add_argument("--json", action="store_true", help="one JSON object, for scripts")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from specnsys import api
    from specnsys.errors import UsageError
    from specnsys.render.analyze_text import render_json
    from specnsys.render.forecast_text import render_advice_text
    from specnsys.results import to_dict
    from specnsys.runset.forecast import advise

    if args.concurrency is not None and args.concurrency < 1:
        raise UsageError("--concurrency must be a whole number >= 1")
    if args.k is not None and args.k < 1:
        raise UsageError("--k must be a whole number >= 1")
    result = advise(*args.sources, rules=args.rules, concurrency=args.concurrency, k=args.k,
                    use_cache=not args.no_cache)  # fmt: skip
    print(render_json(to_dict(result)) if args.json else render_advice_text(result))
    api.warn(result)
    return 0
