"""Issue 31 item 5: one way to hold Ctrl-C while something must finish, for ``profile``'s
cleanup and ``collect``'s run records alike.

``profile`` held signals with a thread mask: the kernel then delivers SIGINT to another
thread of the process (the output relay), CPython's handler still runs in the main thread,
and the KeyboardInterrupt landed in the middle of the cleanup it was meant to protect. The
Python-level hold (handlers replaced for the block, the signals raised after it) holds
whatever thread the kernel picks.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from specnsys import capture
from specnsys.held_signals import signals_held
from specnsys.runset import dataset


def test_profile_and_collect_hold_signals_the_one_way() -> None:
    assert vars(capture)["signals_held"] is signals_held
    assert vars(dataset)["signals_held"] is signals_held


def test_a_ctrl_c_while_another_thread_runs_waits_for_the_block() -> None:
    stop = threading.Event()
    other = threading.Thread(target=stop.wait, daemon=True)  # the relay, a pool feeder...
    other.start()
    finished = False
    try:
        with pytest.raises(KeyboardInterrupt), signals_held():
            os.kill(os.getpid(), signal.SIGINT)
            deadline = time.monotonic() + 0.5
            while time.monotonic() < deadline:  # the interpreter checks for signals here
                pass
            finished = True
    finally:
        stop.set()
        other.join()
    assert finished, "the KeyboardInterrupt cut the held block short"
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
