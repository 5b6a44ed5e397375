"""The JSON documents the renderers read, as TypedDicts: what each renderer may rely on.

The metrics layer builds these documents (``Analysis.to_dict()`` is ``analyze --json``,
``Comparison.to_dict()`` and ``ABComparison.to_dict()`` are ``compare --json``'s, ``whatif``'s,
``WhatCut.to_dict()``, ``TimelineLanes.to_dict()``); the renderers format them and derive
nothing. Each TypedDict below names the keys a renderer reads and their types: a document may
hold more (``--json`` prints every key), never fewer. :func:`analysis_doc` and its siblings are
the one place a plain dict becomes such a document: they check that every declared key is
there (tests/test_render_documents.py checks the value types on real documents).
"""

from __future__ import annotations

import typing
from collections.abc import Mapping
from typing import TYPE_CHECKING, Literal, NotRequired, TypedDict, TypeVar, cast

if TYPE_CHECKING:
    from typing_extensions import TypeIs

__all__ = [
    "ABDoc", "AnalysisDoc", "ComparisonDoc", "CutWhatIfDoc", "LanesDoc", "LeviathanDoc",
    "RanksDoc", "Spread", "WhatCutDoc", "ab_doc", "analysis_doc", "comparison_doc",
    "cut_whatif_doc", "document", "is_ab", "lanes_doc", "leviathan_doc", "required_keys",
    "whatcut_doc",
]  # fmt: skip


class PhaseRow(TypedDict):
    """One phase of ``analyze --json``'s ``phases``."""

    wall_ns: int
    share: float
    gpu_busy_ns: int | None
    kernels: int | None
    cpu_inclusive_ns: int
    ranges: int
    accelerable: bool


class NonAccelerableRow(TypedDict):
    phase: str
    wall_ns: int
    share: float


class Acceptance(TypedDict):
    """``acceptance``: per-position survival and the accepted-per-step histogram."""

    alpha: float
    by_position: list[float]
    mean_accepted: float
    k: int
    tokens_per_step: float
    expected_tokens_per_step: float
    sequence_steps: int
    accepted_histogram: list[int]
    k_values: list[int]


class Spread(TypedDict):
    """A distribution: count, mean, min, p50/p90/p99 and max (None without values)."""

    count: int
    mean: float | None
    min: float | None
    p50: float | None
    p90: float | None
    p99: float | None
    max: float | None


class Latency(TypedDict):
    ttft_ns: Spread
    tpot_ns: Spread
    latency_ns: Spread


class StepDistributions(TypedDict):
    steps: int
    step_ns: Spread
    ns_per_token: Spread | None
    phases: dict[str, Spread]
    of: str


class BandwidthRow(TypedDict, total=False):
    """One phase of ``bandwidth``: GPU-metrics samples (``mean_pct``, ...) or bytes moved."""

    mean_pct: float
    fraction_above_threshold: float | None
    bytes: int
    gpu_busy_ns: int | None
    bytes_per_s: float | None
    fraction_of_peak: float | None


class Bandwidth(TypedDict):
    source: str
    threshold_pct: NotRequired[float]
    by_phase: dict[str, BandwidthRow]


class PhasePeak(TypedDict):
    peak_bytes: int
    ranges: int


class DeviceMemory(TypedDict):
    source: str
    by_phase: dict[str, PhasePeak]


class InlineWhatIf(TypedDict):
    """``analyze --json``'s ``whatif``: Leviathan at the run's own alpha, k and c."""

    alpha: float
    c: float
    k: int
    expected_speedup: float | None
    best_k: int
    best_speedup: float
    speculation_pays: bool


class GpuTime(TypedDict):
    busy_ns: int
    idle_ns: int
    busy_share: float
    idle_share: float


class CategoryShare(TypedDict):
    category: str
    share: float


class KernelTime(TypedDict):
    name: str
    time_ns: int
    share: float
    count: int


class PhaseKernels(TypedDict):
    kernels: int
    kernel_ns: int
    categories: NotRequired[list[CategoryShare]]
    top: list[KernelTime]


class TopKernels(TypedDict):
    by_phase: dict[str, PhaseKernels]


class Finding(TypedDict):
    kind: str
    phase: str
    text: str
    time_ns: int
    share_of_phase: float | None
    speedup_if_removed: float | None


class Findings(TypedDict):
    findings: list[Finding]


class FunctionCalls(TypedDict):
    name: str
    calls: int
    ns: int


class OsRuntime(TypedDict):
    pid: int
    calls: int
    functions: int
    threads: int
    ns: int
    of: str
    top: list[FunctionCalls]


class Nesting(TypedDict):
    reassigned: NotRequired[dict[str, int]]


class ProfilerOverhead(TypedDict):
    runs: int
    unprofiled_per_token_ns: float
    unprofiled_min_ns: float | None
    unprofiled_max_ns: float | None
    profiled_per_token_ns: float | None
    overhead: float | None


class RankPhase(TypedDict):
    wall_ns: int
    share: float
    ranges: int
    nccl_ns: int | None


class RankRow(TypedDict):
    """One process of ``ranks``."""

    rank: int
    pid: int
    process: str | None
    device: int | None
    window_ns: int
    gpu_union_ns: int | None
    nccl_ns: int | None
    nccl_kernels: int | None
    steps: int
    step_phase: str
    median_lag_ns: float | None
    phases: dict[str, RankPhase]


class Straggler(TypedDict):
    rank: int
    pid: int
    process: str | None
    basis: str
    lag_share: float | None
    stands_out: bool
    step_phase: str | None
    median_lag_ns: float
    max_lag_ns: int
    matched_steps: int
    window_end_lag_ns: int


class RanksDoc(TypedDict):
    """``ranks``: every process of a multi-process run (:func:`specnsys.metrics.ranks.
    ranks_dict`)."""

    processes: int
    order: str
    window_ns: int
    window_of: str
    nccl_of: str
    straggler: Straggler | None
    notes: list[str]
    ranks: list[RankRow]


class AnalysisDoc(TypedDict):
    """``analyze --json``: :meth:`specnsys.metrics.Analysis.to_dict`."""

    path: str | None
    mode: str
    pid: int | None
    rules: str
    window_ns: int
    window_source: str | None
    window_rule: str
    window_dropped: Mapping[str, object] | None
    tokens: int | None
    tokens_source: str | None
    steps: int
    requests: int
    k: int | None
    phases: dict[str, PhaseRow]
    p: float | None
    accelerable_phases: list[str]
    accelerable_share: float
    non_accelerable: list[NonAccelerableRow]
    per_token_ns: float | None
    sampler_share: float
    amdahl_ceiling: float | None
    acceptance: Acceptance | None
    draft_cost_ratio: float | None
    draft_forwards_per_step: float | None
    draft_forwards_source: str | None
    nesting: Nesting | None
    per_range_ns: dict[str, float | None]
    latency: Latency
    step_distributions: StepDistributions | None
    bandwidth: Bandwidth | None
    device_memory: DeviceMemory | None
    whatif: InlineWhatIf | None
    gpu: bool
    gpu_time: GpuTime | None
    top_kernels: TopKernels | None
    findings: Findings | None
    os_runtime: OsRuntime | None
    not_available: dict[str, str]
    warnings: list[str]
    ranks: RanksDoc | None
    profiler_overhead: ProfilerOverhead | None
    concurrency: NotRequired[int | None]
    """Not in ``analyze --json`` today: a sweep orders its runs by it when a document has it."""


class Pair(TypedDict):
    """A value of the baseline run and of the speculative one."""

    baseline: float | None
    spec: float | None


class Unprofiled(TypedDict):
    measured_speedup: float | None
    baseline_per_token_ns: float | None
    spec_per_token_ns: float | None
    runs: dict[str, int]
    profiled_measured_speedup: float | None


class ComparisonPhase(TypedDict):
    accelerable: bool
    baseline_share: float
    spec_share: float
    baseline_ns_per_token: float | None
    spec_ns_per_token: float | None
    delta_ns_per_token: float | None
    gap_contribution: float | None


class ByK(TypedDict):
    k: int
    tau: float
    speedup: float
    e2e_speedup: float | None


class LeviathanDoc(TypedDict):
    """Leviathan's what-if (``whatif --json``; a comparison's ``leviathan``)."""

    alpha: float
    c: float
    k: int | None
    p: float | None
    tau: float | None
    expected_speedup: float | None
    e2e_speedup: float | None
    best_k: int
    best_k_at_search_limit: bool
    best_speedup: float
    best_e2e_speedup: float | None
    speculation_pays: bool
    amdahl_ceiling: float | None
    by_k: list[ByK]


class MemoryComparison(TypedDict):
    verify_peak_bytes: int
    baseline_phase: str
    baseline_peak_bytes: int


class ComparisonDoc(TypedDict):
    """``compare --json`` of a baseline and a speculative run: :meth:`specnsys.metrics.
    Comparison.to_dict`."""

    baseline: str | None
    spec: str | None
    k: int | None
    p: float | None
    r: float | None
    predicted_speedup: float | None
    measured_speedup: float | None
    gap: float | None
    tolerance: float
    prediction_holds: bool | None
    amdahl_ceiling: float | None
    tokens: dict[str, int | None]
    tokens_source: dict[str, str | None]
    assumptions: list[str]
    window_rule: dict[str, str]
    non_accelerable_ns_per_token: Pair
    phases: dict[str, ComparisonPhase]
    moved_phase: str | None
    draft_cost_ratio: float | None
    verify_to_forward_ratio: float | None
    verify_ratio_warning: bool
    unprofiled: Unprofiled | None
    leviathan: LeviathanDoc | None
    device_memory: MemoryComparison | None
    not_available: dict[str, str]
    warnings: list[str]


class Change(TypedDict):
    """A value in run A, in run B, and B - A (absolute and in per cent of A)."""

    a: int
    b: int
    delta_ns: int
    delta_pct: float | None


class ABPhase(TypedDict):
    a_wall_ns: int
    a_share: float
    b_wall_ns: int
    b_share: float
    delta_ns: int
    delta_pct: float | None
    gpu_busy_delta_ns: int | None


class Moved(TypedDict):
    phase: str
    delta_ns: int
    delta_pct: float | None


class ABDoc(TypedDict):
    """``compare --json`` of an A/B pair (generic runs, or runs of one mode): :meth:`specnsys.
    metrics.ab_compare.ABComparison.to_dict`."""

    kind: Literal["ab"]
    a: str | None
    b: str | None
    modes: dict[str, str]
    window_ns: Change
    gpu_busy_ns: Change | None
    phases: dict[str, ABPhase]
    move_threshold: float
    moved: list[Moved]
    not_available: dict[str, str]
    warnings: list[str]


class Candidate(TypedDict):
    """One phase of what to cut first (:class:`specnsys.metrics.whatcut.CutCandidate`)."""

    phase: str
    wall_ns: int
    share: float
    p_after: float | None
    ceiling_after: float | None
    ceiling_gain: float | None
    combined_ceiling: float | None
    speedup_if_removed: float | None


class WhatCutDoc(TypedDict):
    """What to cut first: :meth:`specnsys.metrics.whatcut.WhatCut.to_dict`."""

    mode: str | None
    accelerable: list[str]
    p: float | None
    ceiling: float | None
    non_accelerable_share: float | None
    candidates: list[Candidate]
    not_available: str | None


class CutWhatIfDoc(TypedDict):
    """``whatif --json`` of a generic run: each phase's cut (:func:`specnsys.metrics.whatcut.
    generic_whatif`); a row's ``speedup_if_Npct_cut`` keys follow ``fractions``."""

    kind: Literal["cut"]
    path: str | None
    window_ns: int
    fractions: list[float]
    cuts: list[dict[str, float | int | str | None]]
    not_available: dict[str, str]


class Span(TypedDict):
    """A lane's interval, ns on the session clock."""

    start_ns: int
    end_ns: int
    phase: NotRequired[str | None]


class CpuRange(Span):
    level: int


class ApiCall(Span):
    name: str | None


class GpuOp(Span):
    lane: str
    name: str | None


class GpuGap(TypedDict):
    start_ns: int
    end_ns: int
    cpu_phase: str | None


class LanesDoc(TypedDict):
    """One decode step or window as CPU / CUDA API / GPU lanes: :meth:`specnsys.attribution.
    lanes.TimelineLanes.to_dict`."""

    label: str
    pid: int
    driver_tid: int | None
    window_ns: int
    cpu: list[CpuRange]
    api: list[ApiCall]
    gpu: list[GpuOp]
    gpu_gaps: list[GpuGap]
    cpu_exclusive_ns: dict[str, int]
    gpu_busy_ns: int | None
    not_available: dict[str, str]


D = TypeVar("D")


_REQUIRED: dict[object, frozenset[str]] = {}


def required_keys(shape: object) -> frozenset[str]:
    """The keys the TypedDict *shape* requires. Not its ``__required_keys__``: under postponed
    annotations (this module's) Python 3.11 cannot see ``NotRequired`` and counts every key."""
    if shape not in _REQUIRED:
        hints = typing.get_type_hints(shape, include_extras=True)
        _REQUIRED[shape] = frozenset(
            k for k, t in hints.items() if typing.get_origin(t) is not NotRequired
        )
    return _REQUIRED[shape]


def document(doc: Mapping[str, object], shape: type[D], what: str) -> D:
    """*doc* as the document *shape* describes, once every key *shape* requires is there."""
    missing = sorted(required_keys(shape) - doc.keys())
    if missing:
        raise TypeError(f"not {what}: no {', '.join(missing)}")
    return cast(D, doc)


def analysis_doc(doc: Mapping[str, object]) -> AnalysisDoc:
    return document(doc, AnalysisDoc, "an analyze --json document")


def comparison_doc(doc: Mapping[str, object]) -> ComparisonDoc:
    return document(doc, ComparisonDoc, "a compare --json document")


def ab_doc(doc: Mapping[str, object]) -> ABDoc:
    return document(doc, ABDoc, "an A/B compare --json document")


def is_ab(doc: ComparisonDoc | ABDoc) -> TypeIs[ABDoc]:
    """Whether a ``compare --json`` document is an A/B diff (``kind: ab``)."""
    return doc.get("kind") == "ab"


def leviathan_doc(doc: Mapping[str, object]) -> LeviathanDoc:
    return document(doc, LeviathanDoc, "a whatif --json document")


def cut_whatif_doc(doc: Mapping[str, object]) -> CutWhatIfDoc:
    return document(doc, CutWhatIfDoc, "a generic run's whatif --json document")


def whatcut_doc(doc: Mapping[str, object]) -> WhatCutDoc:
    return document(doc, WhatCutDoc, "a what-to-cut document")


def lanes_doc(doc: Mapping[str, object]) -> LanesDoc:
    return document(doc, LanesDoc, "a timeline lanes document")
