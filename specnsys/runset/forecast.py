"""``specnsys forecast`` / ``advise`` over traces or a ``collect`` dataset (docs/forecast.md).

The sources become one :class:`~specnsys.forecasting.fitdata.FitData`: a trace through
:func:`specnsys.api.fit_trace` (its analysis, decode steps with context, prefills with their
``input_tokens``, requests), a dataset through its tables (``runs`` for the labels and each
run's analysis, ``steps``, ``requests``; a dataset keeps no per-prefill rows and no context,
so those terms are said to be missing). Runs of different models or engines are refused.
Everything else -- the fit, the simulated runs, the cells, the advice -- is
:mod:`specnsys.forecast`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import polars as pl

from specnsys.errors import BadInputError, UsageError
from specnsys.forecasting.advice import advise_forecast
from specnsys.forecasting.cells import DEFAULT_K_MAX, forecast_data
from specnsys.forecasting.cuts import parse_cuts
from specnsys.forecasting.fitdata import (
    BASELINE,
    IDENTITY_LABELS,
    SPEC,
    FitData,
    FitRun,
    check_one_model,
)
from specnsys.forecasting.formula import formula_forecast
from specnsys.forecasting.results import Advice, Forecast, FormulaForecast
from specnsys.forecasting.workload import Workload, read_workload, workload_from_numbers
from specnsys.runset.dataset import is_dataset
from specnsys.runset.sweep import SweepRun, load_runs

if TYPE_CHECKING:
    from specnsys.attribution import PhaseRules

__all__ = ["advise", "fit_data", "forecast"]


def _dataset_runs(root: Path) -> tuple[list[FitRun], list[pl.DataFrame], list[str]]:
    runs = load_runs(root)
    steps_dir = root / "steps"
    if not any(steps_dir.glob("run_id=*/*.parquet")):
        raise BadInputError(f"{root}: the dataset has no steps table (decode steps to fit on)")
    steps = pl.scan_parquet(steps_dir).collect()
    out: list[FitRun] = []
    frames: list[pl.DataFrame] = []
    notes: list[str] = []
    for run in runs:
        fit = _dataset_run(root, run, steps.filter(pl.col("run_id") == run.run_id), notes)
        if fit is not None:
            out.append(fit[0])
            frames.append(fit[1])
    return out, frames, notes


def _dataset_run(
    root: Path, run: SweepRun, steps: pl.DataFrame, notes: list[str]
) -> tuple[FitRun, pl.DataFrame] | None:
    where = f"{root}: {run.trace}"
    if run.role not in (BASELINE, SPEC):
        notes.append(f"{where}: a {run.doc.get('mode')} run, left out of the fit")
        return None
    doc = run.analysis  # the typed fields of its analyze --json document
    if not doc.tokens or steps.height == 0:
        notes.append(f"{where}: no output tokens or no decode steps, left out of the fit")
        return None
    k = run.k if run.role == SPEC else 0
    if run.role == SPEC and not k:
        notes.append(f"{where}: a speculative run whose k is unknown, left out of the fit")
        return None
    acc = doc.acceptance
    by_position = [float(a) for a in (acc.get("by_position") or [] if acc else [])]
    reached = int((acc.get("sequence_steps") or 0) if acc else 0)
    forwards = doc.draft_forwards_per_step if run.role == SPEC else 0.0
    label_c = run.labels.get("concurrency")
    concurrency = int(float(label_c)) if label_c and label_c.replace(".", "", 1).isdigit() else (
        int(steps["batch"].max() or 1)  # type: ignore[arg-type]
    )
    identity = {"rules": str(doc.rules), "gpu": "GPU" if doc.gpu else "CPU only"}
    identity |= {n: v for n, v in run.labels.items() if n in IDENTITY_LABELS}
    fit = FitRun(
        run_id=run.run_id,
        source=f"{root}[{Path(run.trace).name}]",
        role=run.role,
        k=int(k or 0),
        concurrency=concurrency,
        window_ns=int(doc.window_ns),
        tokens=int(doc.tokens),
        requests=int(doc.requests or 0),
        steps=steps.height,
        phases={n: int(r["wall_ns"]) for n, r in (doc.phases or {}).items()
                if r.get("wall_ns")},  # fmt: skip
        labels=dict(run.labels),
        accept_reached=tuple(reached for _ in by_position),
        accept_kept=tuple(round(a * reached) for a in by_position),
        draft_forwards_per_step=None if forwards is None else float(forwards),
        identity=identity,
    )
    frame = steps.with_columns(
        ((fit.k + 1) * pl.col("batch")).alias("positions"),
        pl.lit(float(forwards if forwards is not None else fit.k)).alias("forwards"),
        pl.lit(None, pl.Float64).alias("ctx"),
    )
    return fit, frame


def _dataset_requests(root: Path, runs: Sequence[FitRun]) -> pl.DataFrame:
    folder = root / "requests"
    if not any(folder.glob("run_id=*/*.parquet")):
        return pl.DataFrame()
    frame = pl.scan_parquet(folder).collect()
    ids = [r.run_id for r in runs]
    return frame.filter(pl.col("run_id").is_in(ids)).select(
        "run_id", pl.lit(None, pl.Int64).alias("input_tokens"),
        pl.col("output_tokens").cast(pl.Int64),
    )  # fmt: skip


def fit_data(
    sources: Sequence[str | Path],
    *,
    rules: PhaseRules | str | Path | None = None,
    use_cache: bool = True,
) -> tuple[FitData, tuple[str, ...]]:
    """The fit data of *sources* (traces and datasets) and their data warnings."""
    from specnsys.api import fit_trace, resolve_rules

    if not sources:
        raise UsageError("give at least one trace or dataset to fit on")
    mapping = resolve_rules(rules)
    runs: list[FitRun] = []
    steps: list[pl.DataFrame] = []
    prefills: list[pl.DataFrame] = []
    requests: list[pl.DataFrame] = []
    notes: list[str] = []
    warnings: list[str] = []
    seen: set[str] = set()
    for source in sources:
        path = Path(source)
        if is_dataset(path):
            if mapping is not None:
                raise UsageError("--rules: a dataset was analysed at collect time")
            got, frames, skipped = _dataset_runs(path)
            runs += got
            steps += frames
            requests.append(_dataset_requests(path, got))
            notes += skipped
            continue
        (run, st, pf, rq), data_warnings = fit_trace(path, rules=mapping, use_cache=use_cache)
        if run.run_id in seen:
            raise UsageError(f"{path}: given twice")
        seen.add(run.run_id)
        runs.append(run)
        steps.append(st)
        prefills.append(pf)
        requests.append(rq)
        warnings += data_warnings
    if not runs:
        raise BadInputError(
            "no baseline or speculative run with decode steps and output tokens among the "
            "sources"
        )
    check_one_model(runs)
    requests = [r for r in requests if r.height]
    return FitData.of(runs, steps, prefills, requests, notes), tuple(warnings + notes)


def _workload(
    workload: str | Path | Workload | None,
    input_tokens: Sequence[int] | None,
    output_tokens: Sequence[int] | None,
    requests: int | None,
) -> Workload | None:
    if isinstance(workload, Workload):
        return workload
    if workload is not None:
        if input_tokens is not None or output_tokens is not None:
            raise UsageError("give --workload FILE or --input-tokens/--output-tokens, not both")
        return read_workload(workload, requests)
    if output_tokens is not None:
        return workload_from_numbers(input_tokens, output_tokens, requests)
    if input_tokens is not None:
        raise UsageError("--input-tokens needs --output-tokens (the decode share rests on it)")
    if requests is not None:
        raise UsageError("--requests applies to a --workload or --output-tokens")
    return None


def forecast(
    *sources: str | Path,
    workload: str | Path | Workload | None = None,
    input_tokens: Sequence[int] | None = None,
    output_tokens: Sequence[int] | None = None,
    requests: int | None = None,
    concurrency: Sequence[int] | None = None,
    k: Sequence[int] | None = None,
    alpha: float | None = None,
    cut: Sequence[str] = (),
    k_max: int = DEFAULT_K_MAX,
    sampling: dict[str, str] | None = None,
    p: float | None = None,
    r: float | None = None,
    c: float | None = None,
    rules: PhaseRules | str | Path | None = None,
    seed: int = 0,
    hold_out: bool = True,
    use_cache: bool = True,
) -> Forecast | FormulaForecast:
    """``specnsys forecast``: the cost model fitted on *sources* (traces or a dataset) and the
    forecast of the workload at each concurrency and k (a :class:`Forecast`); without sources,
    Amdahl and Leviathan at the given *p*, *r*, *alpha*, *k*, *c* (a
    :class:`FormulaForecast`)."""
    cuts = parse_cuts(cut)
    if not sources:
        if any(v is not None for v in (workload, input_tokens, output_tokens, concurrency)) or cuts:
            raise UsageError(
                "a workload, --concurrency or --cut needs sources to fit on (traces or a dataset)"
            )
        one_k = None
        if k:
            if len(k) > 1:
                raise UsageError("without sources, give one --k")
            one_k = k[0]
        return formula_forecast(p=p, r=r, alpha=alpha, k=one_k, c=c, k_max=k_max)
    if p is not None or r is not None or c is not None:
        raise UsageError(
            "--p, --r and --c are for a forecast without sources (the sources measure them)"
        )
    data, warnings = fit_data(sources, rules=rules, use_cache=use_cache)
    return forecast_data(
        data, workload=_workload(workload, input_tokens, output_tokens, requests),
        concurrency=concurrency, k=k, alpha=alpha, cuts=cuts, k_max=k_max, sampling=sampling,
        seed=seed, hold_out=hold_out, data_warnings=warnings,
    )  # fmt: skip


def advise(
    *sources: str | Path,
    rules: PhaseRules | str | Path | None = None,
    concurrency: int | None = None,
    k: int | None = None,
    k_max: int = DEFAULT_K_MAX,
    use_cache: bool = True,
) -> Advice:
    """``specnsys advise``: the article's three next steps for one configuration of the
    sources (default: the lowest concurrency a speculative run ran, and its lowest k): cut
    the non-accelerable items first, then set k, then size the draft."""
    data, warnings = fit_data(sources, rules=rules, use_cache=use_cache)
    spec = sorted((run.concurrency, run.k) for run in data.runs if run.role == SPEC)
    ran = sorted(run.concurrency for run in data.runs)
    conc = concurrency if concurrency is not None else (spec[0][0] if spec else ran[0])
    own = [kk for c, kk in spec if c == conc] or [kk for _, kk in spec]
    ks = [k] if k is not None else ([own[0]] if own else None)
    result = forecast_data(data, concurrency=[conc], k=ks, k_max=k_max, data_warnings=warnings)
    label = " ".join(str(s) for s in sources)
    half = None
    cell = result.cells[0]
    if "draft" in cell.phases_ns_per_token:
        best = cell.best_k if isinstance(cell.best_k, int) else cell.k
        half = forecast_data(data, concurrency=[conc], k=[best],
                             cuts=parse_cuts(["draft=-50%"]), k_max=k_max, hold_out=False)  # fmt: skip
    return advise_forecast(result, label, half, warnings)
