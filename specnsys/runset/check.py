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
* a phase regressed when its growth, as a fraction of the baseline's total (so phases add
  up to the total's change), exceeds ``max_regression`` and its noise band.

The noise band of a measure is ``NOISE_MADS`` times the larger relative MAD of the two sides
(zero with one run per side): with repeats, a change inside the runs' own scatter is reported
as noise, not as a regression. Exit status 1 when anything regressed.
"""

from __future__ import annotations

import json
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specnsys.errors import BadInputError, UsageError

__all__ = ["NOISE_MADS", "CheckResult", "check", "parse_tolerance"]

NOISE_MADS = 3.0
"""How many relative MADs of the noisier side a change must exceed to count."""
#: Labels that vary between repeats of one configuration (not part of a group's key).
REPEAT_LABELS = ("repeat", "commit")
_TOLERANCE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(%?)\s*$")


def parse_tolerance(text: str) -> float:
    """``5%`` or ``0.05`` as the fraction 0.05 (a bare number must be below 1)."""
    m = _TOLERANCE.match(text)
    if m is None:
        raise UsageError(f"--max-regression {text!r}: write it as a percentage (5%) or a fraction")
    value = float(m.group(1)) / (100 if m.group(2) else 1)
    if not m.group(2) and value >= 1:
        raise UsageError(f"--max-regression {text!r}: a fraction below 1, or a percentage (5%)")
    if not 0 <= value < 10:
        raise UsageError(f"--max-regression {text!r} is out of range")
    return value


@dataclass(frozen=True)
class Run:
    """One run: its labels, its analyze document and where it came from."""

    source: str
    labels: dict[str, str]
    doc: dict[str, Any]
    data_warnings: tuple[str, ...] = ()

    def key(self) -> tuple[tuple[str, str], ...]:
        return tuple(sorted((k, v) for k, v in self.labels.items() if k not in REPEAT_LABELS))


def _runs_of(path: str | Path, rules: str | None, use_cache: bool) -> list[Run]:
    from specnsys.runset.dataset import LABEL_PREFIX, is_dataset

    path = Path(path)
    if is_dataset(path):
        import polars as pl

        runs = pl.scan_parquet(path / "runs").collect()
        out = []
        for row in runs.iter_rows(named=True):
            labels = {
                k[len(LABEL_PREFIX) :]: v
                for k, v in row.items()
                if k.startswith(LABEL_PREFIX) and v is not None
            }
            out.append(Run(row["trace"], labels, json.loads(row["analysis_json"])))
        if not out:
            raise BadInputError(f"{path}: the dataset holds no runs")
        return out
    from specnsys import api

    analysis = api.analyze(path, rules=rules, use_cache=use_cache)
    return [Run(str(path), {}, analysis.to_dict(), analysis.data_warnings)]


def _measure(doc: dict[str, Any], per_token: bool) -> dict[str, float]:
    """``total`` and each phase's exclusive wall time, per output token or per run."""
    divisor = float(doc["tokens"]) if per_token else 1.0
    out = {"total": doc["window_ns"] / divisor}
    for name, row in doc["phases"].items():
        out[name] = row["wall_ns"] / divisor
    return out


def _stats(values: list[float]) -> tuple[float, float]:
    """(median, MAD) of *values*."""
    median = statistics.median(values)
    return median, statistics.median(abs(v - median) for v in values)


@dataclass
class GroupResult:
    labels: dict[str, str]
    runs: dict[str, int]
    basis: str
    total: dict[str, Any]
    phases: list[dict[str, Any]]

    @property
    def regressed(self) -> bool:
        return bool(self.total["regressed"]) or any(p["regressed"] for p in self.phases)


@dataclass
class CheckResult:
    baseline: str
    candidate: str
    max_regression: float
    groups: list[GroupResult] = field(default_factory=list)
    unmatched: list[dict[str, str]] = field(default_factory=list)
    data_warnings: tuple[str, ...] = ()
    """What the traces' checks said (the rules applied, data-quality notes): on stderr."""

    @property
    def regressed(self) -> bool:
        return any(g.regressed for g in self.groups)

    def to_dict(self) -> dict[str, Any]:
        return {
            "baseline": self.baseline,
            "candidate": self.candidate,
            "max_regression": self.max_regression,
            "noise_mads": NOISE_MADS,
            "regressed": self.regressed,
            "groups": [
                {
                    "labels": g.labels,
                    "runs": g.runs,
                    "basis": g.basis,
                    "regressed": g.regressed,
                    "total": g.total,
                    "phases": g.phases,
                }
                for g in self.groups
            ],
            "unmatched_candidate_groups": self.unmatched,
        }


def _compare(base: list[Run], cand: list[Run], tolerance: float) -> GroupResult:
    per_token = all(r.doc.get("tokens") for r in (*base, *cand))
    basis = "ns_per_output_token" if per_token else "ns_per_run (assumes the same work)"
    mb = [_measure(r.doc, per_token) for r in base]
    mc = [_measure(r.doc, per_token) for r in cand]
    b_total, b_mad = _stats([m["total"] for m in mb])
    c_total, c_mad = _stats([m["total"] for m in mc])

    def band(b_spread: float, c_spread: float) -> float:
        """The noise band of a measure whose MADs are given, as a fraction of the total."""
        return NOISE_MADS * max(b_spread, c_spread) / b_total if b_total else 0.0

    change = c_total / b_total - 1.0 if b_total else 0.0
    noise = band(b_mad, c_mad)
    total = {
        "baseline": b_total,
        "candidate": c_total,
        "change": change,
        "noise": noise,
        "regressed": change > tolerance and change > noise,
    }
    names = sorted({n for m in (*mb, *mc) for n in m} - {"total"})
    phases: list[dict[str, Any]] = []
    for name in names:
        bm, bs = _stats([m.get(name, 0.0) for m in mb])
        cm, cs = _stats([m.get(name, 0.0) for m in mc])
        growth = (cm - bm) / b_total if b_total else 0.0
        phase_noise = band(bs, cs)
        phases.append(
            {
                "phase": name,
                "baseline": bm,
                "candidate": cm,
                "change_of_total": growth,
                "change": (cm / bm - 1.0) if bm else None,
                "noise": phase_noise,
                "regressed": growth > tolerance and growth > phase_noise,
            }
        )
    phases.sort(key=lambda p: -abs(p["change_of_total"]))
    return GroupResult({}, {"baseline": len(base), "candidate": len(cand)}, basis, total, phases)


def check(
    baseline: str | Path,
    candidate: str | Path,
    *,
    max_regression: float = 0.05,
    rules: str | None = None,
    use_cache: bool = True,
) -> CheckResult:
    """Compare *candidate* with *baseline* (see the module docs)."""
    base_runs = _runs_of(baseline, rules, use_cache)
    cand_runs = _runs_of(candidate, rules, use_cache)
    notes = dict.fromkeys(w for r in (*base_runs, *cand_runs) for w in r.data_warnings)
    result = CheckResult(str(baseline), str(candidate), max_regression, data_warnings=tuple(notes))
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
            continue
        group = _compare(base, cand, max_regression)
        group.labels = dict(key)
        result.groups.append(group)
    if not result.groups:
        raise BadInputError(
            "no configuration of the candidate matches one of the baseline (runs are matched by "
            f"their labels except {', '.join(REPEAT_LABELS)})"
        )
    return result


def render_check_text(result: CheckResult) -> str:
    """One verdict line per group, then the phases that moved beyond the tolerance or noise."""
    lines = []
    for g in result.groups:
        where = ", ".join(f"{k}={v}" for k, v in g.labels.items()) or "all runs"
        t = g.total
        unit = "ns/token" if g.basis.startswith("ns_per_output") else "ns/run"
        verdict = "REGRESSION" if g.regressed else "ok"
        lines.append(
            f"{verdict}: {where} ({g.runs['baseline']} vs {g.runs['candidate']} run(s)): total "
            f"{t['baseline']:,.0f} -> {t['candidate']:,.0f} {unit} ({t['change']:+.1%}; "
            f"tolerance {result.max_regression:.1%}, noise {t['noise']:.1%})"
        )
        for p in g.phases:
            moved = abs(p["change_of_total"]) > result.max_regression
            if not (p["regressed"] or moved):
                continue
            tag = "regressed" if p["regressed"] else (
                "within noise" if p["change_of_total"] > 0 else "improved")
            lines.append(
                f"  {p['phase']}: {p['baseline']:,.0f} -> {p['candidate']:,.0f} {unit} "
                f"({p['change_of_total']:+.1%} of the total; {tag})"
            )
    for labels in result.unmatched:
        lines.append(f"note: no baseline runs with labels {labels}; not checked")
    return "\n".join(lines)
