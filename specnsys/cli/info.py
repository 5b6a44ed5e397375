"""``specnsys info TRACE``: versions, tables, row counts, time span, processes, capabilities."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from specnsys.ingest import open_trace
from specnsys.render.info_text import render_info_json, render_info_text

if TYPE_CHECKING:
    from specnsys.ingest import Trace


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("info", help="what an export contains and what it can support")
    p.add_argument("trace", help="nsys .sqlite export (or .nsys-rep with nsys on PATH)")
    p.add_argument("--json", action="store_true", help="one JSON object, for scripts")
    p.set_defaults(run=run)


def cache_state(trace: Trace) -> str:
    if trace.cache_folder is None:
        return "not used (analyzed from memory)"
    verb = "reused" if trace.from_cache else "written"
    return f"{verb}: {trace.cache_folder}"


def run(args: argparse.Namespace) -> int:
    with open_trace(args.trace, use_cache=not args.no_cache) as trace:
        render = render_info_json if args.json else render_info_text
        print(render(trace.summary, path=str(args.trace), cache=cache_state(trace)))
    return 0
