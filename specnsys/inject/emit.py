"""Where the injected hooks send their ranges and marks: :mod:`specnsys.annotate`.

The hooks emit through an :class:`Emitter` so that the ranges and marks are exactly the ones
the library's own annotations make (same domain, names, colors, nesting and checks), and so
that what the hooks do can be seen without a profiler: NVTX without a collector is a no-op, so
``SPECNSYS_ANNOTATE_LOG=FILE`` (and the tests) add a :class:`LogEmitter` that also writes every
event as a line of text.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager
from typing import IO

from specnsys import annotate

__all__ = ["Emitter", "LogEmitter"]


class Emitter:
    """Ranges and marks through :mod:`specnsys.annotate` (no-ops when no collector attached)."""

    def phase(self, name: str) -> AbstractContextManager[object]:
        return annotate.phase(name)

    def acceptance(self, proposed: int, accepted: int) -> None:
        annotate.mark_acceptance(proposed, accepted)

    def tokens(self, n: int) -> None:
        annotate.mark_tokens(n)

    def first_token(self, request_id: int) -> None:
        annotate.mark_first_token(request_id)

    def start_request(self, request_id: int) -> annotate.RequestHandle:
        return annotate.start_request(request_id)

    def end_request(self, handle: annotate.RequestHandle, output_tokens: int | None) -> None:
        annotate.end_request(handle, output_tokens)


class LogEmitter(Emitter):
    """The annotate calls plus one text line per event (``push decode``, ``mark accepted 2``)
    on *stream*: what the hooks did, readable without nsys."""

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream
        self._lock = threading.Lock()

    def _write(self, line: str) -> None:
        with self._lock:
            self._stream.write(line + "\n")
            self._stream.flush()

    @contextlib.contextmanager
    def _logged(self, name: str) -> Iterator[None]:
        self._write(f"push {name}")
        try:
            with annotate.phase(name):
                yield
        finally:
            self._write(f"pop {name}")

    def phase(self, name: str) -> AbstractContextManager[object]:
        return self._logged(name)

    def acceptance(self, proposed: int, accepted: int) -> None:
        super().acceptance(proposed, accepted)
        self._write(f"mark proposed {proposed}")
        self._write(f"mark accepted {accepted}")

    def tokens(self, n: int) -> None:
        super().tokens(n)
        self._write(f"mark tokens {n}")

    def first_token(self, request_id: int) -> None:
        super().first_token(request_id)
        self._write(f"mark first_token {request_id}")

    def start_request(self, request_id: int) -> annotate.RequestHandle:
        handle = super().start_request(request_id)
        self._write(f"start request {request_id}")
        return handle

    def end_request(self, handle: annotate.RequestHandle, output_tokens: int | None) -> None:
        super().end_request(handle, output_tokens)
        suffix = "" if output_tokens is None else f" output_tokens {output_tokens}"
        self._write(f"end request {handle.request_id}{suffix}")
