"""``check BASELINE CANDIDATE``: a regression gate for CI, per phase, noise-aware.

Each side is a trace or a ``collect`` dataset. Runs are grouped by their labels except
``repeat`` and ``commit`` (a dataset's configurations; two traces are one group each), and each
group of the candidate is compared with the baseline's group of the same labels.

Per run the measure is time per output token (the window, and each phase's exclusive wall
time, over the output tokens) when every run of the group has tokens, else time per run
(which assumes both sides did the same work: said in ``basis``). Per side the median over the
repeats is taken, with the median absolute deviation (MAD) as its spread.

* the total regressed when the candidate's median per-token time exceeds the baseline's by
  more than ``max_regression`` *and* by more than the noise band;
* a phase regressed when its growth exceeds its noise band and either gate: the *total gate*
  (the growth, as a fraction of the baseline's total, so phases add up to the total's change,
  exceeds ``max_regression``) or the *phase gate* (the growth, as a fraction of that phase's
  own baseline time, exceeds ``max_phase_regression``; judged only for phases of at least
  ``phase_floor`` of the baseline's total, so a phase of a few nanoseconds doubling is not a
  regression). A sampler 36 % slower that is 4 % of the total passes the first and fails the
  second.

A phase *moved* when time left it and appeared in another phase and the ranges moved with it:
the receiver gained ranges and the giver lost some (a rename, a rule that maps some ranges
elsewhere), or the giver is time outside every range (``unannotated``: newly annotated code).
The moved time counts as part of the receiving phase's baseline, so a rename is reported as
moved, not as one regression and one improvement; only what grew beyond the moved time is
judged by the gates. Without such a change of range counts a grower and a shrinker are two
separate changes (a slower sampler beside a faster forward is a regression of ``sample``).

The noise band of a measure is ``NOISE_MADS`` times the larger MAD of the two sides (zero with
one run per side): with repeats, a change inside the runs' own scatter is reported as noise,
not as a regression.

A baseline configuration without candidate runs (its traces failed in ``collect``, or were
never run) is named and fails the check unless ``allow_missing``. Exit status 1 when anything
regressed or a configuration is missing.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import NotRequired, TypedDict

from specnsys.errors import BadInputError, UsageError

__all__ = [
    "DEFAULT_MAX_PHASE_REGRESSION",
    "DEFAULT_MAX_REGRESSION",
    "DEFAULT_PHASE_FLOOR",
    "NOISE_MADS",
    "CheckResult",
    "check",
    "parse_tolerance",
]

NOISE_MADS = 3.0
"""How many relative MADs of the noisier side a change must exceed to count."""
DEFAULT_MAX_REGRESSION = 0.05
"""The total gate: growth as a fraction of the baseline's total per-token time."""
DEFAULT_MAX_PHASE_REGRESSION = 0.20
"""The phase gate: a phase's growth as a fraction of its own baseline time."""
DEFAULT_PHASE_FLOOR = 0.01
"""The phase gate judges only phases of at least this share of the baseline's total."""
#: A relative change of a phase's range count beyond this says its ranges moved (the counts of
#: repeats of one configuration agree exactly; a rename or a rule change moves whole ranges).
RANGES_MOVED = 0.01
#: Attribution outcomes that are time outside every phase range (no ranges of their own).
RANGELESS = ("unannotated", "unattributed_gpu")
#: Labels that vary between repeats of one configuration (not part of a group's key).
REPEAT_LABELS = ("repeat", "commit")
_TOLERANCE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(%?)\s*$")


def parse_tolerance(text: str, option: str = "--max-regression") -> float:
    """``5%`` or ``0.05`` as the fraction 0.05 (a bare number must be below 1); *option* names
    the argument in the one-line error."""
    m = _TOLERANCE.match(text)
    if m is None:
        raise UsageError(f"{option} {text!r}: write it as a percentage (5%) or a fraction")
    value = float(m.group(1)) / (100 if m.group(2) else 1)
    if not m.group(2) and value >= 1:
        raise UsageError(f"{option} {text!r}: a fraction below 1, or a percentage (5%)")
    if not 0 <= value < 10:
        raise UsageError(f"{option} {text!r} is out of range (0% to 1000%)")
    return value


@dataclass(frozen=True)
class Run:
    """One run: its labels, its analyze document and where it came from."""

    source: str
    labels: dict[str, str]
    doc: Mapping[str, object]
    """Its ``analyze --json`` document (read back from a dataset, or of the trace itself)."""
    data_warnings: tuple[str, ...] = ()

    def key(self) -> tuple[tuple[str, str], ...]:
        return tuple(sorted((k, v) for k, v in self.labels.items() if k not in REPEAT_LABELS))


def _runs_of(path: str | Path, rules: str | None, use_cache: bool) -> tuple[list[Run], dict[str, str]]:
    """The runs of *path* (a dataset's, or the one trace's) and, for a dataset, the traces its
    manifest lists as failed in ``collect`` (with their reasons)."""
    from specnsys.runset.dataset import LABEL_PREFIX, is_dataset, read_manifest

    path = Path(path)
    if is_dataset(path):
        import polars as pl

        failed = {str(k): str(v) for k, v in read_manifest(path)["failed"].items()}
        runs = pl.scan_parquet(path / "runs").collect() if (path / "runs").is_dir() else None
        out = []
        for row in runs.iter_rows(named=True) if runs is not None else ():
            labels = {
                k[len(LABEL_PREFIX) :]: v
                for k, v in row.items()
                if k.startswith(LABEL_PREFIX) and v is not None
            }
            out.append(Run(row["trace"], labels, json.loads(row["analysis_json"])))
        if not out:
            raise BadInputError(f"{path}: the dataset holds no runs")
        return out, failed
    from specnsys import api

    analysis = api.analyze(path, rules=rules, use_cache=use_cache)
    return [Run(str(path), {}, analysis.to_dict(), analysis.data_warnings)], {}


def _number(value: object, what: str) -> float:
    """*value*, a number of an analysis document (BadInputError naming *what* otherwise)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value
    raise BadInputError(f"an analysis document has no number for {what} (got {value!r})")


def _measure(doc: Mapping[str, object], per_token: bool) -> tuple[dict[str, float], dict[str, float]]:
    """``total`` and each phase's exclusive wall time, and each phase's range count, per output
    token or per run."""
    divisor = float(_number(doc["tokens"], "tokens")) if per_token else 1.0
    times = {"total": _number(doc["window_ns"], "window_ns") / divisor}
    ranges = {}
    phases = doc["phases"]
    if not isinstance(phases, Mapping):
        raise BadInputError(f"an analysis document's phases are not an object (got {phases!r})")
    for name, row in phases.items():
        if not isinstance(row, Mapping):
            raise BadInputError(f"an analysis document's phase {name} is not an object")
        times[name] = _number(row["wall_ns"], f"{name}.wall_ns") / divisor
        ranges[name] = _number(row.get("ranges") or 0, f"{name}.ranges") / divisor
    return times, ranges


def _stats(values: list[float]) -> tuple[float, float]:
    """(median, MAD) of *values*."""
    median = statistics.median(values)
    return median, statistics.median(abs(v - median) for v in values)


@dataclass(frozen=True)
class Gates:
    """The thresholds of a check (see the module docs)."""

    max_regression: float = DEFAULT_MAX_REGRESSION
    max_phase_regression: float = DEFAULT_MAX_PHASE_REGRESSION
    phase_floor: float = DEFAULT_PHASE_FLOOR


@dataclass(frozen=True)
class _Phase:
    """One phase on both sides: median time and its MAD, median range count."""

    name: str
    base: float
    base_mad: float
    cand: float
    cand_mad: float
    base_ranges: float
    cand_ranges: float

    @property
    def noise_ns(self) -> float:
        return NOISE_MADS * max(self.base_mad, self.cand_mad)

    @property
    def ranges_change(self) -> int:
        """+1 when its range count rose, -1 when it fell, 0 when it stayed (within
        :data:`RANGES_MOVED`): a rename or a rule change moves whole ranges."""
        most = max(self.base_ranges, self.cand_ranges)
        if most == 0 or abs(self.cand_ranges - self.base_ranges) <= RANGES_MOVED * most:
            return 0
        return 1 if self.cand_ranges > self.base_ranges else -1


def _phase_stats(name: str, mb: list[tuple[dict[str, float], dict[str, float]]],
                 mc: list[tuple[dict[str, float], dict[str, float]]]) -> _Phase:  # fmt: skip
    bm, bs = _stats([m[0].get(name, 0.0) for m in mb])
    cm, cs = _stats([m[0].get(name, 0.0) for m in mc])
    br = statistics.median([m[1].get(name, 0.0) for m in mb])
    cr = statistics.median([m[1].get(name, 0.0) for m in mc])
    return _Phase(name, bm, bs, cm, cs, br, cr)


def _moves(phases: list[_Phase], floor_ns: float) -> dict[tuple[str, str], float]:
    """Time that moved, ``(from, to) -> per-token (or per-run) time``: each phase that grew
    beyond its noise and the floor takes, largest first, from the phases that shrank as much,
    where the ranges moved the same way: the receiver gained ranges and the giver lost some,
    or is time outside every range (``unannotated``, ``unattributed_gpu``: newly annotated
    code). See the module docs."""

    def significant(delta: float, p: _Phase) -> bool:
        return delta > 0 and delta > p.noise_ns and delta >= floor_ns

    ups = sorted((p for p in phases if significant(p.cand - p.base, p) and p.ranges_change > 0),
                 key=lambda p: (p.base - p.cand, p.name))  # fmt: skip
    downs = sorted(
        (p for p in phases if significant(p.base - p.cand, p)
         and (p.ranges_change < 0 or p.name in RANGELESS)),
        key=lambda p: (p.cand - p.base, p.name),
    )  # fmt: skip
    left = {p.name: p.base - p.cand for p in downs}
    moves: dict[tuple[str, str], float] = {}
    for up in ups:
        need = up.cand - up.base
        for down in downs:
            moved = min(need, left[down.name])
            if moved <= 0:
                continue
            moves[(down.name, up.name)] = moved
            need -= moved
            left[down.name] -= moved
    return moves


class _Sides(TypedDict):
    baseline: float
    candidate: float


class _PhaseGates(TypedDict):
    total: bool
    phase: bool


class PhaseCheck(TypedDict):
    """One phase of a check group (:func:`_judge`; the moves are added after)."""

    phase: str
    baseline: float
    candidate: float
    share_of_baseline: float | None
    change_of_total: float
    change: float | None
    noise: float
    net_change_of_total: float
    net_change: float | None
    phase_gate_applies: bool
    ranges: _Sides
    gates: _PhaseGates
    regressed: bool
    moved_from: NotRequired[dict[str, float]]
    moved_to: NotRequired[dict[str, float]]


class TotalCheck(TypedDict):
    """The whole run's time of a check group: both sides' medians, the change and noise."""

    baseline: float
    candidate: float
    change: float
    noise: float
    regressed: bool


class Missing(TypedDict):
    """A baseline configuration without candidate runs."""

    labels: dict[str, str]
    baseline_runs: int


def _judge(p: _Phase, b_total: float, gates: Gates, moved_in: float, moved_out: float
           ) -> PhaseCheck:  # fmt: skip
    """The phase's row: its change, net of moved time, against the total and the phase gate."""
    own = p.base + moved_in  # moved-in time counts as the receiving phase's baseline
    net = (p.cand + moved_out) - own
    beyond_noise = net > p.noise_ns
    of_total = net / b_total if b_total else 0.0
    judged = b_total > 0 and max(own, p.cand) >= gates.phase_floor * b_total
    of_phase = (net / own if own else (math.inf if net > 0 else 0.0)) if judged else None
    total_gate = beyond_noise and of_total > gates.max_regression
    phase_gate = beyond_noise and of_phase is not None and of_phase > gates.max_phase_regression
    return {
        "phase": p.name,
        "baseline": p.base,
        "candidate": p.cand,
        "share_of_baseline": p.base / b_total if b_total else None,
        "change_of_total": (p.cand - p.base) / b_total if b_total else 0.0,
        "change": (p.cand / p.base - 1.0) if p.base else None,
        "noise": p.noise_ns / b_total if b_total else 0.0,
        "net_change_of_total": of_total,
        # null: below the floor, not judged by the phase gate; a new phase not moved from
        # another one (no baseline time) is null too in JSON, and counts as beyond the gate
        "net_change": of_phase if of_phase is None or math.isfinite(of_phase) else None,
        "phase_gate_applies": judged,
        "ranges": {"baseline": p.base_ranges, "candidate": p.cand_ranges},
        "gates": {"total": total_gate, "phase": phase_gate},
        "regressed": total_gate or phase_gate,
    }


@dataclass
class GroupResult:
    labels: dict[str, str]
    runs: dict[str, int]
    basis: str
    total: TotalCheck
    phases: list[PhaseCheck]

    @property
    def regressed(self) -> bool:
        return bool(self.total["regressed"]) or any(p["regressed"] for p in self.phases)


@dataclass
class CheckResult:
    baseline: str
    candidate: str
    max_regression: float
    gates: Gates = field(default_factory=Gates)
    allow_missing: bool = False
    groups: list[GroupResult] = field(default_factory=list)
    unmatched: list[dict[str, str]] = field(default_factory=list)
    missing: list[Missing] = field(default_factory=list)
    """Baseline configurations without candidate runs: ``{"labels": ..., "baseline_runs": n}``."""
    candidate_failed: dict[str, str] = field(default_factory=dict)
    """The candidate dataset's traces that failed in ``collect``, with their reasons."""
    data_warnings: tuple[str, ...] = ()
    """What the traces' checks said (the rules applied, data-quality notes): on stderr."""

    @property
    def regressed(self) -> bool:
        return any(g.regressed for g in self.groups)

    @property
    def failed(self) -> bool:
        """Whether the gate fails: a regression, or a configuration missing unless allowed."""
        return self.regressed or bool(self.missing and not self.allow_missing)

    def to_dict(self) -> dict[str, object]:
        return {
            "baseline": self.baseline,
            "candidate": self.candidate,
            "max_regression": self.max_regression,
            "max_phase_regression": self.gates.max_phase_regression,
            "phase_floor": self.gates.phase_floor,
            "noise_mads": NOISE_MADS,
            "allow_missing": self.allow_missing,
            "failed": self.failed,
            "regressed": self.regressed,
            "groups": [
                {
                    "labels": g.labels,
                    "runs": g.runs,
                    "basis": g.basis,
                    "regressed": g.regressed,
                    "total": g.total,
                    "phases": g.phases,
                    "moves": [
                        {"from": p["phase"], "to": to, "time": time}
                        for p in g.phases
                        for to, time in p.get("moved_to", {}).items()
                    ],
                }
                for g in self.groups
            ],
            "unmatched_candidate_groups": self.unmatched,
            "missing_candidate_groups": self.missing,
            "candidate_failed_in_collect": self.candidate_failed,
        }


def _compare(base: list[Run], cand: list[Run], gates: Gates) -> GroupResult:
    per_token = all(r.doc.get("tokens") for r in (*base, *cand))
    basis = "ns_per_output_token" if per_token else "ns_per_run (assumes the same work)"
    mb = [_measure(r.doc, per_token) for r in base]
    mc = [_measure(r.doc, per_token) for r in cand]
    b_total, b_mad = _stats([m[0]["total"] for m in mb])
    c_total, c_mad = _stats([m[0]["total"] for m in mc])
    change = c_total / b_total - 1.0 if b_total else 0.0
    noise = NOISE_MADS * max(b_mad, c_mad) / b_total if b_total else 0.0
    total: TotalCheck = {
        "baseline": b_total,
        "candidate": c_total,
        "change": change,
        "noise": noise,
        "regressed": change > gates.max_regression and change > noise,
    }
    names = sorted({n for m in (*mb, *mc) for n in m[0]} - {"total"})
    stats = [_phase_stats(name, mb, mc) for name in names]
    moves = _moves(stats, gates.phase_floor * b_total)
    phases: list[PhaseCheck] = []
    for p in stats:
        moved_from = {src: ns for (src, dst), ns in moves.items() if dst == p.name}
        moved_to = {dst: ns for (src, dst), ns in moves.items() if src == p.name}
        row = _judge(p, b_total, gates, sum(moved_from.values()), sum(moved_to.values()))
        row["moved_from"], row["moved_to"] = moved_from, moved_to
        phases.append(row)
    phases.sort(key=lambda p: -abs(p["change_of_total"]))
    return GroupResult({}, {"baseline": len(base), "candidate": len(cand)}, basis, total, phases)


def check(
    baseline: str | Path,
    candidate: str | Path,
    *,
    max_regression: float = DEFAULT_MAX_REGRESSION,
    max_phase_regression: float = DEFAULT_MAX_PHASE_REGRESSION,
    phase_floor: float = DEFAULT_PHASE_FLOOR,
    allow_missing: bool = False,
    rules: str | None = None,
    use_cache: bool = True,
) -> CheckResult:
    """Compare *candidate* with *baseline* (see the module docs)."""
    base_runs, _ = _runs_of(baseline, rules, use_cache)
    cand_runs, cand_failed = _runs_of(candidate, rules, use_cache)
    notes = dict.fromkeys(w for r in (*base_runs, *cand_runs) for w in r.data_warnings)
    gates = Gates(max_regression, max_phase_regression, phase_floor)
    result = CheckResult(str(baseline), str(candidate), max_regression, gates, allow_missing,
                         candidate_failed=cand_failed, data_warnings=tuple(notes))  # fmt: skip
    single = len({r.key() for r in base_runs}) == 1 and len({r.key() for r in cand_runs}) == 1
    groups: dict[tuple[tuple[str, str], ...], tuple[list[Run], list[Run]]] = {}
    for run in base_runs:
        groups.setdefault(() if single else run.key(), ([], []))[0].append(run)
    for run in cand_runs:
        key = () if single else run.key()
        if key not in groups:
            result.unmatched.append(dict(key))
            continue
        groups[key][1].append(run)
    for key, (base, cand) in sorted(groups.items()):
        if not cand:
            result.missing.append({"labels": dict(key), "baseline_runs": len(base)})
            continue
        group = _compare(base, cand, gates)
        group.labels = dict(key)
        result.groups.append(group)
    if not result.groups:
        raise BadInputError(
            "no configuration of the candidate matches one of the baseline (runs are matched by "
            f"their labels except {', '.join(REPEAT_LABELS)})"
        )
    return result


def _where(labels: dict[str, str]) -> str:
    return ", ".join(f"{k}={v}" for k, v in labels.items()) or "all runs"


def _phase_line(p: PhaseCheck, unit: str, gates: Gates) -> str | None:
    """The line of one phase: regressed (with both gates), moved, or a large change; None
    for a phase that did not move beyond the gates."""
    head = f"  {p['phase']}: {p['baseline']:,.0f} -> {p['candidate']:,.0f} {unit}"
    moves = [f"moved from {n} ({ns:,.0f} {unit})" for n, ns in p.get("moved_from", {}).items()]
    moves += [f"moved to {n} ({ns:,.0f} {unit})" for n, ns in p.get("moved_to", {}).items()]
    own = p["net_change"]
    own_text = (
        "below the phase floor"
        if not p["phase_gate_applies"]
        else "a new phase" if own is None else f"{own:+.1%} of its baseline"
    )
    gates_text = (
        f"{own_text} (phase gate {gates.max_phase_regression:.1%}), "
        f"{p['net_change_of_total']:+.1%} of the total (total gate {gates.max_regression:.1%}), "
        f"noise {p['noise']:.1%}"
    )
    if p["regressed"]:
        moved = f"{'; '.join(moves)}; beyond the moved time: " if moves else ""
        return f"{head}: {moved}{gates_text}; regressed"
    if moves:
        kind = "renamed or re-ruled, not a regression"
        return f"{head}: {'; '.join(moves)} (the ranges moved too: {kind})"
    big_total = abs(p["change_of_total"]) > gates.max_regression
    big_own = p["phase_gate_applies"] and own is not None and abs(own) > gates.max_phase_regression
    if not (big_total or big_own):
        return None
    tag = "within noise" if p["net_change_of_total"] > 0 else "improved"
    return f"{head}: {gates_text}; {tag}"


def render_check_text(result: CheckResult) -> str:
    """One verdict line per group, then the phases that regressed, moved, or changed beyond a
    gate; then the configurations without candidates."""
    lines = []
    gates = result.gates
    for g in result.groups:
        t = g.total
        unit = "ns/token" if g.basis.startswith("ns_per_output") else "ns/run"
        verdict = "REGRESSION" if g.regressed else "ok"
        lines.append(
            f"{verdict}: {_where(g.labels)} ({g.runs['baseline']} vs {g.runs['candidate']} "
            f"run(s)): total {t['baseline']:,.0f} -> {t['candidate']:,.0f} {unit} "
            f"({t['change']:+.1%}; tolerance {result.max_regression:.1%}, noise {t['noise']:.1%}; "
            f"phases: {gates.max_phase_regression:.1%} of their own time from "
            f"{gates.phase_floor:.1%} of the total)"
        )
        lines += [line for p in g.phases if (line := _phase_line(p, unit, gates)) is not None]
    verdict = "note" if result.allow_missing else "MISSING"
    for m in result.missing:
        lines.append(
            f"{verdict}: {_where(m['labels'])}: no candidate runs ({m['baseline_runs']} baseline "
            "run(s)); " + ("allowed by --allow-missing" if result.allow_missing
                           else "not checked: the gate fails (--allow-missing to pass)")
        )  # fmt: skip
    if result.missing and result.candidate_failed:
        listed = [f"{t} ({why})" for t, why in sorted(result.candidate_failed.items())]
        lines.append(
            f"note: the candidate's collect failed on {len(listed)} trace(s): "
            + "; ".join(listed[:5]) + ("; ..." if len(listed) > 5 else "")
        )
    for labels in result.unmatched:
        lines.append(f"note: no baseline runs with labels {labels}; not checked")
    return "\n".join(lines)
