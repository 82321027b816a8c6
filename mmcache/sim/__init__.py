"""Simulation: traces and their replay through eviction policies, bounds on optimal misses,
miss-ratio curves, the compiled kernels, workload generators, CacheBench-MM and the
cache-invalidation MDP (:mod:`mmcache.sim.invalidation_mdp`)."""
