"""The one registry of extra single-trace metrics (issue 31: a new metric touches three files).

``analyze`` computes its built-in metrics in :mod:`specnsys.metrics.analysis`, each a typed
field of :class:`~specnsys.metrics.analysis.Analysis`. A metric added later does not edit
that dataclass, its ``to_dict``, the text renderer or the dataset: it is one :class:`Metric`
entry of :data:`METRICS` (or :func:`register`-ed at run time), which says

* ``key``: its key at the top level of ``analyze --json`` (``Analysis.metrics[key]``);
* ``compute``: its payload (any JSON value) from a :class:`MetricContext`, or
  :class:`~specnsys.results.NotAvailable` with the reason, which lands in ``not_available``
  under ``key`` (the payload is then ``null``);
* ``text``: its line in ``analyze``'s text output (None: no line);
* ``columns``: optional scalar columns of ``collect``'s dataset headline.

The entries' keys and versions are part of the key of cached analyses, so registering a
metric or bumping its ``version`` computes the analysis again; with no entry the key is the
one it always was.

Layer: metrics. It imports nothing of the renderers; they read it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, TypedDict

from specnsys.results import JSONValue, NotAvailable

if TYPE_CHECKING:
    from specnsys.attribution.rules import PhaseRules
    from specnsys.attribution.timeline import PhaseBreakdown
    from specnsys.ingest import Trace
    from specnsys.metrics.events import Scope

__all__ = [
    "METRICS", "ColumnType", "Metric", "MetricContext", "PhaseRow", "column_values", "metric_keys",
    "register", "registered", "unregister",
]  # fmt: skip

ColumnType = Literal["int", "float", "str", "bool"]
"""The type of a dataset column (:mod:`specnsys.runset.dataset` maps it to Polars')."""


class PhaseRow(TypedDict):
    """One phase of ``Analysis.phases``: its exclusive wall time and share of the window, the
    GPU work attributed to it (None without GPU activity), the CPU time its ranges held,
    how many ranges it had and whether speculative decoding accelerates it (defined here, the
    lowest module that reads it, so a registered metric is typed without importing the
    analysis; :mod:`specnsys.metrics.analysis` exports it)."""

    wall_ns: int
    share: float
    gpu_busy_ns: int | None
    kernels: int | None
    cpu_inclusive_ns: int
    ranges: int
    accelerable: bool


@dataclass(frozen=True)
class MetricContext:
    """What a registered metric reads: the trace, the analysis's breakdown and scope (process,
    driver thread, window, rules: what every query of :mod:`specnsys.metrics.events` takes),
    the mode and the phase rows the analysis computed. The analysis's private state stays
    private: a metric sees only these, so the built-in parts can change under it."""

    trace: Trace
    breakdown: PhaseBreakdown
    scope: Scope
    rules: PhaseRules
    mode: str
    """``spec``, ``baseline`` or ``generic`` (:func:`~specnsys.metrics.analysis.detect_mode`)."""
    gpu: bool
    """Whether the trace has GPU activity."""
    phases: Mapping[str, PhaseRow]
    step_phase: str
    """The phase whose ranges are the decode steps (``decode``, ``verify`` or ``forward``)."""


@dataclass(frozen=True)
class Metric:
    """One extra metric of ``analyze`` (module docs)."""

    key: str
    compute: Callable[[MetricContext], JSONValue | NotAvailable]
    text: Callable[[JSONValue], str | None]
    """One line of ``analyze``'s text for an available payload (None: nothing to say)."""
    columns: Mapping[str, ColumnType] = field(default_factory=dict)
    """Scalar columns of ``collect``'s dataset headline, by name: a column named ``key`` holds
    the payload itself (a scalar payload); any other name holds the payload object's entry of
    that name. Names must not be those of the built-in headline columns."""
    version: int = 1
    """Bump it when the metric's definition changes: it is part of the cached analyses' key."""


#: The registered metrics, in the order ``analyze`` prints them. Adding a metric is one entry
#: here (its module holds ``compute`` and ``text``) and its test.
METRICS: tuple[Metric, ...] = ()


def registered() -> tuple[Metric, ...]:
    """The metrics registered now (read at each call: :func:`register` may have added some)."""
    return METRICS


def register(metric: Metric) -> None:
    """Add *metric* at run time (a plug-in, a test). Raises ValueError for a key already taken
    by another registered metric; the built-in keys are checked by ``Analysis.to_dict``."""
    global METRICS
    if not metric.key or metric.key in metric_keys():
        raise ValueError(f"a metric key must be new and not empty, got {metric.key!r}")
    METRICS = (*METRICS, metric)


def adopt(metrics: tuple[Metric, ...]) -> None:
    """Make *metrics* the registered ones: a ``collect`` worker (a fresh process) takes its
    parent's, run-time registrations included, so that every run of a dataset has them."""
    global METRICS
    METRICS = tuple(metrics)


def unregister(key: str) -> None:
    """Remove the metric registered under *key* (nothing when there is none)."""
    global METRICS
    METRICS = tuple(m for m in METRICS if m.key != key)


def metric_keys() -> tuple[str, ...]:
    """The registered metrics' keys."""
    return tuple(m.key for m in METRICS)


def column_values(metric: Metric, payload: JSONValue) -> dict[str, JSONValue]:
    """*metric*'s dataset columns for *payload* (null where the payload has no such value)."""
    out: dict[str, JSONValue] = {}
    for name in metric.columns:
        if name == metric.key:
            out[name] = None if isinstance(payload, (dict, list)) else payload
        else:
            out[name] = payload.get(name) if isinstance(payload, dict) else None
    return out
