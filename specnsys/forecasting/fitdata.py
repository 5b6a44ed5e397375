"""What the cost model is fitted on: one :class:`FitRun` per captured run, and three tables.

A forecast may be fitted on traces or on a ``collect`` dataset; both become the same
:class:`FitData` before anything is fitted, so the model cannot tell where its rows came from
(``specnsys/forecasting/extract.py`` reads a trace, ``specnsys/runset/forecast.py`` a dataset):

* ``runs``: one :class:`FitRun` each: its role (baseline or speculative), k, concurrency, the
  exclusive time of every phase, its output tokens, requests and decode steps, its acceptance
  counts per draft position, and what identifies the model and engine it ran;
* ``steps``: one row per decode step (:data:`STEP_SCHEMA`): batch, the positions the target
  scored, the draft forwards, the step's duration and the time of its draft, verify, forward
  and sample ranges, and ``ctx`` -- the context tokens of its batch -- where the trace can
  give it (input lengths from ``input_tokens`` marks, request ranges and their marks);
* ``prefills``: one row per ``prefill`` / ``draft_prefill`` range, with the prompt tokens its
  ``input_tokens`` mark says it read (null without the mark);
* ``requests``: one row per request, its input tokens (null when unknown) and output tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import polars as pl

from specnsys.errors import BadInputError

__all__ = [
    "BASELINE",
    "IDENTITY_LABELS",
    "PREFILL_SCHEMA",
    "REQUEST_SCHEMA",
    "SAMPLING_LABELS",
    "SPEC",
    "STEP_SCHEMA",
    "FitData",
    "FitRun",
    "check_one_model",
]

BASELINE, SPEC = "baseline", "spec"

#: Labels that name what ran (a fit mixing two of them would describe neither).
IDENTITY_LABELS = (
    "model", "target", "engine", "draft", "draft_model", "preset", "dtype", "gpu", "device",
    "tp", "quantization",
)  # fmt: skip
#: Labels of the sampling settings, by which the acceptance profile is kept apart.
SAMPLING_LABELS = ("temperature", "top_p", "top_k", "greedy", "sampling", "repetition_penalty")

STEP_SCHEMA: dict[str, pl.DataType] = {
    "run_id": pl.String(),
    "batch": pl.Int64(),
    "positions": pl.Int64(),
    "forwards": pl.Float64(),
    "duration_ns": pl.Int64(),
    "draft_ns": pl.Int64(),
    "verify_ns": pl.Int64(),
    "forward_ns": pl.Int64(),
    "sample_ns": pl.Int64(),
    "ctx": pl.Float64(),
}
PREFILL_SCHEMA: dict[str, pl.DataType] = {
    "run_id": pl.String(),
    "phase": pl.String(),
    "duration_ns": pl.Int64(),
    "input_tokens": pl.Int64(),
}
REQUEST_SCHEMA: dict[str, pl.DataType] = {
    "run_id": pl.String(),
    "input_tokens": pl.Int64(),
    "output_tokens": pl.Int64(),
}


@dataclass(frozen=True)
class FitRun:
    """One captured run, as the cost model sees it (see the module docs)."""

    run_id: str
    source: str
    """The trace's path, or ``DATASET[run_id]`` with the trace it was collected from."""
    role: str
    """:data:`BASELINE` or :data:`SPEC`."""
    k: int
    """Drafts per step (0 for a baseline)."""
    concurrency: int
    window_ns: int
    tokens: int
    requests: int
    steps: int
    phases: dict[str, int]
    """Exclusive wall time of each phase with time (``unannotated`` included), summing to
    ``window_ns``."""
    labels: dict[str, str] = field(default_factory=dict)
    accept_reached: tuple[int, ...] = ()
    """Per draft position i (from 1): the sequence-steps that proposed at least i drafts."""
    accept_kept: tuple[int, ...] = ()
    """Per draft position i: of those, the ones whose i-th draft was accepted."""
    draft_forwards_per_step: float | None = None
    identity: dict[str, str] = field(default_factory=dict)
    """What ran: the engine's phase rules, GPU or CPU, and the identity labels."""

    @property
    def sampling(self) -> tuple[tuple[str, str], ...]:
        return tuple((n, self.labels[n]) for n in SAMPLING_LABELS if n in self.labels)

    @property
    def per_token_ns(self) -> float:
        return self.window_ns / self.tokens if self.tokens else float("nan")


def _typed(frame: pl.DataFrame, schema: dict[str, pl.DataType]) -> pl.DataFrame:
    return frame.select(
        (pl.col(c) if c in frame.columns else pl.lit(None)).cast(t).alias(c)
        for c, t in schema.items()
    )


@dataclass(frozen=True)
class FitData:
    """The runs and their steps, prefills and requests (see the module docs)."""

    runs: tuple[FitRun, ...]
    steps: pl.DataFrame
    prefills: pl.DataFrame
    requests: pl.DataFrame
    notes: tuple[str, ...] = ()
    """What reading the sources skipped (a run without decode steps, ...)."""

    @classmethod
    def of(
        cls,
        runs: Sequence[FitRun],
        steps: Sequence[pl.DataFrame],
        prefills: Sequence[pl.DataFrame],
        requests: Sequence[pl.DataFrame],
        notes: Sequence[str] = (),
    ) -> FitData:
        def stack(frames: Sequence[pl.DataFrame], schema: dict[str, pl.DataType]) -> pl.DataFrame:
            typed = [_typed(f, schema) for f in frames]
            return pl.concat(typed) if typed else pl.DataFrame(schema=schema)

        return cls(
            tuple(runs),
            stack(steps, STEP_SCHEMA),
            stack(prefills, PREFILL_SCHEMA),
            stack(requests, REQUEST_SCHEMA),
            tuple(notes),
        )

    def without(self, run_id: str) -> FitData:
        """These data without run *run_id* (to predict it from the others)."""
        keep = pl.col("run_id") != run_id
        return FitData(
            tuple(r for r in self.runs if r.run_id != run_id),
            self.steps.filter(keep),
            self.prefills.filter(keep),
            self.requests.filter(keep),
            self.notes,
        )

    def of_role(self, role: str) -> tuple[FitRun, ...]:
        return tuple(r for r in self.runs if r.role == role)


def check_one_model(runs: Sequence[FitRun]) -> None:
    """Refuse runs of different models, engines or machines (one line, exit 2): a cost model
    fitted on both would describe neither. A key one run does not state (a trace has no
    labels) is not compared."""
    seen: dict[str, tuple[str, str]] = {}
    for run in runs:
        for key, value in sorted(run.identity.items()):
            first = seen.setdefault(key, (value, run.source))
            if first[0] != value:
                raise BadInputError(
                    f"the sources mix {key} {first[0]!r} ({first[1]}) and {value!r} "
                    f"({run.source}): a forecast is fitted on runs of one model and engine"
                )
