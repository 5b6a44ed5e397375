"""``analyze_trace``: every single-trace metric of docs/design.md#metrics, in one ``Analysis``.

The exclusive phase breakdown (attribution layer) is the base: shares are shares of the
window and sum to 1. On top of it:

* mode: ``spec`` when ``draft``/``verify`` ranges exist, ``baseline`` when ``forward`` does,
  ``generic`` otherwise (any other annotated or ``--rules nvtx`` trace: its phases, GPU busy and
  idle time, bandwidth and top kernels are measured; the speculative-decoding numbers are
  null with the reason in ``not_available``);
* accelerable time: ``forward`` + ``draft`` + ``verify`` (a baseline has only the first, a
  speculative run the other two); ``p`` = accelerable / window, from a baseline;
* output tokens from whatever the trace holds (``tokens`` marks, else derived: see
  :mod:`specnsys.metrics.tokens`; ``tokens_source`` names the source), decode steps
  (``decode`` ranges), requests, per-token time;
* acceptance (``proposed``/``accepted`` marks), the draft cost ratio ``c`` and Leviathan's
  what-if at the measured alpha/k/c;
* TTFT/TPOT distributions, memory bandwidth and peak device memory per phase;
* GPU busy and idle time of the window, and the largest kernels of each phase.

What the trace cannot support is null in the numbers and explained in ``not_available``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Literal, TypedDict, overload

import polars as pl

from specnsys import __version__
from specnsys.attribution import builtin_rules, exclusive_phase_times
from specnsys.attribution.context import AttributionContext
from specnsys.attribution.launch import rules_for
from specnsys.attribution.rule_match import choose_pack
from specnsys.attribution.timeline import (
    NO_WINDOW,
    TIMELINE_VERSION,
    WINDOW_SOURCES,
    PhaseBreakdown,
    step_phase,
)
from specnsys.attribution.window import WindowDropped, WindowSpec, parse_window
from specnsys.errors import BadInputError
from specnsys.metrics import amdahl
from specnsys.metrics.acceptance import Acceptance, acceptance_stats
from specnsys.metrics.bandwidth import Bandwidth, memory_bandwidth
from specnsys.metrics.distributions import step_distributions
from specnsys.metrics.events import Scope, resolve
from specnsys.metrics.findings import findings_of
from specnsys.metrics.memory import DeviceMemory, device_memory
from specnsys.metrics.os_runtime import OsRuntime, os_runtime_calls
from specnsys.metrics.ranks import ranks_of_analysis
from specnsys.metrics.registry import MetricContext, PhaseRow, registered
from specnsys.metrics.requests import distribution, request_latencies
from specnsys.metrics.steps import STEP_COLUMNS, step_phase_times, step_table
from specnsys.metrics.structure import DraftForwards, draft_forwards, structural_warnings
from specnsys.metrics.tokens import GIVEN, NOTE_PREFIX, count_tokens
from specnsys.metrics.top_kernels import TopKernels, top_kernels_by_phase
from specnsys.results import JSONValue, NotAvailable
from specnsys.vocabulary import (
    ACCELERABLE,
    BASELINE_ACCELERABLE,
    DOMAIN,
    PHASES,
    REQUEST_PHASE,
    SAMPLER_PHASE,
    SPEC_ACCELERABLE,
)

if TYPE_CHECKING:
    from specnsys.attribution.nesting import NestingFacts
    from specnsys.attribution.rules import PhaseRules
    from specnsys.control_log import ControlSummary
    from specnsys.ingest import Trace
    from specnsys.ingest.summary import Capability

__all__ = [
    "ACCELERABLE", "GENERIC", "REPORTED", "Analysis", "AnalysisDocument", "GpuTime", "Latency", "NonAccelerable", "PhaseRow",
    "ProfilerOverhead", "analysis_steps", "analyze_trace", "detect_mode",
]

GENERIC = "generic"
"""Mode of a run that is neither a baseline (``forward``) nor speculative (``draft``/``verify``)."""

#: Why the speculative-decoding numbers are missing from a generic run.
_NOT_SPECULATIVE = (
    "this is a generic run (no forward, draft or verify phase; --rules maps an engine's "
    "names onto them)"
)

#: What a trace with neither NVTX ranges nor GPU work needs before anything can be analyzed.
_MISSING_EVERYTHING = (
    "annotate the program (specnsys.annotate, or `specnsys profile --annotate FILE`) and "
    "capture its CUDA work (nsys -t cuda,nvtx)"
)

#: Version of the metrics' definitions, part of the key of analyses kept in the trace cache:
#: bump it whenever a change here would give a different result.
# 2: tokens derived from acceptance marks / forward steps, tokens_source;
# 3: the generic mode, gpu_time and top_kernels; 4: ranks (every process of a multi-process
# run, specnsys.metrics.ranks); 5: kernel categories per phase; 7: os_runtime, window_source
# and windows of OS runtime calls or CPU samples alone; 8: one draft forward from the draft
# forwards a step ran (draft_forwards_per_step), nesting, structural warnings; 9: --window,
# step_distributions, findings; 10: draft_forwards_per_step's reason on runs without drafts
ANALYSIS_VERSION = 10


class NonAccelerable(TypedDict):
    """A row of :meth:`Analysis.non_accelerable`."""

    phase: str
    wall_ns: int
    share: float


class GpuTime(TypedDict):
    """GPU busy (the union of the process's GPU work in the window) and idle time."""

    busy_ns: int
    idle_ns: int
    busy_share: float
    idle_share: float
    shares_of: str


class Latency(TypedDict):
    """TTFT/TPOT/latency distributions (:func:`~specnsys.metrics.requests.distribution`) and
    the per-request rows (ns)."""

    ttft_ns: dict[str, float | int | None]
    tpot_ns: dict[str, float | int | None]
    latency_ns: dict[str, float | int | None]
    per_request: list[dict[str, int | float | None]]


class ProfilerOverhead(TypedDict):
    """The profiled per-token time against unprofiled control runs (:meth:`Analysis.
    with_control`)."""

    runs: int
    unprofiled_per_token_ns: float
    unprofiled_min_ns: float | None
    unprofiled_max_ns: float | None
    profiled_per_token_ns: float | None
    overhead: float | None
    of: str


class AnalysisDocument(TypedDict):
    """The ``analyze --json`` object, key by key in its order (:meth:`Analysis.to_dict`; the
    registered metrics' keys follow). The dataset's headline columns are its scalar keys
    (:data:`specnsys.runset.dataset.HEADLINE_TYPES`), so a key added here is a column there.
    A number the trace cannot support is null, with the reason under ``not_available``."""

    path: str | None
    mode: str
    pid: int | None
    rules: str
    window_start_ns: int
    window_end_ns: int
    window_ns: int
    window_source: str | None
    window_of: str | None
    window_rule: str
    window_dropped: WindowDropped | None
    tokens: int | None
    tokens_source: str | None
    steps: int
    requests: int
    k: int | None
    phases: dict[str, PhaseRow]
    shares_of: str
    p: float | None
    accelerable_ns: int
    accelerable_phases: list[str]
    accelerable_share: float
    non_accelerable: list[NonAccelerable]
    dominant_non_accelerable: str | None
    per_token_ns: float | None
    sampler_share: float
    amdahl_ceiling: float | None
    acceptance: Acceptance | None
    draft_cost_ratio: float | None
    draft_forwards_per_step: float | None
    draft_forwards_source: str | None
    nesting: NestingFacts | None
    per_range_ns: dict[str, float | None]
    latency: Latency
    step_distributions: dict[str, object] | None
    bandwidth: Bandwidth | None
    device_memory: DeviceMemory | None
    whatif: dict[str, object] | None
    gpu: bool
    gpu_time: GpuTime | None
    top_kernels: TopKernels | None
    findings: dict[str, object] | None
    os_runtime: OsRuntime | None
    not_available: dict[str, str]
    warnings: list[str]
    ranks: dict[str, object] | None
    profiler_overhead: ProfilerOverhead | None


#: The numbers and blocks :meth:`Analysis.value` answers, each null in ``to_dict()`` only
#: with its reason under ``not_available``: under its own key, or under the key named here
#: (a trace without GPU work says why once, under ``gpu_busy_ns``).
REPORTED: dict[str, str | None] = {
    "tokens": None,
    "per_token_ns": None,
    "p": None,
    "amdahl_ceiling": None,
    "acceptance": None,
    "draft_cost_ratio": None,
    "draft_forwards_per_step": None,
    "whatif": None,
    "step_distributions": None,
    "bandwidth": None,
    "device_memory": None,
    "gpu_time": "gpu_busy_ns",
    "top_kernels": "gpu_busy_ns",
    "findings": None,
    "os_runtime": None,
    "ranks": None,
}


@dataclass(frozen=True)
class Analysis:
    """The metrics of one trace; :meth:`to_dict` is the ``analyze --json`` object.

    Times are integer ns of the session clock; shares are fractions of ``window_ns``.
    """

    path: str | None
    mode: str
    pid: int | None
    window_start_ns: int
    window_end_ns: int
    rules: str
    phases: dict[str, PhaseRow]
    tokens: int | None
    tokens_source: str | None
    """Where ``tokens`` came from: a key of :data:`specnsys.metrics.tokens.SOURCES`."""
    steps: int
    requests: int
    accelerable_ns: int
    p: float | None
    per_token_ns: float | None
    sampler_share: float
    amdahl_ceiling: float | None
    acceptance: Acceptance | None
    k: int | None
    draft_cost_ratio: float | None
    per_range_ns: dict[str, float | None]
    latency: Latency
    bandwidth: Bandwidth | None
    device_memory: DeviceMemory | None
    whatif: dict[str, object] | None
    gpu: bool
    gpu_time: GpuTime | None = None
    top_kernels: TopKernels | None = None
    not_available: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    os_runtime: OsRuntime | None = None
    """The analysed process's OS runtime calls in the window, by function
    (:func:`specnsys.metrics.os_runtime.os_runtime_calls`); None with the reason in
    ``not_available["os_runtime"]``."""
    window_source: str | None = None
    """What set the window: a key of :data:`~specnsys.attribution.timeline.WINDOW_SOURCES`."""
    window_rule: str = "requests"
    """The ``--window`` rule (:mod:`specnsys.attribution.window`)."""
    window_dropped: WindowDropped | None = None
    """What the rule cut from the default window (before/after ns, steps, spans, why)."""
    draft_forwards_per_step: float | None = None
    """Draft forwards one speculative step ran (what one draft forward of ``c`` divides by);
    ``draft_forwards_source`` names where it came from
    (:data:`~specnsys.metrics.structure.DRAFT_FORWARD_SOURCES`)."""
    draft_forwards_source: str | None = None
    nesting: NestingFacts | None = None
    """The nesting facts of the driver thread (:func:`specnsys.attribution.nesting.
    nesting_facts`): ranges a role reassigned, draft leaves, structural errors."""
    findings: dict[str, object] | None = None
    """GPU idle per phase by cause and the expert-rule findings
    (:mod:`specnsys.metrics.findings`); None without GPU activity."""
    step_distributions: dict[str, object] | None = None
    """Per decode step: each phase's time and the time per output token, as count, mean,
    p50/p90/p99 and max (:mod:`specnsys.metrics.distributions`)."""
    profiler_overhead: ProfilerOverhead | None = None
    """The profiler's overhead per output token against unprofiled control runs of the same
    command (``profile --control``; :meth:`with_control`); None without them."""
    ranks: dict[str, object] | None = None
    """Every process that launched GPU work or has phase ranges, when there are several and
    no ``pid`` was given (:func:`specnsys.metrics.ranks.ranks_dict`); else None, and
    ``not_available["ranks"]`` says why."""
    metrics: dict[str, JSONValue] = field(default_factory=dict)
    """The registered metrics' payloads by key (:mod:`specnsys.metrics.registry`), each at
    the top level of :meth:`to_dict` (null with its reason in ``not_available`` when the trace
    cannot support it); empty when no metric is registered."""
    breakdown: PhaseBreakdown | None = field(default=None, compare=False, repr=False)
    data_warnings: tuple[str, ...] = field(default=(), compare=False)
    """What the export's data-quality checks found (``PATH: note``), filled in by
    :func:`specnsys.analyze`; not part of :meth:`to_dict` (the CLI prints them on stderr)."""

    @property
    def window_ns(self) -> int:
        return self.window_end_ns - self.window_start_ns

    @property
    def accelerable_share(self) -> float:
        return self.accelerable_ns / self.window_ns if self.window_ns > 0 else 0.0

    @overload
    def value(self, key: Literal["tokens"]) -> int | NotAvailable: ...
    @overload
    def value(
        self,
        key: Literal[
            "p", "per_token_ns", "amdahl_ceiling", "draft_cost_ratio", "draft_forwards_per_step"
        ],
    ) -> float | NotAvailable: ...
    @overload
    def value(self, key: Literal["acceptance"]) -> Acceptance | NotAvailable: ...
    @overload
    def value(self, key: Literal["gpu_time"]) -> GpuTime | NotAvailable: ...
    @overload
    def value(self, key: Literal["top_kernels"]) -> TopKernels | NotAvailable: ...
    @overload
    def value(self, key: Literal["bandwidth"]) -> Bandwidth | NotAvailable: ...
    @overload
    def value(self, key: Literal["device_memory"]) -> DeviceMemory | NotAvailable: ...
    @overload
    def value(self, key: Literal["os_runtime"]) -> OsRuntime | NotAvailable: ...
    @overload
    def value(
        self, key: Literal["whatif", "step_distributions", "findings", "ranks"]
    ) -> dict[str, object] | NotAvailable: ...
    def value(self, key: str) -> object:
        """The number (or block) *key* of this analysis, or :class:`NotAvailable` with the
        reason the trace cannot support it: the typed form of ``to_dict()``'s null plus its
        ``not_available`` entry (:data:`REPORTED`; tests/test_not_available.py checks that
        every null among them has its reason, on the samples and the corpus)."""
        if key not in REPORTED:
            raise KeyError(f"{key!r} is not one of the analysis's numbers: {sorted(REPORTED)}")
        found = getattr(self, key)
        if found is not None:
            return found
        reason = self.not_available.get(key) or self.not_available.get(REPORTED[key] or "")
        return NotAvailable(reason or f"{key}: no reason was recorded")

    def wall_ns(self, phase: str) -> int:
        """Exclusive wall time of *phase* (0 when the trace has none)."""
        row = self.phases.get(phase)
        return 0 if row is None else int(row["wall_ns"])

    def non_accelerable(self) -> list[NonAccelerable]:
        """Non-accelerable phases with time, largest first: ``{phase, wall_ns, share}``."""
        rows: list[NonAccelerable] = [
            {"phase": name, "wall_ns": row["wall_ns"], "share": row["share"]}
            for name, row in self.phases.items()
            if not row["accelerable"] and row["wall_ns"] > 0
        ]
        return sorted(rows, key=lambda r: (-r["wall_ns"], r["phase"]))

    def to_dict(self) -> dict[str, object]:
        """The ``analyze --json`` contract (issue 5) plus the details reports and plots use."""
        non_acc = self.non_accelerable()
        doc: AnalysisDocument = {
            "path": self.path,
            "mode": self.mode,
            "pid": self.pid,
            "rules": self.rules,
            "window_start_ns": self.window_start_ns,
            "window_end_ns": self.window_end_ns,
            "window_ns": self.window_ns,
            "window_source": self.window_source,
            "window_of": WINDOW_SOURCES.get(self.window_source or ""),
            "window_rule": self.window_rule,
            "window_dropped": self.window_dropped,
            "tokens": self.tokens,
            "tokens_source": self.tokens_source,
            "steps": self.steps,
            "requests": self.requests,
            "k": self.k,
            "phases": self.phases,
            "shares_of": "window_ns",
            "p": self.p,
            "accelerable_ns": self.accelerable_ns,
            "accelerable_phases": [p for p in ACCELERABLE if p in self.phases],
            "accelerable_share": self.accelerable_share,
            "non_accelerable": non_acc,
            "dominant_non_accelerable": non_acc[0]["phase"] if non_acc else None,
            "per_token_ns": self.per_token_ns,
            "sampler_share": self.sampler_share,
            "amdahl_ceiling": self.amdahl_ceiling,
            "acceptance": self.acceptance,
            "draft_cost_ratio": self.draft_cost_ratio,
            "draft_forwards_per_step": self.draft_forwards_per_step,
            "draft_forwards_source": self.draft_forwards_source,
            "nesting": self.nesting,
            "per_range_ns": self.per_range_ns,
            "latency": self.latency,
            "step_distributions": self.step_distributions,
            "bandwidth": self.bandwidth,
            "device_memory": self.device_memory,
            "whatif": self.whatif,
            "gpu": self.gpu,
            "gpu_time": self.gpu_time,
            "top_kernels": self.top_kernels,
            "findings": self.findings,
            "os_runtime": self.os_runtime,
            "not_available": dict(self.not_available),
            "warnings": list(self.warnings),
            "ranks": self.ranks,
            "profiler_overhead": self.profiler_overhead,
        }
        taken = doc.keys() & self.metrics.keys()
        if taken:
            raise ValueError(f"registered metrics reuse analyze's own keys: {sorted(taken)}")
        return {**doc, **self.metrics}

    def with_control(self, control: ControlSummary, source: str) -> Analysis:
        """This analysis with the profiler's overhead against the unprofiled control runs
        *control* (:func:`specnsys.control_log.read_control` of the file *source*): profiled
        over unprofiled per-token time, the control runs' median, min and max."""
        per = control["per_token_ns"]
        unprofiled = float(per["median"] or 0.0)
        profiled = self.per_token_ns
        return replace(
            self,
            profiler_overhead={
                "runs": int(per["runs"]),
                "unprofiled_per_token_ns": unprofiled,
                "unprofiled_min_ns": per["min"],
                "unprofiled_max_ns": per["max"],
                "profiled_per_token_ns": profiled,
                "overhead": profiled / unprofiled - 1 if profiled and unprofiled else None,
                "of": f"{source}: the command run {per['runs']} times without nsys, timed by "
                "the annotation layer (first request start to last request end, over its "
                "output tokens); overhead = profiled / unprofiled - 1",
            },
        )

    def with_tokens(self, tokens: int) -> Analysis:
        """This analysis with *tokens* output tokens given by the user (``--tokens N``): the
        count and the per-token time change, ``tokens_source`` becomes ``given``; what the
        trace's own sources said about tokens is dropped."""
        if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens <= 0:
            raise BadInputError(f"a given token count must be a positive integer, got {tokens!r}")
        na = {k: v for k, v in self.not_available.items() if k not in ("tokens", "per_token_ns")}
        notes = [w for w in self.warnings if not w.startswith(NOTE_PREFIX)]
        return replace(
            self,
            tokens=tokens,
            tokens_source=GIVEN,
            per_token_ns=self.window_ns / tokens,
            not_available=na,
            warnings=notes,
        )


def detect_mode(counts: dict[str, int], walls: dict[str, int]) -> str:
    """``spec`` if draft/verify ranges (or time) exist, ``baseline`` if forward does, else
    ``generic``: a run of phases specnsys has no speculative-decoding model for."""

    def present(phase: str) -> bool:
        return counts.get(phase, 0) > 0 or walls.get(phase, 0) > 0

    if any(present(p) for p in SPEC_ACCELERABLE):
        return "spec"
    if any(present(p) for p in BASELINE_ACCELERABLE):
        return "baseline"
    return GENERIC


def _phase_rows(b: PhaseBreakdown, counts: dict[str, int], gpu: bool) -> dict[str, PhaseRow]:
    rows: dict[str, PhaseRow] = {}
    for r in b.frame.iter_rows(named=True):
        name = r["phase"]
        if name == REQUEST_PHASE and r["wall_ns"] == 0:
            continue  # request ranges set the window; they are not a push/pop phase
        rows[name] = {
            "wall_ns": int(r["wall_ns"]),
            "share": float(r["share"]),
            "gpu_busy_ns": int(r["gpu_busy_ns"]) if gpu else None,
            "kernels": int(r["kernels"]) if gpu else None,
            "cpu_inclusive_ns": int(r["cpu_inclusive_ns"]),
            "ranges": int(counts.get(name, 0)),
            "accelerable": name in ACCELERABLE,
        }
    return rows


def _per_range(phases: dict[str, PhaseRow], name: str) -> float | None:
    row = phases.get(name)
    if not row or row["ranges"] <= 0:
        return None
    per_range: float = row["wall_ns"] / row["ranges"]
    return per_range


def analyze_trace(
    trace: Trace,
    *,
    rules: PhaseRules | str | None = None,
    pid: int | None = None,
    context: AttributionContext | None = None,
    window: WindowSpec | str | None = None,
) -> Analysis:
    """Analyze one trace (baseline or speculative); see the module docs for the metrics.

    *rules* (a ``PhaseRules``, a built-in set's name or a TOML path) maps other NVTX names onto
    the phases; *pid* picks the process (default: the one with the most phase ranges).
    Without *rules*, a trace with no specnsys ranges is read under the ``nvtx`` rules (see
    :func:`rules_in_force`; the note is one of the analysis's warnings). Raises
    :class:`BadInputError` for a trace with nothing to attribute. *context* (an
    :class:`~specnsys.attribution.context.AttributionContext` of the rules in force) shares
    the phase index and the launch attribution with the caller's other analyses. *window*
    (``--window``: :mod:`specnsys.attribution.window`) narrows the window every metric uses.
    """
    path = str(getattr(trace, "path", "")) or None
    spec = parse_window(window)
    asked = rules
    rules, note = rules_in_force(trace, rules)
    mapping = resolve(rules)
    # resolved once: a TOML file is parsed and checked a single time
    given = mapping if rules is not None else None
    if context is None:
        # One context for the whole analysis, as the command line passes: the breakdown, the
        # findings and the decode-step tables then read the phase ranges once, not each its
        # own (0.5-0.7 s a read at 2M kernels).
        with AttributionContext(trace, rules_for(PHASES, DOMAIN, given)) as own:
            return analyze_trace(trace, rules=asked, pid=pid, context=own, window=window)
    # The result is a pure function of the export, the rules and pid: kept beside the cached
    # model, the next analysis of the unchanged export reads it back (errors are not kept).
    key = {
        "version": ANALYSIS_VERSION,
        "timeline": TIMELINE_VERSION,
        "specnsys": __version__,
        "rules": repr(mapping),
        "explicit_rules": rules is not None,
        "pid": pid,
        "window": spec.text,
    }
    if registered():  # absent without extra metrics: the analyses cached before stay valid
        key["metrics"] = [f"{m.key}:{m.version}" for m in registered()]
    stored = trace.load_derived("analysis", key)
    # itself read back when stored
    b = exclusive_phase_times(trace, pid=pid, window=spec, rules=given, context=context)
    context.release_lean_runtime()  # the breakdown was its only reader (see the method)
    if stored is not None:
        return _noted(Analysis(**{**stored, "path": path}, breakdown=b), note)
    try:
        result = _analyze(trace, b, mapping, path, pid, context)
    except BadInputError as err:
        if note is None:
            raise
        # nothing even under the nvtx rules: say what is missing and how to get it (or why
        # the specnsys ranges are missing when its domain was created: nsys dropped them)
        why = trace.summary.capabilities["specnsys_phases"].reason
        raise BadInputError(
            f"{err}; {_MISSING_EVERYTHING if why.startswith('no ranges') else why}"
        ) from None
    trace.store_derived(
        "analysis", key, {f: getattr(result, f) for f in _STORED_FIELDS if f != "path"}
    )
    return _noted(result, note)


def rules_in_force(
    trace: Trace, rules: PhaseRules | str | None
) -> tuple[PhaseRules | str | None, str | None]:
    """The rules a command applies to *trace*, and the note that says so when it chose them.

    The one place the default is decided: *rules* when given; else specnsys's own vocabulary
    when the trace has ranges in its domain (capability ``specnsys_phases``); else the
    built-in engine pack whose names the trace's ranges match
    (:func:`~specnsys.attribution.rule_match.choose_pack`), with a note naming it and the
    evidence; else the built-in ``nvtx`` set (every NVTX range is a phase named by its text),
    with a note naming why, so that any trace gets an answer instead of "unannotated 100%".
    """
    caps = trace.summary.capabilities
    if rules is not None or caps["specnsys_phases"].available:
        return rules, None
    pack = choose_pack(trace) if caps["cpu_phase_timeline"].available else None
    if pack is not None:
        return pack.rules, pack.note()
    return builtin_rules("nvtx"), (
        f"{caps['specnsys_phases'].reason.split(' (')[0]}: phases are the trace's own NVTX "
        "ranges (--rules nvtx applied; no engine pack matched them); pass --rules FILE to map "
        "them onto specnsys's phases, or capture an unedited script with `specnsys profile "
        "--annotate FILE`"
    )


def _noted(analysis: Analysis, note: str | None) -> Analysis:
    """*analysis* with *note* (the rules chosen for it) first among its warnings."""
    if note is None:
        return analysis
    return replace(analysis, warnings=[note, *analysis.warnings])


@dataclass
class _Run:
    """What every part of one analysis reads: the trace, its breakdown and scope, the phase
    rows and the mode; and what the parts say (``na``: not available, why; ``warnings``)."""

    trace: Trace
    b: PhaseBreakdown
    mapping: PhaseRules
    scope: Scope
    gpu: bool
    phases: dict[str, PhaseRow]
    mode: str
    na: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    @property
    def counts(self) -> dict[str, int]:
        return self.b.range_counts

    @property
    def caps(self) -> dict[str, Capability]:
        return self.trace.summary.capabilities

    @property
    def step_phase(self) -> str:
        return step_phase(self.counts, {k: v["wall_ns"] for k, v in self.phases.items()})

    @property
    def generic_reason(self) -> str:
        return _NOT_SPECULATIVE


def _analyze(
    trace: Trace,
    b: PhaseBreakdown,
    mapping: PhaseRules,
    path: str | None,
    pid: int | None,
    context: AttributionContext | None,
) -> Analysis:
    if b.window_ns <= 0:
        who = f"process {pid} has" if pid is not None else "the trace has"
        raise BadInputError(f"{path}: nothing to analyze ({who} {NO_WINDOW})")
    gpu = bool(trace.summary.capabilities["gpu_activity"].available)
    phases = _phase_rows(b, b.range_counts, gpu)
    mode = detect_mode(b.range_counts, {k: v["wall_ns"] for k, v in phases.items()})
    run = _Run(trace, b, mapping, Scope.of(b, mapping, context), gpu, phases, mode)
    if not gpu:
        run.na["gpu_busy_ns"] = run.caps["gpu_activity"].reason
    lat = request_latencies(trace, run.scope)
    # a speculative run's acceptance marks also count its tokens when nothing else does
    acc, acc_note = acceptance_stats(trace, run.scope) if mode == "spec" else (None, None)
    tokens = _tokens_part(run, lat, acc)
    # in this order: each part adds its warnings to the run's
    p_part = _p_part(run)
    speculative = _speculative_part(run, acc, acc_note, tokens["tokens"])
    tails = _tails_part(run, lat)
    gpu_part = _gpu_part(run)
    process = _process_part(run, pid, context)
    metrics = _registered_metrics(run)
    return Analysis(
        path=path,
        mode=mode,
        pid=b.pid,
        window_start_ns=b.window_start_ns,
        window_end_ns=b.window_end_ns,
        rules=str(getattr(b, "rules", mapping.name)),
        phases=phases,
        requests=int(lat.height),
        gpu=gpu,
        nesting=b.nesting,
        window_source=b.window_source,
        window_rule=b.window_rule,
        window_dropped=b.window_dropped,
        not_available=run.na,
        warnings=run.warnings,
        breakdown=b,
        metrics=metrics,
        **tokens,
        **p_part,
        **speculative,
        **tails,
        **gpu_part,
        **process,
    )


class _TokensPart(TypedDict):
    tokens: int | None
    tokens_source: str | None
    steps: int
    per_token_ns: float | None
    sampler_share: float


class _PPart(TypedDict):
    accelerable_ns: int
    p: float | None
    amdahl_ceiling: float | None


class _SpeculativePart(TypedDict):
    acceptance: Acceptance | None
    k: int | None
    draft_cost_ratio: float | None
    draft_forwards_per_step: float | None
    draft_forwards_source: str | None
    per_range_ns: dict[str, float | None]
    whatif: dict[str, object] | None


class _TailsPart(TypedDict):
    latency: Latency
    step_distributions: dict[str, object] | None


class _GpuPart(TypedDict):
    bandwidth: Bandwidth | None
    device_memory: DeviceMemory | None
    gpu_time: GpuTime | None
    top_kernels: TopKernels | None
    findings: dict[str, object] | None


class _ProcessPart(TypedDict):
    os_runtime: OsRuntime | None
    ranks: dict[str, object] | None


def _tokens_part(run: _Run, lat: pl.DataFrame, acc: Acceptance | None) -> _TokensPart:
    """Output tokens (from whatever the trace holds), decode steps, per-token time."""
    counted = count_tokens(run.trace, run.scope, lat, acc, run.counts)
    tokens = counted.tokens
    if counted.note:
        run.warnings.append(counted.note)
    if counted.reason:
        run.na["tokens"] = counted.reason
    if tokens == 0:
        run.na["per_token_ns"] = "the tokens marks sum to 0"
    elif tokens is None:
        run.na["per_token_ns"] = "output tokens are not available"
    window = run.b.window_ns
    return {
        "tokens": tokens,
        "tokens_source": counted.source,
        "steps": int(run.counts.get(run.step_phase, 0)),
        "per_token_ns": window / tokens if tokens else None,
        "sampler_share": _wall(run.phases, SAMPLER_PHASE) / window,
    }


def _wall(phases: dict[str, PhaseRow], name: str) -> int:
    """*name*'s wall time in *phases* (0 without it)."""
    row = phases.get(name)
    return 0 if row is None else row["wall_ns"]


def _p_part(run: _Run) -> _PPart:
    """The accelerable time; p and the Amdahl ceiling, which come from a baseline run."""
    accelerable = sum(run.phases[p]["wall_ns"] for p in ACCELERABLE if p in run.phases)
    p: float | None = None
    ceiling: float | None = None
    if run.mode == GENERIC:
        run.na["p"] = run.na["amdahl_ceiling"] = (
            f"p is the accelerable share of a baseline run; {_NOT_SPECULATIVE}"
        )
    elif run.mode == "baseline":
        p = accelerable / run.b.window_ns
        ceiling = amdahl.amdahl_ceiling(p)
        if ceiling is None:
            run.na["amdahl_ceiling"] = "p = 1: every nanosecond is accelerable, no finite ceiling"
    else:
        run.na["p"] = run.na["amdahl_ceiling"] = (
            "p is the accelerable share of a baseline run (forward phases); this is a "
            "speculative run: use compare with its baseline (accelerable_share is this run's "
            "draft + verify share)"
        )
    return {"accelerable_ns": int(accelerable), "p": p, "amdahl_ceiling": ceiling}


def _acceptance_reason(run: _Run, acc: Acceptance | None, note: str | None) -> None:
    if run.mode == "spec":
        if note:
            run.warnings.append(note)
        if acc is None:
            run.na["acceptance"] = run.caps["acceptance_marks"].reason + " in the window"
    elif run.mode == GENERIC:
        run.na["acceptance"] = (
            f"needs the proposed/accepted marks of a speculative run; {_NOT_SPECULATIVE}"
        )
    else:
        run.na["acceptance"] = "a baseline run proposes no drafts"


def _per_range_part(run: _Run, forwards: DraftForwards) -> dict[str, float | None]:
    phases, counts = run.phases, run.counts
    draft_row = phases.get("draft")
    draft_wall = None if draft_row is None else draft_row["wall_ns"]
    steps_drafted = counts.get("verify", 0) or counts.get("draft", 0)
    return {
        "forward_ns": _per_range(phases, "forward"),
        "verify_ns": _per_range(phases, "verify"),
        "draft_step_ns": draft_wall / steps_drafted if draft_wall and steps_drafted else None,
        "draft_forward_ns": forwards.forward_ns
        or (draft_wall / forwards.total if draft_wall and forwards.total else None),
    }


def _cost_ratio(run: _Run, per_range: dict[str, float | None], forwards: DraftForwards) -> float | None:
    """The draft cost ratio c, or None with the reason noted."""
    draft, verify = per_range["draft_forward_ns"], per_range["verify_ns"]
    if run.mode == "spec" and draft is not None and verify:
        return draft / verify
    if run.mode == "spec":
        run.na["draft_cost_ratio"] = (
            f"needs draft and verify ranges and the draft forwards per step ({forwards.reason})"
            if forwards.reason
            else "needs draft and verify ranges"
            if verify is None or draft is None
            else "verify time is 0"
        )
    elif run.mode == GENERIC:
        run.na["draft_cost_ratio"] = f"needs draft and verify ranges; {_NOT_SPECULATIVE}"
    else:
        run.na["draft_cost_ratio"] = "a baseline run has no draft model"
    return None


def _speculative_part(
    run: _Run, acc: Acceptance | None, note: str | None, tokens: int | None
) -> _SpeculativePart:
    """Acceptance, the draft forwards per step, c, the structural checks and the what-if."""
    _acceptance_reason(run, acc, note)
    k = None if acc is None else int(acc["k"])
    forwards = (
        draft_forwards(run.counts, run.b.nesting, acc)
        if run.mode == "spec"
        else DraftForwards(None, None, None)
    )
    per_range = _per_range_part(run, forwards)
    c = _cost_ratio(run, per_range, forwards)
    if run.mode == "spec" and forwards.reason:
        run.na["draft_forwards_per_step"] = forwards.reason
    elif run.mode == GENERIC:
        run.na["draft_forwards_per_step"] = f"needs draft ranges; {_NOT_SPECULATIVE}"
    elif run.mode != "spec":
        run.na["draft_forwards_per_step"] = "a baseline run has no draft model"
    run.warnings.extend(
        structural_warnings(
            run.mode, run.counts, run.b.nesting, steps=int(run.counts.get(run.step_phase, 0)),
            step_phase=run.step_phase, tokens=tokens, acceptance=acc,
        )
    )  # fmt: skip
    whatif = None
    if acc is not None and c is not None and k is not None:
        whatif = amdahl.whatif(float(acc["alpha"]), k, c)
    elif run.mode == GENERIC:
        run.na["whatif"] = f"needs the alpha, k and c of a speculative run; {_NOT_SPECULATIVE}"
    else:
        run.na["whatif"] = "needs the measured alpha, k and c of a speculative run"
    return {
        "acceptance": acc,
        "k": k,
        "draft_cost_ratio": c,
        "draft_forwards_per_step": forwards.per_step,
        "draft_forwards_source": forwards.source,
        "per_range_ns": per_range,
        "whatif": whatif,
    }


def _tails_part(run: _Run, lat: pl.DataFrame) -> _TailsPart:
    """Latency per request and the per-step distributions."""
    latency = _latency(lat, run.na)
    dist = None
    if run.mode != GENERIC:
        stepping = run.step_phase
        dist = step_distributions(
            step_table(run.trace, run.scope, stepping),
            step_phase_times(run.trace, run.scope, stepping),
        )
    if dist is None:
        run.na["step_distributions"] = (
            f"needs decode steps; {_NOT_SPECULATIVE}" if run.mode == GENERIC else "no decode steps"
        )
    return {"latency": latency, "step_distributions": dist}


def _gpu_part(run: _Run) -> _GpuPart:
    """Bandwidth, device memory, GPU busy/idle, the largest kernels and the findings."""
    trace, scope, phases = run.trace, run.scope, run.phases
    busy = {name: int(row["gpu_busy_ns"] or 0) for name, row in phases.items()}
    bandwidth, bw_reason = memory_bandwidth(trace, scope, busy)
    if bw_reason:
        run.na["bandwidth"] = bw_reason
    memory, mem_reason = device_memory(trace, scope)
    if mem_reason:
        run.na["device_memory"] = mem_reason
    if not run.gpu:  # gpu_busy_ns's reason covers the GPU time and the kernels as well
        run.na["findings"] = run.caps["gpu_activity"].reason
        return {"bandwidth": bandwidth, "device_memory": memory, "gpu_time": None,
                "top_kernels": None, "findings": None}  # fmt: skip
    top, top_reason = top_kernels_by_phase(trace, scope, kernel_names=run.b.kernel_names)
    if top_reason:
        run.na["top_kernels"] = top_reason
    figures = {
        name: {
            "wall_ns": int(row["wall_ns"] or 0),
            "gpu_busy_ns": int(row["gpu_busy_ns"] or 0),
            "cpu_inclusive_ns": int(row["cpu_inclusive_ns"] or 0),
        }
        for name, row in phases.items()
    }
    return {
        "bandwidth": bandwidth,
        "device_memory": memory,
        "gpu_time": _gpu_time(run.b),
        "top_kernels": top,
        "findings": findings_of(trace, scope, figures),
    }


def _process_part(
    run: _Run, pid: int | None, context: AttributionContext | None
) -> _ProcessPart:
    """The OS runtime calls, what the breakdown noted, and every process of the run."""
    b = run.b
    # what the CPU threads did outside CUDA (the only timed events of a CPU-only capture)
    osrt, osrt_reason = os_runtime_calls(run.trace, b.pid, (b.window_start_ns, b.window_end_ns))
    if osrt_reason:
        run.na["os_runtime"] = osrt_reason
    unclosed = int(getattr(b, "unclosed_ranges", 0) or 0)
    if unclosed:
        run.warnings.append(f"{unclosed} phase ranges never closed; counted up to the window end")
    run.warnings.extend(getattr(b, "graph_notes", ()))  # graph work left on its launch's phase
    ranks, ranks_reason = ranks_of_analysis(run.trace, run.mapping, b, pid, run.gpu, context)
    if ranks_reason:
        run.na["ranks"] = ranks_reason
    return {"os_runtime": osrt, "ranks": ranks}


def _registered_metrics(run: _Run) -> dict[str, JSONValue]:
    """The registered metrics' payloads (:mod:`specnsys.metrics.registry`), computed from a
    :class:`MetricContext`: a metric that cannot be computed is null, its reason noted."""
    if not registered():
        return {}
    context = MetricContext(
        run.trace, run.b, run.scope, run.mapping, run.mode, run.gpu, dict(run.phases),
        run.step_phase,
    )  # fmt: skip
    out: dict[str, JSONValue] = {}
    for metric in registered():
        value = metric.compute(context)
        if isinstance(value, NotAvailable):
            run.na[metric.key] = value.reason
            value = None
        out[metric.key] = value
    return out


#: Fields of :class:`Analysis` kept in the trace cache (all but the breakdown, kept on its own,
#: and the data warnings, kept by the checks).
_STORED_FIELDS = tuple(
    f.name for f in fields(Analysis) if f.name not in ("breakdown", "data_warnings")
)


def _gpu_time(b: PhaseBreakdown) -> GpuTime:
    """GPU busy (the union of the process's GPU work in the window) and GPU idle, the rest."""
    window = b.window_ns
    busy = int(b.gpu_union_ns)
    return {
        "busy_ns": busy,
        "idle_ns": window - busy,
        "busy_share": busy / window if window else 0.0,
        "idle_share": (window - busy) / window if window else 0.0,
        "shares_of": "window_ns",
    }


def _latency(lat: pl.DataFrame, na: dict[str, str]) -> Latency:
    """TTFT/TPOT/latency distributions and the per-request rows (ns)."""
    out: Latency = {
        "ttft_ns": distribution(lat["ttft_ns"]),
        "tpot_ns": distribution(lat["tpot_ns"]),
        "latency_ns": distribution(lat["latency_ns"]),
        "per_request": lat.select(
            "request_id", "output_tokens", "ttft_ns", "tpot_ns", "latency_ns"
        ).to_dicts(),
    }
    if lat.height == 0:
        na["ttft"] = na["tpot"] = "the trace has no request ranges"
        return out
    if lat["first_token"].null_count() == lat.height:
        na["ttft"] = "no first_token marks (request id at the first output token)"
    if lat["output_tokens"].null_count() == lat.height:
        na["tpot"] = "no output_tokens marks (output length at each request's end)"
    elif out["tpot_ns"]["count"] == 0:
        na["tpot"] = "no request has both a first token time and more than one output token"
    return out


def analysis_steps(
    trace: Trace,
    analysis: Analysis,
    rules: PhaseRules | None,
    context: AttributionContext | None = None,
) -> pl.DataFrame:
    """:func:`step_table` of *analysis* (of *trace*, under *rules*: None for the specnsys
    convention): its process, driver thread, window and step phase."""
    b = analysis.breakdown
    if b is None:
        return pl.DataFrame(schema=STEP_COLUMNS)
    walls = {name: int(row["wall_ns"]) for name, row in analysis.phases.items()}
    scope = Scope.of(b, resolve(rules), context)
    return step_table(trace, scope, step_phase(b.range_counts, walls))
