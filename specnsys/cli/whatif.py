"""``specnsys whatif [TRACE ...] [--alpha A] [--k K] [--c C] [--p P]``: Leviathan's what-if.

Measured values come from the traces (a baseline gives p; a speculative run gives alpha, k
and c); flags override or supply them. Without a trace every input is a flag.
"""

from __future__ import annotations

import argparse

from specnsys.cli.analyze import add_rules_argument, analyze_path, load_rules_arg
from specnsys.errors import UsageError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "whatif",
        help="Leviathan's expected speedup, the best k and the Amdahl-limited end-to-end result",
    )
    p.add_argument(
        "traces",
        nargs="*",
        metavar="TRACE",
        help="up to one baseline (gives p) and one speculative trace (gives alpha, k, c)",
    )
    p.add_argument("--alpha", type=float, help="acceptance rate in [0, 1]")
    p.add_argument("--k", type=int, help="drafts per step")
    p.add_argument("--c", type=float, help="draft/target forward cost ratio")
    p.add_argument("--p", type=float, help="bottleneck share p in [0, 1] (from a baseline)")
    p.add_argument("--k-max", type=int, default=None, help="largest k the search tries (64)")
    add_rules_argument(p)
    p.add_argument("--json", action="store_true", help="one JSON object, for scripts")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from specnsys.metrics import compare_runs, whatif
    from specnsys.metrics.amdahl import DEFAULT_K_MAX
    from specnsys.report.analyze_text import render_json, render_whatif_text

    if len(args.traces) > 2:
        raise UsageError("whatif takes at most two traces (a baseline and a speculative run)")
    rules = load_rules_arg(args.rules)
    analyses = [analyze_path(t, rules=rules, use_cache=not args.no_cache) for t in args.traces]
    by_mode: dict[str, object] = {}
    for a in analyses:
        if a.mode in by_mode:
            raise UsageError(f"whatif takes one trace per mode; got two {a.mode} traces")
        by_mode[a.mode] = a
    measured: dict[str, object] = {}
    sources: dict[str, str] = {}
    base, spec = by_mode.get("baseline"), by_mode.get("spec")
    if base is not None and base.p is not None:  # type: ignore[attr-defined]
        measured["p"], sources["p"] = base.p, f"measured in {base.path}"  # type: ignore[attr-defined]
    if spec is not None:
        acc = spec.acceptance  # type: ignore[attr-defined]
        if acc is not None:
            measured["alpha"] = acc["alpha"]
            measured["k"] = spec.k  # type: ignore[attr-defined]
            sources["alpha"] = sources["k"] = f"measured in {spec.path}"  # type: ignore[attr-defined]
        c = spec.draft_cost_ratio  # type: ignore[attr-defined]
        c_from = "draft forward / verify"
        if base is not None:
            pair = compare_runs(base, spec)  # type: ignore[arg-type]
            if pair.draft_cost_ratio is not None:
                c, c_from = pair.draft_cost_ratio, "draft forward / baseline forward"
        if c is not None:
            measured["c"], sources["c"] = c, f"measured: {c_from}"
    for key in ("alpha", "k", "c", "p"):
        value = getattr(args, key)
        if value is not None:
            measured[key], sources[key] = value, "given"
    missing = [key for key in ("alpha", "c") if key not in measured]
    if missing:
        raise UsageError(
            f"whatif needs {' and '.join(missing)}: pass --{' and --'.join(missing)} or a "
            "speculative trace that measures them"
        )
    result = whatif(
        measured["alpha"],  # type: ignore[arg-type]
        measured.get("k"),  # type: ignore[arg-type]
        measured["c"],  # type: ignore[arg-type]
        measured.get("p"),  # type: ignore[arg-type]
        k_max=args.k_max if args.k_max is not None else DEFAULT_K_MAX,
    )
    result["sources"] = sources
    print(render_json(result) if args.json else render_whatif_text(result, sources))
    return 0
