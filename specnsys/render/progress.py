"""Progress display for long operations (ingesting big traces, building a report).

A tqdm bar on stderr when stderr is a terminal; nothing at all otherwise (pipes, CI logs,
tests), so scripted output stays clean. ``SPECNSYS_PROGRESS=1`` forces the bar on and
``SPECNSYS_PROGRESS=0`` off. Without tqdm installed the display is silently skipped: progress
is a convenience, never a reason to fail.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TextIO

__all__ = ["progress", "progress_enabled"]


def progress_enabled(stream: TextIO | None = None) -> bool:
    """Whether to show a bar on *stream* (default stderr): a TTY, unless the env var says."""
    forced = os.environ.get("SPECNSYS_PROGRESS")
    if forced is not None and forced.strip() != "":
        return forced.strip().lower() not in {"0", "false", "no", "off"}
    stream = stream or sys.stderr
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


@contextmanager
def progress(total: int, description: str) -> Iterator[Callable[[str], None]]:
    """A bar of *total* steps; yields ``advance(label)``, called when a step starts.

    ``advance`` shows *label* as the current step (e.g. "analyze spec.sqlite") and moves
    the bar on by the previous step; leaving the block completes the bar and removes it.
    """
    bar = None
    if progress_enabled():
        try:
            from tqdm import tqdm
        except ImportError:  # pragma: no cover - tqdm is a dependency; a convenience only
            tqdm = None
        if tqdm is not None:
            bar = tqdm(total=total, desc=description, file=sys.stderr, leave=False,
                       unit="step", dynamic_ncols=True)  # fmt: skip
    started = 0

    def advance(label: str) -> None:
        nonlocal started
        if bar is None:
            return
        if started:
            bar.update(1)
        started += 1
        bar.set_postfix_str(label, refresh=True)

    try:
        yield advance
    finally:
        if bar is not None:
            bar.update(max(0, total - bar.n))
            bar.close()
