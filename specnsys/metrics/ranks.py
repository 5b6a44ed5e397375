"""Several processes (tensor-parallel workers, engine core): each one's phases, NCCL time and
the straggler.

An engine runs its GPU work in several processes; one analysis (``--pid``) sees one of them.
This module analyses every process that launched kernels or has phase ranges, each with the
existing single-process attribution (:func:`~specnsys.attribution.exclusive_phase_times`,
one call per process over the trace's shared
:class:`~specnsys.attribution.context.AttributionContext`), so nothing is attributed twice
and every per-process figure means what it means for one process:

* phases per process: each process's exclusive breakdown over *its own* window (its request
  ranges, else the span of its ranges and GPU work); its phases sum to that window exactly;
* the window of the whole run: from the earliest process window start to the latest end (it
  spans the union of the process windows);
* NCCL time per phase and process: the summed time of the process's kernels of the ``nccl``
  category (:mod:`specnsys.attribution.categories`; a rules file's ``[[category]]`` entries
  apply), by the phase that launched them, clipped to the process's window; concurrent
  kernels each count, so its denominator is kernel time, not the window;
* the straggler: the rank whose decode steps end last. Steps (ranges of the run's step phase,
  :func:`~specnsys.attribution.timeline.step_phase`, on each process's driver thread) are
  matched by their index; a rank's lag at step *i* is its step end minus the earliest end of
  step *i* over the ranks; the straggler has the largest median lag (ties: the largest maximum
  lag, then the lower rank). Where some rank has no steps, the straggler is the rank whose
  window ends last, by its distance to the earliest window end. ``lag_share`` puts that lag
  over the rank's time per step (its window over its steps), or over the union window; below
  1 % (:data:`STANDS_OUT_SHARE`) no rank ``stands_out``: the ranks end together.

Ranks: the trace does not hold the NCCL/``RANK`` identity of a process, so ranks are numbered
in the order of the device each process ran its first GPU op on (the ``LOCAL_RANK`` device
under ``torch.cuda.set_device(local_rank)``, the convention of torchrun, vLLM and SGLang),
ties and processes without GPU work by pid; each is also named by pid and process name.

The pass is skipped, at no cost, when the ingest summary shows at most one process with
kernels or NVTX events (every single-process trace): only then is a per-process count of
phase ranges read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import polars as pl

from specnsys.attribution.category_time import phase_categories
from specnsys.attribution.context import attribution_context
from specnsys.attribution.phase_map import phase_ranges_sql
from specnsys.attribution.timeline import exclusive_phase_times, step_phase

if TYPE_CHECKING:
    from specnsys.attribution.context import AttributionContext
    from specnsys.attribution.rules import PhaseRules
    from specnsys.attribution.timeline import PhaseBreakdown
    from specnsys.ingest import Trace

__all__ = ["NCCL", "RANK_ORDER", "Rank", "rank_breakdowns", "ranks_dict", "ranks_of_analysis"]

#: The kernel category whose time is communication (:data:`.categories.DEFAULT_CATEGORIES`).
NCCL = "nccl"

#: How ranks are numbered (said in every ``ranks`` document).
RANK_ORDER = (
    "by the device of each process's first GPU op, then by pid (processes without GPU work "
    "last); the trace does not record NCCL ranks"
)

#: Why there is no ``ranks`` section (the ``not_available`` entries).
ONE_PROCESS = "one process launched GPU work or has phase ranges"


@dataclass(frozen=True)
class Rank:
    """One process of a multi-process run: its breakdown, NCCL time and step ends."""

    rank: int
    pid: int
    name: str | None
    device: int | None
    """The device of the process's first GPU op (None: it ran none)."""
    breakdown: PhaseBreakdown
    nccl: pl.DataFrame
    """``phase``, ``ops``, ``gpu_ns``: NCCL kernels by launching phase (see the module docs)."""
    step_phase: str
    step_ends: list[int]
    """End of each step range of the process's driver thread in its window, in step order."""


def _candidates(trace: Trace, rules: PhaseRules) -> list[int]:
    """Pids of the processes that launched kernels or have phase ranges of *rules*; empty
    without reading anything when the summary shows at most one active process."""
    procs = trace.summary.processes
    gpu = {int(p["pid"]) for p in procs if int(p["kernels"]) > 0}  # type: ignore[call-overload]
    nvtx = {int(p["pid"]) for p in procs if int(p["nvtx_events"]) > 0}  # type: ignore[call-overload]
    if len(gpu | nvtx) <= 1:
        return []  # one process at most: the single-process view is the whole answer
    rows = trace.connection.execute(
        f"SELECT DISTINCT pid FROM ({phase_ranges_sql(rules)}) WHERE pid IS NOT NULL"
    ).fetchall()
    return sorted(gpu | {int(r[0]) for r in rows})


def _devices(trace: Trace, pids: list[int]) -> dict[int, int]:
    """The device of each process's first GPU op (kernel, memcpy or memset; ties: the lower
    device)."""
    rows = trace.connection.execute(
        """SELECT pid, arg_min(device_id, (start, device_id)) FROM (
               SELECT pid, device_id, start FROM kernels
               UNION ALL SELECT pid, device_id, start FROM memcpy
               UNION ALL SELECT pid, device_id, start FROM memset)
           WHERE list_contains($pids, pid) AND device_id IS NOT NULL GROUP BY pid""",
        {"pids": pids},
    ).fetchall()
    return {int(pid): int(dev) for pid, dev in rows}


def rank_breakdowns(
    trace: Trace,
    rules: PhaseRules,
    context: AttributionContext | None = None,
    known: PhaseBreakdown | None = None,
    pids: list[int] | None = None,
) -> list[Rank]:
    """Every process that launched kernels or has phase ranges, in rank order (module docs);
    empty when there is at most one. *known* is a breakdown of one of them the caller already
    has (read instead of computed again); *pids*: these processes instead, however many."""
    if pids is None:
        pids = _candidates(trace, rules)
        if len(pids) <= 1:
            return []
    names = {int(p["pid"]): p["name"] for p in trace.summary.processes}  # type: ignore[call-overload]
    devices = _devices(trace, pids)
    order = sorted(pids, key=lambda p: (p not in devices, devices.get(p, 0), p))
    ranks = []
    with attribution_context(trace, rules, context) as shared:
        for rank, pid in enumerate(order):
            b = known if known is not None and known.pid == pid else None
            if b is None:
                b = exclusive_phase_times(trace, pid=pid, rules=rules, context=shared)
            window = (b.window_start_ns, b.window_end_ns)
            nccl = _nccl(trace, rules, pid, window, shared) if pid in devices else _NO_NCCL
            walls = dict(zip(b.frame["phase"], b.frame["wall_ns"], strict=True))
            phase = step_phase(b.range_counts, walls)
            ends = _step_ends(trace, rules, b, phase)
            name = names.get(pid)
            ranks.append(
                Rank(rank, pid, None if name is None else str(name), devices.get(pid), b, nccl,
                     phase, [int(e) for e in ends])
            )  # fmt: skip
    return ranks


def _step_ends(trace: Trace, rules: PhaseRules, b: PhaseBreakdown, phase: str) -> list[int]:
    """The end of each *phase* range on *b*'s driver thread starting in its window, in step
    order, clipped to the window: the steps of :func:`specnsys.metrics.steps.step_table`
    (the same ranges, order and clipping), without the marks and parts it also reads."""
    if b.driver_global_tid is None:
        return []
    rows = trace.connection.execute(
        f"""SELECT least(coalesce(e, $we), $we) FROM ({phase_ranges_sql(rules)})
            WHERE gtid = $gtid AND s >= $ws AND s < $we AND phase = $phase
            ORDER BY s, coalesce(e, $we)""",
        {"gtid": b.driver_global_tid, "ws": b.window_start_ns, "we": b.window_end_ns,
         "phase": phase},
    ).fetchall()  # fmt: skip
    return [int(r[0]) for r in rows]


_NO_NCCL = pl.DataFrame(schema={"phase": pl.String, "ops": pl.Int64, "gpu_ns": pl.Int64})


def _nccl(
    trace: Trace,
    rules: PhaseRules,
    pid: int,
    window: tuple[int, int],
    context: AttributionContext,
) -> pl.DataFrame:
    if window[1] <= window[0]:
        return _NO_NCCL
    table = phase_categories(trace, rules, pid, window, context)
    return table.filter(pl.col("category") == NCCL).select(
        pl.col("phase").cast(pl.String), pl.col("ops").cast(pl.Int64), "gpu_ns"
    )


def _lags(ranks: list[Rank]) -> tuple[pl.DataFrame, int]:
    """Per rank ``median_lag_ns``/``max_lag_ns`` over the steps matched by index (the first
    ``min(steps)`` of every rank), and how many were matched (0: some rank has none)."""
    matched = min(len(r.step_ends) for r in ranks)
    schema = {"rank": pl.Int64, "median_lag_ns": pl.Float64, "max_lag_ns": pl.Int64}
    if matched == 0:
        return pl.DataFrame(schema=schema), 0
    ends = pl.DataFrame(
        {
            "rank": [r.rank for r in ranks for _ in range(matched)],
            "step": [i for _ in ranks for i in range(matched)],
            "end": [e for r in ranks for e in r.step_ends[:matched]],
        },
        schema={"rank": pl.Int64, "step": pl.Int64, "end": pl.Int64},
    )
    lags = (
        ends.with_columns((pl.col("end") - pl.col("end").min().over("step")).alias("lag"))
        .group_by("rank")
        .agg(
            pl.col("lag").median().alias("median_lag_ns"),
            pl.col("lag").max().cast(pl.Int64).alias("max_lag_ns"),
        )
        .sort("rank")
    )
    return lags.select(pl.col(c).cast(t) for c, t in schema.items()), matched


#: A straggler "stands out" when its lag is at least this share of its denominator (its time
#: per step, or the union window): below it the ranks end together, whichever is last.
STANDS_OUT_SHARE = 0.01


def _straggler(ranks: list[Rank], lags: pl.DataFrame, matched: int) -> dict[str, object]:
    first_end = min(r.breakdown.window_end_ns for r in ranks)
    union_ns = max(r.breakdown.window_end_ns for r in ranks) - min(
        r.breakdown.window_start_ns for r in ranks
    )
    window_lag = {r.rank: r.breakdown.window_end_ns - first_end for r in ranks}
    if matched:
        row = lags.sort(
            ["median_lag_ns", "max_lag_ns", "rank"], descending=[True, True, False]
        ).row(0, named=True)
        who = ranks[int(row["rank"])]
        median, peak = float(row["median_lag_ns"]), int(row["max_lag_ns"])
        basis = "steps"
    else:
        who = max(ranks, key=lambda r: (window_lag[r.rank], -r.rank))
        median, peak = None, None
        basis = "window"
    if matched:
        per_step = who.breakdown.window_ns / len(who.step_ends)
        lag, denominator = median or 0.0, per_step
        share_of = "the rank's window divided by its steps (time per step)"
    else:
        lag, denominator = float(window_lag[who.rank]), float(union_ns)
        share_of = "the union window of all processes"
    share = lag / denominator if denominator > 0 else None
    return {
        "rank": who.rank,
        "pid": who.pid,
        "process": who.name,
        "basis": basis,
        "step_phase": who.step_phase if matched else None,
        "matched_steps": matched,
        "median_lag_ns": median,
        "max_lag_ns": peak,
        "window_end_lag_ns": window_lag[who.rank],
        "lag_of": (
            "each matched step's end minus the earliest rank's end of the same step"
            if matched
            else "the rank's window end minus the earliest rank's window end (some rank has "
            "no step ranges)"
        ),
        "lag_share": share,
        "lag_share_of": share_of,
        "stands_out": share is not None and share >= STANDS_OUT_SHARE,
    }


def ranks_dict(ranks: list[Rank], gpu: bool = True) -> dict[str, Any]:
    """The ``ranks`` document (``analyze --json``) of :func:`rank_breakdowns`' result; *gpu*
    False (a capture without GPU activity): the GPU figures are null."""
    lags, matched = _lags(ranks)
    by_rank = {int(r["rank"]): r for r in lags.iter_rows(named=True)}
    start = min(r.breakdown.window_start_ns for r in ranks)
    end = max(r.breakdown.window_end_ns for r in ranks)
    first_end = min(r.breakdown.window_end_ns for r in ranks)
    rows = []
    for r in ranks:
        b = r.breakdown
        nccl = {str(p): (int(n), int(ns)) for p, n, ns in r.nccl.iter_rows()}
        phases = {}
        for row in b.frame.iter_rows(named=True):
            name = row["phase"]
            if not (row["wall_ns"] or row["kernels"] or row["cpu_inclusive_ns"] or name in nccl):
                continue
            ops, ns = nccl.get(name, (0, 0))
            phases[name] = {
                "wall_ns": int(row["wall_ns"]),
                "share": float(row["share"]),
                "gpu_busy_ns": int(row["gpu_busy_ns"]) if gpu else None,
                "kernels": int(row["kernels"]) if gpu else None,
                "nccl_ns": ns if gpu else None,
                "nccl_kernels": ops if gpu else None,
                "ranges": int(b.range_counts.get(name, 0)),
            }
        lag = by_rank.get(r.rank, {})
        rows.append(
            {
                "rank": r.rank,
                "pid": r.pid,
                "process": r.name,
                "device": r.device,
                "driver_global_tid": b.driver_global_tid,
                "window_start_ns": b.window_start_ns,
                "window_end_ns": b.window_end_ns,
                "window_ns": b.window_ns,
                "gpu_union_ns": b.gpu_union_ns if gpu else None,
                "nccl_ns": int(r.nccl["gpu_ns"].sum()) if gpu else None,
                "nccl_kernels": int(r.nccl["ops"].sum()) if gpu else None,
                "step_phase": r.step_phase,
                "steps": len(r.step_ends),
                "median_lag_ns": lag.get("median_lag_ns"),
                "max_lag_ns": lag.get("max_lag_ns"),
                "window_end_lag_ns": b.window_end_ns - first_end,
                "phases": phases,
            }
        )
    notes = []
    counts = sorted({len(r.step_ends) for r in ranks})
    if matched and len(counts) > 1:
        notes.append(
            f"the ranks have {counts[0]} to {counts[-1]} steps; the first {matched} of each "
            "are matched by index"
        )
    return {
        "processes": len(ranks),
        "order": RANK_ORDER,
        "window_start_ns": start,
        "window_end_ns": end,
        "window_ns": end - start,
        "window_of": "the earliest process window start to the latest end",
        "shares_of": "each rank's own window_ns",
        "nccl_of": "summed NCCL kernel time launched in the phase, clipped to the rank's "
        "window (concurrent kernels each count)",
        "ranks": rows,
        "straggler": _straggler(ranks, lags, matched),
        "notes": notes,
    }


def ranks_of_analysis(
    trace: Trace,
    rules: PhaseRules,
    breakdown: PhaseBreakdown,
    pid: int | None,
    gpu: bool,
    context: AttributionContext | None = None,
) -> tuple[dict[str, object] | None, str | None]:
    """``analyze``'s ``ranks`` section and, when it is null, why: *pid* given (the
    single-process view asked for) or at most one process. *breakdown* is the analysis's own
    (its process is not analysed twice)."""
    if pid is not None:
        return None, f"--pid {pid}: the view of one process was asked for"
    ranks = rank_breakdowns(trace, rules, context, known=breakdown)
    if not ranks:
        return None, ONE_PROCESS
    return ranks_dict(ranks, gpu), None
