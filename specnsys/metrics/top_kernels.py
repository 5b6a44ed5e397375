"""The largest kernels of each phase: which GPU work a phase's time is made of.

A phase's row in the breakdown says how long it took and how busy the GPU was; it does not say
*what* ran. This ranks, per phase, the kernels by their summed GPU time inside the analysis
window, with their launch count. Each kernel has the phase it was launched in: the sums per
(phase, kernel name) are made by the breakdown's own attribution pass
(:attr:`~specnsys.attribution.timeline.PhaseBreakdown.kernel_names`), so no op is attributed
twice. Durations are clipped to the window, so no kernel time outside it is counted.

The denominator of each ``share`` is the phase's summed kernel time (``kernel_ns``): the sum of
its kernels' durations, which exceeds the phase's GPU busy time when kernels overlap on
several streams. Only kernels count (not memcpy/memset). Each phase also says what kind of
work its kernel time is (``categories``: GEMM, attention, sampling, ... of
:mod:`specnsys.attribution.categories`, with the rules' own ``[[category]]`` entries first),
over the same denominator, so a phase name that says nothing still shows verify-like or
sample-like work.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypedDict

import polars as pl

from specnsys.attribution.categories import categorize_ops

if TYPE_CHECKING:
    from specnsys.attribution.timeline import KernelNameRow
    from specnsys.ingest import Trace
    from specnsys.metrics.events import Scope

__all__ = ["TOP_KERNELS", "PhaseKernels", "TopKernels", "top_kernels_by_phase"]


class CategoryTime(TypedDict):
    """A kernel category's summed time in a phase, and its share of the phase's kernel time."""

    category: str
    time_ns: int
    share: float


class KernelTime(TypedDict):
    """One of a phase's largest kernels: launches, summed time and share of ``kernel_ns``."""

    name: str
    count: int
    time_ns: int
    share: float


class PhaseKernels(TypedDict):
    """A phase's summed kernel time, launches, categories and largest kernels."""

    kernel_ns: int
    kernels: int
    categories: list[CategoryTime]
    top: list[KernelTime]


class TopKernels(TypedDict):
    """``Analysis.top_kernels``: per phase its largest kernels (:func:`top_kernels_by_phase`)."""

    per_phase: int
    share_of: str
    by_phase: dict[str, PhaseKernels]

TOP_KERNELS = 5
"""Kernels listed per phase: enough to name what dominates, few enough to read."""


_NAMES_SCHEMA = {"phase": pl.String, "name": pl.String, "count": pl.Int64, "ns": pl.Int64}


def top_kernels_by_phase(
    trace: Trace,
    scope: Scope,
    n: int = TOP_KERNELS,
    kernel_names: list[KernelNameRow] | None = None,
) -> tuple[TopKernels | None, str | None]:
    """``({"by_phase": {phase: {...}}, ...}, None)`` or ``(None, reason)``.

    Per phase: ``kernel_ns`` (summed clipped kernel time), ``kernels`` (launches),
    ``categories`` (kernel time per category, largest first) and ``top``: at most *n* rows
    ``{name, count, time_ns, share}``, largest time first (ties by name), with
    ``share = time_ns / kernel_ns``. *kernel_names* is the breakdown's own per-(phase, name)
    sum (:attr:`~specnsys.attribution.timeline.PhaseBreakdown.kernel_names`), made in the
    breakdown's attribution pass, so no GPU op is attributed a second time.
    """
    if not trace.summary.capabilities["gpu_activity"].available or scope.pid is None:
        return None, "no GPU kernels in this trace (or no process to attribute them to)"
    per_name = pl.DataFrame(kernel_names or [], schema=_NAMES_SCHEMA)
    if per_name.height == 0:
        return None, "no kernels ran in the analysis window"
    return _summary(trace, scope, per_name, n), None


def _summary(trace: Trace, scope: Scope, per_name: pl.DataFrame, n: int) -> TopKernels:
    per_category = (
        categorize_ops(
            trace.connection, per_name.with_columns(op_kind=pl.lit("kernel")),
            scope.rules.categories,
        )  # fmt: skip
        .group_by("phase", "category")
        .agg(pl.col("ns").sum().cast(pl.Int64))
        .sort(["phase", "ns", "category"], descending=[False, True, False])
    )
    totals = per_name.group_by("phase").agg(
        pl.col("ns").sum().alias("kernel_ns"), pl.col("count").sum().alias("kernels")
    )
    ranked = (
        per_name.join(totals, on="phase")
        .sort(["phase", "ns", "name"], descending=[False, True, False])
        .group_by("phase", maintain_order=True)
        .head(n)
    )
    by_phase: dict[str, PhaseKernels] = {}
    for row in totals.sort(["kernel_ns", "phase"], descending=[True, False]).iter_rows(
        named=True
    ):
        top = ranked.filter(pl.col("phase") == row["phase"])
        kinds = per_category.filter(pl.col("phase") == row["phase"])
        by_phase[row["phase"]] = {
            "kernel_ns": int(row["kernel_ns"]),
            "kernels": int(row["kernels"]),
            "categories": [
                {"category": c, "time_ns": int(ns), "share": ns / row["kernel_ns"]}
                for c, ns in zip(kinds["category"], kinds["ns"], strict=True)
            ],
            "top": [
                {
                    "name": r["name"],
                    "count": int(r["count"]),
                    "time_ns": int(r["ns"]),
                    "share": r["ns"] / row["kernel_ns"],
                }
                for r in top.iter_rows(named=True)
            ],
        }
    return {
        "per_phase": n,
        "share_of": "kernel_ns: the phase's summed kernel time in the window (overlaps count twice)",
        "by_phase": by_phase,
    }
