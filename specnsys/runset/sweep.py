"""``sweep DATASET [--by k,concurrency]``: a collected sweep as cells, medians over repeats.

**Runs.** Each row of the dataset's ``runs`` table is one run; its labels are the ``label_*``
columns, and ``k``, when no label gives it, is the k of the run's own proposed marks. A run is
a **baseline** when its analysis mode is ``baseline`` or its label ``k`` is 0, **speculative**
when its analysis mode is ``spec`` (and k is not 0); other runs are listed, never paired.

**Pairs.** Each speculative run is compared with the baseline runs that carry the same labels
except ``k``, ``mode``, ``repeat`` and ``commit`` (:data:`SPEC_AXES`, :data:`REPEAT_LABELS`):
the baseline of the same model, workload, concurrency, ... A baseline run with the same
``repeat`` label is its pair when there is one (repeats captured together), else every
baseline run of that configuration is. One pair's numbers are
:func:`specnsys.metrics.comparison.compare_runs` of the two analyses, rebuilt from the
``analysis_json`` the dataset stores (exactly ``specnsys compare`` on the two traces): ``p``,
``r``, predicted and measured speedup and ``gap`` = measured / predicted - 1.

**Cells.** Runs are grouped by their ``--by`` labels (default: every label but ``repeat`` and
``commit``). A cell's numbers are the median over its pairs, its spread the median absolute
deviation (MAD) over the same pairs; ``per_token_ns`` over its runs. A cell is **noisy** when
the relative MAD (MAD / median) of its measured speedup or per-token time exceeds
:data:`NOISY_RELATIVE_MAD`: flagged in the table, never dropped. With a single pair the spread
is unknown (``noisy`` is null).

**Crossover and best k** (when ``k`` and ``concurrency`` are among ``--by``): per k (and the
other ``--by`` labels), the lowest concurrency whose median measured speedup is below 1 --
where speculation stops paying -- with a linear interpolation of the speedup between it and
the concurrency before it; per concurrency, the k of the highest median measured speedup, and
the other k within the noise of it (:data:`~specnsys.runset.check.NOISE_MADS` MADs).

**Cost model**: :mod:`specnsys.runset.cost_model`, over the ``steps`` table.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict

import polars as pl

from specnsys.errors import BadInputError, UsageError
from specnsys.metrics import registry
from specnsys.metrics.analysis import Analysis
from specnsys.metrics.comparison import Comparison, compare_runs
from specnsys.runset.check import NOISE_MADS, REPEAT_LABELS
from specnsys.runset.check import _stats as median_mad
from specnsys.runset.cost_model import (
    FAMILY_EXCLUDED,
    CostModel,
    Fit,
    StepRun,
    cost_model,
    step_points,
)
from specnsys.runset.dataset import LABEL_PREFIX, is_dataset

if TYPE_CHECKING:
    from specnsys.results import JSONValue

__all__ = [
    "NOISY_RELATIVE_MAD",
    "SPEC_AXES",
    "SweepResult",
    "analysis_from_doc",
    "render_sweep_text",
    "sweep",
]

NOISY_RELATIVE_MAD = 0.05
"""A cell is noisy above this relative MAD. For normal scatter the standard deviation is about
1.48 MAD, so at 5% one run scatters by about 7%: more than ``check``'s default 5% regression
tolerance and more than the speedup difference between neighbouring k in the samples, so such
a cell cannot rank k or place the crossover by itself."""

SPEC_AXES = ("k", "mode")
"""Labels in which a speculative run differs from its baseline."""

METRICS = ("p", "r", "predicted_speedup", "measured_speedup", "gap")

Key = tuple[tuple[str, str], ...]


class Stat(TypedDict):
    """Median, median absolute deviation and count of a cell's values (None without any)."""

    median: float | None
    mad: float | None
    n: int


class PairRow(TypedDict):
    """One (baseline, spec) pair of the sweep: its compare figures."""

    baseline: str
    spec: str
    labels: dict[str, str]
    p: float | None
    r: float | None
    predicted_speedup: float | None
    measured_speedup: float | None
    gap: float | None
    speedup_basis: str | None
    verify_to_forward_ratio: float | None
    not_available: dict[str, str]


class Cell(TypedDict):
    """The runs of one set of ``--by`` labels: their per-token time and, for speculative
    cells, the medians of the pairs' compare figures (:data:`METRICS`)."""

    labels: dict[str, str]
    role: str
    runs: int
    pairs: int
    per_token_ns: Stat
    p: NotRequired[Stat]
    r: NotRequired[Stat]
    predicted_speedup: NotRequired[Stat]
    measured_speedup: NotRequired[Stat]
    gap: NotRequired[Stat]
    relative_mad: dict[str, float | None]
    noisy: bool | None


class CrossoverPoint(TypedDict):
    concurrency: str
    measured_speedup: float
    noisy: bool | None


class Crossover(TypedDict):
    """Where speculation stops paying along concurrency, for one set of the other labels."""

    labels: dict[str, str]
    points: list[CrossoverPoint]
    stops_paying_at: str | None
    interpolated: float | None
    status: str


class BestK(TypedDict):
    """The k with the highest median measured speedup, for one set of the other labels."""

    labels: dict[str, str]
    best_k: str
    measured_speedup: float | None
    beats_baseline: bool
    within_noise: list[str]
    candidates: dict[str, float | None]


def analysis_from_doc(doc: dict[str, JSONValue]) -> Analysis:
    """The :class:`Analysis` whose ``to_dict()`` is *doc* (a dataset's ``analysis_json``)."""
    names = [f.name for f in fields(Analysis) if f.init and f.name not in ("breakdown",)]
    # JSON back into the fields: the constructor and the fields' own readers are the check
    # (a document from another version fails here, or where a field is read)
    values: dict[str, Any] = {n: doc[n] for n in names if n in doc}
    # the registered metrics' payloads are top-level keys of the document (Analysis.to_dict)
    values["metrics"] = {k: doc[k] for k in registry.metric_keys() if k in doc}
    try:
        return Analysis(**values)
    except TypeError as exc:
        raise BadInputError(f"an analysis in the dataset cannot be read back ({exc})") from None


@dataclass
class SweepRun:
    """One run of the dataset: its labels (``k`` filled in from its marks when unlabelled),
    analysis document and role."""

    run_id: str
    trace: str
    labels: dict[str, str]
    doc: dict[str, JSONValue]
    role: str
    _analysis: Analysis | None = None

    @property
    def analysis(self) -> Analysis:
        if self._analysis is None:
            self._analysis = analysis_from_doc(self.doc)
        return self._analysis

    def key(self, names: Sequence[str]) -> Key:
        return tuple((n, self.labels[n]) for n in names if self.labels.get(n) is not None)

    def without(self, excluded: Sequence[str]) -> Key:
        return tuple(sorted((n, v) for n, v in self.labels.items() if n not in excluded))

    @property
    def k(self) -> int | None:
        value = _number(self.labels.get("k"))
        return None if value is None else int(value)


def _json_number(value: JSONValue) -> float | None:
    """*value* when it is a JSON number (not a boolean), else None."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value
    return None


def _number(value: str | None) -> float | None:
    try:
        return None if value is None else float(value)
    except ValueError:
        return None


def _order(value: str | None) -> tuple[int, float, str]:
    """Numbers in numeric order, then other text, then missing."""
    n = _number(value)
    if n is not None:
        return (0, n, "")
    return (1, 0.0, value) if value is not None else (2, 0.0, "")


def _role(doc: dict[str, JSONValue], labels: dict[str, str]) -> str:
    if doc.get("mode") == "baseline" or _number(labels.get("k")) == 0:
        return "baseline"
    return "spec" if doc.get("mode") == "spec" else "other"


def load_runs(root: Path) -> list[SweepRun]:
    """The runs of the dataset at *root*."""
    if not is_dataset(root):
        raise BadInputError(f"{root}: not a dataset written by specnsys collect")
    if not any((root / "runs").glob("run_id=*/*.parquet")):
        raise BadInputError(f"{root}: the dataset holds no runs")
    frame = pl.scan_parquet(root / "runs").collect()
    out = []
    for row in frame.sort("run_id").iter_rows(named=True):
        labels = {
            k[len(LABEL_PREFIX) :]: str(v)
            for k, v in row.items()
            if k.startswith(LABEL_PREFIX) and v is not None and str(v) != ""
        }
        doc: JSONValue = json.loads(row["analysis_json"])
        if not isinstance(doc, dict):
            raise BadInputError(f"{root}: run {row['run_id']}: its analysis is not a JSON object")
        if "k" not in labels and doc.get("k") is not None:
            labels["k"] = str(doc["k"])
        out.append(SweepRun(row["run_id"], row["trace"], labels, doc, _role(doc, labels)))
    return out


def _pairs(runs: list[SweepRun]) -> tuple[list[tuple[SweepRun, SweepRun]], dict[str, str]]:
    """(baseline, spec) pairs (see the module docs) and the speculative runs left unpaired."""
    baselines: dict[Key, list[SweepRun]] = {}
    for run in runs:
        if run.role == "baseline":
            baselines.setdefault(run.without((*SPEC_AXES, *REPEAT_LABELS)), []).append(run)
    pairs: list[tuple[SweepRun, SweepRun]] = []
    unpaired: dict[str, str] = {}
    for run in runs:
        if run.role != "spec":
            continue
        group = baselines.get(run.without((*SPEC_AXES, *REPEAT_LABELS)), [])
        if not group:
            unpaired[run.trace] = (
                "no baseline run with the same labels except "
                f"{', '.join((*SPEC_AXES, *REPEAT_LABELS))}"
            )
            continue
        repeat = run.labels.get("repeat")
        same = [b for b in group if repeat is not None and b.labels.get("repeat") == repeat]
        pairs += [(b, run) for b in (same or group)]
    return pairs, unpaired


def _summary(values: list[float | None]) -> Stat:
    """Median, MAD and count of the non-null *values* (nulls when there are none)."""
    present = [float(v) for v in values if v is not None]
    if not present:
        return {"median": None, "mad": None, "n": 0}
    median, mad = median_mad(present)
    return {"median": median, "mad": mad, "n": len(present)}


def _relative_mad(stat: Stat) -> float | None:
    if stat["n"] < 2 or not stat["median"]:
        return None
    return float(stat["mad"] or 0.0) / abs(float(stat["median"]))


@dataclass
class SweepResult:
    dataset: str
    by: list[str]
    runs: int
    cells: list[Cell] = field(default_factory=list)
    pairs: list[PairRow] = field(default_factory=list)
    crossover: list[Crossover] = field(default_factory=list)
    best_k: list[BestK] = field(default_factory=list)
    cost_model: CostModel = field(default_factory=lambda: CostModel())
    unpaired: dict[str, str] = field(default_factory=dict)
    not_available: dict[str, str] = field(default_factory=dict)
    threshold: float = NOISY_RELATIVE_MAD

    def to_dict(self) -> dict[str, object]:
        return {
            "dataset": self.dataset,
            "by": self.by,
            "runs": self.runs,
            "noisy_relative_mad": self.threshold,
            "baseline_rule": "analysis mode 'baseline' or label k = 0; paired on every label "
            f"except {', '.join((*SPEC_AXES, *REPEAT_LABELS))}",
            "speedup_definitions": {
                "measured_speedup": "baseline / spec time per output token (compare)",
                "predicted_speedup": "1 / ((1 - p) + p / r) (compare)",
                "gap": "measured_speedup / predicted_speedup - 1",
                "cell": "median over the cell's pairs; spread: median absolute deviation",
            },
            "cells": self.cells,
            "crossover": self.crossover,
            "best_k": self.best_k,
            "cost_model": self.cost_model,
            "pairs": self.pairs,
            "unpaired_spec_runs": self.unpaired,
            "not_available": self.not_available,
        }


def _pair_row(b: SweepRun, s: SweepRun, c: Comparison) -> PairRow:
    """The pair's figures of ``compare --json`` (those of :data:`METRICS` first)."""
    return {
        "baseline": b.trace,
        "spec": s.trace,
        "labels": s.labels,
        "p": c.p,
        "r": c.r,
        "predicted_speedup": c.predicted_speedup,
        "measured_speedup": c.measured_speedup,
        "gap": c.gap,
        "speedup_basis": c.speedup_basis,
        "verify_to_forward_ratio": c.verify_to_forward_ratio,
        "not_available": dict(c.not_available),
    }


def sweep(
    dataset: str | Path,
    *,
    by: Sequence[str] | None = None,
    threshold: float = NOISY_RELATIVE_MAD,
    cost: bool = True,
) -> SweepResult:
    """The sweep of *dataset* (see the module docs)."""
    root = Path(dataset)
    runs = load_runs(root)
    names = sorted({n for r in runs for n in r.labels})
    if by is None:
        axes = [n for n in names if n not in REPEAT_LABELS]
    else:
        axes = list(dict.fromkeys(by))
        unknown = [n for n in axes if n not in names]
        if unknown:
            raise UsageError(
                f"--by {','.join(unknown)}: no such label in {root} (labels: "
                f"{', '.join(names) or 'none'})"
            )
    result = SweepResult(str(root), axes, len(runs), threshold=threshold)
    pairs, result.unpaired = _pairs(runs)
    comparisons: dict[tuple[str, str], PairRow] = {}
    for b, s in pairs:
        try:
            row = _pair_row(b, s, compare_runs(b.analysis, s.analysis))
        except BadInputError as exc:
            result.unpaired[s.trace] = str(exc)
            continue
        comparisons[(b.run_id, s.run_id)] = row
        result.pairs.append(row)
    cells: dict[Key, list[SweepRun]] = {}
    for run in runs:
        cells.setdefault(run.key(axes), []).append(run)
    for key in sorted(cells, key=lambda k: [_order(dict(k).get(a)) for a in axes]):
        members = cells[key]
        ids = {r.run_id for r in members}
        rows = [row for (b, s), row in comparisons.items() if s in ids]
        result.cells.append(_cell(dict(key), members, rows, threshold))
    _crossover(result, axes)
    _best_k(result, axes)
    if cost:
        result.cost_model = _cost(root, runs)
    return result


def _cell(
    labels: dict[str, str], members: list[SweepRun], rows: list[PairRow], threshold: float
) -> Cell:
    roles = sorted({r.role for r in members})
    role = "spec" if "spec" in roles else roles[0]
    own = [r for r in members if r.role == role]
    per_token = _summary([_json_number(r.doc.get("per_token_ns")) for r in own])
    spreads = {"per_token_ns": _relative_mad(per_token)}
    if role != "spec":
        known = [v for v in spreads.values() if v is not None]
        return {"labels": labels, "role": role, "runs": len(own), "pairs": len(rows),
                "per_token_ns": per_token, "relative_mad": spreads,
                "noisy": None if not known else max(known) > threshold}  # fmt: skip
    measured = _summary([row["measured_speedup"] for row in rows])
    spreads["measured_speedup"] = _relative_mad(measured)
    known = [v for v in spreads.values() if v is not None]
    return {
        "labels": labels,
        "role": role,
        "runs": len(own),
        "pairs": len(rows),
        "per_token_ns": per_token,
        "p": _summary([row["p"] for row in rows]),
        "r": _summary([row["r"] for row in rows]),
        "predicted_speedup": _summary([row["predicted_speedup"] for row in rows]),
        "measured_speedup": measured,
        "gap": _summary([row["gap"] for row in rows]),
        "relative_mad": spreads,
        "noisy": None if not known else max(known) > threshold,
    }


def _measured(cell: Cell) -> float | None:
    """The median measured speedup of a speculative *cell* (None without one)."""
    stat = cell.get("measured_speedup")
    return None if stat is None else stat["median"]


def _groups(result: SweepResult, axes: Sequence[str], vary: str) -> dict[Key, list[Cell]]:
    """Speculative cells with a measured speedup, grouped by every ``--by`` label but *vary*."""
    out: dict[Key, list[Cell]] = {}
    for cell in result.cells:
        if cell["role"] != "spec" or _measured(cell) is None:
            continue
        if vary not in cell["labels"]:
            continue
        key = tuple((a, cell["labels"].get(a, "")) for a in axes if a != vary)
        out.setdefault(key, []).append(cell)
    return out


def _crossover(result: SweepResult, axes: Sequence[str]) -> None:
    if "concurrency" not in axes or "k" not in axes:
        result.not_available["crossover"] = "needs k and concurrency among --by"
        result.not_available["best_k"] = "needs k and concurrency among --by"
        return
    for key, cells in sorted(_groups(result, axes, "concurrency").items()):
        points = sorted(
            ((c["labels"]["concurrency"], m, c["noisy"])
             for c in cells if (m := _measured(c)) is not None), key=lambda t: _order(t[0]),
        )  # fmt: skip
        below = next((i for i, p in enumerate(points) if p[1] < 1.0), None)
        stops: str | None = None
        interpolated: float | None = None
        if below is None:
            status = "pays at every measured concurrency"
        elif below == 0:
            status = "never pays at the measured concurrencies"
            stops = points[0][0]
        else:
            status = "stops paying"
            stops = points[below][0]
            c0, m0 = _number(points[below - 1][0]), points[below - 1][1]
            c1, m1 = _number(points[below][0]), points[below][1]
            if c0 is not None and c1 is not None and m0 != m1:
                interpolated = c0 + (m0 - 1.0) * (c1 - c0) / (m0 - m1)
        if below is not None and any(m >= 1.0 for _, m, _ in points[below:]):
            status += " (not monotone: pays again at a higher concurrency)"
        result.crossover.append(
            {
                "labels": dict(key),
                "points": [
                    {"concurrency": c, "measured_speedup": m, "noisy": n} for c, m, n in points
                ],
                "stops_paying_at": stops,
                "interpolated": interpolated,
                "status": status,
            }
        )


def _best_k(result: SweepResult, axes: Sequence[str]) -> None:
    if "concurrency" not in axes or "k" not in axes:
        return
    groups = _groups(result, axes, "k")
    order = sorted(groups, key=lambda key: [_order(v) for _, v in key])
    for key in order:
        cells = sorted(groups[key], key=lambda c: _order(c["labels"]["k"]))
        # every cell of a group has a measured speedup (_groups)
        best = max(cells, key=lambda c: _measured(c) or 0.0)
        top = best.get("measured_speedup") or _summary([])

        def tied(c: Cell, top: Stat = top) -> bool:
            m = c.get("measured_speedup") or _summary([])
            band = NOISE_MADS * max(float(top["mad"] or 0), float(m["mad"] or 0))
            return float(top["median"] or 0.0) - float(m["median"] or 0.0) <= band

        result.best_k.append(
            {
                "labels": dict(key),
                "best_k": best["labels"]["k"],
                "measured_speedup": top["median"],
                "beats_baseline": (top["median"] or 0.0) > 1.0,
                "within_noise": [c["labels"]["k"] for c in cells if c is not best and tied(c)],
                "candidates": {c["labels"]["k"]: _measured(c) for c in cells},
            }
        )


def _cost(root: Path, runs: list[SweepRun]) -> CostModel:
    if not any((root / "steps").glob("run_id=*/*.parquet")):
        return {"not_available": {"cost_model": "the dataset has no steps table"}}
    steps = pl.scan_parquet(root / "steps").collect()
    return cost_model(steps, step_runs(runs))


def step_runs(runs: list[SweepRun]) -> list[StepRun]:
    """The cost model's view of *runs*."""
    return [
        StepRun(
            run_id=r.run_id,
            role=r.role,
            k=r.k,
            family=r.without(FAMILY_EXCLUDED),
            match=r.without((*SPEC_AXES, *REPEAT_LABELS)),
            cell=r.without(REPEAT_LABELS),
        )
        for r in runs
    ]


def verify_cost_points(dataset: str | Path) -> dict[str, object]:
    """What the verify-cost figure draws: the steps' (positions, verify_ns) and the baselines'
    (batch, forward_ns), per family, with the fitted lines (see :mod:`cost_model`)."""
    root = Path(dataset)
    runs = load_runs(root)
    if not any((root / "steps").glob("run_id=*/*.parquet")):
        raise BadInputError(f"{root}: the dataset has no steps table")
    steps = pl.scan_parquet(root / "steps").collect()
    views = step_runs(runs)
    points = step_points(steps, views)
    model = cost_model(steps, views)
    families = []
    for fam in model.get("families", []):
        key = json.dumps(tuple(sorted(fam["labels"].items())))
        own = points.filter(pl.col("family") == key)
        spec = own.filter((pl.col("role") == "spec") & (pl.col("verify_ns") > 0)
                          & pl.col("positions").is_not_null())  # fmt: skip
        base = own.filter((pl.col("role") == "baseline") & (pl.col("forward_ns") > 0)
                          & pl.col("batch").is_not_null())  # fmt: skip
        families.append(
            {
                "labels": fam["labels"],
                "verify": {
                    "positions": spec["positions"].to_list(),
                    "verify_ns": spec["verify_ns"].to_list(),
                    "k": spec["k"].to_list(),
                },
                "baseline": {
                    "batch": base["batch"].to_list(),
                    "forward_ns": base["forward_ns"].to_list(),
                },
                "verify_fit": fam["verify_fit"],
                "baseline_forward_fit": fam["baseline_forward_fit"],
            }
        )
    return {"dataset": str(root), "families": families, "not_available": model.get("not_available", {})}


# ---------------------------------------------------------------------------------------------
# text


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _stat(stat: Stat | None, spec: str) -> str:
    if not stat or stat["median"] is None:
        return "-"
    text = format(stat["median"], spec)
    return text if stat["n"] < 2 else f"{text}±{format(stat['mad'], spec)}"


def _labels(labels: dict[str, str]) -> str:
    return ", ".join(f"{k}={v}" for k, v in labels.items()) or "all runs"


def render_sweep_text(result: SweepResult) -> str:
    """The sweep as text: the cells, the crossover, the best k, the cost model."""
    lines = [
        f"sweep of {result.dataset}: {result.runs} runs, cells by {', '.join(result.by) or '-'}",
        "speedup = baseline / spec time per output token (compare); median over pairs ±MAD; "
        f"noisy: relative MAD > {result.threshold:.0%}",
        "",
    ]
    header = [*result.by, "runs", "pairs", "ns/token", "p", "r", "predicted", "measured",
              "gap", "note"]  # fmt: skip
    table = [header]
    for c in result.cells:
        note = {True: "NOISY", False: "", None: "1 run: spread unknown"}[c["noisy"]]
        if c["role"] != "spec":
            note = f"{c['role']}" + (f"; {note}" if note else "")
        table.append(
            [*(c["labels"].get(a, "-") for a in result.by), str(c["runs"]), str(c["pairs"]),
             _stat(c["per_token_ns"], ",.0f"), _stat(c.get("p"), ".3f"), _stat(c.get("r"), ".2f"),
             _stat(c.get("predicted_speedup"), ".2f"), _stat(c.get("measured_speedup"), ".2f"),
             _stat(c.get("gap"), "+.0%"), note]
        )  # fmt: skip
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for row in table:
        lines.append("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())
    if result.crossover:
        lines += ["", "where speculation stops paying (median measured speedup < 1):"]
        for x in result.crossover:
            pts = ", ".join(
                f"c={p['concurrency']}: {p['measured_speedup']:.2f}x" for p in x["points"]
            )
            where = _labels(x["labels"])
            tail = ""
            if x["stops_paying_at"] is not None and x["status"].startswith("stops"):
                tail = f" -> below 1 from concurrency {x['stops_paying_at']}"
                if x["interpolated"] is not None:
                    tail += f" (crosses 1 near {x['interpolated']:.1f}, interpolated)"
            lines.append(f"  {where}: {x['status']}{tail} [{pts}]")
    if result.best_k:
        lines += ["", "best k (highest median measured speedup):"]
        for b in result.best_k:
            ties = f"; within noise: k={', '.join(b['within_noise'])}" if b["within_noise"] else ""
            verdict = "" if b["beats_baseline"] else " -- no k beats the baseline"
            lines.append(
                f"  {_labels(b['labels'])}: k={b['best_k']} ({b['measured_speedup']:.2f}x)"
                f"{verdict}{ties}"
            )
    lines += _cost_text(result.cost_model)
    if result.unpaired:
        lines += ["", "speculative runs without a baseline (not in the speedups):"]
        lines += [f"  {t}: {why}" for t, why in result.unpaired.items()]
    for what, why in result.not_available.items():
        lines.append(f"{what}: not available ({why})")
    return "\n".join(lines)


def _fit_text(fit: Fit | None, y: str, x: str, unit: str) -> str:
    if fit is None:
        return f"{y}: not fitted (too few distinct {x})"
    r2 = "-" if fit["r2"] is None else f"{fit['r2']:.2f}"
    return (
        f"{y} = {fit['intercept']:,.0f} {'-' if fit['slope'] < 0 else '+'} "
        f"{abs(fit['slope']):,.0f} x {x}  ({unit}; fitted by least "
        f"squares on {fit['steps']} steps, R^2 {r2})"
    )


def _cost_text(model: CostModel) -> list[str]:
    if not model.get("families"):
        return []
    lines = ["", "cost of a speculative step (decode steps; see docs/sweep.md):"]
    for fam in model["families"]:
        lines.append(f"  {_labels(fam['labels'])}:")
        lines.append("    " + _fit_text(fam["verify_fit"], "verify_ns", "(k+1)*batch",
                                        "slope: marginal ns per verified position"))  # fmt: skip
        lines.append("    " + _fit_text(fam["draft_fit"], "draft_ns", "proposed",
                                        "slope: ns per proposed token"))  # fmt: skip
        if fam["draft_ns_per_proposed"] is not None:
            lines.append(
                f"    draft: {fam['draft_ns_per_proposed']:,.0f} ns per proposed token (measured: "
                f"sum draft / sum proposed over {fam['draft_ns_per_proposed_steps']} steps)"
            )
        lines.append("    " + _fit_text(fam["baseline_forward_fit"], "baseline forward_ns",
                                        "batch", "for reference"))  # fmt: skip
    cells = model.get("cells") or []
    if cells:
        head = ["config", "steps", "batch", "tok/step", "verify/pos", "verify/fwd same batch",
                "predicted (fitted)", "measured", "gap"]  # fmt: skip
        rows = [head]
        for c in cells:
            ratio = _fmt(c["verify_to_forward_same_batch"], ".2f")
            if c["verify_ratio_warning"]:
                ratio += f" > {model['verify_ratio_warning_above']} WARNING"
            rows.append(
                [_labels({k: v for k, v in c["labels"].items() if k != "mode"}), str(c["steps"]),
                 _fmt(c["batch_mean"], ".2f"), _fmt(c["tokens_per_step"], ".2f"),
                 _fmt(c["verify_ns_per_position"], ",.0f"), ratio,
                 _fmt(c["predicted_decode_speedup"], ".2f"),
                 _fmt(c["measured_decode_speedup"], ".2f"), _fmt(c["decode_gap"], "+.0%")]
            )  # fmt: skip
        widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
        lines.append("  per configuration (decode-step speedup over the baseline's decode steps):")
        for r in rows:
            lines.append("    " + "  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)))
    for what, why in (model.get("not_available") or {}).items():
        lines.append(f"  {what}: not available ({why})")
    return lines
