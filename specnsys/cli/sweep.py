"""``specnsys sweep DATASET [--by k,concurrency]``: a collected sweep as cells over repeats."""

from __future__ import annotations

import argparse
import json


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "sweep",
        help="a collected sweep (k x concurrency x ...) as cells: medians and spread over "
        "repeats, where speculation stops paying, the best k, the cost of a speculative step",
        description="Groups the runs of a `specnsys collect` dataset by --by labels; each "
        "speculative run is compared (as `specnsys compare` does) with the baseline runs of the "
        "same labels but k/mode (a baseline: analysis mode 'baseline' or label k=0). Cells give "
        "medians and the median absolute deviation over their pairs; noisy cells are flagged.",
    )
    p.add_argument("dataset", metavar="DATASET", help="a folder written by specnsys collect")
    p.add_argument(
        "--by", metavar="LABELS",
        help="comma-separated labels that make a cell (default: every label but repeat and "
        "commit)",
    )  # fmt: skip
    p.add_argument(
        "--noise", type=float, metavar="FRACTION",
        help="relative MAD above which a cell is flagged noisy (default 0.05)",
    )  # fmt: skip
    p.add_argument("--json", action="store_true", help="one JSON object, for scripts")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from specnsys.errors import UsageError
    from specnsys.runset.sweep import NOISY_RELATIVE_MAD, render_sweep_text, sweep

    by = None
    if args.by is not None:
        by = [n.strip() for n in args.by.split(",") if n.strip()]
        if not by:
            raise UsageError("--by: name at least one label")
    threshold = NOISY_RELATIVE_MAD if args.noise is None else args.noise
    if not 0 < threshold < 10:
        raise UsageError("--noise must be a positive fraction (e.g. 0.05)")
    result = sweep(args.dataset, by=by, threshold=threshold)
    print(json.dumps(result.to_dict(), indent=2) if args.json else render_sweep_text(result))
    return 0
