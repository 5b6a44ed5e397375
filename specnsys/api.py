"""The application layer: each command's pipeline, written once, for the CLI and for notebooks.

Every function here runs ``open the trace -> data-quality checks (beside the work) -> analyze``
and returns a typed result: a frozen dataclass with ``to_dict()`` (the command's ``--json``
document) and, where the data is a table, a Polars frame. Each result carries the data
warnings about the export(s) it read in ``data_warnings`` (one sentence per kind of malformed
row the analysis skipped or clipped, prefixed by the path), so every command says the same
thing about the same export; the CLI commands are thin calls into these functions.

*rules* (a :class:`~specnsys.attribution.PhaseRules`, a built-in set's name such as ``"nvtx"``,
or a TOML path) is resolved once per call, before any trace is read, so a bad rules file fails
fast.

*tokens* gives the output tokens of a run (``--tokens N``), overriding what its trace holds
(``tokens_source`` becomes ``given``): one count for :func:`analyze`, one per trace, in the
order of the traces, for the commands that read several (None: none given). *same_output*
states that the runs produced the same output, so a comparison without token counts compares
whole windows (see :mod:`specnsys.metrics.comparison`).
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Protocol

from specnsys.errors import BadInputError, SpecnsysWarning, UsageError
from specnsys.render import registry
from specnsys.render.renderer import RenderOptions

if TYPE_CHECKING:
    import polars as pl
    from matplotlib.figure import Figure as MplFigure

    from specnsys.attribution import PhaseBreakdown, PhaseRules
    from specnsys.attribution.context import AttributionContext
    from specnsys.attribution.lanes import TimelineLanes
    from specnsys.forecasting.extract import TraceFit
    from specnsys.ingest import Trace
    from specnsys.metrics import Analysis, Comparison
    from specnsys.metrics.ab_compare import ABComparison
    from specnsys.metrics.ranks import Rank
    from specnsys.metrics.timeline_export import TimelineExport
    from specnsys.render.perfetto import TraceDocument
    from specnsys.render.runs import Run

#: What ``import specnsys`` exposes from here (besides the result classes below).
PUBLIC_FUNCTIONS = (
    "analyze",
    "analyze_steps",
    "compare",
    "export",
    "figure",
    "kernels",
    "open",
    "phases",
    "ranges",
    "report",
    "resolve_rules",
    "timeline",
    "whatif",
)

__all__ = [
    "Compared", "Export", "Figure", "Phases", "Report", "Table", "WhatIf", "warn",
    *PUBLIC_FUNCTIONS,
]  # fmt: skip


def open(path: str | Path, *, use_cache: bool = True) -> Trace:  # noqa: A001 - specnsys.open
    """The trace model of the export at *path* (``trace.sql(...)``, ``trace.table(name)``);
    close it, or use it in a ``with`` block."""
    from specnsys.ingest import open_trace

    return open_trace(path, use_cache=use_cache)


def resolve_rules(spec: PhaseRules | str | Path | None) -> PhaseRules | None:
    """*spec* resolved to :class:`PhaseRules` (None stays None: the specnsys convention, and
    an analysis that refuses a trace without specnsys phases)."""
    if spec is None:
        return None
    from specnsys.attribution import resolve_rules as resolve

    return resolve(spec)


class Warned(Protocol):
    """A result that carries the data warnings about the exports it read (every result of
    this module, and :class:`~specnsys.metrics.Analysis`)."""

    @property
    def data_warnings(self) -> Sequence[str]: ...


def warn(result: Warned) -> None:
    """Issue each of *result*'s data warnings as a :class:`SpecnsysWarning` (what the CLI
    prints as ``specnsys: warning: PATH: note`` after the result)."""
    for text in result.data_warnings:
        warnings.warn(text, SpecnsysWarning, stacklevel=2)


@contextlib.contextmanager
def _checked(
    path: str | Path, use_cache: bool, rules: PhaseRules | None = None, *, phased: bool = True
) -> Iterator[tuple[Trace, list[str], AttributionContext]]:
    """Open *path* and run the data-quality checks beside the caller's block; the list it
    yields holds the notes (``PATH: note``) once the block has ended without an error. The
    attribution context it yields is the one every analysis in the block shares (the phase
    index and the launch attribution built once), made for the rules in force: *rules*, or
    without them the default :func:`~specnsys.metrics.analysis.rules_in_force` picks for the
    trace (specnsys's vocabulary, else ``nvtx``, with a note that says so); its ``rules`` are
    what the block must analyze with. A command that reads no phases (*phased* False) gets
    no note."""
    from specnsys.attribution.context import AttributionContext
    from specnsys.attribution.launch import rules_for
    from specnsys.attribution.rule_match import unmatched_rules_note
    from specnsys.ingest import open_trace
    from specnsys.ingest.quality import data_warnings_beside
    from specnsys.metrics.analysis import rules_in_force
    from specnsys.vocabulary import DOMAIN, PHASES

    notes: list[str] = []
    with open_trace(path, use_cache=use_cache) as trace:
        chosen, note = rules_in_force(trace, rules)
        with (
            data_warnings_beside(trace) as found,
            AttributionContext(trace, rules_for(PHASES, DOMAIN, chosen)) as context,
        ):
            # explicit rules (a pack, a file) that map nothing say so: every phase would be empty
            unmatched = None if rules is None else unmatched_rules_note(trace, rules, str(path))
            yield trace, notes, context
    if note is not None and phased:
        notes.append(f"{path}: {note}")
    notes.extend(f"{path}: {text}" for text in found())
    if unmatched is not None:
        notes.append(unmatched)


def _analyze_open(
    trace: Trace,
    rules: PhaseRules | None,
    pid: int | None,
    context: AttributionContext,
    window: str | None = None,
) -> Analysis:
    from specnsys.metrics import analyze_trace

    return analyze_trace(trace, rules=rules, pid=pid, context=context, window=window)


def analyze(
    path: str | Path,
    *,
    rules: PhaseRules | str | Path | None = None,
    pid: int | None = None,
    tokens: int | None = None,
    use_cache: bool = True,
    window: str | None = None,
) -> Analysis:
    """Every metric of one trace (``specnsys analyze``): an
    :class:`~specnsys.metrics.Analysis` whose ``to_dict()`` is the ``analyze --json`` object;
    *pid* picks the process (default: the one with the most phase ranges); *tokens* gives its
    output tokens; *window* (``auto``, ``A:B``, ``steps:N-M``: :mod:`specnsys.attribution.
    window`) narrows the analysis window."""
    given = _given_tokens(None if tokens is None else [tokens], 1)[0]
    return _analyze_resolved(path, resolve_rules(rules), pid, use_cache, given, window)


def _analyze_resolved(
    path: str | Path,
    rules: PhaseRules | None,
    pid: int | None,
    use_cache: bool,
    tokens: int | None = None,
    window: str | None = None,
) -> Analysis:
    with _checked(path, use_cache, rules) as (trace, notes, context):
        analysis = _analyze_open(trace, rules, pid, context, window)
    return _with_control(_given(replace(analysis, data_warnings=tuple(notes)), tokens), path)


def _with_control(analysis: Analysis, path: str | Path) -> Analysis:
    """*analysis* with the profiler's overhead when unprofiled control runs of its command
    lie beside the trace (``OUT.control.json``, ``profile --control``)."""
    from specnsys.control_log import control_beside, read_control

    beside = control_beside(path)
    control = read_control(beside)
    return analysis if control is None else analysis.with_control(control, str(beside))


def _given_tokens(tokens: Sequence[int] | None, traces: int) -> list[int | None]:
    """One given token count (or None) per trace: *tokens* checked (one positive integer per
    trace, in trace order), or Nones when none are given."""
    if tokens is None:
        return [None] * traces
    counts = list(tokens)
    if len(counts) != traces:
        raise UsageError(
            f"--tokens: {len(counts)} value{'s' if len(counts) != 1 else ''} for {traces} "
            f"trace{'s' if traces != 1 else ''}; give one output-token count per trace, in "
            "the order of the traces"
        )
    for n in counts:
        if isinstance(n, bool) or not isinstance(n, int) or n <= 0:
            raise UsageError(f"--tokens: {n!r} is not a positive number of output tokens")
    return list(counts)


def _given(analysis: Analysis, tokens: int | None) -> Analysis:
    return analysis if tokens is None else analysis.with_tokens(tokens)


def analyze_steps(
    path: str | Path,
    *,
    rules: PhaseRules | str | Path | None = None,
    pid: int | None = None,
    use_cache: bool = True,
    window: str | None = None,
) -> tuple[Analysis, pl.DataFrame]:
    """:func:`analyze` and the run's decode steps (:func:`specnsys.metrics.steps.step_table`:
    duration, batch, proposed/accepted, draft/verify/forward/sample time per step), from one
    opening of the trace: what ``specnsys collect`` keeps per run."""
    from specnsys.metrics.analysis import analysis_steps

    mapping = resolve_rules(rules)
    with _checked(path, use_cache, mapping) as (trace, notes, context):
        analysis = _analyze_open(trace, mapping, pid, context, window)
        steps = analysis_steps(trace, analysis, context.rules, context)
    return replace(analysis, data_warnings=tuple(notes)), steps


def fit_trace(
    path: str | Path,
    *,
    rules: PhaseRules | str | Path | None = None,
    use_cache: bool = True,
) -> tuple[TraceFit, tuple[str, ...]]:
    """What ``specnsys forecast`` fits on from one trace (:func:`specnsys.forecasting.extract.
    trace_fit`: the run, its decode steps with their context, its prefills and requests), from
    one opening of the trace, and the trace's data warnings."""
    from specnsys.forecasting.extract import trace_fit

    mapping = resolve_rules(rules)
    with _checked(path, use_cache, mapping) as (trace, notes, context):
        analysis = _analyze_open(trace, mapping, None, context)
        fit = trace_fit(trace, analysis, context.rules, context)
    return fit, tuple(notes)


def _warnings_of(results: Sequence[Warned]) -> tuple[str, ...]:
    return tuple(text for r in results for text in r.data_warnings)


@dataclass(frozen=True)
class Compared:
    """Speculative runs against the nearest baseline before each (``specnsys compare``), or,
    for generic runs and runs of one mode, an A/B diff of each run from the first."""

    analyses: tuple[Analysis, ...]
    comparisons: tuple[Comparison | ABComparison, ...]

    @property
    def data_warnings(self) -> tuple[str, ...]:
        return _warnings_of(self.analyses)

    def to_dict(self) -> dict[str, object]:
        """The ``compare --json`` document: one comparison, or ``{"runs": [...]}``."""
        docs = [c.to_dict() for c in self.comparisons]
        return docs[0] if len(docs) == 1 else {"runs": docs}


def compare(
    *paths: str | Path,
    rules: PhaseRules | str | Path | None = None,
    tokens: Sequence[int] | None = None,
    same_output: bool = False,
    use_cache: bool = True,
    window: str | None = None,
) -> Compared:
    """Compare each speculative trace of *paths* with the nearest baseline before it:
    ``compare(base, spec)``, a k sweep ``compare(base, k2, k4, k6)``, or a sweep whose levels
    need their own baselines ``compare(b1, s1, b4, s4)``. Generic runs, or runs all of one
    mode, are diffed phase by phase from the first (:mod:`specnsys.metrics.ab_compare`).
    *tokens*: one output-token count per trace, in order; *same_output*: the runs produced
    the same output; *window*: each run's window rule (``--window``)."""
    from specnsys.metrics import compare_many

    if len(paths) < 2:
        raise BadInputError("compare needs a baseline trace and at least one speculative trace")
    mapping = resolve_rules(rules)
    given = _given_tokens(tokens, len(paths))
    analyses = tuple(
        _analyze_resolved(p, mapping, None, use_cache, n, window)
        for p, n in zip(paths, given, strict=True)
    )
    return Compared(analyses, tuple(_same_output(compare_many(list(analyses)), same_output)))


def _same_output(
    comparisons: list[Comparison | ABComparison], same_output: bool
) -> list[Comparison | ABComparison]:
    from specnsys.metrics.comparison import with_same_output

    return with_same_output(comparisons) if same_output else comparisons


PHASE_RANGES_HINT = (
    "the trace has no NVTX ranges, so no time can be put on a phase (all of it is "
    "unannotated); annotate the program's steps with specnsys.annotate (phase(), "
    "patch_module) or capture it with `specnsys profile --annotate FILE -- python ...`"
)
"""What ``phases`` adds when the trace has no NVTX range at all: what is missing and how."""


@dataclass(frozen=True)
class Phases:
    """The exclusive phase breakdown of one trace (``specnsys phases``)."""

    path: str
    breakdown: PhaseBreakdown
    not_available: dict[str, str]
    data_warnings: tuple[str, ...] = ()
    categories: pl.DataFrame | None = None
    """With ``by="category"``: GPU op time per ``phase`` and kernel ``category`` (``ops``,
    ``gpu_ns``; shares are of the summed GPU op time)."""
    ranks: tuple[Rank, ...] | None = None
    """With ``all_processes``: every process that launched GPU work or has phase ranges, in
    rank order (:mod:`specnsys.metrics.ranks`; one entry, the breakdown's, for a
    single-process trace)."""

    @property
    def frame(self) -> pl.DataFrame:
        """One row per phase: ``wall_ns`` (summing to the window), ``share``, GPU and CPU parts."""
        return self.breakdown.frame

    def to_dict(self) -> dict[str, Any]:
        """The ``phases --json`` document (with ``all_processes``: :meth:`ranks_dict`; with
        ``by="category"``: ``categories`` too)."""
        from specnsys.render.phases_text import categories_dict, phases_dict

        if self.ranks is not None:
            return self.ranks_dict()
        doc = phases_dict(self.breakdown, self.not_available)
        if self.categories is not None:
            doc["categories"] = categories_dict(self.categories)
        return doc

    def ranks_dict(self) -> dict[str, Any]:
        """``phases --all-processes --json``: :func:`specnsys.metrics.ranks.ranks_dict` with
        each rank's full phase rows (``phases --json``'s columns plus ``nccl_ns`` and
        ``nccl_kernels``) and ``not_available``."""
        from specnsys.metrics.ranks import ranks_dict
        from specnsys.render.phases_text import phases_dict

        ranks = list(self.ranks or ())
        doc = ranks_dict(ranks, "gpu" not in self.not_available)
        for rank, row in zip(ranks, doc["ranks"], strict=True):
            full = phases_dict(rank.breakdown, self.not_available)["phases"]
            for name, phase in full.items():  # type: ignore[attr-defined]
                nccl = row["phases"].get(name, {})
                phase["nccl_ns"] = nccl.get("nccl_ns", 0 if "gpu" not in self.not_available else None)
                phase["nccl_kernels"] = nccl.get(
                    "nccl_kernels", 0 if "gpu" not in self.not_available else None
                )
            row["phases"] = full
            row["rules"] = rank.breakdown.rules
            row["unclosed_ranges"] = rank.breakdown.unclosed_ranges
        return {**doc, "not_available": self.not_available}


def phases(
    path: str | Path,
    *,
    rules: PhaseRules | str | Path | None = None,
    pid: int | None = None,
    use_cache: bool = True,
    by: str = "phase",
    all_processes: bool = False,
    window: str | None = None,
) -> Phases:
    """Exclusive wall time per phase of one trace, summing to its window exactly; works on any
    annotated trace (or any trace under ``rules="nvtx"``), baseline or speculative or neither.
    ``by="category"`` also splits the GPU op time of the window by kernel category and phase
    (:mod:`specnsys.attribution.categories`). *all_processes*: every process that launched
    GPU work or has phase ranges, each over its own window, with its NCCL time per phase and
    the straggler (:mod:`specnsys.metrics.ranks`); the result's ``ranks``."""
    from specnsys.attribution.category_time import phase_categories
    from specnsys.attribution.timeline import NO_WINDOW, exclusive_phase_times

    if by not in ("phase", "category"):
        raise UsageError(f"phases are split by 'phase' or 'category', not {by!r}")
    if all_processes and pid is not None:
        raise UsageError("--all-processes shows every process; --pid shows one: give one of them")
    if all_processes and by != "phase":
        raise UsageError("--all-processes splits by phase; --by category shows one process")
    mapping = resolve_rules(rules)
    categories = None
    ranks: tuple[Rank, ...] | None = None
    with _checked(path, use_cache, mapping) as (trace, notes, context):
        breakdown = exclusive_phase_times(
            trace, pid=pid, rules=context.rules, context=context, window=window
        )
        caps = trace.summary.capabilities
        span = (breakdown.window_start_ns, breakdown.window_end_ns)
        if by == "category" and breakdown.window_ns > 0:
            categories = phase_categories(trace, context.rules, breakdown.pid, span, context)
        if all_processes and breakdown.window_ns > 0:
            ranks = _all_ranks(trace, context, breakdown)
    if breakdown.window_ns <= 0:
        who = f"process {pid} has" if pid is not None else "the trace has"
        raise BadInputError(f"{path}: nothing to attribute ({who} {NO_WINDOW})")
    not_available = {
        key: caps[cap].reason
        for key, cap in (("gpu", "gpu_activity"), ("cuda_api", "cuda_api"))
        if not caps[cap].available
    }
    if not caps["nvtx_ranges"].available:
        not_available["phase_ranges"] = PHASE_RANGES_HINT
    return Phases(str(path), breakdown, not_available, tuple(notes), categories, ranks)


def _all_ranks(
    trace: Trace, context: AttributionContext, breakdown: PhaseBreakdown
) -> tuple[Rank, ...]:
    """Every process's rank (:func:`specnsys.metrics.ranks.rank_breakdowns`), or the one
    process of *breakdown* as rank 0 when there is no other."""
    from specnsys.metrics.ranks import rank_breakdowns

    ranks = rank_breakdowns(trace, context.rules, context, known=breakdown)
    if ranks or breakdown.pid is None:
        return tuple(ranks)
    return tuple(rank_breakdowns(trace, context.rules, context, breakdown, [breakdown.pid]))


@dataclass(frozen=True)
class Table:
    """A per-name (or per-instance) table of one trace (``specnsys kernels`` / ``ranges``)."""

    path: str
    frame: pl.DataFrame
    per: str | None = None
    """``"name"`` or ``"instance"`` for ranges; None for kernels."""
    data_warnings: tuple[str, ...] = ()
    grouping: dict[str, str] | None = None
    """The grouping option asked for (``{"group_by": "name"}``, ``{"by": "short"}``); None:
    the default rows, and the document has no such key."""

    @property
    def header(self) -> dict[str, str]:
        """The ``--json`` document's keys before ``rows``."""
        header = {"trace": self.path}
        if self.per is not None:
            header["per"] = self.per
        return {**header, **(self.grouping or {})}

    def to_dict(self) -> dict[str, object]:
        """The ``--json`` document: ``trace``, ``per`` (ranges), the grouping asked, ``rows``."""
        return {**self.header, "rows": self.frame.to_dicts()}


def kernels(path: str | Path, *, by: str | None = None, use_cache: bool = True) -> Table:
    """Time per CUDA kernel (name, grid, block), as ``nsys stats -r gpukernsum``; *by*
    ``"short"`` or ``"demangled"``: one row per kernel name, launch configurations together."""
    from specnsys.attribution.kernel_summary import KERNEL_NAMES, kernel_summary

    if by is not None and by not in KERNEL_NAMES:
        raise UsageError(f"kernels --by takes {' or '.join(KERNEL_NAMES)}, not {by!r}")
    with _checked(path, use_cache, phased=False) as (trace, notes, _context):
        summary = kernel_summary(trace, by)
    grouping = None if by is None else {"by": by}
    return Table(str(path), summary, None, tuple(notes), grouping)


def ranges(
    path: str | Path,
    *,
    instances: bool = False,
    group_by: str | None = None,
    use_cache: bool = True,
) -> Table:
    """Every NVTX range's GPU work, as ``nsys stats -r nvtxgpuproj``: one row per range text,
    or per range instance with *instances*; *group_by* ``"name"`` aggregates the texts that
    differ only by per-call decoration (torch's ``, op_id = N``)."""
    from specnsys.attribution.projection import (
        GROUP_BY,
        nvtx_gpu_projection,
        nvtx_gpu_projection_summary,
    )

    if group_by is not None and group_by not in GROUP_BY:
        raise UsageError(f"ranges --group-by takes {' or '.join(GROUP_BY)}, not {group_by!r}")
    if group_by is not None and instances:
        raise UsageError(
            "ranges --group-by groups the per-name table; --instances has one row per range"
        )
    with _checked(path, use_cache, phased=False) as (trace, notes, _context):
        projection = nvtx_gpu_projection(trace)
    frame = projection if instances else nvtx_gpu_projection_summary(projection, group_by or "text")
    grouping = None if group_by is None else {"group_by": group_by}
    per = "instance" if instances else "name"
    return Table(str(path), frame, per, tuple(notes), grouping)


@dataclass(frozen=True)
class WhatIf:
    """Leviathan's expected speedup, the best k and the Amdahl-limited result (``whatif``)."""

    result: dict[str, object]
    sources: dict[str, str]
    """Input -> where its value came from (``measured in PATH``, ``given``)."""
    data_warnings: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, object]:
        return self.result


def whatif(
    *paths: str | Path,
    alpha: float | None = None,
    k: int | None = None,
    c: float | None = None,
    p: float | None = None,
    k_max: int | None = None,
    rules: PhaseRules | str | Path | None = None,
    use_cache: bool = True,
) -> WhatIf:
    """The what-if at the values measured in up to one baseline (p) and one speculative trace
    (alpha, k, c); the keyword arguments override or supply them."""
    from specnsys.metrics import compare_runs
    from specnsys.metrics import whatif as leviathan
    from specnsys.metrics.amdahl import DEFAULT_K_MAX

    if len(paths) > 2:
        raise UsageError("whatif takes at most two traces (a baseline and a speculative run)")
    mapping = resolve_rules(rules)
    analyses = [_analyze_resolved(t, mapping, None, use_cache) for t in paths]
    generic = [a for a in analyses if a.mode == "generic"]
    if generic:
        return _generic_whatif(analyses, generic[0], (alpha, k, c, p))
    by_mode: dict[str, Analysis] = {}
    for a in analyses:
        if a.mode in by_mode:
            raise UsageError(f"whatif takes one trace per mode; got two {a.mode} traces")
        by_mode[a.mode] = a
    measured: dict[str, float] = {}  # alpha, c, p
    k_at: int | None = None
    sources: dict[str, str] = {}
    base, spec = by_mode.get("baseline"), by_mode.get("spec")
    if base is not None and base.p is not None:
        measured["p"], sources["p"] = base.p, f"measured in {base.path}"
    if spec is not None:
        if spec.acceptance is not None:
            measured["alpha"], k_at = spec.acceptance["alpha"], spec.k
            sources["alpha"] = sources["k"] = f"measured in {spec.path}"
        ratio, ratio_from = spec.draft_cost_ratio, "draft forward / verify"
        if base is not None:
            pair = compare_runs(base, spec)
            if pair.draft_cost_ratio is not None:
                ratio, ratio_from = pair.draft_cost_ratio, "draft forward / baseline forward"
        if ratio is not None:
            measured["c"], sources["c"] = ratio, f"measured: {ratio_from}"
    for key, value in (("alpha", alpha), ("k", k), ("c", c), ("p", p)):
        if value is not None:
            sources[key] = "given"
            if key == "k":
                k_at = k
            else:
                measured[key] = value
    missing = [key for key in ("alpha", "c") if key not in measured]
    if missing:
        raise UsageError(
            f"whatif needs {' and '.join(missing)}: pass --{' and --'.join(missing)} or a "
            "speculative trace that measures them"
        )
    result = leviathan(
        measured["alpha"], k_at, measured["c"], measured.get("p"),
        k_max=k_max if k_max is not None else DEFAULT_K_MAX,
    )  # fmt: skip
    result["sources"] = sources
    return WhatIf(result, sources, _warnings_of(analyses))


def _generic_whatif(
    analyses: list[Analysis], generic: Analysis, flags: tuple[object, ...]
) -> WhatIf:
    """A generic run has no draft model: its what-if is the run's speedup if each phase got
    shorter (:func:`~specnsys.metrics.whatcut.generic_whatif`)."""
    from specnsys.metrics.whatcut import generic_whatif

    if len(analyses) > 1 or any(x is not None for x in flags):
        raise UsageError(
            f"{generic.path} is a generic run (no forward, draft or verify phase): whatif on it "
            "takes that trace alone and no --alpha/--k/--c/--p (it answers with phase cuts)"
        )
    result = generic_whatif(generic.to_dict())
    sources = {"cuts": f"measured in {generic.path}"}
    return WhatIf(result, sources, _warnings_of(analyses))


def timeline(
    path: str | Path,
    *,
    step: int | None = None,
    window_ms: tuple[float, float] | None = None,
    rules: PhaseRules | str | Path | None = None,
    pid: int | None = None,
    use_cache: bool = True,
) -> TimelineLanes:
    """One decode step (default: the median-length one) or the milliseconds *window_ms* of the
    analysis window as CPU / CUDA API / GPU lanes: what the timeline figure draws."""
    from specnsys.attribution.lanes import timeline_lanes

    mapping = resolve_rules(rules)
    with _checked(path, use_cache, mapping) as (trace, notes, context):
        lanes = timeline_lanes(
            trace, step=step, window_ms=window_ms, pid=pid, rules=context.rules, context=context
        )
    return replace(lanes, data_warnings=tuple(notes))


@dataclass(frozen=True)
class Figure:
    """One figure's data (titles, bar lengths, points) and the drawing of it (``plot``)."""

    kind: str
    data: dict[str, object]
    data_warnings: tuple[str, ...] = ()

    @property
    def title(self) -> str:
        return str(self.data["title"])

    def draw(self) -> MplFigure:
        """The figure as a matplotlib Figure (shown inline by a notebook)."""
        return registry.draw(self.data)

    def image(self, path: str | Path) -> bytes:
        """The figure as the PNG or SVG bytes that *path*'s suffix asks for (not written)."""
        return registry.figure_image(self.data, RenderOptions(Path(path), salt=self.kind))

    def to_dict(self) -> dict[str, object]:
        return self.data


def _runs(
    paths: Sequence[str | Path],
    rules: PhaseRules | None,
    pid: int | None,
    use_cache: bool,
    advance: Callable[[str], None],
    tokens: Sequence[int | None] | None = None,
    window: str | None = None,
) -> list[Run]:
    from specnsys.render.runs import Run, run_label

    runs = []
    for path, given in zip(paths, tokens or [None] * len(paths), strict=True):
        advance(f"analyze {Path(path).name}")
        analysis = _analyze_resolved(path, rules, pid, use_cache, given, window)
        runs.append(Run(run_label(path), Path(path), analysis))
    return runs


def figure(
    kind: str,
    *paths: str | Path,
    rules: PhaseRules | str | Path | None = None,
    pid: int | None = None,
    step: int | None = None,
    window_ms: tuple[float, float] | None = None,
    tokens: Sequence[int] | None = None,
    same_output: bool = False,
    use_cache: bool = True,
) -> Figure:
    """The figure *kind* of the traces *paths* (what ``specnsys plot`` draws); *tokens* (one
    per trace) and *same_output* apply to the figures that divide by output tokens (phases,
    amdahl, sweep).

    * phases: one bar per trace; * amdahl: the first baseline's p, with the operating point
      of the first baseline/spec pair when there is one; * acceptance: the first speculative
      trace; * sweep: each speculative trace against the nearest baseline before it (two
      traces may come in either order); * timeline: one trace, decode step *step* (or the
      milliseconds *window_ms* of its analysis window); * steps: each trace's per-phase
      step-time p50/p90/p99/max and its time per output token per step.
    """
    from specnsys.render import plots
    from specnsys.render.progress import progress

    entry = registry.figure_renderer(kind, "traces", "lanes")
    if not paths:
        raise UsageError(f"{kind} needs at least one trace")
    mapping = resolve_rules(rules)
    if tokens is not None and not entry.per_token:
        raise UsageError(f"--tokens only applies to {', '.join(TOKEN_FIGURES)} (not {kind})")
    if same_output and not entry.compares:
        raise UsageError(
            f"--same-output only applies to {' and '.join(SAME_OUTPUT_FIGURES)} (not {kind})"
        )
    given = _given_tokens(tokens, len(paths))
    if entry.from_runs is None:  # the timeline: drawn from one trace's lanes
        if len(paths) != 1:
            raise UsageError(f"{kind} draws one trace; give exactly one")
        # Lanes need phase ranges only, not a baseline/speculative run: any annotated trace
        # (or any trace under --rules nvtx) can be drawn.
        with progress(1, kind) as advance:
            advance(f"lanes of {Path(paths[0]).name}")
            lanes = timeline(paths[0], step=step, window_ms=window_ms, rules=mapping, pid=pid,
                             use_cache=use_cache)  # fmt: skip
        assert entry.from_doc is not None, f"{kind} is drawn from lanes"
        data = entry.from_doc()(lanes.to_dict())
        plots.require_drawable(data)
        return Figure(kind, dict(data), lanes.data_warnings)
    with progress(len(paths), kind) as advance:
        runs = _runs(paths, mapping, pid, use_cache, advance, given)
    data = entry.from_runs()(runs, RenderOptions(same_output=same_output))
    plots.require_drawable(data)  # a figure that cannot be drawn is an error, not a blank image
    return Figure(kind, dict(data), _warnings_of([r.analysis for r in runs]))


#: The figures that divide by output tokens (``--tokens``) and those that compare runs
#: (``--same-output``).
TOKEN_FIGURES = tuple(f.kind for f in registry.FIGURES if f.per_token)
SAME_OUTPUT_FIGURES = tuple(f.kind for f in registry.FIGURES if f.compares)


@dataclass(frozen=True)
class Report:
    """The self-contained HTML report (``specnsys report``)."""

    html: str
    data_warnings: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, object]:
        return {"html": self.html, "data_warnings": list(self.data_warnings)}


def report(
    path: str | Path,
    baseline: str | Path | None = None,
    *,
    rules: PhaseRules | str | Path | None = None,
    pid: int | None = None,
    step: int | None = None,
    window_ms: tuple[float, float] | None = None,
    tokens: Sequence[int] | None = None,
    same_output: bool = False,
    use_cache: bool = True,
    window: str | None = None,
) -> Report:
    """The HTML report of the trace at *path* (compared with *baseline* when given): the
    answer, the figures, what to cut first and the tables. *tokens*: one output-token count
    per trace, *path*'s first then *baseline*'s; *same_output*: the two runs produced the same
    output."""
    from specnsys.attribution.lanes import timeline_lanes
    from specnsys.metrics.ab_compare import ab_compare
    from specnsys.metrics.comparison import is_ab_pairing
    from specnsys.render.build import ReportContent
    from specnsys.render.documents import ABDoc, ComparisonDoc, LanesDoc, ab_doc, lanes_doc
    from specnsys.render.progress import progress
    from specnsys.render.runs import Run, pair_runs, run_label

    mapping = resolve_rules(rules)
    given = _given_tokens(tokens, 1 + (baseline is not None))
    if same_output and baseline is None:
        raise UsageError("--same-output compares two runs: give the baseline trace too")
    with progress(4 + (baseline is not None), "report") as advance:
        advance(f"analyze {Path(path).name}")
        with _checked(path, use_cache, mapping) as (trace, notes, context):
            analysis = _with_control(
                _given(_analyze_open(trace, mapping, pid, context, window), given[0]), path
            )
            try:
                lanes: LanesDoc | str = lanes_doc(timeline_lanes(
                    trace, step=step, window_ms=window_ms, pid=pid, rules=context.rules,
                    context=context,
                ).to_dict())  # fmt: skip
            except BadInputError as err:  # no phase range on any thread: no timeline to draw
                if step is not None or window_ms is not None:
                    raise  # the user asked for a step or a window: that is the error
                lanes = str(err).removeprefix(f"{trace.path}: ")
        primary = Run(run_label(path), Path(path), replace(analysis, data_warnings=tuple(notes)))
        runs = [primary]
        comparison: ComparisonDoc | ABDoc | None = None
        if baseline is not None:
            runs = [
                *_runs([baseline], mapping, pid, use_cache, advance, given[1:], window), primary
            ]
            notes += runs[0].analysis.data_warnings
            if is_ab_pairing([r.analysis for r in runs]):  # A = BASELINE, B = TRACE
                comparison = ab_doc(ab_compare(runs[0].analysis, runs[1].analysis).to_dict())
            elif {r.analysis.mode for r in runs} != {"baseline", "spec"}:
                modes = ", ".join(f"{r.label}: {r.analysis.mode}" for r in runs)
                raise BadInputError(
                    f"report TRACE BASELINE needs one speculative and one baseline trace ({modes})"
                )
            else:
                base_run, spec_run, comparison = pair_runs(runs, same_output=same_output)[0]
                runs = [base_run, spec_run]
        content = ReportContent(runs, comparison, lanes)
        page = registry.report_renderer("html").render(content, RenderOptions(progress=advance))
    assert isinstance(page, str), "the HTML report is text"
    return Report(page, tuple(notes))


#: The formats ``export`` writes (the registry's export renderers).
EXPORT_FORMATS = tuple(e.kind for e in registry.EXPORTS)
#: ``export``'s default --max-events: a file Perfetto UI opens in a browser tab.
MAX_EVENTS = 2_000_000


@dataclass(frozen=True)
class Export:
    """A timeline export of one trace (``specnsys export``): its rows, rendered on demand."""

    path: str
    data: TimelineExport
    format: str = "perfetto"
    data_warnings: tuple[str, ...] = ()

    @property
    def dropped(self) -> Mapping[str, object] | None:
        """What the ``max_events`` cut left out (None: nothing)."""
        return self.data.dropped

    def to_dict(self) -> TraceDocument:
        """The whole Chrome trace-event document (:mod:`specnsys.render.perfetto`)."""
        from specnsys.render.perfetto import trace_document

        return trace_document(self.data, self.path)

    def write(self, handle: IO[bytes], *, compress: bool = False) -> int:
        """Stream the document to the binary *handle* (gzip with *compress*) with the
        format's renderer; the number of events written."""
        renderer = registry.export_renderer(self.format)
        options = RenderOptions(compress=compress)
        if renderer.stream is None:
            raise UsageError(f"the {self.format} export cannot be streamed")
        return renderer.stream()(self, options, handle)


def export(
    path: str | Path,
    *,
    format: str = "perfetto",  # noqa: A002 - the command's --format
    rules: PhaseRules | str | Path | None = None,
    pid: int | None = None,
    window: str | None = None,
    max_events: int = MAX_EVENTS,
    use_cache: bool = True,
) -> Export:
    """The timeline of one trace as a Chrome trace-event document for Perfetto UI
    (``specnsys export --format perfetto``): the exclusive phase timeline, the driver thread's
    NVTX ranges, the GPU ops by stream coloured by launch phase, step markers and counters,
    over the analysis window (*window*: ``--window``). More than *max_events* events cut the
    window to a prefix that fits; ``dropped`` and a data warning say what was left out."""
    from specnsys.attribution.timeline import NO_WINDOW
    from specnsys.metrics.timeline_export import cut_to_events, timeline_export
    from specnsys.render.perfetto import metadata_events

    registry.export_renderer(format)  # an unknown format fails before the trace is read
    if isinstance(max_events, bool) or not isinstance(max_events, int) or max_events < 1:
        raise UsageError(f"max_events: {max_events!r} is not a positive number of events")
    mapping = resolve_rules(rules)
    with _checked(path, use_cache, mapping) as (trace, notes, context):
        data = timeline_export(trace, rules=context.rules, context=context, pid=pid, window=window)
        if data.breakdown.window_ns <= 0:
            who = f"process {pid} has" if pid is not None else "the trace has"
            raise BadInputError(f"{path}: nothing to export ({who} {NO_WINDOW})")
        names = len(metadata_events(data))
        budget = max_events - names
        if budget < 1:
            raise UsageError(
                f"--max-events {max_events:,} is fewer than the export's {names:,} track "
                "names alone"
            )
        data = cut_to_events(data, budget)
    if data.dropped is not None:
        d = data.dropped
        notes.append(
            f"{path}: --max-events {max_events:,}: the window has {d['events']:,} events; kept "
            f"the first {d['kept_ns'] / 1e6:.3f} ms of {d['window_ns'] / 1e6:.3f} ms "
            f"({d['kept_events']:,} events), dropped {d['slices_dropped']:,} slices and "
            f"{d['steps_dropped']:,} steps after it (phase totals are of the kept part)"
        )
    return Export(str(path), data, format, tuple(notes))
