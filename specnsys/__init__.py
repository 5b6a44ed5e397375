"""specnsys: why speculative decoding is slower than promised, from an Nsight Systems trace.

In a notebook or a script::

    import specnsys

    trace = specnsys.open("spec.sqlite")        # the columnar model: trace.sql(...), trace.table(...)
    run = specnsys.analyze("spec.sqlite")       # every metric; run.to_dict() is `analyze --json`
    pair = specnsys.compare("base.sqlite", "spec.sqlite")   # predicted vs measured speedup
    ahead = specnsys.forecast("base.sqlite", "spec.sqlite", k=[2, 4])  # configurations not run
    breakdown = specnsys.phases("spec.sqlite")  # exclusive time per phase, a Polars frame
    fig = specnsys.figure("phases", "base.sqlite", "spec.sqlite").draw()

Each CLI command is one of these calls (:mod:`specnsys.api`); every result is a frozen
dataclass with ``to_dict()`` and carries the export's ``data_warnings``.

The analysis stack (DuckDB, Polars, Arrow) loads on first use, so that ``specnsys.annotate``,
imported into inference processes, costs only the ``nvtx`` import.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from specnsys.api import PUBLIC_FUNCTIONS
from specnsys.errors import BadInputError, SpecnsysError

if TYPE_CHECKING:
    # ``name as name``: an explicit re-export, so that a user's ``mypy --strict`` sees
    # ``specnsys.analyze`` and the others (``*PUBLIC_FUNCTIONS`` in __all__ it cannot expand)
    from specnsys.api import analyze as analyze
    from specnsys.api import analyze_steps as analyze_steps
    from specnsys.api import compare as compare
    from specnsys.api import export as export
    from specnsys.api import figure as figure
    from specnsys.api import kernels as kernels
    from specnsys.api import open as open  # noqa: A004
    from specnsys.api import phases as phases
    from specnsys.api import ranges as ranges
    from specnsys.api import report as report
    from specnsys.api import resolve_rules as resolve_rules
    from specnsys.api import timeline as timeline
    from specnsys.api import whatif as whatif
    from specnsys.ingest import MODEL_TABLES as MODEL_TABLES
    from specnsys.ingest import Trace as Trace
    from specnsys.runset.forecast import advise as advise
    from specnsys.runset.forecast import forecast as forecast

__version__ = "0.1.0"

__all__ = [
    "MODEL_TABLES",
    "BadInputError",
    "SpecnsysError",
    "Trace",
    "__version__",
    *PUBLIC_FUNCTIONS,
    "advise",
    "forecast",
]

#: Loaded on first use: the trace model's names from :mod:`specnsys.ingest`, the public
#: functions from :mod:`specnsys.api` (which imports nothing heavy until one is called).
_INGEST = ("MODEL_TABLES", "Trace")
#: Loaded on first use from :mod:`specnsys.runset.forecast`: they read traces and datasets.
_RUNSET = ("advise", "forecast")


def __getattr__(name: str) -> object:
    if name in _INGEST:
        from specnsys import ingest

        return getattr(ingest, name)
    if name in PUBLIC_FUNCTIONS:
        from specnsys import api

        return getattr(api, name)
    if name in _RUNSET:
        from specnsys.runset import forecast

        return getattr(forecast, name)
    raise AttributeError(f"module 'specnsys' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
