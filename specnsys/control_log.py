"""Unprofiled control runs: the annotation layer's own clock when no profiler is attached.

NVTX ranges and CUPTI tracing make a launch-bound decode loop slower; the per-token time a
trace shows is the profiled one. ``specnsys profile --control N`` runs the same command N more
times without nsys, with :data:`CONTROL_ENV` naming a file: the annotation layer
(:mod:`specnsys.annotate`, and through it ``profile --annotate``) then makes no NVTX call and
only notes, on ``time.perf_counter_ns``, when each request started and ended and how many
output tokens the ``tokens`` marks (else the requests' ``output_tokens``) counted, and writes
them to that file when the program exits. The capture folds the runs into
``OUT.control.json`` beside the trace, which ``analyze`` and ``compare`` read.

Standard library and the vocabulary only: this module is loaded inside users' programs.
"""

from __future__ import annotations

import atexit
import json
import os
import statistics
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

if TYPE_CHECKING:
    from specnsys.results import JSONValue

__all__ = [
    "CONTROL_ENV",
    "CONTROL_FORMAT",
    "ControlLog",
    "control_beside",
    "control_from_env",
    "read_control",
    "read_run",
    "summarize_runs",
]

CONTROL_ENV = "SPECNSYS_CONTROL_LOG"
"""The file an unprofiled run writes its request times and token counts to."""

CONTROL_FORMAT = "specnsys-control"


class PerTokenSummary(TypedDict):
    """The median, min and max per-token time (ns) of the control runs that counted tokens."""

    median: float | None
    min: float | None
    max: float | None
    runs: int


class ControlSummary(TypedDict):
    """``OUT.control.json`` (:func:`summarize_runs`): the command, its runs' own documents and
    the per-token summary ``analyze`` compares the profiled run with."""

    format: str
    command: list[str]
    runs: list[dict[str, JSONValue]]
    per_token_ns: PerTokenSummary


class ControlLog:
    """Request times and token counts of one unprofiled run (see the module docs)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._starts: dict[int, int] = {}
        self._first: int | None = None
        self._last: int | None = None
        self._requests = 0
        self._tokens = 0
        self._output_tokens = 0
        self._marked = False
        atexit.register(self.write)

    def start(self) -> int:
        """Note a request's start; the key :meth:`end` takes."""
        now = time.perf_counter_ns()
        with self._lock:
            key = len(self._starts) + self._requests
            self._starts[key] = now
            if self._first is None or now < self._first:
                self._first = now
        return key

    def end(self, key: int, output_tokens: int | None) -> None:
        now = time.perf_counter_ns()
        with self._lock:
            if self._starts.pop(key, None) is None:
                return
            self._requests += 1
            self._last = now if self._last is None else max(self._last, now)
            self._output_tokens += output_tokens or 0

    def tokens(self, n: int) -> None:
        with self._lock:
            self._tokens += n
            self._marked = True

    def write(self) -> None:
        """Write the run's figures (at exit; a second call writes the same)."""
        with self._lock:
            window = None if self._first is None or self._last is None else self._last - self._first
            tokens = self._tokens if self._marked else self._output_tokens
            doc = {
                "format": CONTROL_FORMAT,
                "clock": "time.perf_counter_ns",
                "requests": self._requests,
                "window_ns": window,
                "tokens": tokens,
                "tokens_source": "tokens_marks" if self._marked else "output_tokens",
                "per_token_ns": window / tokens if window and tokens else None,
            }
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        try:
            tmp.write_text(json.dumps(doc) + "\n")
            tmp.replace(self.path)
        except OSError:
            pass  # the program's own exit is not ours to fail


def control_from_env() -> ControlLog | None:
    """The run's control log when :data:`CONTROL_ENV` names one, else None."""
    path = os.environ.get(CONTROL_ENV)
    return ControlLog(Path(path)) if path else None


def summarize_runs(runs: list[dict[str, JSONValue]], command: list[str]) -> ControlSummary:
    """``OUT.control.json``: the control runs and the median, min and max per-token time of
    those that counted tokens."""
    per_token = [v for r in runs if (v := _number(r.get("per_token_ns")))]
    return {
        "format": CONTROL_FORMAT,
        "command": command,
        "runs": runs,
        "per_token_ns": {
            "median": statistics.median(per_token) if per_token else None,
            "min": min(per_token) if per_token else None,
            "max": max(per_token) if per_token else None,
            "runs": len(per_token),
        },
    }


def control_beside(trace: str | Path) -> Path:
    """Where a trace's control runs are kept: ``OUT.control.json`` beside ``OUT.sqlite``."""
    path = Path(trace)
    return path.with_name(f"{path.stem}.control.json")


def _number(value: JSONValue) -> float | None:
    """*value* when it is a JSON number (not a boolean), else None."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value
    return None


def read_run(path: Path) -> dict[str, JSONValue] | None:
    """One control run's figures (None when it wrote none or noted no request)."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("format") != CONTROL_FORMAT or not doc.get("requests"):
        return None
    return doc


def read_control(path: Path) -> ControlSummary | None:
    """The control summary at *path* (None when absent or not one: it is optional)."""
    try:
        doc: JSONValue = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("format") != CONTROL_FORMAT:
        return None
    per = doc.get("per_token_ns")
    if not isinstance(per, dict) or not isinstance(per.get("median"), (int, float)):
        return None
    runs, command = doc.get("runs"), doc.get("command")
    return {
        "format": CONTROL_FORMAT,
        "command": [str(c) for c in command] if isinstance(command, list) else [],
        "runs": [r for r in runs if isinstance(r, dict)] if isinstance(runs, list) else [],
        "per_token_ns": {
            "median": _number(per.get("median")),
            "min": _number(per.get("min")),
            "max": _number(per.get("max")),
            "runs": int(n) if isinstance(n := per.get("runs"), (int, float)) else 0,
        },
    }
