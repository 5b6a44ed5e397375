"""``specnsys phases TRACE``: the exclusive phase breakdown (docs/design.md#attribution)."""

from __future__ import annotations

import argparse
import json

from specnsys import api
from specnsys.report.phases_text import (
    categories_dict,
    phases_dict,
    render_categories_text,
    render_phases_text,
)


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
    p.add_argument(
        "--by",
        choices=("phase", "category"),
        default="phase",
        help="category: also split the GPU op time by kernel category (GEMM, attention, "
        "sampling, top-k/top-p, NCCL, ...) and the phase that launched it",
    )
    p.add_argument("--json", action="store_true", help="one JSON object, for scripts")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    result = api.phases(
        args.trace, rules=args.rules or None, pid=args.pid, use_cache=not args.no_cache,
        by=args.by,
    )  # fmt: skip
    categories = result.categories
    if args.json:
        doc = phases_dict(result.breakdown, result.not_available)
        if categories is not None:
            doc["categories"] = categories_dict(categories)
        print(json.dumps(doc, indent=2))
    else:
        print(render_phases_text(result.breakdown, result.not_available))
        if categories is not None:
            print()
            print(render_categories_text(categories))
    api.warn(result)
    return 0
