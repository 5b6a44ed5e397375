"""The traffic a forecast is for: each request's input and output length, optionally weighted.

Three ways to give it (docs/forecast.md#the-workload):

* a file (``--workload FILE``): CSV or Parquet with the columns ``input_tokens`` and
  ``output_tokens``, one row per request (production logs counted as the article says), and
  optionally ``weight`` (how often such a request comes);
* numbers (``--input-tokens 20,200 --output-tokens 64``): requests of those lengths, the lists
  paired element by element (a single value goes with every element of the other list);
* nothing: the requests of the sources themselves (their ``input_tokens`` marks and output
  lengths), so the forecast can be checked against what was measured.

Every length must be a whole number of tokens >= 1, and at most :data:`MAX_OUTPUT_TOKENS`
(output) or :data:`MAX_INPUT_TOKENS` (input); a row that is not is refused with its number
(one line, exit 2). Without weights a simulated run serves the rows in order (``requests``
of them, the rows repeated or cut to that many); with weights it serves ``requests`` rows
drawn by weight.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from specnsys.errors import BadInputError, UsageError
from specnsys.forecasting.results import WorkloadSummary
from specnsys.results import NotAvailable
from specnsys.small_files import read_small_bytes

__all__ = [
    "MAX_INPUT_TOKENS",
    "MAX_OUTPUT_TOKENS",
    "MAX_ROWS",
    "WORKLOAD_MAX_BYTES",
    "Workload",
    "check_lengths",
    "read_workload",
    "workload_from_numbers",
]

#: A workload file is a table of request lengths: 64 MiB of CSV is some five million rows.
WORKLOAD_MAX_BYTES = 64 << 20
#: Rows a workload may have (a simulated run serves them all, or draws this many by weight).
MAX_ROWS = 1_000_000
#: Requests a weighted workload's simulated run draws when not told how many.
WEIGHTED_REQUESTS = 256

COLUMNS = ("input_tokens", "output_tokens")
#: Output tokens of one request a forecast simulates: a simulated request draws a row of
#: acceptances as long as its output (8 bytes each; a billion tokens asked for 7.45 GiB).
#: Generation lengths run to the tens of thousands.
MAX_OUTPUT_TOKENS = 1 << 20
#: Input tokens of one request (the longest context windows are about ten million).
MAX_INPUT_TOKENS = 1 << 24
#: The longest length of each column.
MAX_TOKENS = {"input_tokens": MAX_INPUT_TOKENS, "output_tokens": MAX_OUTPUT_TOKENS}


@dataclass(frozen=True)
class Workload:
    """Request lengths (see the module docs); ``input_tokens`` None where unknown."""

    output_tokens: tuple[int, ...]
    input_tokens: tuple[int, ...] | None
    weights: tuple[float, ...] | None
    requests: int
    """Requests one simulated run serves."""
    source: str

    def summary(self) -> WorkloadSummary:
        def mean(values: Sequence[int]) -> float:
            if self.weights is None:
                return sum(values) / len(values)
            total = sum(self.weights)
            return sum(v * w for v, w in zip(values, self.weights, strict=True)) / total

        na = NotAvailable("the workload does not give input lengths")
        return WorkloadSummary(
            source=self.source,
            requests=self.requests,
            rows=len(self.output_tokens),
            weighted=self.weights is not None,
            input_tokens_mean=na if self.input_tokens is None else mean(self.input_tokens),
            input_tokens_max=na if self.input_tokens is None else max(self.input_tokens),
            output_tokens_mean=mean(self.output_tokens),
            output_tokens_max=max(self.output_tokens),
        )


def _lengths(frame: pl.DataFrame, column: str, where: str) -> tuple[int, ...]:
    """*column* as whole numbers >= 1, or the one-line error naming the first bad row."""
    series = frame[column]
    values = series.cast(pl.Float64, strict=False)  # text such as "nan" becomes a float
    bad = values.is_null() & series.is_not_null()
    if bool(bad.any()):
        row = int(bad.arg_max() or 0)
        raise BadInputError(
            f"{where}: row {row + 1}: {column} is {series[row]!r}, not a number of tokens"
        )
    most = MAX_TOKENS[column]
    ok = values.is_not_null() & values.is_finite() & (values >= 1) & (values <= most)
    ok &= values == values.floor()
    if not bool(ok.all()):
        row = int((~ok.fill_null(False)).arg_max() or 0)
        value = values[row]
        why = (
            "missing" if value is None
            else "not a finite number" if not math.isfinite(value)
            else "not a whole number" if value != math.floor(value)
            else f"{value:g}, below 1" if value < 1
            else f"{value:g}, {_above(column)}"
        )  # fmt: skip
        raise BadInputError(
            f"{where}: row {row + 1}: {column} is {why} (lengths are whole numbers of tokens "
            f"from 1 to {most:,})"
        )
    return tuple(int(v) for v in values)


def _above(column: str) -> str:
    """Why a length past :data:`MAX_TOKENS` is refused, in words."""
    return f"above {MAX_TOKENS[column]:,}, the most a forecast simulates per request"


def check_lengths(lengths: Sequence[int], column: str, where: str) -> None:
    """Refuse (:class:`BadInputError`) a length of *column* past :data:`MAX_TOKENS`: the
    requests of a trace's marks, where a file's rows were checked by :func:`_lengths`."""
    longest = max(lengths, default=0)
    if longest > MAX_TOKENS[column]:
        raise BadInputError(f"{where}: a request has {longest:,} {column}, {_above(column)}")


def _weights(frame: pl.DataFrame, where: str) -> tuple[float, ...] | None:
    if "weight" not in frame.columns:
        return None
    series = frame["weight"]
    values = series.cast(pl.Float64, strict=False)
    ok = values.is_not_null() & values.is_finite() & (values >= 0)
    if not bool(ok.all()):
        row = int((~ok.fill_null(False)).arg_max() or 0)
        raise BadInputError(
            f"{where}: row {row + 1}: weight is {series[row]!r} (a weight is a finite number "
            ">= 0)"
        )
    weights = [float(v) for v in values]
    top = max(weights)
    if top <= 0:
        raise BadInputError(f"{where}: every weight is 0")
    # relative to the largest: weights near the float maximum summed to infinity, and their
    # products with lengths too (the simulation's probabilities were then NaN: exit 3)
    return tuple(v / top for v in weights)


def _frame(path: Path) -> pl.DataFrame:
    what = "a workload is a CSV or Parquet file of request lengths"
    try:
        data = read_small_bytes(path, what=what, max_bytes=WORKLOAD_MAX_BYTES)
    except OSError as exc:
        raise BadInputError(f"{path}: cannot read the workload ({exc.strerror or exc})") from None
    try:
        if data[:4] == b"PAR1":
            return pl.read_parquet(io.BytesIO(data))
        data.decode("utf-8")
        return pl.read_csv(io.BytesIO(data), infer_schema_length=None)
    except UnicodeDecodeError:
        raise BadInputError(f"{path}: not a CSV or Parquet file ({what})") from None
    except (pl.exceptions.PolarsError, OSError, ValueError) as exc:
        detail = " ".join(str(exc).split())[:200]
        raise BadInputError(f"{path}: not a readable workload table ({detail})") from None


def read_workload(path: str | Path, requests: int | None = None) -> Workload:
    """The workload of the CSV or Parquet file at *path* (module docs); *requests*: how many
    requests a simulated run serves (default: every row, or 256 drawn by weight)."""
    path = Path(path)
    frame = _frame(path)
    missing = [c for c in COLUMNS if c not in frame.columns]
    if missing:
        raise BadInputError(
            f"{path}: the workload needs the column{'s' if len(missing) > 1 else ''} "
            f"{', '.join(missing)} (it has {', '.join(frame.columns) or 'none'})"
        )
    if frame.height == 0:
        raise BadInputError(f"{path}: the workload has no rows")
    if frame.height > MAX_ROWS:
        raise BadInputError(f"{path}: {frame.height} rows; a workload has at most {MAX_ROWS:,}")
    inputs = _lengths(frame, "input_tokens", str(path))
    outputs = _lengths(frame, "output_tokens", str(path))
    weights = _weights(frame, str(path))
    n = _requests(requests, len(outputs), weights)
    if weights is None:  # the rows in order, repeated or cut to the requests
        served_outputs, served_inputs = _served(outputs, inputs, n)
        return Workload(served_outputs, served_inputs, None, n, str(path))
    return Workload(outputs, inputs, weights, n, str(path))


def _requests(requests: int | None, rows: int, weights: tuple[float, ...] | None) -> int:
    if requests is not None:
        if isinstance(requests, bool) or not isinstance(requests, int) or requests < 1:
            raise UsageError(f"--requests must be a whole number >= 1, got {requests!r}")
        if requests > MAX_ROWS:
            raise UsageError(f"--requests: at most {MAX_ROWS:,} requests in a simulated run")
        return requests
    return rows if weights is None else WEIGHTED_REQUESTS


def _served(
    outputs: tuple[int, ...], inputs: tuple[int, ...] | None, n: int
) -> tuple[tuple[int, ...], tuple[int, ...] | None]:
    """The first *n* requests of the lengths repeated: what an unweighted run serves."""
    reps = -(-n // len(outputs))
    return (outputs * reps)[:n], None if inputs is None else (inputs * reps)[:n]


def _number_list(values: Sequence[int], option: str) -> tuple[int, ...]:
    column = option.removeprefix("--").replace("-", "_")
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise UsageError(f"{option}: {v!r} is not a whole number of tokens >= 1")
        if v > MAX_TOKENS[column]:
            raise UsageError(f"{option}: {v!r} is {_above(column)}")
        out.append(v)
    if not out:
        raise UsageError(f"{option}: give at least one length")
    return tuple(out)


def workload_from_numbers(
    input_tokens: Sequence[int] | None,
    output_tokens: Sequence[int],
    requests: int | None = None,
) -> Workload:
    """Requests of the given lengths (module docs); a simulated run serves *requests* of them,
    the list repeated (default: the list once)."""
    outputs = _number_list(output_tokens, "--output-tokens")
    inputs = None if input_tokens is None else _number_list(input_tokens, "--input-tokens")
    if inputs is not None and len(inputs) != len(outputs):
        if len(inputs) == 1:
            inputs = inputs * len(outputs)
        elif len(outputs) == 1:
            outputs = outputs * len(inputs)
        else:
            raise UsageError(
                f"--input-tokens gives {len(inputs)} lengths and --output-tokens "
                f"{len(outputs)}: give as many of each (they pair up), or one of either"
            )
    n = _requests(requests, len(outputs), None)
    outputs, inputs = _served(outputs, inputs, n)
    where = "given lengths"
    return Workload(outputs, inputs, None, n, where)
