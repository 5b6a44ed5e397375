"""NVTX -> GPU projection and the exclusive phase timeline (DESIGN.md section 4).

* :func:`gpu_ops_with_phase` -- every kernel/memcpy/memset with the phase it was launched in;
* :func:`exclusive_phase_times` -- per-phase exclusive wall time summing to the window exactly.
"""

from specnsys.attribution.launch import UNANNOTATED, UNATTRIBUTED_GPU, gpu_ops_with_phase
from specnsys.attribution.timeline import PhaseBreakdown, exclusive_phase_times

__all__ = [
    "UNANNOTATED",
    "UNATTRIBUTED_GPU",
    "PhaseBreakdown",
    "exclusive_phase_times",
    "gpu_ops_with_phase",
]
