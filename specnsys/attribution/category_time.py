"""GPU op time per phase and kernel category of one analysis's process and window.

Kept apart from :mod:`.categories` (the table and the matching), which the rules loader
imports: this one needs the launch attribution, which needs the rules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from specnsys.attribution.categories import categorize_ops, category_table
from specnsys.attribution.context import attribution_context
from specnsys.attribution.launch import gpu_ops_with_phase

if TYPE_CHECKING:
    import polars as pl

    from specnsys.attribution.context import AttributionContext
    from specnsys.attribution.rules import PhaseRules
    from specnsys.ingest import Trace

__all__ = ["phase_categories"]


def phase_categories(
    trace: Trace,
    rules: PhaseRules,
    pid: int | None,
    window: tuple[int, int],
    context: AttributionContext | None = None,
) -> pl.DataFrame:
    """:func:`category_table` of the GPU ops of *pid* in *window*, each on the phase it was
    launched in under *rules* (the attribution *context*'s index and calls when given)."""
    with attribution_context(trace, rules, context) as shared:
        ops = gpu_ops_with_phase(
            trace, rules=rules, pid=pid, window=window,
            index=shared.phase_index(), runtime=shared.runtime(pid),
        )  # fmt: skip
    return category_table(categorize_ops(trace.connection, ops, rules.categories), window)
