"""``specnsys ranges TRACE``: every NVTX range's GPU work, as ``nsys stats -r nvtxgpuproj``."""

from __future__ import annotations

import argparse

from specnsys import api
from specnsys.cli.common import ROWS_LIMIT, add_wide_argument, name_width, rows_arg
from specnsys.render.projection_text import (
    RANGE_NAME_WIDTH,
    render_frame_json,
    render_ranges_text,
)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "ranges", help="NVTX ranges projected onto the GPU (works without specnsys phases)"
    )
    p.add_argument("trace", help="nsys .sqlite export (or .nsys-rep with nsys on PATH)")
    p.add_argument(
        "--instances", action="store_true", help="one row per range instance, not per name"
    )
    p.add_argument(
        "--group-by",
        choices=("text", "name"),
        help="rows per range text (text, the default: as nsys) or per name (name: texts that "
        "differ only by per-call decoration such as torch's ', op_id = N' are one row)",
    )
    p.add_argument("--max-rows", type=rows_arg, default=30,
                   help=f"rows in the table (default 30, at most {ROWS_LIMIT:,})")  # fmt: skip
    add_wide_argument(p, "range names")
    p.add_argument("--json", action="store_true", help="one JSON object, for scripts")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    table = api.ranges(
        args.trace, instances=args.instances, group_by=args.group_by, use_cache=not args.no_cache
    )
    if args.json:
        print(render_frame_json(table.frame, **table.header))
    elif args.instances:
        print(table.frame.head(args.max_rows))
    else:
        print(render_ranges_text(table.frame, args.max_rows, name_width(args, RANGE_NAME_WIDTH)))
    api.warn(table)
    return 0
