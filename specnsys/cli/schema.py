"""``specnsys schema``: every table and column of the trace model, with its type and meaning.

No trace is needed: the tables are declared (:mod:`specnsys.model`), the same for every
export and every reader (see :mod:`specnsys.ingest.reference`).
"""

from __future__ import annotations

import argparse

from specnsys.ingest.reference import model_reference
from specnsys.render.schema_text import (
    render_schema_json,
    render_schema_markdown,
    render_schema_text,
)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("schema", help="the model's tables and columns: types and meanings")
    form = p.add_mutually_exclusive_group()
    form.add_argument("--json", action="store_true", help="one JSON object, for scripts")
    form.add_argument(
        "--markdown", action="store_true", help="Markdown tables (what docs/model.md holds)"
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    tables = model_reference()
    if args.json:
        print(render_schema_json(tables))
    elif args.markdown:
        print(render_schema_markdown(tables))
    else:
        print(render_schema_text(tables))
    return 0
