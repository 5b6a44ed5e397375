"""One attribution context per (trace, rules): what every analysis of the trace shares.

The phase index (the rules' change points, :mod:`.phase_map`) and the launch attribution of a
process (its runtime calls with their phase, :mod:`.launch`) depend only on the trace, the
rules and the process. The timeline, the lanes, the bandwidth and the mark lookups all need
them; without a context each built its own and dropped it. A context builds each once, on
first use, and releases what it registered on the connection when it closes::

    with AttributionContext(trace, rules) as context:
        breakdown = exclusive_phase_times(trace, rules=rules, context=context)
        lanes = timeline_lanes(trace, rules=rules, context=context)

Every function that takes a context also works without one (it then builds and drops its own,
as before). What a context holds lives until it closes: the caller that opens it decides how
long the index and the attributed calls stay in memory. One exception: an analysis lets go of
the lean launch attribution once its breakdown is done (:meth:`AttributionContext.
release_lean_runtime`; a later breakdown builds it again).
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from types import TracebackType
from typing import TYPE_CHECKING

import polars as pl

from specnsys.attribution.launch import attributed_runtime
from specnsys.attribution.phase_map import (
    PhaseIndex,
    create_phase_index,
    drop_phase_index,
)

if TYPE_CHECKING:
    from specnsys.attribution.rules import PhaseRules
    from specnsys.ingest import Trace

__all__ = ["AttributionContext", "attribution_context"]


class AttributionContext:
    """The phase index and the launch attribution of one trace under one set of rules, each
    computed once and reused by every analysis that receives the context."""

    def __init__(self, trace: Trace, rules: PhaseRules) -> None:
        self.trace = trace
        self.rules = rules
        self.phase_index_builds = 0
        """How many times the change points were built (at most once: a check for tests)."""
        self.phase_index_uses = 0
        """How many times an analysis asked for the index (each a build saved after the first)."""
        self._index: PhaseIndex | None = None
        self._sql_index: PhaseIndex | None = None
        self._runtime: dict[int | None, pl.DataFrame] = {}
        self._lean_runtime: dict[int | None, pl.DataFrame] = {}
        self.frames: dict[tuple[object, ...], pl.DataFrame] = {}
        """Frames the layers above computed for this trace and rules, by their own key: a
        second caller in the same run reads the first one's (the decode steps, which the
        analysis and ``collect`` both use)."""

    def phase_index(
        self, *, for_sql: bool = False, ranges: pl.DataFrame | None = None
    ) -> PhaseIndex:
        """The rules' phase index, built on first use (from *ranges*, :func:`phase_ranges`'s
        frame, when the caller has read it); *for_sql* registers the same change points on
        the connection for :func:`phase_lookup_sql` (once, dropped on close)."""
        self.phase_index_uses += 1
        if self._index is None:
            self._index = create_phase_index(self.trace.connection, self.rules, ranges=ranges)
            self.phase_index_builds += 1
        if not for_sql:
            return self._index
        if self._sql_index is None:
            points = self._index.change_points
            name = f"_specnsys_phase_map_{uuid.uuid4().hex}"
            self.trace.connection.register(
                name, points.with_columns(pl.col("phase").cast(pl.String)).to_arrow()
            )
            self._sql_index = PhaseIndex(name, points)
        return self._sql_index

    def runtime(self, pid: int | None, *, details: bool = True) -> pl.DataFrame:
        """:func:`attributed_runtime` of *pid* with details (what the lanes and the bandwidth
        read), computed once per process; ``details=False``: the lean frame the breakdown and
        per-phase kernel summaries join (the detailed one when it exists: a superset)."""
        if details or pid in self._runtime:
            if pid not in self._runtime:
                self._runtime[pid] = attributed_runtime(
                    self.trace, self.phase_index(), pid, details=True
                )
                self._lean_runtime.pop(pid, None)
            return self._runtime[pid]
        if pid not in self._lean_runtime:
            self._lean_runtime[pid] = attributed_runtime(self.trace, self.phase_index(), pid)
        return self._lean_runtime[pid]

    def lean_runtime_pids(self) -> set[int | None]:
        """The processes whose lean launch attribution the context holds."""
        return set(self._lean_runtime)

    def release_lean_runtime(self) -> None:
        """Let go of the lean launch attributions (:meth:`runtime` with ``details=False``).
        They serve the phase breakdown alone (the lanes, the bandwidth and the exports read
        the detailed frame), so an analysis drops them once its breakdown is done: held on,
        they sat beside the findings at the 20M-kernel analysis's peak (425 MiB). A later
        breakdown builds them again."""
        self._lean_runtime.clear()

    def check(self, rules: PhaseRules) -> AttributionContext:
        """This context, after making sure it was made for *rules* (a context of other rules
        would silently attribute under the wrong names)."""
        if rules != self.rules:
            raise ValueError(
                f"attribution context of rules {self.rules.name!r} used with {rules.name!r}"
            )
        return self

    def close(self) -> None:
        """Unregister what the context registered and let go of what it holds."""
        if self._sql_index is not None:
            drop_phase_index(self.trace.connection, self._sql_index)
        self._index = self._sql_index = None
        self._runtime.clear()
        self._lean_runtime.clear()

    def __enter__(self) -> AttributionContext:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


@contextlib.contextmanager
def attribution_context(
    trace: Trace, rules: PhaseRules, context: AttributionContext | None = None
) -> Iterator[AttributionContext]:
    """*context* (checked against *rules*) when the caller has one, else a context of its own
    for the block, closed at its end: the way a function taking an optional context uses it."""
    if context is not None:
        yield context.check(rules)
        return
    with AttributionContext(trace, rules) as own:
        yield own
