"""Helpers for tests and benchmarks: a writer of nsys-schema SQLite exports, and (in
``draws``) the forecast simulation's first version as a reference."""

from specnsys.testing.builder import NsysExportBuilder, global_pid, global_tid, gpu_loop

__all__ = ["NsysExportBuilder", "global_pid", "global_tid", "gpu_loop"]
