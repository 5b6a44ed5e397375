"""p, r, Amdahl, acceptance, sampler share, bandwidth, compare (not built yet)."""
