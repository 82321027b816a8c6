"""Trace replay, the public path: read libCacheSim or CSV traces, simulate eviction policies,
bound the optimal policy's misses (:mod:`mmcache.sim.replay`, :mod:`mmcache.sim.bounds`)."""

from mmcache.sim.bounds import OptBounds, opt_bounds
from mmcache.sim.replay import SimResult, attention_entropy_proxy, simulate
from mmcache.sim.trace import (ORACLE_GENERAL_DTYPE, Trace, make_trace, read_csv_trace,
                               read_oracle_general, write_oracle_general)

__all__ = ["ORACLE_GENERAL_DTYPE", "OptBounds", "SimResult", "Trace", "attention_entropy_proxy",
           "make_trace", "opt_bounds", "read_csv_trace", "read_oracle_general", "simulate",
           "write_oracle_general"]
