"""``compare_runs``: a baseline and a speculative run side by side, the article's procedure.

With ``T`` output tokens, ``W`` the window, ``A`` the accelerable time (baseline ``forward``;
speculative ``draft + verify``) and ``N = W - A`` the rest, per run:

* ``p = A_b / W_b`` (baseline); ``r = (A_b / T_b) / (A_s / T_s)``;
* predicted speedup ``1 / ((1 - p) + p / r)`` -- Amdahl: only the accelerable part changed;
* measured speedup ``(W_b / T_b) / (W_s / T_s)`` -- per output token;
* ``gap = measured / predicted - 1`` (negative: the run fell short of the prediction).

Where a run's tokens are not known (no source in :mod:`specnsys.metrics.tokens` answered and
none was given) but both runs produced the same output -- stated with ``same_output``
(``compare --same-output``), or assumed, and listed in ``assumptions``, when both served the
same non-zero number of requests -- ``T_b = T_s`` cancels: measured = ``W_b / W_s``,
``r = A_b / A_s``, and each phase's gap contribution is ``-(x_s - x_b) / W_s``.

The prediction equals the measurement exactly when the non-accelerable time per token did
not move (``N_s / T_s = N_b / T_b``). In general, with ``d_x`` the change of phase x's
per-token time and ``S = W_s / T_s``, ``gap = sum over non-accelerable x of -d_x / S``: each
phase's ``gap_contribution`` says how much of the gap it explains, and they add up to it.
That is how the phase table shows *where* prediction and measurement part.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TypedDict, TypeVar, cast

from specnsys.errors import BadInputError
from specnsys.metrics import amdahl
from specnsys.metrics.ab_compare import ABComparison, ab_compare_many
from specnsys.metrics.analysis import Analysis
from specnsys.vocabulary import ACCELERABLE

__all__ = [
    "MOVE_THRESHOLD",
    "TOLERANCE",
    "VERIFY_RATIO_WARNING",
    "Comparison",
    "MemoryComparison",
    "PhaseGap",
    "compare_many",
    "compare_runs",
    "compare_sweep",
    "is_ab_pairing",
    "with_same_output",
]

TOLERANCE = 0.10
"""The prediction "holds" when ``|gap|`` is at most this (the issue's 10%)."""

MOVE_THRESHOLD = 0.02
"""A non-accelerable phase "moved" when it explains at least this much of the gap."""

VERIFY_RATIO_WARNING = 1.3
"""Verify time over baseline forward time above which verification is flagged (the blog's
warning sign: the wider pass is no longer almost free)."""


class PhaseGap(TypedDict):
    """One phase of a comparison: walls, shares, ns per output token and its part of the gap
    (None where the token counts or the basis do not allow it)."""

    accelerable: bool
    baseline_wall_ns: int
    spec_wall_ns: int
    baseline_share: float
    spec_share: float
    baseline_ns_per_token: float | None
    spec_ns_per_token: float | None
    delta_ns_per_token: float | None
    gap_contribution: float | None


class MemoryComparison(TypedDict):
    """Peak device memory of spec ``verify`` against the baseline's forward (or decode)."""

    verify_peak_bytes: int
    baseline_phase: str
    baseline_peak_bytes: int
    verify_to_baseline: float | None
    total_memory_bytes: int | None


@dataclass(frozen=True)
class Comparison:
    """One baseline/speculative pair; :meth:`to_dict` is the ``compare --json`` object."""

    baseline: Analysis
    spec: Analysis
    p: float | None
    r: float | None
    predicted_speedup: float | None
    measured_speedup: float | None
    gap: float | None
    phases: dict[str, PhaseGap]
    moved_phases: list[str]
    draft_cost_ratio: float | None
    verify_to_forward_ratio: float | None
    leviathan: dict[str, object] | None
    device_memory: MemoryComparison | None
    not_available: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    speedup_basis: str | None = None
    """``per_token`` (both token counts known), ``same_output`` (windows and accelerable times
    compared whole, see the module docs) or None (no measured speedup)."""
    assumptions: list[str] = field(default_factory=list)
    """What the numbers rest on that the traces do not show (e.g. equal outputs)."""

    @property
    def prediction_holds(self) -> bool | None:
        return None if self.gap is None else abs(self.gap) <= TOLERANCE

    @property
    def moved_phase(self) -> str | None:
        return self.moved_phases[0] if self.moved_phases else None

    def to_dict(self) -> dict[str, object]:
        b, s = self.baseline, self.spec

        def per_token(a: Analysis, ns: int) -> float | None:
            return ns / a.tokens if a.tokens else None

        return {
            "baseline": b.path,
            "spec": s.path,
            "k": s.k,
            "p": self.p,
            "r": self.r,
            "predicted_speedup": self.predicted_speedup,
            "measured_speedup": self.measured_speedup,
            "gap": self.gap,
            "gap_definition": "measured_speedup / predicted_speedup - 1",
            "tolerance": TOLERANCE,
            "prediction_holds": self.prediction_holds,
            "amdahl_ceiling": b.amdahl_ceiling,
            "tokens": {"baseline": b.tokens, "spec": s.tokens},
            "tokens_source": {"baseline": b.tokens_source, "spec": s.tokens_source},
            "speedup_basis": self.speedup_basis,
            "assumptions": list(self.assumptions),
            "window_ns": {"baseline": b.window_ns, "spec": s.window_ns},
            "window_rule": {"baseline": b.window_rule, "spec": s.window_rule},
            "per_token_ns": {"baseline": b.per_token_ns, "spec": s.per_token_ns},
            "accelerable_ns_per_token": {
                "baseline": per_token(b, b.accelerable_ns),
                "spec": per_token(s, s.accelerable_ns),
            },
            "non_accelerable_ns_per_token": {
                "baseline": per_token(b, b.window_ns - b.accelerable_ns),
                "spec": per_token(s, s.window_ns - s.accelerable_ns),
            },
            "phases": self.phases,
            "gap_contribution_definition": (
                "-delta_ns_per_token / spec per_token_ns (non-accelerable phases; they sum to gap)"
            ),
            "moved_phase": self.moved_phase,
            "moved_phases": list(self.moved_phases),
            "draft_cost_ratio": self.draft_cost_ratio,
            "verify_to_forward_ratio": self.verify_to_forward_ratio,
            "verify_ratio_warning": (
                None
                if self.verify_to_forward_ratio is None
                else self.verify_to_forward_ratio > VERIFY_RATIO_WARNING
            ),
            "acceptance": s.acceptance,
            "unprofiled": _unprofiled(b, s, self.measured_speedup),
            "leviathan": self.leviathan,
            "device_memory": self.device_memory,
            "not_available": dict(self.not_available),
            "warnings": list(self.warnings),
        }


def _unprofiled(b: Analysis, s: Analysis, measured: float | None) -> dict[str, object] | None:
    """The measured speedup of the unprofiled control runs beside the profiled one, when both
    traces have them (``profile --control``; :meth:`Analysis.with_control`)."""
    ob, os_ = b.profiler_overhead, s.profiler_overhead
    if not ob or not os_:
        return None
    base, spec = ob["unprofiled_per_token_ns"], os_["unprofiled_per_token_ns"]
    return {
        "baseline_per_token_ns": base,
        "spec_per_token_ns": spec,
        "measured_speedup": base / spec if spec else None,
        "profiled_measured_speedup": measured,
        "overhead": {"baseline": ob["overhead"], "spec": os_["overhead"]},
        "runs": {"baseline": ob["runs"], "spec": os_["runs"]},
    }


def _phase_table(
    b: Analysis, s: Analysis, spec_per_token: float | None, same_output: bool = False
) -> dict[str, PhaseGap]:
    """Per phase: walls, shares, ns per token and the part of the gap it explains (by
    per-token deltas, or, on a *same_output* basis without token counts, by wall deltas over
    the speculative window: the token count cancels)."""
    names = list(dict.fromkeys([*b.phases, *s.phases]))
    table: dict[str, PhaseGap] = {}
    for name in names:
        wb, ws = b.wall_ns(name), s.wall_ns(name)
        if wb == 0 and ws == 0:
            continue
        bt = wb / b.tokens if b.tokens else None
        st = ws / s.tokens if s.tokens else None
        delta = None if bt is None or st is None else st - bt
        accelerable = name in ACCELERABLE
        contribution = None
        if delta is not None and spec_per_token and not accelerable:
            contribution = -delta / spec_per_token
        elif same_output and not accelerable and s.window_ns > 0:
            contribution = -(ws - wb) / s.window_ns
        table[name] = {
            "accelerable": accelerable,
            "baseline_wall_ns": wb,
            "spec_wall_ns": ws,
            "baseline_share": wb / b.window_ns,
            "spec_share": ws / s.window_ns,
            "baseline_ns_per_token": bt,
            "spec_ns_per_token": st,
            "delta_ns_per_token": delta,
            "gap_contribution": contribution,
        }
    return table


def compare_runs(baseline: Analysis, spec: Analysis, *, same_output: bool = False) -> Comparison:
    """Compare a baseline analysis with a speculative one (see the module docs).

    *same_output*: the runs produced the same output, so where a token count is missing the
    speedup compares whole windows. Raises :class:`BadInputError` unless *baseline* is a
    baseline run and *spec* a speculative one.
    """
    if baseline.mode != "baseline" or spec.mode != "spec":
        raise BadInputError(
            "compare needs a baseline run (forward phases) and a speculative run (draft/verify "
            f"phases); got {baseline.mode} ({baseline.path}) and {spec.mode} ({spec.path})"
        )
    b, s = baseline, spec
    na: dict[str, str] = {}
    warnings: list[str] = []
    assumptions: list[str] = []
    p = b.p
    spec_per_token = s.per_token_ns
    basis = _speedup_basis(b, s, same_output, assumptions)
    r, predicted, measured, gap = _speedups(b, s, basis, na)
    if b.tokens and s.tokens and b.tokens != s.tokens:
        warnings.append(
            f"the runs emitted different token counts ({b.tokens} vs {s.tokens}); "
            "times are compared per output token"
            + (" (--same-output given, but the counts say otherwise)" if same_output else "")
        )
    if b.gpu != s.gpu:
        warnings.append("one run has GPU activity and the other does not")

    phases = _phase_table(b, s, spec_per_token, basis == "same_output")
    explains = {
        name: g
        for name, row in phases.items()
        if (g := row["gap_contribution"]) is not None and abs(g) >= MOVE_THRESHOLD
    }
    moved = sorted(explains, key=lambda name: -abs(explains[name]))

    c, ratio, leviathan = _step_costs(b, s, na)
    memory = _memory(b, s, na)
    return Comparison(
        baseline=b,
        spec=s,
        p=p,
        r=r,
        predicted_speedup=predicted,
        measured_speedup=measured,
        gap=gap,
        phases=phases,
        moved_phases=moved,
        draft_cost_ratio=c,
        verify_to_forward_ratio=ratio,
        leviathan=leviathan,
        device_memory=memory,
        not_available=na,
        warnings=warnings,
        speedup_basis=basis,
        assumptions=assumptions,
    )


def _speedups(
    b: Analysis, s: Analysis, basis: str | None, na: dict[str, str]
) -> tuple[float | None, float | None, float | None, float | None]:
    """(r, predicted, measured, gap) of the pair on *basis* (per output token, or whole runs
    when the outputs are the same: T_b = T_s cancels); what is missing goes into *na*."""
    if basis is None:
        which = [a.path or "?" for a in (b, s) if not a.tokens]
        why = (
            f"output tokens are not available for {', '.join(which)} (see its not_available); "
            "give them with --tokens, or state --same-output when both runs produced the same "
            "output"
        )
        for key in ("r", "predicted_speedup", "measured_speedup", "gap"):
            na[key] = why
        return None, None, None, None
    tb, ts = (b.tokens or 0, s.tokens or 0) if basis == "per_token" else (1, 1)
    measured = (b.window_ns / tb) / (s.window_ns / ts)
    if s.accelerable_ns <= 0 or b.accelerable_ns <= 0:
        for key in ("r", "predicted_speedup", "gap"):
            na[key] = "a run has no accelerable time, so r is undefined"
        return None, None, measured, None
    r = (b.accelerable_ns / tb) / (s.accelerable_ns / ts)
    predicted = amdahl.amdahl_speedup(b.p, r) if b.p is not None else None
    gap = None if predicted is None else measured / predicted - 1.0
    return r, predicted, measured, gap


def _step_costs(
    b: Analysis, s: Analysis, na: dict[str, str]
) -> tuple[float | None, float | None, dict[str, object] | None]:
    """(c, verify/forward ratio, Leviathan's what-if): one draft forward and one verify over
    one baseline forward; what is missing goes into *na*."""
    forward = b.per_range_ns.get("forward_ns")
    verify = s.per_range_ns.get("verify_ns")
    draft = s.per_range_ns.get("draft_forward_ns")
    c = draft / forward if draft is not None and forward else None
    if c is None:
        na["draft_cost_ratio"] = "needs baseline forward ranges and spec draft ranges with k"
    ratio = verify / forward if verify is not None and forward else None
    if ratio is None:
        na["verify_to_forward_ratio"] = "needs baseline forward and spec verify ranges"
    leviathan = None
    if s.acceptance is not None and c is not None and s.k is not None:
        leviathan = amdahl.whatif(float(s.acceptance["alpha"]), s.k, c, b.p)
    else:
        na["leviathan"] = "needs alpha and k (spec marks) and c (draft vs baseline forward)"
    return c, ratio, leviathan


def _speedup_basis(
    b: Analysis, s: Analysis, same_output: bool, assumptions: list[str]
) -> str | None:
    """``per_token`` when both token counts are known; else ``same_output`` when the runs are
    said (*same_output*) or, from equal request counts, assumed to have produced the same
    output (the assumption is added to *assumptions*); else None."""
    if b.tokens and s.tokens:
        return "per_token"
    if same_output:
        assumptions.append(
            "both runs produced the same output (given: same_output): measured speedup = "
            "W_b / W_s and r = A_b / A_s, the token count cancels"
        )
        return "same_output"
    if b.requests and b.requests == s.requests:
        assumptions.append(
            f"both runs served {b.requests} requests and are assumed to have produced the same "
            "output: measured speedup = W_b / W_s and r = A_b / A_s; give --tokens or "
            "--same-output to state it"
        )
        return "same_output"
    return None


_C = TypeVar("_C")


def with_same_output(comparisons: Sequence[_C]) -> list[_C]:
    """*comparisons* redone on the statement that each pair produced the same output (what
    :func:`compare_runs`'s *same_output* does), for lists built by :func:`compare_many`; an
    A/B comparison (which uses no token counts) comes back as it is."""
    return [
        cast("_C", compare_runs(c.baseline, c.spec, same_output=True))
        if isinstance(c, Comparison)
        else c
        for c in comparisons
    ]


def _memory(b: Analysis, s: Analysis, na: dict[str, str]) -> MemoryComparison | None:
    """Peak device memory during spec ``verify`` against baseline ``forward`` (or decode)."""
    if b.device_memory is None or s.device_memory is None:
        na["device_memory"] = (
            s.not_available.get("device_memory") or b.not_available.get("device_memory") or "?"
        )
        return None
    bp, sp = b.device_memory["by_phase"], s.device_memory["by_phase"]
    base_phase = next((x for x in ("forward", "decode") if x in bp), None)
    if "verify" not in sp or base_phase is None:
        na["device_memory"] = "no peak marks inside spec verify or baseline forward/decode ranges"
        return None
    vb, fb = sp["verify"]["peak_bytes"], bp[base_phase]["peak_bytes"]
    return {
        "verify_peak_bytes": vb,
        "baseline_phase": base_phase,
        "baseline_peak_bytes": fb,
        "verify_to_baseline": vb / fb if fb else None,
        "total_memory_bytes": s.device_memory.get("total_memory_bytes"),
    }


def compare_sweep(baseline: Analysis, specs: list[Analysis]) -> list[Comparison]:
    """One comparison per speculative run against the same baseline (a k sweep)."""
    return [compare_runs(baseline, s) for s in specs]


def is_ab_pairing(analyses: list[Analysis]) -> bool:
    """Whether *analyses* are compared as A/B diffs (:mod:`.ab_compare`) rather than baseline
    against speculative runs: when a run is generic (no Amdahl model applies to it) or all
    runs are of one mode (two baselines or two speculative runs: before and after a change).
    A mix of baselines and speculative runs keeps the prediction-vs-measurement procedure."""
    modes = {a.mode for a in analyses}
    return len(analyses) >= 2 and ("generic" in modes or len(modes) == 1)


def compare_many(analyses: list[Analysis]) -> list[Comparison | ABComparison]:
    """Compare each speculative run with the nearest baseline before it in *analyses*, or, for
    generic runs or runs of one mode (:func:`is_ab_pairing`), diff each run from the first.

    ``[B1, S1a, S1b, B4, S4]`` gives S1a and S1b against B1 and S4 against B4, so a sweep
    over settings that need their own baseline (concurrency 1/4/8) is one call. Raises
    :class:`BadInputError` when a speculative run has no baseline before it, a baseline has
    no speculative run after it, or there is no speculative run at all.
    """
    if is_ab_pairing(analyses):
        return list(ab_compare_many(analyses))
    return list(_baseline_spec_pairs(analyses))


def _baseline_spec_pairs(analyses: list[Analysis]) -> list[Comparison]:
    if not analyses:
        raise BadInputError("compare needs a baseline trace and at least one speculative trace")
    out: list[Comparison] = []
    current: Analysis | None = None
    used = True
    for a in analyses:
        if a.mode == "baseline":
            if current is not None and not used:
                raise BadInputError(
                    f"baseline {current.path} has no speculative trace after it to compare with"
                )
            current, used = a, False
            continue
        if current is None:
            modes = ", ".join(f"{x.mode} ({x.path})" for x in analyses)
            raise BadInputError(
                "compare needs a baseline trace (forward phases) before the speculative "
                f"trace(s); got {modes}"
            )
        out.append(compare_runs(current, a))
        used = True
    if not used and current is not None:
        raise BadInputError(
            f"baseline {current.path} has no speculative trace after it to compare with"
        )
    return out
