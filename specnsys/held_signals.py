"""Hold SIGINT, SIGTERM and SIGHUP while something must finish (a capture's cleanup, a
run's record in a dataset), then deliver them.

Python-level: the handlers are replaced for the block and the signals that arrived are raised
after it. A thread mask would not do: the kernel delivers a process's signal to any thread
that does not block it (the capture's output relay, collect's pool threads), and CPython runs
the handler in the main thread whichever thread received it. Only the main thread can set
handlers, so elsewhere the block runs unprotected.

Base module: it imports nothing of specnsys.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

__all__ = ["HELD_SIGNALS", "signals_held"]

HELD_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Hold :data:`HELD_SIGNALS` for the block, then deliver them to the handlers that were in
    place, in the order they came (module docs)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    arrived: list[int] = []
    saved = {sig: signal.signal(sig, lambda signum, _frame: arrived.append(signum))
             for sig in HELD_SIGNALS}  # fmt: skip
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)
        for signum in arrived:
            signal.raise_signal(signum)
