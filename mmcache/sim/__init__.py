"""Simulation: traces and their replay through eviction policies, bounds on optimal misses,
miss-ratio curves, the compiled kernels, workload generators and CacheBench-MM."""
