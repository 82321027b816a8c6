"""Interconnect contention between text-token streams and visual-feature bursts (seed 000 §2.3,
issue 30 item 3): the seed's occupancy formula beside a queueing model of the same link.

**Models with stated parameters, not measurements**: no GPU or interconnect is read here; the
link's bandwidth, the packet and feature sizes and every rate are parameters (:class:`Link`,
:class:`Traffic`), and the defaults are labelled assumptions.

Units, stated once: MB = 10⁶ bytes, GB = 10⁹ bytes, bandwidths in GB/s (bytes, not bits), so
1 MB/ms = 1 GB/s.

**The seed's formula** (:func:`seed_occupancy`, exactly as the seed writes it)::

    token_bytes = token_rate_mtps * 8 / 1000   # MB/ms: 8 bytes per token, per s -> per ms
    feat_bytes = feat_size_mb / interval_ms    # MB/ms: one feature per window
    occupancy % = (token_bytes + feat_bytes) / (pcie_bw_gbps / 8) * 100

Its numerator is in MB/ms = GB/s. Its denominator divides the bandwidth by 8, the conversion
from gigabits to gigabytes, although the seed states the bandwidth in GB/s (NVLink "32 GB/s",
"PCIe theoretical bandwidth (GB/s)"): with a bandwidth in GB/s the formula reports 8 × the
link's utilisation (and can pass 100 %); it is right only for a bandwidth given in Gbit/s.
It also fixes 8 bytes per token and reads the visual load as one ``feat_size_mb`` feature per
``interval_ms`` window. :func:`consistent_occupancy` is the same quantity with the units made
consistent (bandwidth in GB/s, bytes per token a parameter): offered bytes per second ÷
bandwidth, i.e. the link's utilisation ρ, in percent. Either is a *load*, linear in the
offered rates; neither says how long a transfer waits.

**The queueing model** (:func:`simulate`, checked against :func:`analytic`): one link of
``bandwidth_gb_per_s`` serving one transfer at a time, without preemption, at full bandwidth
(a transfer of ``b`` bytes takes ``b`` / bandwidth; protocol overhead and arbitration latency,
which the seed names, are not modelled). Two classes share it:

* token packets: a Poisson process of packets of ``tokens_per_packet`` × ``token_bytes``
  bytes, at ``token_rate_mtps`` × 10⁶ / ``tokens_per_packet`` packets per second (small,
  frequent);
* visual features: ``streams`` independent Poisson processes of bursts (``bursts_per_s`` each),
  a burst bringing ``features_per_burst`` features of ``feature_mb`` MB at one instant (large,
  bursty); each feature is one transfer.

Disciplines: ``"fcfs"`` (first come first served across both classes; a burst's features in
order) and ``"priority"`` (non-preemptive priority for token packets: when the link frees, a
waiting packet goes first; features FCFS among themselves). A transfer's **delay** is from its
arrival to the end of its transfer. A feature's **latency increase over an idle link** is its
delay minus the delay it would have with the link to its own burst alone (the j-th feature of
a burst: j × one feature's transfer time): the waiting other traffic causes. Arrivals fall in
[0, ``duration_s``); the run goes on until every transfer is done, from an empty link (no
warm-up is discarded). Token and burst arrivals draw from separate seeded generators, so
changing the burst rate (:func:`at_utilisation`) keeps the token arrivals.

:func:`analytic` gives the mean delays of the same model where closed forms exist (M/G/1,
Pollaczek–Khinchine; a burst under FCFS is served contiguously, so it is one "supercustomer"
of ``features_per_burst`` × the feature's transfer time; Cobham's formula for the token packets
under non-preemptive priority). :func:`sweep` tabulates configurations × utilisations ×
disciplines with the formula's occupancy beside the model's delays; :data:`SEED_CONFIGS` are
our reading of the seed's two typical configurations (the seed states no rates).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Any, Mapping, Sequence

import numpy as np

from mmcache.errors import ConfigError, check_count, check_number
from mmcache.sim.jit import array_loop

DISCIPLINES = ("fcfs", "priority")
MB, GB = 10 ** 6, 10 ** 9

#: The seed's single-link bandwidth ("NVLink 4.0 single link 32 GB/s"), as the seed states it.
SEED_BANDWIDTH_GB_PER_S = 32.0
#: The bytes per token fixed in the seed's formula (``token_rate_mtps * 8``).
SEED_TOKEN_BYTES = 8


def seed_occupancy(pcie_bw_gbps: float, token_rate_mtps: float, feat_size_mb: float,
                   interval_ms: float = 1) -> float:
    """Seed 000 §2.3's ``estimate_contention``, exactly as written: the occupancy in percent of
    a link of ``pcie_bw_gbps`` by ``token_rate_mtps`` million tokens/s (8 bytes each) and one
    ``feat_size_mb`` MB feature per ``interval_ms``. The bandwidth is divided by 8 (a
    gigabit-to-gigabyte conversion), so a bandwidth in GB/s gives 8 × the utilisation."""
    check_number(pcie_bw_gbps, "pcie_bw_gbps", 0.0)
    check_number(token_rate_mtps, "token_rate_mtps", 0.0, strict=False)
    check_number(feat_size_mb, "feat_size_mb", 0.0, strict=False)
    check_number(interval_ms, "interval_ms", 0.0)
    token_bytes = token_rate_mtps * 8 / 1000  # MB/ms
    feat_bytes = feat_size_mb / interval_ms  # MB/ms
    return (token_bytes + feat_bytes) / (pcie_bw_gbps / 8) * 100  # occupancy %


def consistent_occupancy(bandwidth_gb_per_s: float, token_rate_mtps: float,
                         feat_size_mb: float, interval_ms: float = 1,
                         token_bytes: int = SEED_TOKEN_BYTES) -> float:
    """The seed's quantity with consistent units: offered MB/ms (= GB/s) ÷ the bandwidth in
    GB/s, in percent, i.e. the link's utilisation × 100. With ``token_bytes`` = 8 it is
    exactly :func:`seed_occupancy` ÷ 8."""
    check_number(bandwidth_gb_per_s, "bandwidth_gb_per_s", 0.0)
    check_number(token_rate_mtps, "token_rate_mtps", 0.0, strict=False)
    check_number(feat_size_mb, "feat_size_mb", 0.0, strict=False)
    check_number(interval_ms, "interval_ms", 0.0)
    check_count(token_bytes, "token_bytes")
    offered = token_rate_mtps * token_bytes / 1000 + feat_size_mb / interval_ms  # MB/ms = GB/s
    return offered / bandwidth_gb_per_s * 100


@dataclass(frozen=True)
class Link:
    """One interconnect link: ``bandwidth_gb_per_s`` GB/s (10⁹ bytes/s), one transfer at a
    time at full bandwidth. Default: the seed's 32 GB/s NVLink single link (as stated there;
    an assumption, not a measurement)."""

    bandwidth_gb_per_s: float = SEED_BANDWIDTH_GB_PER_S
    name: str = "link"

    def __post_init__(self) -> None:
        check_number(self.bandwidth_gb_per_s, "bandwidth_gb_per_s", 0.0)

    def transfer_ms(self, nbytes: float) -> float:
        """Milliseconds to move ``nbytes`` over the idle link."""
        return nbytes / (self.bandwidth_gb_per_s * GB) * 1e3


@dataclass(frozen=True)
class Traffic:
    """The offered traffic (stated parameters; see the module docstring).

    ``token_rate_mtps``: million tokens per second, sent in packets of ``tokens_per_packet``
    tokens of ``token_bytes`` bytes (default 8, the seed formula's); ``streams`` visual streams,
    each a Poisson process of ``bursts_per_s`` bursts of ``features_per_burst`` features of
    ``feature_mb`` MB; arrivals over ``duration_s`` seconds from generators seeded by ``seed``.
    """

    token_rate_mtps: float = 10.0
    token_bytes: int = SEED_TOKEN_BYTES
    tokens_per_packet: int = 1024
    streams: int = 1
    bursts_per_s: float = 100.0
    features_per_burst: int = 8
    feature_mb: float = 1.18
    duration_s: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        check_number(self.token_rate_mtps, "token_rate_mtps", 0.0, strict=False)
        check_count(self.token_bytes, "token_bytes")
        check_count(self.tokens_per_packet, "tokens_per_packet")
        check_count(self.streams, "streams", 0)
        check_number(self.bursts_per_s, "bursts_per_s", 0.0, strict=False)
        check_count(self.features_per_burst, "features_per_burst")
        check_number(self.feature_mb, "feature_mb", 0.0)
        check_number(self.duration_s, "duration_s", 0.0)
        check_count(self.seed, "seed", 0)
        if self.packets_per_s == 0 and self.burst_rate == 0:
            raise ConfigError("traffic offers nothing: no tokens and no visual bursts")

    @property
    def packet_bytes(self) -> int:
        """Bytes of one token packet."""
        return self.token_bytes * self.tokens_per_packet

    @property
    def packets_per_s(self) -> float:
        """Token packets per second."""
        return self.token_rate_mtps * 1e6 / self.tokens_per_packet

    @property
    def burst_rate(self) -> float:
        """Visual bursts per second over all streams (a superposition of Poisson processes)."""
        return self.streams * self.bursts_per_s

    @property
    def token_gb_per_s(self) -> float:
        """Token bytes offered per second, in GB/s."""
        return self.token_rate_mtps * 1e6 * self.token_bytes / GB

    @property
    def visual_gb_per_s(self) -> float:
        """Visual-feature bytes offered per second, in GB/s."""
        return self.burst_rate * self.features_per_burst * self.feature_mb * MB / GB

    def describe(self) -> dict[str, Any]:
        """The parameters as a dict (for provenance)."""
        return asdict(self)


def utilisation(link: Link, traffic: Traffic) -> float:
    """Offered bytes per second ÷ the link's bandwidth (ρ)."""
    return (traffic.token_gb_per_s + traffic.visual_gb_per_s) / link.bandwidth_gb_per_s


def seed_occupancy_of(link: Link, traffic: Traffic, interval_ms: float = 1) -> float:
    """:func:`seed_occupancy` of ``traffic`` on ``link``: the tokens' rate, and as the feature
    per window the mean visual MB arriving per ``interval_ms``. The formula counts 8 bytes per
    token whatever ``traffic.token_bytes`` is."""
    feat_mb = traffic.visual_gb_per_s * interval_ms  # GB/s × ms = MB
    return seed_occupancy(link.bandwidth_gb_per_s, traffic.token_rate_mtps, feat_mb, interval_ms)


def consistent_occupancy_of(link: Link, traffic: Traffic, interval_ms: float = 1) -> float:
    """:func:`consistent_occupancy` of ``traffic`` on ``link`` (= 100 × :func:`utilisation`)."""
    feat_mb = traffic.visual_gb_per_s * interval_ms
    return consistent_occupancy(link.bandwidth_gb_per_s, traffic.token_rate_mtps, feat_mb,
                                interval_ms, traffic.token_bytes)


def at_utilisation(traffic: Traffic, link: Link, rho: float) -> Traffic:
    """``traffic`` with its burst rate per stream set so that :func:`utilisation` is ``rho``
    (the tokens unchanged)."""
    check_number(rho, "rho", 0.0)
    if traffic.streams == 0:
        raise ConfigError("at_utilisation scales the visual bursts; this traffic has no streams")
    per_burst = traffic.streams * traffic.features_per_burst * traffic.feature_mb * MB / GB
    rate = (rho * link.bandwidth_gb_per_s - traffic.token_gb_per_s) / per_burst
    if not rate > 0:
        raise ConfigError(f"utilisation {rho!r} is not above the tokens' own "
                          f"{traffic.token_gb_per_s / link.bandwidth_gb_per_s:.3g}")
    return replace(traffic, bursts_per_s=rate)


def _poisson_times(rng: np.random.Generator, rate: float, duration: float) -> np.ndarray:
    """Arrival times of a Poisson process of ``rate`` per second in [0, ``duration``)."""
    if rate == 0:
        return np.zeros(0)
    n = int(rng.poisson(rate * duration))
    return np.sort(rng.uniform(0.0, duration, n))


def arrivals(traffic: Traffic) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(token packet arrival times, feature arrival times, each feature's 1-based position in its
    burst), in seconds, sorted. Tokens and bursts draw from separate generators of ``seed``."""
    tok_rng, burst_rng = (np.random.default_rng(s)
                          for s in np.random.SeedSequence(traffic.seed).spawn(2))
    tokens = _poisson_times(tok_rng, traffic.packets_per_s, traffic.duration_s)
    bursts = _poisson_times(burst_rng, traffic.burst_rate, traffic.duration_s)
    k = traffic.features_per_burst
    return tokens, np.repeat(bursts, k), np.tile(np.arange(1, k + 1), bursts.size)


@array_loop
def _serve(tok_arr, tok_s, feat_arr, feat_s, priority, tok_done, feat_done):  # pragma: no cover
    """One link, non-preemptive: fills each transfer's completion time. When the link frees it
    takes a waiting token packet first if ``priority``, else the earliest arrival (a token on a
    tie); with nothing waiting, the next arrival."""
    n_t, n_f = tok_arr.size, feat_arr.size
    i, j, free = 0, 0, 0.0
    while i < n_t or j < n_f:
        if i < n_t and j < n_f:
            if priority and tok_arr[i] <= free:
                take_token = True
            elif priority and feat_arr[j] <= free:
                take_token = False
            else:
                take_token = tok_arr[i] <= feat_arr[j]
        else:
            take_token = i < n_t
        if take_token:
            free = max(free, tok_arr[i]) + tok_s
            tok_done[i] = free
            i += 1
        else:
            free = max(free, feat_arr[j]) + feat_s
            feat_done[j] = free
            j += 1


@dataclass(frozen=True)
class LinkResult:
    """One simulated run, delays in ms (arrival to end of transfer). ``feature_increase_*``:
    a feature's delay minus its delay with the link to its own burst alone. NaN for a class
    with no transfers."""

    discipline: str
    utilisation: float
    tokens: int
    features: int
    token_mean_ms: float
    token_p99_ms: float
    feature_mean_ms: float
    feature_p99_ms: float
    feature_increase_mean_ms: float
    feature_increase_p99_ms: float

    def row(self) -> dict[str, Any]:
        """The fields as a dict."""
        return asdict(self)


def _stats(values: np.ndarray) -> tuple[float, float]:
    if values.size == 0:
        return math.nan, math.nan
    return float(values.mean()), float(np.percentile(values, 99))


def simulate(link: Link, traffic: Traffic, discipline: str = "fcfs") -> LinkResult:
    """Simulate ``traffic`` on ``link`` under ``discipline`` (``"fcfs"`` or ``"priority"``)."""
    if discipline not in DISCIPLINES:
        raise ConfigError(f"discipline must be one of {DISCIPLINES}, got {discipline!r}")
    tokens, feats, position = arrivals(traffic)
    tok_s = link.transfer_ms(traffic.packet_bytes) / 1e3
    feat_s = link.transfer_ms(traffic.feature_mb * MB) / 1e3
    tok_done, feat_done = np.empty_like(tokens), np.empty_like(feats)
    _serve(tokens, tok_s, feats, feat_s, discipline == "priority", tok_done, feat_done)
    tok_delay, feat_delay = (tok_done - tokens) * 1e3, (feat_done - feats) * 1e3
    increase = feat_delay - position * feat_s * 1e3
    return LinkResult(discipline, utilisation(link, traffic), int(tokens.size), int(feats.size),
                      *_stats(tok_delay), *_stats(feat_delay), *_stats(increase))


def analytic(link: Link, traffic: Traffic, discipline: str = "fcfs") -> dict[str, float]:
    """Mean delays (ms) of the same model in closed form, for ρ < 1: ``token_mean_ms``,
    ``feature_increase_mean_ms`` and ``feature_mean_ms``.

    FCFS: a burst is served contiguously, so the link is an M/G/1 queue of token packets and
    burst "supercustomers" (``features_per_burst`` × a feature's transfer time); every arrival
    waits W = R / (1 − ρ) (Pollaczek–Khinchine), R = Σ λ E[S²] / 2; a token's delay is W plus
    its transfer, a feature's increase is W. Priority (non-preemptive, tokens first): a token
    waits R′ / (1 − ρ_tokens) (Cobham), R′ with each feature as its own transfer; the features'
    mean is given only for bursts of one feature (Cobham's second class), else NaN.
    """
    if discipline not in DISCIPLINES:
        raise ConfigError(f"discipline must be one of {DISCIPLINES}, got {discipline!r}")
    rho = utilisation(link, traffic)
    if not rho < 1:
        raise ConfigError(f"the analytic means need utilisation < 1, got {rho:.4g}")
    s_t = link.transfer_ms(traffic.packet_bytes)
    s_f = link.transfer_ms(traffic.feature_mb * MB)
    k = traffic.features_per_burst
    lam_t, lam_b = traffic.packets_per_s / 1e3, traffic.burst_rate / 1e3  # per ms
    rho_t = lam_t * s_t
    in_order = (k + 1) / 2 * s_f  # a feature's mean delay with its burst alone
    if discipline == "fcfs":
        wait = (lam_t * s_t ** 2 + lam_b * (k * s_f) ** 2) / 2 / (1 - rho)
        return {"token_mean_ms": wait + s_t, "feature_increase_mean_ms": wait,
                "feature_mean_ms": wait + in_order}
    residual = (lam_t * s_t ** 2 + lam_b * k * s_f ** 2) / 2
    out = {"token_mean_ms": residual / (1 - rho_t) + s_t,
           "feature_increase_mean_ms": math.nan, "feature_mean_ms": math.nan}
    if k == 1:
        wait = residual / ((1 - rho_t) * (1 - rho))
        out.update(feature_increase_mean_ms=wait, feature_mean_ms=wait + s_f)
    return out


#: Our reading of seed 000 §2.3's two typical configurations (the seed states no rates): the
#: token rate and streams per configuration, and the utilisation at which the seed reports
#: each (its "NVLink peak utilisation", read here as the link's mean utilisation), with the
#: seed's visual-feature latency increase. Features: 1.18 MB (576 patches × 1024 dims × 2
#: bytes, a ViT-L/14-336 image's patch features in fp16), 8 per burst; 1,024-token packets.
SEED_CONFIGS: dict[str, dict[str, Any]] = {
    "single stream, low-frequency tokens": {
        "traffic": {"token_rate_mtps": 10.0, "streams": 1},
        "seed_utilisation": 0.42, "seed_latency_increase_ms": 3.1},
    "two streams, high-frequency tokens": {
        "traffic": {"token_rate_mtps": 500.0, "streams": 2},
        "seed_utilisation": 0.97, "seed_latency_increase_ms": 47.8},
}


def sweep(link: Link, configs: Mapping[str, Traffic], utilisations: Sequence[float],
          disciplines: Sequence[str] = DISCIPLINES) -> list[dict[str, Any]]:
    """One row per configuration, utilisation (:func:`at_utilisation`) and discipline: the
    seed formula's occupancy (``seed_occupancy_pct``), the consistent one
    (``consistent_occupancy_pct``), the simulated :class:`LinkResult` fields and the analytic
    means (``analytic_*``). Every discipline at one point sees the same arrivals."""
    if not configs or not utilisations or not disciplines:
        raise ConfigError("sweep needs at least one configuration, utilisation and discipline")
    for d in disciplines:
        if d not in DISCIPLINES:
            raise ConfigError(f"discipline must be one of {DISCIPLINES}, got {d!r}")
    points = [(name, at_utilisation(t, link, float(rho)))
              for name, t in configs.items() for rho in utilisations]  # raises before any run
    rows = []
    for name, t in points:
        occupancy = {"config": name, "seed_occupancy_pct": seed_occupancy_of(link, t),
                     "consistent_occupancy_pct": consistent_occupancy_of(link, t),
                     "bursts_per_s": t.bursts_per_s}
        for d in disciplines:
            sim = simulate(link, t, d).row()
            ana = {f"analytic_{k}": v for k, v in analytic(link, t, d).items()} if sim[
                "utilisation"] < 1 else {}
            rows.append({**occupancy, **sim, **ana})
    return rows
