"""NVTX -> GPU projection, exclusive phase timeline, name-mapping rules (not built yet)."""
