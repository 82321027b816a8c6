"""Simulation: traces and their replay through eviction policies, bounds on optimal misses,
miss-ratio curves, the compiled kernels, workload generators, CacheBench-MM, a model of
KV-cache pre-allocation over multi-turn conversations (:mod:`mmcache.sim.kv_allocation`),
the cache-invalidation MDP (:mod:`mmcache.sim.invalidation_mdp`) and a discrete-event model of
foreground lookups and background I/O sharing the tiers' channels under preemption
(:mod:`mmcache.sim.preemption`; driven by a CacheBench-MM replay in
:mod:`mmcache.sim.preemption_replay`)."""
