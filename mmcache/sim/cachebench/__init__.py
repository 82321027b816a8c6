"""CacheBench-MM: a multimodal cache hierarchy replayed over a workload, with latency under load.

The engine (seed 002 §4.3) replays a :class:`mmcache.sim.workload.Workload` through a
hierarchy of tiers, each a bare eviction policy from :mod:`mmcache.policies` with a
byte capacity and a match rule (``"exact"`` key or ``"semantic"``: the query's vector
of every modality it carries at cosine ≥ the tier's threshold to the same resident
entry of the same modality set; exact search over the resident vectors, read from the
workload's neighbour table wherever its cutoff covers the lookup, :class:`Replayer`). A video
clip (keyframes + audio track) is a modality set of its own, kept in its own index. A tier may
serve only some modality sets (``TierSpec.modality_sets``; :func:`route_video_to_last` is seed
002 §3.1's route, video to the central tier only): a request of another set neither consults
it nor is stored there. A lookup walks the tiers top-down; a hit is copied up into the tiers
above it that serve its set (promote on hit); a miss runs the model and writes the answer
through to every tier that serves its set (as LMCache does).

Latency of one request = lookup cost of every tier consulted + the encoder cost
(once, when a semantic tier is consulted: every modality of the query, one after
another; a clip's keyframes are :data:`~mmcache.datasets.variants.KEYFRAMES` image encodes) + on a hit, ``size / bandwidth`` of the hit tier, or on a miss the wait for
one of the :class:`LatencyModel`'s ``servers`` inference servers (FCFS, at the
request's arrival time; :class:`mmcache.sim.latency.ServerPool`) and the model-inference
time (the slowest of the query's modalities). Each cost is drawn per request from its
distribution, seeded. Write back is off the critical path. Load: :func:`offered_load`
and :func:`at_load` (arrivals ÷ the servers' capacity, as if nothing hit), :func:`backend_load`
and :func:`at_backend_load` (the load that reaches the servers: arrival rate × miss rate × the
misses' mean inference time ÷ servers), :func:`load_sweep` over the backend load.

Serving features: :func:`degradation_replay` / :func:`degradation_rows` serve requests at the
degradation levels of :mod:`mmcache.sim.cachebench.degradation` (forced, or switched by the inference queue at
each arrival); :mod:`mmcache.sim.cachebench.prefetch` warms a cold replay with a PageRank prefetch;
:func:`report_prometheus` exports seed 001 §4.4's CrossModalHitRate and CacheWarmupLatencyP99.
:func:`served_summary` splits a served replay by request (e.g. video clips against the rest),
with 95% intervals from a bootstrap over given clusters (the distinct clip or intent of each).

Freshness: ``replay(..., ttl_s=τ)`` gives every answer a TTL of τ seconds of workload
time from the moment the model produced it (a copy promoted up a tier keeps that
moment). A lookup that matches an expired entry drops it from the tier and searches
on, so the request misses unless a fresh entry matches; the miss writes a fresh
answer through. ``ttl_s=None`` (the default) never expires anything.

Where costs come from: :meth:`LatencyModel.measured` takes encoder and tier-lookup
times from the profile the workbench measured on this machine
(``mmcache/resources/latency_profile.json``, ``make latency-profile``), and a miss's model
inference measured where a model runs here (a Whisper tiny.en transcription for audio, the
offline CLIP's zero-shot classification for images: the profile's ``infer.*`` entries) and
from :data:`ASSUMED_TEXT_INFERENCE`, a labelled assumption, for text (no language model is
served here).
``LatencyModel()``, :data:`BANDWIDTH_GBPS`, :data:`CACHE_TIER_COSTS` and
:func:`three_tier`'s ``lookup_us`` are **assumed nominal values** (spec-sheet order of
magnitude), parameters to vary, never measurements.

Every :class:`Report` also carries the limits on the same stream, at the
hierarchy's total capacity (:func:`replay_limits`): a lower bound on the misses of
any exact-key cache (Belady's miss ratio beside it, a heuristic when sizes vary),
and the *oracle semantic cache* (ground-truth equivalence within a modality, as
the tiers match: any paraphrase of an intent in the query's modality hits, zero
false hits), with its lower bound and its misses under the first tier's policy and
under Belady."""

from mmcache.sim.cachebench.spec import (
    BANDWIDTH_GBPS, CACHE_TIER_COSTS, MATCH_RULES, TierSpec, measured_cache_tier_costs,
    route_video_to_last, three_tier, three_tier_cache_config)
from mmcache.sim.cachebench.engine import (
    KEYWORD_KEY_BASE, Replayer, loosest_floor, replay, served_summary)
from mmcache.sim.cachebench.report import Report, build_report, report_prometheus
from mmcache.sim.cachebench.load import (
    at_backend_load, at_load, backend_load, degradation_replay, degradation_rows, load_reports,
    load_row, load_sweep, offered_load)
from mmcache.sim.cachebench.degradation import (
    DEFAULT_QUEUE_THRESHOLDS, Degrader, LEVELS, check_level)
from mmcache.sim.cachebench.live import drive_cache
from mmcache.sim.cachebench.limits import replay_limits
from mmcache.sim.cachebench.neighbours import (
    HALF_PRECISION_FROM, NeighbourTable, SPAN, TILE, best_resident, candidate_groups, cos_slack,
    half_precision_error, half_precision_format, neighbour_table, range_search)
from mmcache.sim.cachebench.prefetch import (
    PrefetchResult, TAU_S, node_ids, pagerank, prefetch_plan, prefetch_replay, reference_graph)
from mmcache.sim.cachebench.kernel import FIRST_SLOTS, KERNEL_POLICIES, TierReplay

__all__ = [
    "BANDWIDTH_GBPS", "CACHE_TIER_COSTS", "DEFAULT_QUEUE_THRESHOLDS", "Degrader", "FIRST_SLOTS",
    "HALF_PRECISION_FROM", "KERNEL_POLICIES", "KEYWORD_KEY_BASE", "LEVELS", "MATCH_RULES",
    "NeighbourTable", "PrefetchResult", "Replayer", "Report", "SPAN", "TAU_S", "TILE",
    "TierReplay", "TierSpec", "at_backend_load", "at_load", "backend_load", "best_resident",
    "build_report", "candidate_groups", "check_level", "cos_slack", "degradation_replay",
    "degradation_rows", "half_precision_error",
    "half_precision_format", "load_reports", "load_row", "load_sweep", "loosest_floor",
    "measured_cache_tier_costs", "neighbour_table", "node_ids", "offered_load", "pagerank",
    "prefetch_plan", "prefetch_replay", "range_search", "reference_graph", "replay",
    "drive_cache", "replay_limits", "report_prometheus", "route_video_to_last", "served_summary",
    "three_tier", "three_tier_cache_config"]
