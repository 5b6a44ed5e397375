"""The breakdown's per-(phase, kernel name) sums (``PhaseBreakdown.kernel_names``, what the top
kernels per phase are ranked from): every kernel of the window counted once under the phase it
was launched in, copies left out, and a kernel without a name counted with the kernels called
"(unnamed kernel)" -- one row, however the names are carried through the attribution."""

from __future__ import annotations

from pathlib import Path

import specnsys
from specnsys.attribution.timeline import exclusive_phase_times
from specnsys.testing import NsysExportBuilder

KERNEL_TABLE = "CUPTI_ACTIVITY_KIND_KERNEL"
SHORT_NAME = 8  # the shortName id's place in the builder's kernel rows
NO_STRING = 999_999  # an id StringIds does not hold: the model's name is NULL


def _export(tmp_path: Path) -> Path:
    b = NsysExportBuilder()
    b.process(10, "python3")
    b.thread(10, 10, "python3")
    b.domain(1, "specnsys", pid=10, tid=10)
    b.push_pop(1_000, 5_000, "draft", pid=10, tid=10, domain_id=1)
    b.push_pop(5_000, 9_000, "verify", pid=10, tid=10, domain_id=1)
    launches = [  # (launch at, kernel start, end, name) -- None: a kernel without a name
        (1_100, 1_200, 1_500, "gemm"),
        (1_600, 1_700, 2_000, "gemm"),
        (2_100, 2_200, 2_600, "(unnamed kernel)"),
        (2_700, 2_800, 3_300, None),
        (5_100, 5_200, 5_900, "gemm"),
        (6_000, 6_100, 6_400, "attn"),
    ]
    for corr, (at, start, end, name) in enumerate(launches, start=1):
        b.runtime(at, at + 50, "cudaLaunchKernel", corr, pid=10, tid=10)
        b.kernel(start, end, name or "placeholder", corr, pid=10)
        if name is None:
            row = list(b.rows[KERNEL_TABLE][-1])
            row[SHORT_NAME] = NO_STRING
            b.rows[KERNEL_TABLE][-1] = tuple(row)
    b.runtime(3_400, 3_450, "cudaMemcpyAsync", 99, pid=10, tid=10)
    b.memcpy(3_500, 4_000, 4096, 99, pid=10)
    b.gpu(0)
    return b.write(tmp_path / "names.sqlite")


def test_kernel_names_sum_each_phase_s_kernels_once_by_name(
    tmp_path: Path, isolated_cache: Path
) -> None:
    with specnsys.open(_export(tmp_path)) as trace:
        names = exclusive_phase_times(trace).kernel_names
    assert names == [
        {"phase": "draft", "name": "(unnamed kernel)", "count": 2, "ns": 400 + 500},
        {"phase": "draft", "name": "gemm", "count": 2, "ns": 300 + 300},
        {"phase": "verify", "name": "attn", "count": 1, "ns": 300},
        {"phase": "verify", "name": "gemm", "count": 1, "ns": 700},
    ]
