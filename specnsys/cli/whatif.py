"""``specnsys whatif [TRACE ...] [--alpha A] [--k K] [--c C] [--p P]``: Leviathan's what-if.

Measured values come from the traces (a baseline gives p; a speculative run gives alpha, k
and c); flags override or supply them. Without a trace every input is a flag.
"""

from __future__ import annotations

import argparse

from specnsys import api
from specnsys.cli.common import K_LIMIT, add_rules_argument, k_arg


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "whatif",
        help="Leviathan's expected speedup, the best k and the Amdahl-limited end-to-end result",
    )
    p.add_argument(
        "traces",
        nargs="*",
        metavar="TRACE",
        help="up to one baseline (gives p) and one speculative trace (gives alpha, k, c); "
        "or one generic trace alone (the run's speedup if each phase were cut)",
    )
    p.add_argument("--alpha", type=float, help="acceptance rate in [0, 1]")
    p.add_argument("--k", type=k_arg, help=f"drafts per step (1 to {K_LIMIT})")
    p.add_argument("--c", type=float, help="draft/target forward cost ratio")
    p.add_argument("--p", type=float, help="bottleneck share p in [0, 1] (from a baseline)")
    p.add_argument("--k-max", type=k_arg, default=None,
                   help=f"largest k the search tries (default 64, at most {K_LIMIT})")  # fmt: skip
    add_rules_argument(p)
    p.add_argument("--json", action="store_true", help="one JSON object, for scripts")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from specnsys.render.analyze_text import render_json, render_whatif_text

    what = api.whatif(
        *args.traces, alpha=args.alpha, k=args.k, c=args.c, p=args.p, k_max=args.k_max,
        rules=args.rules, use_cache=not args.no_cache,
    )  # fmt: skip
    print(render_json(what.result) if args.json else render_whatif_text(what.result, what.sources))
    api.warn(what)
    return 0
