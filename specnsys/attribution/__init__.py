"""NVTX -> GPU projection and the exclusive phase timeline (docs/design.md#attribution).

* :func:`gpu_ops_with_phase` -- every kernel/memcpy/memset with the phase it was launched in;
* :func:`exclusive_phase_times` -- per-phase exclusive wall time summing to the window exactly;
* :mod:`.rules` -- which NVTX ranges are phases (built-in sets and TOML name-mapping files).
"""

from specnsys.attribution.launch import UNANNOTATED, UNATTRIBUTED_GPU, gpu_ops_with_phase
from specnsys.attribution.rules import (
    BUILTIN_RULES,
    PhaseRule,
    PhaseRules,
    builtin_rules,
    default_rules,
    load_rules,
    resolve_rules,
)
from specnsys.attribution.timeline import PhaseBreakdown, exclusive_phase_times

__all__ = [
    "BUILTIN_RULES",
    "UNANNOTATED",
    "UNATTRIBUTED_GPU",
    "PhaseBreakdown",
    "PhaseRule",
    "PhaseRules",
    "builtin_rules",
    "default_rules",
    "exclusive_phase_times",
    "gpu_ops_with_phase",
    "load_rules",
    "resolve_rules",
]
