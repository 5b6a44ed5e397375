"""``specnsys collect TRACES...|DIR -o DATASET``: many traces into one Parquet dataset."""

from __future__ import annotations

import argparse
import json
import sys

from specnsys.cli.common import (
    WORKERS_LIMIT,
    add_analysis_window_argument,
    add_rules_argument,
    count_arg,
)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "collect",
        help="analyse many traces (a sweep) into one Parquet dataset: runs, phases, steps, "
        "requests",
        description="Analyses each trace once (in a local process pool, or on Dask) and writes "
        "a hive-partitioned Parquet dataset that `specnsys sql DATASET` and Polars read. A "
        "second collect into the same dataset analyses only new or changed traces.",
    )
    p.add_argument("inputs", nargs="+", metavar="TRACE|DIR", help="traces, or folders of them")
    p.add_argument("-o", "--output", required=True, metavar="DATASET", help="dataset folder")
    p.add_argument("--labels", metavar="CSV", help="labels per trace: a 'trace' column + labels")
    p.add_argument(
        "--label", action="append", default=[], metavar="NAME=VALUE",
        help="a label for every trace of this collect (repeatable)",
    )  # fmt: skip
    p.add_argument(
        "--pattern", action="append", default=[], metavar="PATTERN",
        help="labels from file names, e.g. '{workload}_c{concurrency}_k{k}' (repeatable: the "
        "first that matches a file's stem is used)",
    )  # fmt: skip
    p.add_argument("--pid", type=int, help="process to analyze in every trace")
    p.add_argument("--workers", type=count_arg("workers", 1, WORKERS_LIMIT),
                   help="parallel analyses (default: the cores this process may use, by its "
                   "CPU affinity and quota, and no more than the available memory holds "
                   f"analyses of the largest trace; 1 to {WORKERS_LIMIT})")  # fmt: skip
    p.add_argument(
        "--dask", metavar="ADDRESS",
        help="run on Dask: tcp://HOST:PORT of a scheduler, or 'local' for a LocalCluster "
        "(needs specnsys[dask])",
    )  # fmt: skip
    add_rules_argument(p)
    add_analysis_window_argument(p)
    p.add_argument("--json", action="store_true", help="one JSON object, for scripts")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from specnsys.runset.collect import collect
    from specnsys.runset.labels import Labeler

    labeler = Labeler(csv_path=args.labels, options=args.label, patterns=args.pattern)
    result = collect(
        args.inputs, args.output, labeler=labeler, rules=args.rules, pid=args.pid,
        workers=args.workers, dask=args.dask, use_cache=not args.no_cache, window=args.window,
    )  # fmt: skip
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
    else:
        print(
            f"{result.dataset}: {len(result.analysed)} analysed, {len(result.unchanged)} "
            f"unchanged, {len(result.failed)} failed"
        )
    for warning in dict.fromkeys(result.warnings):
        print(f"specnsys: warning: {warning}", file=sys.stderr)
    for trace, reason in result.failed.items():
        print(f"specnsys: warning: {trace}: not collected: {reason}", file=sys.stderr)
    return 0
