"""Helpers for tests and benchmarks: a writer of nsys-schema SQLite exports."""

from specnsys.testing.builder import NsysExportBuilder, global_pid, global_tid, gpu_loop

__all__ = ["NsysExportBuilder", "global_pid", "global_tid", "gpu_loop"]
