"""A registered metric that makes a ``collect`` worker die in the middle of handing its result
back (tests/test_runset_collect.py).

A metric runs inside the worker's analysis, so its ``compute`` can arm the fault there: from
then on, the worker's next message through a ``multiprocessing`` pipe that is longer than
``PIPE_BUF`` (a write the kernel may split) is written half, and the worker SIGKILLs itself,
as the kernel's OOM killer or a user's ``kill -9`` can end it at that instant. The module is
importable by the worker (the pool pickles the metric by reference).
"""

from __future__ import annotations

import multiprocessing.connection
import os
import select
import signal
import struct
from typing import Any

from specnsys.metrics.registry import Metric, MetricContext

_ORIGINAL = multiprocessing.connection.Connection._send_bytes  # type: ignore[attr-defined]


def _half_then_die(self: Any, buf: Any) -> None:
    n = len(buf)
    if n > select.PIPE_BUF:
        self._send(struct.pack("!i", n) + bytes(buf[: n // 2]))
        os.kill(os.getpid(), signal.SIGKILL)
    _ORIGINAL(self, buf)


def arm(context: MetricContext) -> int:
    """Arm the fault in this process (once); the metric's payload is 0."""
    multiprocessing.connection.Connection._send_bytes = _half_then_die  # type: ignore[attr-defined]
    return 0


def text(payload: object) -> str | None:
    return None


DIES_HANDING_BACK = Metric(key="dies_handing_back", compute=arm, text=text)


#: The trace name (its file's stem) whose analysis :data:`DIES_ON_ONE` ends with a SIGKILL.
DOOMED = "spec_chat_c4_k2"


def die_on_one(context: MetricContext) -> int:
    """SIGKILL this worker when it analyses :data:`DOOMED`, every time: the trace's worker
    dies, and so does the one that retries it alone (the kernel's OOM killer ending a worker
    that a trace is too big for looks the same)."""
    if context.trace.path.stem == DOOMED:
        os.kill(os.getpid(), signal.SIGKILL)
    return 0


DIES_ON_ONE = Metric(key="dies_on_one", compute=die_on_one, text=text)
