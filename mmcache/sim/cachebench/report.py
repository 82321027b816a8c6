"""CacheBench-MM's report: per-request outcomes and latencies of one replay, summaries, and the
Prometheus exposition of a report. In a notebook a :class:`Report` shows itself as tables (hit
rate per tier and per modality set, latency, queueing, limits, provenance); its plain data is
:meth:`Report.to_dataframe` (tidy) or :meth:`Report.as_dict`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from mmcache.errors import ConfigError
from mmcache.metrics import register_serving
from mmcache.sim.cachebench.limits import replay_limits
from mmcache.sim.latency import LatencyModel
from mmcache.sim.workload import MODALITY_SET_NAMES, MODALITY_SETS, Workload
from mmcache.types import MODALITIES, fmt, html_card, html_fields, html_table, preview, safe_display

if TYPE_CHECKING:
    import pandas as pd

    from mmcache.sim.cachebench.engine import _RequestCosts


@dataclass
class Report:
    """What one replay measured (rates are over all requests unless named otherwise).

    ``hit_rate_per_modality`` is keyed by modality set (``"text"``, ``"text+image"``, ...);
    ``cross_modal_hit_rate`` is seed 001 §4.4's CrossModalHitRate, the share of multimodal
    queries (video clips included: keyframes and track) where at least two modalities hit: a
    tier serves a hit only when every modality of the query matches one entry, so it is their
    hit rate (a triple with two matching modalities and a third that does not is not served,
    and is not counted; None without multimodal queries); ``queue`` summarises the misses'
    waits for an inference server and ``waits_ms`` holds them per request.
    """

    n_req: int
    tiers: tuple[str, ...]
    hit_rate: float
    hit_rate_per_tier: dict[str, float]
    hit_rate_per_modality: dict[str, float]
    cross_modal_hit_rate: float | None
    false_hit_rate: float
    hit_precision: float
    byte_hit_rate: float
    latency_ms: dict[str, float]
    sla_ms: float
    sla_violation_rate: float
    queue: dict[str, Any]
    limits: dict[str, Any]
    provenance: dict[str, Any]
    latencies_ms: np.ndarray = field(repr=False)
    waits_ms: np.ndarray = field(repr=False)

    def as_dict(self) -> dict[str, Any]:
        """Everything but the per-request latencies and waits, JSON-ready."""
        out = asdict(self)
        out.pop("latencies_ms")
        out.pop("waits_ms")
        out["tiers"] = list(self.tiers)
        return out

    def to_dataframe(self) -> "pd.DataFrame":
        """Tidy table of the summaries: one row per ``(metric, key, value)``; ``key`` is the
        tier, modality set, latency statistic, queue or limit field (empty for a scalar)."""
        import pandas as pd  # deferred: pandas only for this export

        return pd.DataFrame(_rows(self), columns=["metric", "key", "value"])

    def __repr__(self) -> str:
        return safe_display(self._plain, self)

    def _repr_html_(self) -> str:
        return safe_display(self._html, self, as_html=True)

    def _plain(self) -> str:
        return (f"Report(n_req={self.n_req:,}, tiers={list(self.tiers)}, "
                f"hit_rate={fmt(self.hit_rate, 3)}, false_hit_rate={fmt(self.false_hit_rate, 3)}, "
                f"p99_ms={fmt(self.latency_ms.get('p99'), 3)}, sla_ms={fmt(self.sla_ms, 3)}, "
                f"sla_violation_rate={fmt(self.sla_violation_rate, 3)})")

    def _html(self) -> str:
        summary = html_fields([
            ("requests", self.n_req), ("hit rate", self.hit_rate),
            ("false-hit rate", self.false_hit_rate), ("hit precision", self.hit_precision),
            ("byte hit rate", self.byte_hit_rate),
            ("cross-modal hit rate", self.cross_modal_hit_rate),
            ("SLA (ms)", self.sla_ms), ("SLA violation rate", self.sla_violation_rate)],
            caption="Summary")
        tiers = html_table(["tier", "hit rate"],
                           [[t, self.hit_rate_per_tier.get(t)] for t in self.tiers],
                           caption="Hit rate per tier (share of all requests)")
        sets = html_table(["modality set", "hit rate"], sorted(self.hit_rate_per_modality.items()),
                          caption="Hit rate per modality set")
        latency = html_table(list(self.latency_ms), [list(self.latency_ms.values())],
                             caption="Latency (ms)")
        queue = html_fields(sorted(self.queue.items()), caption="Queue (misses)") \
            if self.queue else ""
        limits = html_fields([(k, v if isinstance(v, (int, float, str)) or v is None
                               else preview(v)) for k, v in sorted(self.limits.items())],
                             caption="Limits") if self.limits else ""
        provenance = html_fields([(k, v if isinstance(v, str) else preview(v, 160))
                                  for k, v in self.provenance.items()], caption="Provenance")
        return html_card("CacheBench-MM Report", summary, tiers, sets, latency, queue, limits,
                         provenance, note="plain data: .to_dataframe(), .as_dict()")


def _rows(report: Report) -> list[tuple[str, str, Any]]:
    """The summary rows of :meth:`Report.to_dataframe`."""
    rows: list[tuple[str, str, Any]] = [
        (name, "", getattr(report, name)) for name in (
            "n_req", "hit_rate", "cross_modal_hit_rate", "false_hit_rate", "hit_precision",
            "byte_hit_rate", "sla_ms", "sla_violation_rate")]
    for metric in ("hit_rate_per_tier", "hit_rate_per_modality", "latency_ms", "queue",
                   "limits"):
        rows += [(metric, str(k), v) for k, v in getattr(report, metric).items()]
    return rows


def report_prometheus(report: Report, workload: Workload, *, model_type: str,
                      warmup_n: int | None = None, registry: Any = None) -> str:
    """Seed 001 §4.4's metrics of one replay (:func:`mmcache.metrics.register_serving`):
    CrossModalHitRate per multimodal modality set and, over the first ``warmup_n`` requests
    after its cold start, CacheWarmupLatencyP99 per modality set. Registers them on
    ``registry`` (a ``prometheus_client`` registry; default a fresh one) and returns the
    registry's exposition text."""
    # deferred: prometheus_client only when metrics are exported
    from prometheus_client import CollectorRegistry, generate_latest

    registry = CollectorRegistry(auto_describe=False) if registry is None else registry
    sets = workload.modality_set[:report.n_req]
    warm = {}
    if warmup_n is not None:
        if not 1 <= warmup_n <= report.n_req:
            raise ConfigError(f"warmup_n must be in [1, {report.n_req}], got {warmup_n!r}")
        window = sets[:warmup_n]
        warm = {MODALITY_SET_NAMES[k]: report.latencies_ms[:warmup_n][window == k].tolist()
                for k in np.unique(window).tolist()}
    cross = {name: v for name, v in report.hit_rate_per_modality.items()
             if len(MODALITY_SETS[MODALITY_SET_NAMES.index(name)]) > 1}
    register_serving(registry, model_type=model_type, cross_modal=cross, warmup_ms=warm)
    return generate_latest(registry).decode()


def build_report(workload: Workload, names: Sequence[str], latency: LatencyModel,
            hit_tier: np.ndarray, false_hit: np.ndarray, lat_ms: np.ndarray,
            costs: _RequestCosts, capacity: int | None, policy: str,
            setup: dict[str, Any]) -> Report:
    hit = hit_tier >= 0
    per_mod = {m: float(hit[workload.modality_set == k].mean())
               for k, m in enumerate(MODALITY_SET_NAMES) if (workload.modality_set == k).any()}
    multimodal = workload.modality_set >= len(MODALITIES)
    return Report(
        n_req=int(hit.shape[0]), tiers=tuple(names), hit_rate=float(hit.mean()),
        hit_rate_per_tier={t: float((hit_tier == k).mean()) for k, t in enumerate(names)},
        hit_rate_per_modality=per_mod,
        cross_modal_hit_rate=float(hit[multimodal].mean()) if multimodal.any() else None,
        false_hit_rate=float(false_hit.mean()),
        hit_precision=float(1.0 - false_hit.sum() / hit.sum()) if hit.any() else 1.0,
        byte_hit_rate=float(workload.size[hit].sum() / workload.size.sum()),
        latency_ms={f"p{q}": float(np.percentile(lat_ms, q)) for q in (50, 95, 99)}
        | {"mean": float(lat_ms.mean())},
        sla_ms=latency.sla_ms, sla_violation_rate=float((lat_ms > latency.sla_ms).mean()),
        queue=costs.summary(~hit, workload),
        limits={} if capacity is None else
        replay_limits(workload, capacity, policy) | {"capacity_bytes": capacity},
        provenance={"workload": workload.describe(), "embeddings": workload.embedding_kinds(),
                    **setup,
                    "latency_model": latency.describe()},
        latencies_ms=lat_ms, waits_ms=costs.wait_ms)
