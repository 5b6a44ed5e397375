"""``specnsys phases TRACE``: the exclusive phase breakdown (docs/design.md#attribution)."""

from __future__ import annotations

import argparse
import json

from specnsys import api
from specnsys.cli.common import (
    RULES_HELP,
    add_analysis_window_argument,
    add_wide_argument,
    name_width,
)
from specnsys.render.analyze_text import straggler_line
from specnsys.render.phases_text import (
    PHASE_NAME_WIDTH,
    render_categories_text,
    render_phases_text,
)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("phases", help="exclusive wall time per phase, summing to the window")
    p.add_argument("trace", help="nsys .sqlite export (or .nsys-rep with nsys on PATH)")
    p.add_argument("--pid", type=int, help="process to analyze (default: the annotated one)")
    p.add_argument("--rules", metavar="RULES", help=RULES_HELP)
    add_analysis_window_argument(p)
    p.add_argument(
        "--by",
        choices=("phase", "category"),
        default="phase",
        help="category: also split the GPU op time by kernel category (GEMM, attention, "
        "sampling, top-k/top-p, NCCL, ...) and the phase that launched it",
    )
    p.add_argument(
        "--all-processes",
        action="store_true",
        help="every process that launched GPU work or has phase ranges (tensor-parallel ranks, "
        "engine core), each over its own window, with NCCL time per phase and the straggler",
    )
    add_wide_argument(p, "phase names")
    p.add_argument("--json", action="store_true", help="one JSON object, for scripts")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    result = api.phases(
        args.trace, rules=args.rules or None, pid=args.pid, use_cache=not args.no_cache,
        by=args.by, all_processes=args.all_processes, window=args.window,
    )  # fmt: skip
    if result.ranks is not None:
        width = name_width(args, PHASE_NAME_WIDTH)
        print(json.dumps(result.to_dict(), indent=2) if args.json else _ranks_text(result, width))
        api.warn(result)
        return 0
    categories = result.categories
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
    else:
        width = name_width(args, PHASE_NAME_WIDTH)
        print(render_phases_text(result.breakdown, result.not_available, name_width=width))
        if categories is not None:
            print()
            print(render_categories_text(categories))
    api.warn(result)
    return 0


def _ranks_text(result: api.Phases, width: int | None) -> str:
    """Each process's table (``render_phases_text``) with its rank, NCCL time and lag, then
    the union window and the straggler."""
    doc = result.to_dict()
    blocks = []
    ranks = result.ranks or ()
    for rank, row in zip(ranks, doc["ranks"], strict=True):
        device = "no GPU work" if row["device"] is None else f"device {row['device']}"
        nccl = row["nccl_ns"]
        head = (
            f"rank {row['rank']}: pid {row['pid']} ({row['process'] or 'unnamed'}), {device}; "
            f"NCCL {'n/a' if nccl is None else f'{nccl / 1e6:.3f} ms'} in "
            f"{row['nccl_kernels'] or 0:,} kernels; {row['steps']:,} {row['step_phase']} steps"
        )
        by_phase = sorted(
            ((n, r["nccl_ns"]) for n, r in row["phases"].items() if r["nccl_ns"]),
            key=lambda kv: (-kv[1], kv[0]),
        )
        if by_phase:
            head += "\nNCCL launched in: " + ", ".join(
                f"{n} {ns / 1e6:.3f} ms" for n, ns in by_phase[:3]
            ) + (f", {len(by_phase) - 3} more phases" if len(by_phase) > 3 else "")
        text = render_phases_text(rank.breakdown, result.not_available, name_width=width)
        blocks.append(head + "\n" + text)
    tail = (
        f"{doc['processes']} processes (ranks {doc['order']}); together "
        f"{doc['window_ns'] / 1e6:.3f} ms ({doc['window_of']})\n"
        + straggler_line(doc["straggler"] if doc["processes"] > 1 else None)
    )
    notes = "".join(f"\nnote: {n}" for n in doc["notes"])
    return "\n\n".join([*blocks, tail + notes])
