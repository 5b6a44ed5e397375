"""Long kernel, range and phase names (issue 30, item 6): cut with "…" in a terminal's table,
whole with ``--wide`` and whenever stdout is not a terminal (piped, redirected), as ``nsys
stats`` users expect. The terminal is a real pseudo-terminal."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

from specnsys.testing import NsysExportBuilder

KERNEL = "void flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4, false, " \
    "false, cutlass::half_t>, true, false, false, false, true, false, false>(Flash_fwd_params)"
RANGE = "EngineCore.step.model_executor.execute_model.forward_with_a_very_long_name"


def _trace(path: Path) -> Path:
    """An engine's own NVTX names (no specnsys ranges: the nvtx rules make each its own
    phase), one long range launching one kernel of a long name, four times."""
    b = NsysExportBuilder()
    b.process(1, "python3")
    b.thread(1, 1, "main")
    b.domain(1, "engine", pid=1, tid=1)
    for i in range(4):
        t = i * 1000
        b.push_pop(t, t + 800, RANGE, pid=1, tid=1, domain_id=1)
        b.runtime(t + 10, t + 20, "cudaLaunchKernel_v7000", i + 1)
        b.kernel(t + 30, t + 600, KERNEL, i + 1, demangled=KERNEL)
    return b.write(path)


def _on_a_terminal(args: list[str]) -> str:
    """The command's stdout when it is a pseudo-terminal."""
    main, child = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "specnsys", *args], stdout=child,
                            stderr=subprocess.DEVNULL)  # fmt: skip
    os.close(child)
    chunks = []
    while True:
        try:
            data = os.read(main, 65536)
        except OSError:  # EIO: the terminal's other side closed
            break
        if not data:
            break
        chunks.append(data)
    os.close(main)
    assert proc.wait(timeout=120) == 0
    return b"".join(chunks).decode().replace("\r\n", "\n")


def _piped(args: list[str]) -> str:
    done = subprocess.run([sys.executable, "-m", "specnsys", *args], capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize(("command", "name", "cut"), [
    ("kernels", KERNEL, KERNEL[:69] + "…"),
    ("ranges", f"engine:{RANGE}", f"engine:{RANGE}"[:47] + "…"),
    ("phases", RANGE, RANGE[:47] + "…"),
])  # fmt: skip
def test_names_are_cut_on_a_terminal_and_whole_with_wide_or_piped(
    tmp_path: Path, command: str, name: str, cut: str
) -> None:
    trace = str(_trace(tmp_path / "engine.sqlite"))
    terminal = _on_a_terminal([command, trace])
    assert cut in terminal and name not in terminal
    wide = _on_a_terminal([command, trace, "--wide"])
    assert name in wide and "…" not in wide
    piped = _piped([command, trace])
    assert name in piped and "…" not in piped
    assert piped == _piped([command, trace, "--wide"])
    # the whole name widens its column: the cells after it still end under the header's
    if command != "kernels":  # there the name is the last column
        lines = piped.splitlines()
        (header,) = [line for line in lines if line.startswith(f"{command[:-1]}  ")]
        (row,) = [line for line in lines if line.startswith(name)]
        assert len(row) == len(header), (header, row)
