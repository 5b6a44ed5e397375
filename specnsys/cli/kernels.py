"""``specnsys kernels TRACE``: time per CUDA kernel, as ``nsys stats -r gpukernsum``."""

from __future__ import annotations

import argparse

from specnsys import api
from specnsys.cli.common import ROWS_LIMIT, add_wide_argument, name_width, rows_arg
from specnsys.render.projection_text import (
    KERNEL_NAME_WIDTH,
    render_frame_json,
    render_kernels_text,
)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("kernels", help="time per CUDA kernel (name, grid, block)")
    p.add_argument("trace", help="nsys .sqlite export (or .nsys-rep with nsys on PATH)")
    p.add_argument(
        "--by",
        choices=("short", "demangled"),
        help="one row per kernel name, launch configurations together: the short name "
        "(template instantiations merge) or the demangled name (default: per name, grid, "
        "block, as nsys gpukernsum)",
    )
    p.add_argument("--max-rows", type=rows_arg, default=30,
                   help=f"rows in the table (default 30, at most {ROWS_LIMIT:,})")  # fmt: skip
    add_wide_argument(p, "kernel names")
    p.add_argument("--json", action="store_true", help="one JSON object, for scripts")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    table = api.kernels(args.trace, by=args.by, use_cache=not args.no_cache)
    if args.json:
        print(render_frame_json(table.frame, **table.header))
    else:
        print(render_kernels_text(table.frame, args.max_rows, name_width(args, KERNEL_NAME_WIDTH)))
    api.warn(table)
    return 0
