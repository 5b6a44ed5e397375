"""``specnsys plot KIND TRACE... -o FILE``: one figure as PNG or SVG (issue 6)."""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from specnsys import api
from specnsys.cli.common import (
    add_rules_argument,
    add_same_output_argument,
    add_tokens_argument,
    add_window_argument,
    check_output,
)
from specnsys.errors import UsageError
from specnsys.render import registry
from specnsys.render.registry import figure_kinds

if TYPE_CHECKING:
    from specnsys.render.renderer import FigureSource

#: The kinds that also draw a dataset written by ``specnsys collect`` (given as the one input).
DATASET_KINDS = figure_kinds("dataset")


def _description() -> str:
    """Each KIND and what it draws, from its registry entry."""
    parts = [
        f"{f.kind}{f' ({f.applies})' if f.applies else ''}: {f.help}" for f in registry.FIGURES
    ]
    return "; ".join(parts) + "."


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "plot",
        help=f"draw a figure ({', '.join(figure_kinds())}) as PNG or SVG",
        description=_description(),
    )
    p.add_argument("kind", choices=figure_kinds(), help="which figure")
    p.add_argument("traces", nargs="+", metavar="TRACE",
                   help=f"nsys .sqlite exports ({', '.join(DATASET_KINDS)}: or one collect "
                   "dataset)")  # fmt: skip
    p.add_argument("-o", "--output", required=True, metavar="FILE",
                   help="output file; .png or .svg picks the format")  # fmt: skip
    p.add_argument("--data", metavar="FILE.json",
                   help="also write the figure's data (titles, bar lengths, points) as JSON")  # fmt: skip
    p.add_argument("--step", type=int, metavar="N",
                   help="timeline: decode step to draw, from 0 (default: the median-length step)")  # fmt: skip
    add_window_argument(p)
    add_rules_argument(p)
    p.add_argument("--pid", type=int, help="process to analyze (default: the annotated one)")
    add_tokens_argument(p, order="in the order of the traces",
                        applies_to=f"{', '.join(api.TOKEN_FIGURES)}: ")  # fmt: skip
    add_same_output_argument(p, applies_to=f"{', '.join(api.SAME_OUTPUT_FIGURES)}: ")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from specnsys.small_files import write_files

    out = check_output(args.output, registry.FIGURE_SUFFIXES, args.traces)
    data_out = check_output(args.data, ("json",), args.traces) if args.data else None
    if data_out is not None and os.path.realpath(data_out) == os.path.realpath(out):
        raise UsageError(f"{out}: -o and --data name the same file")
    sources = registry.figure_renderer(args.kind).sources
    if (args.step is not None or args.window is not None) and "lanes" not in sources:
        raise UsageError("--step and --window only apply to the timeline")
    if args.step is not None and args.window is not None:
        raise UsageError("give --step or --window, not both")
    fig = _forecast_figure(args) if "forecast" in sources else _dataset_figure(args)
    if fig is None:
        fig = api.figure(args.kind, *args.traces, rules=args.rules, pid=args.pid, step=args.step,
                         window_ms=args.window, tokens=args.tokens, same_output=args.same_output,
                         use_cache=not args.no_cache)  # fmt: skip
    # Everything is rendered before anything is written, and written all or none.
    contents = {out: fig.image(out)}
    if data_out is not None:
        contents[data_out] = (json.dumps(fig.data, indent=2) + "\n").encode()
    write_files(contents)
    print(f"{out}: {fig.title}")
    api.warn(fig)
    return 0


def _forecast_figure(args: argparse.Namespace) -> api.Figure:
    """The forecast of the traces or dataset given (its own workload and configurations):
    predicted speedup against k per concurrency, measured points overlaid."""
    from specnsys.forecasting.results import Forecast
    from specnsys.render import plots
    from specnsys.results import to_dict
    from specnsys.runset.forecast import forecast

    given = [n for n, v in (("--tokens", args.tokens), ("--same-output", args.same_output),
                            ("--pid", args.pid)) if v]  # fmt: skip
    if given:
        raise UsageError(f"{', '.join(given)}: not for the forecast figure")
    result = forecast(*args.traces, rules=args.rules, use_cache=not args.no_cache)
    assert isinstance(result, Forecast)
    data = _from_doc("forecast", "forecast", to_dict(result))
    plots.require_drawable(data)
    return api.Figure("forecast", data, result.data_warnings)


def _dataset_figure(args: argparse.Namespace) -> api.Figure | None:
    """The figure of a collected dataset (``sweep``, ``verify-cost``), or None when the input
    is traces (``sweep`` then draws them as before)."""
    from pathlib import Path

    from specnsys.render import plots
    from specnsys.runset.dataset import is_dataset

    dataset = len(args.traces) == 1 and is_dataset(Path(args.traces[0]))
    if args.kind not in DATASET_KINDS:
        if any(is_dataset(Path(t)) for t in args.traces):
            kinds = ", ".join((*DATASET_KINDS, *figure_kinds("forecast")))
            raise UsageError(f"{args.kind} draws traces; a dataset draws {kinds}")
        return None
    if not dataset:
        if args.kind == "verify-cost":
            raise UsageError("verify-cost draws one dataset written by specnsys collect")
        return None
    given = [n for n, v in (("--tokens", args.tokens), ("--same-output", args.same_output),
                            ("--pid", args.pid), ("--rules", args.rules)) if v]  # fmt: skip
    if given:
        raise UsageError(f"{', '.join(given)}: the dataset was analysed at collect time")
    from specnsys.runset.sweep import sweep, verify_cost_points

    if args.kind == "sweep":
        doc = sweep(args.traces[0]).to_dict()
    else:
        doc = verify_cost_points(args.traces[0])
    data = _from_doc(args.kind, "dataset", doc)
    plots.require_drawable(data)
    return api.Figure(str(data["kind"]), data)


def _from_doc(kind: str, source: FigureSource, doc: Mapping[str, object]) -> dict[str, object]:
    """The figure data of the plot KIND *kind* drawn from the result document *doc*."""
    entry = registry.figure_renderer(kind, source)
    assert entry.from_doc is not None, f"{kind} is drawn from a {source}"
    return dict(entry.from_doc()(doc))
