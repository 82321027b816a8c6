"""Simulation: traces and their replay through eviction policies, bounds on optimal misses,
miss-ratio curves, the compiled kernels, workload generators, CacheBench-MM, a model of
KV-cache pre-allocation over multi-turn conversations (:mod:`mmcache.sim.kv_allocation`) and
the cache-invalidation MDP (:mod:`mmcache.sim.invalidation_mdp`)."""
